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
    let key = Key::random();
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
        let region = Region::memory(64 << 20, Persist::detect()).unwrap();
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
