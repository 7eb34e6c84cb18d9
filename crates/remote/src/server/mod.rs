//! The server: the store's single owner, answering clients' metadata requests and handing
//! authenticated clients the keys to read (and fill) its data area one-sided.
//!
//! One thread drives one UCX worker: it accepts connections, sends each a challenge, checks
//! the proof, and answers requests in arrival order. Data does not pass through this thread
//! on transports with one-sided access: clients read the data area and put into reserved
//! blocks themselves. Where clients pull ([`crate::DataPath::Pulled`]), this thread names the
//! blocks of a pull and UCX sends them from where they lie, fetched by the client's transport;
//! a grace keeps them from reuse until then. Where data moves inside messages, a large read's
//! reply is sent from where the file's bytes lie, under a grace too. Replies leave without
//! this thread waiting for them: a client slow to take its messages holds up no one, and one
//! that does not take them within 10 s is disconnected. What a client leaves
//! behind when it goes — preparations it never committed, files it held open, messages in
//! flight — is undone when its endpoint fails or closes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use switchyard_mover::qos;
use switchyard_store::{Errno, Owner, PreparedWrite, Store};
use switchyard_ucx::{Endpoint, Failures, Node};

use crate::auth::Key;
use crate::locks::Locks;
use crate::proto::{map_window, Reply, Request, Welcome, MAX_BYTES, PROTOCOL_VERSION};
use sends::Outgoing;

mod requests;
mod sends;

/// Pieces of a pull up to this many bytes are copied into the message by UCX (a copy of a few
/// pages costs less than a rendezvous round trip); larger ones go by rendezvous, fetched by
/// the client's transport.
pub const COPIED_PIECE: usize = 16 << 10;

/// Reads of at least this many bytes answered in a message are sent from where the file's
/// bytes lie, under a grace, rather than copied into the reply first: over `tcp` the kernel
/// copies them into the socket either way, and the copy before it is this thread's (measured
/// by `bench remote --sshfs`: 1 MiB reads).
const LENT_FROM: u64 = 64 << 10;

/// A read sent from where it lies has at most this many runs (more, or a hole, and it is
/// copied into its reply).
const LENT_RUNS: usize = 16;

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Where to listen (port 0: any free port).
    pub listen: SocketAddr,
    /// Refuse every change, and register the data area for reads only.
    pub read_only: bool,
    /// The secret clients must prove.
    pub key: Key,
}

/// What the server did, counted as it runs (readable from another thread).
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Clients that proved the key.
    pub authenticated: AtomicU64,
    /// Connections refused (wrong key, malformed message, request before the proof).
    pub refused: AtomicU64,
    /// Requests answered.
    pub requests: AtomicU64,
    /// Data bytes moved inside requests and replies (the in-message data path).
    pub message_bytes: AtomicU64,
    /// Bytes committed by one-sided writes.
    pub committed_bytes: AtomicU64,
    /// Bytes of the data area sent to clients' pulls (fetched by their transport).
    pub pulled_bytes: AtomicU64,
    /// Preparations given back because their client went away or aborted.
    pub abandoned: AtomicU64,
    /// Clients closed at once, without a flush, because they had not taken messages the
    /// server sent them (past the 10 s deadline, 16 of them, or refused with some untaken).
    pub cut_off: AtomicU64,
    /// CPU time the serving thread has used, in nanoseconds (updated as it runs).
    pub cpu_ns: AtomicU64,
}

impl ServerStats {
    /// The counters as (name, value) rows, in a fixed order.
    pub fn rows(&self) -> Vec<(&'static str, u64)> {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("connections", n(&self.connections)),
            ("authenticated", n(&self.authenticated)),
            ("refused", n(&self.refused)),
            ("requests", n(&self.requests)),
            ("message_bytes", n(&self.message_bytes)),
            ("committed_bytes", n(&self.committed_bytes)),
            ("pulled_bytes", n(&self.pulled_bytes)),
            ("abandoned", n(&self.abandoned)),
            ("cut_off", n(&self.cut_off)),
            ("cpu_ms", n(&self.cpu_ns) / 1_000_000),
        ]
    }
}

/// Asks the scheduler for short slices for the calling thread (the serving thread): it runs
/// in bursts of microseconds, once per request, and with EEVDF (Linux 6.12 and later) a thread
/// that asks for a short slice (`sched_runtime` of a `SCHED_OTHER` thread) gets an early
/// deadline, so when a request wakes it, it preempts a CPU-bound neighbour instead of waiting
/// out that neighbour's slice (milliseconds). Its share of the CPU is unchanged (same policy,
/// same nice). A kernel without custom slices refuses the request, which leaves the default.
fn ask_for_short_slices() {
    // SAFETY: `sched_attr` is plain data; sched_getattr fills at most `size` bytes of it for
    // the calling thread (pid 0), sched_setattr reads it; neither keeps the pointer.
    unsafe {
        let mut attr: libc::sched_attr = std::mem::zeroed();
        let size = std::mem::size_of::<libc::sched_attr>() as libc::c_uint;
        if libc::syscall(libc::SYS_sched_getattr, 0, &mut attr, size, 0) != 0
            || attr.sched_policy != libc::SCHED_OTHER as u32
        {
            return;
        }
        attr.size = size;
        attr.sched_runtime = 100_000; // ns: the shortest slice the kernel grants
        libc::syscall(libc::SYS_sched_setattr, 0, &attr, 0);
    }
}

/// CPU time the calling thread has used.
fn thread_cpu_ns() -> u64 {
    // SAFETY: clock_gettime writes the zeroed timespec we pass and reads nothing else.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
        ts
    };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Why serving stopped before it began.
#[derive(Debug)]
pub struct ServeError(pub String);

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServeError {}

/// One connected client.
struct Peer<'s> {
    ep: Endpoint,
    challenge: [u8; 32],
    /// `None` until the client proved the key; then whether it may change the store.
    writable: Option<bool>,
    prepared: HashMap<u64, PreparedWrite<'s>>,
    /// Open handles by inode, released when the client goes.
    opens: HashMap<u64, u64>,
    /// Holds (kernel lookups of the client's mount) by inode, released when the client goes.
    holds: HashMap<u64, u64>,
    /// The tenant its requests' copies carry (module `switchyard_mover::qos`), from the uid
    /// it proved the key for.
    tenant: u16,
    /// The server's endpoint to the client's worker, for pulls ([`Request::Attach`]; the
    /// pulls' token is its key in [`Server::tokens`]).
    data: Option<Endpoint>,
    /// Whether the client caches extent maps (it asked for one: [`Request::Map`]): its
    /// small writes are answered with their window's map ([`Reply::WrittenMap`]). A client
    /// on the in-message path caches nothing and never asks, and gets the bare count.
    caches_maps: bool,
}

/// Ends the store's change-word mirror when dropped (before the memory it is in goes).
struct Unmirror<'s>(&'s Store);

impl Drop for Unmirror<'_> {
    fn drop(&mut self) {
        self.0.changes().unmirror();
    }
}

/// Why listening on `at` failed, saying so where another process holds the address.
fn listen_failed(at: SocketAddr, e: switchyard_ucx::Error) -> ServeError {
    let what = format!("listening on {at}");
    if e.errno() == libc::EADDRINUSE {
        ServeError(format!(
            "{what}: the address is in use: another process listens there (another \
             `switchyard serve`?); stop it, or pass --listen with another port ({e})"
        ))
    } else {
        ServeError(format!("{what}: {e}"))
    }
}

/// Serves `store` until `stop` is set: listens, calls `ready` with the address bound, and
/// answers clients. Returns when stopped, after every client's leftovers are undone.
pub fn serve(
    store: &Store,
    opts: &ServeOptions,
    stats: &ServerStats,
    stop: &AtomicBool,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| ServeError(format!("{what}: {e}"));
    ask_for_short_slices();
    let node = Node::new().map_err(|e| fail("starting UCX", &e))?;
    let (data_start, data_len) = store.data_area();
    let data_ptr = store
        .region()
        .as_mut_ptr()
        .wrapping_add(data_start as usize);
    // SAFETY: the data area lies inside the store's mapping, which outlives `node` (made in
    // this function, dropped before it returns). Holders of the key may read it — the store
    // never names a block to a reader before its commit — and, with the writable key, put
    // into it: clients are told to put only into blocks reserved for them (the crate docs say
    // what a key holder can reach).
    let reg = |writable| unsafe { node.register(data_ptr, data_len as usize, writable) };
    let reader = reg(false).map_err(|e| fail("registering the data area", &e))?;
    let writer = if opts.read_only {
        None
    } else {
        Some(reg(true).map_err(|e| fail("registering the data area", &e))?)
    };
    // The change words, mirrored into memory UCX allocates where peers on this host can map
    // it: they check a word with a load instead of a get. Where UCX cannot allocate such
    // memory, the table itself is registered (peers get its words).
    let (table, changes_len) = store.changes().bytes();
    let (changes, changes_ptr, _unmirror) = match node.allocate(changes_len, false) {
        Ok((reg, at)) => {
            // SAFETY: `at` is UCX's allocation of the table's size (page-aligned), mapped
            // until `node` is dropped, which happens after `Unmirror` (made here, declared
            // after `node`, so dropped first) has ended the mirror. Peers get a read-only key.
            unsafe { store.changes().mirror(at) };
            (reg, at as *const u8, Some(Unmirror(store)))
        }
        Err(_) => {
            // SAFETY: the change words live as long as the store; peers only read them.
            let reg = unsafe { node.register(table.cast_mut(), changes_len, false) }
                .map_err(|e| fail("registering the change words", &e))?;
            (reg, table, None)
        }
    };
    let pack = |r| {
        node.pack_rkey(r)
            .map_err(|e| fail("packing a memory key", &e))
    };
    let welcome = Welcome {
        address: node.address().map_err(|e| fail("worker address", &e))?,
        writable: false,
        data_start,
        data_len,
        data_addr: data_ptr as u64,
        data_key: pack(reader)?,
        changes_addr: changes_ptr as u64,
        changes_key: pack(changes)?,
        server_uid: Owner::current().uid,
    };
    let writer_key = writer.map(pack).transpose()?;
    let bound = node
        .listen(opts.listen)
        .map_err(|e| listen_failed(opts.listen, e))?;
    ready(bound);
    let mut server = Server {
        store,
        opts,
        stats,
        welcome,
        writer_key,
        peers: HashMap::new(),
        next_id: 1,
        out: Vec::new(),
        locks: Locks::default(),
        data: (data_ptr.cast_const(), data_start, data_len),
        tokens: HashMap::new(),
        outgoing: Vec::new(),
    };
    // The CPU time is read at most once a millisecond (a system call), and at every idle
    // wake-up.
    let mut noted = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if server.outgoing.is_empty() {
            node.wait(Duration::from_millis(100));
        } else {
            // What comes next is a client taking a large message (fetching pulled blocks, or
            // draining a socket), at least a copy of 64 KiB away: polling for it would cost
            // more than the wake-up it saves (the client pulls only reads of `PULL_FROM`
            // bytes or more, and replies that do not leave at once are that large).
            node.sleep(Duration::from_millis(100));
        }
        server.turn(&node);
        if noted.elapsed() >= Duration::from_millis(1) {
            stats.cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
            noted = Instant::now();
        }
    }
    let peers: Vec<Peer<'_>> = server.peers.drain().map(|(_, p)| p).collect();
    for p in peers {
        server.leave(&node, p);
    }
    Ok(())
}

struct Server<'s, 'o, 'n> {
    store: &'s Store,
    opts: &'o ServeOptions,
    stats: &'o ServerStats,
    /// What every authenticated client receives (with the read-only data key).
    welcome: Welcome,
    /// The data area's writable key, for writers (none when serving read-only).
    writer_key: Option<Vec<u8>>,
    peers: HashMap<usize, Peer<'s>>,
    next_id: u64,
    /// The buffer the next read's reply is built in: the largest reply that left at once.
    out: Vec<u8>,
    /// Record locks of every client.
    locks: Locks,
    /// The data area: where it is mapped, its offset in the region, and its length.
    data: (*const u8, u64, u64),
    /// Pull token → the client's control endpoint id.
    tokens: HashMap<[u8; 16], usize>,
    /// Messages in flight (pulls, and replies not sent at once).
    outgoing: Vec<Outgoing<'s, 'n>>,
}

impl<'s, 'n> Server<'s, '_, 'n> {
    /// Accepts new connections, retires failed ones, answers what arrived.
    fn turn(&mut self, node: &'n Node) {
        while let Some(r) = node.next_connection() {
            let Ok(ep) = node.accept(r) else { continue };
            self.stats.connections.fetch_add(1, Ordering::Relaxed);
            let challenge: [u8; 32] = rand::random();
            let hello = Reply::Challenge {
                version: PROTOCOL_VERSION,
                nonce: challenge,
            };
            if node.send(&ep, &[], &hello.encode(0)).is_err() {
                node.close(ep);
                continue;
            }
            let peer = Peer {
                ep,
                challenge,
                writable: None,
                prepared: HashMap::new(),
                opens: HashMap::new(),
                holds: HashMap::new(),
                tenant: 0,
                data: None,
                caches_maps: false,
            };
            self.peers.insert(peer.ep.id(), peer);
        }
        for id in node.failed() {
            if let Some(p) = self.peers.remove(&id) {
                self.leave(node, p);
            }
        }
        while let Some(mut m) = node.next_message() {
            let from = m.from();
            let Some(mut peer) = self.peers.remove(&from) else {
                // A pull comes on the data endpoint, and names its client by token.
                let _ = node.with_body(&mut m, |b| self.pull(node, b));
                continue;
            };
            // A large body (a write's data) is read where UCX received it.
            let keep = node
                .with_body(&mut m, |b| self.handle(node, &mut peer, b))
                .unwrap_or(false);
            drop(m);
            if keep {
                self.peers.insert(from, peer);
            } else {
                self.stats.refused.fetch_add(1, Ordering::Relaxed);
                self.refuse(node, peer);
            }
        }
        self.finish_sends(node);
    }

    /// Connects to a client's worker for its pulls, and returns the token they carry.
    fn attach(&mut self, node: &Node, peer: &mut Peer<'s>, address: &[u8]) -> Reply {
        if peer.data.is_some() {
            return Reply::Error(libc::EALREADY);
        }
        let Ok(ep) = node.connect_address(address, Failures::Undetected) else {
            return Reply::Error(libc::EINVAL);
        };
        // It detects no failure itself: it fails with the control endpoint.
        node.link(&ep, &peer.ep);
        let token: [u8; 16] = rand::random();
        self.tokens.insert(token, peer.ep.id());
        peer.data = Some(ep);
        Reply::Bytes(token.to_vec())
    }

    /// The answer to `peer`'s write of `n` bytes at `off` of `ino`: with the map of the
    /// write's window and then the file's stat where the client caches maps, so the read
    /// that follows (the next chunk of a rewrite) asks for neither (a window's pages, not
    /// the file's: [`map_window`]); the bare count otherwise.
    fn written(&self, peer: &Peer<'s>, ino: u64, off: u64, n: u64) -> Reply {
        let (lo, hi) = map_window(off, n);
        let map = (peer.caches_maps)
            .then(|| self.store.extents(ino, lo, hi - lo).ok())
            .flatten();
        match map.and_then(|m| Some((self.store.stat(ino).ok()?, m))) {
            Some((stat, map)) => Reply::WrittenMap { n, stat, map },
            None => Reply::Written(n),
        }
    }

    /// Answers one message from `peer`; returns whether its connection stays.
    fn handle(&mut self, node: &'n Node, peer: &mut Peer<'s>, b: &[u8]) -> bool {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let _tenant = qos::enter(peer.tenant);
        // A writer's data, written from the message in place.
        let write = Request::write_of(b).filter(|_| peer.writable == Some(true));
        if let Some((seq, ino, off, data)) = write {
            let reply = match self.store.write(ino, off, data) {
                Ok(n) => {
                    self.stats
                        .message_bytes
                        .fetch_add(n as u64, Ordering::Relaxed);
                    self.written(peer, ino, off, n as u64)
                }
                Err(e) => Reply::Error(Errno::from(e).0),
            };
            return self.reply(node, peer, reply.encode(seq));
        }
        let Ok((seq, req)) = Request::decode(b) else {
            return false;
        };
        let (msg, keep) = match req {
            Request::Read { ino, off, len } if peer.writable.is_some() => {
                if len >= LENT_FROM {
                    if let Some(sent) = self.read_lent(node, peer, seq, ino, off, len) {
                        return sent;
                    }
                }
                // Data read into the reply in place.
                (self.read_message(seq, ino, off, len), true)
            }
            Request::Attach { address } if peer.writable.is_some() => {
                (self.attach(node, peer, &address).encode(seq), true)
            }
            req => {
                let (reply, keep) = self.answer(peer, req);
                (reply.encode(seq), keep)
            }
        };
        self.reply(node, peer, msg) && keep
    }

    /// Starts sending `msg` to `peer`; returns false if that failed or the client has too
    /// many replies it has not taken.
    fn reply(&mut self, node: &'n Node, peer: &Peer<'s>, msg: Vec<u8>) -> bool {
        match node.send_owned(&peer.ep, msg) {
            Ok(s) => self.keep(node, peer.ep.id(), s, None),
            Err(_) => false,
        }
    }

    /// Answers a read of `len` bytes at `off` of `ino` with the bytes sent from where they lie
    /// in the data area (after the reply's head), kept from reuse by a grace until the reply
    /// is taken; returns whether the connection stays, or `None` if the range has a hole or
    /// too many runs, or the read fails (the caller copies it into a reply, or answers the
    /// error).
    fn read_lent(
        &mut self,
        node: &'n Node,
        peer: &Peer<'s>,
        seq: u64,
        ino: u64,
        off: u64,
        len: u64,
    ) -> Option<bool> {
        let len = len.min(MAX_BYTES as u64);
        // The grace first, then the map: a block the file gives up after this read of its
        // map is freed into the grace (data is copy-on-write).
        let grace = self.store.grace();
        let ext = self.store.extents(ino, off, len).ok()?;
        let n = ext.attr.size.saturating_sub(off).min(len);
        let mapped: u64 = ext.runs.iter().map(|r| r.len).sum();
        if mapped != n || ext.runs.len() > LENT_RUNS {
            return None;
        }
        let (base, start, _) = self.data;
        let parts: Vec<(*const u8, usize)> = ext
            .runs
            .iter()
            .map(|r| {
                let at = base.wrapping_add((r.region_offset - start) as usize);
                (at, r.len as usize)
            })
            .collect();
        let head = Reply::bytes_head(seq, n as usize).to_vec();
        // SAFETY: every run lies in the data area (the store keeps file data there), which the
        // store's mapping keeps mapped for longer than `node` lives; the grace, kept with the
        // send until it is finished, keeps the runs' blocks holding the file's bytes as the
        // map read them (later writes go to fresh blocks).
        let sent = unsafe { node.send_lent(&peer.ep, Vec::new(), head, &parts, false) };
        self.stats.message_bytes.fetch_add(n, Ordering::Relaxed);
        Some(match sent {
            Ok(s) => self.keep(node, peer.ep.id(), s, Some(grace)),
            Err(_) => false,
        })
    }

    /// The encoded reply to a read of `len` bytes at `off` of `ino`: the data read straight
    /// into the message (the buffer `out`, kept from a reply that left), or the error.
    fn read_message(&mut self, seq: u64, ino: u64, off: u64, len: u64) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.out);
        let max = usize::try_from(len).unwrap_or(usize::MAX);
        let read = Reply::bytes_filled(seq, max, &mut out, |b| {
            self.store.read(ino, off, b).map_err(Errno::from)
        });
        match read {
            Ok(n) => {
                self.stats
                    .message_bytes
                    .fetch_add(n as u64, Ordering::Relaxed);
                out
            }
            Err(e) => {
                self.out = out;
                Reply::Error(e.0).encode(seq)
            }
        }
    }

    /// Cuts off a client that broke the protocol (or the rules), after its last reply (the
    /// refusal) is delivered — unless it has messages it has not taken, which could hold
    /// that delivery, and this thread, until their deadline: then at once.
    fn refuse(&mut self, node: &'n Node, p: Peer<'s>) {
        if self.in_flight(p.ep.id()) == 0 {
            self.leave(node, p);
        } else {
            self.cut_off(node, p);
        }
    }

    /// Undoes what a client left and closes its endpoints without waiting for it (a client
    /// that does not take what it asked for may not answer a flush either, and this thread
    /// serves everyone); drops what was on its way to it.
    fn cut_off(&mut self, node: &'n Node, p: Peer<'s>) {
        self.stats.cut_off.fetch_add(1, Ordering::Relaxed);
        self.depart(node, p, Node::close_now);
    }

    /// Undoes what a departing client left: its preparations and open handles.
    fn leave(&mut self, node: &'n Node, p: Peer<'s>) {
        self.depart(node, p, Node::close);
    }

    /// Undoes what a departing client left — its record locks, pull tokens, preparations,
    /// open handles and holds — closes its data endpoint at once and its control endpoint
    /// with `close`, and drops what was on its way to it.
    fn depart(&mut self, node: &'n Node, p: Peer<'s>, close: fn(&Node, Endpoint)) {
        let id = p.ep.id();
        self.locks.release_peer(id);
        if let Some(d) = p.data {
            // Closing it ends the sends of its pulls in flight (with an error); they are
            // dropped below, once the control endpoint is closed too.
            node.close_now(d);
        }
        self.tokens.retain(|_, of| *of != id);
        self.stats
            .abandoned
            .fetch_add(p.prepared.len() as u64, Ordering::Relaxed);
        drop(p.prepared);
        for (ino, n) in p.opens {
            for _ in 0..n {
                let _ = self.store.release(ino);
            }
        }
        for (ino, n) in p.holds {
            let _ = self.store.release_holds(ino, n);
        }
        close(node, p.ep);
        self.drop_sends(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slice the calling thread asked for (0: the default), or `None` where the kernel
    /// has no `sched_getattr`.
    fn slice_ns() -> Option<u64> {
        // SAFETY: as in `ask_for_short_slices`: plain data, filled for the calling thread.
        unsafe {
            let mut attr: libc::sched_attr = std::mem::zeroed();
            let size = std::mem::size_of::<libc::sched_attr>() as libc::c_uint;
            (libc::syscall(libc::SYS_sched_getattr, 0, &mut attr, size, 0) == 0)
                .then_some(attr.sched_runtime)
        }
    }

    #[test]
    fn the_serving_thread_asks_for_short_slices_and_keeps_its_policy() {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut v = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|x| x.parse().unwrap_or(0));
        let custom_slices = (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6u32, 12u32);
        std::thread::spawn(move || {
            ask_for_short_slices();
            // Kernels before custom slices (6.12) refuse it.
            if custom_slices {
                assert_eq!(slice_ns(), Some(100_000), "on Linux {release}");
            }
            // SAFETY: sched_getscheduler reads the calling thread's policy.
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
