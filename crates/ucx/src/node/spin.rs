//! Whether [`Node::wait`](super::Node::wait) polls before it sleeps: only while polling has
//! been finding events.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How long [`Node::wait`](super::Node::wait) polls, at most, before it sleeps on the
/// worker's event descriptor.
pub(super) const SPIN: Duration = Duration::from_micros(100);

/// Whether [`Node::wait`]'s polling pays: how often a poll found its event before [`SPIN`]
/// ran out, lately. It polls while about half of its polls did; otherwise only one wait in
/// [`Spin::TRIAL`] polls, and one that finds its event resumes polling.
pub(super) struct Spin {
    /// Polls that found their event, an exponentially weighted share in 1/1024ths.
    hits: Cell<u32>,
    /// Waits since the last trial.
    since_trial: Cell<u32>,
}

impl Spin {
    const TRIAL: u32 = 16;

    /// One wait's polling: calls `poll` (true: an event was found) once, then again for as
    /// long as this wait may poll; returns whether it found an event (else the caller sleeps).
    /// Only a wait whose first poll finds nothing counts, for the trials and for what polling
    /// found: sleeping would have found an event that was already there as soon, and a
    /// caller's waits often come in pairs of which the first finds something at once (what
    /// the previous step set off), so counting those would leave every trial to them — and
    /// polling off for good.
    pub(super) fn poll(&self, mut poll: impl FnMut() -> bool) -> bool {
        if poll() {
            return true;
        }
        let spin = self.budget();
        let t0 = Instant::now();
        while t0.elapsed() < spin {
            std::hint::spin_loop();
            if poll() {
                self.learn(spin, true);
                return true;
            }
        }
        self.learn(spin, false);
        false
    }

    /// How long this wait polls.
    pub(super) fn budget(&self) -> Duration {
        if self.hits.get() >= 512 {
            return SPIN;
        }
        let n = self.since_trial.get() + 1;
        if n >= Self::TRIAL {
            self.since_trial.set(0);
            SPIN
        } else {
            self.since_trial.set(n);
            Duration::ZERO
        }
    }

    /// Files whether a wait that polled for `spin` found its event by polling.
    pub(super) fn learn(&self, spin: Duration, hit: bool) {
        if spin.is_zero() {
            return;
        }
        let h = self.hits.get();
        self.hits.set(match hit {
            // A trial that found its event resumes polling at once.
            true if h < 512 => 640,
            true => h - h / 8 + 128,
            false => h - h / 8,
        });
    }
}

impl Default for Spin {
    /// Polling, until it is seen not to pay.
    fn default() -> Spin {
        Spin {
            hits: Cell::new(1024),
            since_trial: Cell::new(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The share of `waits` waits that poll, each finding its event by polling when `hit`.
    fn polled(spin: &Spin, waits: u32, hit: bool) -> u32 {
        (0..waits)
            .filter(|_| {
                let b = spin.budget();
                spin.learn(b, hit);
                !b.is_zero()
            })
            .count() as u32
    }

    #[test]
    fn polling_stops_where_it_finds_nothing_and_resumes_where_it_does() {
        let spin = Spin::default();
        assert_eq!(
            polled(&spin, 100, true),
            100,
            "quick answers: every wait polls"
        );
        let slow = polled(&spin, 160, false);
        assert!(slow <= 16, "slow answers: only trials poll ({slow} of 160)");
        assert!(polled(&spin, 160, false) <= 10, "trials only, once settled");
        // Answers quick again: the next trial sees it, and polling resumes.
        polled(&spin, 16, true);
        assert_eq!(polled(&spin, 50, true), 50);
    }

    /// Waits that alternate between one whose first poll finds its event (what the previous
    /// step set off) and one whose event comes a few polls later: polling, once off, comes
    /// back within a trial's worth of the second kind, whatever the phase.
    #[test]
    fn waits_that_find_their_event_at_once_do_not_use_up_the_trials() {
        for phase in 0..2 {
            let spin = Spin::default();
            // Slow answers switch polling off.
            for _ in 0..200 {
                spin.poll(|| false);
            }
            assert!(spin.hits.get() < 512);
            let mut resumed = None;
            for w in 0..(4 * Spin::TRIAL as usize) {
                if w % 2 == phase {
                    assert!(spin.poll(|| true));
                } else {
                    let mut polls = 0;
                    // Found at the third poll, if this wait polls at all.
                    spin.poll(|| {
                        polls += 1;
                        polls >= 3
                    });
                }
                if spin.hits.get() >= 512 {
                    resumed = Some(w);
                    break;
                }
            }
            assert!(resumed.is_some(), "polling never resumed (phase {phase})");
        }
    }
}
