//! Files only their owner can reach.
//!
//! A region file holds every byte of every file of the store on it. The store's mount checks
//! each file's owner, group and mode, but those checks mean nothing if another local user can
//! read the region file itself (`grep secret switchyard.store`). So everything Switchyard
//! creates is created owner-only (files 0600, directories 0700) in the `open`/`mkdir` call
//! itself, whatever the umask (no window where it is open to others), and a region file that
//! group or others may read or write is refused when opened ([`MediaError::Exposed`]) unless
//! the process allows it ([`allow_exposed`], the command line's `--allow-exposed-store`).

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::MediaError;

/// Permission bits of a private file.
pub const FILE_MODE: u32 = 0o600;
/// Permission bits of a private directory.
pub const DIR_MODE: u32 = 0o700;

static ALLOW_EXPOSED: AtomicBool = AtomicBool::new(false);

/// Lets this process open region files that group or others can read or write (refused by
/// default). For a store that is shared on purpose; the caller should say so in its log.
pub fn allow_exposed(yes: bool) {
    ALLOW_EXPOSED.store(yes, Ordering::Relaxed);
}

/// Opens `path` for reading and writing, creating it owner-only if it does not exist.
/// Returns the file and whether it was created here. An existing file keeps its mode.
pub(crate) fn open_or_create(path: &Path) -> std::io::Result<(File, bool)> {
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
    {
        Ok(f) => {
            // The umask can only have taken bits away; make it exactly owner read/write.
            f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
            Ok((f, true))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map(|f| (f, false)),
        Err(e) => Err(e),
    }
}

/// Refuses `file` (opened from `path`) if group or others have any access to it, unless
/// [`allow_exposed`] said otherwise.
pub(crate) fn check(file: &File, path: &Path) -> Result<(), MediaError> {
    let mode = file
        .metadata()
        .map_err(|source| MediaError::Io {
            path: path.to_path_buf(),
            op: "stat",
            source,
        })?
        .mode();
    if mode & 0o077 != 0 && !ALLOW_EXPOSED.load(Ordering::Relaxed) {
        return Err(MediaError::Exposed {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

/// Writes `data` to `path` atomically (a temporary file renamed over it), owner-only.
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = Path::new(&tmp);
    let _ = std::fs::remove_file(tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(tmp)?;
    f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    f.write_all(data)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(tmp, path)
}

/// Creates directory `path` and its missing parents owner-only (an existing one is left as
/// it is).
pub fn create_dir_private(path: &Path) -> std::io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_files_are_owner_only_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: umask only changes this process's file creation mask.
        let old = unsafe { libc::umask(0) };
        let (f, created) = open_or_create(&dir.path().join("r")).unwrap();
        write_private(&dir.path().join("p"), b"x").unwrap();
        create_dir_private(&dir.path().join("d/e")).unwrap();
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        assert!(created);
        let mode = |p: &str| std::fs::metadata(dir.path().join(p)).unwrap().mode() & 0o7777;
        assert_eq!(f.metadata().unwrap().mode() & 0o7777, 0o600);
        assert_eq!((mode("p"), mode("d"), mode("d/e")), (0o600, 0o700, 0o700));
        assert!(check(&f, Path::new("r")).is_ok());
        f.set_permissions(std::fs::Permissions::from_mode(0o640))
            .unwrap();
        let e = check(&f, Path::new("r")).unwrap_err().to_string();
        assert!(e.contains("chmod 600 r"), "names the fix: {e}");
    }
}
