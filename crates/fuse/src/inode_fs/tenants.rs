//! The mount's callers classed into tenants (`uids` and `paths` in `[[qos.tenants]]`,
//! [`Classes`]): an open finds its tenant from the caller's uid and the file's path, its
//! file handle keeps it, and the handle's reads and writes carry it to the mover.
//!
//! The kernel names files by number, so where a rule looks at paths the mount keeps the path
//! by which the kernel last looked up each number it holds (only then): a file reached by two
//! hard links is classed by the last name the kernel used, and a rename moves the paths of
//! everything under the old name.

use std::collections::HashMap;

use fuser::FileHandle;
use parking_lot::Mutex;
use switchyard_mover::qos::Classes;
use switchyard_store::ROOT;

/// Bits of a file handle that hold its tenant.
const FH_TENANT: u64 = 0xffff;

/// A path the kernel holds a number by, and how many lookups it holds.
struct Known {
    /// `None` where its directory's path was not known.
    path: Option<Vec<u8>>,
    lookups: u64,
}

/// The rules, and the paths of the numbers the kernel holds where a rule needs them.
pub(super) struct Tenants {
    classes: Classes,
    paths: Option<Mutex<HashMap<u64, Known>>>,
}

impl Tenants {
    /// `None` where no rule classes callers (every request carries no tenant: today's
    /// behaviour, at no cost).
    pub(super) fn new(classes: &Classes) -> Option<Tenants> {
        (!classes.is_empty()).then(|| Tenants {
            paths: classes.by_path().then(|| Mutex::new(HashMap::new())),
            classes: classes.clone(),
        })
    }

    /// The path of `parent`'s entry `name`, where `parent`'s is known.
    fn child(paths: &HashMap<u64, Known>, parent: u64, name: &[u8]) -> Option<Vec<u8>> {
        let base: &[u8] = if parent == ROOT {
            b""
        } else {
            paths.get(&parent)?.path.as_deref()?
        };
        let mut p = Vec::with_capacity(base.len() + 1 + name.len());
        p.extend_from_slice(base);
        p.push(b'/');
        p.extend_from_slice(name);
        Some(p)
    }

    /// The kernel took one lookup of `ino` as `parent`'s entry `name`.
    pub(super) fn seen(&self, parent: u64, name: &[u8], ino: u64) {
        let Some(paths) = &self.paths else { return };
        let mut paths = paths.lock();
        let path = Self::child(&paths, parent, name);
        let known = paths.entry(ino).or_insert(Known {
            path: None,
            lookups: 0,
        });
        known.lookups += 1;
        if path.is_some() {
            known.path = path;
        }
    }

    /// The kernel dropped `n` lookups of `ino`.
    pub(super) fn forget(&self, ino: u64, n: u64) {
        let Some(paths) = &self.paths else { return };
        let mut paths = paths.lock();
        if let Some(k) = paths.get_mut(&ino) {
            k.lookups = k.lookups.saturating_sub(n);
            if k.lookups == 0 {
                paths.remove(&ino);
            }
        }
    }

    /// `parent`'s entry `name` is now `to_parent`'s `to_name` (and, with `exchange`, the
    /// other way round too): every path at or under a moved name moves with it.
    pub(super) fn renamed(
        &self,
        (parent, name): (u64, &[u8]),
        (to_parent, to_name): (u64, &[u8]),
        exchange: bool,
    ) {
        let Some(paths) = &self.paths else { return };
        let mut paths = paths.lock();
        let (Some(from), Some(to)) = (
            Self::child(&paths, parent, name),
            Self::child(&paths, to_parent, to_name),
        ) else {
            return;
        };
        let under = |p: &[u8], dir: &[u8]| {
            p.starts_with(dir) && (p.len() == dir.len() || p[dir.len()] == b'/')
        };
        for p in paths.values_mut().filter_map(|k| k.path.as_mut()) {
            if under(p, &from) {
                p.splice(..from.len(), to.iter().copied());
            } else if exchange && under(p, &to) {
                p.splice(..to.len(), from.iter().copied());
            }
        }
    }

    /// The tenant of an open of `ino` by `uid`.
    pub(super) fn of(&self, uid: u32, ino: u64) -> u16 {
        match &self.paths {
            None => self.classes.of(uid, None),
            Some(_) if ino == ROOT => self.classes.of(uid, Some(b"/")),
            Some(paths) => {
                let paths = paths.lock();
                let path = paths.get(&ino).and_then(|k| k.path.as_deref());
                self.classes.of(uid, path)
            }
        }
    }
}

/// `fh` with tenant `tenant` in it.
pub(super) fn with_tenant(fh: FileHandle, tenant: u16) -> FileHandle {
    FileHandle(fh.0 & !FH_TENANT | u64::from(tenant))
}

/// The tenant a file handle holds (0: none).
pub(super) fn tenant(fh: FileHandle) -> u16 {
    (fh.0 & FH_TENANT) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_mover::config::{QosConfig, TenantConfig};

    fn tenants() -> Tenants {
        let a = TenantConfig {
            paths: vec!["/a".into()],
            ..TenantConfig::bulk("a")
        };
        let b = TenantConfig {
            paths: vec!["/b".into()],
            uids: vec![7],
            ..TenantConfig::bulk("b")
        };
        let q = QosConfig {
            tenants: vec![a, b],
            ..QosConfig::default()
        };
        Tenants::new(&Classes::new(&q)).unwrap()
    }

    /// Paths follow lookups, renames (of a directory's whole tree) and exchanges; a number the
    /// kernel forgot, or one reached through an unknown directory, has no path.
    #[test]
    fn paths_follow_lookups_renames_and_exchanges_until_forgotten() {
        let t = tenants();
        t.seen(ROOT, b"a", 10);
        t.seen(10, b"f", 11);
        t.seen(ROOT, b"b", 20);
        t.seen(20, b"g", 21);
        assert_eq!((t.of(0, 11), t.of(7, 21), t.of(0, 21)), (1, 2, 0));
        t.renamed((ROOT, b"a"), (20, b"a"), false);
        assert_eq!(t.of(0, 11), 0, "now /b/a/f, and uid 0 is not b's");
        assert_eq!(t.of(7, 11), 2);
        t.seen(ROOT, b"a", 30);
        t.renamed((ROOT, b"a"), (20, b"g"), true);
        assert_eq!((t.of(0, 21), t.of(7, 30)), (1, 2), "exchanged");
        t.seen(99, b"x", 40);
        assert_eq!(t.of(0, 40), 0, "its directory's path is unknown");
        t.seen(ROOT, b"a", 41);
        t.seen(ROOT, b"a", 41);
        t.forget(41, 1);
        assert_eq!(t.of(0, 41), 1, "one lookup is still held");
        t.forget(41, 1);
        assert_eq!(t.of(0, 41), 0, "forgotten");
        assert!(Tenants::new(&Classes::default()).is_none());
    }

    #[test]
    fn a_handle_keeps_its_tenant_beside_its_flags() {
        let fh = with_tenant(FileHandle(1 << 63), 513);
        assert_eq!((tenant(fh), fh.0 >> 63), (513, 1));
    }
}
