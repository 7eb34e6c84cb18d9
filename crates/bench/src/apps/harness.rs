//! How an application runs in both modes: the same code, reaching the store through [`Io`],
//! which makes blocking calls (sync) or awaits the asynchronous API (async).
//!
//! - **sync**: `workers` OS threads on the application core, each calling the store's
//!   blocking API. Its futures never return `Pending`, so the application code is exactly
//!   blocking code; each thread drives its loop with `block_on` only to share that code.
//! - **async**: one thread on the application core running `workers` tasks on a
//!   `switchyard_rt` executor; a task that waits for a copy yields to the others, and with
//!   no task to run the executor helps the engine copy (**async-wait**: it only waits).
//!
//! Workers take items (files, graphs, appends …) from one shared counter until none are left.
//! Everything a run allocates (its buffers) is allocated and touched before the clock starts.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use switchyard_engine::cpus;
use switchyard_rt::Executor;
use switchyard_store::{Errno, Fd, Fs};

use crate::cpu_time;

/// How the application reaches the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Blocking calls, one thread per worker.
    Sync,
    /// Futures on one executor, one task per worker; the idle executor helps the engine with
    /// its outstanding copies (`switchyard_rt`'s default).
    Async,
    /// As `Async`, but the idle executor only waits for its copies: the baseline that shows
    /// what helping gains.
    #[serde(rename = "async-wait")]
    AsyncWait,
}

impl Mode {
    /// Sync and async, in the order rounds rotate through.
    pub const BOTH: [Mode; 2] = [Mode::Sync, Mode::Async];
    /// Every mode, in the order rounds rotate through.
    pub const ALL: [Mode; 3] = [Mode::Sync, Mode::Async, Mode::AsyncWait];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::Async => "async",
            Mode::AsyncWait => "async-wait",
        }
    }
}

/// A worker's buffers, kept across its operations.
#[derive(Default)]
pub struct Scratch {
    /// Byte buffers, allocated and touched (so faulted in) before the run starts.
    pub bufs: Vec<Vec<u8>>,
    /// Operations this worker has done in this run.
    pub done: u64,
}

impl Scratch {
    /// Scratch with byte buffers of these lengths, faulted in.
    pub fn with_bufs(lens: &[usize]) -> Scratch {
        Scratch {
            bufs: lens.iter().map(|&n| vec![0x5a; n]).collect(),
            ..Scratch::default()
        }
    }
}

/// One application: its operation, written once for both modes.
pub trait App: Send + Sync + 'static {
    /// Operations one run does.
    fn items(&self) -> usize;
    /// A worker's buffers.
    fn scratch(&self) -> Scratch;
    /// Untimed, before each run.
    fn before_run(&self, _fs: &Fs, _workers: usize) -> anyhow::Result<()> {
        Ok(())
    }
    /// Untimed, after each run: check what it wrote, then remove it.
    fn after_run(&self, _fs: &Fs) -> anyhow::Result<()> {
        Ok(())
    }
    /// Operation `item`, by worker `worker`; returns the file bytes it read and wrote. An
    /// operation that computes a wrong result fails.
    #[allow(async_fn_in_trait)]
    async fn op(
        &self,
        io: &Io,
        worker: usize,
        item: usize,
        scratch: &mut Scratch,
    ) -> anyhow::Result<u64>;
}

/// A worker's way to the store.
pub struct Io {
    fs: Arc<Fs>,
    mode: Mode,
    /// Time spent inside store calls (sync only: an asynchronous call's time overlaps others').
    io_ns: Cell<u64>,
}

impl Io {
    fn timed<T>(&self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let r = f();
        self.io_ns
            .set(self.io_ns.get() + t.elapsed().as_nanos() as u64);
        r
    }

    /// A metadata call (open, close, stat, unlink): synchronous in both modes.
    pub fn meta<T>(&self, f: impl FnOnce(&Fs) -> Result<T, Errno>) -> anyhow::Result<T> {
        Ok(self.timed(|| f(&self.fs))?)
    }

    /// Reads up to `buf.len()` bytes at `off`; the count and the buffer.
    pub async fn pread(
        &self,
        fd: Fd,
        mut buf: Vec<u8>,
        off: u64,
    ) -> anyhow::Result<(usize, Vec<u8>)> {
        match self.mode {
            Mode::Sync => {
                let n = self.timed(|| self.fs.pread(fd, &mut buf, off))?;
                Ok((n, buf))
            }
            Mode::Async | Mode::AsyncWait => {
                let (r, buf) = self.fs.pread_async(fd, buf, off).await;
                Ok((r?, buf))
            }
        }
    }

    /// Writes all of `data` at `off`; the buffer back.
    pub async fn pwrite(&self, fd: Fd, data: Vec<u8>, off: u64) -> anyhow::Result<Vec<u8>> {
        match self.mode {
            Mode::Sync => {
                self.timed(|| self.fs.pwrite(fd, &data, off))?;
                Ok(data)
            }
            Mode::Async | Mode::AsyncWait => {
                let (r, data) = self.fs.pwrite_async(fd, data, off).await;
                r?;
                Ok(data)
            }
        }
    }

    /// Appends all of `data`; the buffer back.
    pub async fn append(&self, fd: Fd, data: Vec<u8>) -> anyhow::Result<Vec<u8>> {
        match self.mode {
            Mode::Sync => {
                self.timed(|| self.fs.append(fd, &data))?;
                Ok(data)
            }
            Mode::Async | Mode::AsyncWait => {
                let (r, data) = self.fs.append_async(fd, data).await;
                r?;
                Ok(data)
            }
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// Process CPU seconds (every thread, the engine's worker included).
    pub cpu_s: f64,
    /// File bytes read and written.
    pub bytes: u64,
    /// Operations done.
    pub ops: u64,
    /// Every operation's latency, µs, sorted.
    pub lat_us: Vec<f64>,
    /// Seconds the workers spent inside store calls (sync), summed over workers.
    pub io_s: f64,
    /// Bytes the mover copied on the engine, during the run.
    pub engine_bytes: u64,
    /// Bytes the mover copied on the CPU (helped ones included), during the run.
    pub cpu_bytes: u64,
    /// Of `cpu_bytes`, those an idle executor copied from the tail of an engine batch.
    pub helped_bytes: u64,
}

impl Run {
    /// File bytes per second, GiB.
    pub fn gib_s(&self) -> f64 {
        self.bytes as f64 / self.wall_s / (1u64 << 30) as f64
    }

    /// The `q` quantile of operation latency, µs.
    pub fn lat(&self, q: f64) -> f64 {
        let n = self.lat_us.len();
        if n == 0 {
            return 0.0;
        }
        self.lat_us[((n as f64 * q) as usize).min(n - 1)]
    }

    /// Mean operation latency, µs.
    pub fn mean_us(&self) -> f64 {
        self.lat_us.iter().sum::<f64>() / self.lat_us.len().max(1) as f64
    }

    /// Process CPU seconds per GiB of file data.
    pub fn cpu_s_per_gib(&self) -> f64 {
        self.cpu_s / (self.bytes as f64 / (1u64 << 30) as f64)
    }

    /// Share of wall time the (one) sync worker spent in store calls.
    pub fn io_share(&self) -> f64 {
        self.io_s / self.wall_s
    }

    /// Share of the copied bytes that `part` of them are (0 when nothing was copied).
    pub fn copy_share(&self, part: u64) -> f64 {
        part as f64 / (self.engine_bytes + self.cpu_bytes).max(1) as f64
    }
}

/// What one worker did.
#[derive(Default)]
struct Tally {
    bytes: u64,
    lat_us: Vec<f64>,
    io_ns: u64,
}

async fn worker<A: App>(
    app: Arc<A>,
    io: Io,
    index: usize,
    next: Arc<AtomicUsize>,
    mut scratch: Scratch,
) -> anyhow::Result<Tally> {
    let mut t = Tally::default();
    loop {
        let item = next.fetch_add(1, Ordering::Relaxed);
        if item >= app.items() {
            break;
        }
        let start = Instant::now();
        t.bytes += app.op(&io, index, item, &mut scratch).await?;
        t.lat_us.push(start.elapsed().as_secs_f64() * 1e6);
        scratch.done += 1;
    }
    t.io_ns = io.io_ns.get();
    Ok(t)
}

/// The application core: the first CPU (the engine pins its workers from the last one down).
fn pin_to_app_core() {
    cpus::pin_current(&[0]);
}

/// Runs `app` once in `mode` with `workers` workers, on the application core.
pub fn run<A: App>(app: &Arc<A>, fs: &Arc<Fs>, mode: Mode, workers: usize) -> anyhow::Result<Run> {
    app.before_run(fs, workers)?;
    let next = Arc::new(AtomicUsize::new(0));
    let scratches: Vec<Scratch> = (0..workers).map(|_| app.scratch()).collect();
    let io = |mode| Io {
        fs: fs.clone(),
        mode,
        io_ns: Cell::new(0),
    };
    let stats0 = fs.store().mover().stats();
    let cpu0 = cpu_time::process();
    let t0 = Instant::now();
    let tallies: Vec<anyhow::Result<Tally>> = match mode {
        Mode::Sync => std::thread::scope(|s| {
            let threads: Vec<_> = scratches
                .into_iter()
                .enumerate()
                .map(|(i, scratch)| {
                    let (app, next, io) = (app.clone(), next.clone(), io(Mode::Sync));
                    s.spawn(move || {
                        pin_to_app_core();
                        Executor::new().block_on(worker(app, io, i, next, scratch))
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        }),
        Mode::Async | Mode::AsyncWait => std::thread::scope(|s| {
            let (app, next) = (app.clone(), next.clone());
            let tasks: Vec<Io> = (0..workers).map(|_| io(mode)).collect();
            s.spawn(move || {
                pin_to_app_core();
                let ex = Executor::new();
                ex.set_helping(mode == Mode::Async);
                let handles: Vec<_> = tasks
                    .into_iter()
                    .zip(scratches)
                    .enumerate()
                    .map(|(i, (io, scratch))| {
                        ex.spawn(worker(app.clone(), io, i, next.clone(), scratch))
                    })
                    .collect();
                ex.block_on(async {
                    let mut out = Vec::with_capacity(handles.len());
                    for h in handles {
                        out.push(h.await);
                    }
                    out
                })
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        }),
    };
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu_s = (cpu_time::process() - cpu0).as_secs_f64();
    let stats = fs.store().mover().stats();
    let mut run = Run {
        wall_s,
        cpu_s,
        engine_bytes: stats.engine_bytes - stats0.engine_bytes,
        cpu_bytes: stats.cpu_bytes + stats.helped_bytes - stats0.cpu_bytes - stats0.helped_bytes,
        helped_bytes: stats.helped_bytes - stats0.helped_bytes,
        ..Run::default()
    };
    for t in tallies {
        let t = t?;
        run.bytes += t.bytes;
        run.ops += t.lat_us.len() as u64;
        run.lat_us.extend(t.lat_us);
        run.io_s += t.io_ns as f64 / 1e9;
    }
    run.lat_us.sort_by(f64::total_cmp);
    app.after_run(fs)?;
    Ok(run)
}
