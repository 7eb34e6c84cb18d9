//! The pieces of an A/B trial: the bands around a threshold, the two arms, the tallies of
//! each arm's timed requests, and the votes that turn repeated verdicts into a step.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::bandwidth::Ewma;
use crate::config::AdaptationConfig;

/// The band around its threshold a request falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Band {
    /// `[T/2, T)`: the CPU's, offloaded when explored.
    Below,
    /// `[T, 2T)`: offloaded, the CPU's when explored.
    Above,
}

impl Band {
    /// The path the band's requests take when not explored.
    pub(crate) fn usual(self) -> Arm {
        match self {
            Band::Below => Arm::Cpu,
            Band::Above => Arm::Offload,
        }
    }
}

/// The path a timed request took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arm {
    /// The CPU copied it.
    Cpu,
    /// The scheduler offloaded it (engine or split).
    Offload,
}

/// Bytes and nanoseconds one path of one band spent since its trial began.
#[derive(Debug, Default)]
pub(super) struct Tally {
    bytes: AtomicU64,
    ns: AtomicU64,
    samples: AtomicU64,
}

impl Tally {
    pub(super) fn add(&self, bytes: u64, ns: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.ns.fetch_add(ns.max(1), Ordering::Relaxed);
        self.samples.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes per ns so far.
    pub(super) fn rate(&self) -> f64 {
        self.bytes.load(Ordering::Relaxed) as f64 / self.ns.load(Ordering::Relaxed).max(1) as f64
    }

    /// Requests timed so far.
    pub(super) fn samples(&self) -> u64 {
        self.samples.load(Ordering::Relaxed)
    }

    pub(super) fn reset(&self) {
        self.bytes.store(0, Ordering::Relaxed);
        self.ns.store(0, Ordering::Relaxed);
        self.samples.store(0, Ordering::Relaxed);
    }
}

/// One direction's trials: [band][arm].
pub(super) type Trials = [[Tally; 2]; 2];

/// Consecutive epochs wishing for the same step.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Vote {
    sign: i32,
    count: u32,
}

impl Vote {
    /// Records this epoch's wish (−1, 0 or +1); returns it once `hold` epochs in a row made
    /// it, else 0.
    pub(super) fn cast(&mut self, wish: i32, hold: u32) -> i32 {
        if wish == 0 || wish != self.sign {
            *self = Vote {
                sign: wish,
                count: u32::from(wish != 0),
            };
        } else {
            self.count += 1;
        }
        if wish != 0 && self.count >= hold {
            self.count = 0;
            wish
        } else {
            0
        }
    }
}

/// Moves `eff` one bounded step (`pace.step` of itself at most) towards `live` once
/// `pace.hold` epochs in a row found it more than `pace.deadband` away on the same side.
/// Returns whether it moved.
pub(super) fn nudge(eff: &Ewma, live: f64, vote: &mut Vote, pace: &AdaptationConfig) -> bool {
    let v = eff.get();
    let wish = if live > v * (1.0 + pace.deadband) {
        1
    } else if live < v * (1.0 - pace.deadband) {
        -1
    } else {
        0
    };
    match vote.cast(wish, pace.hold) {
        0 => false,
        s => {
            eff.set(v + f64::from(s) * (live - v).abs().min(pace.step * v));
            true
        }
    }
}
