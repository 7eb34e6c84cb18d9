//! Log entries: the inode attributes, the engine copy an orderless write names, and every
//! entry kind with its encoding.

use super::{
    le32, le64, KIND_ATTR, KIND_DIR_ADD, KIND_DIR_REMOVE, KIND_PUNCH, KIND_WRITE, KIND_WRITE_SEQ,
    KIND_XATTR_REMOVE, KIND_XATTR_SET, S_IFBLK, S_IFCHR, S_IFMT, XATTR_VALUE_MAX,
};
use crate::error::Corruption;

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
            Entry::DirAdd { .. }
            | Entry::DirRemove { .. }
            | Entry::XattrSet { .. }
            | Entry::XattrRemove { .. } => self.encode_named(b),
            Entry::Punch { pgoff, count } => {
                b.extend_from_slice(&pgoff.to_le_bytes());
                b.extend_from_slice(&count.to_le_bytes());
                finish(b, KIND_PUNCH)
            }
        }
    }

    /// Encodes an entry that carries a name after the 8-byte header already in `b`.
    fn encode_named(&self, mut b: Vec<u8>) -> Vec<u8> {
        match self {
            Entry::DirAdd { ino, ftype, name } => {
                b.extend_from_slice(&ino.to_le_bytes());
                b.push(*ftype);
                b.push(name.len() as u8);
                b.extend_from_slice(&[0; 6]);
                b.extend_from_slice(name);
                finish(b, KIND_DIR_ADD)
            }
            Entry::DirRemove { name } | Entry::XattrRemove { name } => {
                // The same layout: a name length, padding, the name.
                b.push(name.len() as u8);
                b.extend_from_slice(&[0; 7]);
                b.extend_from_slice(name);
                let kind = match self {
                    Entry::DirRemove { .. } => KIND_DIR_REMOVE,
                    _ => KIND_XATTR_REMOVE,
                };
                finish(b, kind)
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
            _ => unreachable!("only named entries are encoded here"),
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
        Ok(Some((decode_body(&b[..len])?, len)))
    }
}

/// Checks that entry `e` holds at least `n` bytes.
fn need(e: &[u8], n: usize) -> Result<(), Corruption> {
    if e.len() < n {
        return Err(Corruption::Invalid(format!(
            "log entry kind {} too short",
            e[0]
        )));
    }
    Ok(())
}

/// Decodes the body of entry `e` (whole, checksum checked) by its kind.
fn decode_body(e: &[u8]) -> Result<Entry, Corruption> {
    Ok(match e[0] {
        KIND_ATTR => {
            need(e, 64)?;
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
            need(e, if seq { 72 } else { 48 })?;
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
        KIND_PUNCH => {
            need(e, 24)?;
            Entry::Punch {
                pgoff: le64(e, 8),
                count: le64(e, 16),
            }
        }
        KIND_DIR_ADD | KIND_DIR_REMOVE | KIND_XATTR_SET | KIND_XATTR_REMOVE => decode_named(e)?,
        k => return Err(Corruption::Invalid(format!("log entry kind {k}"))),
    })
}

/// Decodes an entry that carries a name (directory entries, extended attributes).
fn decode_named(e: &[u8]) -> Result<Entry, Corruption> {
    let name_at = if e[0] == KIND_DIR_ADD { 24 } else { 16 };
    need(e, name_at)?;
    let n = e[if e[0] == KIND_DIR_ADD { 17 } else { 8 }] as usize;
    let value_len = if e[0] == KIND_XATTR_SET {
        u16::from_le_bytes([e[10], e[11]]) as usize
    } else {
        0
    };
    need(e, name_at + n + value_len)?;
    let name = e[name_at..name_at + n].to_vec();
    Ok(match e[0] {
        KIND_DIR_ADD => Entry::DirAdd {
            ino: le64(e, 8),
            ftype: e[16],
            name,
        },
        KIND_DIR_REMOVE => Entry::DirRemove { name },
        KIND_XATTR_SET => {
            if n == 0 || value_len > XATTR_VALUE_MAX {
                return Err(Corruption::Invalid("extended attribute entry".into()));
            }
            Entry::XattrSet {
                name,
                value: e[name_at + n..name_at + n + value_len].to_vec(),
            }
        }
        _ => Entry::XattrRemove { name },
    })
}
