//! `switchyard bench fs`: the store's data path against the hardware ceiling, in one run.
//!
//! For every (operation, request size, threads) point, three systems run in interleaved rounds
//! (the order rotates each round, so drift on a noisy machine hits them alike):
//!
//! - `store`: Switchyard's file store in process — `pread`/`pwrite`/`append` through [`Fs`],
//!   every write durable and atomic when it returns, each thread on its own file;
//! - `libpmem`: fio with `ioengine=libpmem` on raw files in the same directory (`sync=1`: a
//!   drain after every write, so its writes are as durable as the store's; with
//!   `PMEM_IS_PMEM_FORCE=1` it flushes with cache-line instructions rather than `msync`). No
//!   metadata, no allocation, no crash consistency: the ceiling of what the media gives;
//! - `psync`: fio with `ioengine=psync` in the same directory — the kernel file system's
//!   `pread`/`pwrite` (tmpfs by default), a reference with no durability at all.
//!
//! Each point reports each system's median GiB/s over rounds, the store's median latency, and
//! the store's ratio to each baseline as the median of per-round ratios. An appending store
//! is compared with fio's sequential writes (fio cannot append to a mapped file). A separate
//! line times mounting a store full of small files after a clean unmount (the free-space
//! checkpoint and lazy inode loads) and after a crash (every log read), on the same image.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use serde::Serialize;
use switchyard_media::Region;
use switchyard_mover::{Config, Mover};
use switchyard_store::{Fd, Fs, OpenFlags, Owner, Store};

use crate::fio;
use crate::measure::{emit, median, scratch_dir, Measured, Rounds};
use switchyard_options::size;

/// `bench fs` options.
#[derive(Args)]
pub struct FsArgs {
    /// Directory for the store and fio's files, removed afterwards (default /dev/shm when it
    /// exists: memory, as slow memory is; else the working directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Configuration file for the mover (TOML).
    #[arg(long)]
    config: Option<PathBuf>,
    /// About 3 minutes: 4K, 64K, 256K and 1M, 1 and 8 threads, 3 rounds of 0.3 s.
    #[arg(long)]
    quick: bool,
    /// Print one JSON record per point (and a summary record) instead of the table.
    #[arg(long)]
    json: bool,
    /// Operations (default all).
    #[arg(long, value_delimiter = ',')]
    ops: Vec<Work>,
    /// Comma-separated request sizes (default 4K,16K,64K,256K,1M).
    #[arg(long, value_delimiter = ',', value_parser = size::parse)]
    sizes: Vec<u64>,
    /// Comma-separated thread counts, each thread on its own file (default 1,2,8).
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Rounds per point (default 3).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds each system runs per round (default 1; 0.3 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Size of each thread's file (default 32M; 16M with --quick).
    #[arg(long, value_parser = size::parse)]
    file_size: Option<u64>,
    /// Files in the store whose mount is timed (default 20000).
    #[arg(long)]
    mount_files: Option<usize>,
    /// Skip the fio baselines (the store alone).
    #[arg(long)]
    no_fio: bool,
}

/// One data-path operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Work {
    /// Sequential reads.
    Read,
    /// Sequential overwrites.
    Write,
    /// Reads at random aligned offsets.
    Randread,
    /// Overwrites at random aligned offsets.
    Randwrite,
    /// Appends (the file is truncated when it reaches the file size).
    Append,
}

impl Work {
    const ALL: [Work; 5] = [
        Work::Read,
        Work::Write,
        Work::Randread,
        Work::Randwrite,
        Work::Append,
    ];
    fn name(self) -> &'static str {
        match self {
            Work::Read => "read",
            Work::Write => "write",
            Work::Randread => "randread",
            Work::Randwrite => "randwrite",
            Work::Append => "append",
        }
    }
    fn fio_rw(self) -> &'static str {
        match self {
            Work::Append => "write",
            w => w.name(),
        }
    }
    fn random(self) -> bool {
        matches!(self, Work::Randread | Work::Randwrite)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    Store,
    Libpmem,
    Psync,
}

/// One point: every system's median and the store's paired ratios.
#[derive(Debug, Clone, Serialize)]
struct Record {
    op: Work,
    size: u64,
    threads: usize,
    store_gib_s: f64,
    store_p50_us: f64,
    libpmem_gib_s: Option<f64>,
    psync_gib_s: Option<f64>,
    /// Median over rounds of store ÷ libpmem in the same round.
    vs_libpmem: Option<f64>,
    /// Median over rounds of store ÷ psync in the same round.
    vs_psync: Option<f64>,
}

/// Mount times of one image, after a clean unmount and after a crash.
#[derive(Debug, Clone, Serialize)]
struct MountTimes {
    files: usize,
    clean_ms: f64,
    crash_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Summary {
    summary: bool,
    /// Worst store ÷ libpmem over sequential reads and writes of 64K..1M, every thread count.
    seq_vs_libpmem_min: Option<(f64, String)>,
    /// Worst store ÷ libpmem over 4K random writes, every thread count.
    rand4k_write_vs_libpmem_min: Option<(f64, String)>,
    /// Store GiB/s at the most threads ÷ at one thread, 4K writes (sequential, random).
    write4k_scaling: Vec<(String, f64)>,
    /// The same ratio for libpmem (what the machine allows).
    libpmem_write4k_scaling: Vec<(String, f64)>,
    mount: Option<MountTimes>,
}

/// Runs the benchmark.
pub fn run(a: &FsArgs) -> anyhow::Result<()> {
    let dir = scratch_dir(&a.dir);
    let work = tempfile::Builder::new()
        .prefix("switchyard-bench-fs.")
        .tempdir_in(&dir)
        .with_context(|| format!("creating a scratch directory in {}", dir.display()))?;
    let Plan {
        ops,
        sizes,
        threads,
        file_size,
    } = plan(a)?;
    let rounds = a.rounds.unwrap_or(3).max(1);
    let secs = a.seconds.unwrap_or(if a.quick { 0.3 } else { 1.0 });
    let fio = if a.no_fio { None } else { fio::version() };
    if fio.is_none() && !a.no_fio {
        eprintln!("note: fio not found; the baselines are skipped (install fio, or pass --no-fio)");
    }
    let cfg = switchyard_config::Config::load_or_default(a.config.as_deref())?.mover;
    let mover = Arc::new(Mover::start(&cfg)?);
    let max_t = *threads.iter().max().expect("threads");
    // Data files, append files, and room for copy-on-write and logs.
    let region_len = (3 * max_t as u64 * file_size) * 5 / 4 + (64 << 20);
    let store_path = work.path().join("store.region");
    let region = Region::create(&store_path, region_len, cfg.persist())?;
    let fs = Fs::new(Store::format(region, mover.clone(), Owner::current())?);
    let files = prepare(&fs, max_t, file_size)?;

    let mut points: Vec<(Work, u64, usize)> = Vec::new();
    for &o in &ops {
        for &s in &sizes {
            points.extend(threads.iter().map(|&t| (o, s, t)));
        }
    }
    let bar = progress(points.len() as u64);
    eprintln!(
        "store and fio files in {}; {} rounds × {secs} s per system and point; {} per thread{}",
        work.path().display(),
        rounds,
        size::show(file_size),
        match &fio {
            Some(v) => format!("; {v}"),
            None => String::new(),
        }
    );
    let systems: Vec<System> = if fio.is_some() {
        vec![System::Store, System::Libpmem, System::Psync]
    } else {
        vec![System::Store]
    };
    let mut records = Vec::new();
    for &(op, bs, t) in &points {
        bar.set_message(format!("{} {} ×{t}", op.name(), size::show(bs)));
        let p = Point {
            op,
            bs,
            threads: t,
            file_size,
            secs,
        };
        let got = Rounds::run(systems.len(), rounds, |i| match systems[i] {
            System::Store => store_point(&fs, &files, p),
            System::Libpmem => fio_point(work.path(), "libpmem", p),
            System::Psync => fio_point(work.path(), "psync", p),
        })?;
        records.push(record(op, bs, t, &got, &systems));
        bar.inc(1);
    }
    bar.finish_and_clear();
    drop(files);
    fs.unmount()?;
    std::fs::remove_file(&store_path)?;
    let mount_files = a.mount_files.unwrap_or(20_000);
    let mount = if mount_files > 0 {
        Some(mount_times(work.path(), mount_files, &cfg, &mover)?)
    } else {
        None
    };
    let summary = summarise(&records, mount);
    emit(a.json, &records, &summary, print_table)
}

/// The operations, request sizes and thread counts measured, and each thread's file size,
/// checked.
fn plan(a: &FsArgs) -> anyhow::Result<Plan> {
    let ops = if a.ops.is_empty() {
        Work::ALL.to_vec()
    } else {
        a.ops.clone()
    };
    let sizes = if !a.sizes.is_empty() {
        a.sizes.clone()
    } else if a.quick {
        vec![4 << 10, 64 << 10, 256 << 10, 1 << 20]
    } else {
        vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
    };
    let threads = if !a.threads.is_empty() {
        a.threads.clone()
    } else if a.quick {
        vec![1, 8]
    } else {
        vec![1, 2, 8]
    };
    let secs = a.seconds.unwrap_or(if a.quick { 0.3 } else { 1.0 });
    let file_size = a
        .file_size
        .unwrap_or(if a.quick { 16 << 20 } else { 32 << 20 });
    if threads.contains(&0) || secs <= 0.0 {
        bail!("--threads and --seconds must be positive");
    }
    if let Some(&s) = sizes
        .iter()
        .find(|&&s| s == 0 || s % 4096 != 0 || s > file_size)
    {
        bail!(
            "request size {s} must be a multiple of 4K and at most the file size ({})",
            size::show(file_size)
        );
    }
    Ok(Plan {
        ops,
        sizes,
        threads,
        file_size,
    })
}

/// What a run measures.
struct Plan {
    ops: Vec<Work>,
    /// Request sizes.
    sizes: Vec<u64>,
    /// Thread counts.
    threads: Vec<usize>,
    /// Bytes of each thread's file.
    file_size: u64,
}

/// A progress bar over `len` points.
fn progress(len: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} points {msg} ({eta} left)")
            .expect("template")
            .progress_chars("=> "),
    );
    bar
}

/// The record of `op` in requests of `bs` on `t` threads: the store's rate and latency, and
/// its ratios to fio's `systems` where they ran.
fn record(op: Work, bs: u64, t: usize, got: &Rounds, systems: &[System]) -> Record {
    let at = |s: System| systems.iter().position(|&x| x == s);
    Record {
        op,
        size: bs,
        threads: t,
        store_gib_s: got.gib_s(0),
        store_p50_us: got.p50_us(0),
        libpmem_gib_s: at(System::Libpmem).map(|i| got.gib_s(i)),
        psync_gib_s: at(System::Psync).map(|i| got.gib_s(i)),
        vs_libpmem: at(System::Libpmem).map(|i| got.ratio(0, i)),
        vs_psync: at(System::Psync).map(|i| got.ratio(0, i)),
    }
}

/// Per-thread files: `/f{i}` written whole (for reads and overwrites), `/a{i}` for appends.
struct Files {
    data: Vec<Fd>,
    append: Vec<Fd>,
}

fn prepare(fs: &Fs, threads: usize, file_size: u64) -> anyhow::Result<Files> {
    let rw = OpenFlags {
        write: true,
        ..OpenFlags::CREATE
    };
    let mut files = Files {
        data: Vec::new(),
        append: Vec::new(),
    };
    let chunk = vec![0xA5u8; 1 << 20];
    for i in 0..threads {
        let fd = fs.open(&format!("/f{i}"), rw, 0o644)?;
        let mut off = 0;
        while off < file_size {
            let n = chunk.len().min((file_size - off) as usize);
            fs.pwrite(fd, &chunk[..n], off)?;
            off += n as u64;
        }
        files.data.push(fd);
        let append = OpenFlags { append: true, ..rw };
        files
            .append
            .push(fs.open(&format!("/a{i}"), append, 0o644)?);
    }
    Ok(files)
}

/// What one measurement runs: `threads` threads (or fio jobs), each on its own file of
/// `file_size` bytes, doing `op` in requests of `bs` bytes for `secs` seconds.
#[derive(Debug, Clone, Copy)]
struct Point {
    op: Work,
    bs: u64,
    threads: usize,
    file_size: u64,
    secs: f64,
}

/// The store at one point.
fn store_point(fs: &Fs, files: &Files, p: Point) -> anyhow::Result<Measured> {
    let Point {
        op,
        bs,
        threads,
        file_size,
        secs,
    } = p;
    let barrier = Barrier::new(threads + 1);
    let dur = Duration::from_secs_f64(secs);
    let slots = file_size / bs;
    let results: Vec<anyhow::Result<(u64, Latency)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || -> anyhow::Result<(u64, Latency)> {
                    let mut buf = vec![t as u8 ^ 0x5A; bs as usize];
                    let mut lat = Latency::new();
                    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
                    let mut cursor = 0;
                    let mut bytes = 0u64;
                    barrier.wait();
                    let end = Instant::now() + dur;
                    loop {
                        let off = if op.random() {
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            (rng % slots) * bs
                        } else {
                            let o = cursor;
                            cursor = if cursor + 2 * bs > file_size {
                                0
                            } else {
                                cursor + bs
                            };
                            o
                        };
                        let t0 = Instant::now();
                        if t0 >= end {
                            break;
                        }
                        store_op(fs, files, op, t, &mut buf, off, file_size)?;
                        lat.record(t0.elapsed());
                        bytes += bs;
                    }
                    Ok((bytes, lat))
                })
            })
            .collect();
        barrier.wait();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    let mut bytes = 0;
    let mut lat = Latency::new();
    for r in results {
        let (b, l) = r?;
        bytes += b;
        lat.merge(&l);
    }
    Ok(Measured {
        gib_s: bytes as f64 / secs / (1u64 << 30) as f64,
        p50_us: lat.median_ns() / 1000.0,
        cpu_s_per_gib: None,
    })
}

/// One operation `op` of thread `t` on the store: `buf` read from or written at `off` of its
/// file, or appended to its append file (truncated first once it would pass `file_size`).
fn store_op(
    fs: &Fs,
    files: &Files,
    op: Work,
    t: usize,
    buf: &mut [u8],
    off: u64,
    file_size: u64,
) -> anyhow::Result<()> {
    match op {
        Work::Read | Work::Randread => {
            fs.pread(files.data[t], buf, off)?;
        }
        Work::Write | Work::Randwrite => {
            fs.pwrite(files.data[t], buf, off)?;
        }
        Work::Append => {
            if fs.lseek(files.append[t], 0, switchyard_store::Whence::End)? + buf.len() as u64
                > file_size
            {
                fs.ftruncate(files.append[t], 0)?;
            }
            fs.write(files.append[t], buf)?;
        }
    }
    Ok(())
}

/// A latency histogram with 10 ns buckets up to 100 µs (and one above): recording costs no
/// allocation, so the measuring thread does nothing the measured one would not.
struct Latency(Vec<u64>);

impl Latency {
    const BUCKET_NS: u128 = 10;
    const BUCKETS: usize = 10_000;

    fn new() -> Latency {
        Latency(vec![0; Self::BUCKETS + 1])
    }
    fn record(&mut self, d: Duration) {
        let b = (d.as_nanos() / Self::BUCKET_NS).min(Self::BUCKETS as u128) as usize;
        self.0[b] += 1;
    }
    fn merge(&mut self, o: &Latency) {
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a += b;
        }
    }
    /// The bucket midpoint holding the median sample (0 with no samples).
    fn median_ns(&self) -> f64 {
        let total: u64 = self.0.iter().sum();
        let mut seen = 0;
        for (i, &n) in self.0.iter().enumerate() {
            seen += n;
            if n > 0 && seen * 2 >= total {
                return (i as f64 + 0.5) * Self::BUCKET_NS as f64;
            }
        }
        0.0
    }
}

/// One fio run at one point, its files in `dir`.
fn fio_point(dir: &Path, engine: &str, p: Point) -> anyhow::Result<Measured> {
    let job = fio::Job {
        dir,
        prefix: &format!("fio-{engine}"),
        engine,
        rw: p.op.fio_rw(),
        bs: p.bs,
        size: p.file_size,
        jobs: p.threads,
        secs: p.secs,
        direct: false,
    };
    if engine == "libpmem" {
        // A drain after every write: each returns durable, as the store's do.
        job.run(&["--sync=1"], &[("PMEM_IS_PMEM_FORCE", "1")])
    } else {
        job.run(&[], &[])
    }
}

/// Fills a store with `files` one-block files in 100 directories, snapshots its image while
/// mounted (a crash image), unmounts cleanly, and times mounting each image.
fn mount_times(
    dir: &Path,
    files: usize,
    cfg: &Config,
    mover: &Arc<Mover>,
) -> anyhow::Result<MountTimes> {
    let clean = dir.join("mount-clean.region");
    let crashed = dir.join("mount-crash.region");
    // One inode slot per 16 KiB of region: room for twice the files, their logs and data.
    let len = files as u64 * (32 << 10) + (64 << 20);
    let region = Region::create(&clean, len, cfg.persist())?;
    let fs = Fs::new(Store::format(region, mover.clone(), Owner::current())?);
    for d in 0..100 {
        fs.mkdir(&format!("/d{d}"), 0o755)?;
    }
    let block = [0x3Cu8; 4096];
    for i in 0..files {
        let fd = fs.open(&format!("/d{}/f{i}", i % 100), OpenFlags::CREATE, 0o644)?;
        fs.write(fd, &block)
            .with_context(|| format!("writing file {i} of the mount-timing store"))?;
        fs.close(fd)?;
    }
    // The file as it is while mounted: what a crash leaves.
    std::fs::copy(&clean, &crashed)?;
    fs.unmount().context("unmounting the mount-timing store")?;
    let time = |path: &Path, quick: bool| -> anyhow::Result<f64> {
        let region = Region::open(path, 0, cfg.persist())?;
        let t0 = Instant::now();
        let store = Store::mount(region, mover.clone())
            .with_context(|| format!("mounting {}", path.display()))?;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        if store.mounted_quickly() != quick {
            bail!("{} mounted with the wrong path", path.display());
        }
        // A clean unmount: the scan image is copied afresh from the crash image each round.
        drop(store);
        Ok(ms)
    };
    let (mut c, mut s) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        c.push(time(&clean, true)?);
        std::fs::copy(&crashed, dir.join("mount-scan.region"))?;
        s.push(time(&dir.join("mount-scan.region"), false)?);
    }
    for p in [&clean, &crashed] {
        std::fs::remove_file(p)?;
    }
    std::fs::remove_file(dir.join("mount-scan.region"))?;
    Ok(MountTimes {
        files,
        clean_ms: median(&mut c),
        crash_ms: median(&mut s),
    })
}

fn summarise(records: &[Record], mount: Option<MountTimes>) -> Summary {
    let label = |r: &Record| format!("{} {} ×{}", r.op.name(), size::show(r.size), r.threads);
    let worst = |pick: &dyn Fn(&Record) -> bool| {
        records
            .iter()
            .filter(|r| pick(r))
            .filter_map(|r| r.vs_libpmem.map(|v| (v, label(r))))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    };
    let seq = |r: &Record| {
        matches!(r.op, Work::Read | Work::Write) && (64 << 10..=1 << 20).contains(&r.size)
    };
    let rand4k = |r: &Record| r.op == Work::Randwrite && r.size == 4096;
    let scaling = |get: &dyn Fn(&Record) -> Option<f64>| {
        let mut out = Vec::new();
        for op in [Work::Write, Work::Randwrite] {
            let at = |t: usize| {
                records
                    .iter()
                    .find(|r| r.op == op && r.size == 4096 && r.threads == t)
            };
            let most = records.iter().map(|r| r.threads).max().unwrap_or(1);
            if let (Some(one), Some(many)) = (at(1), at(most)) {
                if most > 1 {
                    if let (Some(a), Some(b)) = (get(one), get(many)) {
                        out.push((format!("{} 4K ×{most} ÷ ×1", op.name()), b / a));
                    }
                }
            }
        }
        out
    };
    Summary {
        summary: true,
        seq_vs_libpmem_min: worst(&seq),
        rand4k_write_vs_libpmem_min: worst(&rand4k),
        write4k_scaling: scaling(&|r| Some(r.store_gib_s)),
        libpmem_write4k_scaling: scaling(&|r| r.libpmem_gib_s),
        mount,
    }
}

fn print_table(records: &[Record], s: &Summary) {
    let opt = |v: Option<f64>, w: usize, p: usize| match v {
        Some(v) => format!("{v:>w$.p$}"),
        None => format!("{:>w$}", "-"),
    };
    println!(
        "{:<10} {:>6} {:>4} {:>12} {:>9} {:>14} {:>12} {:>10} {:>9}",
        "op",
        "size",
        "thr",
        "store GiB/s",
        "p50 µs",
        "libpmem GiB/s",
        "psync GiB/s",
        "÷libpmem",
        "÷psync"
    );
    for r in records {
        println!(
            "{:<10} {:>6} {:>4} {:>12.2} {:>9.2} {} {} {} {}",
            r.op.name(),
            size::show(r.size),
            r.threads,
            r.store_gib_s,
            r.store_p50_us,
            opt(r.libpmem_gib_s, 14, 2),
            opt(r.psync_gib_s, 12, 2),
            opt(r.vs_libpmem, 10, 3),
            opt(r.vs_psync, 9, 3),
        );
    }
    println!();
    if let Some((v, at)) = &s.seq_vs_libpmem_min {
        println!("sequential 64K–1M, store ÷ libpmem: worst {v:.3} at {at} (target ≥ 0.8)");
    }
    if let Some((v, at)) = &s.rand4k_write_vs_libpmem_min {
        println!("random 4K writes, store ÷ libpmem: worst {v:.3} at {at} (target ≥ 0.5)");
    }
    for ((what, v), (_, p)) in s.write4k_scaling.iter().zip(
        s.libpmem_write4k_scaling
            .iter()
            .map(|x| (x.0.clone(), Some(x.1)))
            .chain(std::iter::repeat((String::new(), None))),
    ) {
        println!(
            "scaling, {what}: store {v:.2}{} (target ≥ 1.6)",
            p.map(|p| format!(", libpmem {p:.2}")).unwrap_or_default()
        );
    }
    if let Some(m) = &s.mount {
        println!(
            "mount of {} files: {:.1} ms after a clean unmount, {:.1} ms after a crash ({:.1}×)",
            m.files,
            m.clean_ms,
            m.crash_ms,
            m.crash_ms / m.clean_ms
        );
    }
}
