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

use std::collections::HashMap;

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

/// Every lock held through one server, by inode.
#[derive(Debug, Default)]
pub struct Locks {
    by_ino: HashMap<u64, Vec<Held>>,
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
    /// range that ends before it starts.
    pub fn set(
        &mut self,
        ino: u64,
        holder: Holder,
        start: u64,
        end: u64,
        kind: Option<LockKind>,
        pid: u32,
    ) -> Result<(), Errno> {
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

    /// Drops every lock `holder` has on `ino` (its process closed the file).
    pub fn release_holder(&mut self, ino: u64, holder: Holder) {
        if let Some(list) = self.by_ino.get_mut(&ino) {
            list.retain(|h| h.holder != holder);
            if list.is_empty() {
                self.by_ino.remove(&ino);
            }
        }
    }

    /// Drops every lock held through connection `peer` (it went away).
    pub fn release_peer(&mut self, peer: usize) {
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
