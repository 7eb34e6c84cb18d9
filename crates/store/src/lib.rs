//! The slow-memory file store: a NOVA-style layout (per-inode metadata logs with 8-byte tail
//! commits, copy-on-write data blocks, a small undo journal for operations over several inodes)
//! on a media [`Region`](switchyard_media::Region), with every data copy going through the
//! [`Mover`](switchyard_mover::Mover) and every store, flush and fence through the media
//! kernels.
//!
//! Semantics are strict: an operation that returned is atomic and survives a crash of the
//! owner. On cache-line media (persistent memory) it is durable when it returns; on page
//! media (a store file through the page cache on a disk) once [`Store::fsync`],
//! [`Store::sync`] or the periodic sync returns ([`SyncPolicy`]), and a power cut at any
//! instant leaves an image that recovers to the last completed sync. The format, with byte
//! offsets and commit points, is in [`mod@format`] and `docs/format.md`.
//!
//! - [`Store`]: the inode-level API (what FUSE and the async layer use);
//! - [`Fs`]: paths and file descriptors on top (the POSIX file model);
//! - [`recovery::scan`] and [`fsck`]: reading an image back and checking every invariant;
//! - `crash` (feature `testing`): the crash-state harness, with the faults it must catch.

#![warn(missing_docs)]
pub mod acl;
pub mod aio;
pub mod alloc;
pub mod changes;
pub mod config;
#[cfg(feature = "testing")]
pub mod crash;
pub mod error;
pub mod fallocate;
pub mod files;
pub mod format;
pub mod fs;
pub mod fsck;
mod inflight;
pub mod inode;
pub mod inodes;
mod pm;
pub mod recovery;
pub mod reserve;
mod store;
mod sync;
mod table;
pub mod xattr;

pub use aio::{IoBuf, ReadFuture, WriteFuture, WriteOrder};
pub use config::{StoreConfig, SyncMode};
pub use error::{Corruption, Errno, Error, MountError, Object, Op};
pub use fallocate::Falloc;
pub use files::Files;
pub use format::Attr;
pub use fs::{Fd, Fs, OpenFlags, Whence};
pub use inodes::{Inodes, RecordLock, Rename, Stat};
pub use store::{
    DirEntry, Extents, Owner, PreparedWrite, Run, Seek, SetAttr, StatFs, Store, SyncPolicy, Target,
    MAX_FILE_SIZE,
};
pub use xattr::XattrMode;
