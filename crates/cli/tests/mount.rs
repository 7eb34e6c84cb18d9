//! The store mounted with `switchyard mount` (FUSE), used by real, unmodified programs. Each
//! test writes, unmounts (SIGTERM: a clean unmount), mounts again and then checks.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, errno, mounted, programs, run, Mount};

#[test]
fn posix_operations_and_errnos_through_the_mount() {
    programs::posix_operations_and_errnos(Mount::new);
}

#[test]
fn tar_cp_and_git_on_the_mount() {
    programs::tar_cp_and_git(Mount::new);
}

#[test]
fn sqlite_builds_a_database_with_thousands_of_transactions() {
    programs::sqlite_transactions(Mount::new);
}

#[test]
fn fio_jobs_write_and_verify_across_a_remount() {
    programs::fio_jobs_verify(Mount::new);
}

#[test]
fn a_killed_mount_loses_no_write_that_fio_saw_complete() {
    programs::killed_mid_fio(Mount::new, programs::Kill::Mount);
}

/// The mount with the kernel's writeback cache (`--writeback`).
fn writeback(work: &Path) -> Mount {
    Mount::with_args(work, &["--writeback"])
}

#[test]
fn posix_operations_and_errnos_through_a_writeback_mount() {
    programs::posix_operations_and_errnos(writeback);
}

#[test]
fn tar_cp_and_git_on_a_writeback_mount() {
    programs::tar_cp_and_git(writeback);
}

#[test]
fn sqlite_builds_a_database_on_a_writeback_mount() {
    programs::sqlite_transactions(writeback);
}

#[test]
fn a_killed_writeback_mount_loses_no_write_whose_fsync_returned() {
    programs::killed_mid_synced_fio(writeback);
}

/// Issue: a listing opened before a file was made in its directory, and read after a stat of
/// the directory, left the kernel's cached listing without the file (the mount's snapshot was
/// taken at `opendir`, the kernel's note of the directory's version and mtime at the first
/// read), so every later listing missed it and `rm -r` failed with ENOTEMPTY (`bench mount`'s
/// dbench cleanup, in CI).
#[test]
fn a_listing_opened_before_a_create_hides_it_from_no_later_listing() {
    let (strict, cached) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for m in [Mount::new(strict.path()), writeback(cached.path())] {
        let dir = m.path("d");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("old"), b"").unwrap();
        let early = std::fs::read_dir(&dir).unwrap(); // opendir now, read below
        std::fs::write(dir.join("new"), b"").unwrap();
        // The kernel learns the directory's new mtime before the early listing is read.
        std::fs::metadata(&dir).unwrap();
        let _ = early.count();
        let mut later: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        later.sort();
        assert_eq!(later, ["new", "old"]);
        std::fs::remove_dir_all(&dir).unwrap();
        m.fsck();
    }
}

/// `up` on a fresh directory mounts at once with the built-in thresholds, runs the full tune
/// behind the mount and swaps its profile into the running mount (saving it), with files
/// written before and after the swap intact; the next `up` reuses the profile.
#[test]
fn up_formats_once_mounts_at_once_and_swaps_in_the_full_tune() {
    let work = tempfile::tempdir().unwrap();
    let first = up(work.path());
    std::fs::write(work.path().join("mnt/hello"), b"world").unwrap();
    // The mount serves while the tune runs behind it; wait for the swap.
    let t0 = Instant::now();
    loop {
        let line = first
            .1
            .recv_timeout(Duration::from_secs(600))
            .expect("the background tune reports");
        assert!(!line.contains("failed"), "{line}");
        if line.contains("the full tune finished") {
            assert!(line.contains("in effect in this mount now"), "{line}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(600), "no swap");
    }
    assert!(work.path().join("switchyard.profile.toml").exists());
    std::fs::write(work.path().join("mnt/after"), b"the swap").unwrap();
    assert_eq!(
        std::fs::read(work.path().join("mnt/hello")).unwrap(),
        b"world"
    );
    let said = stop(first);
    assert!(
        said.contains("formatted")
            && said.contains("mounting with the built-in thresholds")
            && said.contains("unmounted"),
        "{said}"
    );
    assert!(
        said.find("mounted switchyard.store") < said.find("the full tune finished"),
        "the mount comes first: {said}"
    );
    // The mount left its counters for `stat`, the swap among them.
    let out = Command::new(bin())
        .arg("stat")
        .current_dir(work.path())
        .output()
        .unwrap();
    let stat = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stat}");
    let swapped = stat
        .lines()
        .find(|l| l.trim_start().starts_with("profiles_swapped"))
        .unwrap_or_else(|| panic!("no swap counter: {stat}"));
    assert!(stat.contains("`switchyard mount`"), "{stat}");
    assert_eq!(swapped.split_whitespace().last(), Some("1"), "{stat}");
    let c = up(work.path());
    assert_eq!(
        std::fs::read(work.path().join("mnt/hello")).unwrap(),
        b"world"
    );
    assert_eq!(
        std::fs::read(work.path().join("mnt/after")).unwrap(),
        b"the swap"
    );
    let said = stop(c);
    assert!(said.contains("using the store"), "{said}");
    assert!(
        said.contains("engine profile: switchyard.profile.toml") && !said.contains("tune"),
        "the profile is reused: {said}"
    );
    assert!(work.path().join("switchyard.store").exists());
    // Everything `up` made is its owner's alone.
    assert_owner_only(work.path());
}

/// `switchyard up` started in `work` (under umask 022), once its mount is there: the child,
/// its standard output's lines as they come, and the thread that collects them all.
fn up(work: &Path) -> Up {
    // With the usual umask, which must not leave anything readable by others.
    let mut child = Command::new("sh")
        .args(["-c", "umask 022 && exec \"$0\" up --size 256M", bin()])
        .current_dir(work)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(out).lines() {
            let line = line.unwrap();
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    let t0 = Instant::now();
    while !work.join("mnt").is_dir() || !mounted(&work.join("mnt")) {
        assert!(t0.elapsed() < Duration::from_secs(120), "no mount on ./mnt");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, rx, reader)
}

/// A running `switchyard up` ([`up`]).
type Up = (
    Child,
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<String>,
);

/// Stops `up` with SIGINT, checks it exited cleanly, and returns all it printed.
fn stop((c, _, reader): Up) -> String {
    // SAFETY: kill has no memory effects; the pid is our child's.
    unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success());
    reader.join().unwrap()
}

/// Everything in `dir` (what `up` made) is its owner's alone.
fn assert_owner_only(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    let mut made: Vec<(String, u32)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            (name, e.metadata().unwrap().mode() & 0o7777)
        })
        .collect();
    made.sort();
    assert_eq!(
        made,
        [
            ("mnt".to_string(), 0o700),
            ("switchyard.profile.toml".into(), 0o600),
            ("switchyard.store".into(), 0o600),
            ("switchyard.store.stats.json".into(), 0o600),
        ]
    );
}

#[test]
fn bench_mount_runs_every_job_and_workload_on_both_stores_the_floor_and_tmpfs() {
    let work = tempfile::tempdir().unwrap();
    let out = run(Command::new(bin())
        .args([
            "bench",
            "mount",
            "--quick",
            "--json",
            "--rounds",
            "1",
            "--seconds",
            "0.1",
            "--file-size",
            "4M",
            "--dir",
        ])
        .arg(work.path()));
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        8 + 1,
        "4 jobs buffered and direct, and a summary"
    );
    for j in &lines[..8] {
        for k in [
            "store_gib_s",
            "store_writeback_gib_s",
            "passthrough_gib_s",
            "tmpfs_gib_s",
            "vs_floor",
            "writeback_vs_strict",
        ] {
            assert!(j[k].as_f64().unwrap() > 0.0, "{k} in {j}");
        }
    }
    assert_eq!(lines[4]["direct"], true);
    let s = &lines[8];
    assert!(s["seq_1m_vs_floor_min"][0].as_f64().unwrap() > 0.0);
    assert!(s["randread_4k_vs_floor_min"][0].as_f64().unwrap() > 0.0);
    // The workloads (dbench too, where it is installed), each with a rate on every system.
    let workloads = s["workloads"].as_array().unwrap();
    assert!(workloads.len() >= 3, "{s}");
    for w in workloads {
        for k in ["store", "store_writeback", "tmpfs"] {
            assert!(w[k].as_f64().unwrap() > 0.0, "{k} in {w}");
        }
        if w["workload"] != "Dbench" {
            assert!(w["passthrough"].as_f64().unwrap() > 0.0, "{w}");
        }
    }
    // Both mounts are gone and the scratch directory is removed.
    assert!(!std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .contains("switchyard-bench-mount"));
    assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), 0);
}

/// Issue: a second `mount` of a mounted store (and `cp`, `ls`, `fsck`, `mkfs --force` on it)
/// ran, and the files written through the first mount were lost at the next remount.
#[test]
fn a_mounted_store_has_one_owner_and_loses_nothing() {
    let work = tempfile::tempdir().unwrap();
    let m = Mount::new(work.path());
    let pid = m.child.as_ref().unwrap().id();
    let m2 = work.path().join("m2");
    std::fs::create_dir(&m2).unwrap();
    let store = m.store.to_str().unwrap().to_owned();
    let refused: [&[&str]; 5] = [
        &["mount", "--store", &store, m2.to_str().unwrap()],
        &["fsck", "--store", &store],
        &["ls", "--store", &store, "/"],
        &["cp", "--store", &store, "/etc/hostname", "store:/h"],
        &["mkfs", "--force", "--size", "512M", "--store", &store],
    ];
    for args in refused {
        let mut c = Command::new(bin())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while c.try_wait().unwrap().is_none() {
            if t0.elapsed() > Duration::from_secs(20) {
                let _ = c.kill();
                let _ = Command::new("fusermount3").arg("-u").arg(&m2).status();
                panic!("{args:?} is running on a mounted store");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} ran on a mounted store");
        assert!(
            err.contains(&format!("in use by pid {pid} (switchyard mount")),
            "{args:?} names the owner: {err}"
        );
    }
    assert!(!mounted(&m2));
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    for i in 0..5 {
        std::fs::write(m.path(&format!("f{i}")), &data).unwrap();
    }
    let m = m.remount();
    for i in 0..5 {
        assert_eq!(std::fs::read(m.path(&format!("f{i}"))).unwrap(), data);
    }
    m.fsck();
}

/// Issue: an inode number the kernel still held (a working directory, an open directory) was
/// handed to the next new directory, which then failed with ENOENT.
#[test]
fn a_removed_directory_the_kernel_holds_keeps_its_number() {
    let work = tempfile::tempdir().unwrap();
    let m = Mount::new(work.path());
    use std::os::unix::fs::MetadataExt;
    // The shell's working directory is removed under it.
    run(Command::new("sh")
        .args([
            "-c",
            "mkdir old && cd old && rmdir ../old && mkdir ../new && touch ../new/x \
             && ! touch y 2>/dev/null",
        ])
        .current_dir(&m.dir));
    assert!(m.path("new/x").exists());
    // An open directory descriptor.
    std::fs::create_dir(m.path("o2")).unwrap();
    let held = std::fs::File::open(m.path("o2")).unwrap();
    let old_ino = held.metadata().unwrap().ino();
    std::fs::remove_dir(m.path("o2")).unwrap();
    std::fs::create_dir(m.path("n2")).unwrap();
    std::fs::write(m.path("n2/x"), b"x").unwrap();
    assert_ne!(std::fs::metadata(m.path("n2")).unwrap().ino(), old_ino);
    assert_eq!(held.metadata().unwrap().nlink(), 0);
    drop(held);
    // Many cycles while one removed directory stays open: its number is never reused.
    std::fs::create_dir(m.path("keep")).unwrap();
    let keep = std::fs::File::open(m.path("keep")).unwrap();
    let keep_ino = keep.metadata().unwrap().ino();
    std::fs::remove_dir(m.path("keep")).unwrap();
    for _ in 0..500 {
        std::fs::create_dir(m.path("c")).unwrap();
        assert_ne!(std::fs::metadata(m.path("c")).unwrap().ino(), keep_ino);
        std::fs::remove_dir(m.path("c")).unwrap();
    }
    drop(keep);
    m.fsck();
}

/// Issue: processes making and removing directories in one directory saw ENOENT for a
/// directory they had just made, and ESTALE. Each worker removes a directory it holds open
/// and makes a new one under its own names (every step must succeed), while all of them
/// contend for shared names (where only EEXIST, ENOENT and ENOTEMPTY are right).
#[test]
fn concurrent_mkdir_and_rmdir_see_only_posix_errors() {
    let work = tempfile::tempdir().unwrap();
    let m = Mount::new(work.path());
    let dir = m.dir.clone();
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let mut unexpected = Vec::new();
                for i in 0..400u32 {
                    let (old, new) = (dir.join(format!("old{w}")), dir.join(format!("new{w}")));
                    let own = (|| {
                        std::fs::create_dir(&old)?;
                        let held = std::fs::File::open(&old)?;
                        std::fs::remove_dir(&old)?;
                        std::fs::create_dir(&new)?;
                        std::fs::write(new.join("x"), b"x")?;
                        held.metadata()?;
                        std::fs::remove_file(new.join("x"))?;
                        std::fs::remove_dir(&new)
                    })();
                    if let Err(e) = own {
                        unexpected.push(format!("own names, round {i}: {e}"));
                        let _ = std::fs::remove_file(new.join("x"));
                        let _ = std::fs::remove_dir(&new);
                        let _ = std::fs::remove_dir(&old);
                    }
                    let d = dir.join(format!("d{}", (i + w) % 3));
                    let f = d.join(format!("f{w}"));
                    let r = match i % 4 {
                        0 => std::fs::create_dir(&d),
                        1 => std::fs::write(&f, b"x"),
                        2 => std::fs::remove_file(&f),
                        _ => std::fs::remove_dir(&d),
                    };
                    let e = errno(r);
                    if ![0, libc::EEXIST, libc::ENOENT, libc::ENOTEMPTY].contains(&e) {
                        unexpected.push(format!("shared names, op {}: errno {e}", i % 4));
                    }
                }
                unexpected
            })
        })
        .collect();
    for w in workers {
        let bad = w.join().unwrap();
        assert!(bad.is_empty(), "unexpected errors: {bad:?}");
    }
    m.fsck();
}

/// Issue: the store file was created world-readable, so any local user could read every file
/// stored in it. It is created owner-only, and one others can reach is refused (naming the
/// fix) unless the override is given, which warns.
#[test]
fn a_store_others_can_read_is_refused_unless_overridden() {
    use std::os::unix::fs::PermissionsExt;
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("s.store");
    run(Command::new("sh")
        .args([
            "-c",
            "umask 000 && exec \"$0\" mkfs --size 64M --store \"$1\"",
        ])
        .arg(bin())
        .arg(&store));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&store).unwrap().mode() & 0o777, 0o600);
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::create_dir(work.path().join("m")).unwrap();
    for cmd in [&["ls"][..], &["fsck"], &["mount", "m"]] {
        let out = Command::new(bin())
            .args(cmd)
            .arg("--store")
            .arg(&store)
            .current_dir(work.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{cmd:?} opened an exposed store");
        assert!(
            err.contains("mode 0644") && err.contains(&format!("chmod 600 {}", store.display())),
            "{cmd:?} names the fix: {err}"
        );
    }
    let out = Command::new(bin())
        .args(["ls", "--allow-exposed-store", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning: --allow-exposed-store"));
}

#[test]
fn bench_meta_measures_every_operation_on_every_system() {
    let work = tempfile::tempdir().unwrap();
    let out = run(Command::new(bin())
        .args([
            "bench",
            "meta",
            "--json",
            "--files",
            "50",
            "--rounds",
            "1",
            "--threads",
            "1,2",
            "--populations",
            "500",
            "--dir",
        ])
        .arg(work.path()));
    let records: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let cases: Vec<_> = records.iter().filter(|r| r.get("op").is_some()).collect();
    assert_eq!(cases.len(), 2 * 2 * 6, "threads × modes × operations");
    for r in &cases {
        for k in ["store_ops_s", "mount_ops_s", "tmpfs_ops_s"] {
            assert!(r[k].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    let summary = records.last().unwrap();
    assert!(summary["store_scaling_2_threads"].as_f64().unwrap() > 0.0);
    assert_eq!(summary["fresh_creates"]["threads"], 1);
    assert!(summary["fresh_creates"]["store_ops_s"].as_f64().unwrap() > 0.0);
    let pop = &summary["populations"][0];
    assert_eq!(pop["files"], 500);
    assert!(pop["clean_mount_s"].as_f64().unwrap() > 0.0);
    assert!(pop["recovery_s"].as_f64().unwrap() > 0.0);
    assert_eq!(
        std::fs::read_dir(work.path()).unwrap().count(),
        0,
        "the scratch directory is removed"
    );
}

/// A stop signal while files are open under the mount leaves it mounted and serving (as
/// umount(8) refuses a busy file system) instead of exiting and leaving a dead mount point;
/// once they are closed, the next signal unmounts cleanly.
#[test]
fn a_busy_mount_stays_mounted_until_it_can_unmount() {
    let work = tempfile::tempdir().unwrap();
    let mut m = Mount::new(work.path());
    std::fs::write(m.path("open"), b"still here").unwrap();
    let f = std::fs::File::open(m.path("open")).unwrap();
    let pid = m.child.as_ref().unwrap().id() as i32;
    // SAFETY: kill has no memory effects; the pid is our child's.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        m.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "the mount process exited while busy"
    );
    assert!(mounted(&m.dir));
    assert_eq!(std::fs::read(m.path("open")).unwrap(), b"still here");
    drop(f);
    m.fsck();
}

/// A user who may not open `/dev/fuse` (mode 0600, as on some machines) is told so, rather
/// than given a bare "Permission denied". Skipped where every user may open it (then the
/// mount goes through fusermount3) or where this test cannot run a program as another user.
#[test]
fn a_user_who_may_not_open_dev_fuse_is_told_why() {
    use common::{as_other_user, program_for_other_user, OTHER_USER};
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: running a program as another user needs root");
        return;
    }
    let open_to_user = as_other_user("test")
        .args(["-r", "/dev/fuse", "-a", "-w", "/dev/fuse"])
        .status()
        .unwrap()
        .success();
    if open_to_user {
        eprintln!("skipped: /dev/fuse is open to every user here");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let exe = program_for_other_user(d.path());
    std::fs::create_dir(d.path().join("mnt")).unwrap();
    std::os::unix::fs::chown(d.path().join("mnt"), Some(OTHER_USER), Some(OTHER_USER)).unwrap();
    run(as_other_user(&exe)
        .args(["mkfs", "--size", "64M"])
        .current_dir(d.path()));
    let out = as_other_user(&exe)
        .args(["mount", "mnt"])
        .current_dir(d.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "mounted: {err}");
    assert!(err.contains("/dev/fuse is not open to this user"), "{err}");
}
