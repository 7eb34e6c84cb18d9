//! How the benchmarks that compare systems measure: interleaved rounds with a rotating order
//! (so drift on a noisy machine hits every system alike), medians, and ratios paired within
//! a round; where they put scratch files, what they ran on, and how they print what they
//! found.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use switchyard_media::Region;
pub use switchyard_mover::lab::median;
use switchyard_mover::profile::{EngineId, Machine};
use switchyard_mover::Config;
pub use switchyard_options::medium::{file_system_of, Media};

/// One round's result of one system.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    pub gib_s: f64,
    /// Median latency, µs (0 where the system does not report one).
    pub p50_us: f64,
    /// Process CPU time per GiB moved, where measured.
    pub cpu_s_per_gib: Option<f64>,
}

/// Every system's results over rounds, indexed `[system][round]`.
pub struct Rounds(Vec<Vec<Measured>>);

impl Rounds {
    /// Runs `rounds` rounds of `systems` systems; round `r` starts at system `r % systems`.
    pub fn run(
        systems: usize,
        rounds: usize,
        measure: impl FnMut(usize) -> anyhow::Result<Measured>,
    ) -> anyhow::Result<Rounds> {
        switchyard_mover::lab::rotated(systems, rounds, measure).map(Rounds)
    }

    /// System `i`'s median GiB/s.
    pub fn gib_s(&self, i: usize) -> f64 {
        median(&mut self.0[i].iter().map(|m| m.gib_s).collect::<Vec<_>>())
    }

    /// System `i`'s median of per-round median latencies.
    pub fn p50_us(&self, i: usize) -> f64 {
        median(&mut self.0[i].iter().map(|m| m.p50_us).collect::<Vec<_>>())
    }

    /// System `i`'s median CPU seconds per GiB, where measured.
    pub fn cpu_s_per_gib(&self, i: usize) -> Option<f64> {
        let v: Option<Vec<f64>> = self.0[i].iter().map(|m| m.cpu_s_per_gib).collect();
        v.map(|mut v| median(&mut v))
    }

    /// Median over rounds of system `a`'s GiB/s ÷ system `b`'s in the same round.
    pub fn ratio(&self, a: usize, b: usize) -> f64 {
        median(&mut self.ratios(a, b))
    }

    /// A confidence interval of at least 95% for the median of [`Rounds::ratio`]'s per-round
    /// ratios ([`median_interval`]).
    pub fn ratio_interval(&self, a: usize, b: usize) -> (f64, f64) {
        median_interval(&mut self.ratios(a, b))
    }

    fn ratios(&self, a: usize, b: usize) -> Vec<f64> {
        self.0[a]
            .iter()
            .zip(&self.0[b])
            .map(|(x, y)| x.gib_s / y.gib_s)
            .collect()
    }
}

/// A distribution-free confidence interval of at least 95% for the median of the population
/// `v` (not empty) was drawn from: the k-th smallest and k-th largest values, k the largest
/// with P(Binomial(n, ½) < k) ≤ 2.5% (21 rounds: the 6th and 16th of 21). Assumes only
/// independent rounds; with fewer than 6 values no such k exists and it is the whole range.
pub fn median_interval(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    // P(B < k) for B ~ Binomial(n, ½), summed term by term.
    let mut below = 0.0;
    let mut term = 0.5f64.powi(n as i32); // P(B = 0)
    let mut k = 0;
    while k < n / 2 && below + term <= 0.025 {
        below += term;
        term *= (n - k) as f64 / (k + 1) as f64;
        k += 1;
    }
    // The k-th smallest and k-th largest (1-based); k = 0 or 1: the whole range.
    let k = k.max(1);
    (v[k - 1], v[n - k])
}

/// Where a benchmark puts its scratch files: `dir` if given, else /dev/shm when it exists
/// (memory, as slow memory is), else the working directory.
pub fn scratch_dir(dir: &Option<PathBuf>) -> PathBuf {
    match dir {
        Some(d) => d.clone(),
        None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        None => PathBuf::from("."),
    }
}

/// A scratch region of `len` bytes in `dir` for benchmark `bench` (a temporary file named
/// for it, removed when the returned file handle drops; keep it alive while the region is).
pub fn scratch_region(
    dir: &Path,
    bench: &str,
    len: u64,
    persist: switchyard_media::Persist,
) -> anyhow::Result<(tempfile::NamedTempFile, Region)> {
    use anyhow::Context;
    let scratch = tempfile::Builder::new()
        .prefix(&format!("switchyard-bench-{bench}."))
        .suffix(".region")
        .tempfile_in(dir)
        .with_context(|| format!("creating a scratch region in {}", dir.display()))?;
    let region = Region::create(scratch.path(), len, persist)?;
    Ok((scratch, region))
}

/// Where and when a benchmark ran, as its JSON output names it (`switchyard report` puts it
/// on the page next to the figures).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// The machine: CPU model, cores, flush instruction, SIMD level.
    pub machine: Machine,
    /// The engine the movers shared: kind and channels (`dsa-model`: the DSA engine on its
    /// device model, a test double, never hardware).
    pub engine: EngineId,
    /// Why it was that engine (`switchyard_mover::select`; empty in older output).
    #[serde(default)]
    pub engine_reason: String,
    /// The medium measured.
    pub media: Media,
    /// Seconds since the epoch when the run finished.
    pub unix_time: u64,
    /// Whether it was a `--quick` run.
    pub quick: bool,
}

impl Setup {
    /// The setup of a run that just finished on `region` with the engine `config` starts.
    pub fn now(config: &Config, region: &Region, quick: bool) -> Setup {
        Setup {
            machine: Machine::this(&region.persist()),
            engine: EngineId::of(config),
            engine_reason: switchyard_mover::select::choose(config)
                .map_or_else(|e| e.to_string(), |c| c.reason),
            media: Media::of(region),
            unix_time: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            quick,
        }
    }
}

impl Setup {
    /// This setup with the engine `mover` actually ran on (a benchmark that was handed an
    /// engine, such as the DSA engine on its model, names it rather than the configuration's).
    pub fn on_engine(mut self, mover: &switchyard_mover::Mover) -> Setup {
        let info = mover.engine().info();
        self.engine = EngineId {
            kind: info.name.into(),
            channels: info.channels,
        };
        self.engine_reason = mover.engine_reason().into();
        self
    }

    /// The engine and why, for a benchmark's header: `threads × 1 channels (threads: …)`.
    pub fn engine_line(&self) -> String {
        if self.engine_reason.is_empty() {
            self.engine.to_string()
        } else {
            format!("{} — {}", self.engine, self.engine_reason)
        }
    }
}

/// Prints a benchmark's records and summary: one JSON object per line with `json`, else
/// through `table`.
pub fn emit<R: Serialize, S: Serialize>(
    json: bool,
    records: &[R],
    summary: &S,
    table: impl FnOnce(&[R], &S),
) -> anyhow::Result<()> {
    if json {
        for r in records {
            println!("{}", serde_json::to_string(r)?);
        }
        println!("{}", serde_json::to_string(summary)?);
    } else {
        table(records, summary);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_interval_takes_the_binomial_order_statistics() {
        let mut v: Vec<f64> = (1..=21).rev().map(f64::from).collect();
        assert_eq!(median_interval(&mut v), (6.0, 16.0));
        let mut v: Vec<f64> = (1..=9).map(f64::from).collect();
        assert_eq!(median_interval(&mut v), (2.0, 8.0));
        let mut v = vec![3.0, 1.0, 2.0, 5.0, 4.0];
        assert_eq!(
            median_interval(&mut v),
            (1.0, 5.0),
            "too few rounds: the range"
        );
        assert_eq!(median_interval(&mut [7.0]), (7.0, 7.0));
    }
}
