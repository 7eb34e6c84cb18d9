//! Paths and file descriptors over [`Store`]: the POSIX file model for Rust programs.
//!
//! Paths are absolute (`/a/b`) or relative to the root; `.` and `..` work; symlinks are
//! followed in every component but the last, and in the last where POSIX follows them
//! (open, stat, truncate, chmod), at most 40 times (ELOOP). Permission bits and owners are
//! recorded and reported; enforcing them is the front end's job (FUSE mounts with
//! `default_permissions`, so the kernel checks them).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use switchyard_mover::qos;

use crate::error::Errno;
use crate::format::{Attr, ROOT, S_IFDIR, S_IFLNK, S_IFMT};
use crate::store::{DirEntry, Owner, SetAttr, StatFs, Store, MAX_FILE_SIZE};

/// A file descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fd(pub u32);

/// How to open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenFlags {
    /// Reads allowed.
    pub read: bool,
    /// Writes allowed.
    pub write: bool,
    /// Create if missing.
    pub create: bool,
    /// With `create`: fail with EEXIST if it exists.
    pub exclusive: bool,
    /// Truncate to 0 on open.
    pub truncate: bool,
    /// Every write goes to the end.
    pub append: bool,
}

impl OpenFlags {
    /// Read only.
    pub const READ: OpenFlags = OpenFlags {
        read: true,
        write: false,
        create: false,
        exclusive: false,
        truncate: false,
        append: false,
    };
    /// Read-write, create, truncate (as `fopen("w+")`).
    pub const CREATE: OpenFlags = OpenFlags {
        read: true,
        write: true,
        create: true,
        exclusive: false,
        truncate: true,
        append: false,
    };
}

/// `lseek` origins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whence {
    /// From the start.
    Set,
    /// From the current offset.
    Cur,
    /// From the end.
    End,
}

pub(crate) struct Open {
    pub(crate) ino: u64,
    pub(crate) flags: OpenFlags,
    pub(crate) offset: Arc<Mutex<u64>>,
    /// The tenant its copies carry (module `switchyard_mover::qos`; 0: the calling
    /// thread's).
    tenant: AtomicU16,
}

impl Open {
    /// The tenant this descriptor's copies carry (0: the calling thread's).
    pub(crate) fn tenant(&self) -> u16 {
        self.tenant.load(Ordering::Relaxed)
    }
}

/// What a descriptor call does with the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

/// A store with paths and file descriptors.
pub struct Fs {
    store: Store,
    owner: Owner,
    fds: Mutex<BTreeMap<u32, Arc<Open>>>,
}

const SYMLOOP_MAX: u32 = 40;

/// The names of `path`'s components, in order (empty for the root; `ENOENT` for an empty
/// path): what every path walk over a store steps through.
pub fn components(path: &str) -> Result<Vec<&[u8]>, Errno> {
    if path.is_empty() {
        return Err(Errno::ENOENT);
    }
    Ok(path
        .split('/')
        .filter(|c| !c.is_empty())
        .map(str::as_bytes)
        .collect())
}
const OPEN_MAX: usize = 1 << 20;

impl Fs {
    /// Wraps a mounted store; new files are owned by the calling process's ids.
    pub fn new(store: Store) -> Fs {
        Fs {
            store,
            owner: Owner::current(),
            fds: Mutex::new(BTreeMap::new()),
        }
    }

    /// The inode-level store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Closes every descriptor and unmounts cleanly.
    pub fn unmount(self) -> Result<(), Errno> {
        self.into_store()?.unmount()
    }

    /// Closes every descriptor and hands back the store (to unmount it, or take its region
    /// back with [`Store::into_region`]).
    pub fn into_store(self) -> Result<Store, Errno> {
        let fds: Vec<u32> = self.fds.lock().keys().copied().collect();
        for fd in fds {
            self.close(Fd(fd))?;
        }
        Ok(self.store)
    }

    /// Resolves `path` to (parent directory, last name). The last name is `None` for the root.
    fn parent_of(&self, path: &str, depth: &mut u32) -> Result<(u64, Option<Vec<u8>>), Errno> {
        let comps = components(path)?;
        let Some((last, dirs)) = comps.split_last() else {
            return Ok((ROOT, None));
        };
        let mut dir = ROOT;
        for c in dirs {
            dir = self.step(dir, c, depth)?;
            if self.store.getattr(dir)?.kind() != S_IFDIR {
                return Err(Errno::ENOTDIR);
            }
        }
        Ok((dir, Some(last.to_vec())))
    }

    /// One component from `dir`, following a symlink.
    fn step(&self, dir: u64, name: &[u8], depth: &mut u32) -> Result<u64, Errno> {
        let (ino, attr) = self.store.lookup(dir, name)?;
        if attr.kind() == S_IFLNK {
            return self.follow(dir, ino, depth);
        }
        Ok(ino)
    }

    fn follow(&self, dir: u64, link: u64, depth: &mut u32) -> Result<u64, Errno> {
        *depth += 1;
        if *depth > SYMLOOP_MAX {
            return Err(Errno::ELOOP);
        }
        let target = self.store.readlink(link)?;
        let target = String::from_utf8(target).map_err(|_| Errno::EINVAL)?;
        let start = if target.starts_with('/') { ROOT } else { dir };
        let mut cur = start;
        for c in components(&target)? {
            if self.store.getattr(cur)?.kind() != S_IFDIR {
                return Err(Errno::ENOTDIR);
            }
            cur = self.step(cur, c, depth)?;
        }
        Ok(cur)
    }

    /// Resolves a whole path; `follow` decides for a symlink in the last component.
    fn resolve(&self, path: &str, follow: bool) -> Result<u64, Errno> {
        let mut depth = 0;
        let (dir, last) = self.parent_of(path, &mut depth)?;
        let Some(last) = last else { return Ok(ROOT) };
        let (ino, attr) = self.store.lookup(dir, &last)?;
        if follow && attr.kind() == S_IFLNK {
            return self.follow(dir, ino, &mut depth);
        }
        Ok(ino)
    }

    fn parent_and_name(&self, path: &str) -> Result<(u64, Vec<u8>), Errno> {
        let (dir, last) = self.parent_of(path, &mut 0)?;
        Ok((dir, last.ok_or(Errno::EEXIST)?))
    }

    fn open_file(&self, fd: Fd) -> Result<Arc<Open>, Errno> {
        self.fds.lock().get(&fd.0).cloned().ok_or(Errno::EBADF)
    }

    /// The open file behind `fd` if it was opened for `access` (else EBADF) and `off`, for
    /// the positional calls, is within the largest file (else EINVAL). The synchronous and
    /// asynchronous calls check descriptors here alike.
    pub(crate) fn open_for(
        &self,
        fd: Fd,
        access: Access,
        off: Option<u64>,
    ) -> Result<Arc<Open>, Errno> {
        let f = self.open_file(fd)?;
        let allowed = match access {
            Access::Read => f.flags.read,
            Access::Write => f.flags.write,
        };
        if !allowed {
            return Err(Errno::EBADF);
        }
        if off.is_some_and(|o| o > MAX_FILE_SIZE) {
            return Err(Errno::EINVAL);
        }
        Ok(f)
    }

    // ---- descriptors --------------------------------------------------------------------

    /// Opens (or creates) a file.
    pub fn open(&self, path: &str, flags: OpenFlags, mode: u32) -> Result<Fd, Errno> {
        let ino = match self.resolve(path, true) {
            Ok(ino) => {
                if flags.create && flags.exclusive {
                    return Err(Errno::EEXIST);
                }
                ino
            }
            Err(Errno::ENOENT) if flags.create => {
                let (dir, name) = self.parent_and_name(path)?;
                match self.store.create(dir, &name, mode, self.owner) {
                    Ok((ino, _)) => ino,
                    Err(e) if e.errno == Errno::EEXIST && !flags.exclusive => {
                        self.store.lookup(dir, &name)?.0
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e),
        };
        let attr = self.store.getattr(ino)?;
        if attr.kind() == S_IFDIR && (flags.write || flags.truncate) {
            return Err(Errno::EISDIR);
        }
        if flags.truncate && flags.write && attr.size > 0 {
            self.store.setattr(
                ino,
                SetAttr {
                    size: Some(0),
                    ..SetAttr::default()
                },
            )?;
        }
        let mut fds = self.fds.lock();
        if fds.len() >= OPEN_MAX {
            return Err(Errno::EMFILE);
        }
        let n = (0u32..)
            .find(|n| !fds.contains_key(n))
            .expect("fewer than 2^32 open");
        self.store.open(ino)?;
        let tenant = (self.store.mover().classes()).of(self.owner.uid, Some(path.as_bytes()));
        fds.insert(
            n,
            Arc::new(Open {
                ino,
                flags,
                offset: Arc::new(Mutex::new(0)),
                tenant: AtomicU16::new(tenant),
            }),
        );
        Ok(Fd(n))
    }

    /// Makes `fd`'s copies carry `tenant` (1-based into `qos.tenants`; 0: the calling
    /// thread's, [`qos::enter`]), in place of the one `open` found by the configuration's
    /// rules (this process's uid and the path as opened, [`qos::Classes`]).
    pub fn set_tenant(&self, fd: Fd, tenant: u16) -> Result<(), Errno> {
        self.open_file(fd)?.tenant.store(tenant, Ordering::Relaxed);
        Ok(())
    }

    /// The tenant `fd`'s copies carry (0: the calling thread's).
    pub fn tenant(&self, fd: Fd) -> Result<u16, Errno> {
        Ok(self.open_file(fd)?.tenant())
    }

    /// Closes a descriptor.
    pub fn close(&self, fd: Fd) -> Result<(), Errno> {
        let f = self.fds.lock().remove(&fd.0).ok_or(Errno::EBADF)?;
        self.store.release(f.ino).map_err(Errno::from)
    }

    /// Reads at the descriptor's offset and advances it.
    pub fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize, Errno> {
        let f = self.open_for(fd, Access::Read, None)?;
        let _tenant = qos::enter(f.tenant());
        let mut off = f.offset.lock();
        let n = self.store.read(f.ino, *off, buf)?;
        *off += n as u64;
        Ok(n)
    }

    /// Reads at `off` without moving the descriptor's offset.
    pub fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize, Errno> {
        let f = self.open_for(fd, Access::Read, Some(off))?;
        let _tenant = qos::enter(f.tenant());
        self.store.read(f.ino, off, buf).map_err(Errno::from)
    }

    /// Writes at the descriptor's offset (or the end, with `append`) and advances it.
    pub fn write(&self, fd: Fd, data: &[u8]) -> Result<usize, Errno> {
        let f = self.open_for(fd, Access::Write, None)?;
        let _tenant = qos::enter(f.tenant());
        let mut off = f.offset.lock();
        if f.flags.append {
            let at = self.store.append(f.ino, data)?;
            *off = at + data.len() as u64;
        } else {
            let n = self.store.write(f.ino, *off, data)?;
            *off += n as u64;
            return Ok(n);
        }
        Ok(data.len())
    }

    /// Writes at `off` without moving the descriptor's offset (`append` still appends, as on
    /// Linux).
    pub fn pwrite(&self, fd: Fd, data: &[u8], off: u64) -> Result<usize, Errno> {
        let f = self.open_for(fd, Access::Write, Some(off))?;
        let _tenant = qos::enter(f.tenant());
        if f.flags.append {
            self.store.append(f.ino, data)?;
            return Ok(data.len());
        }
        self.store.write(f.ino, off, data).map_err(Errno::from)
    }

    /// Appends `data` at the end; returns the offset it landed at.
    pub fn append(&self, fd: Fd, data: &[u8]) -> Result<u64, Errno> {
        let f = self.open_for(fd, Access::Write, None)?;
        let _tenant = qos::enter(f.tenant());
        self.store.append(f.ino, data).map_err(Errno::from)
    }

    /// Moves the descriptor's offset.
    pub fn lseek(&self, fd: Fd, off: i64, whence: Whence) -> Result<u64, Errno> {
        let f = self.open_file(fd)?;
        let mut cur = f.offset.lock();
        let base = match whence {
            Whence::Set => 0,
            Whence::Cur => *cur as i64,
            Whence::End => self.store.getattr(f.ino)?.size as i64,
        };
        let new = base
            .checked_add(off)
            .filter(|&n| n >= 0)
            .ok_or(Errno::EINVAL)?;
        *cur = new as u64;
        Ok(*cur)
    }

    /// Truncates or extends an open file.
    pub fn ftruncate(&self, fd: Fd, size: u64) -> Result<(), Errno> {
        let f = self.open_file(fd)?;
        if !f.flags.write {
            return Err(Errno::EINVAL);
        }
        self.set_size(f.ino, size)
    }

    fn set_size(&self, ino: u64, size: u64) -> Result<(), Errno> {
        if size > MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        self.store
            .setattr(
                ino,
                SetAttr {
                    size: Some(size),
                    ..SetAttr::default()
                },
            )
            .map(|_| ())
            .map_err(Errno::from)
    }

    /// Makes the open file durable ([`Store::fsync`]: on page media, every operation that
    /// returned).
    pub fn fsync(&self, fd: Fd) -> Result<(), Errno> {
        let f = self.open_file(fd)?;
        self.store.fsync(f.ino).map_err(Errno::from)
    }

    /// Makes every operation that returned durable, whatever file it changed (`syncfs`;
    /// [`Store::sync`]).
    pub fn sync(&self) -> Result<(), Errno> {
        self.store.sync().map_err(Errno::from)
    }

    /// Attributes of an open file.
    pub fn fstat(&self, fd: Fd) -> Result<Attr, Errno> {
        let f = self.open_file(fd)?;
        self.store.getattr(f.ino).map_err(Errno::from)
    }

    // ---- paths --------------------------------------------------------------------------

    /// Attributes, following a final symlink.
    pub fn stat(&self, path: &str) -> Result<Attr, Errno> {
        self.store
            .getattr(self.resolve(path, true)?)
            .map_err(Errno::from)
    }

    /// Attributes of the path itself.
    pub fn lstat(&self, path: &str) -> Result<Attr, Errno> {
        self.store
            .getattr(self.resolve(path, false)?)
            .map_err(Errno::from)
    }

    /// Inode number of the path itself.
    pub fn ino(&self, path: &str) -> Result<u64, Errno> {
        self.resolve(path, false)
    }

    /// Truncates or extends a file by path.
    pub fn truncate(&self, path: &str, size: u64) -> Result<(), Errno> {
        let ino = self.resolve(path, true)?;
        self.set_size(ino, size)
    }

    /// Creates a directory.
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<(), Errno> {
        let (dir, name) = self.parent_and_name(path)?;
        self.store
            .mkdir(dir, &name, mode, self.owner)
            .map(|_| ())
            .map_err(Errno::from)
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, path: &str) -> Result<(), Errno> {
        let (dir, name) = self.parent_of(path, &mut 0)?;
        self.store
            .rmdir(dir, &name.ok_or(Errno::EBUSY)?)
            .map_err(Errno::from)
    }

    /// Removes a name (not a directory).
    pub fn unlink(&self, path: &str) -> Result<(), Errno> {
        let (dir, name) = self.parent_of(path, &mut 0)?;
        self.store
            .unlink(dir, &name.ok_or(Errno::EISDIR)?)
            .map_err(Errno::from)
    }

    /// Renames, atomically replacing the target.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), Errno> {
        let (fd, fname) = self.parent_of(from, &mut 0)?;
        let (td, tname) = self.parent_of(to, &mut 0)?;
        let (fname, tname) = (fname.ok_or(Errno::EBUSY)?, tname.ok_or(Errno::EBUSY)?);
        self.store
            .rename(fd, &fname, td, &tname)
            .map_err(Errno::from)
    }

    /// Exchanges what `a` and `b` name, atomically (`RENAME_EXCHANGE`).
    pub fn exchange(&self, a: &str, b: &str) -> Result<(), Errno> {
        let (ad, aname) = self.parent_of(a, &mut 0)?;
        let (bd, bname) = self.parent_of(b, &mut 0)?;
        let (aname, bname) = (aname.ok_or(Errno::EBUSY)?, bname.ok_or(Errno::EBUSY)?);
        self.store
            .exchange(ad, &aname, bd, &bname)
            .map_err(Errno::from)
    }

    /// Adds a hard link `to` for the existing `from`.
    pub fn link(&self, from: &str, to: &str) -> Result<(), Errno> {
        let ino = self.resolve(from, false)?;
        let (dir, name) = self.parent_and_name(to)?;
        self.store
            .link(ino, dir, &name)
            .map(|_| ())
            .map_err(Errno::from)
    }

    /// Creates a symlink at `path` pointing to `target`.
    pub fn symlink(&self, target: &str, path: &str) -> Result<(), Errno> {
        let (dir, name) = self.parent_and_name(path)?;
        self.store
            .symlink(dir, &name, target.as_bytes(), self.owner)
            .map(|_| ())
            .map_err(Errno::from)
    }

    /// Creates a FIFO, socket or device node at `path` (`mode` holds its type bits; `rdev`
    /// is a device's number).
    pub fn mknod(&self, path: &str, mode: u32, rdev: u64) -> Result<(), Errno> {
        let (dir, name) = self.parent_and_name(path)?;
        self.store
            .mknod(dir, &name, mode, rdev, self.owner)
            .map(|_| ())
            .map_err(Errno::from)
    }

    /// The target of a symlink.
    pub fn readlink(&self, path: &str) -> Result<Vec<u8>, Errno> {
        self.store
            .readlink(self.resolve(path, false)?)
            .map_err(Errno::from)
    }

    /// Entries of a directory, sorted by name (without "." and "..").
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>, Errno> {
        self.store
            .readdir(self.resolve(path, true)?)
            .map_err(Errno::from)
    }

    /// Changes permission bits.
    pub fn chmod(&self, path: &str, mode: u32) -> Result<(), Errno> {
        let ino = self.resolve(path, true)?;
        self.store
            .setattr(
                ino,
                SetAttr {
                    mode: Some(mode & !S_IFMT),
                    ..SetAttr::default()
                },
            )
            .map(|_| ())
            .map_err(Errno::from)
    }

    /// Changes owner and group.
    pub fn chown(&self, path: &str, uid: Option<u32>, gid: Option<u32>) -> Result<(), Errno> {
        let ino = self.resolve(path, true)?;
        self.store
            .setattr(
                ino,
                SetAttr {
                    uid,
                    gid,
                    ..SetAttr::default()
                },
            )
            .map(|_| ())
            .map_err(Errno::from)
    }

    /// Sets access and modification times (ns since the epoch).
    pub fn utimens(&self, path: &str, atime: Option<i64>, mtime: Option<i64>) -> Result<(), Errno> {
        let ino = self.resolve(path, true)?;
        self.store
            .setattr(
                ino,
                SetAttr {
                    atime,
                    mtime,
                    ..SetAttr::default()
                },
            )
            .map(|_| ())
            .map_err(Errno::from)
    }

    /// Space and inode counts.
    pub fn statfs(&self) -> StatFs {
        self.store.statfs()
    }

    /// Reads a whole file.
    pub fn read_all(&self, path: &str) -> Result<Vec<u8>, Errno> {
        let ino = self.resolve(path, true)?;
        let size = self.store.getattr(ino)?.size;
        let mut buf = vec![0u8; usize::try_from(size).map_err(|_| Errno::EFBIG)?];
        let n = self.store.read(ino, 0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }
}
