//! `switchyard bench mount`: the store through FUSE against FUSE's own cost, in one run.
//!
//! The same fio jobs, and then the workloads of its `workloads` module (dbench, one-byte
//! writes, 4 KiB appends, create/stat/unlink), run on four file systems, in interleaved rounds
//! whose order rotates:
//!
//! - `store`: the store mounted with FUSE in this process (as `switchyard mount --strict`
//!   does), its region a file in the scratch directory;
//! - `store-writeback`: a second store mounted the same way with the kernel's writeback cache
//!   (`switchyard mount --writeback`);
//! - `passthrough`: a minimal FUSE file system that forwards every request to a directory of
//!   the scratch file system — same library, mount options, request sizes, workers and
//!   page-cache policy as the store's mount. This is the FUSE floor: what any FUSE file
//!   system pays before it does any work of its own;
//! - `tmpfs`: fio directly on the scratch file system (tmpfs by default), with no FUSE.
//!
//! Each job runs buffered (the page cache serves repeated reads; writes go through to the
//! file system) and with `O_DIRECT` (every request reaches the file system). The figures are
//! each system's median GiB/s and fio's median completion latency, store ÷ passthrough (the
//! store's own cost on top of FUSE), passthrough ÷ tmpfs (FUSE's cost) and writeback ÷
//! strict, each the median of ratios paired within a round; for the workloads, each system's
//! median rate and each mode of the store ÷ tmpfs.
//!
//! The store's region is written through once before it is formatted, as a long-running
//! store's region would be: on a memory file system the first touch of a page costs a page
//! allocation that slow memory does not have, and copy-on-write spreads writes over the
//! whole region. fio lays out its files before the first round for the same reason.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;
use switchyard_media::Region;
use switchyard_mover::Mover;
use switchyard_store::{Owner, Store};

mod workloads;

use crate::fio;
use crate::measure::{emit, scratch_dir, Measured, Rounds};
use switchyard_options::size;
use workloads::Workload;

/// `bench mount` options.
#[derive(Args)]
pub struct MountBenchArgs {
    /// Scratch directory for the store's region, the passthrough's files, tmpfs's files and
    /// the mount points, removed afterwards (default /dev/shm when it exists, else the
    /// working directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Configuration file for the mover (TOML).
    #[arg(long)]
    config: Option<PathBuf>,
    /// About 2 minutes: 1M sequential reads and writes and 4K random reads and writes, 3
    /// rounds of 1 s.
    #[arg(long)]
    quick: bool,
    /// Print one JSON record per job (and a summary record) instead of the table.
    #[arg(long)]
    json: bool,
    /// Rounds per job (default 3).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds each system runs per round (default 2; 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Size of each fio job's file (default 256M).
    #[arg(long, value_parser = size::parse)]
    file_size: Option<u64>,
    /// fio jobs (threads) per run, each on its own file (default 1).
    #[arg(long)]
    jobs: Option<usize>,
    /// FUSE request workers of both mounts (default: one per core, at least 2).
    #[arg(long)]
    workers: Option<usize>,
}

/// One fio job shape.
#[derive(Debug, Clone, Copy, Serialize)]
struct Shape {
    rw: &'static str,
    bs: u64,
    direct: bool,
}

impl Shape {
    fn label(&self) -> String {
        format!(
            "{} {}{}",
            self.rw,
            size::show(self.bs),
            if self.direct { " direct" } else { "" }
        )
    }
}

const SYSTEMS: [&str; 4] = ["store", "store-writeback", "passthrough", "tmpfs"];
/// Indices into [`SYSTEMS`].
const STORE: usize = 0;
const WRITEBACK: usize = 1;
const FLOOR: usize = 2;
const TMPFS: usize = 3;

/// One job: every system's medians and the paired ratios.
#[derive(Debug, Clone, Serialize)]
struct Record {
    #[serde(flatten)]
    shape: Shape,
    store_gib_s: f64,
    store_writeback_gib_s: f64,
    passthrough_gib_s: f64,
    tmpfs_gib_s: f64,
    store_p50_us: f64,
    store_writeback_p50_us: f64,
    passthrough_p50_us: f64,
    tmpfs_p50_us: f64,
    /// Median over rounds of store ÷ passthrough in the same round.
    vs_floor: f64,
    /// Median over rounds of passthrough ÷ tmpfs in the same round.
    floor_vs_tmpfs: f64,
    /// Median over rounds of the writeback store ÷ the strict one in the same round.
    writeback_vs_strict: f64,
}

/// One workload: every system's median rate and the store's ÷ tmpfs's.
#[derive(Debug, Clone, Serialize)]
struct WorkloadRecord {
    workload: Workload,
    unit: &'static str,
    store: f64,
    store_writeback: f64,
    /// The FUSE floor's rate, where it runs the workload.
    passthrough: Option<f64>,
    tmpfs: f64,
    /// Median over rounds of the strict store ÷ tmpfs in the same round.
    strict_vs_tmpfs: f64,
    /// Median over rounds of the writeback store ÷ tmpfs in the same round.
    writeback_vs_tmpfs: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Summary {
    summary: bool,
    /// Worst store ÷ passthrough over 1M sequential reads and writes, buffered and direct.
    seq_1m_vs_floor_min: Option<(f64, String)>,
    /// Worst store ÷ passthrough over 4K random reads, buffered and direct.
    randread_4k_vs_floor_min: Option<(f64, String)>,
    /// The workloads on every system.
    workloads: Vec<WorkloadRecord>,
}

/// Why dbench's figures are missing.
const NO_DBENCH: &str = "; no dbench (apt-get install dbench): its workload is left out";

/// What the options ask for, checked.
struct Plan {
    rounds: usize,
    secs: f64,
    file_size: u64,
    jobs: usize,
    fuse_cfg: switchyard_fuse::FuseConfig,
}

impl Plan {
    fn of(a: &MountBenchArgs) -> anyhow::Result<Plan> {
        let p = Plan {
            rounds: a.rounds.unwrap_or(3).max(1),
            secs: a.seconds.unwrap_or(if a.quick { 1.0 } else { 2.0 }),
            file_size: a.file_size.unwrap_or(256 << 20),
            jobs: a.jobs.unwrap_or(1),
            fuse_cfg: switchyard_fuse::FuseConfig {
                workers: a.workers.unwrap_or(0),
                ..Default::default()
            },
        };
        if p.jobs == 0 || p.fuse_cfg.effective_workers() == 0 || p.secs <= 0.0 {
            bail!("--jobs, --workers and --seconds must be positive");
        }
        if p.file_size < 1 << 20 || !p.file_size.is_multiple_of(4096) {
            bail!("--file-size must be a multiple of 4K and at least 1M");
        }
        Ok(p)
    }
}

/// Runs the benchmark.
pub fn run(a: &MountBenchArgs) -> anyhow::Result<()> {
    let dir = scratch_dir(&a.dir);
    let Some(fio_version) = fio::version() else {
        bail!("fio is needed for this benchmark: install it (Debian: apt-get install fio)");
    };
    let Plan {
        rounds,
        secs,
        file_size,
        jobs,
        fuse_cfg,
    } = Plan::of(a)?;
    let workers = fuse_cfg.effective_workers();
    let shapes = shapes(a.quick);
    let (work, [tmpfs, backing, mnt_store, mnt_writeback, mnt_pass]) = scratch(&dir)?;

    let cfg = switchyard_config::Config::load_or_default(a.config.as_deref())?.mover;
    let mover = Arc::new(Mover::start(&cfg)?);
    // The files, a copy-on-write copy of each, and room for logs and the workloads.
    let region_len = (2 * jobs as u64 * file_size + (512 << 20)).next_multiple_of(2 << 20);
    let dbench = workloads::dbench_load().is_some();
    eprintln!(
        "scratch in {}; 2 stores of {} of region written through; {rounds} rounds × {secs} s \
         per system and job; {} per fio job, {jobs} job(s); {workers} FUSE workers; \
         {fio_version}{}",
        work.path().display(),
        size::show(region_len),
        size::show(file_size),
        if dbench { "" } else { NO_DBENCH }
    );
    let mut stores = Vec::new();
    for (mnt, writeback) in [(&mnt_store, false), (&mnt_writeback, true)] {
        let region_path = work.path().join(format!("store-{}.region", stores.len()));
        let c = switchyard_fuse::FuseConfig {
            writeback: Some(writeback),
            ..fuse_cfg.clone()
        };
        stores.push(mount_store(
            &region_path,
            region_len,
            &cfg,
            &mover,
            mnt,
            &c,
        )?);
    }
    let pass_mount = crate::passthrough::mount_passthrough(backing, &mnt_pass, &fuse_cfg)
        .with_context(|| format!("mounting the passthrough on {}", mnt_pass.display()))?;
    let dirs = [
        mnt_store.as_path(),
        mnt_writeback.as_path(),
        mnt_pass.as_path(),
        tmpfs.as_path(),
    ];

    let workloads = Workload::all(dbench);
    let bar = progress((shapes.len() + workloads.len()) as u64 + 1);
    bar.set_message("laying out fio's files");
    for d in dirs {
        layout(d, file_size, jobs)?;
    }
    bar.inc(1);
    let mut records = Vec::new();
    for shape in &shapes {
        bar.set_message(shape.label());
        let got = Rounds::run(SYSTEMS.len(), rounds, |i| {
            fio_job(dirs[i], *shape, file_size, jobs, secs)
        })?;
        records.push(Record::of(*shape, &got));
        bar.inc(1);
    }
    let mut rates = Vec::new();
    for w in workloads {
        bar.set_message(w.label());
        rates.push(workload(w, &dirs, rounds, secs)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    pass_mount.unmount().context("unmounting the passthrough")?;
    for m in stores {
        m.unmount().context("unmounting a store")?;
    }

    let summary = summarise(&records, rates);
    emit(a.json, &records, &summary, print_table)
}

/// A progress bar of `n` steps.
fn progress(n: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(n);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} jobs {msg} ({eta} left)")
            .expect("template")
            .progress_chars("=> "),
    );
    bar
}

impl Record {
    /// The figures of `shape` from every system's rounds.
    fn of(shape: Shape, got: &Rounds) -> Record {
        Record {
            shape,
            store_gib_s: got.gib_s(STORE),
            store_writeback_gib_s: got.gib_s(WRITEBACK),
            passthrough_gib_s: got.gib_s(FLOOR),
            tmpfs_gib_s: got.gib_s(TMPFS),
            store_p50_us: got.p50_us(STORE),
            store_writeback_p50_us: got.p50_us(WRITEBACK),
            passthrough_p50_us: got.p50_us(FLOOR),
            tmpfs_p50_us: got.p50_us(TMPFS),
            vs_floor: got.ratio(STORE, FLOOR),
            floor_vs_tmpfs: got.ratio(FLOOR, TMPFS),
            writeback_vs_strict: got.ratio(WRITEBACK, STORE),
        }
    }
}

/// A store formatted on a region of `len` bytes at `path` (written through first), with
/// `cfg`'s persistence and `mover`, mounted on `mnt` with `fuse`.
fn mount_store(
    path: &Path,
    len: u64,
    cfg: &switchyard_mover::Config,
    mover: &Arc<Mover>,
    mnt: &Path,
    fuse: &switchyard_fuse::FuseConfig,
) -> anyhow::Result<switchyard_fuse::Mount> {
    touch(path, len)?;
    let region = Region::create(path, len, cfg.persist())?;
    let store = Store::format(region, mover.clone(), Owner::current())?;
    switchyard_fuse::mount(store, mnt, fuse, switchyard_fuse::Access::Owner)
        .with_context(|| format!("mounting a store on {}", mnt.display()))
}

/// `w` on every system in `dirs`, `rounds` rounds of `secs` seconds.
fn workload(
    w: Workload,
    dirs: &[&Path; 4],
    rounds: usize,
    secs: f64,
) -> anyhow::Result<WorkloadRecord> {
    let got = switchyard_mover::lab::rotated(SYSTEMS.len(), rounds, |i| {
        if i == FLOOR && !w.on_the_floor() {
            return Ok(None);
        }
        w.run(dirs[i], secs)
            .map(Some)
            .with_context(|| format!("{} on {}", w.label(), SYSTEMS[i]))
    })?;
    let ratio = |a: usize, b: usize| {
        let mut v: Vec<f64> = got[a]
            .iter()
            .zip(&got[b])
            .filter_map(|(x, y)| Some((*x)? / (*y)?))
            .collect();
        crate::measure::median(&mut v)
    };
    let (strict_vs_tmpfs, writeback_vs_tmpfs) = (ratio(STORE, TMPFS), ratio(WRITEBACK, TMPFS));
    let rate = |i: usize| {
        let mut v: Option<Vec<f64>> = got[i].iter().copied().collect();
        v.as_mut().map(|v| crate::measure::median(v))
    };
    Ok(WorkloadRecord {
        workload: w,
        unit: w.unit(),
        store: rate(STORE).unwrap_or_default(),
        store_writeback: rate(WRITEBACK).unwrap_or_default(),
        passthrough: rate(FLOOR),
        tmpfs: rate(TMPFS).unwrap_or_default(),
        strict_vs_tmpfs,
        writeback_vs_tmpfs,
    })
}

/// A scratch directory in `dir`, and in it the directories of tmpfs's files, of the
/// passthrough's backing files, and the three mount points (strict store, writeback store,
/// passthrough).
fn scratch(dir: &Path) -> anyhow::Result<(tempfile::TempDir, [PathBuf; 5])> {
    let work = tempfile::Builder::new()
        .prefix("switchyard-bench-mount.")
        .tempdir_in(dir)
        .with_context(|| format!("creating a scratch directory in {}", dir.display()))?;
    let sub = |name: &str| -> anyhow::Result<PathBuf> {
        let p = work.path().join(name);
        std::fs::create_dir(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(p)
    };
    let dirs = [
        sub("tmpfs")?,
        sub("backing")?,
        sub("mnt-store")?,
        sub("mnt-writeback")?,
        sub("mnt-pass")?,
    ];
    Ok((work, dirs))
}

/// The jobs: sequential 1M and random 4K reads and writes (also 4K and 64K sequential and
/// 64K random without --quick), each buffered and direct.
fn shapes(quick: bool) -> Vec<Shape> {
    let mut base: Vec<(&'static str, u64)> = vec![
        ("read", 1 << 20),
        ("write", 1 << 20),
        ("randread", 4 << 10),
        ("randwrite", 4 << 10),
    ];
    if !quick {
        base.extend([
            ("read", 64 << 10),
            ("write", 64 << 10),
            ("read", 4 << 10),
            ("write", 4 << 10),
            ("randread", 64 << 10),
            ("randwrite", 64 << 10),
        ]);
    }
    let mut out = Vec::new();
    for direct in [false, true] {
        out.extend(base.iter().map(|&(rw, bs)| Shape { rw, bs, direct }));
    }
    out
}

/// Writes `len` bytes of zeros to `path` (every page touched once), owner-only (it becomes a
/// store's region).
pub(crate) fn touch(path: &Path, len: u64) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(switchyard_media::private::FILE_MODE)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    let chunk = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])
            .with_context(|| format!("writing {}", path.display()))?;
        left -= n as u64;
    }
    Ok(())
}

/// Creates fio's files in `dir` at full size (fio lays out a missing file before reading it).
fn layout(dir: &Path, file_size: u64, jobs: usize) -> anyhow::Result<()> {
    let job = fio::Job {
        dir,
        prefix: "fio",
        engine: "psync",
        rw: "read",
        bs: 1 << 20,
        size: file_size,
        jobs,
        secs: 0.1,
        direct: false,
    };
    job.run(&[], &[])?;
    Ok(())
}

fn fio_job(
    dir: &Path,
    shape: Shape,
    file_size: u64,
    jobs: usize,
    secs: f64,
) -> anyhow::Result<Measured> {
    fio::Job {
        dir,
        prefix: "fio",
        engine: "psync",
        rw: shape.rw,
        bs: shape.bs,
        size: file_size,
        jobs,
        secs,
        direct: shape.direct,
    }
    .run(&[], &[])
}

fn summarise(records: &[Record], workloads: Vec<WorkloadRecord>) -> Summary {
    let worst = |pick: &dyn Fn(&Shape) -> bool| {
        records
            .iter()
            .filter(|r| pick(&r.shape))
            .map(|r| (r.vs_floor, r.shape.label()))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    };
    Summary {
        summary: true,
        seq_1m_vs_floor_min: worst(&|s| matches!(s.rw, "read" | "write") && s.bs == 1 << 20),
        randread_4k_vs_floor_min: worst(&|s| s.rw == "randread" && s.bs == 4 << 10),
        workloads,
    }
}

fn print_table(records: &[Record], s: &Summary) {
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>8}",
        "job (GiB/s, p50 µs)",
        "store",
        "wback",
        "pass",
        "tmpfs",
        "store µs",
        "wback µs",
        "pass µs",
        "tmpfs µs",
        "store÷pass",
        "pass÷tmpfs",
        "wb÷strict"
    );
    for r in records {
        println!(
            "{:<22} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>10.3} \
             {:>10.3} {:>8.3}",
            r.shape.label(),
            r.store_gib_s,
            r.store_writeback_gib_s,
            r.passthrough_gib_s,
            r.tmpfs_gib_s,
            r.store_p50_us,
            r.store_writeback_p50_us,
            r.passthrough_p50_us,
            r.tmpfs_p50_us,
            r.vs_floor,
            r.floor_vs_tmpfs,
            r.writeback_vs_strict,
        );
    }
    println!();
    println!(
        "{:<20} {:>9} {:>11} {:>11} {:>11} {:>11} {:>13} {:>16}",
        "workload", "unit", "store", "wback", "pass", "tmpfs", "strict÷tmpfs", "writeback÷tmpfs"
    );
    for w in &s.workloads {
        println!(
            "{:<20} {:>9} {:>11.1} {:>11.1} {:>11} {:>11.1} {:>13.3} {:>16.3}",
            w.workload.label(),
            w.unit,
            w.store,
            w.store_writeback,
            w.passthrough.map_or("-".into(), |p| format!("{p:.1}")),
            w.tmpfs,
            w.strict_vs_tmpfs,
            w.writeback_vs_tmpfs
        );
    }
    println!();
    if let Some((v, at)) = &s.seq_1m_vs_floor_min {
        println!("1M sequential, store ÷ FUSE floor: worst {v:.3} at {at} (target ≥ 0.8)");
    }
    if let Some((v, at)) = &s.randread_4k_vs_floor_min {
        println!("4K random reads, store ÷ FUSE floor: worst {v:.3} at {at} (target ≥ 0.7)");
    }
}
