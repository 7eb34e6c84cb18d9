//! POSIX access control lists (acl(5)), kept as the extended attributes
//! `system.posix_acl_access` and `system.posix_acl_default` in the kernel's xattr encoding
//! (a version word, then 8-byte entries: tag, permissions, id; little-endian).
//!
//! What the store does with them, as ext4 does, so every front end (the mount, `serve` and
//! its clients) gets the same behaviour from one place, each change in one commit:
//!
//! - setting an access ACL sets the mode's permission bits from it (owner, mask or owning
//!   group, other); one that says no more than the mode is not kept, only the mode;
//! - a mode change rewrites the access ACL's owner, mask (or owning group) and other entries;
//! - an inode made in a directory with a default ACL gets that ACL as its access ACL, masked
//!   by the mode it was made with (the creator's umask is then not applied), and a directory
//!   gets the default ACL too.
//!
//! Enforcement is the kernel's: the mount asks for `FUSE_POSIX_ACL`, and the kernel reads an
//! inode's access ACL when it checks a caller who is not the owner. [`permits`] is the same
//! check, for front ends without a kernel in the way.

use crate::error::Errno;

/// The name of an inode's access ACL.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
/// The name of a directory's default ACL (what inodes made in it inherit).
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
/// The tag of the owner's entry.
pub const USER_OBJ: u16 = 0x01;
/// The tag of a named user's entry.
pub const USER: u16 = 0x02;
/// The tag of the owning group's entry.
pub const GROUP_OBJ: u16 = 0x04;
/// The tag of a named group's entry.
pub const GROUP: u16 = 0x08;
/// The tag of the mask entry (the most any named entry or the owning group gets).
pub const MASK: u16 = 0x10;
/// The tag of the entry for everyone else.
pub const OTHER: u16 = 0x20;
/// The id field of the entries that name nobody (owner, owning group, mask, other), as the
/// kernel writes it.
pub const NO_ID: u32 = u32::MAX;

/// The xattr encoding of `entries` (tag, `rwx` permissions, id), unchecked: what `setfacl`
/// hands to setxattr(2).
pub fn encode(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut out = VERSION.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

/// One entry: a tag (who), its permissions (`rwx` bits) and, for named users and groups,
/// an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// A valid ACL: exactly one owner, owning group and other entry, a mask where named users or
/// groups are, entries in the canonical order (by tag, named ones by id, no id twice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<Entry>,
}

impl Acl {
    /// Decodes and checks an ACL in the xattr encoding; `EINVAL` if it is malformed or not
    /// valid. An empty list (a version word alone) decodes to `None`: no ACL.
    pub fn decode(bytes: &[u8]) -> Result<Option<Acl>, Errno> {
        let Some((version, body)) = bytes.split_first_chunk::<4>() else {
            return Err(Errno::EINVAL);
        };
        if u32::from_le_bytes(*version) != VERSION || !body.len().is_multiple_of(8) {
            return Err(Errno::EINVAL);
        }
        let entries: Vec<Entry> = body
            .chunks_exact(8)
            .map(|c| Entry {
                tag: u16::from_le_bytes([c[0], c[1]]),
                perm: u16::from_le_bytes([c[2], c[3]]),
                id: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        if entries.is_empty() {
            return Ok(None);
        }
        let acl = Acl { entries };
        acl.check()?;
        Ok(Some(acl))
    }

    fn check(&self) -> Result<(), Errno> {
        let order = |tag| match tag {
            USER_OBJ => Some(0),
            USER => Some(1),
            GROUP_OBJ => Some(2),
            GROUP => Some(3),
            MASK => Some(4),
            OTHER => Some(5),
            _ => None,
        };
        let mut last: Option<(u8, u32)> = None;
        let mut count = [0usize; 6];
        for e in &self.entries {
            let rank = order(e.tag).ok_or(Errno::EINVAL)?;
            if e.perm & !7 != 0 {
                return Err(Errno::EINVAL);
            }
            let named = matches!(e.tag, USER | GROUP);
            let key = (rank, if named { e.id } else { 0 });
            if last.is_some_and(|l| l >= key) {
                return Err(Errno::EINVAL); // out of order, or a second entry for one id
            }
            last = Some(key);
            count[rank as usize] += 1;
        }
        let named = count[1] + count[3] > 0;
        if count[0] != 1 || count[2] != 1 || count[5] != 1 || (named && count[4] != 1) {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    /// The xattr encoding.
    pub fn encode(&self) -> Vec<u8> {
        let entries: Vec<_> = self.entries.iter().map(|e| (e.tag, e.perm, e.id)).collect();
        encode(&entries)
    }

    fn find(&mut self, tag: u16) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| e.tag == tag)
    }

    fn perm(&self, tag: u16) -> Option<u32> {
        self.entries
            .iter()
            .find(|e| e.tag == tag)
            .map(|e| u32::from(e.perm))
    }

    /// Whether the ACL says no more than permission bits do (owner, owning group, other).
    pub fn is_minimal(&self) -> bool {
        self.entries.len() == 3
    }

    /// The permission bits (`0o777` part of a mode) the ACL stands for: the owner's, the
    /// mask's (the owning group's where there is no mask) and other's.
    pub fn mode_bits(&self) -> u32 {
        let group = self.perm(MASK).or(self.perm(GROUP_OBJ)).unwrap_or(0);
        (self.perm(USER_OBJ).unwrap_or(0) << 6) | (group << 3) | self.perm(OTHER).unwrap_or(0)
    }

    /// The ACL after a mode change to `mode` (chmod): the owner, mask (or owning group) and
    /// other entries take its bits; named entries stay.
    pub fn chmod(&self, mode: u32) -> Acl {
        let mut acl = self.clone();
        let set = |acl: &mut Acl, tag, bits: u32| {
            if let Some(e) = acl.find(tag) {
                e.perm = (bits & 7) as u16;
            }
        };
        set(&mut acl, USER_OBJ, mode >> 6);
        let group = if acl.perm(MASK).is_some() {
            MASK
        } else {
            GROUP_OBJ
        };
        set(&mut acl, group, mode >> 3);
        set(&mut acl, OTHER, mode);
        acl
    }

    /// What an inode made with `mode` in a directory whose default ACL is `self` gets: its
    /// access ACL and its mode, each limited by the other (acl(5), "object creation").
    pub fn inherit(&self, mode: u32) -> (Acl, u32) {
        let mut acl = self.clone();
        let mut mode = mode;
        let mut limit = |acl: &mut Acl, tag: u16, shift: u32| {
            if let Some(e) = acl.find(tag) {
                let bits = (mode >> shift) & 7;
                e.perm &= bits as u16;
                mode &= !(7 << shift) | (u32::from(e.perm) << shift);
            }
        };
        limit(&mut acl, USER_OBJ, 6);
        limit(&mut acl, OTHER, 0);
        let group = if acl.perm(MASK).is_some() {
            MASK
        } else {
            GROUP_OBJ
        };
        limit(&mut acl, group, 3);
        (acl, mode)
    }

    /// Whether a caller with user id `uid` and groups `groups` has the `want` bits (`rwx`)
    /// on an inode owned by `owner`:`group` under this ACL, as the kernel decides
    /// (root's overrides are the caller's business).
    pub fn permits(&self, owner: u32, group: u32, uid: u32, groups: &[u32], want: u32) -> bool {
        let has = |perm: u32| perm & want == want;
        if uid == owner {
            return has(self.perm(USER_OBJ).unwrap_or(0));
        }
        let mask = self.perm(MASK).unwrap_or(7);
        if let Some(e) = self.entries.iter().find(|e| e.tag == USER && e.id == uid) {
            return has(u32::from(e.perm) & mask);
        }
        let mut in_a_group = false;
        for e in &self.entries {
            let member = match e.tag {
                GROUP_OBJ => groups.contains(&group),
                GROUP => groups.contains(&e.id),
                _ => false,
            };
            if member {
                if has(u32::from(e.perm) & mask) {
                    return true;
                }
                in_a_group = true;
            }
        }
        !in_a_group && has(self.perm(OTHER).unwrap_or(0))
    }
}

/// Whether a caller (user `uid`, groups `groups`; root has no overrides here) has the `want`
/// bits on an inode of `mode` owned by `owner`:`group`, whose access ACL is `acl` (if it has
/// one): the permission check of acl(5), or of the mode bits alone.
pub fn permits(
    mode: u32,
    (owner, group): (u32, u32),
    acl: Option<&Acl>,
    uid: u32,
    groups: &[u32],
    want: u32,
) -> bool {
    if let Some(acl) = acl {
        return acl.permits(owner, group, uid, groups, want);
    }
    let bits = if uid == owner {
        mode >> 6
    } else if groups.contains(&group) {
        mode >> 3
    } else {
        mode
    } & 7;
    bits & want == want
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use super::encode as acl;
    const U: u32 = NO_ID;

    #[test]
    fn only_valid_acls_decode() {
        let minimal = acl(&[(USER_OBJ, 6, U), (GROUP_OBJ, 4, U), (OTHER, 0, U)]);
        let a = Acl::decode(&minimal).unwrap().unwrap();
        assert!(a.is_minimal());
        assert_eq!(a.mode_bits(), 0o640);
        assert_eq!(a.encode(), minimal);
        let named = acl(&[
            (USER_OBJ, 7, U),
            (USER, 4, 1001),
            (USER, 6, 1002),
            (GROUP_OBJ, 5, U),
            (MASK, 6, U),
            (OTHER, 1, U),
        ]);
        let a = Acl::decode(&named).unwrap().unwrap();
        assert_eq!(a.mode_bits(), 0o761, "the group bits are the mask");
        assert_eq!(Acl::decode(&acl(&[])), Ok(None), "no entries: no ACL");
        for bad in [
            acl(&[(USER_OBJ, 6, U), (OTHER, 0, U)]), // no owning group
            acl(&[
                (USER_OBJ, 6, U),
                (USER, 4, 5),
                (GROUP_OBJ, 4, U),
                (OTHER, 0, U),
            ]), // no mask
            acl(&[(GROUP_OBJ, 4, U), (USER_OBJ, 6, U), (OTHER, 0, U)]), // out of order
            acl(&[
                (USER_OBJ, 6, U),
                (USER, 4, 5),
                (USER, 4, 5),
                (GROUP_OBJ, 4, U),
                (MASK, 4, U),
                (OTHER, 0, U),
            ]), // one id twice
            acl(&[(USER_OBJ, 8, U), (GROUP_OBJ, 4, U), (OTHER, 0, U)]), // a bit past rwx
            acl(&[(USER_OBJ, 6, U), (0x40, 4, U), (OTHER, 0, U)]), // an unknown tag
            vec![1, 0, 0, 0],                        // another version
            vec![2, 0, 0, 0, 1],                     // a torn entry
            vec![2, 0],
        ] {
            assert_eq!(Acl::decode(&bad), Err(Errno::EINVAL), "{bad:?}");
        }
    }

    #[test]
    fn chmod_rewrites_the_mask_and_inheritance_masks_by_the_mode() {
        let named = acl(&[
            (USER_OBJ, 7, U),
            (USER, 7, 1001),
            (GROUP_OBJ, 5, U),
            (MASK, 7, U),
            (OTHER, 5, U),
        ]);
        let a = Acl::decode(&named).unwrap().unwrap();
        let c = a.chmod(0o640);
        assert_eq!(c.mode_bits(), 0o640);
        assert!(c.permits(0, 0, 1001, &[], 4) && !c.permits(0, 0, 1001, &[], 2));
        // A file made 0666 under this default: the mask limits the named user to rw-.
        let (made, mode) = a.inherit(0o666);
        assert_eq!(mode, 0o664);
        assert_eq!(made.mode_bits(), 0o664);
        assert!(made.permits(0, 0, 1001, &[], 6) && !made.permits(0, 0, 1001, &[], 1));
    }

    #[test]
    fn the_check_follows_acl_5() {
        let a = Acl::decode(&acl(&[
            (USER_OBJ, 6, U),
            (USER, 6, 1001),
            (USER, 0, 1003),
            (GROUP_OBJ, 4, U),
            (GROUP, 2, 50),
            (MASK, 4, U),
            (OTHER, 4, U),
        ]))
        .unwrap()
        .unwrap();
        let (owner, group) = (1000, 100);
        assert!(a.permits(owner, group, 1000, &[], 6), "the owner");
        assert!(
            !a.permits(owner, group, 1001, &[], 2),
            "the mask limits a named user"
        );
        assert!(a.permits(owner, group, 1001, &[], 4));
        assert!(
            !a.permits(owner, group, 1003, &[], 4),
            "a named user gets its entry only"
        );
        assert!(a.permits(owner, group, 1004, &[100], 4), "the owning group");
        assert!(
            !a.permits(owner, group, 1004, &[50], 4),
            "a group entry denies other's"
        );
        assert!(a.permits(owner, group, 1004, &[7], 4), "other");
    }

    proptest! {
        /// A minimal ACL is the mode: it stands for the bits it was made from, passes the
        /// same checks, and chmod and inheritance keep the two in step.
        #[test]
        fn a_minimal_acl_is_the_mode(mode in 0u32..0o1000, chmod in 0u32..0o1000, uid in 0u32..4, gid in 0u32..4, want in 1u32..8) {
            let bytes = acl(&[(USER_OBJ, (mode >> 6) as u16, U), (GROUP_OBJ, ((mode >> 3) & 7) as u16, U), (OTHER, (mode & 7) as u16, U)]);
            let a = Acl::decode(&bytes).unwrap().unwrap();
            prop_assert_eq!(a.mode_bits(), mode);
            prop_assert_eq!(a.chmod(chmod).mode_bits(), chmod);
            let (made, m) = a.inherit(chmod);
            prop_assert_eq!(made.mode_bits(), m);
            prop_assert_eq!(m, mode & chmod);
            prop_assert_eq!(
                permits(mode, (1, 1), Some(&a), uid, &[gid], want),
                permits(mode, (1, 1), None, uid, &[gid], want)
            );
        }
    }
}
