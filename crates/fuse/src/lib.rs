//! The store as a FUSE file system, so unmodified programs use it (the `switchyard mount`
//! command, and `mount --remote` for a store another process serves).
//!
//! One front end, [`InodeFs`], serves any [`Inodes`]: the store in this process, or a served
//! store through its client. FUSE inode numbers are the store's inode numbers (the root is 1
//! in both), held for as long as the kernel knows them. Every request goes straight to the
//! inode API; nothing is buffered here, so the store's semantics hold through the mount: in
//! strict mode a `write` that returned to the program is in the store, and survives what the
//! store's medium says it survives once it returns ([`Store::granularity`]).
//!
//! Syncs, for a store file on a disk (page-cache media), where only a sync reaches the disk:
//! `fsync` and `fdatasync` of a file or a directory (`FUSE_FSYNC`, `FUSE_FSYNCDIR`) call the
//! inodes' fsync, which makes every operation that returned durable. A write of an `O_SYNC`
//! or `O_DSYNC` open (or a `pwritev2` with `RWF_SYNC`/`RWF_DSYNC`) carries that flag in its
//! request and is synced before it is answered (the kernel sends an fsync after a cached one
//! too, but none after a direct one). `close` syncs nothing, as on ext4. `syncfs(2)` and
//! `sync(2)` do not reach the mount: the kernel sends `FUSE_SYNCFS` only to virtiofs (and
//! `fuser` has no call for it); `sync DIR` (an fsync of a directory) does. The store's
//! periodic sync, or its sync before every operation (`--sync always`), covers the rest, and
//! unmounting syncs everything.
//!
//! Page cache, consciously: by default writes are write-through (strict), so each `write(2)`
//! reaches the store before it returns. With [`FuseConfig::writeback`] the kernel's writeback
//! cache gathers writes and hands them to the store when it writes back, at the latest when
//! the file is closed or synced ([`InodeFs`] then ignores `O_APPEND` on handles and leaves
//! `SEEK_DATA`/`SEEK_HOLE` to the kernel, which cannot be wrong about pages it holds dirty);
//! never for a served store, whose files others change. Reads may be served from
//! the page cache (`FOPEN_KEEP_CACHE`) when the open finds the cache current: always for the
//! store in this process (every change goes through this mount), and for a served store when
//! no one changed the file since this mount's previous open of it (close-to-open). A file
//! opened with `O_DIRECT` bypasses the page cache (`FOPEN_DIRECT_IO`). Permissions are
//! checked by the kernel (`default_permissions`).
//!
//! Directory listings are read once per pass, at the first `readdir` from offset 0 of a
//! handle, and served by index from that snapshot, so `readdir` offsets stay valid while the
//! directory changes underneath; where nothing but
//! the mount changes the store, the kernel keeps the listing it read until the mount changes
//! the directory, and takes it with each entry's attributes (`readdirplus`).
//!
//! What any file system mounted here tells the kernel ([`Replies`], [`configure`],
//! [`open_flags`]) and how it is mounted ([`mount_filesystem`]) are public, so that the
//! benchmarks' passthrough file system (`switchyard_bench::passthrough`, the FUSE floor that
//! `bench mount` compares the store's mount with) is served exactly as the store is.

#![warn(missing_docs)]
mod config;
mod inode_fs;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FopenFlags, KernelConfig, OpenFlags};
use switchyard_store::{Inodes, Store};

pub use inode_fs::InodeFs;

pub use config::FuseConfig;

/// What the file systems tell the kernel, from `[fuse]`.
#[derive(Debug, Clone, Copy)]
pub struct Replies {
    /// How long the kernel may cache attributes and names: a mount is the only way to
    /// change the files it serves, so the kernel's view can only go stale through its own
    /// requests.
    pub ttl: Duration,
    /// Largest read or write request the kernel sends.
    pub max_io: u32,
    /// Whether the kernel's writeback cache is on ([`FuseConfig::writeback`]).
    pub writeback: bool,
}

impl Replies {
    /// What `[fuse]` (`c`) says to tell the kernel.
    pub fn of(c: &FuseConfig) -> Replies {
        Replies {
            ttl: Duration::from_millis(c.attr_ttl_ms),
            max_io: c.max_io,
            writeback: c.writeback == Some(true),
        }
    }
}

/// A file system mounted in the background (request workers on their own threads). The
/// file system is shut down cleanly when the mount ends: by [`Mount::unmount`], by dropping
/// this, or from outside (`fusermount3 -u`, after which [`Mount::finished`] turns true).
pub struct Mount {
    session: fuser::BackgroundSession,
}

/// Who may use a mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
    /// Only the user who mounted it (FUSE's default).
    #[default]
    Owner,
    /// Every user (`allow_other`), each checked by the kernel against the files' owners,
    /// groups and modes (`default_permissions`). For a mount by a user other than root,
    /// `/etc/fuse.conf` must hold `user_allow_other`.
    AllUsers,
}

/// Mounts `store` at `dir` with `config`'s request threads (each with its own `/dev/fuse`
/// descriptor), request size and cache lifetime, kernel permission checks, this store's name
/// in the mount table, and access for `access`. Callers are classed into the tenants of the
/// store's mover by its rules ([`switchyard_mover::qos::Classes`]).
pub fn mount(
    store: Store,
    dir: &Path,
    config: &FuseConfig,
    access: Access,
) -> std::io::Result<Mount> {
    let classes = store.mover().classes().clone();
    mount_filesystem(
        InodeFs::new(std::sync::Arc::new(store), config).classing(&classes),
        "switchyard",
        dir,
        config.effective_workers(),
        access,
        false,
    )
}

/// Mounts `inodes` (the store in this process, or a remote store through its client) at
/// `dir`, as [`mount`] does; `read_only` mounts it read-only (`ro`). The caller may keep a
/// clone of `inodes` (to read its counters while mounted).
pub fn mount_inodes<I: Inodes>(
    inodes: std::sync::Arc<I>,
    dir: &Path,
    config: &FuseConfig,
    access: Access,
    read_only: bool,
) -> std::io::Result<Mount> {
    mount_filesystem(
        InodeFs::new(inodes, config),
        "switchyard",
        dir,
        config.effective_workers(),
        access,
        read_only,
    )
}

/// Mounts the file system `fs` at `dir` in the background with `workers` request threads
/// (each with its own `/dev/fuse` descriptor), `name` as its name and type in the mount table,
/// kernel permission checks, no devices or set-user-ID files, access for `access`, and
/// read-only if `read_only`: the options every mount here gets, the store's and the
/// benchmarks' passthrough alike.
pub fn mount_filesystem<F: fuser::Filesystem + Send + Sync + 'static>(
    fs: F,
    name: &str,
    dir: &Path,
    workers: usize,
    access: Access,
    read_only: bool,
) -> std::io::Result<Mount> {
    let mut config = fuser::Config::default();
    if access == Access::AllUsers {
        config.acl = fuser::SessionACL::All;
    }
    config.mount_options = vec![
        fuser::MountOption::FSName(name.into()),
        fuser::MountOption::Subtype(name.into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    if read_only {
        config.mount_options.push(fuser::MountOption::RO);
    }
    config.n_threads = Some(workers.max(1));
    config.clone_fd = true;
    let session = fuser::spawn_mount(fs, dir, &config).map_err(explained)?;
    Ok(Mount { session })
}

/// A mount's failure, with the reason where it is `/dev/fuse` itself: FUSE opens it before
/// anything else, and where this user may not (mode 0600; most distributions make it 0666,
/// and mount through the setuid `fusermount3`), a bare "Permission denied" names nothing.
fn explained(e: std::io::Error) -> std::io::Error {
    const DEV: &std::ffi::CStr = c"/dev/fuse";
    // SAFETY: access(2) reads a NUL-terminated path and has no other preconditions.
    let open_to_us = unsafe { libc::access(DEV.as_ptr(), libc::R_OK | libc::W_OK) } == 0;
    if e.kind() != std::io::ErrorKind::PermissionDenied || open_to_us {
        return e;
    }
    std::io::Error::new(
        e.kind(),
        format!(
            "{e}: /dev/fuse is not open to this user (run as root, or make it mode 0666, as \
             most distributions do, so that FUSE mounts through fusermount3)"
        ),
    )
}

impl Mount {
    /// Whether the mount has ended (unmounted from outside, or failed).
    pub fn finished(&self) -> bool {
        self.session.guard.is_finished()
    }

    /// Unmounts and waits until the file system is shut down cleanly.
    pub fn unmount(self) -> std::io::Result<()> {
        self.session.umount_and_join()
    }

    /// Waits for a mount that has [`finished`](Mount::finished).
    pub fn join(self) -> std::io::Result<()> {
        self.session.join()
    }
}

/// What every file system mounted here asks of the kernel at `init`: large requests (a 1 MiB
/// write is one request), nanosecond timestamps, lookups and listings of one directory in
/// parallel (the file systems here lock per inode, not per mount), and the writeback cache
/// where `replies` asks for it. Whether the kernel granted the writeback cache.
pub fn configure(config: &mut KernelConfig, replies: Replies) -> bool {
    let _ = config.set_max_write(replies.max_io);
    let _ = config.set_max_readahead(replies.max_io);
    let _ = config.set_time_granularity(Duration::from_nanos(1));
    let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
    replies.writeback
        && config
            .add_capabilities(fuser::InitFlags::FUSE_WRITEBACK_CACHE)
            .is_ok()
}

/// The page-cache policy of an open file: `O_DIRECT` bypasses the cache; every other open
/// keeps what the cache holds if it is `current` (no one but this mount changed the file
/// since), and drops it otherwise.
pub fn open_flags(flags: OpenFlags, current: bool) -> FopenFlags {
    if flags.0 & libc::O_DIRECT != 0 {
        FopenFlags::FOPEN_DIRECT_IO
    } else if current {
        FopenFlags::FOPEN_KEEP_CACHE
    } else {
        FopenFlags::empty()
    }
}

/// Nanoseconds since the epoch (negative before it) as a time.
pub fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

/// The reply buffer of a read: one per worker thread, so a 1 MiB read neither allocates nor
/// zeroes 1 MiB. `f` fills the first `size` bytes and says how many it filled.
pub fn with_read_buffer<R>(size: u32, f: impl FnOnce(&mut [u8]) -> R) -> R {
    thread_local!(static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) });
    BUF.with_borrow_mut(|buf| {
        if buf.len() < size as usize {
            buf.resize(size as usize, 0);
        }
        f(&mut buf[..size as usize])
    })
}
