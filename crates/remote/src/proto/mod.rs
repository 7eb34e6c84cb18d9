//! The wire format of requests and replies.
//!
//! Every message is one UCX active message whose body is the encoded [`Request`] or
//! [`Reply`]: a kind byte, the request's sequence number (a reply carries its request's), then
//! the fields, little-endian, byte strings as a 32-bit length and the bytes. Decoding never
//! trusts a length: every count is checked against the bytes left before anything is
//! allocated, and trailing bytes are refused, so a malformed or hostile message is an error,
//! never a crash or a huge allocation (the fuzz target `remote_message` feeds it anything).

use switchyard_store::{Attr, DirEntry, Extents, Run, SetAttr, StatFs, Target};

mod wire;

use wire::{R, W};

/// The protocol's version: a client and a server must agree on it.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest byte string a message may carry (names, link targets, data of the in-message data
/// path): larger requests are cut by the client.
pub const MAX_BYTES: usize = 8 << 20;

/// A message that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("malformed message")
    }
}

impl std::error::Error for Malformed {}

/// What a client asks of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Proof of the key: the keyed hash of the server's challenge; `write` asks for write
    /// access.
    Auth {
        /// `blake3::keyed_hash(key, challenge)`.
        mac: [u8; 32],
        /// Whether the client wants to change the store.
        write: bool,
    },
    /// The inode `name` names in directory `parent`.
    Lookup {
        /// Directory.
        parent: u64,
        /// Name in it.
        name: Vec<u8>,
    },
    /// Attributes of `ino`.
    Getattr {
        /// Inode.
        ino: u64,
    },
    /// Entries of directory `ino`.
    Readdir {
        /// Directory.
        ino: u64,
    },
    /// Creates a regular file, a directory (`S_IFDIR` in `mode`) or a symlink (`target` set).
    Make {
        /// Directory.
        parent: u64,
        /// New name.
        name: Vec<u8>,
        /// Type and permission bits.
        mode: u32,
        /// A symlink's target (empty otherwise).
        target: Vec<u8>,
    },
    /// A new name for inode `ino`.
    Link {
        /// Inode.
        ino: u64,
        /// Directory of the new name.
        parent: u64,
        /// New name.
        name: Vec<u8>,
    },
    /// Removes a name (`dir`: a directory's, which must be empty).
    Remove {
        /// Directory.
        parent: u64,
        /// Name.
        name: Vec<u8>,
        /// Whether the name must be a directory (rmdir) or must not be (unlink).
        dir: bool,
    },
    /// Moves a name.
    Rename {
        /// Old directory.
        parent: u64,
        /// Old name.
        name: Vec<u8>,
        /// New directory.
        new_parent: u64,
        /// New name.
        new_name: Vec<u8>,
        /// Fail with EEXIST if the new name exists.
        noreplace: bool,
    },
    /// A symlink's target.
    Readlink {
        /// Inode.
        ino: u64,
    },
    /// Changes attributes.
    Setattr {
        /// Inode.
        ino: u64,
        /// What to change.
        set: SetAttr,
    },
    /// Notes an open handle (an unlinked file lives while one is open).
    Open {
        /// Inode.
        ino: u64,
    },
    /// Drops an open handle.
    Close {
        /// Inode.
        ino: u64,
    },
    /// Makes `ino` durable (every returned change already is).
    Fsync {
        /// Inode.
        ino: u64,
    },
    /// Space and inode counts.
    Statfs,
    /// Where `[off, off + len)` of file `ino` lies, for one-sided reads.
    Map {
        /// Inode.
        ino: u64,
        /// Offset.
        off: u64,
        /// Bytes.
        len: u64,
    },
    /// Reads data inside the reply (the in-message data path).
    Read {
        /// Inode.
        ino: u64,
        /// Offset.
        off: u64,
        /// Bytes (at most [`MAX_BYTES`]).
        len: u64,
    },
    /// Reserves copy-on-write blocks for a write the client fills one-sided.
    Prepare {
        /// Inode.
        ino: u64,
        /// Offset.
        off: u64,
        /// Bytes.
        len: u64,
    },
    /// Publishes a filled preparation.
    Commit {
        /// The preparation.
        id: u64,
    },
    /// Gives a preparation's blocks back.
    Abort {
        /// The preparation.
        id: u64,
    },
    /// Writes data carried in the request (the in-message data path).
    Write {
        /// Inode.
        ino: u64,
        /// Offset.
        off: u64,
        /// The bytes.
        data: Vec<u8>,
    },
}

/// What the server answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The first message on a connection: what to prove the key on.
    Challenge {
        /// The server's protocol version.
        version: u32,
        /// Random bytes to hash with the key.
        nonce: [u8; 32],
    },
    /// The answer to a correct [`Request::Auth`]: how to reach the store's data.
    Welcome(Welcome),
    /// The request failed with this errno.
    Error(i32),
    /// Done, nothing to return.
    Done,
    /// An inode and its attributes.
    Entry {
        /// Inode.
        ino: u64,
        /// Attributes.
        attr: Attr,
    },
    /// Attributes.
    Attr(Attr),
    /// Directory entries.
    Dir(Vec<DirEntry>),
    /// Bytes (a link target, or data of the in-message path).
    Bytes(Vec<u8>),
    /// Space and inode counts.
    StatFs(StatFs),
    /// A file's runs with its attributes and change word.
    Map(Extents),
    /// A preparation and where to put its bytes.
    Prepared {
        /// Names it in [`Request::Commit`] and [`Request::Abort`].
        id: u64,
        /// Pieces of the write: offset in the write, offset in the region, length.
        targets: Vec<Target>,
    },
    /// Bytes written.
    Written(u64),
}

/// How an authenticated client reaches the store's data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Welcome {
    /// The server's worker address (the client's data endpoint connects to it).
    pub address: Vec<u8>,
    /// Whether the client may change the store.
    pub writable: bool,
    /// Region offset of the data area's first byte.
    pub data_start: u64,
    /// The data area's length.
    pub data_len: u64,
    /// The server's address of the data area's first byte.
    pub data_addr: u64,
    /// The packed remote key of the data area.
    pub data_key: Vec<u8>,
    /// The server's address of the change words.
    pub changes_addr: u64,
    /// The packed remote key of the change words (read only).
    pub changes_key: Vec<u8>,
}

fn opt_i64(v: Option<i64>) -> Option<u64> {
    v.map(|x| x as u64)
}

impl Request {
    /// The encoded request with sequence number `seq`.
    pub fn encode(&self, seq: u64) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(64));
        let kind = match self {
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
            Request::Write { .. } => 20,
        };
        w.u8(kind).u64(seq);
        match self {
            Request::Auth { mac, write } => {
                w.0.extend_from_slice(mac);
                w.u8(*write as u8);
            }
            Request::Lookup { parent, name } => {
                w.u64(*parent).bytes(name);
            }
            Request::Getattr { ino }
            | Request::Readdir { ino }
            | Request::Readlink { ino }
            | Request::Open { ino }
            | Request::Close { ino }
            | Request::Fsync { ino } => {
                w.u64(*ino);
            }
            Request::Make {
                parent,
                name,
                mode,
                target,
            } => {
                w.u64(*parent).bytes(name).u32(*mode).bytes(target);
            }
            Request::Link { ino, parent, name } => {
                w.u64(*ino).u64(*parent).bytes(name);
            }
            Request::Remove { parent, name, dir } => {
                w.u64(*parent).bytes(name).u8(*dir as u8);
            }
            Request::Rename {
                parent,
                name,
                new_parent,
                new_name,
                noreplace,
            } => {
                w.u64(*parent).bytes(name).u64(*new_parent).bytes(new_name);
                w.u8(*noreplace as u8);
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
            Request::Statfs => {}
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
        }
        w.0
    }

    /// Decodes a request and its sequence number.
    pub fn decode(b: &[u8]) -> Result<(u64, Request), Malformed> {
        let mut r = R { b };
        let kind = r.u8()?;
        let seq = r.u64()?;
        let small = |v: Option<u64>| v.map(|x| u32::try_from(x).map_err(|_| Malformed));
        let req = match kind {
            1 => Request::Auth {
                mac: r.array32()?,
                write: r.bool()?,
            },
            2 => Request::Lookup {
                parent: r.u64()?,
                name: r.bytes()?,
            },
            3 => Request::Getattr { ino: r.u64()? },
            4 => Request::Readdir { ino: r.u64()? },
            5 => Request::Make {
                parent: r.u64()?,
                name: r.bytes()?,
                mode: r.u32()?,
                target: r.bytes()?,
            },
            6 => Request::Link {
                ino: r.u64()?,
                parent: r.u64()?,
                name: r.bytes()?,
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
                noreplace: r.bool()?,
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
            _ => return Err(Malformed),
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
        )
    }
}

impl Reply {
    /// The encoded reply to request `seq`.
    pub fn encode(&self, seq: u64) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(96));
        let kind = match self {
            Reply::Challenge { .. } => 1,
            Reply::Welcome(_) => 2,
            Reply::Error(_) => 3,
            Reply::Done => 4,
            Reply::Entry { .. } => 5,
            Reply::Attr(_) => 6,
            Reply::Dir(_) => 7,
            Reply::Bytes(_) => 8,
            Reply::StatFs(_) => 9,
            Reply::Map(_) => 10,
            Reply::Prepared { .. } => 11,
            Reply::Written(_) => 12,
        };
        w.u8(kind).u64(seq);
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
                    .bytes(&x.changes_key);
            }
            Reply::Error(e) => {
                w.u32(*e as u32);
            }
            Reply::Done => {}
            Reply::Entry { ino, attr } => {
                w.u64(*ino).attr(attr);
            }
            Reply::Attr(a) => {
                w.attr(a);
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
            Reply::Map(m) => {
                w.attr(&m.attr).u64(m.change).u32(m.runs.len() as u32);
                for r in &m.runs {
                    w.u64(r.file_offset).u64(r.region_offset).u64(r.len);
                }
            }
            Reply::Prepared { id, targets } => {
                w.u64(*id).u32(targets.len() as u32);
                for t in targets {
                    w.u64(t.offset).u64(t.region_offset).u64(t.len);
                }
            }
            Reply::Written(n) => {
                w.u64(*n);
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
            }),
            3 => Reply::Error(r.u32()? as i32),
            4 => Reply::Done,
            5 => Reply::Entry {
                ino: r.u64()?,
                attr: r.attr()?,
            },
            6 => Reply::Attr(r.attr()?),
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
            10 => {
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
                Reply::Map(Extents { attr, change, runs })
            }
            11 => {
                let id = r.u64()?;
                let n = r.count(24)?;
                let mut targets = Vec::with_capacity(n);
                for _ in 0..n {
                    targets.push(Target {
                        offset: r.u64()?,
                        region_offset: r.u64()?,
                        len: r.u64()?,
                    });
                }
                Reply::Prepared { id, targets }
            }
            12 => Reply::Written(r.u64()?),
            _ => return Err(Malformed),
        };
        r.end((seq, reply))
    }
}

#[cfg(test)]
mod tests;
