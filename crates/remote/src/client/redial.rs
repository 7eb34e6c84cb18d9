//! Connecting, and connecting again: a client whose server went away (killed, restarted)
//! can wait for it, as an NFS hard mount does, and carry on where it was
//! ([`Client::ride_through_restarts`]).
//!
//! After a reconnection the client drops every cache (names, attributes, maps: the store may
//! have changed meanwhile, and a crashed server recovers to its last sync), and takes again,
//! by number and generation ([`Request::Hold`]), every hold and open handle the server kept
//! for it: the kernel's inode numbers and the program's open files go on naming the same
//! files. An inode that did not survive (an unlinked file kept by its open handles, which a
//! restarted server reclaims) or whose number now names another file is stale: calls on it
//! fail with `ESTALE`. Record locks are not taken again (the server dropped them with the
//! connection): a program holding one across a restart of the server has lost it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use switchyard_store::{Errno, Owner};
use switchyard_ucx::{Endpoint, Failures, Node, RKey};

use super::data_path::data_path;
use super::inner::MappedWords;
use super::wait::wait_reply;
use super::{errno, Client, ConnectError, DataPath, Inner};
use crate::auth::Key;
use crate::proto::{Reply, Request, Welcome, PROTOCOL_VERSION};

/// Where the server is and how this client proves itself to it.
pub(super) struct Dial {
    pub(super) addr: SocketAddr,
    pub(super) key: Key,
    pub(super) write: bool,
    /// Large reads pulled ([`Client::connect_pulling`]).
    pub(super) pulling: bool,
}

/// One connection's parts, in the order they are dropped (the keys before the node that
/// unpacked them).
pub(super) struct Conn {
    /// The server's change words mapped into this process, where they can be (on one host:
    /// [`Node::mapped`]); a word is then a load, not a get. Lives as long as `changes_key`.
    pub(super) changes_mapped: Option<MappedWords>,
    pub(super) data_key: RKey,
    pub(super) changes_key: RKey,
    pub(super) node: Node,
    pub(super) ctl: Endpoint,
    pub(super) data: Endpoint,
    pub(super) welcome: Welcome,
    pub(super) path: DataPath,
    /// The token this client's pulls carry ([`DataPath::Pulled`]).
    pub(super) token: [u8; 16],
}

/// The inode a descriptor of this client names once its file did not survive a restart of
/// the server: no inode has this number, and every call on it fails with `ESTALE`.
pub(super) const GONE: u64 = u64::MAX;

/// How long a client riding through a restart waits between tries to connect.
const RETRY: Duration = Duration::from_millis(250);

impl Dial {
    /// Connects, proves the key, and opens the data endpoint.
    pub(super) fn connect(&self) -> Result<Conn, ConnectError> {
        let (addr, key, write) = (self.addr, &self.key, self.write);
        // UCX starts its event thread with the node: inside a program, it takes no signal.
        let _signals = crate::signals::SignalsBlocked::new();
        let fail = failing(addr);
        let (mut node, mut ctl, mut welcome) = greet(addr, key, write, Node::new)?;
        if !may_attach_memory_of(welcome.server_uid) {
            // On the server's host UCX would choose its shared memory for the data endpoint,
            // which the kernel keeps from another user: start again without it.
            node.close(ctl);
            drop(node);
            (node, ctl, welcome) = greet(addr, key, write, Node::without_shared_memory)?;
        }
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
        let changes_mapped = node
            .mapped(&changes_key, welcome.changes_addr)
            .map(|at| MappedWords(at.cast()));
        let bulk_one_sided = node.one_sided_over_bulk_lanes() && !self.pulling;
        let mut path = data_path(&node.describe(&data), bulk_one_sided);
        let mut token = [0u8; 16];
        if let DataPath::Pulled(t) = &path {
            // The server sends pulled pieces on an endpoint of its own to this worker.
            match attach(&node, &ctl, HANDSHAKE) {
                Ok(tk) => token = tk,
                Err(_) => path = DataPath::OneSided(t.clone()),
            }
        }
        Ok(Conn {
            changes_mapped,
            data_key,
            changes_key,
            node,
            ctl,
            data,
            welcome,
            path,
            token,
        })
    }
}

impl Client {
    /// From now on, a call that finds the server gone waits for it to come back (tried every
    /// quarter second, for as long as it takes, until [`Client::stop_waiting`]), connects
    /// again, takes back this client's holds and open handles, and runs again: as an NFS
    /// hard mount, programs see a pause, not an error. See the module's documentation for
    /// what does not survive. `switchyard mount --remote` rides through restarts.
    pub fn ride_through_restarts(&self) {
        let _ = self.with(|i| {
            i.ride = true;
            Ok(())
        });
    }

    /// Ends any wait for the server (now and to come): the waiting calls fail with
    /// `ENOTCONN`. For a front end that is shutting down.
    pub fn stop_waiting(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Inner {
    /// Whether `e` means the server went away: the connection is closed (not merely a
    /// request refused or slow).
    pub(super) fn lost(&mut self, e: Errno) -> bool {
        if e != Errno(libc::ENOTCONN) && e != Errno(libc::ETIMEDOUT) && e != Errno::EIO {
            return false;
        }
        self.conn.node.progress();
        !self.conn.node.is_open(&self.conn.ctl)
    }

    /// Waits for the server and connects again, then takes back this client's holds and
    /// open handles; fails with `ENOTCONN` once `stop` is set.
    pub(super) fn reconnect(&mut self, stop: &AtomicBool) -> Result<(), Errno> {
        let addr = self.dial.addr;
        eprintln!(
            "switchyard: the server at {addr} went away; waiting for it (calls wait, as on an \
             NFS hard mount)"
        );
        let since = Instant::now();
        loop {
            let conn = loop {
                if stop.load(Ordering::Acquire) {
                    return Err(Errno(libc::ENOTCONN));
                }
                match self.dial.connect() {
                    Ok(c) => break c,
                    Err(_) => std::thread::sleep(RETRY),
                }
            };
            self.adopt(conn);
            match self.take_back() {
                Ok(stale) => {
                    eprintln!(
                        "switchyard: connected again to {addr} after {:.1} s{}",
                        since.elapsed().as_secs_f64(),
                        match stale {
                            0 => String::new(),
                            n => format!("; {n} file(s) did not survive (ESTALE)"),
                        }
                    );
                    return Ok(());
                }
                // Gone again while taking back: wait again.
                Err(e) if self.lost(e) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Makes `c` this client's connection, dropping the old one and every cache.
    fn adopt(&mut self, c: Conn) {
        drop(std::mem::replace(&mut self.conn, c));
        self.seq = 2;
        self.forget();
        self.opened.clear();
    }

    /// Takes back every hold and open handle the old connection had, by number and
    /// generation; returns how many inodes turned out stale.
    fn take_back(&mut self) -> Result<usize, Errno> {
        let before = self.stale.len();
        let held: Vec<u64> = self.holds.keys().copied().collect();
        for ino in held {
            let Some(&generation) = self.generations.get(&ino) else {
                continue;
            };
            match self.call(&Request::Hold { ino, generation }) {
                Ok(_) => self.holds.get_mut(&ino).expect("listed").1 = 1,
                Err(e) if e == Errno::ESTALE || e == Errno::ENOENT => {
                    self.holds.remove(&ino);
                    self.stale.insert(ino);
                    self.unnote(ino);
                }
                Err(e) => return Err(e),
            }
        }
        let opens = std::mem::take(&mut self.opens);
        for (ino, n) in opens {
            let generation = self.generations.get(&ino).copied();
            for _ in 0..n {
                match self.call(&Request::Open { ino }) {
                    Ok(Reply::Stat(s)) if Some(s.generation) == generation => {}
                    Ok(_) => {
                        let _ = self.call(&Request::Close { ino });
                        self.stale.insert(ino);
                        break;
                    }
                    Err(e) if e == Errno::ESTALE || e == Errno::ENOENT => {
                        self.stale.insert(ino);
                        self.unnote(ino);
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        for f in self.fds.values_mut() {
            if self.stale.contains(&f.ino) {
                f.ino = GONE;
            }
        }
        Ok(self.stale.len() - before)
    }

    /// Notes what `req`, answered `reply`, changed of what the server keeps for this client:
    /// open handles, and the generations of held and open inodes.
    pub(super) fn note(&mut self, req: &Request, reply: &Reply) {
        // A number handed out now names a live file, whatever it named before (a stale
        // file's number given to a new one: the kernel tells them apart by generation).
        if let Reply::Entry { ino, .. } = reply {
            self.stale.remove(ino);
        }
        match (req, reply) {
            (Request::Open { ino }, Reply::Stat(s)) => {
                *self.opens.entry(*ino).or_default() += 1;
                self.generations.insert(*ino, s.generation);
            }
            (Request::Close { ino }, _) => {
                if let Some(n) = self.opens.get_mut(ino) {
                    *n -= 1;
                    if *n == 0 {
                        self.opens.remove(ino);
                    }
                }
                self.unnote(*ino);
            }
            (Request::Lookup { hold: true, .. }, Reply::Entry { ino, stat })
            | (Request::Make { hold: true, .. }, Reply::Entry { ino, stat }) => {
                self.generations.insert(*ino, stat.generation);
            }
            (
                Request::Link {
                    ino, hold: true, ..
                },
                Reply::Stat(s),
            ) => {
                self.generations.insert(*ino, s.generation);
            }
            (Request::Forget { ino, .. }, _) => self.unnote(*ino),
            _ => {}
        }
    }

    /// Forgets the generation of `ino` once this client neither holds nor has it open.
    fn unnote(&mut self, ino: u64) {
        if !self.holds.contains_key(&ino) && !self.opens.contains_key(&ino) {
            self.generations.remove(&ino);
        }
    }

    /// `ESTALE` where `req` names an inode that did not survive a restart of the server.
    pub(super) fn check_live(&self, req: &Request) -> Result<(), Errno> {
        let ino = match req {
            Request::Getattr { ino }
            | Request::Readdir { ino }
            | Request::Readlink { ino }
            | Request::Setattr { ino, .. }
            | Request::Open { ino }
            | Request::Fsync { ino }
            | Request::Map { ino, .. }
            | Request::Read { ino, .. }
            | Request::Prepare { ino, .. }
            | Request::Write { ino, .. }
            | Request::Append { ino, .. }
            | Request::Fallocate { ino, .. }
            | Request::Seek { ino, .. }
            | Request::Link { ino, .. }
            | Request::Setxattr { ino, .. }
            | Request::Getxattr { ino, .. }
            | Request::Listxattr { ino }
            | Request::Removexattr { ino, .. } => *ino,
            Request::Lookup { parent, .. } | Request::Make { parent, .. } => *parent,
            _ => return Ok(()),
        };
        self.live(ino)
    }

    /// `ESTALE` where `ino` did not survive a restart of the server.
    pub(super) fn live(&self, ino: u64) -> Result<(), Errno> {
        if ino == GONE || (!self.stale.is_empty() && self.stale.contains(&ino)) {
            Err(Errno::ESTALE)
        } else {
            Ok(())
        }
    }
}

/// How long each step of connecting waits for the server.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Connects a node `make` starts to the server at `addr`, proves `key` and asks for write
/// access if `write`: the node, its control endpoint and the server's welcome.
fn greet(
    addr: SocketAddr,
    key: &Key,
    write: bool,
    make: fn() -> Result<Node, switchyard_ucx::Error>,
) -> Result<(Node, Endpoint, Welcome), ConnectError> {
    let fail = failing(addr);
    let node = make().map_err(|e| fail("starting UCX", &e))?;
    let ctl = node.connect(addr).map_err(|e| fail("cannot connect", &e))?;
    let (_, hello) =
        wait_reply(&node, &ctl, None, HANDSHAKE).map_err(|e| fail("no greeting", &e))?;
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
        uid: Owner::current().uid,
    };
    node.send(&ctl, &[], &auth.encode(1))
        .map_err(|e| fail("sending the proof", &e))?;
    let welcome = match wait_reply(&node, &ctl, Some(1), HANDSHAKE) {
        Ok((_, Reply::Welcome(w))) => w,
        Ok((_, Reply::Error(e))) if e == libc::EACCES => return Err(fail("refused", &"wrong key")),
        Ok((_, Reply::Error(e))) if e == libc::EROFS => {
            return Err(fail("refused", &"the store is served read-only"))
        }
        Ok((_, other)) => return Err(fail("refused", &format!("{other:?}"))),
        Err(e) => return Err(fail("refused", &e)),
    };
    Ok((node, ctl, welcome))
}

/// The error of a connection to `addr` that failed at `what` for `e`.
fn failing(addr: SocketAddr) -> impl Fn(&str, &dyn std::fmt::Display) -> ConnectError {
    move |what, e| ConnectError(format!("switchyard server at {addr}: {what}: {e}"))
}

/// Whether this process may attach the shared memory of a server run by `server_uid`: UCX's
/// segments and cross-memory attach admit their owner, and root (which holds
/// `CAP_IPC_OWNER` and `CAP_SYS_PTRACE`). Another user's client connects without shared
/// memory ([`Node::without_shared_memory`]); where the server is on another host, that
/// changes nothing.
fn may_attach_memory_of(server_uid: u32) -> bool {
    let me = Owner::current().uid;
    me == 0 || me == server_uid
}

/// Asks the server to connect to this worker for pulls; returns their token.
fn attach(node: &Node, ctl: &Endpoint, timeout: Duration) -> Result<[u8; 16], Errno> {
    let address = node.address().map_err(errno)?;
    node.send(ctl, &[], &Request::Attach { address }.encode(2))
        .map_err(errno)?;
    match wait_reply(node, ctl, Some(2), timeout)? {
        (_, Reply::Bytes(t)) => t.try_into().map_err(|_| Errno::EIO),
        (_, Reply::Error(e)) => Err(Errno(e)),
        _ => Err(Errno::EIO),
    }
}
