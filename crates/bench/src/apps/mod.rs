//! `switchyard bench apps`: EasyIO's comparison on real work (§6.2–6.3). Each application runs
//! over files in the store twice per round — synchronously (blocking calls, one thread on the
//! application core) and asynchronously (tasks on a `switchyard_rt` executor on the same
//! core) — with the engine's worker on the other core. The application code is the same in
//! both modes (`harness`); only how it reaches the store differs.
//!
//! Applications: grep-like regex scan, snappy decompression into new files, SHA-256 of files,
//! BFS over graphs read from files, and Filebench's fileserver flow. Per application and mode:
//! throughput (file bytes read and written per second), p50/p99 latency of one operation,
//! process CPU seconds per GiB (the engine's worker included) and, for sync, the share of run
//! time spent inside store calls. Then FxMark's DWAL and DRBL as throughput-latency curves
//! over 1..N workers (threads in sync, tasks in async).
//!
//! With `--hog` every application also runs with a process spinning on the engine's core
//! the whole time (module `hog`), as another program would keep it busy: an asynchronous
//! task must not run slower than the same work done synchronously, whatever else the
//! machine is doing.
//!
//! Every operation checks its result (match counts, digests, search results, read-back
//! contents) against what was computed in memory when the input was written.

mod bfs;
mod corpus;
mod fileserver;
mod fxmark;
mod grep;
mod harness;
mod hash;
mod hog;
mod snappy;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use switchyard_media::Region;
use switchyard_mover::lab::{median, rotated};
use switchyard_mover::{Config, Mover};
use switchyard_store::{Fs, Owner, Store};

use self::fxmark::{FxMark, Workload};
use self::harness::{App, Mode, Run};
pub use self::hog::Load;
use crate::measure::{emit, scratch_dir, Setup};
use switchyard_options::size;

/// The applications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AppName {
    /// Count the lines of log files that match a regex (2 MiB reads).
    Grep,
    /// Decompress snappy files into new files (≈1 MiB reads, 2 MiB writes).
    Snappy,
    /// SHA-256 of log files (2 MiB reads).
    Hash,
    /// Read graphs (1 MiB reads), build them in memory, search breadth-first.
    Bfs,
    /// Create, write 1 MiB, append 16 KiB, read back, stat, delete.
    Fileserver,
}

impl AppName {
    fn name(self) -> &'static str {
        match self {
            AppName::Grep => "grep",
            AppName::Snappy => "snappy",
            AppName::Hash => "hash",
            AppName::Bfs => "bfs",
            AppName::Fileserver => "fileserver",
        }
    }

    /// What one operation of the application is.
    fn op(self) -> &'static str {
        match self {
            AppName::Grep => "scan one 8 MiB file",
            AppName::Snappy => "decompress one file to a new 2 MiB file",
            AppName::Hash => "hash one 8 MiB file",
            AppName::Bfs => "read, build and search one 4.5 MiB graph",
            AppName::Fileserver => "one file's create-write-append-read-stat-delete",
        }
    }
}

/// `bench apps` options.
#[derive(Args)]
pub struct AppsArgs {
    /// Smaller data sets and fewer rounds (a few seconds).
    #[arg(long)]
    quick: bool,
    /// One JSON object per line (one per application or curve point and mode, then a summary).
    #[arg(long)]
    json: bool,
    /// Run every application twice, quiet and with a process spinning on the engine's core
    /// (the last CPU) the whole time.
    #[arg(long)]
    hog: bool,
    /// Applications to run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "grep,snappy,hash,bfs,fileserver"
    )]
    apps: Vec<AppName>,
    /// FxMark workloads for the throughput-latency curves (`--fxmark` alone: none).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "dwal,drbl")]
    fxmark: Vec<Workload>,
    /// Tasks in the asynchronous mode; the synchronous mode runs one thread (one per
    /// application core). Two keep one read in flight while the other task computes, which
    /// is what EasyIO's admission rule lets one engine channel hold (fewer than 2 queued);
    /// more add working sets that compete for the core's cache.
    #[arg(long, default_value_t = 2)]
    tasks: usize,
    /// The regular expression grep counts lines of (the default is a literal-prefixed
    /// pattern, the kind grep and ripgrep scan fastest).
    #[arg(long, default_value = grep::PATTERN)]
    pattern: String,
    /// Input bytes per application [default: 256M; with --quick 64M].
    #[arg(long, value_parser = size::parse)]
    data: Option<u64>,
    /// Rounds, each running both modes in rotated order [default: 7; with --quick 3].
    #[arg(long)]
    rounds: Option<usize>,
    /// Workers (threads in sync, tasks in async) at the points of the FxMark curves.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    workers: Vec<usize>,
    /// Block sizes of the FxMark curves (FxMark's own is 4K).
    #[arg(long, value_delimiter = ',', value_parser = size::parse, default_value = "4K,64K")]
    blocks: Vec<u64>,
    /// Bytes per FxMark point [default: 64M; with --quick 16M].
    #[arg(long, value_parser = size::parse)]
    fx_bytes: Option<u64>,
    /// Scratch directory for the stores [default: /dev/shm if present, else .].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Configuration file (the engine and the mover's policy).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Engine profile from `switchyard tune` (the offload thresholds) [default:
    /// ./switchyard.profile.toml, if it exists].
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Ignore any engine profile: the configuration's (or built-in) thresholds.
    #[arg(long, conflicts_with = "profile")]
    no_profile: bool,
}

/// One application in one mode: medians over rounds.
#[derive(Debug, Clone, Serialize)]
pub struct AppRecord {
    /// The application.
    pub app: AppName,
    /// What else the machine ran meanwhile.
    pub load: Load,
    /// `sync`, `async` or `async-wait`.
    pub mode: Mode,
    /// Threads (sync) or tasks (async).
    pub workers: usize,
    /// File bytes read and written per second, GiB.
    pub gib_s: f64,
    /// Operations per second.
    pub ops_s: f64,
    /// Operation latency, µs.
    pub p50_us: f64,
    /// Operation latency, µs.
    pub p99_us: f64,
    /// Process CPU seconds (the engine's worker included) per GiB of file data.
    pub cpu_s_per_gib: f64,
    /// Share of run time spent inside store calls (sync only).
    pub io_share: Option<f64>,
    /// Share of the copied bytes the engine copied.
    pub engine_share: f64,
    /// Share of the copied bytes the idle executor copied from the tail of engine batches.
    pub helped_share: f64,
}

/// One point of an FxMark curve: medians over rounds.
#[derive(Debug, Clone, Serialize)]
pub struct FxRecord {
    /// DWAL or DRBL.
    pub workload: Workload,
    /// Bytes per operation.
    pub block: u64,
    /// `sync` or `async`.
    pub mode: Mode,
    /// Threads (sync) or tasks (async).
    pub workers: usize,
    /// GiB per second.
    pub gib_s: f64,
    /// Thousands of operations per second.
    pub kops_s: f64,
    /// Operation latency, µs.
    pub mean_us: f64,
    /// Operation latency, µs.
    pub p50_us: f64,
    /// Operation latency, µs.
    pub p99_us: f64,
}

/// A line of output.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Record {
    /// An application.
    App(AppRecord),
    /// A point of a curve.
    Fxmark(FxRecord),
}

/// One application's comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The application.
    pub app: AppName,
    /// What else the machine ran meanwhile.
    pub load: Load,
    /// What one operation is.
    pub op: &'static str,
    /// Median over rounds of async ÷ sync throughput in the same round.
    pub async_vs_sync: f64,
    /// The same for async-wait (an executor that waits for its copies instead of helping).
    pub waiting_vs_sync: f64,
    /// Share of the sync run's time spent inside store calls.
    pub io_share: f64,
}

/// The comparisons and where they ran.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Per application.
    pub apps: Vec<Comparison>,
    /// Rounds.
    pub rounds: usize,
    /// Input bytes per application.
    pub data: u64,
    /// Asynchronous tasks.
    pub tasks: usize,
    /// Where it ran (none when nothing ran).
    pub setup: Option<Setup>,
}

/// A store of its own for one application (dropped, and its file removed, after it).
struct AppStore {
    fs: Arc<Fs>,
    path: PathBuf,
}

impl AppStore {
    fn new(
        dir: &Path,
        name: &str,
        len: u64,
        cfg: &Config,
        mover: &Arc<Mover>,
    ) -> anyhow::Result<AppStore> {
        let path = dir.join(format!("{name}.region"));
        let region = Region::create(&path, len, cfg.persist())?;
        // Page allocation on first touch is the file system's cost, not the store's.
        region.populate()?;
        let fs = Fs::new(Store::format(region, mover.clone(), Owner::current())?);
        Ok(AppStore {
            fs: Arc::new(fs),
            path,
        })
    }

    fn close(self) -> anyhow::Result<()> {
        let fs = Arc::into_inner(self.fs).expect("the runs hold no store handle after they end");
        fs.unmount()?;
        std::fs::remove_file(&self.path)?;
        Ok(())
    }
}

fn load_config(a: &AppsArgs) -> anyhow::Result<Config> {
    Ok(switchyard_options::config_with_profile(
        a.config.as_deref(),
        a.profile.as_deref(),
        a.no_profile,
    )?
    .mover)
}

/// Runs the benchmark.
pub fn run(a: &AppsArgs) -> anyhow::Result<()> {
    let rounds = a.rounds.unwrap_or(if a.quick { 3 } else { 7 }).max(1);
    let data = a.data.unwrap_or(if a.quick { 64 << 20 } else { 256 << 20 });
    let fx_bytes = a
        .fx_bytes
        .unwrap_or(if a.quick { 16 << 20 } else { 64 << 20 });
    check(a)?;
    let cfg = load_config(a)?;
    let dir = scratch_dir(&a.dir);
    let work = tempfile::Builder::new()
        .prefix("switchyard-bench-apps.")
        .tempdir_in(&dir)
        .with_context(|| format!("creating a scratch directory in {}", dir.display()))?;
    let mover = Arc::new(Mover::start(&cfg)?);
    let max_workers = a.workers.iter().copied().max().unwrap_or(1);
    let loads: &[Load] = if a.hog {
        &[Load::Quiet, Load::Hog]
    } else {
        &[Load::Quiet]
    };
    let steps = (a.apps.len() * loads.len() * Mode::ALL.len()
        + a.fxmark.len() * a.blocks.len() * a.workers.len() * Mode::BOTH.len())
        * rounds;
    let bar = progress(steps as u64);
    let mut records = Vec::new();
    let mut comparisons = Vec::new();
    let mut setup = None;
    for &app in &a.apps {
        bar.set_message(format!("{}: writing its input", app.name()));
        let store = AppStore::new(
            work.path(),
            app.name(),
            4 * data + (256 << 20),
            &cfg,
            &mover,
        )?;
        let fs = &store.fs;
        let c = Compare {
            fs,
            tasks: a.tasks,
            rounds,
            loads,
            bar: &bar,
        };
        let (runs, cmp) = match app {
            AppName::Grep => c.run(app, grep::Grep::prepare(fs, &a.pattern, data)?),
            AppName::Snappy => c.run(app, snappy::Snappy::prepare(fs, data)?),
            AppName::Hash => c.run(app, hash::Hash::prepare(fs, data)?),
            AppName::Bfs => c.run(app, bfs::Bfs::prepare(fs, data)?),
            AppName::Fileserver => c.run(app, fileserver::Fileserver::prepare(fs, data)?),
        }
        .with_context(|| format!("running {}", app.name()))?;
        records.extend(runs.into_iter().map(Record::App));
        comparisons.extend(cmp);
        setup.get_or_insert_with(|| Setup::now(&cfg, fs.store().region(), a.quick));
        store.close()?;
    }
    if !a.fxmark.is_empty() {
        let fx_region = (max_workers as u64) * (4 << 20) + 2 * fx_bytes + (256 << 20);
        let store = AppStore::new(work.path(), "fxmark", fx_region, &cfg, &mover)?;
        for &workload in &a.fxmark {
            for &block in &a.blocks {
                records.extend(fxmark_block(
                    &store.fs, workload, block, a, rounds, fx_bytes, &bar,
                )?);
            }
        }
        setup.get_or_insert_with(|| Setup::now(&cfg, store.fs.store().region(), a.quick));
        store.close()?;
    }
    bar.finish_and_clear();
    let summary = Summary {
        apps: comparisons,
        rounds,
        data,
        tasks: a.tasks,
        setup,
    };
    emit(a.json, &records, &summary, print_tables)
}

/// FxMark's `workload` in blocks of `block` on `fs`: a record per worker count of `a` and
/// mode, each a median over `rounds`.
fn fxmark_block(
    fs: &Arc<Fs>,
    workload: Workload,
    block: u64,
    a: &AppsArgs,
    rounds: usize,
    fx_bytes: u64,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Vec<Record>> {
    bar.set_message(format!("{} {}", workload.name(), size::show(block)));
    let mut records = Vec::new();
    let max_workers = a.workers.iter().copied().max().unwrap_or(1);
    let fx = Arc::new(FxMark::prepare(
        fs,
        workload,
        block as usize,
        fx_bytes,
        max_workers,
    )?);
    for &workers in &a.workers {
        let got = rotated(Mode::BOTH.len(), rounds, |m| {
            let r = harness::run(&fx, fs, Mode::BOTH[m], workers);
            bar.inc(1);
            r
        })
        .with_context(|| {
            format!(
                "running {} {} with {workers} workers",
                workload.name(),
                size::show(block)
            )
        })?;
        for (m, runs) in got.iter().enumerate() {
            let med = |f: fn(&Run) -> f64| over_rounds(runs, f);
            records.push(Record::Fxmark(FxRecord {
                workload,
                block,
                mode: Mode::BOTH[m],
                workers,
                gib_s: med(|r| r.gib_s()),
                kops_s: med(|r| r.ops as f64 / r.wall_s / 1e3),
                mean_us: med(|r| r.mean_us()),
                p50_us: med(|r| r.lat(0.5)),
                p99_us: med(|r| r.lat(0.99)),
            }));
        }
    }
    Ok(records)
}

/// A progress bar over `len` runs.
fn progress(len: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} bench apps [{bar:30}] {pos}/{len} runs {msg} ({eta} left)",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    bar
}

/// Refuses task and worker counts of 0 and block sizes outside 1 byte to 4 MiB.
fn check(a: &AppsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.tasks >= 1, "--tasks must be at least 1");
    anyhow::ensure!(
        a.workers.iter().all(|&w| w >= 1),
        "--workers must be at least 1"
    );
    if let Some(&b) = a.blocks.iter().find(|&&b| b == 0 || b > 4 << 20) {
        anyhow::bail!("block size {b} must be between 1 byte and 4M");
    }
    Ok(())
}

/// How each application is compared.
struct Compare<'a> {
    fs: &'a Arc<Fs>,
    tasks: usize,
    rounds: usize,
    loads: &'a [Load],
    bar: &'a indicatif::ProgressBar,
}

impl Compare<'_> {
    /// Runs `app` under each load; each load's and mode's medians, and the comparisons.
    fn run<A: App>(
        &self,
        name: AppName,
        app: A,
    ) -> anyhow::Result<(Vec<AppRecord>, Vec<Comparison>)> {
        let app = Arc::new(app);
        let (mut records, mut comparisons) = (Vec::new(), Vec::new());
        for &load in self.loads {
            let _load = load.start()?;
            let (runs, cmp) = self
                .run_under(name, &app, load)
                .with_context(|| format!("under load {}", load.name()))?;
            records.extend(runs);
            comparisons.push(cmp);
        }
        Ok((records, comparisons))
    }

    /// Runs `app` in every mode for `rounds` rounds under `load` (already started); each
    /// mode's medians, and the comparison.
    fn run_under<A: App>(
        &self,
        name: AppName,
        app: &Arc<A>,
        load: Load,
    ) -> anyhow::Result<(Vec<AppRecord>, Comparison)> {
        let (fs, tasks, rounds, bar) = (self.fs, self.tasks, self.rounds, self.bar);
        // One thread per application core in sync; `tasks` tasks on that core in async.
        let workers = |mode: Mode| match mode {
            Mode::Sync => 1,
            Mode::Async | Mode::AsyncWait => tasks,
        };
        bar.set_message(format!("{}: warming up", name.name()));
        // One untimed run of each mode first: the first touch of freshly allocated memory (the
        // workers' buffers, the allocator's arenas) is slow on a virtual machine.
        for mode in Mode::ALL {
            harness::run(app, fs, mode, workers(mode))?;
        }
        bar.set_message(name.name());
        let got = rotated(Mode::ALL.len(), rounds, |m| {
            let r = harness::run(app, fs, Mode::ALL[m], workers(Mode::ALL[m]));
            bar.inc(1);
            r
        })?;
        let mut records = Vec::new();
        for (m, runs) in got.iter().enumerate() {
            let med = |f: fn(&Run) -> f64| over_rounds(runs, f);
            let mode = Mode::ALL[m];
            records.push(AppRecord {
                app: name,
                load,
                mode,
                workers: workers(mode),
                gib_s: med(|r| r.gib_s()),
                ops_s: med(|r| r.ops as f64 / r.wall_s),
                p50_us: med(|r| r.lat(0.5)),
                p99_us: med(|r| r.lat(0.99)),
                cpu_s_per_gib: med(|r| r.cpu_s_per_gib()),
                io_share: (mode == Mode::Sync).then(|| med(|r| r.io_share())),
                engine_share: med(|r| r.copy_share(r.engine_bytes)),
                helped_share: med(|r| r.copy_share(r.helped_bytes)),
            });
        }
        // The median over rounds of each round's ratio of mode `a` to mode `b`.
        let ratio = |a: usize, b: usize| {
            median(
                &mut got[a]
                    .iter()
                    .zip(&got[b])
                    .map(|(x, y)| x.gib_s() / y.gib_s())
                    .collect::<Vec<_>>(),
            )
        };
        let cmp = Comparison {
            app: name,
            load,
            op: name.op(),
            async_vs_sync: ratio(1, 0),
            waiting_vs_sync: ratio(2, 0),
            io_share: records[0].io_share.unwrap_or(0.0),
        };
        Ok((records, cmp))
    }
}

/// The median over rounds of `f` of each round's run.
fn over_rounds(runs: &[Run], f: fn(&Run) -> f64) -> f64 {
    median(&mut runs.iter().map(f).collect::<Vec<_>>())
}

fn print_tables(records: &[Record], s: &Summary) {
    if let Some(setup) = &s.setup {
        println!(
            "applications on one core, the engine ({}) on the other; {} of input each, {} \
             rounds, async with {} tasks; media: {}",
            setup.engine_line(),
            size::show(s.data),
            s.rounds,
            s.tasks,
            setup.media.kind,
        );
    }
    let apps: Vec<&AppRecord> = records
        .iter()
        .filter_map(|r| match r {
            Record::App(a) => Some(a),
            Record::Fxmark(_) => None,
        })
        .collect();
    if !apps.is_empty() {
        print_apps(&apps, s);
    }
    print_fxmark(records);
}

/// The applications' table, and their throughput over sync's.
fn print_apps(apps: &[&AppRecord], s: &Summary) {
    println!(
        "{:<11} {:<5} {:<10} {:>7} {:>9} {:>10} {:>10} {:>8} {:>6} {:>7} {:>7}",
        "app",
        "load",
        "mode",
        "GiB/s",
        "ops/s",
        "p50",
        "p99",
        "CPU s/GiB",
        "I/O",
        "engine",
        "helped"
    );
    for r in apps {
        println!(
            "{:<11} {:<5} {:<10} {:>7.2} {:>9.1} {:>8.0}µs {:>8.0}µs {:>8.3} {:>6} {:>6.0}% \
             {:>6.0}%",
            r.app.name(),
            r.load.name(),
            r.mode.name(),
            r.gib_s,
            r.ops_s,
            r.p50_us,
            r.p99_us,
            r.cpu_s_per_gib,
            r.io_share
                .map_or(String::new(), |x| format!("{:.0}%", 100.0 * x)),
            100.0 * r.engine_share,
            100.0 * r.helped_share,
        );
    }
    println!(
        "(I/O: sync's share of time in store calls; engine, helped: shares of the copied bytes \
         the engine copied, and the idle executor copied from the tail of engine batches)"
    );
    println!(
        "\nthroughput ÷ sync's (median over rounds of the same round's ratio): async, and \
         async-wait (an executor that does not help the engine)"
    );
    for c in &s.apps {
        println!(
            "  {:<11} {:<5} {:>6.3} {:>6.3}   (sync spends {:.0}% of its time in store calls; \
             one operation: {})",
            c.app.name(),
            c.load.name(),
            c.async_vs_sync,
            c.waiting_vs_sync,
            100.0 * c.io_share,
            c.op
        );
    }
}

/// FxMark's table of throughput and latency, where it ran.
fn print_fxmark(records: &[Record]) {
    let mut fx = records
        .iter()
        .filter_map(|r| match r {
            Record::Fxmark(f) => Some(f),
            Record::App(_) => None,
        })
        .peekable();
    if fx.peek().is_some() {
        println!("\nFxMark throughput vs latency (workers: threads in sync, tasks in async)");
        println!(
            "{:<5} {:>6} {:<5} {:>7} {:>8} {:>9} {:>10} {:>10} {:>10}",
            "", "block", "mode", "workers", "GiB/s", "kops/s", "mean", "p50", "p99"
        );
        for f in fx {
            println!(
                "{:<5} {:>6} {:<5} {:>7} {:>8.2} {:>9.1} {:>8.1}µs {:>8.1}µs {:>8.1}µs",
                f.workload.name(),
                size::show(f.block),
                f.mode.name(),
                f.workers,
                f.gib_s,
                f.kops_s,
                f.mean_us,
                f.p50_us,
                f.p99_us
            );
        }
    }
}
