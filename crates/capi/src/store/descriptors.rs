//! Descriptors: opening and closing files, reading, writing, seeking, syncing, truncating
//! and asking what a file (or the store) is.

use std::ffi::{c_char, c_void};

use switchyard_store::{Errno, Fd, Files, OpenFlags, Whence};
use switchyard_store::{S_IFDIR, S_IFLNK};

use super::{
    bad_fd_first, buffer, buffer_mut, descriptor, offset, put, store, sy_attr, sy_space, sy_store,
};
use crate::error::{guard, status, text, Failure};
use crate::handle::handle;

/// The store's open flags for the `O_*` bits of `flags`, or `-EINVAL`/`-EOPNOTSUPP`.
fn open_flags(flags: i32) -> Result<OpenFlags, Failure> {
    let (read, write) = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => (true, false),
        libc::O_WRONLY => (false, true),
        libc::O_RDWR => (true, true),
        _ => return Err(Failure::new(libc::EINVAL, "open: bad access mode")),
    };
    if flags & (libc::O_TMPFILE | libc::O_PATH) != 0 {
        return Err(Failure::new(
            libc::EOPNOTSUPP,
            "open: O_TMPFILE and O_PATH are not supported",
        ));
    }
    Ok(OpenFlags {
        read,
        write,
        create: flags & libc::O_CREAT != 0,
        exclusive: flags & libc::O_EXCL != 0,
        truncate: flags & libc::O_TRUNC != 0,
        append: flags & libc::O_APPEND != 0,
    })
}

/// Opens `path` with `flags` (`O_RDONLY`, `O_WRONLY` or `O_RDWR`, and `O_CREAT`, `O_EXCL`,
/// `O_TRUNC`, `O_APPEND`, `O_DIRECTORY`, `O_NOFOLLOW`; `O_SYNC` and `O_DSYNC`: every
/// `sy_write` and `sy_pwrite` of the descriptor returns synced, as after `sy_fsync`;
/// `O_CLOEXEC`, `O_DIRECT` and `O_NOATIME` change nothing) and `mode` for a new file: a
/// descriptor (≥ 0) or a negative errno.
///
/// # Safety
/// `s` is a live store or null; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sy_open(
    s: *const sy_store,
    path: *const c_char,
    flags: i32,
    mode: u32,
) -> i32 {
    guard(
        || {
            // SAFETY: the caller's promises, forwarded.
            let (f, path) = unsafe { (store(s)?, text(path, "path")?) };
            let how = open_flags(flags)?;
            if flags & (libc::O_DIRECTORY | libc::O_NOFOLLOW) != 0 {
                match f.lstat(path) {
                    Ok(a) if flags & libc::O_NOFOLLOW != 0 && a.kind() == S_IFLNK => {
                        return Err(Errno(libc::ELOOP).into())
                    }
                    Ok(_) if flags & libc::O_DIRECTORY != 0 && f.stat(path)?.kind() != S_IFDIR => {
                        return Err(Errno::ENOTDIR.into())
                    }
                    _ => {}
                }
            }
            let fd = f.open(path, how, mode & 0o7777)?;
            if flags & (libc::O_SYNC | libc::O_DSYNC) != 0 {
                // SAFETY: the caller's promise, forwarded (`store` above checked it).
                unsafe { handle(s, "store") }?.synced.lock().insert(fd.0);
            }
            Ok(fd)
        },
        |fd| i64::from(fd.0),
    ) as i32
}

/// Closes a descriptor: 0 or a negative errno.
///
/// # Safety
/// `s` is a live store or null.
#[no_mangle]
pub unsafe extern "C" fn sy_close(s: *const sy_store, fd: i32) -> i32 {
    status(|| {
        let fd = descriptor(fd)?;
        // SAFETY: the caller's promise, forwarded.
        unsafe { store(s) }?.close(fd)?;
        // SAFETY: as above.
        unsafe { handle(s, "store") }?.synced.lock().remove(&fd.0);
        Ok(())
    })
}

/// Syncs after a write of `fd` when it was opened `O_SYNC` or `O_DSYNC`.
///
/// # Safety
/// `s` is a live store or null.
unsafe fn synced(s: *const sy_store, f: &dyn Files, fd: Fd) -> Result<(), Failure> {
    // SAFETY: the caller's promise, forwarded.
    if unsafe { handle(s, "store") }?.synced.lock().contains(&fd.0) {
        f.fsync(fd)?;
    }
    Ok(())
}

/// Reads up to `len` bytes at the descriptor's offset into `buf` and advances it: the bytes
/// read (0 at the end) or a negative errno.
///
/// # Safety
/// `s` is a live store or null; `buf` writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn sy_read(s: *const sy_store, fd: i32, buf: *mut c_void, len: usize) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promise, forwarded.
            let (f, fd) = (unsafe { store(s) }?, descriptor(fd)?);
            let b = buffer_mut(buf, len).map_err(|e| bad_fd_first(&*f, fd, e))?;
            Ok(f.read(fd, b)?)
        },
        |n| n as i64,
    )
}

/// Reads up to `len` bytes at `off` without moving the descriptor's offset.
///
/// # Safety
/// As [`sy_read`].
#[no_mangle]
pub unsafe extern "C" fn sy_pread(
    s: *const sy_store,
    fd: i32,
    buf: *mut c_void,
    len: usize,
    off: i64,
) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promise, forwarded.
            let (f, fd) = (unsafe { store(s) }?, descriptor(fd)?);
            let off = offset(off).map_err(|e| bad_fd_first(&*f, fd, e))?;
            let b = buffer_mut(buf, len).map_err(|e| bad_fd_first(&*f, fd, e))?;
            Ok(f.pread(fd, b, off)?)
        },
        |n| n as i64,
    )
}

/// Writes `len` bytes from `buf` at the descriptor's offset (or the end, for `O_APPEND`) and
/// advances it: the bytes written (all of them) or a negative errno. Atomic when it returns,
/// and durable as [`sy_fsync`] says (synced, for an `O_SYNC` or `O_DSYNC` descriptor).
///
/// # Safety
/// `s` is a live store or null; `buf` readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn sy_write(
    s: *const sy_store,
    fd: i32,
    buf: *const c_void,
    len: usize,
) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promise, forwarded.
            let (f, fd) = (unsafe { store(s) }?, descriptor(fd)?);
            let b = buffer(buf, len).map_err(|e| bad_fd_first(&*f, fd, e))?;
            let n = f.write(fd, b)?;
            // SAFETY: the caller's promise, forwarded.
            unsafe { synced(s, &*f, fd) }?;
            Ok(n)
        },
        |n| n as i64,
    )
}

/// Writes `len` bytes at `off` without moving the descriptor's offset (`O_APPEND` still
/// appends, as on Linux).
///
/// # Safety
/// As [`sy_write`].
#[no_mangle]
pub unsafe extern "C" fn sy_pwrite(
    s: *const sy_store,
    fd: i32,
    buf: *const c_void,
    len: usize,
    off: i64,
) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promise, forwarded.
            let (f, fd) = (unsafe { store(s) }?, descriptor(fd)?);
            let off = offset(off).map_err(|e| bad_fd_first(&*f, fd, e))?;
            let b = buffer(buf, len).map_err(|e| bad_fd_first(&*f, fd, e))?;
            let n = f.pwrite(fd, b, off)?;
            // SAFETY: the caller's promise, forwarded.
            unsafe { synced(s, &*f, fd) }?;
            Ok(n)
        },
        |n| n as i64,
    )
}

/// Moves the descriptor's offset (`whence`: `SEEK_SET`, `SEEK_CUR`, `SEEK_END`): the new
/// offset or a negative errno.
///
/// # Safety
/// `s` is a live store or null.
#[no_mangle]
pub unsafe extern "C" fn sy_lseek(s: *const sy_store, fd: i32, off: i64, whence: i32) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promise, forwarded.
            let (f, fd) = (unsafe { store(s) }?, descriptor(fd)?);
            let w = match whence {
                libc::SEEK_SET => Whence::Set,
                libc::SEEK_CUR => Whence::Cur,
                libc::SEEK_END => Whence::End,
                _ => return Err(bad_fd_first(&*f, fd, Errno::EINVAL.into())),
            };
            Ok(f.lseek(fd, off, w)?)
        },
        |n| n as i64,
    )
}

/// Makes the open file durable. On a store file on a disk file system (page-cache media) a
/// write survives a crash of the process when it returns, and a power cut once this (or the
/// store's periodic sync, or `sy_sync`) returns: it syncs every write that returned. On
/// persistent memory every write is durable when it returns, and this only checks the
/// descriptor. 0 or a negative errno.
///
/// # Safety
/// `s` is a live store or null.
#[no_mangle]
pub unsafe extern "C" fn sy_fsync(s: *const sy_store, fd: i32) -> i32 {
    // SAFETY: the caller's promise, forwarded.
    status(|| Ok(unsafe { store(s) }?.fsync(descriptor(fd)?)?))
}

/// Makes every change to the store that returned durable, whatever file it touched (as
/// `syncfs(2)`): for a served store, the server syncs it. 0 or a negative errno.
///
/// # Safety
/// `s` is a live store or null.
#[no_mangle]
pub unsafe extern "C" fn sy_sync(s: *const sy_store) -> i32 {
    // SAFETY: the caller's promise, forwarded.
    status(|| Ok(unsafe { store(s) }?.sync()?))
}

/// Sets an open file's size.
///
/// # Safety
/// `s` is a live store or null.
#[no_mangle]
pub unsafe extern "C" fn sy_ftruncate(s: *const sy_store, fd: i32, size: i64) -> i32 {
    status(|| {
        // SAFETY: the caller's promise, forwarded.
        let (f, fd) = (unsafe { store(s) }?, descriptor(fd)?);
        let size = offset(size).map_err(|e| bad_fd_first(&*f, fd, e))?;
        Ok(f.ftruncate(fd, size)?)
    })
}

/// Attributes of an open file into `*out`.
///
/// # Safety
/// `s` is a live store or null; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn sy_fstat(s: *const sy_store, fd: i32, out: *mut sy_attr) -> i32 {
    // SAFETY: the caller's promise, forwarded.
    status(|| put(out, unsafe { store(s) }?.fstat(descriptor(fd)?)?.into()))
}

/// Attributes of `path` (following a symlink) into `*out`.
///
/// # Safety
/// `s` is a live store or null; `path` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn sy_stat(
    s: *const sy_store,
    path: *const c_char,
    out: *mut sy_attr,
) -> i32 {
    status(|| {
        // SAFETY: the caller's promises, forwarded.
        let (f, path) = unsafe { (store(s)?, text(path, "path")?) };
        put(out, f.stat(path)?.into())
    })
}

/// Attributes of `path` (a symlink itself) into `*out`.
///
/// # Safety
/// As [`sy_stat`].
#[no_mangle]
pub unsafe extern "C" fn sy_lstat(
    s: *const sy_store,
    path: *const c_char,
    out: *mut sy_attr,
) -> i32 {
    status(|| {
        // SAFETY: the caller's promises, forwarded.
        let (f, path) = unsafe { (store(s)?, text(path, "path")?) };
        put(out, f.lstat(path)?.into())
    })
}

/// Space and inode counts into `*out`.
///
/// # Safety
/// `s` is a live store or null; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn sy_statfs(s: *const sy_store, out: *mut sy_space) -> i32 {
    status(|| {
        // SAFETY: the caller's promise, forwarded.
        let st = unsafe { store(s) }?.statfs()?;
        put(
            out,
            sy_space {
                block_size: st.block_size,
                blocks: st.blocks,
                free_blocks: st.free_blocks,
                available_blocks: st.available_blocks,
                inodes: st.inodes,
                free_inodes: st.free_inodes,
                name_max: st.name_max,
            },
        )
    })
}

versioned!(
    sy_open,
    sy_close,
    sy_read,
    sy_pread,
    sy_write,
    sy_pwrite,
    sy_lseek,
    sy_fsync,
    sy_sync,
    sy_ftruncate,
    sy_fstat,
    sy_stat,
    sy_lstat,
    sy_statfs,
);
