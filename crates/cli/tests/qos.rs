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
    // One recovery figure per round (a round that never recovered says null).
    assert_eq!(
        summary["recovery_epochs"].as_array().unwrap().len(),
        1,
        "{summary}"
    );
    assert_eq!(summary["epoch_us"].as_u64(), Some(100));
    let cpu = records.iter().any(|r| r["mode"] == "cpu-throttle");
    assert_eq!(cpu, summary["cpu_throttle_skipped"].is_null(), "{summary}");
    assert_no_scratch(d.path(), "bench-qos");
    assert!(!(cgroups && stale.exists()), "a stale cgroup was left");
}

/// A mount classes its callers into tenants by the configuration's rules: by path (a rename
/// carries a directory's files to the tenant of its new place) and by uid; the mount saves
/// each tenant's counters, and `stat` shows them.
#[test]
fn a_mount_classes_its_callers_by_path_and_uid_and_stat_shows_the_tenants() {
    use common::Mount;
    let work = tempfile::tempdir().unwrap();
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let config = work.path().join("qos.toml");
    std::fs::write(
        &config,
        format!(
            r#"[engine]
channels = 2

[qos]
tenants = [
  {{ name = "web", kind = "latency", bound_us = 1000.0, paths = ["/web"] }},
  {{ name = "archive", kind = "bulk", paths = ["/archive"] }},
  {{ name = "mine", kind = "bulk", uids = [{uid}], paths = ["/mine"] }},
]
"#
        ),
    )
    .unwrap();
    let cfg = config.to_str().unwrap();
    let mut m = Mount::with_args(work.path(), &["--config", cfg]);
    let mib = |n: usize| vec![0x5au8; n << 20];
    for d in ["web", "archive/sub", "mine", "elsewhere"] {
        std::fs::create_dir_all(m.path(d)).unwrap();
    }
    std::fs::write(m.path("web/a"), mib(1)).unwrap();
    std::fs::write(m.path("archive/sub/b"), mib(2)).unwrap();
    std::fs::write(m.path("mine/c"), mib(3)).unwrap();
    std::fs::write(m.path("elsewhere/d"), mib(4)).unwrap();
    // The kernel keeps its entry for `web`: the mount must move its path with the rename.
    std::fs::rename(m.path("web"), m.path("archive/web")).unwrap();
    std::fs::write(m.path("archive/web/e"), mib(5)).unwrap();
    m.stop();
    let out = Command::cargo_bin("switchyard")
        .unwrap()
        .args(["stat", "--json", "--config", cfg, "--store"])
        .arg(&m.store)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let tenants = v["last_run"]["tenants"].as_array().unwrap();
    let bytes = |name: &str| {
        let t = tenants.iter().find(|t| t["name"] == name).unwrap();
        t["bytes"].as_u64().unwrap() >> 20
    };
    // Each wrote its MiB whole (page edges may add a little), and nothing of another's.
    assert_eq!(bytes("web"), 1, "{tenants:?}");
    assert_eq!(bytes("archive"), 2 + 5, "{tenants:?}");
    assert_eq!(bytes("mine"), 3, "{tenants:?}");
    let text = Command::cargo_bin("switchyard")
        .unwrap()
        .args(["stat", "--config", cfg, "--store"])
        .arg(&m.store)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains("tenants:") && text.contains("archive"),
        "{text}"
    );
}
