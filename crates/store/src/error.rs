//! Errors: POSIX errnos for file operations, and why a region cannot be mounted.

use std::fmt;

/// A POSIX error number, as file operations return it. Front ends (FUSE, the C ABI) pass the
/// raw value through; [`Errno::name`] gives the symbolic name for messages.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// No such file or directory.
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    /// File exists.
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    /// Not a directory.
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    /// Is a directory.
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    /// Directory not empty.
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    /// No space left on device.
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    /// File name too long.
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    /// Invalid argument.
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    /// Bad file descriptor.
    pub const EBADF: Errno = Errno(libc::EBADF);
    /// File too large.
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    /// Too many links.
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    /// Operation not permitted.
    pub const EPERM: Errno = Errno(libc::EPERM);
    /// Device or resource busy.
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    /// Too many levels of symbolic links.
    pub const ELOOP: Errno = Errno(libc::ELOOP);
    /// Too many open files.
    pub const EMFILE: Errno = Errno(libc::EMFILE);
    /// Input/output error (the store found damage while running).
    pub const EIO: Errno = Errno(libc::EIO);
    /// Read-only file system (the store stopped writing after an internal error).
    pub const EROFS: Errno = Errno(libc::EROFS);
    /// Not a regular file or directory (fallocate on a FIFO, socket or device).
    pub const ENODEV: Errno = Errno(libc::ENODEV);
    /// No such extended attribute (`ENOATTR`).
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    /// The caller's buffer is too small for the value or list.
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    /// An extended attribute value is larger than the store keeps.
    pub const E2BIG: Errno = Errno(libc::E2BIG);
    /// Operation not supported (an extended attribute namespace or a mode the store lacks).
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    /// The file a handle named is gone.
    pub const ESTALE: Errno = Errno(libc::ESTALE);

    /// The symbolic name, e.g. `"ENOENT"`.
    pub fn name(self) -> &'static str {
        match self.0 {
            libc::ENOENT => "ENOENT",
            libc::EEXIST => "EEXIST",
            libc::ENOTDIR => "ENOTDIR",
            libc::EISDIR => "EISDIR",
            libc::ENOTEMPTY => "ENOTEMPTY",
            libc::ENOSPC => "ENOSPC",
            libc::ENAMETOOLONG => "ENAMETOOLONG",
            libc::EINVAL => "EINVAL",
            libc::EBADF => "EBADF",
            libc::EFBIG => "EFBIG",
            libc::EMLINK => "EMLINK",
            libc::EPERM => "EPERM",
            libc::EBUSY => "EBUSY",
            libc::ELOOP => "ELOOP",
            libc::EMFILE => "EMFILE",
            libc::EIO => "EIO",
            libc::EROFS => "EROFS",
            libc::ENODEV => "ENODEV",
            libc::ENODATA => "ENODATA",
            libc::ERANGE => "ERANGE",
            libc::E2BIG => "E2BIG",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            _ => "E?",
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({})",
            self.name(),
            std::io::Error::from_raw_os_error(self.0)
        )
    }
}

impl std::error::Error for Errno {}

/// What is wrong with an image. Mount refuses an image with any of these; `fsck` lists them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Corruption {
    /// No superblock magic: the region was never formatted (or is not a store).
    #[error("not a Switchyard store (no superblock); run `switchyard mkfs` first")]
    NotFormatted,
    /// A structure's checksum does not match.
    #[error("bad checksum in {0}")]
    BadChecksum(&'static str),
    /// Written by a newer release.
    #[error("store format version {found} is newer than this build supports ({supported})")]
    NewerVersion {
        /// Version on media.
        found: u32,
        /// Newest this build reads.
        supported: u32,
    },
    /// The region is shorter than the superblock says.
    #[error("region truncated: the store needs {expected} bytes, the region has {actual}")]
    Truncated {
        /// Bytes the superblock describes.
        expected: u64,
        /// Bytes present.
        actual: u64,
    },
    /// Any other violated invariant.
    #[error("{0}")]
    Invalid(String),
}

/// Why a store could not be formatted or mounted.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The region could not be mapped.
    #[error(transparent)]
    Media(#[from] switchyard_media::MediaError),
    /// The image is damaged or not a store.
    #[error("cannot mount {path}: {problem}")]
    Corrupt {
        /// The region.
        path: String,
        /// The first problem found.
        problem: Corruption,
    },
}
