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

#[test]
fn bench_large_times_every_command_on_both_stores() {
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .args([
            "bench",
            "large",
            "--json",
            "--files",
            "1500",
            "--capacity",
            "64G",
            "--dir",
        ])
        .arg(work.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (summary, commands) = records.split_last().unwrap();
    // mkfs; fsck, stat, mount of the empty and of the clean store; fsck and mount of the crash
    // image: on the baseline and on the large store.
    assert_eq!(commands.len(), 2 * 9, "{records:?}");
    for r in commands {
        assert!(r["seconds"].as_f64().unwrap() > 0.0, "{r}");
        let rss = r["peak_rss_bytes"].as_u64().unwrap();
        assert!(rss > 0 && rss < (LIMIT_KIB as u64) << 10, "{r}");
    }
    assert_eq!(summary["files"], 1500);
    let used = &summary["stored_bytes"];
    assert_eq!(
        used[0][1], used[1][1],
        "the same files use the same bytes in a 64 GiB store as in the baseline: {summary}"
    );
    assert_eq!(
        std::fs::read_dir(work.path()).unwrap().count(),
        0,
        "the scratch directory is removed"
    );
}
