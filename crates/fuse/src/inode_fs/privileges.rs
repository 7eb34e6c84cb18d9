//! Set-user-ID and set-group-ID bits and file capabilities, dropped as the kernel would drop
//! them on a write, a truncate or a chown (inode(7), chown(2), capabilities(7)).
//!
//! With `FUSE_HANDLE_KILLPRIV_V2` this is the file system's job: the kernel marks a write
//! that should drop them (`FUSE_WRITE_KILL_SUIDGID`) instead of asking for
//! `security.capability` before every write, a request each, which would double the cost of
//! a small write and undo the writeback cache. Without it (an older kernel) the kernel drops
//! them itself, except for uncached writes, which [`InodeFs::write_data`] covers.

use fuser::Request;
use switchyard_store::{Errno, Inodes, SetAttr, S_IFDIR, S_IFMT};

use super::InodeFs;

/// The xattr that holds a file's capabilities.
const CAPABILITIES: &[u8] = b"security.capability";

/// `mode` without what a write, truncate or chown drops: S_ISUID, and S_ISGID where the
/// group may execute (S_ISGID without group execute marks mandatory locking, and stays).
pub(super) fn without_set_id(mode: u32) -> u32 {
    let mut kill = mode & 0o4000;
    if mode & 0o2010 == 0o2010 {
        kill |= 0o2000;
    }
    mode & !kill
}

impl<I: Inodes> InodeFs<I> {
    /// Drops the set-id bits (as [`without_set_id`]) and the capabilities of `ino`, unless
    /// it is a directory, before a write or truncate by the caller of `req`, unless it is
    /// root (the kernel's `CAP_FSETID`, which keeps them).
    pub(super) fn drop_privileges(&self, req: &Request, ino: u64) -> Result<(), Errno> {
        if req.uid() == 0 {
            return Ok(());
        }
        let mut set = SetAttr::default();
        self.drop_into(ino, &mut set)?;
        if set.mode.is_some() {
            self.inodes.setattr(ino, set)?;
        }
        Ok(())
    }

    /// What a setattr of `ino` must also change when this file system drops privileges: a
    /// chown (`chown`) of anything but a directory drops the set-id bits (for root too, as
    /// Linux does) and the capabilities, and so does a truncate (`truncate`) by anyone but
    /// root. `set` gains the mode that results, unless it sets one itself.
    pub(super) fn privileges_on_setattr(
        &self,
        req: &Request,
        ino: u64,
        set: &mut SetAttr,
    ) -> Result<(), Errno> {
        let chown = set.uid.is_some() || set.gid.is_some();
        let truncate = set.size.is_some() && req.uid() != 0;
        if !self.granted.kill_privileges || !(chown || truncate) {
            return Ok(());
        }
        self.drop_into(ino, set)
    }

    /// Removes the capabilities of `ino` and gives `set` its mode without set-id bits
    /// (unless `set` sets a mode itself, or the bits are not there); nothing for a directory.
    fn drop_into(&self, ino: u64, set: &mut SetAttr) -> Result<(), Errno> {
        let mode = self.inodes.stat(ino)?.attr.mode;
        if mode & S_IFMT == S_IFDIR {
            return Ok(());
        }
        if set.mode.is_none() && without_set_id(mode) != mode {
            set.mode = Some(without_set_id(mode) & 0o7777);
        }
        match self.inodes.removexattr(ino, CAPABILITIES) {
            Err(e) if e == Errno(libc::ENODATA) || e == Errno(libc::EOPNOTSUPP) => Ok(()),
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::without_set_id;

    #[test]
    fn set_user_id_always_goes_and_set_group_id_only_with_group_execute() {
        assert_eq!(without_set_id(0o104755), 0o100755);
        assert_eq!(without_set_id(0o102755), 0o100755);
        // Mandatory-locking marker: S_ISGID without group execute stays.
        assert_eq!(without_set_id(0o102745), 0o102745);
        assert_eq!(without_set_id(0o106711), 0o100711);
        assert_eq!(without_set_id(0o100644), 0o100644);
    }
}
