//! The commit points of the inode table's words — an inode slot's head, tail and generation —
//! and what makes them durable. Every change a reader can see becomes durable through
//! [`Commits`] and nowhere else; the store decides which words a change moves, this module how
//! they move:
//!
//! - on cache-line media one word commits by one 8-byte store (a log's tail), several at
//!   once through the undo journal: the old values, then the new ones, then the journal
//!   cleared, each step fenced;
//! - on page media ([`Granularity::Page`]) the words are records appended to the commit ring,
//!   and a sync makes them durable ([`writeback`]); the table lags behind the ring, so the
//!   words are read back through [`Commits::load`].
//!
//! Who may call: a caller commits words only of inodes it has locked (the store's locking
//! rules); the journal's own lock orders transactions against each other.

mod writeback;

pub(crate) use writeback::replay_ring;
pub use writeback::SyncPolicy;

use std::sync::Arc;

use parking_lot::Mutex;
use switchyard_media::{Granularity, Region};

use crate::alloc::Allocator;
use crate::error::Errno;
use crate::format::{encode_journal, Superblock, BLOCK, JOURNAL_CAPACITY};
use crate::pm::Pm;
use writeback::Writer;

/// The commit points of one mounted store: the undo journal, and on page media the commit
/// ring with its background writer. It writes through the store's media boundary, passed to
/// each call (the crash harness wraps that boundary in place, so nothing else may share it on
/// cache-line media). Dropping it stops the writer (the ring stays on the
/// disk for the next mount to replay); [`Commits::stop_writeback`] retires it cleanly.
pub(crate) struct Commits {
    /// Region offset of the journal block (the ring's anchor on page media).
    journal_at: u64,
    /// The journal's last sequence number; its lock makes transactions one at a time.
    journal: Mutex<u64>,
    /// Page media only, once started.
    writer: Option<Writer>,
}

impl Commits {
    /// The commit points of a store with geometry `sb`, storing words in place (the page-media
    /// ring starts with [`Commits::start_writeback`]).
    pub(crate) fn new(sb: &Superblock) -> Commits {
        Commits {
            journal_at: sb.journal_block * BLOCK,
            journal: Mutex::new(0),
            writer: None,
        }
    }

    /// On page media, starts the ring (its blocks taken from `alloc`) and the background
    /// writer, after syncing what recovery wrote: from here on the table changes only through
    /// records. Nothing to do on other media.
    pub(crate) fn start_writeback(
        &mut self,
        pm: &Arc<Pm>,
        alloc: &Arc<Allocator>,
        region: &Region,
        sb: &Superblock,
    ) -> Result<(), Errno> {
        if region.granularity() == Granularity::Page {
            self.writer = Some(Writer::start(pm.clone(), alloc, region, sb)?);
        }
        Ok(())
    }

    /// On page media, stops the background writer, makes everything durable and applied in
    /// place, and clears the ring (a clean unmount, before its checkpoint).
    pub(crate) fn stop_writeback(&mut self) -> Result<(), Errno> {
        match self.writer.take() {
            Some(w) => w.retire(),
            None => Ok(()),
        }
    }

    /// Stops the background writer, if any, leaving the ring as it is (the region is handed
    /// back after a clean unmount retired it, or as a crash leaves it).
    pub(crate) fn drop_writeback(&mut self) {
        self.writer = None;
    }

    /// Commits one word (a log's tail): after a fence that makes everything it names durable,
    /// one 8-byte store, fenced — or on page media one record.
    pub(crate) fn commit_word(&self, pm: &Pm, off: u64, value: u64) {
        pm.fence();
        match &self.writer {
            Some(w) => w.commit(&[(off, value)]),
            None => {
                pm.store_u64(off, value);
                pm.fence();
            }
        }
    }

    /// Commits several words at once, all or none after a crash: through the undo journal, or
    /// on page media as one commit's records. At most [`JOURNAL_CAPACITY`] words.
    pub(crate) fn commit_words(&self, pm: &Pm, words: &[(u64, u64)]) {
        assert!(words.len() <= JOURNAL_CAPACITY);
        if let Some(w) = &self.writer {
            // Page media: the ring's records are the commit point, all or none.
            pm.fence();
            w.commit(words);
            return;
        }
        let mut seq = self.journal.lock();
        *seq += 1;
        let jb = self.journal_at;
        let old: Vec<(u64, u64)> = words.iter().map(|&(o, _)| (o, pm.load_u64(o))).collect();
        // Every appended entry and page is durable before the journal makes them reachable.
        pm.fence();
        pm.write(jb, &encode_journal(*seq, &old));
        pm.fence();
        for &(o, v) in words {
            pm.store_u64(o, v);
        }
        pm.fence();
        pm.store_u64(jb, 0);
        pm.fence();
    }

    /// The word at `off` of the inode table as last committed (on page media the table lags
    /// behind the ring until a sync applies it).
    pub(crate) fn load(&self, pm: &Pm, off: u64) -> u64 {
        self.writer
            .as_ref()
            .and_then(|w| w.word(off))
            .unwrap_or_else(|| pm.load_u64(off))
    }

    /// Whether commits go through the page-media ring.
    pub(crate) fn on_page_media(&self) -> bool {
        self.writer.is_some()
    }

    /// Whether a sync failed (the disk refused a write): the store then refuses changes.
    pub(crate) fn failed(&self) -> bool {
        self.writer.as_ref().is_some_and(Writer::failed)
    }

    /// The sync policy in force (the default off page media, where none applies).
    pub(crate) fn policy(&self) -> SyncPolicy {
        self.writer
            .as_ref()
            .map_or_else(SyncPolicy::default, Writer::policy)
    }

    /// Sets the sync policy; switching to [`SyncPolicy::Always`] syncs at once.
    pub(crate) fn set_policy(&self, policy: SyncPolicy) -> Result<(), Errno> {
        match &self.writer {
            Some(w) => {
                w.set_policy(policy);
                if policy == SyncPolicy::Always {
                    return w.sync();
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Syncs completed since mount (0 off page media).
    pub(crate) fn syncs(&self) -> u64 {
        self.writer.as_ref().map_or(0, Writer::syncs)
    }

    /// Makes every commit so far durable on the medium: a sync on page media, nothing
    /// elsewhere (every commit is durable when it returns).
    pub(crate) fn sync(&self) -> Result<(), Errno> {
        match &self.writer {
            Some(w) => w.sync(),
            None => Ok(()),
        }
    }

    /// Injects the ordering bug the page-media crash mode must catch: each sync writes its
    /// anchor before it writes the region back.
    #[cfg(feature = "testing")]
    pub(crate) fn inject_anchor_first(&self) {
        if let Some(w) = &self.writer {
            w.inject_anchor_first();
        }
    }
}
