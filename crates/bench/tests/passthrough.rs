//! The passthrough file system (the FUSE floor of `bench mount`) forwards what programs do to
//! its backing directory, and reads back what is there.

use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;

#[test]
fn passthrough_forwards_files_and_directories() {
    let work = tempfile::tempdir().unwrap();
    let backing = work.path().join("backing");
    let mnt = work.path().join("mnt");
    std::fs::create_dir(&backing).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    std::fs::write(backing.join("before"), b"was here").unwrap();
    let m = switchyard_bench::passthrough::mount_passthrough(
        backing.clone(),
        &mnt,
        &switchyard_fuse::FuseConfig {
            workers: 2,
            ..Default::default()
        },
    )
    .unwrap();

    // What was in the backing directory is visible.
    assert_eq!(std::fs::read(mnt.join("before")).unwrap(), b"was here");

    // Create, write at offsets, read back, through the mount and in the backing directory.
    std::fs::create_dir(mnt.join("d")).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .mode(0o640)
        .open(mnt.join("d/f"))
        .unwrap();
    let data: Vec<u8> = (0..3 << 20)
        .map(|i: u32| (i * 7 + i / 4096) as u8)
        .collect();
    f.write_all(&data).unwrap();
    f.seek(SeekFrom::Start(4096)).unwrap();
    f.write_all(b"patch").unwrap();
    f.sync_all().unwrap();
    drop(f);
    let mut want = data.clone();
    want[4096..4101].copy_from_slice(b"patch");
    assert_eq!(std::fs::read(backing.join("d/f")).unwrap(), want);
    let mut got = Vec::new();
    std::fs::File::open(mnt.join("d/f"))
        .unwrap()
        .read_to_end(&mut got)
        .unwrap();
    assert_eq!(got, want);

    // O_APPEND writes go to the end; truncate shrinks.
    let mut a = std::fs::OpenOptions::new()
        .append(true)
        .open(mnt.join("before"))
        .unwrap();
    a.write_all(b", still").unwrap();
    drop(a);
    assert_eq!(
        std::fs::read(backing.join("before")).unwrap(),
        b"was here, still"
    );
    std::fs::OpenOptions::new()
        .write(true)
        .open(mnt.join("before"))
        .unwrap()
        .set_len(3)
        .unwrap();
    assert_eq!(std::fs::read(mnt.join("before")).unwrap(), b"was");

    // Renaming a directory moves what is under it; listings see it.
    std::fs::rename(mnt.join("d"), mnt.join("e")).unwrap();
    assert_eq!(std::fs::read(mnt.join("e/f")).unwrap(), want);
    let mut names: Vec<_> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["before", "e"]);

    // Errors come back as the backing file system's errnos.
    let e = std::fs::remove_dir(mnt.join("e")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY));
    let e = std::fs::read(mnt.join("missing")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    std::fs::remove_file(mnt.join("e/f")).unwrap();
    std::fs::remove_dir(mnt.join("e")).unwrap();
    assert!(!backing.join("e").exists());

    m.unmount().unwrap();
    assert_eq!(std::fs::read(backing.join("before")).unwrap(), b"was");
}
