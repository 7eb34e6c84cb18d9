//! Per-inode logs: appending entries past the tail, applying committed ones to the DRAM
//! index, compaction, and giving blocks back.

use super::Store;
use crate::alloc::Extent;
use crate::error::Errno;
use crate::format::{log_page_header, Entry, BLOCK, LOG_ENTRIES_AT, LOG_NEXT_AT};
use crate::inode::Inode;
use crate::pm::Held;

/// Where appended entries went before their commit.
pub(crate) struct Appended {
    pub(super) tail: u64,
    pub(super) new_pages: Vec<u64>,
    /// Encoded bytes of the appended entries.
    pub(super) bytes: u64,
}

impl Store {
    // ---- log plumbing -------------------------------------------------------------------

    /// Appends `entries` past `inode`'s tail and makes them durable (not yet committed).
    pub(crate) fn append_log(&self, inode: &Inode, entries: &[Entry]) -> Result<Appended, Errno> {
        let mut pos = inode.tail;
        let mut new_pages: Vec<u64> = Vec::new();
        let mut total = 0;
        for e in entries {
            let bytes = e.encode();
            // Bytes used in the tail page (a tail at a page's end means "full", not "next").
            let page_of_pos = (pos - 1) / BLOCK;
            let used = pos - page_of_pos * BLOCK;
            if used + bytes.len() as u64 > BLOCK {
                if used < BLOCK {
                    self.pm.write(pos, &[0u8; 8]);
                }
                let page = match self.space.take(1) {
                    Ok(x) => x[0].start,
                    Err(e) => {
                        for p in new_pages {
                            self.space.free(Extent { start: p, len: 1 });
                        }
                        return Err(e);
                    }
                };
                self.pm.write(page * BLOCK, &log_page_header(inode.ino));
                self.pm.store_u64(page_of_pos * BLOCK + LOG_NEXT_AT, page);
                new_pages.push(page);
                pos = page * BLOCK + LOG_ENTRIES_AT;
            }
            self.pm.write_held(Held::LogEntry, pos, &bytes);
            pos += bytes.len() as u64;
            total += bytes.len() as u64;
        }
        Ok(Appended {
            tail: pos,
            new_pages,
            bytes: total,
        })
    }

    pub(super) fn applied(
        &self,
        inode: &mut Inode,
        a: Appended,
        entries: &[Entry],
        freed: &mut Vec<u64>,
    ) {
        inode.tail = a.tail;
        inode.pages.extend(a.new_pages);
        inode.log_bytes += a.bytes;
        for e in entries {
            inode.apply(e, freed);
        }
    }

    pub(crate) fn free_blocks(&self, blocks: &[u64]) {
        if blocks.is_empty() {
            return;
        }
        if let [b] = blocks {
            // The common case (one overwritten page): no sorting buffer.
            self.space.free(Extent { start: *b, len: 1 });
            return;
        }
        let mut sorted = blocks.to_vec();
        sorted.sort_unstable();
        let mut i = 0;
        while i < sorted.len() {
            let mut j = i + 1;
            while j < sorted.len() && sorted[j] == sorted[j - 1] + 1 {
                j += 1;
            }
            self.space.free(Extent {
                start: sorted[i],
                len: (j - i) as u64,
            });
            i = j;
        }
    }

    /// Rewrites a log that is mostly dead entries into a fresh chain holding only the live
    /// state, swapped in through the journal.
    pub(crate) fn maybe_compact(&self, inode: &mut Inode) {
        if inode.pages.len() < 4 || inode.log_bytes < inode.compact_check_at {
            return;
        }
        let live = inode.live_bytes();
        if live * 2 > inode.log_bytes {
            inode.compact_check_at = inode.log_bytes + inode.log_bytes / 4;
            return;
        }
        let entries = inode.snapshot();
        let Ok(first) = self.space.take(1) else {
            return;
        };
        let head = first[0].start;
        self.pm.write(head * BLOCK, &log_page_header(inode.ino));
        let fresh = Inode {
            tail: head * BLOCK + LOG_ENTRIES_AT,
            pages: vec![head],
            log_bytes: 0,
            ..Inode::new(inode.ino, inode.attr)
        };
        let Ok(a) = self.append_log(&fresh, &entries) else {
            self.space.free(first[0]);
            return;
        };
        let slot = self.slot_offset(inode.ino);
        // A compacted log says what the old one said: nothing a client sees changes.
        self.commit_words(&[(slot, head), (slot + 8, a.tail)], &[]);
        let old = std::mem::replace(&mut inode.pages, vec![head]);
        inode.pages.extend(a.new_pages);
        inode.tail = a.tail;
        inode.log_bytes = a.bytes;
        inode.compact_check_at = 2 * a.bytes;
        self.free_blocks(&old);
    }

    /// Gives back the log pages an append allocated for an operation that will not commit.
    pub(super) fn discard(&self, a: Appended) {
        for pg in a.new_pages {
            self.space.free(Extent { start: pg, len: 1 });
        }
    }

    pub(crate) fn retire(&self, inode: &Inode, blocks: Vec<u64>) {
        // Readers outside the locks learn of the change before a block can be reused.
        self.changes.bump(inode.ino);
        let now = inode.readers.retire(blocks);
        self.free_blocks(&now);
    }
}
