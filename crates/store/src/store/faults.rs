//! Deliberate logic bugs the crash harness must catch, injected by tests (feature `testing`).
//! Without the feature the store carries no fault state and the check below is a constant
//! `false`, so the product's paths hold no test hook. Media faults (a missing flush) are not
//! here: they live behind the media boundary (`pm::Faulty`).

#[cfg(feature = "testing")]
use std::sync::atomic::Ordering;

use super::Store;

/// The faults injected into one store.
#[cfg(feature = "testing")]
#[derive(Default)]
pub(super) struct Faults {
    /// Orderless writes commit entries that do not name their copy.
    unrecorded_orderless: std::sync::atomic::AtomicBool,
}

impl Store {
    /// Test fault injection: orderless writes commit entries that do not name their engine
    /// copy, so recovery cannot tell an unfinished one (the asynchronous crash harness must
    /// notice).
    #[cfg(feature = "testing")]
    pub fn inject_unrecorded_orderless(&self) {
        self.faults
            .unrecorded_orderless
            .store(true, Ordering::Relaxed);
    }

    /// Whether orderless entries are to leave out their copy's name (an injected bug).
    #[inline]
    pub(super) fn leaves_orderless_unrecorded(&self) -> bool {
        #[cfg(feature = "testing")]
        return self.faults.unrecorded_orderless.load(Ordering::Relaxed);
        #[cfg(not(feature = "testing"))]
        false
    }
}
