//! Encoding and decoding of [`Reply`].

use switchyard_store::{DirEntry, Extents, Run, StatFs, Target};

use super::wire::{R, W};
use super::{Malformed, Reply, Welcome, MAX_BYTES};

/// Bytes before the data of an encoded [`Reply::Bytes`]: kind, sequence number, length.
pub const BYTES_HEAD: usize = 1 + 8 + 4;
/// [`Reply::Bytes`]'s kind byte.
const BYTES_KIND: u8 = 8;

impl Reply {
    /// Makes `out` the encoded `Bytes` reply to request `seq` whose bytes `fill` writes in
    /// place, into at most `max` (and [`MAX_BYTES`]) bytes, returning how many it wrote: the
    /// same message as `Reply::Bytes(..).encode(seq)`, without a copy of the bytes; returns
    /// how many bytes it carries. `out`'s old contents are overwritten, not cleared first (a
    /// reused buffer is not zeroed again).
    pub fn bytes_filled<E>(
        seq: u64,
        max: usize,
        out: &mut Vec<u8>,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        let end = BYTES_HEAD + max.min(MAX_BYTES);
        out.resize(end.max(out.len()), 0);
        out.truncate(end);
        let n = fill(&mut out[BYTES_HEAD..])?.min(end - BYTES_HEAD);
        out.truncate(BYTES_HEAD + n);
        out[..BYTES_HEAD].copy_from_slice(&Reply::bytes_head(seq, n));
        Ok(n)
    }

    /// What an encoded `Bytes` reply to request `seq` carrying `n` bytes starts with: sent
    /// before those bytes, it makes the same message as `Reply::Bytes(..).encode(seq)` (for a
    /// sender that sends the bytes from where they lie). `n` is at most [`MAX_BYTES`].
    pub fn bytes_head(seq: u64, n: usize) -> [u8; BYTES_HEAD] {
        debug_assert!(n <= MAX_BYTES);
        let mut h = [0u8; BYTES_HEAD];
        h[0] = BYTES_KIND;
        h[1..9].copy_from_slice(&seq.to_le_bytes());
        h[9..13].copy_from_slice(&(n as u32).to_le_bytes());
        h
    }

    /// The sequence number and bytes of an encoded `Bytes` reply, borrowed from `b` (no
    /// copy); `None` if `b` is anything else (decode it with [`Reply::decode`]).
    pub fn bytes_of(b: &[u8]) -> Option<(u64, &[u8])> {
        if b.len() < BYTES_HEAD || b[0] != BYTES_KIND {
            return None;
        }
        let seq = u64::from_le_bytes(b[1..9].try_into().ok()?);
        let n = u32::from_le_bytes(b[9..13].try_into().ok()?) as usize;
        (n == b.len() - BYTES_HEAD && n <= MAX_BYTES).then(|| (seq, &b[BYTES_HEAD..]))
    }

    /// The reply's kind byte.
    fn kind(&self) -> u8 {
        match self {
            Reply::Challenge { .. } => 1,
            Reply::Welcome(_) => 2,
            Reply::Error(_) => 3,
            Reply::Done => 4,
            Reply::Entry { .. } => 5,
            Reply::Stat(_) => 6,
            Reply::Dir(_) => 7,
            Reply::Bytes(_) => BYTES_KIND,
            Reply::StatFs(_) => 9,
            Reply::Map(_) => 10,
            Reply::Prepared { .. } => 11,
            Reply::Written(_) => 12,
            Reply::Counters(_) => 13,
            Reply::Lock(_) => 14,
            Reply::Stale => 15,
            Reply::Offset(_) => 16,
            Reply::WrittenMap { .. } => 17,
        }
    }

    /// The encoded reply to request `seq`.
    pub fn encode(&self, seq: u64) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(96));
        w.u8(self.kind()).u64(seq);
        match self {
            Reply::Challenge { version, nonce } => {
                w.u32(*version);
                w.0.extend_from_slice(nonce);
            }
            Reply::Welcome(x) => {
                w.bytes(&x.address).u8(x.writable as u8);
                w.u64(x.data_start).u64(x.data_len).u64(x.data_addr);
                w.bytes(&x.data_key)
                    .u64(x.changes_addr)
                    .bytes(&x.changes_key)
                    .u32(x.server_uid);
            }
            Reply::Error(e) => {
                w.u32(*e as u32);
            }
            Reply::Done | Reply::Stale => {}
            Reply::Entry { ino, stat } => {
                w.u64(*ino).stat(stat);
            }
            Reply::Stat(s) => {
                w.stat(s);
            }
            Reply::Dir(es) => {
                w.u32(es.len() as u32);
                for e in es {
                    w.bytes(&e.name).u64(e.ino).u32(e.kind);
                }
            }
            Reply::Bytes(b) => {
                w.bytes(b);
            }
            Reply::StatFs(s) => {
                w.u64(s.block_size).u64(s.blocks).u64(s.free_blocks);
                w.u64(s.available_blocks).u64(s.inodes).u64(s.free_inodes);
                w.u64(s.name_max);
            }
            Reply::Map(m) => encode_map(&mut w, m),
            Reply::WrittenMap { n, stat, map } => {
                w.u64(*n).stat(stat);
                encode_map(&mut w, map);
            }
            Reply::Prepared { id, targets } => {
                w.u64(*id).u32(targets.len() as u32);
                for t in targets {
                    w.u64(t.offset).u64(t.region_offset).u64(t.len);
                }
            }
            Reply::Written(n) | Reply::Offset(n) => {
                w.u64(*n);
            }
            Reply::Lock(l) => {
                w.lock(l);
            }
            Reply::Counters(rows) => {
                w.u32(rows.len() as u32);
                for (name, v) in rows {
                    w.bytes(name).u64(*v);
                }
            }
        }
        w.0
    }

    /// Decodes a reply and the sequence number of its request.
    pub fn decode(b: &[u8]) -> Result<(u64, Reply), Malformed> {
        let mut r = R { b };
        let kind = r.u8()?;
        let seq = r.u64()?;
        let reply = match kind {
            1 => Reply::Challenge {
                version: r.u32()?,
                nonce: r.array32()?,
            },
            2 => Reply::Welcome(Welcome {
                address: r.bytes()?,
                writable: r.bool()?,
                data_start: r.u64()?,
                data_len: r.u64()?,
                data_addr: r.u64()?,
                data_key: r.bytes()?,
                changes_addr: r.u64()?,
                changes_key: r.bytes()?,
                server_uid: r.u32()?,
            }),
            3 => Reply::Error(r.u32()? as i32),
            4 => Reply::Done,
            5 => Reply::Entry {
                ino: r.u64()?,
                stat: r.stat()?,
            },
            6 => Reply::Stat(r.stat()?),
            7 => {
                let n = r.count(4 + 8 + 4)?;
                let mut es = Vec::with_capacity(n);
                for _ in 0..n {
                    es.push(DirEntry {
                        name: r.bytes()?,
                        ino: r.u64()?,
                        kind: r.u32()?,
                    });
                }
                Reply::Dir(es)
            }
            8 => Reply::Bytes(r.bytes()?),
            9 => Reply::StatFs(StatFs {
                block_size: r.u64()?,
                blocks: r.u64()?,
                free_blocks: r.u64()?,
                available_blocks: r.u64()?,
                inodes: r.u64()?,
                free_inodes: r.u64()?,
                name_max: r.u64()?,
            }),
            10 => Reply::Map(decode_map(&mut r)?),
            11 => {
                let id = r.u64()?;
                Reply::Prepared {
                    id,
                    targets: decode_targets(&mut r)?,
                }
            }
            12 => Reply::Written(r.u64()?),
            13 => {
                let n = r.count(4 + 8)?;
                let mut rows = Vec::with_capacity(n);
                for _ in 0..n {
                    rows.push((r.bytes()?, r.u64()?));
                }
                Reply::Counters(rows)
            }
            14 => Reply::Lock(r.lock()?),
            15 => Reply::Stale,
            16 => Reply::Offset(r.u64()?),
            17 => Reply::WrittenMap {
                n: r.u64()?,
                stat: r.stat()?,
                map: decode_map(&mut r)?,
            },
            _ => return Err(Malformed),
        };
        r.end((seq, reply))
    }
}

/// Encodes the extent map of a [`Reply::Map`] or [`Reply::WrittenMap`].
fn encode_map(w: &mut W, m: &Extents) {
    w.attr(&m.attr).u64(m.change).u32(m.runs.len() as u32);
    for r in &m.runs {
        w.u64(r.file_offset).u64(r.region_offset).u64(r.len);
    }
}

/// The extent map of a [`Reply::Map`] or [`Reply::WrittenMap`]: attributes, change word
/// and runs.
fn decode_map(r: &mut R<'_>) -> Result<Extents, Malformed> {
    let attr = r.attr()?;
    let change = r.u64()?;
    let n = r.count(24)?;
    let mut runs = Vec::with_capacity(n);
    for _ in 0..n {
        runs.push(Run {
            file_offset: r.u64()?,
            region_offset: r.u64()?,
            len: r.u64()?,
        });
    }
    Ok(Extents { attr, change, runs })
}

/// The targets of a [`Reply::Prepared`].
fn decode_targets(r: &mut R<'_>) -> Result<Vec<Target>, Malformed> {
    let n = r.count(24)?;
    let mut targets = Vec::with_capacity(n);
    for _ in 0..n {
        targets.push(Target {
            offset: r.u64()?,
            region_offset: r.u64()?,
            len: r.u64()?,
        });
    }
    Ok(targets)
}
