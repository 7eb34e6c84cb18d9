//! A client and a server in one process, over loopback: files round-trip, a second client sees
//! committed writes and never a stale map, keys and read-only exports are enforced, a client
//! that goes away mid-write leaves nothing, and a server that goes away fails calls.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use switchyard_remote::proto::{Reply, Request};
use switchyard_remote::{Client, DataPath, Key};
use switchyard_store::{Errno, Fd, Files, Fs, OpenFlags, Whence};
use switchyard_ucx::{Failures, Node};

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
    // the server's CPU), so reads are pulled there; UCX 1.22 gets over `cma`.
    assert_eq!(c.data_path(), expected_path(), "one host");
    assert!(c.change_words_mapped(), "one host: UCX shares memory");
    let pulled = matches!(c.data_path(), DataPath::Pulled(_));
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

/// A reader whose reads race a writer's overwrites returns whole writes only
/// ([`common::racing_overwrites_read_whole`]), here with 1 MiB reads as gets of the server's
/// memory (pulled reads: `pulled.rs`).
#[test]
fn reads_racing_overwrites_return_whole_writes() {
    let srv = common::start(false);
    let r = common::racing_overwrites_read_whole(&srv, false);
    assert_eq!(r.data_path(), expected_path(), "one host");
    if matches!(r.data_path(), DataPath::OneSided(_)) {
        assert_eq!(srv.stats.pulled_bytes.load(Ordering::Relaxed), 0);
    }
}

/// The data path between processes of one host: one-sided gets and puts over `cma` where
/// this UCX runs them over its bulk lanes (1.22), else pulled reads.
fn expected_path() -> DataPath {
    if Node::new().unwrap().one_sided_over_bulk_lanes() {
        DataPath::OneSided("cma".into())
    } else {
        DataPath::Pulled("cma".into())
    }
}

/// Once the map of a window of a file is cached (that of the whole file, here: a read of it
/// all fetched it), a one-sided read of any size inside it needs nothing of the server: no
/// request, no byte through it (and so no server CPU: measured by `bench remote`).
#[test]
fn one_sided_reads_of_a_cached_map_send_no_request() {
    const LEN: usize = 4 << 20;
    let srv = common::start(false);
    let c = Client::connect(srv.addr, &srv.key, true).unwrap();
    if !matches!(c.data_path(), DataPath::OneSided(_)) {
        assert!(!Node::new().unwrap().one_sided_over_bulk_lanes());
        return; // a UCX without one-sided gets over cma: reads are pulled (pulled.rs)
    }
    let fd = c.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    let data = pattern(LEN, 7);
    c.pwrite(fd, &data, 0).unwrap();
    let mut whole = vec![0u8; LEN];
    assert_eq!(c.pread(fd, &mut whole, 0).unwrap(), LEN);
    let mut buf = vec![0u8; 1 << 20];
    let (before, served) = (c.stats(), srv.stats.message_bytes.load(Ordering::Relaxed));
    for (k, off) in [0usize, 1 << 20, 12_345, 3 << 20, 4000]
        .into_iter()
        .enumerate()
    {
        let n = c.pread(fd, &mut buf, off as u64).unwrap();
        let want = &data[off..(off + buf.len()).min(LEN)];
        assert_eq!(&buf[..n], want, "read {k}");
    }
    let after = c.stats();
    assert_eq!(after.requests, before.requests, "{after:?}");
    assert!(after.one_sided_bytes - before.one_sided_bytes >= 4 << 20);
    assert_eq!(srv.stats.message_bytes.load(Ordering::Relaxed), served);
    assert_eq!(srv.stats.pulled_bytes.load(Ordering::Relaxed), 0);
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

/// Two clients (as two processes of two mounts, or of the file preload), each holding a byte
/// the other waits for: the second wait would never end, and is refused with `EDEADLK`, as
/// the kernel refuses it for its own locks. A try that does not wait is told `EAGAIN`.
#[test]
fn a_wait_for_a_lock_that_closes_a_cycle_of_clients_gets_edeadlk() {
    use switchyard_store::{Inodes, RecordLock, ROOT};
    let srv = common::start(false);
    let a = Client::connect(srv.addr, &srv.key, true).unwrap();
    let b = Client::connect(srv.addr, &srv.key, true).unwrap();
    let fd = Files::open(&a, "/f", OpenFlags::CREATE, 0o644).unwrap();
    Files::write(&a, fd, b"ab").unwrap();
    let (ino, _) = Inodes::lookup(&a, ROOT, b"f").unwrap();
    let byte = |at: u64, pid: u32| RecordLock {
        start: at,
        end: at,
        kind: libc::F_WRLCK,
        pid,
    };
    a.set_lock(ino, 1, byte(0, 100), false).unwrap();
    b.set_lock(ino, 1, byte(1, 200), false).unwrap();
    // a waits for b's byte (and keeps asking, as F_SETLKW does)...
    for _ in 0..3 {
        assert_eq!(
            a.set_lock(ino, 1, byte(1, 100), true),
            Err(Errno(libc::EAGAIN))
        );
    }
    // ... so b must not wait for a's.
    assert_eq!(
        b.set_lock(ino, 1, byte(0, 200), false),
        Err(Errno(libc::EAGAIN))
    );
    assert_eq!(
        b.set_lock(ino, 1, byte(0, 200), true),
        Err(Errno(libc::EDEADLK))
    );
    // b gives its byte up: a's wait ends with the lock.
    let unlock = RecordLock {
        kind: libc::F_UNLCK,
        ..byte(1, 200)
    };
    b.set_lock(ino, 1, unlock, false).unwrap();
    a.set_lock(ino, 1, byte(1, 100), true).unwrap();
}

/// Two clients opening the same new names with `O_CREAT` (not `O_EXCL`) at once: one creates
/// each, the other opens what it made, and neither fails with EEXIST, as open(2) promises
/// (a client that found no name and then lost the create to the other once gave EEXIST: the
/// preload's C test of two processes crossing locks on a file both create saw it).
#[test]
fn clients_creating_one_name_at_once_both_open_it() {
    let srv = common::start(false);
    let clients: Vec<Client> = (0..2)
        .map(|_| Client::connect(srv.addr, &srv.key, true).unwrap())
        .collect();
    let start = std::sync::Barrier::new(2);
    // Every open's failure, by name; a thread that fails goes on, so that the other is never
    // left waiting at the barrier.
    let failed: Vec<(String, Errno)> = std::thread::scope(|s| {
        let racers: Vec<_> = clients
            .iter()
            .map(|c| {
                let start = &start;
                s.spawn(move || {
                    let mut failed = Vec::new();
                    for i in 0..200 {
                        start.wait();
                        let name = format!("/race{i}");
                        match Files::open(c, &name, OpenFlags::CREATE, 0o644) {
                            Ok(fd) => Files::close(c, fd).unwrap(),
                            Err(e) => failed.push((name, e)),
                        }
                    }
                    failed
                })
            })
            .collect();
        racers.into_iter().flat_map(|r| r.join().unwrap()).collect()
    });
    assert!(failed.is_empty(), "opens with O_CREAT failed: {failed:?}");
    let names = Files::readdir(&clients[0], "/").unwrap();
    assert_eq!(
        names.iter().filter(|e| e.name.starts_with(b"race")).count(),
        200
    );
}
