//! [`Files`]: the path-and-descriptor interface the local [`Fs`] and the remote client share,
//! so code written against one runs against the other.

use crate::format::Attr;
use crate::fs::{Fd, Fs, OpenFlags, Whence};
use crate::store::{DirEntry, StatFs};
use crate::Errno;

macro_rules! files {
    ($($(#[$doc:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {
        /// Files by path and descriptor, as POSIX offers them: every call is synchronous and
        /// returns an errno on failure. Implemented by the local [`Fs`] (the store in this
        /// process) and by the remote client (a store served by another process or machine).
        pub trait Files {
            $($(#[$doc])* fn $name(&self $(, $arg: $ty)*) -> $ret;)*
            /// Space and inode counts.
            fn statfs(&self) -> Result<StatFs, Errno>;
        }

        impl Files for Fs {
            $(fn $name(&self $(, $arg: $ty)*) -> $ret { Fs::$name(self $(, $arg)*) })*
            fn statfs(&self) -> Result<StatFs, Errno> {
                Ok(Fs::statfs(self))
            }
        }
    };
}

files! {
    /// Opens (or creates, with `flags.create`) a file.
    fn open(&self, path: &str, flags: OpenFlags, mode: u32) -> Result<Fd, Errno>;
    /// Closes a descriptor.
    fn close(&self, fd: Fd) -> Result<(), Errno>;
    /// Reads at the descriptor's offset and advances it.
    fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize, Errno>;
    /// Reads at `off`.
    fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize, Errno>;
    /// Writes at the descriptor's offset (the end, for an append descriptor) and advances it.
    fn write(&self, fd: Fd, data: &[u8]) -> Result<usize, Errno>;
    /// Writes at `off`.
    fn pwrite(&self, fd: Fd, data: &[u8], off: u64) -> Result<usize, Errno>;
    /// Moves the descriptor's offset.
    fn lseek(&self, fd: Fd, off: i64, whence: Whence) -> Result<u64, Errno>;
    /// Makes the file durable (on a store file on a disk: every change that returned, as
    /// [`Fs::sync`]).
    fn fsync(&self, fd: Fd) -> Result<(), Errno>;
    /// Makes every change to the store that returned durable (`syncfs`).
    fn sync(&self) -> Result<(), Errno>;
    /// Attributes of the open file.
    fn fstat(&self, fd: Fd) -> Result<Attr, Errno>;
    /// Sets the open file's size.
    fn ftruncate(&self, fd: Fd, size: u64) -> Result<(), Errno>;
    /// Attributes of `path`, following a final symlink.
    fn stat(&self, path: &str) -> Result<Attr, Errno>;
    /// Attributes of `path` itself.
    fn lstat(&self, path: &str) -> Result<Attr, Errno>;
    /// Sets the size of `path`.
    fn truncate(&self, path: &str, size: u64) -> Result<(), Errno>;
    /// Creates a directory.
    fn mkdir(&self, path: &str, mode: u32) -> Result<(), Errno>;
    /// Removes an empty directory.
    fn rmdir(&self, path: &str) -> Result<(), Errno>;
    /// Removes a name of a non-directory.
    fn unlink(&self, path: &str) -> Result<(), Errno>;
    /// Renames, replacing the target as `rename(2)` does.
    fn rename(&self, from: &str, to: &str) -> Result<(), Errno>;
    /// A new name `to` for the file at `from`.
    fn link(&self, from: &str, to: &str) -> Result<(), Errno>;
    /// Creates a symlink at `path` pointing to `target`.
    fn symlink(&self, target: &str, path: &str) -> Result<(), Errno>;
    /// A symlink's target.
    fn readlink(&self, path: &str) -> Result<Vec<u8>, Errno>;
    /// A directory's entries.
    fn readdir(&self, path: &str) -> Result<Vec<DirEntry>, Errno>;
    /// The whole content of the file at `path`.
    fn read_all(&self, path: &str) -> Result<Vec<u8>, Errno>;
}
