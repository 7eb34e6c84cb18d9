//! Inode lifetimes: open handles, the kernel's lookup holds, generations, and freeing an
//! inode once its last link, handle and hold are gone.

use std::sync::atomic::Ordering;

use super::{Guard, Store};
use crate::error::{Errno, Error, Op};
use crate::format::{Attr, SLOT_GENERATION_AT};
use crate::inode::{Content, Inode};

impl Store {
    /// Frees an inode with no links left: its slot, log pages and data blocks.
    pub(super) fn free_inode(&self, g: &mut Guard<'_>) -> Result<(), Errno> {
        let Some(inode) = g.take() else {
            return Ok(());
        };
        let slot = self.slot_offset(inode.ino);
        // Its word moves as it is forgotten.
        self.commit_words(&[(slot, 0), (slot + 8, 0)], &[]);
        self.forget_inode(inode);
        Ok(())
    }

    /// Returns the blocks and slot of an inode whose slot words are already zero on media.
    pub(super) fn forget_inode(&self, inode: Inode) {
        self.changes.bump(inode.ino);
        self.free_blocks(&inode.pages);
        if let Content::File(pages) = &inode.content {
            self.retire(&inode, pages.values().copied().collect());
        }
        self.free_inodes.lock().give(inode.ino);
    }

    // ---- open handles -------------------------------------------------------------------

    /// Notes an open handle on `ino` (an unlinked inode lives until its last handle goes).
    pub fn open(&self, ino: u64) -> Result<Attr, Error> {
        (|| -> Result<Attr, Errno> {
            let mut g = self.slot(ino)?.write();
            let inode = g.as_mut().ok_or(Errno::ENOENT)?;
            inode.open += 1;
            Ok(inode.attr)
        })()
        .map_err(Error::on(Op::Open, ino))
    }

    /// Drops an open handle; frees the inode if it was the last and no links remain.
    pub fn release(&self, ino: u64) -> Result<(), Error> {
        (|| -> Result<(), Errno> {
            let mut g = self.lock(ino)?;
            let inode = g.as_mut().ok_or(Errno::ENOENT)?;
            inode.open = inode.open.saturating_sub(1);
            if inode.open == 0 && inode.attr.nlink == 0 && !self.held(ino) {
                self.free_inode(&mut g)?;
            }
            Ok(())
        })()
        .map_err(Error::on(Op::Release, ino))
    }

    // ---- holds: the front end's references to inode numbers ------------------------------

    /// Takes a hold on `ino`: until it is released ([`Store::release_holds`]), the inode lives
    /// on when its last link goes (as an open handle keeps it), and its number is not given
    /// to a new inode. The FUSE mount holds one per lookup the kernel counts, so a number the
    /// kernel still knows never names another file. For an inode just made or looked up
    /// without a hold; [`Store::lookup_held`] looks up and holds in one step.
    pub fn hold(&self, ino: u64) -> Result<(), Error> {
        (|| -> Result<(), Errno> {
            let g = self.slot(ino)?.read();
            g.as_ref().ok_or(Errno::ENOENT)?;
            self.table.holds(ino).fetch_add(1, Ordering::AcqRel);
            Ok(())
        })()
        .map_err(Error::on(Op::Hold, ino))
    }

    /// Releases `n` holds on `ino` (the kernel's `forget`); the inode is freed if they were
    /// the last references to an inode with no links and no open handles.
    pub fn release_holds(&self, ino: u64, n: u64) -> Result<(), Error> {
        (|| -> Result<(), Errno> {
            self.slot(ino)?;
            let n = u32::try_from(n).unwrap_or(u32::MAX);
            let before = self
                .table
                .holds(ino)
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                    Some(h.saturating_sub(n))
                })
                .expect("the update always succeeds");
            if before > n {
                return Ok(());
            }
            // Nothing names an inode without links, so no new hold can come; one unlinked while
            // held waits here for its last hold.
            let mut g = self.lock(ino)?;
            let orphan = g.as_ref().is_some_and(|i| i.attr.nlink == 0 && i.open == 0);
            if orphan && !self.held(ino) {
                self.free_inode(&mut g)?;
            }
            Ok(())
        })()
        .map_err(Error::on(Op::Release, ino))
    }

    /// Whether a front end holds `ino`.
    pub(super) fn held(&self, ino: u64) -> bool {
        self.table.holds(ino).load(Ordering::Acquire) != 0
    }

    /// The generation of inode `ino`: a number that changes each time its slot is given to a
    /// new inode, kept on media, so (number, generation) names one file for the life of the
    /// store, across remounts (an NFS-style file handle).
    pub fn generation(&self, ino: u64) -> Result<u64, Error> {
        self.slot(ino)
            .map(|_| self.slot_generation(ino))
            .map_err(Error::on(Op::Getattr, ino))
    }

    /// The generation word of slot `ino`, which the caller has checked exists.
    pub(super) fn slot_generation(&self, ino: u64) -> u64 {
        self.commits
            .load(&self.pm, self.slot_offset(ino) + SLOT_GENERATION_AT)
    }
}
