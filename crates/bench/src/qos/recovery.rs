//! How soon the bulk tenant gets its bandwidth back once the latency tenant goes quiet: after
//! the latency tenant's last request, the bulk tenant copies back to back for a tail of
//! [`TAIL_EPOCHS`] epochs, and each copy's end is recorded. The unthrottled rate is the
//! `separate` mode's tail in the same round (no budget there).

use std::time::Instant;

/// Bytes of each copy in the tail: small enough for several per epoch at full speed.
pub(super) const PIECE: usize = 256 << 10;

/// Epochs the tail runs after the latency tenant stops.
pub(super) const TAIL_EPOCHS: u32 = 30;

/// Epochs in the window that judges the rate.
const WINDOW: usize = 2;

/// The bulk tenant's copies after the latency tenant stopped: each copy's end, µs after the
/// stop, and its bytes (a copy in flight at the stop counts whole at its end).
#[derive(Debug, Clone, Default)]
pub(super) struct Tail {
    pub ends: Vec<(f64, u64)>,
}

impl Tail {
    /// Records a copy of `bytes` that ended now, if the latency tenant has stopped (`t0`).
    pub fn ended(&mut self, t0: Option<Instant>, bytes: usize) {
        if let Some(t0) = t0 {
            let us = t0.elapsed().as_secs_f64() * 1e6;
            self.ends.push((us, bytes as u64));
        }
    }

    /// The rate over the whole tail, bytes per µs (the unthrottled reference where nothing
    /// throttles it).
    pub fn rate(&self) -> f64 {
        let bytes: u64 = self.ends.iter().map(|e| e.1).sum();
        let end = self.ends.last().map_or(0.0, |e| e.0);
        if end > 0.0 {
            bytes as f64 / end
        } else {
            0.0
        }
    }

    /// The first epoch after the stop from which a window of [`WINDOW`] epochs moved at
    /// least `share` of `reference` (bytes per µs), and the rate from that epoch to the end
    /// of the tail ÷ `reference`; `None` if no window did.
    pub fn recovered(&self, epoch_us: f64, reference: f64, share: f64) -> Option<(usize, f64)> {
        let epochs = self.ends.last().map_or(0, |e| (e.0 / epoch_us) as usize);
        let bytes_in = |from: f64, to: f64| -> u64 {
            (self.ends.iter())
                .filter(|e| e.0 >= from && e.0 < to)
                .map(|e| e.1)
                .sum()
        };
        (0..epochs.saturating_sub(WINDOW)).find_map(|k| {
            let from = k as f64 * epoch_us;
            let span = WINDOW as f64 * epoch_us;
            let rate = bytes_in(from, from + span) as f64 / span;
            (rate >= share * reference).then(|| {
                let end = self.ends.last().map_or(from, |e| e.0);
                let after = bytes_in(from, f64::INFINITY) as f64 / (end - from).max(1e-9);
                (k, after / reference)
            })
        })
    }
}

/// The median of per-round recovery epochs, a round that never recovered (`None`) counting
/// as later than any: `None` when the median round never recovered.
pub(super) fn median_epochs(rounds: &[Option<usize>]) -> Option<f64> {
    let mut v: Vec<f64> = rounds
        .iter()
        .map(|r| r.map_or(f64::INFINITY, |e| e as f64))
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let m = if !n.is_multiple_of(2) {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    m.is_finite().then_some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two rounds of five that never recovered do not hide the median of the other three (a
    /// run printed "after no epochs" for rounds never, 6, never, 6, 6).
    #[test]
    fn a_round_that_never_recovered_counts_as_the_latest() {
        assert_eq!(
            median_epochs(&[None, Some(6), None, Some(6), Some(6)]),
            Some(6.0)
        );
        assert_eq!(median_epochs(&[None, Some(6), None]), None);
        assert_eq!(median_epochs(&[Some(2), Some(4)]), Some(3.0));
        assert_eq!(median_epochs(&[Some(2), None]), None);
        assert_eq!(median_epochs(&[]), None);
    }

    /// A tail throttled to a tenth for 6 epochs of 100 µs, then at full speed (10 bytes per
    /// µs): recovered from epoch 6, at the full rate after it.
    #[test]
    fn recovery_is_the_first_window_at_the_share() {
        let mut t = Tail::default();
        let mut at = 0.0;
        while at < 3000.0 {
            let rate = if at < 600.0 { 1.0 } else { 10.0 };
            at += 100.0 / rate;
            t.ends.push((at, 100));
        }
        let (k, after) = t.recovered(100.0, 10.0, 0.9).unwrap();
        assert_eq!(k, 6);
        assert!((after - 1.0).abs() < 0.05, "{after}");
        assert!(t.recovered(100.0, 20.0, 0.9).is_none());
        assert!(Tail::default().recovered(100.0, 1.0, 0.9).is_none());
    }
}
