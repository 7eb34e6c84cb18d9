//! Reading a file in place, as a reader outside the store's locks does: the runs name the
//! file's bytes in the region, inside the data area, and the change word moves on every change
//! of the file before a block it gave up can be reused.

use std::sync::Arc;

use proptest::prelude::*;
use switchyard_media::{Persist, Region};
use switchyard_mover::{Config, Mover};
use switchyard_store::{Fs, OpenFlags, Owner, SetAttr, Store};

fn fresh() -> Fs {
    let region = Region::memory(64 << 20, Persist::detect()).unwrap();
    let mover = Arc::new(Mover::start(&Config::default()).unwrap());
    Fs::new(Store::format(region, mover, Owner::current()).unwrap())
}

/// The bytes of `[off, off + len)` as the runs give them, holes as zeros.
fn read_in_place(store: &Store, ino: u64, off: u64, len: u64) -> (Vec<u8>, u64) {
    let e = store.extents(ino, off, len).unwrap();
    let n = e.attr.size.saturating_sub(off).min(len) as usize;
    let mut out = vec![0u8; n];
    let (start, area) = store.data_area();
    let base = store.region().as_ptr();
    for r in &e.runs {
        assert!(r.region_offset >= start && r.region_offset + r.len <= start + area);
        // SAFETY: the run lies inside the mapped region (checked above), and the file is not
        // written while this test reads it.
        let src = unsafe {
            std::slice::from_raw_parts(base.add(r.region_offset as usize), r.len as usize)
        };
        out[(r.file_offset - off) as usize..][..r.len as usize].copy_from_slice(src);
    }
    (out, e.change)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn runs_read_what_read_reads(
        writes in prop::collection::vec((0u64..300_000, 1usize..40_000, any::<u8>()), 1..6),
        off in 0u64..300_000, len in 0u64..200_000)
    {
        let fs = fresh();
        let fd = fs.open("/f", OpenFlags::CREATE, 0o644).unwrap();
        for (o, n, b) in &writes {
            fs.pwrite(fd, &vec![*b; *n], *o).unwrap();
        }
        let ino = fs.ino("/f").unwrap();
        let mut want = vec![0u8; len as usize];
        let got = fs.pread(fd, &mut want, off).unwrap();
        want.truncate(got);
        prop_assert_eq!(read_in_place(fs.store(), ino, off, len).0, want);
        // The runs lie in the range, in order, and each is as long as the blocks allow: runs
        // that follow each other in the file do not also follow each other in the region.
        let runs = fs.store().extents(ino, off, len).unwrap().runs;
        for r in &runs {
            prop_assert!(r.len > 0 && r.file_offset >= off && r.file_offset + r.len <= off + len);
        }
        for w in runs.windows(2) {
            let end = w[0].file_offset + w[0].len;
            prop_assert!(end <= w[1].file_offset);
            prop_assert!(end < w[1].file_offset || w[0].region_offset + w[0].len != w[1].region_offset);
        }
    }
}

#[test]
fn every_change_of_a_file_moves_its_change_word() {
    let fs = fresh();
    let fd = fs.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    fs.write(fd, &[1u8; 10_000]).unwrap();
    let ino = fs.ino("/f").unwrap();
    let store = fs.store();
    let mut last = store.changes().word(ino);
    let mut moved = |what: &str| {
        let now = store.changes().word(ino);
        assert_ne!(now, last, "{what} left the change word alone");
        last = now;
    };
    fs.pwrite(fd, &[2u8; 100], 50).unwrap();
    moved("an overwrite");
    store
        .setattr(
            ino,
            SetAttr {
                size: Some(10),
                ..SetAttr::default()
            },
        )
        .unwrap();
    moved("a truncate");
    fs.rename("/f", "/g").unwrap();
    moved("a rename");
    fs.close(fd).unwrap();
    fs.unlink("/g").unwrap();
    moved("the last unlink");
    assert!(
        store.extents(ino, 0, 10).is_err(),
        "a freed inode has no runs"
    );
}

#[test]
fn every_change_of_a_directory_moves_its_change_word() {
    let fs = fresh();
    fs.mkdir("/d", 0o755).unwrap();
    fs.mkdir("/e", 0o755).unwrap();
    let (d, e) = (fs.ino("/d").unwrap(), fs.ino("/e").unwrap());
    let store = fs.store();
    let word = |ino| store.changes().word(ino);
    let mut last = (word(d), word(e));
    let mut moved = |what: &str, both: bool| {
        let now = (word(d), word(e));
        assert_ne!(
            now.0, last.0,
            "{what} left the directory's change word alone"
        );
        if both {
            assert_ne!(
                now.1, last.1,
                "{what} left the other directory's word alone"
            );
        }
        last = now;
    };
    let fd = fs.open("/d/f", OpenFlags::CREATE, 0o644).unwrap();
    fs.close(fd).unwrap();
    moved("a create", false);
    fs.mkdir("/d/sub", 0o755).unwrap();
    moved("a mkdir", false);
    fs.symlink("f", "/d/s").unwrap();
    moved("a symlink", false);
    fs.link("/d/f", "/d/h").unwrap();
    moved("a link", false);
    fs.unlink("/d/h").unwrap();
    moved("an unlink that leaves a link", false);
    fs.rename("/d/f", "/e/f").unwrap();
    moved("a rename out of it", true);
    fs.rename("/e/f", "/d/f").unwrap();
    moved("a rename into it", true);
    fs.unlink("/d/f").unwrap();
    moved("the last unlink", false);
    fs.rmdir("/d/sub").unwrap();
    moved("an rmdir", false);
}
