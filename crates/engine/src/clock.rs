//! A process-wide monotonic clock in nanoseconds, shared by engine workers and submitters so
//! that queueing delay (submit → start) and service time (start → finish) can be computed.

use std::sync::OnceLock;
use std::time::Instant;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since the first call in this process.
pub fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}
