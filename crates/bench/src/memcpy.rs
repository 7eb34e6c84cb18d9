//! `switchyard bench memcpy`: an unmodified program's `memcpy` with the memcpy preload library
//! (`libswitchyard_memcpy.so`, see `crates/preload-memcpy`) against plain libc, in one run.
//!
//! Each measurement is a process of its own (this binary with the hidden `--worker`), started
//! with and without `LD_PRELOAD` in ABBA order per round; each times `memcpy` calls of one size
//! for a fixed time, through the dynamic symbol a C program would call, so the preload
//! interposes it exactly as it would a C program's. Sizes below the library's threshold
//! (64 KiB) copy within a 256 KiB span (cache-resident: the interposer's own cost shows);
//! larger ones across 128 MiB (memory-bound, as a program's bulk copies are). Reports per size
//! the GiB/s of both and the median over rounds of preloaded ÷ libc.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;

use crate::measure::{emit, median};

/// `bench memcpy` options.
#[derive(Args)]
pub struct MemcpyArgs {
    /// The preload library [default: libswitchyard_memcpy.so next to this binary; build it
    /// with `cargo build --release -p switchyard-preload-memcpy`].
    #[arg(long)]
    library: Option<PathBuf>,
    /// ABBA rounds (default 5; 3 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Milliseconds each measurement copies for (default 300; 100 with --quick).
    #[arg(long)]
    ms: Option<u64>,
    /// Fewer and shorter rounds.
    #[arg(long)]
    quick: bool,
    /// Print one JSON record per size and a summary record instead of the table.
    #[arg(long)]
    json: bool,
    /// Internal: copy BYTES-sized blocks for MS milliseconds in this process and print GiB/s.
    #[arg(long, hide = true, num_args = 2, value_names = ["BYTES", "MS"])]
    worker: Option<Vec<u64>>,
}

/// Sizes measured: two below the library's threshold, two above.
const SIZES: [usize; 4] = [4 << 10, 32 << 10, 1 << 20, 8 << 20];

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Record {
    bench: &'static str,
    bytes: usize,
    libc_gib_s: f64,
    preload_gib_s: f64,
    /// Median over rounds of preloaded ÷ libc (each round: the mean of its two runs of each).
    preload_vs_libc: f64,
    /// Median over rounds of two plain copiers at once (their GiB/s together) ÷ libc: what a
    /// second core can add on this machine, the ceiling of a split's gain.
    two_libc_vs_libc: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Summary {
    summary: bool,
    bench: &'static str,
    rounds: usize,
    ms: u64,
    library: String,
    /// Whether ./switchyard.profile.toml existed (the preloaded mover applies it).
    profile: bool,
}

/// Copies `bytes`-sized blocks for `ms` through the dynamic `memcpy` and prints GiB/s.
fn worker(bytes: usize, ms: u64) -> anyhow::Result<()> {
    let span = if bytes < 64 << 10 {
        256 << 10
    } else {
        128 << 20
    }
    .max(2 * bytes);
    let src = vec![7u8; span];
    let mut dst = vec![1u8; span];
    let slots = span / bytes;
    let dur = Duration::from_millis(ms);
    let (mut moved, mut k) = (0u64, 0usize);
    let t = Instant::now();
    while t.elapsed() < dur {
        for _ in 0..16 {
            let off = (k % slots) * bytes;
            let back = ((k * 7 + 3) % slots) * bytes;
            // SAFETY: both ranges lie inside their own buffers (`off`, `back` + `bytes` ≤
            // `span`); called through the dynamic symbol so a preload interposes it.
            unsafe {
                libc::memcpy(
                    dst.as_mut_ptr().add(off).cast(),
                    src.as_ptr().add(back).cast(),
                    bytes,
                )
            };
            k += 1;
            moved += bytes as u64;
        }
    }
    let gib_s = moved as f64 / (1u64 << 30) as f64 / t.elapsed().as_secs_f64();
    std::hint::black_box(&dst);
    println!("{gib_s}");
    Ok(())
}

/// One measurement in a process of its own.
fn measure(library: Option<&PathBuf>, bytes: usize, ms: u64) -> anyhow::Result<f64> {
    let out = worker_command(library, bytes, ms)?
        .output()
        .context("run a measurement")?;
    reading(&out)
}

/// Two plain measurements at once, each in a process of its own: their GiB/s together, what
/// two cores copying at once reach on this machine (the most a split can gain).
fn measure_two(bytes: usize, ms: u64) -> anyhow::Result<f64> {
    let spawn = || -> anyhow::Result<std::process::Child> {
        Ok(worker_command(None, bytes, ms)?
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?)
    };
    let (a, b) = (spawn()?, spawn()?);
    Ok(reading(&a.wait_with_output()?)? + reading(&b.wait_with_output()?)?)
}

/// A measurement's GiB/s, from what its process printed.
fn reading(out: &std::process::Output) -> anyhow::Result<f64> {
    if !out.status.success() {
        bail!(
            "a measurement failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .with_context(|| format!("a measurement printed {text:?}"))
}

/// The command of one measurement, with `library` preloaded or none.
fn worker_command(library: Option<&PathBuf>, bytes: usize, ms: u64) -> anyhow::Result<Command> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args([
        "bench",
        "memcpy",
        "--worker",
        &bytes.to_string(),
        &ms.to_string(),
    ]);
    cmd.env_remove("LD_PRELOAD");
    if let Some(l) = library {
        cmd.env("LD_PRELOAD", l);
    }
    Ok(cmd)
}

/// Runs the benchmark.
pub fn run(a: &MemcpyArgs) -> anyhow::Result<()> {
    if let Some(w) = &a.worker {
        return worker(w[0] as usize, w[1]);
    }
    let library = library(
        a.library.as_ref(),
        "libswitchyard_memcpy.so",
        "switchyard-preload-memcpy",
    )?;
    let rounds = a.rounds.unwrap_or(if a.quick { 3 } else { 5 }).max(1);
    let ms = a.ms.unwrap_or(if a.quick { 100 } else { 300 });
    let records = compare(&library, &SIZES, rounds, ms)?;
    let summary = Summary {
        summary: true,
        bench: "memcpy",
        rounds,
        ms,
        library: library.display().to_string(),
        profile: std::path::Path::new(switchyard_options::DEFAULT_PROFILE).exists(),
    };
    emit(a.json, &records, &summary, print_table)
}

/// A preload library: `given`, or `name` next to this binary; an error that says how to
/// build it (cargo package `package`) when it is missing.
pub(crate) fn library(
    given: Option<&PathBuf>,
    name: &str,
    package: &str,
) -> anyhow::Result<PathBuf> {
    let library = match given {
        Some(l) => l.clone(),
        None => std::env::current_exe()?.with_file_name(name),
    };
    if !library.exists() {
        bail!(
            "no preload library at {}: build it with `cargo build --release -p {package}`, or \
             name it with --library",
            library.display()
        );
    }
    Ok(library.canonicalize()?)
}

/// Each size's copies with and without the memcpy preload `library`: `rounds` ABBA rounds of
/// `ms` per measurement.
pub(crate) fn compare(
    library: &PathBuf,
    sizes: &[usize],
    rounds: usize,
    ms: u64,
) -> anyhow::Result<Vec<Record>> {
    let bar = indicatif::ProgressBar::new((rounds * sizes.len()) as u64);
    let mut records = Vec::new();
    for &bytes in sizes {
        let (mut plain, mut pre, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let mut two = Vec::new();
        for r in 0..rounds {
            // ABBA, starting with the other one every other round.
            let order = if r % 2 == 0 {
                [false, true, true, false]
            } else {
                [true, false, false, true]
            };
            let (mut p, mut q) = (0.0, 0.0);
            for with in order {
                let g = measure(with.then_some(library), bytes, ms)?;
                if with {
                    q += g / 2.0;
                } else {
                    p += g / 2.0;
                }
            }
            two.push(measure_two(bytes, ms)? / p.max(1e-12));
            plain.push(p);
            pre.push(q);
            ratios.push(q / p.max(1e-12));
            bar.inc(1);
        }
        records.push(Record {
            bench: "memcpy",
            bytes,
            libc_gib_s: median(&mut plain),
            preload_gib_s: median(&mut pre),
            preload_vs_libc: median(&mut ratios),
            two_libc_vs_libc: median(&mut two),
        });
    }
    bar.finish_and_clear();
    Ok(records)
}

/// The rows of a comparison: GiB/s with and without the library per size.
pub(crate) fn print_rows(records: &[Record]) {
    println!(
        "{:>10} {:>12} {:>14} {:>16} {:>16}",
        "bytes", "libc GiB/s", "preload GiB/s", "preload÷libc", "two libc÷libc"
    );
    for r in records {
        println!(
            "{:>10} {:>12.2} {:>14.2} {:>16.3} {:>16.3}",
            r.bytes, r.libc_gib_s, r.preload_gib_s, r.preload_vs_libc, r.two_libc_vs_libc
        );
    }
    println!(
        "(two libc÷libc: two plain copiers at once, together, ÷ one: the most a split between \
         two cores can gain on this machine)"
    );
}

fn print_table(records: &[Record], s: &Summary) {
    print_rows(records);
    println!(
        "({} ABBA rounds of {} ms per measurement, each in a process of its own; preload {}; \
         {})",
        s.rounds,
        s.ms,
        s.library,
        if s.profile {
            "the mover applies ./switchyard.profile.toml"
        } else {
            "no engine profile here: the mover's built-in thresholds"
        }
    );
}
