//! Every atomic, cell and park primitive of the engine protocols comes from here, so that
//! `RUSTFLAGS="--cfg loom"` swaps in loom's model-checked versions (as tokio's `loom` module
//! does). Under loom only the protocol modules are compiled.

#[cfg(loom)]
pub(crate) use loom::{
    cell::UnsafeCell,
    sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    sync::Arc,
    thread::{park, Thread},
};

#[cfg(not(loom))]
pub(crate) use std::{
    sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    sync::Arc,
    thread::{park, Thread},
};

/// `std`'s `UnsafeCell` with loom's closure-based access API.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(v: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(v))
    }
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// One step of a busy-wait loop: a CPU pause, or a yield to loom's scheduler under loom.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// The calling thread's handle, for parking and unparking.
pub(crate) fn thread_current() -> Thread {
    #[cfg(loom)]
    return loom::thread::current();
    #[cfg(not(loom))]
    std::thread::current()
}

/// Lets other threads run (loom's scheduler under loom).
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}
