//! The superblock: the store's geometry, version, clean flag and mount count, in two copies.

use super::{le32, le64, BLOCK, OLDEST_VERSION, SB_CRC_AT, SB_MAGIC, SLOT, VERSION};
use crate::error::Corruption;

/// The geometry a superblock describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    /// Region size in blocks.
    pub total_blocks: u64,
    /// First block of the inode table.
    pub inode_table_block: u64,
    /// Number of inode slots (slot 0 unused).
    pub inode_slots: u64,
    /// The journal's block.
    pub journal_block: u64,
    /// The block of durable completion records, one line per engine channel.
    pub completion_block: u64,
    /// First block of the data zone.
    pub data_block: u64,
    /// Identity of this store.
    pub uuid: [u8; 16],
    /// Set by a clean unmount, cleared by mount.
    pub clean: bool,
    /// Number of mounts so far.
    pub mount_count: u64,
    /// First block of the free-space checkpoint a clean unmount wrote (0 = none). Only
    /// meaningful while `clean` is set.
    pub checkpoint: u64,
}

impl Superblock {
    /// The geometry for a region of `len` bytes: one inode per 16 KiB (at least 64), the
    /// table rounded up to whole blocks.
    pub fn for_region(len: u64, uuid: [u8; 16]) -> Superblock {
        let total_blocks = len / BLOCK;
        let slots = (len / (16 << 10)).max(64);
        let table_blocks = (slots * SLOT).div_ceil(BLOCK);
        let inode_slots = table_blocks * BLOCK / SLOT;
        Superblock {
            total_blocks,
            inode_table_block: 4,
            inode_slots,
            journal_block: 2,
            completion_block: 3,
            data_block: 4 + table_blocks,
            uuid,
            clean: true,
            mount_count: 0,
            checkpoint: 0,
        }
    }

    /// Encodes into the first 128 bytes of a block, checksum included.
    pub fn encode(&self) -> [u8; 128] {
        let mut b = [0u8; 128];
        b[0..8].copy_from_slice(&SB_MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(BLOCK as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.total_blocks.to_le_bytes());
        b[24..32].copy_from_slice(&self.inode_table_block.to_le_bytes());
        b[32..40].copy_from_slice(&self.inode_slots.to_le_bytes());
        b[40..48].copy_from_slice(&self.journal_block.to_le_bytes());
        b[48..56].copy_from_slice(&self.data_block.to_le_bytes());
        b[56..72].copy_from_slice(&self.uuid);
        b[72..76].copy_from_slice(&u32::from(self.clean).to_le_bytes());
        b[80..88].copy_from_slice(&self.mount_count.to_le_bytes());
        b[88..96].copy_from_slice(&self.checkpoint.to_le_bytes());
        b[96..104].copy_from_slice(&self.completion_block.to_le_bytes());
        let crc = crc32c::crc32c(&b[..SB_CRC_AT]);
        b[SB_CRC_AT..SB_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and validates a superblock copy found in a region of `region_len` bytes.
    pub fn decode(b: &[u8], region_len: u64) -> Result<Superblock, Corruption> {
        if b.len() < 128 || b[0..8] != SB_MAGIC {
            return Err(Corruption::NotFormatted);
        }
        // The version comes first: another version may keep its checksum elsewhere.
        let version = le32(b, 8);
        if version > VERSION {
            return Err(Corruption::NewerVersion {
                found: version,
                supported: VERSION,
            });
        }
        if version < OLDEST_VERSION {
            return Err(Corruption::Invalid(format!(
                "format version {version} predates the oldest this build reads \
                 ({OLDEST_VERSION})"
            )));
        }
        let crc = le32(b, SB_CRC_AT);
        if crc != crc32c::crc32c(&b[..SB_CRC_AT]) {
            return Err(Corruption::BadChecksum("superblock"));
        }
        if le32(b, 12) != BLOCK as u32 {
            return Err(Corruption::Invalid(
                "superblock version or block size".into(),
            ));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[56..72]);
        let sb = Superblock {
            total_blocks: le64(b, 16),
            inode_table_block: le64(b, 24),
            inode_slots: le64(b, 32),
            journal_block: le64(b, 40),
            completion_block: le64(b, 96),
            data_block: le64(b, 48),
            uuid,
            clean: le32(b, 72) == 1,
            mount_count: le64(b, 80),
            checkpoint: le64(b, 88),
        };
        let expect = Superblock::for_region(sb.total_blocks * BLOCK, uuid);
        if sb.total_blocks * BLOCK > region_len {
            return Err(Corruption::Truncated {
                expected: sb.total_blocks * BLOCK,
                actual: region_len,
            });
        }
        if (
            sb.inode_table_block,
            sb.inode_slots,
            sb.journal_block,
            sb.completion_block,
            sb.data_block,
        ) != (
            expect.inode_table_block,
            expect.inode_slots,
            expect.journal_block,
            expect.completion_block,
            expect.data_block,
        ) || sb.data_block >= sb.total_blocks
        {
            return Err(Corruption::Invalid("superblock geometry".into()));
        }
        Ok(sb)
    }

    /// Region offset of inode slot `ino`.
    pub fn slot_offset(&self, ino: u64) -> u64 {
        self.inode_table_block * BLOCK + ino * SLOT
    }

    /// Whether `block` lies in the data zone.
    pub fn is_data(&self, block: u64) -> bool {
        block >= self.data_block && block < self.total_blocks
    }
}
