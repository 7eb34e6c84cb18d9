/* Large and small memcpy, memmove (overlapping and not) and memset, from several threads and
 * in a forked child, each result checked byte for byte without memcpy. Run under
 * LD_PRELOAD=libswitchyard_memcpy.so; exits 0 when every check held. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 2654435761u + seed) >> 7);
}

static int same(const unsigned char *a, const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

static int copies(unsigned seed) {
    static const size_t sizes[] = {1, 100, 4096, 65535, 65536, 1 << 20, (8 << 20) + 3, 33 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        unsigned char *src = malloc(n + 64), *dst = malloc(n + 64);
        fill(src, n + 64, seed + (unsigned)k);
        for (size_t skew = 0; skew < 3; skew++) {
            memcpy(dst + skew, src + 2 * skew + 1, n);
            if (!same(dst + skew, src + 2 * skew + 1, n)) {
                fprintf(stderr, "memcpy of %zu bytes (skew %zu) differs\n", n, skew);
                return 1;
            }
        }
        memmove(dst, src, n);
        if (!same(dst, src, n)) {
            fprintf(stderr, "memmove apart of %zu differs\n", n);
            return 1;
        }
        /* Overlapping, both ways, against a model made with a byte loop. */
        unsigned char *model = malloc(n + 64);
        for (size_t i = 0; i < n + 64; i++)
            model[i] = dst[i];
        size_t m = n > 64 ? n - 64 : n / 2;
        memmove(dst + 17, dst, m);
        for (size_t i = m; i-- > 0;)
            model[i + 17] = model[i];
        if (!same(dst, model, n + 17 < n + 64 ? n + 17 : n + 64)) {
            fprintf(stderr, "memmove forward of %zu differs\n", m);
            return 1;
        }
        memmove(dst, dst + 9, m);
        for (size_t i = 0; i < m; i++)
            model[i] = model[i + 9];
        if (!same(dst, model, n)) {
            fprintf(stderr, "memmove backward of %zu differs\n", m);
            return 1;
        }
        memset(dst, 0xA5, n);
        for (size_t i = 0; i < n; i++)
            if (dst[i] != 0xA5) {
                fprintf(stderr, "memset of %zu differs\n", n);
                return 1;
            }
        free(model);
        free(src);
        free(dst);
    }
    return 0;
}

static void *worker(void *arg) {
    long id = (long)arg;
    for (int r = 0; r < 3; r++)
        if (copies((unsigned)(id * 100 + r)))
            return (void *)1;
    return NULL;
}

int main(void) {
    if (copies(1))
        return 1;
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        if (r)
            return 1;
    }
    pid_t child = fork();
    if (child == 0)
        _exit(copies(7));
    int status;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the child's copies failed\n");
        return 1;
    }
    printf("copies ok\n");
    return 0;
}
