//! Pulled reads (`DataPath::Pulled`), which a UCX without one-sided gets over `cma` (1.13)
//! uses between processes of one host, here on whatever UCX the build links: the readers
//! connect with `Client::connect_pulling`.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use switchyard_remote::proto::{Reply, Request};
use switchyard_remote::{Client, DataPath};
use switchyard_store::Files;
use switchyard_store::{Fd, OpenFlags};
use switchyard_ucx::{Endpoint, Failures, Message, Node};

/// A reader whose 1 MiB reads are pulled while a writer overwrites the file returns whole
/// writes only ([`common::racing_overwrites_read_whole`]), sent from the data area.
#[test]
fn pulled_reads_racing_overwrites_return_whole_writes() {
    let srv = common::start(false);
    let r = common::racing_overwrites_read_whole(&srv, true);
    assert_eq!(r.data_path(), DataPath::Pulled("cma".into()));
    assert!(srv.stats.pulled_bytes.load(Ordering::Relaxed) > 0);
}

/// Speaks the protocol by hand as a reader on `node`: proves the key, attaches for pulls and
/// fetches the map of inode 2 (the first file made in a fresh store); returns the control
/// endpoint, the data endpoint, and the pull of all of inode 2 with the lengths of its ranges.
fn ready_to_pull(srv: &common::Running, node: &Node) -> (Endpoint, Endpoint, Request, Vec<u64>) {
    let (ctl, welcome) = common::prove_by_hand(srv, node, false);
    let data = node
        .connect_address(&welcome.address, Failures::Undetected)
        .unwrap();
    let attach = Request::Attach {
        address: node.address().unwrap(),
    };
    node.send(&ctl, &[], &attach.encode(2)).unwrap();
    let Reply::Bytes(token) = common::next_reply(node) else {
        panic!()
    };
    let ino = 2;
    let map = Request::Map {
        ino,
        off: 0,
        len: u64::MAX,
    };
    node.send(&ctl, &[], &map.encode(3)).unwrap();
    let Reply::Map(m) = common::next_reply(node) else {
        panic!()
    };
    let ranges: Vec<(u64, u64)> = m
        .runs
        .iter()
        .map(|r| (r.region_offset - welcome.data_start, r.len))
        .collect();
    let lens = ranges.iter().map(|r| r.1).collect();
    let pull = Request::Pull {
        token: token.try_into().unwrap(),
        ino,
        change: m.change,
        ranges,
    };
    (ctl, data, pull, lens)
}

/// Speaks the protocol by hand as a reader ([`ready_to_pull`]) and pulls all of inode 2;
/// hands `then` its node, control endpoint, and the pieces' messages (bodies not fetched)
/// with their lengths.
fn pull_held(srv: &common::Running, then: impl FnOnce(&Node, &Endpoint, Vec<(Message<'_>, u64)>)) {
    let node = Node::new().unwrap();
    let (ctl, data, pull, lens) = ready_to_pull(srv, &node);
    node.send(&data, &[], &pull.encode(4)).unwrap();
    // The pieces' announcements, bodies not fetched yet.
    let mut pieces = Vec::new();
    while pieces.len() < lens.len() {
        node.wait(Duration::from_millis(20));
        while let Some(msg) = node.next_message() {
            assert!(switchyard_remote::proto::part_of(&msg.header).is_some());
            pieces.push(msg);
        }
    }
    then(&node, &ctl, pieces.into_iter().zip(lens).collect());
}

/// A client that pulls and pulls without fetching: past its 16 messages in flight, a pull is
/// refused (`EBUSY`) without a piece, and the server keeps serving others meanwhile.
#[test]
fn pulls_past_those_in_flight_are_refused() {
    let srv = common::start(false);
    let (w, _fd) = pulled_file(&srv);
    let node = Node::new().unwrap();
    let (_ctl, data, pull, lens) = ready_to_pull(&srv, &node);
    let (pulls, in_flight) = (20u64, 16);
    for seq in 0..pulls {
        node.send(&data, &[], &pull.encode(100 + seq)).unwrap();
    }
    assert_eq!(w.read_all("/f").unwrap().len(), PULLED_LEN);
    let (mut pieces, mut refused) = (Vec::new(), Vec::new());
    let t = Instant::now();
    while pieces.len() < in_flight * lens.len() || refused.len() < pulls as usize - in_flight {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{} pieces, {refused:?}",
            pieces.len()
        );
        node.wait(Duration::from_millis(20));
        while let Some(mut msg) = node.next_message() {
            if switchyard_remote::proto::part_of(&msg.header).is_some() {
                pieces.push(msg);
            } else {
                let b = node.body(&mut msg).unwrap();
                refused.push(Reply::decode(&b).unwrap());
            }
        }
    }
    assert_eq!(pieces.len(), in_flight * lens.len());
    assert!(
        refused.iter().all(|(_, r)| *r == Reply::Error(libc::EBUSY)),
        "{refused:?}"
    );
}

/// Bytes of the file [`pulled_file`] makes.
const PULLED_LEN: usize = 1 << 20;

/// A writer of `srv` and the file it made, `PULLED_LEN` bytes of 1s (inode 2, what
/// [`pull_held`] pulls).
fn pulled_file(srv: &common::Running) -> (Client, Fd) {
    let w = Client::connect_pulling(srv.addr, &srv.key, true).unwrap();
    assert_eq!(w.data_path(), DataPath::Pulled("cma".into()));
    let fd = w.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    w.pwrite(fd, &vec![1u8; PULLED_LEN], 0).unwrap();
    (w, fd)
}

/// A reader holds a pulled piece unfetched while another client overwrites the file twice
/// (the second write would take the blocks the first one freed); fetched afterwards, the
/// piece still holds the bytes the file had at the pull.
#[test]
fn a_pulled_block_is_not_taken_again_before_it_is_fetched() {
    const LEN: usize = PULLED_LEN;
    let srv = common::start(false);
    let (w, fd) = pulled_file(&srv);
    pull_held(&srv, |node, _, pieces| {
        w.pwrite(fd, &vec![2u8; LEN], 0).unwrap();
        w.pwrite(fd, &vec![3u8; LEN], 0).unwrap();
        for (mut msg, len) in pieces {
            let mut got = vec![0u8; len as usize];
            node.body_into(&mut msg, &mut got).unwrap();
            assert!(
                got.iter().all(|&b| b == 1),
                "a pulled block was taken again"
            );
        }
    });
    assert_eq!(w.read_all("/f").unwrap(), vec![3u8; LEN]);
}

/// A reader that never fetches what it pulled is disconnected after the pull's deadline, and
/// the blocks its pull kept from reuse are free again.
#[test]
fn a_pull_never_fetched_disconnects_its_client_and_frees_what_it_held() {
    const LEN: usize = PULLED_LEN;
    let srv = common::start(false);
    let (w, fd) = pulled_file(&srv);
    let free = w.statfs().unwrap().free_blocks;
    pull_held(&srv, |node, ctl, _pieces| {
        // This client neither fetches nor progresses; the server lets it go at the pull's
        // deadline, and serves the other client all along.
        common::overwritten_then_let_go(&w, fd, LEN, free, node, ctl);
    });
    assert_eq!(w.statfs().unwrap().free_blocks, free);
    assert_eq!(w.read_all("/f").unwrap(), vec![2u8; LEN]);
}
