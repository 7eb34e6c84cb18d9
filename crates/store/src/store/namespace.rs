//! The namespace: lookups and listings, making inodes, links, unlinks and renames.

use std::sync::atomic::Ordering;

use super::{check_name, ftype, now_ns, DirEntry, Owner, Store, LINK_MAX, SYMLINK_MAX, S_ISGID};
use crate::acl::{self, Acl};
use crate::alloc::Extent;
use crate::error::{Errno, Error, Op};
use crate::format::{
    is_special, log_page_header, Attr, Entry, BLOCK, LOG_ENTRIES_AT, NAME_MAX, SLOT_GENERATION_AT,
    S_IFBLK, S_IFCHR, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG,
};
use crate::inode::{Content, Inode};

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

/// What rename/unlink need to know of an inode without holding a borrow.
pub(super) struct Meta {
    pub(super) attr: Attr,
    pub(super) open: u32,
    pub(super) is_empty_dir: bool,
}

impl Inode {
    pub(super) fn clone_meta(&self) -> Meta {
        Meta {
            attr: self.attr,
            open: self.open,
            is_empty_dir: matches!(&self.content, Content::Dir(d) if d.is_empty()),
        }
    }
}

/// Checks a name unlink(2) or rmdir(2) may remove: "." is EINVAL, ".." ENOTEMPTY (as Linux
/// answers rmdir), then the usual name rules.
fn check_removed_name(name: &[u8]) -> Result<(), Errno> {
    match name {
        b"." => Err(Errno::EINVAL),
        b".." => Err(Errno::ENOTEMPTY),
        _ => check_name(name),
    }
}

/// Checks that the inode `c` may go the way asked: rmdir takes only (empty) directories,
/// unlink anything else.
fn check_removable(c: &Meta, dir_wanted: bool) -> Result<(), Errno> {
    let is_dir = c.attr.kind() == S_IFDIR;
    match (dir_wanted, is_dir) {
        (true, false) => Err(Errno::ENOTDIR),
        (false, true) => Err(Errno::EISDIR),
        (_, true) if !c.is_empty_dir => Err(Errno::ENOTEMPTY),
        _ => Ok(()),
    }
}

/// Whether `dir` may take a new entry `name` (of a directory if `is_dir`): it is a live
/// directory, the name is free, and a directory's link count has room.
fn check_new_name(dir: &Inode, name: &[u8], is_dir: bool) -> Result<(), Errno> {
    let Content::Dir(d) = &dir.content else {
        return Err(Errno::ENOTDIR);
    };
    if dir.attr.nlink == 0 {
        return Err(Errno::ENOENT);
    }
    if d.contains_key(name) {
        return Err(Errno::EEXIST);
    }
    if is_dir && dir.attr.nlink >= LINK_MAX {
        return Err(Errno::EMLINK);
    }
    Ok(())
}

/// The attributes of an inode of `mode` made at `t` by `owner` in directory `parent`
/// (attributes `pattr`). A set-group-ID directory gives its group to what is made in it,
/// and its set-group-ID bit to directories made in it (BSD semantics, as Linux does).
fn new_attr(pattr: &Attr, parent: u64, mode: u32, owner: Owner, what: Made<'_>, t: i64) -> Attr {
    let is_dir = mode & S_IFMT == S_IFDIR;
    let (gid, mode) = if pattr.mode & S_ISGID != 0 {
        (pattr.gid, if is_dir { mode | S_ISGID } else { mode })
    } else {
        (owner.gid, mode)
    };
    Attr {
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
    }
}

impl Store {
    // ---- reading ------------------------------------------------------------------------

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr, Error> {
        (|| -> Result<Attr, Errno> {
            self.slot(ino)?
                .read()
                .as_ref()
                .map(|i| i.attr)
                .ok_or(Errno::ENOENT)
        })()
        .map_err(Error::on(Op::Getattr, ino))
    }

    /// Looks `name` up in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<(u64, Attr), Error> {
        (|| -> Result<(u64, Attr), Errno> {
            let ino = self.find(parent, name, false)?;
            Ok((ino, self.getattr(ino)?))
        })()
        .map_err(Error::at(Op::Lookup, parent, name))
    }

    /// Looks `name` up in directory `parent` and takes a hold on the inode it names (see
    /// [`Store::hold`]) in the same step, under the directory's lock: no unlink can free the
    /// inode, nor its number be reused, between the lookup and the hold.
    pub fn lookup_held(&self, parent: u64, name: &[u8]) -> Result<(u64, Attr), Error> {
        (|| -> Result<(u64, Attr), Errno> {
            let ino = self.find(parent, name, true)?;
            match self.getattr(ino) {
                Ok(a) => Ok((ino, a)),
                Err(e) => {
                    self.release_holds(ino, 1)?;
                    Err(e.errno)
                }
            }
        })()
        .map_err(Error::at(Op::Lookup, parent, name))
    }

    /// The inode `name` names in `parent`, held (under `parent`'s lock) if `hold`.
    pub(super) fn find(&self, parent: u64, name: &[u8], hold: bool) -> Result<u64, Errno> {
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
    pub fn readdir(&self, ino: u64) -> Result<Vec<DirEntry>, Error> {
        (|| -> Result<Vec<DirEntry>, Errno> {
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
        })()
        .map_err(Error::on(Op::Readdir, ino))
    }

    // ---- namespace ----------------------------------------------------------------------

    /// Creates a regular file `name` in `parent`. EEXIST if the name is taken.
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        owner: Owner,
    ) -> Result<(u64, Attr), Error> {
        self.make(
            parent,
            name,
            S_IFREG | (mode & 0o7777),
            owner,
            Made::Plain,
            0,
        )
        .map_err(Error::at(Op::Create, parent, name))
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
    ) -> Result<(u64, Attr), Error> {
        self.mknod_masked(parent, name, mode, rdev, owner, 0)
    }

    /// [`Store::mknod`] for a creator whose umask is `umask`: applied to `mode` unless
    /// `parent` has a default ACL, which the new inode inherits instead ([`crate::acl`]). A
    /// directory type is made as by [`Store::mkdir_masked`].
    pub fn mknod_masked(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u64,
        owner: Owner,
        umask: u32,
    ) -> Result<(u64, Attr), Error> {
        if mode & S_IFMT == S_IFDIR {
            return self.mkdir_masked(parent, name, mode, owner, umask);
        }
        (|| -> Result<(u64, Attr), Errno> {
            let kind = mode & S_IFMT;
            if kind == S_IFREG || kind == 0 {
                let mode = S_IFREG | (mode & 0o7777);
                return self.make(parent, name, mode, owner, Made::Plain, umask);
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
                umask,
            )
        })()
        .map_err(Error::at(Op::Mknod, parent, name))
    }

    /// Creates directory `name` in `parent`.
    pub fn mkdir(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        owner: Owner,
    ) -> Result<(u64, Attr), Error> {
        self.mkdir_masked(parent, name, mode, owner, 0)
    }

    /// [`Store::mkdir`] for a creator whose umask is `umask`: applied to `mode` unless
    /// `parent` has a default ACL, which the directory inherits instead, as its access ACL
    /// (masked by `mode`) and as its own default ACL ([`crate::acl`]).
    pub fn mkdir_masked(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        owner: Owner,
        umask: u32,
    ) -> Result<(u64, Attr), Error> {
        self.make(
            parent,
            name,
            S_IFDIR | (mode & 0o7777),
            owner,
            Made::Plain,
            umask,
        )
        .map_err(Error::at(Op::Mkdir, parent, name))
    }

    /// Creates symlink `name` → `target` in `parent`.
    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        owner: Owner,
    ) -> Result<(u64, Attr), Error> {
        (|| -> Result<(u64, Attr), Errno> {
            if target.is_empty() {
                return Err(Errno::EINVAL);
            }
            if target.len() > SYMLINK_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
            self.make(
                parent,
                name,
                S_IFLNK | 0o777,
                owner,
                Made::Symlink(target),
                0,
            )
        })()
        .map_err(Error::at(Op::Symlink, parent, name))
    }

    /// Makes an inode of `mode` named `name` in `parent`: checks the name is free, takes an
    /// inode number and a first log page, writes what the inode holds (a symlink's target),
    /// then appends both logs and commits them together ([`Store::publish_made`]).
    /// The umask `umask` applies to `mode`, unless `parent` has a default ACL: the inode
    /// then inherits it ([`crate::acl`]) in the same commit.
    fn make(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        owner: Owner,
        what: Made<'_>,
        umask: u32,
    ) -> Result<(u64, Attr), Errno> {
        self.check_writable()?;
        check_name(name)?;
        let mut pg = self.lock(parent)?;
        let dir = pg.as_mut().ok_or(Errno::ENOENT)?;
        let is_dir = mode & S_IFMT == S_IFDIR;
        let default = dir
            .xattrs
            .get(acl::DEFAULT)
            .and_then(|v| Acl::decode(v).ok().flatten())
            .filter(|_| mode & S_IFMT != S_IFLNK);
        let (mode, inherited) = match default {
            Some(d) => {
                let (access, mode) = d.inherit(mode);
                (mode, Some((d, access)))
            }
            None => (mode & !(umask & 0o777), None),
        };
        check_new_name(dir, name, is_dir)?;
        let ino = self.free_inodes.lock().take().ok_or(Errno::ENOSPC)?;
        let give_back = |e| {
            self.free_inodes.lock().give(ino);
            e
        };
        let page = self.space.take(1).map_err(give_back)?[0];
        let t = now_ns();
        let attr = new_attr(&dir.attr, parent, mode, owner, what, t);
        let mut child = Inode::new(ino, attr);
        child.pages = vec![page.start];
        child.tail = page.start * BLOCK + LOG_ENTRIES_AT;
        self.pm.write(page.start * BLOCK, &log_page_header(ino));
        let mut child_entries = vec![Entry::Attr(attr)];
        if let Some((default, access)) = inherited {
            if !access.is_minimal() {
                child_entries.push(Entry::XattrSet {
                    name: acl::ACCESS.to_vec(),
                    value: access.encode(),
                });
            }
            if is_dir {
                child_entries.push(Entry::XattrSet {
                    name: acl::DEFAULT.to_vec(),
                    value: default.encode(),
                });
            }
        }
        let data = match what {
            Made::Symlink(target) => match self.write_target(target, t, &mut child_entries) {
                Ok(e) => e,
                Err(err) => {
                    self.space.free(page);
                    return Err(give_back(err));
                }
            },
            _ => Vec::new(),
        };
        let mut pattr = dir.attr;
        pattr.mtime = t;
        pattr.ctime = t;
        if is_dir {
            pattr.nlink += 1;
        }
        let parent_entries = [
            Entry::DirAdd {
                ino,
                ftype: ftype(attr.mode),
                name: name.to_vec(),
            },
            Entry::Attr(pattr),
        ];
        let mut blocks = data;
        blocks.push(page);
        let attr = self
            .publish_made(dir, child, &blocks, &child_entries, &parent_entries)
            .map_err(give_back)?;
        Ok((ino, attr))
    }

    /// Writes a symlink's `target` into new data blocks and adds the `Write` entries that map
    /// them to `entries`; returns the blocks.
    fn write_target(
        &self,
        target: &[u8],
        t: i64,
        entries: &mut Vec<Entry>,
    ) -> Result<Vec<Extent>, Errno> {
        let e = self
            .space
            .alloc_data((target.len() as u64).div_ceil(BLOCK))?;
        let mut pgoff = 0;
        for x in &e {
            let mut buf = vec![0u8; (x.len * BLOCK) as usize];
            let from = (pgoff * BLOCK) as usize;
            let take = buf.len().min(target.len() - from);
            buf[..take].copy_from_slice(&target[from..from + take]);
            self.pm.write(x.start * BLOCK, &buf);
            entries.push(Entry::Write {
                pgoff,
                block: x.start,
                count: x.len,
                size: target.len() as u64,
                mtime: t,
                seq: None,
            });
            pgoff += x.len;
        }
        Ok(e)
    }

    /// The commit of a make: appends `child_entries` to the new inode's log and
    /// `parent_entries` to `dir`'s, then commits both tails, the new slot's head and its next
    /// generation in one journal transaction (a handle to the slot's last inode never names
    /// this one), and installs the inode. On failure nothing is visible and `blocks` (its log
    /// page and data) are given back; the caller gives back the inode number.
    fn publish_made(
        &self,
        dir: &mut Inode,
        mut child: Inode,
        blocks: &[Extent],
        child_entries: &[Entry],
        parent_entries: &[Entry],
    ) -> Result<Attr, Errno> {
        let undo = |this: &Self| {
            for x in blocks {
                this.space.free(*x);
            }
        };
        let ca = self
            .append_log(&child, child_entries)
            .inspect_err(|_| undo(self))?;
        let pa = match self.append_log(dir, parent_entries) {
            Ok(a) => a,
            Err(e) => {
                undo(self);
                self.discard(ca);
                return Err(e);
            }
        };
        let (ino, head) = (child.ino, child.pages[0]);
        let (cs, ps) = (self.slot_offset(ino), self.slot_offset(dir.ino));
        let generation = self
            .commits
            .load(&self.pm, cs + SLOT_GENERATION_AT)
            .wrapping_add(1);
        self.commit_words(
            &[
                (cs, head),
                (cs + 8, ca.tail),
                (cs + SLOT_GENERATION_AT, generation),
                (ps + 8, pa.tail),
            ],
            &[ino, dir.ino],
        );
        let mut freed = Vec::new();
        self.applied(&mut child, ca, child_entries, &mut freed);
        self.applied(dir, pa, parent_entries, &mut freed);
        let attr = child.attr;
        let (slot, loaded) = self.table.entry(ino);
        *slot.write() = Some(child);
        loaded.store(true, Ordering::Release);
        self.maybe_compact(dir);
        Ok(attr)
    }

    /// Removes the link `name` (not a directory) from `parent`; the inode goes when its last
    /// link and last open handle are gone.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<(), Error> {
        self.remove(parent, name, false)
            .map_err(Error::at(Op::Unlink, parent, name))
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), Error> {
        self.remove(parent, name, true)
            .map_err(Error::at(Op::Rmdir, parent, name))
    }

    pub(super) fn remove(&self, parent: u64, name: &[u8], dir_wanted: bool) -> Result<(), Errno> {
        self.check_writable()?;
        check_removed_name(name)?;
        let (child, mut locks) = self.lock_entry(parent, name)?;
        if child == parent {
            return Err(Errno::EINVAL);
        }
        let c = locks[&child].as_ref().expect("locked live").clone_meta();
        let is_dir = c.attr.kind() == S_IFDIR;
        check_removable(&c, dir_wanted)?;
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
            // The child's word moves as it is forgotten, below.
            self.commit_words(&[(ps + 8, pa.tail), (cs, 0), (cs + 8, 0)], &[parent]);
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
            self.commit_words(&[(ps + 8, pa.tail), (cs + 8, ca.tail)], &[parent, child]);
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
    pub fn link(&self, ino: u64, parent: u64, name: &[u8]) -> Result<Attr, Error> {
        (|| -> Result<Attr, Errno> {
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
            self.commit_words(
                &[
                    (self.slot_offset(ino) + 8, ta.tail),
                    (self.slot_offset(parent) + 8, pa.tail),
                ],
                &[ino, parent],
            );
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
        })()
        .map_err(Error::at(Op::Link, parent, name))
    }
}
