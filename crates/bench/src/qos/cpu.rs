//! What keeps the machine's CPUs from colouring the figures: a cgroup that caps the bulk
//! tenant's CPU share (mode `cpu-throttle`), and the kernel's CPU latency request held at 0 µs.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// A cgroup (v1 `cpu` controller) limiting the threads put in it to a share of one core.
pub(super) struct CpuQuota {
    dir: PathBuf,
}

impl CpuQuota {
    const ROOT: &'static str = "/sys/fs/cgroup/cpu";

    const PREFIX: &'static str = "switchyard-bench-qos-";

    pub(super) fn new(share: f64) -> anyhow::Result<CpuQuota> {
        Self::remove_stale();
        let dir = Path::new(Self::ROOT).join(format!("{}{}", Self::PREFIX, std::process::id()));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let q = CpuQuota { dir };
        q.write("cpu.cfs_period_us", "100000")?;
        q.write(
            "cpu.cfs_quota_us",
            &((share * 100_000.0) as u64).max(1000).to_string(),
        )?;
        Ok(q)
    }

    /// Removes the cgroups of runs that were killed before they could (their process is gone;
    /// a cgroup without tasks can be removed).
    pub(super) fn remove_stale() {
        let Ok(entries) = std::fs::read_dir(Self::ROOT) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.strip_prefix(Self::PREFIX) else {
                continue;
            };
            if !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }

    fn write(&self, file: &str, value: &str) -> anyhow::Result<()> {
        let path = self.dir.join(file);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut f| f.write_all(value.as_bytes()))
            .with_context(|| format!("writing {value} to {}", path.display()))
    }

    /// Moves the calling thread into the cgroup (`true`) or back to the root.
    pub(super) fn place_me(&self, inside: bool) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() }.to_string();
        let tasks = if inside {
            self.dir.join("tasks")
        } else {
            Path::new(Self::ROOT).join("tasks")
        };
        if let Err(e) = std::fs::write(&tasks, &tid) {
            eprintln!(
                "bench qos: cannot move thread {tid} to {}: {e}",
                tasks.display()
            );
        }
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The kernel's CPU latency request (PM QoS) held at 0 µs while this lives: idle CPUs poll
/// instead of halting. On a virtual machine a halted vCPU wakes 50 µs to milliseconds late,
/// and that wake-up, the host's and not the engine's, set an idle latency tenant's p99 and
/// moved it tenfold between slices; latency benchmarks hold it the same way (cyclictest).
pub(super) struct CpuLatency {
    _file: std::fs::File,
}

impl CpuLatency {
    const PATH: &'static str = "/dev/cpu_dma_latency";

    pub(super) fn hold() -> anyhow::Result<CpuLatency> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(Self::PATH)
            .with_context(|| format!("opening {}", Self::PATH))?;
        // The request is a binary 32-bit integer, µs; it holds until the file is closed.
        file.write_all(&0i32.to_ne_bytes())
            .with_context(|| format!("writing 0 to {}", Self::PATH))?;
        Ok(CpuLatency { _file: file })
    }
}
