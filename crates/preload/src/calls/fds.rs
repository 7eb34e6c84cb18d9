//! Descriptor numbers and flags: `dup`, `dup2`, `dup3`, `fcntl` (record locks included),
//! `flock` and `ioctl`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use libc::{c_int, c_ulong, c_void};
use switchyard_store::{Errno, Inodes, RecordLock};

use super::{close_served, reserve};
use crate::state::{self, Open, Slot, STATE};
use crate::{conn, real, refuse, serve, Ret};

/// Status flags `F_SETFL` may change.
const SETTABLE: c_int = libc::O_APPEND | libc::O_NONBLOCK | libc::O_DIRECT | libc::O_NOATIME;

/// Serves `fd` (a reserved number) with `open`; whatever `fd` served before is closed.
fn serve_as(fd: c_int, open: Arc<Open>, cloexec: bool) {
    if let Some(old) = state::insert(fd, Slot { open, cloexec }) {
        state::release_locks(&old);
    }
}

fn dup_from(open: Arc<Open>, min: c_int, cloexec: bool) -> Result<c_int, Errno> {
    let fd = reserve(min)?;
    serve_as(fd, open, cloexec);
    Ok(fd)
}

/// `dup3` with `old` served: `new` becomes a reserved number serving the same open.
fn dup_onto(old: c_int, open: Arc<Open>, new: c_int, cloexec: bool) -> Result<c_int, Errno> {
    if !(0..state::MAX_FD).contains(&new) {
        return Err(Errno(libc::EBADF));
    }
    // SAFETY: `old` is our reserved descriptor; `new` is the program's number to replace.
    if unsafe { real::dup3()(old, new, libc::O_CLOEXEC) } < 0 {
        return Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EBADF),
        ));
    }
    serve_as(new, open, cloexec);
    crate::stdio::rebind_standard(new);
    Ok(new)
}

/// After the kernel put one of the program's descriptors at `new`: the open it served is
/// closed.
fn unserve(new: c_int) {
    if let Some(o) = state::get(new) {
        let _ = serve(|| {
            drop(state::remove(new));
            state::release_locks(&o);
            Ok(())
        });
    }
}

/// `dup(2)`.
///
/// # Safety
/// As `dup(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    super::by_fd!(fd, |o| dup_from(o, 0, false), real::dup()(fd))
}

/// `dup3(2)`.
///
/// # Safety
/// As `dup3(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old == new || flags & !libc::O_CLOEXEC != 0 {
        crate::set_errno(Errno(libc::EINVAL));
        return -1;
    }
    match state::get(old) {
        Some(o) => serve(|| dup_onto(old, o, new, flags & libc::O_CLOEXEC != 0)).ret(),
        None => {
            // SAFETY: the program's arguments passed on.
            let r = unsafe { real::dup3()(old, new, flags) };
            if r >= 0 {
                unserve(new);
            }
            r
        }
    }
}

/// `dup2(2)`.
///
/// # Safety
/// As `dup2(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    match state::get(old) {
        Some(_) if old == new => new,
        Some(o) => serve(|| dup_onto(old, o, new, false)).ret(),
        None => {
            // SAFETY: the program's arguments passed on.
            let r = unsafe { real::dup2()(old, new) };
            if r >= 0 && old != new {
                unserve(new);
            }
            r
        }
    }
}

/// A `struct flock`'s range as the store's lock: first and last byte.
fn range(o: &Open, fl: &libc::flock) -> Result<(u64, u64), Errno> {
    let base: i64 = match fl.l_whence as c_int {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => o.offset.lock().get() as i64,
        libc::SEEK_END => Inodes::stat(&*conn::for_open(o)?, o.ino)?.attr.size as i64,
        _ => return Err(Errno(libc::EINVAL)),
    };
    let start = base.checked_add(fl.l_start).ok_or(Errno(libc::EOVERFLOW))?;
    let (first, last) = match fl.l_len {
        0 => (start, i64::MAX),
        n if n > 0 => (
            start,
            start.checked_add(n - 1).ok_or(Errno(libc::EOVERFLOW))?,
        ),
        n => (start.checked_add(n).ok_or(Errno(libc::EINVAL))?, start - 1),
    };
    if first < 0 {
        return Err(Errno(libc::EINVAL));
    }
    let last = if last == i64::MAX {
        u64::MAX
    } else {
        last as u64
    };
    Ok((first as u64, last))
}

/// `F_GETLK`, `F_SETLK` and `F_SETLKW` on a served file, held by the server for this
/// process (so processes on other connections are locked out).
fn lock(o: &Open, cmd: c_int, fl: *mut libc::flock) -> Result<c_int, Errno> {
    if fl.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: non-null, the program's struct flock.
    let f = unsafe { &mut *fl };
    let kind = f.l_type as c_int;
    if ![libc::F_RDLCK, libc::F_WRLCK, libc::F_UNLCK].contains(&kind) {
        return Err(Errno(libc::EINVAL));
    }
    let (start, end) = range(o, f)?;
    let c = conn::for_open(o)?;
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let want = RecordLock {
        start,
        end,
        kind,
        pid,
    };
    let owner = conn::lock_owner();
    if cmd == libc::F_GETLK {
        let l = c.test_lock(o.ino, owner, want)?;
        f.l_type = l.kind as i16;
        if l.kind != libc::F_UNLCK {
            f.l_whence = libc::SEEK_SET as i16;
            f.l_start = l.start as i64;
            f.l_len = if l.end == u64::MAX {
                0
            } else {
                (l.end - l.start + 1) as i64
            };
            f.l_pid = l.pid as i32;
        }
        return Ok(0);
    }
    if (kind == libc::F_RDLCK && !o.readable()) || (kind == libc::F_WRLCK && !o.writable()) {
        return Err(Errno(libc::EBADF));
    }
    let mut wait = Duration::from_micros(50);
    loop {
        match c.set_lock(o.ino, owner, want, cmd == libc::F_SETLKW) {
            Err(e) if e.0 == libc::EAGAIN && cmd == libc::F_SETLKW => {
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_millis(20));
            }
            r => {
                if r.is_ok() && kind != libc::F_UNLCK {
                    state::note_lock(o.ino);
                }
                return r.map(|()| 0);
            }
        }
    }
}

fn fcntl_served(fd: c_int, o: Arc<Open>, cmd: c_int, arg: usize) -> Result<c_int, Errno> {
    match cmd {
        libc::F_GETFD => {
            let st = STATE.read();
            let s = st.fds.get(&fd).ok_or(Errno(libc::EBADF))?;
            Ok(if s.cloexec { libc::FD_CLOEXEC } else { 0 })
        }
        libc::F_SETFD => {
            let mut st = STATE.write();
            let s = st.fds.get_mut(&fd).ok_or(Errno(libc::EBADF))?;
            s.cloexec = arg as c_int & libc::FD_CLOEXEC != 0;
            Ok(0)
        }
        libc::F_GETFL => Ok(o.flags.load(Ordering::Relaxed) | libc::O_LARGEFILE),
        libc::F_SETFL => {
            let new = arg as c_int & SETTABLE;
            let _ = o
                .flags
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                    Some((f & !SETTABLE) | new)
                });
            Ok(0)
        }
        libc::F_DUPFD => dup_from(o, arg as c_int, false),
        libc::F_DUPFD_CLOEXEC => dup_from(o, arg as c_int, true),
        libc::F_GETLK | libc::F_SETLK | libc::F_SETLKW => lock(&o, cmd, arg as *mut libc::flock),
        libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW => {
            Err(refuse("fcntl with open file description locks"))
        }
        _ => Err(Errno(libc::EINVAL)),
    }
}

/// `fcntl(2)`.
///
/// # Safety
/// As `fcntl(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    super::by_fd!(
        fd,
        |o| fcntl_served(fd, o, cmd, arg),
        real::fcntl64()(fd, cmd, arg)
    )
}

/// `fcntl64`.
///
/// # Safety
/// As `fcntl(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: same contract.
    unsafe { fcntl(fd, cmd, arg) }
}

/// `flock(2)`: refused on served files (their locks are POSIX record locks, which `flock`'s
/// must not interact with).
///
/// # Safety
/// As `flock(2)`.
#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    super::by_fd!(
        fd,
        |_o| Err::<(), _>(refuse("flock")),
        real::flock()(fd, op)
    )
}

/// `ioctl(2)`: a served file knows no requests (`ENOTTY`).
///
/// # Safety
/// As `ioctl(2)`.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    super::by_fd!(
        fd,
        |_o| Err::<(), _>(Errno(libc::ENOTTY)),
        real::ioctl()(fd, req, arg)
    )
}

/// Closes a served descriptor by number (for streams and directory streams).
pub fn close_fd(fd: c_int) -> Result<(), Errno> {
    match state::served(fd) {
        Some(o) => close_served(fd, o),
        None => Err(Errno(libc::EBADF)),
    }
}
