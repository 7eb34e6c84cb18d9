//! `switchyard bench large`: what the commands that open a whole store cost on a store the size
//! of real slow memory (1 TiB by default), empty and holding a million files, against the same
//! files in a store just large enough to hold them (the baseline, measured in the same run).
//!
//! Each command runs as its own process (`switchyard mkfs`, `fsck`, `stat`, and `ls /` for a
//! mount and unmount), so its wall time includes starting the process, and its peak resident
//! set (from `wait4`) is its own. For each store, in order:
//!
//! 1. `mkfs`, then `fsck`, `stat` and `ls` of the empty store;
//! 2. the files (empty, in directories of 1,000) are made in this process, a crash image of the
//!    store file is taken while it is still mounted (its bytes as they stand: every operation
//!    that returned is in them), and the store is unmounted cleanly;
//! 3. `fsck`, `stat` and `ls` of the clean store;
//! 4. `fsck` of the crash image, then `ls` of it: a mount that runs recovery.
//!
//! If what a command costs follows what is stored, not the capacity, every ratio of the large
//! store to the baseline is near 1.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use switchyard_media::Region;
use switchyard_mover::{Config, Mover};
use switchyard_store::{Fs, Store};

use crate::measure::emit;
use crate::meta::{crash_image, populate};

/// `bench large` options.
#[derive(Args)]
pub struct LargeBenchArgs {
    /// Directory for the store files, removed afterwards (default: the working directory, an
    /// ordinary disk file system, where a sparse store file costs only what it holds).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Capacity of the large store (K, M, G and T suffixes).
    #[arg(long, default_value = "1T", value_parser = switchyard_options::size::parse)]
    capacity: u64,
    /// Files in the populated stores (default 1,000,000; 100,000 with --quick).
    #[arg(long)]
    files: Option<usize>,
    /// A short run: 100,000 files.
    #[arg(long)]
    quick: bool,
    /// Print one JSON record per command (and a summary record) instead of the table.
    #[arg(long)]
    json: bool,
    /// Internal: make the files in this store, write its crash image to --crash-image,
    /// unmount it, print the time and the bytes used, and exit (the benchmark runs this as a
    /// child, so that its own memory stays small: a child's peak resident set counts the
    /// memory of the process that started it).
    #[arg(long, hide = true, requires = "crash_image")]
    populate: Option<PathBuf>,
    /// Internal: where --populate writes the crash image.
    #[arg(long, hide = true)]
    crash_image: Option<PathBuf>,
}

/// What a population child reports.
#[derive(Debug, Serialize, serde::Deserialize)]
struct Populated {
    seconds: f64,
    stored_bytes: u64,
}

/// The population child: makes `files` files in the store at `path`, writes its crash image
/// to `crashed` while it is mounted, then unmounts it cleanly.
fn populate_child(
    path: &std::path::Path,
    crashed: &std::path::Path,
    files: usize,
) -> anyhow::Result<()> {
    let cfg = Config::default();
    let mover = Arc::new(Mover::start(&cfg)?);
    let t0 = Instant::now();
    let fs = Fs::new(Store::mount(Region::open(path, 0, cfg.persist())?, mover)?);
    populate(&fs, files)?;
    let seconds = t0.elapsed().as_secs_f64();
    let s = fs.statfs();
    crash_image(fs.store().region(), crashed)?;
    fs.unmount()
        .map_err(|e| anyhow::anyhow!("unmounting the populated store: {e}"))?;
    let stored_bytes = (s.blocks - s.free_blocks) * s.block_size;
    println!(
        "{}",
        serde_json::to_string(&Populated {
            seconds,
            stored_bytes
        })?
    );
    Ok(())
}

/// One command on one store.
#[derive(Debug, Serialize)]
struct Record {
    /// `baseline` or `large`.
    store: &'static str,
    capacity_bytes: u64,
    /// `empty`, `clean` (populated, cleanly unmounted) or `crashed` (the crash image).
    state: &'static str,
    /// What ran: `mkfs`, `fsck`, `stat` or `mount` (`ls /`: mount, list, unmount).
    command: &'static str,
    seconds: f64,
    peak_rss_bytes: u64,
}

/// The run's setting and the population times.
#[derive(Debug, Serialize)]
struct Summary {
    summary: bool,
    files: usize,
    dir: String,
    /// Seconds to make the files in process, per store.
    populate_s: Vec<(&'static str, f64)>,
    /// Bytes of the store file the populated store used, per store.
    stored_bytes: Vec<(&'static str, u64)>,
}

/// Runs `switchyard args…`; returns its wall time, peak resident set and standard output,
/// failing if it fails.
fn timed(args: &[&str]) -> anyhow::Result<(f64, u64, String)> {
    let exe = crate::product::program()?;
    let t0 = Instant::now();
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting switchyard {}", args.join(" ")))?;
    // Both pipes are drained at once, so a child that fills one cannot stall on it.
    let mut stderr = child.stderr.take().expect("piped");
    let err = std::thread::spawn(move || {
        let mut err = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut err).map(|_| err)
    });
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("piped"), &mut out)?;
    let err = err.join().expect("stderr reader")?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data the call fills.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet waited for; the pointers are valid for the call.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let seconds = t0.elapsed().as_secs_f64();
    anyhow::ensure!(r == pid, "waiting for switchyard {}", args.join(" "));
    anyhow::ensure!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "switchyard {} failed:\n{out}{err}",
        args.join(" ")
    );
    Ok((seconds, ru.ru_maxrss as u64 * 1024, out))
}

/// Runs `bench large`.
pub fn run(a: &LargeBenchArgs) -> anyhow::Result<()> {
    let files = a.files.unwrap_or(if a.quick { 100_000 } else { 1_000_000 });
    if let Some((path, crashed)) = a.populate.as_ref().zip(a.crash_image.as_ref()) {
        return populate_child(path, crashed, files);
    }
    // Room for each file's log page with a quarter to spare, and for the directories.
    let baseline = (((files as u64 * 20) << 10) + (64 << 20)).next_multiple_of(2 << 20);
    anyhow::ensure!(
        a.capacity >= baseline,
        "--capacity must hold the baseline store of {files} files ({} bytes)",
        baseline
    );
    let dir = a.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    let work = tempfile::Builder::new()
        .prefix("switchyard-bench-large.")
        .tempdir_in(&dir)
        .with_context(|| format!("making a scratch directory in {}", dir.display()))?;
    let mut records = Vec::new();
    let mut populate_s = Vec::new();
    let mut stored_bytes = Vec::new();
    for (name, capacity) in [("baseline", baseline), ("large", a.capacity)] {
        eprintln!(
            "{name} store: {} with {files} files",
            switchyard_options::size::show(capacity)
        );
        let path = work.path().join(format!("{name}.store"));
        let crashed = work.path().join(format!("{name}.crashed"));
        let p = path.to_str().context("a scratch path that is not UTF-8")?;
        let c = crashed
            .to_str()
            .context("a scratch path that is not UTF-8")?;
        let size = capacity.to_string();
        let mut run = |state, command, args: &[&str]| -> anyhow::Result<()> {
            let (seconds, peak_rss_bytes, _) = timed(args)?;
            records.push(Record {
                store: name,
                capacity_bytes: capacity,
                state,
                command,
                seconds,
                peak_rss_bytes,
            });
            Ok(())
        };
        run("empty", "mkfs", &["mkfs", "--size", &size, "--store", p])?;
        let checks = |run: &mut dyn FnMut(_, _, &[&str]) -> anyhow::Result<()>, state, s| {
            run(state, "fsck", &["fsck", "--store", s])?;
            run(state, "stat", &["stat", "--no-profile", "--store", s])?;
            run(state, "mount", &["ls", "--store", s, "/"])
        };
        checks(&mut run, "empty", p)?;
        let (_, _, said) = timed(&[
            "bench",
            "large",
            "--files",
            &files.to_string(),
            "--populate",
            p,
            "--crash-image",
            c,
        ])?;
        let made: Populated =
            serde_json::from_str(said.trim()).context("reading what the population child made")?;
        populate_s.push((name, made.seconds));
        stored_bytes.push((name, made.stored_bytes));
        checks(&mut run, "clean", p)?;
        run("crashed", "fsck", &["fsck", "--store", c])?;
        run("crashed", "mount", &["ls", "--store", c, "/"])?;
        std::fs::remove_file(&path)?;
        std::fs::remove_file(&crashed)?;
    }
    let summary = Summary {
        summary: true,
        files,
        dir: dir.display().to_string(),
        populate_s,
        stored_bytes,
    };
    emit(a.json, &records, &summary, print_table)
}

fn print_table(records: &[Record], s: &Summary) {
    println!(
        "{:>8} {:>6} {:>13} {:>12} {:>13} {:>12} {:>11} {:>11}",
        "state",
        "cmd",
        "baseline s",
        "baseline RSS",
        "large s",
        "large RSS",
        "time ratio",
        "RSS ratio"
    );
    let mb = |b: u64| format!("{:.0} MB", b as f64 / 1e6);
    for base in records.iter().filter(|r| r.store == "baseline") {
        let Some(large) = records
            .iter()
            .find(|r| r.store == "large" && r.state == base.state && r.command == base.command)
        else {
            continue;
        };
        println!(
            "{:>8} {:>6} {:>13.3} {:>12} {:>13.3} {:>12} {:>11.2} {:>11.2}",
            base.state,
            base.command,
            base.seconds,
            mb(base.peak_rss_bytes),
            large.seconds,
            mb(large.peak_rss_bytes),
            large.seconds / base.seconds,
            large.peak_rss_bytes as f64 / base.peak_rss_bytes as f64
        );
    }
    let cap = |n: &str| {
        records
            .iter()
            .find(|r| r.store == n)
            .map_or(0, |r| r.capacity_bytes)
    };
    println!(
        "{} files (empty, 1,000 per directory) in {}; baseline {}, large {}; each command its own process (time includes its start; RSS is its peak)",
        s.files,
        s.dir,
        switchyard_options::size::show(cap("baseline")),
        switchyard_options::size::show(cap("large"))
    );
    for ((n, t), (_, b)) in s.populate_s.iter().zip(&s.stored_bytes) {
        println!(
            "{n}: files made in process in {t:.1} s, {} of the store used",
            switchyard_options::size::show(*b)
        );
    }
}
