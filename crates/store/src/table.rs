//! The DRAM inode table and the free inode numbers, sized by what is used, not by capacity.
//!
//! A store has one inode slot per 16 KiB of region: 64 million for 1 TiB. Keeping a lock, an
//! inode, a load flag and a hold count for every slot up front would take gigabytes before a
//! single file exists, so the table is cut into chunks of [`CHUNK`] slots, each allocated the
//! first time one of its slots is touched. A slot not yet loaded is read from media on first
//! use: its head word says whether it is free, else its log is read (under its write lock).
//! Free numbers are kept as a list of those below a high-water mark plus the mark itself:
//! every slot from the mark up is free, so an empty store's free numbers take no memory.

use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::OnceLock;

use parking_lot::RwLock;

use crate::inode::Inode;

/// One inode slot: its inode while it has one.
pub(crate) type Slot = RwLock<Option<Inode>>;

/// Slots per chunk.
pub(crate) const CHUNK: u64 = 256;

/// A chunk's slots with their load flags and hold counts.
struct Chunk {
    slots: Box<[Slot]>,
    /// `loaded[i]`: the slot holds its inode or is known free. Otherwise it is read from
    /// media on first use.
    loaded: Box<[AtomicBool]>,
    /// References a front end holds on each inode (the kernel's lookup count).
    holds: Box<[AtomicU32]>,
}

impl Chunk {
    fn new() -> Chunk {
        Chunk {
            slots: (0..CHUNK).map(|_| RwLock::new(None)).collect(),
            loaded: (0..CHUNK).map(|_| AtomicBool::new(false)).collect(),
            holds: (0..CHUNK).map(|_| AtomicU32::new(0)).collect(),
        }
    }
}

/// The inode table of a mounted store.
pub(crate) struct Table {
    chunks: Box<[OnceLock<Chunk>]>,
}

impl Table {
    /// A table of `slots` slots, none allocated, every slot to be read from media.
    pub(crate) fn new(slots: u64) -> Table {
        Table {
            chunks: (0..slots.div_ceil(CHUNK))
                .map(|_| OnceLock::new())
                .collect(),
        }
    }

    fn chunk(&self, ino: u64) -> (&Chunk, usize) {
        let c = self.chunks[(ino / CHUNK) as usize].get_or_init(Chunk::new);
        (c, (ino % CHUNK) as usize)
    }

    /// Inode `ino`'s slot and whether it holds its inode or is known free (`ino` must be
    /// below the table's length): one chunk lookup for both.
    pub(crate) fn entry(&self, ino: u64) -> (&Slot, &AtomicBool) {
        let (c, i) = self.chunk(ino);
        (&c.slots[i], &c.loaded[i])
    }

    /// The holds on inode `ino`.
    pub(crate) fn holds(&self, ino: u64) -> &AtomicU32 {
        let (c, i) = self.chunk(ino);
        &c.holds[i]
    }

    /// Every slot of every allocated chunk with its number and load flag: the only slots
    /// that can hold an inode in DRAM.
    pub(crate) fn allocated(&self) -> impl Iterator<Item = (u64, &Slot, &AtomicBool)> {
        self.chunks.iter().enumerate().flat_map(|(k, c)| {
            c.get().into_iter().flat_map(move |c| {
                c.slots
                    .iter()
                    .zip(c.loaded.iter())
                    .enumerate()
                    .map(move |(i, (s, l))| (k as u64 * CHUNK + i as u64, s, l))
            })
        })
    }
}

/// Free inode numbers: a list of those below the mark, and every number from the mark to
/// the end of the table.
#[derive(Debug)]
pub(crate) struct FreeInodes {
    list: Vec<u64>,
    mark: u64,
    end: u64,
}

impl FreeInodes {
    /// The free numbers of a table of `end` slots whose slots `in_use` (ascending) hold
    /// inodes; numbers below `first` are never given out.
    pub(crate) fn new(first: u64, end: u64, in_use: impl IntoIterator<Item = u64>) -> FreeInodes {
        let mut list = Vec::new();
        let mut next = first;
        for ino in in_use {
            if ino < first {
                continue;
            }
            // Lowest numbers are given out first: push them last.
            list.extend(next..ino);
            next = ino + 1;
        }
        list.reverse();
        FreeInodes {
            list,
            mark: next,
            end,
        }
    }

    /// Takes a free number: the last one given back, else the mark.
    pub(crate) fn take(&mut self) -> Option<u64> {
        self.list.pop().or_else(|| {
            (self.mark < self.end).then(|| {
                self.mark += 1;
                self.mark - 1
            })
        })
    }

    /// Gives number `ino` back.
    pub(crate) fn give(&mut self, ino: u64) {
        self.list.push(ino);
    }

    /// How many numbers are free.
    pub(crate) fn count(&self) -> u64 {
        self.list.len() as u64 + (self.end - self.mark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_numbers_come_lowest_first_and_back_last_in_first_out() {
        let mut f = FreeInodes::new(2, 10, [1, 3, 4, 7]);
        assert_eq!(f.count(), 5); // 2, 5, 6, 8, 9
        assert_eq!(
            (f.take(), f.take(), f.take(), f.take()),
            (Some(2), Some(5), Some(6), Some(8))
        );
        f.give(5);
        assert_eq!((f.take(), f.take(), f.take()), (Some(5), Some(9), None));
        assert_eq!(f.count(), 0);
    }

    #[test]
    fn chunks_are_allocated_on_first_touch() {
        let t = Table::new(10 * CHUNK);
        assert_eq!(t.allocated().count(), 0);
        *t.entry(3 * CHUNK + 5).0.write() = None;
        let seen: Vec<u64> = t.allocated().map(|(i, _, _)| i).collect();
        assert_eq!(seen, (3 * CHUNK..4 * CHUNK).collect::<Vec<_>>());
    }
}
