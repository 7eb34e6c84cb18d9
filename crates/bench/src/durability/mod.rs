//! `switchyard bench sync`: what durability costs. Programs that `fsync` run on the store's
//! mount over a store file on a disk, and on that disk's own file system, in one run.
//!
//! Three targets, in interleaved rounds whose order rotates:
//!
//! - `store`: the store mounted with FUSE in this process (as `switchyard mount` does), its
//!   store file in the scratch directory, with the default sync policy (`--sync interval`):
//!   a background writer syncs every 5 s (the configuration's `store.sync_interval_ms`),
//!   and `fsync`, `fdatasync` and `syncfs` sync at once (an `msync` of the store file, then
//!   a write of the commit ring's anchor: about two disk flushes);
//! - `native`: the same workloads directly on the scratch directory's file system (ext4,
//!   say) — the same disk, the file system's own `fsync`;
//! - `store_always`: a second store mounted the same way with the sync policy `always`
//!   (`switchyard mount --sync always`): every operation is on the disk when it returns.
//!
//! The store files are written through (and synced) before they are formatted, as a long-used
//! store's would be, unless `--sparse`: in a sparse file every block the store takes for the
//! first time costs the disk file system an allocation at the next sync.
//!
//! The workloads:
//!
//! - `sqlite-delete`: sqlite3 with `PRAGMA synchronous=FULL` in its default rollback-journal
//!   mode (`journal_mode=DELETE`), one transaction at a time, each inserting one row of 100
//!   bytes; transactions per second. A commit writes and syncs the journal, writes and syncs
//!   the database and deletes the journal.
//! - `sqlite-wal`: the same with `journal_mode=WAL`: a commit appends to the write-ahead log
//!   and syncs it.
//! - `small-files`: as fs_mark does: create a file, write 16 KiB, `fsync`, close, over and
//!   over in one directory, then `fsync` the directory; files per second, the directory's
//!   `fsync` included.
//!
//! sqlite3 is the command-line tool, in a process of its own, set up (database, table,
//! journal mode) before the clock starts; each transaction goes to its standard input
//! followed by `.print`, whose line on its output says the commit has returned. The round
//! trip through the pipes (tens of µs) is in every target's figure alike, against
//! milliseconds for a commit that reaches a disk.
//!
//! Each target runs each workload for a fixed time per round in a fresh directory; then its
//! files are removed and everything is synced (both stores and the native file system)
//! before the next target starts, so that no target pays for another's writeback. The
//! figures are each target's median rate and median latency per operation, and the ratios
//! store ÷ native and store_always ÷ native, each the median of the ratios paired within a
//! round (with their range over rounds); for the stores also the syncs per operation, from
//! the store's own counter (which is why the stores are mounted through
//! [`switchyard_fuse::mount_inodes`], keeping a handle on each).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::{Args, ValueEnum};
use serde::Serialize;
use switchyard_media::{Granularity, Region};
use switchyard_mover::lab::{median, rotated};
use switchyard_mover::Mover;
use switchyard_store::{Owner, Store, SyncPolicy};

use crate::measure::{emit, file_system_of, Setup};
use workloads::{small_files, sqlite, sqlite_version};

mod workloads;

/// `bench sync` options.
#[derive(Args)]
pub struct SyncBenchArgs {
    /// Scratch directory on the disk to measure, for both store files and the native
    /// target's files, removed afterwards (default: the working directory). Not a memory
    /// file system: there is no disk to sync there.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Configuration file for the mover and the mounts (TOML).
    #[arg(long)]
    config: Option<PathBuf>,
    /// About 20 seconds: 3 rounds of 0.5 s per target and workload.
    #[arg(long)]
    quick: bool,
    /// Print one JSON record per workload (and a summary record) instead of the table.
    #[arg(long)]
    json: bool,
    /// Rounds (default 5; 3 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds each target runs a workload per round (default 2; 0.5 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Workloads, comma-separated (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    workloads: Option<Vec<Workload>>,
    /// FUSE request workers of both mounts (default: the configuration's `fuse.workers`).
    #[arg(long)]
    workers: Option<usize>,
    /// Leave the store files sparse, as `mkfs` makes them, instead of writing them through
    /// first as a long-used store would be: every block a store then takes for the first
    /// time costs the disk file system an allocation (and a journal commit) at the next sync.
    #[arg(long)]
    sparse: bool,
    /// Milliseconds between the `store` target's periodic syncs (default: the configuration's
    /// `store.sync_interval_ms`, 5000).
    #[arg(long)]
    sync_interval_ms: Option<u64>,
}

/// A program that makes its writes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// sqlite3, `synchronous=FULL`, rollback journal (`journal_mode=DELETE`).
    SqliteDelete,
    /// sqlite3, `synchronous=FULL`, write-ahead log (`journal_mode=WAL`).
    SqliteWal,
    /// Create, write 16 KiB, fsync, close; the directory fsynced at the end.
    SmallFiles,
}

const WORKLOADS: [Workload; 3] = [
    Workload::SqliteDelete,
    Workload::SqliteWal,
    Workload::SmallFiles,
];

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::SqliteDelete => "sqlite-delete",
            Workload::SqliteWal => "sqlite-wal",
            Workload::SmallFiles => "small-files",
        }
    }

    /// What one operation is.
    fn unit(self) -> &'static str {
        match self {
            Workload::SqliteDelete | Workload::SqliteWal => "transaction",
            Workload::SmallFiles => "file",
        }
    }

    /// sqlite3's journal mode, for the sqlite workloads.
    fn journal(self) -> Option<&'static str> {
        match self {
            Workload::SqliteDelete => Some("delete"),
            Workload::SqliteWal => Some("wal"),
            Workload::SmallFiles => None,
        }
    }
}

/// The targets, in measuring order of the first round.
const TARGETS: [&str; 3] = ["store", "native", "store_always"];
const STORE: usize = 0;
const NATIVE: usize = 1;
const ALWAYS: usize = 2;

/// Each store file's size.
const STORE_BYTES: u64 = 256 << 20;
/// Operations one target runs of a workload per round at most, so that a fast target stays
/// within the store (8,192 small files are 128 MiB; a round's files are removed after it).
const MAX_OPS: usize = 8192;
/// One workload's figures over every round.
#[derive(Debug, Clone, Serialize)]
struct Record {
    workload: Workload,
    /// What one operation is: `transaction` or `file`.
    unit: &'static str,
    /// Median operations per second.
    store_ops_s: f64,
    native_ops_s: f64,
    store_always_ops_s: f64,
    /// Median of per-round median latencies of one operation, ms.
    store_p50_ms: f64,
    native_p50_ms: f64,
    store_always_p50_ms: f64,
    /// Median syncs the store made per operation.
    store_syncs_per_op: f64,
    store_always_syncs_per_op: f64,
    /// Median over rounds of store ÷ native in the same round (above 1: the store is faster).
    store_vs_native: f64,
    /// Median over rounds of store_always ÷ native in the same round.
    always_vs_native: f64,
    /// The lowest and highest per-round store ÷ native.
    store_vs_native_range: (f64, f64),
    /// The lowest and highest per-round store_always ÷ native.
    always_vs_native_range: (f64, f64),
}

#[derive(Debug, Clone, Serialize)]
struct Summary {
    summary: bool,
    /// The machine, the engine and the store file's medium.
    setup: Setup,
    /// The native target's file system (the store files' too).
    native_fs: String,
    /// The disk under it (`vda`, `nvme0n1`), where found.
    disk: Option<String>,
    /// The disk's write cache (`write back` or `write through`, from
    /// `/sys/block/*/queue/write_cache`), where readable.
    write_cache: Option<String>,
    /// The `store` target's sync policy, in words.
    store_sync: String,
    /// Whether the store files were left sparse (`--sparse`).
    sparse: bool,
    /// sqlite3's version, where the sqlite workloads ran.
    sqlite: Option<String>,
    rounds: usize,
    seconds: f64,
    /// The lowest store ÷ native over the workloads, and where.
    store_vs_native_min: Option<(f64, Workload)>,
    /// The lowest store_always ÷ native over the workloads, and where.
    always_vs_native_min: Option<(f64, Workload)>,
}

/// One target's run of one workload in one round.
#[derive(Debug, Clone, Copy)]
struct Sample {
    ops_s: f64,
    p50_ms: f64,
    syncs_per_op: f64,
}

/// A target: a directory, and the store behind it if it is a mount.
struct Target {
    dir: PathBuf,
    store: Option<Arc<Store>>,
}

impl Target {
    /// The mount of `store` at `dir`.
    fn store(dir: PathBuf, store: &Arc<Store>) -> Target {
        Target {
            dir,
            store: Some(store.clone()),
        }
    }

    /// Syncs the store has completed since it mounted (0 for the native target).
    fn syncs(&self) -> u64 {
        self.store.as_ref().map_or(0, |s| s.syncs())
    }
}

/// Runs the benchmark.
pub fn run(a: &SyncBenchArgs) -> anyhow::Result<()> {
    let dir = a.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    let rounds = a.rounds.unwrap_or(if a.quick { 3 } else { 5 }).max(1);
    let secs = a.seconds.unwrap_or(if a.quick { 0.5 } else { 2.0 });
    if secs <= 0.0 {
        bail!("--seconds must be positive");
    }
    let workloads = a.workloads.clone().unwrap_or_else(|| WORKLOADS.to_vec());
    let sqlite = sqlite_for(&workloads)?;
    let (work, [native, mnt_store, mnt_always]) = scratch(&dir)?;

    let file = switchyard_config::Config::load_or_default(a.config.as_deref())?;
    let cfg = file.mover;
    let mover = Arc::new(Mover::start(&cfg)?);
    let fuse_cfg = switchyard_fuse::FuseConfig {
        workers: a.workers.unwrap_or(file.fuse.workers),
        ..file.fuse
    };
    let new_store = |name: &str, policy: SyncPolicy| {
        new_store(
            &work.path().join(name),
            &dir,
            a.sparse,
            &cfg,
            &mover,
            policy,
        )
    };
    let every = a.sync_interval_ms.unwrap_or(file.store.sync_interval_ms);
    if every == 0 {
        bail!("--sync-interval-ms must be at least 1");
    }
    let store = new_store(
        "store.region",
        SyncPolicy::Interval(Duration::from_millis(every)),
    )?;
    let always = new_store("store-always.region", SyncPolicy::Always)?;
    let store_mount = mount(&store, &mnt_store, &fuse_cfg)?;
    let always_mount = mount(&always, &mnt_always, &fuse_cfg)?;
    let targets = [
        Target::store(mnt_store, &store),
        Target {
            dir: native.clone(),
            store: None,
        },
        Target::store(mnt_always, &always),
    ];

    let setup = Setup::now(&cfg, store.region(), a.quick);
    let disk = Disk::of(&native);
    let store_sync = store.sync_policy().to_string();
    announce(
        &setup,
        [&store, &always],
        disk.as_ref(),
        work.path(),
        a.sparse,
        (rounds, secs, fuse_cfg.effective_workers()),
        sqlite.as_deref(),
    );

    let records = measure_all(&targets, &workloads, rounds, secs)?;
    drop(targets);
    unmount([store_mount, always_mount], [store, always])?;

    let summary = Summary {
        summary: true,
        native_fs: file_system_of(&native),
        setup,
        disk: disk.as_ref().map(|d| d.name.clone()),
        write_cache: disk.and_then(|d| d.write_cache),
        store_sync,
        sparse: a.sparse,
        sqlite,
        rounds,
        seconds: secs,
        store_vs_native_min: worst(&records, |r| r.store_vs_native),
        always_vs_native_min: worst(&records, |r| r.always_vs_native),
    };
    emit(a.json, &records, &summary, print_table)
}

/// A scratch directory in `dir`, and in it the native target's directory and the two
/// stores' mount points.
fn scratch(dir: &Path) -> anyhow::Result<(tempfile::TempDir, [PathBuf; 3])> {
    let work = tempfile::Builder::new()
        .prefix("switchyard-bench-sync.")
        .tempdir_in(dir)
        .with_context(|| format!("creating a scratch directory in {}", dir.display()))?;
    let sub = |name: &str| -> anyhow::Result<PathBuf> {
        let p = work.path().join(name);
        std::fs::create_dir(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(p)
    };
    let dirs = [sub("native")?, sub("mnt-store")?, sub("mnt-always")?];
    Ok((work, dirs))
}

/// sqlite3's version where `workloads` need it (none where they do not); an error that says
/// how to install it where it is missing.
fn sqlite_for(workloads: &[Workload]) -> anyhow::Result<Option<String>> {
    if !workloads.iter().any(|w| w.journal().is_some()) {
        return Ok(None);
    }
    let Some(v) = sqlite_version() else {
        bail!(
            "sqlite3 is needed for the sqlite workloads: install it (scripts/install-deps.sh \
             --test, or apt-get install sqlite3), or pass --workloads small-files"
        );
    };
    Ok(Some(v))
}

/// A store formatted in a new store file at `path` (in `dir`, on a disk file system), written
/// through first unless `sparse`, with sync policy `policy`.
fn new_store(
    path: &Path,
    dir: &Path,
    sparse: bool,
    cfg: &switchyard_mover::Config,
    mover: &Arc<Mover>,
    policy: SyncPolicy,
) -> anyhow::Result<Arc<Store>> {
    if !sparse {
        write_through(path, STORE_BYTES)?;
    }
    let region = Region::create(path, STORE_BYTES, cfg.persist())?;
    if region.granularity() == Granularity::Volatile {
        bail!(
            "{} is on a memory file system ({}): there is no disk to sync; pass --dir on a \
             disk file system",
            dir.display(),
            file_system_of(path)
        );
    }
    let store = Store::format(region, mover.clone(), Owner::current())?;
    store
        .set_sync_policy(policy)
        .map_err(|e| anyhow!("setting the sync policy of {}: {e}", path.display()))?;
    Ok(Arc::new(store))
}

/// Runs every workload of `workloads` on every target, `rounds` rounds of `secs` each, in
/// rotating order, with a progress bar: a record per workload.
fn measure_all(
    targets: &[Target; 3],
    workloads: &[Workload],
    rounds: usize,
    secs: f64,
) -> anyhow::Result<Vec<Record>> {
    let bar = indicatif::ProgressBar::new((workloads.len() * rounds * TARGETS.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} runs {msg} ({eta} left)")
            .expect("template")
            .progress_chars("=> "),
    );
    let mut runs = 0usize;
    let mut records = Vec::new();
    for &w in workloads {
        bar.set_message(w.name());
        let got = rotated(TARGETS.len(), rounds, |i| {
            runs += 1;
            let s = measure(targets, i, w, secs, runs);
            bar.inc(1);
            s.with_context(|| format!("{} on {}", w.name(), TARGETS[i]))
        })?;
        records.push(Record::of(w, &got));
    }
    bar.finish_and_clear();
    Ok(records)
}

/// Unmounts both mounts, then both stores (cleanly, where nothing else holds them).
fn unmount(mounts: [switchyard_fuse::Mount; 2], stores: [Arc<Store>; 2]) -> anyhow::Result<()> {
    for (m, what) in mounts.into_iter().zip(["the store", "the store_always"]) {
        m.unmount().with_context(|| format!("unmounting {what}"))?;
    }
    for s in stores {
        if let Ok(s) = Arc::try_unwrap(s) {
            s.unmount()
                .map_err(|e| anyhow!("unmounting a store cleanly: {e}"))?;
        }
    }
    Ok(())
}

/// Says on standard error what is measured, where and how.
fn announce(
    setup: &Setup,
    [store, always]: [&Store; 2],
    disk: Option<&Disk>,
    work: &Path,
    sparse: bool,
    (rounds, secs, workers): (usize, f64, usize),
    sqlite: Option<&str>,
) {
    eprintln!(
        "host: {}; engine: {}\nstore files on {} ({} medium, {}{}), disk {}, write cache {}; \
         in {}\nstore: sync {}; store_always: sync {}\n{} rounds × {} s per \
         target and workload; {} FUSE workers{}",
        setup.machine,
        setup.engine_line(),
        setup.media.fs,
        store.region().granularity().name(),
        setup.media.kind,
        if sparse {
            ", sparse"
        } else {
            ", written through"
        },
        disk.map_or("unknown", |d| &d.name),
        disk.and_then(|d| d.write_cache.as_deref())
            .unwrap_or("unknown"),
        work.display(),
        store.sync_policy(),
        always.sync_policy(),
        rounds,
        secs,
        workers,
        sqlite.map_or(String::new(), |v| format!("; sqlite3 {v}")),
    );
}

/// Mounts `s` on `at` with FUSE in this process, as `switchyard mount` does.
fn mount(
    s: &Arc<Store>,
    at: &Path,
    fuse_cfg: &switchyard_fuse::FuseConfig,
) -> anyhow::Result<switchyard_fuse::Mount> {
    switchyard_fuse::mount_inodes(
        s.clone(),
        at,
        fuse_cfg,
        switchyard_fuse::Access::Owner,
        false,
    )
    .with_context(|| format!("mounting a store on {}", at.display()))
}

/// Runs `w` on target `i` in a fresh directory (run number `n`), then removes its files and
/// syncs every target.
fn measure(
    targets: &[Target; 3],
    i: usize,
    w: Workload,
    secs: f64,
    n: usize,
) -> anyhow::Result<Sample> {
    let t = &targets[i];
    let dir = t.dir.join(format!("{}.{n}", w.name()));
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    settle(targets)?;
    let syncs = || t.syncs();
    let run = match w.journal() {
        Some(journal) => sqlite(&dir, journal, secs, &syncs)?,
        None => small_files(&dir, secs, &syncs)?,
    };
    std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    settle(targets)?;
    Ok(run)
}

/// Writes `len` bytes of zeros into a new owner-only store file at `path` and syncs them, so
/// that every block of it is allocated on the disk, as in a long-used store. The region opened
/// on it next drops the page cache this leaves (large folios that are not a long-used store's:
/// see `Region::open`).
fn write_through(path: &Path, len: u64) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let chunk = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])
            .with_context(|| format!("writing {}", path.display()))?;
        left -= n as u64;
    }
    f.sync_all()
        .with_context(|| format!("syncing {}", path.display()))
}

/// Makes every target's writes durable: each store syncs, and the native file system
/// (`syncfs`), so that no target's writeback is left to the next one's measurement.
fn settle(targets: &[Target; 3]) -> anyhow::Result<()> {
    for t in targets {
        match &t.store {
            Some(s) => s.sync().map_err(|e| anyhow!("syncing a store: {e}"))?,
            None => syncfs(&t.dir)?,
        }
    }
    Ok(())
}

fn syncfs(dir: &Path) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd;
    let d = File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    // SAFETY: `d` is an open descriptor for the duration of the call.
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("syncfs of {}", dir.display()));
    }
    Ok(())
}

/// The block device under a directory.
#[derive(Debug, Clone)]
struct Disk {
    /// Its name in `/sys/block` (the whole disk, not the partition).
    name: String,
    /// `write back` or `write through`, where readable.
    write_cache: Option<String>,
}

impl Disk {
    /// The disk that holds `dir`'s file system, from its device number through
    /// `/sys/dev/block`; `None` for file systems without one (tmpfs, overlay, network).
    fn of(dir: &Path) -> Option<Disk> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(dir).ok()?.dev();
        // Linux's encoding of device numbers (glibc's gnu_dev_major and gnu_dev_minor).
        let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff);
        let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0xff);
        let sys = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
        // A partition's queue is its disk's, one directory up.
        let disk = if sys.join("partition").exists() {
            sys.parent()?.to_path_buf()
        } else {
            sys
        };
        Some(Disk {
            name: disk.file_name()?.to_string_lossy().into_owned(),
            write_cache: std::fs::read_to_string(disk.join("queue/write_cache"))
                .ok()
                .map(|s| s.trim().to_string()),
        })
    }
}

impl Record {
    /// `w`'s figures from `got`, indexed `[target][round]`.
    fn of(w: Workload, got: &[Vec<Sample>]) -> Record {
        let med =
            |i: usize, f: fn(&Sample) -> f64| median(&mut got[i].iter().map(f).collect::<Vec<_>>());
        let ratios = |a: usize, b: usize| {
            let mut v: Vec<f64> = got[a]
                .iter()
                .zip(&got[b])
                .map(|(x, y)| x.ops_s / y.ops_s)
                .collect();
            let range = v
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                    (lo.min(x), hi.max(x))
                });
            (median(&mut v), range)
        };
        let (store_vs_native, store_vs_native_range) = ratios(STORE, NATIVE);
        let (always_vs_native, always_vs_native_range) = ratios(ALWAYS, NATIVE);
        Record {
            workload: w,
            unit: w.unit(),
            store_ops_s: med(STORE, |s| s.ops_s),
            native_ops_s: med(NATIVE, |s| s.ops_s),
            store_always_ops_s: med(ALWAYS, |s| s.ops_s),
            store_p50_ms: med(STORE, |s| s.p50_ms),
            native_p50_ms: med(NATIVE, |s| s.p50_ms),
            store_always_p50_ms: med(ALWAYS, |s| s.p50_ms),
            store_syncs_per_op: med(STORE, |s| s.syncs_per_op),
            store_always_syncs_per_op: med(ALWAYS, |s| s.syncs_per_op),
            store_vs_native,
            always_vs_native,
            store_vs_native_range,
            always_vs_native_range,
        }
    }
}

/// The lowest of `pick` over the records, and its workload.
fn worst(records: &[Record], pick: fn(&Record) -> f64) -> Option<(f64, Workload)> {
    records
        .iter()
        .map(|r| (pick(r), r.workload))
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

fn print_table(records: &[Record], s: &Summary) {
    let fs = &s.native_fs;
    println!(
        "{:<14} {:>11} {:>10} {:>10} {:>10} {:>12} {:>12} {:>22} {:>16}",
        "workload",
        "unit",
        format!("{fs} /s"),
        "store /s",
        "always /s",
        format!("store÷{fs}"),
        format!("always÷{fs}"),
        format!("p50 ms {fs}/store/always"),
        "syncs/op st/alw",
    );
    for r in records {
        println!(
            "{:<14} {:>11} {:>10.1} {:>10.1} {:>10.1} {:>12.3} {:>12.3} {:>22} {:>16}",
            r.workload.name(),
            r.unit,
            r.native_ops_s,
            r.store_ops_s,
            r.store_always_ops_s,
            r.store_vs_native,
            r.always_vs_native,
            format!(
                "{:.2}/{:.2}/{:.2}",
                r.native_p50_ms, r.store_p50_ms, r.store_always_p50_ms
            ),
            format!(
                "{:.1}/{:.1}",
                r.store_syncs_per_op, r.store_always_syncs_per_op
            ),
        );
    }
    println!();
    println!(
        "ratios are medians of per-round ratios over {} rounds of {} s; above 1 the store is \
         faster than {fs} on the same disk ({}, write cache {})",
        s.rounds,
        s.seconds,
        s.disk.as_deref().unwrap_or("unknown"),
        s.write_cache.as_deref().unwrap_or("unknown"),
    );
    for r in records {
        println!(
            "  {:<14} store÷{fs} {:.3}..{:.3}, always÷{fs} {:.3}..{:.3} over rounds",
            r.workload.name(),
            r.store_vs_native_range.0,
            r.store_vs_native_range.1,
            r.always_vs_native_range.0,
            r.always_vs_native_range.1,
        );
    }
    if let Some((v, w)) = s.store_vs_native_min {
        println!(
            "store (sync {}) ÷ {fs}: worst {v:.3} at {}",
            s.store_sync,
            w.name()
        );
    }
    if let Some((v, w)) = s.always_vs_native_min {
        println!("store (sync always) ÷ {fs}: worst {v:.3} at {}", w.name());
    }
}
