use std::path::PathBuf;

/// Why a region could not be created, opened or accessed.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// The region path does not exist.
    #[error("region {path}: no such file (create it with a size, e.g. `--region-size 1G`)")]
    NotFound {
        /// The path that was asked for.
        path: PathBuf,
    },
    /// The region is smaller than what the caller needs or than the minimum region size.
    #[error("region {path}: too small: {actual} bytes, need at least {needed} bytes")]
    TooSmall {
        /// The region path.
        path: PathBuf,
        /// Its size in bytes.
        actual: u64,
        /// The size that was needed.
        needed: u64,
    },
    /// Another process (or another open of the file in this one) owns the region: it holds
    /// the file's exclusive lock, which every [`Region`](crate::Region) over a file takes.
    #[error(
        "{path} is in use by {holder}; it has one owner at a time: stop that process (for a \
         mounted store, `switchyard umount` its mount point) first"
    )]
    Busy {
        /// The region path.
        path: PathBuf,
        /// Who holds it, as far as this host can tell (pid, command, host, how long it ran).
        holder: String,
    },
    /// Group or others may read or write the region file, so every byte stored in it is
    /// theirs to read, whatever the file modes inside say.
    #[error(
        "{path} can be read or written by other users (mode {mode:04o}), and so can every file \
         stored in it: run `chmod 600 {}` (or, to share it on purpose, pass \
         --allow-exposed-store)",
        path.display()
    )]
    Exposed {
        /// The region path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The requested size is not a multiple of the mapping alignment.
    #[error("region {path}: size {size} is not a multiple of the {align}-byte alignment that {kind} requires")]
    Misaligned {
        /// The region path.
        path: PathBuf,
        /// The requested size.
        size: u64,
        /// The alignment the mapping needs.
        align: u64,
        /// The kind of region.
        kind: &'static str,
    },
    /// `MAP_SYNC` was requested and the file system refused it.
    #[error("region {path}: not on a DAX file system (MAP_SYNC refused: {source})")]
    NotDax {
        /// The region path.
        path: PathBuf,
        /// The error the kernel returned.
        source: std::io::Error,
    },
    /// An access fell outside the region.
    #[error("access at offset {offset} of {len} bytes is outside the region of {size} bytes")]
    OutOfBounds {
        /// First byte of the access.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// Size of the region.
        size: u64,
    },
    /// Any other I/O error, with the operation and path it came from.
    #[error("region {path}: {op}: {source}")]
    Io {
        /// The region path.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The error the OS returned.
        source: std::io::Error,
    },
}
