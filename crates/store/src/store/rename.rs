//! Renames: moving a name within or between directories (replacing, not replacing, or
//! exchanging two names), with the subtree check and the journal commit over every inode
//! involved.

use std::collections::BTreeMap;

use super::lock::named;
use super::{check_name, ftype, now_ns, Guard, Store, LINK_MAX};
use crate::error::{Errno, Error, Op};
use crate::format::{Attr, Entry, ROOT, S_IFDIR};

impl Store {
    /// Renames `name` in `parent` to `new_name` in `new_parent`, atomically replacing an
    /// existing target (a file by a file, an empty directory by a directory).
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
    ) -> Result<(), Error> {
        self.move_name(parent, name, new_parent, new_name, false)
            .map_err(Error::at(Op::Rename, parent, name))
    }

    /// [`Store::rename`] that fails with `EEXIST` if `new_name` exists, checked atomically
    /// with the move (`renameat2`'s `RENAME_NOREPLACE`).
    pub fn rename_noreplace(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
    ) -> Result<(), Error> {
        self.move_name(parent, name, new_parent, new_name, true)
            .map_err(Error::at(Op::Rename, parent, name))
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
                Err(e) if e.errno == Errno::ENOENT => None,
                Err(e) => return Err(e.into()),
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
        let src_mode = locks[&src].as_ref().expect("locked live").attr.mode;
        let (attrs, free_dst) = self.renamed_attrs(locks, parent, new_parent, src, dst)?;
        let mut changes: BTreeMap<u64, Vec<Entry>> = BTreeMap::new();
        changes.entry(parent).or_default().push(Entry::DirRemove {
            name: name.to_vec(),
        });
        changes.entry(new_parent).or_default().push(Entry::DirAdd {
            ino: src,
            ftype: ftype(src_mode),
            name: new_name.to_vec(),
        });
        for (&i, a) in &attrs {
            if Some(i) == dst && free_dst {
                continue;
            }
            changes.entry(i).or_default().push(Entry::Attr(*a));
        }
        let freed_dst = dst.filter(|_| free_dst);
        // Commit all tails (and the freed target's slot) at once.
        let extra = match freed_dst {
            Some(d) => {
                let ds = self.slot_offset(d);
                vec![(ds, 0), (ds + 8, 0)]
            }
            None => Vec::new(),
        };
        let freed = self.commit_many(locks, &changes, &extra)?;
        if let Some(d) = freed_dst {
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

    /// The attributes a rename of `src` from `parent` to `new_parent`, replacing `dst`, gives
    /// every inode it touches (times, link counts, a moved directory's parent), and whether
    /// the replaced inode is freed with it (its last link, not open, not held). Fails as
    /// rename(2) does when the target cannot be replaced or a link count would overflow.
    fn renamed_attrs(
        &self,
        locks: &BTreeMap<u64, Guard<'_>>,
        parent: u64,
        new_parent: u64,
        src: u64,
        dst: Option<u64>,
    ) -> Result<(BTreeMap<u64, Attr>, bool), Errno> {
        let get = |i: u64| locks[&i].as_ref().expect("locked live").clone_meta();
        let src_dir = get(src).attr.kind() == S_IFDIR;
        let t = now_ns();
        // New attribute values per inode, applied in order to a working copy.
        let mut attrs: BTreeMap<u64, Attr> = BTreeMap::new();
        let attr_of = |attrs: &mut BTreeMap<u64, Attr>, i: u64| -> Attr {
            *attrs.entry(i).or_insert_with(|| get(i).attr)
        };
        let mut free_dst = false;
        if let Some(d) = dst {
            let dm = get(d);
            let dst_dir = dm.attr.kind() == S_IFDIR;
            match (src_dir, dst_dir) {
                (false, true) => return Err(Errno::EISDIR),
                (true, false) => return Err(Errno::ENOTDIR),
                (true, true) if !dm.is_empty_dir => return Err(Errno::ENOTEMPTY),
                _ => {}
            }
            let mut da = attr_of(&mut attrs, d);
            da.nlink = if dst_dir { 0 } else { da.nlink - 1 };
            da.ctime = t;
            if dst_dir {
                let mut np = attr_of(&mut attrs, new_parent);
                np.nlink -= 1;
                attrs.insert(new_parent, np);
            }
            free_dst = da.nlink == 0 && dm.open == 0 && !self.held(d);
            attrs.insert(d, da);
        }
        let moved_dir = src_dir && parent != new_parent;
        let mut pa = attr_of(&mut attrs, parent);
        (pa.mtime, pa.ctime) = (t, t);
        if moved_dir {
            pa.nlink -= 1;
        }
        attrs.insert(parent, pa);
        let mut npa = attr_of(&mut attrs, new_parent);
        (npa.mtime, npa.ctime) = (t, t);
        if moved_dir {
            npa.nlink += 1;
            if npa.nlink > LINK_MAX {
                return Err(Errno::EMLINK);
            }
        }
        attrs.insert(new_parent, npa);
        let mut sa = attr_of(&mut attrs, src);
        sa.ctime = t;
        if src_dir {
            sa.parent = new_parent;
        }
        attrs.insert(src, sa);
        Ok((attrs, free_dst))
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
    ) -> Result<(), Error> {
        (|| -> Result<(), Errno> {
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
                let attrs = exchanged_attrs(&locks, parent, new_parent, a, b)?;
                let (aa, ba) = (attrs[&a], attrs[&b]);
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
        })()
        .map_err(Error::at(Op::Exchange, parent, name))
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
}

/// The attributes an exchange of `a` (in `parent`) and `b` (in `new_parent`) gives the four
/// inodes: times, each parent trading a subdirectory's ".." for what it receives, and a moved
/// directory's parent. EMLINK if a parent's link count would overflow.
fn exchanged_attrs(
    locks: &BTreeMap<u64, Guard<'_>>,
    parent: u64,
    new_parent: u64,
    a: u64,
    b: u64,
) -> Result<BTreeMap<u64, Attr>, Errno> {
    let t = now_ns();
    let attr = |i: u64| locks[&i].as_ref().expect("locked live").attr;
    let (mut aa, mut ba) = (attr(a), attr(b));
    let (a_dir, b_dir) = (aa.kind() == S_IFDIR, ba.kind() == S_IFDIR);
    let mut attrs: BTreeMap<u64, Attr> = BTreeMap::new();
    let mut pa = attr(parent);
    pa.mtime = t;
    pa.ctime = t;
    attrs.insert(parent, pa);
    let mut npa = attr(new_parent);
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
    Ok(attrs)
}
