//! `switchyard bench mount`: the store through FUSE against FUSE's own cost, in one run.
//!
//! The same fio jobs run on three file systems, in interleaved rounds whose order rotates:
//!
//! - `store`: the store mounted with FUSE in this process (as `switchyard mount` does), its
//!   region a file in the scratch directory;
//! - `passthrough`: a minimal FUSE file system that forwards every request to a directory of
//!   the scratch file system — same library, mount options, request sizes, workers and
//!   page-cache policy as the store's mount. This is the FUSE floor: what any FUSE file
//!   system pays before it does any work of its own;
//! - `tmpfs`: fio directly on the scratch file system (tmpfs by default), with no FUSE.
//!
//! Each job runs buffered (the page cache serves repeated reads; writes go through to the
//! file system) and with `O_DIRECT` (every request reaches the file system). The figures are
//! each system's median GiB/s and fio's median completion latency, store ÷ passthrough (the
//! store's own cost on top of FUSE) and passthrough ÷ tmpfs (FUSE's cost), each the median
//! of ratios paired within a round.
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

use crate::fio;
use crate::measure::{emit, scratch_dir, Measured, Rounds};
use switchyard_options::size;

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

const SYSTEMS: [&str; 3] = ["store", "passthrough", "tmpfs"];

/// One job: every system's medians and the paired ratios.
#[derive(Debug, Clone, Serialize)]
struct Record {
    #[serde(flatten)]
    shape: Shape,
    store_gib_s: f64,
    passthrough_gib_s: f64,
    tmpfs_gib_s: f64,
    store_p50_us: f64,
    passthrough_p50_us: f64,
    tmpfs_p50_us: f64,
    /// Median over rounds of store ÷ passthrough in the same round.
    vs_floor: f64,
    /// Median over rounds of passthrough ÷ tmpfs in the same round.
    floor_vs_tmpfs: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Summary {
    summary: bool,
    /// Worst store ÷ passthrough over 1M sequential reads and writes, buffered and direct.
    seq_1m_vs_floor_min: Option<(f64, String)>,
    /// Worst store ÷ passthrough over 4K random reads, buffered and direct.
    randread_4k_vs_floor_min: Option<(f64, String)>,
}

/// Runs the benchmark.
pub fn run(a: &MountBenchArgs) -> anyhow::Result<()> {
    let dir = scratch_dir(&a.dir);
    let Some(fio_version) = fio::version() else {
        bail!("fio is needed for this benchmark: install it (Debian: apt-get install fio)");
    };
    let rounds = a.rounds.unwrap_or(3).max(1);
    let secs = a.seconds.unwrap_or(if a.quick { 1.0 } else { 2.0 });
    let file_size = a.file_size.unwrap_or(256 << 20);
    let jobs = a.jobs.unwrap_or(1);
    let fuse_cfg = switchyard_fuse::FuseConfig {
        workers: a.workers.unwrap_or(0),
        ..Default::default()
    };
    let workers = fuse_cfg.effective_workers();
    if jobs == 0 || workers == 0 || secs <= 0.0 {
        bail!("--jobs, --workers and --seconds must be positive");
    }
    if file_size < 1 << 20 || !file_size.is_multiple_of(4096) {
        bail!("--file-size must be a multiple of 4K and at least 1M");
    }
    let shapes = shapes(a.quick);
    let (work, [tmpfs, backing, mnt_store, mnt_pass]) = scratch(&dir)?;

    let cfg = switchyard_config::Config::load_or_default(a.config.as_deref())?.mover;
    let mover = Arc::new(Mover::start(&cfg)?);
    // The files, a copy-on-write copy of each, and room for logs.
    let region_len = (2 * jobs as u64 * file_size + (256 << 20)).next_multiple_of(2 << 20);
    let region_path = work.path().join("store.region");
    eprintln!(
        "scratch in {}; {} of region written through; {rounds} rounds × {secs} s per system \
         and job; {} per fio job, {jobs} job(s); {workers} FUSE workers; {fio_version}",
        work.path().display(),
        size::show(region_len),
        size::show(file_size),
    );
    touch(&region_path, region_len)?;
    let region = Region::create(&region_path, region_len, cfg.persist())?;
    let store = Store::format(region, mover, Owner::current())?;
    let store_mount =
        switchyard_fuse::mount(store, &mnt_store, &fuse_cfg, switchyard_fuse::Access::Owner)
            .with_context(|| format!("mounting the store on {}", mnt_store.display()))?;
    let pass_mount = crate::passthrough::mount_passthrough(backing, &mnt_pass, &fuse_cfg)
        .with_context(|| format!("mounting the passthrough on {}", mnt_pass.display()))?;
    let dirs = [mnt_store.as_path(), mnt_pass.as_path(), tmpfs.as_path()];

    let bar = indicatif::ProgressBar::new(shapes.len() as u64 + 1);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} jobs {msg} ({eta} left)")
            .expect("template")
            .progress_chars("=> "),
    );
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
        records.push(Record {
            shape: *shape,
            store_gib_s: got.gib_s(0),
            passthrough_gib_s: got.gib_s(1),
            tmpfs_gib_s: got.gib_s(2),
            store_p50_us: got.p50_us(0),
            passthrough_p50_us: got.p50_us(1),
            tmpfs_p50_us: got.p50_us(2),
            vs_floor: got.ratio(0, 1),
            floor_vs_tmpfs: got.ratio(1, 2),
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    pass_mount.unmount().context("unmounting the passthrough")?;
    store_mount.unmount().context("unmounting the store")?;

    let summary = summarise(&records);
    emit(a.json, &records, &summary, print_table)
}

/// A scratch directory in `dir`, and in it the directories of tmpfs's files, of the
/// passthrough's backing files, and the two mount points.
fn scratch(dir: &Path) -> anyhow::Result<(tempfile::TempDir, [PathBuf; 4])> {
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

fn summarise(records: &[Record]) -> Summary {
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
    }
}

fn print_table(records: &[Record], s: &Summary) {
    println!(
        "{:<22} {:>12} {:>12} {:>12} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "job",
        "store GiB/s",
        "pass GiB/s",
        "tmpfs GiB/s",
        "store µs",
        "pass µs",
        "tmpfs µs",
        "store÷pass",
        "pass÷tmpfs"
    );
    for r in records {
        println!(
            "{:<22} {:>12.2} {:>12.2} {:>12.2} {:>9.1} {:>9.1} {:>9.1} {:>10.3} {:>10.3}",
            r.shape.label(),
            r.store_gib_s,
            r.passthrough_gib_s,
            r.tmpfs_gib_s,
            r.store_p50_us,
            r.passthrough_p50_us,
            r.tmpfs_p50_us,
            r.vs_floor,
            r.floor_vs_tmpfs,
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
