//! Online adaptation: the thresholds and split estimates the scheduler uses, and the epochs
//! that nudge them when live measurements disagree with the profile (Fastmove names automatic
//! tuning as future work, §7).
//!
//! Acting on every measurement would let noise steer the scheduler, so
//! [`Mover::decide`](crate::Mover::decide) reads values *in effect*, which change only at
//! epochs: every [`EPOCH_NS`] of sampled traffic, run by whichever caller notices one is due (no
//! thread, no lock on the request path). A change is
//! - bounded: a threshold moves one size bin (×2 or ÷2) per step and at most [`MAX_SHIFT`]
//!   bins from the tuned value; a split estimate moves at most [`STEP`] of itself per step;
//! - hysteretic: a step needs one path to beat the other by [`MARGIN`], and [`HOLD`]
//!   consecutive trials wishing for it, so noise around a boundary changes nothing and no step
//!   is undone by the next trial.
//!
//! **Thresholds move on A/B trials, not on a model.** Around each threshold `T` in effect lie
//! two bands: sizes in `[T/2, T)` go to the CPU, sizes in `[T, 2T)` are offloaded. One in
//! [`EXPLORE`] synchronous requests in each band takes the other path, and requests in the
//! bands are timed end to end on the path they took (`Adapt::record`). A trial ends once
//! both paths of a band have [`EVIDENCE`] samples: the offload path beating the CPU by
//! [`MARGIN`] below `T` asks for a lower threshold, the CPU beating it above `T` for a higher
//! one. Both paths of a trial ran interleaved under the same conditions, so what they share —
//! a helper thread spinning on the caller's sibling core, other callers, a slower memory
//! phase — cancels. (A model fed with per-path bandwidth estimates compared live samples taken
//! under such conditions with a profile measured without them, and moved the thresholds on
//! the difference: on a 2-core VM the CPU copies that ran while the engine's worker spun after
//! a split measured 15–25% slower than profiled, and the read threshold moved a bin, which cost
//! a 128 KiB read mix 15–27% against the profile held fixed.) Without a profile the configured
//! thresholds are the user's choice and stay; the split estimates still adapt.
//!
//! **Split estimates** follow the live samples of splits' two sides (they run at once, so each
//! side's rate is what the split's ratio needs), one bounded step per [`HOLD`] epochs that find
//! them more than [`DEADBAND`] away. One in [`EXPLORE`] splits whose share from the estimates
//! rounds to nothing is split anyway with [`EXPLORE_SHARE`] to the engine, so that no estimate
//! can switch splitting off for good.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crossbeam_utils::CachePadded;

use switchyard_engine::clock;

use crate::bandwidth::{Bandwidth, Ewma, BINS, MIN_SAMPLED};
use crate::config::{Locality, Thresholds};
use crate::counters::{Counter, Counters};
use crate::hints::Direction;
use crate::profile::NEVER;

/// Time between epochs, ns.
pub const EPOCH_NS: u64 = 20_000_000;
/// Relative advantage one path must show in a trial before a threshold moves.
pub const MARGIN: f64 = 0.05;
/// Consecutive trials (epochs, for split estimates) that must wish for a step before it is
/// taken.
pub const HOLD: u32 = 3;
/// Largest distance of a threshold from the tuned value, in size bins (factors of 2).
pub const MAX_SHIFT: i32 = 3;
/// Largest step of a split estimate, relative to its value.
pub const STEP: f64 = 0.25;
/// Split estimates within this relative distance of the live ones are left alone.
pub const DEADBAND: f64 = 0.05;
/// One in this many synchronous requests in a band around a threshold takes the other path,
/// and one in this many splits the estimates rule out is split anyway.
pub const EXPLORE: u32 = 32;
/// The engine's share of a split made although the estimates gave the engine none: one in
/// [`EXPLORE`] such splits, so that the engine's estimates stay live.
pub const EXPLORE_SHARE: f64 = 0.25;
/// Samples each path of a band needs before the band's trial counts.
pub const EVIDENCE: u64 = 8;
/// One in this many requests in a band on its usual path is timed (every explored one is).
pub const SAMPLE_BAND_EVERY: u32 = 16;
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
}

/// The band around its threshold a request falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Band {
    /// `[T/2, T)`: the CPU's, offloaded when explored.
    Below,
    /// `[T, 2T)`: offloaded, the CPU's when explored.
    Above,
}

impl Band {
    /// The path the band's requests take when not explored.
    pub(crate) fn usual(self) -> Arm {
        match self {
            Band::Below => Arm::Cpu,
            Band::Above => Arm::Offload,
        }
    }
}

/// The path a timed request took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arm {
    /// The CPU copied it.
    Cpu,
    /// The scheduler offloaded it (engine or split).
    Offload,
}

/// Bytes and nanoseconds one path of one band spent since its trial began.
#[derive(Debug, Default)]
struct Tally {
    bytes: AtomicU64,
    ns: AtomicU64,
    samples: AtomicU64,
}

impl Tally {
    fn add(&self, bytes: u64, ns: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.ns.fetch_add(ns.max(1), Ordering::Relaxed);
        self.samples.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes per ns so far.
    fn rate(&self) -> f64 {
        self.bytes.load(Ordering::Relaxed) as f64 / self.ns.load(Ordering::Relaxed).max(1) as f64
    }

    fn reset(&self) {
        self.bytes.store(0, Ordering::Relaxed);
        self.ns.store(0, Ordering::Relaxed);
        self.samples.store(0, Ordering::Relaxed);
    }
}

/// One direction's trials: [band][arm].
type Trials = [[Tally; 2]; 2];

/// Thresholds and split estimates in effect, and the adaptation state.
pub(crate) struct Adapt {
    /// [direction][remote][unaligned] → engine threshold in effect, bytes.
    thresholds: [[[AtomicUsize; 2]; 2]; 3],
    /// Per direction, the smallest threshold in effect.
    min_threshold: [AtomicUsize; 3],
    /// Per direction: see [`Adapt::cpu_below`].
    cpu_below: CachePadded<[AtomicUsize; 3]>,
    /// The configured (tuned) thresholds, which shifts are relative to (a swapped-in
    /// profile replaces them under the state lock).
    base: [[[AtomicUsize; 2]; 2]; 3],
    /// Whether the thresholds move now: [`Settings::thresholds`], or a profile swapped in
    /// where the configuration lets thresholds adapt.
    thresholds_adapt: std::sync::atomic::AtomicBool,
    /// Per adapted direction, the trials of its bands.
    trials: [Trials; 2],
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
    /// Per adapted direction: bins the thresholds are moved from the tuned ones, and the
    /// trials' votes.
    shift: [i32; 2],
    vote: [Vote; 2],
    /// [direction][cpu, engine][bin] votes for the split estimates.
    rates: [[[Vote; BINS]; 2]; 2],
    startup: [Vote; 2],
}

/// True once in `every` calls on this thread, counted in `key` (one counter per purpose, so
/// that purposes do not skew each other's periods).
#[inline]
fn once_in(key: &'static std::thread::LocalKey<Cell<u32>>, every: u32) -> bool {
    key.with(|n| {
        let v = n.get().wrapping_add(1);
        n.set(v);
        v % every == 0
    })
}

thread_local! {
    static EXPLORED: Cell<u32> = const { Cell::new(0) };
    static SPLITS_EXPLORED: Cell<u32> = const { Cell::new(0) };
    static BAND_SAMPLES: Cell<u32> = const { Cell::new(0) };
    static SAMPLES: Cell<u32> = const { Cell::new(0) };
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

impl Adapt {
    /// Thresholds in effect start at `configured`; the split estimates at `prior` (the
    /// estimates as seeded from the profile).
    pub(crate) fn new(configured: &Thresholds, prior: &Bandwidth, settings: Settings) -> Adapt {
        let base = table(configured);
        let split = Bandwidth::default();
        split.copy_from(prior);
        let a = Adapt {
            thresholds: base.map(|d| d.map(|r| r.map(AtomicUsize::new))),
            min_threshold: base.map(|_| AtomicUsize::new(0)),
            cpu_below: CachePadded::new(base.map(|_| AtomicUsize::new(0))),
            base: base.map(|d| d.map(|r| r.map(AtomicUsize::new))),
            thresholds_adapt: std::sync::atomic::AtomicBool::new(settings.thresholds),
            trials: Default::default(),
            split,
            settings,
            next_epoch_ns: AtomicU64::new(clock::now_ns() + EPOCH_NS),
            callers: AtomicUsize::new(0),
            state: Mutex::new(State {
                seen: Vec::new(),
                fresh: Vec::new(),
                shift: [0; 2],
                vote: Default::default(),
                rates: Default::default(),
                startup: Default::default(),
            }),
        };
        for d in [Direction::ToSlow, Direction::FromSlow, Direction::Dram] {
            a.set_shift(d, 0);
        }
        a
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

    /// The band around `threshold` (in effect for the request's class) that a `len`-byte
    /// request of `dir` falls in, if thresholds adapt for `dir`.
    #[inline]
    pub(crate) fn band(&self, dir: Direction, threshold: usize, len: usize) -> Option<Band> {
        if !self.adapting_thresholds() || dir == Direction::Dram {
            return None;
        }
        if len < threshold {
            (len >= shifted(threshold, -1)).then_some(Band::Below)
        } else {
            (len < shifted(threshold, 1)).then_some(Band::Above)
        }
    }

    /// Whether this synchronous request in `band` is one to send down the other path: this
    /// thread's [`EXPLORE`]th.
    #[inline]
    pub(crate) fn explore(&self, band: Option<Band>) -> bool {
        band.is_some() && once_in(&EXPLORED, EXPLORE)
    }

    /// Whether to time this request of `band` on its usual path (one in
    /// [`SAMPLE_BAND_EVERY`] per thread).
    #[inline]
    pub(crate) fn sample_band(&self) -> bool {
        once_in(&BAND_SAMPLES, SAMPLE_BAND_EVERY)
    }

    /// Folds a timed request into its band's trial: `len` bytes on `arm` in `ns`.
    pub(crate) fn record(&self, dir: Direction, band: Band, arm: Arm, len: usize, ns: u64) {
        if let Some(i) = ADAPTED.iter().position(|&d| d == dir) {
            self.trials[i][band as usize][arm as usize].add(len as u64, ns);
        }
    }

    /// Whether this split, whose share from the estimates rounds to nothing, is one to split
    /// anyway with [`EXPLORE_SHARE`] to the engine: this thread's [`EXPLORE`]th such split.
    /// Without it a start-up estimate that grew past every split's size (a preempted worker)
    /// would never be sampled again, and splitting would stay off for good.
    #[inline]
    pub(crate) fn explore_split(&self) -> bool {
        once_in(&SPLITS_EXPLORED, EXPLORE)
    }

    /// Requests of `dir` shorter than this go to the CPU whatever else holds: below every
    /// threshold in effect and below every band that is explored. 0 unless the mover
    /// schedules (policy `auto`). One cache line serves every direction, so that the common
    /// small request reads one line of scheduler state after its previous copy evicted the
    /// rest.
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
    pub(crate) fn tick(&self, split_live: &Bandwidth, counters: &Counters) {
        if !self.settings.epochs {
            return;
        }
        if !once_in(&SAMPLES, TICKS) {
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
            self.epoch(split_live, counters);
        }
    }

    /// One epoch: counts the callers, nudges the split estimates towards `split_live` (the
    /// live samples of splits' two sides), and judges the bands' finished trials, taking the
    /// threshold steps that [`HOLD`] trials in a row asked for.
    pub(crate) fn epoch(&self, split_live: &Bandwidth, counters: &Counters) {
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
                let (eff, now) = (self.split.of(d), split_live.of(d));
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
        if self.adapting_thresholds() {
            for (i, d) in ADAPTED.into_iter().enumerate() {
                let Some(wish) = self.judge(&self.trials[i]) else {
                    continue;
                };
                let wish = if (st.shift[i] + wish).abs() > MAX_SHIFT {
                    0
                } else {
                    wish
                };
                let step = st.vote[i].cast(wish);
                if step != 0 {
                    st.shift[i] += step;
                    counters.add(
                        if step > 0 {
                            Counter::threshold_raised
                        } else {
                            Counter::threshold_lowered
                        },
                        1,
                    );
                    self.set_shift(d, st.shift[i]);
                    // The bands moved with the threshold: trials start over.
                    self.trials[i].iter().flatten().for_each(Tally::reset);
                }
            }
        }
    }

    /// A finished trial's wish (−1 lower, 0 stay, +1 raise), resetting the bands it judged;
    /// `None` while no band has both paths' evidence yet.
    fn judge(&self, t: &Trials) -> Option<i32> {
        let ready = |band: &[Tally; 2]| {
            band.iter()
                .all(|a| a.samples.load(Ordering::Relaxed) >= EVIDENCE)
        };
        let wins = |band: &[Tally; 2], arm: Arm| {
            let (mine, other) = match arm {
                Arm::Cpu => (&band[Arm::Cpu as usize], &band[Arm::Offload as usize]),
                Arm::Offload => (&band[Arm::Offload as usize], &band[Arm::Cpu as usize]),
            };
            mine.rate() >= other.rate() * (1.0 + MARGIN)
        };
        let (below, above) = (&t[Band::Below as usize], &t[Band::Above as usize]);
        let (lo, hi) = (ready(below), ready(above));
        if !lo && !hi {
            return None;
        }
        let lower = lo && wins(below, Arm::Offload);
        let raise = hi && wins(above, Arm::Cpu);
        for band in [(lo, below), (hi, above)]
            .into_iter()
            .filter_map(|(r, b)| r.then_some(b))
        {
            band.iter().for_each(Tally::reset);
        }
        Some(match (lower, raise) {
            (true, false) => -1,
            (false, true) => 1,
            _ => 0,
        })
    }

    /// Whether the thresholds move.
    #[inline]
    fn adapting_thresholds(&self) -> bool {
        self.thresholds_adapt.load(Ordering::Relaxed)
    }

    /// Makes `configured` the thresholds in effect and the base adaptation moves from, and
    /// `prior` the split estimates; adaptation starts over (shifts, votes and trials), and
    /// moves thresholds from now on if `adapt_thresholds` (a profile was swapped in and the
    /// configuration lets thresholds adapt).
    pub(crate) fn retune(
        &self,
        configured: &Thresholds,
        prior: &Bandwidth,
        adapt_thresholds: bool,
    ) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for (d, row) in self.base.iter().zip(table(configured)) {
            for (r, t) in d.iter().flatten().zip(row.iter().flatten()) {
                r.store(*t, Ordering::Relaxed);
            }
        }
        self.split.copy_from(prior);
        st.shift = [0; 2];
        st.vote = Default::default();
        st.rates = Default::default();
        st.startup = Default::default();
        self.trials
            .iter()
            .flatten()
            .flatten()
            .for_each(Tally::reset);
        self.thresholds_adapt
            .store(adapt_thresholds && self.settings.epochs, Ordering::Relaxed);
        for d in [Direction::ToSlow, Direction::FromSlow, Direction::Dram] {
            self.set_shift(d, 0);
        }
    }

    fn set_shift(&self, d: Direction, shift: i32) {
        let base = &self.base[d.index()];
        for (r, row) in self.thresholds[d.index()].iter().enumerate() {
            for (u, t) in row.iter().enumerate() {
                t.store(
                    shifted(base[r][u].load(Ordering::Relaxed), shift),
                    Ordering::Relaxed,
                );
            }
        }
        let min = self.thresholds[d.index()]
            .iter()
            .flatten()
            .map(|t| t.load(Ordering::Relaxed))
            .min()
            .unwrap_or(0);
        self.min_threshold[d.index()].store(min, Ordering::Relaxed);
        let below = if !self.settings.epochs {
            0
        } else if self.adapting_thresholds() && d != Direction::Dram {
            // Adapting: the band below the smallest threshold is explored.
            shifted(min, -1)
        } else {
            min
        };
        self.cpu_below[d.index()].store(below, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bandwidth::bin;

    fn settings() -> Settings {
        Settings {
            epochs: true,
            thresholds: true,
            split: true,
        }
    }

    /// A profile's estimates (they seed the split estimates only).
    fn profiled() -> Bandwidth {
        let bw = Bandwidth::default();
        for b in 0..BINS {
            for d in ADAPTED {
                bw.of(d).cpu[b].set(10.0);
                bw.of(d).engine[b].set(10.0);
            }
        }
        bw
    }

    /// Writes never offloaded; reads from 256 KiB.
    fn tuned() -> Thresholds {
        let mut t = Thresholds::all(256 << 10);
        t.to_slow = Locality::uniform(NEVER, NEVER);
        t
    }

    fn read(a: &Adapt) -> usize {
        a.threshold(Direction::FromSlow, false, false)
    }

    /// One epoch after a finished trial in `band` of `dir`: `EVIDENCE` requests of 1 MiB on
    /// each path, at `cpu` and `offload` bytes/ns.
    fn trial(a: &Adapt, c: &Counters, dir: Direction, band: Band, cpu: f64, offload: f64) {
        let len = 1usize << 20;
        for _ in 0..EVIDENCE {
            a.record(dir, band, Arm::Cpu, len, (len as f64 / cpu) as u64);
            a.record(dir, band, Arm::Offload, len, (len as f64 / offload) as u64);
        }
        a.epoch(&profiled(), c);
    }

    fn moves(c: &Counters) -> (u64, u64) {
        let s = c.snapshot();
        (s.threshold_raised, s.threshold_lowered)
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
    fn bands_lie_within_a_factor_of_two_of_the_threshold() {
        let a = Adapt::new(&tuned(), &profiled(), settings());
        let r = |len| a.band(Direction::FromSlow, 256 << 10, len);
        assert_eq!(r((128 << 10) - 1), None);
        assert_eq!(r(128 << 10), Some(Band::Below));
        assert_eq!(r((256 << 10) - 1), Some(Band::Below));
        assert_eq!(r(256 << 10), Some(Band::Above));
        assert_eq!(r((512 << 10) - 1), Some(Band::Above));
        assert_eq!(r(512 << 10), None);
        // A "never" threshold is explored from where a lowered one would re-enter.
        assert_eq!(a.band(Direction::ToSlow, NEVER, TOP / 2), Some(Band::Below));
        assert_eq!(a.band(Direction::ToSlow, NEVER, TOP / 2 - 1), None);
        assert_eq!(a.band(Direction::Dram, 256 << 10, 256 << 10), None);
        let fixed = Adapt::new(
            &tuned(),
            &profiled(),
            Settings {
                thresholds: false,
                ..settings()
            },
        );
        assert_eq!(fixed.band(Direction::FromSlow, 256 << 10, 256 << 10), None);
    }

    #[test]
    fn one_request_in_explore_of_a_band_is_explored() {
        let a = Adapt::new(&tuned(), &profiled(), settings());
        let n = (0..10 * EXPLORE)
            .filter(|_| a.explore(Some(Band::Above)))
            .count();
        assert_eq!(n, 10);
        assert!(!(0..2 * EXPLORE).any(|_| a.explore(None)));
    }

    /// Paths that do as well as each other, exactly or within noise of ±3%, move nothing
    /// (whatever the bandwidth estimates say: thresholds move on trials alone).
    #[test]
    fn paths_that_agree_move_nothing() {
        let a = Adapt::new(&tuned(), &profiled(), settings());
        let c = Counters::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut noise = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            1.0 + ((x % 61) as f64 - 30.0) / 1000.0
        };
        for i in 0..500 {
            let band = if i % 2 == 0 { Band::Below } else { Band::Above };
            trial(
                &a,
                &c,
                Direction::FromSlow,
                band,
                10.0 * noise(),
                10.0 * noise(),
            );
        }
        assert_eq!(a.in_effect(), tuned());
        assert_eq!(moves(&c), (0, 0));
    }

    /// A trial needs `EVIDENCE` samples of both paths: one path alone, however lopsided,
    /// moves nothing.
    #[test]
    fn a_trial_needs_evidence_of_both_paths() {
        let a = Adapt::new(&tuned(), &profiled(), settings());
        let c = Counters::default();
        for _ in 0..100 {
            for _ in 0..EVIDENCE - 1 {
                a.record(Direction::FromSlow, Band::Above, Arm::Cpu, 1 << 20, 10);
            }
            for _ in 0..10 * EVIDENCE {
                a.record(
                    Direction::FromSlow,
                    Band::Above,
                    Arm::Offload,
                    1 << 20,
                    1 << 30,
                );
            }
            a.epoch(&profiled(), &c);
            a.trials[1][Band::Above as usize][Arm::Cpu as usize].reset();
        }
        assert_eq!(a.in_effect(), tuned());
    }

    /// The CPU beats offloading above the read threshold: it rises one bin per HOLD trials up
    /// to the bound, counted; the bands and the short cut follow it. When offloading wins
    /// again below it, it comes back down.
    #[test]
    fn a_cpu_faster_above_the_threshold_raises_it_in_bounded_steps() {
        let a = Adapt::new(&tuned(), &profiled(), settings());
        let c = Counters::default();
        for _ in 0..HOLD - 1 {
            trial(&a, &c, Direction::FromSlow, Band::Above, 10.0, 5.0);
        }
        assert_eq!(read(&a), 256 << 10, "nothing before HOLD trials");
        trial(&a, &c, Direction::FromSlow, Band::Above, 10.0, 5.0);
        assert_eq!(read(&a), 512 << 10);
        assert_eq!(
            a.cpu_below(Direction::FromSlow),
            256 << 10,
            "the band below"
        );
        assert_eq!(
            a.band(Direction::FromSlow, read(&a), 256 << 10),
            Some(Band::Below)
        );
        for _ in 0..100 {
            trial(&a, &c, Direction::FromSlow, Band::Above, 10.0, 5.0);
        }
        assert_eq!(read(&a), (256 << 10) << MAX_SHIFT, "bounded");
        assert_eq!(moves(&c), (MAX_SHIFT as u64, 0));
        assert_eq!(
            a.min_threshold(Direction::FromSlow),
            (256 << 10) << MAX_SHIFT
        );
        // Offloading wins below: back to the tuned threshold, one bin per HOLD trials, and on
        // down to the bound while it keeps winning.
        for _ in 0..MAX_SHIFT as u32 * HOLD {
            trial(&a, &c, Direction::FromSlow, Band::Below, 5.0, 10.0);
        }
        assert_eq!(a.in_effect(), tuned());
        assert_eq!(moves(&c), (MAX_SHIFT as u64, MAX_SHIFT as u64));
        for _ in 0..100 {
            trial(&a, &c, Direction::FromSlow, Band::Below, 5.0, 10.0);
        }
        assert_eq!(read(&a), (256 << 10) >> MAX_SHIFT);
        assert_eq!(moves(&c), (MAX_SHIFT as u64, 2 * MAX_SHIFT as u64));
    }

    /// Offloading beats the CPU below a "never" write threshold: it re-enters at the largest
    /// bins and comes down step by step, to the bound.
    #[test]
    fn an_offload_faster_below_lowers_a_never_threshold() {
        let a = Adapt::new(&tuned(), &profiled(), settings());
        let c = Counters::default();
        for _ in 0..HOLD {
            trial(&a, &c, Direction::ToSlow, Band::Below, 5.0, 10.0);
        }
        assert_eq!(a.threshold(Direction::ToSlow, false, false), TOP / 2);
        for _ in 0..100 {
            trial(&a, &c, Direction::ToSlow, Band::Below, 5.0, 10.0);
        }
        assert_eq!(a.threshold(Direction::ToSlow, true, true), TOP >> MAX_SHIFT);
        assert_eq!(moves(&c), (0, MAX_SHIFT as u64));
        assert_eq!(read(&a), 256 << 10, "reads saw no trial");
    }

    /// Trials that flip between "raise" and "stay" never complete a vote: the threshold never
    /// moves.
    #[test]
    fn flapping_never_oscillates_the_threshold() {
        let a = Adapt::new(&tuned(), &profiled(), settings());
        let c = Counters::default();
        for i in 0..200 {
            let cpu = if i % 2 == 0 { 10.0 } else { 5.0 };
            trial(&a, &c, Direction::FromSlow, Band::Above, cpu, 5.0);
        }
        for i in 0..300 {
            let cpu = if i % 3 == 2 { 5.0 } else { 10.0 };
            trial(&a, &c, Direction::FromSlow, Band::Above, cpu, 5.0);
        }
        assert_eq!(a.in_effect(), tuned());
        assert_eq!(moves(&c), (0, 0));
    }

    /// Requests below every threshold take the short cut to the CPU only when the mover
    /// schedules; while thresholds adapt, the band below the smallest one is not short-cut.
    #[test]
    fn the_cpu_short_cut_is_below_the_explored_bands_and_only_when_scheduling() {
        let a = Adapt::new(&tuned(), &profiled(), settings());
        assert_eq!(a.cpu_below(Direction::FromSlow), 128 << 10);
        assert_eq!(a.cpu_below(Direction::ToSlow), TOP / 2);
        let unadapted = Adapt::new(
            &tuned(),
            &profiled(),
            Settings {
                thresholds: false,
                ..settings()
            },
        );
        assert_eq!(unadapted.cpu_below(Direction::FromSlow), 256 << 10);
        assert_eq!(unadapted.cpu_below(Direction::ToSlow), NEVER);
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

    /// The incident behind A/B trials, with its numbers: a tuned read threshold of 92 KiB whose
    /// 64 KiB bin the profile's estimates put 5% on the offload side. Live estimates taken
    /// while the engine's worker spun beside the caller (CPU 15–25% slower in the 32–256 KiB
    /// bins), or from splits' engine sides running beside their CPU sides (engine 25% slower
    /// at 64 KiB), made the old model lower or raise it a bin. Epochs with such estimates and
    /// no trial move nothing.
    #[test]
    fn estimates_biased_like_a_spinning_worker_move_no_threshold() {
        let profile = Bandwidth::default();
        let cpu = [11.1, 11.4, 10.3, 11.6, 11.1, 9.9, 10.3, 10.5];
        let engine = [9.9, 11.0, 12.8, 13.1, 13.8, 12.5, 13.4, 13.8];
        for b in 0..BINS {
            profile.of(Direction::FromSlow).cpu[b].set(cpu[b]);
            profile.of(Direction::FromSlow).engine[b].set(engine[b]);
        }
        profile.of(Direction::FromSlow).startup_ns.set(753.0);
        let mut t = tuned();
        t.from_slow = Locality::uniform(92 << 10, 80 << 10);
        let a = Adapt::new(&t, &profile, settings());
        let c = Counters::default();
        let spinning = Bandwidth::default();
        spinning.copy_from(&profile);
        for (b, v) in [(1, 9.0), (2, 8.5), (3, 8.4)] {
            spinning.of(Direction::FromSlow).cpu[b].set(v);
        }
        let beside = Bandwidth::default();
        beside.copy_from(&profile);
        beside.of(Direction::FromSlow).engine[2].set(9.6);
        for _ in 0..50 {
            a.epoch(&spinning, &c);
        }
        for _ in 0..50 {
            a.epoch(&beside, &c);
        }
        assert_eq!(a.in_effect(), t);
        assert_eq!(moves(&c), (0, 0));
    }

    #[test]
    fn split_estimates_follow_live_ones_in_bounded_steps() {
        let prior = profiled();
        let a = Adapt::new(&tuned(), &prior, settings());
        let c = Counters::default();
        let live = profiled();
        let b = bin(1 << 20);
        live.of(Direction::FromSlow).engine[b].set(20.0);
        let epochs = |n: u32| (0..n).for_each(|_| a.epoch(&live, &c));
        epochs(HOLD);
        let e = a.split_estimates().of(Direction::FromSlow).engine[b].get();
        assert!((e - 12.5).abs() < 1e-9, "one step of 25%: {e}");
        epochs(10 * HOLD);
        let e = a.split_estimates().of(Direction::FromSlow).engine[b].get();
        assert!((e - 20.0).abs() <= DEADBAND * e, "converged: {e}");
        assert!(c.snapshot().split_nudges >= 3);
        let before = a
            .split_estimates()
            .engine_share(Direction::FromSlow, 1 << 20, 4096);
        epochs(100);
        let after = a
            .split_estimates()
            .engine_share(Direction::FromSlow, 1 << 20, 4096);
        assert_eq!(before, after, "settled");
        assert_eq!(a.in_effect(), tuned(), "estimates move no threshold");
    }
}
