//! A client and a server in one process, over loopback: files round-trip, a second client sees
//! committed writes and never a stale map, keys and read-only exports are enforced, a client
//! that goes away mid-write leaves nothing, and a server that goes away fails calls.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use switchyard_remote::proto::{Reply, Request};
use switchyard_remote::{Client, DataPath, Key};
use switchyard_store::Files;
use switchyard_store::{Errno, Fd, Fs, OpenFlags, Whence};
use switchyard_ucx::{Endpoint, Failures, Message, Node};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn files_round_trip_one_sided() {
    let srv = common::start(false);
    let c = Client::connect(srv.addr, &srv.key, true).unwrap();
    // UCX 1.13 offers no one-sided get between processes of one host (it emulates it with
    // the server's CPU), so reads are pulled there; a UCX that has one uses it.
    let pulled = matches!(c.data_path(), DataPath::Pulled(_));
    assert!(
        pulled || matches!(c.data_path(), DataPath::OneSided(_)),
        "on one host the server never copies the data: {}",
        c.data_path()
    );
    c.mkdir("/d", 0o755).unwrap();
    let fd = c.open("/d/f", OpenFlags::CREATE, 0o644).unwrap();
    let mut model = Vec::new();
    for (i, (off, len)) in [
        (0u64, 5000usize),
        (4090, 10),
        (70_000, 300_000),
        (1, 1),
        (12_345, 4096),
    ]
    .into_iter()
    .enumerate()
    {
        let data = pattern(len, i as u8);
        assert_eq!(c.pwrite(fd, &data, off).unwrap(), len);
        let end = off as usize + len;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[off as usize..end].copy_from_slice(&data);
        let mut back = vec![0u8; model.len() + 10];
        assert_eq!(c.pread(fd, &mut back, 0).unwrap(), model.len());
        assert_eq!(&back[..model.len()], &model[..], "after write {i}");
    }
    assert_eq!(c.fstat(fd).unwrap().size, model.len() as u64);
    assert_eq!(c.lseek(fd, 0, Whence::End).unwrap(), model.len() as u64);
    c.write(fd, b"tail").unwrap();
    model.extend_from_slice(b"tail");
    c.close(fd).unwrap();
    assert_eq!(c.read_all("/d/f").unwrap(), model);
    c.symlink("/d/f", "/l").unwrap();
    assert_eq!(c.readlink("/l").unwrap(), b"/d/f");
    assert_eq!(c.stat("/l").unwrap().size, model.len() as u64);
    c.rename("/d/f", "/d/g").unwrap();
    assert_eq!(c.stat("/d/f").unwrap_err(), Errno::ENOENT);
    c.link("/d/g", "/h").unwrap();
    let names: Vec<Vec<u8>> = c
        .readdir("/d")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec![b"g".to_vec()]);
    c.truncate("/h", 10).unwrap();
    assert_eq!(c.read_all("/d/g").unwrap(), &model[..10]);
    assert_eq!(c.rmdir("/d").unwrap_err(), Errno::ENOTEMPTY);
    assert!(c.statfs().unwrap().free_blocks > 0);
    let s = c.stats();
    // The 300 000-byte write and every read went one-sided; the small writes (5000 + 10 + 1
    // + 4096 + 4 bytes) inside their requests.
    assert!(s.one_sided_bytes > 300_000, "{s:?}");
    assert_eq!(s.message_bytes, 9111, "{s:?}");
    assert!(s.cache_hits > 0, "{s:?}");
    if pulled {
        // Every read's bytes were sent from the data area, none copied into a reply.
        let sent = srv.stats.pulled_bytes.load(Ordering::Relaxed);
        assert!(sent >= 300_000, "pulled {sent}");
        assert_eq!(srv.stats.message_bytes.load(Ordering::Relaxed), 9111);
    }
    drop(c);
    // The server's own view is the same, and the store is consistent.
    let fs = Fs::new(srv.stop());
    assert_eq!(fs.read_all("/h").unwrap(), &model[..10]);
    assert!(fs.lstat("/l").is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    /// Whatever one client writes, another reads exactly, even with the file's map cached
    /// from before the write.
    #[test]
    fn a_second_client_sees_every_committed_write(
        writes in prop::collection::vec((0u64..400_000, 1usize..50_000, any::<u8>()), 1..8))
    {
        let srv = common::start(false);
        let a = Client::connect(srv.addr, &srv.key, true).unwrap();
        let b = Client::connect(srv.addr, &srv.key, false).unwrap();
        let fa = a.open("/f", OpenFlags::CREATE, 0o644).unwrap();
        let fb = b.open("/f", OpenFlags::READ, 0).unwrap();
        let mut model = Vec::new();
        for (off, len, seed) in writes {
            let data = pattern(len, seed);
            a.pwrite(fa, &data, off).unwrap();
            let end = off as usize + len;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
            let mut got = vec![0u8; model.len()];
            prop_assert_eq!(b.pread(fb, &mut got, 0).unwrap(), model.len());
            prop_assert!(got == model);
        }
        prop_assert!(b.stats().read_retries > 0 || b.stats().cache_misses > 1);
    }
}

/// A reader whose reads race a writer's overwrites returns whole writes only: never a torn
/// one, never bytes of blocks the writer's commits freed and took again (large reads are
/// pulled from the server's memory while the writer commits).
#[test]
fn reads_racing_overwrites_return_whole_writes() {
    const LEN: usize = 1 << 20;
    let srv = common::start(false);
    let w = Client::connect(srv.addr, &srv.key, true).unwrap();
    let r = Client::connect(srv.addr, &srv.key, false).unwrap();
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
    if matches!(r.data_path(), DataPath::Pulled(_)) {
        assert!(srv.stats.pulled_bytes.load(Ordering::Relaxed) > 0);
    }
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
    let Some((w, _fd)) = pulled_file(&srv) else {
        return; // a transport with one-sided gets: nothing is pulled
    };
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
/// [`pull_held`] pulls), where the data path pulls; `None` on a transport with one-sided gets.
fn pulled_file(srv: &common::Running) -> Option<(Client, Fd)> {
    let w = Client::connect(srv.addr, &srv.key, true).unwrap();
    if !matches!(w.data_path(), DataPath::Pulled(_)) {
        return None;
    }
    let fd = w.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    w.pwrite(fd, &vec![1u8; PULLED_LEN], 0).unwrap();
    Some((w, fd))
}

/// A reader holds a pulled piece unfetched while another client overwrites the file twice
/// (the second write would take the blocks the first one freed); fetched afterwards, the
/// piece still holds the bytes the file had at the pull.
#[test]
fn a_pulled_block_is_not_taken_again_before_it_is_fetched() {
    const LEN: usize = PULLED_LEN;
    let srv = common::start(false);
    let Some((w, fd)) = pulled_file(&srv) else {
        return; // a transport with one-sided gets: nothing is pulled
    };
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
    let Some((w, fd)) = pulled_file(&srv) else {
        return; // a transport with one-sided gets: nothing is pulled
    };
    let free = w.statfs().unwrap().free_blocks;
    pull_held(&srv, |node, ctl, _pieces| {
        // This client neither fetches nor progresses; the server lets it go at the pull's
        // deadline, and serves the other client all along.
        common::overwritten_then_let_go(&w, fd, LEN, free, node, ctl);
    });
    assert_eq!(w.statfs().unwrap().free_blocks, free);
    assert_eq!(w.read_all("/f").unwrap(), vec![2u8; LEN]);
}

#[test]
fn a_wrong_key_gets_nothing() {
    let srv = common::start(false);
    let e = Client::connect(srv.addr, &Key::random(), false)
        .err()
        .unwrap();
    assert!(e.to_string().contains("wrong key"), "{e}");
    assert_eq!(srv.stats.refused.load(Ordering::Relaxed), 1);
    assert_eq!(srv.stats.authenticated.load(Ordering::Relaxed), 0);
}

#[test]
fn a_read_only_export_refuses_every_change() {
    let srv = common::start(true);
    let e = Client::connect(srv.addr, &srv.key, true).err().unwrap();
    assert!(e.to_string().contains("read-only"), "{e}");
    let c = Client::connect(srv.addr, &srv.key, false).unwrap();
    assert!(!c.writable());
    assert_eq!(c.mkdir("/d", 0o755).unwrap_err(), Errno(libc::EROFS));
    assert_eq!(
        c.open("/f", OpenFlags::CREATE, 0o644).unwrap_err(),
        Errno(libc::EROFS)
    );
    assert!(c.readdir("/").unwrap().is_empty());
}

/// Speaks the protocol by hand: proves the key, reserves blocks, puts into them, and goes
/// away without committing.
#[test]
fn a_client_gone_before_its_commit_leaves_nothing() {
    let srv = common::start(false);
    let c = Client::connect(srv.addr, &srv.key, true).unwrap();
    let fd = c.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    c.write(fd, &[1u8; 100_000]).unwrap();
    let free = c.statfs().unwrap().free_blocks;
    {
        let node = Node::new().unwrap();
        let (ep, w) = common::prove_by_hand(&srv, &node, true);
        let ino = 2; // the first file made in a fresh store
        node.send(
            &ep,
            &[],
            &Request::Prepare {
                ino,
                off: 0,
                len: 50_000,
            }
            .encode(2),
        )
        .unwrap();
        let Reply::Prepared { targets, .. } = common::next_reply(&node) else {
            panic!()
        };
        let data = node
            .connect_address(&w.address, Failures::Undetected)
            .unwrap();
        let key = node.unpack_rkey(&data, &w.data_key).unwrap();
        for t in &targets {
            let remote = w.data_addr + (t.region_offset - w.data_start);
            node.put(&data, &vec![9u8; t.len as usize], remote, &key)
                .unwrap();
        }
        node.flush(&data).unwrap();
        // Gone, without a commit.
    }
    let t = Instant::now();
    while srv.stats.abandoned.load(Ordering::Relaxed) == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the server never noticed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.read_all("/f").unwrap(), vec![1u8; 100_000]);
    assert_eq!(
        c.statfs().unwrap().free_blocks,
        free,
        "the reservation was given back"
    );
}

#[test]
fn a_server_that_goes_away_fails_calls_instead_of_hanging() {
    let srv = common::start(false);
    let c = Client::connect(srv.addr, &srv.key, true).unwrap();
    c.mkdir("/d", 0o755).unwrap();
    drop(srv.stop());
    let t = Instant::now();
    let e = c.mkdir("/e", 0o755).unwrap_err();
    assert!([libc::ENOTCONN, libc::ETIMEDOUT].contains(&e.0), "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(40));
}

/// Runs `f` to completion on this thread, parking while it is pending.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let mut f = std::pin::pin!(f);
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[test]
fn asynchronous_calls_keep_the_synchronous_semantics() {
    let server = common::start(false);
    let c = Client::connect(server.addr, &server.key, true).unwrap();
    let fd = c.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    let (a, b) = (pattern(300_000, 1), pattern(700_000, 2));
    // Descriptor writes advance its offset in the order they were made.
    let wa = c.write_async(fd, a.clone());
    let wb = c.write_async(fd, b.clone());
    let (ra, ba) = block_on(wb);
    assert_eq!((ra, ba.len()), (Ok(700_000), 700_000));
    assert_eq!(block_on(wa).0, Ok(300_000));
    // A positioned write made after them lands over them.
    let over = c.pwrite_async(fd, vec![9u8; 1000], 100);
    let (n, _) = block_on(over);
    assert_eq!(n, Ok(1000));
    let mut want = [a, b].concat();
    want[100..1100].fill(9);
    // Positioned reads, many at once, each see every write made before it.
    let reads: Vec<_> = (0..10u64)
        .map(|k| c.pread_async(fd, vec![0u8; 100_000], k * 100_000))
        .collect();
    for (k, r) in reads.into_iter().enumerate() {
        let (n, buf) = block_on(r);
        assert_eq!(n, Ok(100_000));
        assert_eq!(buf, want[k * 100_000..(k + 1) * 100_000]);
    }
    // Errors are the synchronous calls' errors.
    let (e, _) = block_on(c.read_async(Fd(999), vec![0u8; 10]));
    assert_eq!(e, Err(Errno::EBADF));
    // A call still queued when the client goes finishes first.
    let last = c.pwrite_async(fd, vec![7u8; 10], 0);
    drop(c);
    assert_eq!(block_on(last).0, Ok(10));
}
