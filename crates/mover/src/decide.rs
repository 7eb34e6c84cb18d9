//! The scheduler's decision (Fastmove §5.4): [`Mover::decide`] chooses CPU, engine or split
//! for a request and says why ([`Reason`], counted per reason); a synchronous copy takes the
//! same rules through `decide_sync`, whose shortcut settles the common small request after
//! one line of scheduler state. The execution paths (`transfer.rs`) only carry decisions out;
//! the one way a request still reaches the CPU after its decision is the engine refusing its
//! batch, which `refused` turns into a counted [`Reason::QueueFull`] decision.

use std::sync::atomic::Ordering;

use switchyard_engine::clock;

use crate::adapt::{Band, Explore};
use crate::bandwidth::bin;
use crate::beside;
use crate::config::Policy;
use crate::counters::Counter;
use crate::hints::{Direction, Hints};
use crate::qos::Class;
use crate::Mover;

/// How much longer than the CPU the engine may take over an asynchronous copy when the
/// caller's runtime has other tasks to run meanwhile: the core computes while the engine
/// copies, so a somewhat slower engine still finishes the work sooner.
const OVERLAP_ALLOWANCE: f64 = 2.0;

/// How often an asynchronous copy kept off a slower engine goes to it anyway, ns.
pub(crate) const ENGINE_PROBE_NS: u64 = 50_000_000;

/// What the decision needs to know of an engine part in flight (to take it back).
pub(crate) struct Part<'a> {
    /// The request's hints.
    pub hints: &'a Hints,
    /// Its channel.
    pub channel: usize,
    /// Its bytes.
    pub len: usize,
    /// When it was submitted ([`clock::now_ns`]).
    pub submitted_ns: u64,
}

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
        /// Bytes of the whole split, the engine's and the CPU's: the size whose bin the
        /// split's estimates are read from, and so the bin its two sides' rates go to.
        body: usize,
    },
}

/// Why a request takes its path. Every decision names one, and each reason that sends a
/// request away from the path its size would give it is counted ([`Reason::counter`],
/// `switchyard stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Policy `cpu` or `engine`, or no engine channel: the scheduler is not consulted.
    Fixed,
    /// Below the size threshold for its direction, locality and alignment.
    BelowThreshold,
    /// Sent to the CPU as one side of an A/B trial although at or above its threshold (the
    /// trial itself is counted as `explored`).
    Trial,
    /// A write whose source and destination differ in 64 B offset (§5.2).
    MisalignedWrite,
    /// Callers already busy every core a helper-thread engine does not use.
    BusyCores,
    /// A synchronous request while M engine requests are in flight.
    Saturated,
    /// A latency-critical request whose channel has queued work.
    LatencyQueue,
    /// An asynchronous read while every channel has 2 or more batches queued (EasyIO's read
    /// admission, §4.4 Listing 2).
    ReadAdmission,
    /// The engine refused the batch (its queue full, or the channel suspended).
    QueueFull,
    /// An asynchronous request the engine, as measured now, would finish later than the CPU
    /// (later than twice the CPU's time when the caller has other tasks to run meanwhile).
    EngineSlow,
    /// A latency tenant's synchronous engine copy no worker had started by the time the CPU
    /// would have finished it: the caller took it back.
    TakenBack,
    /// A split's engine share the engine had not started when the CPU finished its own: the
    /// CPU took it back.
    Reclaimed,
    /// A split whose engine share the estimates put under one page.
    NoEngineShare,
    /// At or above its threshold, and nothing stood in the way: engine or split.
    Offload,
}

impl Reason {
    /// The counter that counts requests decided for this reason; `None` for reasons the path
    /// counters already tell (`Fixed`, `Offload`) and for trials (counted as `explored`).
    pub fn counter(self) -> Option<Counter> {
        Some(match self {
            Reason::Fixed | Reason::Offload | Reason::Trial => return None,
            Reason::BelowThreshold => Counter::below_threshold,
            Reason::MisalignedWrite => Counter::misaligned_writes,
            Reason::BusyCores => Counter::fallback_busy_cores,
            Reason::Saturated => Counter::fallback_saturated,
            Reason::LatencyQueue => Counter::fallback_latency,
            Reason::ReadAdmission => Counter::fallback_queue_depth,
            Reason::QueueFull => Counter::fallback_queue_full,
            Reason::EngineSlow => Counter::fallback_engine_slow,
            Reason::TakenBack => Counter::taken_back,
            Reason::Reclaimed => Counter::reclaimed,
            Reason::NoEngineShare => Counter::no_engine_share,
        })
    }
}

/// A decision. Engine and split decisions hold one of the M in-flight slots until
/// [`Mover::release`] (the execution paths release it when the engine part completes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The path.
    pub path: Path,
    /// CPU-copied head bytes before the engine part (§5.2: equal 64 B offsets).
    pub head: usize,
    /// Why.
    pub reason: Reason,
}

/// The decision for a synchronous copy ([`Mover::decide_sync`]) and what its execution needs
/// to know of how it was reached.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SyncDecision {
    pub decision: Decision,
    /// The request's trial ([`Trial::NONE`] when decided before one was settled).
    pub trial: Trial,
    /// Counted in `active_bulk` until the copy is done.
    pub bulk: bool,
    /// Decided by the shortcut before any trial (below every threshold, or busy cores): the
    /// copy is not timed for adaptation.
    pub early: bool,
}

/// Where a request stands against its threshold, and whether it is explored (one side of an
/// A/B trial, see [`crate::adapt`]): settled once per request, before the rest of the decision.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Trial {
    /// The threshold in effect for the request's direction, locality and alignment.
    pub threshold: usize,
    /// The band around it the request falls in, while thresholds adapt.
    pub band: Option<Band>,
    /// Whether it is sent down the other path, and timed for the trial there.
    pub explore: Explore,
}

impl Trial {
    /// No trial: for policies that do not schedule.
    pub const NONE: Trial = Trial {
        threshold: 0,
        band: None,
        explore: Explore::No,
    };

    /// Whether the request goes to the CPU on account of its size: below the threshold and
    /// not explored, or at or above it and explored.
    #[inline]
    pub fn cpu(&self, len: usize) -> bool {
        (len >= self.threshold) == self.explored()
    }

    /// Sent down the other path.
    #[inline]
    pub fn explored(&self) -> bool {
        self.explore.explored()
    }
}

impl Mover {
    /// Chooses CPU, engine or split for a `len`-byte copy from `src` to `dst`.
    ///
    /// Order of checks (each cheap; the common small request returns after the first two, and
    /// a synchronous one below every threshold in effect never gets here: [`Mover::copy_raw`]
    /// sends it to the CPU after reading one cache line, as `decide_sync` does):
    /// 1. policy `cpu` → CPU; policy `engine` → engine on the next channel;
    /// 2. below the threshold for (direction, locality, alignment) → CPU, and at or above it
    ///    on to the checks below; while thresholds adapt, one in `mover.adaptation.explore`
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
    /// 6. an asynchronous request that the engine, as measured right now (its turnaround for
    ///    the size), would finish later than the CPU copies it → CPU: a task
    ///    that waits on a slower engine runs slower than it would copying. When the caller's
    ///    runtime has other tasks to run meanwhile ([`crate::beside`]) the engine may take up
    ///    to twice the CPU's time (the core computes while it copies). One such request in
    ///    50 ms goes to the engine anyway, so the estimates see it recover;
    /// 7. latency-critical and the round-robin channel has queued work → CPU;
    /// 8. an asynchronous read bound for the engine goes to a channel with fewer than 2
    ///    batches queued, or to the CPU when there is none (EasyIO's admission);
    /// 9. synchronous copies at or above `split_min_bytes` → split in proportion to the
    ///    bandwidths in effect (§5.3; see [`crate::adapt`]). Fastmove splits reads only; with
    ///    a spare core, splitting durable writes pays too (two cores write more than one;
    ///    `docs/scheduler.md` has the figures), and so does a DRAM-to-DRAM copy (a program's
    ///    large `memcpy` through the memcpy preload: 2.1× at 1 MiB here). Otherwise → engine.
    ///
    /// After the decision, a request reaches the CPU only through this module too: the
    /// engine refusing its batch ([`Reason::QueueFull`], `refused`), or the caller taking back
    /// an engine part no worker has started ([`Reason::TakenBack`] at the deadline
    /// `take_back_at` gives, [`Reason::Reclaimed`] for a split's share; `taken_back`).
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

    /// The decision for a synchronous copy, with the two checks that let most requests skip
    /// the rest: a request below every threshold of its direction goes to the CPU after
    /// reading one line of scheduler state (through all of [`Mover::decide`], small reads ran
    /// measurably behind policy `cpu`); and while the last epoch saw callers on every
    /// core a helper-thread engine does not use, every request goes to the CPU untimed and
    /// unexplored. A bulk request is counted in `active_bulk` before the rest of the decision
    /// (so that it sees itself), until its execution ends.
    #[inline]
    pub(crate) fn decide_sync(
        &self,
        dst: *const u8,
        src: *const u8,
        len: usize,
        hints: &Hints,
    ) -> SyncDecision {
        let unexplored = |reason| SyncDecision {
            decision: self.cpu(reason),
            trial: Trial::NONE,
            bulk: false,
            early: true,
        };
        if len < self.adapt.cpu_below(hints.direction) {
            return unexplored(Reason::BelowThreshold);
        }
        if self.policy == Policy::Auto
            && self.cores_shared
            && self.adapt.callers() > self.spare_cores
            && !self.class(hints).is_bulk()
        {
            return unexplored(Reason::BusyCores);
        }
        let trial = self.trial(dst, src, len, hints, true);
        // Bulk callers are counted while they copy, so others see how busy the cores are; a
        // request its trial sends to the CPU on account of its size is not one.
        let bulk = self.cores_shared
            && self.policy == Policy::Auto
            && !trial.cpu(len)
            && len >= self.adapt.min_threshold(hints.direction);
        if bulk {
            self.active_bulk.fetch_add(1, Ordering::Relaxed);
        }
        SyncDecision {
            decision: self.decide_after(dst, src, len, hints, true, trial),
            trial,
            bulk,
            early: false,
        }
    }

    /// The engine refused the batch of `d`: its slot goes back and the CPU copies, counted.
    pub(crate) fn refused(&self, d: &Decision) -> Decision {
        self.taken_back(d, Reason::QueueFull)
    }

    /// A CPU decision for `reason`, counted.
    #[inline]
    fn cpu(&self, reason: Reason) -> Decision {
        if let Some(c) = reason.counter() {
            self.counters.add(c, 1);
        }
        Decision {
            path: Path::Cpu,
            head: 0,
            reason,
        }
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
        let explore = self.adapt.explore(band);
        if explore.explored() {
            self.counters.add(Counter::explored, 1);
        }
        Trial {
            threshold,
            band,
            explore,
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
            Policy::Cpu => return self.cpu(Reason::Fixed),
            Policy::Engine => {
                self.inflight.fetch_add(1, Ordering::Relaxed);
                return Decision {
                    path: Path::Engine {
                        channel: self.next_channel(hints),
                    },
                    head: 0,
                    reason: Reason::Fixed,
                };
            }
            Policy::Auto => {}
        }
        if self.engine_channels == 0 {
            return self.cpu(Reason::Fixed);
        }
        if trial.cpu(len) {
            return self.cpu(if trial.explored() {
                Reason::Trial
            } else {
                Reason::BelowThreshold
            });
        }
        let head = match self.write_head(dst, src, hints) {
            Some(head) => head,
            None => return self.cpu(Reason::MisalignedWrite),
        };
        if self.class(hints).is_bulk() {
            return self.claim_for_bulk(head, hints);
        }
        if self.cores_shared
            && (self.active_bulk.load(Ordering::Relaxed) > self.spare_cores
                || self.adapt.callers() > self.spare_cores)
        {
            return self.cpu(Reason::BusyCores);
        }
        if !sync && self.engine_slower(len - head, hints.direction) {
            return self.cpu(Reason::EngineSlow);
        }
        self.claim_engine(len - head, head, hints, sync)
    }

    /// Whether the engine, as the live estimates measure it now (the turnaround of the
    /// requests of this size it was given: submission to completion, so a starved helper
    /// thread's start-up delay and preemptions show), would finish an asynchronous copy
    /// later than the CPU would, allowing twice the CPU's time when the caller's runtime has
    /// other tasks to run meanwhile. False for one
    /// request every [`ENGINE_PROBE_NS`] (counted as explored): the estimates only move with
    /// copies the engine finishes, so a path never taken could never be found faster again.
    fn engine_slower(&self, len: usize, dir: Direction) -> bool {
        let e = self.bandwidth.of(dir);
        let b = bin(len);
        let cpu_ns = len as f64 / e.cpu[b].get();
        let engine_ns = match e.turnaround[b].get() {
            // Not measured yet: twice the CPU's time, which only a caller with other tasks
            // to run offloads (a lone one sends a probe).
            t if t <= 0.0 => 2.0 * cpu_ns,
            t => len as f64 / t,
        };
        let allowance = if beside::tasks_beside() > 0 {
            OVERLAP_ALLOWANCE
        } else {
            1.0
        };
        if engine_ns <= cpu_ns * allowance {
            return false;
        }
        let now = clock::now_ns();
        let due = self.next_engine_probe_ns.load(Ordering::Relaxed);
        if now >= due
            && self
                .next_engine_probe_ns
                .compare_exchange(
                    due,
                    now + ENGINE_PROBE_NS,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            self.counters.add(Counter::explored, 1);
            return false;
        }
        true
    }

    /// When a synchronous caller waiting on engine part `f` takes it back if no worker has
    /// started it ([`Reason::TakenBack`]): for a latency tenant, once the CPU would have
    /// finished it (its bin's CPU estimate after submission) — at once if the caller runs on
    /// the core the channel's worker is pinned to, where waiting cannot let the worker start.
    /// `None`: wait for the engine (a bulk copy stays on its throttled channel; an unmanaged
    /// one leaves the choice to the thresholds and the split).
    pub(crate) fn take_back_at(&self, f: &Part) -> Option<u64> {
        if !matches!(self.class(f.hints), Class::Latency(_)) {
            return None;
        }
        if self.on_worker_cpu(f.channel) {
            return Some(0);
        }
        let cpu = self.bandwidth.of(f.hints.direction).cpu[bin(f.len)].get();
        Some(f.submitted_ns + (f.len as f64 / cpu.max(0.1)) as u64)
    }

    /// The decision after the caller cancelled engine part `d` before a worker started it
    /// (`reason`: [`Reason::TakenBack`] or [`Reason::Reclaimed`]): its slot goes back and the
    /// CPU copies it, counted.
    pub(crate) fn taken_back(&self, d: &Decision, reason: Reason) -> Decision {
        self.release(d);
        Decision {
            head: d.head,
            ..self.cpu(reason)
        }
    }

    /// Whether the calling thread runs on the CPU `channel`'s worker is pinned to.
    pub(crate) fn on_worker_cpu(&self, channel: usize) -> bool {
        self.engine
            .worker_cpu(channel)
            .is_some_and(|w| switchyard_engine::cpus::current() == Some(w))
    }

    /// A bulk tenant's offloaded copy (module `qos`): the engine alone, on its class's
    /// channels, whatever the load. It waits there rather than move to the CPU — no busy-core
    /// or saturation fallback, no read admission, no split — so a throttle cannot leak.
    #[inline]
    fn claim_for_bulk(&self, head: usize, hints: &Hints) -> Decision {
        self.inflight.fetch_add(1, Ordering::AcqRel);
        Decision {
            path: Path::Engine {
                channel: self.next_channel(hints),
            },
            head,
            reason: Reason::Offload,
        }
    }

    /// The last checks of a request bound for the engine (`body` bytes after a CPU-copied
    /// `head`): an in-flight slot under M, the channel (a latency-critical request avoids a
    /// busy one; an asynchronous read needs one with room), and engine or split.
    #[inline]
    fn claim_engine(&self, body: usize, head: usize, hints: &Hints, sync: bool) -> Decision {
        if self.inflight.fetch_add(1, Ordering::AcqRel)
            >= self.concurrency_limit.load(Ordering::Relaxed)
            && sync
        {
            self.inflight.fetch_sub(1, Ordering::Release);
            return self.cpu(Reason::Saturated);
        }
        let mut channel = self.next_channel(hints);
        if hints.latency_critical && self.engine.queue_depth(channel) > 0 {
            self.inflight.fetch_sub(1, Ordering::Release);
            return self.cpu(Reason::LatencyQueue);
        }
        if !sync && hints.direction == Direction::FromSlow {
            match self.admit_read(channel, hints) {
                Some(c) => channel = c,
                None => {
                    self.inflight.fetch_sub(1, Ordering::Release);
                    return self.cpu(Reason::ReadAdmission);
                }
            }
        }
        let offload = |path| Decision {
            path,
            head,
            reason: Reason::Offload,
        };
        if sync && self.split && body >= self.split_from(hints.direction) {
            let engine_bytes = self.split_bytes(hints.direction, body);
            if engine_bytes < 4096 {
                self.inflight.fetch_sub(1, Ordering::Release);
                return self.cpu(Reason::NoEngineShare);
            }
            return offload(Path::Split {
                channel,
                engine_bytes,
                body,
            });
        }
        offload(Path::Engine { channel })
    }

    /// The smallest synchronous request that is split: `split_min_bytes`, and while a
    /// profile's thresholds adapt no more than the floor of the band explored below the
    /// smallest threshold in effect. The tuner measures offloading as a split and puts the
    /// split minimum at its smallest threshold, so a threshold explored or lowered below that
    /// minimum must split too: otherwise its trials would test the engine alone, and a
    /// profile whose thresholds were all "never" (and so its split minimum) could never
    /// find the split its tune missed.
    #[inline]
    fn split_from(&self, dir: Direction) -> usize {
        let configured = self.split_min_bytes.load(Ordering::Relaxed);
        self.adapt
            .split_floor(dir)
            .map_or(configured, |floor| configured.min(floor))
    }

    /// The CPU-copied head of an offloaded write (§5.2): 0 unless a write's source and
    /// destination share a non-zero 64 B offset, then up to the line boundary; `None` when
    /// they differ in offset (the CPU copies it all).
    #[inline]
    fn write_head(&self, dst: *const u8, src: *const u8, hints: &Hints) -> Option<usize> {
        let (d, s) = (dst as usize, src as usize);
        if hints.direction != Direction::ToSlow || (d | s) % 64 == 0 || !self.align_writes {
            return Some(0);
        }
        (d % 64 == s % 64).then(|| 64 - d % 64)
    }

    /// The engine's share, in whole pages, of a split of `body` bytes: the configured share,
    /// else the estimates' (§5.3); when they give the engine nothing, one in a few such splits
    /// explores with `mover.adaptation.explore_share` to keep the estimates live.
    fn split_bytes(&self, direction: Direction, body: usize) -> usize {
        let share = |s: f64| (body as f64 * s) as usize / 4096 * 4096;
        if self.split_share > 0.0 {
            return share(self.split_share);
        }
        match self
            .adapt
            .split_estimates()
            .engine_share(direction, body, 4096)
        {
            n if n < 4096 && self.adapt.explore_split() => {
                self.counters.add(Counter::explored, 1);
                share(self.adapt.pace().explore_share)
            }
            n => n,
        }
    }

    /// EasyIO's read admission: the first channel from `preferred` on with fewer than 2
    /// batches queued.
    fn admit_read(&self, preferred: usize, hints: &Hints) -> Option<usize> {
        let (first, n) = self
            .qos
            .as_ref()
            .map_or((0, self.engine_channels), |q| q.channels(self.class(hints)));
        (0..n)
            .map(|k| first + (preferred - first + k) % n)
            .find(|&c| self.engine.queue_depth(c) < 2 && !self.engine.is_suspended(c))
    }

    /// The class of a request's tenant ([`Class::Unmanaged`] without tenants).
    #[inline]
    pub(crate) fn class(&self, hints: &Hints) -> Class {
        self.qos
            .as_ref()
            .map_or(Class::Unmanaged, |q| q.class(hints.tenant))
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

    fn next_channel(&self, hints: &Hints) -> usize {
        if let Some(q) = &self.qos {
            return q.channel(self.class(hints), &*self.engine);
        }
        let n = self.engine_channels;
        let start = self.rr.fetch_add(1, Ordering::Relaxed);
        // Skip suspended channels; if all are suspended the submit reports it.
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&c| !self.engine.is_suspended(c))
            .unwrap_or(start % n)
    }
}
