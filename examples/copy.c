/* A copy through the mover: one synchronous copy of 8 MiB, checked byte for byte, and the
 * counters that say which path it took; then a fill and a compare, the engine's other two
 * operations.
 *
 *   cc copy.c $(pkg-config --cflags --libs switchyard) -o copy && ./copy
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <switchyard.h>

int main(void) {
    if (sy_abi_version() != SY_ABI_VERSION) {
        fprintf(stderr, "libswitchyard ABI %u, header %u\n", sy_abi_version(), SY_ABI_VERSION);
        return 1;
    }
    sy_mover *m;
    int r = sy_mover_new(NULL, &m);
    if (r < 0) {
        fprintf(stderr, "sy_mover_new: %s\n", sy_last_error());
        return 1;
    }
    size_t len = 8 << 20;
    unsigned char *src = malloc(len), *dst = malloc(len);
    for (size_t i = 0; i < len; i++)
        src[i] = (unsigned char)(i * 7 + 3);
    memset(dst, 0, len);
    r = sy_copy(m, dst, src, len, SY_COPY_DRAM);
    if (r < 0 || memcmp(dst, src, len) != 0) {
        fprintf(stderr, "copy failed: %d %s\n", r, sy_last_error());
        return 1;
    }
    uint64_t cpu = 0, engine = 0;
    if (sy_mover_counter(m, "cpu_bytes", &cpu) < 0 || sy_mover_counter(m, "engine_bytes", &engine) < 0) {
        fprintf(stderr, "counters: %s\n", sy_last_error());
        return 1;
    }
    printf("copied %zu bytes: %llu on the CPU, %llu on the engine\n", len,
           (unsigned long long)cpu, (unsigned long long)engine);
    /* memset and memcmp's work, through the mover. */
    size_t at = 0;
    if (sy_fill(m, dst, 0xab, len, SY_COPY_DRAM) < 0 || dst[0] != 0xab || dst[len - 1] != 0xab) {
        fprintf(stderr, "fill failed: %s\n", sy_last_error());
        return 1;
    }
    memcpy(src, dst, len);
    src[len / 3] ^= 1;
    if (sy_compare(m, dst, src, len, SY_COPY_DRAM, &at) != 1 || at != len / 3) {
        fprintf(stderr, "compare failed: %s\n", sy_last_error());
        return 1;
    }
    printf("filled %zu bytes; the compare found the difference at %zu\n", len, at);
    free(src);
    free(dst);
    sy_mover_close(m);
    return 0;
}
