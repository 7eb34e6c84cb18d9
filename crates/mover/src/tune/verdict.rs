//! Judging paired measurements: rounds that alternate two paths, the verdict of their
//! per-round ratios (a distribution-free bound on the median), and what a sweep of verdicts
//! says about where one path starts to beat the other.

use serde::Serialize;

use super::WIN;
use crate::lab::{median, rotated};

/// Two measurements in `rounds` rotated rounds: (median a, median b, median a ÷ b).
pub(super) fn paired(rounds: usize, a: impl FnMut() -> f64, b: impl FnMut() -> f64) -> [f64; 3] {
    let mut p = Paired::default();
    p.more(rounds, a, b);
    p.medians()
}

/// Paired measurements of two paths, pooled over any number of batches of rotated rounds.
#[derive(Debug, Default, Clone)]
pub(super) struct Paired {
    a: Vec<f64>,
    b: Vec<f64>,
    batches: usize,
}

impl Paired {
    /// Measures `rounds` more rotated rounds (a batch) and pools them with the earlier ones.
    pub fn more(&mut self, rounds: usize, mut a: impl FnMut() -> f64, mut b: impl FnMut() -> f64) {
        let Ok(got) = rotated(2, rounds, |i| {
            Ok::<f64, std::convert::Infallible>(if i == 0 { a() } else { b() })
        });
        let [xa, xb]: [Vec<f64>; 2] = got.try_into().expect("two paths");
        self.a.extend(xa);
        self.b.extend(xb);
        self.batches += 1;
    }

    /// Pools one round's pair.
    pub fn push(&mut self, a: f64, b: f64) {
        self.a.push(a);
        self.b.push(b);
    }

    /// Ends a batch of rounds: the verdict is a look more.
    pub fn end_batch(&mut self) {
        self.batches += 1;
    }

    /// Batches pooled.
    pub fn batches(&self) -> usize {
        self.batches
    }

    /// Each round's a ÷ b.
    pub fn ratios(&self) -> Vec<f64> {
        self.a.iter().zip(&self.b).map(|(x, y)| x / y).collect()
    }

    /// Rounds pooled.
    pub fn rounds(&self) -> usize {
        self.a.len()
    }

    /// (median a, median b, median a ÷ b) over every round pooled.
    pub fn medians(&self) -> [f64; 3] {
        [
            median(&mut self.a.clone()),
            median(&mut self.b.clone()),
            median(&mut self.ratios()),
        ]
    }

    /// The verdict of every round pooled, its bound widened for the batches looked at: a
    /// verdict read after each batch is a test repeated, so each look spends 5% ÷ batches
    /// (Bonferroni), and a tie that more rounds settle stays at 95% overall.
    pub fn verdict(&self) -> Verdict {
        verdict_at(&self.ratios(), 0.05 / self.batches.max(1) as f64)
    }
}

/// What the paired rounds at one size say about offloading against the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Offloading is faster in every round but the few a 95% bound on the median leaves out.
    Win,
    /// The CPU is faster, as surely.
    Loss,
    /// Neither: the rounds disagree, or the paths are within noise of each other.
    Tie,
}

/// The verdict of per-round ratios (offload ÷ CPU): a distribution-free one-sided 95%
/// bound on their median from order statistics (with 5 rounds the smallest and largest
/// ratio, with 9 the second smallest and second largest); a win when the lower bound is above
/// [`WIN`], a loss when the upper bound is below it.
pub fn verdict(ratios: &[f64]) -> Verdict {
    verdict_at(ratios, 0.05)
}

/// [`verdict`] with a one-sided bound at confidence 1 − `alpha`: the k-th smallest and k-th
/// largest ratio, k the largest with P(Binomial(n, ½) < k) ≤ `alpha` (at least the extremes).
pub fn verdict_at(ratios: &[f64], alpha: f64) -> Verdict {
    let n = ratios.len();
    if n == 0 {
        return Verdict::Tie;
    }
    let mut r = ratios.to_vec();
    r.sort_by(f64::total_cmp);
    // The largest k with P(Binomial(n, 1/2) < k) <= alpha: the k-th smallest ratio is below
    // the median with confidence at least 1 - alpha.
    let below = |k: usize| -> f64 {
        let mut c = 1.0f64;
        let mut total = 0.0;
        for i in 0..k {
            if i > 0 {
                c = c * (n - i + 1) as f64 / i as f64;
            }
            total += c;
        }
        total / 2f64.powi(n as i32)
    };
    let mut k = 1;
    while k < n && below(k + 1) <= alpha {
        k += 1;
    }
    if r[k - 1] > WIN {
        Verdict::Win
    } else if r[n - k] < WIN {
        Verdict::Loss
    } else {
        Verdict::Tie
    }
}

/// What a sweep of verdicts, ascending by size, says about the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crossing {
    /// Offloading loses below this size, wins at it and loses at no larger size: a
    /// threshold to refine between the size below and this one.
    At(usize),
    /// Offloading loses at the largest size: never offload.
    Never,
    /// Offloading clearly wins at `to` (or nowhere, `None`) and does not lose from `from`
    /// on: between them the paths tie within noise, so where the threshold lies there cannot
    /// be decided from these measurements; adaptation settles it on the live traffic.
    Undecided {
        /// The smallest size from which offloading never clearly loses.
        from: usize,
        /// The smallest size from `from` on at which it clearly wins.
        to: Option<usize>,
    },
}

/// The crossing of a sweep: decided when the smallest size from which offloading never
/// clearly loses also clearly wins, or when the largest size clearly loses; otherwise
/// undecided over the tie between. Ties above a clear win do not undo it: they are not
/// losses, and on a noisy host the largest sizes' rounds tied at a median gain of 1.6× (a
/// tie there made the direction "never").
pub fn crossing_of(points: &[(usize, Verdict)]) -> Crossing {
    let Some(&(_, last)) = points.last() else {
        return Crossing::Never;
    };
    if last == Verdict::Loss {
        return Crossing::Never;
    }
    let from_where = |keep: &dyn Fn(Verdict) -> bool| {
        let n = points.iter().rev().take_while(|p| keep(p.1)).count();
        (n > 0).then(|| points[points.len() - n].0)
    };
    let open = from_where(&|v| v != Verdict::Loss).expect("the last point does not lose");
    let clear = (points.iter())
        .find(|p| p.0 >= open && p.1 == Verdict::Win)
        .map(|p| p.0);
    // Every size from `open` up does not lose; the size below it (if any) loses. Decided
    // when `open` itself wins: the crossing is sharp.
    match clear {
        Some(c) if c == open => Crossing::At(c),
        to => Crossing::Undecided { from: open, to },
    }
}

/// Indices of losses with a win on each side, or at the end after a win.
pub(super) fn lone_losses(wins: &[bool]) -> Vec<usize> {
    (0..wins.len())
        .filter(|&i| !wins[i] && i > 0 && wins[i - 1] && wins.get(i + 1).is_none_or(|&w| w))
        .collect()
}

/// At each of `sizes`, `a` against `b` in `rounds` paired rounds (their medians handed to
/// `record`); the smallest size from which `a` never clearly loses, or `None` where it
/// clearly loses at the largest size ([`crossing_of`]; within noise of `b`, `a` is as good a
/// choice). Deciding on each size's median ratio alone made one comparison that went the
/// other way decide everything above it: a full `tune` once wrote "non-temporal never",
/// measured to 64 KiB, and durable writes of 64–512 KiB then ran at 0.48× of what
/// non-temporal stores gave them (`bench mix --against`, the same profile with them).
pub(super) fn crossing(
    sizes: &[usize],
    rounds: usize,
    a: impl Fn(usize) -> f64,
    b: impl Fn(usize) -> f64,
    mut record: impl FnMut(usize, f64, f64),
) -> Option<usize> {
    let points: Vec<(usize, Verdict)> = sizes
        .iter()
        .map(|&size| {
            let mut p = Paired::default();
            p.more(rounds, || a(size), || b(size));
            let [x, y, _] = p.medians();
            record(size, x, y);
            (size, p.verdict())
        })
        .collect();
    match crossing_of(&points) {
        Crossing::Never => None,
        Crossing::At(size) | Crossing::Undecided { from: size, .. } => Some(size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_bound_the_median_from_order_statistics() {
        use Verdict::*;
        assert_eq!(verdict(&[1.2, 1.1, 1.3, 1.05, 1.2]), Win);
        assert_eq!(
            verdict(&[1.2, 1.1, 1.3, 0.99, 1.2]),
            Tie,
            "one round of five disagrees"
        );
        assert_eq!(verdict(&[0.8, 0.9, 0.95, 0.9, 0.85]), Loss);
        // Nine rounds: the second smallest and second largest bound the median.
        assert_eq!(
            verdict(&[0.99, 1.1, 1.2, 1.1, 1.2, 1.1, 1.2, 1.1, 1.2]),
            Win
        );
        assert_eq!(
            verdict(&[0.99, 0.98, 1.2, 1.1, 1.2, 1.1, 1.2, 1.1, 1.2]),
            Tie
        );
        assert_eq!(verdict(&[]), Tie);
    }

    #[test]
    fn crossings_are_decided_only_where_they_are_sharp() {
        use Verdict::*;
        let k = |v: &[Verdict]| -> Vec<(usize, Verdict)> {
            v.iter()
                .enumerate()
                .map(|(i, &v)| (1 << (12 + 2 * i), v))
                .collect()
        };
        assert_eq!(
            crossing_of(&k(&[Loss, Loss, Win, Win])),
            Crossing::At(1 << 16)
        );
        assert_eq!(crossing_of(&k(&[Win, Win])), Crossing::At(1 << 12));
        assert_eq!(crossing_of(&k(&[Win, Loss])), Crossing::Never);
        assert_eq!(crossing_of(&[]), Crossing::Never);
        assert_eq!(
            crossing_of(&k(&[Loss, Tie, Tie, Win])),
            Crossing::Undecided {
                from: 1 << 14,
                to: Some(1 << 18)
            }
        );
        assert_eq!(
            crossing_of(&k(&[Loss, Tie, Win, Tie])),
            Crossing::Undecided {
                from: 1 << 14,
                to: Some(1 << 16)
            }
        );
        assert_eq!(
            crossing_of(&k(&[Loss, Tie, Tie])),
            Crossing::Undecided {
                from: 1 << 14,
                to: None
            }
        );
        // A tie above a clear win does not undo it.
        assert_eq!(crossing_of(&k(&[Loss, Win, Tie])), Crossing::At(1 << 14));
    }

    #[test]
    fn only_lone_losses_are_measured_again() {
        assert_eq!(lone_losses(&[false, true, false, true, true]), [2]);
        assert_eq!(lone_losses(&[false, false, true, true, false]), [4]);
        assert_eq!(
            lone_losses(&[false, true, false, false, true]),
            Vec::<usize>::new()
        );
        assert_eq!(lone_losses(&[false, false]), Vec::<usize>::new());
        assert_eq!(lone_losses(&[]), Vec::<usize>::new());
    }

    /// The choice between `a`, which runs at `rate(size)` (times `wobble` in every third
    /// round), and `b`, at 1.0, in 9 rounds at sizes 1 to 8.
    fn kernel_choice(rate: impl Fn(usize) -> f64, wobble: f64) -> Option<usize> {
        let round = std::cell::Cell::new(0u32);
        crossing(
            &[1, 2, 4, 8],
            9,
            |size| {
                round.set(round.get() + 1);
                rate(size)
                    * if round.get().is_multiple_of(3) {
                        wobble
                    } else {
                        1.0
                    }
            },
            |_| 1.0,
            |_, _, _| {},
        )
    }

    #[test]
    fn a_kernel_is_chosen_from_where_it_never_clearly_loses() {
        // Clearly faster from 2 up.
        assert_eq!(
            kernel_choice(|s| if s >= 2 { 1.5 } else { 0.7 }, 1.0),
            Some(2)
        );
        // Clearly slower at 4, faster above it.
        assert_eq!(
            kernel_choice(|s| if s == 4 { 0.9 } else { 1.7 }, 1.0),
            Some(8)
        );
        // At the largest size a median of 0.98, a third of the rounds at 1.47: within
        // noise, so no reason for "never" (which the median alone gave).
        assert_eq!(
            kernel_choice(|s| if s == 8 { 0.98 } else { 1.5 }, 1.5),
            Some(1)
        );
        // Clearly slower at the largest size: never.
        assert_eq!(kernel_choice(|s| if s == 8 { 0.6 } else { 1.5 }, 1.0), None);
    }

    #[test]
    fn paired_rounds_alternate_and_take_medians() {
        let mut calls = Vec::new();
        let a = std::cell::RefCell::new(&mut calls);
        let r = paired(
            3,
            || {
                a.borrow_mut().push('a');
                4.0
            },
            || {
                a.borrow_mut().push('b');
                2.0
            },
        );
        assert_eq!(r, [4.0, 2.0, 2.0]);
        assert_eq!(calls.iter().collect::<String>(), "abbaab");
    }
}
