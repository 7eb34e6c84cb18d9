//! The DRAM image of one inode, rebuilt by replaying its log and kept current by every
//! committed operation.

use std::collections::BTreeMap;

use std::sync::Arc;

use crate::format::{Attr, Entry, BLOCK, S_IFDIR};
use crate::inflight::{PendingWrite, Readers};

/// What an inode holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// Regular file or symlink: file page → block.
    File(BTreeMap<u64, u64>),
    /// Directory: name → (inode, file type `mode >> 12`).
    Dir(BTreeMap<Vec<u8>, (u64, u8)>),
}

/// One live inode.
#[derive(Debug, Clone)]
pub struct Inode {
    /// Inode number (its slot).
    pub ino: u64,
    /// Attributes.
    pub attr: Attr,
    /// Blocks of its log pages, in chain order.
    pub pages: Vec<u64>,
    /// Committed tail (region offset).
    pub tail: u64,
    /// Bytes of entries in the log (live and dead).
    pub log_bytes: u64,
    /// Data.
    pub content: Content,
    /// Extended attributes, name → value.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Open handles (DRAM only): an unlinked inode lives until the last is released.
    pub open: u32,
    /// Log size at which compaction next measures the live bytes (DRAM only): measuring
    /// encodes a snapshot, so it is done once per quarter of log growth, not per commit.
    pub compact_check_at: u64,
    /// The last write, if its copies may still be running (DRAM only; level-2 locking).
    pub(crate) pending: Option<Arc<PendingWrite>>,
    /// Asynchronous reads in flight and the blocks they keep from reuse (DRAM only).
    pub(crate) readers: Arc<Readers>,
}

impl Inode {
    /// An inode whose first entry is `attr`.
    pub fn new(ino: u64, attr: Attr) -> Inode {
        let content = if attr.kind() == S_IFDIR {
            Content::Dir(BTreeMap::new())
        } else {
            Content::File(BTreeMap::new())
        };
        Inode {
            ino,
            attr,
            pages: Vec::new(),
            tail: 0,
            log_bytes: 0,
            content,
            xattrs: BTreeMap::new(),
            open: 0,
            compact_check_at: 0,
            pending: None,
            readers: Arc::default(),
        }
    }

    /// Applies one committed entry. Returns the blocks it unmapped (overwritten or truncated
    /// away), which become free.
    pub fn apply(&mut self, e: &Entry, freed: &mut Vec<u64>) {
        match (e, &mut self.content) {
            (Entry::Attr(a), Content::File(pages)) => {
                shrink(pages, self.attr.size, a.size, freed);
                self.attr = *a;
            }
            (Entry::Attr(a), Content::Dir(_)) => self.attr = *a,
            (
                Entry::Write {
                    pgoff,
                    block,
                    count,
                    size,
                    mtime,
                    ..
                },
                Content::File(pages),
            ) => {
                // A truncation's copy of its new last page carries the smaller size.
                shrink(pages, self.attr.size, *size, freed);
                for i in 0..*count {
                    freed.extend(pages.insert(pgoff + i, block + i));
                }
                self.attr.size = *size;
                self.attr.mtime = *mtime;
                self.attr.ctime = *mtime;
            }
            (Entry::DirAdd { ino, ftype, name }, Content::Dir(d)) => {
                d.insert(name.clone(), (*ino, *ftype));
            }
            (Entry::DirRemove { name }, Content::Dir(d)) => {
                d.remove(name);
            }
            (Entry::Punch { pgoff, count }, Content::File(pages)) => {
                let gone: Vec<u64> = pages
                    .range(*pgoff..pgoff.saturating_add(*count))
                    .map(|(&p, _)| p)
                    .collect();
                for p in gone {
                    freed.extend(pages.remove(&p));
                }
            }
            (Entry::XattrSet { name, value }, _) => {
                self.xattrs.insert(name.clone(), value.clone());
            }
            (Entry::XattrRemove { name }, _) => {
                self.xattrs.remove(name);
            }
            // Kind mismatches are rejected by the scan before they reach here.
            _ => {}
        }
    }

    /// Whether `e` fits this inode's type.
    pub fn accepts(&self, e: &Entry) -> bool {
        matches!(
            (e, &self.content),
            (
                Entry::Attr(_) | Entry::XattrSet { .. } | Entry::XattrRemove { .. },
                _
            ) | (Entry::Write { .. } | Entry::Punch { .. }, Content::File(_))
                | (
                    Entry::DirAdd { .. } | Entry::DirRemove { .. },
                    Content::Dir(_)
                )
        )
    }

    /// The entries that rebuild this inode's current state from nothing: what a compacted
    /// log holds.
    pub fn snapshot(&self) -> Vec<Entry> {
        let mut out = vec![Entry::Attr(self.attr)];
        match &self.content {
            Content::File(pages) => {
                let mut run: Option<(u64, u64, u64)> = None;
                let flush = |r: (u64, u64, u64), out: &mut Vec<Entry>| {
                    out.push(Entry::Write {
                        pgoff: r.0,
                        block: r.1,
                        count: r.2,
                        size: self.attr.size,
                        mtime: self.attr.mtime,
                        seq: None,
                    })
                };
                for (&p, &b) in pages {
                    run = match run {
                        Some((p0, b0, n)) if p0 + n == p && b0 + n == b => Some((p0, b0, n + 1)),
                        Some(r) => {
                            flush(r, &mut out);
                            Some((p, b, 1))
                        }
                        None => Some((p, b, 1)),
                    };
                }
                if let Some(r) = run {
                    flush(r, &mut out);
                }
                // Write entries set mtime/ctime; the final Attr restores ctime exactly.
                out.push(Entry::Attr(self.attr));
            }
            Content::Dir(d) => {
                for (name, &(ino, ftype)) in d {
                    out.push(Entry::DirAdd {
                        ino,
                        ftype,
                        name: name.clone(),
                    });
                }
            }
        }
        for (name, value) in &self.xattrs {
            out.push(Entry::XattrSet {
                name: name.clone(),
                value: value.clone(),
            });
        }
        out
    }

    /// Bytes of a compacted log's entries.
    pub fn live_bytes(&self) -> u64 {
        self.snapshot()
            .iter()
            .map(|e| e.encode().len() as u64)
            .sum()
    }
}

/// What an entry that sets a file's size from `old` to `new` does to its pages: a smaller size
/// truncates, and the pages past the new end go into `freed`. An equal or larger one keeps
/// them: blocks allocated past the end with `FALLOC_FL_KEEP_SIZE` stay held until a
/// truncation gives them back.
fn shrink(pages: &mut BTreeMap<u64, u64>, old: u64, new: u64, freed: &mut Vec<u64>) {
    if new >= old {
        return;
    }
    let keep = new.div_ceil(BLOCK);
    let cut: Vec<u64> = pages.range(keep..).map(|(&p, _)| p).collect();
    for p in cut {
        freed.extend(pages.remove(&p));
    }
}
