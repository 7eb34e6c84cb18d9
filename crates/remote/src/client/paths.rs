//! Paths to inodes, for front ends that keep their own descriptors (the file preload
//! library): they open by path once and then read, write and lock by inode through
//! [`Inodes`](switchyard_store::Inodes), without the client's descriptor table.

use switchyard_store::{Errno, OpenFlags, Stat};

use super::Client;

impl Client {
    /// Opens (or creates, as `flags` say) the file at `path` on the server, as
    /// [`Files::open`](switchyard_store::Files::open) does, but keeps no descriptor: the
    /// caller owns one open of the returned inode and gives it back with
    /// [`Inodes::release`](switchyard_store::Inodes::release). Returns the inode and what it
    /// is after the open (truncated, if asked).
    pub fn open_path(&self, path: &str, flags: OpenFlags, mode: u32) -> Result<(u64, Stat), Errno> {
        self.with(|i| i.open_ino(path, flags, mode))
    }

    /// The inode at `path` and what it is, following a final symlink when `follow`.
    pub fn path_stat(&self, path: &str, follow: bool) -> Result<(u64, Stat), Errno> {
        self.with(|i| {
            let ino = i.resolve(path, follow)?;
            Ok((ino, i.stat(ino)?))
        })
    }
}
