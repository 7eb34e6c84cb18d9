//! Calls by path: making and removing names, renaming, linking, truncating, reading
//! symlinks, and listing directories ([`sy_opendir`] takes a snapshot of a directory,
//! [`sy_readdir`] reads it entry by entry, [`sy_closedir`] drops it).

use std::ffi::c_char;

use parking_lot::Mutex;
use switchyard_store::{Errno, Files};

use super::{buffer_mut, put, store, sy_dir, sy_dirent, sy_store};
use crate::error::{guard, status, text, Failure};

/// Runs `op` on `s` with the path `p`: 0 or a negative errno.
///
/// # Safety
/// `s` is a live store or null; `p` a NUL-terminated string.
unsafe fn on_path(
    s: *const sy_store,
    p: *const c_char,
    op: impl FnOnce(&dyn Files, &str) -> Result<(), Errno>,
) -> i32 {
    status(|| {
        // SAFETY: forwarded from this function's contract.
        let (f, p) = unsafe { (store(s)?, text(p, "path")?) };
        Ok(op(&*f, p)?)
    })
}

/// Runs `op` on `s` with the paths `a` and `b`: 0 or a negative errno.
///
/// # Safety
/// `s` is a live store or null; `a` and `b` NUL-terminated strings.
unsafe fn on_paths(
    s: *const sy_store,
    a: *const c_char,
    b: *const c_char,
    op: impl FnOnce(&dyn Files, &str, &str) -> Result<(), Errno>,
) -> i32 {
    status(|| {
        // SAFETY: forwarded from this function's contract.
        let (f, a, b) = unsafe { (store(s)?, text(a, "path")?, text(b, "path")?) };
        Ok(op(&*f, a, b)?)
    })
}

/// Makes a directory with `mode`.
///
/// # Safety
/// `s` is a live store or null; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sy_mkdir(s: *const sy_store, path: *const c_char, mode: u32) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_path(s, path, |f, p| f.mkdir(p, mode & 0o7777)) }
}

/// Removes an empty directory.
///
/// # Safety
/// As [`sy_mkdir`].
#[no_mangle]
pub unsafe extern "C" fn sy_rmdir(s: *const sy_store, path: *const c_char) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_path(s, path, |f, p| f.rmdir(p)) }
}

/// Removes a name (the file goes when its last name and descriptor do).
///
/// # Safety
/// As [`sy_mkdir`].
#[no_mangle]
pub unsafe extern "C" fn sy_unlink(s: *const sy_store, path: *const c_char) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_path(s, path, |f, p| f.unlink(p)) }
}

/// Sets the size of the file at `path`.
///
/// # Safety
/// As [`sy_mkdir`].
#[no_mangle]
pub unsafe extern "C" fn sy_truncate(s: *const sy_store, path: *const c_char, size: i64) -> i32 {
    let Ok(size) = u64::try_from(size) else {
        return -libc::EINVAL;
    };
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_path(s, path, |f, p| f.truncate(p, size)) }
}

/// Renames `from` to `to`, atomically replacing `to` if it exists.
///
/// # Safety
/// `s` is a live store or null; the paths NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn sy_rename(
    s: *const sy_store,
    from: *const c_char,
    to: *const c_char,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_paths(s, from, to, |f, a, b| f.rename(a, b)) }
}

/// Makes `to` a new name of the file `from`.
///
/// # Safety
/// As [`sy_rename`].
#[no_mangle]
pub unsafe extern "C" fn sy_link(
    s: *const sy_store,
    from: *const c_char,
    to: *const c_char,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_paths(s, from, to, |f, a, b| f.link(a, b)) }
}

/// Makes `path` a symlink to `target`.
///
/// # Safety
/// As [`sy_rename`].
#[no_mangle]
pub unsafe extern "C" fn sy_symlink(
    s: *const sy_store,
    target: *const c_char,
    path: *const c_char,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_paths(s, target, path, |f, t, p| f.symlink(t, p)) }
}

/// Reads the target of the symlink `path` into `buf` (not NUL-terminated, cut to `len`, as
/// readlink(2)): the bytes stored, or a negative errno.
///
/// # Safety
/// `s` is a live store or null; `path` a NUL-terminated string; `buf` writable for `len`.
#[no_mangle]
pub unsafe extern "C" fn sy_readlink(
    s: *const sy_store,
    path: *const c_char,
    buf: *mut c_char,
    len: usize,
) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promises, forwarded.
            let (f, p) = unsafe { (store(s)?, text(path, "path")?) };
            let target = f.readlink(p)?;
            let out = buffer_mut(buf.cast(), len)?;
            let n = target.len().min(out.len());
            out[..n].copy_from_slice(&target[..n]);
            Ok(n)
        },
        |n| n as i64,
    )
}

/// Opens the directory `path` for [`sy_readdir`]: its entries as they are now (without `.`
/// and `..`, sorted by name). 0 or a negative errno.
///
/// # Safety
/// `s` is a live store or null; `path` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn sy_opendir(
    s: *const sy_store,
    path: *const c_char,
    out: *mut *mut sy_dir,
) -> i32 {
    status(|| {
        // SAFETY: the caller's promises, forwarded.
        let (f, p) = unsafe { (store(s)?, text(path, "path")?) };
        if out.is_null() {
            return Err(Failure::new(libc::EFAULT, "out is null"));
        }
        let entries = f.readdir(p)?;
        let d = sy_dir {
            listing: Mutex::new(Some((entries, 0))),
        };
        put(out, Box::into_raw(Box::new(d)))
    })
}

/// The next entry of `dir` into `*out`: 1, 0 at the end, or a negative errno (`-EBADF` for
/// a closed directory).
///
/// # Safety
/// `dir` is null or from [`sy_opendir`]; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn sy_readdir(dir: *const sy_dir, out: *mut sy_dirent) -> i32 {
    guard(
        || {
            // SAFETY: the caller promises a handle from sy_opendir (never freed) or null.
            let d = unsafe { dir.as_ref() }
                .ok_or_else(|| Failure::new(libc::EFAULT, "a null directory"))?;
            let mut listing = d.listing.lock();
            let (entries, next) = listing
                .as_mut()
                .ok_or_else(|| Failure::new(libc::EBADF, "a closed directory"))?;
            let Some(e) = entries.get(*next) else {
                return Ok(0);
            };
            let mut name = [0 as c_char; 256];
            for (to, &b) in name.iter_mut().zip(e.name.iter().take(255)) {
                *to = b as c_char;
            }
            put(
                out,
                sy_dirent {
                    ino: e.ino,
                    kind: e.kind,
                    name,
                },
            )?;
            *next += 1;
            Ok(1)
        },
        |n| n,
    ) as i32
}

/// Closes a directory from [`sy_opendir`], dropping its listing (a tombstone of a few bytes
/// stays, as for a store): 0, or `-EBADF` if closed already.
///
/// # Safety
/// `dir` is null or from [`sy_opendir`].
#[no_mangle]
pub unsafe extern "C" fn sy_closedir(dir: *const sy_dir) -> i32 {
    status(|| {
        // SAFETY: the caller promises a handle from sy_opendir (never freed) or null.
        let d = unsafe { dir.as_ref() }
            .ok_or_else(|| Failure::new(libc::EFAULT, "a null directory"))?;
        let listing = d.listing.lock().take();
        listing
            .map(drop)
            .ok_or_else(|| Failure::new(libc::EBADF, "the directory was closed already"))
    })
}

versioned!(
    sy_mkdir,
    sy_rmdir,
    sy_unlink,
    sy_truncate,
    sy_rename,
    sy_link,
    sy_symlink,
    sy_readlink,
    sy_opendir,
    sy_readdir,
    sy_closedir,
);
