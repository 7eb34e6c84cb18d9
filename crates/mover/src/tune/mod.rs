//! Automatic profiling: measures this machine's copy paths and derives what the scheduler
//! needs (Fastmove §6.3.2 does this by hand from FIO sweeps and leaves automation as future
//! work; here it is one call).
//!
//! What it measures, each as paired rounds (the two paths of a comparison alternate, and a
//! ratio is the median of per-round ratios, so drift on a noisy machine cancels):
//!
//! 1. **Per-bin bandwidths** of the CPU and the engine alone, 16 KiB to 2 MiB, one thread
//!    (the CPU's per request; the engine's while it executes), and the engine's start-up
//!    delay from submission to its start: the engine's side as the mover's live estimates
//!    measure it, so that a split's ratio starts from what the live samples will say.
//!    They seed the split of the offload path of step 2, as the profile will seed the
//!    scheduler's: on the neutral priors, a first sweep split writes half and half while the
//!    estimates crept towards the live samples.
//! 2. **Turning points.** For each direction (to slow memory, durable; from slow memory) and
//!    alignment (64 B aligned; both ends 8 bytes off), one thread copies with the CPU alone
//!    and with a mover that offloads every request (the CPU + engine split, at every size —
//!    what the scheduler does above a threshold, so the thresholds are also where splitting
//!    starts). Each size's rounds give a verdict (a 95% bound on the median ratio from order
//!    statistics: [`Verdict::Win`], [`Verdict::Loss`] or, within noise, [`Verdict::Tie`]). A
//!    tie gets more rounds, pooled, up to [`Effort::batches`] batches, its bound widened for
//!    each look: with five rounds a win needs every round to win, so one disturbed round made
//!    a clear 1.7× win at 4 MiB a tie, and a tie at the largest size left the direction
//!    "never" (a quick tune on a 2-core EPYC, where the full tune found 256 KiB). A
//!    coarse sweep finds the smallest size from which offloading never clearly loses; when
//!    it clearly wins there (ties above it are not losses) and the size below clearly loses,
//!    a grid of sizes between the two narrows the
//!    threshold (a lone loss is measured once more, and the second measurement stands). The
//!    sizes of a sweep or a grid are measured interleaved, every round visiting each, so that
//!    a disturbance longer than one size's rounds cannot decide a size (module `sweep`). A
//!    clear loss at the largest size gives [`NEVER`]. Ties between (offloading neither
//!    clearly better nor worse) leave the threshold undecided: the profile offloads only where
//!    offloading clearly wins (or never), records the tie, and online adaptation settles it on
//!    the live traffic ([`crate::adapt`]). A quick sweep, with fewer rounds, calls more
//!    sizes ties rather than deciding them by chance, and gives its ties more batches.
//! 3. **M**, the engine's saturation point: engine-only 64 KiB reads from 1 to N concurrent
//!    callers, in rotated rounds; M is the fewest reaching [`SATURATED`] of the peak.
//! 4. **The CPU-writer cap**: CPU-only durable 64 KiB writes from 1 to N threads; the cap is the
//!    fewest reaching [`SATURATED`] of the peak, or none if that is at least the core count.
//! 5. **The non-temporal threshold**: durable copies of 256 B to 1 MiB with streaming stores
//!    against temporal stores + flush, in paired rounds; the smallest size from which
//!    streaming never clearly loses (a 95% bound on the median ratio, as in step 2), or
//!    never if it clearly loses at 1 MiB.
//! 6. **Shifted copies**: reads of 1 KiB to 256 KiB into DRAM 8 bytes out of phase with the
//!    region, with the SIMD loop against `memcpy` (see `switchyard_media::kernels`); the
//!    smallest size from which the loop never clearly loses, or never.
//!
//! The tuner never reads the configured thresholds: it finds them.

mod measurements;
mod steps;
mod sweep;
mod verdict;

use std::time::{Duration, Instant};

use switchyard_media::Region;

use crate::config::{Config, ConfigError, Locality, Thresholds};
use crate::profile::{self, EngineId, Machine, Profile, Tuned, NEVER};

pub use measurements::{Measurements, NtPoint, ScalePoint, ShiftedPoint, SweepPoint};
pub use verdict::{crossing_of, verdict, Crossing, Verdict};

/// Offloading must reach this factor of the CPU's bandwidth to count as a win. Not above 1:
/// the split's gain grows with size, so a margin here only moves the threshold past sizes
/// where splitting already pays (with a 3% margin, `bench mix` bulk reads fell behind the
/// grid's best setting, whose threshold was lower); a noisy loss at a large size still
/// pushes the turning point up, as "wins at every larger size" demands.
pub const WIN: f64 = 1.0;
/// Share of the peak bandwidth that counts as saturated.
pub const SATURATED: f64 = 0.95;
/// Bytes the DRAM side of a shifted-copy measurement lies out of phase with the region (8:
/// the shift that hurts `rep movsb` most where we measured).
pub const SHIFT: usize = 8;

/// How long and how carefully to measure.
#[derive(Debug, Clone, Copy)]
pub struct Effort {
    /// Rounds per comparison.
    pub rounds: usize,
    /// Most batches of `rounds` a turning-point comparison that ties is measured in: a tie
    /// gets another batch, pooled with the earlier ones, until it is decided or this many.
    pub batches: usize,
    /// Length of one path's slice in a round.
    pub slice: Duration,
    /// Sizes to an octave the refinement measures between a crossing's last loss and first
    /// win.
    pub refine: usize,
    /// Coarse sweep: every power of 2 (else every power of 4).
    pub fine_sweep: bool,
}

impl Effort {
    /// `switchyard tune --quick`: well within 30 s on a 2-core machine.
    pub const QUICK: Effort = Effort {
        rounds: 5,
        batches: 4,
        slice: Duration::from_millis(10),
        refine: 2,
        fine_sweep: false,
    };
    /// `switchyard tune`: well within 2 minutes on a 2-core machine.
    pub const FULL: Effort = Effort {
        rounds: 9,
        batches: 2,
        slice: Duration::from_millis(20),
        refine: 4,
        fine_sweep: true,
    };
}

/// What the caller is told as the tuner goes: a step's name, steps done, steps planned.
pub type Progress<'a> = &'a mut dyn FnMut(&str, usize, usize);

/// Sizes of the coarse sweep.
pub(crate) fn sweep_sizes(e: &Effort) -> Vec<usize> {
    let step = if e.fine_sweep { 1 } else { 2 };
    (12..=22).step_by(step).map(|s| 1usize << s).collect()
}

/// Profiles this machine's paths on `region` with the engine `config` starts. `quick` picks
/// [`Effort::QUICK`], else [`Effort::FULL`]. The region's contents are overwritten. The steps
/// are those of the module docs, in order.
pub fn tune(
    region: &Region,
    config: &Config,
    effort: Effort,
    quick: bool,
    progress: Progress<'_>,
) -> Result<(Profile, Measurements), ConfigError> {
    let t_start = Instant::now();
    let mut t = steps::Tuner::new(region, config, effort, progress)?;
    let (bins, startup) = t.bandwidths();
    t.seed_offload(&bins, &startup);
    let (found, undecided) = t.turning_points();
    let (concurrency_limit, cpu_writers) = t.saturation();
    let nt_threshold = t.nt_threshold();
    let shifted_min = t.shifted_min();
    let locality = |dir: usize| Locality {
        local_aligned: found[dir][0],
        local_unaligned: found[dir][1],
        // No NUMA here: remote memory is local memory.
        remote_aligned: found[dir][0],
        remote_unaligned: found[dir][1],
    };
    let thresholds = Thresholds {
        to_slow: locality(0),
        from_slow: locality(1),
        // DRAM-to-DRAM copies behave as reads from slow memory on a machine whose slow
        // memory is DRAM; elsewhere the engine is at least no worse there.
        dram: locality(1),
    };
    let profile = Profile {
        version: profile::PROFILE_VERSION,
        machine: Machine::this(&config.persist()),
        engine: EngineId::of(config),
        measured: profile::Measured {
            unix_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            seconds: t_start.elapsed().as_secs_f64(),
            quick,
        },
        tuned: Tuned {
            split_min_bytes: found.iter().flatten().copied().min().unwrap_or(NEVER),
            thresholds,
            concurrency_limit,
            cpu_writers,
            nt_threshold,
            shifted_min,
            undecided,
        },
        bins,
        startup,
    };
    Ok((profile, t.into_measurements()))
}
