//! Inode locks: one per slot, taken in ascending order for multi-inode operations, and the
//! settling of asynchronous writes a lock finds unfinished (two-level locking).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Guard, Store};
use crate::error::Errno;
use crate::inflight::{gate, Completions, PendingWrite};
use crate::inode::{Content, Inode};

/// The inode `name` names in directory `dir`, which `locks` holds locked (ENOTDIR if it is
/// not a directory): how a multi-inode operation checks, once it holds its locks, that the
/// names it looked up still name what they did.
pub(super) fn named(
    locks: &BTreeMap<u64, Guard<'_>>,
    dir: u64,
    name: &[u8],
) -> Result<Option<u64>, Errno> {
    match locks[&dir].as_ref().map(|i| &i.content) {
        Some(Content::Dir(m)) => Ok(m.get(name).map(|e| e.0)),
        _ => Err(Errno::ENOTDIR),
    }
}

impl Store {
    /// Locks `ino` for a change, after settling its pending write (level 2).
    pub(crate) fn lock(&self, ino: u64) -> Result<Guard<'_>, Errno> {
        let mut g = self.slot(ino)?.write();
        if let Some(i) = g.as_mut() {
            self.settle_inode(i);
        }
        Ok(g)
    }

    /// Locks `ino` for a change unless its pending write is still copying: then the lock is
    /// released and the pending write returned, for an asynchronous caller to wait on.
    pub(crate) fn try_lock(&self, ino: u64) -> Result<Result<Guard<'_>, Arc<PendingWrite>>, Errno> {
        let mut g = self.slot(ino)?.write();
        if let Some(i) = g.as_mut() {
            if let Err(p) = gate(i.pending.as_ref(), self) {
                return Ok(Err(p));
            }
            i.pending = None;
        }
        Ok(Ok(g))
    }

    /// Waits for (and helps settle) `inode`'s pending write, then forgets it.
    pub(super) fn settle_inode(&self, inode: &mut Inode) {
        if let Some(p) = inode.pending.take() {
            self.wait_settled(&p);
        }
    }

    /// Settles `p` if every copy has finished ([`PendingWrite::try_settle`]). Never blocks;
    /// true once settled.
    pub(crate) fn try_settle(&self, p: &PendingWrite) -> bool {
        p.try_settle(self)
    }

    /// [`Store::try_settle`] for the write's own future, woken because one of its copies
    /// finished: it asks the copies themselves, without first reading each channel's
    /// completion record (a cache line the engine's worker has just written, so a transfer
    /// from the worker's core on the write's critical path).
    pub(crate) fn try_settle_own(&self, p: &PendingWrite) -> bool {
        p.is_settled() || p.collect(self)
    }

    /// Blocks until `p` is settled (spinning, then yielding): the engine finishes every copy on
    /// its own, so this cannot deadlock.
    pub(crate) fn wait_settled(&self, p: &PendingWrite) {
        let mut spins = 0u32;
        while !self.try_settle(p) {
            spins += 1;
            if spins < 256 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Locks the given inodes (deduplicated) in ascending order; returns guards by inode.
    pub(super) fn lock_many(&self, inos: &[u64]) -> Result<BTreeMap<u64, Guard<'_>>, Errno> {
        let mut sorted = inos.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut out = BTreeMap::new();
        for ino in sorted {
            let g = self.lock(ino)?;
            if g.is_none() {
                return Err(Errno::ENOENT);
            }
            out.insert(ino, g);
        }
        Ok(out)
    }

    /// Locks `parent` and the inode `name` names in it (ascending order, re-checked).
    pub(super) fn lock_entry(
        &self,
        parent: u64,
        name: &[u8],
    ) -> Result<(u64, BTreeMap<u64, Guard<'_>>), Errno> {
        loop {
            let (child, _) = self.lookup(parent, name)?;
            let locks = self.lock_many(&[parent, child])?;
            let still = match &locks[&parent].as_ref().map(|i| &i.content) {
                Some(Content::Dir(d)) => d.get(name).map(|e| e.0),
                _ => return Err(Errno::ENOTDIR),
            };
            if still == Some(child) {
                return Ok((child, locks));
            }
        }
    }
}

impl Completions for Store {
    type Copy = switchyard_mover::Detached;

    fn recorded_done(&self, channel: usize, position: u64) -> bool {
        self.mover.engine().record(channel).seq > position
    }

    fn poll(&self, copy: &mut switchyard_mover::Detached) -> Option<bool> {
        self.mover
            .poll_detached(copy)
            .map(|report| report.repaired_bytes > 0)
    }

    fn clear_hole(&self, channel: usize, position: u64) {
        // The repair's flushed lines become durable before the hole goes.
        self.pm.fence();
        self.records[channel].clear_hole(&self.pm.persist(), position);
    }
}
