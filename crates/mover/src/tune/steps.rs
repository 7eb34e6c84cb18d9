//! The tuner's steps (numbered as in the module docs), each a method of [`Tuner`], which holds
//! what they share: the lab, the paths compared, the effort, progress and the measurements.

use switchyard_media::{Persist, Region};

use super::sweep::{self, Path};
use super::verdict::{crossing, paired};
use super::{
    sweep_sizes, Effort, Measurements, NtPoint, Progress, ScalePoint, ShiftedPoint, SweepPoint,
    SATURATED, SHIFT,
};
use crate::bandwidth;
use crate::config::{Config, ConfigError, Policy, Thresholds};
use crate::hints::Direction;
use crate::lab::{median, rotated, Lab};
use crate::profile::{self, Bin, Startup, NEVER};
use crate::Mover;

/// The directions profiled, in the order of the profile's arrays.
const DIRS: [Direction; 2] = [Direction::ToSlow, Direction::FromSlow];
/// The request size of the saturation steps (3 and 4).
const SCALE_SIZE: usize = 64 << 10;

/// Progress of a run.
struct Steps<'p> {
    done: usize,
    total: usize,
    progress: Progress<'p>,
}

impl Steps<'_> {
    fn tick(&mut self, what: &str) {
        self.done += 1;
        (self.progress)(what, self.done.min(self.total), self.total);
    }
}

/// The paths compared: the CPU alone, the engine alone, and a mover that offloads every
/// request it may (thresholds 0; split at every size).
struct Paths {
    cpu: Mover,
    engine: Mover,
    offload: Mover,
}

/// One tuning run.
pub(super) struct Tuner<'r, 'p> {
    lab: Lab<'r>,
    paths: Paths,
    persist: Persist,
    effort: Effort,
    steps: Steps<'p>,
    m: Measurements,
    cores: usize,
    /// Most concurrent callers the saturation steps try.
    max_callers: usize,
}

/// Sizes of the bandwidth bins (step 1).
fn bins() -> Vec<usize> {
    (0..bandwidth::BINS)
        .map(|i| bandwidth::MIN_SAMPLED << i)
        .collect()
}

/// Sizes of the non-temporal comparison (step 5): every power of 2 to 64 KiB, then every
/// power of 4 to 1 MiB, as large as the mover's bulk copies (a choice made below them would
/// be extrapolated to them).
fn nt_sizes() -> Vec<usize> {
    (8..=16).chain([18, 20]).map(|s| 1usize << s).collect()
}

/// Sizes of the shifted-copy comparison (step 6): every power of 4 from 1 KiB to 256 KiB.
/// Not beyond: from 1 MiB glibc leaves `rep movsb` and its copy is 2–6% faster than the loop
/// (docs/scheduler.md), which would make the loop "never" where below it is 1.5–4× faster.
fn shifted_sizes() -> Vec<usize> {
    (10..=18).step_by(2).map(|s| 1usize << s).collect()
}

impl<'r, 'p> Tuner<'r, 'p> {
    /// Starts `config`'s engine and the three paths on `region`, and plans the steps.
    pub fn new(
        region: &'r Region,
        config: &Config,
        effort: Effort,
        progress: Progress<'p>,
    ) -> Result<Self, ConfigError> {
        let started = crate::start_engine(config)?;
        let persist = config.persist();
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let max_callers = (2 * cores).clamp(2, 8);
        // Every path offloads all it may: thresholds 0 and, for `auto`, a split at every size.
        let mover = |policy: Policy| {
            let mut c = config.clone();
            c.mover.policy = policy;
            c.mover.thresholds = Thresholds::all(0);
            c.mover.split_min_bytes = 0;
            c.mover.concurrency_limit = 0;
            c.mover.cpu_writers = 0;
            c.applied_profile = None;
            Mover::with_started(&c, &started, persist)
        };
        let total = DIRS.len() * 2 * (sweep_sizes(&effort).len() + sweep::refine_points(&effort))
            + DIRS.len() * bins().len()
            + 2 * max_callers
            + nt_sizes().len()
            + shifted_sizes().len();
        Ok(Tuner {
            lab: Lab::new(region),
            paths: Paths {
                cpu: mover(Policy::Cpu),
                engine: mover(Policy::Engine),
                offload: mover(Policy::Auto),
            },
            persist,
            effort,
            steps: Steps {
                done: 0,
                total,
                progress,
            },
            m: Measurements {
                sweep: Vec::new(),
                engine_scaling: Vec::new(),
                writer_scaling: Vec::new(),
                nt: Vec::new(),
                shifted: Vec::new(),
            },
            cores,
            max_callers,
        })
    }

    /// Seeds the offload path's split estimates with step 1's bandwidths and start-up
    /// delays, as a profile seeds the scheduler's: the turning points then compare the CPU
    /// with the split the scheduler makes once the profile is in effect (on the neutral
    /// priors, a tune's first sweep split writes half and half while the estimates crept
    /// towards the live samples).
    pub fn seed_offload(&self, bins: &[Bin], startup: &[Startup]) {
        let bw = crate::bandwidth::Bandwidth::default();
        profile::seed(bins, startup, &bw);
        self.paths.offload.seed_estimates(&bw);
    }

    /// Everything measured.
    pub fn into_measurements(self) -> Measurements {
        self.m
    }

    /// Step 2: the turning point of each direction (rows) and alignment (columns: aligned,
    /// unaligned), and the ranges left undecided.
    pub fn turning_points(&mut self) -> ([[usize; 2]; 2], Vec<profile::Undecided>) {
        let mut found = [[NEVER; 2]; 2];
        let mut undecided = Vec::new();
        for (di, &dir) in DIRS.iter().enumerate() {
            for (ai, misalign) in [0usize, 8].into_iter().enumerate() {
                let (threshold, tie) = self.turning_point(dir, misalign);
                found[di][ai] = threshold;
                undecided.extend(tie);
            }
        }
        (found, undecided)
    }

    /// The turning point of one direction and alignment ([`sweep::turning_point`] on the
    /// lab's copies), its points recorded; a tie leaves the threshold where offloading clearly
    /// wins, with the undecided range.
    fn turning_point(
        &mut self,
        dir: Direction,
        misalign: usize,
    ) -> (usize, Option<profile::Undecided>) {
        let label = format!(
            "turning point {} {}",
            dir.name(),
            if misalign == 0 {
                "aligned"
            } else {
                "unaligned"
            }
        );
        let (lab, paths, e) = (&self.lab, &self.paths, &self.effort);
        let steps = &mut self.steps;
        let mut measure = |size: usize, path: Path| {
            let mover = match path {
                Path::Offload => &paths.offload,
                Path::Cpu => &paths.cpu,
            };
            lab.rate(mover, dir, &[size], 1, misalign, e.slice)
        };
        let d = sweep::turning_point(e, &mut measure, &mut || steps.tick(&label));
        // Sizes a sharp crossing did not refine count as done.
        let measured = d.points.iter().filter(|p| p.refined).count();
        steps.done += sweep::refine_points(e).saturating_sub(measured);
        self.m.sweep.extend(d.points.iter().map(|p| {
            let [off, cpu, ratio] = p.paired.medians();
            SweepPoint {
                direction: dir.name(),
                aligned: misalign == 0,
                size: p.size,
                cpu_gib_s: cpu,
                offload_gib_s: off,
                ratio,
                rounds: p.paired.rounds(),
                refined: p.refined,
                remeasured: p.remeasured,
                verdict: p.paired.verdict(),
            }
        }));
        let tie = d.tie.map(|(from, to)| profile::Undecided {
            direction: dir.name().to_string(),
            aligned: misalign == 0,
            from,
            to,
        });
        (d.threshold, tie)
    }

    /// Step 1: per-bin bandwidths and start-up delays. The engine's side is what the mover's live
    /// estimates track (bandwidth while executing, and the delay from submission to the
    /// start), read from the engine-only mover after each of its slices; the median over the
    /// rounds is kept. They seed the estimates a split's ratio comes from, which then follow
    /// the live samples: both must measure the same thing, or the first epochs move the ratio
    /// on the difference alone.
    pub fn bandwidths(&mut self) -> (Vec<Bin>, Vec<Startup>) {
        let (lab, paths, slice) = (&self.lab, &self.paths, self.effort.slice);
        let mut bin_out = Vec::new();
        let mut startup = Vec::new();
        for &dir in &DIRS {
            let name = dir.name();
            let mut starts = Vec::new();
            let live = paths.engine.bandwidth().of(dir);
            for size in bins() {
                let mut engine = Vec::with_capacity(self.effort.rounds);
                let [cpu, _, _] = paired(
                    self.effort.rounds,
                    || lab.rate(&paths.cpu, dir, &[size], 1, 0, slice),
                    || {
                        let r = lab.rate(&paths.engine, dir, &[size], 1, 0, slice);
                        engine.push(live.engine[bandwidth::bin(size)].get());
                        starts.push(live.startup_ns.get());
                        r
                    },
                );
                bin_out.push(Bin {
                    direction: name.to_string(),
                    size,
                    cpu_gib_s: cpu,
                    engine_gib_s: median(&mut engine) / 1.073_741_824,
                });
                self.steps.tick(&format!("bandwidth {name}"));
            }
            startup.push(Startup {
                direction: name.to_string(),
                ns: median(&mut starts),
            });
        }
        (bin_out, startup)
    }

    /// Aggregate bandwidth of `mover` by concurrent callers, 1 to `max_callers`, in rotated
    /// rounds, so that drift over the sweep (minutes on a noisy machine) does not make a later
    /// count look like a new peak.
    fn scaling(&mut self, engine: bool, dir: Direction, what: &str) -> Vec<ScalePoint> {
        let (lab, slice, rounds) = (&self.lab, self.effort.slice, self.effort.rounds);
        let mover = if engine {
            &self.paths.engine
        } else {
            &self.paths.cpu
        };
        let steps = &mut self.steps;
        let mut done = 0;
        let Ok(got) = rotated(self.max_callers, rounds, |i| {
            done += 1;
            if done % rounds == 0 {
                steps.tick(what);
            }
            Ok::<_, std::convert::Infallible>(lab.rate(mover, dir, &[SCALE_SIZE], i + 1, 0, slice))
        });
        got.into_iter()
            .enumerate()
            .map(|(i, mut g)| ScalePoint {
                threads: i + 1,
                gib_s: median(&mut g),
            })
            .collect()
    }

    /// Steps 3 and 4: M and the CPU-writer cap, the fewest callers reaching [`SATURATED`] of the peak
    /// (a cap at or above the core count never binds a caller per core: none).
    pub fn saturation(&mut self) -> (usize, usize) {
        let saturation = |pts: &[ScalePoint]| {
            let peak = pts.iter().map(|p| p.gib_s).fold(0.0, f64::max);
            pts.iter()
                .find(|p| p.gib_s >= SATURATED * peak)
                .map_or(1, |p| p.threads)
        };
        let engine = self.scaling(true, Direction::FromSlow, "engine saturation (M)");
        let writers = self.scaling(false, Direction::ToSlow, "CPU writers");
        let concurrency_limit = saturation(&engine);
        let w = saturation(&writers);
        self.m.engine_scaling = engine;
        self.m.writer_scaling = writers;
        let cpu_writers = if w >= self.max_callers || w >= self.cores {
            0
        } else {
            w
        };
        (concurrency_limit, cpu_writers)
    }

    /// Step 5: the non-temporal threshold of durable copies, or never.
    pub fn nt_threshold(&mut self) -> usize {
        let (lab, persist, slice) = (&self.lab, self.persist, self.effort.slice);
        let (m, steps) = (&mut self.m, &mut self.steps);
        crossing(
            &nt_sizes(),
            self.effort.rounds,
            |size| lab.durable_rate(persist, size, 0, slice),
            |size| lab.durable_rate(persist, size, usize::MAX, slice),
            |size, nt, temporal| {
                m.nt.push(NtPoint {
                    size,
                    nt_gib_s: nt,
                    temporal_gib_s: temporal,
                });
                steps.tick("non-temporal threshold");
            },
        )
        .unwrap_or(NEVER)
    }

    /// Step 6: the size from which reads between shifted buffers take the SIMD loop, or 0 (never).
    pub fn shifted_min(&mut self) -> usize {
        let (lab, persist, slice) = (&self.lab, self.persist, self.effort.slice);
        let (m, steps) = (&mut self.m, &mut self.steps);
        let with = |min: usize| Persist {
            shifted_min: min,
            ..persist
        };
        crossing(
            &shifted_sizes(),
            self.effort.rounds,
            |size| lab.shifted_rate(with(1), size, SHIFT, slice),
            |size| lab.shifted_rate(with(0), size, SHIFT, slice),
            |size, looped, memcpy| {
                m.shifted.push(ShiftedPoint {
                    size,
                    loop_gib_s: looped,
                    memcpy_gib_s: memcpy,
                });
                steps.tick("shifted copies");
            },
        )
        .unwrap_or(0)
    }
}
