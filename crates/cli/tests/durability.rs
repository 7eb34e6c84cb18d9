//! `switchyard bench sync`: what durability costs, on the store's mount over a store file on
//! a disk against the disk's own file system.

mod common;

use std::process::Command;

use common::{bin, json_lines, run};

/// One short round of every workload on every target: every figure is there, every `fsync`
/// on the store reached its disk (at least one sync per operation), and nothing is left
/// behind.
#[test]
fn bench_sync_measures_every_workload_on_both_stores_and_the_disk() {
    // Under the target directory: on the disk, where the system's temporary directory may
    // be a memory file system (which the benchmark refuses).
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = run(Command::new(bin())
        .args([
            "bench",
            "sync",
            "--quick",
            "--json",
            "--sparse",
            "--rounds",
            "1",
            "--seconds",
            "0.1",
            "--dir",
        ])
        .arg(work.path()));
    let lines = json_lines(out.into_bytes());
    assert_eq!(lines.len(), 3 + 1, "3 workloads and a summary: {lines:?}");
    let names: Vec<_> = lines[..3].iter().map(|r| r["workload"].clone()).collect();
    assert_eq!(names, ["sqlite-delete", "sqlite-wal", "small-files"]);
    for r in &lines[..3] {
        for k in [
            "store_ops_s",
            "native_ops_s",
            "store_always_ops_s",
            "store_p50_ms",
            "native_p50_ms",
            "store_always_p50_ms",
            "store_vs_native",
            "always_vs_native",
        ] {
            assert!(r[k].as_f64().unwrap() > 0.0, "{k} in {r}");
        }
        for k in ["store_syncs_per_op", "store_always_syncs_per_op"] {
            assert!(r[k].as_f64().unwrap() >= 1.0, "{k} in {r}");
        }
        assert!(r["store_vs_native_range"][0].as_f64().unwrap() > 0.0);
        assert!(r["unit"].is_string());
    }
    let s = &lines[3];
    assert_eq!(s["summary"], true);
    assert_eq!(s["sparse"], true);
    let fs = s["native_fs"].as_str().unwrap();
    assert_eq!(
        s["setup"]["media"]["fs"], fs,
        "the stores and the disk target share a file system"
    );
    assert_ne!(fs, "tmpfs");
    assert!(s["setup"]["machine"]["cpu"].is_string());
    assert!(s["setup"]["engine"]["kind"].is_string());
    assert!(s["store_sync"].is_string());
    for k in ["disk", "write_cache", "sqlite"] {
        assert!(s.get(k).is_some(), "{k} in {s}");
    }
    assert!(s["store_vs_native_min"][0].as_f64().unwrap() > 0.0);
    assert!(s["always_vs_native_min"][0].as_f64().unwrap() > 0.0);
    // Both mounts are gone and the scratch directory is removed.
    assert!(!std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .contains("switchyard-bench-sync"));
    assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), 0);
}

/// A memory file system has no disk to sync: the benchmark says so instead of measuring.
#[test]
fn bench_sync_refuses_a_memory_file_system() {
    if !std::path::Path::new("/dev/shm").is_dir() {
        return;
    }
    let work = tempfile::tempdir_in("/dev/shm").unwrap();
    let out = Command::new(bin())
        .args([
            "bench",
            "sync",
            "--quick",
            "--workloads",
            "small-files",
            "--dir",
        ])
        .arg(work.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no disk to sync"), "{said}");
    assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), 0);
}
