//! Whether [`Node::wait`](super::Node::wait) polls before it sleeps: only while polling has
//! been finding events.

use std::cell::Cell;
use std::time::Duration;

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
}
