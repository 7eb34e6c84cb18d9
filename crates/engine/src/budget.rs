//! A channel's byte budget per epoch (EasyIO §4.4): the channel manager throttles a bulk
//! channel by letting it execute only so many bytes per epoch. The worker asks its meter
//! before each descriptor; once the epoch's budget is spent the channel pauses until the next
//! epoch. Unlike [`crate::Engine::suspend`], a paused channel keeps accepting submissions:
//! its requests wait in its ring and never move to the CPU (which would leak the throttle).
//!
//! The budget is checked between descriptors, so a channel overshoots an epoch's budget by
//! less than one descriptor (the last one it started while under budget): the mover cuts a
//! budgeted tenant's copies into pieces of `descriptor_bytes` (64 KiB by default) so that a
//! paused channel stops within one piece.

use crate::sync::{AtomicU64, Ordering};

/// Bytes a channel may start per epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Bytes per epoch (at least 1: a budget of 0 would stop the channel for good).
    pub bytes: u64,
    /// Epoch length, nanoseconds (at least 1).
    pub epoch_ns: u64,
    /// From this time on ([`crate::clock::now_ns`]) the budget has lapsed and the channel
    /// runs unthrottled, until someone renews it ([`crate::Engine::renew_budget`]) or sets
    /// another; 0: it never lapses. A controller that throttles a channel for the sake of a
    /// tenant that may go quiet gives its budget a lease, so the channel gets its bandwidth
    /// back when that tenant idles even if no one is left to run the controller.
    pub lapses_ns: u64,
}

impl Budget {
    /// Whether the budget has lapsed at `now_ns`.
    #[inline]
    pub fn lapsed(&self, now_ns: u64) -> bool {
        self.lapses_ns != 0 && now_ns >= self.lapses_ns
    }
}

/// A channel's budget as the worker reads it and the controller sets it: three words, so a
/// change is three relaxed stores and the worker's check three relaxed loads. The words need
/// not change together: the worker reads each once per descriptor and any combination is a
/// budget somebody set or is setting (a lease renewed a moment early or late moves when the
/// channel runs free by that moment).
#[derive(Debug, Default)]
pub(crate) struct BudgetCell {
    /// 0: no budget.
    bytes: AtomicU64,
    epoch_ns: AtomicU64,
    lapses_ns: AtomicU64,
}

impl BudgetCell {
    /// Sets or removes the budget.
    pub fn set(&self, budget: Option<Budget>) {
        match budget {
            Some(b) => {
                self.lapses_ns.store(b.lapses_ns, Ordering::Relaxed);
                self.epoch_ns.store(b.epoch_ns.max(1), Ordering::Relaxed);
                self.bytes.store(b.bytes.max(1), Ordering::Relaxed);
            }
            None => self.bytes.store(0, Ordering::Relaxed),
        }
    }

    /// The budget set, if any (lapsed or not).
    pub fn get(&self) -> Option<Budget> {
        let bytes = self.bytes.load(Ordering::Relaxed);
        (bytes > 0).then(|| Budget {
            bytes,
            epoch_ns: self.epoch_ns.load(Ordering::Relaxed).max(1),
            lapses_ns: self.lapses_ns.load(Ordering::Relaxed),
        })
    }

    /// Moves the time the budget lapses to `lapses_ns` (0: never), keeping its bytes and
    /// epoch.
    pub fn renew(&self, lapses_ns: u64) {
        self.lapses_ns.store(lapses_ns, Ordering::Relaxed);
    }
}

/// The worker's account of the current epoch: when it began and the bytes charged to it.
/// Epochs lie on a fixed grid from the first descriptor metered, so a pause ends at the
/// boundary, not one epoch after the pause began. What a descriptor overshoots an epoch by is
/// charged to the next ones (unspent budget is not saved up), so over many epochs the channel
/// starts its budget's bytes and no more, even when a budget is smaller than a descriptor.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Meter {
    epoch_start_ns: u64,
    spent: u64,
    /// Epochs in which the channel paused.
    pub paused_epochs: u64,
    /// The epoch (by start) in which the last pause was counted.
    paused_in: Option<u64>,
}

impl Meter {
    /// Whether a descriptor of `len` bytes may start at `now_ns` under `budget`: `Ok` (and it
    /// is charged to the epoch) while the epoch's budget is not yet spent, else `Err` with
    /// the time the next epoch begins.
    pub fn admit(&mut self, budget: Budget, len: u64, now_ns: u64) -> Result<(), u64> {
        let epoch = budget.epoch_ns.max(1);
        if now_ns >= self.epoch_start_ns.saturating_add(epoch) || now_ns < self.epoch_start_ns {
            let behind = now_ns.saturating_sub(self.epoch_start_ns);
            self.epoch_start_ns = if now_ns < self.epoch_start_ns {
                now_ns
            } else {
                self.epoch_start_ns + behind - behind % epoch
            };
            // The epochs gone by pay off the overshoot; what they did not use is lost.
            let epochs = (behind / epoch).max(1);
            self.spent = self
                .spent
                .saturating_sub(budget.bytes.saturating_mul(epochs));
        }
        if self.spent < budget.bytes {
            self.spent += len;
            return Ok(());
        }
        if self.paused_in != Some(self.epoch_start_ns) {
            self.paused_in = Some(self.epoch_start_ns);
            self.paused_epochs += 1;
        }
        Err(self.epoch_start_ns + epoch)
    }
}

/// Before a descriptor of `len` bytes: returns at once without a budget in `cell`, with a
/// lapsed one, or while the epoch's budget lasts; otherwise calls `pause(until_ns)` (which waits, or returns
/// `false` to give up: shutdown) and asks again, reading the budget afresh, so a budget
/// raised or lifted during a pause takes effect when the pause ends. Submissions are not
/// involved: a paused channel's ring keeps accepting.
pub(crate) fn pace(
    cell: &BudgetCell,
    meter: &mut Meter,
    len: u64,
    now_ns: &dyn Fn() -> u64,
    pause: &mut dyn FnMut(u64) -> bool,
) {
    while let Some(budget) = cell.get() {
        let now = now_ns();
        if budget.lapsed(now) {
            return;
        }
        let Err(until) = meter.admit(budget, len, now) else {
            return;
        };
        if !pause(until) {
            return;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the pieces and however time advances between them, the bytes started in
        /// any epoch exceed the budget by less than the largest piece, and so do the bytes
        /// started over all the epochs the run spans against the budget of that many epochs;
        /// a pause ends in the future, on the epoch grid.
        #[test]
        fn the_budget_is_never_exceeded_by_more_than_one_piece(
            bytes in 1u64..1 << 20,
            epoch_ns in 1_000u64..1_000_000,
            steps in proptest::collection::vec((1u64..1 << 18, 0u64..200_000), 1..400),
        ) {
            let budget = Budget { bytes, epoch_ns, lapses_ns: 0 };
            let mut m = Meter::default();
            let mut now = 0u64;
            let mut per_epoch = std::collections::BTreeMap::<u64, u64>::new();
            let largest = steps.iter().map(|s| s.0).max().unwrap_or(0);
            for &(len, gap) in &steps {
                now += gap;
                loop {
                    match m.admit(budget, len, now) {
                        Ok(()) => {
                            *per_epoch.entry(now / epoch_ns).or_default() += len;
                            break;
                        }
                        Err(next) => {
                            prop_assert!(next > now, "a pause ends in the future");
                            prop_assert_eq!(next % epoch_ns, 0, "pauses end on the epoch grid");
                            now = next;
                        }
                    }
                }
            }
            let total: u64 = per_epoch.values().sum();
            let epochs = now / epoch_ns + 1;
            prop_assert!(total < bytes * epochs + largest, "{} bytes in {} epochs", total, epochs);
            for (epoch, spent) in per_epoch {
                prop_assert!(spent < bytes + largest, "epoch {}: {} bytes, budget {}", epoch, spent, bytes);
            }
        }
    }

    #[test]
    fn a_budget_cell_round_trips_and_clears() {
        let c = BudgetCell::default();
        assert_eq!(c.get(), None);
        let b = Budget {
            bytes: 4096,
            epoch_ns: 100_000,
            lapses_ns: 0,
        };
        c.set(Some(b));
        assert_eq!(c.get(), Some(b));
        c.set(Some(Budget { bytes: 0, ..b }));
        assert_eq!(
            c.get().map(|b| b.bytes),
            Some(1),
            "a zero budget would stop the channel"
        );
        c.set(None);
        assert_eq!(c.get(), None);
    }

    /// A budget smaller than a piece (27 KiB per epoch, 64 KiB pieces) under constant demand:
    /// the overshoot is paid off in later epochs, so over 1,000 epochs the channel starts the
    /// budget's bytes within one piece, not one piece per epoch.
    #[test]
    fn a_budget_smaller_than_a_piece_holds_over_many_epochs() {
        let b = Budget {
            bytes: 27 << 10,
            epoch_ns: 100_000,
            lapses_ns: 0,
        };
        let mut m = Meter::default();
        let (mut now, mut total) = (0u64, 0u64);
        while now < 1_000 * b.epoch_ns {
            match m.admit(b, 64 << 10, now) {
                Ok(()) => total += 64 << 10,
                Err(next) => now = next,
            }
        }
        let allowed = 1_000 * b.bytes;
        assert!(
            total.abs_diff(allowed) <= 64 << 10,
            "{total} bytes, budget {allowed}"
        );
    }

    /// A lapsed budget lets every descriptor start without a pause; renewed, it throttles
    /// again; a pause that runs into the lapse ends at the next epoch boundary.
    #[test]
    fn a_lapsed_budget_stops_throttling_until_renewed() {
        let c = BudgetCell::default();
        c.set(Some(Budget {
            bytes: 100,
            epoch_ns: 1_000,
            lapses_ns: 5_000,
        }));
        let now = std::cell::Cell::new(0u64);
        let mut m = Meter::default();
        let mut pauses = Vec::new();
        let run = |m: &mut Meter, pauses: &mut Vec<u64>| {
            pace(&c, m, 100, &|| now.get(), &mut |until| {
                pauses.push(until);
                now.set(until);
                true
            })
        };
        for _ in 0..7 {
            run(&mut m, &mut pauses);
        }
        assert_eq!(pauses, [1_000, 2_000, 3_000, 4_000, 5_000], "then lapsed");
        assert_eq!(now.get(), 5_000);
        c.renew(9_000);
        run(&mut m, &mut pauses);
        run(&mut m, &mut pauses);
        assert_eq!(pauses.last(), Some(&6_000), "renewed: throttled again");
    }

    #[test]
    fn paused_epochs_count_each_epoch_once() {
        let b = Budget {
            bytes: 100,
            epoch_ns: 1_000,
            lapses_ns: 0,
        };
        let mut m = Meter::default();
        assert_eq!(m.admit(b, 100, 0), Ok(()));
        assert_eq!(m.admit(b, 10, 10), Err(1_000));
        assert_eq!(m.admit(b, 10, 20), Err(1_000));
        assert_eq!(m.paused_epochs, 1);
        assert_eq!(m.admit(b, 10, 1_000), Ok(()));
        assert_eq!(m.admit(b, 100, 1_500), Ok(()));
        assert_eq!(m.admit(b, 1, 1_600), Err(2_000));
        assert_eq!(m.paused_epochs, 2);
    }
}
