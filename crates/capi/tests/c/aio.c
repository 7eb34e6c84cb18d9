/* Asynchronous store I/O through the completion queue: 32 writes of 64 KiB submitted at once
 * (orderless), computation meanwhile, all reaped; then 32 reads into separate buffers, reaped
 * and checked; a request on a descriptor not open completes with -EBADF; reads left unreaped
 * when the store closes are finished by the close; the store reopened holds every byte.
 *
 *   aio NEW_STORE_FILE
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <switchyard.h>

#define N 32
#define LEN (64 << 10)

static void fail(const char *what, long long r) {
    fprintf(stderr, "%s: %lld %s\n", what, r, sy_last_error());
    exit(1);
}

static void reap_all(sy_store *s, int expect, long long want) {
    sy_completion c[N];
    int seen[N] = {0}, got = 0;
    while (got < expect) {
        long long n = sy_store_wait(s, c, N, 1);
        if (n <= 0)
            fail("sy_store_wait", n);
        for (long long k = 0; k < n; k++) {
            int i = (int)c[k].user_data;
            if (i < 0 || i >= N || seen[i] || c[k].result != want)
                fail("a completion", c[k].result);
            seen[i] = 1;
        }
        got += (int)n;
    }
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    sy_store *s;
    long long r;
    if ((r = sy_store_create(argv[1], 64 << 20, NULL, &s)) < 0)
        fail("create", r);
    int fd = sy_open(s, "/f", O_CREAT | O_RDWR, 0644);
    if (fd < 0)
        fail("open", fd);
    unsigned char *out[N], *in[N];
    for (int i = 0; i < N; i++) {
        out[i] = malloc(LEN);
        in[i] = calloc(1, LEN);
        for (int j = 0; j < LEN; j++)
            out[i][j] = (unsigned char)(i * 31 + j * 7);
        if ((r = sy_submit_pwrite(s, fd, out[i], LEN, (long long)i * LEN, (uint64_t)i)) < 0)
            fail("submit pwrite", r);
    }
    volatile unsigned long long sum = 0;
    for (unsigned long long k = 0; k < 1000000; k++)
        sum += k;
    reap_all(s, N, LEN);
    for (int i = 0; i < N; i++)
        if ((r = sy_submit_pread(s, fd, in[i], LEN, (long long)i * LEN, (uint64_t)i)) < 0)
            fail("submit pread", r);
    reap_all(s, N, LEN);
    for (int i = 0; i < N; i++)
        if (memcmp(in[i], out[i], LEN) != 0)
            fail("read back", i);
    if (sy_submit_pread(s, 999, in[0], LEN, 0, 0) < 0)
        fail("submit on a bad descriptor", -1);
    reap_all(s, 1, -EBADF);
    if (sy_store_pending(s) != 0)
        fail("left pending", sy_store_pending(s));
    for (int i = 0; i < N; i++)
        if ((r = sy_submit_pread(s, fd, in[i], LEN, (long long)i * LEN, (uint64_t)i)) < 0)
            fail("submit before close", r);
    if ((r = sy_store_close(s)) < 0)
        fail("close with requests queued", r);
    if (sy_store_poll(s, NULL, 0) != 0 || sy_store_pending(s) != 0)
        fail("queue after close", -1);
    if ((r = sy_store_open(argv[1], NULL, &s)) < 0)
        fail("reopen", r);
    fd = sy_open(s, "/f", O_RDONLY, 0);
    for (int i = 0; i < N; i++) {
        memset(in[i], 0, LEN);
        if (sy_pread(s, fd, in[i], LEN, (long long)i * LEN) != LEN || memcmp(in[i], out[i], LEN) != 0)
            fail("after reopening", i);
        free(in[i]);
        free(out[i]);
    }
    if ((r = sy_store_close(s)) < 0)
        fail("close", r);
    printf("%d asynchronous writes and reads ok\n", N);
    return 0;
}
