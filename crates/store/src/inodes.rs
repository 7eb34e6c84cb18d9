//! [`Inodes`]: the inode-number interface a kernel front end (the FUSE mount) serves, shared
//! by the store in this process and the remote client, so one front end serves either.

use crate::error::Errno;
use crate::fallocate::Falloc;
use crate::format::Attr;
use crate::store::{DirEntry, Owner, Seek, SetAttr, StatFs, Store};
use crate::xattr::XattrMode;

/// What a front end shows of an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Its attributes.
    pub attr: Attr,
    /// Data blocks of 4 KiB it maps (holes take none).
    pub blocks: u64,
    /// Its slot's generation: (number, generation) names one file for the store's life.
    pub generation: u64,
}

/// A POSIX record lock as `fcntl` states it: bytes `start..=end` (`u64::MAX` reaches past
/// any end of file), `kind` `F_RDLCK`, `F_WRLCK` or `F_UNLCK`, and the process it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLock {
    /// First byte.
    pub start: u64,
    /// Last byte, inclusive.
    pub end: u64,
    /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub kind: i32,
    /// The process.
    pub pid: u32,
}

/// How a rename treats an existing new name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rename {
    /// Replaces it (rename(2)).
    Replace,
    /// Fails with EEXIST (`RENAME_NOREPLACE`).
    NoReplace,
    /// Swaps the two names, both of which must exist (`RENAME_EXCHANGE`).
    Exchange,
}

/// Inodes by number, as a kernel front end asks for them. Every call that hands out an
/// inode number (`lookup`, `make`, `link`) takes one *hold* on it: while held, the number is
/// not given to another file, even after its last name and open are gone; `forget` releases
/// holds. Errors are errnos.
pub trait Inodes: Send + Sync + 'static {
    /// The inode `name` names in directory `parent`, held.
    fn lookup(&self, parent: u64, name: &[u8]) -> Result<(u64, Stat), Errno>;
    /// Releases `n` holds on `ino`.
    fn forget(&self, ino: u64, n: u64);
    /// What `ino` is now.
    fn stat(&self, ino: u64) -> Result<Stat, Errno>;
    /// Changes attributes; returns the result.
    fn setattr(&self, ino: u64, set: SetAttr) -> Result<Stat, Errno>;
    /// A symlink's target.
    fn readlink(&self, ino: u64) -> Result<Vec<u8>, Errno>;
    /// Makes `name` in `parent`, held: the type bits of `mode` choose a regular file, a
    /// directory, a symlink to `target`, or a special file (device number `rdev`). The
    /// creator's `umask` applies to `mode` unless `parent` has a default ACL, which the new
    /// inode inherits instead ([`crate::acl`]).
    #[allow(clippy::too_many_arguments)]
    fn make(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u64,
        target: &[u8],
        owner: Owner,
        umask: u32,
    ) -> Result<(u64, Stat), Errno>;
    /// Gives `ino` the new name `name` in `parent`, and holds it once more.
    fn link(&self, ino: u64, parent: u64, name: &[u8]) -> Result<Stat, Errno>;
    /// Removes a name: of a directory (which must be empty) if `dir`, else of anything else.
    fn remove(&self, parent: u64, name: &[u8], dir: bool) -> Result<(), Errno>;
    /// Moves a name.
    fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        how: Rename,
    ) -> Result<(), Errno>;
    /// Notes an open (an unlinked file lives while open). Returns whether data a front end
    /// cached from this inode's earlier opens is still current: no one else changed it since.
    fn open(&self, ino: u64) -> Result<bool, Errno>;
    /// Drops an open.
    fn release(&self, ino: u64) -> Result<(), Errno>;
    /// Reads up to `buf.len()` bytes at `off`; how many (0 at or past the end).
    fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno>;
    /// Reads up to `len` bytes at `off` as [`Inodes::read`] does, and lends them to `give`
    /// from where they already lie in this process (a server's reply), sparing the copy into
    /// a buffer; returns `Ok(false)` without calling `give` where they lie nowhere it can
    /// lend them from (the caller then reads them with [`Inodes::read`]). `give` is called at
    /// most once, and only on success.
    fn read_lent(
        &self,
        _ino: u64,
        _off: u64,
        _len: usize,
        _give: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, Errno> {
        Ok(false)
    }
    /// Writes `data` at `off`, durably and atomically; bytes written.
    fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno>;
    /// Writes `data` at the end, atomically against every other writer; where it went.
    fn append(&self, ino: u64, data: &[u8]) -> Result<u64, Errno>;
    /// Makes `ino` durable.
    fn fsync(&self, ino: u64) -> Result<(), Errno>;
    /// A directory's entries.
    fn readdir(&self, ino: u64) -> Result<Vec<DirEntry>, Errno>;
    /// Space and inode counts.
    fn statfs(&self) -> Result<StatFs, Errno>;
    /// Allocates, zeroes or punches a range.
    fn fallocate(&self, ino: u64, off: u64, len: u64, how: Falloc) -> Result<(), Errno>;
    /// Where `lseek`'s `SEEK_DATA` or `SEEK_HOLE` from `off` lands in a regular file
    /// ([`Extents::seek`](crate::Extents::seek)).
    fn seek(&self, ino: u64, off: u64, to: Seek) -> Result<u64, Errno>;
    /// Sets an extended attribute.
    fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], mode: XattrMode) -> Result<(), Errno>;
    /// An extended attribute's value.
    fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>, Errno>;
    /// Extended attribute names, each followed by a zero byte.
    fn listxattr(&self, ino: u64) -> Result<Vec<u8>, Errno>;
    /// Removes an extended attribute.
    fn removexattr(&self, ino: u64, name: &[u8]) -> Result<(), Errno>;
    /// Whether others change these inodes too (clients of one served store), not only the
    /// caller: a front end must then not rely on what it cached beyond what `open` says.
    fn shared(&self) -> bool {
        false
    }
    /// Whether this keeps POSIX record locks for all its users (clients of one served store):
    /// a front end then sends them here instead of keeping them itself.
    fn record_locks(&self) -> bool {
        false
    }
    /// The first lock of another owner that `lock` (held by `owner`) would conflict with,
    /// or `lock` with kind `F_UNLCK` if none would (`F_GETLK`).
    fn test_lock(&self, _ino: u64, _owner: u64, _lock: RecordLock) -> Result<RecordLock, Errno> {
        Err(Errno(libc::ENOSYS))
    }
    /// Sets (or, with `F_UNLCK`, clears) `owner`'s lock; `EAGAIN` if another owner's lock
    /// conflicts (`F_SETLK`). With `wait`, the caller waits for the lock while one conflicts
    /// (asking again: `F_SETLKW`), and gets `EDEADLK` instead where its wait would close a
    /// cycle of owners each waiting for a lock the next holds.
    fn set_lock(
        &self,
        _ino: u64,
        _owner: u64,
        _lock: RecordLock,
        _wait: bool,
    ) -> Result<(), Errno> {
        Err(Errno(libc::ENOSYS))
    }
    /// Drops every lock `owner` holds on `ino` (its process closed the file).
    fn release_locks(&self, _ino: u64, _owner: u64) {}
    /// Runs `f` for a caller who may not use the space reserved for the privileged (where
    /// the implementation keeps such a share; else just runs it).
    fn as_unprivileged<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }
}

impl Store {
    /// `ino`'s stat, one hold on it already taken (and released again if `ino` is gone).
    fn held_stat(&self, ino: u64) -> Result<Stat, Errno> {
        self.stat(ino).inspect_err(|_| {
            let _ = self.release_holds(ino, 1);
        })
    }
}

/// The store in this process: every change goes through its caller, so cached data is
/// always current.
impl Inodes for Store {
    fn lookup(&self, parent: u64, name: &[u8]) -> Result<(u64, Stat), Errno> {
        let (ino, _) = self.lookup_held(parent, name)?;
        Ok((ino, self.held_stat(ino)?))
    }

    fn forget(&self, ino: u64, n: u64) {
        let _ = self.release_holds(ino, n);
    }

    fn stat(&self, ino: u64) -> Result<Stat, Errno> {
        Store::stat(self, ino)
    }

    fn setattr(&self, ino: u64, set: SetAttr) -> Result<Stat, Errno> {
        Store::setattr(self, ino, set)?;
        Store::stat(self, ino)
    }

    fn readlink(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        Ok(Store::readlink(self, ino)?)
    }

    fn make(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u64,
        target: &[u8],
        owner: Owner,
        umask: u32,
    ) -> Result<(u64, Stat), Errno> {
        use crate::format::{S_IFLNK, S_IFMT};
        let (ino, _) = match mode & S_IFMT {
            S_IFLNK => self.symlink(parent, name, target, owner)?,
            _ => self.mknod_masked(parent, name, mode, rdev, owner, umask)?,
        };
        self.hold(ino)?;
        Ok((ino, self.held_stat(ino)?))
    }

    fn link(&self, ino: u64, parent: u64, name: &[u8]) -> Result<Stat, Errno> {
        Store::link(self, ino, parent, name)?;
        self.hold(ino)?;
        self.held_stat(ino)
    }

    fn remove(&self, parent: u64, name: &[u8], dir: bool) -> Result<(), Errno> {
        if dir {
            Ok(self.rmdir(parent, name)?)
        } else {
            Ok(self.unlink(parent, name)?)
        }
    }

    fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        how: Rename,
    ) -> Result<(), Errno> {
        let (p, n, np, nn) = (parent, name, new_parent, new_name);
        match how {
            Rename::Replace => Store::rename(self, p, n, np, nn)?,
            Rename::NoReplace => self.rename_noreplace(p, n, np, nn)?,
            Rename::Exchange => self.exchange(p, n, np, nn)?,
        }
        Ok(())
    }

    fn open(&self, ino: u64) -> Result<bool, Errno> {
        Store::open(self, ino)?;
        Ok(true)
    }

    fn release(&self, ino: u64) -> Result<(), Errno> {
        Ok(Store::release(self, ino)?)
    }

    fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        Ok(Store::read(self, ino, off, buf)?)
    }

    fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
        Ok(Store::write(self, ino, off, data)?)
    }

    fn append(&self, ino: u64, data: &[u8]) -> Result<u64, Errno> {
        Ok(Store::append(self, ino, data)?)
    }

    fn fsync(&self, ino: u64) -> Result<(), Errno> {
        Ok(Store::fsync(self, ino)?)
    }

    fn readdir(&self, ino: u64) -> Result<Vec<DirEntry>, Errno> {
        Ok(Store::readdir(self, ino)?)
    }

    fn statfs(&self) -> Result<StatFs, Errno> {
        Ok(Store::statfs(self))
    }

    fn fallocate(&self, ino: u64, off: u64, len: u64, how: Falloc) -> Result<(), Errno> {
        Ok(Store::fallocate(self, ino, off, len, how)?)
    }

    fn seek(&self, ino: u64, off: u64, to: Seek) -> Result<u64, Errno> {
        Ok(Store::seek(self, ino, off, to)?)
    }

    fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], mode: XattrMode) -> Result<(), Errno> {
        Ok(Store::setxattr(self, ino, name, value, mode)?)
    }

    fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>, Errno> {
        Ok(Store::getxattr(self, ino, name)?)
    }

    fn listxattr(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        Ok(Store::listxattr(self, ino)?)
    }

    fn removexattr(&self, ino: u64, name: &[u8]) -> Result<(), Errno> {
        Ok(Store::removexattr(self, ino, name)?)
    }

    fn as_unprivileged<R>(&self, f: impl FnOnce() -> R) -> R {
        Store::as_unprivileged(self, f)
    }
}
