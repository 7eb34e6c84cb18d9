//! `switchyard stat`: detected primitives, configuration in effect, last run's counters.
//!
//! Commands that run the mover on a store save its counters next to it
//! (`<store>.stats.json`: `cp` when done, a mount every few seconds and when it ends), `bench
//! copy` next to its scratch region; `stat` shows them with the split ratio and bandwidth
//! estimates.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use switchyard_options::counters::Saved;

/// `stat` options.
#[derive(Args)]
pub struct StatArgs {
    #[command(flatten)]
    at: crate::store_cmd::StoreArgs,
    /// Show the counters `bench copy` saved for this scratch region instead of the store's.
    #[arg(long)]
    region: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `stat`.
pub fn run(a: &StatArgs) -> anyhow::Result<()> {
    let cfg = a.at.mover.load_config()?;
    cfg.validate()?;
    let p = cfg.persist();
    let path = match &a.region {
        Some(r) => switchyard_options::counters::path(r),
        None => a.at.stats_path(),
    };
    let saved: Option<Saved> = match std::fs::read_to_string(&path) {
        Ok(t) => Some(
            serde_json::from_str(&t)
                .with_context(|| format!("{} is not a stats file", path.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "flush": p.flush.name(), "simd": p.simd.name(), "config": cfg, "last_run": saved })
            )?
        );
        return Ok(());
    }
    println!(
        "media: flush {}, SIMD kernels {}, durable nt threshold {} B, shifted-copy loop {}",
        p.flush.name(),
        p.simd.name(),
        p.nt_threshold,
        match p.shifted_min {
            0 => "never".to_string(),
            n => format!("from {n} B"),
        }
    );
    println!(
        "engine: {} with {} channel(s); policy {:?}",
        cfg.engine.kind,
        cfg.engine.effective_channels(),
        cfg.mover.policy
    );
    match &cfg.applied_profile {
        Some(prof) => println!(
            "engine profile: {}, {}",
            cfg.mover.profile,
            switchyard_bench::tune::describe(prof)
        ),
        None => println!(
            "engine profile: none (built-in thresholds; `switchyard tune` measures this machine)"
        ),
    }
    if a.at.store.exists() {
        println!("{}", crate::store_cmd::usage(&a.at));
    } else {
        println!(
            "store {}: none (create one with `switchyard mkfs`)",
            a.at.store.display()
        );
    }
    match saved {
        None => println!(
            "no counters yet ({} does not exist): they are saved by `cp`, a mount, and \
             `bench copy` (see --region)",
            path.display()
        ),
        Some(s) => {
            println!(
                "counters of the last run (`switchyard {}`, {} s after the epoch, engine {}):",
                s.command, s.unix_time, s.engine
            );
            for (name, v) in s.counters.rows() {
                println!("  {name:<22} {v:>14}");
            }
            if let Some(r) = s.split_ratio {
                println!("  split ratio (engine share of split bytes): {r:.3}");
            }
            for (d, bc, bd, t0) in s.estimates_1m {
                println!("  estimates at 1 MiB, {d:<9}: B_C {bc:6.2} GiB/s  B_D {bd:6.2} GiB/s  engine start-up {t0:7.1} µs");
            }
        }
    }
    Ok(())
}
