//! A store the size of real slow memory: a 1 TiB sparse store file. `mkfs`, `cp` into it,
//! `fsck`, and a recovery after the owner is killed must each stay within a memory limit set
//! by what is stored (a few files), not by the capacity: every whole-store pass skips the
//! inode table's holes, and the mount allocates its inode table in chunks as used.

mod common;

use std::path::Path;
use std::process::Command;

use common::bin;

/// Peak resident memory a command may use on an almost empty 1 TiB store.
const LIMIT_KIB: i64 = 256 << 10;

/// Runs `switchyard args…` in `dir`; returns its stdout and its peak resident set (KiB).
fn measured(dir: &Path, args: &[&str]) -> (String, i64) {
    let out = Command::new(bin())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // SAFETY: rusage is plain data filled by the call.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid who and a writable rusage; the child above has been waited for.
    let r = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    assert_eq!(r, 0);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        ru.ru_maxrss,
    )
}

#[test]
fn a_one_tebibyte_store_costs_what_it_holds() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let (said, _) = measured(dir, &["mkfs", "--size", "1T", "--store", "big.store"]);
    assert!(said.contains("formatted"), "{said}");
    std::fs::write(dir.join("note"), b"a small file in a large store").unwrap();
    measured(dir, &["cp", "--store", "big.store", "note", "store:/note"]);
    let (said, _) = measured(dir, &["fsck", "--store", "big.store"]);
    assert!(
        said.contains("2 inodes") && said.ends_with("ok\n"),
        "{said}"
    );
    // RUSAGE_CHILDREN's peak is the largest of all children so far: it covers every command.
    let (said, peak) = measured(dir, &["ls", "--store", "big.store", "/"]);
    assert!(said.contains("note"), "{said}");
    assert!(
        peak < LIMIT_KIB,
        "a command on an almost empty 1 TiB store peaked at {peak} KiB"
    );
    use std::os::unix::fs::MetadataExt;
    let used = std::fs::metadata(dir.join("big.store")).unwrap().blocks() * 512;
    assert!(
        used < 64 << 20,
        "the store file stays sparse: {used} bytes allocated"
    );
}

#[test]
fn recovery_of_a_killed_one_tebibyte_mount_costs_what_it_holds() {
    let work = tempfile::tempdir().unwrap();
    let mut m = common::Mount::sized(work.path(), "1T", &[]);
    for i in 0..100 {
        std::fs::write(m.path(&format!("f{i}")), vec![i as u8; 10_000]).unwrap();
    }
    let mut child = m.child.take().unwrap();
    child.kill().unwrap(); // SIGKILL: no clean unmount
    child.wait().unwrap();
    let _ = Command::new("fusermount3").arg("-u").arg(&m.dir).status();
    let store = m.store.to_str().unwrap().to_owned();
    let (said, _) = measured(work.path(), &["fsck", "--store", &store]);
    assert!(said.contains("not clean"), "{said}");
    let (said, peak) = measured(work.path(), &["ls", "--store", &store, "/"]);
    assert!(said.contains("f99"), "recovery kept every file: {said}");
    assert!(
        peak < LIMIT_KIB,
        "fsck or recovery of a killed 1 TiB mount peaked at {peak} KiB"
    );
}
