//! The turning-point procedure of step 2, apart from the lab that measures it: which sizes to
//! measure, in what order, and what their verdicts decide. The tuner runs it on the lab's
//! copies; the tests run it on a synthetic lab whose truth and disturbances are known.
//!
//! **Sizes are measured interleaved.** Every round visits each size still measured, in an
//! order rotated by the round, one paired slice of each path per size. Measured size by size,
//! a size's rounds were consecutive (about 100 ms with `--quick`), so a disturbance that
//! lasted longer — on a 2-core VM, a phase in which the engine's core is taken or memory is
//! busy elsewhere — fell on every round of one size and decided it: a quick tune measured
//! reads of 1 MiB at 0.81× the CPU where the runs around it measured 1.18× and 1.19×, and a
//! second measured 1.45 MiB at 0.64×, which put its threshold above 1.45 MiB. Interleaved,
//! the same disturbance falls on one round of several sizes, which the verdict's bound on the
//! median absorbs.
//!
//! **The crossing is refined on a grid, not by bisection.** Between the last clear loss and
//! the first clear win of the coarse sweep, the sizes `refine` to an octave are measured
//! together, interleaved, and judged as the coarse sweep is: the threshold is the smallest
//! from which every larger one clearly wins, and sizes between that tie leave it undecided
//! there. Bisection measured one size at a time and let each verdict choose the next, so one
//! disturbed size moved every later step, and it took a tie for a loss.

use super::verdict::{crossing_of, lone_losses, Crossing, Paired, Verdict};
use super::{sweep_sizes, Effort};
use crate::profile::NEVER;

/// One size's paired rounds, and how the procedure came to measure it.
#[derive(Debug, Clone)]
pub(super) struct Point {
    /// Request size.
    pub size: usize,
    /// Offload (a) against the CPU (b), every round pooled.
    pub paired: Paired,
    /// Measured by the refinement, not the coarse sweep.
    pub refined: bool,
    /// A second measurement that replaced a lone loss between wins.
    pub remeasured: bool,
}

/// What a turning-point sweep decided.
#[derive(Debug, Clone)]
pub(super) struct Decision {
    /// The threshold: the smallest size from which offloading clearly wins at every larger
    /// size measured, or [`NEVER`].
    pub threshold: usize,
    /// Where the paths tie within noise (from, to), if the crossing was not sharp.
    pub tie: Option<(usize, usize)>,
    /// Every size measured, in the order decided (the coarse sweep, then the refinement).
    pub points: Vec<Point>,
}

/// Which path a slice measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Path {
    /// Offloading every request (the engine and the CPU splitting it).
    Offload,
    /// The CPU alone.
    Cpu,
}

/// Offload against the CPU at each of `sizes`, interleaved: round `r` visits the sizes still
/// measured from the `r`-th on, and which path goes first alternates; after each batch of
/// `e.rounds` rounds the sizes that tie get another batch, pooled, up to `e.batches`.
/// `tick` is called once per size as it is settled.
pub(super) fn settled(
    e: &Effort,
    sizes: &[usize],
    measure: &mut dyn FnMut(usize, Path) -> f64,
    tick: &mut dyn FnMut(),
) -> Vec<Paired> {
    let mut p = vec![Paired::default(); sizes.len()];
    let mut open: Vec<usize> = (0..sizes.len()).collect();
    let mut round = 0usize;
    while !open.is_empty() {
        for _ in 0..e.rounds {
            for k in 0..open.len() {
                let i = open[(k + round) % open.len()];
                let size = sizes[i];
                let (off, cpu) = if (round + k).is_multiple_of(2) {
                    let off = measure(size, Path::Offload);
                    (off, measure(size, Path::Cpu))
                } else {
                    let cpu = measure(size, Path::Cpu);
                    (measure(size, Path::Offload), cpu)
                };
                p[i].push(off, cpu);
            }
            round += 1;
        }
        for &i in &open {
            p[i].end_batch();
        }
        open.retain(|&i| {
            let more = p[i].verdict() == Verdict::Tie && p[i].batches() < e.batches;
            if !more {
                tick();
            }
            more
        });
    }
    p
}

/// Sizes of the refinement between `lo` (a clear loss) and `hi` (the smallest size from
/// which offloading clearly wins): `refine` to an octave, 4 KiB multiples, strictly between.
pub(super) fn refine_sizes(lo: usize, hi: usize, refine: usize) -> Vec<usize> {
    if lo == 0 || hi <= lo || refine < 2 {
        return Vec::new();
    }
    let octaves = (hi as f64 / lo as f64).log2();
    let steps = (octaves * refine as f64).round() as usize;
    let mut v: Vec<usize> = (1..steps)
        .map(|j| {
            let s = lo as f64 * 2f64.powf(j as f64 / refine as f64);
            (s as usize).next_multiple_of(4096)
        })
        .filter(|&s| s > lo && s < hi)
        .collect();
    v.dedup();
    v
}

/// Refinement points planned for one direction and alignment (for progress; fewer where 4 KiB
/// rounding merges small sizes).
pub(super) fn refine_points(e: &Effort) -> usize {
    let sizes = sweep_sizes(e);
    match sizes.as_slice() {
        [.., a, b] => refine_sizes(*a, *b, e.refine).len(),
        _ => 0,
    }
}

/// The turning point of one direction and alignment: the coarse sweep, interleaved (a lone
/// loss between wins measured once more, the second measurement standing: one disturbed
/// size must not push the turning point past every size below it); then, at a sharp
/// crossing, the refinement grid between its last loss and first win. A tie leaves the
/// threshold where offloading clearly wins, with the undecided range.
pub(super) fn turning_point(
    e: &Effort,
    measure: &mut dyn FnMut(usize, Path) -> f64,
    tick: &mut dyn FnMut(),
) -> Decision {
    let sizes = sweep_sizes(e);
    let mut points: Vec<Point> = settled(e, &sizes, measure, tick)
        .into_iter()
        .zip(&sizes)
        .map(|(paired, &size)| Point {
            size,
            paired,
            refined: false,
            remeasured: false,
        })
        .collect();
    let wins: Vec<bool> = points
        .iter()
        .map(|p| p.paired.verdict() != Verdict::Loss)
        .collect();
    let lone = lone_losses(&wins);
    let again: Vec<usize> = lone.iter().map(|&i| sizes[i]).collect();
    for (i, paired) in lone.into_iter().zip(settled(e, &again, measure, tick)) {
        points[i] = Point {
            remeasured: true,
            paired,
            ..points[i].clone()
        };
    }
    let verdicts: Vec<(usize, Verdict)> = points
        .iter()
        .map(|p| (p.size, p.paired.verdict()))
        .collect();
    let (hi, tie) = match crossing_of(&verdicts) {
        Crossing::At(c) => (c, None),
        Crossing::Never => (NEVER, None),
        // Offload only where it clearly wins; adaptation explores the tie.
        Crossing::Undecided { from, to } => {
            let t = to.unwrap_or(NEVER);
            (t, Some((from, t)))
        }
    };
    if tie.is_some() || hi == NEVER {
        return Decision {
            threshold: hi,
            tie,
            points,
        };
    }
    let lo = sizes.iter().rev().find(|&&s| s < hi).copied().unwrap_or(0);
    let grid = refine_sizes(lo, hi, e.refine);
    let refined = settled(e, &grid, measure, tick);
    // The grid between the loss and the win, judged as the coarse sweep is: sharp, or
    // undecided over the sizes that tie.
    let mut fine: Vec<(usize, Verdict)> = vec![(lo, Verdict::Loss)];
    fine.extend(grid.iter().zip(&refined).map(|(&s, p)| (s, p.verdict())));
    fine.push((hi, Verdict::Win));
    let (threshold, tie) = match crossing_of(&fine) {
        Crossing::At(c) => (c, None),
        Crossing::Undecided { from, to } => {
            let t = to.unwrap_or(hi);
            (t, Some((from, t)))
        }
        // Not given: the grid's largest size wins.
        Crossing::Never => (hi, None),
    };
    points.extend(grid.into_iter().zip(refined).map(|(size, paired)| Point {
        size,
        paired,
        refined: true,
        remeasured: false,
    }));
    Decision {
        threshold,
        tie,
        points,
    }
}

#[cfg(test)]
mod tests;
