//! Deliberate bugs the crash harness must catch, injected by tests (feature `testing`).
//! Without the feature the store carries no fault state and every check below is a constant
//! `false`, so the product's paths hold no test hook.

use super::*;

/// The faults injected into one store.
#[cfg(feature = "testing")]
#[derive(Default)]
pub(super) struct Faults {
    /// Log entries are stored but not flushed before the tail commit.
    skip_entry_flush: std::sync::atomic::AtomicBool,
    /// Orderless writes commit entries that do not name their copy.
    unrecorded_orderless: std::sync::atomic::AtomicBool,
}

impl Store {
    /// Test fault injection: from now on, log entries are not flushed before their commit
    /// (a missing-flush bug the crash harness must catch).
    #[cfg(feature = "testing")]
    pub fn inject_missing_entry_flush(&self) {
        self.faults.skip_entry_flush.store(true, Ordering::Relaxed);
    }

    /// Test fault injection: orderless writes commit entries that do not name their engine
    /// copy, so recovery cannot tell an unfinished one (the asynchronous crash harness must
    /// notice).
    #[cfg(feature = "testing")]
    pub fn inject_unrecorded_orderless(&self) {
        self.faults
            .unrecorded_orderless
            .store(true, Ordering::Relaxed);
    }

    /// Whether log entries are to be left unflushed (an injected bug).
    #[inline]
    pub(super) fn skips_entry_flush(&self) -> bool {
        #[cfg(feature = "testing")]
        return self.faults.skip_entry_flush.load(Ordering::Relaxed);
        #[cfg(not(feature = "testing"))]
        false
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
