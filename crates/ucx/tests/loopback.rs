//! Two nodes on loopback, each driven by its own thread: messages both ways (large ones sent
//! eagerly over tcp, read in place or dropped untaken, and by rendezvous over shared memory),
//! worker-address endpoints, one-sided get, put and flush into registered
//! memory, bodies lent by the sender and fetched by the receiver, and peers that go away.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;

use switchyard_ucx::{Endpoint, Failures, Message, Node};

fn next_message(node: &Node) -> Message<'_> {
    loop {
        node.wait(Duration::from_millis(50));
        if let Some(m) = node.next_message() {
            return m;
        }
    }
}

/// The endpoint of the next peer that connects to `node`'s listener.
fn accept_next(node: &Node) -> Endpoint {
    loop {
        node.wait(Duration::from_millis(50));
        if let Some(r) = node.next_connection() {
            return node.accept(r).unwrap();
        }
    }
}

fn serve_once(ready: mpsc::Sender<SocketAddr>, done: mpsc::Receiver<()>) -> Vec<u8> {
    let mut area = vec![0u8; 1 << 20];
    for (i, b) in area.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let node = Node::new().unwrap();
    let addr = node.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    ready.send(addr).unwrap();
    // SAFETY: `area` is declared before the node, so it is dropped after it, and the peer may
    // read and write it throughout.
    let reg = unsafe { node.register(area.as_mut_ptr(), area.len(), true) }.unwrap();
    let key = node.pack_rkey(reg).unwrap();
    let ep = accept_next(&node);
    // Hello: the client's greeting.
    let mut hello = next_message(&node);
    assert_eq!(hello.header, b"hello");
    assert_eq!(hello.from(), ep.id());
    assert_eq!(node.body(&mut hello).unwrap(), b"client");
    drop(hello);
    let mut big = next_message(&node);
    assert_eq!(big.header, b"big");
    let body = node.body(&mut big).unwrap();
    assert_eq!(
        body.len(),
        300_000,
        "a body large enough for rendezvous arrives whole"
    );
    assert!(body.iter().all(|&b| b == 7));
    drop(big);
    // A large body lent where it lies, and one dropped untaken (given back to UCX).
    let mut lent = next_message(&node);
    assert_eq!(lent.header, b"lent");
    let seen = node
        .with_body(&mut lent, |b| (b.len(), b.iter().all(|&x| x == 9)))
        .unwrap();
    assert_eq!(seen, (200_000, true), "a lent body is whole");
    drop(lent);
    let dropped = next_message(&node);
    assert_eq!(dropped.header, b"dropped");
    drop(dropped);
    // The answer: this node's worker address (for the client's data endpoint), the area's
    // address and its key.
    let mut header = (area.as_ptr() as u64).to_le_bytes().to_vec();
    header.extend(node.address().unwrap());
    node.send(&ep, &header, &key).unwrap();
    // One-sided operations need no server code, but some transports need its progress.
    // A large message on the client's worker-address endpoint (shared memory, where UCX
    // uses rendezvous) arrives whole too.
    let mut over_memory = None;
    while done.try_recv().is_err() {
        node.wait(Duration::from_millis(10));
        if let Some(mut m) = node.next_message() {
            over_memory = Some((m.header.clone(), node.body(&mut m).unwrap()));
        }
    }
    let (header, body) = over_memory.expect("the message on the data endpoint");
    assert_eq!(header, b"memory");
    assert_eq!(body.len(), 1 << 20);
    assert!(body.iter().all(|&b| b == 5));
    drop(node);
    area[..4096].to_vec()
}

#[test]
fn messages_and_one_sided_access_between_two_nodes() {
    let (ready_tx, ready) = mpsc::channel();
    let (done, done_rx) = mpsc::channel();
    let server = std::thread::spawn(move || serve_once(ready_tx, done_rx));
    let node = Node::new().unwrap();
    let ep = node.connect(ready.recv().unwrap()).unwrap();
    node.send(&ep, b"hello", b"client").unwrap();
    node.send(&ep, b"big", &vec![7u8; 300_000]).unwrap();
    node.send(&ep, b"lent", &vec![9u8; 200_000]).unwrap();
    node.send(&ep, b"dropped", &vec![1u8; 100_000]).unwrap();
    let mut reply = next_message(&node);
    let base = u64::from_le_bytes(reply.header[..8].try_into().unwrap());
    let server_addr = reply.header[8..].to_vec();
    let key_bytes = node.body(&mut reply).unwrap();
    drop(reply);
    let data = node
        .connect_address(&server_addr, Failures::Undetected)
        .unwrap();
    let key = node.unpack_rkey(&data, &key_bytes).unwrap();
    eprintln!("{}", node.describe(&data));
    let mut buf = vec![0u8; 100_000];
    node.get(&data, &mut buf, base + 1000, &key).unwrap();
    assert!(buf
        .iter()
        .enumerate()
        .all(|(i, &b)| b == ((i + 1000) % 251) as u8));
    let (mut a, mut b) = (vec![0u8; 64], vec![0u8; 64]);
    node.get_many(&data, &mut [(&mut a, base), (&mut b, base + 64)], &key)
        .unwrap();
    assert_eq!((a[1], b[1]), (1, 65));
    node.put(&data, &[0xAB; 512], base + 100, &key).unwrap();
    node.flush(&data).unwrap();
    node.send(&data, b"memory", &vec![5u8; 1 << 20]).unwrap();
    node.close(data);
    node.close(ep);
    // A key may outlive its node: the node destroyed it.
    drop(node);
    drop(key);
    done.send(()).unwrap();
    let area = server.join().unwrap();
    assert!(area[100..612].iter().all(|&b| b == 0xAB));
    assert_eq!(area[99], 99);
    assert_eq!(area[612], (612 % 251) as u8);
}

#[test]
fn a_server_that_is_gone_fails_the_client_instead_of_hanging() {
    let (tx, rx) = mpsc::channel();
    let server = std::thread::spawn(move || {
        let node = Node::new().unwrap();
        tx.send(node.listen("127.0.0.1:0".parse().unwrap()).unwrap())
            .unwrap();
        let _ep = accept_next(&node);
        // Wait for one message, then vanish without answering.
        drop(next_message(&node));
    });
    let node = Node::new().unwrap();
    node.set_deadline(Duration::from_secs(3));
    let ep = node.connect(rx.recv().unwrap()).unwrap();
    node.send(&ep, b"ping", b"").unwrap();
    server.join().unwrap();
    let t = std::time::Instant::now();
    let mut failed = false;
    while t.elapsed() < Duration::from_secs(10) {
        if node.send(&ep, b"ping", &[1; 100_000]).is_err() {
            failed = true;
            break;
        }
        node.wait(Duration::from_millis(50));
    }
    assert!(failed, "sends to a vanished server kept succeeding");
    assert!(
        node.send(&ep, b"ping", b"").is_err(),
        "a failed endpoint stays failed"
    );
    node.close(ep);
}

#[test]
fn a_connection_to_nothing_fails() {
    let node = Node::new().unwrap();
    node.set_deadline(Duration::from_secs(3));
    // A port nothing listens on (bound, then freed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    assert!(node.connect(port).is_err());
}

/// A body sent from where it lies, by rendezvous: the send stays unfinished until the
/// receiver fetches the body into a buffer of its own, then finishes.
#[test]
fn a_lent_body_is_fetched_by_the_receiver_and_only_then_sent() {
    let (addr_tx, addr_rx) = mpsc::channel::<Vec<u8>>();
    let (fetch_tx, fetch_rx) = mpsc::channel();
    let sender = std::thread::spawn(move || {
        let body: Vec<u8> = (0..1usize << 20).map(|i| (i % 253) as u8).collect();
        let node = Node::new().unwrap();
        let ep = node
            .connect_address(&addr_rx.recv().unwrap(), Failures::Undetected)
            .unwrap();
        // SAFETY: `body` is declared before the node (dropped after it) and never written.
        let mut s = unsafe {
            node.send_lent(
                &ep,
                b"lent".to_vec(),
                Vec::new(),
                &[(body.as_ptr(), body.len())],
                true,
            )
        }
        .unwrap();
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(100) {
            node.progress();
            assert!(
                node.sent(&mut s).is_none(),
                "finished before the receiver fetched it"
            );
        }
        fetch_tx.send(()).unwrap();
        let t = std::time::Instant::now();
        let done = loop {
            node.progress();
            if let Some(r) = node.sent(&mut s) {
                break r;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "never finished");
        };
        done.unwrap();
        drop(s);
        drop(node);
    });
    let node = Node::new().unwrap();
    addr_tx.send(node.address().unwrap()).unwrap();
    let mut m = next_message(&node);
    assert_eq!(m.header, b"lent");
    assert_eq!(m.body_len(), 1 << 20);
    let mut short = vec![0u8; 10];
    assert!(
        node.body_into(&mut m, &mut short).is_err(),
        "a buffer of another length"
    );
    fetch_rx.recv().unwrap();
    let mut got = vec![0u8; 1 << 20];
    node.body_into(&mut m, &mut got).unwrap();
    assert!(got.iter().enumerate().all(|(i, &b)| b == (i % 253) as u8));
    sender.join().unwrap();
}

/// The eager protocol's ranges in UCX's description of an endpoint (its table "active
/// message … with reply flag(egr)", UCX 1.22's protocol selection): each `(first, last,
/// what)`, sizes in bytes.
fn eager_ranges(described: &str) -> Vec<(u64, u64, String)> {
    let size = |s: &str| -> u64 {
        let s = s.trim();
        match s.strip_suffix('K') {
            Some(k) => k.parse::<u64>().unwrap() << 10,
            None => s.parse().unwrap_or(u64::MAX),
        }
    };
    described
        .lines()
        .skip_while(|l| !l.contains("with reply flag(egr)"))
        .skip(4)
        .take_while(|l| l.contains(".."))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let (a, b) = cells[1].split_once("..").unwrap();
            (size(a), size(b), cells[2].to_string())
        })
        .collect()
}

/// Over `tcp`, a 1 MiB body (a mount's largest request, and its reply) goes eagerly in one
/// zero-copy piece: from where the sender's bytes lie into the socket, and into one receive
/// buffer that the receiver reads in place. Cut into pieces, UCX would copy each into a send
/// buffer or into a buffer it assembles the message in (UCX 1.22 chose that, "multi-frag
/// copy-in" from 16 KiB, on loopback and 64 KiB pieces on a veth pair, before the node set
/// the receive segment and the zero-copy threshold).
#[test]
fn a_mebibyte_goes_over_tcp_in_one_zero_copy_piece() {
    let listener = Node::without_shared_memory().unwrap();
    let addr = listener
        .listen("127.0.0.1:0".parse::<SocketAddr>().unwrap())
        .unwrap();
    let (taken_tx, taken_rx) = mpsc::channel();
    let sender = std::thread::spawn(move || {
        let node = Node::without_shared_memory().unwrap();
        let ep = node.connect(addr).unwrap();
        node.send(&ep, b"big", &vec![5u8; 1 << 20]).unwrap();
        // The node stays (and progresses) until the message is taken: a send can finish
        // locally before the peer has even accepted the connection.
        while taken_rx.try_recv().is_err() {
            node.wait(Duration::from_millis(5));
        }
        (node.one_sided_over_bulk_lanes(), node.describe(&ep))
    });
    let _ep = accept_next(&listener);
    let mut m = next_message(&listener);
    assert_eq!(m.header, b"big");
    assert!(listener
        .with_body(&mut m, |b| b.len() == 1 << 20 && b.iter().all(|&x| x == 5))
        .unwrap());
    taken_tx.send(()).unwrap();
    let (v2, described) = sender.join().unwrap();
    if !v2 {
        // UCX before 1.22 (or its protocol selection v1) prints no such table.
        return;
    }
    let ranges = eager_ranges(&described);
    assert!(!ranges.is_empty(), "no eager table in:\n{described}");
    let whole = (1u64 << 20) + 64;
    assert!(
        ranges
            .iter()
            .any(|(a, b, what)| what == "zero-copy" && *a <= 16 << 10 && *b >= whole),
        "1 MiB is not sent in one zero-copy piece: {ranges:?}"
    );
}
