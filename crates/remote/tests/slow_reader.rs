//! Over `tcp`, with socket buffers small enough that a large reply waits for its reader: a
//! reply the client has not taken yet holds up no other client, keeps the blocks it is sent
//! from out of reuse (so it arrives whole, as the file was when it was read), and a client
//! that never takes it is disconnected at the deadline, the blocks freed. A test binary of
//! its own: UCX reads its settings when a node starts, for the whole process.

mod common;

use switchyard_remote::proto::{Reply, Request};
use switchyard_remote::{Client, DataPath};
use switchyard_store::{Fd, Files, OpenFlags};
use switchyard_ucx::{Endpoint, Node};

/// The file's size: a reply this large cannot fit in the sockets' buffers.
const LEN: usize = 8 << 20;

/// Only `tcp`, with small socket buffers, before any node of this process starts.
fn small_sockets() {
    std::env::set_var("UCX_TLS", "tcp");
    std::env::set_var("UCX_TCP_SNDBUF", "64k");
    std::env::set_var("UCX_TCP_RCVBUF", "64k");
}

/// A writer of `srv` and its file, `LEN` bytes of 1s (inode 2: the first file made).
fn written(srv: &common::Running) -> (Client, Fd) {
    let w = Client::connect(srv.addr, &srv.key, true).unwrap();
    assert!(matches!(w.data_path(), DataPath::InMessages(_)));
    let fd = w.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    w.pwrite(fd, &vec![1u8; LEN], 0).unwrap();
    (w, fd)
}

/// Speaks the protocol by hand: proves the key and asks for all of inode 2, then takes
/// nothing until `then` (given the node and its control endpoint) returns.
fn read_not_taken(srv: &common::Running, then: impl FnOnce(&Node, &Endpoint)) {
    let node = Node::new().unwrap();
    let (ctl, _) = common::prove_by_hand(srv, &node, false);
    let read = Request::Read {
        ino: 2,
        off: 0,
        len: LEN as u64,
    };
    node.send(&ctl, &[], &read.encode(2)).unwrap();
    then(&node, &ctl);
}

#[test]
fn a_reply_not_taken_holds_up_no_one_and_keeps_its_blocks() {
    small_sockets();
    let srv = common::start(false);
    let (w, fd) = written(&srv);
    read_not_taken(&srv, |node, _| {
        // The server still answers everyone: two overwrites, the second of which would take
        // the blocks the first freed, were it not for the reply still being sent from them.
        // (A server that waited for the reply would not answer before its deadline, and
        // would then have disconnected the reader.)
        w.pwrite(fd, &vec![2u8; LEN], 0).unwrap();
        w.pwrite(fd, &vec![3u8; LEN], 0).unwrap();
        let Reply::Bytes(got) = common::next_reply(node) else {
            panic!("not a read's reply")
        };
        assert_eq!(got.len(), LEN);
        assert!(
            got.iter().all(|&b| b == 1),
            "a torn or foreign reply (bytes {:?})",
            got.iter().find(|&&b| b != 1)
        );
    });
    assert_eq!(w.read_all("/f").unwrap(), vec![3u8; LEN]);
}

#[test]
fn a_reply_never_taken_disconnects_its_client_and_frees_what_it_held() {
    small_sockets();
    let srv = common::start(false);
    let (w, fd) = written(&srv);
    let free = w.statfs().unwrap().free_blocks;
    read_not_taken(&srv, |node, ctl| {
        // This client never takes its reply; the server lets it go at the deadline, and
        // serves the writer all along.
        common::overwritten_then_let_go(&w, fd, LEN, free, node, ctl);
    });
    assert_eq!(w.statfs().unwrap().free_blocks, free);
    assert_eq!(w.read_all("/f").unwrap(), vec![2u8; LEN]);
    assert_eq!(
        srv.stats.cut_off.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

/// A client that stops taking its reply and then breaks the protocol is cut off at once: the
/// server does not first wait for the untaken reply to leave (which would hold up every
/// client until the deadline).
#[test]
fn a_client_refused_with_a_reply_untaken_holds_up_no_one() {
    small_sockets();
    let srv = common::start(false);
    let (w, fd) = written(&srv);
    read_not_taken(&srv, |node, ctl| {
        node.send(ctl, &[], b"\xffnot a request").unwrap();
        // Served long before the 10 s deadline of the untaken reply.
        let t = std::time::Instant::now();
        while srv.stats.refused.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        w.pwrite(fd, &vec![2u8; LEN], 0).unwrap();
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "the writer waited {:?}",
            t.elapsed()
        );
    });
    assert_eq!(w.read_all("/f").unwrap(), vec![2u8; LEN]);
    assert_eq!(
        srv.stats.cut_off.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}
