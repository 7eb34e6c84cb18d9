//! The interposed calls: each goes to the store when its path is under the prefix or its
//! descriptor is served, and to libc otherwise.
//!
//! The variadic calls (`open`, `openat`, `fcntl`, `ioctl`) are defined with their optional
//! argument as a fixed one: on the Linux ABIs this library builds for (x86-64 and AArch64)
//! a variadic integer argument travels in the register a fixed one would, and it is read
//! only when the call's flags say the caller passed it.

use std::sync::atomic::{AtomicI32, AtomicU64};
use std::sync::Arc;

use libc::{c_char, c_int, mode_t};
use switchyard_store::{Errno, Inodes, OpenFlags, S_IFDIR, S_IFLNK};

use crate::offset::Offset;
use crate::state::{self, Open, Slot};
use crate::{conn, real, refuse};

mod attrs;
mod cwd;
mod exec;
mod fds;
mod io;
mod map;
mod names;
mod space;
mod stat;
mod temp;
mod xattr;

/// Runs a call by the route of its path: `$libc` with `$p` the path to pass on, or `$store`
/// with `$s` the store path (as the library, its result converted as libc returns it).
macro_rules! by_path {
    ($dirfd:expr, $path:expr, |$p:ident| $libc:expr, |$s:ident| $store:expr) => {{
        // SAFETY: the program passes a C string (or null, which libc then rejects).
        match unsafe { $crate::route::at($dirfd, $path) } {
            $crate::route::Route::Libc => {
                let $p = $path;
                // SAFETY: the program's own arguments, passed on to libc unchanged.
                unsafe { $libc }
            }
            $crate::route::Route::Host(h) => {
                let $p = h.as_ptr();
                // SAFETY: the program's arguments with the path made absolute.
                unsafe { $libc }
            }
            other => {
                let r = match other {
                    $crate::route::Route::Store($s) => $crate::serve(|| {
                        // SAFETY: the store's side uses the program's pointers under the
                        // contract of the C call it serves.
                        #[allow(unused_unsafe)]
                        unsafe {
                            $store
                        }
                    }),
                    $crate::route::Route::Fail(e) => Err(e),
                    _ => unreachable!(),
                };
                $crate::Ret::ret(r)
            }
        }
    }};
}

/// Runs a call on a descriptor: `$store` with `$o` its open when it is served, `$libc`
/// otherwise.
macro_rules! by_fd {
    ($fd:expr, |$o:ident| $store:expr, $libc:expr) => {{
        match $crate::state::get($fd) {
            // SAFETY: the program's own arguments, passed on to libc unchanged.
            None => unsafe { $libc },
            Some($o) => $crate::Ret::ret($crate::serve(|| {
                // SAFETY: the store's side uses the program's pointers under the contract of
                // the C call it serves.
                #[allow(unused_unsafe)]
                unsafe {
                    $store
                }
            })),
        }
    }};
}

pub use exec::adopt;
pub use fds::close_fd;
pub use io::{lseek64, read, write};
pub(crate) use {by_fd, by_path};

/// Whether the program's path is the empty string (which `AT_EMPTY_PATH` makes name the
/// descriptor itself).
///
/// # Safety
/// `path` is null or a C string.
pub unsafe fn is_empty(path: *const c_char) -> bool {
    // SAFETY: non-null, so a C string by the caller's contract: its first byte is readable.
    !path.is_null() && unsafe { *path } == 0
}

/// The status flags an open keeps (what `F_GETFL` reports).
const STATUS_FLAGS: c_int = libc::O_ACCMODE
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DIRECT
    | libc::O_NOATIME
    | libc::O_SYNC
    | libc::O_DSYNC;

/// The process's file mode creation mask.
pub fn umask() -> u32 {
    // SAFETY: umask has no preconditions; the mask is set back at once.
    unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    }
}

/// A kernel descriptor number for a served open: an `O_PATH` descriptor of `/dev/null`,
/// close-on-exec, at or above `min`.
pub fn reserve(min: c_int) -> Result<c_int, Errno> {
    // SAFETY: a NUL-terminated path and plain flags.
    let fd = unsafe {
        real::open()(
            c"/dev/null".as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC,
            0 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE),
        ));
    }
    let fd = if fd < min {
        // SAFETY: duplicating a descriptor we own, then closing the original.
        unsafe {
            let d = real::fcntl64()(fd, libc::F_DUPFD_CLOEXEC, min);
            real::close()(fd);
            if d < 0 {
                return Err(Errno(libc::EMFILE));
            }
            d
        }
    } else {
        fd
    };
    if fd >= state::MAX_FD {
        // SAFETY: closing the descriptor just opened.
        unsafe { real::close()(fd) };
        return Err(Errno(libc::EMFILE));
    }
    Ok(fd)
}

/// Opens `path` in the store: a reserved descriptor number served by the new open.
pub fn open_store(path: &str, flags: c_int, mode: mode_t) -> Result<c_int, Errno> {
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(refuse("open with O_TMPFILE"));
    }
    let c = conn::client()?;
    let generation = conn::generation();
    let access = flags & libc::O_ACCMODE;
    let how = OpenFlags {
        read: access != libc::O_WRONLY,
        write: access != libc::O_RDONLY,
        create: flags & libc::O_CREAT != 0,
        exclusive: flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0,
        truncate: flags & libc::O_TRUNC != 0,
        append: flags & libc::O_APPEND != 0,
    };
    if flags & libc::O_NOFOLLOW != 0 {
        if let Ok((_, st)) = c.path_stat(path, false) {
            if st.attr.kind() == S_IFLNK {
                return Err(Errno(libc::ELOOP));
            }
        }
    }
    let (ino, st) = c.open_path(path, how, mode & !umask())?;
    let kind = st.attr.kind();
    let fd = if flags & libc::O_DIRECTORY != 0 && kind != S_IFDIR {
        Err(Errno(libc::ENOTDIR))
    } else {
        reserve(0)
    };
    let fd = match fd {
        Ok(fd) => fd,
        Err(e) => {
            let _ = c.release(ino);
            return Err(e);
        }
    };
    let open = Arc::new(Open {
        ino,
        path: path.to_string(),
        kind,
        flags: AtomicI32::new(flags & STATUS_FLAGS),
        offset: Offset::new(0),
        generation: AtomicU64::new(generation),
    });
    let cloexec = flags & libc::O_CLOEXEC != 0;
    state::insert(fd, Slot { open, cloexec });
    Ok(fd)
}

/// Closes a served descriptor: its number goes back to the kernel, the process's record
/// locks on the file go (as any close of a file does), and the open goes with its last
/// descriptor.
fn close_served(fd: c_int, open: Arc<Open>) -> Result<(), Errno> {
    drop(state::remove(fd));
    // SAFETY: the reserved descriptor this library opened for `fd`.
    unsafe { real::close()(fd) };
    state::release_locks(&open);
    drop(open);
    Ok(())
}

// ---- the calls ------------------------------------------------------------------------

/// `open(2)`.
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    by_path!(
        libc::AT_FDCWD,
        path,
        |p| real::open()(p, flags, mode as libc::c_uint),
        |s| open_store(&s, flags, mode)
    )
}

/// `open64`: `open` (offsets are 64-bit on this ABI).
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: same contract.
    unsafe { open(path, flags, mode) }
}

/// The fortified `open` (no mode: never creates).
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: same contract; the mode is unused without O_CREAT.
    unsafe { open(path, flags, 0) }
}

/// The fortified `open64`.
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { open(path, flags, 0) }
}

/// `openat(2)`.
///
/// # Safety
/// As `openat(2)`.
#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    by_path!(
        dirfd,
        path,
        |p| real::openat()(dirfd, p, flags, mode as libc::c_uint),
        |s| open_store(&s, flags, mode)
    )
}

/// `openat64`.
///
/// # Safety
/// As `openat(2)`.
#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    // SAFETY: same contract.
    unsafe { openat(dirfd, path, flags, mode) }
}

/// The fortified `openat`.
///
/// # Safety
/// As `openat(2)`.
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { openat(dirfd, path, flags, 0) }
}

/// The fortified `openat64`.
///
/// # Safety
/// As `openat(2)`.
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { openat(dirfd, path, flags, 0) }
}

/// `creat(2)`.
///
/// # Safety
/// As `creat(2)`.
#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: same contract.
    unsafe { open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode) }
}

/// `creat64`.
///
/// # Safety
/// As `creat(2)`.
#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: same contract.
    unsafe { creat(path, mode) }
}

/// `close(2)`.
///
/// # Safety
/// As `close(2)`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    by_fd!(fd, |o| close_served(fd, o), real::close()(fd))
}
