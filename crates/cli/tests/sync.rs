//! A store file on a disk file system through `switchyard mount`: what a program's sync
//! reaches. The page cache sits between the store's mapping and the disk, so a page the store
//! wrote stays dirty in the mount's mapping of the store file until a sync writes it back;
//! each test reads the mapping's dirty kilobytes from `/proc/<mount>/smaps` after the
//! program's call returned. Every mount here syncs on its own only once an hour (or before
//! every operation, with `--sync always`), so a clean mapping is the call's doing.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{bin, run, wait_mounted, Mount};

/// A mapping this dirty after a sync returned failed to write the store back (the issue saw
/// 34 MB after `dd conv=fsync` of 32 MiB).
const CLEAN_KB: u64 = 1024;

/// Without a sync, 32 MiB of new data leaves at least this much of the mapping dirty: the
/// measure sees what a sync must clean.
const DIRTY_KB: u64 = 8 * 1024;

/// No periodic sync during a test.
const HOURLY: &str = "3600000";

/// Whether `dir` lies on a file system that keeps everything in memory (tmpfs, ramfs): a
/// store there has no disk and no dirty pages to write back, and the tests have nothing to
/// measure.
fn in_memory(dir: &Path) -> bool {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statfs is plain data, filled by the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable statfs.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    matches!(st.f_type as i64, TMPFS_MAGIC | RAMFS_MAGIC)
}

/// A scratch directory on a disk file system, or `None` (said on stderr) where the temporary
/// directory is in memory.
fn disk_dir() -> Option<tempfile::TempDir> {
    let d = tempfile::tempdir().unwrap();
    if in_memory(d.path()) {
        eprintln!(
            "skipped: {} is on a memory file system; a store there has nothing to sync",
            d.path().display()
        );
        return None;
    }
    Some(d)
}

/// Kilobytes of process `pid`'s mappings of `file` that are dirty.
fn dirty_kb(pid: u32, file: &Path) -> u64 {
    switchyard_media::dirty_kb(pid, file)
        .unwrap_or_else(|| panic!("process {pid} does not map {}", file.display()))
}

/// `dd` with `args`, which must succeed.
fn dd(args: &[&str]) {
    run(Command::new("dd").args(args).arg("status=none"));
}

/// 32 MiB of random bytes at `work/name`, on the disk beside the store.
fn random_source(work: &Path, name: &str) -> PathBuf {
    let p = work.join(name);
    dd(&[
        "if=/dev/urandom",
        &format!("of={}", p.display()),
        "bs=1M",
        "count=32",
    ]);
    p
}

/// Copies `from` into the mount at `to` with `dd` and `flags` (`conv=fsync`, `oflag=dsync`).
fn copy_in(from: &Path, to: &Path, flags: &[&str]) {
    let mut args = vec![
        format!("if={}", from.display()),
        format!("of={}", to.display()),
        "bs=1M".to_string(),
    ];
    args.extend(flags.iter().map(|f| f.to_string()));
    dd(&args.iter().map(String::as_str).collect::<Vec<_>>());
}

fn assert_same(a: &Path, b: &Path) {
    assert!(
        std::fs::read(a).unwrap() == std::fs::read(b).unwrap(),
        "{} does not read back as {} was written",
        b.display(),
        a.display()
    );
}

/// The issue: `dd conv=fsync` of 32 MiB into the mount returned with the store file's pages
/// still dirty in the page cache (34 MB in the mount's mapping), so a power cut right after
/// fsync lost what fsync had acknowledged. Now fsync writes them back before it returns:
/// the file written without it too (fsync makes every operation durable), and the data reads
/// back, across a clean remount as well.
#[test]
fn fsync_through_the_mount_writes_the_store_file_back_before_it_returns() {
    let Some(work) = disk_dir() else { return };
    let m = Mount::with_args(work.path(), &["--sync-interval-ms", HOURLY]);
    let pid = m.child.as_ref().unwrap().id();
    let (a, b) = (
        random_source(work.path(), "a"),
        random_source(work.path(), "b"),
    );
    copy_in(&a, &m.path("unsynced"), &[]);
    let before = dirty_kb(pid, &m.store);
    assert!(
        before >= DIRTY_KB,
        "without fsync only {before} kB of the store file are dirty: the measure sees nothing"
    );
    copy_in(&b, &m.path("f"), &["conv=fsync"]);
    let after = dirty_kb(pid, &m.store);
    assert!(
        after < CLEAN_KB,
        "{after} kB of the store file still dirty after `dd conv=fsync` returned"
    );
    assert_same(&b, &m.path("f"));
    assert_same(&a, &m.path("unsynced"));
    let m = m.remount();
    assert_same(&b, &m.path("f"));
    assert_same(&a, &m.path("unsynced"));
    m.fsck();
}

/// The kernel marks a write of an `O_DSYNC` or `O_SYNC` open in its request: such a write
/// returns synced, whether it went through the page cache (the kernel then also sends an
/// fsync) or not (`O_DIRECT`: the kernel sends no fsync). An fsync of a directory (`sync
/// DIR`) syncs too.
#[test]
fn o_sync_writes_and_directory_fsync_return_synced() {
    let Some(work) = disk_dir() else { return };
    let m = Mount::with_args(work.path(), &["--sync-interval-ms", HOURLY]);
    let pid = m.child.as_ref().unwrap().id();
    let src = random_source(work.path(), "src");
    for (name, flags) in [
        ("dsync", ["oflag=dsync"]),
        ("sync", ["oflag=sync"]),
        ("direct-sync", ["oflag=direct,sync"]),
    ] {
        copy_in(&src, &m.path(name), &flags);
        let kb = dirty_kb(pid, &m.store);
        assert!(kb < CLEAN_KB, "{kb} kB dirty after `dd {flags:?}` returned");
        assert_same(&src, &m.path(name));
    }
    std::fs::create_dir(m.path("d")).unwrap();
    copy_in(&src, &m.path("d/plain"), &[]);
    assert!(dirty_kb(pid, &m.store) >= DIRTY_KB);
    run(Command::new("sync").arg(m.path("d")));
    let kb = dirty_kb(pid, &m.store);
    assert!(kb < CLEAN_KB, "{kb} kB dirty after `sync DIR` returned");
    m.fsck();
}

/// `mount --sync always`: every write returns synced, with no fsync asked for.
#[test]
fn a_mount_that_syncs_always_leaves_nothing_dirty() {
    let Some(work) = disk_dir() else { return };
    let m = Mount::with_args(work.path(), &["--sync", "always"]);
    let pid = m.child.as_ref().unwrap().id();
    let src = random_source(work.path(), "src");
    copy_in(&src, &m.path("f"), &[]);
    let kb = dirty_kb(pid, &m.store);
    assert!(kb < CLEAN_KB, "{kb} kB dirty after plain writes returned");
    assert_same(&src, &m.path("f"));
    m.fsck();
}

/// A `switchyard` process started by a test, killed (and its mount point unmounted) when
/// dropped.
struct Started {
    child: Child,
    dir: PathBuf,
    /// The lines it printed before it said how to stop it.
    banner: String,
}

impl Started {
    /// Runs `switchyard args…` in `cwd` until it has mounted `dir` and printed its start-up
    /// lines.
    fn mount(cwd: &Path, args: &[&str], dir: &Path) -> Started {
        let mut child = Command::new(bin())
            .args(args)
            .current_dir(cwd)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut banner = String::new();
        loop {
            let mut line = String::new();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "{args:?} ended: {banner}"
            );
            if line.starts_with("stop with") {
                break;
            }
            banner.push_str(&line);
        }
        // Keep reading, so its last words at exit find the pipe open.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        wait_mounted(dir);
        Started {
            child,
            dir: dir.to_owned(),
            banner,
        }
    }

    /// SIGTERM, and a clean exit.
    fn stop(mut self) {
        // SAFETY: kill has no memory effects; the pid is our child's.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        assert!(self.child.wait().unwrap().success());
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.dir)
                .status();
        }
    }
}

/// The page medium's guarantee in words (`Granularity::guarantee`), as a banner shows it.
const PAGE_GUARANTEE: &str = "a power cut once fsync (or the store's periodic sync) returns";

/// `mount` and `up` say at start what survives a power cut on the store's medium and the
/// sync policy in effect (the configuration's, or their flags'); `stat` says it of the store
/// (under the configuration) and of the last run, whose counters a mount saves while it runs;
/// `config` shows the keys; out-of-range values are refused.
#[test]
fn mount_up_stat_and_config_show_the_guarantee_and_the_sync_policy() {
    let Some(work) = disk_dir() else { return };
    let w = work.path();
    std::fs::write(w.join("c.toml"), "[store]\nsync_interval_ms = 60000\n").unwrap();
    run(Command::new(bin())
        .args(["mkfs", "--size", "256M", "--store", "s.store"])
        .current_dir(w));
    std::fs::create_dir(w.join("mnt")).unwrap();
    let m = Started::mount(
        w,
        &["mount", "--store", "s.store", "--config", "c.toml", "mnt"],
        &w.join("mnt"),
    );
    for want in [
        "medium: page granularity: ",
        PAGE_GUARANTEE,
        "sync policy: every 60000 ms, and on fsync",
    ] {
        assert!(m.banner.contains(want), "{want}: {}", m.banner);
    }
    // Held by the mount, the store file cannot be opened: the counters the mount saves at
    // its start (and every few seconds) say.
    let t0 = std::time::Instant::now();
    loop {
        let stat = run(Command::new(bin())
            .args(["stat", "--store", "s.store"])
            .current_dir(w));
        if stat.contains("sync policy: every 60000 ms, and on fsync")
            && stat.contains(PAGE_GUARANTEE)
        {
            break;
        }
        assert!(t0.elapsed().as_secs() < 10, "{stat}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    m.stop();
    check_stat_of_the_unmounted_store(w);

    check_up_sync_always(w);

    check_sync_defaults_and_refusals(w);
}

/// `stat` of the store the mount left shows the guarantee and the policy, in text and JSON
/// (the last run's policy, and the default one without the configuration file).
fn check_stat_of_the_unmounted_store(w: &Path) {
    let stat = run(Command::new(bin())
        .args(["stat", "--store", "s.store", "--config", "c.toml"])
        .current_dir(w));
    for want in [
        "medium: page granularity: ",
        PAGE_GUARANTEE,
        "sync policy: every 60000 ms, and on fsync",
    ] {
        assert!(stat.contains(want), "{want}: {stat}");
    }
    let json: serde_json::Value = serde_json::from_str(&run(Command::new(bin())
        .args(["stat", "--store", "s.store", "--json"])
        .current_dir(w)))
    .unwrap();
    assert_eq!(json["durability"]["granularity"], "page", "{json}");
    assert_eq!(
        json["durability"]["sync"], "every 5000 ms, and on fsync",
        "{json}"
    );
    assert_eq!(
        json["last_run"]["durability"]["sync"], "every 60000 ms, and on fsync",
        "{json}"
    );
}

/// `up` (without a profile: no tune behind the mount) with `--sync always` over the
/// configuration file's interval says so.
fn check_up_sync_always(w: &Path) {
    // `up` (without a profile: no tune behind the mount) with the flag over the file.
    let up = Started::mount(
        w,
        &[
            "up",
            "--store",
            "s.store",
            "--no-profile",
            "--config",
            "c.toml",
            "--sync",
            "always",
        ],
        &w.join("mnt"),
    );
    assert!(
        up.banner
            .contains("sync policy: always (before every operation returns)"),
        "{}",
        up.banner
    );
    up.stop();
}

/// `config` shows the sync defaults; bad sync options and intervals are refused, each saying
/// which.
fn check_sync_defaults_and_refusals(w: &Path) {
    let config = run(Command::new(bin())
        .args(["config", "--no-profile"])
        .current_dir(w));
    for want in [
        "sync = \"interval\"  # default",
        "sync_interval_ms = 5000  # default",
    ] {
        assert!(config.contains(want), "{want}: {config}");
    }
    for (args, why) in [
        (
            &["mount", "--sync-interval-ms", "0", "mnt"][..],
            "--sync-interval-ms",
        ),
        (&["mount", "--sync", "sometimes", "mnt"][..], "sometimes"),
        (
            &[
                "mount",
                "--store",
                "s.store",
                "--sync",
                "always",
                "--sync-interval-ms",
                "10",
                "mnt",
            ][..],
            "--sync-interval-ms is for --sync interval",
        ),
        (
            &[
                "mount",
                "--remote",
                "127.0.0.1:1",
                "--sync",
                "always",
                "mnt",
            ][..],
            "--sync",
        ),
    ] {
        let out = Command::new(bin())
            .args(args)
            .current_dir(w)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(why),
            "{args:?}: {err}"
        );
    }
    std::fs::write(w.join("zero.toml"), "[store]\nsync_interval_ms = 0\n").unwrap();
    let out = Command::new(bin())
        .args([
            "mount",
            "--store",
            "s.store",
            "--config",
            "zero.toml",
            "mnt",
        ])
        .current_dir(w)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("store.sync_interval_ms"),
        "{err}"
    );
}
