/* An asynchronous batch: submit 16 copies of 1 MiB, compute while they move, then reap their
 * completions from the mover's queue and check every byte.
 *
 *   cc async_batch.c $(pkg-config --cflags --libs switchyard) -o batch && ./batch
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <switchyard.h>

#define N 16
#define LEN (1 << 20)

int main(void) {
    sy_mover *m;
    if (sy_mover_new(NULL, &m) < 0) {
        fprintf(stderr, "sy_mover_new: %s\n", sy_last_error());
        return 1;
    }
    unsigned char *src[N], *dst[N];
    for (int i = 0; i < N; i++) {
        src[i] = malloc(LEN);
        dst[i] = calloc(1, LEN);
        memset(src[i], i + 1, LEN);
        if (sy_copy_submit(m, dst[i], src[i], LEN, SY_COPY_DRAM, (uint64_t)i) < 0) {
            fprintf(stderr, "submit: %s\n", sy_last_error());
            return 1;
        }
    }
    /* Work while the copies move. */
    volatile unsigned long long sum = 0;
    for (unsigned long long k = 0; k < 1000000; k++)
        sum += k;
    int seen[N] = {0};
    int reaped = 0;
    sy_completion c[N];
    while (reaped < N) {
        long long n = sy_mover_wait(m, c, N, 1);
        if (n < 0) {
            fprintf(stderr, "wait: %s\n", sy_last_error());
            return 1;
        }
        for (long long k = 0; k < n; k++) {
            int i = (int)c[k].user_data;
            if (i < 0 || i >= N || seen[i] || c[k].result != LEN) {
                fprintf(stderr, "bad completion %d (%lld)\n", i, (long long)c[k].result);
                return 1;
            }
            seen[i] = 1;
            if (memcmp(dst[i], src[i], LEN) != 0) {
                fprintf(stderr, "copy %d differs\n", i);
                return 1;
            }
        }
        reaped += (int)n;
    }
    if (sy_mover_pending(m) != 0) {
        fprintf(stderr, "copies left pending\n");
        return 1;
    }
    for (int i = 0; i < N; i++) {
        free(src[i]);
        free(dst[i]);
    }
    sy_mover_close(m);
    printf("%d asynchronous copies of %d bytes ok\n", N, LEN);
    return 0;
}
