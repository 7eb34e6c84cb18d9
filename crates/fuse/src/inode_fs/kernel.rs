//! What the kernel is told: errnos, attributes and file types, file handles, and the
//! replies several requests share.

use std::time::{SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileHandle, FileType, INodeNo, ReplyEmpty, ReplyXattr, Request};
use switchyard_store::{
    Errno, Owner, Stat, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFSOCK,
};

use super::FH_APPEND;
use crate::time;

/// The errno the kernel gets.
pub(super) fn errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.0)
}

pub(super) fn ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos().min(i64::MAX as u128) as i64,
        Err(e) => -(e.duration().as_nanos().min(i64::MAX as u128) as i64),
    }
}

pub(super) fn kind(mode: u32) -> FileType {
    match mode & S_IFMT {
        S_IFDIR => FileType::Directory,
        S_IFLNK => FileType::Symlink,
        S_IFIFO => FileType::NamedPipe,
        S_IFSOCK => FileType::Socket,
        S_IFCHR => FileType::CharDevice,
        S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// The kernel's view of inode `ino`.
pub(super) fn file_attr(ino: u64, s: &Stat) -> FileAttr {
    let a = &s.attr;
    FileAttr {
        ino: INodeNo(ino),
        size: a.size,
        // In 512-byte units, as stat(2) counts: holes take none.
        blocks: s.blocks * 8,
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.ctime),
        kind: kind(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev() as u32,
        blksize: 4096,
        flags: 0,
    }
}

/// The attributes of a negative entry: inode 0 tells the kernel the name is not there.
pub(super) fn negative() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

pub(super) fn owner(req: &Request) -> Owner {
    Owner {
        uid: req.uid(),
        gid: req.gid(),
    }
}

/// The handle of an open file: it records `O_APPEND`, whose writes go to the end.
pub(super) fn handle(flags: i32) -> FileHandle {
    FileHandle(if flags & libc::O_APPEND != 0 {
        FH_APPEND
    } else {
        0
    })
}

/// Replies to getxattr/listxattr: the size when asked for it (`size` 0), else the bytes, or
/// ERANGE when they do not fit.
pub(super) fn xattr_reply(reply: ReplyXattr, size: u32, r: Result<Vec<u8>, Errno>) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(fuser::Errno::ERANGE),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(errno(e)),
    }
}

pub(super) fn empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}
