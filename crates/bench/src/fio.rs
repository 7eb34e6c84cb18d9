//! fio as a baseline: one time-based job per call, read back from fio's JSON.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};

use crate::measure::Measured;

/// fio's version line, or `None` when fio cannot be run.
pub fn version() -> Option<String> {
    let out = Command::new("fio").arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// One fio job: `jobs` threads, each on its own file `{prefix}.{n}` of `size` bytes in `dir`,
/// doing `rw` in requests of `bs` bytes for `secs` seconds.
pub struct Job<'a> {
    pub dir: &'a Path,
    pub prefix: &'a str,
    pub engine: &'a str,
    /// fio's `rw`: read, write, randread or randwrite.
    pub rw: &'a str,
    pub bs: u64,
    pub size: u64,
    pub jobs: usize,
    pub secs: f64,
    /// Open with `O_DIRECT` (bypass the page cache).
    pub direct: bool,
}

impl Job<'_> {
    /// Runs the job with `extra` arguments and environment, and returns its bandwidth and
    /// median completion latency.
    pub fn run(&self, extra: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Measured> {
        let mut cmd = Command::new("fio");
        cmd.args([
            "--name=bench",
            "--thread",
            "--group_reporting",
            "--time_based",
            "--norandommap",
            "--randrepeat=0",
            "--output-format=json",
            &format!("--directory={}", self.dir.display()),
            &format!("--filename_format={}.$jobnum", self.prefix),
            &format!("--ioengine={}", self.engine),
            &format!("--rw={}", self.rw),
            &format!("--bs={}", self.bs),
            &format!("--size={}", self.size),
            &format!("--numjobs={}", self.jobs),
            &format!("--direct={}", u8::from(self.direct)),
            &format!("--runtime={}ms", (self.secs * 1000.0).round() as u64),
        ]);
        cmd.args(extra).envs(env.iter().copied());
        let out = cmd.output().context("running fio")?;
        if !out.status.success() {
            bail!(
                "fio ({} {} in {}) failed: {}",
                self.engine,
                self.rw,
                self.dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        // fio may print notes before its JSON.
        let json = text
            .find('{')
            .map(|i| &text[i..])
            .context("fio printed no JSON")?;
        let v: serde_json::Value = serde_json::from_str(json).context("parsing fio's JSON")?;
        let dir_key = if self.rw.contains("write") {
            "write"
        } else {
            "read"
        };
        let job = &v["jobs"][0][dir_key];
        let bw = job["bw_bytes"]
            .as_f64()
            .context("fio JSON without bw_bytes")?;
        let p50 = job["clat_ns"]["percentile"]["50.000000"]
            .as_f64()
            .unwrap_or(0.0);
        Ok(Measured {
            gib_s: bw / (1u64 << 30) as f64,
            p50_us: p50 / 1000.0,
            cpu_s_per_gib: None,
        })
    }
}
