//! `bench mix`'s table and summary lines.

use super::{Record, Summary, PARITY_SHARE};
use switchyard_options::tune;

pub(super) fn print_table(records: &[Record], s: &Summary) {
    print_rows(records);
    print_table1(s);
    print_grid_and_against(records, s);
    if let Some((v, at)) = &s.table1_a_a_widest {
        println!(
            "A/A control, a second cpu-only mover ÷ cpu-only: farthest from 1 at {v:.3} ({at}); \
             ratios within that of 1.0 are noise"
        );
    }
    if let Some((v, at)) = &s.tuned_vs_fixed_min {
        println!(
            "online adaptation, tuned ÷ the profile held fixed: median {:.3}, worst {v:.3} at {at} \
             (target: cost < 2%)",
            s.tuned_vs_fixed_median
        );
    }
    let (up, down, nudges) = s.adaptation;
    let t = &s.thresholds_in_effect;
    println!(
        "adaptation over the run: thresholds raised {up}, lowered {down}, split estimates moved in \
         {nudges} epochs; in effect at the end: writes {}, reads {}",
        tune::threshold(t.to_slow.local_aligned),
        tune::threshold(t.from_slow.local_aligned)
    );
}

/// One row per workload, direction and thread count: each policy's GiB/s and tuned's ratios.
fn print_rows(records: &[Record]) {
    println!(
        "{:<22} {:>5} {:>8} {:>8} {:>8} {:>8} {:>6} {:>8} {:>8} {:>8} {:>7} {:>8} {:>9}",
        "workload",
        "thr",
        "cpu",
        "engine",
        "default",
        "tuned",
        "CPU%",
        "÷cpu",
        "÷engine",
        "÷default",
        "A/A",
        "grid best",
        "÷best"
    );
    for r in records {
        let g = |name: &str| r.gib_s.iter().find(|x| x.0 == name).map_or(0.0, |x| x.1);
        println!(
            "{:<22} {:>5} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>6.1} {:>8.3} {:>8.3} {:>8.3} {:>7.3} {:>8} {:>9}",
            format!("{} {}", r.workload, r.direction),
            r.threads,
            g("cpu"),
            g("engine"),
            g("default"),
            g("tuned"),
            r.tuned_cpu_share * 100.0,
            r.tuned_vs_cpu,
            r.tuned_vs_engine,
            r.tuned_vs_default,
            r.a_a,
            r.grid
                .as_ref()
                .map_or("-".into(), |g| format!("{:.2}", g.best_gib_s)),
            r.grid
                .as_ref()
                .map_or("-".into(), |g| format!("{:.3}", g.tuned_vs_best)),
        );
    }
    println!(
        "(GiB/s; CPU%: share of tuned's bytes the CPU copied; ratios are medians of per-round \
         ratios; A/A: a second cpu-only mover ÷ cpu-only)"
    );
}

/// The tuned profile, and how tuned did against cpu-only and engine-only on Table 1's mixes.
fn print_table1(s: &Summary) {
    println!();
    println!("tuned profile: {}", s.profile);
    if let Some((v, at)) = &s.table1_tuned_vs_cpu_min {
        println!("Table 1 mixes, tuned ÷ cpu-only: worst {v:.3} at {at} (target ≥ 1.0)");
    }
    if let Some((v, at)) = &s.table1_offloaded_tuned_vs_cpu_min {
        println!("  where tuned offloaded: worst {v:.3} at {at}");
    }
    if let Some((lo, hi)) = &s.table1_parity_tuned_vs_cpu {
        println!(
            "  where tuned copied ≥ {:.0}% of the bytes on the CPU, as cpu-only does: {lo:.3}–{hi:.3}",
            PARITY_SHARE * 100.0
        );
    }
    if s.table1_tuned_vs_cpu_min.is_some() {
        println!(
            "  slower than cpu-only beyond noise (the 95% interval of the median ratio below 1.0): \
             {}",
            if s.table1_slower_than_cpu.is_empty() {
                "none".to_string()
            } else {
                s.table1_slower_than_cpu.join(", ")
            }
        );
    }
    if let Some((v, at)) = &s.table1_tuned_vs_engine_min {
        println!("Table 1 mixes, tuned ÷ engine-only: worst {v:.3} at {at} (target ≥ 1.0)");
    }
}

/// Tuned against the grid's best settings and against a second profile, worst first and then
/// per case.
fn print_grid_and_against(records: &[Record], s: &Summary) {
    if let Some((v, at)) = &s.grid_tuned_vs_best_min {
        println!("bulk and mixed, tuned ÷ the grid's best: worst {v:.3} at {at} (target ≥ 0.95)");
        for r in records {
            let Some(g) = &r.grid else { continue };
            let b = &g.best;
            println!(
                "  {} {} ×{}: best of {} settings threshold {}, M {}, share {}, split from {}; \
                 tuned ÷ best {:.3} (95%: {:.3}–{:.3}; the finalists' rounds said {:.3})",
                r.workload,
                r.direction,
                r.threads,
                g.settings,
                tune::threshold(b.threshold),
                b.concurrency_limit,
                if b.split_share == 0.0 {
                    "live".to_string()
                } else {
                    format!("{:.2}", b.split_share)
                },
                tune::threshold(b.split_min_bytes),
                g.tuned_vs_best,
                g.tuned_vs_best_interval.0,
                g.tuned_vs_best_interval.1,
                g.finalists_tuned_vs_best,
            );
        }
    }
    if let Some((v, at)) = &s.tuned_vs_against_min {
        println!("tuned ÷ against (a second profile in the same rounds): worst {v:.3} at {at}");
        for r in records {
            if let (Some(v), Some((lo, hi))) = (r.tuned_vs_against, r.tuned_vs_against_interval) {
                println!(
                    "  {} {} ×{}: {v:.3} (95%: {lo:.3}–{hi:.3})",
                    r.workload, r.direction, r.threads
                );
            }
        }
    }
}
