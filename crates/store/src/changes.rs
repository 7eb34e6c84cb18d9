//! Change words: a fixed table of counters, one per bucket of inode numbers, that lets a
//! reader outside the store's locks check that what it read is still what an inode holds.
//!
//! The store bumps an inode's word after every commit that changes the inode and before it
//! frees any block the inode no longer maps. A reader that is not under the inode's lock — a
//! remote client reading data blocks one-sided — takes the word with the extent map (under the
//! lock), reads the blocks, and then reads the word again: unchanged means no commit touched
//! the inode in between, so the blocks it read were still the inode's and unchanged (data is
//! copy-on-write, and a block is freed, and so can be reused, only after the bump). Several
//! inodes share a word (`ino % CHANGE_WORDS`): a change of one makes readers of the others
//! read again, never accept a stale read.

use std::sync::atomic::{AtomicU64, Ordering};

/// Words in the table (512 KiB): the bucket of inode `ino` is `ino % CHANGE_WORDS`.
pub const CHANGE_WORDS: usize = 1 << 16;

/// The change words of one mounted store (DRAM; nothing here is persistent).
pub struct Changes {
    words: Box<[AtomicU64]>,
}

impl Default for Changes {
    fn default() -> Self {
        Changes {
            words: (0..CHANGE_WORDS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Changes {
    /// The bucket of `ino`.
    pub fn index(ino: u64) -> usize {
        (ino % CHANGE_WORDS as u64) as usize
    }

    /// Notes a change of `ino` (before any block it unmapped is freed).
    pub(crate) fn bump(&self, ino: u64) {
        self.words[Changes::index(ino)].fetch_add(1, Ordering::SeqCst);
    }

    /// The word of `ino` now.
    pub fn word(&self, ino: u64) -> u64 {
        self.words[Changes::index(ino)].load(Ordering::SeqCst)
    }

    /// The table's first byte and its length in bytes, for registering it with a transport
    /// (peers read words as little-endian `u64`s at `index * 8`).
    pub fn bytes(&self) -> (*const u8, usize) {
        (self.words.as_ptr().cast(), self.words.len() * 8)
    }
}
