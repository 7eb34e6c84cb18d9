//! Copies that outlive the operation that started them: the second level of EasyIO's
//! two-level locking (§4.3).
//!
//! Level 1 is the inode's lock: an asynchronous write holds it only until its metadata commits,
//! then leaves its unfinished copies here, in a [`PendingWrite`] on the inode. Level 2: whoever
//! takes the inode's lock next — to read, write, truncate, link, unlink or compact — first
//! checks the pending write by sequence number (the engine channel's completion record against
//! the batch's position) and, if the copy is finished, settles it (collects the outcome,
//! repairs a partial completion, clears its hole in the durable record). If it is not finished
//! a synchronous caller waits (the engine finishes every copy on its own, so this cannot
//! deadlock); an asynchronous caller drops the lock and yields until it is.
//!
//! Reads leave nothing on the inode: they never block later writes. Writes are copy-on-write,
//! so a later write never touches blocks an unfinished read copies from — but it frees the
//! blocks it replaced, and those must not be reused while a read still copies from them. Each
//! inode therefore counts its reads in flight ([`Readers`]); blocks it frees meanwhile wait in
//! its limbo until the last such read finishes.

use switchyard_mover::Detached;

use crate::sync::{AtomicBool, AtomicUsize, Mutex, Ordering};

#[cfg(all(test, shuttle))]
mod model;

/// Where the copies of pending writes report: the engine's completion records and the copies
/// themselves. The store answers from its mover ([`crate::Store`]); the shuttle model
/// (`model.rs`) from its model engine, so that both run the same settling code below.
pub(crate) trait Completions {
    /// A copy in flight.
    type Copy;
    /// Whether the batch at `position` on `channel` has finished, by the channel's completion
    /// record (one load; no copy is touched).
    fn recorded_done(&self, channel: usize, position: u64) -> bool;
    /// The outcome of `copy` if it has finished (repairing a partial completion on the CPU):
    /// whether part of it was repaired.
    fn poll(&self, copy: &mut Self::Copy) -> Option<bool>;
    /// Makes a repair durable and clears the hole its copy left in `channel`'s durable
    /// completion record.
    fn clear_hole(&self, channel: usize, position: u64);
}

/// One engine copy of an orderless write: the channel and position its log entry names, and
/// the copy.
pub(crate) struct Part<C = Detached> {
    pub(crate) recorded: (usize, u64),
    pub(crate) copy: C,
    /// When the copy should finish ([`switchyard_mover::Mover::expected_finish`]).
    pub(crate) expected_ns: u64,
}

/// A committed write whose data copies may still be running.
pub(crate) struct PendingWrite<C = Detached> {
    /// Copies not yet settled.
    pub(crate) parts: Mutex<Vec<Part<C>>>,
    /// (channel, position) of every part, for the check by sequence number without the lock.
    pub(crate) seqs: Vec<(usize, u64)>,
    settled: AtomicBool,
}

impl<C> std::fmt::Debug for PendingWrite<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingWrite")
            .field("seqs", &self.seqs)
            .field("settled", &self.is_settled())
            .finish()
    }
}

impl<C> PendingWrite<C> {
    pub(crate) fn new(parts: Vec<Part<C>>, seqs: Vec<(usize, u64)>) -> PendingWrite<C> {
        PendingWrite {
            parts: Mutex::new(parts),
            seqs,
            settled: AtomicBool::new(false),
        }
    }

    /// Whether every copy is finished, repaired and its hole cleared.
    pub(crate) fn is_settled(&self) -> bool {
        self.settled.load(Ordering::Acquire)
    }

    /// Settles the write if every copy has finished: checked by sequence number (each
    /// channel's completion record against the batch's position), then each copy's outcome
    /// collected ([`PendingWrite::collect`]). Never blocks; true once settled.
    pub(crate) fn try_settle(&self, c: &impl Completions<Copy = C>) -> bool {
        if self.is_settled() {
            return true;
        }
        if !self.seqs.iter().all(|&(ch, pos)| c.recorded_done(ch, pos)) {
            return false;
        }
        self.collect(c)
    }

    /// Collects every copy: its outcome, a partial one repaired and its hole in the durable
    /// record cleared; false if one is unfinished or another thread is collecting.
    pub(crate) fn collect(&self, c: &impl Completions<Copy = C>) -> bool {
        let Some(mut parts) = self.parts.try_lock() else {
            return false;
        };
        while let Some(part) = parts.last_mut() {
            let Some(repaired) = c.poll(&mut part.copy) else {
                return false;
            };
            if repaired {
                let (ch, pos) = part.recorded;
                c.clear_hole(ch, pos);
            }
            parts.pop();
        }
        self.settled.store(true, Ordering::Release);
        true
    }
}

/// Level 2 of two-level locking, run under the inode's lock (level 1): `pending`, the last
/// write's copies while they may still run, is settled if every copy has finished; otherwise
/// it is returned, for the caller to release the lock and wait on or yield. Never blocks.
/// (`P` is the shared pointer holding it: the standard `Arc`, or shuttle's in the model.)
pub(crate) fn gate<C, P>(pending: Option<&P>, c: &impl Completions<Copy = C>) -> Result<(), P>
where
    P: std::ops::Deref<Target = PendingWrite<C>> + Clone,
{
    match pending {
        Some(p) if !p.try_settle(c) => Err(p.clone()),
        _ => Ok(()),
    }
}

/// Asynchronous reads of one inode in flight, and the blocks freed while they run.
#[derive(Debug, Default)]
pub(crate) struct Readers {
    count: AtomicUsize,
    limbo: Mutex<Vec<u64>>,
}

impl Readers {
    /// A read starts (under the inode's lock, so no later free misses it).
    pub(crate) fn enter(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    /// A read finished; returns the blocks to free if it was the last one.
    #[must_use]
    pub(crate) fn leave(&self) -> Vec<u64> {
        if self.count.fetch_sub(1, Ordering::AcqRel) != 1 {
            return Vec::new();
        }
        let mut limbo = self.limbo.lock();
        // A read that started since (under the inode lock) sees only the new mapping; blocks
        // freed after it started wait for it.
        if self.count.load(Ordering::Acquire) == 0 {
            std::mem::take(&mut *limbo)
        } else {
            Vec::new()
        }
    }

    /// Blocks replaced or truncated away (under the inode's write lock): the ones that may be
    /// freed now; the rest wait for the reads in flight.
    #[must_use]
    pub(crate) fn retire(&self, blocks: Vec<u64>) -> Vec<u64> {
        if blocks.is_empty() || self.count.load(Ordering::Acquire) == 0 {
            return blocks;
        }
        let mut limbo = self.limbo.lock();
        if self.count.load(Ordering::Acquire) == 0 {
            let mut all = std::mem::take(&mut *limbo);
            all.extend(blocks);
            return all;
        }
        limbo.extend(blocks);
        Vec::new()
    }
}
