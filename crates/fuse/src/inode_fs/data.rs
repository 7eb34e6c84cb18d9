//! Reads and writes: a read's bytes go to the kernel from where they lie when the inodes lend
//! them; a write runs as its caller, appends for an `O_APPEND` handle, and syncs for an
//! `O_SYNC` or `O_DSYNC` open; `SEEK_DATA` and `SEEK_HOLE`.

use fuser::{FileHandle, ReplyData, ReplyLseek, Request};
use switchyard_store::{Errno, Inodes, Seek};

use super::kernel::errno;
use super::{InodeFs, FH_APPEND};
use crate::with_read_buffer;

impl<I: Inodes> InodeFs<I> {
    /// `read`: `size` bytes at `offset` of `ino`, to `reply`.
    pub(super) fn read_data(&self, ino: u64, offset: u64, size: u32, reply: ReplyData) {
        // Bytes that already lie in this process (a server's reply) go to the kernel from
        // there; others are read into a buffer first.
        let mut reply = Some(reply);
        let lent = self.inodes.read_lent(ino, offset, size as usize, &mut |b| {
            if let Some(r) = reply.take() {
                r.data(b);
            }
        });
        let Some(reply) = reply else { return };
        match lent {
            Ok(true) => {}
            Ok(false) => with_read_buffer(size, |buf| match self.inodes.read(ino, offset, buf) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(errno(e)),
            }),
            Err(e) => reply.error(errno(e)),
        }
    }

    /// `write`: `data` at `offset` of `ino` (at its end, for an append handle `fh`), as the
    /// caller of `req`, synced for an open with `flags` `O_SYNC` or `O_DSYNC`, dropping
    /// set-id bits and capabilities first where the kernel says (`kill`); how many bytes were
    /// written.
    pub(super) fn write_data(
        &self,
        req: &Request,
        ino: u64,
        fh: FileHandle,
        (offset, data): (u64, &[u8]),
        flags: i32,
        kill: bool,
    ) -> Result<usize, Errno> {
        self.as_caller(req, || {
            let append = fh.0 & FH_APPEND != 0;
            // Uncached (direct) appends of a served store get no privilege dropping from a
            // kernel that leaves it to itself.
            if kill || (append && self.inodes.shared() && !self.granted.kill_privileges) {
                self.drop_privileges(req, ino)?;
            }
            let n = if append {
                self.inodes.append(ino, data).map(|_| data.len())?
            } else {
                self.inodes.write(ino, offset, data)?
            };
            if flags & (libc::O_SYNC | libc::O_DSYNC) != 0 {
                // The kernel marks the write of an `O_SYNC` or `O_DSYNC` open (and a
                // `pwritev2` with `RWF_SYNC` or `RWF_DSYNC`) in its flags; it sends an fsync
                // after a cached one, but none after a direct one: synced here, either way.
                self.inodes.fsync(ino)?;
            }
            Ok(n)
        })
    }

    /// `lseek` with `SEEK_DATA` or `SEEK_HOLE` (`whence`) from `offset` in `ino`.
    pub(super) fn seek_data(&self, ino: u64, offset: i64, whence: i32, reply: ReplyLseek) {
        let to = match whence {
            libc::SEEK_DATA => Seek::Data,
            libc::SEEK_HOLE => Seek::Hole,
            _ => return reply.error(fuser::Errno::EINVAL),
        };
        let Ok(off) = u64::try_from(offset) else {
            return reply.error(fuser::Errno::ENXIO);
        };
        if self.granted.writeback {
            // The kernel asks without writing its dirty pages back first, so the store's
            // map and size may lag the file: ENOSYS makes it answer from its own size for
            // the rest of the mount (all data, the hole at the end), which is never wrong.
            return reply.error(fuser::Errno::ENOSYS);
        }
        match self.inodes.seek(ino, off, to) {
            Ok(at) => reply.offset(at as i64),
            Err(e) => reply.error(errno(e)),
        }
    }
}
