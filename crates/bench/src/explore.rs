//! `switchyard bench explore`: what an adaptation trial sees of a path the traffic does not
//! usually take (`crates/mover/src/adapt`, `Adapt::explore`).
//!
//! Bulk writes (64–448 KiB, aligned) go to the CPU, except some that are split between the
//! CPU and the engine (share 0.5): every one, one in N scattered, or runs of 8 consecutive
//! ones once per period, the first of a run untimed (as the trials do). Each request is timed
//! alone. Reported per pattern: the split requests' rate, that rate ÷ the rate of splits when
//! every request splits (the steady state a moved threshold would give), and ÷ the rate of
//! the CPU's requests in the same slice. A pattern whose splits run far below the steady
//! ones measures an engine woken from idle: a trial judging on it would never move a
//! threshold towards the offload.

use std::time::{Duration, Instant};

use clap::Args;
use switchyard_mover::config::Locality;
use switchyard_mover::lab::{median, DramBuffer};
use switchyard_mover::{Config, Direction, Hints, Mover, Policy};

use crate::measure::{scratch_dir, scratch_region};

/// `bench explore` options.
#[derive(Args)]
pub struct ExploreArgs {
    /// Directory for the scratch region (default /dev/shm when it exists, else the working
    /// directory).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Rounds (each pattern once per round, in turn); the medians are reported.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Milliseconds per pattern per round.
    #[arg(long, default_value_t = 200)]
    slice_ms: u64,
}

/// How the split requests are spread among the CPU's.
#[derive(Clone, Copy)]
enum Pattern {
    /// One in N.
    Scattered(usize),
    /// Runs of this many once per period; the first of a run is not timed.
    Runs(usize, usize),
}

impl Pattern {
    fn name(self) -> String {
        match self {
            Pattern::Scattered(1) => "every request".into(),
            Pattern::Scattered(n) => format!("one in {n}"),
            Pattern::Runs(r, p) => format!("runs of {r} per {p}, first untimed"),
        }
    }

    /// Whether request `k` is split, and whether its time counts.
    fn split(self, k: usize) -> (bool, bool) {
        match self {
            Pattern::Scattered(n) => (k.is_multiple_of(n), true),
            Pattern::Runs(r, p) => {
                let at = k % p;
                (at < r, at > 0)
            }
        }
    }
}

/// Runs the measurement.
pub fn run(a: &ExploreArgs) -> anyhow::Result<()> {
    const K: usize = 1024;
    let base = Config::default();
    let dir = scratch_dir(&a.dir);
    let (_scratch, region) = scratch_region(&dir, "explore", 256 << 20, base.persist())?;
    let dram = DramBuffer::new(region.len().min(256 << 20), 5);
    let engine = switchyard_mover::start_engine(&base)?;
    let with = |f: &dyn Fn(&mut Config)| {
        let mut c = base.clone();
        f(&mut c);
        Mover::with_started(&c, &engine, c.persist())
    };
    let split = with(&|c| {
        c.mover.thresholds.to_slow = Locality::uniform(64 * K, 64 * K);
        c.mover.split_min_bytes = 0;
        c.mover.split_share = 0.5;
        c.mover.concurrency_limit = 1;
        c.mover.adapt = false;
    });
    let cpu = with(&|c| c.mover.policy = Policy::Cpu);
    let sizes: Vec<usize> = (0..24).map(|i| 64 * K + i * 16 * K).collect();
    let patterns = [
        Pattern::Scattered(1),
        Pattern::Scattered(32),
        Pattern::Scattered(160),
        Pattern::Scattered(512),
        Pattern::Runs(8, 256),
        Pattern::Runs(8, 1280),
    ];
    let slice = Duration::from_millis(a.slice_ms);
    let hints = Hints {
        direction: Direction::ToSlow,
        durable: true,
        ..Hints::default()
    };
    let span = dram.len();
    // Fault every page of the region in before measuring.
    // SAFETY: the region is mapped for at least `span` bytes and this bench is its only user.
    unsafe { std::ptr::write_bytes(region.as_mut_ptr(), 1, span) };
    let one = |m: &Mover, at: usize, size: usize| {
        let t = Instant::now();
        // SAFETY: `at + size <= span`, within the region and the DRAM buffer, which this
        // function alone uses.
        unsafe { m.copy_raw(region.as_mut_ptr().add(at), dram.at(at), size, hints) };
        t.elapsed().as_nanos() as f64
    };
    let pattern_rates = |p: Pattern| {
        let (mut split_ns, mut split_b, mut cpu_ns, mut cpu_b) = (0.0, 0.0, 0.0, 0.0);
        let (mut at, mut k) = (0usize, 0usize);
        let begin = Instant::now();
        while begin.elapsed() < slice {
            let size = sizes[k % sizes.len()];
            if at + size > span {
                at = 0;
            }
            let (is_split, timed) = p.split(k);
            let ns = one(if is_split { &split } else { &cpu }, at, size);
            match (is_split, timed) {
                (true, true) => (split_ns, split_b) = (split_ns + ns, split_b + size as f64),
                (true, false) => {}
                (false, _) => (cpu_ns, cpu_b) = (cpu_ns + ns, cpu_b + size as f64),
            }
            at += size;
            k += 1;
        }
        (split_b / split_ns, cpu_b / cpu_ns)
    };
    print_header(&dir, a);
    // [pattern][round] → (split rate, its ratio to every request split, split ÷ CPU).
    let mut got = vec![Vec::new(); patterns.len()];
    for _ in 0..a.rounds {
        let rates: Vec<(f64, f64)> = patterns.iter().map(|&p| pattern_rates(p)).collect();
        let every = rates[0].0;
        for (g, (split, cpu)) in got.iter_mut().zip(rates) {
            g.push((split, split / every, split / cpu));
        }
    }
    print_rates(&got, &patterns);
    Ok(())
}

/// What is measured, where, and the columns of the table that follows.
fn print_header(dir: &std::path::Path, a: &ExploreArgs) {
    println!(
        "bulk writes (64–448 KiB) to {}, each timed alone; medians of {} rounds × {} ms",
        dir.display(),
        a.rounds,
        a.slice_ms
    );
    println!(
        "  {:<34} {:>10} {:>16} {:>12}",
        "split requests", "split GB/s", "÷ every split", "÷ CPU's"
    );
}

/// Each pattern's medians over rounds: its split rate, that over every request split, and
/// that over the CPU's.
fn print_rates(got: &[Vec<(f64, f64, f64)>], patterns: &[Pattern]) {
    for (g, p) in got.iter().zip(patterns) {
        let col = |f: fn(&(f64, f64, f64)) -> f64| median(&mut g.iter().map(f).collect::<Vec<_>>());
        let vs_cpu = col(|x| x.2);
        println!(
            "  {:<34} {:>10.1} {:>16.3} {:>12}",
            p.name(),
            col(|x| x.0),
            col(|x| x.1),
            if vs_cpu.is_finite() {
                format!("{vs_cpu:.3}")
            } else {
                "-".into()
            }
        );
    }
}
