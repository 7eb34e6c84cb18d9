//! The DRAM free-block allocator, rebuilt from the logs at every mount (the media holds no
//! free list, so there is nothing to keep consistent on a crash).
//!
//! The data zone is cut into pools, each a free-extent map under its own lock; a caller starts
//! at the pool of the CPU it runs on and moves on only when it is empty, so writers on
//! different cores rarely meet (no global lock on the data path).
//!
//! A [`Grace`] keeps blocks freed while it lasts out of reuse until it ends: a reader outside
//! the store's locks (a remote client fetching blocks of its map from a server's memory) reads
//! the bytes those blocks held when it found them, because data is copy-on-write and a block's
//! bytes change only once it is taken again.
//!
//! On page media ([`Allocator::defer_frees`]) a freed block is not taken again until the sync
//! that makes its freeing durable: until then the image on the disk may still map it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::error::Errno;

/// Number of pools.
const POOLS: usize = 8;

/// A run of blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// First block.
    pub start: u64,
    /// Blocks.
    pub len: u64,
}

/// Free blocks of the data zone.
pub struct Allocator {
    pools: Vec<Mutex<BTreeMap<u64, u64>>>,
    /// First block of pool `i` is `bounds[i]`; `bounds[POOLS]` is the end of the zone.
    bounds: Vec<u64>,
    free: AtomicU64,
    /// Blocks freed while graces are in force.
    limbo: Mutex<Limbo>,
    /// Graces in force (what `free` reads before it takes the limbo's lock).
    graces: AtomicUsize,
    /// Set on page media ([`Allocator::defer_frees`]): freed extents wait in `deferred`
    /// until the sync that makes their freeing durable hands them back.
    deferring: AtomicBool,
    deferred: Mutex<Vec<Extent>>,
    /// Blocks in `deferred`.
    deferred_blocks: AtomicU64,
    /// Blocks a sync under way took from `deferred` and has not given back yet.
    releasing: AtomicU64,

    /// Called when an allocation finds too few free blocks while freed ones are deferred
    /// (a sync, which hands them back); the allocation is then tried once more.
    on_short: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

/// Extents freed while graces were in force, until every grace that began before them ends.
#[derive(Default)]
struct Limbo {
    /// Bumped by every grace that begins.
    epoch: u64,
    /// Graces in force, by the epoch they began at (each grace bumps it: one per epoch).
    graces: BTreeSet<u64>,
    /// Extents held back, with the epoch they were freed at: one freed at epoch `f` may have
    /// been found by a grace that began at `f` or before, and by none that began after.
    held: Vec<(u64, Extent)>,
}

/// While it lasts, no block freed after it began is taken again (see the module docs). Ends
/// when dropped.
pub struct Grace<'a> {
    alloc: &'a Allocator,
    began: u64,
}

impl Drop for Grace<'_> {
    fn drop(&mut self) {
        let a = self.alloc;
        let ready = {
            let mut l = a.limbo.lock();
            l.graces.remove(&self.began);
            a.graces.fetch_sub(1, Ordering::SeqCst);
            // Every grace still in force began after these were freed.
            let oldest = l.graces.first().copied().unwrap_or(u64::MAX);
            let (ready, held): (Vec<_>, Vec<_>) = l.held.drain(..).partition(|(f, _)| *f < oldest);
            l.held = held;
            ready
        };
        for (_, e) in ready {
            a.give_back(e);
        }
    }
}

/// The pool of the CPU the caller runs on (NOVA's per-CPU free lists): callers on different
/// CPUs rarely meet, and the blocks a CPU frees are the ones it takes next, so a store in
/// steady use reuses pages the kernel has already given it instead of faulting in new ones
/// (about 2 µs per 4 KiB page of a tmpfs or disk file). A thread-local round robin, which this
/// replaced, sent every new thread to colder blocks.
fn home() -> usize {
    // SAFETY: sched_getcpu has no preconditions; it reads the CPU number (rseq or vDSO).
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).unwrap_or(0) % POOLS
}

impl Allocator {
    /// An allocator over `[first, end)` where `used(b)` tells which blocks are taken.
    pub fn new(first: u64, end: u64, used: impl Fn(u64) -> bool) -> Allocator {
        let span = end - first;
        let bounds: Vec<u64> = (0..=POOLS as u64)
            .map(|i| first + span * i / POOLS as u64)
            .collect();
        let mut pools = Vec::with_capacity(POOLS);
        let mut free = 0;
        for i in 0..POOLS {
            let mut map = BTreeMap::new();
            let mut b = bounds[i];
            while b < bounds[i + 1] {
                if used(b) {
                    b += 1;
                    continue;
                }
                let s = b;
                while b < bounds[i + 1] && !used(b) {
                    b += 1;
                }
                map.insert(s, b - s);
                free += b - s;
            }
            pools.push(Mutex::new(map));
        }
        Allocator {
            pools,
            bounds,
            free: AtomicU64::new(free),
            limbo: Mutex::default(),
            graces: AtomicUsize::new(0),
            deferring: AtomicBool::new(false),
            deferred: Mutex::default(),
            deferred_blocks: AtomicU64::new(0),
            releasing: AtomicU64::new(0),

            on_short: OnceLock::new(),
        }
    }

    /// From now on (page media), or no longer, every freed extent waits until
    /// [`Allocator::release_deferred`] gives it back: a block the durable image on the disk
    /// still maps is not written again before the change that freed it is durable too.
    /// `on_short` runs when an allocation would fail while extents wait (it should sync, and
    /// release them). Turning it off releases nothing: call `release_deferred` with
    /// [`Allocator::take_deferred`]'s batch.
    pub fn defer_frees(&self, on: bool, on_short: Option<Box<dyn Fn() + Send + Sync>>) {
        if let Some(f) = on_short {
            let _ = self.on_short.set(f);
        }
        self.deferring.store(on, Ordering::SeqCst);
    }

    /// The extents freed since the last call (page media): the caller releases them once the
    /// changes that freed them are durable.
    pub fn take_deferred(&self) -> Vec<Extent> {
        let mut deferred = self.deferred.lock();
        let batch = std::mem::take(&mut *deferred);
        let n: u64 = batch.iter().map(|e| e.len).sum();
        // Counted as on their way back before the list lets go of them: an allocation that
        // finds the list empty sees them here (`alloc`).
        self.releasing.fetch_add(n, Ordering::Relaxed);
        drop(deferred);
        self.deferred_blocks.fetch_sub(n, Ordering::Relaxed);
        // Counted as free until given back, so the count never dips in between.
        self.free.fetch_add(n, Ordering::Relaxed);
        batch
    }

    /// Puts a batch [`Allocator::take_deferred`] returned back among the deferred extents (a
    /// sync that failed: what the disk holds may still map them).
    pub fn restore_deferred(&self, batch: Vec<Extent>) {
        let n: u64 = batch.iter().map(|e| e.len).sum();
        self.free.fetch_sub(n, Ordering::Relaxed);
        self.deferred_blocks.fetch_add(n, Ordering::Relaxed);
        self.deferred.lock().extend(batch);
        self.releasing.fetch_sub(n, Ordering::Relaxed);
    }

    /// Frees extents [`Allocator::take_deferred`] returned.
    pub fn release_deferred(&self, batch: Vec<Extent>) {
        for e in batch {
            self.free.fetch_sub(e.len, Ordering::Relaxed);
            self.free_now(e);
            self.releasing.fetch_sub(e.len, Ordering::Relaxed);
        }
    }

    /// Free blocks, those waiting for a sync on page media included (an allocation that
    /// needs them syncs first).
    pub fn free_blocks(&self) -> u64 {
        self.free.load(Ordering::Relaxed) + self.deferred_blocks.load(Ordering::Relaxed)
    }

    /// Takes `n` blocks, as few extents as the free space allows (one if possible). ENOSPC
    /// (and nothing taken) if fewer than `n` are free, counting those a sync will give back:
    /// on page media an allocation that runs short while freed blocks wait for a sync — or
    /// are held by a sync under way — syncs (`on_short`) and tries again.
    pub fn alloc(&self, n: u64) -> Result<Vec<Extent>, Errno> {
        match self.try_alloc(n) {
            Err(Errno::ENOSPC) if self.frees_pending() => {
                if let Some(sync) = self.on_short.get() {
                    sync();
                }
                self.try_alloc(n)
            }
            r => r,
        }
    }

    /// Whether freed blocks wait for a sync, or are held by a sync under way.
    fn frees_pending(&self) -> bool {
        let deferred = self.deferred.lock();
        !deferred.is_empty() || self.releasing.load(Ordering::Relaxed) > 0
    }

    fn try_alloc(&self, n: u64) -> Result<Vec<Extent>, Errno> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut left = n;
        let mut got = Vec::new();
        let start = home();
        // First pass: an extent that fits whole; second: whatever there is.
        for whole in [true, false] {
            for k in 0..POOLS {
                let mut pool = self.pools[(start + k) % POOLS].lock();
                while left > 0 {
                    let pick = if whole {
                        pool.iter().find(|(_, &l)| l >= left).map(|(&s, &l)| (s, l))
                    } else {
                        pool.iter().next_back().map(|(&s, &l)| (s, l))
                    };
                    let Some((s, l)) = pick else { break };
                    pool.remove(&s);
                    let take = l.min(left);
                    if l > take {
                        pool.insert(s + take, l - take);
                    }
                    got.push(Extent {
                        start: s,
                        len: take,
                    });
                    left -= take;
                    if whole {
                        break;
                    }
                }
                if left == 0 {
                    self.free.fetch_sub(n, Ordering::Relaxed);
                    return Ok(got);
                }
            }
        }
        for e in got {
            self.release(e);
        }
        Err(Errno::ENOSPC)
    }

    /// Every free extent, ascending, neighbours across pools merged. Meant for a quiet store
    /// (the clean-unmount checkpoint): pools are read one after another, not at one instant.
    pub fn free_extents(&self) -> Vec<Extent> {
        let mut out: Vec<Extent> = Vec::new();
        for pool in &self.pools {
            for (&start, &len) in pool.lock().iter() {
                match out.last_mut() {
                    Some(last) if last.start + last.len == start => last.len += len,
                    _ => out.push(Extent { start, len }),
                }
            }
        }
        out
    }

    /// Returns blocks: free at once, or once every [`Grace`] in force ends; on page media
    /// only once a sync made the change that freed them durable
    /// ([`Allocator::defer_frees`]).
    pub fn free(&self, e: Extent) {
        if self.deferring.load(Ordering::SeqCst) {
            self.deferred.lock().push(e);
            self.deferred_blocks.fetch_add(e.len, Ordering::Relaxed);
            return;
        }
        self.free_now(e);
    }

    fn free_now(&self, e: Extent) {
        // SeqCst, paired with the one in `grace`: a reader that takes a grace and then checks
        // that its map is current (the store bumps a file's change word before it frees the
        // file's blocks) either sees the bump or is seen here.
        if self.graces.load(Ordering::SeqCst) > 0 {
            let mut l = self.limbo.lock();
            if !l.graces.is_empty() {
                let epoch = l.epoch;
                l.held.push((epoch, e));
                return;
            }
        }
        self.give_back(e);
    }

    /// Begins a grace: until it ends, no block freed from now on is taken again. A reader
    /// takes it, then checks that the map it read blocks from is still current.
    pub fn grace(&self) -> Grace<'_> {
        let mut l = self.limbo.lock();
        l.epoch += 1;
        let began = l.epoch;
        l.graces.insert(began);
        self.graces.fetch_add(1, Ordering::SeqCst);
        Grace { alloc: self, began }
    }

    fn give_back(&self, e: Extent) {
        self.free.fetch_add(e.len, Ordering::Relaxed);
        self.release(e);
    }

    fn release(&self, e: Extent) {
        // An extent may straddle pool bounds: give each pool its part.
        let mut s = e.start;
        let end = e.start + e.len;
        while s < end {
            let i = self.bounds.partition_point(|&b| b <= s) - 1;
            let stop = end.min(self.bounds[i + 1]);
            let mut pool = self.pools[i].lock();
            let (mut start, mut len) = (s, stop - s);
            if let Some((&ps, &pl)) = pool.range(..start).next_back() {
                if ps + pl == start {
                    pool.remove(&ps);
                    start = ps;
                    len += pl;
                }
            }
            if let Some(&nl) = pool.get(&(start + len)) {
                pool.remove(&(start + len));
                len += nl;
            }
            pool.insert(start, len);
            s = stop;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Allocations never overlap each other or used blocks, and freeing everything gives
        /// the whole zone back.
        #[test]
        fn extents_are_disjoint_and_conserved(sizes in proptest::collection::vec(1u64..40, 1..60)) {
            let used = |b: u64| b.is_multiple_of(7);
            let a = Allocator::new(10, 1000, used);
            let total = a.free_blocks();
            let mut owner = vec![false; 1000];
            let mut all = Vec::new();
            for n in sizes {
                match a.alloc(n) {
                    Ok(es) => {
                        prop_assert_eq!(es.iter().map(|e| e.len).sum::<u64>(), n);
                        for e in &es {
                            for b in e.start..e.start + e.len {
                                prop_assert!((10..1000).contains(&b) && !used(b) && !owner[b as usize]);
                                owner[b as usize] = true;
                            }
                        }
                        all.extend(es);
                    }
                    Err(e) => prop_assert_eq!(e, Errno::ENOSPC),
                }
            }
            // The free list, read back, rebuilds the same allocator.
            let listed = a.free_extents();
            prop_assert_eq!(listed.iter().map(|e| e.len).sum::<u64>(), a.free_blocks());
            let mut free = vec![false; 1000];
            for e in &listed {
                for b in e.start..e.start + e.len {
                    prop_assert!(!free[b as usize] && !owner[b as usize] && !used(b));
                    free[b as usize] = true;
                }
            }
            let rebuilt = Allocator::new(10, 1000, |b| !free[b as usize]);
            prop_assert_eq!(rebuilt.free_extents(), listed);
            for e in all {
                a.free(e);
            }
            prop_assert_eq!(a.free_blocks(), total);
            prop_assert!(a.alloc(total).is_ok());
            prop_assert_eq!(a.alloc(1), Err(Errno::ENOSPC));
        }
    }

    /// What a block-level model says: blocks freed during a grace are not taken again until
    /// it (and every grace that began before they were freed) ends; nothing is lost.
    #[derive(Debug, Clone)]
    enum Step {
        Alloc(u64),
        Free(usize),
        Begin,
        End(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (1u64..6).prop_map(Step::Alloc),
            any::<usize>().prop_map(Step::Free),
            Just(Step::Begin),
            any::<usize>().prop_map(Step::End),
        ]
    }

    proptest! {
        #[test]
        fn a_block_freed_in_a_grace_is_not_taken_until_the_graces_before_it_end(
            steps in proptest::collection::vec(step(), 1..120),
        ) {
            let a = Allocator::new(0, 64, |_| false);
            let mut owned: Vec<Extent> = Vec::new();
            // Graces in force, each with the blocks freed since it began.
            let mut graces: Vec<(Grace<'_>, Vec<u64>)> = Vec::new();
            for s in steps {
                match s {
                    Step::Alloc(n) => {
                        if let Ok(es) = a.alloc(n) {
                            for e in &es {
                                for b in e.start..e.start + e.len {
                                    for (_, freed) in &graces {
                                        prop_assert!(!freed.contains(&b), "block {} reused in a grace", b);
                                    }
                                }
                            }
                            owned.extend(es);
                        }
                    }
                    Step::Free(i) if !owned.is_empty() => {
                        let e = owned.swap_remove(i % owned.len());
                        for (_, freed) in &mut graces {
                            freed.extend(e.start..e.start + e.len);
                        }
                        a.free(e);
                    }
                    Step::Begin => graces.push((a.grace(), Vec::new())),
                    Step::End(i) if !graces.is_empty() => {
                        graces.remove(i % graces.len());
                    }
                    _ => {}
                }
            }
            graces.clear();
            for e in owned {
                a.free(e);
            }
            prop_assert_eq!(a.free_blocks(), 64);
            prop_assert_eq!(a.free_extents(), vec![Extent { start: 0, len: 64 }]);
        }
    }
}
