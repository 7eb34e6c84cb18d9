//! `F_SETLKW` on inodes that keep record locks themselves (clients of one served store): a
//! lock another owner holds is waited for on a thread of its own, never on a request
//! thread. Waiting on the request thread, two waiters took both of a mount's request
//! threads, so the holder's unlock (a request too) was never served and every process on
//! the mount hung (stress-ng's lockf stressor on a remote mount).
//!
//! A wait ends when the lock is set (or the inodes refuse it for another reason than a
//! conflict), or when its owner's file is flushed meanwhile (a close, or the kernel giving up
//! on a waiter that was killed): then `EINTR`, and a lock set in that window is dropped again,
//! so that no lock outlives its owner's close.
//!
//! The kernel's word that a waiter was interrupted (`FUSE_INTERRUPT`) does not reach the
//! file system through the FUSE library, so the wait watches the process itself: a signal it
//! would take (SIGKILL included) ends the wait with `EINTR`, as it ends `F_SETLKW` on the
//! kernel's own locks; so does the process's end. (A killed waiter otherwise stayed in its
//! system call for good: stress-ng's lockf stressor kills its child, which waited for a lock
//! its parent held, then waits for it.)
//!
//! A wait that would close a cycle of processes of this mount, each waiting for a lock the
//! next holds, is refused with `EDEADLK`, as the kernel refuses it for the locks it keeps
//! itself (stress-ng's lockf stressor counts on it: its two processes lock random ranges of
//! one file, and without the check both waited forever). The holder of a conflicting lock is
//! known by its process id. A cycle through processes of other mounts is the inodes' to see:
//! every try of a wait tells them the owner waits (`Inodes::set_lock`), and a served store's
//! server answers `EDEADLK` for a cycle through any of its clients.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fuser::ReplyEmpty;
use parking_lot::Mutex;
use switchyard_store::{Errno, Inodes, RecordLock};

use super::kernel::empty;

/// The first pause between tries; each doubles, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_micros(200);
/// The longest pause between tries.
const MAX_PAUSE: Duration = Duration::from_millis(20);

/// Waits in progress, by (inode, lock owner): the owner's flushes so far, and its waiters.
#[derive(Default)]
pub(super) struct Waits {
    by_owner: Mutex<HashMap<(u64, u64), (u64, usize)>>,
    /// By process id: the (inode, owner, lock) it waits for.
    by_pid: Mutex<HashMap<u32, (u64, u64, RecordLock)>>,
}

/// The longest chain of waiting processes followed looking for a cycle.
const CHAIN: usize = 64;

impl Waits {
    /// Registers `lock.pid` as waiting for `lock` on `ino` unless that closes a cycle of
    /// waiting processes of this mount: `EDEADLK` then.
    fn enter<I: Inodes>(
        &self,
        inodes: &I,
        ino: u64,
        owner: u64,
        lock: RecordLock,
    ) -> Result<(), Errno> {
        let mut by_pid = self.by_pid.lock();
        let (mut i, mut o, mut l) = (ino, owner, lock);
        for _ in 0..CHAIN {
            let holder = inodes.test_lock(i, o, l)?;
            if holder.kind == libc::F_UNLCK {
                break;
            }
            if holder.pid == lock.pid {
                return Err(Errno(libc::EDEADLK));
            }
            match by_pid.get(&holder.pid) {
                Some(&next) => (i, o, l) = next,
                None => break,
            }
        }
        by_pid.insert(lock.pid, (ino, owner, lock));
        Ok(())
    }

    /// `pid` waits no more.
    fn leave(&self, pid: u32) {
        self.by_pid.lock().remove(&pid);
    }

    /// A wait of `key` begins: the flushes of its owner so far.
    fn begin(&self, key: (u64, u64)) -> u64 {
        let mut m = self.by_owner.lock();
        let e = m.entry(key).or_default();
        e.1 += 1;
        e.0
    }

    /// Flushes of `key`'s owner so far.
    fn flushes(&self, key: (u64, u64)) -> u64 {
        self.by_owner.lock().get(&key).map_or(0, |e| e.0)
    }

    /// A wait of `key` ended.
    fn end(&self, key: (u64, u64)) {
        let mut m = self.by_owner.lock();
        if let Some(e) = m.get_mut(&key) {
            e.1 -= 1;
            if e.1 == 0 {
                m.remove(&key);
            }
        }
    }

    /// `owner` flushed `ino` (its locks there are gone): its waits there end.
    pub(super) fn flushed(&self, ino: u64, owner: u64) {
        if let Some(e) = self.by_owner.lock().get_mut(&(ino, owner)) {
            e.0 += 1;
        }
    }
}

/// Sets `lock` for `owner` on `ino` and replies: at once, or, given `waits` (`F_SETLKW`) and
/// a conflicting lock, once no other owner's lock conflicts, from a thread of its own.
pub(super) fn set<I: Inodes>(
    inodes: &Arc<I>,
    waits: Option<Arc<Waits>>,
    ino: u64,
    owner: u64,
    lock: RecordLock,
    reply: ReplyEmpty,
) {
    match (inodes.set_lock(ino, owner, lock, waits.is_some()), waits) {
        (Err(e), Some(waits)) if e.0 == libc::EAGAIN => {
            wait(inodes.clone(), waits, ino, owner, lock, reply)
        }
        (r, _) => empty(reply, r),
    }
}

/// Sets `lock` for `owner` on `ino` once no other owner's lock conflicts, on a thread of its
/// own, and then replies.
fn wait<I: Inodes>(
    inodes: Arc<I>,
    waits: Arc<Waits>,
    ino: u64,
    owner: u64,
    lock: RecordLock,
    reply: ReplyEmpty,
) {
    if let Err(e) = waits.enter(&*inodes, ino, owner, lock) {
        return empty(reply, Err(e));
    }
    let key = (ino, owner);
    let flushes = waits.begin(key);
    let w = waits.clone();
    let spawned = std::thread::Builder::new()
        .name("lock-wait".into())
        .spawn(move || {
            let r = wait_here(&*inodes, &w, key, flushes, lock);
            w.end(key);
            w.leave(lock.pid);
            empty(reply, r);
        });
    if spawned.is_err() {
        // The closure, and the reply in it, are dropped: the kernel is told EIO.
        waits.end(key);
        waits.leave(lock.pid);
    }
}

fn wait_here<I: Inodes>(
    inodes: &I,
    waits: &Waits,
    key: (u64, u64),
    flushes: u64,
    lock: RecordLock,
) -> Result<(), Errno> {
    let (ino, owner) = key;
    let mut pause = FIRST_PAUSE;
    loop {
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE);
        if waits.flushes(key) != flushes || signalled(lock.pid) {
            return Err(Errno(libc::EINTR));
        }
        match inodes.set_lock(ino, owner, lock, true) {
            Err(e) if e.0 == libc::EAGAIN => continue,
            Ok(()) if waits.flushes(key) != flushes => {
                let unlock = RecordLock {
                    kind: libc::F_UNLCK,
                    ..lock
                };
                let _ = inodes.set_lock(ino, owner, unlock, false);
                return Err(Errno(libc::EINTR));
            }
            r => return r,
        }
    }
}

/// Whether process `pid` has a signal pending that it neither blocks nor ignores (SIGKILL
/// always counts), or is gone: its wait for a lock is over.
fn signalled(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let mask = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let pending = mask("SigPnd:") | mask("ShdPnd:");
    let kill = 1u64 << (libc::SIGKILL - 1);
    pending & kill != 0 || pending & !mask("SigBlk:") & !mask("SigIgn:") != 0
}

#[cfg(test)]
mod tests {
    use super::signalled;

    #[test]
    fn a_process_without_pending_signals_is_not_signalled_and_a_gone_one_is() {
        assert!(!signalled(std::process::id()));
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        assert!(signalled(pid));
    }
}
