//! Completion: how a submitter learns what happened to its batch.
//!
//! Two records, as on DSA:
//!
//! - a **per-batch [`Completion`]**, which the submitter owns through its [`Ticket`] (DSA's
//!   completion-record address in the descriptor): state, status, `bytes_completed`, and
//!   when the worker started and finished;
//! - a **per-channel [`CompletionRecord`]**: the channel's sequence number (count of batches
//!   finished, in queue order), with the status and bytes of the latest one. Readers get a
//!   consistent triple through a seqlock.
//!
//! ## Per-batch state (numbered rules)
//!
//! `state` holds bits `RUNNING | DONE | CANCELLED | CLAIMED | WAITER`.
//! 1. Only the worker sets `RUNNING` (CAS from "no RUNNING/DONE/CANCELLED") and `DONE`.
//! 2. Only the ticket sets `CANCELLED` (CAS from the same start); afterwards the worker never
//!    touches the batch's buffers, so the submitter owns them again at once.
//! 3. The worker writes status, bytes and times *before* setting `DONE` with Release; the
//!    ticket reads them after observing `DONE` with Acquire.
//! 4. One waiter at most: the ticket (a parked thread) or a probe (a task's waker) claims the
//!    `waiter` cell by setting `CLAIMED` first (only the one whose RMW found it clear goes on),
//!    stores itself in `waiter`, then sets `WAITER` with Release; the worker reads `waiter` only
//!    if its `DONE` RMW observed `WAITER` (AcqRel), then wakes it. `waiter` is written at most
//!    once, so the two never race.
//! 5. The worker advances the channel's [`CompletionRecord`] *before* it sets `DONE`, so a
//!    ticket that observes its batch done also observes the channel's seq past it.
//!
//! ## Helping (numbered rules, continued)
//!
//! A thread waiting for a batch may copy descriptors from the batch's
//! tail while the worker copies from its head, so that the two meet in the middle
//! ([`Probe::help`]). The `claims` word holds the next descriptor from the front (the worker's),
//! the end of the unclaimed range (helpers take `end - 1`), and a `CLOSED` bit.
//! 6. A descriptor is executed by whoever's compare-and-swap on `claims` took it: the worker
//!    only from the front, helpers only from the back, neither once `CLOSED` is set or the
//!    two meet. So each descriptor runs once.
//! 7. A helper counts itself in `helpers` *before* its claim and leaves after its copy (and
//!    after adding its bytes to `helped`). The worker, done claiming, sets `CLOSED` and waits
//!    for `helpers` to drain before it publishes anything: a helper whose claim succeeded did
//!    so before `CLOSED`, so the worker sees it counted. The outcome therefore covers the
//!    helpers' bytes, and once `DONE` is visible no helper touches the buffers again.
//! 8. Queued and running batches are helped, not finished or cancelled ones. A cancel closes
//!    the claims and waits for helpers as the worker does (rule 7), so the submitter owns the
//!    buffers once `try_cancel` returns. Only batches whose descriptors are plain copies or
//!    fills without `FENCE` and that record no durable completion are helped: a fence orders
//!    a descriptor after all earlier ones, and a durable record promises data the worker
//!    itself made durable.

use crate::descriptor::{Descriptor, Flags, Op};
use crate::sync::{park, spin_hint, Arc, AtomicU32, AtomicU64, Ordering, Thread, UnsafeCell};

const RUNNING: u32 = 1;
const DONE: u32 = 2;
const CANCELLED: u32 = 4;
const WAITER: u32 = 8;
const CLAIMED: u32 = 16;

/// `claims`: the worker's next descriptor (bits 0..31), the end of the unclaimed range (bits
/// 32..61), no more claims (bit 63), never helped (bit 62).
const FRONT_MASK: u64 = 0xffff_ffff;
const END_SHIFT: u32 = 32;
const END_MASK: u64 = 0x3fff_ffff;
const CLOSED: u64 = 1 << 63;
const NO_HELP: u64 = 1 << 62;

/// How a batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Status {
    /// Every descriptor completed.
    Success = 1,
    /// Execution stopped early (as on a DSA page fault); the first `bytes_completed` bytes are
    /// done and the rest is the submitter's. Normal, not an error.
    Partial = 2,
    /// The engine failed; the first `bytes_completed` bytes are done.
    Error = 3,
    /// The submitter cancelled the batch before it started; nothing was done.
    Cancelled = 4,
    /// A compare descriptor found a difference at `bytes_completed`.
    Mismatch = 5,
}

impl Status {
    fn from_u32(v: u32) -> Status {
        match v {
            1 => Status::Success,
            2 => Status::Partial,
            3 => Status::Error,
            4 => Status::Cancelled,
            _ => Status::Mismatch,
        }
    }
}

/// The outcome of a finished batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// How it ended.
    pub status: Status,
    /// Bytes done, as a prefix of the batch in descriptor order.
    pub bytes_completed: u64,
    /// When the worker started it, in [`crate::clock`] nanoseconds.
    pub started_ns: u64,
    /// When the worker finished it, in [`crate::clock`] nanoseconds.
    pub finished_ns: u64,
    /// Of `bytes_completed`, those copied by helpers ([`Probe::help`]) rather than the engine.
    pub helped_bytes: u64,
}

/// The per-batch completion record (see the module docs for its rules).
pub struct Completion {
    state: AtomicU32,
    status: AtomicU32,
    bytes: AtomicU64,
    started_ns: AtomicU64,
    finished_ns: AtomicU64,
    waiter: UnsafeCell<Option<Waiter>>,
    /// The batch's descriptors, in execution order.
    pub(crate) descriptors: Vec<Descriptor>,
    /// Who executes which descriptor (rule 6).
    claims: AtomicU64,
    /// Helpers between their claim and the end of their copy (rule 7).
    helpers: AtomicU32,
    /// Bytes helpers copied.
    helped: AtomicU64,
}

/// Who is woken when a batch finishes.
enum Waiter {
    /// A thread parked in [`Ticket::wait`].
    Thread(Thread),
    /// A task that registered through [`Probe::register`].
    Task(std::task::Waker),
}

// SAFETY: `waiter` is written by the ticket only before it publishes WAITER (rule 4) and read by
// the worker only after observing WAITER; all other fields are atomics.
unsafe impl Sync for Completion {}
// SAFETY: as above; `Thread` is Send.
unsafe impl Send for Completion {}

impl Completion {
    pub(crate) fn new(descriptors: Vec<Descriptor>) -> Completion {
        assert!(
            descriptors.len() as u64 <= END_MASK,
            "a batch holds at most {END_MASK} descriptors"
        );
        let helpable = descriptors.iter().all(|d| {
            matches!(d.op, Op::Copy { .. } | Op::Fill { .. }) && !d.flags.contains(Flags::FENCE)
        });
        let end = (descriptors.len() as u64) << END_SHIFT;
        Completion {
            state: AtomicU32::new(0),
            status: AtomicU32::new(0),
            bytes: AtomicU64::new(0),
            started_ns: AtomicU64::new(0),
            finished_ns: AtomicU64::new(0),
            waiter: UnsafeCell::new(None),
            descriptors,
            claims: AtomicU64::new(if helpable { end } else { end | NO_HELP }),
            helpers: AtomicU32::new(0),
            helped: AtomicU64::new(0),
        }
    }

    /// Keeps helpers away from this batch (rule 8). Before submission.
    pub(crate) fn forbid_help(&self) {
        self.claims.fetch_or(NO_HELP, Ordering::Relaxed);
    }

    /// Worker: claims the next descriptor from the front (rule 6); `None` once every
    /// descriptor is claimed.
    pub(crate) fn claim_front(&self) -> Option<usize> {
        let mut c = self.claims.load(Ordering::Acquire);
        loop {
            let front = c & FRONT_MASK;
            if c & CLOSED != 0 || front >= (c >> END_SHIFT) & END_MASK {
                return None;
            }
            match self
                .claims
                .compare_exchange(c, c + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(front as usize),
                Err(cur) => c = cur,
            }
        }
    }

    /// Helper: claims the last unclaimed descriptor (rule 6). The caller counted itself in
    /// `helpers` first (rule 7).
    pub(crate) fn claim_back(&self) -> Option<usize> {
        let mut c = self.claims.load(Ordering::Acquire);
        loop {
            let end = (c >> END_SHIFT) & END_MASK;
            if c & (CLOSED | NO_HELP) != 0 || c & FRONT_MASK >= end {
                return None;
            }
            match self.claims.compare_exchange(
                c,
                c - (1 << END_SHIFT),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(end as usize - 1),
                Err(cur) => c = cur,
            }
        }
    }

    /// Worker: ends claiming and waits for helpers still copying (rule 7). Afterwards every
    /// descriptor a helper claimed is done and counted in `helped`.
    pub(crate) fn close(&self) {
        self.claims.fetch_or(CLOSED, Ordering::SeqCst);
        while self.helpers.load(Ordering::SeqCst) != 0 {
            spin_hint();
        }
    }

    /// Helper: enters (rule 7) if the batch is neither finished nor cancelled and is open to
    /// help (rule 8); the returned guard leaves on drop.
    pub(crate) fn enter_helper(&self) -> Option<HelperGuard<'_>> {
        let s = self.state.load(Ordering::Acquire);
        if s & (DONE | CANCELLED) != 0 {
            return None;
        }
        if self.claims.load(Ordering::Relaxed) & (CLOSED | NO_HELP) != 0 {
            return None;
        }
        self.helpers.fetch_add(1, Ordering::SeqCst);
        Some(HelperGuard(self))
    }

    /// Worker: claims the batch (rule 1). False if it was cancelled.
    pub(crate) fn begin(&self, now_ns: u64) -> bool {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            if s & CANCELLED != 0 {
                return false;
            }
            match self
                .state
                .compare_exchange(s, s | RUNNING, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    self.started_ns.store(now_ns, Ordering::Relaxed);
                    return true;
                }
                Err(cur) => s = cur,
            }
        }
    }

    /// Claims the waiter cell for `w` (rule 4); false if someone else holds it.
    fn claim(&self, w: Waiter) -> bool {
        if self.state.fetch_or(CLAIMED, Ordering::AcqRel) & CLAIMED != 0 {
            return false;
        }
        // SAFETY: rule 4 — we set CLAIMED first, so no one else writes `waiter`, and WAITER is
        // not yet set (we set it just below, once), so the worker does not read it now.
        self.waiter.with_mut(|c| unsafe { *c = Some(w) });
        self.state.fetch_or(WAITER, Ordering::AcqRel);
        true
    }

    /// Worker: publishes the outcome (rule 3) and wakes a parked ticket (rule 4).
    pub(crate) fn finish(&self, status: Status, bytes: u64, now_ns: u64) {
        self.status.store(status as u32, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
        self.finished_ns.store(now_ns, Ordering::Relaxed);
        let prev = self.state.fetch_or(DONE, Ordering::AcqRel);
        if prev & WAITER != 0 {
            // SAFETY: rule 4 — WAITER was observed, so the ticket's write of `waiter`
            // happened-before this read and the ticket will not write it again.
            let w = self.waiter.with_mut(|w| unsafe { (*w).take() });
            match w {
                Some(Waiter::Thread(t)) => t.unpark(),
                Some(Waiter::Task(w)) => w.wake(),
                None => {}
            }
        }
    }
}

/// A helper counted in its batch's `helpers` (rule 7); leaves on drop.
pub(crate) struct HelperGuard<'c>(&'c Completion);

impl HelperGuard<'_> {
    /// Records `bytes` copied by this helper; before the guard drops, so the worker counts them.
    pub(crate) fn add(&self, bytes: u64) {
        self.0.helped.fetch_add(bytes, Ordering::Relaxed);
    }
}

impl Drop for HelperGuard<'_> {
    fn drop(&mut self) {
        self.0.helpers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The submitter's handle on a batch's completion. Not `Clone`: one owner waits.
pub struct Ticket {
    completion: Arc<Completion>,
    registered: bool,
    /// Whether this ticket's thread is the registered waiter (else it yields while waiting).
    parks: bool,
}

impl Ticket {
    pub(crate) fn new(completion: Arc<Completion>) -> Ticket {
        Ticket {
            completion,
            registered: false,
            parks: false,
        }
    }

    /// The outcome if the batch is finished (done or cancelled), without blocking.
    pub fn poll(&self) -> Option<Outcome> {
        let s = self.completion.state.load(Ordering::Acquire);
        if s & CANCELLED != 0 {
            return Some(Outcome {
                status: Status::Cancelled,
                bytes_completed: 0,
                started_ns: 0,
                finished_ns: 0,
                helped_bytes: 0,
            });
        }
        if s & DONE == 0 {
            return None;
        }
        let c = &self.completion;
        Some(Outcome {
            status: Status::from_u32(c.status.load(Ordering::Relaxed)),
            bytes_completed: c.bytes.load(Ordering::Relaxed),
            started_ns: c.started_ns.load(Ordering::Relaxed),
            finished_ns: c.finished_ns.load(Ordering::Relaxed),
            helped_bytes: c.helped.load(Ordering::Relaxed),
        })
    }

    /// A read-only handle that tells whether the batch is finished, for a runtime that checks
    /// many outstanding batches between tasks while their tickets stay with their owners.
    pub fn probe(&self) -> Probe {
        Probe {
            completion: self.completion.clone(),
        }
    }

    /// Whether a worker has claimed the batch (it can no longer be cancelled).
    pub fn started(&self) -> bool {
        self.completion.state.load(Ordering::Acquire) & (RUNNING | DONE) != 0
    }

    /// Cancels the batch if no worker has started it (rule 2). On `true` neither the engine nor
    /// a helper will touch the batch's buffers (rule 8: it waits for a helper mid-copy) and the
    /// ticket reports [`Status::Cancelled`].
    pub fn try_cancel(&self) -> bool {
        let st = &self.completion.state;
        let mut s = st.load(Ordering::Acquire);
        loop {
            if s & (RUNNING | DONE | CANCELLED) != 0 {
                return s & CANCELLED != 0;
            }
            match st.compare_exchange(s, s | CANCELLED, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    // Helpers may have claimed descriptors before the cancel (rule 8).
                    self.completion.close();
                    return true;
                }
                Err(cur) => s = cur,
            }
        }
    }

    /// Blocks until the batch is finished: spins for up to `spin_iters` checks, then parks.
    pub fn wait(&mut self, spin_iters: u32) -> Outcome {
        for _ in 0..spin_iters {
            if let Some(o) = self.poll() {
                return o;
            }
            crate::sync::spin_hint();
        }
        if !self.registered {
            self.registered = true;
            let me = crate::sync::thread_current();
            self.parks = self.completion.claim(Waiter::Thread(me));
        }
        loop {
            if let Some(o) = self.poll() {
                return o;
            }
            if self.parks {
                park();
            } else {
                // A task's waker holds the waiter cell: check back after others ran.
                crate::sync::yield_now();
            }
        }
    }
}

/// Tells whether one batch is finished (done or cancelled), without owning its ticket. Cheap to
/// check: one Acquire load of the batch's state.
#[derive(Clone)]
pub struct Probe {
    completion: Arc<Completion>,
}

impl Probe {
    /// Whether the batch is finished; once true, its ticket's `poll` returns the outcome.
    pub fn is_finished(&self) -> bool {
        self.completion.state.load(Ordering::Acquire) & (DONE | CANCELLED) != 0
    }

    /// Has the worker wake `waker` when the batch finishes: the way a future in another
    /// executor (tokio, …) sleeps on an engine copy without polling. One waiter per batch:
    /// `false` when the batch is already finished or another waiter is registered, and the
    /// caller must then check again itself.
    pub fn register(&self, waker: &std::task::Waker) -> bool {
        if self.is_finished() || !self.completion.claim(Waiter::Task(waker.clone())) {
            return false;
        }
        // Finished between the check and the claim: the worker may not have seen WAITER.
        !self.is_finished()
    }
}

#[cfg(not(loom))]
impl Probe {
    /// Whether the batch is unfinished and of a kind helpers may work on (rule 8):
    /// [`Probe::help`] finds work in it until every descriptor is claimed.
    pub fn helpable(&self) -> bool {
        !self.is_finished() && self.completion.claims.load(Ordering::Relaxed) & NO_HELP == 0
    }

    /// Copies one descriptor from the tail of the batch on the calling thread, while the
    /// engine works (or will work) from its head (rules 6–8): a waiter with nothing else to do
    /// shortens the wait instead of sleeping through it. Returns the bytes copied: 0 when there
    /// is nothing to take (the batch is finished or cancelled, not open to help, or every
    /// descriptor is claimed). The batch's outcome counts these bytes as done
    /// ([`Outcome::helped_bytes`]).
    ///
    /// Safe to call from any thread: the submitter guaranteed the buffers for the engine
    /// ([`crate::Engine::try_submit`]), and the worker publishes the outcome only after every
    /// helper left.
    pub fn help(&self, persist: &switchyard_media::Persist) -> usize {
        let c = &*self.completion;
        let Some(guard) = c.enter_helper() else {
            return 0;
        };
        let Some(i) = c.claim_back() else {
            return 0;
        };
        let d = &c.descriptors[i];
        // SAFETY: descriptor `i` is ours alone (rule 6); its buffers stay valid and unaliased
        // until the outcome is published, which waits for this guard (rule 7).
        unsafe { d.execute(persist, d.len) };
        if d.mode() != switchyard_media::CopyMode::Temporal {
            // Non-temporal stores are weakly ordered: fence before the worker (and through it
            // the submitter) may see the batch done.
            persist.fence();
        }
        guard.add(d.len as u64);
        d.len
    }
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// The per-channel completion record: a seqlock over (sequence number, status, bytes).
///
/// ```text
///  offset  field            meaning
///  0       version (u64)    2 × seq, +1 while the worker updates the record
///  8       status (u32)     Status of the latest finished batch (0 before the first)
///  12      reserved (u32)
///  16      bytes (u64)      its bytes_completed
///  24      reserved (u64)
/// ```
/// `seq` is the number of batches finished on the channel; batches finish in queue order, so
/// the batch at position `p` is finished iff `seq > p`.
#[repr(C, align(32))]
pub struct CompletionRecord {
    version: AtomicU64,
    status: AtomicU32,
    _reserved: u32,
    bytes: AtomicU64,
    _reserved2: u64,
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<CompletionRecord>() == 32);

/// A consistent reading of a [`CompletionRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSnapshot {
    /// Batches finished on the channel.
    pub seq: u64,
    /// Status of the latest one (`None` before the first).
    pub status: Option<Status>,
    /// Its bytes_completed.
    pub bytes_completed: u64,
}

impl Default for CompletionRecord {
    fn default() -> Self {
        CompletionRecord {
            version: AtomicU64::new(0),
            status: AtomicU32::new(0),
            _reserved: 0,
            bytes: AtomicU64::new(0),
            _reserved2: 0,
        }
    }
}

impl CompletionRecord {
    /// Worker (the only writer): records one more finished batch.
    pub(crate) fn advance(&self, status: Status, bytes: u64) {
        let v = self.version.load(Ordering::Relaxed);
        self.version.store(v + 1, Ordering::Relaxed);
        crate::sync::fence(Ordering::Release);
        self.status.store(status as u32, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
        self.version.store(v + 2, Ordering::Release);
    }

    /// A consistent snapshot (retries while the worker is mid-update).
    pub fn snapshot(&self) -> RecordSnapshot {
        loop {
            let v1 = self.version.load(Ordering::Acquire);
            if v1 % 2 == 1 {
                crate::sync::spin_hint();
                continue;
            }
            let status = self.status.load(Ordering::Relaxed);
            let bytes = self.bytes.load(Ordering::Relaxed);
            crate::sync::fence(Ordering::Acquire);
            if self.version.load(Ordering::Relaxed) == v1 {
                let status = (status != 0).then(|| Status::from_u32(status));
                return RecordSnapshot {
                    seq: v1 / 2,
                    status,
                    bytes_completed: bytes,
                };
            }
        }
    }

    /// Batches finished so far.
    pub fn seq(&self) -> u64 {
        self.version.load(Ordering::Acquire) / 2
    }
}
