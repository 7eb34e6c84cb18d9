//! Names: creating, removing, renaming and linking them, symlinks, and special files (which
//! are not served).

use std::ffi::CStr;

use libc::{c_char, c_int, mode_t, size_t, ssize_t};
use switchyard_store::{Errno, Files, Inodes, Rename, S_IFDIR};

use super::by_path;
use crate::route::{self, Route};
use crate::{conn, real, refuse, serve, Ret};

/// `unlinkat(2)`.
///
/// # Safety
/// As `unlinkat(2)`.
#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    by_path!(dirfd, path, |p| real::unlinkat()(dirfd, p, flags), |s| {
        let c = conn::client()?;
        if flags & libc::AT_REMOVEDIR != 0 {
            c.rmdir(&s)
        } else {
            Files::unlink(&*c, &s)
        }
    })
}

/// `unlink(2)`.
///
/// # Safety
/// As `unlink(2)`.
#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    // SAFETY: same contract.
    unsafe { unlinkat(libc::AT_FDCWD, path, 0) }
}

/// `rmdir(2)`.
///
/// # Safety
/// As `rmdir(2)`.
#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    // SAFETY: same contract.
    unsafe { unlinkat(libc::AT_FDCWD, path, libc::AT_REMOVEDIR) }
}

/// `mkdirat(2)`.
///
/// # Safety
/// As `mkdirat(2)`.
#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    by_path!(dirfd, path, |p| real::mkdirat()(dirfd, p, mode), |s| {
        Files::mkdir(&*conn::client()?, &s, mode & !super::umask())
    })
}

/// `mkdir(2)`.
///
/// # Safety
/// As `mkdir(2)`.
#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: same contract.
    unsafe { mkdirat(libc::AT_FDCWD, path, mode) }
}

/// `mknodat(2)`: special files are not served.
///
/// # Safety
/// As `mknodat(2)`.
#[no_mangle]
pub unsafe extern "C" fn mknodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: libc::dev_t,
) -> c_int {
    by_path!(
        dirfd,
        path,
        |p| real::mknodat()(dirfd, p, mode, dev),
        |_s| Err::<(), _>(refuse("mknod"))
    )
}

/// `mknod(2)`.
///
/// # Safety
/// As `mknod(2)`.
#[no_mangle]
pub unsafe extern "C" fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    // SAFETY: same contract.
    unsafe { mknodat(libc::AT_FDCWD, path, mode, dev) }
}

/// `mkfifo(3)`.
///
/// # Safety
/// As `mkfifo(3)`.
#[no_mangle]
pub unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: same contract.
    unsafe { mknodat(libc::AT_FDCWD, path, mode | libc::S_IFIFO, 0) }
}

/// Where two paths go, for calls that take two: both to libc (with the paths to pass), both
/// to the store, or across (`EXDEV`).
enum Pair {
    Libc(
        *const c_char,
        *const c_char,
        Option<std::ffi::CString>,
        Option<std::ffi::CString>,
    ),
    Store(String, String),
    Fail(Errno),
}

/// # Safety
/// Both paths are null or C strings.
unsafe fn pair(d1: c_int, p1: *const c_char, d2: c_int, p2: *const c_char) -> Pair {
    // SAFETY: by the caller's contract.
    let (a, b) = unsafe { (route::at(d1, p1), route::at(d2, p2)) };
    match (a, b) {
        (Route::Store(a), Route::Store(b)) => Pair::Store(a, b),
        (Route::Fail(e), _) | (_, Route::Fail(e)) => Pair::Fail(e),
        (Route::Store(_), _) | (_, Route::Store(_)) => Pair::Fail(Errno(libc::EXDEV)),
        (a, b) => {
            let host = |r| match r {
                Route::Host(h) => Some(h),
                _ => None,
            };
            let (ha, hb) = (host(a), host(b));
            let pa = ha.as_ref().map_or(p1, |h| h.as_ptr());
            let pb = hb.as_ref().map_or(p2, |h| h.as_ptr());
            Pair::Libc(pa, pb, ha, hb)
        }
    }
}

/// A path's parent directory's inode and its last name.
fn parent_and_name(c: &switchyard_remote::Client, path: &str) -> Result<(u64, Vec<u8>), Errno> {
    let (dir, name) = path.rsplit_once('/').ok_or(Errno(libc::EINVAL))?;
    if name.is_empty() {
        return Err(Errno(libc::EBUSY));
    }
    let (ino, st) = c.path_stat(if dir.is_empty() { "/" } else { dir }, true)?;
    if st.attr.kind() != S_IFDIR {
        return Err(Errno(libc::ENOTDIR));
    }
    Ok((ino, name.as_bytes().to_vec()))
}

/// `renameat2(2)`.
///
/// # Safety
/// As `renameat2(2)`.
#[no_mangle]
pub unsafe extern "C" fn renameat2(
    d1: c_int,
    p1: *const c_char,
    d2: c_int,
    p2: *const c_char,
    flags: libc::c_uint,
) -> c_int {
    // SAFETY: the program's paths.
    match unsafe { pair(d1, p1, d2, p2) } {
        // SAFETY: the program's arguments, with paths made absolute where needed.
        Pair::Libc(a, b, _ha, _hb) => unsafe { real::renameat2()(d1, a, d2, b, flags) },
        Pair::Fail(e) => Err::<(), _>(e).ret(),
        Pair::Store(a, b) => serve(|| {
            let how = match flags {
                0 => Rename::Replace,
                libc::RENAME_NOREPLACE => Rename::NoReplace,
                libc::RENAME_EXCHANGE => Rename::Exchange,
                _ => return Err(Errno(libc::EINVAL)),
            };
            let c = conn::client()?;
            let (p, n) = parent_and_name(&c, &a)?;
            let (np, nn) = parent_and_name(&c, &b)?;
            Inodes::rename(&*c, p, &n, np, &nn, how)
        })
        .ret(),
    }
}

/// `renameat(2)`.
///
/// # Safety
/// As `renameat(2)`.
#[no_mangle]
pub unsafe extern "C" fn renameat(
    d1: c_int,
    p1: *const c_char,
    d2: c_int,
    p2: *const c_char,
) -> c_int {
    // SAFETY: same contract.
    unsafe { renameat2(d1, p1, d2, p2, 0) }
}

/// `rename(2)`.
///
/// # Safety
/// As `rename(2)`.
#[no_mangle]
pub unsafe extern "C" fn rename(from: *const c_char, to: *const c_char) -> c_int {
    // SAFETY: same contract.
    unsafe { renameat2(libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0) }
}

/// `linkat(2)`.
///
/// # Safety
/// As `linkat(2)`.
#[no_mangle]
pub unsafe extern "C" fn linkat(
    d1: c_int,
    p1: *const c_char,
    d2: c_int,
    p2: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: the program's paths.
    match unsafe { pair(d1, p1, d2, p2) } {
        // SAFETY: the program's arguments, with paths made absolute where needed.
        Pair::Libc(a, b, _ha, _hb) => unsafe { real::linkat()(d1, a, d2, b, flags) },
        Pair::Fail(e) => Err::<(), _>(e).ret(),
        Pair::Store(a, b) => serve(|| {
            let c = conn::client()?;
            let from = if flags & libc::AT_SYMLINK_FOLLOW != 0 {
                c.path_stat(&a, true)?.0
            } else {
                c.path_stat(&a, false)?.0
            };
            let (np, nn) = parent_and_name(&c, &b)?;
            Inodes::link(&*c, from, np, &nn).map(|_| ())
        })
        .ret(),
    }
}

/// `link(2)`.
///
/// # Safety
/// As `link(2)`.
#[no_mangle]
pub unsafe extern "C" fn link(from: *const c_char, to: *const c_char) -> c_int {
    // SAFETY: same contract.
    unsafe { linkat(libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0) }
}

/// `symlinkat(2)`: the target is stored as given.
///
/// # Safety
/// As `symlinkat(2)`.
#[no_mangle]
pub unsafe extern "C" fn symlinkat(
    target: *const c_char,
    dirfd: c_int,
    path: *const c_char,
) -> c_int {
    by_path!(dirfd, path, |p| real::symlinkat()(target, dirfd, p), |s| {
        if target.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        // SAFETY: a non-null C string from the program.
        let t = unsafe { CStr::from_ptr(target) }
            .to_str()
            .map_err(|_| Errno(libc::EILSEQ))?;
        Files::symlink(&*conn::client()?, t, &s)
    })
}

/// `symlink(2)`.
///
/// # Safety
/// As `symlink(2)`.
#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    // SAFETY: same contract.
    unsafe { symlinkat(target, libc::AT_FDCWD, path) }
}

/// `readlinkat(2)`.
///
/// # Safety
/// As `readlinkat(2)`.
#[no_mangle]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> ssize_t {
    by_path!(
        dirfd,
        path,
        |p| real::readlinkat()(dirfd, p, buf, size),
        |s| {
            let t = Files::readlink(&*conn::client()?, &s)?;
            let n = t.len().min(size);
            // SAFETY: the program's buffer of `size` bytes; n <= size.
            unsafe { std::ptr::copy_nonoverlapping(t.as_ptr(), buf.cast(), n) };
            Ok(n)
        }
    )
}

/// `readlink(2)`.
///
/// # Safety
/// As `readlink(2)`.
#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, size: size_t) -> ssize_t {
    // SAFETY: same contract.
    unsafe { readlinkat(libc::AT_FDCWD, path, buf, size) }
}
