//! libc's own definitions of the calls this library interposes, found at first use.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, c_long, c_uint, c_ulong, c_void, mode_t, off_t, size_t, ssize_t};

/// The next definition of `name` after this library's (libc's); aborts the process with a
/// message when there is none, since no call could then be passed on.
fn find(name: &'static [u8], slot: &AtomicUsize) -> usize {
    let f = slot.load(Ordering::Acquire);
    if f != 0 {
        return f;
    }
    // libc's own definition, not merely the next one: the UCX libraries this library links
    // export `mmap` and its kin too (for use as a preload of their own), and the next
    // definition after this library's would be theirs.
    // SAFETY: dlopen of the already loaded libc (RTLD_NOLOAD), and dlsym with a
    // NUL-terminated name on its handle or on RTLD_NEXT.
    let f = unsafe {
        let libc_handle = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        let from = if libc_handle.is_null() {
            libc::RTLD_NEXT
        } else {
            libc_handle
        };
        libc::dlsym(from, name.as_ptr().cast())
    } as usize;
    if f == 0 {
        let msg = b"switchyard preload: a libc function is missing\n";
        // SAFETY: a raw write of a static buffer to stderr, then abort.
        unsafe {
            libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
            libc::abort();
        }
    }
    slot.store(f, Ordering::Release);
    f
}

macro_rules! real {
    ($($name:ident: fn($($arg:ty),*) -> $ret:ty;)*) => {
        $(
            #[doc = concat!("libc's `", stringify!($name), "`.")]
            pub fn $name() -> unsafe extern "C" fn($($arg),*) -> $ret {
                static SLOT: AtomicUsize = AtomicUsize::new(0);
                let f = find(concat!(stringify!($name), "\0").as_bytes(), &SLOT);
                // SAFETY: `f` is libc's definition of this function, whose C prototype is the
                // type given here.
                unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($arg),*) -> $ret>(f) }
            }
        )*
    };
}

/// As [`real!`], for variadic functions.
macro_rules! real_variadic {
    ($($name:ident: fn($($arg:ty),*, ...) -> $ret:ty;)*) => {
        $(
            #[doc = concat!("libc's `", stringify!($name), "`.")]
            pub fn $name() -> unsafe extern "C" fn($($arg),*, ...) -> $ret {
                static SLOT: AtomicUsize = AtomicUsize::new(0);
                let f = find(concat!(stringify!($name), "\0").as_bytes(), &SLOT);
                // SAFETY: `f` is libc's definition of this function, whose C prototype is the
                // type given here.
                unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($arg),*, ...) -> $ret>(f) }
            }
        )*
    };
}

real_variadic! {
    open: fn(*const c_char, c_int, ...) -> c_int;
    openat: fn(c_int, *const c_char, c_int, ...) -> c_int;
    ioctl: fn(c_int, c_ulong, ...) -> c_int;
    fcntl64: fn(c_int, c_int, ...) -> c_int;
}

real! {
    close: fn(c_int) -> c_int;
    read: fn(c_int, *mut c_void, size_t) -> ssize_t;
    write: fn(c_int, *const c_void, size_t) -> ssize_t;
    pread64: fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
    pwrite64: fn(c_int, *const c_void, size_t, off_t) -> ssize_t;
    readv: fn(c_int, *const libc::iovec, c_int) -> ssize_t;
    writev: fn(c_int, *const libc::iovec, c_int) -> ssize_t;
    preadv64: fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t;
    pwritev64: fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t;
    preadv64v2: fn(c_int, *const libc::iovec, c_int, off_t, c_int) -> ssize_t;
    pwritev64v2: fn(c_int, *const libc::iovec, c_int, off_t, c_int) -> ssize_t;
    lseek64: fn(c_int, off_t, c_int) -> off_t;
    fsync: fn(c_int) -> c_int;
    fdatasync: fn(c_int) -> c_int;
    sync_file_range: fn(c_int, off_t, off_t, c_uint) -> c_int;
    syncfs: fn(c_int) -> c_int;
    sync: fn() -> ();
    ftruncate64: fn(c_int, off_t) -> c_int;
    truncate64: fn(*const c_char, off_t) -> c_int;
    fallocate64: fn(c_int, c_int, off_t, off_t) -> c_int;
    posix_fallocate64: fn(c_int, off_t, off_t) -> c_int;
    posix_fadvise64: fn(c_int, off_t, off_t, c_int) -> c_int;
    copy_file_range: fn(c_int, *mut i64, c_int, *mut i64, size_t, c_uint) -> ssize_t;
    sendfile64: fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
    mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
    flock: fn(c_int, c_int) -> c_int;
    dup: fn(c_int) -> c_int;
    dup2: fn(c_int, c_int) -> c_int;
    dup3: fn(c_int, c_int, c_int) -> c_int;
    fstat64: fn(c_int, *mut libc::stat64) -> c_int;
    fstatat64: fn(c_int, *const c_char, *mut libc::stat64, c_int) -> c_int;
    statx: fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int;
    faccessat: fn(c_int, *const c_char, c_int, c_int) -> c_int;
    unlinkat: fn(c_int, *const c_char, c_int) -> c_int;
    renameat2: fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int;
    mkdirat: fn(c_int, *const c_char, mode_t) -> c_int;
    linkat: fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int;
    symlinkat: fn(*const c_char, c_int, *const c_char) -> c_int;
    readlinkat: fn(c_int, *const c_char, *mut c_char, size_t) -> ssize_t;
    fchmodat: fn(c_int, *const c_char, mode_t, c_int) -> c_int;
    fchmod: fn(c_int, mode_t) -> c_int;
    fchownat: fn(c_int, *const c_char, libc::uid_t, libc::gid_t, c_int) -> c_int;
    fchown: fn(c_int, libc::uid_t, libc::gid_t) -> c_int;
    utimensat: fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int;
    futimens: fn(c_int, *const libc::timespec) -> c_int;
    statfs64: fn(*const c_char, *mut libc::statfs64) -> c_int;
    fstatfs64: fn(c_int, *mut libc::statfs64) -> c_int;
    statvfs64: fn(*const c_char, *mut libc::statvfs64) -> c_int;
    fstatvfs64: fn(c_int, *mut libc::statvfs64) -> c_int;
    mknodat: fn(c_int, *const c_char, mode_t, libc::dev_t) -> c_int;
    getxattr: fn(*const c_char, *const c_char, *mut c_void, size_t) -> ssize_t;
    lgetxattr: fn(*const c_char, *const c_char, *mut c_void, size_t) -> ssize_t;
    fgetxattr: fn(c_int, *const c_char, *mut c_void, size_t) -> ssize_t;
    setxattr: fn(*const c_char, *const c_char, *const c_void, size_t, c_int) -> c_int;
    lsetxattr: fn(*const c_char, *const c_char, *const c_void, size_t, c_int) -> c_int;
    fsetxattr: fn(c_int, *const c_char, *const c_void, size_t, c_int) -> c_int;
    listxattr: fn(*const c_char, *mut c_char, size_t) -> ssize_t;
    llistxattr: fn(*const c_char, *mut c_char, size_t) -> ssize_t;
    flistxattr: fn(c_int, *mut c_char, size_t) -> ssize_t;
    removexattr: fn(*const c_char, *const c_char) -> c_int;
    lremovexattr: fn(*const c_char, *const c_char) -> c_int;
    fremovexattr: fn(c_int, *const c_char) -> c_int;
    opendir: fn(*const c_char) -> *mut libc::DIR;
    fdopendir: fn(c_int) -> *mut libc::DIR;
    readdir64: fn(*mut libc::DIR) -> *mut libc::dirent64;
    closedir: fn(*mut libc::DIR) -> c_int;
    dirfd: fn(*mut libc::DIR) -> c_int;
    rewinddir: fn(*mut libc::DIR) -> ();
    telldir: fn(*mut libc::DIR) -> c_long;
    seekdir: fn(*mut libc::DIR, c_long) -> ();
    fopen64: fn(*const c_char, *const c_char) -> *mut libc::FILE;
    fdopen: fn(c_int, *const c_char) -> *mut libc::FILE;
    fileno: fn(*mut libc::FILE) -> c_int;
    chdir: fn(*const c_char) -> c_int;
    fchdir: fn(c_int) -> c_int;
    getcwd: fn(*mut c_char, size_t) -> *mut c_char;
    realpath: fn(*const c_char, *mut c_char) -> *mut c_char;
    mkostemps: fn(*mut c_char, c_int, c_int) -> c_int;
    mkdtemp: fn(*mut c_char) -> *mut c_char;
    execve: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    execvpe: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    posix_spawn: fn(*mut libc::pid_t, *const c_char, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const *mut c_char, *const *mut c_char) -> c_int;
    posix_spawnp: fn(*mut libc::pid_t, *const c_char, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const *mut c_char, *const *mut c_char) -> c_int;
}
