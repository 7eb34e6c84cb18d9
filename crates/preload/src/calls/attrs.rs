//! Attributes a program sets: permissions, owners, times and sizes by path.

use libc::{c_char, c_int, mode_t};
use switchyard_store::{Errno, Files, Inodes, SetAttr};

use super::{by_fd, by_path};
use crate::{conn, real, state};

/// Sets attributes of `path` (following a final symlink when `follow`).
fn set_path(path: &str, follow: bool, set: SetAttr) -> Result<(), Errno> {
    let c = conn::client()?;
    let (ino, _) = c.path_stat(path, follow)?;
    c.setattr(ino, set).map(|_| ())
}

/// Sets attributes of a served open.
fn set_fd(o: &state::Open, set: SetAttr) -> Result<(), Errno> {
    conn::for_open(o)?.setattr(o.ino, set).map(|_| ())
}

fn mode_only(mode: mode_t) -> SetAttr {
    SetAttr {
        mode: Some(mode & 0o7777),
        ..SetAttr::default()
    }
}

fn owner(uid: libc::uid_t, gid: libc::gid_t) -> SetAttr {
    SetAttr {
        uid: (uid != u32::MAX).then_some(uid),
        gid: (gid != u32::MAX).then_some(gid),
        ..SetAttr::default()
    }
}

/// `fchmodat(2)`.
///
/// # Safety
/// As `fchmodat(2)`.
#[no_mangle]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    by_path!(
        dirfd,
        path,
        |p| real::fchmodat()(dirfd, p, mode, flags),
        |s| set_path(&s, follow, mode_only(mode))
    )
}

/// `chmod(2)`.
///
/// # Safety
/// As `chmod(2)`.
#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: same contract.
    unsafe { fchmodat(libc::AT_FDCWD, path, mode, 0) }
}

/// `fchmod(2)`.
///
/// # Safety
/// As `fchmod(2)`.
#[no_mangle]
pub unsafe extern "C" fn fchmod(fd: c_int, mode: mode_t) -> c_int {
    by_fd!(
        fd,
        |o| set_fd(&o, mode_only(mode)),
        real::fchmod()(fd, mode)
    )
}

/// `fchownat(2)`.
///
/// # Safety
/// As `fchownat(2)`.
#[no_mangle]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: libc::uid_t,
    gid: libc::gid_t,
    flags: c_int,
) -> c_int {
    // SAFETY: the program passes a C string (or null).
    if flags & libc::AT_EMPTY_PATH != 0 && unsafe { super::is_empty(path) } {
        // SAFETY: same contract.
        return unsafe { fchown(dirfd, uid, gid) };
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    by_path!(
        dirfd,
        path,
        |p| real::fchownat()(dirfd, p, uid, gid, flags),
        |s| set_path(&s, follow, owner(uid, gid))
    )
}

/// `chown(2)`.
///
/// # Safety
/// As `chown(2)`.
#[no_mangle]
pub unsafe extern "C" fn chown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    // SAFETY: same contract.
    unsafe { fchownat(libc::AT_FDCWD, path, uid, gid, 0) }
}

/// `lchown(2)`.
///
/// # Safety
/// As `lchown(2)`.
#[no_mangle]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    // SAFETY: same contract.
    unsafe { fchownat(libc::AT_FDCWD, path, uid, gid, libc::AT_SYMLINK_NOFOLLOW) }
}

/// `fchown(2)`.
///
/// # Safety
/// As `fchown(2)`.
#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    by_fd!(
        fd,
        |o| set_fd(&o, owner(uid, gid)),
        real::fchown()(fd, uid, gid)
    )
}

/// The times `utimensat` sets (null: both now; `UTIME_NOW`, `UTIME_OMIT`).
///
/// # Safety
/// `times` is null or points to two timespecs.
unsafe fn times(times: *const libc::timespec) -> Result<SetAttr, Errno> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    if times.is_null() {
        return Ok(SetAttr {
            atime: Some(now),
            mtime: Some(now),
            ..SetAttr::default()
        });
    }
    // SAFETY: two timespecs by the caller's contract.
    let t = unsafe { std::slice::from_raw_parts(times, 2) };
    let one = |t: &libc::timespec| -> Result<Option<i64>, Errno> {
        match t.tv_nsec {
            libc::UTIME_OMIT => Ok(None),
            libc::UTIME_NOW => Ok(Some(now)),
            0..=999_999_999 => Ok(Some(t.tv_sec * 1_000_000_000 + t.tv_nsec)),
            _ => Err(Errno(libc::EINVAL)),
        }
    };
    Ok(SetAttr {
        atime: one(&t[0])?,
        mtime: one(&t[1])?,
        ..SetAttr::default()
    })
}

/// `utimensat(2)`.
///
/// # Safety
/// As `utimensat(2)`.
#[no_mangle]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    ts: *const libc::timespec,
    flags: c_int,
) -> c_int {
    if path.is_null() {
        // Linux: a null path sets the times of `dirfd` itself.
        // SAFETY: same contract.
        return unsafe { futimens(dirfd, ts) };
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    by_path!(
        dirfd,
        path,
        |p| real::utimensat()(dirfd, p, ts, flags),
        |s| set_path(&s, follow, times(ts)?)
    )
}

/// `futimens(3)`.
///
/// # Safety
/// As `futimens(3)`.
#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, ts: *const libc::timespec) -> c_int {
    by_fd!(fd, |o| set_fd(&o, times(ts)?), real::futimens()(fd, ts))
}

/// Timespecs from `utimes`'s timevals (null stays null).
///
/// # Safety
/// `tv` is null or points to two timevals.
unsafe fn from_timevals(tv: *const libc::timeval) -> Option<[libc::timespec; 2]> {
    if tv.is_null() {
        return None;
    }
    // SAFETY: two timevals by the caller's contract.
    let t = unsafe { std::slice::from_raw_parts(tv, 2) };
    Some([t[0], t[1]].map(|v| libc::timespec {
        tv_sec: v.tv_sec,
        tv_nsec: v.tv_usec * 1000,
    }))
}

/// `utimes(2)`.
///
/// # Safety
/// As `utimes(2)`.
#[no_mangle]
pub unsafe extern "C" fn utimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    // SAFETY: by the program's contract.
    let ts = unsafe { from_timevals(tv) };
    let p = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    // SAFETY: as utimes, with the times converted.
    unsafe { utimensat(libc::AT_FDCWD, path, p, 0) }
}

/// `utime(2)`.
///
/// # Safety
/// As `utime(2)`.
#[no_mangle]
pub unsafe extern "C" fn utime(path: *const c_char, times: *const libc::utimbuf) -> c_int {
    let ts = (!times.is_null()).then(|| {
        // SAFETY: non-null, from the program.
        let t = unsafe { &*times };
        [
            libc::timespec {
                tv_sec: t.actime,
                tv_nsec: 0,
            },
            libc::timespec {
                tv_sec: t.modtime,
                tv_nsec: 0,
            },
        ]
    });
    let p = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    // SAFETY: as utime, with the times converted.
    unsafe { utimensat(libc::AT_FDCWD, path, p, 0) }
}

/// `truncate64`.
///
/// # Safety
/// As `truncate(2)`.
#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: libc::off_t) -> c_int {
    by_path!(libc::AT_FDCWD, path, |p| real::truncate64()(p, len), |s| {
        let size = u64::try_from(len).map_err(|_| Errno(libc::EINVAL))?;
        Files::truncate(&*conn::client()?, &s, size)
    })
}

/// `truncate(2)`.
///
/// # Safety
/// As `truncate(2)`.
#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, len: libc::off_t) -> c_int {
    // SAFETY: same contract.
    unsafe { truncate64(path, len) }
}
