//! `switchyard bench decide`: what one scheduling decision costs.
//!
//! Times batches of decisions over a mix of requests (small writes that stay on the CPU, bulk
//! writes that take an engine slot, bulk reads that are split) and reports the median of the
//! per-batch mean, so a preempted batch does not skew it. Engine decisions are released right
//! away so the concurrency limit never trips.

use std::time::Instant;

use clap::Args;
use switchyard_mover::{Hints, Mover};

use switchyard_options::MoverArgs;

/// `bench decide` options.
#[derive(Args)]
pub struct DecideArgs {
    #[command(flatten)]
    mover: MoverArgs,
    /// Number of timed batches.
    #[arg(long, default_value_t = 301)]
    batches: usize,
    /// Decisions per batch.
    #[arg(long, default_value_t = 20_000)]
    per_batch: usize,
}

/// Runs the microbenchmark.
pub fn run(a: &DecideArgs) -> anyhow::Result<()> {
    let m = Mover::start(&a.mover.load_config()?.mover)?;
    let buf = vec![0u8; (8 << 20) + 64];
    let base = buf.as_ptr().wrapping_add(buf.as_ptr().align_offset(64));
    let (lo, hi) = (base, base.wrapping_add(4 << 20));
    let mix = [
        (4096usize, Hints::write()),
        (1 << 20, Hints::write()),
        (1 << 20, Hints::read()),
        (64 << 10, Hints::read()),
    ];
    let mut per_kind = Vec::new();
    for (len, h) in mix {
        per_kind.push((
            len,
            h,
            median_ns(a, || {
                let d = m.decide(
                    std::hint::black_box(lo),
                    std::hint::black_box(hi),
                    std::hint::black_box(len),
                    &h,
                    true,
                );
                m.release(&d);
                std::hint::black_box(d);
            }),
        ));
    }
    let all = median_ns(a, || {
        for (len, h) in &mix {
            let d = m.decide(
                std::hint::black_box(lo),
                std::hint::black_box(hi),
                *len,
                h,
                true,
            );
            m.release(&d);
            std::hint::black_box(d);
        }
    }) / mix.len() as f64;
    let sample = |len: usize, h: &Hints| {
        let d = m.decide(lo, hi, len, h, true);
        m.release(&d);
        format!("{:?}", d.path)
    };
    println!(
        "scheduling decision (decide + release), median of {} batches × {}:",
        a.batches, a.per_batch
    );
    for (len, h, ns) in &per_kind {
        println!(
            "  {:>9} {:<9} → {:<40} {:>6.1} ns",
            switchyard_options::size::show(*len as u64),
            h.direction.name(),
            sample(*len, h),
            ns
        );
    }
    println!("  mixed                                                       {all:>6.1} ns median per decision");
    Ok(())
}

fn median_ns(a: &DecideArgs, mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..a.batches)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..a.per_batch {
                f();
            }
            t.elapsed().as_nanos() as f64 / a.per_batch as f64
        })
        .collect();
    v.sort_by(|x, y| x.total_cmp(y));
    v[v.len() / 2]
}
