/* The file calls real programs make, on paths under the preload's prefix: each result is
 * checked against what Linux gives on a local file system. Modes:
 *   calls DIR         the whole suite in DIR (a served directory); prints "calls ok"
 *   lock FILE         takes a write lock on bytes 0..99, prints "locked", waits for a line
 *                     on stdin, closes another descriptor of the file (which drops the
 *                     lock), prints "released", and exits at the next line
 *   canlock FILE      expects the lock granted
 *   trylock FILE      expects the lock refused (EAGAIN); prints the holder's pid
 *   deadlock FILE     this process and a child each lock a byte, then wait (F_SETLKW) for
 *                     the other's: one is refused with EDEADLK and closes the file, the
 *                     other gets its lock; prints "deadlock ok"
 *   fork DIR          a child forked with nothing open uses the store; one forked with a
 *                     file open is refused (ENOTCONN)
 *   exec DIR          served descriptors without FD_CLOEXEC (stdout among them) reach the
 *                     program exec'd next, those with it do not
 *   spawn DIR         a program posix_spawn'd writes to the served stdout it inherits,
 *                     between its parent's writes (one offset) */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(c)                                                                       \
    do {                                                                               \
        if (!(c)) {                                                                    \
            fprintf(stderr, "%s:%d: %s failed (errno %d: %s)\n", __FILE__, __LINE__, #c, \
                    errno, strerror(errno));                                           \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static char path_buf[8][PATH_MAX];
static int next_buf;

static const char *at(const char *dir, const char *name) {
    char *p = path_buf[next_buf++ % 8];
    snprintf(p, PATH_MAX, "%s/%s", dir, name);
    return p;
}

static void calls(const char *dir) {
    char buf[256];
    struct stat st;

    /* Create, write, read back through a second descriptor. */
    int fd = open(at(dir, "a"), O_CREAT | O_EXCL | O_RDWR, 0640);
    CHECK(fd >= 0);
    CHECK(open(at(dir, "a"), O_CREAT | O_EXCL | O_RDWR, 0640) < 0 && errno == EEXIST);
    CHECK(write(fd, "hello ", 6) == 6);
    struct iovec iov[2] = {{"wor", 3}, {"ld\n", 3}};
    CHECK(writev(fd, iov, 2) == 6);
    CHECK(lseek(fd, 0, SEEK_CUR) == 12);
    CHECK(fstat(fd, &st) == 0 && st.st_size == 12 && S_ISREG(st.st_mode));
    CHECK((st.st_mode & 0777) == (0640 & ~umask(022)) || (st.st_mode & 0777) == 0640);
    CHECK(pwrite(fd, "W", 1, 6) == 1);
    CHECK(pread(fd, buf, sizeof buf, 0) == 12 && memcmp(buf, "hello World\n", 12) == 0);
    CHECK(lseek(fd, 0, SEEK_END) == 12);
    CHECK(lseek(fd, 2, SEEK_SET) == 2);
    char a[3], b[4];
    struct iovec rv[2] = {{a, 3}, {b, 4}};
    CHECK(readv(fd, rv, 2) == 7 && memcmp(a, "llo", 3) == 0 && memcmp(b, " Wor", 4) == 0);
    CHECK(lseek(fd, 0, SEEK_DATA) == 0 && lseek(fd, 0, SEEK_HOLE) == 12);

    /* Duplicates share the offset and status flags; FD_CLOEXEC is per descriptor. */
    int d = dup(fd);
    CHECK(d >= 0 && d != fd);
    CHECK(lseek(d, 1, SEEK_SET) == 1 && lseek(fd, 0, SEEK_CUR) == 1);
    CHECK(fcntl(d, F_GETFD) == 0);
    CHECK(fcntl(d, F_SETFD, FD_CLOEXEC) == 0 && fcntl(d, F_GETFD) == FD_CLOEXEC);
    CHECK(fcntl(fd, F_GETFD) == 0);
    CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR);
    CHECK(fcntl(fd, F_SETFL, O_APPEND) == 0 && (fcntl(d, F_GETFL) & O_APPEND));
    CHECK(write(d, "!", 1) == 1 && lseek(fd, 0, SEEK_CUR) == 13);
    CHECK(fcntl(fd, F_SETFL, 0) == 0);
    int high = fcntl(fd, F_DUPFD_CLOEXEC, 100);
    CHECK(high >= 100 && fcntl(high, F_GETFD) == FD_CLOEXEC);
    int spare = open("/dev/null", O_RDONLY);
    CHECK(spare >= 0);
    CHECK(dup2(fd, spare) == spare); /* replaces the program's own descriptor */
    CHECK(pread(spare, buf, 5, 0) == 5 && memcmp(buf, "hello", 5) == 0);
    CHECK(dup3(fd, spare, O_CLOEXEC) == spare && fcntl(spare, F_GETFD) == FD_CLOEXEC);
    CHECK(close(spare) == 0 && close(high) == 0 && close(d) == 0);
    CHECK(fcntl(d, F_GETFD) < 0 && errno == EBADF);
    CHECK(read(d, buf, 1) < 0 && errno == EBADF);

    /* Size changes. */
    CHECK(ftruncate(fd, 5) == 0 && fstat(fd, &st) == 0 && st.st_size == 5);
    CHECK(posix_fallocate(fd, 0, 8192) == 0 && fstat(fd, &st) == 0 && st.st_size == 8192);
    CHECK(truncate(at(dir, "a"), 5) == 0 && stat(at(dir, "a"), &st) == 0 && st.st_size == 5);
    /* A hole: SEEK_DATA and SEEK_HOLE see the server's blocks. */
    CHECK(pwrite(fd, "z", 1, 65536) == 1);
    CHECK(lseek(fd, 4096, SEEK_DATA) == 65536 && lseek(fd, 0, SEEK_HOLE) == 4096);
    CHECK(lseek(fd, 65537, SEEK_DATA) < 0 && errno == ENXIO);
    CHECK(ftruncate(fd, 5) == 0);
    CHECK(fsync(fd) == 0 && fdatasync(fd) == 0);
    CHECK(sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) == 0);
    CHECK(sync_file_range(fd, 0, 0, 0) == 0);
    CHECK(sync_file_range(fd, 0, 0, 0x80) < 0 && errno == EINVAL);
    CHECK(sync_file_range(fd, -1, 0, SYNC_FILE_RANGE_WRITE) < 0 && errno == EINVAL);
    CHECK(syncfs(fd) == 0);
    sync();

    /* A private mapping holds the file's bytes; a shared one is refused. */
    char *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(m != MAP_FAILED && memcmp(m, "hello", 5) == 0 && m[5] == 0);
    CHECK(munmap(m, 4096) == 0);
    CHECK(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED &&
          errno == ENOTSUP);
    CHECK(flock(fd, LOCK_EX) < 0 && errno == ENOTSUP);
    CHECK(ioctl(fd, 0x5401 /* TCGETS */, buf) < 0 && errno == ENOTTY);
    CHECK(close(fd) == 0);
    CHECK(close(fd) < 0 && errno == EBADF);

    /* Names. */
    CHECK(mkdir(at(dir, "d"), 0755) == 0);
    CHECK(mkdir(at(dir, "d"), 0755) < 0 && errno == EEXIST);
    CHECK(rename(at(dir, "a"), at(dir, "d/b")) == 0);
    CHECK(stat(at(dir, "a"), &st) < 0 && errno == ENOENT);
    CHECK(access(at(dir, "d/b"), R_OK | W_OK) == 0);
    CHECK(access(at(dir, "d/none"), F_OK) < 0 && errno == ENOENT);
    CHECK(link(at(dir, "d/b"), at(dir, "d/c")) == 0);
    CHECK(stat(at(dir, "d/c"), &st) == 0 && st.st_nlink == 2);
    struct stat st2;
    CHECK(stat(at(dir, "d/b"), &st2) == 0 && st2.st_ino == st.st_ino && st2.st_dev == st.st_dev);
    CHECK(symlink("b", at(dir, "d/l")) == 0);
    CHECK(lstat(at(dir, "d/l"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(stat(at(dir, "d/l"), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 5);
    ssize_t n = readlink(at(dir, "d/l"), buf, sizeof buf);
    CHECK(n == 1 && buf[0] == 'b');
    CHECK(open(at(dir, "d/l"), O_RDONLY | O_NOFOLLOW) < 0 && errno == ELOOP);
    CHECK(open(at(dir, "d/b/x"), O_RDONLY) < 0 && errno == ENOTDIR);
    CHECK(open(at(dir, "d"), O_RDWR) < 0 && errno == EISDIR);
    CHECK(open(at(dir, "d/b"), O_RDONLY | O_DIRECTORY) < 0 && errno == ENOTDIR);
    CHECK(chmod(at(dir, "d/b"), 0600) == 0 && stat(at(dir, "d/b"), &st) == 0 &&
          (st.st_mode & 0777) == 0600);
    struct timespec ts[2] = {{1000000000, 5}, {1200000000, 7}};
    CHECK(utimensat(AT_FDCWD, at(dir, "d/b"), ts, 0) == 0);
    CHECK(stat(at(dir, "d/b"), &st) == 0 && st.st_mtim.tv_sec == 1200000000 &&
          st.st_mtim.tv_nsec == 7 && st.st_atim.tv_sec == 1000000000);
    struct statx sx;
    CHECK(statx(AT_FDCWD, at(dir, "d/b"), 0, STATX_BASIC_STATS, &sx) == 0 && sx.stx_size == 5);

    /* Directory streams and *at calls relative to a served directory. */
    DIR *dp = opendir(at(dir, "d"));
    CHECK(dp != NULL);
    int seen = 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL)
        seen |= !strcmp(e->d_name, ".") * 1 | !strcmp(e->d_name, "..") * 2 |
                (!strcmp(e->d_name, "b") && e->d_type == DT_REG) * 4 |
                !strcmp(e->d_name, "c") * 8 | (!strcmp(e->d_name, "l") && e->d_type == DT_LNK) * 16;
    CHECK(seen == 31);
    int dfd = dirfd(dp);
    CHECK(fstatat(dfd, "b", &st, 0) == 0 && st.st_size == 5);
    int f2 = openat(dfd, "e", O_CREAT | O_WRONLY, 0644);
    CHECK(f2 >= 0 && write(f2, "e", 1) == 1 && close(f2) == 0);
    CHECK(unlinkat(dfd, "e", 0) == 0 && fstatat(dfd, "e", &st, 0) < 0 && errno == ENOENT);
    rewinddir(dp);
    CHECK(readdir(dp) != NULL);
    CHECK(closedir(dp) == 0);

    /* Streams. */
    FILE *f = fopen(at(dir, "d/s"), "w+");
    CHECK(f != NULL);
    CHECK(fprintf(f, "line one\nline two\n") == 18);
    CHECK(fstat(fileno(f), &st) == 0);
    rewind(f);
    CHECK(fgets(buf, sizeof buf, f) && !strcmp(buf, "line one\n"));
    CHECK(fclose(f) == 0);
    f = fopen(at(dir, "d/s"), "a");
    CHECK(f != NULL && fputs("three\n", f) >= 0 && fclose(f) == 0);
    CHECK(stat(at(dir, "d/s"), &st) == 0 && st.st_size == 24);

    /* Copies with a served side. */
    int in = open(at(dir, "d/s"), O_RDONLY);
    int out = open(at(dir, "d/t"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(in >= 0 && out >= 0);
    CHECK(copy_file_range(in, NULL, out, NULL, 1000, 0) == 24);
    off_t off = 5;
    CHECK(sendfile(out, in, &off, 3) == 3 && off == 8);
    CHECK(close(in) == 0 && close(out) == 0);
    CHECK(stat(at(dir, "d/t"), &st) == 0 && st.st_size == 27);

    /* A working directory in the store. */
    char cwd[PATH_MAX];
    CHECK(chdir(at(dir, "d")) == 0);
    CHECK(getcwd(cwd, sizeof cwd) && !strcmp(cwd, at(dir, "d")));
    CHECK(stat("b", &st) == 0 && st.st_size == 5);
    CHECK(stat("../d/./b", &st) == 0);
    char *rp = realpath("l", NULL);
    CHECK(rp != NULL && !strcmp(rp, at(dir, "d/l")));
    free(rp);
    CHECK(chdir("/") == 0 && getcwd(cwd, sizeof cwd) && !strcmp(cwd, "/"));

    /* Unique names. */
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/d/tmpXXXXXX.x", dir);
    int tfd = mkstemps(tmpl, 2);
    CHECK(tfd >= 0 && strstr(tmpl, "XXXXXX") == NULL && write(tfd, "t", 1) == 1);
    CHECK(close(tfd) == 0 && stat(tmpl, &st) == 0 && st.st_size == 1 && unlink(tmpl) == 0);
    snprintf(tmpl, sizeof tmpl, "%s/d/dirXXXXXX", dir);
    CHECK(mkdtemp(tmpl) == tmpl && stat(tmpl, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(rmdir(tmpl) == 0);

    /* Removing. */
    CHECK(rmdir(at(dir, "d")) < 0 && errno == ENOTEMPTY);
    const char *names[] = {"d/b", "d/c", "d/l", "d/s", "d/t"};
    for (int i = 0; i < 5; i++) CHECK(unlink(at(dir, names[i])) == 0);
    CHECK(rmdir(at(dir, "d")) == 0);
    puts("calls ok");
}

static int lock(const char *file, int wait_for_line) {
    int fd = open(file, O_CREAT | O_RDWR, 0644);
    CHECK(fd >= 0);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 100};
    if (wait_for_line == 2) {
        CHECK(fcntl(fd, F_SETLK, &fl) == 0);
        puts("free");
        return 0;
    }
    if (wait_for_line) {
        CHECK(fcntl(fd, F_SETLK, &fl) == 0);
        puts("locked");
        fflush(stdout);
        char line[16];
        (void)!fgets(line, sizeof line, stdin);
        /* Closing any descriptor of the file drops the process's locks on it (POSIX). */
        int other = open(file, O_RDONLY);
        CHECK(other >= 0 && close(other) == 0);
        puts("released");
        fflush(stdout);
        (void)!fgets(line, sizeof line, stdin);
        return 0;
    }
    CHECK(fcntl(fd, F_SETLK, &fl) < 0 && (errno == EAGAIN || errno == EACCES));
    /* Bytes past the held range are free. */
    struct flock past = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 100, .l_len = 10};
    CHECK(fcntl(fd, F_SETLK, &past) == 0);
    CHECK(fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type == F_WRLCK);
    printf("held by %d\n", (int)fl.l_pid);
    return 0;
}

/* One byte of `fd` locked for writing, waiting (F_SETLKW) or not: fcntl's result, or -errno. */
static int lock_byte(int fd, off_t at, int cmd) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
    return fcntl(fd, cmd, &fl) == 0 ? 0 : -errno;
}

static int deadlock(const char *file) {
    int locked[2], go[2];
    CHECK(pipe(locked) == 0 && pipe(go) == 0);
    /* Forked before any served file is open: the child then reaches the store itself. */
    pid_t pid = fork();
    CHECK(pid >= 0);
    /* Both waiting for good ends here (an alarm is not inherited: one each). */
    alarm(20);
    int mine = pid == 0 ? 1 : 0;
    int fd = open(file, O_CREAT | O_RDWR, 0644);
    CHECK(fd >= 0 && lock_byte(fd, mine, F_SETLK) == 0);
    char c = 'x';
    if (pid == 0) {
        CHECK(write(locked[1], &c, 1) == 1 && read(go[0], &c, 1) == 1);
    } else {
        CHECK(read(locked[0], &c, 1) == 1 && write(go[1], &c, 1) == 1);
    }
    int r = lock_byte(fd, 1 - mine, F_SETLKW);
    /* The one refused gives its byte up, so that the other's wait ends. */
    CHECK(close(fd) == 0);
    if (pid == 0) _exit(r == 0 ? 0 : r == -EDEADLK ? 35 : 1);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    int child = WEXITSTATUS(status);
    CHECK((r == 0 && child == 35) || (r == -EDEADLK && child == 0));
    puts("deadlock ok");
    return 0;
}

static int forks(const char *dir) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int fd = open(at(dir, "child"), O_CREAT | O_WRONLY, 0644);
        _exit(fd >= 0 && write(fd, "from the child", 14) == 14 && close(fd) == 0 ? 0 : 1);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char buf[32] = {0};
    int fd = open(at(dir, "child"), O_RDONLY);
    CHECK(fd >= 0 && read(fd, buf, sizeof buf) == 14 && !strcmp(buf, "from the child"));
    /* With a served file open, the child cannot reach the store, and says so. */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(open(at(dir, "child"), O_RDONLY) < 0 && errno == ENOTCONN ? 0 : 1);
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(close(fd) == 0 && unlink(at(dir, "child")) == 0);
    puts("fork ok");
    return 0;
}

/* A served stdout and a descriptor without FD_CLOEXEC reach the new program (as a shell's
 * `cmd > file` does); one with FD_CLOEXEC does not. */
static int execs(const char *dir, const char *self) {
    int fd = open(at(dir, "x"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0 && fcntl(fd, F_GETFD) == 0);
    CHECK(write(fd, "before\n", 7) == 7);
    CHECK(dup2(fd, 1) == 1);
    int gone = open(at(dir, "y"), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    CHECK(gone >= 0);
    char n[16], g[16];
    snprintf(n, sizeof n, "%d", fd);
    snprintf(g, sizeof g, "%d", gone);
    char *argv[] = {(char *)self, "inherited", n, g, (char *)dir, NULL};
    extern char **environ;
    execve(self, argv, environ);
    return 1;
}

/* A program started with posix_spawnp writes to the served stdout it inherits, after its
 * parent and before it: one offset between them. */
static int spawns(const char *dir) {
    int fd = open(at(dir, "spawned"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0 && dup2(fd, 1) == 1 && close(fd) == 0);
    printf("parent\n");
    CHECK(fflush(stdout) == 0);
    extern char **environ;
    char *argv[] = {"echo", "child", NULL};
    pid_t pid;
    CHECK(posix_spawnp(&pid, "echo", NULL, NULL, argv, environ) == 0);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("parent again\n");
    CHECK(fflush(stdout) == 0);
    char buf[64] = {0};
    int in = open(at(dir, "spawned"), O_RDONLY);
    CHECK(in >= 0 && read(in, buf, sizeof buf) == 26);
    CHECK(!strcmp(buf, "parent\nchild\nparent again\n"));
    fputs("spawn ok\n", stderr);
    return 0;
}

/* The new program's side of `execs`. */
static int inherited(int fd, int gone, const char *dir) {
    CHECK(fcntl(gone, F_GETFD) < 0 && errno == EBADF);
    CHECK(fcntl(fd, F_GETFD) == 0);
    CHECK(write(fd, "raw\n", 4) == 4);
    printf("stdio\n"); /* glibc's stdout over the served descriptor 1 */
    CHECK(fflush(stdout) == 0);
    char buf[64] = {0};
    int in = open(at(dir, "x"), O_RDONLY);
    CHECK(in >= 0 && read(in, buf, sizeof buf) == 17);
    CHECK(!strcmp(buf, "before\nraw\nstdio\n"));
    fputs("exec ok\n", stderr);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "calls")) calls(argv[2]);
    else if (argc == 3 && !strcmp(argv[1], "lock")) return lock(argv[2], 1);
    else if (argc == 3 && !strcmp(argv[1], "trylock")) return lock(argv[2], 0);
    else if (argc == 3 && !strcmp(argv[1], "canlock")) return lock(argv[2], 2);
    else if (argc == 3 && !strcmp(argv[1], "deadlock")) return deadlock(argv[2]);
    else if (argc == 3 && !strcmp(argv[1], "fork")) return forks(argv[2]);
    else if (argc == 3 && !strcmp(argv[1], "exec")) return execs(argv[2], argv[0]);
    else if (argc == 3 && !strcmp(argv[1], "spawn")) return spawns(argv[2]);
    else if (argc == 5 && !strcmp(argv[1], "inherited"))
        return inherited(atoi(argv[2]), atoi(argv[3]), argv[4]);
    else {
        fprintf(stderr, "usage: calls calls|lock|trylock|fork|exec DIR\n");
        return 2;
    }
    return 0;
}
