//! What a file is: the `stat` family (`stat`, `lstat`, `fstat`, `fstatat` — the
//! `newfstatat` system call — `statx` and the older `__xstat` entry points) and `access`.

use libc::{c_char, c_int};
use switchyard_store::acl::{self, Acl};
use switchyard_store::{Errno, Inodes, Stat, S_IFDIR};

use super::{by_fd, by_path};
use crate::{conn, real, state};

/// The device number served files report (major 4095, a number no Linux driver uses).
pub const DEV: u64 = (0xfff << 8) | 0x53;

/// `*out` as `stat` fills it.
fn fill_stat(ino: u64, s: &Stat, out: *mut libc::stat64) -> Result<(), Errno> {
    if out.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: zeroed is a valid stat64 (integers only).
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    let a = &s.attr;
    st.st_dev = DEV;
    st.st_ino = ino;
    st.st_nlink = a.nlink.into();
    st.st_mode = a.mode;
    st.st_uid = a.uid;
    st.st_gid = a.gid;
    st.st_rdev = a.rdev();
    st.st_size = a.size as i64;
    st.st_blksize = 4096;
    st.st_blocks = (s.blocks * 8) as i64;
    (st.st_atime, st.st_atime_nsec) = split_ns(a.atime);
    (st.st_mtime, st.st_mtime_nsec) = split_ns(a.mtime);
    (st.st_ctime, st.st_ctime_nsec) = split_ns(a.ctime);
    // SAFETY: `out` is non-null and points to a stat the program gave us.
    unsafe { out.write(st) };
    Ok(())
}

fn split_ns(ns: i64) -> (i64, i64) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000))
}

/// What `path` is, following a final symlink when `follow`.
fn path_stat(path: &str, follow: bool) -> Result<(u64, Stat), Errno> {
    conn::client()?.path_stat(path, follow)
}

/// The `stat` of a served descriptor.
fn fd_stat(o: &state::Open) -> Result<(u64, Stat), Errno> {
    Ok((o.ino, Inodes::stat(&*conn::for_open(o)?, o.ino)?))
}

/// `fstatat` for every `stat` entry point: a path (relative to `dirfd`), or the descriptor
/// itself with `AT_EMPTY_PATH` and an empty path.
///
/// # Safety
/// As `fstatat(2)`.
unsafe fn stat_at(
    dirfd: c_int,
    path: *const c_char,
    out: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: the program passes a C string (or null).
    if flags & libc::AT_EMPTY_PATH != 0 && unsafe { super::is_empty(path) } {
        return by_fd!(
            dirfd,
            |o| fd_stat(&o).and_then(|(i, s)| fill_stat(i, &s, out)),
            real::fstatat64()(dirfd, path, out, flags)
        );
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    by_path!(
        dirfd,
        path,
        |p| real::fstatat64()(dirfd, p, out, flags),
        |s| path_stat(&s, follow).and_then(|(i, st)| fill_stat(i, &st, out))
    )
}

/// `stat(2)`.
///
/// # Safety
/// As `stat(2)`.
#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}

/// `stat64`.
///
/// # Safety
/// As `stat(2)`.
#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}

/// `lstat(2)`.
///
/// # Safety
/// As `lstat(2)`.
#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}

/// `lstat64`.
///
/// # Safety
/// As `lstat(2)`.
#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}

/// `fstat(2)`.
///
/// # Safety
/// As `fstat(2)`.
#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, out: *mut libc::stat64) -> c_int {
    by_fd!(
        fd,
        |o| fd_stat(&o).and_then(|(i, s)| fill_stat(i, &s, out)),
        real::fstat64()(fd, out)
    )
}

/// `fstat64`.
///
/// # Safety
/// As `fstat(2)`.
#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, out: *mut libc::stat64) -> c_int {
    // SAFETY: same contract.
    unsafe { fstat(fd, out) }
}

/// `fstatat(2)` (the `newfstatat` system call).
///
/// # Safety
/// As `fstatat(2)`.
#[no_mangle]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    out: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: same contract.
    unsafe { stat_at(dirfd, path, out, flags) }
}

/// `fstatat64`.
///
/// # Safety
/// As `fstatat(2)`.
#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    out: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: same contract.
    unsafe { stat_at(dirfd, path, out, flags) }
}

/// `__xstat` (programs built before glibc 2.33 call these).
///
/// # Safety
/// As `stat(2)`.
#[no_mangle]
pub unsafe extern "C" fn __xstat(
    _ver: c_int,
    path: *const c_char,
    out: *mut libc::stat64,
) -> c_int {
    // SAFETY: same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}

/// `__xstat64`.
///
/// # Safety
/// As `stat(2)`.
#[no_mangle]
pub unsafe extern "C" fn __xstat64(
    _ver: c_int,
    path: *const c_char,
    out: *mut libc::stat64,
) -> c_int {
    // SAFETY: same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}

/// `__lxstat`.
///
/// # Safety
/// As `lstat(2)`.
#[no_mangle]
pub unsafe extern "C" fn __lxstat(
    _ver: c_int,
    path: *const c_char,
    out: *mut libc::stat64,
) -> c_int {
    // SAFETY: same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}

/// `__lxstat64`.
///
/// # Safety
/// As `lstat(2)`.
#[no_mangle]
pub unsafe extern "C" fn __lxstat64(
    _ver: c_int,
    path: *const c_char,
    out: *mut libc::stat64,
) -> c_int {
    // SAFETY: same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}

/// `__fxstat`.
///
/// # Safety
/// As `fstat(2)`.
#[no_mangle]
pub unsafe extern "C" fn __fxstat(_ver: c_int, fd: c_int, out: *mut libc::stat64) -> c_int {
    // SAFETY: same contract.
    unsafe { fstat(fd, out) }
}

/// `__fxstat64`.
///
/// # Safety
/// As `fstat(2)`.
#[no_mangle]
pub unsafe extern "C" fn __fxstat64(_ver: c_int, fd: c_int, out: *mut libc::stat64) -> c_int {
    // SAFETY: same contract.
    unsafe { fstat(fd, out) }
}

/// `__fxstatat`.
///
/// # Safety
/// As `fstatat(2)`.
#[no_mangle]
pub unsafe extern "C" fn __fxstatat(
    _ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    out: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: same contract.
    unsafe { stat_at(dirfd, path, out, flags) }
}

/// `__fxstatat64`.
///
/// # Safety
/// As `fstatat(2)`.
#[no_mangle]
pub unsafe extern "C" fn __fxstatat64(
    _ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    out: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: same contract.
    unsafe { stat_at(dirfd, path, out, flags) }
}

/// `*out` as `statx` fills it (the basic fields; no birth time).
fn fill_statx(ino: u64, s: &Stat, out: *mut libc::statx) -> Result<(), Errno> {
    if out.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: zeroed is a valid statx (integers only).
    let mut x: libc::statx = unsafe { std::mem::zeroed() };
    let a = &s.attr;
    let ts = |ns: i64| {
        let (sec, nsec) = split_ns(ns);
        // SAFETY: zeroed is a valid statx_timestamp (integers only).
        let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
        t.tv_sec = sec;
        t.tv_nsec = nsec as u32;
        t
    };
    x.stx_mask = libc::STATX_BASIC_STATS;
    x.stx_blksize = 4096;
    x.stx_nlink = a.nlink;
    x.stx_uid = a.uid;
    x.stx_gid = a.gid;
    x.stx_mode = a.mode as u16;
    x.stx_ino = ino;
    x.stx_size = a.size;
    x.stx_blocks = s.blocks * 8;
    x.stx_atime = ts(a.atime);
    x.stx_mtime = ts(a.mtime);
    x.stx_ctime = ts(a.ctime);
    x.stx_rdev_major = libc::major(a.rdev());
    x.stx_rdev_minor = libc::minor(a.rdev());
    x.stx_dev_major = libc::major(DEV);
    x.stx_dev_minor = libc::minor(DEV);
    // SAFETY: `out` is non-null and points to a statx the program gave us.
    unsafe { out.write(x) };
    Ok(())
}

/// `statx(2)`.
///
/// # Safety
/// As `statx(2)`.
#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: libc::c_uint,
    out: *mut libc::statx,
) -> c_int {
    // SAFETY: the program passes a C string (or null).
    if flags & libc::AT_EMPTY_PATH != 0 && unsafe { super::is_empty(path) } {
        return by_fd!(
            dirfd,
            |o| fd_stat(&o).and_then(|(i, s)| fill_statx(i, &s, out)),
            real::statx()(dirfd, path, flags, mask, out)
        );
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    by_path!(
        dirfd,
        path,
        |p| real::statx()(dirfd, p, flags, mask, out),
        |s| path_stat(&s, follow).and_then(|(i, st)| fill_statx(i, &st, out))
    )
}

/// Whether the caller may access inode `ino` (attributes `s`) as `mode` (`R_OK`, `W_OK`,
/// `X_OK` bits), by the real or effective ids and the supplementary groups, through its access
/// ACL where it has one, as the kernel checks a mounted file.
fn may_access(ino: u64, s: &Stat, mode: c_int, effective: bool) -> Result<(), Errno> {
    if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return Err(Errno(libc::EINVAL));
    }
    // SAFETY: the id calls have no preconditions.
    let (uid, gid) = unsafe {
        if effective {
            (libc::geteuid(), libc::getegid())
        } else {
            (libc::getuid(), libc::getgid())
        }
    };
    let a = &s.attr;
    let bits = (mode & 7) as u32;
    let ok = if uid == 0 {
        // Root may read and write anything, and run what anyone may run (or any directory).
        bits & 1 == 0 || a.mode & 0o111 != 0 || a.kind() == S_IFDIR
    } else {
        let mut groups = vec![0 as libc::gid_t; 256];
        // SAFETY: `groups` holds as many ids as the count says.
        let n = unsafe { libc::getgroups(groups.len() as c_int, groups.as_mut_ptr()) };
        groups.truncate(n.max(0) as usize);
        groups.push(gid);
        // Only a caller who is not the owner meets an ACL's other entries.
        let acl = (uid != a.uid)
            .then(|| conn::client().ok()?.getxattr(ino, acl::ACCESS).ok())
            .flatten()
            .and_then(|v| Acl::decode(&v).ok().flatten());
        acl::permits(a.mode, (a.uid, a.gid), acl.as_ref(), uid, &groups, bits)
    };
    if ok {
        Ok(())
    } else {
        Err(Errno(libc::EACCES))
    }
}

/// `faccessat(2)`.
///
/// # Safety
/// As `faccessat(2)`.
#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    let effective = flags & libc::AT_EACCESS != 0;
    by_path!(
        dirfd,
        path,
        |p| real::faccessat()(dirfd, p, mode, flags),
        |s| path_stat(&s, follow).and_then(|(ino, st)| may_access(ino, &st, mode, effective))
    )
}

/// `access(2)`.
///
/// # Safety
/// As `access(2)`.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { faccessat(libc::AT_FDCWD, path, mode, 0) }
}

/// `euidaccess(3)`.
///
/// # Safety
/// As `euidaccess(3)`.
#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { faccessat(libc::AT_FDCWD, path, mode, libc::AT_EACCESS) }
}

/// `eaccess(3)`.
///
/// # Safety
/// As `euidaccess(3)`.
#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { faccessat(libc::AT_FDCWD, path, mode, libc::AT_EACCESS) }
}
