//! `switchyard bench meta`: metadata operations per second (mdtest / FxMark metadata style).
//!
//! Each round runs the same phases on three systems, in an order that rotates every round:
//!
//! - `store`: the store's POSIX-style API in this process (`Fs`), its region a file in the
//!   scratch directory;
//! - `mount`: the same kind of store mounted with FUSE in this process, through system calls;
//! - `tmpfs`: system calls on the scratch file system itself (tmpfs by default).
//!
//! With T threads, each thread makes N files, then stats them, opens and closes them,
//! renames them, lists their directory and unlinks them; in `private` mode each thread works
//! in a directory of its own, in `shared` mode all of them in one. A phase's rate is T × N
//! operations over its wall time (the listing: entries read per second). Every figure is the
//! median over rounds, and every ratio the median of the ratios paired within a round.
//!
//! Then, for stores holding 10^4, 10^5 and 10^6 empty files in directories of 1,000 (made in
//! process), the time to mount one after a clean unmount (median of 3) and after a crash (the
//! store file's bytes as they stood while it was mounted: every operation that had returned
//! is in them; recovery reads every log; one run, as the crash image is used up by it).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use switchyard_media::Region;
use switchyard_mover::lab::median;
use switchyard_mover::{Config, Mover};
use switchyard_store::{Fs, OpenFlags, Owner, Store};

use crate::measure::{emit, scratch_dir};

/// `bench meta` options.
#[derive(Args)]
pub struct MetaBenchArgs {
    /// Scratch directory for the stores' regions, the mount point and tmpfs's files, removed
    /// afterwards (default /dev/shm when it exists, else the working directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Configuration file for the mover (TOML).
    #[arg(long)]
    config: Option<PathBuf>,
    /// A short run: 2,000 files per thread, 3 rounds, stores of up to 100,000 files.
    #[arg(long)]
    quick: bool,
    /// Print one JSON record per case (and a summary record) instead of the table.
    #[arg(long)]
    json: bool,
    /// Files per thread (default 10,000; 2,000 with --quick).
    #[arg(long)]
    files: Option<usize>,
    /// Rounds (default 5; 3 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Thread counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Store populations for the mount and recovery times, comma-separated (default
    /// 10000,100000,1000000; 10000,100000 with --quick; 0 skips them).
    #[arg(long, value_delimiter = ',')]
    populations: Option<Vec<usize>>,
}

/// Mount times of a store holding `files` files.
#[derive(Debug, Serialize)]
struct Population {
    files: usize,
    /// Median of 3 mounts after a clean unmount, seconds.
    clean_mount_s: f64,
    /// One mount of the crash image (every log read and checked), seconds.
    recovery_s: f64,
    /// Bytes of the store file the files' logs and directories take.
    stored_bytes: u64,
}

/// Makes `files` empty files in directories of 1,000 (`/d0/f0`, …).
pub(crate) fn populate(fs: &Fs, files: usize) -> anyhow::Result<()> {
    let err = |e: switchyard_store::Errno| anyhow::anyhow!("making the population: {e}");
    for d in 0..files.div_ceil(1000) {
        fs.mkdir(&format!("/d{d}"), 0o755).map_err(err)?;
    }
    for i in 0..files {
        let fd = fs
            .open(&format!("/d{}/f{i}", i / 1000), OpenFlags::CREATE, 0o644)
            .map_err(err)?;
        fs.close(fd).map_err(err)?;
    }
    Ok(())
}

/// Writes a crash image of `region` to `to`: its bytes as they stand while mounted, copied
/// extent by extent (holes stay holes), private to the owner.
pub(crate) fn crash_image(region: &Region, to: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{FileExt, PermissionsExt};
    let out = std::fs::File::create(to)?;
    out.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    out.set_len(region.len() as u64)?;
    // SAFETY: the region is mapped for its length while the caller's store lives, and no
    // thread writes it while this copy reads it.
    let bytes = unsafe { std::slice::from_raw_parts(region.as_ptr(), region.len()) };
    for (at, n) in region.data_extents() {
        out.write_all_at(&bytes[at as usize..(at + n) as usize], at)
            .with_context(|| format!("writing the crash image {}", to.display()))?;
    }
    Ok(())
}

/// Makes a store of `files` empty files in directories of 1,000 in `dir`, and times its mounts.
fn population(
    dir: &std::path::Path,
    cfg: &Config,
    mover: &Arc<Mover>,
    files: usize,
) -> anyhow::Result<Population> {
    let len = (((files as u64 * 20) << 10) + (64 << 20)).next_multiple_of(2 << 20);
    let path = dir.join(format!("pop{files}.region"));
    let crashed = dir.join(format!("pop{files}.crashed"));
    let fs = Fs::new(Store::format(
        Region::create(&path, len, cfg.persist())?,
        mover.clone(),
        Owner::current(),
    )?);
    let err = |e: switchyard_store::Errno| anyhow::anyhow!("making the population: {e}");
    populate(&fs, files)?;
    let s = fs.statfs();
    let stored_bytes = (s.blocks - s.free_blocks) * s.block_size;
    crash_image(fs.store().region(), &crashed)?;
    fs.unmount().map_err(err)?;
    let mut clean = Vec::new();
    for _ in 0..3 {
        let t0 = Instant::now();
        let store = Store::mount(Region::open(&path, 0, cfg.persist())?, mover.clone())?;
        clean.push(t0.elapsed().as_secs_f64());
        anyhow::ensure!(
            store.mounted_quickly(),
            "a clean store mounted without its checkpoint"
        );
        store.unmount().map_err(err)?;
    }
    let t0 = Instant::now();
    let store = Store::mount(Region::open(&crashed, 0, cfg.persist())?, mover.clone())?;
    let recovery_s = t0.elapsed().as_secs_f64();
    anyhow::ensure!(!store.mounted_quickly(), "the crash image mounted as clean");
    store.unmount().map_err(err)?;
    std::fs::remove_file(&path)?;
    std::fs::remove_file(&crashed)?;
    Ok(Population {
        files,
        clean_mount_s: median(&mut clean),
        recovery_s,
        stored_bytes,
    })
}

/// The systems, in measuring order.
const SYSTEMS: [&str; 3] = ["store", "mount", "tmpfs"];
/// One phase of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Create,
    Stat,
    OpenClose,
    Rename,
    Readdir,
    Unlink,
}

/// The phases, in the order they run.
const OPS: [Op; 6] = [
    Op::Create,
    Op::Stat,
    Op::OpenClose,
    Op::Rename,
    Op::Readdir,
    Op::Unlink,
];

impl Op {
    /// Its name in the table and the JSON records.
    fn name(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Stat => "stat",
            Op::OpenClose => "open/close",
            Op::Rename => "rename",
            Op::Readdir => "readdir",
            Op::Unlink => "unlink",
        }
    }
}

/// Where one system's files go, and how its calls are made.
enum Target {
    /// The store's API in this process; paths are inside the store.
    InProcess(Box<Fs>),
    /// System calls under a directory (the mount, or tmpfs).
    Posix(PathBuf),
}

impl Target {
    fn mkdir(&self, p: &str) -> anyhow::Result<()> {
        match self {
            Target::InProcess(fs) => fs.mkdir(p, 0o755).map_err(|e| anyhow::anyhow!("{p}: {e}")),
            Target::Posix(root) => std::fs::create_dir(root.join(&p[1..])).context(p.to_owned()),
        }
    }

    fn rmdir(&self, p: &str) -> anyhow::Result<()> {
        match self {
            Target::InProcess(fs) => fs.rmdir(p).map_err(|e| anyhow::anyhow!("{p}: {e}")),
            Target::Posix(root) => std::fs::remove_dir(root.join(&p[1..])).context(p.to_owned()),
        }
    }

    /// One operation of phase `op` on file `name` in `dir` (renamed to `name.r`; unlinked
    /// under that name); the listing reads `dir` once. Returns the operations done.
    fn op(&self, op: Op, dir: &str, name: &str) -> anyhow::Result<usize> {
        let (p, q) = (format!("{dir}/{name}"), format!("{dir}/{name}.r"));
        let failed = |e: switchyard_store::Errno| anyhow::anyhow!("{} {p}: {e}", op.name());
        match self {
            Target::InProcess(fs) => match op {
                Op::Create => fs
                    .open(&p, OpenFlags::CREATE, 0o644)
                    .and_then(|fd| fs.close(fd))
                    .map_err(failed)?,
                Op::Stat => fs.stat(&p).map(|_| ()).map_err(failed)?,
                Op::OpenClose => fs
                    .open(&p, OpenFlags::READ, 0)
                    .and_then(|fd| fs.close(fd))
                    .map_err(failed)?,
                Op::Rename => fs.rename(&p, &q).map_err(failed)?,
                Op::Unlink => fs.unlink(&q).map_err(failed)?,
                Op::Readdir => return Ok(fs.readdir(dir).map_err(failed)?.len()),
            },
            Target::Posix(root) => {
                let (p, q) = (root.join(&p[1..]), root.join(&q[1..]));
                match op {
                    Op::Create => {
                        std::fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .open(&p)
                            .with_context(|| format!("create {}", p.display()))?;
                    }
                    Op::Stat => {
                        std::fs::metadata(&p).with_context(|| format!("stat {}", p.display()))?;
                    }
                    Op::OpenClose => {
                        std::fs::File::open(&p).with_context(|| format!("open {}", p.display()))?;
                    }
                    Op::Rename => std::fs::rename(&p, &q)
                        .with_context(|| format!("rename {}", p.display()))?,
                    Op::Unlink => std::fs::remove_file(&q)
                        .with_context(|| format!("unlink {}", q.display()))?,
                    Op::Readdir => {
                        let d = root.join(&dir[1..]);
                        return Ok(std::fs::read_dir(&d)
                            .with_context(|| format!("readdir {}", d.display()))?
                            .count());
                    }
                }
            }
        }
        Ok(1)
    }
}

/// One system's rates in one round: operations per second by phase.
type Rates = [f64; OPS.len()];

/// Runs every phase once on `t` with `threads` threads of `files` files each.
fn round(
    t: &Target,
    threads: usize,
    files: usize,
    shared: bool,
    tag: usize,
) -> anyhow::Result<Rates> {
    let dirs: Vec<String> = (0..threads)
        .map(|k| {
            if shared {
                format!("/r{tag}")
            } else {
                format!("/r{tag}-{k}")
            }
        })
        .collect();
    let mut made = dirs.clone();
    made.dedup();
    for d in &made {
        t.mkdir(d)?;
    }
    let mut rates = [0.0; OPS.len()];
    for (i, &op) in OPS.iter().enumerate() {
        let t0 = Instant::now();
        let done: usize = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|k| {
                    let dir = &dirs[k];
                    s.spawn(move || -> anyhow::Result<usize> {
                        if op == Op::Readdir {
                            return t.op(op, dir, "");
                        }
                        for f in 0..files {
                            t.op(op, dir, &format!("t{k}f{f}"))?;
                        }
                        Ok(files)
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("benchmark thread"))
                .sum::<anyhow::Result<usize>>()
        })?;
        rates[i] = done as f64 / t0.elapsed().as_secs_f64();
    }
    for d in &made {
        t.rmdir(d)?;
    }
    Ok(rates)
}

/// One case's figures.
#[derive(Debug, Serialize)]
struct Record {
    threads: usize,
    mode: &'static str,
    op: &'static str,
    /// Median operations per second of each system (the listing: entries per second).
    store_ops_s: f64,
    mount_ops_s: f64,
    tmpfs_ops_s: f64,
    /// Medians of per-round ratios.
    store_vs_tmpfs: f64,
    mount_vs_tmpfs: f64,
}

/// How the run was set up, and the one-thread create/stat/unlink ratios and the two-thread
/// scaling of the store in process that the issue's targets name.
#[derive(Debug, Serialize)]
struct Summary {
    summary: bool,
    files_per_thread: usize,
    rounds: usize,
    scratch: String,
    store_scaling_2_threads: Option<f64>,
    /// Creates in round 1 of the first case, on the freshly formatted store whose every log
    /// page is a first touch: the medians are a store in use, which reuses pages the kernel
    /// has already given it.
    fresh_creates: Option<FreshCreates>,
    /// Mount and recovery times by population.
    populations: Vec<Population>,
}

/// Creates per second in the first round of the first case (private directories).
#[derive(Debug, Serialize, Clone, Copy)]
struct FreshCreates {
    threads: usize,
    store_ops_s: f64,
    tmpfs_ops_s: f64,
}

/// Runs `bench meta`.
pub fn run(a: &MetaBenchArgs) -> anyhow::Result<()> {
    let (files, rounds) = counts(a)?;
    let work = tempfile::Builder::new()
        .prefix("switchyard-bench-meta.")
        .tempdir_in(scratch_dir(&a.dir))
        .context("making the scratch directory")?;
    let file = switchyard_config::Config::load_or_default(a.config.as_deref())?;
    let cfg = file.mover;
    let mover = Arc::new(Mover::start(&cfg)?);
    // An inode slot per 16 KiB of region: room for every file with a quarter to spare (and
    // so for its log page and the directories' logs).
    let most = a.threads.iter().max().copied().unwrap_or(1) * files;
    let region_len = (((most as u64 * 20) << 10) + (64 << 20)).next_multiple_of(2 << 20);
    let format = |name: &str| -> anyhow::Result<Store> {
        let region = Region::create(work.path().join(name), region_len, cfg.persist())?;
        Ok(Store::format(region, mover.clone(), Owner::current())?)
    };
    let in_process = Target::InProcess(Box::new(Fs::new(format("store.region")?)));
    let mnt = work.path().join("mnt");
    let tmpfs = work.path().join("tmpfs");
    std::fs::create_dir(&mnt)?;
    std::fs::create_dir(&tmpfs)?;
    let mount = switchyard_fuse::mount(
        format("mount.region")?,
        &mnt,
        &file.fuse,
        switchyard_fuse::Access::Owner,
    )
    .with_context(|| format!("mounting on {}", mnt.display()))?;
    let targets = [in_process, Target::Posix(mnt.clone()), Target::Posix(tmpfs)];
    eprintln!(
        "scratch in {}; {files} files per thread, {rounds} rounds, threads {:?}",
        work.path().display(),
        a.threads
    );
    let mut records = Vec::new();
    let mut tag = 0;
    let mut store_1 = None;
    let mut store_2 = None;
    let mut fresh = None;
    for &threads in &a.threads {
        for (mode, shared) in [("private", false), ("shared", true)] {
            let got = switchyard_mover::lab::rotated(SYSTEMS.len(), rounds, |i| {
                tag += 1;
                round(&targets[i], threads, files, shared, tag)
            })?;
            for (k, &op) in OPS.iter().enumerate() {
                let med = |i: usize| median_of(&got[i], k);
                if !shared && op == Op::Create {
                    fresh = fresh.or(Some(FreshCreates {
                        threads,
                        store_ops_s: got[0][0][k],
                        tmpfs_ops_s: got[2][0][k],
                    }));
                    match threads {
                        1 => store_1 = Some(med(0)),
                        2 => store_2 = Some(med(0)),
                        _ => {}
                    }
                }
                records.push(record(threads, mode, op, &got, k));
            }
        }
    }
    drop(targets);
    mount.unmount().context("unmounting")?;
    let populations = populations(a, work.path(), &cfg, &mover)?;
    let summary = Summary {
        summary: true,
        files_per_thread: files,
        rounds,
        scratch: scratch_dir(&a.dir).display().to_string(),
        store_scaling_2_threads: store_1.zip(store_2).map(|(one, two)| two / one),
        fresh_creates: fresh,
        populations,
    };
    emit(a.json, &records, &summary, print_table)
}

/// Files per thread and rounds, checked (with the thread counts).
fn counts(a: &MetaBenchArgs) -> anyhow::Result<(usize, usize)> {
    let files = a.files.unwrap_or(if a.quick { 2_000 } else { 10_000 });
    let rounds = a.rounds.unwrap_or(if a.quick { 3 } else { 5 });
    anyhow::ensure!(
        files > 0 && rounds > 0,
        "--files and --rounds must be at least 1"
    );
    anyhow::ensure!(
        a.threads.iter().all(|&t| (1..=64).contains(&t)),
        "--threads takes counts from 1 to 64"
    );
    Ok((files, rounds))
}

/// Stores of as many files as `--populations` says, each made, then mounted clean and after
/// a crash.
fn populations(
    a: &MetaBenchArgs,
    dir: &std::path::Path,
    cfg: &Config,
    mover: &Arc<Mover>,
) -> anyhow::Result<Vec<Population>> {
    let sizes = a.populations.clone().unwrap_or(if a.quick {
        vec![10_000, 100_000]
    } else {
        vec![10_000, 100_000, 1_000_000]
    });
    let mut populations = Vec::new();
    for n in sizes.into_iter().filter(|&n| n > 0) {
        eprintln!("a store of {n} files: making it, then mounting it clean and after a crash");
        populations.push(population(dir, cfg, mover, n)?);
    }
    Ok(populations)
}

/// The median over rounds of operation `k`'s rate in `got` (one system's rounds).
fn median_of(got: &[Rates], k: usize) -> f64 {
    median(&mut got.iter().map(|r| r[k]).collect::<Vec<_>>())
}

/// The record of operation `op` (the `k`th) on `threads` threads in `mode`: each system's
/// median rate in `got`, and the stores' medians of ratios to tmpfs in the same round.
fn record(threads: usize, mode: &'static str, op: Op, got: &[Vec<Rates>], k: usize) -> Record {
    let med = |i: usize| median_of(&got[i], k);
    let ratio = |i: usize| {
        median(
            &mut got[i]
                .iter()
                .zip(&got[2])
                .map(|(a, b)| a[k] / b[k])
                .collect::<Vec<_>>(),
        )
    };
    Record {
        threads,
        mode,
        op: op.name(),
        store_ops_s: med(0),
        mount_ops_s: med(1),
        tmpfs_ops_s: med(2),
        store_vs_tmpfs: ratio(0),
        mount_vs_tmpfs: ratio(1),
    }
}

fn print_table(records: &[Record], s: &Summary) {
    println!(
        "{:>7} {:>7} {:>10} {:>12} {:>12} {:>12} {:>13} {:>13}",
        "threads",
        "mode",
        "op",
        "store op/s",
        "mount op/s",
        "tmpfs op/s",
        "store÷tmpfs",
        "mount÷tmpfs"
    );
    for r in records {
        println!(
            "{:>7} {:>7} {:>10} {:>12.0} {:>12.0} {:>12.0} {:>13.3} {:>13.3}",
            r.threads,
            r.mode,
            r.op,
            r.store_ops_s,
            r.mount_ops_s,
            r.tmpfs_ops_s,
            r.store_vs_tmpfs,
            r.mount_vs_tmpfs
        );
    }
    println!(
        "{} files per thread, {} rounds, scratch {}; medians over rounds, ratios paired per round",
        s.files_per_thread, s.rounds, s.scratch
    );
    if let Some(x) = s.store_scaling_2_threads {
        println!("store creates in process, 2 threads ÷ 1 thread (private directories): {x:.2}");
    }
    if let Some(f) = s.fresh_creates {
        println!(
            "round 1 on the freshly formatted store ({} thread(s), private): creates/s store {:.0}, tmpfs {:.0}, store÷tmpfs {:.3}",
            f.threads,
            f.store_ops_s,
            f.tmpfs_ops_s,
            f.store_ops_s / f.tmpfs_ops_s
        );
    }
    for p in &s.populations {
        println!(
            "{:>8} files ({} stored): mount after a clean unmount {:.3} s, after a crash {:.3} s",
            p.files,
            switchyard_options::size::show(p.stored_bytes),
            p.clean_mount_s,
            p.recovery_s
        );
    }
}
