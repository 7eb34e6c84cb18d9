//! `switchyard bench copy`: the data-movement paths side by side, in one run.
//!
//! For every (direction, size, threads) point the paths run in interleaved rounds (so drift on
//! a noisy machine hits them alike) over buffers far larger than the last-level cache; the
//! point's GiB/s is the median over rounds, latencies are pooled for p50/p99, and CPU cost is
//! process CPU time (all threads, engine workers included) per GiB moved.
//!
//! Paths: `glibc` (memcpy; for durable writes followed by the same flush + fence Switchyard
//! uses, since that is what a program must add to make memcpy durable), `pmdk`
//! (`pmem_memcpy_persist`, writes only — PMDK has no read path), and Switchyard's `cpu`,
//! `engine` and `scheduled` policies over one shared engine.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;
use switchyard_media::{Region, MIN_REGION};
use switchyard_mover::lab::DramBuffer;
use switchyard_mover::{Config, Direction, Hints, Mover, Policy, StartedEngine};

use crate::measure::{median, Setup};
use crate::{cpu_time, pmdk::Pmdk};
use switchyard_options::{size, MoverArgs};

mod table;
#[cfg(test)]
mod tests;

/// `bench copy` options.
#[derive(Args)]
pub struct CopyArgs {
    #[command(flatten)]
    mover: MoverArgs,
    /// Scratch region file the benchmark overwrites (created if missing); the counters of
    /// the scheduled path are saved next to it (`switchyard stat --region`).
    #[arg(long, default_value = "switchyard.region")]
    region: PathBuf,
    /// Use the region file even though other users may read or write it.
    #[arg(long)]
    allow_exposed_store: bool,
    /// Finish within 60 s: 6 sizes from 4K to 4M, 25 rounds of short slices per path.
    #[arg(long)]
    quick: bool,
    /// Print one JSON record per point (and a summary record) instead of the table.
    #[arg(long)]
    json: bool,
    /// Size of the region file and of the DRAM buffer (K/M/G suffixes); keep it far above the
    /// last-level cache. Default 256M with --quick, else 1G.
    #[arg(long, value_parser = size::parse)]
    region_size: Option<u64>,
    /// Largest number of application threads (default: the number of cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Comma-separated request sizes (default: powers of two 4K..4M; with --quick 4K,16K,64K,256K,1M,4M).
    #[arg(long, value_delimiter = ',', value_parser = size::parse)]
    sizes: Vec<u64>,
    /// Rounds per point (the median slice is reported); default 25.
    #[arg(long)]
    rounds: Option<usize>,
    /// Shift the DRAM side of every request this many bytes (0–63) past the region side's
    /// 64-byte phase, as a buffer at an arbitrary address is: copies between shifted buffers
    /// take different kernels (see `switchyard_media::kernels`).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..64))]
    shift: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathKind {
    Glibc,
    Pmdk,
    Cpu,
    Engine,
    Scheduled,
}

impl PathKind {
    const ALL: [PathKind; 5] = [
        PathKind::Glibc,
        PathKind::Pmdk,
        PathKind::Cpu,
        PathKind::Engine,
        PathKind::Scheduled,
    ];
    fn name(self) -> &'static str {
        match self {
            PathKind::Glibc => "glibc",
            PathKind::Pmdk => "pmdk",
            PathKind::Cpu => "cpu",
            PathKind::Engine => "engine",
            PathKind::Scheduled => "scheduled",
        }
    }
}

/// One measured point of one path.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    path: &'static str,
    direction: &'static str,
    size: u64,
    threads: usize,
    durable: bool,
    /// Bytes the DRAM side is shifted past the region side's 64-byte phase (`--shift`).
    shift: usize,
    p50_us: f64,
    p99_us: f64,
    /// Median GiB/s over rounds.
    gib_per_s: f64,
    /// The noise floor: median GiB/s of the odd rounds ÷ that of the even rounds, for the same
    /// path (1.0 on a quiet machine).
    self_ratio: Option<f64>,
    /// GiB/s of each round, in order (rounds of all paths at a point interleave in time).
    round_gib_per_s: Vec<f64>,
    cpu_s_per_gib: f64,
    engine: String,
    media: String,
}

struct Bench {
    region: Region,
    dram: DramBuffer,
    /// Where the measured span starts in `dram` (a page boundary plus `--shift`).
    dram_off: usize,
    span: usize,
    movers: [Mover; 3],
    pmdk: Option<Pmdk>,
}

/// What one path accumulated at one point.
#[derive(Default)]
struct Acc {
    /// GiB/s of each slice, in round order.
    gibs: Vec<f64>,
    lat_ns: Vec<u32>,
    cpu: Duration,
    bytes: u64,
}

impl Bench {
    fn ptrs(&self, dir: Direction, off: usize) -> (*mut u8, *const u8) {
        // SAFETY: off + size <= span <= both buffers' lengths (checked by the caller's layout).
        unsafe {
            let r = self.region.as_mut_ptr().add(off);
            let d = self.dram.at(self.dram_off + off);
            match dir {
                Direction::FromSlow => (d, r),
                _ => (r, d),
            }
        }
    }

    fn one(&self, path: PathKind, dir: Direction, dst: *mut u8, src: *const u8, n: usize) {
        let durable = dir == Direction::ToSlow;
        let hints = Hints {
            direction: dir,
            durable,
            ..Hints::default()
        };
        let p = self.region.persist();
        // SAFETY: for all arms, each thread copies within its own disjoint slice of the region and
        // of the DRAM buffer, so ranges are valid, non-overlapping and unshared.
        unsafe {
            match path {
                PathKind::Glibc => {
                    libc::memcpy(dst.cast(), src.cast(), n);
                    if durable {
                        p.persist(dst, n);
                    }
                }
                PathKind::Pmdk => self
                    .pmdk
                    .as_ref()
                    .expect("pmdk path only runs when loaded")
                    .memcpy_persist(dst, src, n),
                PathKind::Cpu => {
                    self.movers[0].copy_raw(dst, src, n, hints);
                }
                PathKind::Engine => {
                    self.movers[1].copy_raw(dst, src, n, hints);
                }
                PathKind::Scheduled => {
                    self.movers[2].copy_raw(dst, src, n, hints);
                }
            }
        }
    }

    /// Measures every path at one point: `rounds` rounds, each running every path for one
    /// slice of `dur`, in an order rotated every round so that drift and ordering effects hit
    /// all paths alike. The application threads persist across slices and meet at barriers, so
    /// a slice measures copies only (each thread times itself from its own start to the end of
    /// its last request).
    fn point(
        &self,
        paths: &[PathKind],
        dir: Direction,
        size: usize,
        threads: usize,
        rounds: usize,
        dur: Duration,
    ) -> Vec<Acc> {
        let per = self.span / threads / size * size;
        let barrier = Barrier::new(threads + 1);
        let current = AtomicUsize::new(0);
        let mut acc: Vec<Acc> = paths.iter().map(|_| Acc::default()).collect();
        let slices: Vec<Vec<(u64, Duration, Vec<u32>)>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let (barrier, current) = (&barrier, &current);
                    s.spawn(move || {
                        let mut out = Vec::new();
                        loop {
                            barrier.wait();
                            let Some(&path) = paths.get(current.load(Ordering::Acquire)) else {
                                return out;
                            };
                            let begin = Instant::now();
                            let (mut bytes, mut lat, mut k) = (0u64, Vec::new(), 0usize);
                            let mut end = begin;
                            while end - begin < dur {
                                let off = t * per + (k * size) % per;
                                let (d, s) = self.ptrs(dir, off);
                                let t0 = end;
                                self.one(path, dir, d, s, size);
                                end = Instant::now();
                                lat.push((end - t0).as_nanos().min(u32::MAX as u128) as u32);
                                bytes += size as u64;
                                k += 1;
                            }
                            out.push((bytes, end - begin, lat));
                            barrier.wait();
                        }
                    })
                })
                .collect();
            for round in 0..rounds {
                for j in 0..paths.len() {
                    let i = (round + j) % paths.len();
                    current.store(i, Ordering::Release);
                    let cpu0 = cpu_time::process();
                    barrier.wait();
                    barrier.wait();
                    acc[i].cpu += cpu_time::process() - cpu0;
                }
            }
            current.store(usize::MAX, Ordering::Release);
            barrier.wait();
            hs.into_iter()
                .map(|h| h.join().expect("bench thread"))
                .collect()
        });
        // Every thread ran the same sequence of slices; slice n of every thread belongs to the
        // same (round, path).
        let order = (0..rounds).flat_map(|r| (0..paths.len()).map(move |j| (r + j) % paths.len()));
        for (n, i) in order.enumerate() {
            let (mut bytes, mut wall) = (0u64, Duration::ZERO);
            for t in &slices {
                bytes += t[n].0;
                wall = wall.max(t[n].1);
                acc[i].lat_ns.extend_from_slice(&t[n].2);
            }
            acc[i]
                .gibs
                .push(bytes as f64 / wall.as_secs_f64() / (1u64 << 30) as f64);
            acc[i].bytes += bytes;
        }
        acc
    }
}

fn percentile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0
}

/// Runs the benchmark on the engine the configuration (and `--engine`) chooses; fails, saying
/// what is missing, where that engine cannot start (`--engine dsa` without a work queue).
pub fn run(a: &CopyArgs) -> anyhow::Result<()> {
    let cfg = a.mover.load_config()?.mover;
    let started = switchyard_mover::start_engine(&cfg)?;
    let (records, summary, movers) = measure_on(a, &cfg, &started)?;
    table::output(a.json, &records, &summary)?;
    switchyard_options::counters::save(
        &switchyard_options::counters::path(&a.region),
        "bench copy",
        &movers[2],
    )?;
    Ok(())
}

/// Measures every point with the three movers on `started` (and the baselines); the records,
/// the summary, and the movers (the scheduled one's counters are saved).
fn measure_on(
    a: &CopyArgs,
    cfg: &Config,
    started: &StartedEngine,
) -> anyhow::Result<(Vec<Record>, Summary, [Mover; 3])> {
    if a.allow_exposed_store {
        switchyard_options::allow_exposed();
    }
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let max_threads = a.threads.unwrap_or(cores).max(1);
    let (sizes, region_size) = sizes_and_region(a, max_threads)?;
    let rounds = a.rounds.unwrap_or(25).max(1);
    let slice = Duration::from_millis(if a.quick { 4 } else { 8 });

    let pmdk = pmdk();
    let persist = cfg.persist();
    let region = Region::create(&a.region, region_size, persist)?;
    let region_len = region.len().min(region_size as usize);
    let shift = usize::from(a.shift);
    // Page-aligned, so the span starts `shift` bytes past a page boundary.
    let dram = DramBuffer::new(region_len + shift, 2);
    let dram_off = shift;
    // Fault every page in before measuring.
    // SAFETY: the whole region is mapped and no one else uses it yet.
    unsafe { std::ptr::write_bytes(region.as_mut_ptr(), 1, region_len) };
    let b = Arc::new(Bench {
        region,
        dram,
        dram_off,
        span: region_len,
        movers: movers(cfg, started),
        pmdk,
    });
    let (engine_name, media_name) = names(&b, persist);

    let points = points(&sizes, max_threads);
    let bar = progress(points.len() as u64);
    if !a.json {
        eprintln!("engine: {engine_name} — {}\nmedia: {media_name}; region {} ({}); DRAM side shifted {shift} B; {} rounds × ≥{} ms (8 ns per byte of request) per path and point", b.movers[2].engine_reason(), a.region.display(), size::show(region_len as u64), rounds, slice.as_millis());
    }
    let mut records = Vec::new();
    for &(dir, sz, threads) in &points {
        bar.set_message(format!("{} {} ×{}", dir.name(), size::show(sz), threads));
        let paths: Vec<PathKind> = PathKind::ALL
            .into_iter()
            .filter(|p| *p != PathKind::Pmdk || (b.pmdk.is_some() && dir == Direction::ToSlow))
            .collect();
        // A slice holds at least ~32 requests per thread at 4 GiB/s, so that the last,
        // unfinished request of each thread does not dominate it.
        let dur = slice.max(Duration::from_nanos(sz * 8));
        let acc = b.point(&paths, dir, sz as usize, threads, rounds, dur);
        for (&p, a) in paths.iter().zip(acc) {
            let Acc {
                gibs,
                mut lat_ns,
                cpu,
                bytes,
            } = a;
            lat_ns.sort_unstable();
            let self_ratio = self_ratio(&gibs, rounds);
            records.push(Record {
                path: p.name(),
                direction: dir.name(),
                size: sz,
                threads,
                durable: dir == Direction::ToSlow,
                shift,
                p50_us: percentile(&lat_ns, 0.5),
                p99_us: percentile(&lat_ns, 0.99),
                gib_per_s: median(&mut gibs.clone()),
                round_gib_per_s: gibs,
                self_ratio,
                cpu_s_per_gib: cpu.as_secs_f64() / (bytes as f64 / (1u64 << 30) as f64),
                engine: engine_name.clone(),
                media: media_name.clone(),
            });
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let setup = Setup::now(cfg, &b.region, a.quick).on_engine(&b.movers[2]);
    let summary = Summary::of(&records, setup);
    let b = Arc::into_inner(b).context("the measuring threads are done")?;
    Ok((records, summary, b.movers))
}

/// Movers on one engine: cpu-only, engine-only and scheduled (`auto`).
fn movers(cfg: &Config, started: &StartedEngine) -> [Mover; 3] {
    let mover = |p: Policy| {
        let mut c: Config = cfg.clone();
        c.mover.policy = p;
        Mover::with_started(&c, started, cfg.persist())
    };
    [
        mover(Policy::Cpu),
        mover(Policy::Engine),
        mover(Policy::Auto),
    ]
}

/// The request sizes measured and the region's size, checked: room for 4 requests of the
/// largest size per thread of `max_threads`.
fn sizes_and_region(a: &CopyArgs, max_threads: usize) -> anyhow::Result<(Vec<u64>, u64)> {
    let sizes: Vec<u64> = if !a.sizes.is_empty() {
        a.sizes.clone()
    } else if a.quick {
        vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20]
    } else {
        (12..=22).map(|s| 1u64 << s).collect()
    };
    let region_size = a
        .region_size
        .unwrap_or(if a.quick { 256 << 20 } else { 1 << 30 });
    let biggest = *sizes.iter().max().context("no sizes")?;
    if biggest * max_threads as u64 * 4 > region_size {
        bail!(
            "region size {} too small: need at least {} (4 requests of {} per thread)",
            size::show(region_size),
            size::show(biggest * max_threads as u64 * 4),
            size::show(biggest)
        );
    }
    if region_size < MIN_REGION {
        bail!(
            "region size {} too small: need at least {}",
            size::show(region_size),
            size::show(MIN_REGION)
        );
    }
    Ok((sizes, region_size))
}

/// PMDK, where its library loads (the baseline is skipped where it does not).
fn pmdk() -> Option<Pmdk> {
    match Pmdk::load() {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("note: PMDK baseline unavailable: {e}");
            None
        }
    }
}

/// The engine's and the media's names, as each record carries them.
fn names(b: &Bench, persist: switchyard_media::Persist) -> (String, String) {
    let info = b.movers[2].engine().info();
    let engine_name = format!(
        "{} ({} channel{})",
        info.name,
        info.channels,
        if info.channels == 1 { "" } else { "s" }
    );
    let media_name = format!(
        "{} region, flush {}, {}",
        b.region.kind().name(),
        persist.flush.name(),
        persist.simd.name()
    );
    (engine_name, media_name)
}

/// Every (direction, size, threads) point measured, threads 1 to `max_threads`.
fn points(sizes: &[u64], max_threads: usize) -> Vec<(Direction, u64, usize)> {
    let dirs = [Direction::ToSlow, Direction::FromSlow];
    dirs.iter()
        .flat_map(|&d| {
            sizes
                .iter()
                .flat_map(move |&s| (1..=max_threads).map(move |t| (d, s, t)))
        })
        .collect()
}

/// A progress bar over `len` points.
fn progress(len: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} bench copy [{bar:30}] {pos}/{len} points {msg} ({eta} left)",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    bar
}

/// The median of the odd rounds' rates over the even rounds' (a path's agreement with
/// itself), where there are two rounds or more.
fn self_ratio(gibs: &[f64], rounds: usize) -> Option<f64> {
    let half = |parity: usize| {
        median(
            &mut gibs
                .iter()
                .skip(parity)
                .step_by(2)
                .copied()
                .collect::<Vec<_>>(),
        )
    };
    (rounds >= 2).then(|| half(1) / half(0))
}

fn find<'a>(
    rs: &'a [Record],
    path: &str,
    dir: &str,
    size: u64,
    threads: usize,
) -> Option<&'a Record> {
    rs.iter()
        .find(|r| r.path == path && r.direction == dir && r.size == size && r.threads == threads)
}

/// `a` relative to `b`: the median over rounds of the per-round ratio of their GiB/s. The two
/// ran in the same round, a few slices apart, so drift slower than a round cancels out.
fn paired(a: &Record, b: &Record) -> f64 {
    median(
        &mut a
            .round_gib_per_s
            .iter()
            .zip(&b.round_gib_per_s)
            .map(|(x, y)| x / y)
            .collect::<Vec<_>>(),
    )
}

/// Scheduled relative to the better of cpu and engine (the better by median GiB/s), paired by
/// round.
fn sched_vs_best(rs: &[Record], dir: &str, sz: u64, t: usize) -> Option<f64> {
    let s = find(rs, "scheduled", dir, sz, t)?;
    let (c, e) = (
        find(rs, "cpu", dir, sz, t)?,
        find(rs, "engine", dir, sz, t)?,
    );
    Some(paired(s, if c.gib_per_s >= e.gib_per_s { c } else { e }))
}

/// The ratios the data-movement issue asks for, from this run.
#[derive(Debug, Serialize)]
struct Summary {
    record: &'static str,
    /// min over 64K–4M (one thread, durable writes) of cpu ÷ pmdk (paired by round).
    cpu_vs_pmdk_min: Option<f64>,
    /// min over ≥ 256K (one thread, durable writes) of cpu ÷ glibc memcpy + flush (paired).
    cpu_vs_glibc_min: Option<f64>,
    /// min and median over sizes (one thread, reads from slow memory) of cpu ÷ glibc memcpy
    /// (paired): Switchyard's CPU kernels against the C library's.
    cpu_vs_glibc_reads: Option<(f64, f64)>,
    /// one thread, 1M reads from slow memory: scheduled ÷ cpu (paired).
    split_read_1m_vs_cpu: Option<f64>,
    /// min over all points of scheduled ÷ max(cpu, engine), and where.
    scheduled_vs_best_min: Option<f64>,
    scheduled_vs_best_worst_point: Option<String>,
    /// min over all points and Switchyard paths of min(r, 1/r), r = the path's odd ÷ even
    /// rounds: how far a path differs from itself in this run.
    noise_floor_min: Option<f64>,
    /// The machine, engine and medium measured, and when.
    setup: Setup,
}

impl Summary {
    fn of(rs: &[Record], setup: Setup) -> Summary {
        let ratio = |a: &str, b: &str, dir: &str, sz: u64, t: usize| {
            Some(paired(find(rs, a, dir, sz, t)?, find(rs, b, dir, sz, t)?))
        };
        let min = |v: Vec<f64>| v.into_iter().min_by(|a, b| a.total_cmp(b));
        let sizes: Vec<u64> = {
            let mut s: Vec<u64> = rs.iter().map(|r| r.size).collect();
            s.sort_unstable();
            s.dedup();
            s
        };
        let cpu_vs_pmdk_min = min(sizes
            .iter()
            .filter(|&&s| (64 << 10..=4 << 20).contains(&s))
            .filter_map(|&s| ratio("cpu", "pmdk", "to_slow", s, 1))
            .collect());
        let cpu_vs_glibc_min = min(sizes
            .iter()
            .filter(|&&s| s >= 256 << 10)
            .filter_map(|&s| ratio("cpu", "glibc", "to_slow", s, 1))
            .collect());
        let mut reads: Vec<f64> = sizes
            .iter()
            .filter_map(|&s| ratio("cpu", "glibc", "from_slow", s, 1))
            .collect();
        let cpu_vs_glibc_reads = min(reads.clone()).map(|lo| (lo, median(&mut reads)));
        let split_read_1m_vs_cpu = ratio("scheduled", "cpu", "from_slow", 1 << 20, 1);
        let mut worst: Option<(f64, String)> = None;
        for r in rs.iter().filter(|r| r.path == "scheduled") {
            if let Some(x) = sched_vs_best(rs, r.direction, r.size, r.threads) {
                if worst.as_ref().is_none_or(|w| x < w.0) {
                    worst = Some((
                        x,
                        format!("{} {} ×{}", r.direction, size::show(r.size), r.threads),
                    ));
                }
            }
        }
        let noise_floor_min = min(rs
            .iter()
            .filter(|r| ["cpu", "engine", "scheduled"].contains(&r.path))
            .filter_map(|r| r.self_ratio.map(|x| x.min(1.0 / x)))
            .collect());
        Summary {
            record: "summary",
            noise_floor_min,
            cpu_vs_pmdk_min,
            cpu_vs_glibc_min,
            cpu_vs_glibc_reads,
            split_read_1m_vs_cpu,
            scheduled_vs_best_min: worst.as_ref().map(|w| w.0),
            scheduled_vs_best_worst_point: worst.map(|w| w.1),
            setup,
        }
    }

    fn print(&self) {
        let f = |x: Option<f64>| x.map_or("n/a".to_string(), |v| format!("{v:.3}"));
        println!();
        println!(
            "durable cpu ÷ pmdk, 64K–4M, 1 thread (min):          {}",
            f(self.cpu_vs_pmdk_min)
        );
        println!(
            "durable cpu ÷ glibc memcpy+flush, ≥256K, 1 thread:   {}",
            f(self.cpu_vs_glibc_min)
        );
        println!(
            "reads, cpu ÷ glibc memcpy, 1 thread, min (median):   {}",
            self.cpu_vs_glibc_reads
                .map_or("n/a".to_string(), |(lo, mid)| format!("{lo:.3} ({mid:.3})"))
        );
        println!(
            "1M read from slow memory, 1 thread, scheduled ÷ cpu: {}",
            f(self.split_read_1m_vs_cpu)
        );
        println!(
            "scheduled ÷ best(cpu, engine), worst point:          {} ({})",
            f(self.scheduled_vs_best_min),
            self.scheduled_vs_best_worst_point.as_deref().unwrap_or("-")
        );
        println!(
            "noise floor: a path ÷ itself (odd ÷ even rounds), worst: {}",
            f(self.noise_floor_min)
        );
    }
}
