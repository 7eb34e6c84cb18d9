//! Errors: what a store operation failed on and why ([`Error`], carrying the POSIX errno a
//! front end passes on), and why a region cannot be mounted.

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
    /// No such device or address (`lseek` past the last data or the end).
    pub const ENXIO: Errno = Errno(libc::ENXIO);
    /// Permission denied.
    pub const EACCES: Errno = Errno(libc::EACCES);

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
            libc::ESTALE => "ESTALE",
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

/// A store operation that failed: which operation, on what, and why. Front ends pass
/// [`Error::errno`] on (FUSE replies with it; `?` turns it into an [`Errno`] where one is
/// wanted, as in [`crate::Fs`], whose callers add the path); messages show all three. Each
/// public operation of [`crate::Store`] works on errnos inside and names itself and its object
/// once, where it returns (`.map_err(Error::on(Op::Read, ino))`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} {object}: {errno}")]
pub struct Error {
    /// The operation.
    pub op: Op,
    /// What it was applied to.
    pub object: Object,
    /// Why, as the errno a POSIX caller gets.
    pub errno: Errno,
}

impl Error {
    /// `op` on inode `ino` failed with `errno`.
    pub fn on(op: Op, ino: u64) -> impl FnOnce(Errno) -> Error {
        move |errno| Error {
            op,
            object: Object::Inode(ino),
            errno,
        }
    }

    /// `op` on the entry `name` of directory `parent` failed with `errno`.
    pub fn at(op: Op, parent: u64, name: &[u8]) -> impl FnOnce(Errno) -> Error + '_ {
        move |errno| Error {
            op,
            object: Object::Name {
                parent,
                name: name.to_vec(),
            },
            errno,
        }
    }
}

impl From<Error> for Errno {
    fn from(e: Error) -> Errno {
        e.errno
    }
}

/// The store operations, as [`Error`] names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Op {
    Getattr,
    Setattr,
    Lookup,
    Readdir,
    Create,
    Mknod,
    Mkdir,
    Symlink,
    Readlink,
    Link,
    Unlink,
    Rmdir,
    Rename,
    Exchange,
    Read,
    Write,
    Append,
    PrepareWrite,
    CommitWrite,
    Fallocate,
    Fsync,
    Open,
    Release,
    Hold,
    Getxattr,
    Setxattr,
    Listxattr,
    Removexattr,
    Statfs,
    Unmount,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = format!("{self:?}").to_lowercase();
        f.write_str(match self {
            Op::PrepareWrite => "prepare write",
            Op::CommitWrite => "commit write",
            _ => &name,
        })
    }
}

/// What a failed operation was applied to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Object {
    /// An inode.
    Inode(u64),
    /// A name in a directory.
    Name {
        /// The directory's inode.
        parent: u64,
        /// The name.
        name: Vec<u8>,
    },
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Object::Inode(ino) => write!(f, "inode {ino}"),
            Object::Name { parent, name } => {
                write!(
                    f,
                    "{:?} in directory {parent}",
                    String::from_utf8_lossy(name)
                )
            }
        }
    }
}

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
