//! A server on loopback in a thread of the test, over a store in memory.
#![allow(dead_code)] // each test binary uses part of it

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use std::time::Duration;

use switchyard_media::{Persist, Region};
use switchyard_mover::{Config, Mover};
use switchyard_remote::proto::{Reply, Request, Welcome};
use switchyard_remote::{serve, Key, ServeOptions, ServerStats};
use switchyard_store::{Owner, Store};
use switchyard_ucx::{Endpoint, Node};

pub struct Running {
    pub addr: SocketAddr,
    pub key: Key,
    pub stats: Arc<ServerStats>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Store>>,
}

impl Running {
    /// Stops the server and hands back its store.
    pub fn stop(mut self) -> Store {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub fn start(read_only: bool) -> Running {
    start_with(read_only, Config::default())
}

/// [`start`] with the server's mover configured by `config`.
pub fn start_with(read_only: bool, config: Config) -> Running {
    start_with_key(read_only, config, Key::random())
}

/// [`start_with`], proving `key`.
pub fn start_with_key(read_only: bool, config: Config, key: Key) -> Running {
    start_sized(read_only, config, key, 64 << 20)
}

/// [`start_with_key`] on a store of `bytes` (anonymous memory: only what the store touches
/// is ever allocated).
pub fn start_sized(read_only: bool, config: Config, key: Key, bytes: u64) -> Running {
    let stats = Arc::new(ServerStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let opts = ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        read_only,
        key: key.clone(),
    };
    let (s, st) = (stats.clone(), stop.clone());
    let thread = std::thread::spawn(move || {
        let region = Region::memory(bytes, Persist::detect()).unwrap();
        let mover = Arc::new(Mover::start(&config).unwrap());
        let store = Store::format(region, mover, Owner::current()).unwrap();
        serve(&store, &opts, &s, &st, |a| tx.send(a).unwrap()).unwrap();
        store
    });
    let addr = rx.recv().unwrap();
    Running {
        addr,
        key,
        stats,
        stop,
        thread: Some(thread),
    }
}

/// The next reply on `node`, decoded (a failure if none comes within 30 s).
pub fn next_reply(node: &Node) -> Reply {
    let t = std::time::Instant::now();
    loop {
        assert!(t.elapsed() < Duration::from_secs(30), "no reply");
        node.wait(Duration::from_millis(20));
        if let Some(mut m) = node.next_message() {
            let b = node.body(&mut m).unwrap();
            return Reply::decode(&b).unwrap().1;
        }
    }
}

/// Connects to `srv` by hand and proves the key (for writing if `write`): the control
/// endpoint and what the server answered.
pub fn prove_by_hand(srv: &Running, node: &Node, write: bool) -> (Endpoint, Welcome) {
    let ctl = node.connect(srv.addr).unwrap();
    let Reply::Challenge { nonce, .. } = next_reply(node) else {
        panic!()
    };
    let auth = Request::Auth {
        mac: srv.key.prove(&nonce),
        write,
        uid: 0,
    };
    node.send(&ctl, &[], &auth.encode(1)).unwrap();
    let Reply::Welcome(welcome) = next_reply(node) else {
        panic!()
    };
    (ctl, welcome)
}

/// With a message held untaken by the client of `node` (control endpoint `ctl`) on blocks of
/// `fd`, a `len`-byte file of writer `w`: `w` overwrites the file, which frees those blocks
/// into the message's grace (so `free`, the free blocks before, is not reached); then the
/// server lets the untaking client go at its deadline, serving `w` all along, and the
/// blocks are free again.
pub fn overwritten_then_let_go(
    w: &switchyard_remote::Client,
    fd: switchyard_store::Fd,
    len: usize,
    free: u64,
    node: &Node,
    ctl: &Endpoint,
) {
    use std::time::Instant;
    use switchyard_store::Files;
    w.pwrite(fd, &vec![2u8; len], 0).unwrap();
    assert!(w.statfs().unwrap().free_blocks < free);
    let t = Instant::now();
    while w.statfs().unwrap().free_blocks < free {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the blocks stayed held"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let t = Instant::now();
    while node.is_open(ctl) {
        assert!(t.elapsed() < Duration::from_secs(10), "still connected");
        node.wait(Duration::from_millis(20));
    }
}

/// A writer overwrites a 1 MiB file of `srv` 60 times with one byte value each time while a
/// reader reads all of it again and again: every read holds one write whole, never a torn
/// one, never bytes of blocks the writer's commits freed and took again. Returns the reader,
/// which pulls its reads if `pulling` ([`switchyard_remote::Client::connect_pulling`]).
pub fn racing_overwrites_read_whole(srv: &Running, pulling: bool) -> switchyard_remote::Client {
    use switchyard_remote::Client;
    use switchyard_store::{Files, OpenFlags};
    const LEN: usize = 1 << 20;
    let w = Client::connect(srv.addr, &srv.key, true).unwrap();
    let r = if pulling {
        Client::connect_pulling(srv.addr, &srv.key, false).unwrap()
    } else {
        Client::connect(srv.addr, &srv.key, false).unwrap()
    };
    let fw = w.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    w.pwrite(fw, &vec![0u8; LEN], 0).unwrap();
    let fr = r.open("/f", OpenFlags::READ, 0).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for seed in 1u8..=60 {
                w.pwrite(fw, &vec![seed; LEN], 0).unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        let mut buf = vec![0u8; LEN];
        let mut reads = 0;
        while !stop.load(Ordering::Relaxed) || reads == 0 {
            assert_eq!(r.pread(fr, &mut buf, 0).unwrap(), LEN);
            let first = buf[0];
            assert!(
                buf.iter().all(|&b| b == first),
                "read {reads}: a torn or foreign read (bytes {first} and {:?})",
                buf.iter().find(|&&b| b != first)
            );
            reads += 1;
        }
    });
    r
}
