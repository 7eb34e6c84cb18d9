//! The store from C: one opened in this process ([`sy_store_open`], its single owner) or one
//! another process serves ([`sy_store_connect`]), by paths and descriptors as POSIX offers
//! them. Every call is synchronous: a write that returned is in the store, atomic, and
//! durable as the store's medium makes it: at once on persistent memory; on a store file on
//! a disk file system, against a crash of the process at once and against a power cut once
//! [`sy_fsync`], [`sy_sync`] or the store's periodic sync (`store.sync` in the
//! configuration) returns, or at once for a descriptor opened `O_SYNC` or `O_DSYNC`.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use parking_lot::{MappedRwLockReadGuard, Mutex};

use switchyard_media::{MediaError, Region, MIN_REGION};
use switchyard_mover::Mover;
use switchyard_remote::{Client, Key};
use switchyard_store::{
    Attr, DirEntry, Errno, Fd, Files, Fs, MountError, OpenFlags, Owner, Store, SyncPolicy, Whence,
    S_IFDIR, S_IFLNK,
};

use crate::error::{guard, status, text, Failure};
use crate::handle::{handle, Shell};

/// A store: in this process, or served by another. Thread-safe. Closed
/// ([`sy_store_close`]), it stays a tombstone of a few bytes, so a late call fails with
/// `-EBADF` instead of touching freed memory.
#[allow(non_camel_case_types)]
pub struct sy_store {
    pub(crate) files: Shell<Backend>,
    /// Asynchronous requests not yet reaped (module `aio`), with their user data.
    pub(crate) queue: Mutex<Vec<(crate::aio::Request, u64)>>,
    /// Descriptors opened with `O_SYNC` or `O_DSYNC`: their writes return synced.
    synced: Mutex<std::collections::HashSet<u32>>,
}

/// What a store handle reaches: the store in this process, or a served one.
pub(crate) enum Backend {
    Local(Box<Fs>),
    Remote(Client),
}

impl Backend {
    fn files(&self) -> &(dyn Files + 'static) {
        match self {
            Backend::Local(fs) => &**fs,
            Backend::Remote(c) => c,
        }
    }
}

/// A file's attributes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct sy_attr {
    /// Type and permission bits (`S_IFREG | 0644`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Hard links.
    pub nlink: u32,
    /// Size in bytes.
    pub size: u64,
    /// Access time, ns since the epoch.
    pub atime_ns: i64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Status change time, ns since the epoch.
    pub ctime_ns: i64,
    /// Device number of a device node (0 otherwise).
    pub rdev: u64,
}

impl From<Attr> for sy_attr {
    fn from(a: Attr) -> sy_attr {
        sy_attr {
            mode: a.mode,
            uid: a.uid,
            gid: a.gid,
            nlink: a.nlink,
            size: a.size,
            atime_ns: a.atime,
            mtime_ns: a.mtime,
            ctime_ns: a.ctime,
            rdev: a.rdev(),
        }
    }
}

/// Space and inode counts of a store.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct sy_space {
    /// Block size, bytes.
    pub block_size: u64,
    /// Blocks of data space.
    pub blocks: u64,
    /// Free blocks.
    pub free_blocks: u64,
    /// Free blocks an unprivileged caller may take.
    pub available_blocks: u64,
    /// Inode slots.
    pub inodes: u64,
    /// Free inode slots.
    pub free_inodes: u64,
    /// Longest name, bytes.
    pub name_max: u64,
}

/// One directory entry.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct sy_dirent {
    /// Inode number.
    pub ino: u64,
    /// Type bits (`S_IFREG`, `S_IFDIR`, ...).
    pub kind: u32,
    /// The name, NUL-terminated (at most 255 bytes).
    pub name: [c_char; 256],
}

/// A directory as [`sy_opendir`] found it (a tombstone once closed, as a store).
#[allow(non_camel_case_types)]
pub struct sy_dir {
    listing: Mutex<Option<(Vec<DirEntry>, usize)>>,
}

/// The open store behind `s` (held open for the guard's life): `-EFAULT` for null, `-EBADF`
/// once closed.
///
/// # Safety
/// `s` is null or a handle from [`sy_store_open`], [`sy_store_create`] or
/// [`sy_store_connect`].
unsafe fn store<'a>(s: *const sy_store) -> Result<MappedRwLockReadGuard<'a, dyn Files>, Failure> {
    // SAFETY: forwarded from this function's contract.
    let open = unsafe { handle(s, "store") }?.files.open("store")?;
    Ok(MappedRwLockReadGuard::map(open, Backend::files))
}

/// A descriptor argument: `-EBADF` when negative.
fn descriptor(fd: i32) -> Result<Fd, Failure> {
    u32::try_from(fd)
        .map(Fd)
        .map_err(|_| Failure::new(libc::EBADF, format!("descriptor {fd}")))
}

/// A buffer argument of `len` bytes: `-EFAULT` for null with `len > 0`.
fn buffer<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::new(libc::EFAULT, "a null buffer"));
    }
    // SAFETY: not null; every caller's contract promises `len` readable bytes at `p` for
    // the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(p.cast(), len) })
}

/// A writable buffer argument of `len` bytes, as [`buffer`].
fn buffer_mut<'a>(p: *mut c_void, len: usize) -> Result<&'a mut [u8], Failure> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Failure::new(libc::EFAULT, "a null buffer"));
    }
    // SAFETY: not null; every caller's contract promises `len` writable bytes at `p` that
    // nothing else touches during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast(), len) })
}

/// A bad buffer's failure, unless `fd` is not open: then `-EBADF`, which read(2) and
/// write(2) report first.
fn bad_fd_first(f: &dyn Files, fd: Fd, e: Failure) -> Failure {
    match f.fstat(fd) {
        Err(bad) if bad == Errno::EBADF => bad.into(),
        _ => e,
    }
}

/// An offset or size argument: `-EINVAL` when negative.
fn offset(v: i64) -> Result<u64, Failure> {
    u64::try_from(v).map_err(|_| Failure::new(libc::EINVAL, format!("{v}: negative")))
}

/// Stores `v` at `out`: `-EFAULT` for null.
fn put<T>(out: *mut T, v: T) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::new(libc::EFAULT, "a null result pointer"));
    }
    // SAFETY: not null; every caller's contract promises `out` writable.
    unsafe { out.write(v) };
    Ok(())
}

/// Why a local store did not open, as an errno and message.
fn mount_failure(e: MountError) -> Failure {
    let errno = match &e {
        MountError::Media(MediaError::NotFound { .. }) => libc::ENOENT,
        MountError::Media(MediaError::Busy { .. }) => libc::EBUSY,
        MountError::Media(MediaError::Exposed { .. }) => libc::EACCES,
        MountError::Media(MediaError::TooSmall { .. }) | MountError::Corrupt { .. } => {
            libc::EUCLEAN
        }
        MountError::Media(_) => libc::EIO,
    };
    Failure::new(errno, e.to_string())
}

/// Opens the store file at `store_path` in this process, which becomes its single owner
/// (the file is locked: another process gets `-EBUSY` and the owner's name in the message),
/// with the mover the configuration file at `config_path` describes (null: the defaults, with
/// `./switchyard.profile.toml` if it exists). Recovery runs if the store was not unmounted
/// cleanly. 0 or a negative errno.
///
/// # Safety
/// The paths are null or NUL-terminated strings; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn sy_store_open(
    store_path: *const c_char,
    config_path: *const c_char,
    out: *mut *mut sy_store,
) -> i32 {
    status(|| {
        // SAFETY: the caller's promises, forwarded.
        let (path, cfg) = unsafe { local(store_path, config_path, out) }?;
        let mover = Mover::start(&cfg).map_err(|e| Failure::new(libc::EINVAL, e.to_string()))?;
        let region =
            Region::open(path, MIN_REGION, cfg.persist()).map_err(|e| mount_failure(e.into()))?;
        let store = Store::mount(region, Arc::new(mover)).map_err(mount_failure)?;
        store
            .set_sync_policy(sync_policy(&cfg.store))
            .map_err(Errno::from)?;
        opened(out, Backend::Local(Box::new(Fs::new(store))))
    })
}

/// Formats a new store file of `size` bytes at `store_path` (which must not exist:
/// `-EEXIST`), owned by this process's user, and opens it as [`sy_store_open`] does. 0 or a
/// negative errno.
///
/// # Safety
/// As [`sy_store_open`].
#[no_mangle]
pub unsafe extern "C" fn sy_store_create(
    store_path: *const c_char,
    size: u64,
    config_path: *const c_char,
    out: *mut *mut sy_store,
) -> i32 {
    status(|| {
        // SAFETY: the caller's promises, forwarded.
        let (path, cfg) = unsafe { local(store_path, config_path, out) }?;
        if std::path::Path::new(path).exists() {
            return Err(Failure::new(libc::EEXIST, format!("{path} exists")));
        }
        let mover = Mover::start(&cfg).map_err(|e| Failure::new(libc::EINVAL, e.to_string()))?;
        let region = Region::create(path, size, cfg.persist())
            .map_err(|e| Failure::new(libc::EINVAL, e.to_string()))?;
        let store =
            Store::format(region, Arc::new(mover), Owner::current()).map_err(mount_failure)?;
        store
            .set_sync_policy(sync_policy(&cfg.store))
            .map_err(Errno::from)?;
        opened(out, Backend::Local(Box::new(Fs::new(store))))
    })
}

/// When a local store on a disk file writes what returned to its disk: `store.sync` and
/// `store.sync_interval_ms` of the configuration.
fn sync_policy(c: &switchyard_mover::config::StoreConfig) -> SyncPolicy {
    c.sync_every()
        .map_or(SyncPolicy::Always, SyncPolicy::Interval)
}

/// The store path and configuration of a local open, after checking `out`.
///
/// # Safety
/// `store_path` and `config_path` are null or NUL-terminated strings valid for `'a`.
unsafe fn local<'a>(
    store_path: *const c_char,
    config_path: *const c_char,
    out: *mut *mut sy_store,
) -> Result<(&'a str, switchyard_mover::Config), Failure> {
    if out.is_null() {
        return Err(Failure::new(libc::EFAULT, "out is null"));
    }
    // SAFETY: forwarded from this function's contract.
    let path = unsafe { text(store_path, "store_path") }?;
    let config = if config_path.is_null() {
        None
    } else {
        // SAFETY: as above.
        Some(std::path::PathBuf::from(unsafe {
            text(config_path, "config_path")
        }?))
    };
    let cfg = switchyard_options::config_with_profile(config.as_deref(), None, false)
        .map_err(|e| Failure::new(libc::EINVAL, format!("{e:#}")))?;
    Ok((path, cfg))
}

/// Hands a new store handle to the caller through `out` (checked not null).
fn opened(out: *mut *mut sy_store, files: Backend) -> Result<(), Failure> {
    let s = sy_store {
        files: Shell::new(files),
        queue: Mutex::new(Vec::new()),
        synced: Mutex::default(),
    };
    put(out, Box::into_raw(Box::new(s)))
}

/// Connects to the store a `switchyard serve` serves at `addr` (`HOST:PORT`), proving the
/// key in the file `key_path`; `writable` asks for write access (refused by a read-only
/// server). Reads move data one-sided where the transport can. 0 or a negative errno.
///
/// # Safety
/// The strings are NUL-terminated; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn sy_store_connect(
    addr: *const c_char,
    key_path: *const c_char,
    writable: i32,
    out: *mut *mut sy_store,
) -> i32 {
    status(|| {
        if out.is_null() {
            return Err(Failure::new(libc::EFAULT, "out is null"));
        }
        // SAFETY: the caller promises NUL-terminated strings.
        let (addr, key) = unsafe { (text(addr, "addr")?, text(key_path, "key_path")?) };
        let addr = std::net::ToSocketAddrs::to_socket_addrs(addr)
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| Failure::new(libc::EINVAL, format!("{addr:?}: not HOST:PORT")))?;
        let key = Key::load(std::path::Path::new(key))
            .map_err(|e| Failure::new(libc::EACCES, e.to_string()))?;
        let client = Client::connect(addr, &key, writable != 0)
            .map_err(|e| Failure::new(libc::ECONNREFUSED, e.to_string()))?;
        opened(out, Backend::Remote(client))
    })
}

/// Closes the store after the calls in progress on it: asynchronous requests not yet reaped
/// are finished and dropped, every descriptor is closed, a local store unmounted cleanly (its
/// lock released), a remote one disconnected. Later calls on the
/// handle fail with `-EBADF`. 0 or a negative errno (`-EBADF`: closed already; the store is
/// closed either way).
///
/// # Safety
/// `s` is null or a store handle.
#[no_mangle]
pub unsafe extern "C" fn sy_store_close(s: *const sy_store) -> i32 {
    status(|| {
        // SAFETY: the caller's promise, forwarded.
        let s = unsafe { handle(s, "store") }?;
        let open = s.files.close("store")?;
        // Queued requests borrow the store (no new one can be queued now): they go first,
        // each waiting for its copies.
        s.queue.lock().clear();
        match open {
            Backend::Local(fs) => fs.unmount().map_err(Failure::from),
            Backend::Remote(c) => {
                drop(c);
                Ok(())
            }
        }
    })
}

/// The store's open flags for the `O_*` bits of `flags`, or `-EINVAL`/`-EOPNOTSUPP`.
fn open_flags(flags: i32) -> Result<OpenFlags, Failure> {
    let (read, write) = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => (true, false),
        libc::O_WRONLY => (false, true),
        libc::O_RDWR => (true, true),
        _ => return Err(Failure::new(libc::EINVAL, "open: bad access mode")),
    };
    if flags & (libc::O_TMPFILE | libc::O_PATH) != 0 {
        return Err(Failure::new(
            libc::EOPNOTSUPP,
            "open: O_TMPFILE and O_PATH are not supported",
        ));
    }
    Ok(OpenFlags {
        read,
        write,
        create: flags & libc::O_CREAT != 0,
        exclusive: flags & libc::O_EXCL != 0,
        truncate: flags & libc::O_TRUNC != 0,
        append: flags & libc::O_APPEND != 0,
    })
}

/// Opens `path` with `flags` (`O_RDONLY`, `O_WRONLY` or `O_RDWR`, and `O_CREAT`, `O_EXCL`,
/// `O_TRUNC`, `O_APPEND`, `O_DIRECTORY`, `O_NOFOLLOW`; `O_SYNC` and `O_DSYNC`: every
/// `sy_write` and `sy_pwrite` of the descriptor returns synced, as after `sy_fsync`;
/// `O_CLOEXEC`, `O_DIRECT` and `O_NOATIME` change nothing) and `mode` for a new file: a
/// descriptor (≥ 0) or a negative errno.
///
/// # Safety
/// `s` is a live store or null; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sy_open(
    s: *const sy_store,
    path: *const c_char,
    flags: i32,
    mode: u32,
) -> i32 {
    guard(
        || {
            // SAFETY: the caller's promises, forwarded.
            let (f, path) = unsafe { (store(s)?, text(path, "path")?) };
            let how = open_flags(flags)?;
            if flags & (libc::O_DIRECTORY | libc::O_NOFOLLOW) != 0 {
                match f.lstat(path) {
                    Ok(a) if flags & libc::O_NOFOLLOW != 0 && a.kind() == S_IFLNK => {
                        return Err(Errno(libc::ELOOP).into())
                    }
                    Ok(_) if flags & libc::O_DIRECTORY != 0 && f.stat(path)?.kind() != S_IFDIR => {
                        return Err(Errno::ENOTDIR.into())
                    }
                    _ => {}
                }
            }
            let fd = f.open(path, how, mode & 0o7777)?;
            if flags & (libc::O_SYNC | libc::O_DSYNC) != 0 {
                // SAFETY: the caller's promise, forwarded (`store` above checked it).
                unsafe { handle(s, "store") }?.synced.lock().insert(fd.0);
            }
            Ok(fd)
        },
        |fd| i64::from(fd.0),
    ) as i32
}

/// Closes a descriptor: 0 or a negative errno.
///
/// # Safety
/// `s` is a live store or null.
#[no_mangle]
pub unsafe extern "C" fn sy_close(s: *const sy_store, fd: i32) -> i32 {
    status(|| {
        let fd = descriptor(fd)?;
        // SAFETY: the caller's promise, forwarded.
        unsafe { store(s) }?.close(fd)?;
        // SAFETY: as above.
        unsafe { handle(s, "store") }?.synced.lock().remove(&fd.0);
        Ok(())
    })
}

/// Syncs after a write of `fd` when it was opened `O_SYNC` or `O_DSYNC`.
///
/// # Safety
/// `s` is a live store or null.
unsafe fn synced(s: *const sy_store, f: &dyn Files, fd: Fd) -> Result<(), Failure> {
    // SAFETY: the caller's promise, forwarded.
    if unsafe { handle(s, "store") }?.synced.lock().contains(&fd.0) {
        f.fsync(fd)?;
    }
    Ok(())
}

/// Reads up to `len` bytes at the descriptor's offset into `buf` and advances it: the bytes
/// read (0 at the end) or a negative errno.
///
/// # Safety
/// `s` is a live store or null; `buf` writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn sy_read(s: *const sy_store, fd: i32, buf: *mut c_void, len: usize) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promise, forwarded.
            let (f, fd) = (unsafe { store(s) }?, descriptor(fd)?);
            let b = buffer_mut(buf, len).map_err(|e| bad_fd_first(&*f, fd, e))?;
            Ok(f.read(fd, b)?)
        },
        |n| n as i64,
    )
}

/// Reads up to `len` bytes at `off` without moving the descriptor's offset.
///
/// # Safety
/// As [`sy_read`].
#[no_mangle]
pub unsafe extern "C" fn sy_pread(
    s: *const sy_store,
    fd: i32,
    buf: *mut c_void,
    len: usize,
    off: i64,
) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promise, forwarded.
            let (f, fd) = (unsafe { store(s) }?, descriptor(fd)?);
            let off = offset(off).map_err(|e| bad_fd_first(&*f, fd, e))?;
            let b = buffer_mut(buf, len).map_err(|e| bad_fd_first(&*f, fd, e))?;
            Ok(f.pread(fd, b, off)?)
        },
        |n| n as i64,
    )
}

/// Writes `len` bytes from `buf` at the descriptor's offset (or the end, for `O_APPEND`) and
/// advances it: the bytes written (all of them) or a negative errno. Atomic when it returns,
/// and durable as [`sy_fsync`] says (synced, for an `O_SYNC` or `O_DSYNC` descriptor).
///
/// # Safety
/// `s` is a live store or null; `buf` readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn sy_write(
    s: *const sy_store,
    fd: i32,
    buf: *const c_void,
    len: usize,
) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promise, forwarded.
            let (f, fd) = (unsafe { store(s) }?, descriptor(fd)?);
            let b = buffer(buf, len).map_err(|e| bad_fd_first(&*f, fd, e))?;
            let n = f.write(fd, b)?;
            // SAFETY: the caller's promise, forwarded.
            unsafe { synced(s, &*f, fd) }?;
            Ok(n)
        },
        |n| n as i64,
    )
}

/// Writes `len` bytes at `off` without moving the descriptor's offset (`O_APPEND` still
/// appends, as on Linux).
///
/// # Safety
/// As [`sy_write`].
#[no_mangle]
pub unsafe extern "C" fn sy_pwrite(
    s: *const sy_store,
    fd: i32,
    buf: *const c_void,
    len: usize,
    off: i64,
) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promise, forwarded.
            let (f, fd) = (unsafe { store(s) }?, descriptor(fd)?);
            let off = offset(off).map_err(|e| bad_fd_first(&*f, fd, e))?;
            let b = buffer(buf, len).map_err(|e| bad_fd_first(&*f, fd, e))?;
            let n = f.pwrite(fd, b, off)?;
            // SAFETY: the caller's promise, forwarded.
            unsafe { synced(s, &*f, fd) }?;
            Ok(n)
        },
        |n| n as i64,
    )
}

/// Moves the descriptor's offset (`whence`: `SEEK_SET`, `SEEK_CUR`, `SEEK_END`): the new
/// offset or a negative errno.
///
/// # Safety
/// `s` is a live store or null.
#[no_mangle]
pub unsafe extern "C" fn sy_lseek(s: *const sy_store, fd: i32, off: i64, whence: i32) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promise, forwarded.
            let (f, fd) = (unsafe { store(s) }?, descriptor(fd)?);
            let w = match whence {
                libc::SEEK_SET => Whence::Set,
                libc::SEEK_CUR => Whence::Cur,
                libc::SEEK_END => Whence::End,
                _ => return Err(bad_fd_first(&*f, fd, Errno::EINVAL.into())),
            };
            Ok(f.lseek(fd, off, w)?)
        },
        |n| n as i64,
    )
}

/// Makes the open file durable. On a store file on a disk file system (page-cache media) a
/// write survives a crash of the process when it returns, and a power cut once this (or the
/// store's periodic sync, or `sy_sync`) returns: it syncs every write that returned. On
/// persistent memory every write is durable when it returns, and this only checks the
/// descriptor. 0 or a negative errno.
///
/// # Safety
/// `s` is a live store or null.
#[no_mangle]
pub unsafe extern "C" fn sy_fsync(s: *const sy_store, fd: i32) -> i32 {
    // SAFETY: the caller's promise, forwarded.
    status(|| Ok(unsafe { store(s) }?.fsync(descriptor(fd)?)?))
}

/// Makes every change to the store that returned durable, whatever file it touched (as
/// `syncfs(2)`): for a served store, the server syncs it. 0 or a negative errno.
///
/// # Safety
/// `s` is a live store or null.
#[no_mangle]
pub unsafe extern "C" fn sy_sync(s: *const sy_store) -> i32 {
    // SAFETY: the caller's promise, forwarded.
    status(|| Ok(unsafe { store(s) }?.sync()?))
}

/// Sets an open file's size.
///
/// # Safety
/// `s` is a live store or null.
#[no_mangle]
pub unsafe extern "C" fn sy_ftruncate(s: *const sy_store, fd: i32, size: i64) -> i32 {
    status(|| {
        // SAFETY: the caller's promise, forwarded.
        let (f, fd) = (unsafe { store(s) }?, descriptor(fd)?);
        let size = offset(size).map_err(|e| bad_fd_first(&*f, fd, e))?;
        Ok(f.ftruncate(fd, size)?)
    })
}

/// Attributes of an open file into `*out`.
///
/// # Safety
/// `s` is a live store or null; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn sy_fstat(s: *const sy_store, fd: i32, out: *mut sy_attr) -> i32 {
    // SAFETY: the caller's promise, forwarded.
    status(|| put(out, unsafe { store(s) }?.fstat(descriptor(fd)?)?.into()))
}

/// Attributes of `path` (following a symlink) into `*out`.
///
/// # Safety
/// `s` is a live store or null; `path` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn sy_stat(
    s: *const sy_store,
    path: *const c_char,
    out: *mut sy_attr,
) -> i32 {
    status(|| {
        // SAFETY: the caller's promises, forwarded.
        let (f, path) = unsafe { (store(s)?, text(path, "path")?) };
        put(out, f.stat(path)?.into())
    })
}

/// Attributes of `path` (a symlink itself) into `*out`.
///
/// # Safety
/// As [`sy_stat`].
#[no_mangle]
pub unsafe extern "C" fn sy_lstat(
    s: *const sy_store,
    path: *const c_char,
    out: *mut sy_attr,
) -> i32 {
    status(|| {
        // SAFETY: the caller's promises, forwarded.
        let (f, path) = unsafe { (store(s)?, text(path, "path")?) };
        put(out, f.lstat(path)?.into())
    })
}

/// Space and inode counts into `*out`.
///
/// # Safety
/// `s` is a live store or null; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn sy_statfs(s: *const sy_store, out: *mut sy_space) -> i32 {
    status(|| {
        // SAFETY: the caller's promise, forwarded.
        let st = unsafe { store(s) }?.statfs()?;
        put(
            out,
            sy_space {
                block_size: st.block_size,
                blocks: st.blocks,
                free_blocks: st.free_blocks,
                available_blocks: st.available_blocks,
                inodes: st.inodes,
                free_inodes: st.free_inodes,
                name_max: st.name_max,
            },
        )
    })
}

/// Runs `op` on `s` with the path `p`: 0 or a negative errno.
///
/// # Safety
/// `s` is a live store or null; `p` a NUL-terminated string.
unsafe fn on_path(
    s: *const sy_store,
    p: *const c_char,
    op: impl FnOnce(&dyn Files, &str) -> Result<(), Errno>,
) -> i32 {
    status(|| {
        // SAFETY: forwarded from this function's contract.
        let (f, p) = unsafe { (store(s)?, text(p, "path")?) };
        Ok(op(&*f, p)?)
    })
}

/// Runs `op` on `s` with the paths `a` and `b`: 0 or a negative errno.
///
/// # Safety
/// `s` is a live store or null; `a` and `b` NUL-terminated strings.
unsafe fn on_paths(
    s: *const sy_store,
    a: *const c_char,
    b: *const c_char,
    op: impl FnOnce(&dyn Files, &str, &str) -> Result<(), Errno>,
) -> i32 {
    status(|| {
        // SAFETY: forwarded from this function's contract.
        let (f, a, b) = unsafe { (store(s)?, text(a, "path")?, text(b, "path")?) };
        Ok(op(&*f, a, b)?)
    })
}

/// Makes a directory with `mode`.
///
/// # Safety
/// `s` is a live store or null; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sy_mkdir(s: *const sy_store, path: *const c_char, mode: u32) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_path(s, path, |f, p| f.mkdir(p, mode & 0o7777)) }
}

/// Removes an empty directory.
///
/// # Safety
/// As [`sy_mkdir`].
#[no_mangle]
pub unsafe extern "C" fn sy_rmdir(s: *const sy_store, path: *const c_char) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_path(s, path, |f, p| f.rmdir(p)) }
}

/// Removes a name (the file goes when its last name and descriptor do).
///
/// # Safety
/// As [`sy_mkdir`].
#[no_mangle]
pub unsafe extern "C" fn sy_unlink(s: *const sy_store, path: *const c_char) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_path(s, path, |f, p| f.unlink(p)) }
}

/// Sets the size of the file at `path`.
///
/// # Safety
/// As [`sy_mkdir`].
#[no_mangle]
pub unsafe extern "C" fn sy_truncate(s: *const sy_store, path: *const c_char, size: i64) -> i32 {
    let Ok(size) = u64::try_from(size) else {
        return -libc::EINVAL;
    };
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_path(s, path, |f, p| f.truncate(p, size)) }
}

/// Renames `from` to `to`, atomically replacing `to` if it exists.
///
/// # Safety
/// `s` is a live store or null; the paths NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn sy_rename(
    s: *const sy_store,
    from: *const c_char,
    to: *const c_char,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_paths(s, from, to, |f, a, b| f.rename(a, b)) }
}

/// Makes `to` a new name of the file `from`.
///
/// # Safety
/// As [`sy_rename`].
#[no_mangle]
pub unsafe extern "C" fn sy_link(
    s: *const sy_store,
    from: *const c_char,
    to: *const c_char,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_paths(s, from, to, |f, a, b| f.link(a, b)) }
}

/// Makes `path` a symlink to `target`.
///
/// # Safety
/// As [`sy_rename`].
#[no_mangle]
pub unsafe extern "C" fn sy_symlink(
    s: *const sy_store,
    target: *const c_char,
    path: *const c_char,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    unsafe { on_paths(s, target, path, |f, t, p| f.symlink(t, p)) }
}

/// Reads the target of the symlink `path` into `buf` (not NUL-terminated, cut to `len`, as
/// readlink(2)): the bytes stored, or a negative errno.
///
/// # Safety
/// `s` is a live store or null; `path` a NUL-terminated string; `buf` writable for `len`.
#[no_mangle]
pub unsafe extern "C" fn sy_readlink(
    s: *const sy_store,
    path: *const c_char,
    buf: *mut c_char,
    len: usize,
) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promises, forwarded.
            let (f, p) = unsafe { (store(s)?, text(path, "path")?) };
            let target = f.readlink(p)?;
            let out = buffer_mut(buf.cast(), len)?;
            let n = target.len().min(out.len());
            out[..n].copy_from_slice(&target[..n]);
            Ok(n)
        },
        |n| n as i64,
    )
}

/// Opens the directory `path` for [`sy_readdir`]: its entries as they are now (without `.`
/// and `..`, sorted by name). 0 or a negative errno.
///
/// # Safety
/// `s` is a live store or null; `path` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn sy_opendir(
    s: *const sy_store,
    path: *const c_char,
    out: *mut *mut sy_dir,
) -> i32 {
    status(|| {
        // SAFETY: the caller's promises, forwarded.
        let (f, p) = unsafe { (store(s)?, text(path, "path")?) };
        if out.is_null() {
            return Err(Failure::new(libc::EFAULT, "out is null"));
        }
        let entries = f.readdir(p)?;
        let d = sy_dir {
            listing: Mutex::new(Some((entries, 0))),
        };
        put(out, Box::into_raw(Box::new(d)))
    })
}

/// The next entry of `dir` into `*out`: 1, 0 at the end, or a negative errno (`-EBADF` for
/// a closed directory).
///
/// # Safety
/// `dir` is null or from [`sy_opendir`]; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn sy_readdir(dir: *const sy_dir, out: *mut sy_dirent) -> i32 {
    guard(
        || {
            // SAFETY: the caller promises a handle from sy_opendir (never freed) or null.
            let d = unsafe { dir.as_ref() }
                .ok_or_else(|| Failure::new(libc::EFAULT, "a null directory"))?;
            let mut listing = d.listing.lock();
            let (entries, next) = listing
                .as_mut()
                .ok_or_else(|| Failure::new(libc::EBADF, "a closed directory"))?;
            let Some(e) = entries.get(*next) else {
                return Ok(0);
            };
            let mut name = [0 as c_char; 256];
            for (to, &b) in name.iter_mut().zip(e.name.iter().take(255)) {
                *to = b as c_char;
            }
            put(
                out,
                sy_dirent {
                    ino: e.ino,
                    kind: e.kind,
                    name,
                },
            )?;
            *next += 1;
            Ok(1)
        },
        |n| n,
    ) as i32
}

/// Closes a directory from [`sy_opendir`], dropping its listing (a tombstone of a few bytes
/// stays, as for a store): 0, or `-EBADF` if closed already.
///
/// # Safety
/// `dir` is null or from [`sy_opendir`].
#[no_mangle]
pub unsafe extern "C" fn sy_closedir(dir: *const sy_dir) -> i32 {
    status(|| {
        // SAFETY: the caller promises a handle from sy_opendir (never freed) or null.
        let d = unsafe { dir.as_ref() }
            .ok_or_else(|| Failure::new(libc::EFAULT, "a null directory"))?;
        let listing = d.listing.lock().take();
        listing
            .map(drop)
            .ok_or_else(|| Failure::new(libc::EBADF, "the directory was closed already"))
    })
}

versioned!(
    sy_store_open,
    sy_store_create,
    sy_store_connect,
    sy_store_close,
    sy_open,
    sy_close,
    sy_read,
    sy_pread,
    sy_write,
    sy_pwrite,
    sy_lseek,
    sy_fsync,
    sy_sync,
    sy_ftruncate,
    sy_fstat,
    sy_stat,
    sy_lstat,
    sy_statfs,
    sy_mkdir,
    sy_rmdir,
    sy_unlink,
    sy_truncate,
    sy_rename,
    sy_link,
    sy_symlink,
    sy_readlink,
    sy_opendir,
    sy_readdir,
    sy_closedir,
);
