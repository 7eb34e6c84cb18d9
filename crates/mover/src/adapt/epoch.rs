//! The epoch: what adaptation does once per `epoch_ms` — counts the callers, follows the
//! split's live rates, and judges the bands' trials into threshold steps.

use std::sync::atomic::Ordering;

use super::trial::{nudge, Arm, Band, Tally, Trials};
use super::{Adapt, State, ADAPTED, LOWEST};
use crate::bandwidth::{Bandwidth, BINS, MIN_SAMPLED};
use crate::counters::{Counter, Counters};
use crate::hints::Direction;

impl Adapt {
    /// One epoch: counts the callers, nudges the split estimates towards `split_live` (the
    /// live samples of splits' two sides), and judges the bands' finished trials, taking the
    /// threshold steps that `hold` trials in a row asked for.
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
            self.nudge_split(st, split_live, counters);
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
                // Within the fence a step needs `hold` trials in a row; past it, twice as many
                // (a profile far off is repaired, noise is not followed far).
                let pace = &self.settings.pace;
                let hold = if to.unsigned_abs() > pace.max_shift {
                    2 * pace.hold
                } else {
                    pace.hold
                };
                let to = to.clamp(-LOWEST, LOWEST);
                let step = st.vote[i].cast(if to == st.shift[i] { 0 } else { wish }, hold);
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

    /// Moves the split's estimates towards the live samples of splits' two sides, one
    /// bounded step per `hold` epochs that find them more than `deadband` away.
    fn nudge_split(&self, st: &mut State, split_live: &Bandwidth, counters: &Counters) {
        let pace = &self.settings.pace;
        let mut moved = false;
        for (i, d) in ADAPTED.into_iter().enumerate() {
            let (eff, now) = (self.split.of(d), split_live.of(d));
            for b in 0..BINS {
                moved |= nudge(&eff.cpu[b], now.cpu[b].get(), &mut st.rates[i][0][b], pace);
                moved |= nudge(
                    &eff.engine[b],
                    now.engine[b].get(),
                    &mut st.rates[i][1][b],
                    pace,
                );
            }
            moved |= nudge(
                &eff.startup_ns,
                now.startup_ns.get(),
                &mut st.startup[i],
                pace,
            );
        }
        if moved {
            counters.add(Counter::split_nudges, 1);
        }
    }

    /// A direction whose bands timed nothing for `starved` epochs is watched: requests down
    /// to [`MIN_SAMPLED`] reach [`Adapt::band`], which notes how many bins below its own
    /// threshold the largest passing lies; the next epoch brings the band below the
    /// thresholds down that many bins, so
    /// that trials run where the traffic is (a "never" threshold, or one far above every
    /// request, is otherwise never put to the test).
    fn follow_traffic(&self, st: &mut State, i: usize, d: Direction) {
        let timed = self.trials[i].iter().flatten().any(|t| t.samples() > 0);
        if timed {
            st.starved[i] = 0;
            return;
        }
        st.starved[i] = st.starved[i].saturating_add(1);
        let needed = self.needed_depth[d.index()].swap(0, Ordering::Relaxed);
        if st.starved[i] < self.settings.pace.starved {
            return;
        }
        if needed == 0 {
            // Watch: let every request from MIN_SAMPLED up reach `band`.
            let min = self.min_threshold(d);
            self.cpu_below[d.index()].store(MIN_SAMPLED.min(min), Ordering::Relaxed);
            return;
        }
        self.reach(d, needed);
        st.starved[i] = 0;
    }

    /// A finished trial's wish (−1 lower, 0 stay, +1 raise), resetting the bands it judged;
    /// `None` while no band has both paths' evidence yet.
    fn judge(&self, t: &Trials) -> Option<i32> {
        let ready = |band: &[Tally; 2]| {
            band.iter()
                .all(|a| a.samples() >= self.settings.pace.evidence)
        };
        let wins = |band: &[Tally; 2], arm: Arm| {
            let (mine, other) = match arm {
                Arm::Cpu => (&band[Arm::Cpu as usize], &band[Arm::Offload as usize]),
                Arm::Offload => (&band[Arm::Offload as usize], &band[Arm::Cpu as usize]),
            };
            mine.rate() >= other.rate() * (1.0 + self.settings.pace.margin)
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
}
