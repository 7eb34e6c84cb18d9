//! Creating a file and opening it; a create that finds its name made meanwhile by another
//! client (of a served store): without `O_EXCL`, open(2) opens what is there, checked as
//! open(2) checks it.

use fuser::Request;
use switchyard_store::{Errno, Inodes, SetAttr, Stat, S_IFDIR, S_IFREG};

use super::kernel::owner;
use super::InodeFs;

impl<I: Inodes> InodeFs<I> {
    /// `create`: makes regular file `name` in `parent` with `mode` (less `umask`) as the
    /// caller of `req` and opens it with `flags`: the file, held, what it is, and whether the
    /// open found its cached pages current.
    pub(super) fn make_and_open(
        &self,
        req: &Request,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(u64, Stat, bool), Errno> {
        let mode = S_IFREG | (mode & 0o7777);
        let made = match self
            .inodes
            .make(parent, name, mode, 0, &[], owner(req), umask)
        {
            // Someone else (another client of a served store) made the name since the
            // kernel's lookup: without O_EXCL, open(2) opens what is there.
            Err(e) if e == Errno::EEXIST && flags & libc::O_EXCL == 0 => {
                self.open_existing(req, parent, name, flags)
            }
            r => r,
        };
        if self.counts_nothing_open() {
            return made.map(|(ino, s)| (ino, s, true));
        }
        made.and_then(|(ino, s)| match self.inodes.open(ino) {
            Ok(current) => Ok((ino, s, current)),
            Err(e) => {
                // The kernel never learns the number: give its hold back.
                self.inodes.forget(ino, 1);
                Err(e)
            }
        })
    }

    /// The file `name` in `parent` that a create without O_EXCL found made by someone else,
    /// held: checked as open(2) would check it (the kernel checked only the directory), and
    /// truncated for O_TRUNC.
    fn open_existing(
        &self,
        req: &Request,
        parent: u64,
        name: &[u8],
        flags: i32,
    ) -> Result<(u64, Stat), Errno> {
        let (ino, s) = self.inodes.lookup(parent, name)?;
        let r = (|| {
            let a = &s.attr;
            if a.kind() == S_IFDIR {
                return Err(Errno::EISDIR);
            }
            let want = match flags & libc::O_ACCMODE {
                libc::O_RDONLY => 4,
                libc::O_WRONLY => 2,
                _ => 6,
            };
            if !permits(a.mode, a.uid, a.gid, req, want) {
                return Err(Errno(libc::EACCES));
            }
            if flags & libc::O_TRUNC != 0 && want & 2 != 0 && a.size > 0 {
                let set = SetAttr {
                    size: Some(0),
                    ..SetAttr::default()
                };
                return self.as_caller(req, || self.inodes.setattr(ino, set));
            }
            Ok(s)
        })();
        r.map(|s| (ino, s))
            .inspect_err(|_| self.inodes.forget(ino, 1))
    }
}

/// Whether the caller of `req` has the `want` bits (4 read, 2 write) on a file with `mode`,
/// owner `uid` and group `gid`, as the kernel's permission check decides for the caller's
/// user and primary group (root may do anything but run without an x bit).
fn permits(mode: u32, uid: u32, gid: u32, req: &Request, want: u32) -> bool {
    if req.uid() == 0 {
        return true;
    }
    let bits = if req.uid() == uid {
        mode >> 6
    } else if req.gid() == gid {
        mode >> 3
    } else {
        mode
    } & 7;
    bits & want == want
}
