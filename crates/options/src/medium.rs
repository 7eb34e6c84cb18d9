//! The medium a measurement ran on, as the tune's and the benchmarks' JSON output names it
//! ([`Media`]), and the file system that holds a path ([`file_system_of`]).

use std::path::Path;

use serde::{Deserialize, Serialize};
use switchyard_media::Region;

/// The medium a tune or a benchmark measured: its region and what backs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Media {
    /// The region file, absolute where it could be resolved (scratch regions are removed
    /// after the run).
    pub region: String,
    /// How it is mapped: `file` (page cache), `dax` (`MAP_SYNC`) or `devdax`.
    pub kind: String,
    /// The file system holding it (`tmpfs`, `ext4`, ...; from `/proc/self/mountinfo`), or
    /// `unknown`.
    pub fs: String,
}

impl Media {
    /// The medium of `region`.
    pub fn of(region: &Region) -> Media {
        let path = std::fs::canonicalize(region.path()).unwrap_or_else(|_| region.path().into());
        Media {
            fs: file_system_of(&path),
            region: path.display().to_string(),
            kind: region.kind().name().into(),
        }
    }
}

/// The type of the file system that holds `path` (`tmpfs`, `ext4`, ...; from
/// `/proc/self/mountinfo`), or `unknown`.
pub fn file_system_of(path: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.into());
    std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|t| file_system(&t, &path))
        .unwrap_or_else(|| "unknown".into())
}

/// The type of the file system that holds `path` (absolute), from the text of
/// `/proc/self/mountinfo`: the mount with the longest mount point above `path`, the later
/// one where a mount point was mounted over.
fn file_system(mountinfo: &str, path: &Path) -> Option<String> {
    let mut best: Option<(usize, &str)> = None;
    for line in mountinfo.lines() {
        // `id parent major:minor root mount-point options [optional...] - type source ...`
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let (Some(point), Some(kind)) = (left.split(' ').nth(4), right.split(' ').next()) else {
            continue;
        };
        let point = unescape_octal(point);
        if path.starts_with(&point) && best.is_none_or(|(len, _)| point.len() >= len) {
            best = Some((point.len(), kind));
        }
    }
    best.map(|(_, kind)| kind.to_string())
}

/// Mount points in mountinfo escape space, tab, newline and backslash as `\ooo`.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let code = b.get(i + 1..i + 4).and_then(|d| {
                std::str::from_utf8(d)
                    .ok()
                    .and_then(|d| u8::from_str_radix(d, 8).ok())
            });
            if let Some(c) = code {
                out.push(c);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw
30 24 0:27 / /dev/shm rw,relatime - ramfs none rw
31 27 0:28 / /mnt/my\\040disk rw - xfs /dev/sdb rw
";

    #[test]
    fn the_file_system_is_the_deepest_latest_mount_above_the_path() {
        let fs = |p: &str| file_system(MOUNTINFO, Path::new(p));
        assert_eq!(fs("/work/x.region").as_deref(), Some("ext4"));
        assert_eq!(fs("/dev/shm/x.region").as_deref(), Some("ramfs"));
        assert_eq!(fs("/mnt/my disk/r").as_deref(), Some("xfs"));
        // A component boundary, not a string prefix.
        assert_eq!(fs("/dev/shmem/r").as_deref(), Some("ext4"));
        assert_eq!(file_system("", Path::new("/x")), None);
    }
}
