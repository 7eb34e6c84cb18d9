//! A create that finds its name made meanwhile by another client (of a served store):
//! without `O_EXCL`, open(2) opens what is there, checked as open(2) checks it.

use fuser::Request;
use switchyard_store::{Errno, Inodes, SetAttr, Stat, S_IFDIR};

use super::InodeFs;

impl<I: Inodes> InodeFs<I> {
    /// The file `name` in `parent` that a create without O_EXCL found made by someone else,
    /// held: checked as open(2) would check it (the kernel checked only the directory), and
    /// truncated for O_TRUNC.
    pub(super) fn open_existing(
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
