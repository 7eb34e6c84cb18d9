//! What programs do to a mount besides fio's streams: dbench's file-server load, one-byte
//! `write(2)`s, 4 KiB appends and metadata operations, each run for a while on each system
//! and reported as a rate.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

/// One workload.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) enum Workload {
    /// dbench's `client.txt` load with 4 clients (MB/s as dbench reports it).
    Dbench,
    /// `write(2)` of one byte at a time to one file (bytes/s = writes/s).
    ByteWrites,
    /// 4 KiB `write(2)`s to a file opened `O_APPEND` (MB/s).
    Appends4k,
    /// Create (and close), stat and unlink of empty files in one directory (operations/s).
    Metadata,
}

impl Workload {
    /// Every workload there is; dbench only where it is installed.
    pub(super) fn all(dbench: bool) -> Vec<Workload> {
        let mut v = vec![
            Workload::ByteWrites,
            Workload::Appends4k,
            Workload::Metadata,
        ];
        if dbench {
            v.insert(0, Workload::Dbench);
        }
        v
    }

    /// The unit of its rate.
    pub(super) fn unit(self) -> &'static str {
        match self {
            Workload::Dbench | Workload::Appends4k => "MB/s",
            Workload::ByteWrites => "writes/s",
            Workload::Metadata => "ops/s",
        }
    }

    /// Whether the FUSE floor (`passthrough`) runs it: dbench deletes and re-creates trees,
    /// and the floor, which knows its inodes by backing path and inode number, takes a
    /// reused inode number for the inode it named before (a file for a directory).
    pub(super) fn on_the_floor(self) -> bool {
        !matches!(self, Workload::Dbench)
    }

    /// Its name in the table.
    pub(super) fn label(self) -> &'static str {
        match self {
            Workload::Dbench => "dbench 4 clients",
            Workload::ByteWrites => "1-byte writes",
            Workload::Appends4k => "4K appends",
            Workload::Metadata => "create/stat/unlink",
        }
    }

    /// Runs it for about `secs` seconds in `dir` (left as it was found): its rate.
    pub(super) fn run(self, dir: &Path, secs: f64) -> anyhow::Result<f64> {
        let work = dir.join(format!("workload-{self:?}"));
        std::fs::create_dir(&work).with_context(|| format!("creating {}", work.display()))?;
        let until = Duration::from_secs_f64(secs);
        let rate = match self {
            Workload::Dbench => dbench(&work, secs),
            Workload::ByteWrites => writes(&work, 1, false, until),
            Workload::Appends4k => writes(&work, 4096, true, until).map(|r| r * 4096.0 / 1e6),
            Workload::Metadata => metadata(&work, until),
        };
        std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
        rate
    }
}

/// Where dbench's load file is, if dbench is installed.
pub(super) fn dbench_load() -> Option<&'static str> {
    let load = "/usr/share/dbench/client.txt";
    let installed = Command::new("dbench").arg("--help").output().is_ok();
    (installed && Path::new(load).exists()).then_some(load)
}

/// dbench with 4 clients in `dir` for 5 × `secs` seconds, at least 2 (its rate swings more
/// than the others', and in its first second it measures nothing): its throughput, MB/s.
fn dbench(dir: &Path, secs: f64) -> anyhow::Result<f64> {
    let load = dbench_load().context("dbench is not installed")?;
    let out = Command::new("dbench")
        .args([
            "-c",
            load,
            "-t",
            &format!("{}", (secs * 5.0).ceil().max(2.0)),
        ])
        .arg("-D")
        .arg(dir)
        .arg("4")
        .output()
        .context("running dbench")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "dbench failed ({}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // "Throughput 412.345 MB/sec  4 clients  4 procs  max_latency=..."
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Throughput "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .filter(|&v: &f64| v > 0.0)
        .with_context(|| format!("no throughput in dbench's output: {text}"))
}

/// The most a writes workload writes to its file (a page-cache copy runs at GB/s, and the
/// file systems are small).
const MAX_FILE: u64 = 64 << 20;

/// `write(2)`s of `size` bytes to a new file in `dir` (opened `O_APPEND` where `append`) for
/// `until`, or until the file holds [`MAX_FILE`] bytes: writes per second.
fn writes(dir: &Path, size: usize, append: bool, until: Duration) -> anyhow::Result<f64> {
    let path = dir.join("file");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    let buf = vec![0x5a; size];
    let t0 = Instant::now();
    let mut n = 0u64;
    loop {
        // The clock every 256 writes: a one-byte write costs less than reading it.
        for _ in 0..256 {
            f.write_all(&buf).context("writing")?;
        }
        n += 256;
        if t0.elapsed() >= until || n * size as u64 >= MAX_FILE {
            break;
        }
    }
    // Timed until every byte is in the file system (with the writeback cache, a write alone
    // would be measured as a copy into the page cache).
    f.sync_all().context("syncing")?;
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

/// Creates, stats and unlinks files in `dir` in batches of 1,000 for `until`: operations per
/// second (each create, stat and unlink one).
fn metadata(dir: &Path, until: Duration) -> anyhow::Result<f64> {
    const BATCH: usize = 1000;
    let t0 = Instant::now();
    let mut ops = 0u64;
    while ops == 0 || t0.elapsed() < until {
        let names: Vec<_> = (0..BATCH).map(|i| dir.join(format!("f{i}"))).collect();
        for p in &names {
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
        }
        for p in &names {
            std::fs::metadata(p).with_context(|| format!("stat {}", p.display()))?;
        }
        for p in &names {
            std::fs::remove_file(p).with_context(|| format!("unlinking {}", p.display()))?;
        }
        ops += 3 * BATCH as u64;
    }
    Ok(ops as f64 / t0.elapsed().as_secs_f64())
}
