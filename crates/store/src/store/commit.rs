//! The commit points: an 8-byte tail store for one inode, the undo journal for several; on
//! page media, records in the commit ring for both ([`super::writeback`]). Every change a
//! reader can see becomes durable here and nowhere else.

use std::collections::BTreeMap;

use super::log::Appended;
use super::{Guard, Store};
use crate::error::Errno;
use crate::format::{encode_journal, Entry, BLOCK, JOURNAL_CAPACITY};
use crate::inode::Inode;

impl Store {
    /// Commits appended entries of one inode: the 8-byte tail store is the commit point.
    pub(crate) fn commit_one(
        &self,
        inode: &mut Inode,
        a: Appended,
        entries: &[Entry],
        freed: &mut Vec<u64>,
    ) {
        self.pm.fence();
        let tail = (self.slot_offset(inode.ino) + 8, a.tail);
        match self.page_commit() {
            Some(ring) => ring.commit(&[tail]),
            None => {
                self.pm.store_u64(tail.0, tail.1);
                self.pm.fence();
            }
        }
        self.changes.bump(inode.ino);
        self.applied(inode, a, entries, freed);
    }

    /// Commits several inodes' words at once through the undo journal, then moves the
    /// change words of the inodes in `changed` (those whose visible state the words change:
    /// clients' caches of them must not outlive the commit).
    pub(super) fn commit_words(&self, words: &[(u64, u64)], changed: &[u64]) {
        assert!(words.len() <= JOURNAL_CAPACITY);
        if let Some(ring) = self.page_commit() {
            // Page media: the ring's records are the commit point, all or none.
            self.pm.fence();
            ring.commit(words);
            for &ino in changed {
                self.changes.bump(ino);
            }
            return;
        }
        let mut seq = self.journal.lock();
        *seq += 1;
        let jb = self.geo.journal_block * BLOCK;
        let old: Vec<(u64, u64)> = words
            .iter()
            .map(|&(o, _)| (o, self.pm.load_u64(o)))
            .collect();
        // Every appended entry and page is durable before the journal makes them reachable.
        self.pm.fence();
        self.pm.write(jb, &encode_journal(*seq, &old));
        self.pm.fence();
        for &(o, v) in words {
            self.pm.store_u64(o, v);
        }
        self.pm.fence();
        self.pm.store_u64(jb, 0);
        self.pm.fence();
        drop(seq);
        for &ino in changed {
            self.changes.bump(ino);
        }
    }

    /// Frees data blocks `inode` no longer maps, or parks them until its asynchronous reads in
    /// flight finish.
    /// Appends `entries` to `inode`'s log and commits them (one inode's change), then gives
    /// back the blocks they unmapped and compacts the log if it is due.
    pub(crate) fn commit_change(&self, inode: &mut Inode, entries: &[Entry]) -> Result<(), Errno> {
        let a = self.append_log(inode, entries)?;
        let mut freed = Vec::new();
        self.commit_one(inode, a, entries, &mut freed);
        self.retire(inode, freed);
        self.maybe_compact(inode);
        Ok(())
    }

    /// Appends each inode's entries in `changes` (all locked in `locks`), then commits every
    /// new tail, with the `extra` slot words, through one journal transaction. Returns the
    /// blocks the entries unmapped. Nothing is committed if an append fails.
    pub(super) fn commit_many(
        &self,
        locks: &mut BTreeMap<u64, Guard<'_>>,
        changes: &BTreeMap<u64, Vec<Entry>>,
        extra: &[(u64, u64)],
    ) -> Result<Vec<u64>, Errno> {
        let mut appended: BTreeMap<u64, Appended> = BTreeMap::new();
        for (&i, es) in changes {
            match self.append_log(locks[&i].as_ref().expect("locked live"), es) {
                Ok(a) => {
                    appended.insert(i, a);
                }
                Err(e) => {
                    for a in appended.into_values() {
                        self.discard(a);
                    }
                    return Err(e);
                }
            }
        }
        let mut words: Vec<(u64, u64)> = appended
            .iter()
            .map(|(&i, a)| (self.slot_offset(i) + 8, a.tail))
            .collect();
        words.extend_from_slice(extra);
        let changed: Vec<u64> = appended.keys().copied().collect();
        self.commit_words(&words, &changed);
        let mut freed = Vec::new();
        for (i, a) in appended {
            let inode = locks
                .get_mut(&i)
                .and_then(|g| g.as_mut())
                .expect("locked live");
            self.applied(inode, a, &changes[&i], &mut freed);
        }
        Ok(freed)
    }
}
