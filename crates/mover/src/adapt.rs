//! Online adaptation: the thresholds and split estimates the scheduler uses, and the epochs
//! that nudge them when live measurements disagree with the profile (Fastmove names automatic
//! tuning as future work, §7).
//!
//! The live estimates ([`Bandwidth`]) follow every sampled copy. Acting on them per request
//! would let noise steer the scheduler, so [`Mover::decide`](crate::Mover::decide) reads values
//! *in effect*, which change only at epochs: every [`EPOCH_NS`] of sampled traffic, run by
//! whichever caller notices one is due (no thread, no lock on the request path). A change is
//! - bounded: a threshold moves one size bin (×2 or ÷2) per step and at most [`MAX_SHIFT`]
//!   bins from the tuned value; a split estimate moves at most [`STEP`] of itself per step;
//! - hysteretic: a size bin counts as won by offloading only when the model says offloading is
//!   [`MARGIN`] faster, and as lost only when it is [`MARGIN`] slower (in between it keeps its
//!   side, or takes the profile's where the model agrees with the profile); and every step needs
//!   [`HOLD`] consecutive epochs wishing for it, so noise around a boundary changes nothing
//!   and no step is undone by the next epoch.
//!
//! Thresholds are anchored to the profile. At start the model — CPU time `L/B_C` against
//! offload time `t0 + L/B_D`, or for a split read `(L + B_C·t0)/(B_C + B_D)` — is evaluated on
//! the profile's bandwidths, which gives the profile's crossover bin; each epoch evaluates it on
//! the live estimates; the threshold in effect is the tuned one moved by the difference in
//! bins. Live estimates that agree with the profile therefore change nothing, whatever the
//! model's absolute error. Without a profile the configured thresholds are the user's choice
//! and stay; the split estimates still adapt.
//!
//! The engine is sampled only on requests it runs. So that a raised threshold can come back
//! down when the engine recovers, one in [`EXPLORE`] requests between the tuned threshold and
//! the raised one is offloaded anyway (counted as `explored`); below the tuned threshold the
//! engine's estimate stays at the profile's value, so an engine faster than profiled is not
//! discovered there. Likewise one in [`EXPLORE`] splits whose share from the estimates rounds to
//! nothing is split anyway with [`EXPLORE_SHARE`] to the engine, so that no estimate can switch
//! splitting off for good.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crossbeam_utils::CachePadded;

use switchyard_engine::clock;

use crate::bandwidth::{Bandwidth, DirectionEstimates, Ewma, BINS, MIN_SAMPLED};
use crate::config::{Locality, Thresholds};
use crate::counters::{Counter, Counters};
use crate::hints::Direction;
use crate::profile::NEVER;

/// Time between epochs, ns.
pub const EPOCH_NS: u64 = 20_000_000;
/// Relative advantage the model must show before a bin changes sides.
pub const MARGIN: f64 = 0.05;
/// Consecutive epochs that must wish for a step before it is taken.
pub const HOLD: u32 = 3;
/// Largest distance of a threshold from the tuned value, in size bins (factors of 2).
pub const MAX_SHIFT: i32 = 3;
/// Largest step of a split estimate, relative to its value.
pub const STEP: f64 = 0.25;
/// Split estimates within this relative distance of the live ones are left alone.
pub const DEADBAND: f64 = 0.05;
/// One in this many requests between a direction's tuned threshold and its raised one is
/// offloaded anyway, to keep the engine's estimates of those sizes live.
pub const EXPLORE: u32 = 32;
/// The engine's share of a split made although the estimates gave the engine none: one in
/// [`EXPLORE`] such splits, so that the engine's estimates stay live.
pub const EXPLORE_SHARE: f64 = 0.25;
/// Sampled copies per thread between two looks at the clock.
const TICKS: u32 = 8;
/// The directions the tuner profiles, and so the ones adapted.
const ADAPTED: [Direction; 2] = [Direction::ToSlow, Direction::FromSlow];
/// One bin past the largest measured: where a "never" threshold re-enters when lowered.
const TOP: usize = MIN_SAMPLED << BINS;

/// What adapts. Epochs run whenever the mover schedules (policy `auto`), adapting or not:
/// they also count the threads that copied during the last epoch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// The mover schedules per request (policy `auto`): run epochs.
    pub epochs: bool,
    /// Move the thresholds (a profile is applied and the policy schedules).
    pub thresholds: bool,
    /// Nudge the split estimates (splitting with a share from the estimates).
    pub split: bool,
    /// Copies at or above this size are split (model of the offload path).
    pub split_min_bytes: Option<usize>,
}

/// Thresholds and split estimates in effect, and the adaptation state.
pub(crate) struct Adapt {
    /// [direction][remote][unaligned] → engine threshold in effect, bytes.
    thresholds: [[[AtomicUsize; 2]; 2]; 3],
    /// Per direction, the smallest threshold in effect.
    min_threshold: [AtomicUsize; 3],
    /// Per direction: see [`Adapt::cpu_below`].
    cpu_below: CachePadded<[AtomicUsize; 3]>,
    /// The configured (tuned) thresholds, which shifts are relative to.
    base: [[[usize; 2]; 2]; 3],
    /// Per direction: while its thresholds are raised, the smallest tuned one (requests from
    /// there up are explored); `usize::MAX` otherwise.
    explore_from: [AtomicUsize; 3],
    /// Estimates the split ratio is computed from.
    split: Bandwidth,
    settings: Settings,
    next_epoch_ns: AtomicU64,
    /// Threads that copied through this mover during the last epoch.
    callers: AtomicUsize,
    state: Mutex<State>,
}

struct State {
    /// Requests per counter stripe at the last epoch.
    seen: Vec<u64>,
    fresh: Vec<u64>,
    dirs: [DirState; 2],
    /// [direction][cpu, engine][bin] votes for the split estimates.
    rates: [[[Vote; BINS]; 2]; 2],
    startup: [Vote; 2],
}

struct DirState {
    /// Bins where offloading wins (with hysteresis).
    wins: [bool; BINS],
    /// The model's gain per bin on the profile's estimates.
    prior_gain: [f64; BINS],
    /// The model's crossover bin on the profile's estimates.
    prior: usize,
    /// Bins the thresholds are moved from the tuned ones.
    shift: i32,
    vote: Vote,
}

/// True once in [`EXPLORE`] calls on this thread.
#[inline]
fn one_in_explore() -> bool {
    thread_local!(static SEEN: Cell<u32> = const { Cell::new(0) });
    SEEN.with(|n| {
        let v = n.get().wrapping_add(1);
        n.set(v);
        v % EXPLORE == 0
    })
}

/// Consecutive epochs wishing for the same step.
#[derive(Debug, Default, Clone, Copy)]
struct Vote {
    sign: i32,
    count: u32,
}

impl Vote {
    /// Records this epoch's wish (−1, 0 or +1); returns it once [`HOLD`] epochs in a row made
    /// it, else 0.
    fn cast(&mut self, wish: i32) -> i32 {
        if wish == 0 || wish != self.sign {
            *self = Vote {
                sign: wish,
                count: u32::from(wish != 0),
            };
        } else {
            self.count += 1;
        }
        if wish != 0 && self.count >= HOLD {
            self.count = 0;
            wish
        } else {
            0
        }
    }
}

fn table(t: &Thresholds) -> [[[usize; 2]; 2]; 3] {
    let row = |l: &Locality| {
        [
            [l.local_aligned, l.local_unaligned],
            [l.remote_aligned, l.remote_unaligned],
        ]
    };
    [row(&t.to_slow), row(&t.from_slow), row(&t.dram)]
}

/// `t` moved by `s` bins: doubled per positive step, halved per negative one, never below
/// [`MIN_SAMPLED`] (nor below `t` itself when `t` is smaller). A "never" threshold stays
/// never when raised and re-enters at the largest bins when lowered.
fn shifted(t: usize, s: i32) -> usize {
    if s == 0 || (t >= NEVER && s > 0) {
        return t;
    }
    let t = t.min(TOP);
    if s > 0 {
        t << s
    } else {
        (t >> -s).max(t.min(MIN_SAMPLED))
    }
}

/// The smallest bin from which offloading wins in every larger bin; [`BINS`] if the largest
/// bin is lost.
fn crossover(wins: &[bool; BINS]) -> usize {
    BINS - wins.iter().rev().take_while(|&&w| w).count()
}

impl Adapt {
    /// Thresholds in effect start at `configured`; the profile's crossovers are taken from
    /// `prior` (the estimates as seeded from the profile).
    pub(crate) fn new(configured: &Thresholds, prior: &Bandwidth, settings: Settings) -> Adapt {
        let base = table(configured);
        let split = Bandwidth::default();
        split.copy_from(prior);
        let dirs = ADAPTED.map(|d| {
            let prior_gain: [f64; BINS] = std::array::from_fn(|b| gain(&settings, prior.of(d), b));
            // Strictly: a split whose engine share rounds to nothing gains exactly 1.
            let wins = prior_gain.map(|g| g > 1.0);
            DirState {
                wins,
                prior_gain,
                prior: crossover(&wins),
                shift: 0,
                vote: Vote::default(),
            }
        });
        Adapt {
            thresholds: base.map(|d| d.map(|r| r.map(AtomicUsize::new))),
            min_threshold: base
                .map(|d| AtomicUsize::new(d.iter().flatten().copied().min().unwrap_or(0))),
            cpu_below: CachePadded::new(base.map(|d| {
                AtomicUsize::new(if settings.epochs {
                    d.iter().flatten().copied().min().unwrap_or(0)
                } else {
                    0
                })
            })),
            base,
            explore_from: std::array::from_fn(|_| AtomicUsize::new(usize::MAX)),
            split,
            settings,
            next_epoch_ns: AtomicU64::new(clock::now_ns() + EPOCH_NS),
            callers: AtomicUsize::new(0),
            state: Mutex::new(State {
                seen: Vec::new(),
                fresh: Vec::new(),
                dirs,
                rates: Default::default(),
                startup: Default::default(),
            }),
        }
    }

    /// The engine threshold in effect for a request.
    #[inline]
    pub(crate) fn threshold(&self, dir: Direction, remote: bool, unaligned: bool) -> usize {
        self.thresholds[dir.index()][usize::from(remote)][usize::from(unaligned)]
            .load(Ordering::Relaxed)
    }

    /// The smallest threshold in effect for `dir`: smaller requests never touch shared state.
    #[inline]
    pub(crate) fn min_threshold(&self, dir: Direction) -> usize {
        self.min_threshold[dir.index()].load(Ordering::Relaxed)
    }

    /// All thresholds in effect.
    pub(crate) fn in_effect(&self) -> Thresholds {
        let row = |d: Direction| {
            let t = |r, u| self.threshold(d, r, u);
            Locality {
                local_aligned: t(false, false),
                local_unaligned: t(false, true),
                remote_aligned: t(true, false),
                remote_unaligned: t(true, true),
            }
        };
        Thresholds {
            to_slow: row(Direction::ToSlow),
            from_slow: row(Direction::FromSlow),
            dram: row(Direction::Dram),
        }
    }

    /// Whether this request, below the threshold in effect, is one to offload anyway: its
    /// direction's thresholds are raised, it is at least the tuned threshold, and it is this
    /// thread's [`EXPLORE`]th such request.
    #[inline]
    pub(crate) fn explore(&self, dir: Direction, len: usize) -> bool {
        len >= self.explore_from[dir.index()].load(Ordering::Relaxed) && one_in_explore()
    }

    /// Whether this split, whose share from the estimates rounds to nothing, is one to split
    /// anyway with [`EXPLORE_SHARE`] to the engine: this thread's [`EXPLORE`]th such split.
    /// Without it a start-up estimate that grew past every split's size (a preempted worker)
    /// would never be sampled again, and splitting would stay off for good.
    #[inline]
    pub(crate) fn explore_split(&self) -> bool {
        one_in_explore()
    }

    /// Requests of `dir` shorter than this go to the CPU whatever else holds: below every
    /// threshold in effect and not ones that could be explored. 0 unless the mover schedules
    /// (policy `auto`). One cache line serves every direction, so that the common small
    /// request reads one line of scheduler state after its previous copy evicted the rest.
    #[inline]
    pub(crate) fn cpu_below(&self, dir: Direction) -> usize {
        self.cpu_below[dir.index()].load(Ordering::Relaxed)
    }

    /// Threads that copied through the mover during the last epoch (0 before the first).
    #[inline]
    pub(crate) fn callers(&self) -> usize {
        self.callers.load(Ordering::Relaxed)
    }

    /// The estimates a split's ratio is computed from.
    #[inline]
    pub(crate) fn split_estimates(&self) -> &Bandwidth {
        &self.split
    }

    /// Called after each sampled copy: every [`TICKS`] samples on this thread it reads the
    /// clock, and the caller that finds an epoch due runs it.
    #[inline]
    pub(crate) fn tick(&self, live: &Bandwidth, counters: &Counters) {
        if !self.settings.epochs {
            return;
        }
        thread_local!(static SAMPLES: Cell<u32> = const { Cell::new(0) });
        let due = SAMPLES.with(|n| {
            let v = n.get().wrapping_add(1);
            n.set(v);
            v % TICKS == 0
        });
        if !due {
            return;
        }
        let now = clock::now_ns();
        let next = self.next_epoch_ns.load(Ordering::Relaxed);
        if now >= next
            && self
                .next_epoch_ns
                .compare_exchange(next, now + EPOCH_NS, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.epoch(live, counters);
        }
    }

    /// One epoch: compares the live estimates with what is in effect and takes the steps
    /// that [`HOLD`] epochs in a row asked for.
    pub(crate) fn epoch(&self, live: &Bandwidth, counters: &Counters) {
        let Ok(mut st) = self.state.try_lock() else {
            return;
        };
        let st = &mut *st;
        counters.requests_per_stripe(&mut st.fresh);
        let callers = if st.seen.is_empty() {
            0
        } else {
            st.fresh
                .iter()
                .zip(&st.seen)
                .filter(|(a, b)| a != b)
                .count()
        };
        self.callers.store(callers, Ordering::Relaxed);
        std::mem::swap(&mut st.seen, &mut st.fresh);
        if self.settings.split {
            let mut moved = false;
            for (i, d) in ADAPTED.into_iter().enumerate() {
                let (eff, now) = (self.split.of(d), live.of(d));
                for b in 0..BINS {
                    moved |= nudge(&eff.cpu[b], now.cpu[b].get(), &mut st.rates[i][0][b]);
                    moved |= nudge(&eff.engine[b], now.engine[b].get(), &mut st.rates[i][1][b]);
                }
                moved |= nudge(&eff.startup_ns, now.startup_ns.get(), &mut st.startup[i]);
            }
            if moved {
                counters.add(Counter::split_nudges, 1);
            }
        }
        if self.settings.thresholds {
            for (i, d) in ADAPTED.into_iter().enumerate() {
                let s = &mut st.dirs[i];
                for b in 0..BINS {
                    let g = gain(&self.settings, live.of(d), b);
                    if g >= 1.0 + MARGIN {
                        s.wins[b] = true;
                    } else if g <= 1.0 - MARGIN {
                        s.wins[b] = false;
                    } else if (g / s.prior_gain[b] - 1.0).abs() <= MARGIN {
                        // Within the margin and agreeing with the profile: the profile's side.
                        s.wins[b] = s.prior_gain[b] > 1.0;
                    }
                }
                let want =
                    (crossover(&s.wins) as i32 - s.prior as i32).clamp(-MAX_SHIFT, MAX_SHIFT);
                let step = s.vote.cast((want - s.shift).signum());
                if step != 0 {
                    s.shift += step;
                    counters.add(
                        if step > 0 {
                            Counter::threshold_raised
                        } else {
                            Counter::threshold_lowered
                        },
                        1,
                    );
                    self.set_shift(d, s.shift);
                }
            }
        }
    }

    fn set_shift(&self, d: Direction, shift: i32) {
        let base = &self.base[d.index()];
        for (r, row) in self.thresholds[d.index()].iter().enumerate() {
            for (u, t) in row.iter().enumerate() {
                t.store(shifted(base[r][u], shift), Ordering::Relaxed);
            }
        }
        let explore = if shift > 0 {
            base.iter().flatten().copied().min().unwrap_or(usize::MAX)
        } else {
            usize::MAX
        };
        self.explore_from[d.index()].store(explore, Ordering::Relaxed);
        let min = self.thresholds[d.index()]
            .iter()
            .flatten()
            .map(|t| t.load(Ordering::Relaxed))
            .min()
            .unwrap_or(0);
        self.min_threshold[d.index()].store(min, Ordering::Relaxed);
        if self.settings.epochs {
            self.cpu_below[d.index()].store(min.min(explore), Ordering::Relaxed);
        }
    }
}

/// Moves `eff` one bounded step towards `live` once [`HOLD`] epochs in a row found it more than
/// [`DEADBAND`] away on the same side. Returns whether it moved.
fn nudge(eff: &Ewma, live: f64, vote: &mut Vote) -> bool {
    let v = eff.get();
    let wish = if live > v * (1.0 + DEADBAND) {
        1
    } else if live < v * (1.0 - DEADBAND) {
        -1
    } else {
        0
    };
    match vote.cast(wish) {
        0 => false,
        s => {
            eff.set(v + f64::from(s) * (live - v).abs().min(STEP * v));
            true
        }
    }
}

/// The model's CPU time ÷ offload time for a request of bin `b`'s lower bound.
fn gain(settings: &Settings, e: &DirectionEstimates, b: usize) -> f64 {
    let len = MIN_SAMPLED << b;
    let l = len as f64;
    let (bc, bd, t0) = (e.cpu[b].get(), e.engine[b].get(), e.startup_ns.get());
    let cpu = l / bc;
    let split = settings.split_min_bytes.is_some_and(|m| len >= m);
    let offload = if split {
        if l > bc * t0 {
            (l + bc * t0) / (bc + bd)
        } else {
            cpu
        }
    } else {
        t0 + l / bd
    };
    cpu / offload
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bandwidth::bin;

    fn settings() -> Settings {
        Settings {
            epochs: true,
            thresholds: true,
            split: true,
            split_min_bytes: Some(256 << 10),
        }
    }

    /// A profile where writes never win (the engine starts too late for any split to pay)
    /// and reads win from 256 KiB.
    /// Bin 128 KiB of reads sits just past the boundary: offloading it gains 1.3%.
    fn profiled() -> Bandwidth {
        let bw = Bandwidth::default();
        for b in 0..BINS {
            let w = bw.of(Direction::ToSlow);
            w.cpu[b].set(10.0);
            w.engine[b].set(8.0);
            let r = bw.of(Direction::FromSlow);
            r.cpu[b].set(10.0);
            r.engine[b].set(if b == bin(128 << 10) { 16.5 } else { 10.0 });
        }
        bw.of(Direction::ToSlow).startup_ns.set(1_000_000.0);
        bw.of(Direction::FromSlow).startup_ns.set(5_000.0);
        bw
    }

    /// Reads whose engine is 10× slower and starts 8× later than profiled.
    fn slow_reads() -> Bandwidth {
        let live = profiled();
        for b in 0..BINS {
            live.of(Direction::FromSlow).engine[b].set(1.0);
        }
        live.of(Direction::FromSlow).startup_ns.set(40_000.0);
        live
    }

    fn tuned() -> Thresholds {
        let mut t = Thresholds::all(256 << 10);
        t.to_slow = Locality::uniform(NEVER, NEVER);
        t
    }

    fn epochs(a: &Adapt, live: &Bandwidth, c: &Counters, n: usize) {
        for _ in 0..n {
            a.epoch(live, c);
        }
    }

    #[test]
    fn shifts_double_halve_and_keep_never() {
        assert_eq!(shifted(256 << 10, 1), 512 << 10);
        assert_eq!(shifted(256 << 10, -2), 64 << 10);
        assert_eq!(shifted(32 << 10, -3), MIN_SAMPLED);
        assert_eq!(shifted(4096, -1), 4096);
        assert_eq!(shifted(NEVER, 2), NEVER);
        assert_eq!(shifted(NEVER, -1), TOP / 2);
        assert_eq!(shifted(NEVER, 0), NEVER);
    }

    #[test]
    fn votes_need_hold_epochs_in_a_row() {
        let mut v = Vote::default();
        assert_eq!(v.cast(1), 0);
        assert_eq!(v.cast(1), 0);
        assert_eq!(v.cast(1), 1);
        assert_eq!(v.cast(1), 0, "the count starts over after a step");
        assert_eq!(v.cast(-1), 0);
        assert_eq!(v.cast(1), 0);
        assert_eq!(v.cast(0), 0);
        assert_eq!(v.cast(1), 0);
        assert_eq!(v.cast(1), 0);
        assert_eq!(v.cast(1), 1);
    }

    #[test]
    fn live_estimates_equal_to_the_profile_change_nothing() {
        let prior = profiled();
        let a = Adapt::new(&tuned(), &prior, settings());
        let c = Counters::default();
        epochs(&a, &prior, &c, 50);
        assert_eq!(a.in_effect(), tuned());
        let s = c.snapshot();
        assert_eq!(
            (s.threshold_raised, s.threshold_lowered, s.split_nudges),
            (0, 0, 0)
        );
    }

    /// Independent noise of ±2% on each estimate moves the model's gain by up to ±4%: that
    /// flips the 128 KiB bin for a classifier without margin, but moves nothing here.
    #[test]
    fn noise_moves_nothing() {
        let prior = profiled();
        let a = Adapt::new(&tuned(), &prior, settings());
        let c = Counters::default();
        let live = profiled();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut noise = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            1.0 + ((x % 41) as f64 - 20.0) / 1000.0
        };
        for _ in 0..500 {
            for d in ADAPTED {
                for b in 0..BINS {
                    live.of(d).cpu[b].set(prior.of(d).cpu[b].get() * noise());
                    live.of(d).engine[b].set(prior.of(d).engine[b].get() * noise());
                }
            }
            a.epoch(&live, &c);
        }
        assert_eq!(a.in_effect(), tuned());
        assert_eq!(
            c.snapshot().threshold_raised + c.snapshot().threshold_lowered,
            0
        );
    }

    /// The engine turns out much slower than profiled for reads: the read threshold rises one bin
    /// per HOLD epochs up to the bound, counted, and stays there while requests between the
    /// tuned and the raised threshold are explored; when the engine recovers it comes back.
    #[test]
    fn a_slower_engine_raises_the_threshold_in_bounded_steps() {
        let prior = profiled();
        let a = Adapt::new(&tuned(), &prior, settings());
        let c = Counters::default();
        let live = slow_reads();
        let read = |a: &Adapt| a.threshold(Direction::FromSlow, false, false);
        epochs(&a, &live, &c, HOLD as usize - 1);
        assert_eq!(read(&a), 256 << 10, "nothing before HOLD epochs");
        epochs(&a, &live, &c, 1);
        assert_eq!(read(&a), 512 << 10);
        epochs(&a, &live, &c, 100);
        assert_eq!(read(&a), (256 << 10) << MAX_SHIFT, "bounded");
        assert_eq!(
            a.min_threshold(Direction::FromSlow),
            (256 << 10) << MAX_SHIFT
        );
        assert!(
            !a.explore(Direction::FromSlow, 128 << 10),
            "below the tuned threshold"
        );
        let explored = (0..10 * EXPLORE)
            .filter(|_| a.explore(Direction::FromSlow, 256 << 10))
            .count();
        assert_eq!(explored, 10, "one in EXPLORE between tuned and raised");
        assert_eq!(
            a.cpu_below(Direction::FromSlow),
            256 << 10,
            "requests that may be explored are not short-cut to the CPU"
        );
        assert!(!(0..EXPLORE).any(|_| a.explore(Direction::ToSlow, 1 << 30)));
        // The engine recovers (as exploring measures it): back to the tuned threshold.
        epochs(&a, &prior, &c, 100);
        assert_eq!(a.in_effect(), tuned());
        assert_eq!(c.snapshot().threshold_lowered, MAX_SHIFT as u64);
        assert!(
            !a.explore(Direction::FromSlow, 256 << 10)
                && !a.explore(Direction::FromSlow, 256 << 10)
        );
        assert_eq!(c.snapshot().threshold_raised, MAX_SHIFT as u64);
        assert_eq!(a.threshold(Direction::ToSlow, false, false), NEVER);
        assert_eq!(a.min_threshold(Direction::FromSlow), 256 << 10, "recovered");
        assert_eq!(a.cpu_below(Direction::FromSlow), 256 << 10);
        assert_eq!(a.cpu_below(Direction::ToSlow), NEVER);
        assert_eq!(a.min_threshold(Direction::ToSlow), NEVER);
    }

    /// Requests below every threshold take the short cut to the CPU only when the mover
    /// schedules; with a fixed policy the short cut is closed.
    #[test]
    fn the_cpu_short_cut_is_the_smallest_threshold_and_only_when_scheduling() {
        let a = Adapt::new(&tuned(), &profiled(), settings());
        assert_eq!(a.cpu_below(Direction::FromSlow), 256 << 10);
        assert_eq!(a.cpu_below(Direction::ToSlow), NEVER);
        let fixed = Adapt::new(
            &tuned(),
            &profiled(),
            Settings {
                epochs: false,
                ..settings()
            },
        );
        for d in [Direction::ToSlow, Direction::FromSlow, Direction::Dram] {
            assert_eq!(fixed.cpu_below(d), 0);
        }
    }

    /// An engine that starts far sooner than profiled makes splitting writes worth it:
    /// "never" re-enters at the largest bins and comes down step by step.
    #[test]
    fn an_engine_starting_sooner_lowers_a_never_threshold() {
        let prior = profiled();
        let a = Adapt::new(&tuned(), &prior, settings());
        let c = Counters::default();
        let live = profiled();
        live.of(Direction::ToSlow).startup_ns.set(5_000.0);
        epochs(&a, &live, &c, HOLD as usize);
        assert_eq!(a.threshold(Direction::ToSlow, false, false), TOP / 2);
        epochs(&a, &live, &c, 100);
        assert_eq!(a.threshold(Direction::ToSlow, true, true), TOP >> MAX_SHIFT);
        assert_eq!(c.snapshot().threshold_lowered, MAX_SHIFT as u64);
    }

    /// Live estimates that flip every epoch between a much slower engine and the profile
    /// never complete a vote: the threshold never moves.
    #[test]
    fn flapping_never_oscillates_the_threshold() {
        let prior = profiled();
        let a = Adapt::new(&tuned(), &prior, settings());
        let c = Counters::default();
        let (slow, fast) = (slow_reads(), profiled());
        for i in 0..200 {
            a.epoch(if i % 2 == 0 { &slow } else { &fast }, &c);
        }
        // Two epochs slow, one as profiled: still never HOLD in a row.
        for i in 0..300 {
            a.epoch(if i % 3 == 2 { &fast } else { &slow }, &c);
        }
        assert_eq!(a.in_effect(), tuned());
        let s = c.snapshot();
        assert_eq!((s.threshold_raised, s.threshold_lowered), (0, 0));
    }

    #[test]
    fn split_estimates_follow_live_ones_in_bounded_steps() {
        let prior = profiled();
        let a = Adapt::new(&tuned(), &prior, settings());
        let c = Counters::default();
        let live = profiled();
        let b = bin(1 << 20);
        live.of(Direction::FromSlow).engine[b].set(20.0);
        epochs(&a, &live, &c, HOLD as usize);
        let e = a.split_estimates().of(Direction::FromSlow).engine[b].get();
        assert!((e - 12.5).abs() < 1e-9, "one step of 25%: {e}");
        epochs(&a, &live, &c, 10 * HOLD as usize);
        let e = a.split_estimates().of(Direction::FromSlow).engine[b].get();
        assert!((e - 20.0).abs() <= DEADBAND * e, "converged: {e}");
        assert!(c.snapshot().split_nudges >= 3);
        let before = a
            .split_estimates()
            .engine_share(Direction::FromSlow, 1 << 20, 4096);
        epochs(&a, &live, &c, 100);
        let after = a
            .split_estimates()
            .engine_share(Direction::FromSlow, 1 << 20, 4096);
        assert_eq!(before, after, "settled");
    }
}
