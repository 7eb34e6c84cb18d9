//! The DRAM free-block allocator, rebuilt from the logs at every mount (the media holds no
//! free list, so there is nothing to keep consistent on a crash).
//!
//! The data zone is cut into pools, each a free-extent map under its own lock; a caller starts
//! at the pool of the CPU it runs on and moves on only when it is empty, so writers on
//! different cores rarely meet (no global lock on the data path).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

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
        }
    }

    /// Free blocks.
    pub fn free_blocks(&self) -> u64 {
        self.free.load(Ordering::Relaxed)
    }

    /// Takes `n` blocks, as few extents as the free space allows (one if possible). ENOSPC
    /// (and nothing taken) if fewer than `n` are free.
    pub fn alloc(&self, n: u64) -> Result<Vec<Extent>, Errno> {
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

    /// Returns blocks.
    pub fn free(&self, e: Extent) {
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
}
