//! Fault injection for tests, in the spirit of SPDK's error accel module: a plan that makes a
//! channel end some batches partially, with an error, or late, deterministically. Only with
//! the `testing` feature (tests, and the crash-state harness's build): without it the engine
//! has no plan to check, and every batch runs whole.

use std::time::Duration;

/// Which batches of a channel misbehave. Batches are counted per channel from 1; a zero period
/// disables that fault.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// Every `n`-th batch stops after a pseudo-random prefix with [`crate::Status::Partial`].
    pub partial_every: u64,
    /// Every `n`-th batch stops after a pseudo-random prefix with [`crate::Status::Error`].
    pub error_every: u64,
    /// Every batch waits this long before it starts.
    pub delay: Duration,
}

/// What the plan does to one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    None,
    /// Stop after this many bytes with status Partial.
    Partial(u64),
    /// Stop after this many bytes with status Error.
    Error(u64),
}

impl FaultPlan {
    /// Whether the plan does anything.
    pub fn is_active(&self) -> bool {
        *self != FaultPlan::default()
    }

    /// The fault for the `n`-th batch (from 1) of `len` bytes.
    pub(crate) fn fault_for(&self, n: u64, len: u64) -> Fault {
        let cut = if len == 0 { 0 } else { splitmix(n) % len };
        if self.error_every > 0 && n.is_multiple_of(self.error_every) {
            Fault::Error(cut)
        } else if self.partial_every > 0 && n.is_multiple_of(self.partial_every) {
            Fault::Partial(cut)
        } else {
            Fault::None
        }
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}
