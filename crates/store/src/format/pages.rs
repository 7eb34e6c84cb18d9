//! Log page headers, free-space checkpoint pages and the undo journal.

use super::{
    le32, le64, BLOCK, CHECKPOINT_CAPACITY, CHECKPOINT_EXTENTS_AT, CHECKPOINT_MAGIC,
    JOURNAL_CAPACITY, JOURNAL_ENTRIES_AT, JOURNAL_MAGIC, LOG_MAGIC,
};
use crate::error::Corruption;

/// A log page header for inode `ino`.
pub fn log_page_header(ino: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[0..4].copy_from_slice(&LOG_MAGIC.to_le_bytes());
    b[8..16].copy_from_slice(&ino.to_le_bytes());
    let crc = crc32c::crc32c(&b[..16]);
    b[24..28].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Validates a log page header: it must belong to `ino`. Returns the `next` block.
pub fn check_log_page(b: &[u8], ino: u64) -> Result<u64, Corruption> {
    if b.len() < 64 || le32(b, 0) != LOG_MAGIC || le32(b, 24) != crc32c::crc32c(&b[..16]) {
        return Err(Corruption::BadChecksum("log page header"));
    }
    if le64(b, 8) != ino {
        return Err(Corruption::Invalid(format!(
            "log page of inode {} found in inode {ino}'s log",
            le64(b, 8)
        )));
    }
    Ok(le64(b, 16))
}

/// Encodes one checkpoint page: `extents` (at most [`CHECKPOINT_CAPACITY`]) as
/// (first block, blocks) pairs, then the link to the `next` page.
pub fn encode_checkpoint_page(extents: &[(u64, u64)], next: u64, mount_count: u64) -> Vec<u8> {
    assert!(extents.len() <= CHECKPOINT_CAPACITY);
    let mut b = vec![0u8; BLOCK as usize];
    b[0..4].copy_from_slice(&CHECKPOINT_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&(extents.len() as u32).to_le_bytes());
    b[8..16].copy_from_slice(&next.to_le_bytes());
    b[16..24].copy_from_slice(&mount_count.to_le_bytes());
    for (i, (start, len)) in extents.iter().enumerate() {
        let at = CHECKPOINT_EXTENTS_AT as usize + 16 * i;
        b[at..at + 8].copy_from_slice(&start.to_le_bytes());
        b[at + 8..at + 16].copy_from_slice(&len.to_le_bytes());
    }
    let crc = checkpoint_crc(&b, extents.len());
    b[24..28].copy_from_slice(&crc.to_le_bytes());
    b
}

fn checkpoint_crc(b: &[u8], count: usize) -> u32 {
    let at = CHECKPOINT_EXTENTS_AT as usize;
    crc32c::crc32c_append(crc32c::crc32c(&b[..24]), &b[at..at + 16 * count])
}

/// Decodes one checkpoint page written for `mount_count`: its extents and the next page.
pub fn decode_checkpoint_page(
    b: &[u8],
    mount_count: u64,
) -> Result<(Vec<(u64, u64)>, u64), Corruption> {
    let bad = || Corruption::BadChecksum("free-space checkpoint");
    if b.len() < BLOCK as usize || le32(b, 0) != CHECKPOINT_MAGIC {
        return Err(bad());
    }
    let count = le32(b, 4) as usize;
    if count > CHECKPOINT_CAPACITY || le32(b, 24) != checkpoint_crc(b, count) {
        return Err(bad());
    }
    if le64(b, 16) != mount_count {
        return Err(Corruption::Invalid(
            "free-space checkpoint of another mount".into(),
        ));
    }
    let extents = (0..count)
        .map(|i| {
            let at = CHECKPOINT_EXTENTS_AT as usize + 16 * i;
            (le64(b, at), le64(b, at + 8))
        })
        .collect();
    Ok((extents, le64(b, 8)))
}

/// Encodes a journal: word 0, seq, crc, then the (offset, old value) pairs.
pub fn encode_journal(seq: u64, words: &[(u64, u64)]) -> Vec<u8> {
    let mut b = vec![0u8; JOURNAL_ENTRIES_AT as usize + 16 * words.len()];
    let w0 = u64::from(JOURNAL_MAGIC) | (words.len() as u64) << 32;
    b[0..8].copy_from_slice(&w0.to_le_bytes());
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    for (i, (off, old)) in words.iter().enumerate() {
        let at = JOURNAL_ENTRIES_AT as usize + 16 * i;
        b[at..at + 8].copy_from_slice(&off.to_le_bytes());
        b[at + 8..at + 16].copy_from_slice(&old.to_le_bytes());
    }
    let crc = journal_crc(&b);
    b[16..20].copy_from_slice(&crc.to_le_bytes());
    b
}

fn journal_crc(b: &[u8]) -> u32 {
    let mut c = crc32c::crc32c(&b[..16]);
    c = crc32c::crc32c_append(c, &b[JOURNAL_ENTRIES_AT as usize..]);
    c
}

/// Decodes a journal block: the words to restore if a transaction was in flight, else empty.
/// A count whose checksum does not match was never committed (the count is written in the
/// same line as the checksum, after the entries are durable), so it is ignored.
pub fn decode_journal(block: &[u8]) -> Vec<(u64, u64)> {
    let w0 = le64(block, 0);
    let count = (w0 >> 32) as usize;
    if w0 as u32 != JOURNAL_MAGIC || count == 0 || count > JOURNAL_CAPACITY {
        return Vec::new();
    }
    let end = JOURNAL_ENTRIES_AT as usize + 16 * count;
    let mut b = block[..end].to_vec();
    let crc = le32(&b, 16);
    b[16..20].fill(0);
    if journal_crc(&b) != crc {
        return Vec::new();
    }
    (0..count)
        .map(|i| {
            let at = JOURNAL_ENTRIES_AT as usize + 16 * i;
            (le64(block, at), le64(block, at + 8))
        })
        .collect()
}
