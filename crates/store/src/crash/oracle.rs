//! The oracle: the logical state of a store (what each path names), and the check of a crash
//! image against the states before and after the interrupted operation.

use std::collections::BTreeMap;

use switchyard_media::{Persist, Region};

use super::mover;
use crate::format::{is_special, S_IFDIR, S_IFLNK, S_IFMT};
use crate::fs::{Fs, OpenFlags};
use crate::fsck;
use crate::store::Store;

/// What the oracle compares of one file. Timestamps are left out (they change with every
/// operation by design).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Type and permission bits.
    pub mode: u32,
    /// Links.
    pub nlink: u32,
    /// Bytes, a symlink's target, or a device node's number.
    pub body: Vec<u8>,
    /// The inode's generation: a crash must never leave a file under a (number,
    /// generation) pair that a handle to another file may hold.
    pub generation: u64,
    /// Extended attributes (the `listxattr` list, then each value).
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The logical state the oracle compares: path → file.
pub type State = BTreeMap<String, Node>;

/// Reads the whole namespace.
pub fn state(fs: &Fs) -> Result<State, String> {
    let mut out = State::new();
    let mut stack = vec!["".to_string()];
    while let Some(dir) = stack.pop() {
        let path = if dir.is_empty() {
            "/".to_string()
        } else {
            dir.clone()
        };
        for e in fs
            .readdir(&path)
            .map_err(|e| format!("readdir {path}: {e}"))?
        {
            let p = format!("{dir}/{}", String::from_utf8_lossy(&e.name));
            let a = fs.lstat(&p).map_err(|e| format!("lstat {p}: {e}"))?;
            let body = match a.mode & S_IFMT {
                S_IFDIR => {
                    stack.push(p.clone());
                    Vec::new()
                }
                S_IFLNK => fs.readlink(&p).map_err(|e| format!("readlink {p}: {e}"))?,
                k if is_special(k) => a.rdev().to_le_bytes().to_vec(),
                _ => fs.read_all(&p).map_err(|e| format!("read {p}: {e}"))?,
            };
            let store = fs.store();
            let generation = store
                .generation(e.ino)
                .map_err(|e| format!("generation {p}: {e}"))?;
            let list = store
                .listxattr(e.ino)
                .map_err(|e| format!("listxattr {p}: {e}"))?;
            let xattrs = list
                .split(|&b| b == 0)
                .filter(|n| !n.is_empty())
                .map(|n| Ok((n.to_vec(), store.getxattr(e.ino, n)?)))
                .collect::<Result<_, crate::Errno>>()
                .map_err(|e| format!("getxattr {p}: {e}"))?;
            out.insert(
                p,
                Node {
                    mode: a.mode,
                    nlink: a.nlink,
                    body,
                    generation,
                    xattrs,
                },
            );
        }
    }
    Ok(out)
}

/// Mounts a crash image and checks it: fsck clean, state before or after, still usable.
pub fn check_image(img: &[u8], before: &State, after: &State) -> Result<(), String> {
    let f = fsck::check(img);
    if !f.healthy() {
        return Err(format!("fsck: {:?}", f.problems));
    }
    let region = Region::memory(img.len() as u64, Persist::detect()).map_err(|e| e.to_string())?;
    // SAFETY: a fresh private mapping of img.len() bytes that nothing else references.
    unsafe { std::ptr::copy_nonoverlapping(img.as_ptr(), region.as_mut_ptr(), img.len()) };
    let fs = Fs::new(Store::mount(region, mover()).map_err(|e| format!("mount: {e}"))?);
    let s = state(&fs)?;
    if &s != before && &s != after {
        return Err(format!(
            "state is neither before nor after: got {:?}, before {:?}, after {:?}",
            summary(&s),
            summary(before),
            summary(after)
        ));
    }
    let probe = "/.probe";
    let fd = fs
        .open(probe, OpenFlags::CREATE, 0o644)
        .map_err(|e| format!("create after recovery: {e}"))?;
    fs.write(fd, &[7u8; 10000])
        .map_err(|e| format!("write after recovery: {e}"))?;
    fs.close(fd).map_err(|e| e.to_string())?;
    if fs.read_all(probe).map_err(|e| e.to_string())? != vec![7u8; 10000] {
        return Err("read after recovery returned other bytes".into());
    }
    fs.unlink(probe)
        .map_err(|e| format!("unlink after recovery: {e}"))?;
    fs.unmount().map_err(|e| e.to_string())
}

fn summary(s: &State) -> Vec<(String, u32, u32, usize, u64, usize)> {
    s.iter()
        .map(|(p, n)| {
            let x = n.xattrs.len();
            (p.clone(), n.mode, n.nlink, n.body.len(), n.generation, x)
        })
        .collect()
}
