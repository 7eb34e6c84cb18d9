/* Hammers one store and one mover from 8 threads at once: each thread writes its own file in
 * random pieces (checked against a model after each piece), lists, stats, renames, copies
 * through the shared mover synchronously and through a mover of its own asynchronously, and
 * all share one file they append to, whose records must come out whole. Exits 0 when every
 * check held.
 *
 *   hammer NEW_STORE_FILE
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <switchyard.h>

#define THREADS 8
#define ROUNDS 200
#define FILE_MAX (256 << 10)
#define RECORD 512

static sy_store *store;
static sy_mover *mover;
static int shared_fd;

static void fail(const char *what, long long r) {
    fprintf(stderr, "%s: %lld %s\n", what, r, sy_last_error());
    exit(1);
}

static unsigned next(unsigned *x) {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

static void *worker(void *arg) {
    int id = (int)(long)arg;
    unsigned seed = 0x9e3779b9u * (unsigned)(id + 1);
    char path[64], moved[64];
    snprintf(path, sizeof path, "/t%d", id);
    snprintf(moved, sizeof moved, "/t%d.moved", id);
    unsigned char *model = calloc(1, FILE_MAX), *buf = malloc(FILE_MAX), *copy = malloc(FILE_MAX);
    size_t size = 0;
    sy_mover *mine;
    long long made = sy_mover_new(NULL, &mine);
    if (made < 0)
        fail("a thread's mover", made);
    int fd = sy_open(store, path, O_CREAT | O_RDWR | O_TRUNC, 0600);
    if (fd < 0)
        fail("open", fd);
    for (int round = 0; round < ROUNDS; round++) {
        size_t off = next(&seed) % (FILE_MAX / 2), len = 1 + next(&seed) % (FILE_MAX / 2);
        for (size_t i = 0; i < len; i++)
            buf[i] = (unsigned char)next(&seed);
        long long w = sy_pwrite(store, fd, buf, len, (long long)off);
        if (w != (long long)len)
            fail("pwrite", w);
        memcpy(model + off, buf, len);
        if (off + len > size)
            size = off + len;
        long long r = sy_pread(store, fd, buf, FILE_MAX, 0);
        if (r != (long long)size || memcmp(buf, model, size) != 0)
            fail("pread after pwrite", r);
        /* The mover, synchronously and asynchronously, on the bytes just read. */
        int c = sy_copy(mover, copy, buf, size, SY_COPY_DRAM);
        if (c < 0 || memcmp(copy, model, size) != 0)
            fail("sy_copy", c);
        memset(copy, 0, size);
        if ((c = sy_copy_submit(mine, copy, buf, size, SY_COPY_FROM_SLOW, (uint64_t)id)) < 0)
            fail("sy_copy_submit", c);
        /* Records appended whole by every thread to the shared file. */
        unsigned char rec[RECORD];
        memset(rec, 'a' + id, RECORD);
        if ((w = sy_write(store, shared_fd, rec, RECORD)) != RECORD)
            fail("append", w);
        sy_attr st;
        if ((c = sy_fstat(store, fd, &st)) < 0 || st.size != size)
            fail("fstat", c);
        if (round % 50 == 49) {
            if ((c = sy_rename(store, path, moved)) < 0 || (c = sy_rename(store, moved, path)) < 0)
                fail("rename", c);
            sy_dir *d;
            sy_dirent e;
            if ((c = sy_opendir(store, "/", &d)) < 0)
                fail("opendir", c);
            while ((c = sy_readdir(d, &e)) == 1)
                ;
            if (c < 0)
                fail("readdir", c);
            sy_closedir(d);
        }
        /* The asynchronous copy, done while the thread worked above. */
        sy_completion done;
        long long n = sy_mover_wait(mine, &done, 1, 1);
        if (n != 1 || done.user_data != (uint64_t)id || done.result != (long long)size ||
            memcmp(copy, model, size) != 0)
            fail("the asynchronous copy", n);
    }
    if (sy_mover_pending(mine) != 0)
        fail("copies left pending", sy_mover_pending(mine));
    sy_mover_close(mine);
    if (sy_close(store, fd) < 0)
        fail("close", -1);
    free(model);
    free(buf);
    free(copy);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    long long r;
    if ((r = sy_store_create(argv[1], 128 << 20, NULL, &store)) < 0)
        fail("create", r);
    if ((r = sy_mover_new(NULL, &mover)) < 0)
        fail("mover", r);
    shared_fd = sy_open(store, "/shared", O_CREAT | O_RDWR | O_APPEND, 0600);
    if (shared_fd < 0)
        fail("open shared", shared_fd);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    /* Every record whole: RECORD bytes of one letter each. */
    size_t total = (size_t)THREADS * ROUNDS * RECORD;
    unsigned char *all = malloc(total + 1);
    if ((r = sy_pread(store, shared_fd, all, total + 1, 0)) != (long long)total)
        fail("shared size", r);
    int counts[THREADS] = {0};
    for (size_t k = 0; k < total; k += RECORD) {
        int who = all[k] - 'a';
        if (who < 0 || who >= THREADS)
            fail("a record from nobody", (long long)k);
        for (size_t j = 1; j < RECORD; j++)
            if (all[k + j] != all[k])
                fail("a torn record", (long long)k);
        counts[who]++;
    }
    for (int i = 0; i < THREADS; i++)
        if (counts[i] != ROUNDS)
            fail("records of a thread", counts[i]);
    sy_close(store, shared_fd);
    if ((r = sy_store_close(store)) < 0)
        fail("close store", r);
    sy_mover_close(mover);
    free(all);
    printf("%d threads x %d rounds ok\n", THREADS, ROUNDS);
    return 0;
}
