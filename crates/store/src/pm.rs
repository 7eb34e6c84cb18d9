//! The store's window onto its region: every store, flush and fence into the region passes
//! through here and on into the media kernels (so the crash harness's recorder sees them all).

use switchyard_media::{CopyMode, Persist, Region};

/// Byte-offset access to a mapped region.
pub(crate) struct Pm {
    base: *mut u8,
    len: u64,
    persist: Persist,
}

// SAFETY: `Pm` is a raw view of a mapping owned by the `Store` next to it; the store's locks
// give each writer exclusive ranges (an inode's log tail and fresh blocks under its lock, the
// journal under the journal lock, the superblock under its lock).
unsafe impl Send for Pm {}
// SAFETY: as above.
unsafe impl Sync for Pm {}

impl Pm {
    pub(crate) fn new(region: &Region) -> Pm {
        Pm {
            base: region.as_mut_ptr(),
            len: region.len() as u64,
            persist: region.persist(),
        }
    }

    /// The persistence primitives of the region.
    pub(crate) fn persist(&self) -> Persist {
        self.persist
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Raw pointer to `off` (for the mover).
    pub(crate) fn ptr(&self, off: u64, len: u64) -> *mut u8 {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.len),
            "region access {off}+{len} out of bounds"
        );
        // SAFETY: in bounds (asserted).
        unsafe { self.base.add(off as usize) }
    }

    /// The bytes at `[off, off + len)`. Callers hold the lock that excludes writers of them.
    pub(crate) fn bytes(&self, off: u64, len: u64) -> &[u8] {
        let p = self.ptr(off, len);
        // SAFETY: in bounds; the mapping lives as long as `self`; writers of this range are
        // excluded by the caller's lock.
        unsafe { std::slice::from_raw_parts(p, len as usize) }
    }

    /// Stores `data` at `off` and flushes it (no fence).
    pub(crate) fn write(&self, off: u64, data: &[u8]) {
        let p = self.ptr(off, data.len() as u64);
        // SAFETY: in bounds; `data` is DRAM, so no overlap; the caller owns the range.
        unsafe {
            self.persist
                .copy(p, data.as_ptr(), data.len(), CopyMode::Temporal)
        };
        self.persist.flush(p, data.len());
    }

    /// Stores `data` at `off` without flushing it (fault injection only).
    pub(crate) fn write_unflushed(&self, off: u64, data: &[u8]) {
        let p = self.ptr(off, data.len() as u64);
        // SAFETY: as in `write`.
        unsafe {
            self.persist
                .copy(p, data.as_ptr(), data.len(), CopyMode::Temporal)
        };
    }

    /// Flushes `[off, off + len)` (no fence): makes stores another party made durable at the
    /// next fence.
    pub(crate) fn flush(&self, off: u64, len: u64) {
        self.persist.flush(self.ptr(off, len), len as usize);
    }

    /// Stores the 8-byte word at `off` atomically and flushes it (no fence).
    pub(crate) fn store_u64(&self, off: u64, v: u64) {
        assert!(off.is_multiple_of(8));
        let p = self.ptr(off, 8);
        // SAFETY: in bounds and 8-byte aligned (the mapping is page aligned); the caller owns
        // the word.
        unsafe { self.persist.store_u64(p.cast(), v) };
        self.persist.flush(p, 8);
    }

    /// Loads the 8-byte word at `off`.
    pub(crate) fn load_u64(&self, off: u64) -> u64 {
        u64::from_le_bytes(self.bytes(off, 8).try_into().expect("8 bytes"))
    }

    /// Orders every earlier flush of this thread before later stores: what was flushed is
    /// durable.
    pub(crate) fn fence(&self) {
        self.persist.fence();
    }
}
