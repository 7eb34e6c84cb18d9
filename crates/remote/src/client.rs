//! The client: the local `Fs`'s paths, descriptors and errnos over a remote store.
//!
//! Caches are checked, never trusted: a cached name is used while its directory's change
//! word is the one read before the lookup; cached attributes and extent maps while their
//! file's word is the one they came with. A word is one 8-byte one-sided get. On the
//! in-message data path (no one-sided access) nothing is cached: every call asks the server.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use switchyard_store::changes::Changes;
use switchyard_store::format::{ROOT, S_IFDIR, S_IFLNK, S_IFREG};
use switchyard_store::fs::components;
use switchyard_store::{
    Attr, DirEntry, Errno, Extents, Fd, Files, OpenFlags, SetAttr, StatFs, Whence, MAX_FILE_SIZE,
};
use switchyard_ucx::{Endpoint, Failures, Node, RKey};

use crate::auth::Key;
use crate::proto::{Reply, Request, Welcome, MAX_BYTES, PROTOCOL_VERSION};

/// Symlinks followed in one path walk before `ELOOP` (as the local `Fs`).
const SYMLOOP_MAX: u32 = 40;
/// Bytes read to get one change word (its line; the table is page aligned).
const WORD_LINE: usize = 64;
/// Reads of a cached map retried after its file changed before asking the server to read.
const READ_RETRIES: u32 = 8;

/// How data moves between this client and the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataPath {
    /// One-sided gets and puts on the named transport (`cma`, `rc_mlx5`, …): the server's
    /// CPU is not in the data path.
    OneSided(String),
    /// Inside requests and replies, because the transport (named) has no one-sided access.
    InMessages(String),
}

impl std::fmt::Display for DataPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataPath::OneSided(t) => write!(f, "one-sided over {t}"),
            DataPath::InMessages(t) => write!(f, "inside messages over {t} (no one-sided access)"),
        }
    }
}

/// What a client did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ClientStats {
    /// Requests sent.
    pub requests: u64,
    /// Data bytes read or written one-sided.
    pub one_sided_bytes: u64,
    /// Data bytes carried inside requests and replies.
    pub message_bytes: u64,
    /// Lookups, attributes and maps served from the cache (after their change word said so).
    pub cache_hits: u64,
    /// Those the server had to answer.
    pub cache_misses: u64,
    /// Reads repeated because the file changed under them.
    pub read_retries: u64,
}

/// Why a connection could not be made.
#[derive(Debug)]
pub struct ConnectError(pub String);

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConnectError {}

struct Open {
    ino: u64,
    flags: OpenFlags,
    offset: u64,
}

/// A connection to a `serve`, with the shape of the local `Fs`: every call is synchronous,
/// returns an errno on failure, and is safe from any thread (calls are serialised).
/// A server that goes away fails calls with `ENOTCONN` (or `ETIMEDOUT`), never hangs them.
pub struct Client {
    inner: Mutex<Inner>,
}

struct Inner {
    // The keys go before the node that unpacked them.
    data_key: RKey,
    changes_key: RKey,
    node: Node,
    ctl: Endpoint,
    data: Endpoint,
    welcome: Welcome,
    path: DataPath,
    seq: u64,
    timeout: Duration,
    /// (directory, name) → (inode, the directory's change word before the lookup).
    names: HashMap<(u64, Vec<u8>), (u64, u64)>,
    /// Inode → (attributes, its change word before they were fetched).
    attrs: HashMap<u64, (Attr, u64)>,
    /// Inode → its whole extent map (with the change word read with it).
    maps: HashMap<u64, Extents>,
    fds: BTreeMap<u32, Open>,
    next_fd: u32,
    stats: ClientStats,
}

fn errno(e: switchyard_ucx::Error) -> Errno {
    Errno(e.errno())
}

impl Client {
    /// Connects to the server at `addr`, proves `key`, and opens the data endpoint. `write`
    /// asks for write access (refused by a read-only server).
    pub fn connect(addr: SocketAddr, key: &Key, write: bool) -> Result<Client, ConnectError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            ConnectError(format!("switchyard server at {addr}: {what}: {e}"))
        };
        let node = Node::new().map_err(|e| fail("starting UCX", &e))?;
        let ctl = node.connect(addr).map_err(|e| fail("cannot connect", &e))?;
        let deadline = Duration::from_secs(10);
        let (_, hello) =
            wait_reply(&node, &ctl, None, deadline).map_err(|e| fail("no greeting", &e))?;
        let Reply::Challenge { version, nonce } = hello else {
            return Err(fail("unexpected greeting", &"not a challenge"));
        };
        if version != PROTOCOL_VERSION {
            return Err(fail(
                "protocol mismatch",
                &format!("server speaks {version}, this client {PROTOCOL_VERSION}"),
            ));
        }
        let auth = Request::Auth {
            mac: key.prove(&nonce),
            write,
        };
        node.send(&ctl, &[], &auth.encode(1))
            .map_err(|e| fail("sending the proof", &e))?;
        let welcome = match wait_reply(&node, &ctl, Some(1), deadline) {
            Ok((_, Reply::Welcome(w))) => w,
            Ok((_, Reply::Error(e))) if e == libc::EACCES => {
                return Err(fail("refused", &"wrong key"))
            }
            Ok((_, Reply::Error(e))) if e == libc::EROFS => {
                return Err(fail("refused", &"the store is served read-only"))
            }
            Ok((_, other)) => return Err(fail("refused", &format!("{other:?}"))),
            Err(e) => return Err(fail("refused", &e)),
        };
        let data = node
            .connect_address(&welcome.address, Failures::Undetected)
            .map_err(|e| fail("data endpoint", &e))?;
        // The data endpoint detects no failure itself: it fails with the control endpoint.
        node.link(&data, &ctl);
        let data_key = node
            .unpack_rkey(&data, &welcome.data_key)
            .map_err(|e| fail("data key", &e))?;
        let changes_key = node
            .unpack_rkey(&data, &welcome.changes_key)
            .map_err(|e| fail("change key", &e))?;
        let path = data_path(&node.describe(&data));
        Ok(Client {
            inner: Mutex::new(Inner {
                data_key,
                changes_key,
                node,
                ctl,
                data,
                welcome,
                path,
                seq: 1,
                timeout: Duration::from_secs(30),
                names: HashMap::new(),
                attrs: HashMap::new(),
                maps: HashMap::new(),
                fds: BTreeMap::new(),
                next_fd: 3,
                stats: ClientStats::default(),
            }),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> Result<T, Errno>) -> Result<T, Errno> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    /// How data moves (one-sided, or inside messages where the transport cannot).
    pub fn data_path(&self) -> DataPath {
        self.with(|i| Ok(i.path.clone())).expect("infallible")
    }

    /// From now on, moves data inside requests and replies even where one-sided access
    /// exists, and caches nothing (to compare the two paths, as `bench remote` does).
    pub fn force_in_messages(&self) {
        self.with(|i| {
            let t = match &i.path {
                DataPath::OneSided(t) | DataPath::InMessages(t) => t.clone(),
            };
            i.path = DataPath::InMessages(t);
            i.forget();
            Ok(())
        })
        .expect("infallible")
    }

    /// Drops every cached name, attribute and map (the next calls ask the server).
    pub fn forget(&self) {
        self.with(|i| {
            i.forget();
            Ok(())
        })
        .expect("infallible")
    }

    /// Counters so far.
    pub fn stats(&self) -> ClientStats {
        self.with(|i| Ok(i.stats.clone())).expect("infallible")
    }

    /// Whether the server granted write access.
    pub fn writable(&self) -> bool {
        self.with(|i| Ok(i.welcome.writable)).expect("infallible")
    }
}

/// The client is used as the local `Fs` is, through [`Files`].
impl Files for Client {
    // ---- descriptors --------------------------------------------------------------------

    /// Opens (or creates) a file, as the local `Fs::open`.
    fn open(&self, path: &str, flags: OpenFlags, mode: u32) -> Result<Fd, Errno> {
        self.with(|i| i.open(path, flags, mode))
    }

    /// Closes a descriptor.
    fn close(&self, fd: Fd) -> Result<(), Errno> {
        self.with(|i| {
            let f = i.fds.remove(&fd.0).ok_or(Errno::EBADF)?;
            i.call(&Request::Close { ino: f.ino }).map(|_| ())
        })
    }

    /// Reads at the descriptor's offset and advances it.
    fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize, Errno> {
        self.with(|i| {
            let (ino, off) = i.file(fd, false)?;
            let n = i.read(ino, off, buf)?;
            i.fds.get_mut(&fd.0).expect("checked").offset = off + n as u64;
            Ok(n)
        })
    }

    /// Reads at `off`.
    fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize, Errno> {
        self.with(|i| {
            let (ino, _) = i.file(fd, false)?;
            i.read(ino, off, buf)
        })
    }

    /// Writes at the descriptor's offset (the end, for an append descriptor) and advances
    /// it. Durable and atomic on the server when it returns.
    fn write(&self, fd: Fd, data: &[u8]) -> Result<usize, Errno> {
        self.with(|i| {
            let (ino, mut off) = i.file(fd, true)?;
            if i.fds[&fd.0].flags.append {
                off = i.getattr(ino)?.size;
            }
            let n = i.write(ino, off, data)?;
            i.fds.get_mut(&fd.0).expect("checked").offset = off + n as u64;
            Ok(n)
        })
    }

    /// Writes at `off`.
    fn pwrite(&self, fd: Fd, data: &[u8], off: u64) -> Result<usize, Errno> {
        self.with(|i| {
            let (ino, _) = i.file(fd, true)?;
            i.write(ino, off, data)
        })
    }

    /// Moves the descriptor's offset.
    fn lseek(&self, fd: Fd, off: i64, whence: Whence) -> Result<u64, Errno> {
        self.with(|i| {
            let f = i.fds.get(&fd.0).ok_or(Errno::EBADF)?;
            let base = match whence {
                Whence::Set => 0,
                Whence::Cur => f.offset as i64,
                Whence::End => i.getattr(f.ino)?.size as i64,
            };
            let to = base
                .checked_add(off)
                .filter(|&t| t >= 0)
                .ok_or(Errno::EINVAL)?;
            i.fds.get_mut(&fd.0).expect("checked").offset = to as u64;
            Ok(to as u64)
        })
    }

    /// Makes the file durable (every returned write already is).
    fn fsync(&self, fd: Fd) -> Result<(), Errno> {
        self.with(|i| {
            let ino = i.fds.get(&fd.0).ok_or(Errno::EBADF)?.ino;
            i.call(&Request::Fsync { ino }).map(|_| ())
        })
    }

    /// Attributes of the open file.
    fn fstat(&self, fd: Fd) -> Result<Attr, Errno> {
        self.with(|i| {
            let ino = i.fds.get(&fd.0).ok_or(Errno::EBADF)?.ino;
            i.getattr(ino)
        })
    }

    /// Sets the open file's size.
    fn ftruncate(&self, fd: Fd, size: u64) -> Result<(), Errno> {
        self.with(|i| {
            let (ino, _) = i.file(fd, true)?;
            i.setattr(ino, size_only(size)).map(|_| ())
        })
    }

    // ---- paths --------------------------------------------------------------------------

    /// Attributes of `path`, following a final symlink.
    fn stat(&self, path: &str) -> Result<Attr, Errno> {
        self.with(|i| {
            let ino = i.resolve(path, true)?;
            i.getattr(ino)
        })
    }

    /// Attributes of `path` itself.
    fn lstat(&self, path: &str) -> Result<Attr, Errno> {
        self.with(|i| {
            let ino = i.resolve(path, false)?;
            i.getattr(ino)
        })
    }

    /// Sets the size of `path`.
    fn truncate(&self, path: &str, size: u64) -> Result<(), Errno> {
        self.with(|i| {
            let ino = i.resolve(path, true)?;
            i.setattr(ino, size_only(size)).map(|_| ())
        })
    }

    /// Creates a directory.
    fn mkdir(&self, path: &str, mode: u32) -> Result<(), Errno> {
        self.with(|i| {
            i.make(path, S_IFDIR | (mode & 0o7777), Vec::new())
                .map(|_| ())
        })
    }

    /// Creates a symlink at `path` pointing to `target`.
    fn symlink(&self, target: &str, path: &str) -> Result<(), Errno> {
        self.with(|i| i.make(path, S_IFLNK | 0o777, target.into()).map(|_| ()))
    }

    /// Removes an empty directory.
    fn rmdir(&self, path: &str) -> Result<(), Errno> {
        self.with(|i| i.remove(path, true))
    }

    /// Removes a name of a non-directory.
    fn unlink(&self, path: &str) -> Result<(), Errno> {
        self.with(|i| i.remove(path, false))
    }

    /// Renames `from` to `to`, replacing `to` as `rename(2)` does.
    fn rename(&self, from: &str, to: &str) -> Result<(), Errno> {
        self.with(|i| {
            let (parent, name) = i.parent_and_name(from)?;
            let (new_parent, new_name) = i.parent_and_name(to)?;
            i.call(&Request::Rename {
                parent,
                name,
                new_parent,
                new_name,
                noreplace: false,
            })
            .map(|_| ())
        })
    }

    /// A new name `to` for the file at `from`.
    fn link(&self, from: &str, to: &str) -> Result<(), Errno> {
        self.with(|i| {
            let ino = i.resolve(from, false)?;
            let (parent, name) = i.parent_and_name(to)?;
            i.call(&Request::Link { ino, parent, name }).map(|_| ())
        })
    }

    /// A symlink's target.
    fn readlink(&self, path: &str) -> Result<Vec<u8>, Errno> {
        self.with(|i| {
            let ino = i.resolve(path, false)?;
            i.readlink(ino)
        })
    }

    /// A directory's entries.
    fn readdir(&self, path: &str) -> Result<Vec<DirEntry>, Errno> {
        self.with(|i| {
            let ino = i.resolve(path, true)?;
            match i.call(&Request::Readdir { ino })? {
                Reply::Dir(es) => Ok(es),
                _ => Err(Errno::EIO),
            }
        })
    }

    /// Space and inode counts.
    fn statfs(&self) -> Result<StatFs, Errno> {
        self.with(|i| match i.call(&Request::Statfs)? {
            Reply::StatFs(s) => Ok(s),
            _ => Err(Errno::EIO),
        })
    }

    /// The whole content of the file at `path`.
    fn read_all(&self, path: &str) -> Result<Vec<u8>, Errno> {
        let fd = self.open(path, OpenFlags::READ, 0)?;
        let size = self.fstat(fd)?.size as usize;
        let mut buf = vec![0u8; size];
        let n = self.pread(fd, &mut buf, 0);
        self.close(fd)?;
        buf.truncate(n?);
        Ok(buf)
    }
}

fn size_only(size: u64) -> SetAttr {
    SetAttr {
        size: Some(size),
        ..SetAttr::default()
    }
}

/// The data path UCX's description of the data endpoint (`ucp_ep_print_info`) implies: one-sided where its
/// one-sided lanes use a transport other than `tcp` (which UCX emulates with the server's
/// CPU).
fn data_path(description: &str) -> DataPath {
    let rma: Vec<&str> = description
        .lines()
        .filter(|l| l.contains("rma_bw"))
        // "lane[2]:  5:cma/memory.0 md[4] -> md[4]/cma/sysdev[255] rma_bw#0"
        .filter_map(|l| {
            let lane = l.split_once("]:")?.1.split_whitespace().next()?;
            lane.split_once(':')?.1.split('/').next()
        })
        .collect();
    match rma.iter().find(|t| **t != "tcp") {
        Some(t) => DataPath::OneSided(t.to_string()),
        None => DataPath::InMessages(rma.first().unwrap_or(&"tcp").to_string()),
    }
}

/// Waits for a reply on `ep` (to request `seq`, or any when `None`), with a deadline.
fn wait_reply(
    node: &Node,
    ep: &Endpoint,
    seq: Option<u64>,
    timeout: Duration,
) -> Result<(u64, Reply), Errno> {
    let deadline = Instant::now() + timeout;
    loop {
        while let Some(mut m) = node.next_message() {
            let body = node.body(&mut m).map_err(errno)?;
            if m.from() != 0 && m.from() != ep.id() {
                continue;
            }
            drop(m);
            match Reply::decode(&body) {
                Ok((s, r)) if seq.is_none_or(|q| q == s) => return Ok((s, r)),
                _ => continue,
            }
        }
        if !node.is_open(ep) {
            return Err(Errno(libc::ENOTCONN));
        }
        if Instant::now() > deadline {
            return Err(Errno(libc::ETIMEDOUT));
        }
        node.wait(Duration::from_millis(20));
    }
}

impl Inner {
    fn forget(&mut self) {
        self.names.clear();
        self.attrs.clear();
        self.maps.clear();
    }

    fn one_sided(&self) -> bool {
        matches!(self.path, DataPath::OneSided(_))
    }

    /// Sends a request and waits for its reply; an error reply is its errno.
    fn call(&mut self, req: &Request) -> Result<Reply, Errno> {
        self.seq += 1;
        self.stats.requests += 1;
        self.node
            .send(&self.ctl, &[], &req.encode(self.seq))
            .map_err(errno)?;
        match wait_reply(&self.node, &self.ctl, Some(self.seq), self.timeout)? {
            (_, Reply::Error(e)) => Err(Errno(e)),
            (_, r) => Ok(r),
        }
    }

    /// The change word of `ino` now (one-sided). The get covers the word's whole 64-byte
    /// line: UCX 1.13 moves gets as small as 8 bytes through the server's CPU (an active
    /// message it answers) even on `cma`, and a line-sized one directly.
    fn word(&mut self, ino: u64) -> Result<u64, Errno> {
        let mut line = [0u8; WORD_LINE];
        let at = self.welcome.changes_addr + Changes::index(ino) as u64 * 8;
        let start = at & !(WORD_LINE as u64 - 1);
        self.node
            .get(&self.data, &mut line, start, &self.changes_key)
            .map_err(errno)?;
        let i = (at - start) as usize;
        Ok(u64::from_le_bytes(
            line[i..i + 8].try_into().expect("8 bytes"),
        ))
    }

    fn lookup(&mut self, parent: u64, name: &[u8]) -> Result<u64, Errno> {
        if !self.one_sided() {
            return self.lookup_rpc(parent, name);
        }
        let w = self.word(parent)?;
        let key = (parent, name.to_vec());
        if let Some(&(ino, seen)) = self.names.get(&key) {
            if seen == w {
                self.stats.cache_hits += 1;
                return Ok(ino);
            }
        }
        self.stats.cache_misses += 1;
        let ino = self.lookup_rpc(parent, name)?;
        self.names.insert(key, (ino, w));
        Ok(ino)
    }

    fn lookup_rpc(&mut self, parent: u64, name: &[u8]) -> Result<u64, Errno> {
        match self.call(&Request::Lookup {
            parent,
            name: name.to_vec(),
        })? {
            Reply::Entry { ino, .. } => Ok(ino),
            _ => Err(Errno::EIO),
        }
    }

    fn getattr(&mut self, ino: u64) -> Result<Attr, Errno> {
        if !self.one_sided() {
            return self.getattr_rpc(ino);
        }
        let w = self.word(ino)?;
        if let Some(&(a, seen)) = self.attrs.get(&ino) {
            if seen == w {
                self.stats.cache_hits += 1;
                return Ok(a);
            }
        }
        self.stats.cache_misses += 1;
        let a = self.getattr_rpc(ino)?;
        self.attrs.insert(ino, (a, w));
        Ok(a)
    }

    fn getattr_rpc(&mut self, ino: u64) -> Result<Attr, Errno> {
        match self.call(&Request::Getattr { ino })? {
            Reply::Attr(a) => Ok(a),
            _ => Err(Errno::EIO),
        }
    }

    fn readlink(&mut self, ino: u64) -> Result<Vec<u8>, Errno> {
        match self.call(&Request::Readlink { ino })? {
            Reply::Bytes(b) => Ok(b),
            _ => Err(Errno::EIO),
        }
    }

    fn setattr(&mut self, ino: u64, set: SetAttr) -> Result<Attr, Errno> {
        match self.call(&Request::Setattr { ino, set })? {
            Reply::Attr(a) => Ok(a),
            _ => Err(Errno::EIO),
        }
    }

    // ---- data ---------------------------------------------------------------------------

    /// The cached map of `ino`, or a fresh one.
    fn map(&mut self, ino: u64) -> Result<Extents, Errno> {
        if let Some(m) = self.maps.get(&ino) {
            self.stats.cache_hits += 1;
            return Ok(m.clone());
        }
        self.stats.cache_misses += 1;
        match self.call(&Request::Map {
            ino,
            off: 0,
            len: u64::MAX,
        })? {
            Reply::Map(m) => {
                self.maps.insert(ino, m.clone());
                Ok(m)
            }
            _ => Err(Errno::EIO),
        }
    }

    fn read(&mut self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        if off > MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        if self.one_sided() {
            for _ in 0..READ_RETRIES {
                if let Some(n) = self.read_one_sided(ino, off, buf)? {
                    return Ok(n);
                }
                self.stats.read_retries += 1;
                self.maps.remove(&ino);
            }
        }
        self.read_in_messages(ino, off, buf)
    }

    /// One attempt at a one-sided read on the cached map: `None` if the file changed.
    fn read_one_sided(
        &mut self,
        ino: u64,
        off: u64,
        buf: &mut [u8],
    ) -> Result<Option<usize>, Errno> {
        let m = self.map(ino)?;
        if m.attr.kind() == S_IFDIR {
            return Err(Errno::EISDIR);
        }
        let n = m.attr.size.saturating_sub(off).min(buf.len() as u64) as usize;
        let out = &mut buf[..n];
        out.fill(0);
        let (start, base) = (self.welcome.data_start, self.welcome.data_addr);
        let mut pieces: Vec<(&mut [u8], u64)> = Vec::new();
        let mut rest = &mut out[..];
        let mut at = off;
        for r in &m.runs {
            let (lo, hi) = (
                r.file_offset.max(at),
                (r.file_offset + r.len).min(off + n as u64),
            );
            if lo >= hi {
                continue;
            }
            let (_, tail) = std::mem::take(&mut rest).split_at_mut((lo - at) as usize);
            let (piece, tail) = tail.split_at_mut((hi - lo) as usize);
            let remote = base + (r.region_offset - start) + (lo - r.file_offset);
            pieces.push((piece, remote));
            rest = tail;
            at = hi;
        }
        if !pieces.is_empty() {
            self.node
                .get_many(&self.data, &mut pieces, &self.data_key)
                .map_err(errno)?;
        }
        if self.word(ino)? != m.change {
            return Ok(None);
        }
        self.stats.one_sided_bytes += n as u64;
        Ok(Some(n))
    }

    fn read_in_messages(&mut self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(MAX_BYTES) as u64;
            let Reply::Bytes(b) = self.call(&Request::Read {
                ino,
                off: off + done as u64,
                len: want,
            })?
            else {
                return Err(Errno::EIO);
            };
            buf[done..done + b.len()].copy_from_slice(&b);
            done += b.len();
            self.stats.message_bytes += b.len() as u64;
            if (b.len() as u64) < want {
                break;
            }
        }
        Ok(done)
    }

    fn write(&mut self, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
        let end = off.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        self.maps.remove(&ino);
        self.attrs.remove(&ino);
        let mut done = 0;
        while done < data.len() {
            let piece = &data[done..(done + MAX_BYTES).min(data.len())];
            let at = off + done as u64;
            let n = if self.one_sided() {
                self.write_one_sided(ino, at, piece)?
            } else {
                let n = match self.call(&Request::Write {
                    ino,
                    off: at,
                    data: piece.to_vec(),
                })? {
                    Reply::Written(n) => n as usize,
                    _ => return Err(Errno::EIO),
                };
                self.stats.message_bytes += n as u64;
                n
            };
            done += n;
        }
        Ok(done)
    }

    /// Reserve, put, flush, commit.
    fn write_one_sided(&mut self, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
        let Reply::Prepared { id, targets } = self.call(&Request::Prepare {
            ino,
            off,
            len: data.len() as u64,
        })?
        else {
            return Err(Errno::EIO);
        };
        let (start, base) = (self.welcome.data_start, self.welcome.data_addr);
        let put = (|| {
            for t in &targets {
                let src = data
                    .get(t.offset as usize..(t.offset + t.len) as usize)
                    .ok_or(Errno::EIO)?;
                if t.region_offset < start
                    || t.region_offset + t.len > start + self.welcome.data_len
                {
                    return Err(Errno::EIO);
                }
                let remote = base + (t.region_offset - start);
                self.node
                    .put(&self.data, src, remote, &self.data_key)
                    .map_err(errno)?;
            }
            // Remote completion: every byte is in the server's memory before the commit.
            self.node.flush(&self.data).map_err(errno)
        })();
        if let Err(e) = put {
            let _ = self.call(&Request::Abort { id });
            return Err(e);
        }
        match self.call(&Request::Commit { id })? {
            Reply::Written(n) => {
                self.stats.one_sided_bytes += n;
                Ok(n as usize)
            }
            _ => Err(Errno::EIO),
        }
    }

    // ---- paths --------------------------------------------------------------------------

    fn file(&self, fd: Fd, write: bool) -> Result<(u64, u64), Errno> {
        let f = self.fds.get(&fd.0).ok_or(Errno::EBADF)?;
        if (write && !f.flags.write) || (!write && !f.flags.read) {
            return Err(Errno::EBADF);
        }
        Ok((f.ino, f.offset))
    }

    fn open(&mut self, path: &str, flags: OpenFlags, mode: u32) -> Result<Fd, Errno> {
        let (parent, name) = self.parent_of(path, &mut 0)?;
        let ino = match name {
            None => ROOT,
            Some(name) => match self.lookup(parent, &name) {
                Ok(_) if flags.create && flags.exclusive => return Err(Errno::EEXIST),
                Ok(ino) => {
                    let a = self.getattr(ino)?;
                    if a.kind() == S_IFLNK {
                        self.follow(parent, ino, &mut 0)?
                    } else {
                        ino
                    }
                }
                Err(e) if e == Errno::ENOENT && flags.create => {
                    match self.call(&Request::Make {
                        parent,
                        name,
                        mode: S_IFREG | (mode & 0o7777),
                        target: Vec::new(),
                    })? {
                        Reply::Entry { ino, .. } => ino,
                        _ => return Err(Errno::EIO),
                    }
                }
                Err(e) => return Err(e),
            },
        };
        let attr = match self.call(&Request::Open { ino })? {
            Reply::Attr(a) => a,
            _ => return Err(Errno::EIO),
        };
        if attr.kind() == S_IFDIR && flags.write {
            let _ = self.call(&Request::Close { ino });
            return Err(Errno::EISDIR);
        }
        if flags.truncate && flags.write && attr.kind() == S_IFREG && attr.size > 0 {
            if let Err(e) = self.setattr(ino, size_only(0)) {
                let _ = self.call(&Request::Close { ino });
                return Err(e);
            }
        }
        let fd = self.next_fd;
        self.next_fd += 1;
        self.fds.insert(
            fd,
            Open {
                ino,
                flags,
                offset: 0,
            },
        );
        Ok(Fd(fd))
    }

    fn make(&mut self, path: &str, mode: u32, target: Vec<u8>) -> Result<u64, Errno> {
        let (parent, name) = self.parent_and_name(path)?;
        match self.call(&Request::Make {
            parent,
            name,
            mode,
            target,
        })? {
            Reply::Entry { ino, .. } => Ok(ino),
            _ => Err(Errno::EIO),
        }
    }

    fn remove(&mut self, path: &str, dir: bool) -> Result<(), Errno> {
        let (parent, name) = self.parent_and_name(path)?;
        self.call(&Request::Remove { parent, name, dir })
            .map(|_| ())
    }

    /// Resolves `path` to (parent directory, last name); the name is `None` for the root.
    fn parent_of(&mut self, path: &str, depth: &mut u32) -> Result<(u64, Option<Vec<u8>>), Errno> {
        let comps = components(path)?;
        let Some((last, dirs)) = comps.split_last() else {
            return Ok((ROOT, None));
        };
        let mut dir = ROOT;
        for c in dirs {
            dir = self.step(dir, c, depth)?;
            if self.getattr(dir)?.kind() != S_IFDIR {
                return Err(Errno::ENOTDIR);
            }
        }
        Ok((dir, Some(last.to_vec())))
    }

    fn step(&mut self, dir: u64, name: &[u8], depth: &mut u32) -> Result<u64, Errno> {
        let ino = self.lookup(dir, name)?;
        if self.getattr(ino)?.kind() == S_IFLNK {
            return self.follow(dir, ino, depth);
        }
        Ok(ino)
    }

    fn follow(&mut self, dir: u64, link: u64, depth: &mut u32) -> Result<u64, Errno> {
        *depth += 1;
        if *depth > SYMLOOP_MAX {
            return Err(Errno::ELOOP);
        }
        let target = String::from_utf8(self.readlink(link)?).map_err(|_| Errno::EINVAL)?;
        let mut cur = if target.starts_with('/') { ROOT } else { dir };
        for c in components(&target)? {
            if self.getattr(cur)?.kind() != S_IFDIR {
                return Err(Errno::ENOTDIR);
            }
            cur = self.step(cur, c, depth)?;
        }
        Ok(cur)
    }

    fn resolve(&mut self, path: &str, follow: bool) -> Result<u64, Errno> {
        let mut depth = 0;
        let (dir, last) = self.parent_of(path, &mut depth)?;
        let Some(last) = last else { return Ok(ROOT) };
        let ino = self.lookup(dir, &last)?;
        if follow && self.getattr(ino)?.kind() == S_IFLNK {
            return self.follow(dir, ino, &mut depth);
        }
        Ok(ino)
    }

    fn parent_and_name(&mut self, path: &str) -> Result<(u64, Vec<u8>), Errno> {
        let (dir, last) = self.parent_of(path, &mut 0)?;
        Ok((dir, last.ok_or(Errno::EEXIST)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_path_is_read_from_the_one_sided_lanes() {
        let cma = "#  lane[0]:  3:sysv/memory.0 md[2] -> md[2]/sysv/sysdev[255] am am_bw#0\n\
                   #  lane[2]:  5:cma/memory.0 md[4] -> md[4]/cma/sysdev[255] rma_bw#0\n";
        assert_eq!(data_path(cma), DataPath::OneSided("cma".into()));
        let tcp = "#  lane[0]:  0:tcp/lo.0 md[0] -> md[0]/tcp/sysdev[255] rma_bw#0 am am_bw#0\n";
        assert_eq!(data_path(tcp), DataPath::InMessages("tcp".into()));
        assert_eq!(data_path(""), DataPath::InMessages("tcp".into()));
    }
}
