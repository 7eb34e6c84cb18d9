//! Online adaptation: the thresholds and split estimates the scheduler uses, and the epochs
//! that nudge them when live measurements disagree with the profile (Fastmove names automatic
//! tuning as future work, §7).
//!
//! Acting on every measurement would let noise steer the scheduler, so
//! [`Mover::decide`](crate::Mover::decide) reads values *in effect*, which change only at
//! epochs: every [`EPOCH_NS`] of sampled traffic, run by whichever caller notices one is due (no
//! thread, no lock on the request path). A change is
//! - bounded: a threshold moves one size bin (×2 or ÷2) per step, within [`MAX_SHIFT`] bins
//!   of the tuned value on [`HOLD`] trials in a row, beyond that on twice as many (a profile
//!   far off is repaired; noise is not followed far); a split estimate moves at most [`STEP`]
//!   of itself per step;
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
//! the difference, and moved the read threshold a bin to the cost of a 128 KiB read mix
//! against the profile held fixed; `docs/scheduler.md` tells it with its figures.) Without a
//! profile the configured
//! thresholds are the user's choice and stay; the split estimates still adapt.
//!
//! **Bands go where the traffic is.** A threshold far above every request (a "never" from a
//! tune that missed the crossing) has bands no request falls in, so no trial would ever test
//! it. When a direction's bands time nothing for [`STARVED`] epochs, the direction is watched:
//! requests from [`MIN_SAMPLED`] up reach the band check, which notes the largest passing
//! below the bands, and the band below the threshold is brought down to that size's bin. Its
//! trial then compares the CPU with offloading (engine or split, whose share is explored too)
//! on the traffic itself, and a win moves the threshold straight to the band's floor; from
//! there it moves bin by bin as usual. On a machine where the CPU wins everywhere, the probe
//! finds nothing and the threshold stays.
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
/// Epochs in a row in which a direction's bands saw no timed request before the mover looks
/// at the sizes that pass below them (see the module documentation).
pub const STARVED: u32 = 5;
/// One in this many requests below an adapting direction's bands, while it is watched,
/// reports its size.
const WATCH_EVERY: u32 = 16;
/// The directions the tuner profiles, and so the ones adapted.
const ADAPTED: [Direction; 2] = [Direction::ToSlow, Direction::FromSlow];
/// One bin past the largest measured: where a "never" threshold re-enters when lowered.
const TOP: usize = MIN_SAMPLED << BINS;
/// The most bins a threshold moves from its tuned value: from "never" down to the smallest
/// sampled size.
const LOWEST: i32 = BINS as i32 + 1;

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
    /// Per direction: how many bins below its threshold the band below reaches (1: `[T/2,
    /// T)`; more once a probe brought the band down to where the traffic is).
    depth: [AtomicUsize; 3],
    /// Per direction: the largest request seen below the band during this epoch (sampled,
    /// while the direction is watched; 0 otherwise).
    largest_below: [AtomicUsize; 3],
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
    /// Per adapted direction: epochs in a row whose bands timed nothing.
    starved: [u32; 2],
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
    static EXPLORED_BELOW: Cell<u32> = const { Cell::new(0) };
    static EXPLORED_ABOVE: Cell<u32> = const { Cell::new(0) };
    static SPLITS_EXPLORED: Cell<u32> = const { Cell::new(0) };
    static BAND_SAMPLES: Cell<u32> = const { Cell::new(0) };
    static SAMPLES: Cell<u32> = const { Cell::new(0) };
    static WATCHED: Cell<u32> = const { Cell::new(0) };
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
        self.cast_holding(wish, HOLD)
    }

    /// [`Vote::cast`], returning the wish once `hold` epochs in a row made it.
    fn cast_holding(&mut self, wish: i32, hold: u32) -> i32 {
        if wish == 0 || wish != self.sign {
            *self = Vote {
                sign: wish,
                count: u32::from(wish != 0),
            };
        } else {
            self.count += 1;
        }
        if wish != 0 && self.count >= hold {
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
            depth: base.map(|_| AtomicUsize::new(1)),
            largest_below: base.map(|_| AtomicUsize::new(0)),
            trials: Default::default(),
            split,
            settings,
            next_epoch_ns: AtomicU64::new(clock::now_ns() + EPOCH_NS),
            callers: AtomicUsize::new(0),
            state: Mutex::new(State {
                starved: [0; 2],
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
            let depth = self.depth[dir.index()].load(Ordering::Relaxed) as i32;
            if len >= shifted(threshold, -depth) {
                return Some(Band::Below);
            }
            // Only requests of a watched direction get here (see `cpu_below`).
            if once_in(&WATCHED, WATCH_EVERY) {
                self.largest_below[dir.index()].fetch_max(len, Ordering::Relaxed);
            }
            None
        } else {
            (len < shifted(threshold, 1)).then_some(Band::Above)
        }
    }

    /// Whether this synchronous request in `band` is one to send down the other path: this
    /// thread's [`EXPLORE`]th.
    #[inline]
    pub(crate) fn explore(&self, band: Option<Band>) -> bool {
        // A counter per band: with one shared counter, traffic that alternates between the
        // two bands (a 256 KiB read, then a 512 KiB one, …) would only ever explore one.
        match band {
            Some(Band::Below) => once_in(&EXPLORED_BELOW, EXPLORE),
            Some(Band::Above) => once_in(&EXPLORED_ABOVE, EXPLORE),
            None => false,
        }
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
                self.follow_traffic(st, i, d);
                let Some(wish) = self.judge(&self.trials[i]) else {
                    continue;
                };
                st.starved[i] = 0;
                let depth = self.depth[d.index()].load(Ordering::Relaxed) as i32;
                // A band brought down to the traffic moves the threshold to its floor.
                let bins = if wish < 0 { depth } else { wish };
                let to = st.shift[i] + wish.signum() * bins;
                // Within the fence a step needs HOLD trials in a row; past it, twice as many
                // (a profile far off is repaired, noise is not followed far).
                let hold = if to.abs() > MAX_SHIFT { 2 * HOLD } else { HOLD };
                let to = to.clamp(-LOWEST, LOWEST);
                let step = st.vote[i].cast_holding(if to == st.shift[i] { 0 } else { wish }, hold);
                if step != 0 {
                    st.shift[i] = to;
                    counters.add(
                        if step > 0 {
                            Counter::threshold_raised
                        } else {
                            Counter::threshold_lowered
                        },
                        1,
                    );
                    self.depth[d.index()].store(1, Ordering::Relaxed);
                    self.set_shift(d, st.shift[i]);
                    // The bands moved with the threshold: trials start over.
                    self.trials[i].iter().flatten().for_each(Tally::reset);
                }
            }
        }
    }

    /// A direction whose bands timed nothing for [`STARVED`] epochs is watched: requests down
    /// to [`MIN_SAMPLED`] reach [`Adapt::band`], which notes the largest passing below the
    /// band; the next epoch brings the band below the threshold down to that size's bin, so
    /// that trials run where the traffic is (a "never" threshold, or one far above every
    /// request, is otherwise never put to the test).
    fn follow_traffic(&self, st: &mut State, i: usize, d: Direction) {
        let timed = self.trials[i]
            .iter()
            .flatten()
            .any(|t| t.samples.load(Ordering::Relaxed) > 0);
        if timed {
            st.starved[i] = 0;
            return;
        }
        st.starved[i] = st.starved[i].saturating_add(1);
        let largest = self.largest_below[d.index()].swap(0, Ordering::Relaxed);
        if st.starved[i] < STARVED {
            return;
        }
        let min = self.min_threshold(d);
        if largest == 0 {
            // Watch: let every request from MIN_SAMPLED up reach `band`.
            self.cpu_below[d.index()].store(MIN_SAMPLED.min(min), Ordering::Relaxed);
            return;
        }
        // Bins from the smallest threshold down to the largest request's bin.
        let mut depth = 1;
        while depth < LOWEST && shifted(min, -depth) > largest {
            depth += 1;
        }
        self.depth[d.index()].store(depth as usize, Ordering::Relaxed);
        self.cpu_below[d.index()].store(shifted(min, -depth), Ordering::Relaxed);
        st.starved[i] = 0;
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
        st.starved = [0; 2];
        for d in &self.depth {
            d.store(1, Ordering::Relaxed);
        }
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

    /// Traffic alternating between the two bands explores each of them.
    #[test]
    fn alternating_bands_are_each_explored() {
        let a = Adapt::new(&tuned(), &profiled(), settings());
        let mut got = [0; 2];
        for i in 0..64 * EXPLORE {
            let band = if i % 2 == 0 { Band::Below } else { Band::Above };
            if a.explore(Some(band)) {
                got[band as usize] += 1;
            }
        }
        assert_eq!(got, [32, 32]);
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
    /// to the fence, then one bin per 2 × HOLD trials up to the bound, counted; the bands and
    /// the short cut follow it. When offloading wins again below it, it comes back down.
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
        for _ in 0..(MAX_SHIFT as u32 - 1) * HOLD {
            trial(&a, &c, Direction::FromSlow, Band::Above, 10.0, 5.0);
        }
        assert_eq!(read(&a), (256 << 10) << MAX_SHIFT, "at the fence");
        for _ in 0..HOLD {
            trial(&a, &c, Direction::FromSlow, Band::Above, 10.0, 5.0);
        }
        assert_eq!(
            read(&a),
            (256 << 10) << MAX_SHIFT,
            "past it takes more evidence"
        );
        for _ in 0..HOLD {
            trial(&a, &c, Direction::FromSlow, Band::Above, 10.0, 5.0);
        }
        assert_eq!(read(&a), (256 << 10) << (MAX_SHIFT + 1));
        for _ in 0..200 {
            trial(&a, &c, Direction::FromSlow, Band::Above, 10.0, 5.0);
        }
        assert_eq!(read(&a), (256 << 10) << LOWEST, "bounded");
        assert_eq!(moves(&c), (LOWEST as u64, 0));
        assert_eq!(a.min_threshold(Direction::FromSlow), (256 << 10) << LOWEST);
        // Offloading wins below: back to the tuned threshold, and on down to the bound while
        // it keeps winning.
        for _ in 0..400 {
            trial(&a, &c, Direction::FromSlow, Band::Below, 5.0, 10.0);
            if a.in_effect() == tuned() {
                break;
            }
        }
        assert_eq!(a.in_effect(), tuned());
        assert_eq!(moves(&c), (LOWEST as u64, LOWEST as u64));
        for _ in 0..400 {
            trial(&a, &c, Direction::FromSlow, Band::Below, 5.0, 10.0);
        }
        assert_eq!(read(&a), MIN_SAMPLED, "down to the smallest sampled size");
    }

    /// Offloading beats the CPU below a "never" write threshold: it re-enters at the largest
    /// bins and comes down step by step, to the smallest sampled size.
    #[test]
    fn an_offload_faster_below_lowers_a_never_threshold() {
        let a = Adapt::new(&tuned(), &profiled(), settings());
        let c = Counters::default();
        for _ in 0..HOLD {
            trial(&a, &c, Direction::ToSlow, Band::Below, 5.0, 10.0);
        }
        assert_eq!(a.threshold(Direction::ToSlow, false, false), TOP / 2);
        for _ in 0..200 {
            trial(&a, &c, Direction::ToSlow, Band::Below, 5.0, 10.0);
        }
        assert_eq!(a.threshold(Direction::ToSlow, true, true), MIN_SAMPLED);
        assert_eq!(read(&a), 256 << 10, "reads saw no trial");
    }

    /// The engine of a simulated machine: the CPU copies at 10 bytes/ns; offloaded requests
    /// at `fast` from `crossing` up, at 6 below it.
    fn simulated(len: usize, arm: Arm, crossing: usize, fast: f64) -> u64 {
        let rate = match arm {
            Arm::Cpu => 10.0,
            Arm::Offload if len >= crossing => fast,
            Arm::Offload => 6.0,
        };
        (len as f64 / rate) as u64
    }

    /// Steady traffic of `sizes` (in a pseudo-random order) through an adapting mover for
    /// `epochs` epochs of 4,000 requests, timed on `simulated`'s machine as the mover times
    /// them.
    fn steady(
        a: &Adapt,
        c: &Counters,
        dir: Direction,
        sizes: &[usize],
        epochs: usize,
        crossing: usize,
        fast: f64,
    ) {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..epochs {
            for _ in 0..4000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let len = sizes[((x >> 33) % sizes.len() as u64) as usize];
                if len < a.cpu_below(dir) {
                    continue;
                }
                let t = a.threshold(dir, false, false);
                let band = a.band(dir, t, len);
                let usual = if len >= t { Arm::Offload } else { Arm::Cpu };
                let arm = if a.explore(band) {
                    match usual {
                        Arm::Cpu => Arm::Offload,
                        Arm::Offload => Arm::Cpu,
                    }
                } else {
                    usual
                };
                if let Some(b) = band {
                    if arm != b.usual() || a.sample_band() {
                        a.record(dir, b, arm, len, simulated(len, arm, crossing, fast));
                    }
                }
            }
            a.epoch(&profiled(), c);
        }
    }

    /// A profile that says "never" in both directions while offloading wins from 64 KiB up
    /// on this (simulated) machine: steady traffic of 64–512 KiB reads finds the offload
    /// within a few hundred epochs (a few seconds of 20 ms epochs): the band below the
    /// threshold is brought down to the traffic, its trials move the threshold there, and
    /// from there bin by bin to within one bin of the crossing. Writes, which saw no traffic,
    /// stay as tuned.
    #[test]
    fn a_wrong_never_profile_finds_the_offload_where_the_traffic_is() {
        let never = Thresholds::all(NEVER);
        let a = Adapt::new(&never, &profiled(), settings());
        let c = Counters::default();
        let crossing = 64 << 10;
        steady(
            &a,
            &c,
            Direction::FromSlow,
            &[64 << 10, 128 << 10, 256 << 10, 512 << 10],
            300,
            crossing,
            14.0,
        );
        let t = read(&a);
        assert!(
            (crossing / 2..=crossing * 2).contains(&t),
            "the read threshold ended at {t}, the crossing is at {crossing}: {:?}",
            c.snapshot()
        );
        assert_eq!(a.threshold(Direction::ToSlow, false, false), NEVER);
    }

    /// The same wrong profile on a machine where the CPU wins at every size: the probe finds
    /// nothing to gain and the threshold stays "never" (nothing is offloaded but the explored
    /// one request in EXPLORE of the traffic's band).
    #[test]
    fn a_never_profile_that_is_right_stays() {
        let never = Thresholds::all(NEVER);
        let a = Adapt::new(&never, &profiled(), settings());
        let c = Counters::default();
        steady(
            &a,
            &c,
            Direction::FromSlow,
            &[64 << 10, 128 << 10, 256 << 10],
            300,
            0,
            7.0,
        );
        assert_eq!(read(&a), NEVER);
        assert_eq!(moves(&c).1, 0);
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
