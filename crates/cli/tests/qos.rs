//! `switchyard bench qos`: every mode runs, the budgets throttle the bulk tenant, and nothing
//! is left behind.

use assert_cmd::Command;

mod common;

use common::{assert_no_scratch, json_lines};

#[test]
fn qos_bench_runs_every_mode_and_its_budgets_throttle_the_bulk_tenant() {
    let d = tempfile::tempdir().unwrap();
    // A killed run's cgroup (no process has this pid: pids never exceed 2^22) is
    // removed by the next run, where the cgroup controller can be written at all.
    let stale = std::path::Path::new("/sys/fs/cgroup/cpu/switchyard-bench-qos-4194305");
    let cgroups = std::fs::create_dir(stale).is_ok();
    let out = Command::cargo_bin("switchyard")
        .unwrap()
        .current_dir(d.path())
        .args(["bench", "qos", "--json", "--rounds", "1", "--ms", "60"])
        .args(["--objective-us", "100", "--dir"])
        .arg(d.path())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let lines = json_lines(out);
    let (summary, records) = lines.split_last().unwrap();
    assert_eq!(summary["summary"], true);
    assert_eq!(summary["objective_us"].as_f64(), Some(100.0));
    let mode = |name: &str| {
        records
            .iter()
            .find(|r| r["mode"] == name)
            .unwrap_or_else(|| panic!("no mode {name} in {records:?}"))
    };
    let gib_s = |name: &str| mode(name)["bulk_gib_s"].as_f64().unwrap();
    assert_eq!(gib_s("idle"), 0.0);
    for m in [
        "shared",
        "separate",
        "engine-throttle",
        "budget 256",
        "budget 8192",
    ] {
        assert!(gib_s(m) > 0.0, "{m}: {records:?}");
        assert!(mode(m)["p99_us"].as_f64().unwrap() > 0.0);
    }
    // 256 MiB/s is a quarter GiB/s whatever the machine; unthrottled copies run far faster.
    assert!(gib_s("budget 256") < 0.4, "{records:?}");
    assert!(gib_s("budget 256") * 4.0 < gib_s("separate"), "{records:?}");
    let cpu = records.iter().any(|r| r["mode"] == "cpu-throttle");
    assert_eq!(cpu, summary["cpu_throttle_skipped"].is_null(), "{summary}");
    assert_no_scratch(d.path(), "bench-qos");
    assert!(!(cgroups && stale.exists()), "a stale cgroup was left");
}
