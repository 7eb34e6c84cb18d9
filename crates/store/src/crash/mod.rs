//! Crash-state testing in the style of Vinter and Chipmunk.
//!
//! A workload runs on a store in a memory region whose `Persist` — the one its media
//! boundary, its mover and its engine all use — is traced into the workload's own recorder,
//! which captures every store (with its bytes), flush and fence. Replaying that trace over the
//! image taken before the workload, the harness tracks, per 64-byte line, what is durable
//! (flushed, then fenced by the flushing thread) and what is only in the cache. Just before
//! every fence (the last moment before more becomes durable) it builds crash images: nothing
//! in flight persisted, everything persisted, every subset when few lines are in flight, and
//! seeded random subsets otherwise. Each distinct image is mounted (recovery
//! runs), checked with `fsck`, compared with the oracle — the logical state before or after
//! the interrupted operation — and must stay usable (create, write, read, delete).
//!
//! Lines are the unit of persistence: a cache line is written back whole. The 8-byte commit
//! words never straddle lines.
//!
//! The injected missing flush is a faulting media (`pm::Faulty`) put in place of the
//! region's after the set-up: it drops the flush of every log entry.
//!
//! [`run_async`] does the same for asynchronous writes: the workload's store sends its copies
//! to a threads engine whose worker waits before each batch, so the metadata commit of an
//! orderless write happens while its data is still unwritten, and the worker's own stores and
//! fences (the data, then the durable completion record) are crash points too. Every image in
//! between must recover to the state before the write or after it.

mod ops;
mod oracle;
mod power;
mod replay;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use switchyard_engine::dsa::model::{ModelConfig, ModelEngine};
use switchyard_engine::dsa::DsaConfig;
use switchyard_engine::{FaultPlan, ThreadsConfig, ThreadsEngine};
use switchyard_media::trace::{Event, Recorder};
use switchyard_media::{Persist, Region};
use switchyard_mover::{Config, Mover, Policy};

use crate::fs::Fs;
use crate::fsck;
use crate::pm::{Faulty, Held};
use crate::store::{Owner, Store};
pub use ops::{all_ops, async_ops, Op};
use ops::{apply, setup};
pub use oracle::{check_image, state, Node, State};
pub use power::{run_power, PowerOptions};
use replay::{Explorer, Replay};

/// Region size for crash workloads (small, so images are cheap).
const REGION: u64 = 2 << 20;

/// A mover that sends every copy to a one-channel threads engine misbehaving as `faults` says
/// (the workloads of [`run_async`] use a delay before each batch, so a write's metadata commits
/// while its data is still unwritten).
pub fn engine_mover(faults: FaultPlan) -> Arc<Mover> {
    engine_mover_with(faults, Persist::detect())
}

/// [`engine_mover`] whose engine and CPU path use `persist`.
fn engine_mover_with(faults: FaultPlan, persist: Persist) -> Arc<Mover> {
    let mut cfg = Config::default();
    cfg.mover.policy = Policy::Engine;
    let engine = ThreadsEngine::start(ThreadsConfig {
        pin: false,
        persist,
        faults,
        ..ThreadsConfig::default()
    })
    .expect("threads engine");
    Arc::new(Mover::with_engine(&cfg, Arc::new(engine), persist))
}

/// A mover that sends every copy to the DSA engine on one device model
/// (`switchyard_engine::dsa::model`), engine and device writing with `persist`: a durable copy
/// is a descriptor with destination readback, which the device makes durable (its stores,
/// flushes and fence, on the model's thread) before it writes the completion record.
fn dsa_model_mover(persist: Persist) -> Arc<Mover> {
    let mut cfg = Config::default();
    cfg.mover.policy = Policy::Engine;
    let engine = ModelEngine::start(
        1,
        &ModelConfig::default(),
        DsaConfig {
            persist,
            ..DsaConfig::default()
        },
    )
    .expect("the DSA engine on its model");
    Arc::new(Mover::with_engine(&cfg, Arc::new(engine), persist))
}

/// One CPU-only mover for the stores the harness mounts untraced (sample images, probes).
fn mover() -> Arc<Mover> {
    static MOVER: std::sync::OnceLock<Arc<Mover>> = std::sync::OnceLock::new();
    MOVER.get_or_init(|| cpu_mover(Persist::detect())).clone()
}

/// A mover that runs every copy on the calling thread with `persist`, so a traced workload's
/// trace is one thread's program order.
fn cpu_mover(persist: Persist) -> Arc<Mover> {
    let mut cfg = Config::default();
    cfg.mover.policy = Policy::Cpu;
    let engine = ThreadsEngine::start(ThreadsConfig {
        pin: false,
        persist,
        ..ThreadsConfig::default()
    })
    .expect("threads engine");
    Arc::new(Mover::with_engine(&cfg, Arc::new(engine), persist))
}

/// What the harness explored.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Workloads run.
    pub workloads: u64,
    /// Crash points (fences) visited.
    pub crash_points: u64,
    /// Distinct crash images mounted and checked.
    pub images: u64,
    /// Of those, images of a crash during an asynchronous write.
    pub async_images: u64,
    /// Bytes the workloads' engines copied (0 where every copy ran on the CPU).
    pub engine_bytes: u64,
    /// What went wrong (empty when the store is crash consistent).
    pub violations: Vec<String>,
}

/// How hard to look.
#[derive(Debug, Clone)]
pub struct Options {
    /// Seed for random subsets and random sequences.
    pub seed: u64,
    /// Random subsets per crash point when too many lines are in flight for all subsets.
    pub random_subsets: usize,
    /// All subsets when at most this many lines are in flight.
    pub exhaustive_lines: usize,
    /// Random sequences to run after the single operations and pairs.
    pub random_sequences: usize,
    /// Length of each random sequence.
    pub sequence_len: usize,
    /// Inject a missing flush (the harness must then report violations).
    pub inject_missing_flush: bool,
    /// Stop after this many violations.
    pub max_violations: usize,
    /// Inject orderless writes whose entries do not name their copy (recovery then cannot
    /// tell an unfinished one; [`run_async`] must report violations).
    pub inject_unrecorded_orderless: bool,
    /// Inject a commit that does not flush a two-phase write's blocks filled by another
    /// party ([`run`] must report violations).
    pub inject_unflushed_fill: bool,
    /// Run every ordered pair of operations after the single ones (ACE-style); without them
    /// a run is the single operations and the random sequences.
    pub pairs: bool,
    /// Where the workloads' copies go.
    pub engine: CrashEngine,
}

/// Where the workloads of [`run`] and [`run_async`] send their copies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CrashEngine {
    /// [`run`]: the calling CPU (the trace is one thread's program order); [`run_async`]: a
    /// threads engine whose worker waits 1 ms before each batch.
    #[default]
    Threads,
    /// Every copy through the DSA engine on its device model (the mover's `engine` policy):
    /// durable writes are descriptors with destination readback, and the device's stores,
    /// flushes and fences (on the model's thread) are crash points too.
    DsaModel,
}

impl CrashEngine {
    /// Its name on the command line (`crashtest --engine`).
    pub fn name(self) -> &'static str {
        match self {
            CrashEngine::Threads => "threads",
            CrashEngine::DsaModel => "dsa-model",
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 1,
            random_subsets: 24,
            exhaustive_lines: 8,
            random_sequences: 80,
            sequence_len: 6,
            inject_missing_flush: false,
            max_violations: 10,
            inject_unrecorded_orderless: false,
            inject_unflushed_fill: false,
            pairs: true,
            engine: CrashEngine::Threads,
        }
    }
}

impl Options {
    /// Much longer runs: more subsets, more and longer random sequences.
    pub fn exhaustive() -> Options {
        Options {
            random_subsets: 64,
            exhaustive_lines: 10,
            random_sequences: 400,
            sequence_len: 10,
            ..Options::default()
        }
    }
}

/// Runs every operation alone, every ordered pair (ACE-style, over the small namespace;
/// [`Options::pairs`]), and seeded random sequences.
pub fn run(opts: &Options, progress: impl FnMut(&Report)) -> Report {
    let mover: MakeMover<'_> = match opts.engine {
        CrashEngine::Threads => &cpu_mover,
        CrashEngine::DsaModel => &dsa_model_mover,
    };
    run_ops(&all_ops(), mover, opts, progress)
}

/// [`run`] over the asynchronous writes and the operations they meet ([`async_ops`]), on a
/// store whose copies go to a delayed threads engine (or, with [`CrashEngine::DsaModel`], to
/// the DSA engine on its model).
pub fn run_async(opts: &Options, progress: impl FnMut(&Report)) -> Report {
    let delayed = |persist| {
        let delay = Duration::from_millis(1);
        engine_mover_with(
            FaultPlan {
                delay,
                ..FaultPlan::default()
            },
            persist,
        )
    };
    let mover: MakeMover<'_> = match opts.engine {
        CrashEngine::Threads => &delayed,
        CrashEngine::DsaModel => &dsa_model_mover,
    };
    run_ops(&async_ops(), mover, opts, progress)
}

/// [`run_async`] with the writes made by a bulk tenant whose engine channel runs under a
/// small fixed budget (module `switchyard_mover::qos`: 64 MiB/s, about 6.5 KiB per 100 µs
/// epoch), so the engine pauses between and within their copies while their metadata has
/// committed. Also returns the epochs the bulk channel paused in, over every workload (the
/// proof that the copies were throttled).
pub fn run_async_throttled(opts: &Options, progress: impl FnMut(&Report)) -> (Report, u64) {
    let paused = std::sync::Mutex::new((0u64, None::<Arc<Mover>>));
    let count = |m: &Mover| m.tenants().iter().map(|t| t.throttled_epochs).sum::<u64>();
    let throttled = |persist| {
        let mut cfg = Config::default();
        cfg.mover.policy = Policy::Engine;
        cfg.engine.channels = 2;
        cfg.qos.tenants = vec![switchyard_mover::config::TenantConfig::bulk("writer")];
        cfg.qos.fixed_mib_s = 64.0;
        let engine = ThreadsEngine::start(ThreadsConfig {
            channels: 2,
            pin: false,
            persist,
            ..ThreadsConfig::default()
        })
        .expect("threads engine");
        let m = Arc::new(Mover::with_engine(&cfg, Arc::new(engine), persist));
        // Keep the last mover only (each holds engine threads): count the one before.
        let mut p = paused.lock().expect("not poisoned");
        if let Some(last) = p.1.replace(m.clone()) {
            p.0 += count(&last);
        }
        m
    };
    let report = {
        let _writer = switchyard_mover::qos::enter(1);
        run_ops(&async_ops(), &throttled, opts, progress)
    };
    let (total, last) = paused.into_inner().expect("not poisoned");
    (report, total + last.map_or(0, |m| count(&m)))
}

/// Makes the mover of one traced workload from the region's traced `Persist`.
type MakeMover<'a> = &'a dyn Fn(Persist) -> Arc<Mover>;

fn run_ops(
    ops: &[Op],
    mover: MakeMover<'_>,
    opts: &Options,
    mut progress: impl FnMut(&Report),
) -> Report {
    let ops = ops.to_vec();
    let mut workloads: Vec<Vec<Op>> = ops.iter().map(|o| vec![o.clone()]).collect();
    for a in ops.iter().filter(|_| opts.pairs) {
        for b in &ops {
            workloads.push(vec![a.clone(), b.clone()]);
        }
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);
    for _ in 0..opts.random_sequences {
        workloads.push(
            (0..opts.sequence_len)
                .map(|_| ops[rng.random_range(0..ops.len())].clone())
                .collect(),
        );
    }
    let mut report = Report::default();
    let mut seen = HashSet::new();
    for w in &workloads {
        run_workload(w, mover, opts, &mut rng, &mut seen, &mut report);
        progress(&report);
        if report.violations.len() >= opts.max_violations {
            break;
        }
    }
    report
}

/// Runs one workload traced and checks every crash image it produces: the region, the
/// engine and the mover all use one `Persist` traced into the workload's own recorder.
pub fn run_workload(
    ops: &[Op],
    make_mover: MakeMover<'_>,
    opts: &Options,
    rng: &mut rand::rngs::StdRng,
    seen: &mut HashSet<(u32, u32, usize)>,
    report: &mut Report,
) {
    report.workloads += 1;
    let mut recorder = Recorder::new();
    let persist = Persist::detect().traced(&recorder);
    let region = Region::memory(REGION, persist).expect("memory region");
    let base_ptr = region.as_ptr();
    let mover = make_mover(persist);
    let mut store = Store::format(region, mover.clone(), Owner::current()).expect("format");
    let missing_flush = Arc::new(AtomicBool::new(false));
    if opts.inject_missing_flush {
        let armed = missing_flush.clone();
        std::sync::Arc::get_mut(&mut store.pm)
            .expect("no page-media writer shares a memory region's media")
            .wrap_media(|m| Box::new(Faulty::new(m, Held::LogEntry, armed)));
    }
    let mut fs = Fs::new(store);
    setup(&fs);
    missing_flush.store(true, Ordering::Relaxed);
    if opts.inject_unrecorded_orderless {
        fs.store().inject_unrecorded_orderless();
    }
    // SAFETY: the region is REGION bytes and nothing writes it while we copy (single thread).
    let base = unsafe { std::slice::from_raw_parts(base_ptr, REGION as usize) }.to_vec();
    recorder.capture(base_ptr, REGION as usize);
    recorder.reset();
    let mut states = vec![state(&fs).expect("state")];
    let mut bounds = Vec::new();
    for op in ops {
        fs = apply(fs, op, &mover, opts);
        bounds.push(recorder.events().len());
        states.push(state(&fs).expect("state"));
    }
    report.engine_bytes += mover.stats().engine_bytes;
    // The clean-unmount stores that follow are not part of the trace.
    let events = recorder.events();
    drop(fs);
    drop(recorder);
    let mut replay = Replay::new(base, base_ptr as usize);
    let mut explorer = Explorer {
        opts,
        rng,
        seen,
        report,
    };
    let mut op_index = 0;
    for (i, t) in events.iter().enumerate() {
        while op_index < bounds.len() && i >= bounds[op_index] {
            op_index += 1;
        }
        match t.event {
            Event::Store {
                addr, non_temporal, ..
            } => {
                if let Some(data) = &t.data {
                    replay.store(addr, data, non_temporal, t.thread);
                }
            }
            Event::Flush { addr, len } => replay.flush(addr, len, t.thread),
            Event::Fence => {
                // The crash point: just before this fence, any subset of what was stored
                // since the previous one may have reached the media.
                if op_index < ops.len() {
                    let (before, after) = (&states[op_index], &states[op_index + 1]);
                    explorer.check_point(&replay, before, after, &ops[op_index]);
                    if explorer.done() {
                        return;
                    }
                }
                replay.fence(t.thread);
            }
            // The cache-line harness's regions are never synced; the page harness replays
            // syncs itself.
            Event::Sync { .. } => {}
        }
    }
}

/// A small valid store image (the crash harness's set-up state), built once.
pub fn sample_image() -> Vec<u8> {
    static IMAGE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let region = Region::memory(REGION, Persist::detect()).expect("memory region");
            let ptr = region.as_ptr();
            let fs = Fs::new(Store::format(region, mover(), Owner::current()).expect("format"));
            setup(&fs);
            fs.symlink("/a", "/s").expect("setup symlink");
            // SAFETY: the region is REGION bytes, mapped while `fs` lives, written by no one now.
            let img = unsafe { std::slice::from_raw_parts(ptr, REGION as usize) }.to_vec();
            drop(fs);
            img
        })
        .clone()
}

/// Feeds untrusted bytes to fsck and mount, for the fuzzer and the bad-input tests. `data` is
/// read as patches over [`sample_image`] (4-byte offset, then a byte) and, separately, as the
/// start of a raw image. Whatever the bytes, this must return without panicking.
pub fn probe_image(data: &[u8]) {
    let mut img = sample_image();
    for p in data.chunks_exact(5) {
        let off = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize % img.len();
        // Bias towards the metadata at the front of the image.
        let off = if p[0] & 1 == 0 { off % (64 << 10) } else { off };
        img[off] = p[4];
    }
    try_image(&img);
    let mut raw = vec![0u8; REGION as usize];
    let n = data.len().min(raw.len());
    raw[..n].copy_from_slice(&data[..n]);
    try_image(&raw);
}

fn try_image(img: &[u8]) {
    let _ = fsck::check(img);
    let Ok(region) = Region::memory(img.len() as u64, Persist::detect()) else {
        return;
    };
    // SAFETY: a fresh private mapping of img.len() bytes that nothing else references.
    unsafe { std::ptr::copy_nonoverlapping(img.as_ptr(), region.as_mut_ptr(), img.len()) };
    if let Ok(store) = Store::mount(region, mover()) {
        let fs = Fs::new(store);
        let _ = state(&fs);
        let _ = fs.unmount();
    }
}
