//! Persistence primitives: cache-line flush and store fence, chosen once at run time.
//!
//! Durability rule used throughout Switchyard: a range is durable once every cache line in it
//! was either written with non-temporal stores or flushed, and a store fence (`sfence`) was
//! issued by the same thread afterwards. With [`FlushKind::None`] (eADR platforms, or regions
//! in DRAM where power-loss durability is not asked for) the flush is skipped but the fence is
//! kept, because non-temporal stores are weakly ordered and must still be ordered before the
//! completion that publishes them.

use crate::kernels::Simd;
use crate::trace::{self, Recorder, Tap};
use std::sync::atomic::Ordering;

/// Size of a cache line, the unit of every flush.
pub const CACHE_LINE: usize = 64;

/// The instruction used to write a cache line back to the persistence domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushKind {
    /// `clwb`: writes the line back and may keep it cached (best).
    Clwb,
    /// `clflushopt`: writes back and invalidates, weakly ordered.
    Clflushopt,
    /// `clflush`: writes back and invalidates, serialising (slowest).
    Clflush,
    /// No flush: the CPU caches are inside the persistence domain (eADR), so a fence suffices.
    None,
}

impl FlushKind {
    /// The best flush instruction this CPU supports, read from CPUID.
    pub fn detect() -> FlushKind {
        #[cfg(target_arch = "x86_64")]
        {
            // CPUID is always available on x86_64 and has no side effects.
            let leaf7 = core::arch::x86_64::__cpuid_count(7, 0);
            let leaf1 = core::arch::x86_64::__cpuid(1);
            if leaf7.ebx & (1 << 24) != 0 {
                FlushKind::Clwb
            } else if leaf7.ebx & (1 << 23) != 0 {
                FlushKind::Clflushopt
            } else if leaf1.edx & (1 << 19) != 0 {
                FlushKind::Clflush
            } else {
                FlushKind::None
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            FlushKind::None
        }
    }

    /// Whether this CPU can execute the instruction.
    pub fn supported(self) -> bool {
        match self {
            FlushKind::None => true,
            FlushKind::Clflush => FlushKind::detect() != FlushKind::None,
            FlushKind::Clflushopt => {
                matches!(FlushKind::detect(), FlushKind::Clwb | FlushKind::Clflushopt)
            }
            FlushKind::Clwb => FlushKind::detect() == FlushKind::Clwb,
        }
    }

    /// The lowercase name used in configuration files and reports.
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::Clflushopt => "clflushopt",
            FlushKind::Clflush => "clflush",
            FlushKind::None => "none",
        }
    }

    /// Parses a name as written by [`FlushKind::name`].
    pub fn from_name(name: &str) -> Option<FlushKind> {
        [
            FlushKind::Clwb,
            FlushKind::Clflushopt,
            FlushKind::Clflush,
            FlushKind::None,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }
}

/// The persistence primitives and copy-kernel choices of one process, fixed at start.
///
/// `Persist` is a small `Copy` value: engine workers and the mover each hold one, so the hot
/// path never consults shared state to decide how to flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Persist {
    /// Flush instruction.
    pub flush: FlushKind,
    /// Widest SIMD level used by the non-temporal and shifted-copy kernels.
    pub simd: Simd,
    /// Durable copies shorter than this use temporal stores + flush instead of non-temporal
    /// stores (for short copies the flush of a few lines is cheaper than bypassing the cache).
    pub nt_threshold: usize,
    /// Temporal copies at least this long whose source and destination differ in address
    /// mod 32 use the SIMD loop instead of `memcpy` (see [`crate::kernels`]); 0 = never.
    pub shifted_min: usize,
    /// The trace this value's stores, flushes and fences are recorded into; `None` (what
    /// [`Persist::detect`] gives) records nothing.
    pub tap: Option<Tap>,
}

/// Default [`Persist::nt_threshold`]: below 1 KiB, temporal stores + `clwb` win on the CPUs we
/// measured, as in PMDK's `PMEM_MOVNT_THRESHOLD` reasoning.
pub const DEFAULT_NT_THRESHOLD: usize = 1024;

/// Default [`Persist::shifted_min`]: from 1 KiB up the loop beat glibc's `memcpy` between
/// shifted buffers at every shift measured (figures in `docs/scheduler.md`, "Copy kernels").
pub const DEFAULT_SHIFTED_MIN: usize = 1024;

impl Persist {
    /// The best primitives this CPU supports.
    pub fn detect() -> Persist {
        Persist {
            flush: FlushKind::detect(),
            simd: Simd::detect(),
            nt_threshold: DEFAULT_NT_THRESHOLD,
            shifted_min: DEFAULT_SHIFTED_MIN,
            tap: None,
        }
    }

    /// The same primitives, recording every store, flush and fence issued through the result
    /// into `rec` (tests and the crash harness: a region, engine and mover built with it are
    /// traced, and nothing else is).
    pub fn traced(self, rec: &Recorder) -> Persist {
        Persist {
            tap: Some(rec.tap()),
            ..self
        }
    }

    /// Records `event` if this value is traced.
    #[inline]
    pub(crate) fn record(&self, event: trace::Event) {
        if let Some(tap) = self.tap {
            trace::record(tap, event);
        }
    }

    /// Records, if this value is traced, a store of `len` bytes from `src` to `dst` about to
    /// happen.
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes.
    #[inline]
    pub(crate) unsafe fn record_store(
        &self,
        dst: *const u8,
        src: *const u8,
        len: usize,
        non_temporal: bool,
    ) {
        if let Some(tap) = self.tap {
            // SAFETY: forwarded from this function's contract.
            unsafe { trace::record_store(tap, dst, src, len, non_temporal) };
        }
    }

    /// Writes back every cache line overlapping `[addr, addr + len)`. Does not fence.
    ///
    /// Flushing has no effect on memory contents, so this is safe for any address range that
    /// is mapped; flushing an unmapped address faults like a load would.
    pub fn flush(&self, addr: *const u8, len: usize) {
        if len == 0 {
            return;
        }
        self.record(trace::Event::Flush {
            addr: addr as usize,
            len,
        });
        let start = (addr as usize) & !(CACHE_LINE - 1);
        let end = addr as usize + len;
        match self.flush {
            FlushKind::None => {}
            #[cfg(target_arch = "x86_64")]
            kind => {
                let mut line = start;
                while line < end {
                    // SAFETY: (1) the caller passes a range it may read, so each line start
                    // (rounded down within the same page) is mapped; (2) the flush
                    // instructions do not change memory contents; (3) `kind` was checked to be
                    // supported by this CPU when the `Persist` was built.
                    unsafe { flush_line(kind, line as *const u8) };
                    line += CACHE_LINE;
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => {}
        }
    }

    /// Store fence: orders every earlier store (temporal, non-temporal and flush) of this
    /// thread before every later store.
    pub fn fence(&self) {
        self.record(trace::Event::Fence);
        fence();
    }

    /// Stores `value` at the 8-byte aligned `dst` with one 8-byte store: after a crash the word
    /// holds the old or the new value, never a mix (x86's store atomicity; the commit point
    /// of every log). Does not flush.
    ///
    /// # Safety
    /// `dst` must be 8-byte aligned, valid for writes, and not accessed non-atomically by other
    /// threads during the call.
    pub unsafe fn store_u64(&self, dst: *mut u64, value: u64) {
        let bytes = value.to_le_bytes();
        // SAFETY: `bytes` is a live local of 8 bytes.
        unsafe { self.record_store(dst.cast(), bytes.as_ptr(), 8, false) };
        // SAFETY: aligned and writable (this function's contract); an atomic store compiles to
        // one 8-byte `mov`.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(dst).store(value, Ordering::Release) };
    }

    /// Flushes `[addr, addr + len)` and fences: the range is durable when this returns.
    pub fn persist(&self, addr: *const u8, len: usize) {
        self.flush(addr, len);
        self.fence();
    }
}

/// `sfence` (a sequentially-consistent fence where there is none).
#[inline]
pub(crate) fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` is part of SSE, which every x86_64 CPU has; it only orders stores.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Flushes the cache line containing `line`.
///
/// # Safety
/// `line` must be mapped and `kind` supported by this CPU.
#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn flush_line(kind: FlushKind, line: *const u8) {
    match kind {
        // SAFETY: the caller guarantees `line` is mapped and the instruction is supported;
        // clwb writes back without changing memory.
        FlushKind::Clwb => unsafe {
            core::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags))
        },
        // SAFETY: as above, for clflushopt.
        FlushKind::Clflushopt => unsafe {
            core::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags))
        },
        // SAFETY: as above; clflush is baseline SSE2.
        FlushKind::Clflush => unsafe { core::arch::x86_64::_mm_clflush(line) },
        FlushKind::None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in [
            FlushKind::Clwb,
            FlushKind::Clflushopt,
            FlushKind::Clflush,
            FlushKind::None,
        ] {
            assert_eq!(FlushKind::from_name(k.name()), Some(k));
        }
        assert_eq!(FlushKind::from_name("wbinvd"), None);
    }

    #[test]
    fn detected_flush_runs_on_every_line_shape() {
        let p = Persist::detect();
        assert!(p.flush.supported());
        let buf = vec![7u8; 4096 + 3];
        p.persist(buf.as_ptr(), 1);
        p.persist(buf[63..].as_ptr(), 2);
        p.persist(buf[1..].as_ptr(), 4096);
        assert!(buf.iter().all(|&b| b == 7));
    }
}
