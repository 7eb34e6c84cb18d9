//! The page-media commit ring: the anchor in the journal block and the word records.
//!
//! On a region whose persistence granularity is the page (a store file through the page
//! cache on a disk), the kernel writes dirty pages back whenever it likes and in any order,
//! so no word the store overwrites in place may reach the disk before what it commits. There
//! the store never changes an inode slot's words in place between syncs: each commit appends
//! its words as records to a ring of blocks taken from the data zone (the *ring*), and a sync
//! makes them durable and only then applies them in place. The argument is in
//! `docs/format.md` ("Page media").
//!
//! ```text
//! anchor (the journal block, block 2, while a page-media mount runs)
//!   0 magic "SPGA" u32, 0 u32
//!   8 identity u64     the page cache the mount wrote through (Region::cache_identity)
//!  16 nonce u64        this mount's, seeds every record's checksum
//!  24 ring_block u64   first block of the ring
//!  32 ring_blocks u64  its length (records at RECORD bytes each)
//!  40 applied u64      records below this sequence number are applied in place, durably
//!  48 durable u64      records below this one are durable, with everything they commit
//!  56 crc32c u32 of bytes 0..56
//!
//! record (32 B, record s at byte (s mod capacity) * 32 of the ring)
//!   0 seq u64, 8 offset u64 (of the word in the inode table), 16 value u64,
//!  24 crc32c u32 of nonce ++ bytes 0..24 ++ flags, 28 flags u32 (bit 0: last of its commit)
//! ```

use super::superblock::Superblock;
use super::{le32, le64, BLOCK};
use crate::error::Corruption;

/// Anchor magic (low half of word 0 of the journal block).
pub const ANCHOR_MAGIC: u32 = u32::from_le_bytes(*b"SPGA");
/// Bytes of one ring record.
pub const RECORD: u64 = 32;
/// Flag of the last record of a commit.
const LAST: u32 = 1;

/// The ring's anchor: where the ring is and how much of it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    /// The page cache the mount wrote through: a later mount that finds its own identity
    /// knows every record that reached the page cache is still there (the owner crashed, the
    /// machine did not).
    pub identity: u64,
    /// Seeds every record's checksum: a record of another mount never checks out.
    pub nonce: u64,
    /// First block of the ring.
    pub ring_block: u64,
    /// Blocks in the ring.
    pub ring_blocks: u64,
    /// Records below this sequence number are applied to the inode table, durably.
    pub applied: u64,
    /// Records below this sequence number are durable, and so is everything they commit.
    pub durable: u64,
}

impl Anchor {
    /// Records the ring holds.
    pub fn capacity(&self) -> u64 {
        self.ring_blocks * BLOCK / RECORD
    }

    /// Region offset of record `seq`.
    pub fn record_offset(&self, seq: u64) -> u64 {
        self.ring_block * BLOCK + (seq % self.capacity()) * RECORD
    }

    /// The anchor's 64 bytes.
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..4].copy_from_slice(&ANCHOR_MAGIC.to_le_bytes());
        for (i, v) in [
            self.identity,
            self.nonce,
            self.ring_block,
            self.ring_blocks,
            self.applied,
            self.durable,
        ]
        .into_iter()
        .enumerate()
        {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The anchor in a journal block, if it holds one whose checksum matches and whose ring
    /// lies in the data zone of `sb`.
    pub fn decode(block: &[u8], sb: &Superblock) -> Option<Anchor> {
        if block.len() < 64 || le32(block, 0) != ANCHOR_MAGIC {
            return None;
        }
        if le32(block, 56) != crc32c::crc32c(&block[..56]) {
            return None;
        }
        let w = |i: usize| le64(block, 8 + 8 * i);
        let a = Anchor {
            identity: w(0),
            nonce: w(1),
            ring_block: w(2),
            ring_blocks: w(3),
            applied: w(4),
            durable: w(5),
        };
        let inside = a.ring_block >= sb.data_block
            && a.ring_blocks > 0
            && a.ring_block
                .checked_add(a.ring_blocks)
                .is_some_and(|e| e <= sb.total_blocks);
        (inside && a.applied <= a.durable).then_some(a)
    }

    /// Whether a journal block holds an anchor at all (checked or not).
    pub fn present(block: &[u8]) -> bool {
        block.len() >= 4 && le32(block, 0) == ANCHOR_MAGIC
    }

    /// Record `seq`: the word's (offset, value) and whether it ends its commit, if the bytes
    /// at its place are that record of this mount.
    pub fn decode_record(&self, b: &[u8], seq: u64) -> Option<(u64, u64, bool)> {
        if b.len() < RECORD as usize || le64(b, 0) != seq {
            return None;
        }
        let flags = le32(b, 28);
        if le32(b, 24) != record_crc(self.nonce, &b[..24], flags) {
            return None;
        }
        Some((le64(b, 8), le64(b, 16), flags & LAST != 0))
    }

    /// Record `seq` setting the word at `off` to `value`; `last` ends a commit.
    pub fn encode_record(&self, seq: u64, off: u64, value: u64, last: bool) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&seq.to_le_bytes());
        b[8..16].copy_from_slice(&off.to_le_bytes());
        b[16..24].copy_from_slice(&value.to_le_bytes());
        let flags = if last { LAST } else { 0 };
        let crc = record_crc(self.nonce, &b[..24], flags);
        b[24..28].copy_from_slice(&crc.to_le_bytes());
        b[28..32].copy_from_slice(&flags.to_le_bytes());
        b
    }

    /// The words to apply, in order, reading records from `applied` on with `record(seq)`
    /// giving each record's bytes: up to `durable` after a power cut (`everything` false:
    /// each of those must be there, or the ring is damaged), or every whole commit the ring
    /// holds when the page cache the mount wrote through survived (`everything` true).
    pub fn replay<'a>(
        &self,
        record: impl Fn(u64) -> &'a [u8],
        everything: bool,
    ) -> Result<Vec<(u64, u64)>, Corruption> {
        self.replay_to(record, everything).map(|(words, _)| words)
    }

    /// [`Anchor::replay`], with the sequence number just past the last record it took.
    pub fn replay_to<'a>(
        &self,
        record: impl Fn(u64) -> &'a [u8],
        everything: bool,
    ) -> Result<(Vec<(u64, u64)>, u64), Corruption> {
        let mut words = Vec::new();
        let mut commit = Vec::new();
        let mut seq = self.applied;
        let mut end = seq;
        loop {
            if !everything && seq == self.durable {
                break;
            }
            if seq - self.applied >= self.capacity() {
                break;
            }
            let Some((off, value, last)) = self.decode_record(record(seq), seq) else {
                if !everything {
                    return Err(Corruption::Invalid(format!(
                        "page-media ring: durable record {seq} is missing"
                    )));
                }
                break;
            };
            commit.push((off, value));
            seq += 1;
            if last {
                words.append(&mut commit);
                end = seq;
            }
        }
        if !everything && !commit.is_empty() {
            return Err(Corruption::Invalid(
                "page-media ring: the durable records end inside a commit".into(),
            ));
        }
        Ok((words, end))
    }
}

fn record_crc(nonce: u64, head: &[u8], flags: u32) -> u32 {
    let c = crc32c::crc32c(&nonce.to_le_bytes());
    let c = crc32c::crc32c_append(c, head);
    crc32c::crc32c_append(c, &flags.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchor() -> Anchor {
        Anchor {
            identity: 9,
            nonce: 77,
            ring_block: 100,
            ring_blocks: 1,
            applied: 3,
            durable: 6,
        }
    }

    #[test]
    fn anchors_and_records_round_trip_and_reject_others() {
        let sb = Superblock::for_region(64 << 20, [7; 16]);
        let a = anchor();
        let mut block = vec![0u8; BLOCK as usize];
        block[..64].copy_from_slice(&a.encode());
        assert_eq!(Anchor::decode(&block, &sb), Some(a));
        block[20] ^= 1;
        assert_eq!(Anchor::decode(&block, &sb), None);
        let r = a.encode_record(5, 4096, 42, true);
        assert_eq!(a.decode_record(&r, 5), Some((4096, 42, true)));
        assert_eq!(a.decode_record(&r, 5 + a.capacity()), None, "a lap ago");
        let other = Anchor { nonce: 78, ..a };
        assert_eq!(other.decode_record(&r, 5), None, "another mount's record");
    }

    #[test]
    fn replay_takes_whole_commits_only() {
        let a = anchor();
        let mut ring = vec![0u8; BLOCK as usize];
        let mut put = |seq: u64, off: u64, v: u64, last: bool| {
            let at = ((seq % a.capacity()) * RECORD) as usize;
            ring[at..at + 32].copy_from_slice(&a.encode_record(seq, off, v, last));
        };
        put(3, 8, 1, true);
        put(4, 16, 2, false);
        put(5, 24, 3, true);
        put(6, 32, 4, false); // a commit cut by the crash
        let rec = |s: u64| {
            let at = ((s % a.capacity()) * RECORD) as usize;
            &ring[at..at + 32]
        };
        assert_eq!(
            a.replay(rec, false).unwrap(),
            vec![(8, 1), (16, 2), (24, 3)]
        );
        assert_eq!(a.replay(rec, true).unwrap(), vec![(8, 1), (16, 2), (24, 3)]);
        let short = Anchor { durable: 7, ..a };
        assert!(short.replay(rec, false).is_err(), "durable records missing");
    }
}
