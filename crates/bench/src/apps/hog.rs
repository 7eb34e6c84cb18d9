//! The other load `bench apps --hog` runs the applications under: a process that keeps the
//! engine's core busy, as another program on the machine would.

use std::process::{Child, Command, Stdio};

use anyhow::Context;
use serde::Serialize;

/// What else the machine runs while an application is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Load {
    /// Nothing.
    Quiet,
    /// A process spinning on the last CPU, where the engine pins its first worker.
    Hog,
}

impl Load {
    /// Name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Load::Quiet => "quiet",
            Load::Hog => "hog",
        }
    }

    /// Starts the load; it runs until the returned guard is dropped.
    pub(crate) fn start(self) -> anyhow::Result<Option<Hog>> {
        match self {
            Load::Quiet => Ok(None),
            Load::Hog => Hog::start().map(Some),
        }
    }
}

/// A shell spinning on the last CPU, killed when dropped.
pub(crate) struct Hog {
    child: Child,
}

impl Hog {
    fn start() -> anyhow::Result<Hog> {
        let cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
        let child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .spawn()
            .context("starting the CPU hog (sh)")?;
        let hog = Hog { child };
        // SAFETY: cpu_set_t is a plain bit array; zeroed is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `cpu` is below the number of CPUs, within cpu_set_t's 1024 bits here.
        unsafe { libc::CPU_SET(cpu, &mut set) };
        // SAFETY: `set` is a valid cpu_set_t of the size passed; the pid is our live child.
        let rc = unsafe {
            libc::sched_setaffinity(
                hog.child.id() as libc::pid_t,
                std::mem::size_of::<libc::cpu_set_t>(),
                &set,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("pinning the CPU hog to CPU {cpu}"));
        }
        Ok(hog)
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
