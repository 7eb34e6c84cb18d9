//! Behaviour of the store through its POSIX-style API: data, namespace, errnos, remount,
//! ENOSPC, concurrency.

use std::sync::Arc;

use proptest::prelude::*;
use switchyard_media::{Persist, Region};
use switchyard_mover::{Config, Mover};
use switchyard_store::{Errno, Falloc, Fs, OpenFlags, Owner, Seek, Store, Whence};

fn mover() -> Arc<Mover> {
    Arc::new(Mover::start(&Config::default()).unwrap())
}

fn fresh(dir: &tempfile::TempDir, size: u64) -> Fs {
    let region = Region::create(dir.path().join("r"), size, Persist::detect()).unwrap();
    Fs::new(Store::format(region, mover(), Owner::current()).unwrap())
}

fn remount(dir: &tempfile::TempDir, fs: Fs) -> Fs {
    fs.unmount().unwrap();
    let region = Region::open(dir.path().join("r"), 0, Persist::detect()).unwrap();
    Fs::new(Store::mount(region, mover()).unwrap())
}

const RW: OpenFlags = OpenFlags {
    read: true,
    write: true,
    create: false,
    exclusive: false,
    truncate: false,
    append: false,
};

#[test]
fn files_survive_remount_with_their_bytes_and_attributes() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 16 << 20);
    fs.mkdir("/docs", 0o750).unwrap();
    let fd = fs.open("/docs/a.txt", OpenFlags::CREATE, 0o640).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(fs.write(fd, &data).unwrap(), data.len());
    fs.close(fd).unwrap();
    fs.symlink("docs/a.txt", "/link").unwrap();
    fs.link("/docs/a.txt", "/hard").unwrap();
    let fs = remount(&dir, fs);
    assert_eq!(fs.read_all("/docs/a.txt").unwrap(), data);
    assert_eq!(fs.read_all("/link").unwrap(), data, "symlink followed");
    assert_eq!(fs.readlink("/link").unwrap(), b"docs/a.txt");
    let a = fs.stat("/hard").unwrap();
    assert_eq!(
        (a.nlink, a.size, a.mode & 0o777),
        (2, data.len() as u64, 0o640)
    );
    assert_eq!(fs.stat("/docs").unwrap().mode & 0o777, 0o750);
    let names: Vec<_> = fs
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        names,
        vec![b"docs".to_vec(), b"hard".to_vec(), b"link".to_vec()]
    );
}

#[test]
fn errnos_follow_posix() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 8 << 20);
    assert_eq!(fs.stat("/nope").unwrap_err(), Errno::ENOENT);
    fs.mkdir("/d", 0o755).unwrap();
    assert_eq!(fs.mkdir("/d", 0o755).unwrap_err(), Errno::EEXIST);
    let fd = fs.open("/d/f", OpenFlags::CREATE, 0o644).unwrap();
    assert_eq!(
        fs.open("/d/f/g", OpenFlags::CREATE, 0o644).unwrap_err(),
        Errno::ENOTDIR
    );
    assert_eq!(fs.open("/d", RW, 0).unwrap_err(), Errno::EISDIR);
    assert_eq!(fs.rmdir("/d").unwrap_err(), Errno::ENOTEMPTY);
    assert_eq!(fs.unlink("/d").unwrap_err(), Errno::EISDIR);
    assert_eq!(fs.rmdir("/d/f").unwrap_err(), Errno::ENOTDIR);
    let long = format!("/{}", "n".repeat(256));
    assert_eq!(
        fs.open(&long, OpenFlags::CREATE, 0o644).unwrap_err(),
        Errno::ENAMETOOLONG
    );
    assert_eq!(fs.rename("/d", "/d/f/sub").unwrap_err(), Errno::ENOTDIR);
    fs.mkdir("/d/sub", 0o755).unwrap();
    assert_eq!(
        fs.rename("/d", "/d/sub/x").unwrap_err(),
        Errno::EINVAL,
        "into its own subtree"
    );
    assert_eq!(fs.link("/d", "/d2").unwrap_err(), Errno::EPERM);
    assert_eq!(fs.pwrite(fd, b"x", 1 << 63).unwrap_err(), Errno::EINVAL);
    assert_eq!(
        fs.pwrite(fd, b"x", (1 << 63) - 1).unwrap_err(),
        Errno::EFBIG
    );
    fs.close(fd).unwrap();
    assert_eq!(fs.close(fd).unwrap_err(), Errno::EBADF);
    assert_eq!(fs.write(fd, b"x").unwrap_err(), Errno::EBADF);
    let ro = fs.open("/d/f", OpenFlags::READ, 0).unwrap();
    assert_eq!(fs.write(ro, b"x").unwrap_err(), Errno::EBADF);
    assert_eq!(
        fs.open(
            "/d/f",
            OpenFlags {
                exclusive: true,
                ..OpenFlags::CREATE
            },
            0o644
        )
        .unwrap_err(),
        Errno::EEXIST
    );
    fs.symlink("/loop2", "/loop1").unwrap();
    fs.symlink("/loop1", "/loop2").unwrap();
    assert_eq!(fs.stat("/loop1").unwrap_err(), Errno::ELOOP);
}

#[test]
fn rename_replaces_atomically_and_unlinked_open_files_live_until_close() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 8 << 20);
    for (p, b) in [("/a", b'a'), ("/b", b'b')] {
        let fd = fs.open(p, OpenFlags::CREATE, 0o644).unwrap();
        fs.write(fd, &[b; 5000]).unwrap();
        fs.close(fd).unwrap();
    }
    let free0 = fs.statfs().free_blocks;
    fs.rename("/a", "/b").unwrap();
    assert_eq!(fs.read_all("/b").unwrap(), vec![b'a'; 5000]);
    assert_eq!(fs.stat("/a").unwrap_err(), Errno::ENOENT);
    assert!(
        fs.statfs().free_blocks > free0,
        "the replaced file's blocks are free"
    );
    let fd = fs.open("/b", OpenFlags::READ, 0).unwrap();
    fs.unlink("/b").unwrap();
    let mut buf = vec![0; 5000];
    assert_eq!(
        fs.read(fd, &mut buf).unwrap(),
        5000,
        "still readable through the handle"
    );
    assert_eq!(buf, vec![b'a'; 5000]);
    fs.close(fd).unwrap();
    // Directory moves keep link counts right.
    fs.mkdir("/p", 0o755).unwrap();
    fs.mkdir("/q", 0o755).unwrap();
    fs.mkdir("/p/c", 0o755).unwrap();
    assert_eq!(fs.stat("/p").unwrap().nlink, 3);
    fs.rename("/p/c", "/q/c").unwrap();
    assert_eq!(
        (fs.stat("/p").unwrap().nlink, fs.stat("/q").unwrap().nlink),
        (2, 3)
    );
    let fs = remount(&dir, fs);
    let img = image(&dir);
    let report = switchyard_store::fsck::check(&img);
    assert!(report.healthy(), "{:?}", report.problems);
    assert_eq!(fs.stat("/q/c").unwrap().nlink, 2);
}

fn image(dir: &tempfile::TempDir) -> Vec<u8> {
    std::fs::read(dir.path().join("r")).unwrap()
}

#[test]
fn seek_truncate_append_and_holes() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 8 << 20);
    let fd = fs.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    fs.pwrite(fd, b"end", 20_000).unwrap();
    let all = fs.read_all("/f").unwrap();
    assert_eq!(all.len(), 20_003);
    assert!(
        all[..20_000].iter().all(|&b| b == 0),
        "a hole reads as zeros"
    );
    fs.ftruncate(fd, 10).unwrap();
    fs.ftruncate(fd, 5000).unwrap();
    assert_eq!(
        fs.read_all("/f").unwrap(),
        vec![0; 5000],
        "bytes past a truncation come back as zeros"
    );
    assert_eq!(fs.lseek(fd, 0, Whence::End).unwrap(), 5000);
    fs.write(fd, b"xy").unwrap();
    let ap = fs
        .open(
            "/f",
            OpenFlags {
                write: true,
                append: true,
                ..OpenFlags::READ
            },
            0,
        )
        .unwrap();
    fs.write(ap, b"zz").unwrap();
    assert_eq!(&fs.read_all("/f").unwrap()[5000..], b"xyzz");
    assert_eq!(fs.lseek(fd, -1, Whence::Set).unwrap_err(), Errno::EINVAL);
}

/// SEEK_DATA and SEEK_HOLE find a sparse file's data and holes, block by block, past a
/// terabyte of hole (found with one lookup, not a walk over its blocks).
#[test]
fn seek_data_and_holes_of_a_sparse_file() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 8 << 20);
    let fd = fs.open("/s", OpenFlags::CREATE, 0o644).unwrap();
    let ino = fs.ino("/s").unwrap();
    fs.pwrite(fd, &[1; 100], 0).unwrap();
    fs.pwrite(fd, &[2; 5000], 1 << 20).unwrap();
    let far = 1 << 40;
    fs.pwrite(fd, b"end", far).unwrap();
    let s = fs.store();
    let seek = |off: u64, to| s.seek(ino, off, to).map_err(|e| e.errno);
    assert_eq!(seek(0, Seek::Data), Ok(0));
    assert_eq!(seek(50, Seek::Hole), Ok(4096), "the written block is data");
    assert_eq!(seek(4096, Seek::Data), Ok(1 << 20));
    assert_eq!(seek(5000, Seek::Hole), Ok(5000), "inside a hole");
    assert_eq!(seek((1 << 20) + 10, Seek::Hole), Ok((1 << 20) + 8192));
    assert_eq!(seek((1 << 20) + 8192, Seek::Data), Ok(far - far % 4096));
    assert_eq!(seek(far, Seek::Hole), Ok(far + 3), "the end is a hole");
    assert_eq!(seek(far + 3, Seek::Data), Err(Errno::ENXIO));
    assert_eq!(seek(far + 3, Seek::Hole), Err(Errno::ENXIO));
    fs.ftruncate(fd, far).unwrap();
    assert_eq!(
        seek((1 << 20) + 8192, Seek::Data),
        Err(Errno::ENXIO),
        "no data after the last"
    );
    let e = s.extents(ino, 0, u64::MAX).unwrap();
    assert_eq!(e.runs.len(), 2, "holes give no runs: {:?}", e.runs);
    let (d, _) = s.mkdir(1, b"d", 0o755, Owner::current()).unwrap();
    assert_eq!(
        s.seek(d, 0, Seek::Data).err().map(|e| e.errno),
        Some(Errno::EISDIR)
    );
}

#[test]
fn a_full_region_gives_enospc_and_keeps_everything_written_before() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 4 << 20);
    let mut written = Vec::new();
    let mut short = None;
    let chunk = vec![0xEE; 64 << 10];
    let err = loop {
        let name = format!("/f{}", written.len() + short.iter().count());
        let fd = match fs.open(&name, OpenFlags::CREATE, 0o644) {
            Ok(fd) => fd,
            Err(e) => break e,
        };
        let r = fs.write(fd, &chunk);
        fs.close(fd).unwrap();
        match r {
            Ok(n) if n == chunk.len() => written.push(name),
            // As write(2) says: as many bytes as there was room for, once.
            Ok(n) => {
                assert!(short.is_none(), "a second short write");
                short = Some((name, n));
            }
            Err(e) => break e,
        }
    };
    assert_eq!(err, Errno::ENOSPC);
    assert!(written.len() > 20);
    let fs = remount(&dir, fs);
    for name in &written {
        assert_eq!(fs.read_all(name).unwrap(), chunk, "{name}");
    }
    if let Some((name, n)) = short {
        assert_eq!(fs.read_all(&name).unwrap(), chunk[..n], "{name}");
    }
    let report = switchyard_store::fsck::check(&image(&dir));
    assert!(report.healthy(), "{:?}", report.problems);
    // Space comes back after deleting.
    fs.unlink(&written[0]).unwrap();
    let fd = fs.open("/again", OpenFlags::CREATE, 0o644).unwrap();
    fs.write(fd, &chunk).unwrap();
}

/// A full store still takes overwrites of what files hold: copy-on-write takes a block and
/// gives one back, so the write goes in pieces, the last of them on a block borrowed from the
/// log pages' reserve, as ext4 overwrites in place (a database rewriting its pages, or a file
/// allocated with fallocate, on a disk that filled up meanwhile: they failed with ENOSPC).
#[test]
fn a_full_store_still_takes_overwrites_and_a_short_write_says_what_fit() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 8 << 20);
    let s = fs.store();
    let (a, _) = s.create(1, b"a", 0o644, Owner::current()).unwrap();
    s.write(a, 0, &vec![1u8; 256 << 10]).unwrap();
    let (k, _) = s.create(1, b"k", 0o644, Owner::current()).unwrap();
    s.fallocate(k, 0, 64 << 10, Falloc::Allocate { keep_size: true })
        .unwrap();
    // Fill the store: the last write is short, then nothing more fits.
    let (b, _) = s.create(1, b"b", 0o644, Owner::current()).unwrap();
    let (mut at, mut short) = (0u64, false);
    loop {
        match s.write(b, at, &vec![2u8; 1 << 20]) {
            Ok(n) => {
                short |= n < 1 << 20;
                at += n as u64;
            }
            Err(e) => {
                assert_eq!(e.errno, Errno::ENOSPC);
                break;
            }
        }
    }
    assert!(short, "the write that filled the store was short");
    assert_eq!(
        s.getattr(b).unwrap().size,
        at,
        "the size is what was written"
    );
    let grow = s.write(b, at, &[3u8; 4096]).err().map(|e| e.errno);
    assert_eq!(grow, Some(Errno::ENOSPC), "no room for new blocks");
    // Overwrites still go: of written data, and of blocks allocated past the end.
    assert_eq!(s.write(a, 100, &vec![4u8; 200 << 10]).unwrap(), 200 << 10);
    assert_eq!(s.write(k, 0, &vec![5u8; 64 << 10]).unwrap(), 64 << 10);
    let fs = remount(&dir, fs);
    let mut want = vec![1u8; 256 << 10];
    want[100..100 + (200 << 10)].fill(4);
    assert_eq!(fs.read_all("/a").unwrap(), want);
    assert_eq!(fs.read_all("/k").unwrap(), vec![5u8; 64 << 10]);
    assert_eq!(fs.read_all("/b").unwrap().len() as u64, at);
    fs.unmount().unwrap();
    let report = switchyard_store::fsck::check(&image(&dir));
    assert!(report.healthy(), "{:?}", report.problems);
}

#[test]
fn damaged_images_are_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r");
    std::fs::write(&path, vec![0u8; 4 << 20]).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let open = || Region::open(&path, 0, Persist::detect()).unwrap();
    let e = Store::mount(open(), mover()).err().unwrap().to_string();
    assert!(e.contains("mkfs"), "{e}");
    drop(Store::format(open(), mover(), Owner::current()).unwrap());
    // Both superblock copies damaged → refused; one → the replica is used.
    let mut img = std::fs::read(&path).unwrap();
    img[20] ^= 0xFF;
    std::fs::write(&path, &img).unwrap();
    drop(Store::mount(open(), mover()).expect("replica used"));
    let mut img = std::fs::read(&path).unwrap();
    img[20] ^= 0xFF;
    img[4096 + 20] ^= 0xFF;
    std::fs::write(&path, &img).unwrap();
    let e = Store::mount(open(), mover()).err().unwrap().to_string();
    assert!(e.contains("checksum"), "{e}");
}

#[test]
fn many_threads_on_many_files() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(fresh(&dir, 64 << 20));
    std::thread::scope(|s| {
        for t in 0..8u8 {
            let fs = fs.clone();
            s.spawn(move || {
                let p = format!("/t{t}");
                let fd = fs.open(&p, OpenFlags::CREATE, 0o644).unwrap();
                for i in 0..200u64 {
                    fs.pwrite(fd, &[t; 4096], i * 4096).unwrap();
                }
                fs.close(fd).unwrap();
            });
        }
    });
    for t in 0..8u8 {
        assert_eq!(fs.read_all(&format!("/t{t}")).unwrap(), vec![t; 200 * 4096]);
    }
    let fs = Arc::into_inner(fs).unwrap();
    let fs = remount(&dir, fs);
    assert_eq!(fs.read_all("/t3").unwrap(), vec![3; 200 * 4096]);
    assert!(switchyard_store::fsck::check(&image(&dir)).healthy());
}

/// One step of the file model test.
#[derive(Debug, Clone)]
enum Step {
    Write(u64, usize, u8),
    Truncate(u64),
    Fallocate(u64, u64, Falloc),
}

fn step() -> impl Strategy<Value = Step> {
    let falloc = prop_oneof![
        any::<bool>().prop_map(|keep_size| Falloc::Allocate { keep_size }),
        any::<bool>().prop_map(|keep_size| Falloc::ZeroRange { keep_size }),
        Just(Falloc::PunchHole),
    ];
    prop_oneof![
        3 => (0u64..40_000, 1usize..12_000, any::<u8>()).prop_map(|(o, l, b)| Step::Write(o, l, b)),
        1 => (0u64..40_000).prop_map(Step::Truncate),
        2 => (0u64..40_000, 1u64..20_000, falloc).prop_map(|(o, l, f)| Step::Fallocate(o, l, f)),
    ]
}

/// What fallocate(2) does to a file's bytes, on a `Vec` model.
fn model_falloc(model: &mut Vec<u8>, off: u64, len: u64, mode: Falloc) {
    let (off, end) = (off as usize, (off + len) as usize);
    let keep = match mode {
        Falloc::Allocate { keep_size } | Falloc::ZeroRange { keep_size } => keep_size,
        Falloc::PunchHole => true,
    };
    if !keep && model.len() < end {
        model.resize(end, 0);
    }
    if !matches!(mode, Falloc::Allocate { .. }) {
        let to = end.min(model.len());
        if off < to {
            model[off..to].fill(0);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// Random writes, truncations and fallocate calls (allocate, zero range, punch hole, with
    /// and without keeping the size) read back exactly like a Vec model, before and after a
    /// remount (which replays and possibly compacted logs), and punched or zeroed bytes never
    /// show what was there before.
    #[test]
    fn file_contents_match_a_model(ops in proptest::collection::vec(step(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let fs = fresh(&dir, 16 << 20);
        let fd = fs.open("/m", OpenFlags::CREATE, 0o644).unwrap();
        let ino = fs.ino("/m").unwrap();
        let mut model: Vec<u8> = Vec::new();
        for op in ops {
            match op {
                Step::Truncate(off) => {
                    fs.ftruncate(fd, off).unwrap();
                    model.resize(off as usize, 0);
                }
                Step::Write(off, len, byte) => {
                    fs.pwrite(fd, &vec![byte; len], off).unwrap();
                    let end = off as usize + len;
                    if model.len() < end { model.resize(end, 0); }
                    model[off as usize..end].fill(byte);
                }
                Step::Fallocate(off, len, mode) => {
                    fs.store().fallocate(ino, off, len, mode).unwrap();
                    model_falloc(&mut model, off, len, mode);
                }
            }
        }
        prop_assert_eq!(&fs.read_all("/m").unwrap(), &model);
        // SEEK_DATA and SEEK_HOLE agree with the bytes: every byte is in data or in a hole,
        // never both; a hole reads as zeros; both stop at the end of the file.
        let seek = |off: u64, to| fs.store().seek(ino, off, to).map_err(|e| e.errno);
        for off in (0..model.len() as u64).step_by(997) {
            let (data, hole) = (seek(off, Seek::Data), seek(off, Seek::Hole).unwrap());
            // The same answers as the map a remote client seeks in.
            let map = fs.store().extents(ino, off, u64::MAX).unwrap();
            prop_assert_eq!(data, map.seek(off, Seek::Data));
            prop_assert_eq!(Ok(hole), map.seek(off, Seek::Hole));
            prop_assert!(hole >= off && hole <= model.len() as u64, "hole {} from {}", hole, off);
            prop_assert!((data == Ok(off)) != (hole == off), "{} is data or hole: {:?} {}", off, data, hole);
            let zeros_to = match data {
                Ok(d) => { prop_assert!(d >= off && d < model.len() as u64); d }
                Err(e) => { prop_assert_eq!(e, Errno::ENXIO); model.len() as u64 }
            };
            prop_assert!(model[off as usize..zeros_to as usize].iter().all(|&b| b == 0), "a hole at {} holds bytes", off);
        }
        prop_assert_eq!(seek(model.len() as u64, Seek::Hole), Err(Errno::ENXIO));
        fs.close(fd).unwrap();
        let fs = remount(&dir, fs);
        prop_assert_eq!(&fs.read_all("/m").unwrap(), &model);
        let report = switchyard_store::fsck::check(&image(&dir));
        prop_assert!(report.healthy(), "{:?}", report.problems);
    }
}

#[test]
fn fallocate_allocates_holes_and_punching_gives_blocks_back() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 16 << 20);
    let s = fs.store();
    let (f, _) = s.create(1, b"f", 0o644, Owner::current()).unwrap();
    let free0 = s.statfs().free_blocks;
    s.fallocate(f, 0, 1 << 20, Falloc::Allocate { keep_size: false })
        .unwrap();
    assert_eq!(s.getattr(f).unwrap().size, 1 << 20);
    let free1 = s.statfs().free_blocks;
    assert!(
        free0 - free1 >= 256,
        "the space is taken: {free0} -> {free1}"
    );
    s.fallocate(f, 4096, 64 << 10, Falloc::PunchHole).unwrap();
    assert_eq!(s.statfs().free_blocks - free1, 16, "16 pages given back");
    assert_eq!(
        s.getattr(f).unwrap().size,
        1 << 20,
        "punching keeps the size"
    );
    assert_eq!(
        s.fallocate(f, 0, 0, Falloc::PunchHole)
            .err()
            .map(|e| e.errno),
        Some(Errno::EINVAL)
    );
    let (d, _) = s.mkdir(1, b"d", 0o755, Owner::current()).unwrap();
    assert_eq!(
        s.fallocate(d, 0, 1, Falloc::PunchHole)
            .err()
            .map(|e| e.errno),
        Some(Errno::EISDIR)
    );
}

/// POSIX ACLs through the store's own API (what every front end calls): an access ACL sets
/// the mode's group bits to its mask and chmod rewrites the mask, each in the change's one
/// commit; a directory's default ACL replaces the umask for what is made in it, and a
/// subdirectory inherits it; all of it survives a remount, and fsck finds nothing.
#[test]
fn acls_keep_the_mode_in_step_and_are_inherited() {
    use switchyard_store::acl::{self, encode as enc, Acl, GROUP, GROUP_OBJ, MASK, OTHER, USER};
    use switchyard_store::acl::{NO_ID as any, USER_OBJ};
    use switchyard_store::XattrMode;
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 16 << 20);
    let s = fs.store();
    let me = Owner::current();
    let (f, _) = s.create(1, b"f", 0o600, me).unwrap();
    let named = enc(&[
        (USER_OBJ, 6, any),
        (USER, 4, 1001),
        (GROUP_OBJ, 0, any),
        (MASK, 4, any),
        (OTHER, 0, any),
    ]);
    s.setxattr(f, acl::ACCESS, &named, XattrMode::Set).unwrap();
    assert_eq!(
        s.getattr(f).unwrap().mode & 0o777,
        0o640,
        "the mask is the group bits"
    );
    let chmod = switchyard_store::SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    s.setattr(f, chmod).unwrap();
    let now = Acl::decode(&s.getxattr(f, acl::ACCESS).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(now.mode_bits(), 0o600, "chmod rewrote the mask");
    let bad = enc(&[(USER_OBJ, 6, any), (OTHER, 0, any)]);
    let e = s
        .setxattr(f, acl::ACCESS, &bad, XattrMode::Set)
        .err()
        .map(|e| e.errno);
    assert_eq!(e, Some(Errno::EINVAL));
    let default = enc(&[
        (USER_OBJ, 7, any),
        (GROUP_OBJ, 5, any),
        (GROUP, 7, 2000),
        (MASK, 7, any),
        (OTHER, 5, any),
    ]);
    let e = s
        .setxattr(f, acl::DEFAULT, &default, XattrMode::Set)
        .err()
        .map(|e| e.errno);
    assert_eq!(e, Some(Errno::EACCES), "a default ACL on a file");
    let (d, _) = s.mkdir(1, b"d", 0o755, me).unwrap();
    s.setxattr(d, acl::DEFAULT, &default, XattrMode::Set)
        .unwrap();
    let (g, a) = s.mknod_masked(d, b"g", 0o100666, 0, me, 0o077).unwrap();
    assert_eq!(a.mode & 0o777, 0o664, "the default ACL, not the umask");
    let (sub, a) = s.mkdir_masked(d, b"sub", 0o700, me, 0o022).unwrap();
    assert_eq!(a.mode & 0o777, 0o700);
    assert_eq!(s.getxattr(sub, acl::DEFAULT).unwrap(), default);
    let (h, a) = s.mknod_masked(1, b"h", 0o100666, 0, me, 0o027).unwrap();
    assert_eq!(a.mode & 0o777, 0o640, "no default ACL: the umask");
    assert!(s.getxattr(h, acl::ACCESS).is_err());
    let fs = remount(&dir, fs);
    let s = fs.store();
    let inherited = Acl::decode(&s.getxattr(g, acl::ACCESS).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(inherited.mode_bits(), 0o664);
    assert!(
        inherited.permits(0, 0, 5, &[2000], 6),
        "the group's entry, under the mask"
    );
    assert_eq!(s.getxattr(sub, acl::DEFAULT).unwrap(), default);
    fs.unmount().unwrap();
    let report = switchyard_store::fsck::check(&image(&dir));
    assert!(report.healthy(), "{:?}", report.problems);
}

/// `FALLOC_FL_KEEP_SIZE` past the end holds its blocks, as ext4 and tmpfs do: they count as
/// the file's, survive a remount and attribute changes, are refused with ENOSPC where they do
/// not fit, read as zeros once the size reaches them, and go back on a truncation, also to the
/// size the file has (`fallocate -n -l 40M f` returned 0 and held nothing: a later write into
/// the range met a full store).
#[test]
fn keep_size_allocation_past_the_end_holds_its_blocks_until_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 16 << 20);
    let s = fs.store();
    let (f, _) = s.create(1, b"f", 0o644, Owner::current()).unwrap();
    s.write(f, 0, &[5u8; 100]).unwrap();
    let free0 = s.statfs().free_blocks;
    s.fallocate(f, 0, 1 << 20, Falloc::Allocate { keep_size: true })
        .unwrap();
    assert_eq!(s.getattr(f).unwrap().size, 100, "the size is kept");
    assert_eq!(s.data_blocks(f).unwrap(), 256, "blocks past the end count");
    assert!(free0 - s.statfs().free_blocks >= 255, "the space is taken");
    let too_big = s.fallocate(f, 0, 64 << 20, Falloc::Allocate { keep_size: true });
    assert_eq!(too_big.err().map(|e| e.errno), Some(Errno::ENOSPC));
    // Attribute changes (an entry with the same size) keep them; so does a remount.
    let chmod = switchyard_store::SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    s.setattr(f, chmod).unwrap();
    let fs = remount(&dir, fs);
    let s = fs.store();
    assert_eq!(s.data_blocks(f).unwrap(), 256, "held across a remount");
    assert_eq!(s.getattr(f).unwrap().size, 100);
    // Zero-range and punch past the end allocate and give back there too.
    s.fallocate(f, 2 << 20, 64 << 10, Falloc::ZeroRange { keep_size: true })
        .unwrap();
    assert_eq!(s.data_blocks(f).unwrap(), 256 + 16);
    s.fallocate(f, 2 << 20, 64 << 10, Falloc::PunchHole)
        .unwrap();
    assert_eq!(s.data_blocks(f).unwrap(), 256);
    // A truncation that reaches into them shows zeros after the file's bytes.
    let grow = |size| switchyard_store::SetAttr {
        size: Some(size),
        ..Default::default()
    };
    s.setattr(f, grow(8192)).unwrap();
    let mut buf = vec![9u8; 8192];
    assert_eq!(s.read(f, 0, &mut buf).unwrap(), 8192);
    assert!(buf[..100].iter().all(|&b| b == 5));
    assert!(buf[100..].iter().all(|&b| b == 0));
    assert_eq!(
        s.data_blocks(f).unwrap(),
        256,
        "still held past the new end"
    );
    // Truncating to the size it has trims what lies past it.
    s.setattr(f, grow(8192)).unwrap();
    assert_eq!(s.data_blocks(f).unwrap(), 2);
    assert_eq!(s.getattr(f).unwrap().size, 8192);
    s.read(f, 0, &mut buf).unwrap();
    assert!(buf[..100].iter().all(|&b| b == 5) && buf[100..].iter().all(|&b| b == 0));
    let fs = remount(&dir, fs);
    assert_eq!(fs.store().data_blocks(f).unwrap(), 2);
    fs.unmount().unwrap();
    let report = switchyard_store::fsck::check(&image(&dir));
    assert!(report.healthy(), "{:?}", report.problems);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Damaged images (random byte patches over a valid store, or raw garbage) are refused or
    /// mounted, never a panic or a hang. The cargo-fuzz target `mount_image` runs the same
    /// probe for as long as you like.
    #[test]
    fn damaged_images_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        switchyard_store::crash::probe_image(&data);
    }
}

/// The free-space checkpoint's first page, as the primary superblock names it.
fn checkpoint_page(img: &[u8]) -> usize {
    u64::from_le_bytes(img[88..96].try_into().unwrap()) as usize * 4096
}

#[test]
fn a_clean_unmount_mounts_quickly_and_a_crash_scans_every_log() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 16 << 20);
    fs.mkdir("/d", 0o755).unwrap();
    for i in 0..50u8 {
        let fd = fs
            .open(&format!("/d/f{i}"), OpenFlags::CREATE, 0o644)
            .unwrap();
        fs.write(fd, &vec![i; 3000 * (i as usize % 5 + 1)]).unwrap();
        fs.close(fd).unwrap();
    }
    // Unlinked while open: the clean unmount frees it.
    let fd = fs.open("/d/f7", OpenFlags::READ, 0).unwrap();
    fs.unlink("/d/f7").unwrap();
    let free_open = fs.statfs();
    fs.close(fd).unwrap();
    let free_closed = fs.statfs();
    assert!(free_closed.free_blocks > free_open.free_blocks);
    let fs = remount(&dir, fs);
    assert!(fs.store().mounted_quickly());
    assert_eq!(
        fs.statfs(),
        free_closed,
        "the checkpoint restores the free space"
    );
    assert_eq!(fs.read_all("/d/f9").unwrap(), vec![9; 15000]);
    assert_eq!(fs.stat("/d/f7").unwrap_err(), Errno::ENOENT);
    // Work after a quick mount, then "crash": the image as it is while mounted.
    fs.unlink("/d/f3").unwrap();
    let fd = fs.open("/d/new", OpenFlags::CREATE, 0o600).unwrap();
    fs.write(fd, &[1; 9000]).unwrap();
    fs.close(fd).unwrap();
    let crashed = image(&dir);
    let report = switchyard_store::fsck::check(&crashed);
    assert!(report.healthy() && !report.clean, "{:?}", report.problems);
    let stat = fs.statfs();
    drop(fs);
    std::fs::write(dir.path().join("r"), &crashed).unwrap();
    let region = Region::open(dir.path().join("r"), 0, Persist::detect()).unwrap();
    let fs = Fs::new(Store::mount(region, mover()).unwrap());
    assert!(
        !fs.store().mounted_quickly(),
        "after a crash every log is read"
    );
    assert_eq!(fs.statfs(), stat);
    assert_eq!(fs.read_all("/d/new").unwrap(), vec![1; 9000]);
    assert_eq!(fs.readdir("/d").unwrap().len(), 49);
    fs.unmount().unwrap();
    assert!(switchyard_store::fsck::check(&image(&dir)).healthy());
}

#[test]
fn a_damaged_checkpoint_costs_a_scan_and_a_lying_one_fails_fsck() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 8 << 20);
    let fd = fs.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    fs.write(fd, &[5; 40_000]).unwrap();
    fs.close(fd).unwrap();
    let stat = fs.statfs();
    fs.unmount().unwrap();
    let good = image(&dir);
    let at = checkpoint_page(&good);
    assert!(at > 0, "a clean unmount names its checkpoint");
    assert!(switchyard_store::fsck::check(&good).healthy());
    // Damaged: the mount falls back to reading every log.
    let mut bad = good.clone();
    bad[at + 70] ^= 0x40;
    let report = switchyard_store::fsck::check(&bad);
    assert!(report.healthy() && !report.recoverable.is_empty());
    std::fs::write(dir.path().join("r"), &bad).unwrap();
    let region = Region::open(dir.path().join("r"), 0, Persist::detect()).unwrap();
    let fs = Fs::new(Store::mount(region, mover()).unwrap());
    assert!(!fs.store().mounted_quickly());
    assert_eq!(fs.statfs(), stat);
    assert_eq!(fs.read_all("/f").unwrap(), vec![5; 40_000]);
    drop(fs);
    // Lying (valid checksum, wrong free list): fsck says so.
    let mut lie = good.clone();
    let page = &lie[at..at + 4096];
    let count = u32::from_le_bytes(page[4..8].try_into().unwrap()) as usize;
    let mut extents: Vec<(u64, u64)> = (0..count)
        .map(|i| {
            let e = &page[64 + 16 * i..];
            (
                u64::from_le_bytes(e[..8].try_into().unwrap()),
                u64::from_le_bytes(e[8..16].try_into().unwrap()),
            )
        })
        .collect();
    extents[0].1 -= 1;
    let next = u64::from_le_bytes(page[8..16].try_into().unwrap());
    let mount_count = u64::from_le_bytes(page[16..24].try_into().unwrap());
    let page = switchyard_store::format::encode_checkpoint_page(&extents, next, mount_count);
    lie[at..at + 4096].copy_from_slice(&page);
    let report = switchyard_store::fsck::check(&lie);
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.to_string().contains("checkpoint")),
        "{:?}",
        report.problems
    );
}

#[test]
fn logs_of_overwritten_files_are_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 16 << 20);
    let before = fs.statfs().free_blocks;
    let fd = fs.open("/hot", OpenFlags::CREATE, 0o644).unwrap();
    // 5,000 overwrites of 2 pages append 5,000 write entries (about 60 log pages).
    for i in 0..5000u32 {
        fs.pwrite(fd, &[i as u8; 8192], 0).unwrap();
    }
    let used = before - fs.statfs().free_blocks;
    assert!(used <= 2 + 8, "{used} blocks in use for a 2-page file");
    let fs = remount(&dir, fs);
    assert_eq!(fs.read_all("/hot").unwrap(), vec![4999u32 as u8; 8192]);
    assert!(switchyard_store::fsck::check(&image(&dir)).healthy());
}

#[test]
fn a_held_inode_outlives_its_links_and_its_number_is_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 16 << 20);
    let s = fs.store();
    let (d, _) = s.mkdir(1, b"old", 0o755, Owner::current()).unwrap();
    let (same, _) = s.lookup_held(1, b"old").unwrap();
    assert_eq!(same, d);
    let gen_old = s.generation(d).unwrap();
    s.rmdir(1, b"old").unwrap();
    // Still held (the kernel's working directory): alive, without links, nothing new in it.
    assert_eq!(s.getattr(d).unwrap().nlink, 0);
    assert_eq!(
        s.create(d, b"x", 0o644, Owner::current())
            .err()
            .map(|e| e.errno),
        Some(Errno::ENOENT)
    );
    let (new, _) = s.mkdir(1, b"new", 0o755, Owner::current()).unwrap();
    assert_ne!(new, d, "a held number is not given to a new inode");
    s.create(new, b"x", 0o644, Owner::current()).unwrap();
    // fsck sees the held directory as an orphan that a mount would free.
    let report = switchyard_store::fsck::check(&image(&dir));
    assert!(report.healthy(), "{:?}", report.problems);
    assert!(report.recoverable.iter().any(|r| r.contains("directory")));
    s.release_holds(d, 1).unwrap();
    assert_eq!(
        s.getattr(d).err().map(|e| e.errno),
        Some(Errno::ENOENT),
        "freed at the last forget"
    );
    // Reused now, with a new generation that survives a remount.
    let mut reused = None;
    for i in 0..64u32 {
        let (ino, _) = s
            .create(1, format!("f{i}").as_bytes(), 0o644, Owner::current())
            .unwrap();
        if ino == d {
            reused = Some(ino);
            break;
        }
    }
    let ino = reused.expect("the freed number comes back");
    let gen_new = fs.store().generation(ino).unwrap();
    assert!(gen_new > gen_old, "{gen_new} after {gen_old}");
    let fs = remount(&dir, fs);
    assert_eq!(fs.store().generation(ino).unwrap(), gen_new);
}

#[test]
fn holds_count_every_lookup_and_an_unlinked_file_goes_at_the_last_release() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 16 << 20);
    let s = fs.store();
    let (f, _) = s.create(1, b"f", 0o644, Owner::current()).unwrap();
    s.hold(f).unwrap();
    s.lookup_held(1, b"f").unwrap();
    s.lookup_held(1, b"f").unwrap();
    s.unlink(1, b"f").unwrap();
    s.release_holds(f, 2).unwrap();
    assert_eq!(s.getattr(f).unwrap().nlink, 0, "one hold is left");
    s.release_holds(f, 1).unwrap();
    assert_eq!(s.getattr(f).err().map(|e| e.errno), Some(Errno::ENOENT));
    // A crash while held leaves an orphan that the next mount frees.
    let (g, _) = s.create(1, b"g", 0o644, Owner::current()).unwrap();
    s.hold(g).unwrap();
    s.unlink(1, b"g").unwrap();
    let img = image(&dir);
    let report = switchyard_store::fsck::check(&img);
    assert!(report.healthy(), "{:?}", report.problems);
    assert!(report
        .recoverable
        .iter()
        .any(|r| r.contains("unlinked file")));
    let fs = remount(&dir, fs);
    assert_eq!(
        fs.store().getattr(g).err().map(|e| e.errno),
        Some(Errno::ENOENT)
    );
}

/// Writes `version` into both superblock copies of the image at `path`, checksums fixed.
fn set_version(path: &std::path::Path, version: u32) {
    use switchyard_store::format::{BLOCK, SB_CRC_AT};
    let mut img = std::fs::read(path).unwrap();
    for at in [0, BLOCK as usize] {
        let sb = &mut img[at..at + 128];
        sb[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crc32c::crc32c(&sb[..SB_CRC_AT]);
        sb[SB_CRC_AT..SB_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }
    std::fs::write(path, img).unwrap();
}

#[test]
fn a_version_3_store_mounts_and_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 16 << 20);
    fs.mkdir("/d", 0o755).unwrap();
    let fd = fs.open("/d/f", OpenFlags::CREATE, 0o644).unwrap();
    fs.write(fd, &[5u8; 10_000]).unwrap();
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    let path = dir.path().join("r");
    // What a version 3 build wrote: the same layout, generations zero, version 3.
    set_version(&path, 3);
    let report = switchyard_store::fsck::check(&std::fs::read(&path).unwrap());
    assert!(report.healthy(), "{:?}", report.problems);
    let region = Region::open(&path, 0, Persist::detect()).unwrap();
    let fs = Fs::new(Store::mount(region, mover()).unwrap());
    assert_eq!(fs.read_all("/d/f").unwrap(), vec![5u8; 10_000]);
    fs.unmount().unwrap();
    let img = std::fs::read(&path).unwrap();
    assert_eq!(
        u32::from_le_bytes(img[8..12].try_into().unwrap()),
        switchyard_store::format::VERSION,
        "the mount wrote the current version"
    );
    // Older still is refused, by name.
    set_version(&path, 2);
    let region = Region::open(&path, 0, Persist::detect()).unwrap();
    let e = Store::mount(region, mover()).err().unwrap().to_string();
    assert!(e.contains("predates"), "{e}");
}

/// One step of the no-leak test, on file `.0` of several.
#[derive(Debug, Clone)]
enum Shared {
    Write(usize, u64, usize),
    Truncate(usize, u64),
    Fallocate(usize, u64, u64, Falloc),
    /// Unlink and create again (its blocks go back to the pool for the others).
    Recreate(usize),
}

fn shared_step() -> impl Strategy<Value = Shared> {
    let falloc = prop_oneof![
        any::<bool>().prop_map(|keep_size| Falloc::Allocate { keep_size }),
        any::<bool>().prop_map(|keep_size| Falloc::ZeroRange { keep_size }),
        Just(Falloc::PunchHole),
    ];
    prop_oneof![
        4 => (0..FILES, 0u64..60_000, 1usize..9_000).prop_map(|(f, o, l)| Shared::Write(f, o, l)),
        2 => (0..FILES, 0u64..60_000).prop_map(|(f, o)| Shared::Truncate(f, o)),
        2 => (0..FILES, 0u64..60_000, 1u64..30_000, falloc)
            .prop_map(|(f, o, l, m)| Shared::Fallocate(f, o, l, m)),
        1 => (0..FILES).prop_map(Shared::Recreate),
    ]
}

const FILES: usize = 4;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Nothing leaks between files: on a small store whose blocks are freed and reused all
    /// the time, files owned by different users are written (each only with its own byte
    /// values), truncated up and down, fallocated, punched and recreated, and every read of
    /// every file returns exactly what that file was given, zeros elsewhere: holes,
    /// partial-block writes, extending truncates and allocated ranges never show another
    /// file's bytes.
    #[test]
    fn no_file_reads_bytes_it_was_never_given(ops in proptest::collection::vec(shared_step(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let fs = fresh(&dir, 4 << 20);
        let s = fs.store();
        let owner = |f: usize| Owner { uid: 1000 + f as u32, gid: 1000 + f as u32 };
        let name = |f: usize| format!("f{f}");
        let mut ino: Vec<u64> = (0..FILES)
            .map(|f| s.create(1, name(f).as_bytes(), 0o600, owner(f)).unwrap().0)
            .collect();
        let mut model: Vec<Vec<u8>> = vec![Vec::new(); FILES];
        let mut n = 0u8;
        for op in ops {
            let shown = format!("{op:?}");
            match op {
                Shared::Write(f, off, len) => {
                    // File f's bytes are f * 60 + 1 ..= f * 60 + 60: never another's, never 0.
                    n = n.wrapping_add(1);
                    let byte = (f as u8) * 60 + 1 + n % 60;
                    match s.write(ino[f], off, &vec![byte; len]) {
                        Ok(_) => {
                            let end = off as usize + len;
                            if model[f].len() < end { model[f].resize(end, 0); }
                            model[f][off as usize..end].fill(byte);
                        }
                        Err(e) => prop_assert_eq!(e.errno, Errno::ENOSPC),
                    }
                }
                Shared::Truncate(f, size) => {
                    let set = switchyard_store::SetAttr { size: Some(size), ..Default::default() };
                    match s.setattr(ino[f], set) {
                        Ok(_) => model[f].resize(size as usize, 0),
                        Err(e) => prop_assert_eq!(e.errno, Errno::ENOSPC),
                    }
                }
                Shared::Fallocate(f, off, len, mode) => {
                    // A failed (ENOSPC) fallocate may have allocated holes: nothing visible.
                    if s.fallocate(ino[f], off, len, mode).is_ok() {
                        model_falloc(&mut model[f], off, len, mode);
                    }
                }
                Shared::Recreate(f) => {
                    s.unlink(1, name(f).as_bytes()).unwrap();
                    ino[f] = s.create(1, name(f).as_bytes(), 0o600, owner(f)).unwrap().0;
                    model[f].clear();
                }
            }
            for f in 0..FILES {
                let mut buf = vec![0xEEu8; model[f].len() + 4096];
                let got = s.read(ino[f], 0, &mut buf).unwrap();
                prop_assert_eq!(&buf[..got], &model[f][..], "file {} after {}", f, shown);
            }
        }
        let report = switchyard_store::fsck::check(&image(&dir));
        prop_assert!(report.healthy(), "{:?}", report.problems);
    }
}

#[test]
fn the_reserved_share_is_kept_from_unprivileged_writers() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 8 << 20);
    let s = fs.store();
    s.set_reserved_percent(10).unwrap();
    let st = s.statfs();
    // Less the reserve and the 32 blocks kept for log pages.
    assert_eq!(
        st.available_blocks,
        st.free_blocks - s.reserved_blocks() - 32
    );
    let (a, _) = s.create(1, b"a", 0o644, Owner::current()).unwrap();
    let chunk = vec![7u8; 64 << 10];
    let mut off = 0;
    let full = s.as_unprivileged(|| loop {
        match s.write(a, off, &chunk) {
            Ok(n) => off += n as u64,
            Err(e) => break e,
        }
    });
    assert_eq!(full.errno, Errno::ENOSPC);
    let left = s.statfs().free_blocks;
    assert!(
        left >= s.reserved_blocks() && s.statfs().available_blocks < 16,
        "only the reserve is left: {left} free, reserve {}",
        s.reserved_blocks()
    );
    // The owner (a privileged caller) still writes most of the reserve.
    let (b, _) = s.create(1, b"b", 0o644, Owner::current()).unwrap();
    let want = (s.reserved_blocks() - 8) * 4096;
    s.write(b, 0, &vec![9u8; want as usize])
        .expect("the reserve is the owner's");
    assert_eq!(s.set_reserved_percent(51).err(), Some(Errno::EINVAL));
}

/// Writes `img` to `path` as a sparse file: its all-zero pages become holes.
fn write_sparse(path: &std::path::Path, img: &[u8]) {
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.set_len(img.len() as u64).unwrap();
    for (i, page) in img.chunks(4096).enumerate() {
        if page.iter().any(|&b| b != 0) {
            f.seek(SeekFrom::Start(i as u64 * 4096)).unwrap();
            f.write_all(page).unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// fsck over a sparse store file's data extents (what `switchyard fsck` runs: the mapping,
    /// holes not read) finds exactly what the whole-image check finds, on damaged images:
    /// random byte patches over a store with files, directories and logs, with the inode
    /// table's pages left out of the file where they are zero.
    #[test]
    fn fsck_over_the_data_extents_agrees_with_the_whole_image_check(
        patches in proptest::collection::vec((0usize..(64 << 10), any::<u8>()), 0..6)
    ) {
        let mut img = switchyard_store::crash::sample_image();
        for (off, b) in patches {
            img[off] = b;
        }
        let whole = switchyard_store::fsck::check(&img);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        write_sparse(&path, &img);
        let region = Region::open(&path, 0, Persist::detect()).unwrap();
        let present = switchyard_store::Present::ranges(region.data_extents());
        // SAFETY: the region is mapped for its length while it lives, and nothing writes it.
        let mapped = unsafe { std::slice::from_raw_parts(region.as_ptr(), region.len()) };
        let sparse = switchyard_store::fsck::check_present(mapped, &present);
        prop_assert_eq!(&sparse.problems, &whole.problems);
        prop_assert_eq!(&sparse.recoverable, &whole.recoverable);
        prop_assert_eq!(
            (sparse.inodes, sparse.used_blocks, sparse.clean),
            (whole.inodes, whole.used_blocks, whole.clean)
        );
        prop_assert!(sparse.read_bytes <= whole.read_bytes);
    }
}

#[test]
fn fsck_that_drops_its_resident_pages_still_reads_every_log() {
    use switchyard_store::{Present, RELEASE_EVERY};
    let dir = tempfile::tempdir().unwrap();
    // Each file is a log page and a data block.
    let n = (RELEASE_EVERY / 4096) as usize + 500;
    let fs = fresh(&dir, ((n as u64 * 20) << 10) + (16 << 20));
    for i in 0..n {
        let fd = fs
            .open(&format!("/f{i}"), OpenFlags::CREATE, 0o644)
            .unwrap();
        fs.write(fd, &[i as u8; 10]).unwrap();
        fs.close(fd).unwrap();
    }
    fs.unmount().unwrap();
    let region = Region::open(dir.path().join("r"), 0, Persist::detect()).unwrap();
    let released = std::cell::Cell::new(0);
    let release = || {
        region.release_resident();
        released.set(released.get() + 1);
    };
    let present = Present::ranges(region.data_extents()).releasing(&release);
    // SAFETY: the region is mapped for its length while it lives, and nothing writes it.
    let mapped = unsafe { std::slice::from_raw_parts(region.as_ptr(), region.len()) };
    let report = switchyard_store::fsck::check_present(mapped, &present);
    assert!(report.healthy(), "{:?}", report.problems);
    assert_eq!(report.inodes, n as u64 + 1);
    assert!(released.get() >= 1, "the scan dropped its pages");
    drop(region);
    let region = Region::open(dir.path().join("r"), 0, Persist::detect()).unwrap();
    let fs = Fs::new(Store::mount(region, mover()).unwrap());
    assert_eq!(
        fs.read_all(&format!("/f{}", n - 1)).unwrap(),
        [(n - 1) as u8; 10]
    );
}

#[test]
fn store_errors_name_the_operation_the_object_and_the_errno() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 8 << 20);
    let s = fs.store();
    let e = s.unlink(1, b"nope").unwrap_err();
    assert_eq!(e.errno, Errno::ENOENT);
    assert_eq!(
        e.to_string(),
        "unlink \"nope\" in directory 1: ENOENT (No such file or directory (os error 2))"
    );
    let e = s.read(999, 0, &mut [0u8; 4]).unwrap_err();
    assert!(e.to_string().starts_with("read inode 999: "), "{e}");
    // Front ends pass the errno on.
    assert_eq!(Errno::from(e.clone()), e.errno);
}

/// A fallocate that runs out of blocks leaves the size, the times and the space past the size
/// as they were (stress-ng's fallocate stressor on a full mount: the file had grown half-way
/// while the kernel's cached size said it had not; its iomix stressor's 1 GiB zero-range on a
/// 1 GiB store left the file 1 GiB long and the store full).
#[test]
fn a_failed_fallocate_changes_no_size() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 16 << 20);
    let s = fs.store();
    let (f, _) = s.create(1, b"f", 0o644, Owner::current()).unwrap();
    s.write(f, 0, &[7u8; 5000]).unwrap();
    let (attr, free) = (s.getattr(f).unwrap(), s.statfs().free_blocks);
    for _ in 0..3 {
        let r = s.fallocate(f, 0, 64 << 20, Falloc::Allocate { keep_size: false });
        assert_eq!(r.err().map(|e| e.errno), Some(Errno::ENOSPC));
        let now = s.getattr(f).unwrap();
        assert_eq!(
            (now.size, now.mtime, now.ctime),
            (attr.size, attr.mtime, attr.ctime)
        );
        assert!(
            s.statfs().free_blocks + 1 >= free,
            "{} blocks free, {free} before",
            s.statfs().free_blocks
        );
        let mut buf = vec![0u8; 6000];
        assert_eq!(s.read(f, 0, &mut buf).unwrap(), 5000);
        assert!(buf[..5000].iter().all(|&b| b == 7));
    }
    let r = s.fallocate(f, 0, 64 << 20, Falloc::ZeroRange { keep_size: false });
    assert_eq!(r.err().map(|e| e.errno), Some(Errno::ENOSPC));
    assert_eq!(s.getattr(f).unwrap().size, 5000, "zero-range");
    assert!(s.statfs().free_blocks + 1 >= free, "zero-range");
    // The same calls with room for them succeed.
    s.fallocate(f, 0, 1 << 20, Falloc::Allocate { keep_size: false })
        .unwrap();
    assert_eq!(s.getattr(f).unwrap().size, 1 << 20);
    s.fallocate(f, 0, 2 << 20, Falloc::ZeroRange { keep_size: false })
        .unwrap();
    assert_eq!(s.getattr(f).unwrap().size, 2 << 20);
}

/// On a store a privileged writer filled, changes that need no data still succeed: every
/// change appends to a log, and a log whose page is full needs a fresh one (62 chmods of one
/// file, then ENOSPC, before log pages had blocks of their own). Then truncations, unlinks
/// and an rmdir.
#[test]
fn a_full_store_still_takes_metadata_changes() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fresh(&dir, 16 << 20);
    let s = fs.store();
    let (d, _) = s.mkdir(1, b"d", 0o755, Owner::current()).unwrap();
    let files: Vec<u64> = (0..50)
        .map(|i| {
            let (f, _) = s
                .create(d, format!("f{i}").as_bytes(), 0o644, Owner::current())
                .unwrap();
            s.write(f, 0, &[1u8; 100]).unwrap();
            f
        })
        .collect();
    let (big, _) = s.create(1, b"big", 0o644, Owner::current()).unwrap();
    let mut off = 0u64;
    while s.write(big, off, &[1u8; 4096]).is_ok() {
        off += 4096;
    }
    let st = s.statfs();
    // (On page media a block or two freed since the last sync may still wait for it.)
    assert!(
        st.available_blocks == 0 && st.free_blocks <= 66,
        "data took every block it may: {st:?}"
    );
    for i in 0..2000u32 {
        let set = switchyard_store::SetAttr {
            mode: Some(0o600 + i % 2),
            ..Default::default()
        };
        s.setattr(files[0], set).unwrap();
    }
    for &f in &files {
        let set = switchyard_store::SetAttr {
            size: Some(0),
            ..Default::default()
        };
        s.setattr(f, set).unwrap();
    }
    for i in 0..50 {
        s.unlink(d, format!("f{i}").as_bytes()).unwrap();
    }
    s.rmdir(1, b"d").unwrap();
    s.unlink(1, b"big").unwrap();
    assert!(s.statfs().free_blocks > 4000);
}

/// A 16 MiB store in `dir` that syncs only when asked (or when its ring fills), if `dir` is on
/// a disk file system (page granularity); `None`, said, elsewhere.
fn page_store(dir: &tempfile::TempDir) -> Option<Fs> {
    let fs = fresh(dir, 16 << 20);
    if fs.store().granularity() != switchyard_media::Granularity::Page {
        eprintln!("skipped: the temporary directory is not on a disk file system");
        return None;
    }
    let hour = std::time::Duration::from_secs(3600);
    fs.store()
        .set_sync_policy(switchyard_store::SyncPolicy::Interval(hour))
        .unwrap();
    Some(fs)
}

/// `image` in another file of `dir`, mounted: a mount there takes it for a power cut's image
/// (another page cache). Returns the file and the mounted store.
fn mount_elsewhere(dir: &tempfile::TempDir, image: &[u8]) -> (std::path::PathBuf, Fs) {
    let copy = dir.path().join("copy");
    std::fs::write(&copy, image).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o600)).unwrap();
    let region = Region::open(&copy, 0, Persist::detect()).unwrap();
    (copy, Fs::new(Store::mount(region, mover()).unwrap()))
}

/// A store file on a disk file system has page granularity: what the last sync made durable
/// is what an image taken elsewhere (as a power cut leaves it: another page cache) holds,
/// while an image read through this page cache holds every commit.
#[test]
fn an_image_elsewhere_holds_the_last_sync_and_this_page_cache_holds_everything() {
    let dir = tempfile::tempdir().unwrap();
    let Some(fs) = page_store(&dir) else {
        return;
    };
    let put = |p: &str, data: &[u8], sync: bool| {
        let fd = fs.open(p, OpenFlags::CREATE, 0o644).unwrap();
        fs.write(fd, data).unwrap();
        if sync {
            fs.fsync(fd).unwrap();
        }
        fs.close(fd).unwrap();
    };
    put("/synced", b"durable", true);
    put("/later", b"not yet", false);
    fs.mkdir("/dir", 0o755).unwrap();
    // The page cache's view: fsck applies every whole commit of the ring.
    let live = image(&dir);
    assert!(switchyard_store::fsck::check(&live).healthy());
    // The same bytes in another file: a mount there takes them for a power cut's image.
    let (copy, cut) = mount_elsewhere(&dir, &live);
    assert_eq!(cut.read_all("/synced").unwrap(), b"durable");
    assert!(
        cut.read_all("/later").is_err(),
        "committed after the last sync"
    );
    assert!(cut.stat("/dir").is_err(), "committed after the last sync");
    cut.unmount().unwrap();
    assert!(switchyard_store::fsck::check(&std::fs::read(&copy).unwrap()).healthy());
    // This page cache, remounted cleanly, holds everything.
    let fs = remount(&dir, fs);
    assert_eq!(fs.read_all("/later").unwrap(), b"not yet");
    assert!(fs.stat("/dir").is_ok());
}

/// Many more commits than the page-media ring holds, with no sync but the ones the ring asks
/// for: it wraps, nothing is lost, and an image elsewhere (a power cut's) is consistent.
#[test]
fn the_commit_ring_wraps_without_losing_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    let Some(fs) = page_store(&dir) else {
        return;
    };
    let s = fs.store();
    let (f, _) = s.create(1, b"f", 0o644, Owner::current()).unwrap();
    for i in 0..40_000u32 {
        let set = switchyard_store::SetAttr {
            mode: Some(0o600 + i % 64),
            ..Default::default()
        };
        s.setattr(f, set).unwrap();
        if i % 1000 == 0 {
            s.create(1, format!("n{i}").as_bytes(), 0o644, Owner::current())
                .unwrap();
        }
    }
    assert!(s.syncs() >= 4, "the ring asked for syncs: {}", s.syncs());
    let live = image(&dir);
    assert!(switchyard_store::fsck::check(&live).healthy());
    let (copy, cut) = mount_elsewhere(&dir, &live);
    assert!(cut.stat("/n0").is_ok(), "synced long before the cut");
    cut.unmount().unwrap();
    assert!(switchyard_store::fsck::check(&std::fs::read(&copy).unwrap()).healthy());
    let fs = remount(&dir, fs);
    assert_eq!(fs.stat("/f").unwrap().mode & 0o777, 0o600 + 39_999 % 64);
    assert!(fs.stat("/n39000").is_ok());
}

/// On page media a freed block waits for the sync that frees it; a write that finds the
/// store short must get the blocks a sync is giving back — the one it runs, or one under way
/// that has taken them off the waiting list — and never fail with ENOSPC while most of the
/// store is free (two threads overwriting 64 KiB pieces of their files as fast as they can:
/// `bench fs` failed so one run in four).
#[test]
fn a_write_short_of_space_waits_for_the_blocks_a_sync_gives_back() {
    let dir = tempfile::tempdir().unwrap();
    let region = Region::create(dir.path().join("r"), 71 << 20, Persist::detect()).unwrap();
    let fs = Fs::new(Store::format(region, mover(), Owner::current()).unwrap());
    if fs.store().granularity() != switchyard_media::Granularity::Page {
        eprintln!("skipped: the temporary directory is not on a disk file system");
        return;
    }
    let fs = &fs;
    let flags = OpenFlags { create: true, ..RW };
    let fds: Vec<_> = (0..2)
        .map(|t| {
            let fd = fs.open(&format!("/f{t}"), flags, 0o600).unwrap();
            fs.pwrite(fd, &vec![1u8; 1 << 20], 0).unwrap();
            fd
        })
        .collect();
    std::thread::scope(|s| {
        for (t, &fd) in fds.iter().enumerate() {
            s.spawn(move || {
                let piece = vec![t as u8 + 1; 64 << 10];
                let t0 = std::time::Instant::now();
                let mut k = 0u64;
                while t0.elapsed() < std::time::Duration::from_secs(1) {
                    let off = (k * 7 % 16) * (64 << 10);
                    fs.pwrite(fd, &piece, off).unwrap_or_else(|e| {
                        let free = fs.store().statfs().free_blocks;
                        panic!("writer {t}, write {k}: {e:?} with {free} blocks free")
                    });
                    k += 1;
                }
            });
        }
    });
}
