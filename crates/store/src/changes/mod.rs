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

//!
//! The table may be *mirrored* into memory other processes map ([`Changes::mirror`]): every
//! bump then raises the mirrored word too, before any block is freed, so a reader that maps
//! the mirror checks a word without asking anyone (a remote client on the same host).

use crate::sync::{AtomicU64, Ordering, RwLock};

/// Words in the table (512 KiB): the bucket of inode `ino` is `ino % CHANGE_WORDS`.
#[cfg(not(shuttle))]
pub const CHANGE_WORDS: usize = 1 << 16;
/// Words in the table, few under the model checker (`changes::model`), whose every atomic
/// operation is a scheduling point.
#[cfg(shuttle)]
pub const CHANGE_WORDS: usize = 4;

/// The change words of one mounted store (DRAM; nothing here is persistent).
pub struct Changes {
    words: Box<[AtomicU64]>,
    /// The mirror's first word, while there is one ([`Changes::mirror`]).
    mirror: RwLock<Option<Mirror>>,
}

/// A mirror's first word.
struct Mirror(*const AtomicU64);

// SAFETY: the pointer names `CHANGE_WORDS` atomics that `Changes::mirror`'s caller keeps
// valid until `unmirror`; they are only used through atomic operations, from any thread.
unsafe impl Send for Mirror {}
// SAFETY: as above.
unsafe impl Sync for Mirror {}

impl Default for Changes {
    fn default() -> Self {
        Changes {
            words: (0..CHANGE_WORDS).map(|_| AtomicU64::new(0)).collect(),
            mirror: RwLock::new(None),
        }
    }
}

impl Changes {
    /// The bucket of `ino`.
    pub fn index(ino: u64) -> usize {
        (ino % CHANGE_WORDS as u64) as usize
    }

    /// Notes a change of `ino` (before any block it unmapped is freed), in the mirror too.
    pub(crate) fn bump(&self, ino: u64) {
        let i = Changes::index(ino);
        let now = self.words[i].fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(m) = &*self.mirror.read() {
            // SAFETY: `i` is inside the mirror's `CHANGE_WORDS` words, valid while it is set
            // (`mirror`'s contract). A mirrored word only rises: two bumps of one word may
            // reach it in either order.
            unsafe { &*m.0.add(i) }.fetch_max(now, Ordering::SeqCst);
        }
    }

    /// Mirrors the table at `at`: copies every word there now, and from then on each bump
    /// raises the mirrored word as well, after its own and before any block is freed, until
    /// [`Changes::unmirror`]. A mirrored word is never above the table's, and never falls, so
    /// a reader that took a word from the table (with a map, under the inode's lock) and
    /// finds the same value in the mirror after reading blocks read them unchanged.
    ///
    /// # Safety
    /// `at` must be 8-byte aligned and valid for atomic reads and writes of
    /// `CHANGE_WORDS` `u64`s until `unmirror` returns or the table is dropped, and written by
    /// nothing else meanwhile.
    pub unsafe fn mirror(&self, at: *mut u8) {
        let mut m = self.mirror.write();
        let words = at as *const AtomicU64;
        for (i, w) in self.words.iter().enumerate() {
            // SAFETY: inside the range the caller vouches for; bumps wait for this lock.
            unsafe { &*words.add(i) }.store(w.load(Ordering::SeqCst), Ordering::SeqCst);
        }
        *m = Some(Mirror(words));
    }

    /// Ends the mirror: once this returns, no bump writes there again.
    pub fn unmirror(&self) {
        *self.mirror.write() = None;
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

#[cfg(all(test, shuttle))]
mod model;

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::*;

    /// Memory for a mirror: `CHANGE_WORDS` aligned words.
    fn memory() -> Box<[AtomicU64]> {
        (0..CHANGE_WORDS)
            .map(|_| AtomicU64::new(u64::MAX))
            .collect()
    }

    fn at(m: &[AtomicU64], ino: u64) -> u64 {
        m[Changes::index(ino)].load(Ordering::SeqCst)
    }

    #[test]
    fn a_mirror_starts_as_the_table_and_follows_every_bump_until_it_ends() {
        let c = Changes::default();
        c.bump(3);
        c.bump(3);
        c.bump(CHANGE_WORDS as u64 + 5);
        let m = memory();
        // SAFETY: `m` holds the table's words and outlives the mirror (ended below).
        unsafe { c.mirror(m.as_ptr() as *mut u8) };
        assert_eq!((at(&m, 3), at(&m, 5), at(&m, 7)), (2, 1, 0), "copied");
        c.bump(5);
        assert_eq!(at(&m, 5), c.word(5));
        c.unmirror();
        c.bump(5);
        assert_eq!((at(&m, 5), c.word(5)), (2, 3), "ended");
    }
}
