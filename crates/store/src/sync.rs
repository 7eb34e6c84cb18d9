//! The locks and atomics of the in-flight tracking ([`crate::inflight`]) and the change
//! words ([`crate::changes`]): parking_lot's and the standard library's, or shuttle's when
//! built with `--cfg shuttle`, so that the model checker runs the real code
//! (`inflight::model`, `changes::model`; `scripts/test.sh` runs them).

#[cfg(shuttle)]
pub(crate) use shuttle::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(shuttle))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

#[cfg(not(shuttle))]
type InnerRw<T> = parking_lot::RwLock<T>;
#[cfg(shuttle)]
type InnerRw<T> = shuttle::sync::RwLock<T>;

/// A reader-writer lock with parking_lot's interface (no poisoning) over either
/// implementation.
pub(crate) struct RwLock<T>(InnerRw<T>);

impl<T> RwLock<T> {
    pub(crate) fn new(value: T) -> RwLock<T> {
        RwLock(InnerRw::new(value))
    }

    /// Shares it, waiting as long as it takes.
    #[cfg(not(shuttle))]
    pub(crate) fn read(&self) -> parking_lot::RwLockReadGuard<'_, T> {
        self.0.read()
    }

    /// Shares it, waiting as long as it takes.
    #[cfg(shuttle)]
    pub(crate) fn read(&self) -> shuttle::sync::RwLockReadGuard<'_, T> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes it alone, waiting as long as it takes.
    #[cfg(not(shuttle))]
    pub(crate) fn write(&self) -> parking_lot::RwLockWriteGuard<'_, T> {
        self.0.write()
    }

    /// Takes it alone, waiting as long as it takes.
    #[cfg(shuttle)]
    pub(crate) fn write(&self) -> shuttle::sync::RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}

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
