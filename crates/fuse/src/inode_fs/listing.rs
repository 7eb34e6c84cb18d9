//! Directory listings: a snapshot of a directory taken at a handle's first read from offset
//! 0, read by `readdir` (or
//! `readdirplus`, each entry with its attributes, so that `ls -l` and `find` need no lookup
//! per name) at the kernel's offsets, and dropped at `releasedir`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{
    FileHandle, FileType, FopenFlags, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyOpen,
};
use switchyard_store::{DirEntry, Errno, Inodes};

use super::kernel::{errno, file_attr, kind};
use super::InodeFs;

/// A directory as a listing's first read found it.
pub(super) struct Listing {
    /// The directory's parent (for "..").
    parent: u64,
    entries: Vec<DirEntry>,
}

impl<I: Inodes> InodeFs<I> {
    /// A snapshot of directory `ino`.
    fn snapshot(&self, ino: u64) -> Result<Listing, Errno> {
        let s = self.inodes.stat(ino)?;
        Ok(Listing {
            parent: s.attr.parent,
            entries: self.inodes.readdir(ino)?,
        })
    }

    /// The snapshot under handle `fh` of directory `ino` to read from `offset`: a new one at
    /// offset 0. The kernel notes the directory's version when it starts a listing (at 0) to
    /// keep (`FOPEN_CACHE_DIR`), and keeps what it read until the version moves; a change
    /// between `opendir` and that first read would not move it, so a snapshot from `opendir`
    /// could be kept without the change. Taken at the first read, a change before it is in
    /// it, and one after moves the version. (`rewinddir` reads from 0 too: it sees changes,
    /// as POSIX says it should.)
    fn listing_at(&self, ino: u64, fh: FileHandle, offset: u64) -> Result<Arc<Listing>, Errno> {
        if offset != 0 {
            if let Some(held) = self.dirs.lock().get(&fh.0).ok_or(Errno::EBADF)? {
                return Ok(held.clone());
            }
        }
        let fresh = Arc::new(self.snapshot(ino)?);
        let mut dirs = self.dirs.lock();
        let held = dirs.get_mut(&fh.0).ok_or(Errno::EBADF)?;
        *held = Some(fresh.clone());
        Ok(fresh)
    }

    /// `opendir`: a new handle on directory `ino`, whose snapshot its first read takes.
    pub(super) fn open_listing(&self, ino: u64, reply: ReplyOpen) {
        match self.inodes.stat(ino) {
            Ok(_) => {
                let fh = self.next_dir.fetch_add(1, Ordering::Relaxed);
                self.dirs.lock().insert(fh, None);
                reply.opened(FileHandle(fh), self.listing_flags());
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    /// The page-cache policy of a listing: where nothing but this mount changes the inodes,
    /// the kernel keeps the listing it read (`FOPEN_CACHE_DIR`) until this mount changes the
    /// directory, which it sees (`git status` and `find` read every directory again).
    fn listing_flags(&self) -> FopenFlags {
        if self.inodes.shared() {
            FopenFlags::empty()
        } else {
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
        }
    }

    /// `readdir`: the entries of the snapshot under handle `fh` (of directory `ino`) from
    /// `offset`.
    pub(super) fn list(&self, ino: u64, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let list = match self.listing_at(ino, fh, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(errno(e)),
        };
        // Offsets: 1 after ".", 2 after "..", 3 + i after entry i.
        let dots = [(ino, "."), (list.parent, "..")];
        for (i, &(n, name)) in dots.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(n), i as u64 + 1, FileType::Directory, name) {
                return reply.ok();
            }
        }
        let skip = (offset as usize).saturating_sub(2);
        for (i, e) in list.entries.iter().enumerate().skip(skip) {
            let name = OsStr::from_bytes(&e.name);
            if reply.add(INodeNo(e.ino), i as u64 + 3, kind(e.kind), name) {
                break;
            }
        }
        reply.ok();
    }

    /// `readdirplus`: [`InodeFs::list`] with each entry's attributes, looked up now (the
    /// kernel counts each entry but "." and ".." as a lookup, as a lookup's reply is). An
    /// entry removed since the snapshot is left out.
    pub(super) fn list_plus(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let list = match self.listing_at(ino, fh, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(errno(e)),
        };
        let dots = [(ino, "."), (list.parent, "..")];
        for (i, &(n, name)) in dots.iter().enumerate().skip(offset as usize) {
            // The kernel takes no lookup for these; their attributes go unused.
            let Ok(s) = self.inodes.stat(n) else { continue };
            let attr = file_attr(n, &s);
            let generation = Generation(s.generation);
            if reply.add(
                INodeNo(n),
                i as u64 + 1,
                name,
                &self.cache_ttl,
                &attr,
                generation,
            ) {
                return reply.ok();
            }
        }
        let skip = (offset as usize).saturating_sub(2);
        for (i, e) in list.entries.iter().enumerate().skip(skip) {
            let Ok((n, s)) = self.inodes.lookup(ino, &e.name) else {
                continue;
            };
            let attr = file_attr(n, &s);
            let name = OsStr::from_bytes(&e.name);
            let full = reply.add(
                INodeNo(n),
                i as u64 + 3,
                name,
                &self.cache_ttl,
                &attr,
                Generation(s.generation),
            );
            if full {
                // Not sent: the kernel never counts it.
                self.inodes.forget(n, 1);
                break;
            }
            if let Some(t) = &self.tenants {
                t.seen(ino, &e.name, n);
            }
        }
        reply.ok();
    }

    /// `releasedir`: drops the snapshot under handle `fh`.
    pub(super) fn release_listing(&self, fh: FileHandle, reply: ReplyEmpty) {
        self.dirs.lock().remove(&fh.0);
        reply.ok();
    }
}
