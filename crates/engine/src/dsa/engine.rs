//! [`DsaEngine`]: the [`Engine`] contract over DSA work queues, one channel per queue.
//!
//! Each channel has the contract's bounded submission queue (the same ring as the `threads`
//! engine) and a **completion thread** that moves batches from the ring to the work queue and
//! watches their completion records. The thread:
//!
//! 1. starts queued batches in order while the queue has credits (descriptors outstanding
//!    below the queue's size: a dedicated queue drops what overflows it without telling), cuts
//!    each into chunks (`chunk.rs`) and submits one chunk per batch at a time through the
//!    channel's [`Portal`], retrying a shared queue that reports itself full; it takes the
//!    next batch from the ring only once the previous one reached the queue, so while a shared
//!    queue is full the batches wait in the ring (cancellable, and filling it: back-pressure);
//! 2. polls the records of the chunks in flight (a bounded spin with a pause, then between
//!    looks a doze on the oldest chunk's record: `UMWAIT` where the CPU has `waitpkg`, which
//!    no host here has, else a yield of its core; see [`crate::dsa::wait`]), and submits the
//!    next chunk of a batch whose chunk succeeded;
//! 3. publishes finished batches **in queue order**: the durable record if the batch names one,
//!    the channel's [`CompletionRecord`], then the batch's completion (completion rules 3 and
//!    5), exactly as the `threads` worker does. A page fault is [`crate::Status::Partial`]
//!    with the bytes before the fault done: the submitter (the mover) finishes the rest on
//!    the CPU, as the contract allows;
//! 4. parks when nothing is queued or in flight (a submission wakes it), so an idle engine
//!    costs no CPU.
//!
//! Unlike a `threads` worker, which runs a channel's batches strictly one after another,
//! several batches of a channel may be on the device at once (as many as the queue has
//! entries), and the device may run them concurrently on its engines. They still *finish* in
//! queue order (the channel's record and the batches' completions are published in order), and
//! the descriptors of one batch keep the contract's order (its chunks run one after another,
//! its fences hold). A submitter whose batch reads what an earlier batch wrote waits for that
//! batch's completion first.
//!
//! Batches are closed to helpers ([`crate::Probe::help`]): DSA executes a batch without asking
//! which descriptors a helper took.
//!
//! **Budgets** ([`Engine::set_budget`]): a budget pauses a channel *between descriptors*, and
//! the device runs a submitted chunk to its end without pausing, so a budgeted channel submits
//! chunks of one piece (at most one contract descriptor, at most the queue's maximum transfer)
//! and meters each before submitting it with the `threads` engine's meter
//! ([`crate::budget`]). While the epoch's budget is spent the completion thread keeps polling
//! what is in flight, submits nothing more, and sleeps to the next epoch when nothing is in
//! flight; the ring keeps accepting. So a channel overshoots an epoch's budget by less than
//! one piece, as the `threads` engine does by less than one descriptor. (A queue's share of
//! the device can also be set in hardware, with `accel-config`: its group's engines and read
//! buffers, its priority.)
//!
//! The completion thread runs on an application core while batches are in flight (a spin of
//! a few hundred looks at the records, then a doze or a yield between looks), and never while the
//! engine is idle; [`EngineInfo::uses_cpu_cores`] is `false` because the copying itself is
//! the device's. Dropping the engine waits for every batch in flight and queued: a device that
//! never writes a record (a dedicated queue that dropped a descriptor, which the credits
//! prevent) or a shared queue that stays full would make the drop wait for ever.

use std::collections::VecDeque;
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use switchyard_media::Persist;

use crate::budget::{Budget, BudgetCell, Meter};
use crate::completion::{CompletionRecord, RecordSnapshot, Status};
use crate::descriptor::Batch;
use crate::dsa::chunk::{pieces, Chunk, Piece};
use crate::dsa::descriptor::opcode;
use crate::dsa::portal::{Instr, MappedPortal, Portal, Refused, WritePortal};
use crate::dsa::sysfs::{Mode, WorkQueue};
use crate::dsa::wait;
use crate::ring::Ring;
use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering};
use crate::wake::Wake;
use crate::{clock, Engine, EngineInfo, Pauses, SubmitError};

/// Configuration of a [`DsaEngine`].
#[derive(Debug, Clone)]
pub struct DsaConfig {
    /// Capacity of each channel's submission queue, in batches.
    pub queue_depth: usize,
    /// Largest descriptor the mover should build (capped at the queues' maximum transfer).
    pub descriptor_bytes: usize,
    /// How long an idle completion thread spins before it parks.
    pub spin: Duration,
    /// Kernels for durable completion records.
    pub persist: Persist,
}

impl Default for DsaConfig {
    fn default() -> Self {
        DsaConfig {
            queue_depth: 64,
            descriptor_bytes: 1 << 20,
            spin: Duration::from_micros(50),
            persist: Persist::detect(),
        }
    }
}

/// Counters of one channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DsaStats {
    /// Submissions a full shared queue refused (each retried).
    pub retries: u64,
    /// Hardware submissions made (work or batch descriptors).
    pub submissions: u64,
    /// Most submissions outstanding at once (never above the queue's size).
    pub max_in_flight: u64,
}

struct Channel {
    ring: Ring<Batch>,
    record: CompletionRecord,
    wake: Wake,
    suspended: AtomicBool,
    shutdown: AtomicBool,
    worker: OnceLock<std::thread::Thread>,
    queue: WorkQueue,
    portal: Box<dyn Portal>,
    retries: AtomicU64,
    submissions: AtomicU64,
    max_in_flight: AtomicU64,
    budget: BudgetCell,
    paused_epochs: AtomicU64,
    paused_ns: AtomicU64,
}

impl Channel {
    fn kick(&self) {
        if self.wake.notify() {
            if let Some(t) = self.worker.get() {
                t.unpark();
            }
        }
    }
}

/// DSA work queues as the contract's channels (see the module docs).
pub struct DsaEngine {
    channels: Vec<Arc<Channel>>,
    workers: Vec<JoinHandle<()>>,
    config: DsaConfig,
}

impl DsaEngine {
    /// Opens the portals of `queues` (from [`crate::dsa::discover`]): a dedicated queue's
    /// mapped portal with `MOVDIR64B`, a shared queue's with `ENQCMD`, either through
    /// `write(2)` where the CPU lacks the instruction. Fails if a queue's device lacks an
    /// operation the contract needs (batch, memmove, fill, compare, cache flush) or a portal
    /// cannot be opened. Not exercised against a device here.
    pub fn open(queues: &[WorkQueue], config: DsaConfig) -> std::io::Result<DsaEngine> {
        let mut with = Vec::new();
        for q in queues {
            with.push((q.clone(), DsaEngine::portal(q)?));
        }
        DsaEngine::start(with, config)
    }

    /// The portal [`DsaEngine::open`] uses for `q`, after checking that its device runs every
    /// operation the contract needs.
    pub fn portal(q: &WorkQueue) -> std::io::Result<Box<dyn Portal>> {
        let needed = [
            (opcode::BATCH, "batch"),
            (opcode::MEMMOVE, "memmove"),
            (opcode::MEMFILL, "memfill"),
            (opcode::COMPARE, "compare"),
            (opcode::CFLUSH, "cache flush"),
        ];
        if let Some((_, what)) = needed.iter().find(|(op, _)| !q.supports(*op)) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!("{} ({}) cannot run {what}", q.name, q.device),
            ));
        }
        let instr = match q.mode {
            Mode::Dedicated => Instr::Movdir64b,
            Mode::Shared => Instr::Enqcmd,
        };
        Ok(match MappedPortal::open(&q.dev_path, instr) {
            Ok(p) => Box::new(p),
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                Box::new(WritePortal::open(&q.dev_path)?)
            }
            Err(e) => return Err(e),
        })
    }

    /// Starts one channel per (queue, portal): the queue's limits, and the portal its
    /// descriptors go through (a real one from [`DsaEngine::open`], or a device model's).
    pub fn start(
        queues: Vec<(WorkQueue, Box<dyn Portal>)>,
        config: DsaConfig,
    ) -> std::io::Result<DsaEngine> {
        if queues.is_empty() || config.queue_depth == 0 || config.descriptor_bytes == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "dsa engine: queues, queue_depth and descriptor_bytes must be at least 1",
            ));
        }
        let (mut channels, mut workers) = (Vec::new(), Vec::new());
        for (i, (queue, portal)) in queues.into_iter().enumerate() {
            let ch = Arc::new(Channel {
                ring: Ring::new(config.queue_depth),
                record: CompletionRecord::default(),
                wake: Wake::new(),
                suspended: AtomicBool::new(false),
                shutdown: AtomicBool::new(false),
                worker: OnceLock::new(),
                queue,
                portal,
                retries: AtomicU64::new(0),
                submissions: AtomicU64::new(0),
                max_in_flight: AtomicU64::new(0),
                budget: BudgetCell::default(),
                paused_epochs: AtomicU64::new(0),
                paused_ns: AtomicU64::new(0),
            });
            let (c, cfg) = (ch.clone(), config.clone());
            let handle = std::thread::Builder::new()
                .name(format!("switchyard-dsa{i}"))
                .spawn(move || run(&c, &cfg))?;
            let _ = ch.worker.set(handle.thread().clone());
            channels.push(ch);
            workers.push(handle);
        }
        Ok(DsaEngine {
            channels,
            workers,
            config,
        })
    }

    /// Channel `channel`'s counters.
    pub fn stats(&self, channel: usize) -> DsaStats {
        let ch = &self.channels[channel];
        DsaStats {
            retries: ch.retries.load(Ordering::Relaxed),
            submissions: ch.submissions.load(Ordering::Relaxed),
            max_in_flight: ch.max_in_flight.load(Ordering::Relaxed),
        }
    }
}

impl Engine for DsaEngine {
    fn info(&self) -> EngineInfo {
        let max = self
            .channels
            .iter()
            .map(|c| c.queue.max_transfer_size)
            .min()
            .unwrap_or(0);
        EngineInfo {
            name: "dsa",
            channels: self.channels.len(),
            queue_depth: self.config.queue_depth,
            descriptor_bytes: (self.config.descriptor_bytes as u64).min(max).max(1) as usize,
            uses_cpu_cores: false,
        }
    }

    unsafe fn try_submit(&self, channel: usize, batch: Batch) -> Result<u64, SubmitError> {
        let Some(ch) = self.channels.get(channel) else {
            return Err(SubmitError::NoSuchChannel(batch));
        };
        if ch.suspended.load(Ordering::Acquire) {
            return Err(SubmitError::Suspended(batch));
        }
        let batch = batch.closed_to_helpers();
        match ch.ring.push(batch) {
            Ok(pos) => {
                ch.kick();
                Ok(pos)
            }
            Err(b) => Err(SubmitError::Full(b)),
        }
    }

    fn queue_depth(&self, channel: usize) -> usize {
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
        let ch = &self.channels[channel];
        ch.budget.set(budget);
        ch.kick();
        true
    }

    fn renew_budget(&self, channel: usize, lapses_ns: u64) {
        self.channels[channel].budget.renew(lapses_ns);
    }

    fn budget(&self, channel: usize) -> Option<Budget> {
        self.channels[channel].budget.get()
    }

    fn pauses(&self, channel: usize) -> Pauses {
        let ch = &self.channels[channel];
        Pauses {
            epochs: ch.paused_epochs.load(Ordering::Relaxed),
            ns: ch.paused_ns.load(Ordering::Relaxed),
        }
    }
}

/// A channel's budget between chunks (see the module docs).
#[derive(Default)]
struct Pacer {
    meter: Meter,
    /// While paused: since when, and the epoch boundary that ends the pause.
    paused: Option<(u64, u64)>,
}

impl Pacer {
    /// Pieces a chunk may hold: one under a budget, so the meter sees every piece.
    fn max_pieces(&self, ch: &Channel) -> usize {
        if ch.budget.get().is_some() {
            1
        } else {
            ch.queue.max_batch_size.max(1) as usize
        }
    }

    /// Whether a chunk of `len` bytes may be submitted now (it is then charged to the epoch).
    fn admit(&mut self, ch: &Channel, len: u64) -> bool {
        let now = clock::now_ns();
        let verdict = match ch.budget.get() {
            Some(b) if !b.lapsed(now) => self.meter.admit(b, len, now),
            _ => Ok(()),
        };
        match verdict {
            Ok(()) => {
                if let Some((since, _)) = self.paused.take() {
                    ch.paused_ns.fetch_add(now - since, Ordering::Relaxed);
                }
                true
            }
            Err(until) => {
                let since = self.paused.map_or(now, |(since, _)| since);
                self.paused = Some((since, until));
                ch.paused_epochs
                    .store(self.meter.paused_epochs, Ordering::Relaxed);
                false
            }
        }
    }

    /// Nothing in flight and the budget spent: sleeps towards the epoch's end (at most 1 ms at
    /// a time, so a lifted budget, a suspension or shutdown is seen soon).
    fn rest(&self) {
        let Some((_, until)) = self.paused else {
            return std::thread::yield_now();
        };
        let left = until.saturating_sub(clock::now_ns()).min(1_000_000);
        if left > 0 {
            std::thread::sleep(Duration::from_nanos(left));
        }
    }
}

impl Drop for DsaEngine {
    fn drop(&mut self) {
        // The threads finish what is queued and in flight first: the device may still write
        // into the chunks' records, which they own.
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

/// A batch the completion thread has taken from the ring.
struct Running {
    batch: Batch,
    position: u64,
    pieces: Vec<Piece>,
    /// The next piece to submit.
    next: usize,
    chunk: Option<Chunk>,
    /// The next chunk, built and refused by a full queue: retried as it is.
    refused: Option<Chunk>,
    done: u64,
    /// How it ended, once it has.
    ended: Option<(Status, u64)>,
}

impl Running {
    /// Claims `batch` (completion rule 1) and cuts what the engine runs into pieces.
    fn start(batch: Batch, position: u64, max_transfer: u64) -> Running {
        let mut r = Running {
            batch,
            position,
            pieces: Vec::new(),
            next: 0,
            chunk: None,
            refused: None,
            done: 0,
            ended: None,
        };
        let c = &r.batch.completion;
        if !c.begin(clock::now_ns()) {
            r.ended = Some((Status::Cancelled, 0));
            return r;
        }
        // Helpers are kept out since submission; any that entered before took descriptors
        // from the back: the engine runs the front they left (completion rules 6 and 7).
        let mut front = 0;
        while c.claim_front().is_some() {
            front += 1;
        }
        c.close();
        r.pieces = pieces(r.batch.descriptors(), front, max_transfer);
        if r.pieces.is_empty() {
            r.ended = Some((Status::Success, r.batch.len() as u64));
        }
        r
    }

    /// Submits the next chunk if none is in flight and the budget admits it; true if it did.
    fn submit_next(&mut self, ch: &Channel, pacer: &mut Pacer) -> bool {
        if self.ended.is_some() || self.chunk.is_some() {
            return false;
        }
        let chunk = match self.refused.take() {
            Some(c) => c,
            None => {
                let end = (self.next + pacer.max_pieces(ch)).min(self.pieces.len());
                let pieces = self.pieces[self.next..end].to_vec();
                let len = pieces.iter().map(|p| u64::from(p.len)).sum();
                if !pacer.admit(ch, len) {
                    return false;
                }
                Chunk::new(&self.batch, pieces)
            }
        };
        let end = self.next + chunk.pieces.len();
        // SAFETY: the chunk's descriptors and records live in `self.chunk` until its final
        // record is written (we never drop a chunk in flight: see `DsaEngine::drop`); the
        // buffers they name are valid until the batch's outcome is published
        // (`Engine::try_submit`'s contract).
        match unsafe { ch.portal.submit(&chunk.submission()) } {
            Ok(()) => {
                ch.submissions.fetch_add(1, Ordering::Relaxed);
                self.next = end;
                self.chunk = Some(chunk);
                true
            }
            Err(Refused::Full) => {
                ch.retries.fetch_add(1, Ordering::Relaxed);
                self.refused = Some(chunk);
                false
            }
            Err(Refused::Failed) => {
                self.ended = Some((Status::Error, self.done));
                false
            }
        }
    }

    /// Takes the chunk in flight if the device finished it; true if it did.
    fn poll(&mut self) -> bool {
        let Some(chunk) = self.chunk.as_ref().filter(|c| c.finished()) else {
            return false;
        };
        let (status, bytes) = chunk.outcome();
        self.chunk = None;
        self.done += bytes;
        if status != Status::Success {
            self.ended = Some((status, self.done));
        } else if self.next == self.pieces.len() {
            // Success covers what helpers did before the batch was closed to them.
            self.ended = Some((Status::Success, self.batch.len() as u64));
        }
        true
    }
}

/// Publishes a finished batch as the `threads` worker does: durable record, channel record,
/// then the batch's completion (completion rules 3 and 5).
fn publish(ch: &Channel, cfg: &DsaConfig, r: Running) {
    let (status, bytes) = r.ended.expect("published batches have ended");
    if let Some(d) = &r.batch.durable {
        d.finished(&cfg.persist, r.position, status);
    }
    ch.record.advance(status, bytes);
    if status != Status::Cancelled {
        r.batch.completion.finish(status, bytes, clock::now_ns());
    }
}

fn run(ch: &Channel, cfg: &DsaConfig) {
    let credits = (ch.queue.size as usize).max(1);
    let mut open: VecDeque<Running> = VecDeque::new();
    let mut quiet = 0u32;
    let mut pacer = Pacer::default();
    loop {
        ch.wake.awake();
        let mut progress = false;
        for r in open.iter_mut() {
            progress |= r.poll();
        }
        while open.front().is_some_and(|r| r.ended.is_some()) {
            publish(ch, cfg, open.pop_front().expect("front"));
            progress = true;
        }
        let mut in_flight = open.iter().filter(|r| r.chunk.is_some()).count();
        for r in open.iter_mut() {
            if in_flight >= credits {
                break;
            }
            if r.submit_next(ch, &mut pacer) {
                in_flight += 1;
                progress = true;
            }
        }
        // A batch leaves the ring only once every batch taken before it reached the queue: a
        // full shared queue keeps the rest in the ring, where they can still be cancelled and
        // where they fill it, so submitters see `Full`.
        while in_flight < credits
            && !ch.suspended.load(Ordering::Acquire)
            && open.iter().all(|r| r.next > 0 || r.ended.is_some())
        {
            let Some((position, batch)) = ch.ring.pop() else {
                break;
            };
            let mut r = Running::start(batch, position, ch.queue.max_transfer_size);
            if r.submit_next(ch, &mut pacer) {
                in_flight += 1;
            }
            open.push_back(r);
            progress = true;
        }
        ch.max_in_flight
            .fetch_max(in_flight as u64, Ordering::Relaxed);
        if !open.is_empty() {
            // Work in flight: a bounded spin on the records, then a doze on the oldest chunk's
            // record (UMWAIT where the CPU has waitpkg, else a yield of the core) between looks.
            quiet = if progress { 0 } else { quiet + 1 };
            if quiet < 256 {
                std::hint::spin_loop();
            } else if let Some(c) = open.iter().find_map(|r| r.chunk.as_ref()) {
                wait::doze(&c.final_record().status);
            } else {
                pacer.rest();
            }
            continue;
        }
        if ch.shutdown.load(Ordering::Acquire) && ch.ring.is_empty() {
            return;
        }
        if !progress {
            idle(ch, cfg);
        }
    }
}

/// Nothing queued or in flight: spins for `cfg.spin` watching the ring, then parks.
fn idle(ch: &Channel, cfg: &DsaConfig) {
    let ready = || {
        (!ch.ring.is_empty() && !ch.suspended.load(Ordering::Relaxed))
            || ch.shutdown.load(Ordering::Relaxed)
    };
    let began = Instant::now();
    while began.elapsed() < cfg.spin {
        for _ in 0..64 {
            if ready() {
                return;
            }
            std::hint::spin_loop();
        }
    }
    if ch.wake.sleep() {
        std::thread::park();
    }
}
