//! The locks and atomics of the in-flight tracking ([`crate::inflight`]): parking_lot's and
//! the standard library's, or shuttle's when built with `--cfg shuttle`, so that the model
//! checker runs the real code (`inflight::model`; `scripts/test.sh` runs it).

#[cfg(shuttle)]
pub(crate) use shuttle::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
#[cfg(not(shuttle))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[cfg(not(shuttle))]
type Inner<T> = parking_lot::Mutex<T>;
#[cfg(shuttle)]
type Inner<T> = shuttle::sync::Mutex<T>;

/// A mutex with parking_lot's interface (no poisoning) over either implementation.
#[derive(Default)]
pub(crate) struct Mutex<T>(Inner<T>);

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Mutex<T> {
        Mutex(Inner::new(value))
    }

    /// Locks it, waiting as long as it takes.
    #[cfg(not(shuttle))]
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        self.0.lock()
    }

    /// Locks it, waiting as long as it takes (a holder that panicked fails the model run
    /// anyway).
    #[cfg(shuttle)]
    pub(crate) fn lock(&self) -> shuttle::sync::MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T> Mutex<T> {
    /// Locks it if no one holds it.
    #[cfg(not(shuttle))]
    pub(crate) fn try_lock(&self) -> Option<parking_lot::MutexGuard<'_, T>> {
        self.0.try_lock()
    }

    /// Locks it if no one holds it.
    #[cfg(shuttle)]
    pub(crate) fn try_lock(&self) -> Option<shuttle::sync::MutexGuard<'_, T>> {
        self.0.try_lock().ok()
    }
}

impl<T> std::fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mutex")
    }
}
