/* A file round trip through a store opened in this process: create a store, write a file
 * in pieces, read it back, list the directory, and reopen the store to find it again.
 *
 *   cc file_roundtrip.c $(pkg-config --cflags --libs switchyard) -o rt && ./rt /tmp/x.store
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <switchyard.h>

#define CHECK(call)                                                                     \
    do {                                                                                \
        long long r_ = (long long)(call);                                               \
        if (r_ < 0) {                                                                   \
            fprintf(stderr, "%s: %lld %s\n", #call, r_, sy_last_error());               \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s NEW_STORE_FILE\n", argv[0]);
        return 2;
    }
    sy_store *s;
    CHECK(sy_store_create(argv[1], 64 << 20, NULL, &s));
    CHECK(sy_mkdir(s, "/docs", 0755));
    int fd = sy_open(s, "/docs/a.txt", O_CREAT | O_EXCL | O_RDWR, 0644);
    CHECK(fd);
    size_t len = 300000;
    char *data = malloc(len);
    for (size_t i = 0; i < len; i++)
        data[i] = (char)('a' + i % 26);
    for (size_t off = 0; off < len; off += 65536) {
        size_t n = len - off < 65536 ? len - off : 65536;
        if (sy_write(s, fd, data + off, n) != (long long)n) {
            fprintf(stderr, "short write: %s\n", sy_last_error());
            return 1;
        }
    }
    CHECK(sy_close(s, fd));
    if (sy_open(s, "/docs/a.txt", O_CREAT | O_EXCL | O_RDWR, 0644) != -EEXIST) {
        fprintf(stderr, "O_EXCL did not refuse an existing file\n");
        return 1;
    }
    CHECK(sy_store_close(s));

    CHECK(sy_store_open(argv[1], NULL, &s));
    sy_attr st;
    CHECK(sy_stat(s, "/docs/a.txt", &st));
    if (st.size != len) {
        fprintf(stderr, "size %llu after reopening\n", (unsigned long long)st.size);
        return 1;
    }
    fd = sy_open(s, "/docs/a.txt", O_RDONLY, 0);
    CHECK(fd);
    char *back = calloc(1, len);
    if (sy_pread(s, fd, back, len, 0) != (long long)len || memcmp(back, data, len) != 0) {
        fprintf(stderr, "the bytes read back differ\n");
        return 1;
    }
    CHECK(sy_close(s, fd));
    sy_dir *d;
    CHECK(sy_opendir(s, "/docs", &d));
    sy_dirent e;
    int n = 0;
    while (sy_readdir(d, &e) == 1) {
        printf("/docs/%s\n", e.name);
        n++;
    }
    sy_closedir(d);
    if (sy_stat(s, "/nothing", &st) != -ENOENT || n != 1) {
        fprintf(stderr, "listing or ENOENT wrong\n");
        return 1;
    }
    CHECK(sy_store_close(s));
    free(data);
    free(back);
    printf("round trip of %zu bytes ok\n", len);
    return 0;
}
