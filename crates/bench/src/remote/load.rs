//! Reads while a CPU hog keeps the server's core busy (RIMFS Fig. 12): the one-sided path
//! should keep its throughput, the in-message path (the server copies every byte) should not.
//!
//! The serving thread runs on the last core; the hog runs there too, busy for the given share
//! of every 10 ms; the reading client runs on the first core.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use switchyard_engine::cpus;
use switchyard_remote::Client;
use switchyard_store::{Fd, Files};

/// Shares of the server's core the hog keeps busy.
pub(super) const LOADS: [f64; 4] = [0.0, 0.3, 0.6, 0.9];
/// Request size of the loaded reads.
const SIZE: usize = 1 << 20;

/// Pins the calling thread to `core` (all cores with `None`).
pub(super) fn pin(core: Option<usize>) {
    match core {
        Some(c) => cpus::pin_current(&[c]),
        None => cpus::pin_current(&(0..cores()).collect::<Vec<_>>()),
    }
}

/// Cores of this machine (online, whatever the calling thread's affinity).
pub(super) fn cores() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// The core the server (and the hog) run on.
pub(super) fn server_core() -> usize {
    cores() - 1
}

/// A thread on the server's core, busy for `load` of every 10 ms until dropped.
struct Hog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Hog {
    fn start(load: f64) -> Hog {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = (load > 0.0).then(|| {
            std::thread::spawn(move || {
                pin(Some(server_core()));
                let period = Duration::from_millis(10);
                while !s.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    while t.elapsed() < period.mul_f64(load) {
                        std::hint::spin_loop();
                    }
                    std::thread::sleep(period.mul_f64(1.0 - load));
                }
            })
        });
        Hog { stop, thread }
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One path's throughput at one load.
#[derive(Serialize)]
pub(super) struct Loaded {
    pub path: &'static str,
    pub load: f64,
    pub gib_per_s: f64,
    /// Median over rounds of (this ÷ the same path unloaded) in the same round.
    pub vs_unloaded: f64,
}

/// 1 MiB reads of `total` bytes on each (name, client, descriptor) at every load, in
/// rotated rounds, from the first core.
pub(super) fn measure(
    paths: [(&'static str, &Client, Fd); 2],
    total: usize,
    rounds: usize,
) -> anyhow::Result<Vec<Loaded>> {
    pin(Some(0));
    let mut buf = vec![0u8; SIZE];
    // [path][load] → per-round GiB/s.
    let mut gib = vec![vec![Vec::new(); LOADS.len()]; paths.len()];
    for round in 0..rounds {
        for k in 0..LOADS.len() {
            let li = (k + round) % LOADS.len();
            let _hog = Hog::start(LOADS[li]);
            std::thread::sleep(Duration::from_millis(50));
            for (pi, (_, c, fd)) in paths.iter().enumerate() {
                let t = Instant::now();
                let mut off = 0;
                while off < total {
                    c.pread(*fd, &mut buf, off as u64)?;
                    off += SIZE;
                }
                gib[pi][li].push(total as f64 / (1u64 << 30) as f64 / t.elapsed().as_secs_f64());
            }
        }
    }
    pin(None);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut out = Vec::new();
    for (pi, (name, _, _)) in paths.iter().enumerate() {
        for (li, &load) in LOADS.iter().enumerate() {
            let ratios = gib[pi][li].iter().zip(&gib[pi][0]).map(|(x, y)| x / y);
            out.push(Loaded {
                path: name,
                load,
                gib_per_s: median(gib[pi][li].clone()),
                vs_unloaded: median(ratios.collect()),
            });
        }
    }
    Ok(out)
}

/// Prints the loaded reads.
pub(super) fn print(rows: &[Loaded]) {
    println!(
        "1 MiB reads with a CPU hog on the server's core (core {}; the client on core 0):",
        server_core()
    );
    println!(
        "{:>12} {:>6} {:>9} {:>12}",
        "path", "load", "GiB/s", "÷ unloaded"
    );
    for r in rows {
        println!(
            "{:>12} {:>5.0}% {:>9.3} {:>12.2}",
            r.path,
            r.load * 100.0,
            r.gib_per_s,
            r.vs_unloaded
        );
    }
}
