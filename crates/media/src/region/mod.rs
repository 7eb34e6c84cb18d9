//! A region of slow memory mapped into the process.
//!
//! | kind                  | how it is mapped                         | [`Granularity`] | durable after |
//! |-----------------------|------------------------------------------|-----------------|---------------|
//! | [`RegionKind::File`] on a disk file system | `MAP_SHARED` over the page cache | `Page` | flush + fence survives a process crash; only [`Region::sync`] (`msync`) reaches the disk, and the page cache writes dirty pages back whenever it likes, in any order |
//! | [`RegionKind::File`] on tmpfs or ramfs | `MAP_SHARED` over the page cache | `Volatile` | survives a process crash, never a power cut |
//! | [`RegionKind::Dax`]   | `MAP_SHARED_VALIDATE \| MAP_SYNC`        | `CacheLine` | flush + fence |
//! | [`RegionKind::DevDax`]| `MAP_SHARED` of `/dev/daxX.Y`            | `CacheLine` | flush + fence |
//! | [`RegionKind::Memory`]| anonymous `MAP_PRIVATE` (tests, crash images) | `Volatile` (or what the test says) | never (gone at exit) |
//!
//! The granularity is libpmem2's (`pmem2_get_persist_fn`, `PMEM2_GRANULARITY_PAGE` against
//! `PMEM2_GRANULARITY_CACHE_LINE`), plus a third answer for memory that no power cut leaves
//! anything of: there, durability against a crash of the process is all there is.
//!
//! The embedded default is a regular file in the working directory: real memory-mapped
//! storage on machines without persistent memory.
//!
//! A region over a file (or device) has one owner: [`Region::create`] and [`Region::open`]
//! take an exclusive lock on it before they grow or map it, and refuse with
//! [`MediaError::Busy`] while another open holds it (see the `owner` module).

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use crate::durability::{boot_id, Granularity, Syncer};
use crate::error::MediaError;
use crate::kernels::CopyMode;
use crate::persist::Persist;

mod mapping;

/// The smallest region Switchyard maps: one 2 MiB huge page, enough for any format's headers.
pub const MIN_REGION: u64 = 2 << 20;

/// Page alignment of file regions.
pub(crate) const FILE_ALIGN: u64 = 4096;
/// Mapping alignment device DAX requires (its default 2 MiB page size).
const DEVDAX_ALIGN: u64 = 2 << 20;

/// What backs a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionKind {
    /// A regular file mapped through the page cache.
    File,
    /// A file on a DAX file system, mapped with `MAP_SYNC`.
    Dax,
    /// A device-DAX character device.
    DevDax,
    /// Anonymous memory: crash images and tests; nothing survives the process.
    Memory,
}

impl RegionKind {
    /// Lowercase name for reports.
    pub fn name(self) -> &'static str {
        match self {
            RegionKind::File => "file",
            RegionKind::Dax => "dax",
            RegionKind::DevDax => "devdax",
            RegionKind::Memory => "memory",
        }
    }
}

/// A mapped region of slow memory.
///
/// The region hands out raw pointers: callers that write through [`Region::as_mut_ptr`] must
/// keep concurrent writers on disjoint ranges. The safe accessors ([`Region::write`],
/// [`Region::read`]) check bounds and go through the [`Persist`] kernels.
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    kind: RegionKind,
    path: PathBuf,
    /// Held open for the mapping's lifetime (none for memory regions).
    _file: Option<File>,
    persist: Persist,
    granularity: Granularity,
    /// A memory region's identity ([`Region::cache_identity`]); 0 for files and devices.
    memory_id: u64,
}

// SAFETY: (1) the mapping stays valid until Drop, which needs exclusive ownership; (2) the
// region only exposes raw pointers and `&mut self` writers, so data races are the callers'
// explicit `unsafe` responsibility.
unsafe impl Send for Region {}
// SAFETY: as above; `&Region` only allows reads and raw-pointer access.
unsafe impl Sync for Region {}

impl Region {
    /// The byte ranges (start, length), ascending, where the region may hold anything but
    /// zeros: a sparse file's data extents (`SEEK_DATA`/`SEEK_HOLE`); the whole region for
    /// devices, memory and file systems that cannot tell. Whole-region passes (fsck,
    /// recovery) skip the rest without reading it, so their cost follows what is stored,
    /// not the capacity.
    pub fn data_extents(&self) -> Vec<(u64, u64)> {
        let len = self.len as u64;
        let whole = vec![(0, len)];
        let Some(file) = self
            ._file
            .as_ref()
            .filter(|_| self.kind != RegionKind::DevDax)
        else {
            return whole;
        };
        let fd = file.as_raw_fd();
        let mut out = Vec::new();
        let mut at = 0i64;
        while (at as u64) < len {
            // SAFETY: lseek on a descriptor we hold; it touches no memory.
            let data = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
            if data < 0 {
                let e = std::io::Error::last_os_error().raw_os_error();
                if e == Some(libc::ENXIO) {
                    break; // no data past `at`
                }
                return whole; // SEEK_DATA not supported: assume everything
            }
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
            if hole < 0 {
                return whole;
            }
            let end = (hole as u64).min(len);
            if end > data as u64 {
                out.push((data as u64, end - data as u64));
            }
            at = hole;
        }
        out
    }

    /// Zeros `[off, off + len)` of a file region by punching a hole (the file system frees
    /// the blocks; the mapping reads zeros), which writes nothing and keeps a sparse file
    /// sparse. `Unsupported` for devices and memory regions, or a file system that cannot
    /// punch: the caller then writes zeros.
    pub fn punch(&self, off: u64, len: u64) -> std::io::Result<()> {
        let file = match (&self._file, self.kind) {
            (Some(f), RegionKind::File | RegionKind::Dax) => f,
            _ => return Err(std::io::ErrorKind::Unsupported.into()),
        };
        if off.checked_add(len).is_none_or(|e| e > self.len as u64) {
            return Err(std::io::ErrorKind::InvalidInput.into());
        }
        // SAFETY: fallocate on a descriptor we hold, inside the file; the mapping stays valid
        // (punched pages read as zeros).
        let r = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off as libc::off_t,
                len as libc::off_t,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Drops the region's pages from this process's resident set without changing them: a
    /// file or device mapping is shared, so its pages stay in the page cache (or on the
    /// device) and are mapped again when next touched. For a pass that reads much of a large
    /// store once (fsck). A memory region keeps its pages (dropping them would zero it).
    pub fn release_resident(&self) {
        if self.kind == RegionKind::Memory {
            return;
        }
        // SAFETY: advice over our own shared mapping; MADV_DONTNEED on a MAP_SHARED file or
        // device mapping only unmaps pages, whose contents stay in the file.
        unsafe {
            libc::madvise(self.ptr.as_ptr().cast(), self.len, libc::MADV_DONTNEED);
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions are at least [`MIN_REGION`] bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Faults every page of the mapping in, writable, without changing its contents. A file
    /// on tmpfs or another page-cache file system gets its pages on first touch, so the first
    /// write to each page pays for allocating and zeroing it; DAX media and device DAX do not.
    /// Benchmarks call this so that they measure copies, not page allocation. Needs Linux 5.14
    /// (`MADV_POPULATE_WRITE`); fails with the kernel's error otherwise, or when the file
    /// system has no room for every page.
    pub fn populate(&self) -> Result<(), MediaError> {
        // SAFETY: the range is exactly this region's live mapping; MADV_POPULATE_WRITE only
        // faults pages in (as a write of the bytes already there would) and moves no data.
        let rc = unsafe {
            libc::madvise(
                self.ptr.as_ptr().cast(),
                self.len,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if rc != 0 {
            return Err(io_err(&self.path, "madvise(MADV_POPULATE_WRITE)")(
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// What backs the region.
    pub fn kind(&self) -> RegionKind {
        self.kind
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The persistence primitives used for this region.
    pub fn persist(&self) -> Persist {
        self.persist
    }

    /// What survives a power cut, and what makes a store survive it.
    pub fn granularity(&self) -> Granularity {
        self.granularity
    }

    /// Who this mapping's page cache belongs to: a word that is the same for every open of
    /// this file on this boot of this host, and differs after a reboot (a power cut) or for
    /// any other file, device or image. A store writes it at mount: finding its own value at
    /// the next mount means the page cache its last owner wrote through is still the one
    /// behind the file (the owner crashed, the machine did not), so stores that never reached
    /// the disk are still there. A memory region answers with a number no other region of
    /// the process has (a crash image copied into a new one is a power cut's).
    pub fn cache_identity(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        match &self._file {
            Some(f) => {
                use std::os::unix::fs::MetadataExt;
                boot_id().hash(&mut h);
                if let Ok(m) = f.metadata() {
                    (m.dev(), m.ino(), m.rdev()).hash(&mut h);
                }
            }
            None => self.memory_id.hash(&mut h),
        }
        h.finish() | 1
    }

    /// First byte of the mapping, for reads.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// First byte of the mapping, for writes. Writers sharing a region must use disjoint
    /// ranges and make their writes durable through [`Persist`].
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn check(&self, offset: u64, len: usize) -> Result<usize, MediaError> {
        let end = offset.checked_add(len as u64);
        match end {
            Some(e) if e <= self.len as u64 => Ok(offset as usize),
            _ => Err(MediaError::OutOfBounds {
                offset,
                len: len as u64,
                size: self.len as u64,
            }),
        }
    }

    /// Copies `data` to `offset` in the given mode (use [`CopyMode::Durable`] for data that
    /// must survive a crash).
    pub fn write(&mut self, offset: u64, data: &[u8], mode: CopyMode) -> Result<(), MediaError> {
        let off = self.check(offset, data.len())?;
        // SAFETY: (1) off + len <= self.len was checked; (2) `&mut self` excludes other
        // writers through this handle; (3) `data` cannot alias the mapping mutably.
        unsafe {
            self.persist
                .copy(self.as_mut_ptr().add(off), data.as_ptr(), data.len(), mode)
        };
        Ok(())
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediaError> {
        let off = self.check(offset, buf.len())?;
        // SAFETY: bounds checked above; `buf` is a distinct exclusive buffer.
        unsafe {
            self.persist.copy(
                buf.as_mut_ptr(),
                self.as_ptr().add(off),
                buf.len(),
                CopyMode::Temporal,
            )
        };
        Ok(())
    }

    /// Writes the dirty page-cache pages of the whole region back to the disk and waits
    /// for them (`msync(MS_SYNC)`, which on Linux also flushes the disk's write cache).
    /// What the region held when the call began is on the disk when it returns. Needed for
    /// power-cut durability of [`Granularity::Page`] regions only; a no-op for the others
    /// (recorded as an [`Event::Sync`](crate::trace::Event::Sync) when traced).
    pub fn sync(&self) -> Result<(), MediaError> {
        self.sync_range(0, self.len as u64)
    }

    /// [`Region::sync`] for the pages overlapping `[off, off + len)` only.
    pub fn sync_range(&self, off: u64, len: u64) -> Result<(), MediaError> {
        self.check(off, len as usize)?;
        self.syncer()
            .sync_range(off, len)
            .map_err(|source| MediaError::Io {
                path: self.path.clone(),
                op: "msync",
                source,
            })
    }

    /// A handle that syncs this region from any thread (a background writer): valid while
    /// the region lives, which its holder must ensure.
    pub fn syncer(&self) -> Syncer {
        Syncer {
            base: self.ptr.as_ptr() as usize,
            len: self.len,
            page: self.granularity == Granularity::Page && self.kind == RegionKind::File,
            persist: self.persist,
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned and nothing borrows the mapping any
        // more (Drop has exclusive access).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("kind", &self.kind)
            .finish()
    }
}

fn io_err(path: &Path, op: &'static str) -> impl FnOnce(std::io::Error) -> MediaError {
    let path = path.to_path_buf();
    move |source| MediaError::Io { path, op, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_write_read_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.region");
        let mut r = Region::create(&path, MIN_REGION, Persist::detect()).unwrap();
        assert_eq!(r.len() as u64, MIN_REGION);
        r.write(100, b"hello slow memory", CopyMode::Durable)
            .unwrap();
        r.sync().unwrap();
        drop(r);
        let r = Region::open(&path, 0, Persist::detect()).unwrap();
        let mut buf = [0u8; 17];
        r.read(100, &mut buf).unwrap();
        assert_eq!(&buf, b"hello slow memory");
    }

    #[test]
    fn populate_allocates_every_page_and_keeps_the_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.region");
        let mut r = Region::create(&path, MIN_REGION, Persist::detect()).unwrap();
        r.write(4096 * 3 + 5, b"kept", CopyMode::Durable).unwrap();
        use std::os::unix::fs::MetadataExt;
        let allocated = |p: &Path| std::fs::metadata(p).unwrap().blocks() * 512;
        assert!(
            allocated(&path) < MIN_REGION,
            "a fresh region file is sparse"
        );
        r.populate().unwrap();
        assert_eq!(allocated(&path), MIN_REGION);
        let mut buf = [0u8; 4];
        r.read(4096 * 3 + 5, &mut buf).unwrap();
        assert_eq!(&buf, b"kept");
        r.read(0, &mut buf).unwrap();
        assert_eq!(buf, [0; 4]);
    }

    /// Pages of `r` in the page cache (`mincore`).
    fn resident_pages(r: &Region) -> usize {
        let mut v = vec![0u8; r.len() / 4096];
        // SAFETY: `v` has one byte per page of the mapping, which is ours and page-aligned.
        let rc = unsafe { libc::mincore(r.ptr.as_ptr().cast(), r.len(), v.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        v.iter().filter(|&&b| b & 1 == 1).count()
    }

    #[test]
    fn a_page_media_file_written_with_write_is_mapped_without_its_cached_folios() {
        // A file written with write(2) sits in the page cache in large folios, and one store
        // into one of them makes the next msync write the whole folio: opening drops them
        // (after writing them back), so that the mapping faults its pages in small.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.region");
        let mut bytes = vec![0u8; MIN_REGION as usize];
        bytes[4096 * 7..4096 * 7 + 4].copy_from_slice(b"kept");
        std::fs::write(&path, &bytes).unwrap();
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
        std::fs::set_permissions(&path, perms).unwrap();
        let r = Region::open(&path, 0, Persist::detect()).unwrap();
        if r.granularity() != Granularity::Page {
            eprintln!(
                "skipped: {} is not on a disk file system",
                dir.path().display()
            );
            return;
        }
        assert_eq!(resident_pages(&r), 0, "the written pages left the cache");
        let mut buf = [0u8; 4];
        r.read(4096 * 7, &mut buf).unwrap();
        assert_eq!(&buf, b"kept", "and were on the disk, so nothing is lost");
    }

    #[test]
    fn bad_sizes_and_paths_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = Persist::detect();
        let path = dir.path().join("r");
        assert!(matches!(
            Region::create(&path, 4096, p),
            Err(MediaError::TooSmall { .. })
        ));
        assert!(matches!(
            Region::create(&path, MIN_REGION + 1, p),
            Err(MediaError::Misaligned { .. })
        ));
        assert!(matches!(
            Region::open(dir.path().join("missing"), 0, p),
            Err(MediaError::NotFound { .. })
        ));
        std::fs::write(&path, [0u8; 8192]).unwrap();
        assert!(
            matches!(Region::open(&path, 0, p), Err(MediaError::Exposed { mode, .. }) if mode & 0o044 != 0),
            "a file others may read is refused first"
        );
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            Region::open(&path, 0, p),
            Err(MediaError::TooSmall { .. })
        ));
        drop(Region::create(&path, MIN_REGION, p).unwrap());
        assert!(matches!(
            Region::open(&path, 2 * MIN_REGION, p),
            Err(MediaError::TooSmall { .. })
        ));
    }

    #[test]
    fn a_mapped_file_has_one_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let r = Region::create(&path, MIN_REGION, Persist::detect()).unwrap();
        for second in [
            Region::open(&path, 0, Persist::detect()),
            Region::create(&path, 2 * MIN_REGION, Persist::detect()),
        ] {
            assert!(matches!(second, Err(MediaError::Busy { .. })));
        }
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            MIN_REGION,
            "a refused create does not grow the owner's file"
        );
        drop(r);
        Region::open(&path, 0, Persist::detect()).expect("free once the owner is gone");
    }

    #[test]
    fn data_extents_skip_the_holes_of_a_sparse_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let mut r = Region::create(&path, 4 * MIN_REGION, Persist::detect()).unwrap();
        let at = 3 * MIN_REGION;
        r.write(at, &[1u8; 8192], CopyMode::Durable).unwrap();
        let ext = r.data_extents();
        assert!(
            ext.iter().any(|&(s, l)| s <= at && at + 8192 <= s + l),
            "the written range is data: {ext:?}"
        );
        let covered: u64 = ext.iter().map(|e| e.1).sum();
        assert!(covered < MIN_REGION, "the rest is holes: {ext:?}");
        let m = Region::memory(MIN_REGION, Persist::detect()).unwrap();
        assert_eq!(m.data_extents(), vec![(0, MIN_REGION)]);
    }

    #[test]
    fn out_of_bounds_access_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Region::create(dir.path().join("r"), MIN_REGION, Persist::detect()).unwrap();
        let end = r.len() as u64;
        assert!(matches!(
            r.write(end - 1, b"ab", CopyMode::Durable),
            Err(MediaError::OutOfBounds { .. })
        ));
        assert!(matches!(
            r.read(u64::MAX, &mut [0u8; 1]),
            Err(MediaError::OutOfBounds { .. })
        ));
        r.write(end - 2, b"ab", CopyMode::Durable).unwrap();
    }

    #[test]
    fn dax_is_refused_on_a_page_cache_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let kind = Region::create(&path, MIN_REGION, Persist::detect())
            .unwrap()
            .kind();
        if kind == RegionKind::File {
            assert!(matches!(
                Region::open_dax(&path, 0, Persist::detect()),
                Err(MediaError::NotDax { .. })
            ));
        }
    }
}
