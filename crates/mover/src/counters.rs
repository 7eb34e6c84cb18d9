//! Counters that explain the scheduler's choices, cheap enough for every request.
//!
//! Each thread adds to a cache-padded stripe it owns alone (a plain load and store per
//! counter); a snapshot sums the stripes.

use crossbeam_utils::CachePadded;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

macro_rules! counters {
    ($($name:ident: $doc:literal,)*) => {
        /// One counter.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(non_camel_case_types)]
        pub enum Counter { $(#[doc = $doc] $name,)* }
        const N: usize = [$(stringify!($name)),*].len();

        /// Summed counter values. A saved set from an older build, without a counter added
        /// since, reads with that counter at zero.
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
        #[serde(default)]
        pub struct Stats { $(#[doc = $doc] pub $name: u64,)* }

        impl Stats {
            fn from_array(a: [u64; N]) -> Stats {
                let mut i = 0;
                $(let $name = a[i]; i += 1;)*
                let _ = i;
                Stats { $($name,)* }
            }

            /// (name, value) pairs in declaration order.
            pub fn rows(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name)),*]
            }
        }
    };
}

counters! {
    cpu_requests: "Requests copied entirely by the calling CPU.",
    cpu_bytes: "Bytes copied on the CPU path.",
    engine_requests: "Requests executed entirely by the engine (bar partial-completion repair).",
    engine_bytes: "Bytes the engine copied (all paths).",
    split_requests: "Requests split between engine and CPU.",
    split_cpu_bytes: "Bytes of split requests copied by the CPU.",
    split_engine_bytes: "Bytes of split requests planned for the engine.",
    below_threshold: "Requests kept on the CPU because they were below the size threshold.",
    misaligned_writes: "Writes kept on the CPU because source and destination differ in 64 B offset (§5.2).",
    aligned_heads: "Writes whose unaligned head the CPU copied before offloading the rest (§5.2).",
    fallback_busy_cores: "Requests kept on the CPU because callers already busied every core a helper-thread engine does not use: bulk requests while bulk copies run on them now, and every synchronous request while threads copied on them in the last epoch.",
    fallback_saturated: "Bulk requests sent to the CPU because M engine requests were in flight.",
    fallback_queue_full: "Bulk requests sent to the CPU because the channel queue was full or suspended.",
    fallback_latency: "Latency-critical requests kept off a busy channel.",
    fallback_queue_depth: "Asynchronous reads copied by the CPU because every channel had 2 or more batches queued (EasyIO's read admission, Listing 2).",
    fallback_engine_slow: "Asynchronous requests copied by the CPU because the engine, as measured now (its turnaround for the size: submission to completion), would finish them later than the CPU — later than twice the CPU's time when the caller's runtime has other tasks to run meanwhile (a helper thread starved by another process, a busy device). One in 50 ms goes to the engine anyway (counted as explored) to measure it again.",
    no_engine_share: "Bulk synchronous requests the CPU copied whole because the split estimates gave the engine less than a page.",
    reclaimed: "Split engine shares the CPU took back because the engine had not started them by the time the CPU finished its own share.",
    taken_back: "Latency tenants' synchronous engine copies the caller took back and copied itself because no worker had started them by the time the CPU would have finished.",
    partial_completions: "Engine completions that were partial (the mover finished the rest).",
    engine_errors: "Engine completions with an error (the mover redid the rest on the CPU).",
    repaired_bytes: "Bytes the CPU copied after a partial or failed engine completion.",
    helped_bytes: "Bytes of engine batches that a waiting thread copied from the batch's tail while the engine worked on its head (an idle switchyard_rt executor helps).",
    writer_waits: "CPU writes that waited for the slow-memory writer cap.",
    threshold_raised: "Online adaptation raised a direction's thresholds one size bin (in the band above a threshold, requests the CPU copied beat offloaded ones in 3 trials in a row).",
    threshold_lowered: "Online adaptation lowered a direction's thresholds one size bin (in the band below a threshold, offloaded requests beat ones the CPU copied in 3 trials in a row).",
    explored: "Requests sent down the other path as one side of an adaptation trial (one in 32 within a factor of 2 of their threshold), or split although the estimates gave the engine no share (one in 32 such splits), to keep the estimates live.",
    split_nudges: "Epochs in which online adaptation moved the estimates a split's ratio comes from.",
    profiles_swapped: "Engine profiles put in effect while the mover ran (for example the full tune `switchyard up` runs in the background).",
    fill_requests: "Fills (a program's large memset, `sy_fill`), on any path.",
    fill_engine_bytes: "Bytes of fills the engine wrote.",
    compare_requests: "Compares (`sy_compare`), on any path.",
    compare_engine_bytes: "Bytes of compares the engine read (up to a difference it found).",
}

/// Stripes owned by one thread each; threads beyond these share one more stripe.
const EXCLUSIVE: usize = 32;

/// Striped counters.
pub struct Counters {
    /// `EXCLUSIVE` owned stripes, then the shared one.
    stripes: Box<[CachePadded<[AtomicU64; N]>]>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            stripes: (0..=EXCLUSIVE)
                .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }
}

/// The stripe a live thread owns. Stripe numbers are global (the same in every [`Counters`])
/// and go back to a free list when their thread exits, so at most one live thread owns each.
struct Owned(Option<usize>);

static FREE: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static NEXT: AtomicUsize = AtomicUsize::new(0);

impl Owned {
    fn take() -> Owned {
        let reused = FREE.lock().unwrap_or_else(|e| e.into_inner()).pop();
        Owned(reused.or_else(|| {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            (n < EXCLUSIVE).then_some(n)
        }))
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            FREE.lock().unwrap_or_else(|e| e.into_inner()).push(i);
        }
    }
}

thread_local!(static MINE: Owned = Owned::take());

impl Counters {
    /// Adds `n` to `c`. On a stripe this thread owns that is a plain load and store (no locked
    /// instruction: the increment costs about a nanosecond, not twenty); on the shared stripe
    /// (more than 32 live threads, or during thread teardown) an atomic add.
    #[inline]
    pub fn add(&self, c: Counter, n: u64) {
        match MINE.try_with(|o| o.0).ok().flatten() {
            Some(i) => {
                // Only this thread writes stripe i while it lives (see `Owned`); readers may
                // see the old or the new value, never a torn one.
                let a = &self.stripes[i][c as usize];
                a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
            }
            None => {
                self.stripes[EXCLUSIVE][c as usize].fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Requests of every path each stripe (one per thread) has counted so far, into `out`
    /// (one entry per stripe): comparing two calls tells which threads copied in between.
    pub fn requests_per_stripe(&self, out: &mut Vec<u64>) {
        out.clear();
        out.extend(self.stripes.iter().map(|s| {
            [
                Counter::cpu_requests,
                Counter::engine_requests,
                Counter::split_requests,
            ]
            .iter()
            .map(|&c| s[c as usize].load(Ordering::Relaxed))
            .sum::<u64>()
        }));
    }

    /// Sums all stripes.
    pub fn snapshot(&self) -> Stats {
        let mut a = [0u64; N];
        for s in self.stripes.iter() {
            for (i, v) in s.iter().enumerate() {
                a[i] += v.load(Ordering::Relaxed);
            }
        }
        Stats::from_array(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `switchyard stat` reads counters an older build saved, before a counter was added.
    #[test]
    fn counters_saved_without_a_newer_counter_read_it_as_zero() {
        let old: Stats = serde_json::from_str(r#"{"cpu_requests": 7}"#).unwrap();
        assert_eq!((old.cpu_requests, old.no_engine_share), (7, 0));
    }

    /// Threads come and go (more of them over time than there are stripes, many at once) and
    /// every increment is still counted: ownership of a stripe never overlaps.
    #[test]
    fn no_increment_is_lost_as_threads_come_and_go() {
        let c = Counters::default();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..20 {
                        std::thread::scope(|s| {
                            for _ in 0..6 {
                                s.spawn(|| {
                                    for _ in 0..1000 {
                                        c.add(Counter::cpu_requests, 1);
                                        c.add(Counter::cpu_bytes, 3);
                                    }
                                });
                            }
                        });
                    }
                });
            }
        });
        let s = c.snapshot();
        assert_eq!(s.cpu_requests, 8 * 20 * 6 * 1000);
        assert_eq!(s.cpu_bytes, 3 * 8 * 20 * 6 * 1000);
    }
}
