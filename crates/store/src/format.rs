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

use crate::error::Corruption;

/// Block size in bytes.
pub const BLOCK: u64 = 4096;
/// Format version this build writes.
///
/// - 4: the inode slot's generation word, FIFO, socket and device inodes (`Attr::parent`
///   holds a device's number).
/// - 3: the oldest this build reads. A version 3 store is a valid version 4 store (its
///   generations are zero and it has no special files), so mounting one upgrades it in place
///   by writing the superblock with version 4; a version 3 build then refuses it as newer.
pub const VERSION: u32 = 4;
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

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
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

/// Inode attributes, as recorded by an Attr entry (and updated by Write entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attr {
    /// Type and permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Hard links (directories: 2 + subdirectories).
    pub nlink: u32,
    /// Size in bytes.
    pub size: u64,
    /// Access time, ns since the epoch.
    pub atime: i64,
    /// Modification time, ns since the epoch.
    pub mtime: i64,
    /// Status change time, ns since the epoch.
    pub ctime: i64,
    /// Parent directory for a directory (the root is its own parent); the device number
    /// (`rdev`) for a character or block device; 0 for everything else.
    pub parent: u64,
}

impl Attr {
    /// The file type bits.
    pub fn kind(&self) -> u32 {
        self.mode & S_IFMT
    }

    /// The device number of a device node (0 for every other type).
    pub fn rdev(&self) -> u64 {
        if matches!(self.kind(), S_IFCHR | S_IFBLK) {
            self.parent
        } else {
            0
        }
    }
}

/// The engine copy an orderless write entry depends on (EasyIO's SN: channel, position, and
/// the mount whose engine numbered it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seq {
    /// The superblock's mount_count when the entry was written.
    pub generation: u64,
    /// Engine channel.
    pub channel: u32,
    /// The batch's position in the channel.
    pub position: u64,
}

/// One log entry, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A full attribute snapshot; the last one wins.
    Attr(Attr),
    /// `count` pages from `pgoff` now live in blocks `block..block + count`.
    Write {
        /// First file page.
        pgoff: u64,
        /// First block.
        block: u64,
        /// Pages.
        count: u64,
        /// File size after the write.
        size: u64,
        /// Modification time after the write.
        mtime: i64,
        /// For an orderless write, the engine copy that must complete for the entry to count.
        seq: Option<Seq>,
    },
    /// Name → inode in a directory (replaces an existing name).
    DirAdd {
        /// Target inode.
        ino: u64,
        /// Target type (`mode >> 12`).
        ftype: u8,
        /// Name bytes.
        name: Vec<u8>,
    },
    /// Name removed from a directory.
    DirRemove {
        /// Name bytes.
        name: Vec<u8>,
    },
    /// Extended attribute `name` now holds `value` (replacing what it held).
    XattrSet {
        /// Full name, namespace prefix included (`user.x`).
        name: Vec<u8>,
        /// Value bytes (at most [`XATTR_VALUE_MAX`]).
        value: Vec<u8>,
    },
    /// Extended attribute `name` removed.
    XattrRemove {
        /// Full name.
        name: Vec<u8>,
    },
    /// `count` pages from `pgoff` are holes now (their blocks are freed; they read as zeros).
    Punch {
        /// First file page.
        pgoff: u64,
        /// Pages.
        count: u64,
    },
}

fn finish(mut b: Vec<u8>, kind: u8) -> Vec<u8> {
    b.resize(b.len().div_ceil(8) * 8, 0);
    b[0] = kind;
    let len = b.len() as u16;
    b[2..4].copy_from_slice(&len.to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b[4..8].copy_from_slice(&crc.to_le_bytes());
    b
}

impl Entry {
    /// Encodes with header and checksum.
    pub fn encode(&self) -> Vec<u8> {
        // One allocation of the final size (the write path encodes an entry per write).
        let name_len = match self {
            Entry::DirAdd { name, .. } | Entry::DirRemove { name } => name.len(),
            Entry::XattrSet { name, value } => name.len() + value.len(),
            Entry::XattrRemove { name } => name.len(),
            _ => 0,
        };
        let mut b = Vec::with_capacity((64 + name_len).div_ceil(8) * 8);
        b.extend_from_slice(&[0u8; 8]);
        match self {
            Entry::Attr(a) => {
                for v in [a.mode, a.uid, a.gid, a.nlink] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
                b.extend_from_slice(&a.size.to_le_bytes());
                for v in [a.atime, a.mtime, a.ctime] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
                b.extend_from_slice(&a.parent.to_le_bytes());
                finish(b, KIND_ATTR)
            }
            Entry::Write {
                pgoff,
                block,
                count,
                size,
                mtime,
                seq,
            } => {
                for v in [*pgoff, *block, *count, *size] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
                b.extend_from_slice(&mtime.to_le_bytes());
                match seq {
                    None => finish(b, KIND_WRITE),
                    Some(s) => {
                        b.extend_from_slice(&s.generation.to_le_bytes());
                        b.extend_from_slice(&s.channel.to_le_bytes());
                        b.extend_from_slice(&[0; 4]);
                        b.extend_from_slice(&s.position.to_le_bytes());
                        finish(b, KIND_WRITE_SEQ)
                    }
                }
            }
            Entry::DirAdd { ino, ftype, name } => {
                b.extend_from_slice(&ino.to_le_bytes());
                b.push(*ftype);
                b.push(name.len() as u8);
                b.extend_from_slice(&[0; 6]);
                b.extend_from_slice(name);
                finish(b, KIND_DIR_ADD)
            }
            Entry::DirRemove { name } => {
                b.push(name.len() as u8);
                b.extend_from_slice(&[0; 7]);
                b.extend_from_slice(name);
                finish(b, KIND_DIR_REMOVE)
            }
            Entry::XattrSet { name, value } => {
                b.push(name.len() as u8);
                b.push(0);
                b.extend_from_slice(&(value.len() as u16).to_le_bytes());
                b.extend_from_slice(&[0; 4]);
                b.extend_from_slice(name);
                b.extend_from_slice(value);
                finish(b, KIND_XATTR_SET)
            }
            Entry::XattrRemove { name } => {
                b.push(name.len() as u8);
                b.extend_from_slice(&[0; 7]);
                b.extend_from_slice(name);
                finish(b, KIND_XATTR_REMOVE)
            }
            Entry::Punch { pgoff, count } => {
                b.extend_from_slice(&pgoff.to_le_bytes());
                b.extend_from_slice(&count.to_le_bytes());
                finish(b, KIND_PUNCH)
            }
        }
    }

    /// Decodes the entry at the start of `b` (which runs to the end of its page). Returns the
    /// entry and its length, `Ok(None)` at a terminator (zero kind byte or no room for a
    /// header), or an error for a damaged entry.
    pub fn decode(b: &[u8]) -> Result<Option<(Entry, usize)>, Corruption> {
        if b.len() < 8 || b[0] == 0 {
            return Ok(None);
        }
        let len = u16::from_le_bytes([b[2], b[3]]) as usize;
        if len < 8 || !len.is_multiple_of(8) || len > b.len() {
            return Err(Corruption::Invalid(format!("log entry length {len}")));
        }
        let mut copy = b[..len].to_vec();
        copy[4..8].fill(0);
        if crc32c::crc32c(&copy) != le32(b, 4) {
            return Err(Corruption::BadChecksum("log entry"));
        }
        let e = &b[..len];
        let need = |n: usize| {
            if len < n {
                Err(Corruption::Invalid(format!(
                    "log entry kind {} too short",
                    e[0]
                )))
            } else {
                Ok(())
            }
        };
        let entry = match e[0] {
            KIND_ATTR => {
                need(64)?;
                Entry::Attr(Attr {
                    mode: le32(e, 8),
                    uid: le32(e, 12),
                    gid: le32(e, 16),
                    nlink: le32(e, 20),
                    size: le64(e, 24),
                    atime: le64(e, 32) as i64,
                    mtime: le64(e, 40) as i64,
                    ctime: le64(e, 48) as i64,
                    parent: le64(e, 56),
                })
            }
            KIND_WRITE | KIND_WRITE_SEQ => {
                let seq = e[0] == KIND_WRITE_SEQ;
                need(if seq { 72 } else { 48 })?;
                Entry::Write {
                    pgoff: le64(e, 8),
                    block: le64(e, 16),
                    count: le64(e, 24),
                    size: le64(e, 32),
                    mtime: le64(e, 40) as i64,
                    seq: seq.then(|| Seq {
                        generation: le64(e, 48),
                        channel: le32(e, 56),
                        position: le64(e, 64),
                    }),
                }
            }
            KIND_DIR_ADD => {
                need(24)?;
                let n = e[17] as usize;
                need(24 + n)?;
                Entry::DirAdd {
                    ino: le64(e, 8),
                    ftype: e[16],
                    name: e[24..24 + n].to_vec(),
                }
            }
            KIND_DIR_REMOVE => {
                need(16)?;
                let n = e[8] as usize;
                need(16 + n)?;
                Entry::DirRemove {
                    name: e[16..16 + n].to_vec(),
                }
            }
            KIND_XATTR_SET => {
                need(16)?;
                let n = e[8] as usize;
                let v = u16::from_le_bytes([e[10], e[11]]) as usize;
                need(16 + n + v)?;
                if n == 0 || v > XATTR_VALUE_MAX {
                    return Err(Corruption::Invalid("extended attribute entry".into()));
                }
                Entry::XattrSet {
                    name: e[16..16 + n].to_vec(),
                    value: e[16 + n..16 + n + v].to_vec(),
                }
            }
            KIND_XATTR_REMOVE => {
                need(16)?;
                let n = e[8] as usize;
                need(16 + n)?;
                Entry::XattrRemove {
                    name: e[16..16 + n].to_vec(),
                }
            }
            KIND_PUNCH => {
                need(24)?;
                Entry::Punch {
                    pgoff: le64(e, 8),
                    count: le64(e, 16),
                }
            }
            k => return Err(Corruption::Invalid(format!("log entry kind {k}"))),
        };
        Ok(Some((entry, len)))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
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
