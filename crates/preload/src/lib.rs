//! `libswitchyard_preload.so`: an unmodified program's file calls on paths under a prefix go
//! to a store served by `switchyard serve`, in-process and without the kernel (SplitFS's and
//! EasyIO's route to unmodified programs); everything else goes to libc untouched.
//!
//! ```sh
//! switchyard serve &                      # the store's single owner
//! LD_PRELOAD=libswitchyard_preload.so SWITCHYARD_PREFIX=/sy cp big.iso /sy/
//! ```
//!
//! Environment, read once at start:
//!
//! - `SWITCHYARD_PREFIX` (required): the directory the store appears at, such as `/sy`. It
//!   need not exist; a program sees the store's root there. Without it the library passes
//!   every call to libc.
//! - `SWITCHYARD_SERVER` (`ADDR:PORT`, default `127.0.0.1:7070`, `serve`'s default).
//! - `SWITCHYARD_KEY`: the server's key file (default `./switchyard.store.key`, the key of
//!   `serve`'s default store).
//!
//! Each process holds one [`Client`](switchyard_remote::Client) connection, made at its
//! first call under the prefix: data moves one-sided (cross-memory attach on one host),
//! metadata by request. A write has returned only once it is in the server's store; on a
//! store file on a disk (page-cache media) it survives a power cut once the server's periodic
//! sync, or a sync the program asks for, returns: `fsync`, `fdatasync` and `sync_file_range`
//! (each syncs the whole store), `syncfs` and `sync`, and every write of an `O_SYNC` or
//! `O_DSYNC` open or of a `pwritev2` with `RWF_SYNC` or `RWF_DSYNC`, which returns synced.
//!
//! ## What is served
//!
//! `open`, `openat`, `creat` (and their `64` and fortified `__open_2` forms), `close`, `read`,
//! `write`, `pread`, `pwrite`, `readv`, `writev`, `preadv`, `pwritev`, `preadv2`, `pwritev2`,
//! `lseek`, `fsync`, `fdatasync`, `sync_file_range`, `syncfs`, `sync`, `ftruncate`,
//! `truncate`, `fallocate`, `posix_fallocate`, `posix_fadvise`, `copy_file_range`,
//! `sendfile`; `stat`, `lstat`, `fstat`, `fstatat`
//! (`newfstatat`), `statx` and the older `__xstat` entry points; `access`, `faccessat`,
//! `unlink`, `unlinkat`, `rename`, `renameat`, `renameat2`, `mkdir`, `mkdirat`, `rmdir`,
//! `link`, `linkat`, `symlink`, `symlinkat`, `readlink`, `readlinkat`, `chmod`, `fchmod`,
//! `fchmodat`, `chown`, `lchown`, `fchown`, `fchownat`, `utimensat`, `futimens`, `utimes`,
//! `utime`, `statfs`, `fstatfs`, `statvfs`, `fstatvfs`, extended attributes; `opendir`,
//! `fdopendir`, `readdir`, `readdir64`, `closedir`, `dirfd`, `rewinddir`, `telldir`,
//! `seekdir`; `fopen`, `fopen64`, `fdopen`, `fileno` (streams over the library's
//! descriptors); `dup`, `dup2`, `dup3`, `fcntl` (descriptor and status flags, `F_DUPFD`, and
//! POSIX record locks, which the server keeps, so two processes lock each other out, and an
//! `F_SETLKW` that would deadlock processes gets `EDEADLK`);
//! `chdir`, `fchdir`, `getcwd`, `realpath`; `mmap` of a private mapping (the bytes are read
//! into anonymous memory, which is what a private mapping of an unchanging file holds).
//!
//! Refused with `ENOTSUP` and one line on stderr naming the call: a shared `mmap`, `flock`,
//! `O_TMPFILE`, and special files (`mknod`, `mkfifo`). `ioctl` on a served file fails with
//! `ENOTTY`, as on a file system that knows none.
//!
//! ## Descriptors, fork and exec
//!
//! - A served descriptor reserves a real kernel descriptor number (an `O_PATH` descriptor of
//!   `/dev/null`, or of the memfd holding its shared offset), so it never collides with the
//!   program's own; a call that reaches the kernel with it by a route this library does not
//!   see fails (`EBADF`), never reads other bytes. Duplicates share one offset and status
//!   flags, as the kernel's do.
//! - **fork:** UCX does not survive `fork`. A process with nothing open on its connection
//!   closes it just before it forks, and parent and child connect again at their next call
//!   under the prefix; a process that forks while it holds served files keeps its connection,
//!   and the child's calls under the prefix fail with `ENOTCONN` and one line on stderr
//!   (`dup2` and `exec` still work there: a shell's child sets up a redirection and execs).
//!   Record locks are not inherited (POSIX).
//! - **exec:** served descriptors without `FD_CLOEXEC` are handed to the new program
//!   (`SWITCHYARD_PRELOAD_FDS` in its environment), which opens them again at first use,
//!   sharing their offsets; through `execve`, `execv`, `execvp`, `execvpe`, `posix_spawn` and
//!   `posix_spawnp` (glibc's variadic `execl` family execs through an internal call nobody
//!   can interpose: there they are closed). A working directory under the prefix is handed
//!   on too (`SWITCHYARD_PRELOAD_CWD`).
//! - **vfork** is `fork`: a `vfork` child shares its parent's memory and would change its
//!   table of served descriptors.
//! - **Offsets** are shared as the kernel shares them: a parent and child (or a program and
//!   the one it `exec`s) writing one inherited descriptor in turn continue each other's
//!   writes (module `offset`).
//! - **Working directory:** `chdir` into the prefix keeps a working directory inside the
//!   store (the kernel's stays where it was); relative paths and `getcwd` use it.
//! - Paths are resolved lexically (`..` removes the previous name), and a symlink in the
//!   store is resolved inside the store: an absolute target under the prefix names the
//!   store's path beneath it (as through a mount at the prefix), any other absolute target
//!   is read from the store's root.
//!
//! Why by hand: interposing libc's functions needs `#[no_mangle]` definitions and `dlsym`;
//! no crate interposes file calls onto a client of our server.

mod calls;
mod conn;
mod dirs;
mod offset;
mod real;
mod route;
mod state;
mod stdio;

use std::cell::Cell;

use libc::c_int;
use switchyard_store::Errno;

thread_local! {
    /// This thread is inside the library (serving a call, or connecting): every call it
    /// makes goes to libc.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is inside the library.
fn inside() -> bool {
    INSIDE.with(|i| i.get())
}

/// Runs `f` as the library (its own calls go to libc); a panic becomes `EIO` (none may cross
/// into the program).
fn serve<T>(f: impl FnOnce() -> Result<T, Errno>) -> Result<T, Errno> {
    let was = INSIDE.with(|i| i.replace(true));
    let r =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(Err(Errno(libc::EIO)));
    INSIDE.with(|i| i.set(was));
    r
}

/// Sets `errno`.
fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() = e.0 };
}

/// A call's result as libc returns it: the value, or -1 with `errno` set.
trait Ret {
    /// The value the C call returns.
    type C;
    /// Converts, setting `errno` on failure.
    fn ret(self) -> Self::C;
}

impl Ret for Result<(), Errno> {
    type C = c_int;
    fn ret(self) -> c_int {
        match self {
            Ok(()) => 0,
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    }
}

impl Ret for Result<c_int, Errno> {
    type C = c_int;
    fn ret(self) -> c_int {
        self.unwrap_or_else(|e| {
            set_errno(e);
            -1
        })
    }
}

impl Ret for Result<usize, Errno> {
    type C = libc::ssize_t;
    fn ret(self) -> libc::ssize_t {
        match self {
            Ok(n) => n as libc::ssize_t,
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    }
}

impl Ret for Result<u64, Errno> {
    type C = libc::off_t;
    fn ret(self) -> libc::off_t {
        match self {
            Ok(n) => n as libc::off_t,
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    }
}

/// Refuses a call on a served file: one line on stderr naming it, and `ENOTSUP`.
fn refuse(call: &str) -> Errno {
    let line = format!(
        "switchyard preload: {call} is not supported on files under {}\n",
        route::prefix_display()
    );
    // SAFETY: writing a buffer we own to stderr with libc's write.
    unsafe { real::write()(2, line.as_ptr().cast(), line.len()) };
    Errno(libc::ENOTSUP)
}

/// Reads the environment and arranges for fork (once, from the constructor).
extern "C" fn setup() {
    let was = INSIDE.with(|i| i.replace(true));
    route::init();
    conn::init();
    calls::adopt();
    // SAFETY: registering handlers with no preconditions; all are `extern "C"` functions that
    // live as long as the process.
    unsafe {
        libc::pthread_atfork(
            Some(state::before_fork),
            Some(state::after_fork_parent),
            Some(state::after_fork_child),
        )
    };
    INSIDE.with(|i| i.set(was));
}

#[used]
#[link_section = ".init_array"]
static SETUP: extern "C" fn() = setup;
