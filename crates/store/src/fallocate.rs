//! fallocate(2) on a copy-on-write store: allocating, zeroing and punching ranges of a file.
//!
//! - Allocate fills the holes of the range with zeroed blocks (data already there is left
//!   alone) and, unless told to keep the size, extends the file to the range's end; when the
//!   blocks run out, the size goes back to what it was (holes filled inside it stay filled).
//!   Told to keep the size, it allocates past the end too: those blocks count in `st_blocks`
//!   and stay held, unseen, until the size reaches them (a write, an extending truncate) or
//!   a truncation gives them back (to a smaller size, or to the size the file has, as
//!   `rsync --preallocate` trims), as on ext4.
//! - Zero-range makes the range read as zeros in one commit (whole pages become holes,
//!   `Punch` entry, format version 4; the covered parts of its edge pages are zeroed in
//!   copy-on-write copies; the size grows with it unless kept), then allocates those holes
//!   (past the end too when the size is kept).
//! - Punch-hole is that commit without the allocation, and never changes the size; whole
//!   pages of the range past the end are given back as well.
//!
//! So what a program can read changes atomically, as with every other operation; only the
//! allocation of holes, which read as zeros before and after, may take several commits.
//!
//! Every later overwrite is copy-on-write, so it takes a fresh block before it frees the old
//! one: on a store that filled up meanwhile the write goes in pieces, the last on a block
//! borrowed from the log pages' reserve ([`Store::write`]), so writing into what was
//! allocated still succeeds, as on ext4; only a write through the two-phase API (a remote
//! client's one-sided put) is refused whole with ENOSPC then, and its client writes the piece
//! inside a message instead.

use crate::alloc::Extent;
use crate::error::{Errno, Error, Op};
use crate::format::{Entry, BLOCK, S_IFREG};
use crate::inode::{Content, Inode};
use crate::pm::Held;
use crate::store::{now_ns, Order, Store, MAX_FILE_SIZE};

/// What [`Store::fallocate`] does with a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Falloc {
    /// Mode 0 (`keep_size: false`) or `FALLOC_FL_KEEP_SIZE`: allocate the holes.
    Allocate {
        /// Leave the size alone even when the range ends past it.
        keep_size: bool,
    },
    /// `FALLOC_FL_ZERO_RANGE`, with or without `FALLOC_FL_KEEP_SIZE`.
    ZeroRange {
        /// Leave the size alone even when the range ends past it.
        keep_size: bool,
    },
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`.
    PunchHole,
}

/// Zeros written per step (one write commit each).
const ZEROS: usize = 1 << 20;

impl Store {
    /// Applies `mode` to `len` bytes of regular file `ino` at `off`. `EINVAL` for an empty
    /// range, `EFBIG` past the largest file size, `ENOSPC` when the blocks run out. What a
    /// program can read changes in one commit; allocating holes (which read as zeros either
    /// way) may take several, and a crash between them leaves some holes allocated.
    pub fn fallocate(&self, ino: u64, off: u64, len: u64, mode: Falloc) -> Result<(), Error> {
        (|| -> Result<(), Errno> {
            self.check_writable()?;
            if len == 0 {
                return Err(Errno::EINVAL);
            }
            let end = off
                .checked_add(len)
                .filter(|&e| e <= MAX_FILE_SIZE)
                .ok_or(Errno::EFBIG)?;
            let mut g = self.lock(ino)?;
            let inode = g.as_mut().ok_or(Errno::ENOENT)?;
            if inode.attr.kind() != S_IFREG {
                return Err(match inode.content {
                    Content::Dir(_) => Errno::EISDIR,
                    Content::File(_) => Errno::ENODEV,
                });
            }
            match mode {
                Falloc::Allocate { keep_size } => self.allocate(inode, off, end, keep_size),
                Falloc::ZeroRange { keep_size } => self.zero_range(inode, off, end, keep_size),
                Falloc::PunchHole => self.punch_hole(inode, off, end),
            }
        })()
        .map_err(Error::on(Op::Fallocate, ino))
    }

    /// [`Falloc::Allocate`] on `[off, end)` of regular file `inode`.
    fn allocate(
        &self,
        inode: &mut Inode,
        off: u64,
        end: u64,
        keep_size: bool,
    ) -> Result<(), Errno> {
        let before = inode.attr;
        let holes = holes(inode, off, end);
        // Refused before anything changes when the room is plainly not there.
        if self.data_room() < holes.iter().map(|&(a, b)| pages(a, b)).sum() {
            return Err(Errno::ENOSPC);
        }
        let allocated = holes
            .into_iter()
            .try_for_each(|(from, to)| self.zero_hole(inode, from, to, !keep_size))
            .and_then(|()| {
                if !keep_size && inode.attr.size < end {
                    self.zero_and_resize(inode, end, end, Some(end))
                } else {
                    Ok(())
                }
            });
        if let Err(e) = allocated {
            // The hole past the end grows the file write by write: a failed
            // allocation puts back the size and times (the blocks past the size
            // go with it), so that, as with every failed call, nothing a program
            // can see changed. The kernel's attribute cache assumes as much: a
            // mount whose fallocate failed half-way showed the old size while
            // the file held the new one. Holes filled inside the size stay filled
            // (they read as zeros either way), as on ext4.
            if inode.attr.size != before.size {
                let _ = self.commit_change(inode, &[Entry::Attr(before)]);
            }
            return Err(e);
        }
        Ok(())
    }

    /// [`Falloc::ZeroRange`] on `[off, end)` of regular file `inode`.
    fn zero_range(
        &self,
        inode: &mut Inode,
        off: u64,
        end: u64,
        keep_size: bool,
    ) -> Result<(), Errno> {
        let size = inode.attr.size;
        let limit = if keep_size { end.min(size) } else { end };
        // Past the end of a file kept at its size every byte already reads as
        // zero (its only blocks there are allocated zeros): only its holes are
        // allocated, from past the page that holds the end (the pass inside the
        // size allocates that one).
        let past = if keep_size && end > size {
            let from = if off < size {
                size.div_ceil(BLOCK) * BLOCK
            } else {
                off
            };
            holes(inode, from, end)
        } else {
            Vec::new()
        };
        // The range's holes end allocated (its pages are freed by the zeroing
        // before they are allocated again): refused before anything is zeroed when
        // the room is plainly not there (a zero-range of 1 GiB on a 1 GiB store
        // left the file 1 GiB long and the store full).
        let need: u64 = holes(inode, off, limit)
            .iter()
            .chain(&past)
            .map(|&(a, b)| pages(a, b))
            .sum();
        if self.data_room() < need {
            return Err(Errno::ENOSPC);
        }
        let new_size = (!keep_size && end > size).then_some(end);
        self.zero_and_resize(inode, off, limit, new_size)?;
        for (from, to) in holes(inode, off, limit.min(inode.attr.size)) {
            self.zero_hole(inode, from, to, true)?;
        }
        for (from, to) in past {
            self.zero_hole(inode, from, to, false)?;
        }
        Ok(())
    }

    /// [`Falloc::PunchHole`] on `[off, end)` of regular file `inode`.
    fn punch_hole(&self, inode: &mut Inode, off: u64, end: u64) -> Result<(), Errno> {
        let size = inode.attr.size;
        self.zero_and_resize(inode, off, end.min(size), None)?;
        // Whole pages of the range past the end: unseen zeros, given back.
        let (first, last) = (off.max(size).div_ceil(BLOCK), end / BLOCK);
        let Content::File(pages) = &inode.content else {
            unreachable!("a regular file")
        };
        if first < last && pages.range(first..last).next().is_some() {
            let punch = Entry::Punch {
                pgoff: first,
                count: last - first,
            };
            self.commit_change(inode, &[punch])?;
        }
        Ok(())
    }

    /// Allocates zeroed blocks for the hole `[from, to)` of `inode`, in steps of [`ZEROS`];
    /// the size grows to `to` on the way with `grow`, and stays as it is without.
    fn zero_hole(&self, inode: &mut Inode, from: u64, to: u64, grow: bool) -> Result<(), Errno> {
        static ZERO: [u8; ZEROS] = [0; ZEROS];
        let mut at = from;
        while at < to {
            let n = ((to - at) as usize).min(ZEROS);
            self.write_sized(inode, at, &ZERO[..n], Order::Sync, grow)?;
            at += n as u64;
        }
        Ok(())
    }

    /// In one commit: makes `[from, to)` of `inode` read as zeros (its whole pages become
    /// holes, the covered parts of its edge pages are zeroed in copies) and sets the size to
    /// `new_size` if one is given; mtime and ctime change.
    fn zero_and_resize(
        &self,
        inode: &mut Inode,
        from: u64,
        to: u64,
        new_size: Option<u64>,
    ) -> Result<(), Errno> {
        let t = now_ns();
        let mut entries = Vec::new();
        let mut fresh: Vec<Extent> = Vec::new();
        let give_back = |this: &Self, fresh: &[Extent]| {
            for e in fresh {
                this.space.free(*e);
            }
        };
        if from < to {
            let (first_whole, end_whole) = (from.div_ceil(BLOCK), to / BLOCK);
            let mut edges = Vec::new();
            if first_whole > end_whole {
                edges.push((from, to));
            } else {
                if !from.is_multiple_of(BLOCK) {
                    edges.push((from, first_whole * BLOCK));
                }
                if !to.is_multiple_of(BLOCK) {
                    edges.push((end_whole * BLOCK, to));
                }
            }
            let Content::File(pages) = &inode.content else {
                unreachable!("a regular file")
            };
            for (a, b) in edges {
                let pg = a / BLOCK;
                let Some(&old) = pages.get(&pg) else {
                    continue; // a hole already reads as zeros
                };
                let e = match self.space.alloc_data(1) {
                    Ok(e) => e[0],
                    Err(err) => {
                        give_back(self, &fresh);
                        return Err(err);
                    }
                };
                let mut page = [0u8; BLOCK as usize];
                page.copy_from_slice(self.pm.bytes(old * BLOCK, BLOCK));
                page[(a % BLOCK) as usize..(b - pg * BLOCK) as usize].fill(0);
                self.pm.write_held(Held::Data, e.start * BLOCK, &page);
                fresh.push(e);
                entries.push(Entry::Write {
                    pgoff: pg,
                    block: e.start,
                    count: 1,
                    size: inode.attr.size,
                    mtime: t,
                    seq: None,
                });
            }
            if end_whole > first_whole && pages.range(first_whole..end_whole).next().is_some() {
                entries.push(Entry::Punch {
                    pgoff: first_whole,
                    count: end_whole - first_whole,
                });
            }
        }
        if entries.is_empty() && new_size.is_none() {
            return Ok(());
        }
        let mut attr = inode.attr;
        if let Some(n) = new_size {
            attr.size = n;
        }
        attr.mtime = t;
        attr.ctime = t;
        entries.push(Entry::Attr(attr));
        self.commit_change(inode, &entries)
            .inspect_err(|_| give_back(self, &fresh))
    }
}

/// Pages `[from, to)` touches.
fn pages(from: u64, to: u64) -> u64 {
    if to <= from {
        return 0;
    }
    to.div_ceil(BLOCK) - from / BLOCK
}

/// The byte ranges of `[from, to)` that fall in holes of `inode` (whole unmapped pages,
/// clipped to the range), merged where they touch.
fn holes(inode: &Inode, from: u64, to: u64) -> Vec<(u64, u64)> {
    let Content::File(pages) = &inode.content else {
        return Vec::new();
    };
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut pg = from / BLOCK;
    while pg * BLOCK < to {
        if !pages.contains_key(&pg) {
            let (a, b) = ((pg * BLOCK).max(from), ((pg + 1) * BLOCK).min(to));
            match out.last_mut() {
                Some(last) if last.1 == a => last.1 = b,
                _ => out.push((a, b)),
            }
        }
        pg += 1;
    }
    out
}
