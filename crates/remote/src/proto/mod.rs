//! The wire format of requests and replies.
//!
//! Every message is one UCX active message whose body is the encoded [`Request`] or
//! [`Reply`]: a kind byte, the request's sequence number (a reply carries its request's), then
//! the fields, little-endian, byte strings as a 32-bit length and the bytes. Decoding never
//! trusts a length: every count is checked against the bytes left before anything is
//! allocated, and trailing bytes are refused, so a malformed or hostile message is an error,
//! never a crash or a huge allocation (the fuzz target `remote_message` feeds it anything).

use switchyard_store::{
    DirEntry, Extents, Falloc, RecordLock, Rename, Seek, SetAttr, Stat, StatFs, Target, XattrMode,
};

mod reply;
mod request;
mod wire;

/// The protocol's version: a client and a server must agree on it.
pub const PROTOCOL_VERSION: u32 = 9;

/// Longest byte string a message may carry (names, link targets, data of the in-message data
/// path): larger requests are cut by the client.
pub const MAX_BYTES: usize = 8 << 20;

/// Most pieces one [`Request::Pull`] may name.
pub const MAX_PULL_RANGES: usize = 64;

/// Bytes of a file a client's cached extent map covers at least: a read outside the cached
/// map asks for the map of the `MAP_WINDOW`-aligned window around it ([`map_window`]), and a
/// small write's reply carries the map of its own ([`Reply::WrittenMap`]). A window's map
/// holds at most one run per page: 256 of 24 bytes for 1 MiB.
pub const MAP_WINDOW: u64 = 1 << 20;

/// The window of a file whose map a client caches for `len` bytes at `off`: `[lo, hi)`, the
/// range rounded out to [`MAP_WINDOW`] boundaries (at least one window).
pub fn map_window(off: u64, len: u64) -> (u64, u64) {
    let lo = off - off % MAP_WINDOW;
    let end = off.saturating_add(len.max(1));
    let hi = end.div_ceil(MAP_WINDOW).saturating_mul(MAP_WINDOW).max(end);
    (lo, hi)
}

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
        /// The user the client acts for (the connecting process's): the server classes the
        /// connection's requests into a tenant by it (`uids` in `[[qos.tenants]]`). Trusted
        /// as the key's holder is.
        uid: u32,
    },
    /// The inode `name` names in directory `parent`.
    Lookup {
        /// Directory.
        parent: u64,
        /// Name in it.
        name: Vec<u8>,
        /// Take a hold on the inode for the client (a kernel front end's lookup): its number
        /// is not reused until the client forgets it or goes.
        hold: bool,
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
    /// Creates a regular file, a directory, a symlink or a special file, as the type bits of
    /// `mode` say.
    Make {
        /// Directory.
        parent: u64,
        /// New name.
        name: Vec<u8>,
        /// Type and permission bits.
        mode: u32,
        /// A device's number (0 otherwise).
        rdev: u64,
        /// A symlink's target (empty otherwise).
        target: Vec<u8>,
        /// Owner of the new inode.
        uid: u32,
        /// Group of the new inode.
        gid: u32,
        /// The creator's umask: applied to `mode` unless `parent` has a default ACL.
        umask: u32,
        /// Take a hold on the new inode (as [`Request::Lookup`]).
        hold: bool,
    },
    /// A new name for inode `ino`.
    Link {
        /// Inode.
        ino: u64,
        /// Directory of the new name.
        parent: u64,
        /// New name.
        name: Vec<u8>,
        /// Take a hold on the inode (as [`Request::Lookup`]).
        hold: bool,
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
        /// What happens to an existing new name.
        how: Rename,
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
    /// Makes `ino` durable: on a store file on a disk, every change that returned
    /// ([`switchyard_store::Store::fsync`]).
    Fsync {
        /// Inode.
        ino: u64,
    },
    /// Makes the whole store durable (`syncfs`, `sync`; [`switchyard_store::Store::sync`]).
    Sync,
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
    /// Writes data carried in the request (the in-message data path, and small writes):
    /// answered by [`Reply::WrittenMap`] to a client that has asked for a map (it caches
    /// them), else (or where the map could not be read) by [`Reply::Written`].
    Write {
        /// Inode.
        ino: u64,
        /// Offset.
        off: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Takes one hold on `ino` for a client that held it through a server that went away
    /// (it reconnected): refused with `ESTALE` unless the inode lives with `generation`
    /// (its number may since name another file).
    Hold {
        /// Inode.
        ino: u64,
        /// Its generation when the client took its first hold.
        generation: u64,
    },
    /// Releases holds the client took.
    Forget {
        /// Inode.
        ino: u64,
        /// How many.
        n: u64,
    },
    /// Writes data carried in the request at the file's end, atomically against every
    /// other writer.
    Append {
        /// Inode.
        ino: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Allocates, zeroes or punches a range.
    Fallocate {
        /// Inode.
        ino: u64,
        /// Offset.
        off: u64,
        /// Bytes.
        len: u64,
        /// What to do.
        how: Falloc,
    },
    /// Sets an extended attribute.
    Setxattr {
        /// Inode.
        ino: u64,
        /// Name.
        name: Vec<u8>,
        /// Value.
        value: Vec<u8>,
        /// How an existing attribute is treated.
        mode: XattrMode,
    },
    /// An extended attribute's value.
    Getxattr {
        /// Inode.
        ino: u64,
        /// Name.
        name: Vec<u8>,
    },
    /// Extended attribute names.
    Listxattr {
        /// Inode.
        ino: u64,
    },
    /// Removes an extended attribute.
    Removexattr {
        /// Inode.
        ino: u64,
        /// Name.
        name: Vec<u8>,
    },
    /// The server's counters.
    Counters,
    /// Sets or clears (`F_UNLCK`) a record lock for lock owner `owner` of this client;
    /// `EAGAIN` if another's conflicts.
    Lock {
        /// Inode.
        ino: u64,
        /// The lock owner (the kernel's, on a mount).
        owner: u64,
        /// The lock.
        lock: RecordLock,
        /// The owner waits for the lock while another's conflicts (`F_SETLKW`): `EDEADLK`
        /// where that would close a cycle of waiting owners ([`crate::locks`]).
        wait: bool,
    },
    /// The lock another owner holds that `lock` would conflict with (`F_UNLCK` if none).
    TestLock {
        /// Inode.
        ino: u64,
        /// The lock owner.
        owner: u64,
        /// The lock asked about.
        lock: RecordLock,
    },
    /// Drops every lock `owner` holds on `ino`.
    Unlock {
        /// Inode.
        ino: u64,
        /// The lock owner.
        owner: u64,
    },
    /// Asks the server to connect to the client's worker at `address`, for the data of
    /// [`Request::Pull`]s; the reply is the token those carry ([`Reply::Bytes`], 16 bytes).
    Attach {
        /// The client's UCX worker address.
        address: Vec<u8>,
    },
    /// Sends pieces of the data area to the client (sent on the data endpoint, so it names
    /// its client by `token`) if `ino`'s change word is still `change`: each range as one
    /// message whose body is read where it lies ([`part_header`]), by rendezvous where it is
    /// large — the client's transport fetches it. The server keeps every block freed from
    /// then on out of reuse until all pieces are fetched, so they hold the file's bytes as
    /// of the check. Otherwise the reply is [`Reply::Stale`], and no piece is sent.
    Pull {
        /// The token [`Request::Attach`] returned.
        token: [u8; 16],
        /// The file the pieces are read for.
        ino: u64,
        /// Its change word when the client fetched the map the ranges come from.
        change: u64,
        /// (offset in the data area, bytes): at most [`MAX_PULL_RANGES`], in all at most
        /// [`MAX_BYTES`].
        ranges: Vec<(u64, u64)>,
    },
    /// Where `lseek(off, SEEK_DATA)` or `lseek(off, SEEK_HOLE)` lands in a regular file
    /// ([`switchyard_store::Store::seek`]): the answer is [`Reply::Offset`]. The server walks
    /// the file's map from `off` only as far as the answer, never the whole file.
    Seek {
        /// Inode.
        ino: u64,
        /// Where the search starts.
        off: u64,
        /// Data or a hole.
        to: Seek,
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
    /// An inode and what it is.
    Entry {
        /// Inode.
        ino: u64,
        /// Attributes, blocks and generation.
        stat: Stat,
    },
    /// What an inode is: attributes, blocks and generation.
    Stat(Stat),
    /// Directory entries.
    Dir(Vec<DirEntry>),
    /// Bytes (a link target, or data of the in-message path).
    Bytes(Vec<u8>),
    /// Space and inode counts.
    StatFs(StatFs),
    /// The runs of the range a [`Request::Map`] asked for (clipped to the file's size), with
    /// the file's attributes and change word.
    Map(Extents),
    /// A preparation and where to put its bytes.
    Prepared {
        /// Names it in [`Request::Commit`] and [`Request::Abort`].
        id: u64,
        /// Pieces of the write: offset in the write, offset in the region, length.
        targets: Vec<Target>,
    },
    /// Bytes written (for [`Request::Append`]: where they went).
    Written(u64),
    /// Named counters.
    Counters(Vec<(Vec<u8>, u64)>),
    /// A record lock.
    Lock(RecordLock),
    /// The answer to a [`Request::Pull`] whose map is no longer the file's (its change word
    /// moved): no piece was sent.
    Stale,
    /// An offset in a file (the answer to a [`Request::Seek`]).
    Offset(u64),
    /// The answer to a [`Request::Write`]: bytes written, and the map of the window around
    /// them ([`map_window`]) as the write left it, read under the file's lock with its change
    /// word, then what the file is (read after that word, so that the word vouches for it as
    /// a [`Request::Getattr`]'s answer fetched after it). A client that reads there next
    /// (bonnie++'s rewrite reads the next chunk, and the kernel asks for the attributes
    /// first) needs neither a [`Request::Map`] nor a [`Request::Getattr`]; one that does not
    /// has lost nothing: both are checked by the change word like any cached answer.
    WrittenMap {
        /// Bytes written.
        n: u64,
        /// What the file is after the write.
        stat: Stat,
        /// The window's runs, with the file's attributes and change word after the write.
        map: Extents,
    },
}

/// [`part_header`]'s kind byte.
const PART_KIND: u8 = 0x50;

/// The header of piece `index` of the answer to pull `seq` (its body is the piece's bytes).
pub fn part_header(seq: u64, index: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(13);
    h.push(PART_KIND);
    h.extend_from_slice(&seq.to_le_bytes());
    h.extend_from_slice(&index.to_le_bytes());
    h
}

/// The pull and piece a [`part_header`] names; `None` for any other header.
pub fn part_of(header: &[u8]) -> Option<(u64, u32)> {
    if header.len() != 13 || header[0] != PART_KIND {
        return None;
    }
    let seq = u64::from_le_bytes(header[1..9].try_into().ok()?);
    Some((seq, u32::from_le_bytes(header[9..13].try_into().ok()?)))
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
    /// The server's effective user id: a client of another user on the server's host
    /// cannot attach its shared memory (and reconnects without it).
    pub server_uid: u32,
}

#[cfg(test)]
mod tests;
