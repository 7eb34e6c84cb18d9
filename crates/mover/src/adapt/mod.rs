//! Online adaptation: the thresholds and split estimates the scheduler uses, and the epochs
//! that nudge them when live measurements disagree with the profile (Fastmove names automatic
//! tuning as future work, §7).
//!
//! Acting on every measurement would let noise steer the scheduler, so
//! [`Mover::decide`](crate::Mover::decide) reads values *in effect*, which change only at
//! epochs: every `epoch_ms` of sampled traffic, run by whichever caller notices one is due (no
//! thread, no lock on the request path). A change is
//! - bounded: a threshold moves one size bin (×2 or ÷2) per step, within `max_shift` bins
//!   of the tuned value on `hold` trials in a row, beyond that on twice as many (a profile
//!   far off is repaired; noise is not followed far); a split estimate moves at most `step`
//!   of itself per step;
//! - hysteretic: a step needs one path to beat the other by `margin`, and `hold`
//!   consecutive trials wishing for it, so noise around a boundary changes nothing and no step
//!   is undone by the next trial.
//!
//! **Thresholds move on A/B trials, not on a model.** Around each threshold `T` in effect lie
//! two bands: sizes in `[T/2, T)` go to the CPU, sizes in `[T, 2T)` are offloaded. One in
//! `explore` synchronous requests in each band takes the other path, and requests in the
//! bands are timed end to end on the path they took (`Adapt::record`). A trial ends once
//! both paths of a band have `evidence` samples: the offload path beating the CPU by
//! `margin` below `T` asks for a lower threshold, the CPU beating it above `T` for a higher
//! one. Both paths of a trial ran interleaved under the same conditions, so what they share —
//! a helper thread spinning on the caller's sibling core, other callers, a slower memory
//! phase — cancels. (A model fed with per-path bandwidth estimates compared live samples taken
//! under such conditions with a profile measured without them, and moved the thresholds on
//! the difference, and moved the read threshold a bin to the cost of a 128 KiB read mix
//! against the profile held fixed; `docs/scheduler.md` tells it with its figures.) Without a
//! profile the configured
//! thresholds are the user's choice and stay; the split estimates still adapt.
//!
//! **Trials start over what the tune left undecided.** Where the profile says the paths tie
//! from `from` up to the threshold (`profile::Undecided`), the band below reaches down to
//! `from` from the start (`undecided_depths`), so the first trial tests that whole range on
//! the traffic, and a win moves the threshold to its floor at once, instead of a bin per
//! trial from the top (a quick profile's "writes 1M, undecided from 256K" left 64–448 KiB
//! writes on the CPU through a `bench mix --grid` confirmation, at 0.83× the grid's best).
//!
//! **Bands go where the traffic is.** A threshold far above every request (a "never" from a
//! tune that missed the crossing) has bands no request falls in, so no trial would ever test
//! it. When a direction's bands time nothing for `starved` epochs, the direction is watched:
//! requests from [`MIN_SAMPLED`] up reach the band check, which notes how many bins below its
//! own threshold the largest passing lies, and the band below the thresholds is brought down
//! that many bins (counted from each request's own threshold: those of aligned and unaligned
//! copies differ). Its
//! trial then compares the CPU with offloading (engine or split, whose share is explored too)
//! on the traffic itself, and a win moves the threshold straight to the band's floor; from
//! there it moves bin by bin as usual. On a machine where the CPU wins everywhere, the probe
//! finds nothing and the threshold stays.
//!
//! **Split estimates** follow the live samples of splits' two sides (they run at once, so each
//! side's rate is what the split's ratio needs), one bounded step per `hold` epochs that find
//! them more than `deadband` away. One in `explore` splits whose share from the estimates
//! rounds to nothing is split anyway with `explore_share` to the engine, so that no estimate
//! can switch splitting off for good.

mod epoch;
mod trial;

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crossbeam_utils::CachePadded;

use switchyard_engine::clock;

use crate::bandwidth::{Bandwidth, BINS, MIN_SAMPLED};
use crate::config::{AdaptationConfig, Locality, Thresholds};
use crate::counters::Counters;
use crate::hints::Direction;
use crate::profile::{self, Undecided, NEVER};

pub(crate) use trial::{Arm, Band};
use trial::{Tally, Trials, Vote};

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
    /// Pace and evidence (`[mover.adaptation]`).
    pub pace: AdaptationConfig,
}

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
    /// Per direction: how deep the band below would have to reach for the requests seen
    /// below it during this epoch (sampled, while the direction is watched; 0 otherwise), in
    /// bins below each request's own threshold.
    needed_depth: [AtomicUsize; 3],
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

/// Explored requests of a band come in runs of this many (see [`Adapt::explore`]).
pub(crate) const BURST: u32 = 8;

/// Whether a request goes down the other path of its band's trial ([`Adapt::explore`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Explore {
    /// Its usual path.
    No,
    /// The other path, first of a run: not timed (the path was idle before it).
    Untimed,
    /// The other path, timed for the trial.
    Timed,
}

impl Explore {
    /// Sent down the other path.
    #[inline]
    pub(crate) fn explored(self) -> bool {
        self != Explore::No
    }
}

thread_local! {
    static EXPLORED_BELOW: Cell<u32> = const { Cell::new(0) };
    static EXPLORED_ABOVE: Cell<u32> = const { Cell::new(0) };
    static SPLITS_EXPLORED: Cell<u32> = const { Cell::new(0) };
    static BAND_SAMPLES: Cell<u32> = const { Cell::new(0) };
    static SAMPLES: Cell<u32> = const { Cell::new(0) };
    static WATCHED: Cell<u32> = const { Cell::new(0) };
}

/// Per direction (by [`Direction::index`]), how many bins below its threshold the band below
/// first reaches: down to the start of the range the tune left undecided under it (at
/// least 1: the band `[T/2, T)`).
pub(crate) fn undecided_depths(undecided: &[Undecided]) -> [usize; 3] {
    let mut depths = [1; 3];
    for u in undecided {
        let Some(dir) = profile::direction(&u.direction) else {
            continue;
        };
        if u.to >= NEVER || u.from == 0 || u.from >= u.to {
            continue;
        }
        let mut bins = 1;
        while bins < LOWEST as usize && u.to >> bins > u.from {
            bins += 1;
        }
        let d = &mut depths[dir.index()];
        *d = (*d).max(bins);
    }
    depths
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
    /// Pace and evidence in effect (`[mover.adaptation]`).
    pub(crate) fn pace(&self) -> &AdaptationConfig {
        &self.settings.pace
    }

    /// Thresholds in effect start at `configured`, the bands below them `depths` bins deep
    /// ([`undecided_depths`]); the split estimates at `prior` (the estimates as seeded from
    /// the profile).
    pub(crate) fn new(
        configured: &Thresholds,
        depths: [usize; 3],
        prior: &Bandwidth,
        settings: Settings,
    ) -> Adapt {
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
            needed_depth: base.map(|_| AtomicUsize::new(0)),
            trials: Default::default(),
            split,
            settings,
            next_epoch_ns: AtomicU64::new(clock::now_ns() + settings.pace.epoch_ms * 1_000_000),
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
            a.reach(d, depths[d.index()]);
        }
        a
    }

    /// Brings the band below `d`'s thresholds down to `depth` bins (from the smallest), where
    /// thresholds adapt.
    fn reach(&self, d: Direction, depth: usize) {
        if depth <= 1 || !self.adapting_thresholds() || d == Direction::Dram {
            return;
        }
        let min = self.min_threshold(d);
        self.depth[d.index()].store(depth, Ordering::Relaxed);
        self.cpu_below[d.index()].store(shifted(min, -(depth as i32)), Ordering::Relaxed);
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
            // Only requests of a watched direction get here (see `cpu_below`). The depth is
            // counted from this request's own threshold: a direction's thresholds differ by
            // alignment and locality, and aligned traffic far below an aligned "4M" was
            // measured against a smaller unaligned threshold, and never reached.
            if once_in(&WATCHED, self.settings.pace.watch_every) {
                let mut bins = depth + 1;
                while bins < LOWEST && shifted(threshold, -bins) > len {
                    bins += 1;
                }
                self.needed_depth[dir.index()].fetch_max(bins as usize, Ordering::Relaxed);
            }
            None
        } else {
            (len < shifted(threshold, 1)).then_some(Band::Above)
        }
    }

    /// Whether this synchronous request in `band` is one to send down the other path, and
    /// whether its time counts: on each thread, runs of [`BURST`] consecutive requests of the
    /// band, one run per `explore` × [`BURST`] (one request in `explore` overall); the first
    /// of a run is not timed.
    ///
    /// Runs, because a path the band's requests do not usually take is idle when one of them
    /// comes along: an engine whose helper has parked must be woken, which takes longer than
    /// copying a few hundred KiB. `switchyard bench explore` measured splits of bulk writes
    /// explored one in 160 requests at 0.38× the rate of splits when every request splits,
    /// and in runs of 8 with the first untimed at 0.95–1.03×, so trials of scattered requests
    /// never lowered a threshold that steady splitting beat. Within a run the path is as warm
    /// as it would be with the threshold moved: the run's requests are the band's own, as far
    /// apart as the traffic has them.
    #[inline]
    pub(crate) fn explore(&self, band: Option<Band>) -> Explore {
        // A counter per band: with one shared counter, traffic that alternates between the
        // two bands (a 256 KiB read, then a 512 KiB one, …) would only ever explore one.
        let count = match band {
            Some(Band::Below) => &EXPLORED_BELOW,
            Some(Band::Above) => &EXPLORED_ABOVE,
            None => return Explore::No,
        };
        // The run is the last BURST requests of each period, so any whole number of periods
        // holds whole runs.
        let period = self.settings.pace.explore.max(1).saturating_mul(BURST);
        let at = count.with(|n| {
            let v = n.get().wrapping_add(1) % period;
            n.set(v);
            v
        });
        match (at + BURST).cmp(&period) {
            std::cmp::Ordering::Less => Explore::No,
            std::cmp::Ordering::Equal => Explore::Untimed,
            std::cmp::Ordering::Greater => Explore::Timed,
        }
    }

    /// Whether to time this request of `band` on its usual path (one in
    /// `sample_band_every` per thread).
    #[inline]
    pub(crate) fn sample_band(&self) -> bool {
        once_in(&BAND_SAMPLES, self.settings.pace.sample_band_every)
    }

    /// Folds a timed request into its band's trial: `len` bytes on `arm` in `ns`.
    pub(crate) fn record(&self, dir: Direction, band: Band, arm: Arm, len: usize, ns: u64) {
        if let Some(i) = ADAPTED.iter().position(|&d| d == dir) {
            self.trials[i][band as usize][arm as usize].add(len as u64, ns);
        }
    }

    /// Whether this split, whose share from the estimates rounds to nothing, is one to split
    /// anyway with `explore_share` to the engine: this thread's `explore`th such split.
    /// Without it a start-up estimate that grew past every split's size (a preempted worker)
    /// would never be sampled again, and splitting would stay off for good.
    #[inline]
    pub(crate) fn explore_split(&self) -> bool {
        once_in(&SPLITS_EXPLORED, self.settings.pace.explore)
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

    /// While thresholds adapt, the smallest request of `dir` a threshold in effect or an
    /// explored band offloads ([`Adapt::cpu_below`]); `None` while they are fixed.
    #[inline]
    pub(crate) fn split_floor(&self, dir: Direction) -> Option<usize> {
        (self.adapting_thresholds() && dir != Direction::Dram).then(|| self.cpu_below(dir))
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

    /// Called after each sampled copy: every `ticks` samples on this thread it reads the
    /// clock, and the caller that finds an epoch due runs it.
    #[inline]
    pub(crate) fn tick(&self, split_live: &Bandwidth, counters: &Counters) {
        if !self.settings.epochs {
            return;
        }
        if !once_in(&SAMPLES, self.settings.pace.ticks) {
            return;
        }
        let now = clock::now_ns();
        let next = self.next_epoch_ns.load(Ordering::Relaxed);
        if now >= next
            && self
                .next_epoch_ns
                .compare_exchange(
                    next,
                    now + self.settings.pace.epoch_ms * 1_000_000,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            self.epoch(split_live, counters);
        }
    }

    /// Whether the thresholds move.
    #[inline]
    fn adapting_thresholds(&self) -> bool {
        self.thresholds_adapt.load(Ordering::Relaxed)
    }

    /// Makes `prior` the split estimates in effect; their adaptation starts over from them.
    pub(crate) fn seed_split(&self, prior: &Bandwidth) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.split.copy_from(prior);
        st.rates = Default::default();
        st.startup = Default::default();
    }

    /// Makes `configured` the thresholds in effect and the base adaptation moves from (the
    /// bands below them `depths` deep), and `prior` the split estimates; adaptation starts
    /// over (shifts, votes and trials), and moves thresholds from now on if
    /// `adapt_thresholds` (a profile was swapped in and the configuration lets thresholds
    /// adapt).
    pub(crate) fn retune(
        &self,
        configured: &Thresholds,
        depths: [usize; 3],
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
            self.reach(d, depths[d.index()]);
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

#[cfg(test)]
mod tests;
