//! The `threads` engine: each channel is a worker thread that executes batches with the
//! media copy kernels. The default engine everywhere, and the reference for the contract's
//! semantics that hardware engines must match.
//!
//! A worker drains its ring, yields its core once if a batch that asked
//! ([`Batch::waited_for_beside`]) came from a caller on that core (preempted while it waited
//! for the batch just finished, it runs now and not after the spin), then spins for [`ThreadsConfig::spin`] watching for more work (so back-to-back
//! requests do not pay a wake-up), then lingers for [`ThreadsConfig::linger`]
//! polling between `sched_yield`s (still quick to pick up work, but any runnable thread on its
//! core goes first), then parks: an idle engine costs no CPU.
//!
//! The linger exists because waking a parked thread costs 50–100 µs on a virtual machine whose
//! idle vCPU has halted. A client whose requests are spaced wider than the spin (a 1 MiB split
//! read every ~80 µs) would otherwise find the worker asleep every time, and the mover would take
//! back every share the worker had not started — measured as a split that silently stops
//! paying off.

use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use switchyard_media::Persist;

use crate::budget::{self, Budget, BudgetCell, Meter};
use crate::completion::{CompletionRecord, RecordSnapshot, Status};
use crate::cpus;
use crate::descriptor::{Batch, Flags};
#[cfg(feature = "testing")]
use crate::fault::{Fault, FaultPlan};
use crate::ring::Ring;
use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering};
use crate::wake::Wake;
use crate::{clock, Engine, EngineInfo, Pauses, SubmitError};

/// Configuration of a [`ThreadsEngine`].
#[derive(Debug, Clone)]
pub struct ThreadsConfig {
    /// Number of channels (worker threads).
    pub channels: usize,
    /// Capacity of each channel's submission queue, in batches.
    pub queue_depth: usize,
    /// How long an idle worker busy-spins before it lingers.
    pub spin: Duration,
    /// How long it then polls between yields of its core before it parks.
    pub linger: Duration,
    /// Pin worker `i` to the `i`-th allowed CPU from the last (`cpus::worker_cpu`) where the
    /// OS allows.
    pub pin: bool,
    /// Largest descriptor the mover should build, in bytes (the granule at which a batch can
    /// stop early).
    pub descriptor_bytes: usize,
    /// Kernels the workers use.
    pub persist: Persist,
    /// Injected faults (tests; only with the `testing` feature, so that a product build checks
    /// no plan on its hot path).
    #[cfg(feature = "testing")]
    pub faults: FaultPlan,
}

impl Default for ThreadsConfig {
    fn default() -> Self {
        ThreadsConfig {
            channels: 1,
            queue_depth: 64,
            spin: Duration::from_micros(50),
            linger: Duration::from_millis(1),
            pin: true,
            descriptor_bytes: 64 << 10,
            persist: Persist::detect(),
            #[cfg(feature = "testing")]
            faults: FaultPlan::default(),
        }
    }
}

struct Channel {
    ring: Ring<Batch>,
    record: CompletionRecord,
    wake: Wake,
    budget: BudgetCell,
    paused_epochs: AtomicU64,
    paused_ns: AtomicU64,
    suspended: AtomicBool,
    shutdown: AtomicBool,
    busy_ns: AtomicU64,
    worker: OnceLock<std::thread::Thread>,
    /// The CPU the worker is pinned to (`None`: not pinned).
    cpu: Option<usize>,
    /// A batch that asked ([`Batch::waited_for_beside`]) was submitted from the worker's own
    /// CPU since the worker last looked.
    submitted_beside: AtomicBool,
}

impl Channel {
    fn kick(&self) {
        if self.wake.notify() {
            if let Some(t) = self.worker.get() {
                t.unpark();
            }
        }
    }

    /// Before a descriptor of `len` bytes: returns at once without a budget or while the
    /// epoch's budget lasts; otherwise pauses until an epoch admits it (the budget is read
    /// again after each pause, so a raised or lifted one takes effect at the next boundary),
    /// or until shutdown. Submissions keep arriving in the ring meanwhile.
    fn pace(&self, meter: &mut Meter, len: u64) {
        let mut paused = false;
        budget::pace(&self.budget, meter, len, &clock::now_ns, &mut |until| {
            if self.shutdown.load(Ordering::Acquire) {
                return false;
            }
            paused = true;
            let began = clock::now_ns();
            pause_until(until);
            self.paused_ns
                .fetch_add(clock::now_ns() - began, Ordering::Relaxed);
            true
        });
        if paused {
            self.paused_epochs
                .store(meter.paused_epochs, Ordering::Relaxed);
        }
    }
}

/// Waits until the engine clock reads `until_ns`: sleeping while more than [`SLEEP_OVER`]
/// remains (the worker's timer slack is set to 1 ns, so a sleep ends on time), then yielding.
fn pause_until(until_ns: u64) {
    loop {
        let now = clock::now_ns();
        if now >= until_ns {
            return;
        }
        let left = until_ns - now;
        if left > SLEEP_OVER {
            std::thread::sleep(Duration::from_nanos(left - SLEEP_OVER));
        } else {
            std::thread::yield_now();
        }
    }
}

/// A pause longer than this sleeps for all but this much, and yields for the rest: a sleep
/// wakes 50–100 µs late on a virtual machine whose idle vCPU halted.
const SLEEP_OVER: u64 = 60_000;

/// Worker threads as DMA channels.
pub struct ThreadsEngine {
    channels: Vec<Arc<Channel>>,
    workers: Vec<JoinHandle<()>>,
    config: ThreadsConfig,
}

impl ThreadsEngine {
    /// Starts one worker per channel.
    pub fn start(config: ThreadsConfig) -> std::io::Result<ThreadsEngine> {
        if config.channels == 0 || config.queue_depth == 0 || config.descriptor_bytes == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "threads engine: channels, queue_depth and descriptor_bytes must be at least 1",
            ));
        }
        let mut channels = Vec::new();
        let mut workers = Vec::new();
        let allowed = cpus::allowed();
        for i in 0..config.channels {
            let ch = Arc::new(Channel {
                ring: Ring::new(config.queue_depth),
                record: CompletionRecord::default(),
                wake: Wake::new(),
                budget: BudgetCell::default(),
                paused_epochs: AtomicU64::new(0),
                paused_ns: AtomicU64::new(0),
                suspended: AtomicBool::new(false),
                shutdown: AtomicBool::new(false),
                busy_ns: AtomicU64::new(0),
                worker: OnceLock::new(),
                cpu: config.pin.then(|| cpus::worker_cpu(&allowed, i)).flatten(),
                submitted_beside: AtomicBool::new(false),
            });
            let (c, cfg) = (ch.clone(), config.clone());
            let handle = std::thread::Builder::new()
                .name(format!("switchyard-ch{i}"))
                .spawn(move || {
                    if let Some(cpu) = c.cpu {
                        cpus::pin_current(&[cpu]);
                    }
                    // SAFETY: PR_SET_TIMERSLACK only changes how late this thread's timed
                    // sleeps may end (1 ns: a budget pause ends on its epoch boundary).
                    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
                    run(&c, &cfg);
                })?;
            let _ = ch.worker.set(handle.thread().clone());
            channels.push(ch);
            workers.push(handle);
        }
        Ok(ThreadsEngine {
            channels,
            workers,
            config,
        })
    }

    /// Nanoseconds channel `ch`'s worker has spent executing batches.
    pub fn busy_ns(&self, ch: usize) -> u64 {
        self.channels[ch].busy_ns.load(Ordering::Relaxed)
    }
}

impl Engine for ThreadsEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            name: "threads",
            channels: self.channels.len(),
            queue_depth: self.config.queue_depth,
            descriptor_bytes: self.config.descriptor_bytes,
            uses_cpu_cores: true,
        }
    }

    unsafe fn try_submit(&self, channel: usize, batch: Batch) -> Result<u64, SubmitError> {
        let Some(ch) = self.channels.get(channel) else {
            return Err(SubmitError::NoSuchChannel(batch));
        };
        if ch.suspended.load(Ordering::Acquire) {
            return Err(SubmitError::Suspended(batch));
        }
        let beside = batch.note_core && ch.cpu.is_some() && ch.cpu == cpus::current();
        match ch.ring.push(batch) {
            Ok(pos) => {
                if beside {
                    ch.submitted_beside.store(true, Ordering::Relaxed);
                }
                ch.kick();
                Ok(pos)
            }
            Err(b) => Err(SubmitError::Full(b)),
        }
    }

    fn queue_depth(&self, channel: usize) -> usize {
        // Submitted (queued or executing) and not yet finished: positions pushed minus the
        // channel's sequence number. The seq is read first so the difference never underflows.
        let ch = &self.channels[channel];
        let finished = ch.record.seq();
        ch.ring.pushed().saturating_sub(finished) as usize
    }

    fn record(&self, channel: usize) -> RecordSnapshot {
        self.channels[channel].record.snapshot()
    }

    fn suspend(&self, channel: usize) {
        self.channels[channel]
            .suspended
            .store(true, Ordering::Release);
    }

    fn resume(&self, channel: usize) {
        let ch = &self.channels[channel];
        ch.suspended.store(false, Ordering::Release);
        ch.kick();
    }

    fn is_suspended(&self, channel: usize) -> bool {
        self.channels[channel].suspended.load(Ordering::Acquire)
    }

    fn set_budget(&self, channel: usize, budget: Option<Budget>) -> bool {
        self.channels[channel].budget.set(budget);
        true
    }

    fn renew_budget(&self, channel: usize, lapses_ns: u64) {
        self.channels[channel].budget.renew(lapses_ns);
    }

    fn budget(&self, channel: usize) -> Option<Budget> {
        self.channels[channel].budget.get()
    }

    fn worker_cpu(&self, channel: usize) -> Option<usize> {
        self.channels[channel].cpu
    }

    fn pauses(&self, channel: usize) -> Pauses {
        let ch = &self.channels[channel];
        Pauses {
            epochs: ch.paused_epochs.load(Ordering::Relaxed),
            ns: ch.paused_ns.load(Ordering::Relaxed),
        }
    }
}

impl Drop for ThreadsEngine {
    fn drop(&mut self) {
        for ch in &self.channels {
            ch.shutdown.store(true, Ordering::Release);
            ch.suspended.store(false, Ordering::Release);
            ch.kick();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn run(ch: &Channel, cfg: &ThreadsConfig) {
    let mut executed = 0u64;
    let mut meter = Meter::default();
    loop {
        ch.wake.awake();
        let mut ran = false;
        while !ch.suspended.load(Ordering::Acquire) {
            let Some((position, batch)) = ch.ring.pop() else {
                break;
            };
            executed += 1;
            ran = true;
            process(ch, cfg, batch, position, executed, &mut meter);
        }
        if ch.shutdown.load(Ordering::Acquire) && ch.ring.is_empty() {
            return;
        }
        if ran && ch.submitted_beside.swap(false, Ordering::Relaxed) {
            // A caller on this very core submitted: before the idle spin, the core goes to
            // whoever else wants it. That caller, preempted while it waited for the batch
            // just finished, otherwise waited through the spin (64 KiB latency copies took
            // 60 µs instead of 3). Only then, and only for batches that asked
            // (`Batch::waited_for_beside`): a yield after every batch cost bench copy 5%, and
            // a `sched_getcpu` at every submission 3%.
            std::thread::yield_now();
        }
        let ready = || {
            (!ch.ring.is_empty() && !ch.suspended.load(Ordering::Relaxed))
                || ch.shutdown.load(Ordering::Relaxed)
        };
        let idle = Instant::now();
        let mut found = false;
        // One pause between looks: a pause costs tens of nanoseconds (more on a virtual
        // machine), and work that arrives between two looks waits for the next one. The clock
        // is read once per 64 looks.
        'spin: while idle.elapsed() < cfg.spin {
            for _ in 0..64 {
                found = ready();
                if found {
                    break 'spin;
                }
                std::hint::spin_loop();
            }
        }
        while !found && idle.elapsed() < cfg.spin + cfg.linger {
            found = ready();
            std::thread::yield_now();
        }
        if !found && ch.wake.sleep() {
            std::thread::park();
        }
    }
}

fn process(
    ch: &Channel,
    cfg: &ThreadsConfig,
    batch: Batch,
    position: u64,
    n: u64,
    meter: &mut Meter,
) {
    let total = batch.len() as u64;
    if !batch.completion.begin(clock::now_ns()) {
        if let Some(r) = &batch.durable {
            r.finished(&cfg.persist, position, Status::Cancelled);
        }
        ch.record.advance(Status::Cancelled, 0);
        return;
    }
    #[cfg(feature = "testing")]
    if !cfg.faults.delay.is_zero() {
        std::thread::sleep(cfg.faults.delay);
    }
    let started = Instant::now();
    let paused_before = ch.paused_ns.load(Ordering::Relaxed);
    let stop = injected(cfg, n, total);
    let (status, bytes) = execute(&cfg.persist, &batch, stop, &mut |len| ch.pace(meter, len));
    // Busy: executing, not paused for the budget.
    let paused = ch.paused_ns.load(Ordering::Relaxed) - paused_before;
    ch.busy_ns.fetch_add(
        (started.elapsed().as_nanos() as u64).saturating_sub(paused),
        Ordering::Relaxed,
    );
    // The durable record first: once anyone can see the batch finished, a crash can no longer
    // lose that fact.
    if let Some(r) = &batch.durable {
        r.finished(&cfg.persist, position, status);
    }
    // Channel record next: a submitter that sees its batch done may rely on the channel's seq
    // already covering it (completion rule 5).
    ch.record.advance(status, bytes);
    batch.completion.finish(status, bytes, clock::now_ns());
}

/// Where the fault plan stops the `n`-th batch (from 1) of `total` bytes: the byte count and
/// the status it ends with, or `None` to run it whole.
#[cfg(feature = "testing")]
fn injected(cfg: &ThreadsConfig, n: u64, total: u64) -> Option<(u64, Status)> {
    match cfg.faults.fault_for(n, total) {
        Fault::None => None,
        Fault::Partial(cut) => Some((cut, Status::Partial)),
        Fault::Error(cut) => Some((cut, Status::Error)),
    }
}

/// Without the `testing` feature there is no fault plan: every batch runs whole.
#[cfg(not(feature = "testing"))]
fn injected(_: &ThreadsConfig, _: u64, _: u64) -> Option<(u64, Status)> {
    None
}

/// Runs the batch's descriptors in order from the front, as long as helpers have not claimed
/// them from the back ([`crate::Probe::help`]), stopping at `stop` (byte count, status) if
/// given; then waits for the helpers, so the result covers their bytes too. `pace` is told
/// each descriptor's length before it runs, and returns when it may (the channel's budget).
fn execute(
    p: &Persist,
    batch: &Batch,
    stop: Option<(u64, Status)>,
    pace: &mut dyn FnMut(u64),
) -> (Status, u64) {
    let c = &batch.completion;
    let mut done = 0u64;
    let result = loop {
        let Some(i) = c.claim_front() else {
            // Helpers took the rest: once they leave, every descriptor is done.
            break (Status::Success, batch.len() as u64);
        };
        let d = &c.descriptors[i];
        let mut len = d.len;
        if let Some((cut, status)) = stop {
            if done >= cut {
                break (status, done);
            }
            len = len.min((cut - done) as usize);
        }
        pace(len as u64);
        if d.flags.contains(Flags::FENCE) {
            p.fence();
        }
        // SAFETY: the submitter of the batch guaranteed (Engine::try_submit's contract) that
        // every descriptor's buffers are valid for `d.len >= len` bytes, non-overlapping and
        // not accessed by others until the completion is published; descriptor `i` is claimed
        // by this worker alone (completion rule 6).
        if let Some(off) = unsafe { d.execute(p, len) } {
            break (Status::Mismatch, done + off as u64);
        }
        done += len as u64;
        if let Some((cut, status)) = stop {
            if done >= cut && cut < batch.len() as u64 {
                break (status, done);
            }
        }
    };
    c.close();
    result
}
