//! Extended attributes: name → value pairs on any inode, kept in its log (`XattrSet` and
//! `XattrRemove` entries, format version 4) and in DRAM next to its other state.
//!
//! Namespaces, as Linux file systems keep them: `user.`, `trusted.` and `security.` are
//! stored, and of `system.` the two POSIX ACLs ([`crate::acl`], which also keep the mode in
//! step); anything else (another `system.` name, or no namespace) is refused with
//! `EOPNOTSUPP`. Who may read or write which namespace is checked by the kernel before a
//! request reaches the mount (xattr(7)); the store checks names, sizes and the create/replace
//! flags. A change commits like any single-inode change (its entries, then the tail) and
//! updates the inode's ctime, as setxattr(2) does.

use crate::acl::{self, Acl};
use crate::error::{Errno, Error, Op};
use crate::format::{Attr, Entry, S_IFDIR, XATTR_NAME_MAX, XATTR_VALUE_MAX};
use crate::inode::Inode;
use crate::store::{now_ns, Store};

/// Most bytes (names and values) one inode's extended attributes may hold: what its DRAM
/// state and compacted log carry along. ext4 keeps about 4 KiB per inode without large
/// attribute inodes; this is sixteen times that.
pub const XATTR_TOTAL_MAX: usize = 64 << 10;

/// How [`Store::setxattr`] treats an existing attribute (setxattr(2)'s flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrMode {
    /// Create it or replace it.
    Set,
    /// `XATTR_CREATE`: fail with `EEXIST` if it exists.
    Create,
    /// `XATTR_REPLACE`: fail with `ENODATA` if it does not.
    Replace,
}

fn check_name(name: &[u8]) -> Result<(), Errno> {
    if name.len() > XATTR_NAME_MAX {
        return Err(Errno::ERANGE);
    }
    let known = [&b"user."[..], b"trusted.", b"security."]
        .iter()
        .any(|ns| name.len() > ns.len() && name.starts_with(ns))
        || name == acl::ACCESS
        || name == acl::DEFAULT;
    if !known || name.contains(&0) {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(())
}

impl Store {
    /// Sets extended attribute `name` of `ino` to `value`. Errors: `EOPNOTSUPP` for a
    /// namespace the store does not keep, `ERANGE` for a name longer than 255 bytes, `E2BIG`
    /// for a value over [`XATTR_VALUE_MAX`], `ENOSPC` when the inode's attributes would pass
    /// `XATTR_TOTAL_MAX` (64 KiB), `EEXIST`/`ENODATA` as `mode` says.
    pub fn setxattr(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
    ) -> Result<(), Error> {
        (|| -> Result<(), Errno> {
            self.check_writable()?;
            check_name(name)?;
            if value.len() > XATTR_VALUE_MAX {
                return Err(Errno::E2BIG);
            }
            let mut g = self.lock(ino)?;
            let inode = g.as_mut().ok_or(Errno::ENOENT)?;
            let old = inode.xattrs.get(name).map(|v| name.len() + v.len());
            match (mode, old) {
                (XattrMode::Create, Some(_)) => return Err(Errno::EEXIST),
                (XattrMode::Replace, None) => return Err(Errno::ENODATA),
                _ => {}
            }
            let total: usize = inode.xattrs.iter().map(|(n, v)| n.len() + v.len()).sum();
            if total - old.unwrap_or(0) + name.len() + value.len() > XATTR_TOTAL_MAX {
                return Err(Errno::ENOSPC);
            }
            if name == acl::ACCESS || name == acl::DEFAULT {
                return self.set_acl(inode, name, value);
            }
            let e = Entry::XattrSet {
                name: name.to_vec(),
                value: value.to_vec(),
            };
            self.commit_xattr(inode, e, inode.attr)
        })()
        .map_err(Error::on(Op::Setxattr, ino))
    }

    /// The value of extended attribute `name` of `ino` (`ENODATA` if it has none).
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>, Error> {
        (|| -> Result<Vec<u8>, Errno> {
            check_name(name)?;
            let g = self.slot(ino)?.read();
            let inode = g.as_ref().ok_or(Errno::ENOENT)?;
            inode.xattrs.get(name).cloned().ok_or(Errno::ENODATA)
        })()
        .map_err(Error::on(Op::Getxattr, ino))
    }

    /// The names of `ino`'s extended attributes, each followed by a NUL byte, as
    /// listxattr(2) returns them.
    pub fn listxattr(&self, ino: u64) -> Result<Vec<u8>, Error> {
        (|| -> Result<Vec<u8>, Errno> {
            let g = self.slot(ino)?.read();
            let inode = g.as_ref().ok_or(Errno::ENOENT)?;
            let mut out = Vec::new();
            for name in inode.xattrs.keys() {
                out.extend_from_slice(name);
                out.push(0);
            }
            Ok(out)
        })()
        .map_err(Error::on(Op::Listxattr, ino))
    }

    /// Removes extended attribute `name` of `ino` (`ENODATA` if it has none).
    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<(), Error> {
        (|| -> Result<(), Errno> {
            self.check_writable()?;
            check_name(name)?;
            let mut g = self.lock(ino)?;
            let inode = g.as_mut().ok_or(Errno::ENOENT)?;
            if !inode.xattrs.contains_key(name) {
                return Err(Errno::ENODATA);
            }
            let e = Entry::XattrRemove {
                name: name.to_vec(),
            };
            self.commit_xattr(inode, e, inode.attr)
        })()
        .map_err(Error::on(Op::Removexattr, ino))
    }

    /// Sets an ACL (`name` is [`acl::ACCESS`] or [`acl::DEFAULT`]) of `inode` from its xattr
    /// encoding `value`, as ext4 does: `EINVAL` for one that is not valid, `EACCES` for a
    /// default ACL on anything but a directory; an access ACL sets the mode's permission bits
    /// in the same commit, and is kept only where it says more than they do. An empty one
    /// removes it.
    fn set_acl(&self, inode: &mut Inode, name: &[u8], value: &[u8]) -> Result<(), Errno> {
        let acl = Acl::decode(value)?;
        let mut attr = inode.attr;
        if name == acl::DEFAULT && attr.kind() != S_IFDIR {
            return if acl.is_some() {
                Err(Errno::EACCES)
            } else {
                Ok(())
            };
        }
        if let (Some(a), true) = (&acl, name == acl::ACCESS) {
            attr.mode = (attr.mode & !0o777) | a.mode_bits();
        }
        let kept = acl.filter(|a| name == acl::DEFAULT || !a.is_minimal());
        let e = match kept {
            Some(a) => Entry::XattrSet {
                name: name.to_vec(),
                value: a.encode(),
            },
            None if inode.xattrs.contains_key(name) => Entry::XattrRemove {
                name: name.to_vec(),
            },
            None if attr.mode == inode.attr.mode => return Ok(()),
            None => {
                return self.commit_change(
                    inode,
                    &[Entry::Attr(Attr {
                        ctime: now_ns(),
                        ..attr
                    })],
                )
            }
        };
        self.commit_xattr(inode, e, attr)
    }

    /// Commits one extended attribute entry of `inode` with `attr` and a new ctime.
    fn commit_xattr(&self, inode: &mut Inode, e: Entry, mut attr: Attr) -> Result<(), Errno> {
        attr.ctime = now_ns();
        self.commit_change(inode, &[e, Entry::Attr(attr)])
    }
}
