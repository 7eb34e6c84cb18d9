//! The store's media boundary: every store, flush and fence the store itself issues into its
//! region passes through a [`Media`], by offset.
//!
//! - [`Mapped`] is the real region: the media crate's kernels through the region's
//!   [`Persist`]. It is also the tracing implementation: the crash harness builds the region
//!   (and the engine and mover that copy into it) with a `Persist` traced into a recorder, so
//!   one ordered trace holds the store's own actions and the engine workers' alike.
//! - `Faulty` (feature `testing`) wraps another media and drops the flushes of one kind of
//!   write once armed: the missing-flush bug the crash harness must catch.
//!
//! [`Pm`] is the store's handle: bounds-checked offsets over the mapping, reads straight from
//! it, and writes through the media.

use switchyard_media::{CopyMode, Persist, Region};

/// What a write into the region holds (a faulting media picks its victims by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// A log entry appended past an inode's tail, made durable before the tail moves.
    LogEntry,
    /// Any other metadata: log page headers, commit words, the journal, the superblock,
    /// directory and extended-attribute pages.
    Metadata,
    /// File data stored by the store itself (zeroed or completed pages).
    Data,
}

/// The region's stores, flushes and fences, by offset from its first byte.
///
/// Implementations must make a range durable exactly when the real media would: what was
/// stored and then flushed is durable after this thread's next [`Media::fence`]. Callers keep
/// every range inside the region and hold the lock that gives them the range.
pub trait Media: Send + Sync {
    /// Stores `data` at `off` with ordinary stores; nothing is flushed.
    fn store(&self, off: u64, data: &[u8]);
    /// Stores `value` at the 8-byte aligned `off` with one 8-byte store (after a crash the word
    /// is old or new, never a mix); nothing is flushed.
    fn store_u64(&self, off: u64, value: u64);
    /// Writes back every cache line of `[off, off + len)`, which holds `held`; no fence.
    fn flush(&self, held: Held, off: u64, len: u64);
    /// Orders every earlier store and flush of this thread before later stores: what it
    /// flushed is durable.
    fn fence(&self);
    /// The persistence primitives behind this media (for the engine's hole repair).
    fn persist(&self) -> Persist;
}

/// The real region: its mapping through its [`Persist`].
pub struct Mapped {
    base: *mut u8,
    len: u64,
    persist: Persist,
}

// SAFETY: `Mapped` is a raw view of a mapping owned by the `Store` that holds it; the store's
// locks give each writer exclusive ranges (an inode's log tail and fresh blocks under its lock,
// the journal under the journal lock, the superblock under its lock).
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Mapped {
    fn at(&self, off: u64, len: u64) -> *mut u8 {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.len),
            "region access {off}+{len} out of bounds"
        );
        // SAFETY: in bounds (asserted).
        unsafe { self.base.add(off as usize) }
    }
}

impl Media for Mapped {
    fn store(&self, off: u64, data: &[u8]) {
        let p = self.at(off, data.len() as u64);
        // SAFETY: in bounds; `data` is DRAM, so no overlap; the caller owns the range.
        unsafe {
            self.persist
                .copy(p, data.as_ptr(), data.len(), CopyMode::Temporal)
        };
    }

    fn store_u64(&self, off: u64, value: u64) {
        assert!(off.is_multiple_of(8));
        let p = self.at(off, 8);
        // SAFETY: in bounds and 8-byte aligned (the mapping is page aligned); the caller owns
        // the word.
        unsafe { self.persist.store_u64(p.cast(), value) };
    }

    fn flush(&self, _: Held, off: u64, len: u64) {
        self.persist.flush(self.at(off, len), len as usize);
    }

    fn fence(&self) {
        self.persist.fence();
    }

    fn persist(&self) -> Persist {
        self.persist
    }
}

/// A media that drops every flush of one kind of write while armed (feature `testing`).
#[cfg(feature = "testing")]
pub struct Faulty {
    inner: Box<dyn Media>,
    drops: Held,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[cfg(feature = "testing")]
impl Faulty {
    /// `inner`, but with the flushes of `drops` left out whenever `armed` is set.
    pub fn new(
        inner: Box<dyn Media>,
        drops: Held,
        armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Faulty {
        Faulty {
            inner,
            drops,
            armed,
        }
    }
}

#[cfg(feature = "testing")]
impl Media for Faulty {
    fn store(&self, off: u64, data: &[u8]) {
        self.inner.store(off, data);
    }

    fn store_u64(&self, off: u64, value: u64) {
        self.inner.store_u64(off, value);
    }

    fn flush(&self, held: Held, off: u64, len: u64) {
        if held == self.drops && self.armed.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        self.inner.flush(held, off, len);
    }

    fn fence(&self) {
        self.inner.fence();
    }

    fn persist(&self) -> Persist {
        self.inner.persist()
    }
}

/// Byte-offset access to a mapped region: reads from the mapping, writes through a [`Media`].
pub(crate) struct Pm {
    base: *mut u8,
    len: u64,
    media: Box<dyn Media>,
    /// The region's sync (a no-op unless its granularity is the page).
    syncer: switchyard_media::Syncer,
}

// SAFETY: as for `Mapped`: a raw view of a mapping owned by the `Store` next to it, written
// under the store's locks.
unsafe impl Send for Pm {}
// SAFETY: as above.
unsafe impl Sync for Pm {}

impl Pm {
    pub(crate) fn new(region: &Region) -> Pm {
        let (base, len) = (region.as_mut_ptr(), region.len() as u64);
        Pm {
            base,
            len,
            media: Box::new(Mapped {
                base,
                len,
                persist: region.persist(),
            }),
            syncer: region.syncer(),
        }
    }

    /// Puts `wrap(media)` in place of the media (fault tests).
    #[cfg(feature = "testing")]
    pub(crate) fn wrap_media(&mut self, wrap: impl FnOnce(Box<dyn Media>) -> Box<dyn Media>) {
        let placeholder = Box::new(Mapped {
            base: self.base,
            len: self.len,
            persist: self.media.persist(),
        });
        let inner = std::mem::replace(&mut self.media, placeholder);
        self.media = wrap(inner);
    }

    /// The persistence primitives of the region.
    pub(crate) fn persist(&self) -> Persist {
        self.media.persist()
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

    /// Stores metadata `data` at `off` and flushes it (no fence).
    pub(crate) fn write(&self, off: u64, data: &[u8]) {
        self.write_held(Held::Metadata, off, data);
    }

    /// Stores `data`, which holds `held`, at `off` and flushes it (no fence).
    pub(crate) fn write_held(&self, held: Held, off: u64, data: &[u8]) {
        self.media.store(off, data);
        self.media.flush(held, off, data.len() as u64);
    }

    /// Stores `data` at `off` without flushing it (the crash harness's one-sided puts).
    #[cfg(feature = "testing")]
    pub(crate) fn write_unflushed(&self, off: u64, data: &[u8]) {
        self.media.store(off, data);
    }

    /// Flushes the file data at `[off, off + len)` (no fence): makes stores another party made
    /// durable at the next fence.
    pub(crate) fn flush(&self, off: u64, len: u64) {
        self.media.flush(Held::Data, off, len);
    }

    /// Stores the 8-byte word at `off` atomically and flushes it (no fence).
    pub(crate) fn store_u64(&self, off: u64, v: u64) {
        self.media.store_u64(off, v);
        self.media.flush(Held::Metadata, off, 8);
    }

    /// Loads the 8-byte word at `off`.
    pub(crate) fn load_u64(&self, off: u64) -> u64 {
        u64::from_le_bytes(self.bytes(off, 8).try_into().expect("8 bytes"))
    }

    /// Orders every earlier flush of this thread before later stores: what was flushed is
    /// durable.
    pub(crate) fn fence(&self) {
        self.media.fence();
    }

    /// A fence that on page media also writes the whole region back to the disk (`msync`):
    /// the ordering points of mount, recovery and the clean unmount, where what comes next
    /// must not reach the disk before what came before. `Err` when the disk refused.
    pub(crate) fn barrier(&self) -> std::io::Result<()> {
        self.media.fence();
        self.syncer.sync_range(0, self.len)
    }

    /// The region's sync, for the page-media writer.
    pub(crate) fn syncer(&self) -> switchyard_media::Syncer {
        self.syncer
    }
}
