//! [`Passthrough`]: a directory of another file system served over FUSE, doing as little as
//! a FUSE file system can — the floor against which the store's mount is measured.
//!
//! It forwards each request to the backing file system with one system call where one
//! suffices (`pread`, `pwrite`, `ftruncate`, …). Inode numbers are the backing ones shifted
//! by two (FUSE's root is 1), and each known inode keeps the path it was found under. It is
//! made for benchmarks and tests, not as a general file system: hard links keep their first
//! path, and the mount serves the files as whoever runs it.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::RwLock;

use switchyard_fuse::{
    configure, mount_filesystem, open_flags, time, with_read_buffer, Access, FuseConfig, Mount,
    Replies,
};

/// A directory as `opendir` found it: each entry's inode number, type and name.
type Listing = Vec<(u64, FileType, std::ffi::OsString)>;

/// A backing directory served over FUSE.
pub struct Passthrough {
    /// What the kernel is told (`[fuse]`).
    replies: Replies,
    root: PathBuf,
    root_ino: u64,
    /// Backing path of every inode the kernel has been told about.
    paths: RwLock<HashMap<u64, PathBuf>>,
    /// Open files and directory snapshots by handle.
    files: RwLock<HashMap<u64, Arc<File>>>,
    dirs: RwLock<HashMap<u64, Arc<Listing>>>,
    next_fh: AtomicU64,
}

/// Mounts the directory `backing` at `dir` as a passthrough file system, with the same
/// options, request sizes, workers and page-cache policy as the store's mount
/// ([`switchyard_fuse::mount`]).
pub fn mount_passthrough(
    backing: PathBuf,
    dir: &Path,
    config: &FuseConfig,
) -> std::io::Result<Mount> {
    mount_filesystem(
        Passthrough::new(backing, config)?,
        "passthrough",
        dir,
        config.effective_workers(),
        Access::Owner,
        false,
    )
}

/// The permission bits a new inode gets: `mode` less the caller's umask.
fn masked(mode: u32, umask: u32) -> u32 {
    mode & !umask & 0o7777
}

fn io_errno(e: std::io::Error) -> fuser::Errno {
    fuser::Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn file_type(m: &std::fs::Metadata) -> FileType {
    let t = m.file_type();
    if t.is_dir() {
        FileType::Directory
    } else if t.is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    }
}

impl Passthrough {
    /// Serves the directory `root`.
    pub fn new(root: PathBuf, config: &FuseConfig) -> std::io::Result<Passthrough> {
        let root_ino = std::fs::metadata(&root)?.ino();
        let paths = RwLock::new(HashMap::from([(1, root.clone())]));
        Ok(Passthrough {
            replies: Replies::of(config),
            root,
            root_ino,
            paths,
            files: RwLock::new(HashMap::new()),
            dirs: RwLock::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        })
    }

    /// The FUSE inode number of a backing inode.
    fn ino(&self, backing: u64) -> u64 {
        if backing == self.root_ino {
            1
        } else {
            backing + 2
        }
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, fuser::Errno> {
        self.paths
            .read()
            .get(&ino.0)
            .cloned()
            .ok_or(fuser::Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, fuser::Errno> {
        Ok(self.path(parent)?.join(name))
    }

    fn attr(&self, m: &std::fs::Metadata) -> FileAttr {
        FileAttr {
            ino: INodeNo(self.ino(m.ino())),
            size: m.size(),
            blocks: m.blocks(),
            atime: time(m.atime() * 1_000_000_000 + m.atime_nsec()),
            mtime: time(m.mtime() * 1_000_000_000 + m.mtime_nsec()),
            ctime: time(m.ctime() * 1_000_000_000 + m.ctime_nsec()),
            crtime: time(m.ctime() * 1_000_000_000 + m.ctime_nsec()),
            kind: file_type(m),
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            blksize: m.blksize() as u32,
            flags: 0,
        }
    }

    /// Stats `path`, records it as its inode's path and returns the inode's attributes.
    fn remember(&self, path: PathBuf) -> std::io::Result<FileAttr> {
        let m = std::fs::symlink_metadata(&path)?;
        let a = self.attr(&m);
        self.paths.write().entry(a.ino.0).or_insert(path);
        Ok(a)
    }

    /// Removes `name` from `parent` with `how` and forgets its path.
    fn remove(
        &self,
        parent: INodeNo,
        name: &OsStr,
        how: fn(&Path) -> std::io::Result<()>,
    ) -> Result<(), fuser::Errno> {
        let p = self.child(parent, name)?;
        let ino = self.ino(std::fs::symlink_metadata(&p).map_err(io_errno)?.ino());
        how(&p).map_err(io_errno)?;
        self.paths.write().remove(&ino);
        Ok(())
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<File>, fuser::Errno> {
        self.files
            .read()
            .get(&fh.0)
            .cloned()
            .ok_or(fuser::Errno::EBADF)
    }

    fn keep(&self, f: File) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files.write().insert(fh, Arc::new(f));
        FileHandle(fh)
    }
}

fn reply_entry(reply: ReplyEntry, ttl: Duration, r: Result<FileAttr, fuser::Errno>) {
    match r {
        Ok(a) => reply.entry(&ttl, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn reply_empty(reply: ReplyEmpty, r: Result<(), fuser::Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn system_time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Filesystem for Passthrough {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        configure(config, self.replies);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self
            .child(parent, name)
            .and_then(|p| self.remember(p).map_err(io_errno));
        reply_entry(reply, self.replies.ttl, r);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let m = match fh {
            Some(fh) => self.file(fh).and_then(|f| f.metadata().map_err(io_errno)),
            None => self
                .path(ino)
                .and_then(|p| std::fs::symlink_metadata(p).map_err(io_errno)),
        };
        match m {
            Ok(m) => reply.attr(&self.replies.ttl, &self.attr(&m)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
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
        let r = self.path(ino).and_then(|p| {
            let apply = || -> std::io::Result<std::fs::Metadata> {
                if let Some(mode) = mode {
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode & 0o7777))?;
                }
                if size.is_some() || atime.is_some() || mtime.is_some() {
                    let f = OpenOptions::new().write(size.is_some()).open(&p)?;
                    if let Some(size) = size {
                        f.set_len(size)?;
                    }
                    let mut times = std::fs::FileTimes::new();
                    if let Some(t) = atime {
                        times = times.set_accessed(system_time(t));
                    }
                    if let Some(t) = mtime {
                        times = times.set_modified(system_time(t));
                    }
                    f.set_times(times)?;
                }
                std::fs::symlink_metadata(&p)
            };
            apply().map_err(io_errno)
        });
        match r {
            Ok(m) => reply.attr(&self.replies.ttl, &self.attr(&m)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.child(parent, name).and_then(|p| {
            std::fs::DirBuilder::new()
                .mode(masked(mode, umask))
                .create(&p)
                .and_then(|()| self.remember(p))
                .map_err(io_errno)
        });
        reply_entry(reply, self.replies.ttl, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(
            reply,
            self.remove(parent, name, |p| std::fs::remove_file(p)),
        );
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.remove(parent, name, |p| std::fs::remove_dir(p)));
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
        if !flags.is_empty() {
            return reply.error(fuser::Errno::EINVAL);
        }
        let r = (|| {
            let from = self.child(parent, name)?;
            let to = self.child(newparent, newname)?;
            std::fs::rename(&from, &to).map_err(io_errno)?;
            // Every remembered path at or under the old name moves with it.
            let mut paths = self.paths.write();
            for p in paths.values_mut() {
                if let Ok(rest) = p.strip_prefix(&from) {
                    *p = to.join(rest);
                }
            }
            Ok(())
        })();
        reply_empty(reply, r);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = self
            .path(ino)
            .and_then(|p| open(&p, flags.0).map_err(io_errno));
        match r {
            Ok(f) => reply.opened(self.keep(f), open_flags(flags, true)),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let f = match self.file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        with_read_buffer(size, |buf| match f.read_at(buf, offset) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(io_errno(e)),
        })
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        // A file opened with O_APPEND writes at its end whatever the offset.
        let r = self
            .file(fh)
            .and_then(|f| f.write_at(data, offset).map_err(io_errno));
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.files.write().remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.file(fh).and_then(|f| {
            if datasync {
                f.sync_data()
            } else {
                f.sync_all()
            }
            .map_err(io_errno)
        });
        reply_empty(reply, r);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let list = self.path(ino).and_then(|p| {
            let mut out = Vec::new();
            for e in std::fs::read_dir(&p).map_err(io_errno)? {
                let e = e.map_err(io_errno)?;
                let m = e.metadata().map_err(io_errno)?;
                out.push((self.ino(m.ino()), file_type(&m), e.file_name()));
            }
            Ok(out)
        });
        match list {
            Ok(list) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.dirs.write().insert(fh, Arc::new(list));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
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
        let Some(list) = self.dirs.read().get(&fh.0).cloned() else {
            return reply.error(fuser::Errno::EBADF);
        };
        // Offsets: "." is 1, ".." is 2, entry i is 3 + i. The parent's number is not
        // looked up: the kernel replaces ".." itself.
        let dots = [
            (ino.0, FileType::Directory, OsStr::new(".")),
            (ino.0, FileType::Directory, OsStr::new("..")),
        ];
        let all = dots
            .into_iter()
            .chain(list.iter().map(|(i, k, n)| (*i, *k, n.as_os_str())));
        for (i, (child, kind, name)) in all.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), i as u64 + 1, kind, name) {
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
        self.dirs.write().remove(&fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match nix::sys::statvfs::statvfs(&self.root) {
            Ok(s) => reply.statfs(
                s.blocks(),
                s.blocks_free(),
                s.blocks_available(),
                s.files(),
                s.files_free(),
                s.block_size() as u32,
                s.name_max() as u32,
                s.fragment_size() as u32,
            ),
            Err(e) => reply.error(fuser::Errno::from_i32(e as i32)),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.child(parent, name).and_then(|p| {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .mode(masked(mode, umask))
                .custom_flags(flags & (libc::O_EXCL | libc::O_APPEND | libc::O_TRUNC))
                .open(&p)
                .map_err(io_errno)?;
            let a = self.remember(p).map_err(io_errno)?;
            Ok((a, f))
        });
        match r {
            Ok((a, f)) => reply.created(
                &self.replies.ttl,
                &a,
                Generation(0),
                self.keep(f),
                open_flags(OpenFlags(flags), true),
            ),
            Err(e) => reply.error(e),
        }
    }
}

/// Opens a backing file with the access mode and `O_APPEND`/`O_TRUNC` of a FUSE open (the
/// page cache of the backing file system is its own business: `O_DIRECT` is not passed on).
fn open(path: &Path, flags: i32) -> std::io::Result<File> {
    let acc = flags & libc::O_ACCMODE;
    OpenOptions::new()
        .read(acc == libc::O_RDONLY || acc == libc::O_RDWR)
        .write(acc == libc::O_WRONLY || acc == libc::O_RDWR)
        .custom_flags(flags & (libc::O_APPEND | libc::O_TRUNC))
        .open(path)
}
