//! The store as a FUSE file system, so unmodified programs use it (the `switchyard mount`
//! command).
//!
//! FUSE inode numbers are the store's inode numbers (the root is 1 in both). Every request
//! goes straight to the store's inode API; nothing is buffered here, so the store's strict
//! semantics hold through the mount: a `write` that returned to the program is durable.
//!
//! Page cache, consciously: writes are write-through (the kernel's writeback cache is not
//! enabled), so each `write(2)` reaches the store before it returns. Reads may be served from
//! the page cache (`FOPEN_KEEP_CACHE`): every change to a file goes through this mount, so the
//! cache cannot go stale. A file opened with `O_DIRECT` bypasses the page cache
//! (`FOPEN_DIRECT_IO`). Permissions are checked by the kernel (`default_permissions`).
//!
//! Directory listings are read once at `opendir` and served by index from that snapshot, so
//! `readdir` offsets stay valid while the directory changes underneath.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use switchyard_store::format::{S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
use switchyard_store::{Attr, DirEntry, Errno, Owner, SetAttr, Store};

/// How long the kernel may cache attributes and names: this mount is the only way to change
/// the store, so the kernel's view can only go stale through its own requests.
const TTL: Duration = Duration::from_secs(1);
/// Largest read or write request the kernel sends.
pub const MAX_IO: u32 = 1 << 20;
/// Bit of a file handle that marks an `O_APPEND` open: its writes go to the end, atomically.
const FH_APPEND: u64 = 1 << 63;

/// A store mounted in the background (request workers on their own threads). The store is
/// unmounted cleanly when the mount ends: by [`Mount::unmount`], by dropping this, or from
/// outside (`fusermount3 -u`, after which [`Mount::finished`] turns true).
pub struct Mount {
    session: fuser::BackgroundSession,
}

/// Mounts `store` at `dir` with `workers` request threads (each with its own `/dev/fuse`
/// descriptor), kernel permission checks and this store's name in the mount table.
pub fn mount(store: Store, dir: &Path, workers: usize) -> std::io::Result<Mount> {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("switchyard".into()),
        fuser::MountOption::Subtype("switchyard".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    config.n_threads = Some(workers.max(1));
    config.clone_fd = true;
    let session = fuser::spawn_mount(StoreFs::new(store), dir, &config)?;
    Ok(Mount { session })
}

impl Mount {
    /// Whether the mount has ended (unmounted from outside, or failed).
    pub fn finished(&self) -> bool {
        self.session.guard.is_finished()
    }

    /// Unmounts and waits until the store is unmounted cleanly.
    pub fn unmount(self) -> std::io::Result<()> {
        self.session.umount_and_join()
    }

    /// Waits for a mount that has [`finished`](Mount::finished).
    pub fn join(self) -> std::io::Result<()> {
        self.session.join()
    }
}

/// A directory as `opendir` found it.
struct Listing {
    /// The directory's parent (for "..").
    parent: u64,
    entries: Vec<DirEntry>,
}

/// The permission bits a new inode gets: `mode` less the caller's umask.
fn masked(mode: u32, umask: u32) -> u32 {
    mode & !umask & 0o7777
}

/// The store, served over FUSE.
pub struct StoreFs {
    store: Store,
    /// Directory snapshots by handle, taken at `opendir`.
    dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    next_dir: AtomicU64,
}

fn errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.0)
}

fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos().min(i64::MAX as u128) as i64,
        Err(e) => -(e.duration().as_nanos().min(i64::MAX as u128) as i64),
    }
}

fn kind(mode: u32) -> FileType {
    match mode & S_IFMT {
        S_IFDIR => FileType::Directory,
        S_IFLNK => FileType::Symlink,
        _ => FileType::RegularFile,
    }
}

fn file_attr(ino: u64, a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: a.size,
        blocks: a.size.div_ceil(4096) * 8,
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.ctime),
        kind: kind(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn owner(req: &Request) -> Owner {
    Owner {
        uid: req.uid(),
        gid: req.gid(),
    }
}

/// The handle of an open file: it records `O_APPEND`, whose writes go to the end.
fn handle(flags: i32) -> FileHandle {
    FileHandle(if flags & libc::O_APPEND != 0 {
        FH_APPEND
    } else {
        0
    })
}

fn open_flags(flags: OpenFlags) -> FopenFlags {
    if flags.0 & libc::O_DIRECT != 0 {
        FopenFlags::FOPEN_DIRECT_IO
    } else {
        FopenFlags::FOPEN_KEEP_CACHE
    }
}

impl StoreFs {
    /// Serves `store`.
    pub fn new(store: Store) -> StoreFs {
        StoreFs {
            store,
            dirs: Mutex::new(HashMap::new()),
            next_dir: AtomicU64::new(1),
        }
    }

    fn entry(&self, reply: ReplyEntry, r: Result<(u64, Attr), Errno>) {
        match r {
            Ok((ino, a)) => reply.entry(&TTL, &file_attr(ino, &a), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }
}

fn empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

impl Filesystem for StoreFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Large requests: a 1 MiB write is one request, one commit.
        let _ = config.set_max_write(MAX_IO);
        let _ = config.set_max_readahead(MAX_IO);
        let _ = config.set_time_granularity(Duration::from_nanos(1));
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.entry(reply, self.store.lookup(parent.0, name.as_bytes()));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.store.getattr(ino.0) {
            Ok(a) => reply.attr(&TTL, &file_attr(ino.0, &a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
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
        let s = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: at(atime),
            mtime: at(mtime),
        };
        match self.store.setattr(ino.0, s) {
            Ok(a) => reply.attr(&TTL, &file_attr(ino.0, &a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.store.readlink(ino.0) {
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
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & S_IFMT != S_IFREG {
            // Devices, FIFOs and sockets have no place in the store.
            return reply.error(fuser::Errno::EPERM);
        }
        let mode = masked(mode, umask);
        let r = self
            .store
            .create(parent.0, name.as_bytes(), mode, owner(req));
        self.entry(reply, r);
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
        let mode = masked(mode, umask);
        let r = self
            .store
            .mkdir(parent.0, name.as_bytes(), mode, owner(req));
        self.entry(reply, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.store.unlink(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.store.rmdir(parent.0, name.as_bytes()));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self.store.symlink(
            parent.0,
            link_name.as_bytes(),
            target.as_os_str().as_bytes(),
            owner(req),
        );
        self.entry(reply, r);
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
        if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            match self.store.lookup(newparent.0, newname.as_bytes()) {
                Ok(_) => return reply.error(fuser::Errno::EEXIST),
                Err(e) if e != Errno::ENOENT => return reply.error(errno(e)),
                Err(_) => {}
            }
        } else if !flags.is_empty() {
            // RENAME_EXCHANGE and RENAME_WHITEOUT are not supported.
            return reply.error(fuser::Errno::EINVAL);
        }
        let r = self
            .store
            .rename(parent.0, name.as_bytes(), newparent.0, newname.as_bytes());
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
            .store
            .link(ino.0, newparent.0, newname.as_bytes())
            .map(|a| (ino.0, a));
        self.entry(reply, r);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.store.open(ino.0) {
            Ok(_) => reply.opened(handle(flags.0), open_flags(flags)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        // One buffer per worker thread: a 1 MiB read neither allocates nor zeroes 1 MiB.
        thread_local!(static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) });
        BUF.with_borrow_mut(|buf| {
            if buf.len() < size as usize {
                buf.resize(size as usize, 0);
            }
            let buf = &mut buf[..size as usize];
            match self.store.read(ino.0, offset, buf) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = if fh.0 & FH_APPEND != 0 {
            self.store.append(ino.0, data).map(|_| data.len())
        } else {
            self.store.write(ino.0, offset, data)
        };
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
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        // Every write is durable when it returns: nothing is left to flush.
        empty(reply, self.store.fsync(ino.0));
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
        empty(reply, self.store.release(ino.0));
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.store.fsync(ino.0));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let listing = self.store.getattr(ino.0).and_then(|a| {
            Ok(Listing {
                parent: a.parent,
                entries: self.store.readdir(ino.0)?,
            })
        });
        match listing {
            Ok(list) => {
                let fh = self.next_dir.fetch_add(1, Ordering::Relaxed);
                self.dirs.lock().insert(fh, Arc::new(list));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(list) = self.dirs.lock().get(&fh.0).cloned() else {
            return reply.error(fuser::Errno::EBADF);
        };
        // Offsets: 1 after ".", 2 after "..", 3 + i after entry i.
        let dots = [(ino.0, "."), (list.parent, "..")];
        for (i, &(n, name)) in dots.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(n), i as u64 + 1, FileType::Directory, name) {
                return reply.ok();
            }
        }
        let skip = (offset as usize).saturating_sub(2);
        for (i, e) in list.entries.iter().enumerate().skip(skip) {
            let name = OsStr::from_bytes(&e.name);
            if reply.add(INodeNo(e.ino), i as u64 + 3, kind(e.kind), name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().remove(&fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.store.statfs();
        reply.statfs(
            s.blocks,
            s.free_blocks,
            s.free_blocks,
            s.inodes,
            s.free_inodes,
            s.block_size as u32,
            s.name_max as u32,
            s.block_size as u32,
        );
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // The kernel checks permissions (`default_permissions`); this only checks existence.
        empty(reply, self.store.getattr(ino.0).map(|_| ()));
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
        let mode = masked(mode, umask);
        let made = self
            .store
            .create(parent.0, name.as_bytes(), mode, owner(req))
            .and_then(|(ino, a)| self.store.open(ino).map(|_| (ino, a)));
        match made {
            Ok((ino, a)) => reply.created(
                &TTL,
                &file_attr(ino, &a),
                Generation(0),
                handle(flags),
                open_flags(OpenFlags(flags)),
            ),
            Err(e) => reply.error(errno(e)),
        }
    }
}
