//! What a client fetches of a file's extent map is bounded by its requests, not by the
//! file: reads fetch the map of a window around them ([`MAP_WINDOW`]), small writes come
//! back with their window's map and the file's stat ([`Reply::WrittenMap`]), and
//! `SEEK_DATA` / `SEEK_HOLE` are answered by the server from the offset on
//! ([`Request::Seek`]).

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use switchyard_media::{Persist, Region};
use switchyard_mover::{Config, Mover};
use switchyard_remote::proto::{Reply, Request};
use switchyard_remote::{Client, DataPath, Key, MAP_WINDOW};
use switchyard_store::{Errno, Falloc, Inodes, Owner, Seek, Store, ROOT, S_IFREG};
use switchyard_ucx::Node;

const GIB: u64 = 1 << 30;
/// The size of bonnie++'s chunks (its rewrite phase reads one and writes it back).
const CHUNK: usize = 8 << 10;
/// Bytes of a map reply with `runs` runs: kind, sequence number, attributes (mode, uid, gid,
/// nlink; size, three times, parent), change word, count, runs.
fn map_reply_bytes(runs: u64) -> u64 {
    1 + 8 + (4 * 4 + 8 * 5) + 8 + 4 + 24 * runs
}

/// What a write's reply adds to its map's: the count, and the stat (attributes, blocks,
/// generation).
const WRITTEN_EXTRA: u64 = 8 + (4 * 4 + 8 * 5) + 8 + 8;

/// A little generator of offsets and bytes (the test needs no more than that).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn chunk_of(seed: u64) -> Vec<u8> {
    (0..CHUNK as u64)
        .map(|i| (i.wrapping_mul(31) ^ seed) as u8)
        .collect()
}

/// Fills `ino` with 1 GiB of allocated zeros, then rewrites one page every 256 KiB: a map
/// of 8192 runs, ~196 KB whole. Returns what each 8 KiB chunk written holds.
fn fragmented_gib(c: &Client, ino: u64) -> HashMap<u64, Vec<u8>> {
    c.fallocate(ino, 0, GIB, Falloc::Allocate { keep_size: false })
        .unwrap();
    let mut model = HashMap::new();
    for k in 0..GIB / (256 << 10) {
        let at = k * (256 << 10);
        let chunk = chunk_of(k);
        assert_eq!(c.write(ino, at, &chunk[..4096]).unwrap(), 4096);
        let mut whole = chunk[..4096].to_vec();
        whole.resize(CHUNK, 0);
        model.insert(at, whole);
    }
    model
}

/// bonnie++'s rewrite through a client, on a 1 GiB file whose map has thousands of runs:
/// every read comes right after a write elsewhere (which drops the cached map), and each
/// fetches no more than the map of its window, never the file's (whose reply would be 25
/// times larger); each write's reply brings no more than its window's either.
#[test]
fn map_bytes_per_read_stay_bounded_on_a_1_gib_file() {
    let srv = common::start_sized(false, Config::default(), Key::random(), GIB + (128 << 20));
    let c = Client::connect(srv.addr, &srv.key, true).unwrap();
    if matches!(c.data_path(), DataPath::InMessages(_)) {
        return; // no one-sided access: nothing is cached, no map is fetched
    }
    let (ino, _) = c
        .make(ROOT, b"big", S_IFREG | 0o644, 0, &[], Owner::current(), 0)
        .unwrap();
    let t = Instant::now();
    let mut model = fragmented_gib(&c, ino);
    let filled = t.elapsed();
    let whole_map = map_reply_bytes(2 * GIB / (256 << 10));
    let window_map = map_reply_bytes(MAP_WINDOW / 4096 + 1);
    assert!(whole_map > 20 * window_map);

    let t = Instant::now();
    let mut rng = Lcg(46);
    let mut buf = vec![0u8; CHUNK];
    let (mut most, start) = (0, c.stats());
    for pair in 0..200u64 {
        let at = rng.next() % (GIB / CHUNK as u64) * CHUNK as u64;
        let before = c.stats();
        assert_eq!(c.read(ino, at, &mut buf).unwrap(), CHUNK);
        let fetched = c.stats().map_bytes_fetched - before.map_bytes_fetched;
        assert!(
            fetched <= window_map,
            "read {pair} at {at} fetched {fetched} bytes of map (a window's is at most {window_map})"
        );
        most = most.max(fetched);
        let zeros = vec![0u8; CHUNK];
        let want = model.get(&at).unwrap_or(&zeros);
        assert!(buf == *want, "read {pair} at {at}: wrong bytes");
        let chunk = chunk_of(1000 + pair);
        let before = c.stats();
        assert_eq!(c.write(ino, at, &chunk).unwrap(), CHUNK);
        let fetched = c.stats().map_bytes_fetched - before.map_bytes_fetched;
        assert!(
            fetched <= window_map + WRITTEN_EXTRA,
            "write {pair} came with {fetched} bytes of map"
        );
        model.insert(at, chunk);
    }
    let end = c.stats();
    assert!(end.map_fetches - start.map_fetches <= 400, "{end:?}");
    assert!(end.map_runs_fetched - start.map_runs_fetched <= 400 * (MAP_WINDOW / 4096 + 1));
    eprintln!(
        "filled 1 GiB ({} runs) in {filled:?}; 200 read/write pairs in {:?}; most map bytes \
         per read {most} (whole map ~{whole_map})",
        2 * GIB / (256 << 10),
        t.elapsed()
    );
}

/// A rewrite in order (read a chunk, write it back, read the next): each write's reply
/// brings the file's stat and the map of its window, so the stat and the read that follow
/// send no request at all; another client's write is seen at once.
#[test]
fn a_rewrite_in_order_asks_for_no_map() {
    let srv = common::start(false);
    let c = Client::connect(srv.addr, &srv.key, true).unwrap();
    if matches!(c.data_path(), DataPath::InMessages(_)) {
        return; // no one-sided access: every read is a request
    }
    let (ino, _) = c
        .make(ROOT, b"f", S_IFREG | 0o644, 0, &[], Owner::current(), 0)
        .unwrap();
    let old: Vec<u8> = (0..4 * MAP_WINDOW).map(|i| (i % 251) as u8).collect();
    assert_eq!(c.write(ino, 0, &old).unwrap(), old.len());
    let base = 2 * MAP_WINDOW;
    let mut buf = vec![0u8; CHUNK];
    for k in 0..(MAP_WINDOW / CHUNK as u64) {
        let at = base + k * CHUNK as u64;
        // As the kernel does: the attributes (it drops its cached pages if they moved), then
        // the read.
        let before = c.stats();
        assert_eq!(c.stat(ino).unwrap().attr.size, old.len() as u64);
        assert_eq!(c.read(ino, at, &mut buf).unwrap(), CHUNK);
        if k > 0 {
            assert_eq!(
                c.stats().requests,
                before.requests,
                "read {k} asked the server"
            );
        }
        assert!(
            buf[..] == old[at as usize..][..CHUNK],
            "chunk {k}: wrong bytes"
        );
        assert_eq!(c.write(ino, at, &chunk_of(k)).unwrap(), CHUNK);
    }
    // Another client's write moves the change word: the cached stat and map are dropped.
    let other = Client::connect(srv.addr, &srv.key, true).unwrap();
    assert_eq!(other.write(ino, base, &[9u8; 100]).unwrap(), 100);
    let mut few = [0u8; 100];
    assert_eq!(c.read(ino, base, &mut few).unwrap(), 100);
    assert_eq!(few, [9u8; 100]);
    assert_eq!(other.write(ino, 8 * MAP_WINDOW, &[1]).unwrap(), 1);
    assert_eq!(c.stat(ino).unwrap().attr.size, 8 * MAP_WINDOW + 1);
    assert_eq!(other.write(ino, base, &chunk_of(0)[..100]).unwrap(), 100);
    let mut all = vec![0u8; old.len()];
    assert_eq!(c.read(ino, 0, &mut all).unwrap(), old.len());
    for (k, piece) in all[base as usize..][..MAP_WINDOW as usize]
        .chunks(CHUNK)
        .enumerate()
    {
        assert!(piece == chunk_of(k as u64), "chunk {k} after the rewrite");
    }
    assert!(all[..base as usize] == old[..base as usize]);
    assert!(all[(base + MAP_WINDOW) as usize..] == old[(base + MAP_WINDOW) as usize..]);
}

fn local() -> Store {
    let region = Region::memory(64 << 20, Persist::detect()).unwrap();
    let mover = Arc::new(Mover::start(&Config::default()).unwrap());
    Store::format(region, mover, Owner::current()).unwrap()
}

/// A sparse file: data, holes, an allocated range with a hole punched in it, and blocks
/// allocated past its end.
fn sparse<I: Inodes>(fs: &I) -> u64 {
    let (ino, _) = fs
        .make(
            ROOT,
            b"sparse",
            S_IFREG | 0o644,
            0,
            &[],
            Owner::current(),
            0,
        )
        .unwrap();
    fs.write(ino, 0, &[1u8; 5000]).unwrap();
    fs.write(ino, 64 << 10, &[2u8; 4096]).unwrap();
    fs.write(ino, (3 << 20) + 100, &[3u8; 20_000]).unwrap();
    fs.fallocate(ino, 5 << 20, 1 << 20, Falloc::Allocate { keep_size: false })
        .unwrap();
    fs.fallocate(ino, (5 << 20) + 8192, 16384, Falloc::PunchHole)
        .unwrap();
    fs.write(ino, 9 << 20, &[4u8; 3]).unwrap();
    // Blocks past the end (unseen: the file ends in the page at 9 MiB).
    fs.fallocate(
        ino,
        (9 << 20) + 4096,
        1 << 20,
        Falloc::Allocate { keep_size: true },
    )
    .unwrap();
    let size = fs.stat(ino).unwrap().attr.size;
    assert!(size > 9 << 20);
    ino
}

/// `SEEK_DATA` and `SEEK_HOLE` through the client land where the store's own do, at every
/// offset tried (ENXIO included), and fetch no map.
#[test]
fn seeks_through_the_client_land_where_the_stores_do() {
    let srv = common::start(false);
    let c = Client::connect(srv.addr, &srv.key, true).unwrap();
    let store = local();
    let (remote, here) = (sparse(&c), sparse(&store));
    let size = store.stat(here).unwrap().attr.size;
    assert_eq!(c.stat(remote).unwrap().attr.size, size);
    let before = c.stats();
    let mut offsets: Vec<u64> = (0..size + 8192).step_by(1777).collect();
    offsets.extend([
        0,
        4095,
        4096,
        5000,
        64 << 10,
        (5 << 20) + 8192,
        size - 1,
        size,
        u64::MAX >> 1,
    ]);
    for off in offsets {
        for to in [Seek::Data, Seek::Hole] {
            assert_eq!(
                c.seek(remote, off, to),
                store.seek(here, off, to).map_err(Errno::from),
                "{to:?} from {off}"
            );
        }
    }
    let after = c.stats();
    assert_eq!(after.map_fetches, before.map_fetches, "{after:?}");
    assert_eq!(after.map_bytes_fetched, before.map_bytes_fetched);
}

/// A write's reply carries its window's map only to a client that caches maps (one that
/// asked for a map): a client on the in-message path, which never does, gets the bare count.
#[test]
fn only_a_client_that_asked_for_a_map_gets_one_with_its_writes() {
    let srv = common::start(false);
    let c = Client::connect(srv.addr, &srv.key, true).unwrap();
    let (ino, _) = c
        .make(ROOT, b"f", S_IFREG | 0o644, 0, &[], Owner::current(), 0)
        .unwrap();
    let node = Node::new().unwrap();
    let (ctl, _) = common::prove_by_hand(&srv, &node, true);
    let ask = |req: &[u8]| {
        node.send(&ctl, &[], req).unwrap();
        common::next_reply(&node)
    };
    assert_eq!(
        ask(&Request::encode_write(2, ino, 0, b"abc")),
        Reply::Written(3)
    );
    let map = Request::Map {
        ino,
        off: 0,
        len: 1,
    };
    assert!(matches!(ask(&map.encode(3)), Reply::Map(_)));
    let Reply::WrittenMap { n, stat, map } = ask(&Request::encode_write(4, ino, 4096, b"de"))
    else {
        panic!("no map with the write")
    };
    assert_eq!((n, stat.attr.size, map.attr.size), (2, 4098, 4098));
    assert_eq!(map.runs.iter().map(|r| r.len).sum::<u64>(), 4098);
}
