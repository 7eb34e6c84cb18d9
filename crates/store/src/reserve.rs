//! The reserved share of a store (as ext4's reserved blocks): the last few percent of the
//! data zone that only privileged callers may fill with data, so that other users of an
//! `--allow-other` mount cannot fill the store and make its owner's writes fail.
//!
//! Who is privileged is the front end's business: every caller is, unless it runs inside
//! [`Store::as_unprivileged`] (the FUSE mount wraps each request of a user other than root and
//! the store's owner). Only data blocks count (file contents, symlink targets, fallocate):
//! log pages may always use the reserve, so an unprivileged user can still delete files on a
//! full store (every change appends to a log). The check and the allocation are not one
//! atomic step, so concurrent unprivileged writers may dip into the reserve by at most one
//! request each.

use std::cell::Cell;
use std::sync::atomic::Ordering;

use crate::alloc::Extent;
use crate::error::Errno;
use crate::store::Store;

/// The reserved share a mount starts with, in percent of the data zone: the configuration's
/// default `store.reserved_percent` (ext4's 5%).
pub fn default_reserved_percent() -> u32 {
    switchyard_mover::config::StoreConfig::default().reserved_percent
}

thread_local!(static UNPRIVILEGED: Cell<bool> = const { Cell::new(false) });

impl Store {
    /// Runs `f` as an unprivileged caller: data allocations in it leave the reserved share
    /// alone (ENOSPC once only the reserve is free).
    pub fn as_unprivileged<R>(&self, f: impl FnOnce() -> R) -> R {
        let before = UNPRIVILEGED.with(|u| u.replace(true));
        let r = f();
        UNPRIVILEGED.with(|u| u.set(before));
        r
    }

    /// Sets the reserved share to `percent` of the data zone (at most 50).
    pub fn set_reserved_percent(&self, percent: u32) -> Result<(), Errno> {
        if percent > 50 {
            return Err(Errno::EINVAL);
        }
        let blocks = self.statfs().blocks * u64::from(percent) / 100;
        self.reserved.store(blocks, Ordering::Relaxed);
        Ok(())
    }

    /// Blocks in the reserved share.
    pub fn reserved_blocks(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }

    /// Takes `n` blocks for data, leaving the reserved share to privileged callers.
    pub(crate) fn alloc_data(&self, n: u64) -> Result<Vec<Extent>, Errno> {
        if UNPRIVILEGED.with(|u| u.get())
            && self.alloc.free_blocks() < n.saturating_add(self.reserved_blocks())
        {
            return Err(Errno::ENOSPC);
        }
        self.alloc.alloc(n)
    }
}
