//! `statfs` and `statvfs`: the store's space and inode counts.

use libc::{c_char, c_int};
use switchyard_store::{Errno, Files, StatFs};

use super::{by_fd, by_path};
use crate::{conn, real};

/// The magic number served file systems report (`"SWYD"`).
const MAGIC: i64 = 0x5357_5944;

fn space() -> Result<StatFs, Errno> {
    Files::statfs(&*conn::client()?)
}

fn fill_statfs(s: StatFs, out: *mut libc::statfs64) -> Result<(), Errno> {
    if out.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: zeroed is a valid statfs64 (integers only).
    let mut f: libc::statfs64 = unsafe { std::mem::zeroed() };
    f.f_type = MAGIC;
    f.f_bsize = s.block_size as i64;
    f.f_frsize = s.block_size as i64;
    f.f_blocks = s.blocks;
    f.f_bfree = s.free_blocks;
    f.f_bavail = s.available_blocks;
    f.f_files = s.inodes;
    f.f_ffree = s.free_inodes;
    f.f_namelen = s.name_max as i64;
    // SAFETY: non-null, the program's buffer.
    unsafe { out.write(f) };
    Ok(())
}

fn fill_statvfs(s: StatFs, out: *mut libc::statvfs64) -> Result<(), Errno> {
    if out.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: zeroed is a valid statvfs64 (integers only).
    let mut f: libc::statvfs64 = unsafe { std::mem::zeroed() };
    f.f_bsize = s.block_size;
    f.f_frsize = s.block_size;
    f.f_blocks = s.blocks;
    f.f_bfree = s.free_blocks;
    f.f_bavail = s.available_blocks;
    f.f_files = s.inodes;
    f.f_ffree = s.free_inodes;
    f.f_favail = s.free_inodes;
    f.f_namemax = s.name_max;
    // SAFETY: non-null, the program's buffer.
    unsafe { out.write(f) };
    Ok(())
}

/// `statfs64`.
///
/// # Safety
/// As `statfs(2)`.
#[no_mangle]
pub unsafe extern "C" fn statfs64(path: *const c_char, out: *mut libc::statfs64) -> c_int {
    by_path!(libc::AT_FDCWD, path, |p| real::statfs64()(p, out), |_s| {
        fill_statfs(space()?, out)
    })
}

/// `statfs(2)`.
///
/// # Safety
/// As `statfs(2)`.
#[no_mangle]
pub unsafe extern "C" fn statfs(path: *const c_char, out: *mut libc::statfs64) -> c_int {
    // SAFETY: same contract.
    unsafe { statfs64(path, out) }
}

/// `fstatfs64`.
///
/// # Safety
/// As `fstatfs(2)`.
#[no_mangle]
pub unsafe extern "C" fn fstatfs64(fd: c_int, out: *mut libc::statfs64) -> c_int {
    by_fd!(
        fd,
        |_o| fill_statfs(space()?, out),
        real::fstatfs64()(fd, out)
    )
}

/// `fstatfs(2)`.
///
/// # Safety
/// As `fstatfs(2)`.
#[no_mangle]
pub unsafe extern "C" fn fstatfs(fd: c_int, out: *mut libc::statfs64) -> c_int {
    // SAFETY: same contract.
    unsafe { fstatfs64(fd, out) }
}

/// `statvfs64`.
///
/// # Safety
/// As `statvfs(3)`.
#[no_mangle]
pub unsafe extern "C" fn statvfs64(path: *const c_char, out: *mut libc::statvfs64) -> c_int {
    by_path!(libc::AT_FDCWD, path, |p| real::statvfs64()(p, out), |_s| {
        fill_statvfs(space()?, out)
    })
}

/// `statvfs(3)`.
///
/// # Safety
/// As `statvfs(3)`.
#[no_mangle]
pub unsafe extern "C" fn statvfs(path: *const c_char, out: *mut libc::statvfs64) -> c_int {
    // SAFETY: same contract.
    unsafe { statvfs64(path, out) }
}

/// `fstatvfs64`.
///
/// # Safety
/// As `fstatvfs(3)`.
#[no_mangle]
pub unsafe extern "C" fn fstatvfs64(fd: c_int, out: *mut libc::statvfs64) -> c_int {
    by_fd!(
        fd,
        |_o| fill_statvfs(space()?, out),
        real::fstatvfs64()(fd, out)
    )
}

/// `fstatvfs(3)`.
///
/// # Safety
/// As `fstatvfs(3)`.
#[no_mangle]
pub unsafe extern "C" fn fstatvfs(fd: c_int, out: *mut libc::statvfs64) -> c_int {
    // SAFETY: same contract.
    unsafe { fstatvfs64(fd, out) }
}
