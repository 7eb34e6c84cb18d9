//! The counters file: commands that run the mover save its counters next to the store or
//! region they ran on (`<file>.stats.json`), and `switchyard stat` shows the last run's.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use switchyard_mover::{Direction, Mover, Stats};

/// Where the counters of the last run on the store or region file `file` are kept.
pub fn path(file: &Path) -> PathBuf {
    let mut p = file.to_owned().into_os_string();
    p.push(".stats.json");
    PathBuf::from(p)
}

/// The counters of one run as saved: what `switchyard stat` shows.
#[derive(Serialize, Deserialize)]
pub struct Saved {
    /// The command that ran (`mount`, `cp`, `bench copy`).
    pub command: String,
    /// When it saved them, in seconds since the epoch.
    pub unix_time: u64,
    /// The engine's name.
    pub engine: String,
    /// Why the run used that engine ([`Mover::engine_reason`]; empty in files saved before
    /// the engine could be chosen).
    #[serde(default)]
    pub engine_reason: String,
    /// The flush instruction in use.
    pub flush: String,
    /// The SIMD kernels in use.
    pub simd: String,
    /// The mover's counters.
    pub counters: Stats,
    /// Engine share of split requests' bytes.
    pub split_ratio: Option<f64>,
    /// (direction, B_C GiB/s, B_D GiB/s, engine start-up µs) for the 1 MiB bin.
    pub estimates_1m: Vec<(String, f64, f64, f64)>,
    /// Each tenant's counters (`[qos]`; empty without tenants).
    #[serde(default)]
    pub tenants: Vec<switchyard_mover::qos::TenantStats>,
    /// What survived a power cut on the store the run used (runs on a store only).
    #[serde(default)]
    pub durability: Option<Durability>,
}

/// What survives a power cut on a store, as a run on it saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Durability {
    /// The medium's granularity (`switchyard_media::Granularity::name`: `cache-line`,
    /// `page`, `volatile`).
    pub granularity: String,
    /// What an operation that returned survives there, in words.
    pub guarantee: String,
    /// When the store synced what returned to its disk (`switchyard_store::SyncPolicy`, as
    /// it displays).
    pub sync: String,
}

/// Saves `mover`'s counters for `stat` in `path` (owner-only, as every file Switchyard makes).
pub fn save(path: &Path, command: &str, mover: &Mover) -> anyhow::Result<()> {
    save_with(path, command, mover, None)
}

/// [`save`], with what survives a power cut on the store the run uses.
pub fn save_with(
    path: &Path,
    command: &str,
    mover: &Mover,
    durability: Option<&Durability>,
) -> anyhow::Result<()> {
    let s = mover.stats();
    let split_total = s.split_cpu_bytes + s.split_engine_bytes;
    let bw = mover.bandwidth();
    let b = switchyard_mover::bandwidth::bin(1 << 20);
    let gib = (1u64 << 30) as f64 / 1e9;
    let saved = Saved {
        command: command.into(),
        unix_time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        engine: mover.engine().info().name.into(),
        engine_reason: mover.engine_reason().into(),
        flush: mover.persist().flush.name().into(),
        simd: mover.persist().simd.name().into(),
        split_ratio: (split_total > 0).then(|| s.split_engine_bytes as f64 / split_total as f64),
        counters: s,
        estimates_1m: Direction::ALL
            .iter()
            .map(|d| {
                let e = bw.of(*d);
                (
                    d.name().to_string(),
                    e.cpu[b].get() / gib,
                    e.engine[b].get() / gib,
                    e.startup_ns.get() / 1e3,
                )
            })
            .collect(),
        tenants: mover.tenants(),
        durability: durability.cloned(),
    };
    switchyard_media::private::write_private(
        path,
        serde_json::to_string_pretty(&saved)?.as_bytes(),
    )
    .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// Where a served store's or a remote mount's counters are kept: `<file>.remote.json`, next
/// to the store (`serve`) or to the key a client used (`mount --remote`).
pub fn remote_path(file: &Path) -> PathBuf {
    let mut p = file.to_owned().into_os_string();
    p.push(".remote.json");
    PathBuf::from(p)
}

/// Counters of one side of remote access, as saved: what `switchyard stat` shows.
#[derive(Serialize, Deserialize)]
pub struct RemoteSaved {
    /// The command that ran (`serve`, `mount --remote`).
    pub command: String,
    /// When it saved them, in seconds since the epoch.
    pub unix_time: u64,
    /// How data moves (a client's), or where the server listens.
    pub transport: String,
    /// The counters, by name.
    pub counters: Vec<(String, u64)>,
}

/// Saves one side's counters for `stat` in `path` (owner-only).
pub fn save_remote(
    path: &Path,
    command: &str,
    transport: &str,
    counters: &[(&str, u64)],
) -> anyhow::Result<()> {
    let saved = RemoteSaved {
        command: command.into(),
        unix_time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        transport: transport.into(),
        counters: counters.iter().map(|&(n, v)| (n.to_string(), v)).collect(),
    };
    switchyard_media::private::write_private(path, serde_json::to_string_pretty(&saved)?.as_bytes())
        .with_context(|| format!("write {}", path.display()))
}
