//! The reserved share of a store (as ext4's reserved blocks): the last few percent of the
//! data zone that only privileged callers may fill with data, so that other users of an
//! `--allow-other` mount cannot fill the store and make its owner's writes fail.
//!
//! [`Space`] owns the data zone's allocator and these shares, and is the one way the store
//! takes and gives back blocks.
//!
//! Who is privileged is the front end's business: every caller is, unless it runs inside
//! [`Store::as_unprivileged`](crate::Store::as_unprivileged) (the FUSE mount wraps each
//! request of a user other than root and the store's owner). Only data blocks count (file
//! contents, symlink targets, fallocate): log pages may always use the reserve, so an
//! unprivileged user can still delete files on a full store (every change appends to a log).
//! The check and the allocation are not one atomic step, so concurrent unprivileged writers
//! may dip into the reserve by at most one request each.
//!
//! Below that lies a smaller reserve that no data may take, privileged or not: the blocks
//! log pages need to record changes on a store whose data filled every other block
//! (0.2% of the data zone, 32 to 4,096 blocks). Every change, a chmod or a truncation
//! included, appends to a log, and a log whose page is full needs a fresh one: on a store a
//! privileged writer had filled, 62 chmods of one file later the next failed with ENOSPC
//! (ext4 updates inodes in place, and keeps its own blocks for metadata). `statfs` counts
//! these blocks free but not available, as ext4 counts its own.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::alloc::{Allocator, Extent, Grace};
use crate::error::Errno;

/// The reserved share a mount starts with, in percent of the data zone: the configuration's
/// default `store.reserved_percent` (ext4's 5%).
pub fn default_reserved_percent() -> u32 {
    crate::config::StoreConfig::default().reserved_percent
}

thread_local!(static UNPRIVILEGED: Cell<bool> = const { Cell::new(false) });

/// Runs `f` as an unprivileged caller ([`Store::as_unprivileged`](crate::Store::as_unprivileged)).
pub(crate) fn as_unprivileged<R>(f: impl FnOnce() -> R) -> R {
    let before = UNPRIVILEGED.with(|u| u.replace(true));
    let r = f();
    UNPRIVILEGED.with(|u| u.set(before));
    r
}

/// The blocks of one store's data zone and who may take them: data leaves the metadata
/// reserve to log pages and the reserved share to privileged callers.
pub(crate) struct Space {
    alloc: Arc<Allocator>,
    /// Blocks in the data zone.
    zone: u64,
    /// Data blocks only privileged callers may take.
    reserved: AtomicU64,
}

impl Space {
    /// The space `alloc` hands out, of a data zone of `zone` blocks, with the default
    /// reserved share.
    pub(crate) fn new(alloc: Arc<Allocator>, zone: u64) -> Space {
        Space {
            alloc,
            zone,
            reserved: AtomicU64::new(zone * u64::from(default_reserved_percent()) / 100),
        }
    }

    /// The allocator itself, for a holder that defers its frees (the page-media writer).
    pub(crate) fn allocator(&self) -> &Arc<Allocator> {
        &self.alloc
    }

    /// Blocks in the data zone.
    pub(crate) fn zone_blocks(&self) -> u64 {
        self.zone
    }

    /// Free blocks (the metadata reserve and the reserved share included).
    pub(crate) fn free_blocks(&self) -> u64 {
        self.alloc.free_blocks()
    }

    /// Free blocks an unprivileged caller may take: the free blocks less both reserves.
    pub(crate) fn available_blocks(&self) -> u64 {
        self.free_blocks()
            .saturating_sub(self.metadata_blocks())
            .saturating_sub(self.reserved_blocks())
    }

    /// The free extents, as a checkpoint lists them.
    pub(crate) fn free_extents(&self) -> Vec<Extent> {
        self.alloc.free_extents()
    }

    /// Takes `n` blocks for metadata (log pages, checkpoint pages, a page a log must still
    /// write), which both reserves are kept for.
    pub(crate) fn take(&self, n: u64) -> Result<Vec<Extent>, Errno> {
        self.alloc.alloc(n)
    }

    /// Takes `n` blocks for data, leaving the metadata reserve to log pages and the reserved
    /// share to privileged callers.
    pub(crate) fn alloc_data(&self, n: u64) -> Result<Vec<Extent>, Errno> {
        if self.data_room() < n {
            return Err(Errno::ENOSPC);
        }
        self.alloc.alloc(n)
    }

    /// Gives blocks back.
    pub(crate) fn free(&self, e: Extent) {
        self.alloc.free(e);
    }

    /// While it lasts, no block freed after it began is taken again ([`Grace`]).
    pub(crate) fn grace(&self) -> Grace<'_> {
        self.alloc.grace()
    }

    /// Sets the reserved share to `percent` of the data zone (at most 50).
    pub(crate) fn set_reserved_percent(&self, percent: u32) -> Result<(), Errno> {
        if percent > 50 {
            return Err(Errno::EINVAL);
        }
        let blocks = self.zone * u64::from(percent) / 100;
        self.reserved.store(blocks, Ordering::Relaxed);
        Ok(())
    }

    /// Blocks in the reserved share.
    pub(crate) fn reserved_blocks(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }

    /// Blocks only log pages may take ([`metadata_reserve`] of the data zone).
    pub(crate) fn metadata_blocks(&self) -> u64 {
        metadata_reserve(self.zone)
    }

    /// Blocks this caller's data may take now: the free blocks less the metadata reserve and,
    /// for an unprivileged caller, the reserved share.
    pub(crate) fn data_room(&self) -> u64 {
        let mut keep = self.metadata_blocks();
        if UNPRIVILEGED.with(|u| u.get()) {
            keep = keep.saturating_add(self.reserved_blocks());
        }
        self.alloc.free_blocks().saturating_sub(keep)
    }
}

/// Blocks of a data zone of `blocks` that only log pages may take: 0.2%, at least 32 and at
/// most 4,096 (16 MiB), and never more than a quarter of the zone.
pub(crate) fn metadata_reserve(blocks: u64) -> u64 {
    (blocks / 512).clamp(32, 4096).min(blocks / 4)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_metadata_reserve_scales_within_its_bounds() {
        use super::metadata_reserve as r;
        assert_eq!(r(4096), 32, "16 MiB");
        assert_eq!(r(1 << 18), 512, "1 GiB");
        assert_eq!(r(1 << 28), 4096, "1 TiB");
        assert_eq!(r(64), 16, "a quarter of a tiny zone");
    }
}
