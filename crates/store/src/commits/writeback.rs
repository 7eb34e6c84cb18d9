//! Page-media writeback: what makes a store on a page-cache file survive a power cut.
//!
//! On such a region ([`Granularity::Page`](switchyard_media::Granularity::Page)) flush + fence
//! only reach the page cache, and the kernel writes dirty pages to the disk whenever it likes,
//! in any order. Three rules keep every image a power cut can leave recoverable to the last
//! completed sync:
//!
//! 1. **Nothing durable is overwritten in place between syncs.** Log entries go past the
//!    tails and data into fresh blocks, as everywhere; the only words the store changes in
//!    place — an inode slot's head, tail and generation — are not stored into the table at
//!    commit but appended as records to the commit ring ([`crate::format::Anchor`]), and
//!    applied to the table only once a sync has made them durable.
//! 2. **A sync orders the disk:** it notes the ring's end, writes the whole region back
//!    (`msync`: the data, the log entries and the records up to that end, and the words
//!    applied in place after the sync before), and only then writes the anchor that says
//!    those records are durable, and syncs it. Recovery after a power cut applies the
//!    durable records and ignores the rest; what they commit reached the disk before them.
//! 3. **A freed block is not taken again until the sync that frees it completes**
//!    ([`crate::alloc::Allocator::defer_frees`]): the durable image may still map it.
//!
//! A crash of the owner alone loses nothing: the page cache still holds every record, and a
//! mount that finds the page cache its anchor names ([`Region::cache_identity`]) applies
//! every whole commit the ring holds.
//!
//! A background writer syncs at the configured interval ([`SyncPolicy::Interval`], 5 s like
//! ext4's commit); `fsync`, `fdatasync` and `syncfs` sync at once, one sync serving every
//! caller that waits on it; [`SyncPolicy::Always`] syncs before every operation returns.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use switchyard_media::{Region, Syncer};

use crate::alloc::{Allocator, Extent};
use crate::error::{Corruption, Errno};
use crate::format::{Anchor, Superblock, BLOCK, JOURNAL_CAPACITY, RECORD};
use crate::pm::Pm;
use crate::store::now_ns;

/// When a store on page media ([`Granularity::Page`](switchyard_media::Granularity::Page)) writes
/// what returned to its disk. Other media ignore it: on cache-line media every operation is durable
/// when it returns, and on volatile media nothing survives a power cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// A background writer syncs at this interval; `fsync`, `fdatasync` and `syncfs` sync at
    /// once. After a power cut the store holds every operation up to its last sync.
    Interval(Duration),
    /// Every operation is on the disk when it returns (persistent-memory semantics on a disk
    /// file, at a sync per operation).
    Always,
}

impl Default for SyncPolicy {
    /// Every 5 seconds, as ext4 commits.
    fn default() -> Self {
        SyncPolicy::Interval(Duration::from_secs(5))
    }
}

impl std::fmt::Display for SyncPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyncPolicy::Interval(d) => write!(f, "every {} ms, and on fsync", d.as_millis()),
            SyncPolicy::Always => f.write_str("always (before every operation returns)"),
        }
    }
}

/// The ring as this mount runs it.
struct Ring {
    /// Geometry and nonce; `applied` and `durable` as the anchor on the disk says.
    anchor: Anchor,
    /// The next record's sequence number.
    next: u64,
    /// Records below this one are applied to the inode table in memory.
    applied: u64,
    /// Records not yet applied to the table, oldest first: (seq, offset, value).
    pending: VecDeque<(u64, u64, u64)>,
    /// The newest pending value of each word, with its record's sequence number.
    words: HashMap<u64, (u64, u64)>,
}

/// The page-media writer of one mounted store (shared with its background thread).
struct Writeback {
    pm: Arc<Pm>,
    alloc: Arc<Allocator>,
    syncer: Syncer,
    len: u64,
    /// Region offset of the journal block (the anchor's place).
    anchor_at: u64,
    ring: Mutex<Ring>,
    /// One sync at a time.
    syncing: Mutex<()>,
    /// Records below this sequence number are durable.
    durable: AtomicU64,
    policy: Mutex<SyncPolicy>,
    /// Whether `policy` is [`SyncPolicy::Always`] (what every commit asks).
    always: AtomicBool,
    /// Wakes the background writer early (a filling ring, a new policy, the unmount).
    wake: (Mutex<bool>, Condvar),
    stop: AtomicBool,
    /// Set when a sync failed: the disk may not hold what the store said it did.
    failed: AtomicBool,
    syncs: AtomicU64,
    /// The injected ordering bug (feature `testing`): the anchor is written and synced before
    /// the region, so it can say records are durable that are not on the disk.
    #[cfg(feature = "testing")]
    anchor_first: AtomicBool,
}

impl Writeback {
    /// Starts the ring in `ring` (blocks taken from `alloc`) after syncing what recovery
    /// wrote: from here on the table changes only through records.
    fn start(
        pm: Arc<Pm>,
        alloc: Arc<Allocator>,
        region: &Region,
        sb: &Superblock,
        ring: Extent,
    ) -> Result<Arc<Writeback>, Errno> {
        let syncer = pm.syncer();
        let io = |_| Errno::EIO;
        pm.barrier().map_err(io)?;
        let nonce = sb.mount_count.rotate_left(32) ^ now_ns() as u64 ^ region.cache_identity();
        let anchor = Anchor {
            identity: region.cache_identity(),
            nonce,
            ring_block: ring.start,
            ring_blocks: ring.len,
            applied: 0,
            durable: 0,
        };
        let anchor_at = sb.journal_block * BLOCK;
        pm.write(anchor_at, &anchor.encode());
        pm.fence();
        syncer.sync_range(anchor_at, BLOCK).map_err(io)?;
        let wb = Arc::new(Writeback {
            pm,
            alloc,
            syncer,
            len: region.len() as u64,
            anchor_at,
            ring: Mutex::new(Ring {
                anchor,
                next: 0,
                applied: 0,
                pending: VecDeque::new(),
                words: HashMap::new(),
            }),
            syncing: Mutex::new(()),
            durable: AtomicU64::new(0),
            policy: Mutex::new(SyncPolicy::default()),
            always: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
            stop: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            syncs: AtomicU64::new(0),
            #[cfg(feature = "testing")]
            anchor_first: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&wb);
        wb.alloc.defer_frees(
            true,
            Some(Box::new(move || {
                if let Some(wb) = weak.upgrade() {
                    let _ = wb.sync_for_space();
                }
            })),
        );
        Ok(wb)
    }

    /// Appends one commit's words as records: the commit point on page media. Waits for a
    /// sync when the ring is full; syncs before returning under [`SyncPolicy::Always`].
    fn commit(&self, words: &[(u64, u64)]) {
        // After a failed sync the store refuses changes (`Store::check_writable`); one that
        // was already under way commits in memory only.
        if words.is_empty() || self.failed.load(Ordering::Relaxed) {
            return;
        }
        let n = words.len() as u64;
        let mut r = self.ring.lock();
        // A record may go where one the disk's anchor no longer needs was: two syncs that
        // apply everything free the ring (the second's anchor moves past what the first
        // applied).
        while r.next + n - r.anchor.applied > r.anchor.capacity() {
            drop(r);
            if self.sync_now().is_err() {
                return;
            }
            r = self.ring.lock();
        }
        for (i, &(off, value)) in words.iter().enumerate() {
            let seq = r.next;
            let rec = r
                .anchor
                .encode_record(seq, off, value, i + 1 == words.len());
            self.pm.write(r.anchor.record_offset(seq), &rec);
            r.pending.push_back((seq, off, value));
            r.words.insert(off, (seq, value));
            r.next += 1;
        }
        let (end, half) = (r.next, r.next - r.anchor.applied > r.anchor.capacity() / 2);
        drop(r);
        if self.always.load(Ordering::Relaxed) {
            let _ = self.sync_through(end);
        } else if half {
            self.kick();
        }
    }

    /// The word at `off` as the store last committed it (the table lags behind the ring).
    fn word(&self, off: u64) -> Option<u64> {
        self.ring.lock().words.get(&off).map(|w| w.1)
    }

    /// Makes every commit so far durable on the disk.
    fn sync(&self) -> Result<(), Errno> {
        let end = self.ring.lock().next;
        self.sync_through(end)
    }

    /// One sync now that applies every durable record to the table, whatever is durable
    /// already (to free the ring).
    fn sync_now(&self) -> Result<(), Errno> {
        if self.failed.load(Ordering::Relaxed) {
            return Err(Errno::EIO);
        }
        let _one = self.syncing.lock();
        self.sync_locked(true).inspect_err(|_| {
            self.failed.store(true, Ordering::Relaxed);
        })
    }

    /// A sync for an allocation that ran short: waits for a sync under way (which gives back
    /// the blocks it took), then syncs whatever is durable already, so that every block freed
    /// before the call is free again when it returns.
    fn sync_for_space(&self) -> Result<(), Errno> {
        if self.failed.load(Ordering::Relaxed) {
            return Err(Errno::EIO);
        }
        let _one = self.syncing.lock();
        self.sync_locked(false).inspect_err(|_| {
            self.failed.store(true, Ordering::Relaxed);
        })
    }

    /// Makes the commits below record `end` durable: returns once a sync that began after
    /// they were appended has completed (the caller's own, or one it waited for).
    fn sync_through(&self, end: u64) -> Result<(), Errno> {
        if self.failed.load(Ordering::Relaxed) {
            return Err(Errno::EIO);
        }
        if self.durable.load(Ordering::Acquire) >= end {
            return Ok(());
        }
        let _one = self.syncing.lock();
        if self.durable.load(Ordering::Acquire) >= end {
            return Ok(());
        }
        self.sync_locked(false).inspect_err(|_| {
            self.failed.store(true, Ordering::Relaxed);
        })
    }

    /// One sync (the caller holds `syncing`).
    /// `apply_all`: apply every durable record to the table (else only once a quarter of the
    /// ring waits: each page of the table written in place is one more page the next sync
    /// writes back).
    fn sync_locked(&self, apply_all: bool) -> Result<(), Errno> {
        let io = |_| Errno::EIO;
        // 1. The ring's end, and the blocks freed by the commits before it.
        let (end, anchor, freed) = {
            let r = self.ring.lock();
            let anchor = Anchor {
                applied: r.applied,
                durable: r.next,
                ..r.anchor
            };
            (r.next, anchor, self.alloc.take_deferred())
        };
        #[cfg(feature = "testing")]
        let anchor_first = self.anchor_first.load(Ordering::Relaxed);
        #[cfg(not(feature = "testing"))]
        let anchor_first = false;
        let steps: [bool; 2] = if anchor_first {
            [true, false]
        } else {
            [false, true]
        };
        for write_anchor in steps {
            let synced = if write_anchor {
                // 3. Only then the anchor that says so.
                self.pm.write(self.anchor_at, &anchor.encode());
                self.pm.fence();
                self.syncer.sync_range(self.anchor_at, BLOCK)
            } else {
                // 2. Everything they commit, the records themselves, and the table words
                // applied in place by the sync before, reach the disk.
                self.pm.fence();
                self.syncer.sync_range(0, self.len)
            };
            if let Err(e) = synced {
                self.alloc.restore_deferred(freed);
                return Err(io(e));
            }
        }
        self.durable.store(end, Ordering::Release);
        // 4. The durable records go into the table (durable at the next sync, replayed from
        // the ring until then) once enough wait, and their freed blocks back to the
        // allocator.
        {
            let mut r = self.ring.lock();
            r.anchor = anchor;
            let due = apply_all || r.pending.len() as u64 > r.anchor.capacity() / 4;
            while let Some(&(seq, off, value)) = r.pending.front().filter(|_| due) {
                if seq >= end {
                    break;
                }
                self.pm.store_u64(off, value);
                r.pending.pop_front();
                if r.words.get(&off).is_some_and(|w| w.0 == seq) {
                    r.words.remove(&off);
                }
                r.applied = seq + 1;
            }
        }
        self.pm.fence();
        self.alloc.release_deferred(freed);
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Wakes the background writer.
    fn kick(&self) {
        let (m, cv) = &self.wake;
        *m.lock() = true;
        cv.notify_one();
    }

    /// The background writer: a sync every interval while commits wait, or when woken.
    fn run(self: Arc<Self>) {
        let (m, cv) = &self.wake;
        while !self.stop.load(Ordering::Acquire) {
            let interval = match *self.policy.lock() {
                SyncPolicy::Interval(d) => d,
                SyncPolicy::Always => Duration::from_secs(3600),
            };
            {
                let mut woken = m.lock();
                if !*woken {
                    cv.wait_for(&mut woken, interval);
                }
                *woken = false;
            }
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            let dirty = self.ring.lock().next > self.durable.load(Ordering::Acquire);
            if dirty {
                let _ = self.sync();
            }
        }
    }

    /// Clears the anchor once everything is applied in place and durable (a clean unmount),
    /// and gives the ring's blocks back: the store needs no ring on its disk any more.
    fn retire(&self) -> Result<(), Errno> {
        self.sync_now()?;
        // The words that sync applied in place reach the disk before the ring goes.
        self.pm.barrier().map_err(|_| Errno::EIO)?;
        self.pm.write(self.anchor_at, &[0u8; 64]);
        self.pm.fence();
        self.syncer
            .sync_range(self.anchor_at, BLOCK)
            .map_err(|_| Errno::EIO)?;
        self.alloc.defer_frees(false, None);
        self.alloc.release_deferred(self.alloc.take_deferred());
        let a = self.ring.lock().anchor;
        self.alloc.free(Extent {
            start: a.ring_block,
            len: a.ring_blocks,
        });
        Ok(())
    }
}

/// The page-media writer of one mounted store: its commit ring and the background thread
/// that syncs it. Dropping it stops the thread; [`Writer::retire`] also clears the ring.
pub(super) struct Writer {
    wb: Arc<Writeback>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Writer {
    /// Takes the ring's blocks from `alloc` (a smaller ring when the space is fragmented),
    /// starts the ring after syncing what recovery wrote, and its background writer.
    pub(super) fn start(
        pm: Arc<Pm>,
        alloc: &Arc<Allocator>,
        region: &Region,
        sb: &Superblock,
    ) -> Result<Writer, Errno> {
        let mut n = ring_blocks(sb.total_blocks - sb.data_block);
        let ring = loop {
            match alloc.alloc(n) {
                Ok(x) if x.len() == 1 => break x[0],
                Ok(x) => {
                    for e in x {
                        alloc.free(e);
                    }
                }
                Err(_) => {}
            }
            if n == MIN_RING {
                return Err(Errno::ENOSPC);
            }
            n = (n / 2).max(MIN_RING);
        };
        let wb = Writeback::start(pm, alloc.clone(), region, sb, ring)?;
        let runner = wb.clone();
        let thread = std::thread::Builder::new()
            .name("sy-writeback".into())
            .spawn(move || runner.run())
            .map_err(|_| Errno::EIO)?;
        Ok(Writer {
            wb,
            thread: Some(thread),
        })
    }

    /// Appends one commit's words as records (see [`Writeback::commit`]).
    pub(super) fn commit(&self, words: &[(u64, u64)]) {
        self.wb.commit(words);
    }

    /// The word at `off` as last committed, if a record not yet applied holds it.
    pub(super) fn word(&self, off: u64) -> Option<u64> {
        self.wb.word(off)
    }

    /// Makes every commit so far durable on the disk.
    pub(super) fn sync(&self) -> Result<(), Errno> {
        self.wb.sync()
    }

    /// The sync policy in force.
    pub(super) fn policy(&self) -> SyncPolicy {
        *self.wb.policy.lock()
    }

    /// Sets the sync policy and wakes the background writer to follow it.
    pub(super) fn set_policy(&self, policy: SyncPolicy) {
        *self.wb.policy.lock() = policy;
        self.wb
            .always
            .store(policy == SyncPolicy::Always, Ordering::Relaxed);
        self.wb.kick();
    }

    /// Whether a sync failed (the disk refused a write).
    pub(super) fn failed(&self) -> bool {
        self.wb.failed.load(Ordering::Relaxed)
    }

    /// Syncs completed since the writer started.
    pub(super) fn syncs(&self) -> u64 {
        self.wb.syncs.load(Ordering::Relaxed)
    }

    /// Injects the ordering bug: each sync writes its anchor before the region.
    #[cfg(feature = "testing")]
    pub(super) fn inject_anchor_first(&self) {
        self.wb.anchor_first.store(true, Ordering::Relaxed);
    }

    /// Stops the background writer, makes everything durable and applied in place, and
    /// clears the ring (a clean unmount, before its checkpoint).
    pub(super) fn retire(mut self) -> Result<(), Errno> {
        self.stop();
        self.wb.retire()
    }

    fn stop(&mut self) {
        self.wb.stop.store(true, Ordering::Release);
        self.wb.kick();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Blocks of the ring for a region of `zone` data blocks: 1 MiB (32,768 records), or a
/// sixty-fourth of a small store's data zone, at least one block.
fn ring_blocks(zone: u64) -> u64 {
    (zone / 64).clamp(MIN_RING, 256)
}

/// The smallest ring: it holds the largest commit (as many words as the undo journal).
const MIN_RING: u64 = (JOURNAL_CAPACITY as u64 * RECORD).div_ceil(BLOCK);

/// Applies the commit ring a page-media mount left in the journal block, if any, and clears
/// it: every whole commit when `region` is still behind the page cache the mount wrote
/// through (its owner crashed), the durable ones otherwise (a power cut). A damaged ring
/// refuses the mount.
pub(crate) fn replay_ring(pm: &Pm, region: &Region, sb: &Superblock) -> Result<(), Corruption> {
    let jb = sb.journal_block * BLOCK;
    let block = pm.bytes(jb, BLOCK);
    if !Anchor::present(block) {
        return Ok(());
    }
    let Some(anchor) = Anchor::decode(block, sb) else {
        return Err(Corruption::BadChecksum("page-media ring anchor"));
    };
    let everything = anchor.identity == region.cache_identity();
    let (words, end) =
        anchor.replay_to(|s| pm.bytes(anchor.record_offset(s), RECORD), everything)?;
    let table = (sb.inode_table_block * BLOCK, sb.data_block * BLOCK);
    if words
        .iter()
        .any(|&(o, _)| o < table.0 || o + 8 > table.1 || o % 8 != 0)
    {
        return Err(Corruption::Invalid(
            "page-media ring names a word outside the inode table".into(),
        ));
    }
    let io = |e: std::io::Error| Corruption::Invalid(format!("cannot sync the ring: {e}"));
    if end > anchor.durable {
        // The owner crashed, the page cache survived: first make what it holds durable and
        // say so, so that a power cut during this recovery finds those commits durable
        // instead of a table that holds words of commits that were not.
        pm.barrier().map_err(io)?;
        pm.write(
            jb,
            &Anchor {
                durable: end,
                ..anchor
            }
            .encode(),
        );
        pm.barrier().map_err(io)?;
    }
    for &(off, value) in &words {
        pm.store_u64(off, value);
    }
    pm.barrier().map_err(io)?;
    pm.write(jb, &[0u8; 64]);
    pm.barrier().map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_fit_small_and_large_stores() {
        assert_eq!(ring_blocks(100), 2);
        assert!(MIN_RING * BLOCK / RECORD >= JOURNAL_CAPACITY as u64);
        assert_eq!(ring_blocks(64 * 10), 10);
        assert_eq!(ring_blocks(1 << 30), 256);
    }
}
