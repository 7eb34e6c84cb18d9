//! Formatting a region, mounting a store (the quick path after a clean unmount, recovery
//! otherwise) and unmounting it cleanly with a free-space checkpoint.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;
use switchyard_engine::DurableRecord;
use switchyard_media::Region;
use switchyard_mover::Mover;

#[cfg(feature = "testing")]
use super::faults::Faults;
use super::{now_ns, Owner, Store};
use crate::alloc::Allocator;
use crate::changes::Changes;
use crate::commits::{replay_ring, Commits};
use crate::error::{Corruption, Errno, MountError};
use crate::format::{
    decode_journal, encode_checkpoint_page, log_page_header, Attr, Entry, Superblock, BLOCK,
    CHECKPOINT_CAPACITY, LOG_ENTRIES_AT, RECORD_CHANNELS, ROOT, S_IFDIR,
};
use crate::pm::Pm;
use crate::recovery::{read_checkpoint, scan_present, superblock, BlockMap, Present, Scan};
use crate::reserve::Space;
use crate::table::{FreeInodes, Table};

/// What a mount rebuilt, before the store is assembled around it.
struct Mounted {
    sb: Superblock,
    used_replica: bool,
    alloc: Arc<Allocator>,
    table: Table,
    free_inodes: FreeInodes,
    orphans: Vec<u64>,
    quick: bool,
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
        let io = |e: std::io::Error| {
            MountError::Media(switchyard_media::MediaError::Io {
                path: region.path().to_path_buf(),
                op: "msync",
                source: e,
            })
        };
        // Invalidate first: a crash mid-format leaves no half-valid store behind.
        pm.write(0, &[0u8; 128]);
        pm.write(BLOCK, &[0u8; 128]);
        pm.barrier().map_err(io)?;
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
        pm.barrier().map_err(io)?;
        pm.write(BLOCK, &sb.encode());
        pm.fence();
        pm.write(0, &sb.encode());
        pm.barrier().map_err(io)?;
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
        // A page-media mount's commit ring first: the table as its last sync (or, when the
        // page cache survived, its last commit) left it.
        replay_ring(&pm, &region, &sb).map_err(corrupt)?;
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
        start_generation(&pm, &mut sb, used_replica).map_err(|e| {
            corrupt(Corruption::Invalid(format!(
                "cannot sync the store file: {e}"
            )))
        })?;
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
        let pm = Arc::new(pm);
        let mut store = Store {
            commits: Commits::new(&sb),
            pm,
            geo: sb,
            sb: Mutex::new(sb),
            mover,
            records,
            table,
            free_inodes: Mutex::new(free_inodes),
            space: Space::new(alloc, sb.total_blocks - sb.data_block),
            rename: Mutex::new(()),
            changes: Changes::default(),
            failed: Default::default(),
            #[cfg(feature = "testing")]
            faults: Faults::default(),
            quick,
            region: Some(region),
        };
        // Page media: from here on the table changes only through the commit ring (the
        // orphans' release included).
        let region = store.region.as_ref().expect("just mounted");
        let started =
            store
                .commits
                .start_writeback(&store.pm, store.space.allocator(), region, &store.geo);
        started.map_err(|e| {
            corrupt(Corruption::Invalid(format!(
                "cannot start the page-media commit ring: {e}"
            )))
        })?;
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
            alloc: Arc::new(alloc),
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
            pm.barrier().map_err(sync_failed)?;
            pm.store_u64(sb.journal_block * BLOCK, 0);
            pm.barrier().map_err(sync_failed)?;
        }
        // Logs whose last (orderless) write never completed end before it, durably, before the
        // mount count moves on and makes every entry of this generation count.
        if !found.cuts.is_empty() {
            for &(off, tail) in &found.cuts {
                pm.store_u64(off, tail);
            }
            pm.barrier().map_err(sync_failed)?;
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
            alloc: Arc::new(alloc),
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
        self.commits.drop_writeback();
        self.region
            .take()
            .expect("a mounted store holds its region")
    }

    /// Frees inodes unlinked while open (their handles end with the mount), writes the
    /// free-space checkpoint, then marks the superblock clean with a pointer to it.
    pub(super) fn mark_clean(&mut self) {
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
        // Page media: everything durable and in place, and the ring gone, before the
        // checkpoint takes free blocks (the ring's among them).
        if self.commits.stop_writeback().is_err() {
            return;
        }
        let checkpoint = self.write_checkpoint();
        if self.pm.barrier().is_err() {
            return;
        }
        let mut sb = self.sb.lock();
        sb.clean = true;
        sb.checkpoint = checkpoint;
        let enc = sb.encode();
        self.pm.write(0, &enc);
        let _ = self.pm.barrier();
        self.pm.write(BLOCK, &enc);
        let _ = self.pm.barrier();
    }

    /// Writes the free extents into pages taken from the free space (and listed as free
    /// themselves); returns the first page, or 0 if there is no room (the next mount scans).
    fn write_checkpoint(&self) -> u64 {
        let mut want = 1;
        loop {
            let Ok(got) = self.space.take(want as u64) else {
                return 0;
            };
            let pages: Vec<u64> = got.iter().flat_map(|e| e.start..e.start + e.len).collect();
            let mut listed: Vec<(u64, u64)> = self
                .space
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
                    self.space.free(e);
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
}

/// Starts a mount's generation on media: repairs the primary superblock from the replica if
/// that is what was read, marks the store in use with the next mount count (every orderless
/// write of the last mount is settled now: the scan cut the logs of those whose copies never
/// completed) in both copies, and zeroes the completion records (this mount's engine numbers
/// its batches afresh).
fn start_generation(pm: &Pm, sb: &mut Superblock, used_replica: bool) -> std::io::Result<()> {
    if used_replica {
        pm.write(0, &sb.encode());
        pm.barrier()?;
    }
    sb.clean = false;
    sb.checkpoint = 0;
    sb.mount_count += 1;
    let enc = sb.encode();
    pm.write(0, &enc);
    pm.barrier()?;
    pm.write(BLOCK, &enc);
    pm.fence();
    pm.write(sb.completion_block * BLOCK, &[0u8; BLOCK as usize]);
    pm.barrier()
}

/// A sync of the store file that failed during recovery, as the mount reports it.
fn sync_failed(e: std::io::Error) -> Corruption {
    Corruption::Invalid(format!("cannot sync the store file: {e}"))
}
