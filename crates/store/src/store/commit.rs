//! The store's side of its commit points: which words a change commits and whose change words
//! move with them, and the durability API (`sync`, `fsync`, the sync policy). How the words
//! commit — the tail store, the undo journal, the page-media ring — is [`crate::commits`].

use std::collections::BTreeMap;

use switchyard_media::Granularity;

use super::log::Appended;
use super::{Guard, Store};
use crate::commits::SyncPolicy;
use crate::error::{Errno, Error, Op};
use crate::format::{Entry, ROOT};
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
        self.commits
            .commit_word(&self.pm, self.slot_offset(inode.ino) + 8, a.tail);
        self.changes.bump(inode.ino);
        self.applied(inode, a, entries, freed);
    }

    /// Commits several inodes' words at once through the undo journal, then moves the
    /// change words of the inodes in `changed` (those whose visible state the words change:
    /// clients' caches of them must not outlive the commit).
    pub(super) fn commit_words(&self, words: &[(u64, u64)], changed: &[u64]) {
        self.commits.commit_words(&self.pm, words);
        for &ino in changed {
            self.changes.bump(ino);
        }
    }

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

    /// What survives a power cut on this store's medium, and what makes an operation
    /// survive it.
    pub fn granularity(&self) -> Granularity {
        self.region().granularity()
    }

    /// When this store writes what returned to its disk (page media; see [`SyncPolicy`]).
    pub fn sync_policy(&self) -> SyncPolicy {
        self.commits.policy()
    }

    /// Sets when this store writes what returned to its disk. Switching to
    /// [`SyncPolicy::Always`] syncs at once.
    pub fn set_sync_policy(&self, policy: SyncPolicy) -> Result<(), Error> {
        self.commits
            .set_policy(policy)
            .map_err(Error::on(Op::Fsync, ROOT))
    }

    /// Injects the ordering bug the page-media crash mode must catch: each sync writes its
    /// anchor before it writes the region back.
    #[cfg(feature = "testing")]
    pub fn inject_anchor_first(&self) {
        self.commits.inject_anchor_first();
    }

    /// Syncs completed since mount (page media; 0 elsewhere).
    pub fn syncs(&self) -> u64 {
        self.commits.syncs()
    }

    /// Makes every operation that returned before the call durable on the medium (`syncfs`):
    /// on page media a sync (`msync`, then the ring's anchor); elsewhere nothing is needed.
    /// `EIO` if the disk refused a write (the store then refuses further syncs: what it holds
    /// on the disk is no longer known).
    pub fn sync(&self) -> Result<(), Error> {
        self.commits.sync().map_err(Error::on(Op::Fsync, ROOT))
    }

    /// Waits for `ino`'s asynchronous write, if one is still copying, then makes every
    /// operation that returned durable on the medium, as [`Store::sync`]: the file's data,
    /// its attributes and the directory entries that name it among them.
    pub fn fsync(&self, ino: u64) -> Result<(), Error> {
        (|| -> Result<(), Errno> {
            let g = self.lock(ino)?;
            g.as_ref().map(|_| ()).ok_or(Errno::ENOENT)
        })()
        .map_err(Error::on(Op::Fsync, ino))?;
        self.commits.sync().map_err(Error::on(Op::Fsync, ino))
    }

    /// Whether commits go through the page-media ring (which the asynchronous API's
    /// orderless writes cannot use).
    pub(crate) fn on_page_media(&self) -> bool {
        self.commits.on_page_media()
    }
}
