//! `switchyard bench memcpy`: runs every size with and without the preload library (the one
//! `cargo test --workspace` built, in target/<profile>/deps), and a missing library is a
//! clear error.

use assert_cmd::Command;

mod common;

use common::json_lines;

#[test]
fn memcpy_bench_measures_every_size_with_and_without_the_preload() {
    let exe = std::env::current_exe().unwrap();
    let library = exe.with_file_name("libswitchyard_memcpy.so");
    assert!(
        library.exists(),
        "{} missing: run the workspace's tests (cargo test --workspace)",
        library.display()
    );
    let d = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("switchyard")
        .unwrap()
        .current_dir(d.path())
        .args([
            "bench",
            "memcpy",
            "--json",
            "--rounds",
            "1",
            "--ms",
            "20",
            "--library",
        ])
        .arg(&library)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let lines = json_lines(out);
    let (summary, records) = lines.split_last().unwrap();
    assert_eq!(summary["summary"], true);
    assert_eq!(records.len(), 4);
    for r in records {
        assert!(r["libc_gib_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["preload_gib_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    Command::cargo_bin("switchyard")
        .unwrap()
        .args(["bench", "memcpy", "--library", "/nonexistent/lib.so"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("no preload library"));
}
