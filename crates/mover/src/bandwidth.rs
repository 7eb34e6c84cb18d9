//! Live bandwidth estimates B_C (CPU) and B_D (engine), and the engine's start-up delay t0,
//! per direction and size bin: exponentially weighted moving averages, always maintained.
//!
//! Fastmove's published code only updated its split ratio with a debug flag on; here every
//! engine completion and every bulk CPU copy feeds a sample. Updates are a relaxed load and a
//! relaxed store of an `f64`'s bits: two threads updating at once may lose one sample, which an
//! average tolerates, and no update ever blocks.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::EstimatesConfig;
use crate::hints::Direction;

/// Smallest request size that is sampled (smaller ones are never split or offloaded by default).
pub const MIN_SAMPLED: usize = 16 << 10;
/// Whether this thread should time its CPU copy of `len` bytes: one in `sample_every` from
/// [`MIN_SAMPLED`] up, one in `bulk_sample_every` from `bulk_bytes` up (`[mover.estimates]`).
#[inline]
pub fn sample_cpu_copy(len: usize, e: &EstimatesConfig) -> bool {
    if len < MIN_SAMPLED {
        return false;
    }
    let every = if len >= e.bulk_bytes {
        e.bulk_sample_every
    } else {
        e.sample_every
    };
    thread_local!(static TICK: std::cell::Cell<u32> = const { std::cell::Cell::new(0) });
    TICK.with(|t| {
        let n = t.get().wrapping_add(1);
        t.set(n);
        n % every == 0
    })
}

/// Number of size bins: 16 KiB, 32 KiB, … , ≥ 2 MiB.
pub const BINS: usize = 8;

/// One EWMA.
#[derive(Debug)]
pub struct Ewma(AtomicU64);

impl Ewma {
    fn new(v: f64) -> Ewma {
        Ewma(AtomicU64::new(v.to_bits()))
    }

    /// Current value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }

    /// Folds in a sample as [`Ewma::update`] does, or takes it whole if nothing was measured
    /// yet (the value is 0).
    pub fn update_or_start(&self, sample: f64, e: &EstimatesConfig) {
        if self.get() > 0.0 {
            self.update(sample, e);
        } else {
            self.set(sample);
        }
    }

    /// Replaces the value (a measured prior, from a profile).
    pub fn set(&self, v: f64) {
        if v.is_finite() && v > 0.0 {
            self.0.store(v.to_bits(), Ordering::Relaxed);
        }
    }

    /// Folds in a sample with weight `e.weight`, first clamped to within `e.outlier_factor` of
    /// the current value (winsorizing): one sample moves the estimate by at most
    /// `weight · (outlier_factor − 1)` of itself, however far off it is — an engine worker
    /// preempted for a time slice, a copy interrupted by a page fault — while a lasting change
    /// is still followed within tens of samples.
    pub fn update(&self, sample: f64, e: &EstimatesConfig) {
        if sample.is_finite() && sample > 0.0 {
            let old = self.get();
            let sample = sample.clamp(old / e.outlier_factor, old * e.outlier_factor);
            self.0.store(
                (old + e.weight * (sample - old)).to_bits(),
                Ordering::Relaxed,
            );
        }
    }
}

/// Estimates for one direction.
#[derive(Debug)]
pub struct DirectionEstimates {
    /// CPU bandwidth per size bin, bytes/ns (= GB/s).
    pub cpu: [Ewma; BINS],
    /// Engine bandwidth per size bin while executing, bytes/ns.
    pub engine: [Ewma; BINS],
    /// Delay from submission to the engine starting, ns.
    pub startup_ns: Ewma,
    /// Turnaround rate per size bin of a request the engine was given whole: its bytes over
    /// the time from submission to completion, whoever copied them (start-up delay, a worker
    /// preempted mid-copy and helpers all show), bytes/ns; 0 until the first sample. Followed
    /// quickly ([`TURNAROUND`]): an asynchronous copy's decision reads it
    /// ([`crate::Mover::decide`]).
    pub turnaround: [Ewma; BINS],
}

/// How the turnaround estimates move: a quarter of the way to each sample, clamped to within
/// 16× of the estimate, so that a worker starved by another process shows within a few
/// requests and its recovery within a few probes.
pub const TURNAROUND: EstimatesConfig = EstimatesConfig {
    weight: 0.25,
    outlier_factor: 16.0,
    sample_every: 1,
    bulk_sample_every: 1,
    bulk_bytes: 0,
};

/// All estimates.
#[derive(Debug)]
pub struct Bandwidth {
    dirs: [DirectionEstimates; 3],
}

/// Size bin of a request.
pub fn bin(len: usize) -> usize {
    let log = usize::BITS - 1 - len.max(1).leading_zeros();
    (log.saturating_sub(MIN_SAMPLED.trailing_zeros()) as usize).min(BINS - 1)
}

impl Default for Bandwidth {
    fn default() -> Self {
        // Neutral priors (equal paths, 5 µs start-up) until the first samples arrive.
        let d = || DirectionEstimates {
            cpu: std::array::from_fn(|_| Ewma::new(8.0)),
            engine: std::array::from_fn(|_| Ewma::new(8.0)),
            startup_ns: Ewma::new(5_000.0),
            // Unmeasured (0) until the first sample: the decision then takes an engine copy's
            // turnaround as twice the CPU's time.
            turnaround: std::array::from_fn(|_| Ewma::new(0.0)),
        };
        Bandwidth {
            dirs: [d(), d(), d()],
        }
    }
}

impl Bandwidth {
    /// The estimates of one direction.
    pub fn of(&self, dir: Direction) -> &DirectionEstimates {
        &self.dirs[dir.index()]
    }

    /// Takes every estimate of `other`.
    pub fn copy_from(&self, other: &Bandwidth) {
        for (mine, theirs) in self.dirs.iter().zip(&other.dirs) {
            for (m, t) in mine.cpu.iter().zip(&theirs.cpu) {
                m.set(t.get());
            }
            for (m, t) in mine.engine.iter().zip(&theirs.engine) {
                m.set(t.get());
            }
            mine.startup_ns.set(theirs.startup_ns.get());
            for (m, t) in mine.turnaround.iter().zip(&theirs.turnaround) {
                m.0.store(t.0.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
    }

    /// Bytes the engine should take of a `len`-byte split so both sides finish together:
    /// `L_D / B_D + t0 = L_C / B_C` with `L_C + L_D = L`, rounded down to `round`.
    pub fn engine_share(&self, dir: Direction, len: usize, round: usize) -> usize {
        let e = self.of(dir);
        let b = bin(len);
        let (bc, bd, t0) = (e.cpu[b].get(), e.engine[b].get(), e.startup_ns.get());
        let share = (len as f64 - bc * t0).max(0.0) * bd / (bc + bd);
        (share as usize).min(len) / round * round
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default `[mover.estimates]`.
    const D: EstimatesConfig = EstimatesConfig {
        weight: 0.125,
        outlier_factor: 4.0,
        sample_every: 64,
        bulk_sample_every: 4,
        bulk_bytes: 256 << 10,
    };

    #[test]
    fn d_is_the_default() {
        assert_eq!(D, EstimatesConfig::default());
    }

    #[test]
    fn bins_are_log2_from_16k() {
        assert_eq!(bin(1), 0);
        assert_eq!(bin(16 << 10), 0);
        assert_eq!(bin(32 << 10), 1);
        assert_eq!(bin((64 << 10) - 1), 1);
        assert_eq!(bin(1 << 20), 6);
        assert_eq!(bin(1 << 30), BINS - 1);
    }

    #[test]
    fn the_split_follows_the_estimates() {
        let bw = Bandwidth::default();
        let l = 1 << 20;
        let even = bw.engine_share(Direction::FromSlow, l, 4096);
        assert!(even < l / 2, "start-up delay shifts work to the CPU");
        for _ in 0..200 {
            bw.of(Direction::FromSlow).engine[bin(l)].update(24.0, &D);
            bw.of(Direction::FromSlow).startup_ns.update(1.0, &D);
        }
        let fast_engine = bw.engine_share(Direction::FromSlow, l, 4096);
        assert!(fast_engine > l * 2 / 3, "{fast_engine}");
        assert_eq!(fast_engine % 4096, 0);
    }

    /// A worker preempted for a time slice once made the start-up delay 300 µs (from 300 ns)
    /// and kept splits off for the rest of the run: an outlier moves an estimate a bounded
    /// step, and ordinary samples bring it back.
    #[test]
    fn an_outlier_moves_an_estimate_a_bounded_step() {
        let e = Ewma::new(300.0);
        e.update(4_000_000.0, &D);
        let bound = 300.0 * (1.0 + D.weight * (D.outlier_factor - 1.0));
        assert!((e.get() - bound).abs() < 1e-9, "{}", e.get());
        for _ in 0..5 {
            e.update(4_000_000.0, &D);
        }
        assert!(
            e.get() < 300.0 * 8.0,
            "six time slices in a row: {}",
            e.get()
        );
        for _ in 0..60 {
            e.update(300.0, &D);
        }
        assert!(
            e.get() < 330.0,
            "ordinary samples bring it back: {}",
            e.get()
        );
        e.update(0.001, &D);
        assert!(
            e.get() > 300.0 * 0.85,
            "a bandwidth sample from a stalled copy: {}",
            e.get()
        );
    }
}
