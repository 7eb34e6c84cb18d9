//! The on-media format: every byte offset the store reads or writes is defined here.
//!
//! ```text
//!  block 0        block 1        block 2    block 3      blocks 4 ..    data_block ..
//! +-------------+-------------+----------+------------+--------------+-------------------+
//! | superblock  | superblock  | journal  | completion | inode table  | log pages and     |
//! | (primary)   | (replica)   |          | records    | 64 B / slot  | data blocks       |
//! +-------------+-------------+----------+------------+--------------+-------------------+
//!
//! superblock (little-endian)          journal block
//!   0 magic "SWYDSTOR"                  0 word0 = magic "SJNL" (u32) | count (u32) << 32
//!   8 version u32                       8 seq u64
//!  12 block_size u32 (4096)            16 crc32c u32 of bytes 0..16 ++ entries
//!  16 total_blocks u64                 64 entries: count × (region offset u64, old u64)
//!  24 inode_table_block u64
//!  32 inode_slots u64                 inode slot (64 B, slot 0 unused, slot 1 = root)
//!  40 journal_block u64                 0 head u64: block of the first log page, 0 = free
//!  48 data_block u64                    8 tail u64: region offset just past the last
//!  56 uuid [u8; 16]                       committed entry (the commit point)
//!  72 clean u32 (1 = cleanly unmounted)  16 generation u64: +1 each time the slot is
//!                                          given to a new inode, committed with it (v4)
//!  80 mount_count u64                 log page (4 KiB)
//!  88 checkpoint u64: first block of    0 magic "SLOG" u32, 4 zero u32
//!     the free-space checkpoint, 0 = none
//!  96 completion_block u64            8 ino u64
//! 104 crc32c u32 of bytes 0..104
//!                                      16 next u64: block of the next log page, 0 = none
//!                                      24 crc32c u32 of bytes 0..16
//!                                      64 entries, 8-byte aligned, until a zero kind byte
//!                                         or the end of the page (or the tail)
//!
//! checkpoint page (4 KiB, written by a clean unmount into blocks that are free)
//!   0 magic "SCKP" u32, count u32 (extents in this page, at most 252)
//!   8 next u64: block of the next checkpoint page, 0 = last
//!  16 mount_count u64 (of the superblock it belongs to)
//!  24 crc32c u32 of bytes 0..24 ++ the extents
//!  64 extents: count × (first block u64, blocks u64), ascending, the free space of the data
//!     zone (the checkpoint pages themselves included)
//!
//! entry header: kind u8, 0 u8, len u16 (total, multiple of 8), crc32c u32 (entry with crc = 0)
//!   1 Attr      8 mode u32, uid u32, gid u32, nlink u32, size u64, atime i64, mtime i64,
//!                 ctime i64, parent u64 (a device node's rdev; v4)               (64 bytes)
//!   2 Write     8 pgoff u64, block u64, count u64, size u64, mtime i64          (48 bytes)
//!   3 DirAdd    8 ino u64, ftype u8, namelen u8, 0 [u8; 6], name, zero padding
//!   4 DirRemove 8 namelen u8, 0 [u8; 7], name, zero padding
//!   5 WriteSeq  as Write, then 48 generation u64, 56 channel u32, 60 0 u32, 64 position u64
//!                 (an orderless write: valid only once its copy completed)       (72 bytes)
//!   6 XattrSet  8 namelen u8, 0 u8, valuelen u16, 0 u32, name, value, zero padding (v4)
//!   7 XattrDel  8 namelen u8, 0 [u8; 7], name, zero padding                         (v4)
//!   8 Punch     8 pgoff u64, count u64: pages pgoff..pgoff+count become holes (24 bytes, v4)
//!
//! completion records block: 64 lines of 64 B, line c = engine channel c's durable completion
//!   record (switchyard_engine::durable): 0 seq u64 = position + 1 of the latest finished batch
//!   that named it, 8 holes [u64; 6] = position + 1 of finished batches whose data is
//!   incomplete. Written by the engine's worker, not the store; zeroed by every mount once
//!   recovery has used them.
//! ```
//!
//! Orderless writes: a WriteSeq entry is committed while its data is still being copied by
//! the engine. It names the copy's batch (channel, position) and the mount it was written in
//! (`generation` = the superblock's mount_count then). Recovery keeps it only if it was written
//! by an earlier mount (that mount's recovery already settled it) or the channel's completion
//! record covers its position; otherwise the log ends before it, and mount stores that shorter
//! tail before it bumps mount_count. Only the last write of a file can be unsettled: every
//! later change to the file's log first waits for it (two-level locking, `crate::store`).
//!
//! Commit points (all in `crate::store`): a single-inode operation appends its entries past
//! the inode's tail, makes them durable, then stores the new tail with one 8-byte store and
//! makes it durable. An operation over several inodes makes all their entries durable, writes
//! the old values of every head/tail word it will change to the journal, makes the journal
//! durable with its count and checksum (the commit point), stores the new words, makes them
//! durable, and clears the count. Recovery undoes a journal whose count and checksum are valid.

/// Block size in bytes.
pub const BLOCK: u64 = 4096;
/// Format version this build writes.
///
/// - 5: the journal block holds the page-media ring's anchor while a mount on a page-cache
///   file runs ([`Anchor`]); a version 4 store is a valid version 5 store and is upgraded in
///   place by its first mount.
/// - 4: the inode slot's generation word, FIFO, socket and device inodes (`Attr::parent`
///   holds a device's number).
/// - 3: the oldest this build reads. A version 3 store is a valid version 4 store (its
///   generations are zero and it has no special files), so mounting one upgrades it in place
///   by writing the superblock with version 4; a version 3 build then refuses it as newer.
pub const VERSION: u32 = 5;
/// Oldest format version this build reads (and upgrades on mount).
pub const OLDEST_VERSION: u32 = 3;
/// Superblock magic.
pub const SB_MAGIC: [u8; 8] = *b"SWYDSTOR";
/// Bytes of the superblock covered by its checksum.
pub const SB_CRC_AT: usize = 104;
/// Journal magic (low half of word 0).
pub const JOURNAL_MAGIC: u32 = u32::from_le_bytes(*b"SJNL");
/// First journal entry offset within the journal block.
pub const JOURNAL_ENTRIES_AT: u64 = 64;
/// Most words one journal transaction can cover.
pub const JOURNAL_CAPACITY: usize = ((BLOCK - JOURNAL_ENTRIES_AT) / 16) as usize;
/// Inode slot size.
pub const SLOT: u64 = 64;
/// Offset of the generation word in an inode slot (format version 4; zero in older stores,
/// which is a valid generation).
pub const SLOT_GENERATION_AT: u64 = 16;
/// The root directory's inode number.
pub const ROOT: u64 = 1;
/// Log page magic.
pub const LOG_MAGIC: u32 = u32::from_le_bytes(*b"SLOG");
/// Offset of the first entry in a log page.
pub const LOG_ENTRIES_AT: u64 = 64;
/// Offset of the `next` word in a log page.
pub const LOG_NEXT_AT: u64 = 16;
/// Checkpoint page magic.
pub const CHECKPOINT_MAGIC: u32 = u32::from_le_bytes(*b"SCKP");
/// Offset of the first extent in a checkpoint page.
pub const CHECKPOINT_EXTENTS_AT: u64 = 64;
/// Extents one checkpoint page holds.
pub const CHECKPOINT_CAPACITY: usize = ((BLOCK - CHECKPOINT_EXTENTS_AT) / 16) as usize;
/// Longest file name.
pub const NAME_MAX: usize = 255;

/// Entry kinds.
pub const KIND_ATTR: u8 = 1;
/// See [`KIND_ATTR`].
pub const KIND_WRITE: u8 = 2;
/// See [`KIND_ATTR`].
pub const KIND_DIR_ADD: u8 = 3;
/// See [`KIND_ATTR`].
pub const KIND_DIR_REMOVE: u8 = 4;
/// See [`KIND_ATTR`].
pub const KIND_WRITE_SEQ: u8 = 5;
/// See [`KIND_ATTR`] (format version 4).
pub const KIND_XATTR_SET: u8 = 6;
/// See [`KIND_ATTR`] (format version 4).
pub const KIND_XATTR_REMOVE: u8 = 7;
/// See [`KIND_ATTR`] (format version 4).
pub const KIND_PUNCH: u8 = 8;
/// Longest extended attribute name (with its namespace prefix), as Linux's `XATTR_NAME_MAX`.
pub const XATTR_NAME_MAX: usize = 255;
/// Largest extended attribute value: an `XattrSet` entry with the longest name still fits one
/// log page (entries do not span pages). ext4 with 4 KiB blocks allows about as much.
pub const XATTR_VALUE_MAX: usize = 3584;
/// Engine channels with a durable completion record (one 64-byte line each in the block).
pub const RECORD_CHANNELS: usize = (BLOCK / 64) as usize;

/// File type bits of `mode` (as POSIX `S_IFMT`).
pub const S_IFMT: u32 = 0o170000;
/// Regular file.
pub const S_IFREG: u32 = 0o100000;
/// Directory.
pub const S_IFDIR: u32 = 0o040000;
/// Symbolic link.
pub const S_IFLNK: u32 = 0o120000;
/// Named pipe (FIFO; format version 4). The kernel serves its I/O; the store keeps the inode.
pub const S_IFIFO: u32 = 0o010000;
/// Unix domain socket (format version 4).
pub const S_IFSOCK: u32 = 0o140000;
/// Character device node (format version 4); [`Attr::parent`] holds its device number.
pub const S_IFCHR: u32 = 0o020000;
/// Block device node (format version 4); [`Attr::parent`] holds its device number.
pub const S_IFBLK: u32 = 0o060000;

/// Whether `kind` (type bits) is a FIFO, socket or device node: an inode without data whose
/// I/O the kernel serves.
pub fn is_special(kind: u32) -> bool {
    matches!(kind, S_IFIFO | S_IFSOCK | S_IFCHR | S_IFBLK)
}

pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

mod entry;
mod pages;
mod ring;
mod superblock;

pub use entry::{Attr, Entry, Seq};
pub use pages::*;
pub use ring::{Anchor, ANCHOR_MAGIC, RECORD};
pub use superblock::Superblock;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Corruption;
    use proptest::prelude::*;

    #[test]
    fn superblock_round_trips_and_rejects_damage() {
        let sb = Superblock::for_region(64 << 20, [7; 16]);
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b, 64 << 20).unwrap(), sb);
        let mut bad = b;
        bad[20] ^= 1;
        assert!(matches!(
            Superblock::decode(&bad, 64 << 20),
            Err(Corruption::BadChecksum(_))
        ));
        assert!(matches!(
            Superblock::decode(&b, 32 << 20),
            Err(Corruption::Truncated { .. })
        ));
        // Another version is named as such whatever its checksum says.
        let mut newer = b;
        newer[8] = VERSION as u8 + 1;
        assert!(matches!(
            Superblock::decode(&newer, 64 << 20),
            Err(Corruption::NewerVersion { found, .. }) if found == VERSION + 1
        ));
        let mut upgradable = b;
        upgradable[8] = OLDEST_VERSION as u8;
        let crc = crc32c::crc32c(&upgradable[..SB_CRC_AT]);
        upgradable[SB_CRC_AT..SB_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Superblock::decode(&upgradable, 64 << 20).unwrap(), sb);
        let mut older = b;
        older[8] = OLDEST_VERSION as u8 - 1;
        assert!(matches!(
            Superblock::decode(&older, 64 << 20),
            Err(Corruption::Invalid(m)) if m.contains("predates")
        ));
        assert!(matches!(
            Superblock::decode(&[0u8; 128], 64 << 20),
            Err(Corruption::NotFormatted)
        ));
    }

    #[test]
    fn journal_round_trips_and_ignores_a_torn_count() {
        let words = [(4096, 1), (8192, 2)];
        let mut b = encode_journal(9, &words);
        b.resize(BLOCK as usize, 0);
        assert_eq!(decode_journal(&b), words);
        b[JOURNAL_ENTRIES_AT as usize] ^= 1;
        assert!(decode_journal(&b).is_empty());
    }

    #[test]
    fn checkpoint_pages_round_trip_and_reject_damage_or_another_mount() {
        let ext: Vec<(u64, u64)> = (0..CHECKPOINT_CAPACITY as u64)
            .map(|i| (i * 3, 2))
            .collect();
        let b = encode_checkpoint_page(&ext, 77, 5);
        assert_eq!(decode_checkpoint_page(&b, 5).unwrap(), (ext, 77));
        assert!(decode_checkpoint_page(&b, 6).is_err());
        for at in [0, 4, 8, 16, 24, 64, 64 + 16 * CHECKPOINT_CAPACITY - 1] {
            let mut bad = b.clone();
            bad[at] ^= 0x10;
            assert!(decode_checkpoint_page(&bad, 5).is_err(), "flip at {at}");
        }
    }

    fn entry() -> impl Strategy<Value = Entry> {
        let name = proptest::collection::vec(1u8..=255, 1..=NAME_MAX);
        prop_oneof![
            (
                any::<[u32; 4]>(),
                any::<u64>(),
                any::<[i64; 3]>(),
                any::<u64>()
            )
                .prop_map(|(m, size, t, parent)| Entry::Attr(Attr {
                    mode: m[0],
                    uid: m[1],
                    gid: m[2],
                    nlink: m[3],
                    size,
                    atime: t[0],
                    mtime: t[1],
                    ctime: t[2],
                    parent
                })),
            (
                any::<[u64; 4]>(),
                any::<i64>(),
                proptest::option::of(any::<(u64, u32, u64)>())
            )
                .prop_map(|(v, mtime, seq)| Entry::Write {
                    pgoff: v[0],
                    block: v[1],
                    count: v[2],
                    size: v[3],
                    mtime,
                    seq: seq.map(|(generation, channel, position)| Seq {
                        generation,
                        channel,
                        position
                    }),
                }),
            (any::<u64>(), any::<u8>(), name.clone())
                .prop_map(|(ino, ftype, name)| Entry::DirAdd { ino, ftype, name }),
            name.prop_map(|name| Entry::DirRemove { name }),
        ]
    }

    proptest! {
        #[test]
        fn entries_round_trip(e in entry()) {
            let b = e.encode();
            prop_assert_eq!(b.len() % 8, 0);
            let mut page = b.clone();
            page.extend_from_slice(&[0; 16]);
            let (d, n) = Entry::decode(&page).unwrap().unwrap();
            prop_assert_eq!(d, e);
            prop_assert_eq!(n, b.len());
        }

        #[test]
        fn damaged_entries_never_decode_as_something_else(e in entry(), at in 0usize..64, bit in 0u8..8) {
            let mut b = e.encode();
            let at = at % b.len();
            b[at] ^= 1 << bit;
            if let Ok(Some((d, _))) = Entry::decode(&b) { prop_assert_eq!(d, e, "a flipped bit decoded") }
        }
    }
}
