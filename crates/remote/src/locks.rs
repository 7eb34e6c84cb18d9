//! POSIX record locks (`fcntl` `F_SETLK`, `F_SETLKW`, `F_GETLK`) held by the clients of one
//! server, so processes on different mounts of a served store lock each other out.
//!
//! A lock belongs to a *holder*: a client connection and the lock owner the client names
//! (the kernel's per-process owner on a mount). As POSIX says, a holder's locks never conflict
//! with each other: setting a lock over a range replaces whatever the holder held there
//! (splitting its older locks), and unlocking a range removes just that range. Another
//! holder's lock conflicts when the ranges overlap and either is a write lock. Locks live in
//! the server's memory only: they go when their client's connection goes, and a restarted
//! server starts with none (as NFS's lock manager after a reboot).
//!
//! `F_SETLKW` waits on the client, which asks again until the lock is free; a request that
//! says so ([`Locks::set_waiting`]) makes its holder a waiter for [`WAITING`]. A wait that
//! would close a cycle of holders, each waiting for a lock the next holds, is refused with
//! `EDEADLK`, as the kernel refuses it for its own locks (POSIX `fcntl`): the clients of one
//! server see each other's locks only here, so only here can such a cycle be seen — two
//! processes of two mounts, or of the file preload, each holding what the other waits for,
//! would otherwise wait for good.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use switchyard_store::Errno;

/// A client connection and a lock owner it names.
pub type Holder = (usize, u64);

/// A read (shared) or write (exclusive) lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// `F_RDLCK`.
    Read,
    /// `F_WRLCK`.
    Write,
}

/// One held lock over the bytes `start..=end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Who holds it.
    pub holder: Holder,
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive; `u64::MAX` reaches past any end of file).
    pub end: u64,
    /// Shared or exclusive.
    pub kind: LockKind,
    /// The process its holder named (what `F_GETLK` reports).
    pub pid: u32,
}

impl Held {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start <= end && start <= self.end
    }
}

/// How long a holder counts as waiting after its last request that said it waits: its
/// client asks again at least every 20 ms while it waits, and one that gave up (a signal,
/// a close) stops asking.
pub const WAITING: Duration = Duration::from_millis(250);

/// The longest chain of waiting holders followed looking for a cycle.
const CHAIN: usize = 64;

/// What a waiting holder waits for.
#[derive(Debug, Clone, Copy)]
struct Wait {
    ino: u64,
    start: u64,
    end: u64,
    kind: LockKind,
    /// Its last request.
    at: Instant,
}

/// Every lock held through one server, by inode, and the holders waiting for one.
#[derive(Debug, Default)]
pub struct Locks {
    by_ino: HashMap<u64, Vec<Held>>,
    waiting: HashMap<Holder, Wait>,
}

impl Locks {
    /// The first lock of another holder on `ino` that a `kind` lock of `holder` over
    /// `start..=end` would conflict with.
    pub fn conflict(
        &self,
        ino: u64,
        holder: Holder,
        start: u64,
        end: u64,
        kind: LockKind,
    ) -> Option<Held> {
        self.by_ino.get(&ino)?.iter().copied().find(|h| {
            h.holder != holder
                && h.overlaps(start, end)
                && (kind == LockKind::Write || h.kind == LockKind::Write)
        })
    }

    /// Locks `start..=end` of `ino` for `holder` with `kind`, or unlocks it (`None`).
    /// `EAGAIN` if another holder's lock conflicts (nothing changes then); `EINVAL` for a
    /// range that ends before it starts. A holder that asks without waiting waits for nothing
    /// from then on (it gave up an earlier wait), so no wait of another's is refused for it.
    pub fn set(
        &mut self,
        ino: u64,
        holder: Holder,
        start: u64,
        end: u64,
        kind: Option<LockKind>,
        pid: u32,
    ) -> Result<(), Errno> {
        self.waiting.remove(&holder);
        if end < start {
            return Err(Errno::EINVAL);
        }
        if let Some(k) = kind {
            if self.conflict(ino, holder, start, end, k).is_some() {
                return Err(Errno(libc::EAGAIN));
            }
        }
        let list = self.by_ino.remove(&ino).unwrap_or_default();
        let mut kept = Vec::with_capacity(list.len() + 2);
        for h in list {
            if h.holder != holder || !h.overlaps(start, end) {
                kept.push(h);
                continue;
            }
            // The holder's older lock keeps what lies outside the new range.
            if h.start < start {
                kept.push(Held {
                    end: start - 1,
                    ..h
                });
            }
            if h.end > end {
                kept.push(Held {
                    start: end + 1,
                    ..h
                });
            }
        }
        if let Some(kind) = kind {
            kept.push(Held {
                holder,
                start,
                end,
                kind,
                pid,
            });
        }
        if !kept.is_empty() {
            self.by_ino.insert(ino, kept);
        }
        Ok(())
    }

    /// [`Locks::set`] for a holder that waits for the lock while another's conflicts (it
    /// asks again until it gets it: `F_SETLKW`) at `now`: `EAGAIN` while it waits, and
    /// `EDEADLK` instead where its wait would close a cycle of waiting holders, each waiting
    /// for a lock the next holds.
    #[allow(clippy::too_many_arguments)]
    pub fn set_waiting(
        &mut self,
        ino: u64,
        holder: Holder,
        start: u64,
        end: u64,
        kind: LockKind,
        pid: u32,
        now: Instant,
    ) -> Result<(), Errno> {
        let Some(blocker) = self.conflict(ino, holder, start, end, kind) else {
            self.waiting.remove(&holder);
            return self.set(ino, holder, start, end, Some(kind), pid);
        };
        if self.waits_for(blocker.holder, holder, now) {
            self.waiting.remove(&holder);
            return Err(Errno(libc::EDEADLK));
        }
        self.waiting.insert(
            holder,
            Wait {
                ino,
                start,
                end,
                kind,
                at: now,
            },
        );
        Err(Errno(libc::EAGAIN))
    }

    /// Whether `from`, or a holder it waits for, and so on, waits for a lock of `to`.
    fn waits_for(&self, mut from: Holder, to: Holder, now: Instant) -> bool {
        for _ in 0..CHAIN {
            if from == to {
                return true;
            }
            let Some(w) = self.waiting.get(&from) else {
                return false;
            };
            if now.saturating_duration_since(w.at) > WAITING {
                return false;
            }
            match self.conflict(w.ino, from, w.start, w.end, w.kind) {
                Some(h) => from = h.holder,
                None => return false,
            }
        }
        false
    }

    /// Drops every lock `holder` has on `ino` (its process closed the file).
    pub fn release_holder(&mut self, ino: u64, holder: Holder) {
        if self.waiting.get(&holder).is_some_and(|w| w.ino == ino) {
            self.waiting.remove(&holder);
        }
        if let Some(list) = self.by_ino.get_mut(&ino) {
            list.retain(|h| h.holder != holder);
            if list.is_empty() {
                self.by_ino.remove(&ino);
            }
        }
    }

    /// Drops every lock held through connection `peer` (it went away).
    pub fn release_peer(&mut self, peer: usize) {
        self.waiting.retain(|h, _| h.0 != peer);
        self.by_ino.retain(|_, list| {
            list.retain(|h| h.holder.0 != peer);
            !list.is_empty()
        });
    }

    /// The locks held on `ino`.
    pub fn on(&self, ino: u64) -> &[Held] {
        self.by_ino.get(&ino).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The model: for each of 48 bytes, what each holder holds there.
    type Model = [[Option<LockKind>; 3]; 48];

    fn holder(i: usize) -> Holder {
        (i / 2, i as u64 % 2)
    }

    fn held_at(l: &Locks, byte: u64, who: usize) -> Option<LockKind> {
        let found: Vec<_> = l
            .on(1)
            .iter()
            .filter(|h| h.holder == holder(who) && h.start <= byte && byte <= h.end)
            .collect();
        assert!(found.len() <= 1, "a holder's locks overlap: {found:?}");
        found.first().map(|h| h.kind)
    }

    proptest! {
        /// Random locks, unlocks and releases by three holders agree, byte by byte, with a
        /// model that keeps each byte's locks apart; conflicts are refused as the model says.
        #[test]
        fn locks_agree_with_a_byte_by_byte_model(
            ops in prop::collection::vec(
                (0usize..3, 0u64..48, 0u64..16, prop::option::of(any::<bool>()), any::<bool>()),
                1..60,
            )
        ) {
            let mut l = Locks::default();
            let mut m: Model = [[None; 3]; 48];
            for (who, start, len, kind, release) in ops {
                if release && kind.is_none() {
                    l.release_holder(1, holder(who));
                    for b in m.iter_mut() {
                        b[who] = None;
                    }
                    continue;
                }
                let end = (start + len).min(47);
                let kind = kind.map(|w| if w { LockKind::Write } else { LockKind::Read });
                let conflicts = kind.is_some_and(|k| {
                    (start..=end).any(|b| {
                        (0..3).any(|o| {
                            o != who
                                && m[b as usize][o].is_some_and(|h| {
                                    h == LockKind::Write || k == LockKind::Write
                                })
                        })
                    })
                });
                let r = l.set(1, holder(who), start, end, kind, who as u32);
                prop_assert_eq!(r.is_err(), conflicts);
                if !conflicts {
                    for b in start..=end {
                        m[b as usize][who] = kind;
                    }
                }
                for (b, byte) in m.iter().enumerate() {
                    for (o, &want) in byte.iter().enumerate() {
                        prop_assert_eq!(held_at(&l, b as u64, o), want, "byte {} holder {}", b, o);
                    }
                }
            }
        }
    }

    const W: Option<LockKind> = Some(LockKind::Write);

    #[test]
    fn a_wait_that_closes_a_cycle_is_refused_with_edeadlk() {
        let mut l = Locks::default();
        let (a, b, c) = ((1, 0), (2, 0), (3, 0));
        let t = Instant::now();
        l.set(1, a, 0, 0, W, 1).unwrap();
        l.set(1, b, 1, 1, W, 2).unwrap();
        l.set(2, c, 0, 9, W, 3).unwrap();
        // a waits for b's byte; b waiting for a's byte would close the cycle.
        assert_eq!(
            l.set_waiting(1, a, 1, 1, LockKind::Write, 1, t),
            Err(Errno(libc::EAGAIN))
        );
        assert_eq!(
            l.set_waiting(1, b, 0, 0, LockKind::Read, 2, t),
            Err(Errno(libc::EDEADLK))
        );
        // Without saying it waits, b is only told the lock is taken.
        assert_eq!(
            l.set(1, b, 0, 0, Some(LockKind::Read), 2),
            Err(Errno(libc::EAGAIN))
        );
        // Three holders: a waits for b, b for c; c waiting for a closes it.
        assert_eq!(
            l.set_waiting(2, b, 5, 5, LockKind::Read, 2, t),
            Err(Errno(libc::EAGAIN))
        );
        assert_eq!(
            l.set_waiting(1, c, 0, 0, LockKind::Write, 3, t),
            Err(Errno(libc::EDEADLK))
        );
        // A waiter that stopped asking waits no more: no cycle through it.
        let later = t + WAITING * 2;
        assert_eq!(
            l.set_waiting(1, c, 0, 0, LockKind::Write, 3, later),
            Err(Errno(libc::EAGAIN))
        );
        // Once a's lock goes, c's wait ends with the lock, and so does its waiting.
        l.release_holder(1, a);
        l.set_waiting(1, c, 0, 0, LockKind::Write, 3, later)
            .unwrap();
        assert!(!l.waiting.contains_key(&c));
    }

    /// A holder that gave up its wait and asks without waiting (`F_SETLK`) is no waiter: a
    /// wait on its lock is a wait, not a deadlock (its entry stayed for `WAITING` and made
    /// the other's `F_SETLKW` fail with `EDEADLK`).
    #[test]
    fn a_holder_that_stops_waiting_closes_no_cycle() {
        let mut l = Locks::default();
        let (a, b) = ((1, 0), (2, 0));
        let t = Instant::now();
        l.set(1, a, 0, 0, W, 1).unwrap();
        l.set(1, b, 1, 1, W, 2).unwrap();
        assert_eq!(
            l.set_waiting(1, a, 1, 1, LockKind::Write, 1, t),
            Err(Errno(libc::EAGAIN))
        );
        // a's process gave up (a signal) and now only tries.
        assert_eq!(l.set(1, a, 1, 1, W, 1), Err(Errno(libc::EAGAIN)));
        assert_eq!(
            l.set_waiting(1, b, 0, 0, LockKind::Write, 2, t),
            Err(Errno(libc::EAGAIN))
        );
    }

    #[test]
    fn a_departed_peer_leaves_no_lock() {
        let mut l = Locks::default();
        l.set(1, (7, 1), 0, u64::MAX, Some(LockKind::Write), 1)
            .unwrap();
        l.set(2, (7, 2), 0, 9, Some(LockKind::Read), 1).unwrap();
        assert_eq!(
            l.set(1, (8, 1), 5, 5, Some(LockKind::Read), 2),
            Err(Errno(libc::EAGAIN))
        );
        l.release_peer(7);
        assert!(l.on(1).is_empty() && l.on(2).is_empty());
        l.set(1, (8, 1), 5, 5, Some(LockKind::Write), 2).unwrap();
    }
}
