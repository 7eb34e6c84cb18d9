//! `switchyard bench aio`: latency of the store's asynchronous writes, orderless (the metadata
//! commits while the engine copies; EasyIO §4.2) against the ordered variant that commits only
//! after the copy completes (EasyIO's "Naive", Fig. 11 left), in the same run.
//!
//! Every copy goes to the engine (policy `engine`), so both variants move the same bytes the
//! same way and differ only in ordering. One task on one executor issues writes back to back;
//! a write's latency runs from the call to the future's completion (the data durable and the
//! metadata committed). Rounds alternate the variants in rotated order; each round gives each
//! variant's p50, and the ratio is the median over rounds of orderless p50 ÷ ordered p50.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use switchyard_media::Region;
use switchyard_mover::lab::{median, rotated};
use switchyard_mover::{Mover, Policy};
use switchyard_rt::Executor;
use switchyard_store::{Fs, OpenFlags, Owner, Store, WriteOrder};

use crate::measure::{emit, scratch_dir, Setup};
use switchyard_options::size;

/// `bench aio` options.
#[derive(Args)]
pub struct AioArgs {
    /// Fewer rounds and writes (a few seconds).
    #[arg(long)]
    quick: bool,
    /// One JSON object per line (one per size and variant, then a summary).
    #[arg(long)]
    json: bool,
    /// Write sizes.
    #[arg(long, value_delimiter = ',', value_parser = size::parse, default_value = "16K,64K,256K,1M")]
    sizes: Vec<u64>,
    /// Rounds per size.
    #[arg(long)]
    rounds: Option<usize>,
    /// Writes per variant per round.
    #[arg(long)]
    writes: Option<usize>,
    /// Scratch directory for the store [default: /dev/shm if present, else .].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Configuration file (the engine; the policy is set to `engine`).
    #[arg(long)]
    config: Option<PathBuf>,
}

const VARIANTS: [(&str, WriteOrder); 2] = [
    ("orderless", WriteOrder::Orderless),
    ("ordered", WriteOrder::Ordered),
];

/// One size and variant.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// Bytes per write.
    pub size: u64,
    /// `orderless` or `ordered`.
    pub variant: &'static str,
    /// Median over rounds of the round's p50 latency, µs.
    pub p50_us: f64,
    /// Median over rounds of the round's p99 latency, µs.
    pub p99_us: f64,
}

/// The comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Per size: median over rounds of orderless p50 ÷ ordered p50.
    pub orderless_vs_ordered: Vec<(u64, f64)>,
    /// Rounds per size and writes per variant per round.
    pub rounds: usize,
    /// Writes per variant per round.
    pub writes: usize,
    /// Where it ran.
    pub setup: Setup,
}

/// Runs the benchmark.
pub fn run(a: &AioArgs) -> anyhow::Result<()> {
    let rounds = a.rounds.unwrap_or(if a.quick { 5 } else { 15 }).max(1);
    let writes = a.writes.unwrap_or(if a.quick { 100 } else { 400 }).max(2);
    if let Some(&s) = a.sizes.iter().find(|&&s| s == 0 || s > 16 << 20) {
        anyhow::bail!("write size {s} must be between 1 byte and 16M");
    }
    let mut cfg = switchyard_config::Config::load_or_default(a.config.as_deref())?.mover;
    cfg.mover.policy = Policy::Engine;
    let dir = scratch_dir(&a.dir);
    let work = tempfile::Builder::new()
        .prefix("switchyard-bench-aio.")
        .tempdir_in(&dir)
        .with_context(|| format!("creating a scratch directory in {}", dir.display()))?;
    // Room for copy-on-write of the largest file, twice, and the logs.
    let file_len = 32 << 20;
    let region = Region::create(
        work.path().join("store.region"),
        4 * file_len,
        cfg.persist(),
    )?;
    // Page allocation on first touch is the file system's cost, not the store's.
    region.populate()?;
    let mover = Arc::new(Mover::start(&cfg)?);
    let fs = Fs::new(Store::format(region, mover, Owner::current())?);
    let fd = fs.open("/bench", OpenFlags::CREATE, 0o644)?;
    let ino = fs.ino("/bench")?;
    // The file exists in full, so every write overwrites (copy-on-write) the same way.
    let chunk = vec![1u8; 1 << 20];
    for off in (0..file_len).step_by(chunk.len()) {
        fs.pwrite(fd, &chunk, off)?;
    }
    let ex = Executor::new();
    let mut records = Vec::new();
    let mut ratios = Vec::new();
    for &size in &a.sizes {
        let slots = (file_len / size).max(1);
        let mut next = 0u64;
        // [variant][round] = (p50, p99)
        let got = rotated(VARIANTS.len(), rounds, |v| -> anyhow::Result<(f64, f64)> {
            let mut lat = Vec::with_capacity(writes);
            let mut buf = vec![(v as u8) + 2; size as usize];
            for _ in 0..writes {
                let off = (next % slots) * size;
                next += 1;
                let t = Instant::now();
                let (r, back) =
                    ex.block_on(fs.store().write_async_ordered(ino, off, buf, VARIANTS[v].1));
                lat.push(t.elapsed().as_secs_f64() * 1e6);
                r?;
                buf = back;
            }
            lat.sort_by(f64::total_cmp);
            Ok((lat[lat.len() / 2], lat[lat.len() * 99 / 100]))
        })?;
        let mut per_round: Vec<f64> = (0..rounds).map(|r| got[0][r].0 / got[1][r].0).collect();
        ratios.push((size, median(&mut per_round)));
        for (v, (name, _)) in VARIANTS.iter().enumerate() {
            let mut p50: Vec<f64> = got[v].iter().map(|x| x.0).collect();
            let mut p99: Vec<f64> = got[v].iter().map(|x| x.1).collect();
            records.push(Record {
                size,
                variant: name,
                p50_us: median(&mut p50),
                p99_us: median(&mut p99),
            });
        }
    }
    let region_setup = Setup::now(&cfg, fs.store().region(), a.quick);
    fs.close(fd)?;
    fs.unmount()?;
    let summary = Summary {
        orderless_vs_ordered: ratios,
        rounds,
        writes,
        setup: region_setup,
    };
    emit(a.json, &records, &summary, print_table)
}

/// The table of p50 and p99 by size and variant, and the ratios.
fn print_table(records: &[Record], s: &Summary) {
    println!(
        "asynchronous write latency, every copy on the engine ({}), {} rounds × {} writes",
        s.setup.engine_line(),
        s.rounds,
        s.writes
    );
    println!(
        "{:>8}  {:>12} {:>12}  {:>12} {:>12}  {:>10}",
        "size", "orderless p50", "p99", "ordered p50", "p99", "ratio"
    );
    for (i, &(size, ratio)) in s.orderless_vs_ordered.iter().enumerate() {
        let (o, n) = (&records[2 * i], &records[2 * i + 1]);
        println!(
            "{:>8}  {:>10.1}µs {:>10.1}µs  {:>10.1}µs {:>10.1}µs  {:>10.3}",
            size::show(size),
            o.p50_us,
            o.p99_us,
            n.p50_us,
            n.p99_us,
            ratio
        );
    }
    println!("ratio: median over rounds of orderless p50 ÷ ordered p50 (lower is better)");
}
