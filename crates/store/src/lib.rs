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
//! - [`fsck`]: reading an image back (recovery's scan) and checking every invariant;
//! - `crash` (feature `testing`): the crash-state harness, with the faults it must catch.

#![warn(missing_docs)]
pub mod acl;
mod aio;
mod alloc;
mod changes;
mod commits;
mod config;
#[cfg(feature = "testing")]
pub mod crash;
mod error;
mod fallocate;
mod files;
pub mod format;
mod fs;
pub mod fsck;
mod inflight;
mod inode;
mod inodes;
mod pm;
mod recovery;
mod reserve;
mod store;
mod sync;
mod table;
mod xattr;

pub use aio::{IoBuf, ReadFuture, WriteFuture, WriteOrder};
pub use alloc::Grace;
pub use changes::Changes;
pub use commits::SyncPolicy;
pub use config::{StoreConfig, SyncMode};
pub use error::{Corruption, Errno, Error, MountError, Object, Op};
pub use fallocate::Falloc;
pub use files::Files;
pub use format::{
    Attr, BLOCK, ROOT, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK,
};
pub use fs::{components, Fd, Fs, OpenFlags, Whence};
pub use inodes::{Inodes, RecordLock, Rename, Stat};
pub use recovery::{Present, RELEASE_EVERY};
pub use store::{
    DirEntry, Extents, Owner, PreparedWrite, Run, Seek, SetAttr, StatFs, Store, Target,
    MAX_FILE_SIZE,
};
pub use xattr::XattrMode;
