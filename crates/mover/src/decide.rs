//! The scheduler's decision (Fastmove §5.4), in one function: [`Mover::decide`].

use std::sync::atomic::Ordering;

use crate::adapt::{Band, EXPLORE_SHARE};
use crate::config::Policy;
use crate::counters::Counter;
use crate::hints::{Direction, Hints};
use crate::Mover;

/// Which path a request takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// The calling CPU copies everything.
    Cpu,
    /// The engine copies everything, on `channel`.
    Engine {
        /// Channel chosen round-robin.
        channel: usize,
    },
    /// The engine copies the first `engine_bytes` on `channel` while the CPU copies the rest.
    Split {
        /// Channel chosen round-robin.
        channel: usize,
        /// Bytes for the engine.
        engine_bytes: usize,
    },
}

/// A decision. Engine and split decisions hold one of the M in-flight slots until
/// [`Mover::release`] (the execution paths release it when the engine part completes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The path.
    pub path: Path,
    /// CPU-copied head bytes before the engine part (§5.2: equal 64 B offsets).
    pub head: usize,
}

impl Decision {
    const CPU: Decision = Decision {
        path: Path::Cpu,
        head: 0,
    };
}

/// Where a request stands against its threshold, and whether it is explored (one side of an
/// A/B trial, see [`crate::adapt`]): settled once per request, before the rest of the decision.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Trial {
    /// The threshold in effect for the request's direction, locality and alignment.
    pub threshold: usize,
    /// The band around it the request falls in, while thresholds adapt.
    pub band: Option<Band>,
    /// Sent down the other path.
    pub explored: bool,
}

impl Trial {
    /// No trial: for policies that do not schedule.
    pub const NONE: Trial = Trial {
        threshold: 0,
        band: None,
        explored: false,
    };

    /// Whether the request goes to the CPU on account of its size: below the threshold and
    /// not explored, or at or above it and explored.
    #[inline]
    pub fn cpu(&self, len: usize) -> bool {
        (len >= self.threshold) == self.explored
    }
}

impl Mover {
    /// Chooses CPU, engine or split for a `len`-byte copy from `src` to `dst`.
    ///
    /// Order of checks (each cheap; the common small request returns after the first two, and
    /// a synchronous one below every threshold in effect never gets here: [`Mover::copy_raw`]
    /// sends it to the CPU after reading one cache line, which measured 3.5% of throughput
    /// at 16–28 KiB reads against policy `cpu` when it went through all of this):
    /// 1. policy `cpu` → CPU; policy `engine` → engine on the next channel;
    /// 2. below the threshold for (direction, locality, alignment) → CPU, and at or above it
    ///    on to the checks below; while thresholds adapt, one in [`crate::adapt::EXPLORE`]
    ///    synchronous requests within a factor of 2 of the threshold goes the other way (an
    ///    A/B trial, see [`crate::adapt`]);
    /// 3. writes whose source and destination differ in 64 B offset → CPU; equal non-zero
    ///    offsets → the CPU takes the head up to the line boundary (§5.2);
    /// 4. the engine runs on the application's cores (helper threads) and callers already
    ///    occupy every core the engine does not use — bulk copies in progress now, or threads
    ///    that copied during the last adaptation epoch — → CPU (offloading would only add a
    ///    thread competing for the same cores). A synchronous copy checks the epoch's callers
    ///    before anything else and then skips this function altogether
    ///    ([`Mover::copy_raw`]);
    /// 5. a synchronous copy while M engine requests are already in flight (atomics at the
    ///    caller, no central thread) → CPU. M is where the engine stops gaining bandwidth, so
    ///    a caller that would wait in its queue is served sooner by its own CPU. An
    ///    asynchronous submitter (`sync` false) does not wait: it counts towards M but is
    ///    admitted by the channel's queue depth instead ([`Mover::submit_recorded`]: EasyIO
    ///    §4.4 for reads), so that tasks on one core keep several copies in flight;
    /// 6. latency-critical and the round-robin channel has queued work → CPU;
    /// 7. synchronous copies to or from slow memory at or above `split_min_bytes` → split in
    ///    proportion to the bandwidths in effect (§5.3; see [`crate::adapt`]). Fastmove splits
    ///    reads only; measured here with a spare core, splitting durable writes too gains
    ///    1.01–1.09× cpu-only on `bench mix`'s write mixes (two cores write 1.5× one core's
    ///    bandwidth). Otherwise → engine.
    #[inline]
    pub fn decide(
        &self,
        dst: *const u8,
        src: *const u8,
        len: usize,
        hints: &Hints,
        sync: bool,
    ) -> Decision {
        self.decide_after(
            dst,
            src,
            len,
            hints,
            sync,
            self.trial(dst, src, len, hints, sync),
        )
    }

    /// Settles the trial of a request: its threshold and band, and, for a synchronous one in
    /// a band, whether it is explored (counted); [`Trial::NONE`] unless the policy is `auto`.
    #[inline]
    pub(crate) fn trial(
        &self,
        dst: *const u8,
        src: *const u8,
        len: usize,
        hints: &Hints,
        sync: bool,
    ) -> Trial {
        if self.policy != Policy::Auto {
            return Trial::NONE;
        }
        let threshold = self.threshold_for(dst, src, hints);
        let band = if sync {
            self.adapt.band(hints.direction, threshold, len)
        } else {
            None
        };
        let explored = self.adapt.explore(band);
        if explored {
            self.counters.add(Counter::explored, 1);
        }
        Trial {
            threshold,
            band,
            explored,
        }
    }

    /// [`Mover::decide`] once the request's [`Trial`] is settled.
    #[inline]
    pub(crate) fn decide_after(
        &self,
        dst: *const u8,
        src: *const u8,
        len: usize,
        hints: &Hints,
        sync: bool,
        trial: Trial,
    ) -> Decision {
        match self.policy {
            Policy::Cpu => return Decision::CPU,
            Policy::Engine => {
                self.inflight.fetch_add(1, Ordering::Relaxed);
                return Decision {
                    path: Path::Engine {
                        channel: self.next_channel(),
                    },
                    head: 0,
                };
            }
            Policy::Auto => {}
        }
        let (d, s) = (dst as usize, src as usize);
        let aligned = (d | s) % 64 == 0;
        if self.engine_channels == 0 {
            return Decision::CPU;
        }
        if trial.cpu(len) {
            if !trial.explored {
                self.counters.add(Counter::below_threshold, 1);
            }
            return Decision::CPU;
        }
        let mut head = 0;
        if hints.direction == Direction::ToSlow && !aligned && self.align_writes {
            if d % 64 != s % 64 {
                self.counters.add(Counter::misaligned_writes, 1);
                return Decision::CPU;
            }
            head = 64 - d % 64;
        }
        if self.cores_shared
            && (self.active_bulk.load(Ordering::Relaxed) > self.spare_cores
                || self.adapt.callers() > self.spare_cores)
        {
            self.counters.add(Counter::fallback_busy_cores, 1);
            return Decision::CPU;
        }
        if self.inflight.fetch_add(1, Ordering::AcqRel)
            >= self.concurrency_limit.load(Ordering::Relaxed)
            && sync
        {
            self.inflight.fetch_sub(1, Ordering::Release);
            self.counters.add(Counter::fallback_saturated, 1);
            return Decision::CPU;
        }
        let channel = self.next_channel();
        if hints.latency_critical && self.engine.queue_depth(channel) > 0 {
            self.inflight.fetch_sub(1, Ordering::Release);
            self.counters.add(Counter::fallback_latency, 1);
            return Decision::CPU;
        }
        let body = len - head;
        if sync
            && self.split
            && hints.direction != Direction::Dram
            && body >= self.split_min_bytes.load(Ordering::Relaxed)
        {
            let share = |s: f64| (body as f64 * s) as usize / 4096 * 4096;
            let engine_bytes = if self.split_share > 0.0 {
                share(self.split_share)
            } else {
                match self
                    .adapt
                    .split_estimates()
                    .engine_share(hints.direction, body, 4096)
                {
                    n if n < 4096 && self.adapt.explore_split() => {
                        self.counters.add(Counter::explored, 1);
                        share(EXPLORE_SHARE)
                    }
                    n => n,
                }
            };
            if engine_bytes < 4096 {
                self.inflight.fetch_sub(1, Ordering::Release);
                return Decision::CPU;
            }
            return Decision {
                path: Path::Split {
                    channel,
                    engine_bytes,
                },
                head,
            };
        }
        Decision {
            path: Path::Engine { channel },
            head,
        }
    }

    /// The engine threshold in effect for a copy from `src` to `dst` (its direction, locality
    /// and alignment).
    #[inline]
    pub(crate) fn threshold_for(&self, dst: *const u8, src: *const u8, hints: &Hints) -> usize {
        let aligned = (dst as usize | src as usize).is_multiple_of(64);
        self.adapt
            .threshold(hints.direction, hints.remote, !aligned)
    }

    /// Gives back the in-flight slot an engine or split decision took.
    #[inline]
    pub fn release(&self, d: &Decision) {
        if d.path != Path::Cpu {
            self.inflight.fetch_sub(1, Ordering::Release);
        }
    }

    fn next_channel(&self) -> usize {
        let n = self.engine_channels;
        let start = self.rr.fetch_add(1, Ordering::Relaxed);
        // Skip suspended channels; if all are suspended the submit reports it.
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&c| !self.engine.is_suspended(c))
            .unwrap_or(start % n)
    }
}
