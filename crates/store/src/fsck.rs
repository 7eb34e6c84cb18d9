//! `fsck`: every invariant of an image, checked without changing it.
//!
//! The scan (recovery's `scan_present`) already verifies checksums, chains, bounds, entry
//! types, block ownership, link counts and reachability. `fsck` adds the superblock replica
//! and reports what a mount would repair by itself (an interrupted transaction to undo,
//! orphans to free), and checks a clean unmount's free-space checkpoint against the logs
//! (a mount after a clean unmount trusts it). Repair is exactly that recovery: anything else
//! is left for a person.

use crate::error::Corruption;
use crate::format::{Anchor, Superblock, BLOCK};
use crate::inode::Content;
use crate::recovery::{read_checkpoint, scan_present_as, BlockMap, Present};

/// What `fsck` found.
#[derive(Debug, Default)]
pub struct Report {
    /// Violated invariants; a store is healthy when this is empty.
    pub problems: Vec<Corruption>,
    /// Recoverable states a mount repairs (journal undo, orphans, a damaged superblock copy).
    pub recoverable: Vec<String>,
    /// Live inodes.
    pub inodes: u64,
    /// Used blocks (logs and data) of the data zone.
    pub used_blocks: u64,
    /// Blocks in the data zone.
    pub data_blocks: u64,
    /// Whether the last unmount was clean.
    pub clean: bool,
    /// Bytes of the image the check read.
    pub read_bytes: u64,
}

impl Report {
    /// No problems (recoverable states are fine).
    pub fn healthy(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks an image (the whole region's bytes).
pub fn check(image: &[u8]) -> Report {
    check_present(image, &Present::all(image.len() as u64))
}

/// [`check`] of an image that holds data only where `present` says (a sparse region file's
/// data extents): the rest reads as zeros and is not read. Pass the region's own mapping:
/// nothing is copied, and only the inode table's live pages, the logs and the checkpoint
/// are read.
pub fn check_present(image: &[u8], present: &Present<'_>) -> Report {
    check_present_as(image, present, None)
}

/// [`check_present`] of a region whose page cache is `identity` (`Region::cache_identity`):
/// a page-media commit ring left by a mount through another page cache is read as a power
/// cut leaves it, as the next mount will (its durable records only).
pub fn check_present_as(image: &[u8], present: &Present<'_>, identity: Option<u64>) -> Report {
    let s = match scan_present_as(image, present, identity) {
        Ok(s) => s,
        Err(e) => {
            return Report {
                problems: vec![e],
                ..Report::default()
            }
        }
    };
    let mut r = Report {
        problems: s.problems,
        inodes: s.inodes.len() as u64,
        used_blocks: s.used.count(),
        read_bytes: s.read_bytes,
        data_blocks: s.sb.total_blocks - s.sb.data_block,
        clean: s.sb.clean,
        ..Report::default()
    };
    let replica = Superblock::decode(
        &image[BLOCK as usize..2 * BLOCK as usize],
        image.len() as u64,
    );
    match (s.used_replica, replica) {
        (true, _) => r
            .recoverable
            .push("primary superblock damaged; the replica is good".into()),
        (false, Err(e)) => r.recoverable.push(format!("superblock replica: {e}")),
        (false, Ok(rep)) if rep.uuid != s.sb.uuid => r.problems.push(Corruption::Invalid(
            "superblock copies describe different stores".into(),
        )),
        _ => {}
    }
    let jb = (s.sb.journal_block * BLOCK) as usize;
    let ring = Anchor::present(&image[jb..jb + BLOCK as usize]);
    if ring {
        r.recoverable.push(format!(
            "a page-media mount's commit ring: {} inode words will be applied",
            s.undo.len()
        ));
    } else if !s.undo.is_empty() {
        r.recoverable.push(format!(
            "an interrupted operation over {} inode words will be undone",
            s.undo.len()
        ));
    }
    if s.sb.clean && (ring || !s.undo.is_empty()) {
        r.problems.push(Corruption::Invalid(
            "clean store with a live journal".into(),
        ));
    }
    if s.sb.clean && s.sb.checkpoint != 0 {
        let page = |b: u64| &image[(b * BLOCK) as usize..((b + 1) * BLOCK) as usize];
        match read_checkpoint(&page, &s.sb) {
            Ok(extents) => {
                let mut free = BlockMap::new(s.sb.total_blocks);
                for (start, len) in extents {
                    free.set_range(start, len);
                }
                // Every data block is free or used, never both, never neither.
                let wrong = free.count_same(&s.used, s.sb.data_block, s.sb.total_blocks);
                if wrong > 0 {
                    r.problems.push(Corruption::Invalid(format!(
                        "free-space checkpoint disagrees with the logs on {wrong} blocks"
                    )));
                }
            }
            Err(e) => r.recoverable.push(format!(
                "free-space checkpoint unusable ({e}): the next mount scans every log"
            )),
        }
    }
    for o in &s.orphans {
        let kind = match s.inodes.get(o).map(|i| &i.content) {
            Some(Content::Dir(_)) => "directory",
            _ => "file",
        };
        r.recoverable
            .push(format!("unlinked {kind} {o} will be freed"));
    }
    r
}
