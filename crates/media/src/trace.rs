//! A recorder of the stores, flushes and fences issued through chosen [`Persist`] values.
//!
//! Tracing belongs to a `Persist`, not to the process: a test makes a [`Recorder`], builds
//! the `Persist` its region, engine and mover use with [`Persist::traced`], and sees the
//! events of exactly those (from every thread that uses them), in the order they were issued.
//! An untraced `Persist` (every one the product builds) records nothing: its kernels test one
//! field of the value they already hold. Every event carries the id of the thread that issued
//! it, because a fence only orders that thread's earlier stores.
//!
//! [`Persist`]: crate::Persist
//! [`Persist::traced`]: crate::Persist::traced

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One persistence-relevant action of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Bytes `[addr, addr + len)` were stored, with streaming stores if `non_temporal`.
    Store {
        /// First byte stored.
        addr: usize,
        /// Number of bytes.
        len: usize,
        /// Streaming (cache-bypassing) stores.
        non_temporal: bool,
    },
    /// Every cache line overlapping `[addr, addr + len)` was flushed.
    Flush {
        /// First byte of the flushed range.
        addr: usize,
        /// Length of the flushed range.
        len: usize,
    },
    /// A store fence.
    Fence,
    /// `[addr, addr + len)` of a region was synced to its disk ([`Region::sync_range`]):
    /// every page of it holds on the disk what it held in memory when the sync began.
    ///
    /// [`Region::sync_range`]: crate::Region::sync_range
    Sync {
        /// First byte of the synced range.
        addr: usize,
        /// Length of the synced range.
        len: usize,
    },
}

/// An [`Event`] with the thread that issued it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traced {
    /// A small number unique to the issuing thread for the life of the process.
    pub thread: u64,
    /// What happened.
    pub event: Event,
    /// For a store inside a range some recorder captures: the bytes stored.
    pub data: Option<Arc<[u8]>>,
}

/// A handle on one [`Recorder`]'s trace, carried by the [`Persist`](crate::Persist) values
/// that record into it ([`Persist::traced`](crate::Persist::traced)). A handle whose recorder
/// is gone records nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tap(u64);

/// One recorder's trace.
struct Log {
    events: Vec<Traced>,
    /// Stores overlapping this range are recorded with their bytes.
    capture: Option<(usize, usize)>,
}

/// The live recorders' traces, by tap. Only traced `Persist` values (tests, the crash harness)
/// ever take this lock.
static LOGS: Mutex<BTreeMap<u64, Log>> = Mutex::new(BTreeMap::new());

fn logs() -> std::sync::MutexGuard<'static, BTreeMap<u64, Log>> {
    LOGS.lock().unwrap_or_else(|e| e.into_inner())
}

fn thread_tag() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static TAG: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    TAG.with(|t| *t)
}

/// Records `event` into `tap`'s trace.
#[cold]
pub(crate) fn record(tap: Tap, event: Event) {
    if let Some(log) = logs().get_mut(&tap.0) {
        log.events.push(Traced {
            thread: thread_tag(),
            event,
            data: None,
        });
    }
}

/// Records into `tap`'s trace a store of `len` bytes from `src` to `dst`, about to happen.
///
/// # Safety
/// `src` must be valid for reads of `len` bytes.
#[cold]
pub(crate) unsafe fn record_store(
    tap: Tap,
    dst: *const u8,
    src: *const u8,
    len: usize,
    non_temporal: bool,
) {
    let mut logs = logs();
    let Some(log) = logs.get_mut(&tap.0) else {
        return;
    };
    let addr = dst as usize;
    let captured = log
        .capture
        .is_some_and(|(a, l)| addr < a + l && a < addr + len);
    // SAFETY: the caller guarantees `src` is readable for `len` bytes.
    let data = captured.then(|| Arc::from(unsafe { std::slice::from_raw_parts(src, len) }));
    log.events.push(Traced {
        thread: thread_tag(),
        event: Event::Store {
            addr,
            len,
            non_temporal,
        },
        data,
    });
}

/// While alive, records every event of the [`Persist`](crate::Persist) values traced into it
/// ([`Persist::traced`](crate::Persist::traced)), from whichever thread issues them; nothing
/// else. Recorders are independent: tests running in parallel each see only their own.
pub struct Recorder {
    tap: Tap,
}

impl Recorder {
    /// Starts a trace.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Recorder {
        Recorder::with_capture(None)
    }

    /// Starts a trace that also keeps the bytes of every store overlapping
    /// `[addr, addr + len)` (crash-image generation replays them).
    pub fn capturing(addr: *const u8, len: usize) -> Recorder {
        Recorder::with_capture(Some((addr as usize, len)))
    }

    fn with_capture(capture: Option<(usize, usize)>) -> Recorder {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let tap = Tap(NEXT.fetch_add(1, Ordering::Relaxed));
        logs().insert(
            tap.0,
            Log {
                events: Vec::new(),
                capture,
            },
        );
        Recorder { tap }
    }

    /// From now on, also keeps the bytes of every store overlapping `[addr, addr + len)`.
    pub fn capture(&mut self, addr: *const u8, len: usize) {
        if let Some(log) = logs().get_mut(&self.tap.0) {
            log.capture = Some((addr as usize, len));
        }
    }

    /// The handle a [`Persist`](crate::Persist) carries to record into this trace.
    pub fn tap(&self) -> Tap {
        self.tap
    }

    /// Drops the events recorded so far (crash harnesses call it between workloads to bound
    /// memory).
    pub fn reset(&mut self) {
        if let Some(log) = logs().get_mut(&self.tap.0) {
            log.events.clear();
        }
    }

    /// The events recorded since this recorder was installed (or last reset), in the order
    /// they were issued.
    pub fn events(&self) -> Vec<Traced> {
        logs()
            .get(&self.tap.0)
            .map(|log| log.events.clone())
            .unwrap_or_default()
    }

    /// Whether `[addr, addr + len)` was made durable: every byte was covered by a streaming
    /// store or a flush issued after its last ordinary store, and the thread that did so issued
    /// a fence afterwards. Returns the first byte that is not durable.
    pub fn first_non_durable(&self, addr: usize, len: usize) -> Option<usize> {
        Recorder::first_non_durable_in(&self.events(), addr, len)
    }

    /// [`Recorder::first_non_durable`] over a prefix of the events (what was durable at the
    /// moment the event after `ev` happened).
    pub fn first_non_durable_in(ev: &[Traced], addr: usize, len: usize) -> Option<usize> {
        const LINE: usize = crate::CACHE_LINE;
        // Per byte: the event (index, thread) after which only a fence of that thread is
        // missing; `None` while the byte's last store sits dirty in the cache.
        let mut pending: Vec<Option<(usize, u64)>> = vec![None; len];
        for (i, t) in ev.iter().enumerate() {
            let (a, l, persistent) = match t.event {
                Event::Store {
                    addr: a,
                    len: l,
                    non_temporal,
                } => (a, l, non_temporal),
                Event::Flush { addr: a, len: l } => {
                    let s = a & !(LINE - 1);
                    let e = (a + l).div_ceil(LINE) * LINE;
                    (s, e - s, true)
                }
                Event::Fence | Event::Sync { .. } => continue,
            };
            let lo = a.max(addr);
            let hi = (a + l).min(addr + len);
            for b in lo..hi {
                let k = b - addr;
                pending[k] = persistent.then_some((i, t.thread));
            }
        }
        (0..len)
            .find(|&k| match pending[k] {
                None => true,
                Some((i, thread)) => !ev[i + 1..]
                    .iter()
                    .any(|t| t.thread == thread && t.event == Event::Fence),
            })
            .map(|k| addr + k)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        logs().remove(&self.tap.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CopyMode, Persist};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn durable_copies_are_flushed_and_fenced(len in 1usize..9000, off in 0usize..64, nt in 0usize..2048) {
            let rec = Recorder::new();
            let p = Persist { nt_threshold: nt, ..Persist::detect() }.traced(&rec);
            let src = vec![1u8; len];
            let mut dst = vec![0u8; len + off];
            let d = dst[off..].as_mut_ptr();
            // SAFETY: ranges are inside their vectors.
            unsafe { p.copy(d, src.as_ptr(), len, CopyMode::Durable) };
            prop_assert_eq!(rec.first_non_durable(d as usize, len), None);
        }

        #[test]
        fn flushed_copies_are_durable_after_the_callers_fence(len in 1usize..9000, off in 0usize..64, nt in 0usize..2048) {
            let rec = Recorder::new();
            let p = Persist { nt_threshold: nt, ..Persist::detect() }.traced(&rec);
            let src = vec![1u8; len];
            let mut dst = vec![0u8; len + off];
            let d = dst[off..].as_mut_ptr();
            // SAFETY: ranges are inside their vectors.
            unsafe { p.copy(d, src.as_ptr(), len, CopyMode::Flushed) };
            prop_assert!(rec.first_non_durable(d as usize, len).is_some(), "no fence yet");
            p.fence();
            prop_assert_eq!(rec.first_non_durable(d as usize, len), None);
        }
    }

    #[test]
    fn a_recorder_sees_only_the_values_traced_into_it() {
        let (a, b) = (Recorder::new(), Recorder::new());
        let (pa, plain) = (Persist::detect().traced(&a), Persist::detect());
        let src = [7u8; 256];
        let mut dst = [0u8; 256];
        // SAFETY: equal-length distinct arrays.
        unsafe { pa.copy(dst.as_mut_ptr(), src.as_ptr(), 256, CopyMode::Durable) };
        // SAFETY: as above.
        unsafe { plain.copy(dst.as_mut_ptr(), src.as_ptr(), 256, CopyMode::Durable) };
        plain.fence();
        let fences = |r: &Recorder| {
            r.events()
                .iter()
                .filter(|t| t.event == Event::Fence)
                .count()
        };
        assert_eq!(fences(&a), 1, "only the traced copy's fence");
        assert!(b.events().is_empty(), "another recorder sees nothing");
        let tap = a.tap();
        drop(a);
        // A value whose recorder is gone records nowhere (and does not fail).
        Persist {
            tap: Some(tap),
            ..plain
        }
        .fence();
        assert!(b.events().is_empty());
    }

    #[test]
    fn a_temporal_copy_is_not_durable() {
        let rec = Recorder::new();
        let p = Persist::detect().traced(&rec);
        let src = vec![1u8; 4096];
        let mut dst = vec![0u8; 4096];
        // SAFETY: equal-length distinct vectors.
        unsafe { p.copy(dst.as_mut_ptr(), src.as_ptr(), 4096, CopyMode::Temporal) };
        assert_eq!(
            rec.first_non_durable(dst.as_ptr() as usize, 4096),
            Some(dst.as_ptr() as usize)
        );
        p.flush(dst.as_ptr(), 4096);
        assert!(
            rec.first_non_durable(dst.as_ptr() as usize, 4096).is_some(),
            "flush without fence"
        );
        p.fence();
        assert_eq!(rec.first_non_durable(dst.as_ptr() as usize, 4096), None);
    }
}
