//! How a submitter wakes a parked channel worker without lost wake-ups.
//!
//! One word, every access a read-modify-write, so all accesses are totally ordered by that
//! word's modification order (no reliance on SeqCst fences):
//!
//! | who       | action                                  | then                                  |
//! |-----------|------------------------------------------|---------------------------------------|
//! | submitter | push to ring, `swap(NOTIFIED)`           | unpark the worker iff it saw SLEEPING |
//! | worker    | `swap(RUNNING)` at the top of its loop   | drain the ring                        |
//! | worker    | `swap(SLEEPING)` when idle               | park iff it did not see NOTIFIED      |
//!
//! A push whose notify precedes the worker's `swap(SLEEPING)` leaves NOTIFIED behind, so the
//! worker loops instead of parking; a notify after it sees SLEEPING and unparks. `park`'s
//! token makes an unpark that lands before the `park` call harmless.

use crate::sync::{AtomicU32, Ordering};

const RUNNING: u32 = 0;
const SLEEPING: u32 = 1;
const NOTIFIED: u32 = 2;

/// The wake word of one channel.
pub(crate) struct Wake(AtomicU32);

impl Wake {
    pub(crate) fn new() -> Wake {
        Wake(AtomicU32::new(RUNNING))
    }

    /// Submitter, after publishing work: true if the worker must be unparked.
    pub(crate) fn notify(&self) -> bool {
        self.0.swap(NOTIFIED, Ordering::AcqRel) == SLEEPING
    }

    /// Worker, before looking for work: consumes any notification (Acquire makes the pushes
    /// that preceded it visible).
    pub(crate) fn awake(&self) {
        self.0.swap(RUNNING, Ordering::AcqRel);
    }

    /// Worker, when idle: true if it may park now.
    pub(crate) fn sleep(&self) -> bool {
        self.0.swap(SLEEPING, Ordering::AcqRel) != NOTIFIED
    }
}
