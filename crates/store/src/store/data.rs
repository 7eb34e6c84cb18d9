//! File data: reads through the mover, and attribute changes that touch data (truncate).
//! Writes are in [`super::write`].

use std::collections::BTreeMap;

use switchyard_mover::Hints;

use super::{now_ns, SetAttr, Store, MAX_FILE_SIZE};
use crate::acl::{self, Acl};
use crate::error::{Errno, Error, Op};
use crate::format::{is_special, Attr, Entry, BLOCK, S_IFLNK, S_IFMT};
use crate::inode::{Content, Inode};
use crate::pm::Held;

/// Splits the `n` bytes of a file at `off` into runs, each either mapped to contiguous blocks
/// (one mover request; `f` gets the region offset) or a hole (`None`); `f` also gets the run's
/// offset into the read and its length. A hole is one run however long it is (found with one
/// lookup of the next mapped page), and a mapped run is walked in order from one lookup of its
/// first page, so a range costs its mapped pages plus a lookup per run, whatever the file's
/// size (nothing before `off` or past the range is visited).
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
        let rest = n - done;
        let (len, at) = match pages.get(&pg) {
            Some(&b) => {
                // Extend over pages whose blocks are contiguous (walked in order).
                let mut len = ((BLOCK - in_page) as usize).min(rest);
                let mut next = pg + 1;
                let mut after = pages.range(next..);
                while len < rest && after.next() == Some((&next, &(b + (next - pg)))) {
                    len = (len + BLOCK as usize).min(rest);
                    next += 1;
                }
                (len, Some(b * BLOCK + in_page))
            }
            None => {
                let end = pages
                    .range(pg + 1..)
                    .next()
                    .map_or(u64::MAX, |(&p, _)| p * BLOCK);
                ((end - pos).min(rest as u64) as usize, None)
            }
        };
        f(done, len, at);
        done += len;
    }
}

impl Store {
    /// Data blocks (of [`BLOCK`] bytes) that inode `ino` maps: what `stat` counts as its
    /// allocated space (holes take none; a symlink's target counts; a directory's and every
    /// inode's log pages do not).
    pub fn data_blocks(&self, ino: u64) -> Result<u64, Error> {
        (|| -> Result<u64, Errno> {
            let g = self.slot(ino)?.read();
            match &g.as_ref().ok_or(Errno::ENOENT)?.content {
                Content::File(pages) => Ok(pages.len() as u64),
                Content::Dir(_) => Ok(0),
            }
        })()
        .map_err(Error::on(Op::Getattr, ino))
    }

    /// What `ino` is now: attributes, data blocks and generation, read under one lock of
    /// its slot.
    pub fn stat(&self, ino: u64) -> Result<crate::inodes::Stat, Errno> {
        let g = self.slot(ino)?.read();
        let inode = g.as_ref().ok_or(Errno::ENOENT)?;
        let blocks = match &inode.content {
            Content::File(pages) => pages.len() as u64,
            Content::Dir(_) => 0,
        };
        Ok(crate::inodes::Stat {
            attr: inode.attr,
            blocks,
            generation: self.slot_generation(ino),
        })
    }

    /// The regular file in `slot` (read-locked by the caller) with its pages, once its last
    /// write's copies have finished: what a reader of its data needs.
    pub(super) fn settled_file<'g>(
        &self,
        slot: &'g Option<Inode>,
    ) -> Result<(&'g Inode, &'g BTreeMap<u64, u64>), Errno> {
        let inode = slot.as_ref().ok_or(Errno::ENOENT)?;
        if let Some(p) = &inode.pending {
            self.wait_settled(p);
        }
        match &inode.content {
            Content::File(pages) => Ok((inode, pages)),
            Content::Dir(_) => Err(Errno::EISDIR),
        }
    }

    /// Reads up to `buf.len()` bytes at `off`; returns how many (0 at or past the end).
    pub fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, Error> {
        (|| -> Result<usize, Errno> {
            let g = self.slot(ino)?.read();
            let (inode, pages) = self.settled_file(&g)?;
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
        })()
        .map_err(Error::on(Op::Read, ino))
    }

    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, Error> {
        (|| -> Result<Vec<u8>, Errno> {
            let attr = self.getattr(ino)?;
            if attr.kind() != S_IFLNK {
                return Err(Errno::EINVAL);
            }
            let mut buf = vec![0u8; attr.size as usize];
            let n = self.read(ino, 0, &mut buf)?;
            buf.truncate(n);
            Ok(buf)
        })()
        .map_err(Error::on(Op::Readlink, ino))
    }

    /// Changes attributes; a size change truncates (freeing whole pages past the end and
    /// zeroing the rest of the last page, copy-on-write) or extends with a hole.
    pub fn setattr(&self, ino: u64, s: SetAttr) -> Result<Attr, Error> {
        (|| -> Result<Attr, Errno> {
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
                        let e = self.space.take(1)?[0];
                        let mut page = [0u8; BLOCK as usize];
                        let keep = (size % BLOCK) as usize;
                        page[..keep].copy_from_slice(&self.pm.bytes(ob * BLOCK, BLOCK)[..keep]);
                        self.pm.write_held(Held::Data, e.start * BLOCK, &page);
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
                // Truncating to the size it has gives back the blocks allocated past the end
                // (a smaller size drops them with the rest, when the entry applies), as
                // ext4 does: `rsync --preallocate` trims what it allocated so.
                let keep = size.div_ceil(BLOCK);
                if size == attr.size {
                    if let Some((&last, _)) = pages.range(keep..).next_back() {
                        entries.push(Entry::Punch {
                            pgoff: keep,
                            count: last + 1 - keep,
                        });
                    }
                }
                attr.size = size;
                attr.mtime = t;
            }
            if let Some(m) = s.mode {
                attr.mode = (attr.mode & S_IFMT) | (m & 0o7777);
                // An access ACL follows the mode in the same commit (its owner, mask and
                // other entries are the mode's bits).
                let acl = inode.xattrs.get(acl::ACCESS).map(|v| Acl::decode(v));
                if let Some(Ok(Some(acl))) = acl {
                    entries.push(Entry::XattrSet {
                        name: acl::ACCESS.to_vec(),
                        value: acl.chmod(m).encode(),
                    });
                }
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
                        self.space.free(x);
                    }
                    return Err(e);
                }
            };
            let mut freed = Vec::new();
            self.commit_one(inode, a, &entries, &mut freed);
            self.retire(inode, freed);
            self.maybe_compact(inode);
            Ok(inode.attr)
        })()
        .map_err(Error::on(Op::Setattr, ino))
    }
}
