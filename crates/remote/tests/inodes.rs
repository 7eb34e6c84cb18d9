//! The client as `Inodes` (what `mount --remote` serves): the same calls give the same
//! answers as the store in this process, and caches follow other clients' changes at once.

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use switchyard_media::{Persist, Region};
use switchyard_mover::{Config, Mover};
use switchyard_remote::Client;
use switchyard_store::{
    Errno, Falloc, Files, Inodes, OpenFlags, Owner, Rename, SetAttr, Store, XattrMode, ROOT,
    S_IFDIR, S_IFLNK, S_IFREG,
};

fn local() -> Store {
    let region = Region::memory(64 << 20, Persist::detect()).unwrap();
    let mover = Arc::new(Mover::start(&Config::default()).unwrap());
    Store::format(region, mover, Owner::current()).unwrap()
}

#[test]
fn a_directory_made_by_another_client_shows_in_its_parent_at_once() {
    let server = common::start(false);
    let a = Client::connect(server.addr, &server.key, true).unwrap();
    let b = Client::connect(server.addr, &server.key, true).unwrap();
    let before = Inodes::stat(&a, ROOT).unwrap();
    b.make(ROOT, b"d", S_IFDIR | 0o755, 0, &[], Owner::current(), 0)
        .unwrap();
    let after = Inodes::stat(&a, ROOT).unwrap();
    assert_eq!(after.attr.nlink, before.attr.nlink + 1);
    assert!(a.lookup(ROOT, b"d").is_ok());
}

#[test]
fn a_cached_name_another_client_removed_is_gone_even_if_its_number_is_reused() {
    let server = common::start(false);
    let a = Client::connect(server.addr, &server.key, true).unwrap();
    let b = Client::connect(server.addr, &server.key, true).unwrap();
    let (a, b): (&dyn Files, &dyn Files) = (&a, &b);
    a.mkdir("/d", 0o755).unwrap();
    let fd = a.open("/d/x", OpenFlags::CREATE, 0o644).unwrap();
    a.write(fd, b"x's bytes").unwrap();
    a.close(fd).unwrap();
    assert_eq!(a.read_all("/d/x").unwrap(), b"x's bytes");
    // Another client removes x and makes y, which may get x's number.
    b.unlink("/d/x").unwrap();
    let fd = b.open("/d/y", OpenFlags::CREATE, 0o644).unwrap();
    b.write(fd, b"y's bytes").unwrap();
    b.close(fd).unwrap();
    assert_eq!(a.read_all("/d/x"), Err(Errno::ENOENT));
    assert_eq!(a.read_all("/d/y").unwrap(), b"y's bytes");
}

#[derive(Debug, Clone)]
enum Op {
    Make(usize, usize, u32),
    Remove(usize, usize, bool),
    Rename(usize, usize, usize, usize, Rename),
    Write(usize, usize, u64, usize, u8),
    Append(usize, usize, usize, u8),
    Read(usize, usize, u64, usize),
    Truncate(usize, usize, u64),
    Punch(usize, usize, u64, u64),
    Stat(usize, usize),
    List(usize),
    Xattr(usize, usize, u8),
}

const NAMES: [&[u8]; 3] = [b"a", b"b", b"c"];

fn op() -> impl Strategy<Value = Op> {
    let (p, n) = (0..2usize, 0..3usize);
    let kind = prop_oneof![Just(S_IFREG), Just(S_IFDIR), Just(S_IFLNK)];
    let how = prop_oneof![
        Just(Rename::Replace),
        Just(Rename::NoReplace),
        Just(Rename::Exchange)
    ];
    prop_oneof![
        (p.clone(), n.clone(), kind).prop_map(|(p, n, k)| Op::Make(p, n, k)),
        (p.clone(), n.clone(), any::<bool>()).prop_map(|(p, n, d)| Op::Remove(p, n, d)),
        (p.clone(), n.clone(), p.clone(), n.clone(), how)
            .prop_map(|(p, n, q, m, h)| Op::Rename(p, n, q, m, h)),
        (
            p.clone(),
            n.clone(),
            0..200_000u64,
            1..70_000usize,
            any::<u8>()
        )
            .prop_map(|(p, n, o, l, s)| Op::Write(p, n, o, l, s)),
        (p.clone(), n.clone(), 1..9000usize, any::<u8>())
            .prop_map(|(p, n, l, s)| Op::Append(p, n, l, s)),
        (p.clone(), n.clone(), 0..250_000u64, 1..100_000usize)
            .prop_map(|(p, n, o, l)| Op::Read(p, n, o, l)),
        (p.clone(), n.clone(), 0..250_000u64).prop_map(|(p, n, s)| Op::Truncate(p, n, s)),
        (p.clone(), n.clone(), 0..200_000u64, 1..50_000u64)
            .prop_map(|(p, n, o, l)| Op::Punch(p, n, o, l)),
        (p.clone(), n.clone()).prop_map(|(p, n)| Op::Stat(p, n)),
        p.clone().prop_map(Op::List),
        (p, n, any::<u8>()).prop_map(|(p, n, v)| Op::Xattr(p, n, v)),
    ]
}

/// What a call showed, comparable between the two implementations (no times, no numbers).
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Err(Errno),
    Done,
    Bytes(Vec<u8>),
    Attr(u32, u32, u64, u64),
    Names(Vec<Vec<u8>>),
}

fn run_op<I: Inodes>(fs: &I, dirs: [u64; 2], op: &Op) -> Seen {
    let owner = Owner::current();
    let seen = |r: Result<Seen, Errno>| r.unwrap_or_else(Seen::Err);
    // Looks a name up for the length of one call, then forgets it.
    let with = |p: usize, n: usize, f: &dyn Fn(u64) -> Result<Seen, Errno>| {
        let (ino, _) = fs.lookup(dirs[p], NAMES[n])?;
        let r = f(ino);
        fs.forget(ino, 1);
        r
    };
    seen(match *op {
        Op::Make(p, n, kind) => fs
            .make(dirs[p], NAMES[n], kind | 0o755, 0, b"target", owner, 0)
            .map(|(ino, _)| {
                fs.forget(ino, 1);
                Seen::Done
            }),
        Op::Remove(p, n, dir) => fs.remove(dirs[p], NAMES[n], dir).map(|_| Seen::Done),
        Op::Rename(p, n, q, m, how) => fs
            .rename(dirs[p], NAMES[n], dirs[q], NAMES[m], how)
            .map(|_| Seen::Done),
        Op::Write(p, n, off, len, seed) => with(p, n, &|ino| {
            let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
            fs.write(ino, off, &data)
                .map(|n| Seen::Attr(0, 0, n as u64, 0))
        }),
        Op::Append(p, n, len, seed) => with(p, n, &|ino| {
            fs.append(ino, &vec![seed; len])
                .map(|at| Seen::Attr(0, 0, at, 0))
        }),
        Op::Read(p, n, off, len) => with(p, n, &|ino| {
            let mut buf = vec![0u8; len];
            let got = fs.read(ino, off, &mut buf)?;
            buf.truncate(got);
            Ok(Seen::Bytes(buf))
        }),
        Op::Truncate(p, n, size) => with(p, n, &|ino| {
            let set = SetAttr {
                size: Some(size),
                ..SetAttr::default()
            };
            fs.setattr(ino, set)
                .map(|s| Seen::Attr(0, 0, s.attr.size, 0))
        }),
        Op::Punch(p, n, off, len) => with(p, n, &|ino| {
            fs.fallocate(ino, off, len, Falloc::PunchHole)
                .map(|_| Seen::Done)
        }),
        Op::Stat(p, n) => with(p, n, &|ino| {
            let s = fs.stat(ino)?;
            let a = s.attr;
            Ok(Seen::Attr(a.mode, a.nlink, a.size, s.blocks))
        }),
        Op::List(p) => fs.readdir(dirs[p]).map(|es| {
            let mut names: Vec<Vec<u8>> = es.into_iter().map(|e| e.name).collect();
            names.sort();
            Seen::Names(names)
        }),
        Op::Xattr(p, n, v) => with(p, n, &|ino| {
            fs.setxattr(ino, b"user.t", &[v], XattrMode::Set)?;
            Ok(Seen::Bytes(
                [fs.getxattr(ino, b"user.t")?, fs.listxattr(ino)?].concat(),
            ))
        }),
    })
}

fn with_dir<I: Inodes>(fs: &I) -> [u64; 2] {
    let (d, _) = fs
        .make(ROOT, b"d", S_IFDIR | 0o755, 0, &[], Owner::current(), 0)
        .unwrap();
    [ROOT, d]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Code written against `Inodes` gets the same answers from a served store as from the
    /// store in its own process: the same errnos, attributes, bytes and listings.
    #[test]
    fn the_client_answers_as_the_store_does(ops in prop::collection::vec(op(), 1..40)) {
        let server = common::start(false);
        let client = Client::connect(server.addr, &server.key, true).unwrap();
        let store = local();
        let (cd, sd) = (with_dir(&client), with_dir(&store));
        for (i, op) in ops.iter().enumerate() {
            let want = run_op(&store, sd, op);
            let got = run_op(&client, cd, op);
            prop_assert_eq!(got, want, "step {}: {:?}", i, op);
        }
    }
}

/// A served store that filled up: the client's write that fills it is short (as write(2)
/// says), and overwrites still go: a one-sided write the server has no room to prepare is
/// sent inside a message, and the server writes it in pieces (it failed with ENOSPC).
#[test]
fn a_full_served_store_takes_short_writes_and_overwrites() {
    let server = common::start(false);
    let c = Client::connect(server.addr, &server.key, true).unwrap();
    let me = Owner::current();
    let (a, _) = Inodes::make(&c, ROOT, b"a", S_IFREG | 0o644, 0, &[], me, 0).unwrap();
    assert_eq!(
        Inodes::write(&c, a, 0, &vec![1u8; 256 << 10]).unwrap(),
        256 << 10
    );
    let (b, _) = Inodes::make(&c, ROOT, b"b", S_IFREG | 0o644, 0, &[], me, 0).unwrap();
    let (mut at, mut short) = (0u64, false);
    loop {
        match Inodes::write(&c, b, at, &vec![2u8; 1 << 20]) {
            Ok(n) => {
                short |= n < 1 << 20;
                at += n as u64;
            }
            Err(e) => {
                assert_eq!(e, Errno::ENOSPC);
                break;
            }
        }
    }
    assert!(short, "the write that filled the store was short");
    assert_eq!(Inodes::stat(&c, b).unwrap().attr.size, at);
    assert_eq!(
        Inodes::write(&c, a, 0, &vec![3u8; 256 << 10]).unwrap(),
        256 << 10
    );
    let mut buf = vec![0u8; 256 << 10];
    assert_eq!(Inodes::read(&c, a, 0, &mut buf).unwrap(), 256 << 10);
    assert!(buf.iter().all(|&x| x == 3));
}
