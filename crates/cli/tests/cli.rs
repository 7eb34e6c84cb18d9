//! The `switchyard` command: main paths and bad input.

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;

mod common;

use common::{assert_no_scratch, json_lines};

fn sy(dir: &std::path::Path) -> Command {
    let mut c = Command::cargo_bin("switchyard").unwrap();
    c.current_dir(dir);
    c
}

#[test]
fn quick_copy_bench_runs_on_a_small_region_and_stat_shows_its_counters() {
    let d = tempfile::tempdir().unwrap();
    let out = sy(d.path())
        .args([
            "bench",
            "copy",
            "--quick",
            "--json",
            "--region-size",
            "64M",
            "--sizes",
            "4K,1M",
            "--threads",
            "1",
            "--rounds",
            "1",
            "--shift",
            "8",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let records = json_lines(out);
    for key in [
        "path",
        "direction",
        "size",
        "threads",
        "shift",
        "p50_us",
        "p99_us",
        "gib_per_s",
        "cpu_s_per_gib",
    ] {
        assert!(records[0].get(key).is_some(), "missing {key}");
    }
    assert!(records
        .iter()
        .any(|r| r["path"] == "scheduled" && r["direction"] == "from_slow"));
    assert!(records[..records.len() - 1].iter().all(|r| r["shift"] == 8));
    let summary = records.last().unwrap();
    assert_eq!(summary["record"], "summary");
    // cpu ÷ glibc over the read sizes: (min, median).
    assert_eq!(summary["cpu_vs_glibc_reads"].as_array().unwrap().len(), 2);
    // The summary names where it ran, for `switchyard report`.
    let setup = &summary["setup"];
    assert!(setup["machine"]["cores"].as_u64().unwrap() >= 1, "{setup}");
    assert_eq!(setup["engine"]["kind"], "threads");
    assert_eq!(setup["engine_reason"], "threads: engine.kind = \"threads\"");
    assert!(records[..records.len() - 1]
        .iter()
        .all(|r| r["engine"].as_str().unwrap().starts_with("threads (")));
    let region = setup["media"]["region"].as_str().unwrap();
    assert!(region.starts_with('/') && region.ends_with("/switchyard.region"));
    assert_ne!(setup["media"]["fs"], "unknown");
    assert_eq!(setup["quick"], true);
    assert!(d.path().join("switchyard.region").exists());
    sy(d.path())
        .args(["stat", "--region", "switchyard.region"])
        .assert()
        .success()
        .stdout(contains("cpu_requests"))
        .stdout(contains("flush"))
        .stdout(contains("engine chosen: threads: engine.kind"));
}

#[test]
fn commands_offer_only_the_options_they_use() {
    let d = tempfile::tempdir().unwrap();
    let help = |cmd: &str| {
        let out = sy(d.path()).args([cmd, "--help"]).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    for cmd in ["fsck", "ls", "cp", "mkfs", "mount", "up", "stat"] {
        let h = help(cmd);
        assert!(h.contains("--store"), "{cmd}: {h}");
        // The mover's scratch region belongs to `bench copy` (and `stat --region`) alone.
        assert_eq!(h.contains("--region"), cmd == "stat", "{cmd}: {h}");
    }
    for cmd in ["fsck", "ls"] {
        let h = help(cmd);
        assert!(
            !h.contains("--config") && !h.contains("--profile"),
            "{cmd}: {h}"
        );
    }
    for cmd in ["cp", "mkfs", "mount", "up", "stat"] {
        assert!(help(cmd).contains("--profile"), "{cmd}");
    }
    // The engine is chosen wherever one starts: every command that moves data, and tune.
    for cmd in [
        "cp", "mkfs", "mount", "up", "serve", "stat", "config", "tune",
    ] {
        assert!(help(cmd).contains("--engine <dsa|threads|auto>"), "{cmd}");
    }
    for cmd in ["fsck", "ls"] {
        assert!(!help(cmd).contains("--engine"), "{cmd}");
    }
}

/// Without a DSA work queue, `auto` runs on threads and says why, and `dsa` fails saying what
/// is missing and how to set a queue up (on a host with a queue, both would take it).
#[test]
fn the_engine_is_chosen_and_says_why() {
    if std::path::Path::new("/sys/bus/dsa/devices").exists() {
        eprintln!("skipped: this host has the idxd driver's tree; the test is for hosts without");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    sy(d.path())
        .args(["stat", "--engine", "auto"])
        .assert()
        .success()
        .stdout(contains("engine: threads with"))
        .stdout(contains(
            "why: threads (auto): no DSA work queue for user space",
        ));
    sy(d.path())
        .args([
            "bench",
            "copy",
            "--engine",
            "dsa",
            "--quick",
            "--region-size",
            "8M",
            "--sizes",
            "4K",
        ])
        .assert()
        .failure()
        .stderr(contains(
            "engine.kind = \"dsa\": no DSA work queue for user space",
        ))
        .stderr(contains("accel-config enable-wq"));
    assert!(!d.path().join("switchyard.region").exists());
    sy(d.path())
        .args(["stat", "--engine", "ioat"])
        .assert()
        .failure()
        .stderr(contains("[possible values: threads, dsa, auto]"));
}

#[test]
fn config_prints_every_key_documented_with_its_source_and_loads_back() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("c.toml"),
        "[mover]\nsplit = false\n[fuse]\nworkers = 3\n",
    )
    .unwrap();
    let out = sy(d.path())
        .args(["config", "--config", "c.toml", "--no-profile"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    for want in [
        "split = false  # configuration file",
        "workers = 3  # configuration file",
        "queue_depth = 64  # default",
        "[runtime]",
        "[store]",
        "reserved_percent = 5  # default",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    // What it prints is a configuration file with the same values.
    std::fs::write(d.path().join("again.toml"), &text).unwrap();
    let again = sy(d.path())
        .args(["config", "--config", "again.toml", "--no-profile"])
        .output()
        .unwrap();
    let again = String::from_utf8(again.stdout).unwrap();
    assert!(
        again.contains("split = false  # configuration file"),
        "{again}"
    );
    assert!(
        again.contains("queue_depth = 64  # configuration file"),
        "{again}"
    );
}

#[test]
fn stat_without_a_run_says_so() {
    let d = tempfile::tempdir().unwrap();
    sy(d.path())
        .arg("stat")
        .assert()
        .success()
        .stdout(contains("no counters yet"));
}

#[test]
fn bad_input_is_a_clear_error() {
    let d = tempfile::tempdir().unwrap();
    sy(d.path())
        .args(["stat", "--config", "missing.toml"])
        .assert()
        .failure()
        .stderr(contains("missing.toml"));
    std::fs::write(d.path().join("bad.toml"), "[mover]\npolicy = \"fastest\"\n").unwrap();
    sy(d.path())
        .args(["stat", "--config", "bad.toml"])
        .assert()
        .failure()
        .stderr(contains("policy"));
    std::fs::write(d.path().join("flush.toml"), "[media]\nflush = \"wbinvd\"\n").unwrap();
    sy(d.path())
        .args([
            "bench",
            "idle",
            "--config",
            "flush.toml",
            "--seconds",
            "0.1",
        ])
        .assert()
        .failure()
        .stderr(contains("wbinvd"));
    sy(d.path())
        .args(["bench", "copy", "--region-size", "1M", "--sizes", "4K"])
        .assert()
        .failure()
        .stderr(contains("too small"));
    sy(d.path())
        .args(["bench", "copy", "--region-size", "12Q"])
        .assert()
        .failure()
        .stderr(contains("not a size"));
    sy(d.path())
        .args(["bench", "copy", "--shift", "64"])
        .assert()
        .failure()
        .stderr(contains("--shift"));
    std::fs::write(d.path().join("tiny.region"), [0u8; 100]).unwrap();
    private(&d.path().join("tiny.region"));
    sy(d.path())
        .args([
            "bench",
            "copy",
            "--quick",
            "--region",
            "tiny.region",
            "--region-size",
            "64M",
            "--sizes",
            "4K",
            "--threads",
            "1",
            "--rounds",
            "1",
        ])
        .assert()
        .success();
}

#[test]
fn decide_and_idle_report_their_figures() {
    let d = tempfile::tempdir().unwrap();
    sy(d.path())
        .args(["bench", "decide", "--batches", "5", "--per-batch", "1000"])
        .assert()
        .success()
        .stdout(contains("ns median per decision"));
    sy(d.path())
        .args(["bench", "idle", "--seconds", "0.2"])
        .assert()
        .success()
        .stdout(contains("% of one core"));
}

#[test]
fn explore_reports_every_pattern_against_steady_splitting() {
    let d = tempfile::tempdir().unwrap();
    let out = sy(d.path())
        .args(["bench", "explore", "--rounds", "1", "--slice-ms", "20"])
        .args(["--dir", d.path().to_str().unwrap()])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    for p in [
        "every request",
        "one in 32",
        "one in 160",
        "one in 512",
        "runs of 8 per 256, first untimed",
        "runs of 8 per 1280, first untimed",
    ] {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(p))
            .unwrap_or_else(|| panic!("no line for {p:?}: {out}"));
        let ratio: f64 = line
            .split_whitespace()
            .rev()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        assert!(ratio > 0.0, "{line}");
    }
}

#[test]
fn store_commands_round_trip_a_file_and_check_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let mut c = Command::cargo_bin("switchyard").unwrap();
        c.current_dir(dir.path()).args(args);
        c
    };
    run(&["mkfs", "--size", "16M"])
        .assert()
        .success()
        .stdout(contains("formatted"));
    run(&["mkfs"])
        .assert()
        .failure()
        .stderr(contains("already holds a store"));
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(dir.path().join("in.bin"), &data).unwrap();
    run(&["cp", "in.bin", "store:/in.bin"]).assert().success();
    run(&["ls"])
        .assert()
        .success()
        .stdout(contains("200000 in.bin"));
    run(&["cp", "store:/in.bin", "out.bin"]).assert().success();
    assert_eq!(std::fs::read(dir.path().join("out.bin")).unwrap(), data);
    run(&["fsck"]).assert().success().stdout(contains("ok"));
    run(&["ls", "/missing"])
        .assert()
        .failure()
        .stderr(contains("ENOENT"));
    run(&["stat"]).assert().success().stdout(contains("2 of"));
}

#[test]
fn store_commands_refuse_what_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("junk"), vec![0x55u8; 4 << 20]).unwrap();
    private(&dir.path().join("junk"));
    let run = |args: &[&str]| {
        let mut c = Command::cargo_bin("switchyard").unwrap();
        c.current_dir(dir.path()).args(args);
        c
    };
    run(&["ls", "--store", "junk"])
        .assert()
        .failure()
        .stderr(contains("mkfs"));
    run(&["fsck", "--store", "junk"])
        .assert()
        .failure()
        .stdout(contains("PROBLEM"));
    run(&["ls", "--store", "absent"])
        .assert()
        .failure()
        .stderr(contains("no store at absent"));
}

#[test]
fn fs_bench_compares_the_store_with_fio_and_times_mounts() {
    let d = tempfile::tempdir().unwrap();
    let out = sy(d.path())
        .args([
            "bench",
            "fs",
            "--json",
            "--ops",
            "write,randwrite",
            "--sizes",
            "4K,64K",
            "--threads",
            "1,2",
            "--rounds",
            "1",
            "--seconds",
            "0.05",
            "--file-size",
            "1M",
            "--mount-files",
            "200",
            "--dir",
        ])
        .arg(d.path())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let lines = json_lines(out);
    assert_eq!(lines.len(), 2 * 2 * 2 + 1, "8 points and a summary");
    for p in &lines[..8] {
        assert!(p["store_gib_s"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["libpmem_gib_s"].as_f64().unwrap() > 0.0, "fio ran: {p}");
        assert!(p["psync_gib_s"].as_f64().unwrap() > 0.0, "{p}");
    }
    let s = &lines[8];
    assert!(s["rand4k_write_vs_libpmem_min"][0].as_f64().unwrap() > 0.0);
    assert_eq!(s["write4k_scaling"].as_array().unwrap().len(), 2);
    assert_eq!(s["mount"]["files"], 200);
    // Nothing is left behind in the scratch directory's parent.
    let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn fs_bench_refuses_bad_sizes() {
    let d = tempfile::tempdir().unwrap();
    sy(d.path())
        .args(["bench", "fs", "--no-fio", "--sizes", "1000", "--dir"])
        .arg(d.path())
        .assert()
        .failure()
        .stderr(contains("multiple of 4K"));
}

#[test]
fn tune_finds_the_thresholds_writes_a_profile_and_commands_load_only_their_own() {
    let d = tempfile::tempdir().unwrap();
    let out = sy(d.path())
        .args(["tune", "--quick", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let m = &v["measurements"];
    check_tune_measurements(m);
    check_tune_profile(&v["profile"], m["shifted"].as_array().unwrap());

    // The default profile in the working directory is loaded, and shown.
    let profile = d.path().join("switchyard.profile.toml");
    assert!(profile.exists());
    sy(d.path())
        .args(["stat"])
        .assert()
        .success()
        .stdout(contains("switchyard.profile.toml"));

    // `config` names the profile's values as the profile's, the file's as the file's.
    std::fs::write(d.path().join("c.toml"), "[engine]\nqueue_depth = 32\n").unwrap();
    let out = sy(d.path())
        .args(["config", "--config", "c.toml"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("queue_depth = 32  # configuration file"),
        "{text}"
    );
    assert!(text.contains("# engine profile"), "{text}");
    assert!(text.contains("pin = true  # default"), "{text}");
    // One measured elsewhere is refused, with both machines named.
    let text = std::fs::read_to_string(&profile).unwrap();
    let cpu_line = text.lines().find(|l| l.starts_with("cpu = ")).unwrap();
    let moved = text.replace(cpu_line, "cpu = \"Some Other CPU\"");
    std::fs::write(&profile, moved).unwrap();
    sy(d.path())
        .args(["stat"])
        .assert()
        .failure()
        .stderr(contains("measured on Some Other CPU").and(contains("switchyard tune")));
    // --no-profile runs on the built-in thresholds.
    sy(d.path())
        .args(["stat", "--no-profile"])
        .assert()
        .success();
    // A newer format is named as such.
    std::fs::write(&profile, "version = 9\n").unwrap();
    sy(d.path())
        .args(["stat"])
        .assert()
        .failure()
        .stderr(contains("format version 9"));
    // So is an older one, with what to do about it.
    std::fs::write(&profile, "version = 2\n").unwrap();
    sy(d.path())
        .args(["stat"])
        .assert()
        .failure()
        .stderr(contains("format version 2").and(contains("run `switchyard tune`")));
}

/// The profile `tune --json` chose: its version, limits, bins and start-up delays measured
/// (none left at the estimates' prior), and thresholds; `shifted` are the shifted-copy loop's
/// measurements.
fn check_tune_profile(p: &serde_json::Value, shifted: &[serde_json::Value]) {
    assert_eq!(p["version"], 3);
    // 0 (never) or one of the measured sizes.
    let shifted_min = p["tuned"]["shifted_min"].as_u64().unwrap();
    assert!(
        shifted_min == 0 || shifted.iter().any(|s| s["size"] == shifted_min),
        "{shifted_min}"
    );
    assert!(p["tuned"]["concurrency_limit"].as_u64().unwrap() >= 1);
    assert_eq!(p["bins"].as_array().unwrap().len(), 16);
    // The engine's side is the rate while executing and the delay before it starts, as the
    // mover's live estimates measure them: neither may be left at the neutral prior (8 B/ns,
    // 5 µs) the estimates start from.
    for b in p["bins"].as_array().unwrap() {
        let g = b["engine_gib_s"].as_f64().unwrap();
        assert!(g > 0.0 && (g * 1.073_741_824 - 8.0).abs() > 1e-9, "{b}");
    }
    for s in p["startup"].as_array().unwrap() {
        let ns = s["ns"].as_f64().unwrap();
        assert!(ns > 0.0 && ns != 5_000.0, "{s}");
    }
    let t = &p["tuned"]["thresholds"]["from_slow"]["local_aligned"];
    assert!(t.as_u64().unwrap() >= 4096, "{t}");
}

/// What `tune --json` measured: both directions, aligned and not, the scaling curves, the
/// streaming-store sweep and the shifted-copy loop.
fn check_tune_measurements(m: &serde_json::Value) {
    // Both directions, aligned and not, every coarse size; the scaling curves and NT sweep.
    for dir in ["to_slow", "from_slow"] {
        for aligned in [true, false] {
            let n = m["sweep"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["direction"] == dir && p["aligned"] == aligned)
                .count();
            assert!(n >= 6, "{dir} aligned={aligned}: {n} points");
        }
    }
    assert!(m["engine_scaling"].as_array().unwrap().len() >= 2);
    assert!(m["writer_scaling"].as_array().unwrap().len() >= 2);
    // Streaming stores against temporal ones, 256 B to 64 KiB by powers of 2, then 256 KiB
    // and 1 MiB.
    assert_eq!(m["nt"].as_array().unwrap().len(), 11);
    // The shifted-copy loop against memcpy, 1 KiB to 256 KiB.
    let shifted = m["shifted"].as_array().unwrap();
    assert_eq!(shifted.len(), 5);
    assert!(shifted
        .iter()
        .all(|s| s["loop_gib_s"].as_f64().unwrap() > 0.0
            && s["memcpy_gib_s"].as_f64().unwrap() > 0.0));
}

#[test]
fn mix_bench_runs_every_workload_and_policy_and_the_grid() {
    let d = tempfile::tempdir().unwrap();
    let out = sy(d.path())
        .args([
            "bench",
            "mix",
            "--json",
            "--grid",
            "--threads",
            "1",
            "--rounds",
            "1",
            "--slice-ms",
            "2",
            "--dir",
        ])
        .arg(d.path())
        .assert()
        .success()
        .stderr(contains("tuning first"))
        .get_output()
        .stdout
        .clone();
    let lines = json_lines(out);
    assert_eq!(lines.len(), 9 + 1, "9 workload-directions and a summary");
    for r in &lines[..9] {
        let policies = r["gib_s"].as_array().unwrap();
        let breakdown = matches!(r["workload"].as_str().unwrap(), "bulk" | "mixed");
        assert_eq!(policies.len(), if breakdown { 8 } else { 6 }, "{r}");
        assert!(r["tuned_vs_fixed"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["a_a"].as_f64().unwrap() > 0.0, "{r}");
        let (lo, hi) = (
            r["tuned_vs_cpu_interval"][0].as_f64().unwrap(),
            r["tuned_vs_cpu_interval"][1].as_f64().unwrap(),
        );
        let mid = r["tuned_vs_cpu"].as_f64().unwrap();
        assert!(lo <= mid && mid <= hi, "{r}");
        let share = r["tuned_cpu_share"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&share), "{r}");
        assert!(policies.iter().all(|p| p[1].as_f64().unwrap() > 0.0), "{r}");
        assert_eq!(r["grid"].is_object(), breakdown, "{r}");
        if breakdown {
            assert!(r["grid"]["settings"].as_u64().unwrap() >= 36);
        }
    }
    let s = &lines[9];
    assert!(s["table1_tuned_vs_cpu_min"][0].as_f64().unwrap() > 0.0);
    assert!(s["table1_a_a_widest"][0].as_f64().unwrap() > 0.0);
    assert!(s["table1_slower_than_cpu"].is_array());
    let (offloaded, parity) = (
        &s["table1_offloaded_tuned_vs_cpu_min"],
        &s["table1_parity_tuned_vs_cpu"],
    );
    assert!(
        offloaded.is_array() || parity.is_array(),
        "each Table 1 mix is either: {s}"
    );
    assert!(s["grid_tuned_vs_best_min"][0].as_f64().unwrap() > 0.0);
    assert!(s["tuned_vs_fixed_median"].as_f64().unwrap() > 0.0);
    assert_eq!(s["adaptation"].as_array().unwrap().len(), 3);
    assert!(s["thresholds_in_effect"]["from_slow"]["local_aligned"].is_u64());
    // The profile it tuned is kept for the next run; the scratch region is gone.
    assert!(d.path().join("switchyard.profile.toml").exists());
    assert_no_scratch(d.path(), "bench-mix");
}

#[test]
fn mix_bench_names_the_workloads_when_asked_for_an_unknown_one() {
    let d = tempfile::tempdir().unwrap();
    sy(d.path())
        .args(["bench", "mix", "--workloads", "tpcc,oltp"])
        .assert()
        .failure()
        .stderr(contains("no workload named \"oltp\"").and(contains("fileserver")));
    assert_no_scratch(d.path(), "bench-mix");
}

/// Asserts that no entry of `dir` has `marker` in its name: a bench removed its scratch files.

#[test]
fn aio_bench_compares_orderless_and_ordered_writes() {
    let dir = tempfile::tempdir().unwrap();
    let out = sy(dir.path())
        .args(["bench", "aio", "--json", "--rounds", "2", "--writes", "8"])
        .args(["--sizes", "16K,64K", "--dir"])
        .arg(dir.path())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let lines = json_lines(out);
    assert_eq!(lines.len(), 5, "two sizes × two variants, then the summary");
    for r in &lines[..4] {
        assert!(r["p50_us"].as_f64().unwrap() > 0.0);
    }
    let ratios = lines[4]["orderless_vs_ordered"].as_array().unwrap();
    assert_eq!(ratios.len(), 2);
    assert!(ratios.iter().all(|r| r[1].as_f64().unwrap() > 0.0));
    // The scratch store is gone.
    assert_no_scratch(dir.path(), "bench-aio");
}

#[test]
fn apps_bench_runs_every_application_in_every_mode_and_the_fxmark_curves() {
    let dir = tempfile::tempdir().unwrap();
    let out = sy(dir.path())
        .args(["bench", "apps", "--json", "--rounds", "1", "--data", "16M"])
        .args(["--tasks", "2", "--workers", "1,2", "--blocks", "64K"])
        .args(["--fx-bytes", "1M", "--dir"])
        .arg(dir.path())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let lines = json_lines(out);
    let apps = ["grep", "snappy", "hash", "bfs", "fileserver"];
    // Five applications × three modes, two workloads × two worker counts × two modes, summary.
    assert_eq!(lines.len(), 15 + 8 + 1);
    for (i, r) in lines[..15].iter().enumerate() {
        assert_eq!(r["kind"], "app");
        assert_eq!(r["app"], apps[i / 3]);
        assert_eq!(r["mode"], ["sync", "async", "async-wait"][i % 3]);
        assert_eq!(r["workers"], [1, 2, 2][i % 3]);
        assert!(r["gib_s"].as_f64().unwrap() > 0.0);
        assert!(r["p99_us"].as_f64().unwrap() >= r["p50_us"].as_f64().unwrap());
        assert_eq!(
            r["io_share"].is_null(),
            i % 3 != 0,
            "only sync has an I/O share"
        );
        let (engine, helped) = (
            r["engine_share"].as_f64().unwrap(),
            r["helped_share"].as_f64().unwrap(),
        );
        assert!(
            (0.0..=1.0).contains(&engine) && engine + helped <= 1.0 + 1e-9,
            "{r}"
        );
        if i % 3 != 1 {
            assert_eq!(
                helped, 0.0,
                "only an executor that helps copies engine tails: {r}"
            );
        }
    }
    for r in &lines[15..23] {
        assert_eq!(r["kind"], "fxmark");
        assert!(r["kops_s"].as_f64().unwrap() > 0.0);
    }
    let summary = &lines[23];
    let cmp = summary["apps"].as_array().unwrap();
    assert_eq!(cmp.len(), 5);
    for c in cmp {
        assert!(c["async_vs_sync"].as_f64().unwrap() > 0.0);
        assert!(c["waiting_vs_sync"].as_f64().unwrap() > 0.0);
        let share = c["io_share"].as_f64().unwrap();
        assert!(share > 0.0 && share < 1.0, "{c}");
    }
    // The scratch stores are gone.
    assert_no_scratch(dir.path(), "bench-apps");
}

#[test]
fn apps_bench_runs_each_application_quiet_and_beside_a_cpu_hog() {
    let dir = tempfile::tempdir().unwrap();
    let out = sy(dir.path())
        .args(["bench", "apps", "--json", "--rounds", "1", "--data", "8M"])
        .args(["--apps", "grep", "--fxmark", "--hog", "--dir"])
        .arg(dir.path())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let lines = json_lines(out);
    // One application × two loads × three modes, then the summary.
    assert_eq!(lines.len(), 6 + 1);
    for (i, r) in lines[..6].iter().enumerate() {
        assert_eq!(r["load"], ["quiet", "hog"][i / 3], "{r}");
        assert_eq!(r["mode"], ["sync", "async", "async-wait"][i % 3]);
    }
    let cmp = lines[6]["apps"].as_array().unwrap();
    let loads: Vec<_> = cmp.iter().map(|c| c["load"].as_str().unwrap()).collect();
    assert_eq!(loads, ["quiet", "hog"]);
    // The hog is gone with the run.
    let hogs = std::process::Command::new("pgrep")
        .args(["-f", "while :; do :; done"])
        .output()
        .unwrap();
    assert!(hogs.stdout.is_empty(), "a CPU hog outlived the benchmark");
    assert_no_scratch(dir.path(), "bench-apps");
}

/// Makes a file written by the test owner-only, as Switchyard requires of a region file.
fn private(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Issue: a failing package install printed only `E: Sub-process /usr/bin/dpkg returned an
/// error code (1)`: apt's own output went to /dev/null. The failing step's output is shown.
#[test]
fn install_deps_shows_why_a_step_failed() {
    let bin = tempfile::tempdir().unwrap();
    // A PATH with what the script needs, no fio and no fusermount3 (so it must install
    // them), and an apt-get that fails the way dpkg does.
    for tool in [
        "id", "ldconfig", "grep", "mktemp", "cat", "rm", "env", "cc", "cargo",
    ] {
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            // Where this test's own PATH finds them, plus the system directories.
            .env(
                "PATH",
                format!(
                    "{}:/usr/sbin:/sbin",
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .output()
            .unwrap();
        let path = String::from_utf8(out.stdout).unwrap();
        std::os::unix::fs::symlink(path.trim(), bin.path().join(tool)).unwrap();
    }
    let fake = bin.path().join("apt-get");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho \"dpkg: error processing package fio (--configure): simulated\"\n\
         echo \"E: Sub-process /usr/bin/dpkg returned an error code (1)\" >&2\nexit 100\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-deps.sh");
    let out = std::process::Command::new("/bin/bash")
        .arg(script)
        .env("PATH", bin.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("this step failed: apt-get update")
            && err.contains("dpkg: error processing package fio (--configure): simulated"),
        "the failing step and its own output are shown: {err}"
    );
}

#[test]
fn bench_runs_the_benchmarks_program_and_says_how_to_build_it_when_it_is_missing() {
    // Next to the benchmarks' program (where cargo builds both), `bench` is that program's.
    let d = tempfile::tempdir().unwrap();
    sy(d.path())
        .args(["bench", "--help"])
        .assert()
        .success()
        .stdout(contains("switchyard-bench bench").and(contains("copy")));
    sy(d.path())
        .args(["crashtest", "--bogus"])
        .assert()
        .failure()
        .stderr(contains("--bogus"));
    // A switchyard alone: every forwarded command fails, naming the build command.
    let alone = d.path().join("switchyard");
    std::fs::copy(assert_cmd::cargo::cargo_bin("switchyard"), &alone).unwrap();
    for command in ["bench", "crashtest", "report"] {
        let out = std::process::Command::new(&alone)
            .args([command, "--help"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command}");
        assert!(
            err.contains("switchyard-bench")
                && err.contains("cargo build --release -p switchyard-bench"),
            "{command}: {err}"
        );
    }
}
