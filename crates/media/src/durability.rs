//! What survives a power cut on a region, and how a store reaches the disk: the
//! persistence [`Granularity`] (libpmem2's, plus "volatile" for memory file systems), the
//! [`Syncer`] that `msync`s a region from any thread, and [`dirty_kb`], what a power cut would
//! take of a mapped file now.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::persist::Persist;

/// What survives a power cut, and what makes a store to the region survive it (libpmem2's
/// persistence granularity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// Flush + fence make a store durable: the CPU caches are the only volatile stage
    /// (DAX mapped `MAP_SYNC`, device DAX).
    CacheLine,
    /// A file through the page cache on a disk: flush + fence only reach the page cache,
    /// which survives a crash of the process but not of the machine. [`Region::sync`](crate::Region::sync)
    /// (`msync`) reaches the disk; until then the kernel writes dirty pages back whenever it
    /// likes, in any order, so a power cut can leave any subset of them on the disk.
    Page,
    /// Memory that nothing survives a power cut in (tmpfs, ramfs, anonymous memory): stores
    /// survive a crash of the process (or not even that, for anonymous memory), and syncing
    /// has nothing to reach.
    Volatile,
}

impl Granularity {
    /// Lowercase name for reports: `cache-line`, `page`, `volatile`.
    pub fn name(self) -> &'static str {
        match self {
            Granularity::CacheLine => "cache-line",
            Granularity::Page => "page",
            Granularity::Volatile => "volatile",
        }
    }

    /// What an operation that returned survives on this medium, in words for banners and
    /// `stat`.
    pub fn guarantee(self) -> &'static str {
        match self {
            Granularity::CacheLine => {
                "every operation is durable when it returns (flush + fence reach the medium)"
            }
            Granularity::Page => {
                "an operation survives a crash of the owner when it returns, and a power cut \
                 once fsync (or the store's periodic sync) returns; after any power cut the \
                 store recovers to its last completed sync"
            }
            Granularity::Volatile => {
                "an operation survives a crash of the owner when it returns; nothing survives \
                 a power cut (memory file system)"
            }
        }
    }
}

/// Syncs a [`Region`](crate::Region) from another thread: see [`Region::syncer`](crate::Region::syncer).
#[derive(Debug, Clone, Copy)]
pub struct Syncer {
    pub(crate) base: usize,
    pub(crate) len: usize,
    /// Whether syncing reaches anything (a page-granularity file).
    pub(crate) page: bool,
    pub(crate) persist: Persist,
}

impl Syncer {
    /// [`Region::sync_range`](crate::Region::sync_range): the pages overlapping `[off, off + len)` of the region, which
    /// the caller keeps inside it, are on the disk when this returns.
    pub fn sync_range(&self, off: u64, len: u64) -> std::io::Result<()> {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.len as u64),
            "sync of {off}+{len} outside a region of {}",
            self.len
        );
        self.persist.record(crate::trace::Event::Sync {
            addr: self.base + off as usize,
            len: len as usize,
        });
        if !self.page || len == 0 {
            return Ok(());
        }
        let start = off & !(crate::region::FILE_ALIGN - 1);
        let end = (off + len)
            .next_multiple_of(crate::region::FILE_ALIGN)
            .min(self.len as u64);
        // SAFETY: `[start, end)` is page aligned and inside the live mapping (the holder keeps
        // the region alive); msync reads no memory of ours.
        let rc = unsafe {
            libc::msync(
                (self.base + start as usize) as *mut libc::c_void,
                (end - start) as usize,
                libc::MS_SYNC,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Whether syncing reaches a disk (the region has [`Granularity::Page`]).
    pub fn reaches_disk(&self) -> bool {
        self.page
    }
}

/// Kilobytes of process `pid`'s mappings of `file` whose pages are dirty (smaps'
/// `Shared_Dirty` + `Private_Dirty`): on a [`Granularity::Page`] region, what a power cut
/// would take now. `None` when `pid` maps no such file or its smaps cannot be read.
pub fn dirty_kb(pid: u32, file: &Path) -> Option<u64> {
    let file = std::fs::canonicalize(file).ok()?;
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let (mut inside, mut mapped, mut kb) = (false, false, 0);
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // A mapping's header: range, permissions, offset, device, inode, path.
            inside = words.nth(4).map(Path::new) == Some(file.as_path());
            mapped |= inside;
        } else if inside && (first == "Shared_Dirty:" || first == "Private_Dirty:") {
            kb += words.next()?.parse::<u64>().ok()?;
        }
    }
    mapped.then_some(kb)
}

/// Whether `file` lives on a file system that keeps everything in memory (tmpfs, ramfs).
pub(crate) fn in_memory_fs(file: &File) -> bool {
    // SAFETY: statfs is plain data; fstatfs fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor we hold and a valid, writable statfs.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    matches!(st.f_type as i64, TMPFS_MAGIC | RAMFS_MAGIC)
}

/// This boot's identity (`/proc/sys/kernel/random/boot_id`); empty when unreadable.
pub(crate) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CopyMode, Region, MIN_REGION};

    #[test]
    fn dirty_pages_are_counted_until_synced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let mut r = Region::create(&path, 4 * MIN_REGION, Persist::detect()).unwrap();
        let me = std::process::id();
        r.sync().unwrap();
        r.write(0, &vec![1u8; 1 << 20], CopyMode::Durable).unwrap();
        let dirty = dirty_kb(me, &path).expect("mapped");
        r.sync().unwrap();
        let after = dirty_kb(me, &path).expect("mapped");
        if r.granularity() == Granularity::Page {
            assert!(dirty >= 1024 && after < 64, "{dirty} kB, then {after} kB");
        }
        assert_eq!(dirty_kb(me, &dir.path().join("other")), None);
    }
}
