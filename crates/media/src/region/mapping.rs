//! Making a region: creating or opening a file (on a disk, tmpfs or DAX) or a device-DAX
//! device under its owner lock, and mapping it; or mapping anonymous memory.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use super::{io_err, Region, RegionKind, DEVDAX_ALIGN, FILE_ALIGN, MIN_REGION};
use crate::durability::{in_memory_fs, Granularity};
use crate::error::MediaError;
use crate::persist::Persist;

impl Region {
    /// Creates (or grows) the file at `path` to `size` bytes and maps it. A new file is
    /// created owner-only (0600); an existing one that others can reach is refused
    /// ([`MediaError::Exposed`]; see [`crate::private`]). An existing larger file keeps its
    /// size and contents. Files on a DAX file system are mapped `MAP_SYNC`. The
    /// owner lock is taken before the file is touched (refused with [`MediaError::Busy`]).
    pub fn create(
        path: impl AsRef<Path>,
        size: u64,
        persist: Persist,
    ) -> Result<Region, MediaError> {
        let path = path.as_ref().to_path_buf();
        check_size(&path, size, FILE_ALIGN, "a file region")?;
        let io = |op| io_err(&path, op);
        let (file, created) = crate::private::open_or_create(&path).map_err(io("open"))?;
        if !created {
            crate::private::check(&file, &path)?;
        }
        crate::owner::lock(&file, &path)?;
        let current = file.metadata().map_err(io("stat"))?.len();
        if current < size {
            file.set_len(size).map_err(io("grow"))?;
        }
        Region::map_file(path, file, persist)
    }

    /// Maps `size` bytes of zeroed anonymous memory: a region with the same kernels as a file
    /// region (traced when `persist` is), for crash images and tests.
    pub fn memory(size: u64, persist: Persist) -> Result<Region, MediaError> {
        let path = PathBuf::from("(memory)");
        check_size(&path, size, FILE_ALIGN, "a memory region")?;
        // SAFETY: an anonymous private mapping aliases nothing; the result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MediaError::Io {
                path,
                op: "mmap",
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(Region {
            ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len: size as usize,
            kind: RegionKind::Memory,
            path,
            _file: None,
            persist,
            granularity: Granularity::Volatile,
            memory_id: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
        })
    }

    /// [`Region::memory`] that reports `granularity`: a test or the crash harness stands in
    /// for a medium of that kind (a traced [`Region::sync`] is recorded as
    /// [`Event::Sync`](crate::trace::Event::Sync) whatever the granularity).
    pub fn memory_as(
        size: u64,
        persist: Persist,
        granularity: Granularity,
    ) -> Result<Region, MediaError> {
        let mut r = Region::memory(size, persist)?;
        r.granularity = granularity;
        Ok(r)
    }

    /// Opens an existing region: a regular file (mapped `MAP_SYNC` when on DAX) or a device-DAX
    /// path (refused with [`MediaError::Exposed`] if others can reach it), after taking its
    /// owner lock (refused with [`MediaError::Busy`] while another open
    /// file holds it). Fails with [`MediaError::TooSmall`] when it holds fewer than `min_size` bytes.
    pub fn open(
        path: impl AsRef<Path>,
        min_size: u64,
        persist: Persist,
    ) -> Result<Region, MediaError> {
        let path = path.as_ref().to_path_buf();
        let io = |op| io_err(&path, op);
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(MediaError::NotFound { path })
            }
            Err(e) => return Err(io("open")(e)),
        };
        crate::private::check(&file, &path)?;
        crate::owner::lock(&file, &path)?;
        let meta = file.metadata().map_err(io("stat"))?;
        let needed = min_size.max(MIN_REGION);
        if meta.file_type().is_char_device() {
            let size = devdax_size(&path, &meta)?;
            check_size(&path, size, DEVDAX_ALIGN, "device DAX")?;
            if size < needed {
                return Err(MediaError::TooSmall {
                    path,
                    actual: size,
                    needed,
                });
            }
            let ptr = map(&file, size as usize, libc::MAP_SHARED).map_err(io("mmap"))?;
            return Ok(Region {
                ptr,
                len: size as usize,
                kind: RegionKind::DevDax,
                path,
                _file: Some(file),
                persist,
                granularity: Granularity::CacheLine,
                memory_id: 0,
            });
        }
        if meta.len() < needed {
            return Err(MediaError::TooSmall {
                path,
                actual: meta.len(),
                needed,
            });
        }
        check_size(&path, meta.len(), FILE_ALIGN, "a file region")?;
        Region::map_file(path, file, persist)
    }

    fn map_file(path: PathBuf, file: File, persist: Persist) -> Result<Region, MediaError> {
        let len = file.metadata().map_err(io_err(&path, "stat"))?.len() as usize;
        match map(&file, len, libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC) {
            Ok(ptr) => Ok(Region {
                ptr,
                len,
                kind: RegionKind::Dax,
                path,
                _file: Some(file),
                persist,
                granularity: Granularity::CacheLine,
                memory_id: 0,
            }),
            Err(e)
                if e.raw_os_error() == Some(libc::EOPNOTSUPP)
                    || e.raw_os_error() == Some(libc::EINVAL) =>
            {
                let granularity = if in_memory_fs(&file) {
                    Granularity::Volatile
                } else {
                    drop_written_cache(&file);
                    Granularity::Page
                };
                let ptr = map(&file, len, libc::MAP_SHARED).map_err(io_err(&path, "mmap"))?;
                Ok(Region {
                    ptr,
                    len,
                    kind: RegionKind::File,
                    path,
                    _file: Some(file),
                    persist,
                    granularity,
                    memory_id: 0,
                })
            }
            Err(source) => Err(MediaError::Io {
                path,
                op: "mmap",
                source,
            }),
        }
    }

    /// Opens `path`, requiring a DAX file system: fails with [`MediaError::NotDax`] otherwise.
    pub fn open_dax(
        path: impl AsRef<Path>,
        min_size: u64,
        persist: Persist,
    ) -> Result<Region, MediaError> {
        let region = Region::open(path, min_size, persist)?;
        if region.kind == RegionKind::File {
            let e = std::io::Error::from_raw_os_error(libc::EOPNOTSUPP);
            return Err(MediaError::NotDax {
                path: region.path.clone(),
                source: e,
            });
        }
        Ok(region)
    }
}

fn check_size(path: &Path, size: u64, align: u64, kind: &'static str) -> Result<(), MediaError> {
    if size < MIN_REGION {
        return Err(MediaError::TooSmall {
            path: path.to_path_buf(),
            actual: size,
            needed: MIN_REGION,
        });
    }
    if !size.is_multiple_of(align) {
        return Err(MediaError::Misaligned {
            path: path.to_path_buf(),
            size,
            align,
            kind,
        });
    }
    Ok(())
}

/// Writes back and drops the page cache of a page-media file before it is mapped, so that
/// every page the store touches from here on comes into the cache through the mapping, one
/// small folio at a time.
///
/// Why: a page a program wrote with `write(2)` (`cp` of a store file, a restore, a file
/// written through before formatting) sits in the page cache in a large folio (up to 2 MiB on
/// ext4 and xfs), and the kernel tracks dirtiness, and writes back, per folio. One store into
/// such a folio makes the next `msync` write the whole folio: on ext4 with 1 MiB folios a
/// sqlite commit wrote 1.4 MB instead of 24 KiB, and ran 2.6 times slower. A mapping's own
/// faults read around in order-0 folios.
///
/// Only clean pages are dropped, after the write-back, so the cache and the disk hold the same
/// bytes: nothing an owner that crashed left in the page cache is lost. Best effort: where the
/// write-back fails the cache is left as it is (the first sync reports the error).
fn drop_written_cache(file: &File) {
    if file.sync_data().is_err() {
        return;
    }
    // SAFETY: advice on a descriptor we hold open; it reads and writes no memory of ours.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

fn map(file: &File, len: usize, flags: libc::c_int) -> std::io::Result<NonNull<u8>> {
    // SAFETY: a fresh shared mapping of a file we hold open; the kernel picks the address, so
    // no existing memory is replaced.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))
}

fn devdax_size(path: &Path, meta: &std::fs::Metadata) -> Result<u64, MediaError> {
    use std::os::unix::fs::MetadataExt;
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let sys = format!("/sys/dev/char/{major}:{minor}/size");
    let text = std::fs::read_to_string(&sys).map_err(|source| MediaError::Io {
        path: path.to_path_buf(),
        op: "read device-DAX size from sysfs",
        source,
    })?;
    text.trim().parse().map_err(|_| MediaError::Io {
        path: path.to_path_buf(),
        op: "parse device-DAX size",
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{sys}: {text:?}")),
    })
}
