//! `switchyard stat`: detected primitives, configuration in effect, last run's counters.
//!
//! Commands that run the mover on a store save its counters next to it
//! (`<store>.stats.json`: `cp` when done, a mount every few seconds and when it ends), `bench
//! copy` next to its scratch region; `stat` shows them with the split ratio and bandwidth
//! estimates.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use switchyard_options::counters::{RemoteSaved, Saved};

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
    /// Show a served store's side of remote access instead: the server's counters now
    /// (asked of the `serve` at ADDR:PORT), and this machine's last remote mount's (saved
    /// next to the key).
    #[arg(long, value_name = "ADDR:PORT")]
    remote: Option<String>,
    /// The served store's key, for --remote [default: the store file's path with `.key`
    /// added, as `serve` makes it].
    #[arg(long, requires = "remote")]
    key: Option<PathBuf>,
}

/// The remote counters saved in `path`, if any.
fn saved_remote(path: &Path) -> anyhow::Result<Option<RemoteSaved>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(serde_json::from_str(&t).with_context(|| {
            format!("{} is not a remote counters file", path.display())
        })?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

/// Prints saved remote counters under a heading.
fn print_remote(what: &str, s: &RemoteSaved) {
    println!(
        "{what} (`switchyard {}`, {} s after the epoch; {}):",
        s.command, s.unix_time, s.transport
    );
    for (name, v) in &s.counters {
        println!("  {name:<22} {v:>14}");
    }
}

/// Prints the tenants' counters (`[qos]`), if there are tenants.
fn print_tenants(tenants: &[switchyard_mover::qos::TenantStats]) {
    if tenants.is_empty() {
        return;
    }
    println!(
        "  tenants:  {:<12} {:<8} {:>10} {:>14} {:>7} {:>9} {:>10} {:>12}",
        "name", "kind", "requests", "bytes", "misses", "pct µs", "throttled", "budget MiB/s"
    );
    for t in tenants {
        let kind = match t.kind {
            switchyard_mover::config::TenantKind::Latency => "latency",
            switchyard_mover::config::TenantKind::Bulk => "bulk",
        };
        let budget = match (t.kind, t.budget_mib_s) {
            (switchyard_mover::config::TenantKind::Latency, _) => "-".to_string(),
            (_, None) => "lifted".to_string(),
            (_, Some(b)) => format!("{b:.0}"),
        };
        println!(
            "            {:<12} {kind:<8} {:>10} {:>14} {:>7} {:>9.1} {:>10} {budget:>12}",
            t.name, t.requests, t.bytes, t.misses, t.percentile_us, t.throttled_epochs
        );
    }
}

/// `stat --remote`: both sides of remote access, as this machine sees them.
fn remote(a: &StatArgs, addr: &str) -> anyhow::Result<()> {
    let key = a
        .key
        .clone()
        .unwrap_or_else(|| crate::serve_cmd::default_key(&a.at.store));
    let r = crate::serve_cmd::Remote::parse(&format!("{addr}:/"))
        .with_context(|| format!("--remote {addr}: not ADDR:PORT"))?;
    let client = r.connect(&key, false)?;
    let rows = client
        .server_counters()
        .map_err(|e| anyhow::anyhow!("asking {addr} for its counters: {e}"))?;
    let mine = saved_remote(&switchyard_options::counters::remote_path(&key))?;
    if a.json {
        let rows: std::collections::BTreeMap<_, _> = rows.into_iter().collect();
        let v = serde_json::json!({ "server": rows, "data_path": client.data_path().to_string(), "last_mount": mine });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("server at {addr}, data from here {}:", client.data_path());
    for (name, v) in rows {
        println!("  {name:<22} {v:>14}");
    }
    match mine {
        Some(s) => print_remote("this machine's last remote mount with this key", &s),
        None => println!("no remote mount with this key has saved counters here"),
    }
    Ok(())
}

/// Runs `stat`.
pub fn run(a: &StatArgs) -> anyhow::Result<()> {
    if let Some(addr) = &a.remote {
        return remote(a, addr);
    }
    let cfg = a.at.mover.load_config()?;
    cfg.validate()?;
    let p = cfg.mover.persist();
    let path = match &a.region {
        Some(r) => switchyard_options::counters::path(r),
        None => a.at.stats_path(),
    };
    let saved = saved(&path)?;
    // What survives a power cut: the medium as the store file opens now, under the sync
    // policy the configuration gives (`mount --sync` overrides it; the counters show what the
    // last run used). A store a mount holds cannot be opened: the mount's counters say.
    let (usage, granularity) = if a.at.store.exists() {
        let (line, g) = crate::store_cmd::usage(&a.at);
        (Some(line), g)
    } else {
        (None, None)
    };
    let durability = granularity
        .map(|g| crate::store_cmd::durability_of(g, crate::store_cmd::sync_policy(&cfg.store)));
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "flush": p.flush.name(), "simd": p.simd.name(), "engine": engine_json(&cfg.mover), "config": cfg, "durability": durability, "last_run": saved, "served": saved_remote(&switchyard_options::counters::remote_path(&a.at.store))? })
            )?
        );
        return Ok(());
    }
    print_media_and_engine(&cfg.mover);
    match (&usage, &durability) {
        (Some(line), Some(d)) => {
            println!("{line}");
            println!("{}", crate::store_cmd::show_durability(d));
            println!(
                "  (the sync policy is the configuration's `store.sync`; `mount --sync` and `up \
                 --sync` override it)"
            );
        }
        (Some(line), None) => println!("{line}"),
        (None, _) => println!(
            "store {}: none (create one with `switchyard mkfs`)",
            a.at.store.display()
        ),
    }
    print_saved(saved, &path);
    if a.region.is_none() {
        let served = saved_remote(&switchyard_options::counters::remote_path(&a.at.store))?;
        if let Some(s) = served {
            print_remote("served", &s);
        }
    }
    Ok(())
}

/// The counters saved at `path` by the last run, if any.
fn saved(path: &Path) -> anyhow::Result<Option<Saved>> {
    Ok(match std::fs::read_to_string(path) {
        Ok(t) => Some(
            serde_json::from_str(&t)
                .with_context(|| format!("{} is not a stats file", path.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    })
}

/// The engine `cfg` chooses on this machine and why, for `stat --json`: `kind`, `channels`
/// and `reason`, or `error` where it cannot start.
fn engine_json(cfg: &switchyard_mover::Config) -> serde_json::Value {
    match switchyard_mover::select::choose(cfg) {
        Ok(c) => serde_json::json!({ "kind": c.kind, "channels": c.channels, "reason": c.reason }),
        Err(e) => serde_json::json!({ "kind": cfg.engine.kind, "error": e.to_string() }),
    }
}

/// The media's kernels, the engine and policy, and the engine profile `cfg` gives.
fn print_media_and_engine(cfg: &switchyard_mover::Config) {
    let p = cfg.persist();
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
    match switchyard_mover::select::choose(cfg) {
        Ok(c) => println!(
            "engine: {} with {} channel(s); policy {:?}\n  why: {}",
            c.kind, c.channels, cfg.mover.policy, c.reason
        ),
        Err(e) => println!(
            "engine: {} cannot start here; policy {:?}\n  why: {e}",
            cfg.engine.kind, cfg.mover.policy
        ),
    }
    match &cfg.applied_profile {
        Some(prof) => println!(
            "engine profile: {}, {}",
            cfg.mover.profile,
            switchyard_options::tune::describe(prof)
        ),
        None => println!(
            "engine profile: none (built-in thresholds; `switchyard tune` measures this machine)"
        ),
    }
}

/// The counters of the last run (`saved`, from `path`), or where they would be.
fn print_saved(saved: Option<Saved>, path: &Path) {
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
            if !s.engine_reason.is_empty() {
                println!("  engine chosen: {}", s.engine_reason);
            }
            if let Some(d) = &s.durability {
                for line in crate::store_cmd::show_durability(d).lines() {
                    println!("  {line}");
                }
            }
            for (name, v) in s.counters.rows() {
                println!("  {name:<22} {v:>14}");
            }
            if let Some(r) = s.split_ratio {
                println!("  split ratio (engine share of split bytes): {r:.3}");
            }
            for (d, bc, bd, t0) in s.estimates_1m {
                println!("  estimates at 1 MiB, {d:<9}: B_C {bc:6.2} GiB/s  B_D {bd:6.2} GiB/s  engine start-up {t0:7.1} µs");
            }
            print_tenants(&s.tenants);
        }
    }
}
