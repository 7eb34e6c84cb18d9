//! The client: the local `Fs`'s paths, descriptors and errnos over a remote store.
//!
//! Caches are checked, never trusted: a cached name is used while its directory's change
//! word is the one read before the lookup; cached attributes and extent maps while their
//! file's word is the one they came with. A cached extent map covers a window of its file
//! around the reads that fetched it, not the whole file ([`one_sided`]), so what a read
//! fetches does not grow with the file. A word is one 8-byte one-sided get. On the
//! in-message data path (no one-sided access) nothing is cached: every call asks the server.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard_store::{
    Attr, DirEntry, Errno, Fd, Files, OpenFlags, Rename, SetAttr, Stat, StatFs, Whence, S_IFDIR,
    S_IFLNK,
};

use crate::auth::Key;

mod aio;
mod data_path;
mod in_messages;
mod inner;
mod inodes;
mod one_sided;
mod paths;
mod pull;
mod redial;
mod wait;

pub use crate::proto::MAP_WINDOW;
use crate::proto::{Reply, Request};
pub use aio::Pending;
pub use data_path::DataPath;

/// Symlinks followed in one path walk before `ELOOP` (as the local `Fs`).
const SYMLOOP_MAX: u32 = 40;
/// Bytes read to get one change word (its line; the table is page aligned).
const WORD_LINE: usize = 64;
/// Reads of a cached map retried after its file changed before asking the server to read.
const READ_RETRIES: u32 = 8;

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
    /// Extent maps fetched (each of a window of a file around a read, never necessarily
    /// the whole file).
    pub map_fetches: u64,
    /// Runs those maps held.
    pub map_runs_fetched: u64,
    /// Bytes of the replies that carried them: bounded per read by its size plus two
    /// windows of the map cache, whatever the file's size.
    pub map_bytes_fetched: u64,
}

impl ClientStats {
    /// The counters as (name, value) rows, in a fixed order.
    pub fn rows(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("requests", self.requests),
            ("one_sided_bytes", self.one_sided_bytes),
            ("message_bytes", self.message_bytes),
            ("cache_hits", self.cache_hits),
            ("cache_misses", self.cache_misses),
            ("read_retries", self.read_retries),
            ("map_fetches", self.map_fetches),
            ("map_runs_fetched", self.map_runs_fetched),
            ("map_bytes_fetched", self.map_bytes_fetched),
        ]
    }
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
    inner: Arc<Mutex<Inner>>,
    /// Set by [`Client::stop_waiting`]: a client riding through a restart stops waiting.
    stop: Arc<AtomicBool>,
    /// The thread that runs asynchronous calls, started by the first.
    io: Mutex<Option<aio::IoThread>>,
}

struct Inner {
    /// The connection: endpoints, memory keys, the server's welcome and the data path.
    conn: redial::Conn,
    seq: u64,
    timeout: Duration,
    /// (directory, name) → (inode, the directory's change word before the lookup).
    names: HashMap<(u64, Vec<u8>), (u64, u64)>,
    /// Inode → (what it is, its change word before that was fetched).
    attrs: HashMap<u64, (Stat, u64)>,
    /// Inode → its change word when this client last opened it through `Inodes::open`.
    opened: HashMap<u64, u64>,
    /// Inode → (holds the kernel front end has, holds the server keeps for this client):
    /// the server is asked for a hold only when the front end has none, and told once the
    /// front end forgot them all.
    holds: HashMap<u64, (u64, u64)>,
    /// Inode → the extent map of a window of it (with the change word read with it).
    maps: HashMap<u64, one_sided::Window>,
    fds: BTreeMap<u32, Open>,
    next_fd: u32,
    stats: ClientStats,
    /// Where the store's root appears to the program ([`Client::set_link_root`]); `None`:
    /// an absolute symlink target is read from the store's root.
    link_root: Option<Vec<u8>>,
    /// How to reach the server again, and whether to ([`Client::ride_through_restarts`]).
    dial: redial::Dial,
    ride: bool,
    /// Inode → open handles the server keeps for this client (`Request::Open`, through either
    /// interface), taken again after a reconnection.
    opens: HashMap<u64, u64>,
    /// Inode → its generation, for every inode this client holds or has open: what names
    /// the file when it takes them again.
    generations: HashMap<u64, u64>,
    /// Inodes held or open across a restart of the server that are gone (or whose number
    /// names another file now): every call on them fails with `ESTALE`.
    stale: HashSet<u64>,
}

fn errno(e: switchyard_ucx::Error) -> Errno {
    Errno(e.errno())
}

impl Client {
    /// Connects to the server at `addr`, proves `key`, and opens the data endpoint. `write`
    /// asks for write access (refused by a read-only server).
    pub fn connect(addr: SocketAddr, key: &Key, write: bool) -> Result<Client, ConnectError> {
        Client::connect_reading(addr, key, write, false)
    }

    /// [`Client::connect`], with large reads pulled ([`DataPath::Pulled`]) wherever the data
    /// endpoint has a bulk lane other than `tcp`, even where this UCX would get over it
    /// ([`switchyard_ucx::Node::one_sided_over_bulk_lanes`]): the path a UCX without
    /// one-sided gets there takes, kept to compare with (`bench remote`) and to test on any
    /// UCX.
    pub fn connect_pulling(
        addr: SocketAddr,
        key: &Key,
        write: bool,
    ) -> Result<Client, ConnectError> {
        Client::connect_reading(addr, key, write, true)
    }

    fn connect_reading(
        addr: SocketAddr,
        key: &Key,
        write: bool,
        pulling: bool,
    ) -> Result<Client, ConnectError> {
        let dial = redial::Dial {
            addr,
            key: key.clone(),
            write,
            pulling,
        };
        Ok(Client {
            io: Mutex::new(None),
            stop: Arc::new(AtomicBool::new(false)),
            inner: Arc::new(Mutex::new(Inner {
                conn: dial.connect()?,
                seq: 2,
                timeout: Duration::from_secs(30),
                names: HashMap::new(),
                attrs: HashMap::new(),
                maps: HashMap::new(),
                opened: HashMap::new(),
                holds: HashMap::new(),
                fds: BTreeMap::new(),
                next_fd: 3,
                stats: ClientStats::default(),
                link_root: None,
                dial,
                ride: false,
                opens: HashMap::new(),
                generations: HashMap::new(),
                stale: HashSet::new(),
            })),
        })
    }

    /// Says where the store's root appears to the program (`/sy` for a file preload with
    /// that prefix), as an absolute path without a trailing slash. An absolute symlink target
    /// under it then resolves as the kernel would resolve it through that path: `/sy/a/f`
    /// names the store's `/a/f`, as `ln -s /sy/a/f link` meant. Other absolute targets are
    /// still read from the store's root.
    pub fn set_link_root(&self, root: &[u8]) {
        let root = root.strip_suffix(b"/").unwrap_or(root).to_vec();
        let _ = self.with(|i| {
            i.link_root = Some(root.clone());
            Ok(())
        });
    }

    /// Runs `f` on the connection. A client that rides through restarts runs it again once
    /// it has reconnected, when it failed because the server went away (the request may
    /// have been carried out before it went: as over NFS, a repeated create or remove can
    /// then fail with `EEXIST` or `ENOENT`).
    fn with<T>(&self, mut f: impl FnMut(&mut Inner) -> Result<T, Errno>) -> Result<T, Errno> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match f(&mut g) {
                Err(e) if g.ride && g.lost(e) => g.reconnect(&self.stop)?,
                r => return r,
            }
        }
    }

    /// How data moves (one-sided, or inside messages where the transport cannot).
    pub fn data_path(&self) -> DataPath {
        self.with(|i| Ok(i.conn.path.clone())).expect("infallible")
    }

    /// Whether the server's change words are mapped into this process (on one host, where
    /// UCX shares memory: [`switchyard_ucx::Node::mapped`]), so the caches' checks are
    /// loads, not gets.
    pub fn change_words_mapped(&self) -> bool {
        self.with(|i| Ok(i.conn.changes_mapped.is_some()))
            .expect("infallible")
    }

    /// From now on, moves data inside requests and replies even where one-sided access
    /// exists, and caches nothing (to compare the two paths, as `bench remote` does).
    pub fn force_in_messages(&self) {
        self.with(|i| {
            let t = match &i.conn.path {
                DataPath::OneSided(t) | DataPath::Pulled(t) | DataPath::InMessages(t) => t.clone(),
            };
            i.conn.path = DataPath::InMessages(t);
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

    /// Makes the whole served store durable: on a store file on a disk, every change that
    /// returned to any client (`syncfs`; [`switchyard_store::Store::sync`] on the server).
    pub fn sync(&self) -> Result<(), Errno> {
        self.with(|i| i.done(&Request::Sync))
    }

    /// Counters so far.
    pub fn stats(&self) -> ClientStats {
        self.with(|i| Ok(i.stats.clone())).expect("infallible")
    }

    /// The server's counters now ([`ServerStats::rows`](crate::ServerStats::rows)).
    pub fn server_counters(&self) -> Result<Vec<(String, u64)>, Errno> {
        self.with(|i| match i.call(&Request::Counters)? {
            Reply::Counters(rows) => Ok(rows
                .into_iter()
                .map(|(n, v)| (String::from_utf8_lossy(&n).into_owned(), v))
                .collect()),
            _ => Err(Errno::EIO),
        })
    }

    /// Whether the server granted write access.
    pub fn writable(&self) -> bool {
        self.with(|i| Ok(i.conn.welcome.writable))
            .expect("infallible")
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
            let ino = i.fds.get(&fd.0).ok_or(Errno::EBADF)?.ino;
            // Gone only once the server has closed it (after a reconnection, the handle the
            // client took back).
            if ino != redial::GONE {
                i.done(&Request::Close { ino })?;
            }
            i.fds.remove(&fd.0);
            Ok(())
        })
    }

    /// Reads at the descriptor's offset and advances it.
    fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize, Errno> {
        self.with(|i| i.read_fd(fd, buf, None))
    }

    /// Reads at `off`.
    fn pread(&self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize, Errno> {
        self.with(|i| i.read_fd(fd, buf, Some(off)))
    }

    /// Writes at the descriptor's offset (the end, for an append descriptor) and advances
    /// it. Durable and atomic on the server when it returns.
    fn write(&self, fd: Fd, data: &[u8]) -> Result<usize, Errno> {
        self.with(|i| i.write_fd(fd, data, None))
    }

    /// Writes at `off`.
    fn pwrite(&self, fd: Fd, data: &[u8], off: u64) -> Result<usize, Errno> {
        self.with(|i| i.write_fd(fd, data, Some(off)))
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

    /// Makes the file durable: on a store file on a disk, every change that returned (the
    /// server's [`switchyard_store::Store::fsync`]).
    fn fsync(&self, fd: Fd) -> Result<(), Errno> {
        self.with(|i| {
            let ino = i.fds.get(&fd.0).ok_or(Errno::EBADF)?.ino;
            i.done(&Request::Fsync { ino })
        })
    }

    /// Makes the whole served store durable (the server's
    /// [`switchyard_store::Store::sync`]).
    fn sync(&self) -> Result<(), Errno> {
        Client::sync(self)
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
            i.done(&Request::Rename {
                parent,
                name,
                new_parent,
                new_name,
                how: Rename::Replace,
            })
        })
    }

    /// A new name `to` for the file at `from`.
    fn link(&self, from: &str, to: &str) -> Result<(), Errno> {
        self.with(|i| {
            let ino = i.resolve(from, false)?;
            let (parent, name) = i.parent_and_name(to)?;
            i.done(&Request::Link {
                ino,
                parent,
                name,
                hold: false,
            })
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
            i.readdir(ino)
        })
    }

    /// Space and inode counts.
    fn statfs(&self) -> Result<StatFs, Errno> {
        self.with(|i| i.statfs())
    }

    /// The whole content of the file at `path`.
    fn read_all(&self, path: &str) -> Result<Vec<u8>, Errno> {
        let fd = Files::open(self, path, OpenFlags::READ, 0)?;
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
