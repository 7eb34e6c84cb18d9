//! The client as [`Inodes`], for a kernel front end (`switchyard mount --remote`).
//!
//! Every number this hands out is held on the server for this client (the server releases
//! the holds when the client forgets them or goes), so the server never gives a number the
//! kernel still knows to another file.

use switchyard_store::{
    DirEntry, Errno, Falloc, Inodes, Owner, RecordLock, Rename, Seek, SetAttr, Stat, StatFs,
    XattrMode,
};

use super::Client;
use crate::proto::{Reply, Request};

impl Inodes for Client {
    fn lookup(&self, parent: u64, name: &[u8]) -> Result<(u64, Stat), Errno> {
        self.with(|i| i.lookup_held(parent, name))
    }

    fn forget(&self, ino: u64, n: u64) {
        let _ = self.with(|i| i.forgot(ino, n));
    }

    fn stat(&self, ino: u64) -> Result<Stat, Errno> {
        self.with(|i| i.stat(ino))
    }

    fn setattr(&self, ino: u64, set: SetAttr) -> Result<Stat, Errno> {
        self.with(|i| i.setattr(ino, set))
    }

    fn readlink(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        self.with(|i| i.readlink(ino))
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
        self.with(|i| {
            let (ino, st) = i.make_in(
                parent,
                name.to_vec(),
                mode,
                rdev,
                target.to_vec(),
                (owner, umask),
                true,
            )?;
            i.took(ino);
            Ok((ino, st))
        })
    }

    fn link(&self, ino: u64, parent: u64, name: &[u8]) -> Result<Stat, Errno> {
        self.with(|i| {
            let req = Request::Link {
                ino,
                parent,
                name: name.to_vec(),
                hold: true,
            };
            match i.call(&req)? {
                Reply::Stat(s) => {
                    i.took(ino);
                    Ok(s)
                }
                _ => Err(Errno::EIO),
            }
        })
    }

    fn remove(&self, parent: u64, name: &[u8], dir: bool) -> Result<(), Errno> {
        self.with(|i| {
            i.done(&Request::Remove {
                parent,
                name: name.to_vec(),
                dir,
            })
        })
    }

    fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        how: Rename,
    ) -> Result<(), Errno> {
        self.with(|i| {
            i.done(&Request::Rename {
                parent,
                name: name.to_vec(),
                new_parent,
                new_name: new_name.to_vec(),
                how,
            })
        })
    }

    /// Cached data is current when the file's change word is the one this client saw at its
    /// last open: no write, by anyone, since. (This client's own writes move the word too,
    /// so data cached after them is dropped at the next open: safe, if not the cheapest.)
    fn open(&self, ino: u64) -> Result<bool, Errno> {
        self.with(|i| {
            let word = if i.one_sided() {
                Some(i.word(ino)?)
            } else {
                None
            };
            i.done(&Request::Open { ino })?;
            Ok(match word {
                Some(w) => i.opened.insert(ino, w) == Some(w),
                None => false,
            })
        })
    }

    fn release(&self, ino: u64) -> Result<(), Errno> {
        self.with(|i| i.done(&Request::Close { ino }))
    }

    fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        self.with(|i| i.read(ino, off, buf))
    }

    fn read_lent(
        &self,
        ino: u64,
        off: u64,
        len: usize,
        give: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, Errno> {
        self.with(|i| i.read_lent(ino, off, len, give))
    }

    fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
        self.with(|i| i.write(ino, off, data))
    }

    fn append(&self, ino: u64, data: &[u8]) -> Result<u64, Errno> {
        self.with(|i| i.append(ino, data))
    }

    fn fsync(&self, ino: u64) -> Result<(), Errno> {
        self.with(|i| i.done(&Request::Fsync { ino }))
    }

    fn readdir(&self, ino: u64) -> Result<Vec<DirEntry>, Errno> {
        self.with(|i| i.readdir(ino))
    }

    fn statfs(&self) -> Result<StatFs, Errno> {
        self.with(|i| i.statfs())
    }

    fn fallocate(&self, ino: u64, off: u64, len: u64, how: Falloc) -> Result<(), Errno> {
        self.with(|i| {
            i.maps.remove(&ino);
            i.attrs.remove(&ino);
            i.done(&Request::Fallocate { ino, off, len, how })
        })
    }

    fn seek(&self, ino: u64, off: u64, to: Seek) -> Result<u64, Errno> {
        // The server's answer, now (one request, whose cost is the runs it walks from
        // `off`, not the file's map; not the cached map, which is checked only by one-sided
        // readers and covers a window).
        self.with(|i| match i.call(&Request::Seek { ino, off, to })? {
            Reply::Offset(at) => Ok(at),
            _ => Err(Errno::EIO),
        })
    }

    fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], mode: XattrMode) -> Result<(), Errno> {
        self.with(|i| {
            i.done(&Request::Setxattr {
                ino,
                name: name.to_vec(),
                value: value.to_vec(),
                mode,
            })
        })
    }

    fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>, Errno> {
        self.with(|i| {
            let req = Request::Getxattr {
                ino,
                name: name.to_vec(),
            };
            bytes(i.call(&req)?)
        })
    }

    fn listxattr(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        self.with(|i| bytes(i.call(&Request::Listxattr { ino })?))
    }

    fn shared(&self) -> bool {
        true
    }

    fn record_locks(&self) -> bool {
        true
    }

    fn test_lock(&self, ino: u64, owner: u64, lock: RecordLock) -> Result<RecordLock, Errno> {
        self.with(|i| match i.call(&Request::TestLock { ino, owner, lock })? {
            Reply::Lock(l) => Ok(l),
            _ => Err(Errno::EIO),
        })
    }

    fn set_lock(&self, ino: u64, owner: u64, lock: RecordLock, wait: bool) -> Result<(), Errno> {
        self.with(|i| {
            i.done(&Request::Lock {
                ino,
                owner,
                lock,
                wait,
            })
        })
    }

    fn release_locks(&self, ino: u64, owner: u64) {
        let _ = self.with(|i| i.done(&Request::Unlock { ino, owner }));
    }

    fn removexattr(&self, ino: u64, name: &[u8]) -> Result<(), Errno> {
        self.with(|i| {
            i.done(&Request::Removexattr {
                ino,
                name: name.to_vec(),
            })
        })
    }
}

fn bytes(r: Reply) -> Result<Vec<u8>, Errno> {
    match r {
        Reply::Bytes(b) => Ok(b),
        _ => Err(Errno::EIO),
    }
}
