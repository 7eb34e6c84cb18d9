//! The two-phase write (`prepare_write`, fill, `commit_write`): invisible until it commits,
//! whole once it does, its blocks given back when abandoned, ordered with other writes by its
//! commit, and safe against the file going away in between.

use std::sync::Arc;

use proptest::prelude::*;
use switchyard_media::{Persist, Region};
use switchyard_mover::{Config, Mover};
use switchyard_store::{fsck, Errno, Fs, OpenFlags, Owner, PreparedWrite, Store};

fn mover() -> Arc<Mover> {
    Arc::new(Mover::start(&Config::default()).unwrap())
}

fn fresh(size: u64) -> Fs {
    let region = Region::memory(size, Persist::detect()).unwrap();
    Fs::new(Store::format(region, mover(), Owner::current()).unwrap())
}

fn file(fs: &Fs, path: &str, body: &[u8]) -> u64 {
    let fd = fs.open(path, OpenFlags::CREATE, 0o644).unwrap();
    fs.write(fd, body).unwrap();
    fs.close(fd).unwrap();
    fs.ino(path).unwrap()
}

/// Fills a preparation as another party with the region mapped would: plain stores into the
/// targets, no flush (the commit makes them durable).
fn fill_directly(store: &Store, w: &PreparedWrite<'_>, data: &[u8]) {
    let base = store.region().as_mut_ptr();
    for t in w.targets() {
        let src = &data[t.offset as usize..][..t.len as usize];
        // SAFETY: the target lies inside the mapped region, in blocks reserved for `w` alone.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                base.add(t.region_offset as usize),
                src.len(),
            )
        };
    }
}

#[test]
fn a_prepared_write_is_invisible_until_it_commits_and_whole_after() {
    let fs = fresh(8 << 20);
    let old: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let ino = file(&fs, "/f", &old);
    let store = fs.store();
    let mut w = store.prepare_write(ino, 3000, 9000).unwrap();
    assert_eq!((w.ino(), w.offset(), w.len()), (ino, 3000, 9000));
    let covered: u64 = w.targets().iter().map(|t| t.len).sum();
    assert_eq!(covered, 9000, "the targets cover the write once");
    w.fill(&[0xAB; 9000]).unwrap();
    assert_eq!(
        fs.read_all("/f").unwrap(),
        old,
        "nothing shows before the commit"
    );
    assert_eq!(store.commit_write(w).unwrap(), 9000);
    let mut want = old.clone();
    want.resize(12_000, 0);
    want[3000..12_000].fill(0xAB);
    assert_eq!(fs.read_all("/f").unwrap(), want);
}

#[test]
fn an_abandoned_preparation_gives_its_blocks_back() {
    let fs = fresh(8 << 20);
    let ino = file(&fs, "/f", b"kept");
    let store = fs.store();
    let free = store.statfs().free_blocks;
    let mut w = store.prepare_write(ino, 0, 1 << 20).unwrap();
    assert!(
        store.statfs().free_blocks <= free - 256,
        "the blocks are reserved"
    );
    w.fill(&vec![1; 1 << 20]).unwrap();
    drop(w);
    assert_eq!(store.statfs().free_blocks, free);
    assert_eq!(fs.read_all("/f").unwrap(), b"kept");
}

#[test]
fn the_commit_completes_edge_pages_from_the_file_as_it_is_then() {
    let fs = fresh(8 << 20);
    let ino = file(&fs, "/f", &[1u8; 8192]);
    let store = fs.store();
    // Covers the middle of both pages; the bytes around it change before the commit.
    let w = store.prepare_write(ino, 1000, 6000).unwrap();
    store.write(ino, 0, &[2u8; 8192]).unwrap();
    fill_directly(store, &w, &[3u8; 6000]);
    store.commit_write(w).unwrap();
    let got = fs.read_all("/f").unwrap();
    assert!(
        got[..1000].iter().all(|&b| b == 2),
        "head from the later write"
    );
    assert!(got[1000..7000].iter().all(|&b| b == 3));
    assert!(
        got[7000..].iter().all(|&b| b == 2),
        "tail from the later write"
    );
}

#[test]
fn a_write_into_a_hole_past_the_end_reads_zeros_around_it() {
    let fs = fresh(8 << 20);
    let ino = file(&fs, "/f", b"");
    let store = fs.store();
    let w = store.prepare_write(ino, 5000, 100).unwrap();
    // Blocks taken from free space may hold old bytes: the commit must zero around the write.
    for t in w.targets() {
        // SAFETY: the reserved block of the write's only page, whole, is ours until commit.
        unsafe {
            let page = t.region_offset - t.region_offset % 4096;
            std::ptr::write_bytes(store.region().as_mut_ptr().add(page as usize), 0xEE, 4096)
        };
    }
    fill_directly(store, &w, &[9u8; 100]);
    store.commit_write(w).unwrap();
    let mut want = vec![0u8; 5100];
    want[5000..].fill(9);
    assert_eq!(fs.read_all("/f").unwrap(), want);
    let fd = fs.open("/f", OpenFlags::READ, 0).unwrap();
    fs.close(fd).unwrap();
}

#[test]
fn a_commit_after_the_file_went_away_fails_stale_and_frees_the_blocks() {
    let fs = fresh(8 << 20);
    let ino = file(&fs, "/f", b"x");
    let store = fs.store();
    let free = store.statfs().free_blocks;
    let mut w = store.prepare_write(ino, 0, 4096).unwrap();
    w.fill(&[7; 4096]).unwrap();
    fs.unlink("/f").unwrap();
    let reused = file(&fs, "/g", b"other");
    assert_eq!(reused, ino, "the slot is given to the next file");
    let e = store.commit_write(w).unwrap_err();
    assert_eq!(e.errno, Errno::ESTALE);
    assert_eq!(
        e.to_string(),
        format!("commit write inode {ino}: ESTALE (Stale file handle (os error 116))")
    );
    assert_eq!(fs.read_all("/g").unwrap(), b"other");
    assert_eq!(store.statfs().free_blocks, free);
}

#[test]
fn preparations_refuse_what_a_write_refuses() {
    let fs = fresh(4 << 20);
    fs.mkdir("/d", 0o755).unwrap();
    let store = fs.store();
    let d = fs.ino("/d").unwrap();
    assert_eq!(
        store.prepare_write(d, 0, 1).unwrap_err().errno,
        Errno::EISDIR
    );
    let f = file(&fs, "/f", b"");
    assert_eq!(
        store.prepare_write(f, u64::MAX - 1, 4).unwrap_err().errno,
        Errno::EFBIG
    );
    assert_eq!(
        store.prepare_write(f, 0, 64 << 20).unwrap_err().errno,
        Errno::ENOSPC
    );
    let mut w = store.prepare_write(f, 0, 10).unwrap();
    assert_eq!(
        w.fill(&[0; 9]).map_err(|e| e.errno),
        Err(Errno::EINVAL),
        "the fill is the write's length"
    );
    let empty = store.prepare_write(f, 100, 0).unwrap();
    assert!(empty.is_empty() && empty.targets().is_empty());
    assert_eq!(store.commit_write(empty), Ok(0));
    assert_eq!(
        fs.stat("/f").unwrap().size,
        0,
        "an empty write changes nothing"
    );
}

#[test]
fn uncommitted_preparations_leave_nothing_after_a_remount() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r");
    let region = Region::create(&path, 8 << 20, Persist::detect()).unwrap();
    let fs = Fs::new(Store::format(region, mover(), Owner::current()).unwrap());
    let ino = file(&fs, "/f", &[5u8; 5000]);
    let free = fs.store().statfs().free_blocks;
    {
        let mut w = fs.store().prepare_write(ino, 0, 3 << 20).unwrap();
        w.fill(&vec![6; 3 << 20]).unwrap();
    }
    fs.unmount().unwrap();
    let f = fsck::check(&std::fs::read(&path).unwrap());
    assert!(f.healthy(), "{:?}", f.problems);
    let region = Region::open(&path, 0, Persist::detect()).unwrap();
    let fs = Fs::new(Store::mount(region, mover()).unwrap());
    assert_eq!(fs.store().statfs().free_blocks, free);
    assert_eq!(fs.read_all("/f").unwrap(), vec![5u8; 5000]);
}

/// One step of the model test: a plain write, or a prepared one committed after the next
/// plain write (so commits reorder with writes as a remote client's would).
#[derive(Debug, Clone)]
enum Step {
    Write(u64, usize, u8),
    Prepared(u64, usize, u8, bool),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u64..20_000, 1usize..9000, any::<u8>()).prop_map(|(o, n, b)| Step::Write(o, n, b)),
        (0u64..20_000, 1usize..9000, any::<u8>(), any::<bool>())
            .prop_map(|(o, n, b, d)| Step::Prepared(o, n, b, d)),
    ]
}

fn apply(model: &mut Vec<u8>, off: u64, n: usize, byte: u8) {
    let end = off as usize + n;
    if model.len() < end {
        model.resize(end, 0);
    }
    model[off as usize..end].fill(byte);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn two_phase_writes_commit_in_commit_order(steps in prop::collection::vec(step(), 1..12)) {
        let fs = fresh(16 << 20);
        let ino = file(&fs, "/f", b"");
        let store = fs.store();
        let mut model = Vec::new();
        let mut waiting: Option<(PreparedWrite<'_>, u64, usize, u8)> = None;
        for s in steps {
            match s {
                Step::Write(off, n, byte) => {
                    store.write(ino, off, &vec![byte; n]).unwrap();
                    apply(&mut model, off, n, byte);
                }
                Step::Prepared(off, n, byte, direct) => {
                    let mut w = store.prepare_write(ino, off, n as u64).unwrap();
                    if direct {
                        fill_directly(store, &w, &vec![byte; n]);
                    } else {
                        w.fill(&vec![byte; n]).unwrap();
                    }
                    if let Some((p, o, n, b)) = waiting.replace((w, off, n, byte)) {
                        store.commit_write(p).unwrap();
                        apply(&mut model, o, n, b);
                    }
                }
            }
        }
        if let Some((p, o, n, b)) = waiting {
            store.commit_write(p).unwrap();
            apply(&mut model, o, n, b);
        }
        prop_assert_eq!(fs.read_all("/f").unwrap(), model);
    }
}
