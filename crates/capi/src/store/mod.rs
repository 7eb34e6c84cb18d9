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
use switchyard_store::Attr;
use switchyard_store::{DirEntry, Errno, Fd, Files, Fs, MountError, Owner, Store, SyncPolicy};

use crate::error::{status, text, Failure};
use crate::handle::{handle, Shell};

mod descriptors;
mod paths;

pub use descriptors::{
    sy_close, sy_fstat, sy_fsync, sy_ftruncate, sy_lseek, sy_lstat, sy_open, sy_pread, sy_pwrite,
    sy_read, sy_stat, sy_statfs, sy_sync, sy_write,
};
pub use paths::{
    sy_closedir, sy_link, sy_mkdir, sy_opendir, sy_readdir, sy_readlink, sy_rename, sy_rmdir,
    sy_symlink, sy_truncate, sy_unlink,
};

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
        let mover =
            Mover::start(&cfg.mover).map_err(|e| Failure::new(libc::EINVAL, e.to_string()))?;
        let region = Region::open(path, MIN_REGION, cfg.mover.persist())
            .map_err(|e| mount_failure(e.into()))?;
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
        let mover =
            Mover::start(&cfg.mover).map_err(|e| Failure::new(libc::EINVAL, e.to_string()))?;
        let region = Region::create(path, size, cfg.mover.persist())
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
fn sync_policy(c: &switchyard_store::StoreConfig) -> SyncPolicy {
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
) -> Result<(&'a str, switchyard_config::Config), Failure> {
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
    let cfg = switchyard_config::Config::load_with_profile(config.as_deref(), None, false)
        .map_err(|e| Failure::new(libc::EINVAL, e.to_string()))?;
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

// Each module versions the symbols it defines: `.symver` names a symbol of its own object.
versioned!(
    sy_store_open,
    sy_store_create,
    sy_store_connect,
    sy_store_close,
);
