//! Extended attributes of served files (the store keeps them per inode).

use std::ffi::CStr;

use libc::{c_char, c_int, c_void, size_t, ssize_t};
use switchyard_store::{Errno, Inodes, XattrMode};

use super::{by_fd, by_path};
use crate::{conn, real, state};

/// An attribute's name from the program.
///
/// # Safety
/// `name` is null or a C string.
unsafe fn name<'a>(name: *const c_char) -> Result<&'a [u8], Errno> {
    if name.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: non-null C string.
    Ok(unsafe { CStr::from_ptr(name) }.to_bytes())
}

/// Copies `v` out as the `*xattr` calls do: the size when `size` is 0, `ERANGE` when it does
/// not fit.
fn give(v: &[u8], buf: *mut c_void, size: size_t) -> Result<usize, Errno> {
    if size == 0 {
        return Ok(v.len());
    }
    if v.len() > size {
        return Err(Errno(libc::ERANGE));
    }
    // SAFETY: the program's buffer of `size` bytes, and v.len() <= size.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), buf.cast(), v.len()) };
    Ok(v.len())
}

fn path_ino(path: &str, follow: bool) -> Result<u64, Errno> {
    Ok(conn::client()?.path_stat(path, follow)?.0)
}

fn get(ino: u64, n: &[u8], buf: *mut c_void, size: size_t) -> Result<usize, Errno> {
    give(&conn::client()?.getxattr(ino, n)?, buf, size)
}

fn list(ino: u64, buf: *mut c_char, size: size_t) -> Result<usize, Errno> {
    give(&conn::client()?.listxattr(ino)?, buf.cast(), size)
}

/// # Safety
/// `value` points to `size` bytes.
unsafe fn set(
    ino: u64,
    n: &[u8],
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> Result<(), Errno> {
    let mode = match flags {
        0 => XattrMode::Set,
        libc::XATTR_CREATE => XattrMode::Create,
        libc::XATTR_REPLACE => XattrMode::Replace,
        _ => return Err(Errno(libc::EINVAL)),
    };
    let v = if size == 0 {
        &[][..]
    } else {
        // SAFETY: by the caller's contract.
        unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) }
    };
    conn::client()?.setxattr(ino, n, v, mode)
}

fn remove(ino: u64, n: &[u8]) -> Result<(), Errno> {
    conn::client()?.removexattr(ino, n)
}

fn fd_ino(o: &state::Open) -> Result<u64, Errno> {
    conn::for_open(o)?;
    Ok(o.ino)
}

macro_rules! xattr_calls {
    ($doc:literal, $pathf:ident, $lpathf:ident, $fdf:ident,
     ($($arg:ident: $ty:ty),*) -> $ret:ty, |$ino:ident| $body:expr) => {
        #[doc = concat!("`", $doc, "`.")]
        ///
        /// # Safety
        /// As the libc call of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $pathf(path: *const c_char, $($arg: $ty),*) -> $ret {
            by_path!(libc::AT_FDCWD, path, |p| real::$pathf()(p, $($arg),*), |s| {
                let $ino = path_ino(&s, true)?;
                $body
            })
        }

        #[doc = concat!("`", $doc, "` of a symlink itself.")]
        ///
        /// # Safety
        /// As the libc call of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $lpathf(path: *const c_char, $($arg: $ty),*) -> $ret {
            by_path!(libc::AT_FDCWD, path, |p| real::$lpathf()(p, $($arg),*), |s| {
                let $ino = path_ino(&s, false)?;
                $body
            })
        }

        #[doc = concat!("`", $doc, "` of a descriptor.")]
        ///
        /// # Safety
        /// As the libc call of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $fdf(fd: c_int, $($arg: $ty),*) -> $ret {
            by_fd!(fd, |o| {
                let $ino = fd_ino(&o)?;
                $body
            }, real::$fdf()(fd, $($arg),*))
        }
    };
}

xattr_calls!(
    "getxattr(2)",
    getxattr, lgetxattr, fgetxattr,
    (n: *const c_char, buf: *mut c_void, size: size_t) -> ssize_t,
    |ino| get(ino, name(n)?, buf, size)
);

xattr_calls!(
    "setxattr(2)",
    setxattr, lsetxattr, fsetxattr,
    (n: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int,
    |ino| set(ino, name(n)?, value, size, flags)
);

xattr_calls!(
    "listxattr(2)",
    listxattr, llistxattr, flistxattr,
    (buf: *mut c_char, size: size_t) -> ssize_t,
    |ino| list(ino, buf, size)
);

xattr_calls!(
    "removexattr(2)",
    removexattr, lremovexattr, fremovexattr,
    (n: *const c_char) -> c_int,
    |ino| remove(ino, name(n)?)
);
