//! The namespace checks of a scan: every directory entry names a live inode of its type, link
//! counts match the links, and every inode is reachable from the root (or an orphan).

use std::collections::BTreeMap;

use crate::error::Corruption;
use crate::format::{ROOT, S_IFDIR};
use crate::inode::{Content, Inode};

/// Every entry names a live inode of its type; link counts match; every inode is reachable
/// from the root; unlinked inodes are orphans.
pub(super) fn check_namespace(
    inodes: &BTreeMap<u64, Inode>,
    problems: &mut Vec<Corruption>,
    orphans: &mut Vec<u64>,
) {
    let Some(root) = inodes.get(&ROOT) else {
        problems.push(Corruption::Invalid("no root directory".into()));
        return;
    };
    if root.attr.kind() != S_IFDIR {
        problems.push(Corruption::Invalid("root is not a directory".into()));
        return;
    }
    let links = count_links(inodes, problems);
    check_link_counts(inodes, &links, problems, orphans);
    check_reachable(inodes, orphans, problems);
}

/// The links each inode's directory entries give it (a directory's ".." counted on its
/// parent), noting entries that name a missing inode or the wrong type, and directories whose
/// parent pointer disagrees.
fn count_links(
    inodes: &BTreeMap<u64, Inode>,
    problems: &mut Vec<Corruption>,
) -> BTreeMap<u64, u32> {
    let mut links: BTreeMap<u64, u32> = BTreeMap::new();
    for d in inodes.values() {
        let Content::Dir(entries) = &d.content else {
            continue;
        };
        for (name, &(ino, ftype)) in entries {
            let shown = String::from_utf8_lossy(name);
            match inodes.get(&ino) {
                None => problems.push(Corruption::Invalid(format!(
                    "directory {} names missing inode {ino} as {shown:?}",
                    d.ino
                ))),
                Some(t) if u32::from(ftype) != t.attr.kind() >> 12 => {
                    problems.push(Corruption::Invalid(format!(
                        "directory {} entry {shown:?} has the wrong type",
                        d.ino
                    )))
                }
                Some(t) => {
                    *links.entry(ino).or_default() += 1;
                    if t.attr.kind() == S_IFDIR {
                        if t.attr.parent != d.ino {
                            problems.push(Corruption::Invalid(format!(
                                "directory {ino} is in {} but names {} as parent",
                                d.ino, t.attr.parent
                            )));
                        }
                        *links.entry(d.ino).or_default() += 1; // its ".."
                    }
                }
            }
        }
    }
    links
}

/// Every inode's link count against the links counted; an inode without links nothing names
/// is an orphan (unlinked while open or held), not a problem.
fn check_link_counts(
    inodes: &BTreeMap<u64, Inode>,
    links: &BTreeMap<u64, u32>,
    problems: &mut Vec<Corruption>,
    orphans: &mut Vec<u64>,
) {
    for i in inodes.values() {
        let named = links.get(&i.ino).copied().unwrap_or(0);
        if i.attr.nlink == 0 && named == 0 && i.ino != ROOT {
            // Unlinked while open or while the kernel still knew it: a file, or a removed
            // (so empty) directory.
            orphans.push(i.ino);
            continue;
        }
        let mut expect = named;
        if i.attr.kind() == S_IFDIR {
            expect += 1; // "."
            if i.ino == ROOT {
                expect += 1; // the root's own ".."
            }
        }
        if i.attr.nlink != expect {
            problems.push(Corruption::Invalid(format!(
                "inode {} has link count {} but {} links",
                i.ino, i.attr.nlink, expect
            )));
        }
    }
}

/// Every inode but the orphans is reachable from the root.
fn check_reachable(inodes: &BTreeMap<u64, Inode>, orphans: &[u64], problems: &mut Vec<Corruption>) {
    // Reachability: walk down from the root.
    let mut seen = std::collections::BTreeSet::from([ROOT]);
    let mut stack = vec![ROOT];
    while let Some(d) = stack.pop() {
        if let Some(Content::Dir(entries)) = inodes.get(&d).map(|i| &i.content) {
            for &(ino, _) in entries.values() {
                if inodes.contains_key(&ino) && seen.insert(ino) {
                    stack.push(ino);
                }
            }
        }
    }
    for &ino in inodes.keys() {
        if !seen.contains(&ino) && !orphans.contains(&ino) {
            problems.push(Corruption::Invalid(format!(
                "inode {ino} is not reachable from the root"
            )));
        }
    }
}
