//! Encoding and decoding of [`Request`].

use switchyard_store::SetAttr;

use super::wire::{R, W};
use super::{Malformed, Request};

fn opt_i64(v: Option<i64>) -> Option<u64> {
    v.map(|x| x as u64)
}

/// [`Request::Write`]'s kind byte, and the bytes before its data: kind, sequence number,
/// inode, offset, length.
const WRITE_KIND: u8 = 20;
const WRITE_HEAD: usize = 1 + 8 + 8 + 8 + 4;

impl Request {
    /// The encoded `Write` of `data` at `off` of `ino`, as request `seq`: the same message
    /// as `Request::Write { .. }.encode(seq)`, built from the borrowed data (one copy).
    pub fn encode_write(seq: u64, ino: u64, off: u64, data: &[u8]) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(WRITE_HEAD + data.len()));
        w.u8(WRITE_KIND).u64(seq).u64(ino).u64(off).bytes(data);
        w.0
    }

    /// The sequence number, inode, offset and data of an encoded `Write`, borrowed from `b`
    /// (no copy); `None` if `b` is anything else (decode it with [`Request::decode`]).
    pub fn write_of(b: &[u8]) -> Option<(u64, u64, u64, &[u8])> {
        if b.len() < WRITE_HEAD || b[0] != WRITE_KIND {
            return None;
        }
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let n = u32::from_le_bytes(b[25..29].try_into().ok()?) as usize;
        (n == b.len() - WRITE_HEAD && n <= super::MAX_BYTES)
            .then(|| (word(1), word(9), word(17), &b[WRITE_HEAD..]))
    }

    /// The request's kind byte.
    fn kind(&self) -> u8 {
        match self {
            Request::Auth { .. } => 1,
            Request::Lookup { .. } => 2,
            Request::Getattr { .. } => 3,
            Request::Readdir { .. } => 4,
            Request::Make { .. } => 5,
            Request::Link { .. } => 6,
            Request::Remove { .. } => 7,
            Request::Rename { .. } => 8,
            Request::Readlink { .. } => 9,
            Request::Setattr { .. } => 10,
            Request::Open { .. } => 11,
            Request::Close { .. } => 12,
            Request::Fsync { .. } => 13,
            Request::Statfs => 14,
            Request::Map { .. } => 15,
            Request::Read { .. } => 16,
            Request::Prepare { .. } => 17,
            Request::Commit { .. } => 18,
            Request::Abort { .. } => 19,
            Request::Write { .. } => WRITE_KIND,
            Request::Forget { .. } => 21,
            Request::Append { .. } => 22,
            Request::Fallocate { .. } => 23,
            Request::Setxattr { .. } => 24,
            Request::Getxattr { .. } => 25,
            Request::Listxattr { .. } => 26,
            Request::Removexattr { .. } => 27,
            Request::Counters => 28,
            Request::Lock { .. } => 29,
            Request::TestLock { .. } => 30,
            Request::Unlock { .. } => 31,
            Request::Attach { .. } => 32,
            Request::Pull { .. } => 33,
            Request::Sync => 34,
            Request::Seek { .. } => 35,
            Request::Hold { .. } => 36,
        }
    }

    /// The encoded request with sequence number `seq`.
    pub fn encode(&self, seq: u64) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(64));
        w.u8(self.kind()).u64(seq);
        match self {
            Request::Map { .. }
            | Request::Read { .. }
            | Request::Prepare { .. }
            | Request::Commit { .. }
            | Request::Abort { .. }
            | Request::Write { .. }
            | Request::Append { .. }
            | Request::Fallocate { .. }
            | Request::Attach { .. }
            | Request::Pull { .. }
            | Request::Seek { .. } => self.encode_data(&mut w),
            Request::Setxattr { .. }
            | Request::Getxattr { .. }
            | Request::Removexattr { .. }
            | Request::Lock { .. }
            | Request::TestLock { .. }
            | Request::Unlock { .. } => self.encode_attributes_and_locks(&mut w),
            _ => self.encode_metadata(&mut w),
        }
        w.0
    }

    /// Encodes the fields of a request about names, attributes, opens and the store.
    fn encode_metadata(&self, w: &mut W) {
        match self {
            Request::Auth { mac, write, uid } => {
                w.0.extend_from_slice(mac);
                w.u8(*write as u8).u32(*uid);
            }
            Request::Lookup { parent, name, hold } => {
                w.u64(*parent).bytes(name).u8(*hold as u8);
            }
            Request::Getattr { ino }
            | Request::Readdir { ino }
            | Request::Readlink { ino }
            | Request::Open { ino }
            | Request::Close { ino }
            | Request::Fsync { ino }
            | Request::Listxattr { ino } => {
                w.u64(*ino);
            }
            Request::Make {
                parent,
                name,
                mode,
                rdev,
                target,
                uid,
                gid,
                umask,
                hold,
            } => {
                w.u64(*parent)
                    .bytes(name)
                    .u32(*mode)
                    .u64(*rdev)
                    .bytes(target);
                w.u32(*uid).u32(*gid).u32(*umask).u8(*hold as u8);
            }
            Request::Link {
                ino,
                parent,
                name,
                hold,
            } => {
                w.u64(*ino).u64(*parent).bytes(name).u8(*hold as u8);
            }
            Request::Remove { parent, name, dir } => {
                w.u64(*parent).bytes(name).u8(*dir as u8);
            }
            Request::Rename {
                parent,
                name,
                new_parent,
                new_name,
                how,
            } => {
                w.u64(*parent).bytes(name).u64(*new_parent).bytes(new_name);
                w.rename(*how);
            }
            Request::Setattr { ino, set } => {
                w.u64(*ino);
                w.opt_u64(set.mode.map(u64::from))
                    .opt_u64(set.uid.map(u64::from))
                    .opt_u64(set.gid.map(u64::from))
                    .opt_u64(set.size)
                    .opt_u64(opt_i64(set.atime))
                    .opt_u64(opt_i64(set.mtime));
            }
            Request::Statfs | Request::Counters | Request::Sync => {}
            Request::Forget { ino, n } => {
                w.u64(*ino).u64(*n);
            }
            Request::Hold { ino, generation } => {
                w.u64(*ino).u64(*generation);
            }
            _ => unreachable!("encoded by another family's function"),
        }
    }

    /// Encodes the fields of a request about file data.
    fn encode_data(&self, w: &mut W) {
        match self {
            Request::Map { ino, off, len }
            | Request::Read { ino, off, len }
            | Request::Prepare { ino, off, len } => {
                w.u64(*ino).u64(*off).u64(*len);
            }
            Request::Commit { id } | Request::Abort { id } => {
                w.u64(*id);
            }
            Request::Write { ino, off, data } => {
                w.u64(*ino).u64(*off).bytes(data);
            }
            Request::Append { ino, data } => {
                w.u64(*ino).bytes(data);
            }
            Request::Fallocate { ino, off, len, how } => {
                w.u64(*ino).u64(*off).u64(*len).falloc(*how);
            }
            Request::Attach { address } => {
                w.bytes(address);
            }
            Request::Pull {
                token,
                ino,
                change,
                ranges,
            } => {
                w.0.extend_from_slice(token);
                w.u64(*ino).u64(*change).u32(ranges.len() as u32);
                for (off, len) in ranges {
                    w.u64(*off).u64(*len);
                }
            }
            Request::Seek { ino, off, to } => {
                w.u64(*ino).u64(*off).seek(*to);
            }
            _ => unreachable!("encoded by another family's function"),
        }
    }

    /// Encodes the fields of a request about extended attributes or record locks.
    fn encode_attributes_and_locks(&self, w: &mut W) {
        match self {
            Request::Setxattr {
                ino,
                name,
                value,
                mode,
            } => {
                w.u64(*ino).bytes(name).bytes(value).xattr_mode(*mode);
            }
            Request::Getxattr { ino, name } | Request::Removexattr { ino, name } => {
                w.u64(*ino).bytes(name);
            }
            Request::Lock {
                ino,
                owner,
                lock,
                wait,
            } => {
                w.u64(*ino).u64(*owner).lock(lock).u8(*wait as u8);
            }
            Request::TestLock { ino, owner, lock } => {
                w.u64(*ino).u64(*owner).lock(lock);
            }
            Request::Unlock { ino, owner } => {
                w.u64(*ino).u64(*owner);
            }
            _ => unreachable!("encoded by another family's function"),
        }
    }

    /// Decodes a request and its sequence number.
    pub fn decode(b: &[u8]) -> Result<(u64, Request), Malformed> {
        let mut r = R { b };
        let kind = r.u8()?;
        let seq = r.u64()?;
        let req = match kind {
            15..=20 | 22 | 23 | 32 | 33 | 35 => decode_data(kind, &mut r)?,
            24..=27 | 29..=31 => decode_attributes_and_locks(kind, &mut r)?,
            _ => decode_metadata(kind, &mut r)?,
        };
        r.end((seq, req))
    }

    /// Whether the request changes the store (refused to read-only clients).
    pub fn mutates(&self) -> bool {
        matches!(
            self,
            Request::Make { .. }
                | Request::Link { .. }
                | Request::Remove { .. }
                | Request::Rename { .. }
                | Request::Setattr { .. }
                | Request::Prepare { .. }
                | Request::Commit { .. }
                | Request::Write { .. }
                | Request::Append { .. }
                | Request::Fallocate { .. }
                | Request::Setxattr { .. }
                | Request::Removexattr { .. }
        )
    }
}

/// Decodes the fields of a request (kind `kind`) about names, attributes, opens and the store.
fn decode_metadata(kind: u8, r: &mut R<'_>) -> Result<Request, Malformed> {
    let small = |v: Option<u64>| v.map(|x| u32::try_from(x).map_err(|_| Malformed));
    Ok(match kind {
        1 => Request::Auth {
            mac: r.array32()?,
            write: r.bool()?,
            uid: r.u32()?,
        },
        2 => Request::Lookup {
            parent: r.u64()?,
            name: r.bytes()?,
            hold: r.bool()?,
        },
        3 => Request::Getattr { ino: r.u64()? },
        4 => Request::Readdir { ino: r.u64()? },
        5 => Request::Make {
            parent: r.u64()?,
            name: r.bytes()?,
            mode: r.u32()?,
            rdev: r.u64()?,
            target: r.bytes()?,
            uid: r.u32()?,
            gid: r.u32()?,
            umask: r.u32()?,
            hold: r.bool()?,
        },
        6 => Request::Link {
            ino: r.u64()?,
            parent: r.u64()?,
            name: r.bytes()?,
            hold: r.bool()?,
        },
        7 => Request::Remove {
            parent: r.u64()?,
            name: r.bytes()?,
            dir: r.bool()?,
        },
        8 => Request::Rename {
            parent: r.u64()?,
            name: r.bytes()?,
            new_parent: r.u64()?,
            new_name: r.bytes()?,
            how: r.rename()?,
        },
        9 => Request::Readlink { ino: r.u64()? },
        10 => {
            let ino = r.u64()?;
            let set = SetAttr {
                mode: small(r.opt_u64()?).transpose()?,
                uid: small(r.opt_u64()?).transpose()?,
                gid: small(r.opt_u64()?).transpose()?,
                size: r.opt_u64()?,
                atime: r.opt_u64()?.map(|x| x as i64),
                mtime: r.opt_u64()?.map(|x| x as i64),
            };
            Request::Setattr { ino, set }
        }
        11 => Request::Open { ino: r.u64()? },
        12 => Request::Close { ino: r.u64()? },
        13 => Request::Fsync { ino: r.u64()? },
        14 => Request::Statfs,
        34 => Request::Sync,
        21 => Request::Forget {
            ino: r.u64()?,
            n: r.u64()?,
        },
        28 => Request::Counters,
        36 => Request::Hold {
            ino: r.u64()?,
            generation: r.u64()?,
        },
        _ => return Err(Malformed),
    })
}

/// Decodes the fields of a request (kind `kind`) about file data.
fn decode_data(kind: u8, r: &mut R<'_>) -> Result<Request, Malformed> {
    Ok(match kind {
        15..=17 => {
            let (ino, off, len) = (r.u64()?, r.u64()?, r.u64()?);
            match kind {
                15 => Request::Map { ino, off, len },
                16 => Request::Read { ino, off, len },
                _ => Request::Prepare { ino, off, len },
            }
        }
        18 => Request::Commit { id: r.u64()? },
        19 => Request::Abort { id: r.u64()? },
        20 => Request::Write {
            ino: r.u64()?,
            off: r.u64()?,
            data: r.bytes()?,
        },
        22 => Request::Append {
            ino: r.u64()?,
            data: r.bytes()?,
        },
        23 => Request::Fallocate {
            ino: r.u64()?,
            off: r.u64()?,
            len: r.u64()?,
            how: r.falloc()?,
        },
        32 => Request::Attach {
            address: r.bytes()?,
        },
        33 => {
            let token = r.array16()?;
            let (ino, change) = (r.u64()?, r.u64()?);
            let n = r.count(16)?;
            if n > super::MAX_PULL_RANGES {
                return Err(Malformed);
            }
            let mut ranges = Vec::with_capacity(n);
            for _ in 0..n {
                ranges.push((r.u64()?, r.u64()?));
            }
            Request::Pull {
                token,
                ino,
                change,
                ranges,
            }
        }
        35 => Request::Seek {
            ino: r.u64()?,
            off: r.u64()?,
            to: r.seek()?,
        },
        _ => return Err(Malformed),
    })
}

/// Decodes the fields of a request (kind `kind`) about extended attributes or record locks.
fn decode_attributes_and_locks(kind: u8, r: &mut R<'_>) -> Result<Request, Malformed> {
    Ok(match kind {
        24 => Request::Setxattr {
            ino: r.u64()?,
            name: r.bytes()?,
            value: r.bytes()?,
            mode: r.xattr_mode()?,
        },
        25 => Request::Getxattr {
            ino: r.u64()?,
            name: r.bytes()?,
        },
        26 => Request::Listxattr { ino: r.u64()? },
        27 => Request::Removexattr {
            ino: r.u64()?,
            name: r.bytes()?,
        },
        29 => Request::Lock {
            ino: r.u64()?,
            owner: r.u64()?,
            lock: r.lock()?,
            wait: r.bool()?,
        },
        30 => Request::TestLock {
            ino: r.u64()?,
            owner: r.u64()?,
            lock: r.lock()?,
        },
        31 => Request::Unlock {
            ino: r.u64()?,
            owner: r.u64()?,
        },
        _ => return Err(Malformed),
    })
}
