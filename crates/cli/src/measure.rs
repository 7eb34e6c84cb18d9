//! How the benchmarks that compare systems measure: interleaved rounds with a rotating order
//! (so drift on a noisy machine hits every system alike), medians, and ratios paired within
//! a round; where they put scratch files, and how they print what they found.

use std::path::{Path, PathBuf};

use serde::Serialize;
pub use switchyard_mover::lab::median;

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
        median(
            &mut self.0[a]
                .iter()
                .zip(&self.0[b])
                .map(|(x, y)| x.gib_s / y.gib_s)
                .collect::<Vec<_>>(),
        )
    }
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
