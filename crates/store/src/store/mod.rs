//! The store: the `Store` type, its accessors and its parts, one module per responsibility:
//! [`mount`] (format, mount, recovery's assembly, clean unmount), [`lock`] (inode locks and
//! settling asynchronous writes), [`log`] (appending, applying and compacting logs),
//! [`commit`] (which words a change commits, and the sync API), [`data`] (reads, truncate),
//! [`write`](mod@write) (the two-phase copy-on-write write), [`namespace`] (lookups, make, link,
//! unlink), [`rename`] and [`lifetime`] (open handles, holds, freeing inodes).
//!
//! Two parts are types the store holds, their state private to them: [`Commits`] (how words
//! commit and become durable: the tail store, the undo journal, the page-media ring and its
//! writer) and [`Space`] (the data zone's blocks: the allocator and its reserves).
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

mod commit;
mod data;
mod extents;
mod faults;
mod lifetime;
mod lock;
mod log;
mod mount;
mod namespace;
mod rename;
mod write;

pub(crate) use data::for_each_run;
pub use extents::{Extents, Run, Seek};
pub use write::{PreparedWrite, Target};

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLockWriteGuard};
use switchyard_engine::DurableRecord;
use switchyard_media::Region;
use switchyard_mover::Mover;

use crate::changes::Changes;
use crate::commits::Commits;
use crate::error::Errno;
use crate::format::{Seq, Superblock, BLOCK, NAME_MAX, ROOT, S_IFDIR, S_IFMT};
use crate::inode::Inode;
use crate::pm::Pm;
use crate::recovery::load_inode;
use crate::reserve::{self, Space};
use crate::table::{FreeInodes, Slot, Table};
#[cfg(feature = "testing")]
use faults::Faults;

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
    /// Free blocks (the blocks kept for log pages included, as ext4 counts its own).
    pub free_blocks: u64,
    /// Free blocks an unprivileged caller may take: the free blocks less the reserved share
    /// and the blocks kept for log pages (`df`'s "Avail").
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
    pub(crate) pm: Arc<Pm>,
    /// Geometry (never changes while mounted).
    geo: Superblock,
    /// The superblock as last written (clean flag, mount count).
    sb: Mutex<Superblock>,
    mover: Arc<Mover>,
    /// The durable completion record of each engine channel (those below
    /// [`RECORD_CHANNELS`](crate::format::RECORD_CHANNELS)), in the region's completion block.
    records: Box<[DurableRecord]>,
    /// Every inode slot, allocated in chunks as used ([`crate::table`]).
    table: Table,
    free_inodes: Mutex<FreeInodes>,
    /// The data zone's blocks: the allocator and its reserves ([`crate::reserve`]).
    pub(crate) space: Space,
    rename: Mutex<()>,
    /// Bumped on every change of an inode ([`crate::changes`]).
    changes: Changes,
    /// Set after an internal inconsistency: the store refuses further writes.
    failed: std::sync::atomic::AtomicBool,
    #[cfg(feature = "testing")]
    faults: Faults,
    /// Whether this mount used the clean-unmount checkpoint.
    quick: bool,
    /// The commit points: the undo journal, and on page media the commit ring and its
    /// background writer ([`crate::commits`]). Dropped before the region.
    commits: Commits,
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

impl Store {
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
            blocks: self.space.zone_blocks(),
            free_blocks: self.space.free_blocks(),
            available_blocks: self.space.available_blocks(),
            inodes: sb.inode_slots - 1,
            free_inodes: self.free_inodes.lock().count(),
            name_max: NAME_MAX as u64,
        }
    }

    /// Runs `f` as an unprivileged caller: data allocations in it leave the reserved share
    /// alone (ENOSPC once only the reserved share is free).
    pub fn as_unprivileged<R>(&self, f: impl FnOnce() -> R) -> R {
        reserve::as_unprivileged(f)
    }

    /// Sets the reserved share to `percent` of the data zone (at most 50).
    pub fn set_reserved_percent(&self, percent: u32) -> Result<(), Errno> {
        self.space.set_reserved_percent(percent)
    }

    /// Blocks in the reserved share.
    pub fn reserved_blocks(&self) -> u64 {
        self.space.reserved_blocks()
    }

    /// Blocks this caller's data may take now ([`Space::data_room`]).
    pub(crate) fn data_room(&self) -> u64 {
        self.space.data_room()
    }

    pub(crate) fn check_writable(&self) -> Result<(), Errno> {
        if self.failed.load(Ordering::Relaxed) || self.commits.failed() {
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
                let (head, tail) = (
                    self.commits.load(&self.pm, off),
                    self.commits.load(&self.pm, off + 8),
                );
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
            Err(e) => e.errno,
        }
    }

    fn slot_offset(&self, ino: u64) -> u64 {
        self.geo.slot_offset(ino)
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
