//! The store: formatting, mounting, and every operation, each with its commit point.
//!
//! Locking: one `RwLock` per inode slot (readers of a file share it, a writer holds it alone);
//! operations over several inodes take their locks in ascending inode order and then the
//! journal lock; directory moves between parents first take the rename lock (so the
//! "not into its own subtree" check stays true until they commit). The data path — read,
//! write, append, truncate of one file — takes only that file's lock and an allocator pool.
//!
//! Asynchronous writes release the file's lock when their metadata commits and leave their
//! unfinished copies on the inode; whoever locks the inode next settles them first (two-level
//! locking, [`crate::inflight`]), so every change to a log comes after the copy of the write
//! before it — which is what lets recovery discard only a log's last write.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLockWriteGuard};
use switchyard_engine::DurableRecord;
use switchyard_media::Region;
use switchyard_mover::{Direction, Hints, Mover};

use crate::alloc::{Allocator, Extent};
use crate::error::{Corruption, Errno, MountError};
use crate::format::{
    decode_journal, encode_checkpoint_page, encode_journal, is_special, log_page_header, Attr,
    Entry, Seq, Superblock, BLOCK, CHECKPOINT_CAPACITY, JOURNAL_CAPACITY, LOG_ENTRIES_AT,
    LOG_NEXT_AT, NAME_MAX, RECORD_CHANNELS, ROOT, SLOT_GENERATION_AT, S_IFBLK, S_IFCHR, S_IFDIR,
    S_IFLNK, S_IFMT, S_IFREG,
};
use crate::inflight::{Part, PendingWrite};
use crate::inode::{Content, Inode};
use crate::pm::Pm;
use crate::recovery::{
    load_inode, read_checkpoint, scan_present, superblock, BlockMap, Present, Scan,
};
use crate::reserve::DEFAULT_RESERVED_PERCENT;
use crate::table::{FreeInodes, Slot, Table};

/// Largest file size (so every byte offset fits an `i64`, as `off_t` needs).
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;
/// Longest symlink target.
pub const SYMLINK_MAX: usize = 4095;
/// The set-group-ID bit of a mode.
const S_ISGID: u32 = 0o2000;
/// Most links to one file.
pub const LINK_MAX: u32 = 65000;

/// Space and inode counts, as `statfs` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    /// Block size.
    pub block_size: u64,
    /// Blocks in the data zone.
    pub blocks: u64,
    /// Free blocks.
    pub free_blocks: u64,
    /// Free blocks an unprivileged caller may take: the free blocks less the reserved share
    /// (`df`'s "Avail").
    pub available_blocks: u64,
    /// Inode slots.
    pub inodes: u64,
    /// Free inode slots.
    pub free_inodes: u64,
    /// Longest name.
    pub name_max: u64,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Name bytes.
    pub name: Vec<u8>,
    /// Inode.
    pub ino: u64,
    /// Type bits (`S_IFREG`, `S_IFDIR`, `S_IFLNK`, `S_IFIFO`, `S_IFSOCK`, `S_IFCHR`, `S_IFBLK`).
    pub kind: u32,
}

/// Attribute changes for [`Store::setattr`]; `None` leaves a field alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttr {
    /// Permission bits (the type bits are kept).
    pub mode: Option<u32>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Size (truncate or extend).
    pub size: Option<u64>,
    /// Access time, ns.
    pub atime: Option<i64>,
    /// Modification time, ns.
    pub mtime: Option<i64>,
}

/// Who creates a file: owner and group of new inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

impl Owner {
    /// The calling process's effective ids.
    pub fn current() -> Owner {
        // SAFETY: geteuid/getegid have no preconditions and cannot fail.
        unsafe {
            Owner {
                uid: libc::geteuid(),
                gid: libc::getegid(),
            }
        }
    }
}

pub(crate) type Guard<'a> = RwLockWriteGuard<'a, Option<Inode>>;

/// How a write orders its data copy and its metadata commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// The synchronous path: the copy (CPU, engine or split) completes, then the commit.
    Sync,
    /// Orderless (EasyIO §4.2): engine copies are submitted and the entry naming them is
    /// committed while they run; the caller settles them later.
    Orderless,
    /// The ordered asynchronous variant (EasyIO's "Naive"): the engine copy is submitted and
    /// waited for, then the metadata commits.
    Ordered,
}

/// A mounted store. Dropping it unmounts cleanly.
pub struct Store {
    pub(crate) pm: Pm,
    /// Geometry (never changes while mounted).
    geo: Superblock,
    /// The superblock as last written (clean flag, mount count).
    sb: Mutex<Superblock>,
    mover: Arc<Mover>,
    /// The durable completion record of each engine channel (those below
    /// [`RECORD_CHANNELS`]), in the region's completion block.
    records: Box<[DurableRecord]>,
    /// Every inode slot, allocated in chunks as used ([`crate::table`]).
    table: Table,
    free_inodes: Mutex<FreeInodes>,
    pub(crate) alloc: Allocator,
    /// Data blocks only privileged callers may take ([`crate::reserve`]).
    pub(crate) reserved: AtomicU64,
    journal: Mutex<u64>,
    rename: Mutex<()>,
    /// Set after an internal inconsistency: the store refuses further writes.
    failed: std::sync::atomic::AtomicBool,
    faults: Faults,
    /// Whether this mount used the clean-unmount checkpoint.
    quick: bool,
    /// Kept last: the mapping outlives every pointer into it. `None` once handed back by
    /// [`Store::into_region`].
    region: Option<Region>,
}

pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn check_name(name: &[u8]) -> Result<(), Errno> {
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

fn ftype(mode: u32) -> u8 {
    ((mode & S_IFMT) >> 12) as u8
}

/// Deliberate bugs, for proving that the crash harness catches them.
#[derive(Default)]
struct Faults {
    /// Log entries are stored but not flushed before the tail commit.
    skip_entry_flush: std::sync::atomic::AtomicBool,
    /// Orderless writes commit entries that do not name their copy.
    unrecorded_orderless: std::sync::atomic::AtomicBool,
}

/// What a mount rebuilt, before the store is assembled around it.
struct Mounted {
    sb: Superblock,
    used_replica: bool,
    alloc: Allocator,
    table: Table,
    free_inodes: FreeInodes,
    orphans: Vec<u64>,
    quick: bool,
}

/// What [`Store::make`] makes besides the inode its mode names.
#[derive(Clone, Copy)]
enum Made<'a> {
    /// A regular file or directory.
    Plain,
    /// A symlink with this target.
    Symlink(&'a [u8]),
    /// A FIFO, socket or device node (`rdev`: a device's number, else 0).
    Special { rdev: u64 },
}

/// Where appended entries went before their commit.
pub(crate) struct Appended {
    tail: u64,
    new_pages: Vec<u64>,
    /// Encoded bytes of the appended entries.
    bytes: u64,
}

impl Store {
    /// Formats `region` as an empty store (root directory owned by `owner`) and mounts it.
    /// Everything on the region is lost.
    pub fn format(region: Region, mover: Arc<Mover>, owner: Owner) -> Result<Store, MountError> {
        let pm = Pm::new(&region);
        let uuid: [u8; 16] = rand::random();
        let mut sb = Superblock::for_region(pm.len(), uuid);
        sb.clean = true;
        if sb.data_block + 8 > sb.total_blocks {
            return Err(MountError::Corrupt {
                path: region.path().display().to_string(),
                problem: Corruption::Invalid("region too small for a store".into()),
            });
        }
        // Invalidate first: a crash mid-format leaves no half-valid store behind.
        pm.write(0, &[0u8; 128]);
        pm.write(BLOCK, &[0u8; 128]);
        pm.fence();
        // The journal, records and inode table start zeroed: punched out of a file region (so
        // a large store's table stays sparse and a whole-store pass skips it), else written.
        let (from, to) = (sb.journal_block * BLOCK, sb.data_block * BLOCK);
        if region.punch(from, to - from).is_err() {
            let zero = vec![0u8; BLOCK as usize];
            for b in sb.journal_block..sb.data_block {
                pm.write(b * BLOCK, &zero);
            }
        }
        // Root: a log page with its attributes, linked from slot 1.
        let root_page = sb.data_block;
        let t = now_ns();
        let attr = Attr {
            mode: S_IFDIR | 0o755,
            uid: owner.uid,
            gid: owner.gid,
            nlink: 2,
            size: 0,
            atime: t,
            mtime: t,
            ctime: t,
            parent: ROOT,
        };
        let e = Entry::Attr(attr).encode();
        pm.write(root_page * BLOCK, &log_page_header(ROOT));
        pm.write(root_page * BLOCK + LOG_ENTRIES_AT, &e);
        let slot = sb.slot_offset(ROOT);
        pm.store_u64(slot, root_page);
        pm.store_u64(
            slot + 8,
            root_page * BLOCK + LOG_ENTRIES_AT + e.len() as u64,
        );
        pm.fence();
        pm.write(BLOCK, &sb.encode());
        pm.fence();
        pm.write(0, &sb.encode());
        pm.fence();
        Store::mount(region, mover)
    }

    /// Mounts a formatted region: validates the superblock (falling back to its replica).
    /// After a clean unmount it reads the free-space checkpoint and the inode table only, and
    /// each inode's log on its first use. Otherwise it undoes an interrupted multi-inode
    /// operation, rebuilds the DRAM indexes and free lists from every log, and frees inodes
    /// that were unlinked while open. A damaged image is refused with the first problem found
    /// (`switchyard fsck` lists them all); a damaged checkpoint only costs the full scan.
    pub fn mount(region: Region, mover: Arc<Mover>) -> Result<Store, MountError> {
        let pm = Pm::new(&region);
        let path = region.path().display().to_string();
        let corrupt = |problem| MountError::Corrupt {
            path: path.clone(),
            problem,
        };
        let (sb, used_replica) = superblock(pm.bytes(0, pm.len())).map_err(corrupt)?;
        // A sparse store file's holes are free slots and free blocks: not read. A scan drops
        // the pages it has read from the resident set as it goes (they stay in the page
        // cache), so recovering a large store does not map all of it at once.
        let release = || region.release_resident();
        let present = Present::ranges(region.data_extents()).releasing(&release);
        let mounted = match Self::clean_state(&pm, sb, used_replica, &present) {
            Some(m) => m,
            None => Self::scanned_state(&pm, &present).map_err(corrupt)?,
        };
        let Mounted {
            mut sb,
            used_replica,
            alloc,
            table,
            free_inodes,
            orphans,
            quick,
        } = mounted;
        if used_replica {
            pm.write(0, &sb.encode());
            pm.fence();
        }
        // Every orderless write of the last mount is settled now (the scan cut the logs of
        // those whose copies never completed), so the next generation starts.
        sb.clean = false;
        sb.checkpoint = 0;
        sb.mount_count += 1;
        let enc = sb.encode();
        pm.write(0, &enc);
        pm.fence();
        pm.write(BLOCK, &enc);
        pm.fence();
        // This mount's engine numbers its batches afresh: start its records at zero.
        pm.write(sb.completion_block * BLOCK, &[0u8; BLOCK as usize]);
        pm.fence();
        let channels = mover.engine().info().channels.min(RECORD_CHANNELS);
        let records = (0..channels)
            .map(|c| {
                let line = pm.ptr(sb.completion_block * BLOCK + c as u64 * 64, 64);
                // SAFETY: a 64-byte aligned line of the completion block, mapped while the
                // store lives (the store waits for the engine before unmapping); the store
                // writes it only through `clear_hole`, the engine through its records.
                unsafe { DurableRecord::new(line) }
            })
            .collect();
        let store = Store {
            pm,
            geo: sb,
            sb: Mutex::new(sb),
            mover,
            records,
            reserved: AtomicU64::new(
                (sb.total_blocks - sb.data_block) * u64::from(DEFAULT_RESERVED_PERCENT) / 100,
            ),
            table,
            free_inodes: Mutex::new(free_inodes),
            alloc,
            journal: Mutex::new(0),
            rename: Mutex::new(()),
            failed: Default::default(),
            faults: Faults::default(),
            quick,
            region: Some(region),
        };
        for ino in orphans {
            let mut g = store.table.entry(ino).0.write();
            store.free_inode(&mut g).map_err(|_| {
                corrupt(Corruption::Invalid(format!(
                    "could not free orphan inode {ino}"
                )))
            })?;
            drop(g);
        }
        Ok(store)
    }

    /// The state after a clean unmount, from its checkpoint and the inode table, or `None`
    /// when the store was not unmounted cleanly or the checkpoint does not check out.
    fn clean_state(
        pm: &Pm,
        sb: Superblock,
        used_replica: bool,
        present: &Present<'_>,
    ) -> Option<Mounted> {
        let journal = decode_journal(pm.bytes(sb.journal_block * BLOCK, BLOCK));
        if !sb.clean || sb.checkpoint == 0 || !journal.is_empty() {
            return None;
        }
        let page = |b: u64| pm.bytes(b * BLOCK, BLOCK);
        let extents = read_checkpoint(&page, &sb).ok()?;
        let head = |ino: u64| pm.load_u64(sb.slot_offset(ino));
        if head(ROOT) == 0 {
            return None;
        }
        let mut free = BlockMap::new(sb.total_blocks);
        for (start, len) in extents {
            free.set_range(start, len);
        }
        let alloc = Allocator::new(sb.data_block, sb.total_blocks, |b| !free.get(b));
        // Slots in use: only the table pages the image holds can have any.
        let per_page = BLOCK / crate::format::SLOT;
        let in_use = (0..sb.inode_slots.div_ceil(per_page))
            .filter(|&p| present.overlaps(sb.slot_offset(p * per_page), BLOCK))
            .flat_map(|p| (p * per_page).max(ROOT)..((p + 1) * per_page).min(sb.inode_slots))
            .filter(|&ino| head(ino) != 0);
        Some(Mounted {
            sb,
            used_replica,
            alloc,
            // Every slot is read from media on first use (its log, if it has one).
            table: Table::new(sb.inode_slots),
            free_inodes: FreeInodes::new(ROOT + 1, sb.inode_slots, in_use),
            orphans: Vec::new(),
            quick: true,
        })
    }

    /// The state rebuilt from every log, after undoing an interrupted transaction.
    fn scanned_state(pm: &Pm, present: &Present<'_>) -> Result<Mounted, Corruption> {
        let found: Scan = scan_present(pm.bytes(0, pm.len()), present)?;
        if let Some(p) = found.problems.into_iter().next() {
            return Err(p);
        }
        let sb = found.sb;
        // Undo an interrupted transaction, then retire the journal.
        if !found.undo.is_empty() {
            for &(off, old) in found.undo.iter().rev() {
                pm.store_u64(off, old);
            }
            pm.fence();
            pm.store_u64(sb.journal_block * BLOCK, 0);
            pm.fence();
        }
        // Logs whose last (orderless) write never completed end before it, durably, before the
        // mount count moves on and makes every entry of this generation count.
        if !found.cuts.is_empty() {
            for &(off, tail) in &found.cuts {
                pm.store_u64(off, tail);
            }
            pm.fence();
        }
        let used = found.used;
        let alloc = Allocator::new(sb.data_block, sb.total_blocks, |b| used.get(b));
        let free_inodes = FreeInodes::new(ROOT + 1, sb.inode_slots, found.inodes.keys().copied());
        // The inodes the scan read are loaded; every other slot is free on media (read as
        // such on first use).
        let table = Table::new(sb.inode_slots);
        for (ino, inode) in found.inodes {
            let (slot, loaded) = table.entry(ino);
            *slot.write() = Some(inode);
            loaded.store(true, Ordering::Release);
        }
        Ok(Mounted {
            sb,
            used_replica: found.used_replica,
            alloc,
            table,
            free_inodes,
            orphans: found.orphans,
            quick: false,
        })
    }

    /// Whether this mount trusted a clean unmount's checkpoint instead of scanning every log.
    pub fn mounted_quickly(&self) -> bool {
        self.quick
    }

    /// Marks the superblock clean and unmaps the region.
    pub fn unmount(self) -> Result<(), Errno> {
        drop(self);
        Ok(())
    }

    /// Unmounts cleanly (as [`Store::unmount`]) and hands the region back, still mapped, to
    /// be mounted again.
    pub fn into_region(mut self) -> Region {
        if !self.failed.load(Ordering::Relaxed) {
            self.mark_clean();
        }
        self.region
            .take()
            .expect("a mounted store holds its region")
    }

    /// Frees inodes unlinked while open (their handles end with the mount), writes the
    /// free-space checkpoint, then marks the superblock clean with a pointer to it.
    fn mark_clean(&self) {
        for (_, slot, loaded) in self.table.allocated() {
            if loaded.load(Ordering::Acquire) {
                let mut g = slot.write();
                if let Some(i) = g.as_mut() {
                    self.settle_inode(i);
                }
                if g.as_ref().is_some_and(|i| i.attr.nlink == 0) && self.free_inode(&mut g).is_err()
                {
                    return;
                }
            }
        }
        let checkpoint = self.write_checkpoint();
        self.pm.fence();
        let mut sb = self.sb.lock();
        sb.clean = true;
        sb.checkpoint = checkpoint;
        let enc = sb.encode();
        self.pm.write(0, &enc);
        self.pm.fence();
        self.pm.write(BLOCK, &enc);
        self.pm.fence();
    }

    /// Writes the free extents into pages taken from the free space (and listed as free
    /// themselves); returns the first page, or 0 if there is no room (the next mount scans).
    fn write_checkpoint(&self) -> u64 {
        let mut want = 1;
        loop {
            let Ok(got) = self.alloc.alloc(want as u64) else {
                return 0;
            };
            let pages: Vec<u64> = got.iter().flat_map(|e| e.start..e.start + e.len).collect();
            let mut listed: Vec<(u64, u64)> = self
                .alloc
                .free_extents()
                .iter()
                .map(|e| (e.start, e.len))
                .chain(pages.iter().map(|&p| (p, 1)))
                .collect();
            listed.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(listed.len());
            for (s, l) in listed {
                match merged.last_mut() {
                    Some(last) if last.0 + last.1 == s => last.1 += l,
                    _ => merged.push((s, l)),
                }
            }
            let need = merged.len().div_ceil(CHECKPOINT_CAPACITY).max(1);
            if need > pages.len() {
                for e in got {
                    self.alloc.free(e);
                }
                want = need + 1;
                continue;
            }
            let mount_count = self.sb.lock().mount_count;
            let chunks: Vec<&[(u64, u64)]> = if merged.is_empty() {
                vec![&[]]
            } else {
                merged.chunks(CHECKPOINT_CAPACITY).collect()
            };
            for (i, chunk) in chunks.iter().enumerate() {
                let next = pages.get(i + 1).filter(|_| i + 1 < chunks.len());
                let b = encode_checkpoint_page(chunk, next.copied().unwrap_or(0), mount_count);
                self.pm.write(pages[i] * BLOCK, &b);
            }
            return pages[0];
        }
    }

    /// Test fault injection: from now on, log entries are not flushed before their commit
    /// (a missing-flush bug the crash harness must catch). Never use outside tests.
    pub fn inject_missing_entry_flush(&self) {
        self.faults.skip_entry_flush.store(true, Ordering::Relaxed);
    }

    /// Test hook: orderless writes commit entries that do not name their engine copy, so
    /// recovery cannot tell an unfinished one (the asynchronous crash harness must notice).
    pub fn inject_unrecorded_orderless(&self) {
        self.faults
            .unrecorded_orderless
            .store(true, Ordering::Relaxed);
    }

    /// The region this store lives in.
    pub fn region(&self) -> &Region {
        self.region
            .as_ref()
            .expect("a mounted store holds its region")
    }

    /// The mover every data copy goes through.
    pub fn mover(&self) -> &Mover {
        &self.mover
    }

    /// The same mover, shared, for a holder that outlives a borrow of the store (a background
    /// tune that swaps its profile into the running mover).
    pub fn shared_mover(&self) -> Arc<Mover> {
        self.mover.clone()
    }

    /// Space and inode counts.
    pub fn statfs(&self) -> StatFs {
        let sb = self.geo;
        StatFs {
            block_size: BLOCK,
            blocks: sb.total_blocks - sb.data_block,
            free_blocks: self.alloc.free_blocks(),
            available_blocks: self
                .alloc
                .free_blocks()
                .saturating_sub(self.reserved.load(Ordering::Relaxed)),
            inodes: sb.inode_slots - 1,
            free_inodes: self.free_inodes.lock().count(),
            name_max: NAME_MAX as u64,
        }
    }

    pub(crate) fn check_writable(&self) -> Result<(), Errno> {
        if self.failed.load(Ordering::Relaxed) {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    /// Inode `ino`'s slot, its inode read from the log first if this is its first use.
    pub(crate) fn slot(&self, ino: u64) -> Result<&Slot, Errno> {
        if ino < ROOT || ino >= self.geo.inode_slots {
            return Err(Errno::ENOENT);
        }
        let (slot, loaded) = self.table.entry(ino);
        if !loaded.load(Ordering::Acquire) {
            let mut g = slot.write();
            if !loaded.load(Ordering::Acquire) {
                let off = self.slot_offset(ino);
                let (head, tail) = (self.pm.load_u64(off), self.pm.load_u64(off + 8));
                if head == 0 {
                    // A free slot.
                    loaded.store(true, Ordering::Release);
                    drop(g);
                    return Ok(slot);
                }
                let page = |b: u64| self.pm.bytes(b * BLOCK, BLOCK);
                // Entries of this generation are in DRAM already: everything on media is settled.
                let settled = |s: &Seq| s.generation < self.geo.mount_count;
                let Ok(inode) = load_inode(&page, &self.geo, ino, head, tail, &settled) else {
                    // The image disagrees with its clean checkpoint: stop writing to it.
                    self.failed.store(true, Ordering::Relaxed);
                    return Err(Errno::EIO);
                };
                *g = Some(inode);
                loaded.store(true, Ordering::Release);
            }
        }
        Ok(slot)
    }

    /// Raw pointer to region offset `off` (for the asynchronous API's copies).
    pub(crate) fn pm_ptr(&self, off: u64, len: u64) -> *mut u8 {
        self.pm.ptr(off, len)
    }

    /// The error a read of `ino` fails with when it is not a readable file.
    pub(crate) fn read_error(&self, ino: u64) -> Errno {
        match self.getattr(ino) {
            Ok(a) if a.kind() == S_IFDIR => Errno::EISDIR,
            Ok(_) => Errno::EIO,
            Err(e) => e,
        }
    }

    fn slot_offset(&self, ino: u64) -> u64 {
        self.geo.slot_offset(ino)
    }

    /// Locks `ino` for a change, after settling its pending write (level 2).
    pub(crate) fn lock(&self, ino: u64) -> Result<Guard<'_>, Errno> {
        let mut g = self.slot(ino)?.write();
        if let Some(i) = g.as_mut() {
            self.settle_inode(i);
        }
        Ok(g)
    }

    /// Locks `ino` for a change unless its pending write is still copying: then the lock is
    /// released and the pending write returned, for an asynchronous caller to wait on.
    pub(crate) fn try_lock(&self, ino: u64) -> Result<Result<Guard<'_>, Arc<PendingWrite>>, Errno> {
        let mut g = self.slot(ino)?.write();
        if let Some(i) = g.as_mut() {
            if let Some(p) = &i.pending {
                if !self.try_settle(p) {
                    return Ok(Err(p.clone()));
                }
                i.pending = None;
            }
        }
        Ok(Ok(g))
    }

    /// Waits for (and helps settle) `inode`'s pending write, then forgets it.
    fn settle_inode(&self, inode: &mut Inode) {
        if let Some(p) = inode.pending.take() {
            self.wait_settled(&p);
        }
    }

    /// Settles `p` if every copy has finished: checked by sequence number (each channel's
    /// completion record against the batch's position), then each copy's outcome collected,
    /// a partial one repaired on the CPU and its hole in the durable record cleared. Never
    /// blocks; true once settled.
    pub(crate) fn try_settle(&self, p: &PendingWrite) -> bool {
        if p.is_settled() {
            return true;
        }
        let engine = self.mover.engine();
        if !p.seqs.iter().all(|&(c, pos)| engine.record(c).seq > pos) {
            return false;
        }
        self.collect(p)
    }

    /// [`Store::try_settle`] for the write's own future, woken because one of its copies
    /// finished: it asks the copies themselves, without first reading each channel's
    /// completion record (a cache line the engine's worker has just written, so a transfer
    /// from the worker's core on the write's critical path).
    pub(crate) fn try_settle_own(&self, p: &PendingWrite) -> bool {
        p.is_settled() || self.collect(p)
    }

    /// Collects every copy of `p` (see [`Store::try_settle`]); false if one is unfinished or
    /// another thread is collecting.
    fn collect(&self, p: &PendingWrite) -> bool {
        let Some(mut parts) = p.parts.try_lock() else {
            return false;
        };
        while let Some(part) = parts.last_mut() {
            let Some(report) = self.mover.poll_detached(&mut part.copy) else {
                return false;
            };
            if report.repaired_bytes > 0 {
                // The repair's flushed lines become durable before the hole goes.
                self.pm.fence();
                let (c, pos) = part.recorded;
                self.records[c].clear_hole(&self.pm.persist(), pos);
            }
            parts.pop();
        }
        p.mark_settled();
        true
    }

    /// Blocks until `p` is settled (spinning, then yielding): the engine finishes every copy on
    /// its own, so this cannot deadlock.
    pub(crate) fn wait_settled(&self, p: &PendingWrite) {
        let mut spins = 0u32;
        while !self.try_settle(p) {
            spins += 1;
            if spins < 256 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    // ---- log plumbing -------------------------------------------------------------------

    /// Appends `entries` past `inode`'s tail and makes them durable (not yet committed).
    pub(crate) fn append_log(&self, inode: &Inode, entries: &[Entry]) -> Result<Appended, Errno> {
        let mut pos = inode.tail;
        let mut new_pages: Vec<u64> = Vec::new();
        let mut total = 0;
        for e in entries {
            let bytes = e.encode();
            // Bytes used in the tail page (a tail at a page's end means "full", not "next").
            let page_of_pos = (pos - 1) / BLOCK;
            let used = pos - page_of_pos * BLOCK;
            if used + bytes.len() as u64 > BLOCK {
                if used < BLOCK {
                    self.pm.write(pos, &[0u8; 8]);
                }
                let page = match self.alloc.alloc(1) {
                    Ok(x) => x[0].start,
                    Err(e) => {
                        for p in new_pages {
                            self.alloc.free(Extent { start: p, len: 1 });
                        }
                        return Err(e);
                    }
                };
                self.pm.write(page * BLOCK, &log_page_header(inode.ino));
                self.pm.store_u64(page_of_pos * BLOCK + LOG_NEXT_AT, page);
                new_pages.push(page);
                pos = page * BLOCK + LOG_ENTRIES_AT;
            }
            if self.faults.skip_entry_flush.load(Ordering::Relaxed) {
                self.pm.write_unflushed(pos, &bytes);
            } else {
                self.pm.write(pos, &bytes);
            }
            pos += bytes.len() as u64;
            total += bytes.len() as u64;
        }
        Ok(Appended {
            tail: pos,
            new_pages,
            bytes: total,
        })
    }

    /// Commits appended entries of one inode: the 8-byte tail store is the commit point.
    pub(crate) fn commit_one(
        &self,
        inode: &mut Inode,
        a: Appended,
        entries: &[Entry],
        freed: &mut Vec<u64>,
    ) {
        self.pm.fence();
        self.pm.store_u64(self.slot_offset(inode.ino) + 8, a.tail);
        self.pm.fence();
        self.applied(inode, a, entries, freed);
    }

    fn applied(&self, inode: &mut Inode, a: Appended, entries: &[Entry], freed: &mut Vec<u64>) {
        inode.tail = a.tail;
        inode.pages.extend(a.new_pages);
        inode.log_bytes += a.bytes;
        for e in entries {
            inode.apply(e, freed);
        }
    }

    /// Commits several inodes' words at once through the undo journal.
    fn commit_words(&self, words: &[(u64, u64)]) {
        assert!(words.len() <= JOURNAL_CAPACITY);
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
    }

    pub(crate) fn free_blocks(&self, blocks: &[u64]) {
        if blocks.is_empty() {
            return;
        }
        if let [b] = blocks {
            // The common case (one overwritten page): no sorting buffer.
            self.alloc.free(Extent { start: *b, len: 1 });
            return;
        }
        let mut sorted = blocks.to_vec();
        sorted.sort_unstable();
        let mut i = 0;
        while i < sorted.len() {
            let mut j = i + 1;
            while j < sorted.len() && sorted[j] == sorted[j - 1] + 1 {
                j += 1;
            }
            self.alloc.free(Extent {
                start: sorted[i],
                len: (j - i) as u64,
            });
            i = j;
        }
    }

    /// Rewrites a log that is mostly dead entries into a fresh chain holding only the live
    /// state, swapped in through the journal.
    pub(crate) fn maybe_compact(&self, inode: &mut Inode) {
        if inode.pages.len() < 4 || inode.log_bytes < inode.compact_check_at {
            return;
        }
        let live = inode.live_bytes();
        if live * 2 > inode.log_bytes {
            inode.compact_check_at = inode.log_bytes + inode.log_bytes / 4;
            return;
        }
        let entries = inode.snapshot();
        let Ok(first) = self.alloc.alloc(1) else {
            return;
        };
        let head = first[0].start;
        self.pm.write(head * BLOCK, &log_page_header(inode.ino));
        let fresh = Inode {
            tail: head * BLOCK + LOG_ENTRIES_AT,
            pages: vec![head],
            log_bytes: 0,
            ..Inode::new(inode.ino, inode.attr)
        };
        let Ok(a) = self.append_log(&fresh, &entries) else {
            self.alloc.free(first[0]);
            return;
        };
        let slot = self.slot_offset(inode.ino);
        self.commit_words(&[(slot, head), (slot + 8, a.tail)]);
        let old = std::mem::replace(&mut inode.pages, vec![head]);
        inode.pages.extend(a.new_pages);
        inode.tail = a.tail;
        inode.log_bytes = a.bytes;
        inode.compact_check_at = 2 * a.bytes;
        self.free_blocks(&old);
    }

    /// Frees an inode with no links left: its slot, log pages and data blocks.
    fn free_inode(&self, g: &mut Guard<'_>) -> Result<(), Errno> {
        let Some(inode) = g.take() else {
            return Ok(());
        };
        let slot = self.slot_offset(inode.ino);
        self.commit_words(&[(slot, 0), (slot + 8, 0)]);
        self.forget_inode(inode);
        Ok(())
    }

    /// Returns the blocks and slot of an inode whose slot words are already zero on media.
    fn forget_inode(&self, inode: Inode) {
        self.free_blocks(&inode.pages);
        if let Content::File(pages) = &inode.content {
            self.retire(&inode, pages.values().copied().collect());
        }
        self.free_inodes.lock().give(inode.ino);
    }

    /// Gives back the log pages an append allocated for an operation that will not commit.
    fn discard(&self, a: Appended) {
        for pg in a.new_pages {
            self.alloc.free(Extent { start: pg, len: 1 });
        }
    }

    /// Locks the given inodes (deduplicated) in ascending order; returns guards by inode.
    fn lock_many(&self, inos: &[u64]) -> Result<BTreeMap<u64, Guard<'_>>, Errno> {
        let mut sorted = inos.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut out = BTreeMap::new();
        for ino in sorted {
            let g = self.lock(ino)?;
            if g.is_none() {
                return Err(Errno::ENOENT);
            }
            out.insert(ino, g);
        }
        Ok(out)
    }

    // ---- reading ------------------------------------------------------------------------

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr, Errno> {
        self.slot(ino)?
            .read()
            .as_ref()
            .map(|i| i.attr)
            .ok_or(Errno::ENOENT)
    }

    /// Data blocks (of [`BLOCK`] bytes) that inode `ino` maps: what `stat` counts as its
    /// allocated space (holes take none; a symlink's target counts; a directory's and every
    /// inode's log pages do not).
    pub fn data_blocks(&self, ino: u64) -> Result<u64, Errno> {
        let g = self.slot(ino)?.read();
        match &g.as_ref().ok_or(Errno::ENOENT)?.content {
            Content::File(pages) => Ok(pages.len() as u64),
            Content::Dir(_) => Ok(0),
        }
    }

    /// Looks `name` up in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<(u64, Attr), Errno> {
        let ino = self.find(parent, name, false)?;
        Ok((ino, self.getattr(ino)?))
    }

    /// Looks `name` up in directory `parent` and takes a hold on the inode it names (see
    /// [`Store::hold`]) in the same step, under the directory's lock: no unlink can free the
    /// inode, nor its number be reused, between the lookup and the hold.
    pub fn lookup_held(&self, parent: u64, name: &[u8]) -> Result<(u64, Attr), Errno> {
        let ino = self.find(parent, name, true)?;
        match self.getattr(ino) {
            Ok(a) => Ok((ino, a)),
            Err(e) => {
                self.release_holds(ino, 1)?;
                Err(e)
            }
        }
    }

    /// The inode `name` names in `parent`, held (under `parent`'s lock) if `hold`.
    fn find(&self, parent: u64, name: &[u8], hold: bool) -> Result<u64, Errno> {
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let g = self.slot(parent)?.read();
        let dir = g.as_ref().ok_or(Errno::ENOENT)?;
        let ino = match &dir.content {
            Content::Dir(d) => match name {
                b"." => parent,
                b".." => dir.attr.parent,
                _ => d.get(name).ok_or(Errno::ENOENT)?.0,
            },
            Content::File(_) => return Err(Errno::ENOTDIR),
        };
        if hold {
            // Unlinking the last name (or removing the ".." directory) needs this directory's
            // write lock, so it sees the hold taken here.
            self.table.holds(ino).fetch_add(1, Ordering::AcqRel);
        }
        Ok(ino)
    }

    /// Entries of directory `ino`, sorted by name (without "." and "..").
    pub fn readdir(&self, ino: u64) -> Result<Vec<DirEntry>, Errno> {
        let g = self.slot(ino)?.read();
        match &g.as_ref().ok_or(Errno::ENOENT)?.content {
            Content::Dir(d) => Ok(d
                .iter()
                .map(|(n, &(ino, t))| DirEntry {
                    name: n.clone(),
                    ino,
                    kind: u32::from(t) << 12,
                })
                .collect()),
            Content::File(_) => Err(Errno::ENOTDIR),
        }
    }

    /// Reads up to `buf.len()` bytes at `off`; returns how many (0 at or past the end).
    pub fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let g = self.slot(ino)?.read();
        let inode = g.as_ref().ok_or(Errno::ENOENT)?;
        if let Some(p) = &inode.pending {
            self.wait_settled(p);
        }
        let Content::File(pages) = &inode.content else {
            return Err(Errno::EISDIR);
        };
        let size = inode.attr.size;
        if off >= size || buf.is_empty() {
            return Ok(0);
        }
        let n = (size - off).min(buf.len() as u64) as usize;
        for_each_run(pages, off, n, |done, len, at| match at {
            Some(at) => {
                let src = self.pm.ptr(at, len as u64);
                // SAFETY: (1) `src` lies in blocks this inode maps, which no one writes while we
                // hold its read lock (writes go to fresh blocks under the write lock); (2)
                // `buf[done..done + len]` is in bounds and exclusively ours.
                unsafe {
                    self.mover
                        .copy_raw(buf.as_mut_ptr().add(done), src, len, Hints::read())
                };
            }
            None => buf[done..done + len].fill(0),
        });
        Ok(n)
    }

    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        let attr = self.getattr(ino)?;
        if attr.kind() != S_IFLNK {
            return Err(Errno::EINVAL);
        }
        let mut buf = vec![0u8; attr.size as usize];
        let n = self.read(ino, 0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    // ---- writing one file ---------------------------------------------------------------

    /// Writes `data` at `off` (copy-on-write: new blocks, then one commit). Returns the bytes
    /// written (all of them, or an error with nothing changed).
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
        self.check_writable()?;
        let mut g = self.lock(ino)?;
        let inode = g.as_mut().ok_or(Errno::ENOENT)?;
        self.write_locked(inode, off, data, Order::Sync)
    }

    /// Appends `data` at the end of the file, atomically with finding the end. Returns the
    /// offset it was written at.
    pub fn append(&self, ino: u64, data: &[u8]) -> Result<u64, Errno> {
        self.check_writable()?;
        let mut g = self.lock(ino)?;
        let inode = g.as_mut().ok_or(Errno::ENOENT)?;
        let off = inode.attr.size;
        self.write_locked(inode, off, data, Order::Sync)?;
        Ok(off)
    }

    /// Writes `data` at `off` into the locked `inode`. With [`Order::Orderless`], the engine
    /// copies that are still running when the metadata commits are left in `inode.pending`.
    pub(crate) fn write_locked(
        &self,
        inode: &mut Inode,
        off: u64,
        data: &[u8],
        order: Order,
    ) -> Result<usize, Errno> {
        debug_assert!(inode.pending.is_none(), "the caller settled the last write");
        if !matches!(inode.content, Content::File(_)) {
            return Err(Errno::EISDIR);
        }
        if is_special(inode.attr.kind()) {
            // A FIFO's, socket's or device's I/O never reaches the store.
            return Err(Errno::EINVAL);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(Errno::EFBIG)?;
        let first = off / BLOCK;
        let last = (end - 1) / BLOCK;
        let extents = self.alloc_data(last - first + 1)?;
        let Content::File(pages) = &inode.content else {
            unreachable!("checked above");
        };
        let old_size = inode.attr.size;
        // The commit's first fence drains these copies with the log entries.
        let hints = Hints {
            defer_fence: true,
            ..Hints::write()
        };
        // Fill the new blocks: whole pages straight from `data`, edge pages assembled from
        // the old page (or zeros) and the new bytes.
        let mut pg = first;
        let mut entries = Vec::with_capacity(extents.len() + 1);
        let mut parts = Vec::new();
        let mtime = now_ns();
        for e in &extents {
            let mut k = 0;
            let mut seq = None;
            while k < e.len {
                let p = pg + k;
                let block = e.start + k;
                let page_start = p * BLOCK;
                let lo = off.max(page_start);
                let hi = end.min(page_start + BLOCK);
                if lo == page_start && hi == page_start + BLOCK {
                    // A run of whole pages.
                    let mut run = 1;
                    while k + run < e.len && end >= (p + run + 1) * BLOCK {
                        run += 1;
                    }
                    let src = &data[(page_start - off) as usize..][..(run * BLOCK) as usize];
                    let dst = self.pm.ptr(block * BLOCK, run * BLOCK);
                    if order == Order::Sync {
                        // SAFETY: (1) `dst` is a run of blocks just allocated to us, referenced
                        // by nothing durable yet; (2) `src` is a slice of `data`.
                        unsafe { self.mover.copy_raw(dst, src.as_ptr(), src.len(), hints) };
                    } else {
                        let records: &[DurableRecord] = match order {
                            Order::Orderless => &self.records,
                            _ => &[],
                        };
                        // SAFETY: as above; the copy is waited for here, or settled before the
                        // blocks are freed (level 2) and before the caller's buffer is released
                        // (the asynchronous API keeps it until then).
                        let t = unsafe {
                            self.mover
                                .submit_recorded(dst, src.as_ptr(), src.len(), hints, records)
                        };
                        match t.recorded() {
                            Some((channel, position)) => {
                                // The injected bug leaves the entry without its copy's name.
                                if !self.faults.unrecorded_orderless.load(Ordering::Relaxed) {
                                    seq = Some(Seq {
                                        generation: self.geo.mount_count,
                                        channel: channel as u32,
                                        position,
                                    });
                                }
                                parts.push(Part {
                                    recorded: (channel, position),
                                    copy: t.detach(),
                                    expected_ns: switchyard_rt::expected_finish(
                                        &self.mover,
                                        Direction::ToSlow,
                                        src.len(),
                                    ),
                                });
                            }
                            // Unrecorded: the entry may only commit once the copy is done.
                            None => {
                                t.wait();
                            }
                        }
                    }
                    k += run;
                    continue;
                }
                let mut page = [0u8; BLOCK as usize];
                if let Some(&ob) = pages.get(&p) {
                    if page_start < old_size {
                        page.copy_from_slice(self.pm.bytes(ob * BLOCK, BLOCK));
                    }
                }
                page[(lo - page_start) as usize..(hi - page_start) as usize]
                    .copy_from_slice(&data[(lo - off) as usize..(hi - off) as usize]);
                let dst = self.pm.ptr(block * BLOCK, BLOCK);
                // SAFETY: as above; `page` is a local buffer.
                unsafe { self.mover.copy_raw(dst, page.as_ptr(), page.len(), hints) };
                k += 1;
            }
            entries.push(Entry::Write {
                pgoff: pg,
                block: e.start,
                count: e.len,
                size: old_size.max(end),
                mtime,
                seq,
            });
            pg += e.len;
        }
        let a = match self.append_log(inode, &entries) {
            Ok(a) => a,
            Err(err) => {
                for mut p in parts {
                    self.mover.wait_detached(&mut p.copy);
                }
                for e in extents {
                    self.alloc.free(e);
                }
                return Err(err);
            }
        };
        let mut freed = Vec::new();
        self.commit_one(inode, a, &entries, &mut freed);
        self.retire(inode, freed);
        if parts.is_empty() {
            self.maybe_compact(inode);
        } else {
            let seqs = parts.iter().map(|p| p.recorded).collect();
            inode.pending = Some(Arc::new(PendingWrite::new(parts, seqs)));
        }
        Ok(data.len())
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

    pub(crate) fn retire(&self, inode: &Inode, blocks: Vec<u64>) {
        let now = inode.readers.retire(blocks);
        self.free_blocks(&now);
    }

    /// Changes attributes; a size change truncates (freeing whole pages past the end and
    /// zeroing the rest of the last page, copy-on-write) or extends with a hole.
    pub fn setattr(&self, ino: u64, s: SetAttr) -> Result<Attr, Errno> {
        self.check_writable()?;
        let mut g = self.lock(ino)?;
        let inode = g.as_mut().ok_or(Errno::ENOENT)?;
        let mut attr = inode.attr;
        let t = now_ns();
        let mut entries = Vec::new();
        let mut extent = None;
        if let Some(size) = s.size {
            let Content::File(pages) = &inode.content else {
                return Err(Errno::EISDIR);
            };
            if is_special(attr.kind()) {
                return Err(Errno::EINVAL);
            }
            if size > MAX_FILE_SIZE {
                return Err(Errno::EFBIG);
            }
            if size < attr.size && size % BLOCK != 0 {
                if let Some(&ob) = pages.get(&(size / BLOCK)) {
                    let e = self.alloc.alloc(1)?[0];
                    let mut page = [0u8; BLOCK as usize];
                    let keep = (size % BLOCK) as usize;
                    page[..keep].copy_from_slice(&self.pm.bytes(ob * BLOCK, BLOCK)[..keep]);
                    self.pm.write(e.start * BLOCK, &page);
                    entries.push(Entry::Write {
                        pgoff: size / BLOCK,
                        block: e.start,
                        count: 1,
                        size,
                        mtime: t,
                        seq: None,
                    });
                    extent = Some(e);
                }
            }
            attr.size = size;
            attr.mtime = t;
        }
        if let Some(m) = s.mode {
            attr.mode = (attr.mode & S_IFMT) | (m & 0o7777);
        }
        attr.uid = s.uid.unwrap_or(attr.uid);
        attr.gid = s.gid.unwrap_or(attr.gid);
        attr.atime = s.atime.unwrap_or(attr.atime);
        attr.mtime = s.mtime.unwrap_or(attr.mtime);
        attr.ctime = t;
        entries.push(Entry::Attr(attr));
        let a = match self.append_log(inode, &entries) {
            Ok(a) => a,
            Err(e) => {
                if let Some(x) = extent {
                    self.alloc.free(x);
                }
                return Err(e);
            }
        };
        let mut freed = Vec::new();
        self.commit_one(inode, a, &entries, &mut freed);
        self.retire(inode, freed);
        self.maybe_compact(inode);
        Ok(inode.attr)
    }

    // ---- namespace ----------------------------------------------------------------------

    /// Creates a regular file `name` in `parent`. EEXIST if the name is taken.
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        owner: Owner,
    ) -> Result<(u64, Attr), Errno> {
        self.make(parent, name, S_IFREG | (mode & 0o7777), owner, Made::Plain)
    }

    /// Creates a FIFO, socket, or character or block device node `name` in `parent` (`mode`
    /// holds the type bits; `rdev` is a device's number, ignored for the others). The store
    /// keeps the inode; its I/O is the kernel's business (a mount serves devices only when
    /// mounted with `dev`). A regular file type is made as by [`Store::create`].
    pub fn mknod(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u64,
        owner: Owner,
    ) -> Result<(u64, Attr), Errno> {
        let kind = mode & S_IFMT;
        if kind == S_IFREG || kind == 0 {
            return self.create(parent, name, mode, owner);
        }
        if !is_special(kind) {
            return Err(Errno::EINVAL);
        }
        let rdev = if matches!(kind, S_IFCHR | S_IFBLK) {
            rdev
        } else {
            0
        };
        self.make(
            parent,
            name,
            kind | (mode & 0o7777),
            owner,
            Made::Special { rdev },
        )
    }

    /// Creates directory `name` in `parent`.
    pub fn mkdir(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        owner: Owner,
    ) -> Result<(u64, Attr), Errno> {
        self.make(parent, name, S_IFDIR | (mode & 0o7777), owner, Made::Plain)
    }

    /// Creates symlink `name` → `target` in `parent`.
    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        owner: Owner,
    ) -> Result<(u64, Attr), Errno> {
        if target.is_empty() {
            return Err(Errno::EINVAL);
        }
        if target.len() > SYMLINK_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        self.make(parent, name, S_IFLNK | 0o777, owner, Made::Symlink(target))
    }

    fn make(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        owner: Owner,
        what: Made<'_>,
    ) -> Result<(u64, Attr), Errno> {
        let link_target = match what {
            Made::Symlink(t) => Some(t),
            _ => None,
        };
        self.check_writable()?;
        check_name(name)?;
        let mut pg = self.lock(parent)?;
        let dir = pg.as_mut().ok_or(Errno::ENOENT)?;
        let Content::Dir(d) = &dir.content else {
            return Err(Errno::ENOTDIR);
        };
        if dir.attr.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        if d.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let is_dir = mode & S_IFMT == S_IFDIR;
        if is_dir && dir.attr.nlink >= LINK_MAX {
            return Err(Errno::EMLINK);
        }
        let ino = self.free_inodes.lock().take().ok_or(Errno::ENOSPC)?;
        let give_back = |e| {
            self.free_inodes.lock().give(ino);
            e
        };
        let page = self.alloc.alloc(1).map_err(give_back)?[0];
        let t = now_ns();
        // A set-group-ID directory gives its group to what is made in it, and its
        // set-group-ID bit to directories made in it (BSD semantics, as Linux does).
        let (gid, mode) = if dir.attr.mode & S_ISGID != 0 {
            (dir.attr.gid, if is_dir { mode | S_ISGID } else { mode })
        } else {
            (owner.gid, mode)
        };
        let attr = Attr {
            mode,
            uid: owner.uid,
            gid,
            nlink: if is_dir { 2 } else { 1 },
            size: 0,
            atime: t,
            mtime: t,
            ctime: t,
            parent: match what {
                _ if is_dir => parent,
                Made::Special { rdev } => rdev,
                _ => 0,
            },
        };
        let mut child = Inode::new(ino, attr);
        child.pages = vec![page.start];
        child.tail = page.start * BLOCK + LOG_ENTRIES_AT;
        self.pm.write(page.start * BLOCK, &log_page_header(ino));
        let mut child_entries = vec![Entry::Attr(attr)];
        let mut data_extent = None;
        if let Some(target) = link_target {
            let n = (target.len() as u64).div_ceil(BLOCK);
            let e = match self.alloc_data(n) {
                Ok(e) => e,
                Err(err) => {
                    self.alloc.free(page);
                    return Err(give_back(err));
                }
            };
            let mut pgoff = 0;
            for x in &e {
                let mut buf = vec![0u8; (x.len * BLOCK) as usize];
                let from = (pgoff * BLOCK) as usize;
                let take = buf.len().min(target.len() - from);
                buf[..take].copy_from_slice(&target[from..from + take]);
                self.pm.write(x.start * BLOCK, &buf);
                child_entries.push(Entry::Write {
                    pgoff,
                    block: x.start,
                    count: x.len,
                    size: target.len() as u64,
                    mtime: t,
                    seq: None,
                });
                pgoff += x.len;
            }
            data_extent = Some(e);
        }
        let mut parent_entries = vec![Entry::DirAdd {
            ino,
            ftype: ftype(mode),
            name: name.to_vec(),
        }];
        let mut pattr = dir.attr;
        pattr.mtime = t;
        pattr.ctime = t;
        if is_dir {
            pattr.nlink += 1;
        }
        parent_entries.push(Entry::Attr(pattr));
        let undo = |this: &Self| {
            this.alloc.free(page);
            for x in data_extent.iter().flatten() {
                this.alloc.free(*x);
            }
        };
        let ca = match self.append_log(&child, &child_entries) {
            Ok(a) => a,
            Err(e) => {
                undo(self);
                return Err(give_back(e));
            }
        };
        let pa = match self.append_log(dir, &parent_entries) {
            Ok(a) => a,
            Err(e) => {
                undo(self);
                self.discard(ca);
                return Err(give_back(e));
            }
        };
        let (cs, ps) = (self.slot_offset(ino), self.slot_offset(parent));
        // The slot's next generation commits with the inode: a handle to the slot's last
        // inode never names this one.
        let generation = self.pm.load_u64(cs + SLOT_GENERATION_AT).wrapping_add(1);
        self.commit_words(&[
            (cs, page.start),
            (cs + 8, ca.tail),
            (cs + SLOT_GENERATION_AT, generation),
            (ps + 8, pa.tail),
        ]);
        let mut freed = Vec::new();
        self.applied(&mut child, ca, &child_entries, &mut freed);
        self.applied(dir, pa, &parent_entries, &mut freed);
        let attr = child.attr;
        let (slot, loaded) = self.table.entry(ino);
        *slot.write() = Some(child);
        loaded.store(true, Ordering::Release);
        self.maybe_compact(dir);
        Ok((ino, attr))
    }

    /// Locks `parent` and the inode `name` names in it (ascending order, re-checked).
    fn lock_entry(
        &self,
        parent: u64,
        name: &[u8],
    ) -> Result<(u64, BTreeMap<u64, Guard<'_>>), Errno> {
        loop {
            let (child, _) = self.lookup(parent, name)?;
            let locks = self.lock_many(&[parent, child])?;
            let still = match &locks[&parent].as_ref().map(|i| &i.content) {
                Some(Content::Dir(d)) => d.get(name).map(|e| e.0),
                _ => return Err(Errno::ENOTDIR),
            };
            if still == Some(child) {
                return Ok((child, locks));
            }
        }
    }

    /// Removes the link `name` (not a directory) from `parent`; the inode goes when its last
    /// link and last open handle are gone.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        self.remove(parent, name, false)
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        self.remove(parent, name, true)
    }

    fn remove(&self, parent: u64, name: &[u8], dir_wanted: bool) -> Result<(), Errno> {
        self.check_writable()?;
        if name == b"." {
            return Err(Errno::EINVAL);
        }
        if name == b".." {
            return Err(Errno::ENOTEMPTY);
        }
        check_name(name)?;
        let (child, mut locks) = self.lock_entry(parent, name)?;
        if child == parent {
            return Err(Errno::EINVAL);
        }
        let c = locks[&child].as_ref().expect("locked live").clone_meta();
        let is_dir = c.attr.kind() == S_IFDIR;
        match (dir_wanted, is_dir) {
            (true, false) => return Err(Errno::ENOTDIR),
            (false, true) => return Err(Errno::EISDIR),
            _ => {}
        }
        if is_dir && !c.is_empty_dir {
            return Err(Errno::ENOTEMPTY);
        }
        let t = now_ns();
        let p = locks
            .get(&parent)
            .and_then(|g| g.as_ref())
            .expect("locked live");
        let mut pattr = p.attr;
        pattr.mtime = t;
        pattr.ctime = t;
        if is_dir {
            pattr.nlink -= 1;
        }
        let pe = vec![
            Entry::DirRemove {
                name: name.to_vec(),
            },
            Entry::Attr(pattr),
        ];
        let pa = self.append_log(p, &pe)?;
        let mut cattr = c.attr;
        cattr.nlink = if is_dir { 0 } else { cattr.nlink - 1 };
        cattr.ctime = t;
        let ps = self.slot_offset(parent);
        let cs = self.slot_offset(child);
        let free_now = cattr.nlink == 0 && c.open == 0 && !self.held(child);
        let mut freed = Vec::new();
        if free_now {
            self.commit_words(&[(ps + 8, pa.tail), (cs, 0), (cs + 8, 0)]);
            let p = locks
                .get_mut(&parent)
                .and_then(|g| g.as_mut())
                .expect("locked live");
            self.applied(p, pa, &pe, &mut freed);
            let g = locks.get_mut(&child).expect("locked");
            self.forget_inode(g.take().expect("locked live"));
        } else {
            let ce = vec![Entry::Attr(cattr)];
            let ci = locks[&child].as_ref().expect("locked live");
            let ca = match self.append_log(ci, &ce) {
                Ok(a) => a,
                Err(e) => {
                    self.discard(pa);
                    return Err(e);
                }
            };
            self.commit_words(&[(ps + 8, pa.tail), (cs + 8, ca.tail)]);
            let p = locks
                .get_mut(&parent)
                .and_then(|g| g.as_mut())
                .expect("locked live");
            self.applied(p, pa, &pe, &mut freed);
            let ci = locks
                .get_mut(&child)
                .and_then(|g| g.as_mut())
                .expect("locked live");
            self.applied(ci, ca, &ce, &mut freed);
        }
        self.free_blocks(&freed);
        let p = locks
            .get_mut(&parent)
            .and_then(|g| g.as_mut())
            .expect("locked live");
        self.maybe_compact(p);
        Ok(())
    }

    /// Adds a hard link `name` in `parent` to the non-directory `ino`.
    pub fn link(&self, ino: u64, parent: u64, name: &[u8]) -> Result<Attr, Errno> {
        self.check_writable()?;
        check_name(name)?;
        let mut locks = self.lock_many(&[ino, parent])?;
        let target = locks[&ino].as_ref().expect("locked live");
        if target.attr.kind() == S_IFDIR {
            return Err(Errno::EPERM);
        }
        if target.attr.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        if target.attr.nlink >= LINK_MAX {
            return Err(Errno::EMLINK);
        }
        let dir = locks[&parent].as_ref().expect("locked live");
        let Content::Dir(d) = &dir.content else {
            return Err(Errno::ENOTDIR);
        };
        if d.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let t = now_ns();
        let mut tattr = target.attr;
        tattr.nlink += 1;
        tattr.ctime = t;
        let mut pattr = dir.attr;
        pattr.mtime = t;
        pattr.ctime = t;
        let te = vec![Entry::Attr(tattr)];
        let pe = vec![
            Entry::DirAdd {
                ino,
                ftype: ftype(tattr.mode),
                name: name.to_vec(),
            },
            Entry::Attr(pattr),
        ];
        let ta = self.append_log(target, &te)?;
        let pa = match self.append_log(dir, &pe) {
            Ok(a) => a,
            Err(e) => {
                self.discard(ta);
                return Err(e);
            }
        };
        self.commit_words(&[
            (self.slot_offset(ino) + 8, ta.tail),
            (self.slot_offset(parent) + 8, pa.tail),
        ]);
        let mut freed = Vec::new();
        let t = locks
            .get_mut(&ino)
            .and_then(|g| g.as_mut())
            .expect("locked live");
        self.applied(t, ta, &te, &mut freed);
        let attr = t.attr;
        let p = locks
            .get_mut(&parent)
            .and_then(|g| g.as_mut())
            .expect("locked live");
        self.applied(p, pa, &pe, &mut freed);
        self.maybe_compact(p);
        Ok(attr)
    }

    /// Renames `name` in `parent` to `new_name` in `new_parent`, atomically replacing an
    /// existing target (a file by a file, an empty directory by a directory).
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
    ) -> Result<(), Errno> {
        self.move_name(parent, name, new_parent, new_name, false)
    }

    /// [`Store::rename`] that fails with `EEXIST` if `new_name` exists, checked atomically
    /// with the move (`renameat2`'s `RENAME_NOREPLACE`).
    pub fn rename_noreplace(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
    ) -> Result<(), Errno> {
        self.move_name(parent, name, new_parent, new_name, true)
    }

    fn move_name(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        noreplace: bool,
    ) -> Result<(), Errno> {
        self.check_writable()?;
        check_name(name).map_err(|e| if e == Errno::EINVAL { Errno::EBUSY } else { e })?;
        check_name(new_name)?;
        let _moving = self.rename.lock();
        loop {
            let (src, sattr) = self.lookup(parent, name)?;
            let dst = match self.lookup(new_parent, new_name) {
                Ok((d, _)) => Some(d),
                Err(Errno::ENOENT) => None,
                Err(e) => return Err(e),
            };
            if noreplace && dst.is_some() {
                return Err(Errno::EEXIST);
            }
            if dst == Some(src) {
                return Ok(()); // same inode: POSIX says do nothing
            }
            if sattr.kind() == S_IFDIR && parent != new_parent && self.is_within(new_parent, src)? {
                // Not into its own subtree.
                return Err(Errno::EINVAL);
            }
            let mut inos = vec![parent, new_parent, src];
            inos.extend(dst);
            let mut locks = self.lock_many(&inos)?;
            if named(&locks, parent, name)? != Some(src)
                || named(&locks, new_parent, new_name)? != dst
            {
                continue; // changed while unlocked: look again
            }
            return self.rename_locked(&mut locks, parent, name, new_parent, new_name, src, dst);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn rename_locked(
        &self,
        locks: &mut BTreeMap<u64, Guard<'_>>,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        src: u64,
        dst: Option<u64>,
    ) -> Result<(), Errno> {
        let get = |locks: &BTreeMap<u64, Guard<'_>>, i: u64| {
            locks[&i].as_ref().expect("locked live").clone_meta()
        };
        let s = get(locks, src);
        let src_dir = s.attr.kind() == S_IFDIR;
        let t = now_ns();
        // New attribute values per inode, applied in order to a working copy.
        let mut attrs: BTreeMap<u64, Attr> = BTreeMap::new();
        let attr_of = |attrs: &mut BTreeMap<u64, Attr>,
                       locks: &BTreeMap<u64, Guard<'_>>,
                       i: u64|
         -> Attr { *attrs.entry(i).or_insert_with(|| get(locks, i).attr) };
        let mut changes: BTreeMap<u64, Vec<Entry>> = BTreeMap::new();
        let mut free_dst = false;
        if let Some(d) = dst {
            let dm = get(locks, d);
            let dst_dir = dm.attr.kind() == S_IFDIR;
            match (src_dir, dst_dir) {
                (false, true) => return Err(Errno::EISDIR),
                (true, false) => return Err(Errno::ENOTDIR),
                (true, true) if !dm.is_empty_dir => return Err(Errno::ENOTEMPTY),
                _ => {}
            }
            let mut da = attr_of(&mut attrs, locks, d);
            da.nlink = if dst_dir { 0 } else { da.nlink - 1 };
            da.ctime = t;
            if dst_dir {
                let mut np = attr_of(&mut attrs, locks, new_parent);
                np.nlink -= 1;
                attrs.insert(new_parent, np);
            }
            free_dst = da.nlink == 0 && dm.open == 0 && !self.held(d);
            attrs.insert(d, da);
        }
        let mut pa = attr_of(&mut attrs, locks, parent);
        pa.mtime = t;
        pa.ctime = t;
        if src_dir && parent != new_parent {
            pa.nlink -= 1;
        }
        attrs.insert(parent, pa);
        let mut npa = attr_of(&mut attrs, locks, new_parent);
        npa.mtime = t;
        npa.ctime = t;
        if src_dir && parent != new_parent {
            npa.nlink += 1;
            if npa.nlink > LINK_MAX {
                return Err(Errno::EMLINK);
            }
        }
        attrs.insert(new_parent, npa);
        let mut sa = attr_of(&mut attrs, locks, src);
        sa.ctime = t;
        if src_dir {
            sa.parent = new_parent;
        }
        attrs.insert(src, sa);
        changes.entry(parent).or_default().push(Entry::DirRemove {
            name: name.to_vec(),
        });
        changes.entry(new_parent).or_default().push(Entry::DirAdd {
            ino: src,
            ftype: ftype(s.attr.mode),
            name: new_name.to_vec(),
        });
        for (&i, a) in &attrs {
            if Some(i) == dst && free_dst {
                continue;
            }
            changes.entry(i).or_default().push(Entry::Attr(*a));
        }
        // Commit all tails (and the freed target's slot) at once.
        let extra = match (dst, free_dst) {
            (Some(d), true) => {
                let ds = self.slot_offset(d);
                vec![(ds, 0), (ds + 8, 0)]
            }
            _ => Vec::new(),
        };
        let freed = self.commit_many(locks, &changes, &extra)?;
        if let (Some(d), true) = (dst, free_dst) {
            let inode = locks
                .get_mut(&d)
                .and_then(|g| g.take())
                .expect("locked live");
            self.forget_inode(inode);
        }
        self.free_blocks(&freed);
        for i in [parent, new_parent] {
            if let Some(inode) = locks.get_mut(&i).and_then(|g| g.as_mut()) {
                self.maybe_compact(inode);
            }
        }
        Ok(())
    }

    /// Appends each inode's entries in `changes` (all locked in `locks`), then commits every
    /// new tail, with the `extra` slot words, through one journal transaction. Returns the
    /// blocks the entries unmapped. Nothing is committed if an append fails.
    fn commit_many(
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
        self.commit_words(&words);
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

    /// Exchanges the inodes `name` in `parent` and `new_name` in `new_parent` name, atomically
    /// (`renameat2`'s `RENAME_EXCHANGE`): both names must exist, and either may be a
    /// directory (which moves with its subtree; neither may end up inside itself, EINVAL).
    pub fn exchange(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
    ) -> Result<(), Errno> {
        self.check_writable()?;
        check_name(name).map_err(|e| if e == Errno::EINVAL { Errno::EBUSY } else { e })?;
        check_name(new_name).map_err(|e| if e == Errno::EINVAL { Errno::EBUSY } else { e })?;
        let _moving = self.rename.lock();
        loop {
            let (a, aattr) = self.lookup(parent, name)?;
            let (b, battr) = self.lookup(new_parent, new_name)?;
            if a == b {
                return Ok(());
            }
            if parent != new_parent {
                for (dir, into) in [(a, new_parent), (b, parent)] {
                    let is_dir = if dir == a { aattr.kind() } else { battr.kind() } == S_IFDIR;
                    if is_dir && self.is_within(into, dir)? {
                        return Err(Errno::EINVAL);
                    }
                }
            }
            let mut locks = self.lock_many(&[parent, new_parent, a, b])?;
            if named(&locks, parent, name)? != Some(a)
                || named(&locks, new_parent, new_name)? != Some(b)
            {
                continue; // changed while unlocked: look again
            }
            let t = now_ns();
            let attr = |locks: &BTreeMap<u64, Guard<'_>>, i: u64| {
                locks[&i].as_ref().expect("locked live").attr
            };
            let (mut aa, mut ba) = (attr(&locks, a), attr(&locks, b));
            let (a_dir, b_dir) = (aa.kind() == S_IFDIR, ba.kind() == S_IFDIR);
            let mut attrs: BTreeMap<u64, Attr> = BTreeMap::new();
            let mut pa = attr(&locks, parent);
            pa.mtime = t;
            pa.ctime = t;
            attrs.insert(parent, pa);
            let mut npa = attr(&locks, new_parent);
            npa.mtime = t;
            npa.ctime = t;
            if parent != new_parent {
                // Each parent trades one subdirectory (a "..") for what it receives.
                pa.nlink = pa.nlink + u32::from(b_dir) - u32::from(a_dir);
                npa.nlink = npa.nlink + u32::from(a_dir) - u32::from(b_dir);
                if pa.nlink > LINK_MAX || npa.nlink > LINK_MAX {
                    return Err(Errno::EMLINK);
                }
                attrs.insert(parent, pa);
                if a_dir {
                    aa.parent = new_parent;
                }
                if b_dir {
                    ba.parent = parent;
                }
            }
            attrs.insert(new_parent, npa);
            aa.ctime = t;
            ba.ctime = t;
            attrs.insert(a, aa);
            attrs.insert(b, ba);
            let mut changes: BTreeMap<u64, Vec<Entry>> = BTreeMap::new();
            changes.entry(parent).or_default().push(Entry::DirAdd {
                ino: b,
                ftype: ftype(ba.mode),
                name: name.to_vec(),
            });
            changes.entry(new_parent).or_default().push(Entry::DirAdd {
                ino: a,
                ftype: ftype(aa.mode),
                name: new_name.to_vec(),
            });
            for (&i, at) in &attrs {
                changes.entry(i).or_default().push(Entry::Attr(*at));
            }
            let freed = self.commit_many(&mut locks, &changes, &[])?;
            self.free_blocks(&freed);
            for i in [parent, new_parent] {
                if let Some(inode) = locks.get_mut(&i).and_then(|g| g.as_mut()) {
                    self.maybe_compact(inode);
                }
            }
            return Ok(());
        }
    }

    /// Whether directory `dir` is `ancestor` or lies below it.
    fn is_within(&self, dir: u64, ancestor: u64) -> Result<bool, Errno> {
        let mut up = dir;
        loop {
            if up == ancestor {
                return Ok(true);
            }
            if up == ROOT {
                return Ok(false);
            }
            up = self.getattr(up)?.parent;
        }
    }

    // ---- open handles -------------------------------------------------------------------

    /// Notes an open handle on `ino` (an unlinked inode lives until its last handle goes).
    pub fn open(&self, ino: u64) -> Result<Attr, Errno> {
        let mut g = self.slot(ino)?.write();
        let inode = g.as_mut().ok_or(Errno::ENOENT)?;
        inode.open += 1;
        Ok(inode.attr)
    }

    /// Drops an open handle; frees the inode if it was the last and no links remain.
    pub fn release(&self, ino: u64) -> Result<(), Errno> {
        let mut g = self.lock(ino)?;
        let inode = g.as_mut().ok_or(Errno::ENOENT)?;
        inode.open = inode.open.saturating_sub(1);
        if inode.open == 0 && inode.attr.nlink == 0 && !self.held(ino) {
            self.free_inode(&mut g)?;
        }
        Ok(())
    }

    // ---- holds: the front end's references to inode numbers ------------------------------

    /// Takes a hold on `ino`: until it is released ([`Store::release_holds`]), the inode lives
    /// on when its last link goes (as an open handle keeps it), and its number is not given
    /// to a new inode. The FUSE mount holds one per lookup the kernel counts, so a number the
    /// kernel still knows never names another file. For an inode just made or looked up
    /// without a hold; [`Store::lookup_held`] looks up and holds in one step.
    pub fn hold(&self, ino: u64) -> Result<(), Errno> {
        let g = self.slot(ino)?.read();
        g.as_ref().ok_or(Errno::ENOENT)?;
        self.table.holds(ino).fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Releases `n` holds on `ino` (the kernel's `forget`); the inode is freed if they were
    /// the last references to an inode with no links and no open handles.
    pub fn release_holds(&self, ino: u64, n: u64) -> Result<(), Errno> {
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
    }

    /// Whether a front end holds `ino`.
    fn held(&self, ino: u64) -> bool {
        self.table.holds(ino).load(Ordering::Acquire) != 0
    }

    /// The generation of inode `ino`: a number that changes each time its slot is given to a
    /// new inode, kept on media, so (number, generation) names one file for the life of the
    /// store, across remounts (an NFS-style file handle).
    pub fn generation(&self, ino: u64) -> Result<u64, Errno> {
        self.slot(ino)?;
        Ok(self.pm.load_u64(self.slot_offset(ino) + SLOT_GENERATION_AT))
    }

    /// Checks that `ino` exists and waits for its asynchronous write, if one is still copying:
    /// every synchronous operation is already durable when it returns.
    pub fn fsync(&self, ino: u64) -> Result<(), Errno> {
        let g = self.lock(ino)?;
        g.as_ref().map(|_| ()).ok_or(Errno::ENOENT)
    }
}

/// Splits the `n` bytes of a file at `off` into runs, each either mapped to contiguous blocks
/// (one mover request; `f` gets the region offset) or a hole (`None`); `f` also gets the run's
/// offset into the read and its length.
pub(crate) fn for_each_run(
    pages: &BTreeMap<u64, u64>,
    off: u64,
    n: usize,
    mut f: impl FnMut(usize, usize, Option<u64>),
) {
    let mut done = 0usize;
    while done < n {
        let pos = off + done as u64;
        let pg = pos / BLOCK;
        let in_page = pos % BLOCK;
        let mut len = ((BLOCK - in_page) as usize).min(n - done);
        let at = pages.get(&pg).map(|&b| {
            // Extend over pages whose blocks are contiguous.
            let mut next = pg + 1;
            while done + len < n && pages.get(&next) == Some(&(b + (next - pg))) {
                len = (len + BLOCK as usize).min(n - done);
                next += 1;
            }
            b * BLOCK + in_page
        });
        f(done, len, at);
        done += len;
    }
}

/// The inode `name` names in directory `dir`, which `locks` holds locked (ENOTDIR if it is
/// not a directory): how a multi-inode operation checks, once it holds its locks, that the
/// names it looked up still name what they did.
fn named(locks: &BTreeMap<u64, Guard<'_>>, dir: u64, name: &[u8]) -> Result<Option<u64>, Errno> {
    match locks[&dir].as_ref().map(|i| &i.content) {
        Some(Content::Dir(m)) => Ok(m.get(name).map(|e| e.0)),
        _ => Err(Errno::ENOTDIR),
    }
}

/// What rename/unlink need to know of an inode without holding a borrow.
struct Meta {
    attr: Attr,
    open: u32,
    is_empty_dir: bool,
}

impl Inode {
    fn clone_meta(&self) -> Meta {
        Meta {
            attr: self.attr,
            open: self.open,
            is_empty_dir: matches!(&self.content, Content::Dir(d) if d.is_empty()),
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if self.region.is_some() && !self.failed.load(Ordering::Relaxed) {
            self.mark_clean();
        }
        // A leaked asynchronous read may still have the engine copying out of the region:
        // the mapping goes only once the engine is idle.
        let engine = self.mover.engine();
        while (0..engine.info().channels).any(|c| engine.queue_depth(c) > 0) {
            std::thread::yield_now();
        }
    }
}
