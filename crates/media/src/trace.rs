//! A process-wide recorder of the stores, flushes and fences the kernels issue.
//!
//! Off by default: the kernels pay one relaxed load per call to learn that nothing is
//! installed. Tests install a [`Recorder`] and check durability properties over the events
//! whose addresses fall in their own buffers; every event carries the id of the thread that
//! issued it, because a fence only orders that thread's earlier stores.

use std::sync::atomic::{AtomicBool, Ordering};
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

static ACTIVE: AtomicBool = AtomicBool::new(false);
static EVENTS: Mutex<Vec<Traced>> = Mutex::new(Vec::new());
static INSTALLED: Mutex<usize> = Mutex::new(0);
/// Address ranges whose stores are recorded with their bytes.
static CAPTURE: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

fn thread_tag() -> u64 {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static TAG: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    TAG.with(|t| *t)
}

#[inline]
pub(crate) fn record(event: Event) {
    if ACTIVE.load(Ordering::Relaxed) {
        record_slow(event);
    }
}

/// Records a store of `len` bytes from `src` to `dst`, about to happen.
///
/// # Safety
/// `src` must be valid for reads of `len` bytes.
#[inline]
pub(crate) unsafe fn record_store(dst: *const u8, src: *const u8, len: usize, non_temporal: bool) {
    if ACTIVE.load(Ordering::Relaxed) {
        // SAFETY: forwarded from this function's contract.
        unsafe { record_store_slow(dst, src, len, non_temporal) };
    }
}

#[cold]
unsafe fn record_store_slow(dst: *const u8, src: *const u8, len: usize, non_temporal: bool) {
    let addr = dst as usize;
    let captured = CAPTURE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|&(a, l)| addr < a + l && a < addr + len);
    // SAFETY: the caller guarantees `src` is readable for `len` bytes.
    let data = captured.then(|| Arc::from(unsafe { std::slice::from_raw_parts(src, len) }));
    push(
        Event::Store {
            addr,
            len,
            non_temporal,
        },
        data,
    );
}

#[cold]
fn record_slow(event: Event) {
    push(event, None);
}

fn push(event: Event, data: Option<Arc<[u8]>>) {
    let t = Traced {
        thread: thread_tag(),
        event,
        data,
    };
    EVENTS.lock().unwrap_or_else(|e| e.into_inner()).push(t);
}

/// While alive, every kernel event in the process is recorded. Several recorders may be alive
/// at once (tests run in parallel); each sees all events and filters by address.
pub struct Recorder {
    start: usize,
    capture: Option<(usize, usize)>,
}

impl Recorder {
    /// Starts recording.
    pub fn install() -> Recorder {
        let mut n = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        ACTIVE.store(true, Ordering::SeqCst);
        let start = EVENTS.lock().unwrap_or_else(|e| e.into_inner()).len();
        Recorder {
            start,
            capture: None,
        }
    }

    /// Starts recording, and records the bytes of every store that overlaps
    /// `[addr, addr + len)` (crash-image generation replays them).
    pub fn install_capturing(addr: *const u8, len: usize) -> Recorder {
        let range = (addr as usize, len);
        CAPTURE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(range);
        let mut r = Recorder::install();
        r.capture = Some(range);
        r
    }

    /// Drops the events recorded so far by every recorder (their starts move to now).
    /// Crash harnesses call it between workloads to bound memory.
    pub fn reset(&mut self) {
        self.start = EVENTS.lock().unwrap_or_else(|e| e.into_inner()).len();
    }

    /// The events recorded since this recorder was installed (other recorders' included).
    pub fn events(&self) -> Vec<Traced> {
        let ev = EVENTS.lock().unwrap_or_else(|e| e.into_inner());
        ev[self.start.min(ev.len())..].to_vec()
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
                Event::Fence => continue,
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
        if let Some(range) = self.capture {
            let mut c = CAPTURE.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = c.iter().position(|&r| r == range) {
                c.swap_remove(i);
            }
        }
        let mut n = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        if *n == 0 {
            ACTIVE.store(false, Ordering::SeqCst);
            EVENTS.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
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
            let rec = Recorder::install();
            let p = Persist { nt_threshold: nt, ..Persist::detect() };
            let src = vec![1u8; len];
            let mut dst = vec![0u8; len + off];
            let d = dst[off..].as_mut_ptr();
            // SAFETY: ranges are inside their vectors.
            unsafe { p.copy(d, src.as_ptr(), len, CopyMode::Durable) };
            prop_assert_eq!(rec.first_non_durable(d as usize, len), None);
        }

        #[test]
        fn flushed_copies_are_durable_after_the_callers_fence(len in 1usize..9000, off in 0usize..64, nt in 0usize..2048) {
            let rec = Recorder::install();
            let p = Persist { nt_threshold: nt, ..Persist::detect() };
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
    fn a_temporal_copy_is_not_durable() {
        let rec = Recorder::install();
        let p = Persist::detect();
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
