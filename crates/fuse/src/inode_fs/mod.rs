//! [`InodeFs`]: inodes by number (the store in this process, or a remote store through its
//! client) served over FUSE.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    FileHandle, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use switchyard_mover::qos::{self, Classes};
use switchyard_store::{
    Errno, Falloc, Inodes, Owner, RecordLock, Rename, SetAttr, Stat, XattrMode, S_IFDIR, S_IFLNK,
    S_IFMT,
};

use crate::{open_flags, FuseConfig, Replies};

mod create;
mod data;
mod init;
mod kernel;
mod listing;
mod locks;
mod privileges;
mod tenants;

use init::Granted;
use kernel::{empty, errno, file_attr, handle, ns, owner, xattr_reply};
use listing::Listing;

/// Bit of a file handle that marks an `O_APPEND` open: its writes go to the end, atomically.
const FH_APPEND: u64 = 1 << 63;

/// Inodes served over FUSE: the store in this process ([`switchyard_store::Store`]) or a
/// remote store through its client.
pub struct InodeFs<I: Inodes> {
    inodes: Arc<I>,
    /// What the kernel is told (`[fuse]`).
    replies: Replies,
    /// How long the kernel may cache attributes and names: `[fuse]`'s lifetime, unless
    /// others change the inodes too. Then not at all: the kernel asks at every use, and the
    /// inodes answer from their own checked caches, so an open sees another client's last
    /// size, and a name another client removed is gone at once (sqlite's test for a hot
    /// journal is a lookup).
    cache_ttl: Duration,
    /// The user who mounted: with root, the only one whose writes may use the store's
    /// reserved share.
    owner_uid: u32,
    /// Directory snapshots by handle, taken at each handle's first read from offset 0
    /// (none yet between `opendir` and that read).
    dirs: Mutex<HashMap<u64, Option<Arc<Listing>>>>,
    next_dir: AtomicU64,
    /// The rules that class callers into tenants, where there are any.
    tenants: Option<tenants::Tenants>,
    /// `F_SETLKW` calls waiting for a lock.
    lock_waits: Arc<locks::Waits>,
    /// What the kernel granted at `init`.
    granted: Granted,
}

impl<I: Inodes> InodeFs<I> {
    /// Serves `inodes`, telling the kernel what `config` says.
    pub fn new(inodes: Arc<I>, config: &FuseConfig) -> InodeFs<I> {
        let mut replies = Replies::of(config);
        // Others change a served store's files: the kernel must not keep its own idea of
        // their sizes, which it does with the writeback cache.
        replies.writeback &= !inodes.shared();
        InodeFs {
            cache_ttl: if inodes.shared() {
                Duration::ZERO
            } else {
                replies.ttl
            },
            inodes,
            replies,
            owner_uid: Owner::current().uid,
            dirs: Mutex::new(HashMap::new()),
            next_dir: AtomicU64::new(1),
            tenants: None,
            lock_waits: Arc::default(),
            granted: Granted::default(),
        }
    }

    /// Classes callers into tenants by `classes` (by uid and by path; see
    /// [`switchyard_mover::qos::Classes`]): an open's file handle keeps its tenant, and the
    /// handle's reads and writes carry it to the mover.
    pub fn classing(mut self, classes: &Classes) -> InodeFs<I> {
        self.tenants = tenants::Tenants::new(classes);
        self
    }

    /// The file handle of an open of `ino` by `req` with `flags`: its tenant in it.
    fn handle(&self, req: &Request, ino: u64, flags: i32) -> FileHandle {
        let t = self.tenants.as_ref().map_or(0, |t| t.of(req.uid(), ino));
        // With the writeback cache the kernel places appends itself, and writes back its
        // pages through any handle open for writing, an append handle's too: every write
        // goes where its offset says.
        let flags = if self.granted.writeback {
            flags & !libc::O_APPEND
        } else {
            flags
        };
        tenants::with_tenant(handle(flags), t)
    }

    /// Whether opens go uncounted: where no one else changes the inodes and no tenant is
    /// classed by its handle. A handle then carries nothing (no tenant; `O_APPEND` writes
    /// come at the offset the kernel, which knows the size, gives them), and what an open
    /// keeps alive, an inode whose last name went, the kernel's hold on it keeps alive too:
    /// it holds an inode as long as a file of it is open, and forgets it only after. So
    /// `open` is answered ENOSYS, and the kernel stops sending `open` and `release`.
    fn counts_nothing_open(&self) -> bool {
        !self.inodes.shared() && self.tenants.is_none()
    }

    /// Runs `f` with the reserved share closed unless `req` comes from root or the owner.
    fn as_caller<R>(&self, req: &Request, f: impl FnOnce() -> R) -> R {
        if req.uid() == 0 || req.uid() == self.owner_uid {
            f()
        } else {
            self.inodes.as_unprivileged(f)
        }
    }

    /// The page-cache policy of an open with `flags`. An `O_APPEND` open of shared inodes
    /// bypasses the page cache: the kernel cuts a cached write at the end of a page it does
    /// not hold whole, and two appends, one request each, would interleave with another
    /// client's; uncached, each `write(2)` is one request, appended whole.
    fn open_flags(&self, flags: i32, current: bool) -> FopenFlags {
        if flags & libc::O_APPEND != 0 && self.inodes.shared() {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            open_flags(OpenFlags(flags), current)
        }
    }

    /// Replies with an entry the kernel will count as one lookup of its inode: `r` comes
    /// from a call that took that hold (so the kernel's `forget` always finds the holds it
    /// releases).
    fn entry(&self, reply: ReplyEntry, at: (u64, &[u8]), r: Result<(u64, Stat), Errno>) {
        match r {
            Ok((ino, s)) => {
                if let Some(t) = &self.tenants {
                    t.seen(at.0, at.1, ino);
                }
                reply.entry_with_ttls(
                    &self.cache_ttl,
                    &self.cache_ttl,
                    &file_attr(ino, &s),
                    Generation(s.generation),
                )
            }
            Err(e) => reply.error(errno(e)),
        }
    }
}

impl<I: Inodes> Filesystem for InodeFs<I> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.granted = self.ask(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = name.as_bytes();
        match self.inodes.lookup(parent.0, name) {
            // A name that is not there stays not there until this mount makes it (nothing
            // else changes these inodes): the kernel may cache its absence too.
            Err(e) if e == Errno::ENOENT && !self.cache_ttl.is_zero() => {
                reply.entry(&self.cache_ttl, &kernel::negative(), Generation(0))
            }
            r => self.entry(reply, (parent.0, name), r),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if let Some(t) = &self.tenants {
            t.forget(ino.0, nlookup);
        }
        // The kernel dropped the inode: its number may be reused once nothing else holds it.
        self.inodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.inodes.stat(ino.0) {
            Ok(s) => reply.attr(&self.cache_ttl, &file_attr(ino.0, &s)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let at = |t: Option<TimeOrNow>| {
            t.map(|t| match t {
                TimeOrNow::SpecificTime(t) => ns(t),
                TimeOrNow::Now => ns(SystemTime::now()),
            })
        };
        let mut s = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: at(atime),
            mtime: at(mtime),
        };
        if let Err(e) = self.privileges_on_setattr(req, ino.0, &mut s) {
            return reply.error(errno(e));
        }
        match self.inodes.setattr(ino.0, s) {
            Ok(s) => reply.attr(&self.cache_ttl, &file_attr(ino.0, &s)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.inodes.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        // FIFOs, sockets and device nodes are inodes of the store; the kernel serves their
        // I/O (devices only on a mount with `dev`, which this one is not).
        let mode = (mode & S_IFMT) | (mode & 0o7777);
        let r = self.inodes.make(
            parent.0,
            name.as_bytes(),
            mode,
            u64::from(rdev),
            &[],
            owner(req),
            umask,
        );
        self.entry(reply, (parent.0, name.as_bytes()), r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mode = S_IFDIR | (mode & 0o7777);
        let r = self
            .inodes
            .make(parent.0, name.as_bytes(), mode, 0, &[], owner(req), umask);
        self.entry(reply, (parent.0, name.as_bytes()), r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.inodes.remove(parent.0, name.as_bytes(), false));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.inodes.remove(parent.0, name.as_bytes(), true));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self.as_caller(req, || {
            self.inodes.make(
                parent.0,
                link_name.as_bytes(),
                S_IFLNK | 0o777,
                0,
                target.as_os_str().as_bytes(),
                owner(req),
                0,
            )
        });
        self.entry(reply, (parent.0, link_name.as_bytes()), r);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let how = if flags == RenameFlags::RENAME_NOREPLACE {
            Rename::NoReplace
        } else if flags == RenameFlags::RENAME_EXCHANGE {
            Rename::Exchange
        } else if flags.is_empty() {
            Rename::Replace
        } else {
            // RENAME_WHITEOUT (overlayfs's) and combinations are not supported.
            return reply.error(fuser::Errno::EINVAL);
        };
        let (p, n, np, nn) = (parent.0, name.as_bytes(), newparent.0, newname.as_bytes());
        let r = self.inodes.rename(p, n, np, nn, how);
        if let (Ok(()), Some(t)) = (&r, &self.tenants) {
            t.renamed((p, n), (np, nn), how == Rename::Exchange);
        }
        empty(reply, r);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self
            .inodes
            .link(ino.0, newparent.0, newname.as_bytes())
            .map(|s| (ino.0, s));
        self.entry(reply, (newparent.0, newname.as_bytes()), r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if self.counts_nothing_open() {
            // ENOSYS: the kernel opens and closes files without asking from now on, keeping
            // their cached pages (two requests saved per open and close).
            return reply.error(fuser::Errno::ENOSYS);
        }
        match self.inodes.open(ino.0) {
            Ok(current) => reply.opened(
                self.handle(req, ino.0, flags.0),
                self.open_flags(flags.0, current),
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let _tenant = qos::enter(tenants::tenant(fh));
        self.read_data(ino.0, offset, size, reply);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let _tenant = qos::enter(tenants::tenant(fh));
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let r = self.write_data(req, ino.0, fh, (offset, data), flags.0, kill);
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        // Every write reached the inodes when it returned (with the writeback cache, the
        // kernel writes its pages back before it sends this): nothing is left to flush, and
        // a close syncs nothing (as on ext4: durability against a power cut is fsync's, the
        // periodic sync's or `sync = "always"`'s). A close drops the closing process's record
        // locks on the file, as POSIX says: where the inodes keep them. Where the kernel
        // does, there is nothing to do here, and ENOSYS tells the kernel not to send flushes
        // again (a request saved per close).
        if !self.inodes.record_locks() {
            return reply.error(fuser::Errno::ENOSYS);
        }
        self.inodes.release_locks(ino.0, lock_owner.0);
        self.lock_waits.flushed(ino.0, lock_owner.0);
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if self.counts_nothing_open() {
            // Only a handle of `create` from before the kernel stopped asking at open gets
            // here, and none of them was counted.
            return reply.ok();
        }
        empty(reply, self.inodes.release(ino.0));
    }

    /// `fsync` and `fdatasync` alike (the kernel also sends it after a cached write of an
    /// `O_SYNC` or `O_DSYNC` open): the inodes' fsync, which on a store file on a disk makes
    /// every operation that returned durable.
    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.inodes.fsync(ino.0));
    }

    /// `fsync` of a directory (what makes a new name durable; `sync DIR`). Unanswered, the
    /// kernel would take ENOSYS as "nothing to do" and return success without asking again.
    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.inodes.fsync(ino.0));
    }

    fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: fuser::LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: fuser::ReplyLock,
    ) {
        let lock = RecordLock {
            start,
            end,
            kind: typ,
            pid,
        };
        match self.inodes.test_lock(ino.0, lock_owner.0, lock) {
            Ok(l) => reply.locked(l.start, l.end, l.kind, l.pid),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: fuser::LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let lock = RecordLock {
            start,
            end,
            kind: typ,
            pid,
        };
        let waits = sleep.then(|| self.lock_waits.clone());
        locks::set(&self.inodes, waits, ino.0, lock_owner.0, lock, reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.open_listing(ino.0, reply);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.list(ino.0, fh, offset, reply);
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: fuser::ReplyDirectoryPlus,
    ) {
        self.list_plus(ino.0, fh, offset, reply);
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.release_listing(fh, reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = match self.inodes.statfs() {
            Ok(s) => s,
            Err(e) => return reply.error(errno(e)),
        };
        reply.statfs(
            s.blocks,
            s.free_blocks,
            s.available_blocks,
            s.inodes,
            s.free_inodes,
            s.block_size as u32,
            s.name_max as u32,
            s.block_size as u32,
        );
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let what = match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => Falloc::Allocate { keep_size },
            libc::FALLOC_FL_ZERO_RANGE => Falloc::ZeroRange { keep_size },
            libc::FALLOC_FL_PUNCH_HOLE if keep_size => Falloc::PunchHole,
            // Collapsing, inserting and unsharing ranges are not built.
            _ => return reply.error(fuser::Errno::EOPNOTSUPP),
        };
        let r = self.as_caller(req, || self.inodes.fallocate(ino.0, offset, length, what));
        empty(reply, r);
    }

    /// `SEEK_DATA` and `SEEK_HOLE` (the kernel answers the other kinds itself): where the
    /// file's data and holes lie, as the store maps its blocks.
    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.seek_data(ino.0, offset, whence, reply);
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let mode = match flags {
            0 => XattrMode::Set,
            libc::XATTR_CREATE => XattrMode::Create,
            libc::XATTR_REPLACE => XattrMode::Replace,
            _ => return reply.error(fuser::Errno::EINVAL),
        };
        let r = self.inodes.setxattr(ino.0, name.as_bytes(), value, mode);
        empty(reply, r);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        xattr_reply(reply, size, self.inodes.getxattr(ino.0, name.as_bytes()));
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        // As local file systems do, `trusted.` names are listed only to the privileged (the
        // kernel leaves this filter to the file system; root stands for CAP_SYS_ADMIN).
        let list = self.inodes.listxattr(ino.0).map(|names| {
            if req.uid() == 0 {
                return names;
            }
            names
                .split_inclusive(|&b| b == 0)
                .filter(|n| !n.starts_with(b"trusted."))
                .flatten()
                .copied()
                .collect()
        });
        xattr_reply(reply, size, list);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.inodes.removexattr(ino.0, name.as_bytes()));
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        empty(reply, self.inodes.stat(ino.0).map(|_| ())); // permissions: the kernel's
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        if self.counts_nothing_open() {
            // ENOSYS: the kernel uses `mknod` and opens without asking (no handle to release).
            return reply.error(fuser::Errno::ENOSYS);
        }
        let name = name.as_bytes();
        let opened = self.make_and_open(req, parent.0, name, mode, umask, flags);
        match opened {
            Ok((ino, s, current)) => {
                if let Some(t) = &self.tenants {
                    t.seen(parent.0, name, ino);
                }
                reply.created(
                    // One lifetime for both here: the attributes' bounds the name's.
                    &self.cache_ttl,
                    &file_attr(ino, &s),
                    Generation(s.generation),
                    self.handle(req, ino, flags),
                    self.open_flags(flags, current),
                )
            }
            Err(e) => reply.error(errno(e)),
        }
    }
}
