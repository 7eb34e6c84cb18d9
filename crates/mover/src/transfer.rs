//! Executing a decision: the CPU path, the engine path with partial-completion repair, the
//! split, and the asynchronous [`Transfer`] handle.

use std::sync::atomic::Ordering;
use std::time::Instant;

use switchyard_engine::{clock, Batch, DurableRecord, Flags, Outcome, Status, SubmitError, Ticket};
use switchyard_media::CopyMode;

use crate::adapt::{Arm, Explore};
use crate::bandwidth::{bin, sample_cpu_copy, Bandwidth, MIN_SAMPLED, TURNAROUND};
use crate::config::Policy;
use crate::counters::Counter;
use crate::decide::{Decision, Part, Path, Reason, SyncDecision};
use crate::hints::{Direction, Hints};
use crate::qos::Class;
use crate::{plan, Mover};

/// What a finished request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// The path the scheduler chose.
    pub path: Path,
    /// Bytes the engine copied.
    pub engine_bytes: usize,
    /// Bytes the CPU copied (head, its split share, fallbacks, repairs, and the tail of an
    /// engine batch a waiting thread helped with).
    pub cpu_bytes: usize,
    /// Of `cpu_bytes`, those copied to finish a partial or failed engine completion.
    pub repaired_bytes: usize,
}

impl Report {
    /// A request on `path` whose CPU has copied `cpu_bytes` so far (the engine nothing yet).
    pub(crate) fn started(path: Path, cpu_bytes: usize) -> Report {
        Report {
            path,
            engine_bytes: 0,
            cpu_bytes,
            repaired_bytes: 0,
        }
    }
}

/// An engine part in flight. Owns the right to the buffers until its ticket reports.
struct InFlight {
    ticket: Ticket,
    dst: *mut u8,
    src: *const u8,
    len: usize,
    hints: Hints,
    submitted_ns: u64,
    decision: Decision,
    /// The channel and the batch's position in it.
    channel: usize,
    position: u64,
    /// Whether the batch records its completion durably.
    recorded: bool,
}

impl Mover {
    /// Copies `src` into `dst` (equal lengths), choosing the path per request, and returns when
    /// the copy is complete (and durable, if `hints.durable`).
    pub fn copy(
        &self,
        dst: &mut [u8],
        src: &[u8],
        hints: Hints,
    ) -> Result<Report, crate::MoveError> {
        if dst.len() != src.len() {
            return Err(crate::MoveError::LengthMismatch {
                dst: dst.len(),
                src: src.len(),
            });
        }
        // SAFETY: the slices are valid, non-overlapping (`&mut` vs `&`), and borrowed for the
        // whole call, which returns only after every engine part completed.
        Ok(unsafe { self.copy_raw(dst.as_mut_ptr(), src.as_ptr(), src.len(), hints) })
    }

    /// [`Mover::copy`] on raw pointers, for memory the borrow checker cannot see (a region).
    ///
    /// # Safety
    /// `src` valid for reads and `dst` for writes of `len` bytes, not overlapping, and `dst` not
    /// accessed by anyone else until this returns.
    pub unsafe fn copy_raw(
        &self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        hints: Hints,
    ) -> Report {
        let Some(q) = &self.qos else {
            // SAFETY: forwarded from this function's contract.
            return unsafe { self.copy_sync(dst, src, len, hints) };
        };
        // A tenant's copy is counted, and a latency tenant's timed end to end and renews the
        // bulk budget's lease (module `qos`).
        let class = q.class(hints.tenant);
        let began = matches!(class, Class::Latency(_)).then(|| {
            q.active(&*self.engine);
            Instant::now()
        });
        // SAFETY: forwarded from this function's contract.
        let report = unsafe { self.copy_sync(dst, src, len, hints) };
        if let Class::Latency(t) | Class::Bulk(t) = class {
            let ns = began.map(|b| b.elapsed().as_nanos() as u64);
            q.record(t, len, ns, &*self.engine);
        }
        report
    }

    /// [`Mover::copy_raw`] past the channel manager's accounting.
    ///
    /// # Safety
    /// As [`Mover::copy_raw`].
    unsafe fn copy_sync(&self, dst: *mut u8, src: *const u8, len: usize, hints: Hints) -> Report {
        let SyncDecision {
            decision,
            trial,
            bulk,
            early,
        } = self.decide_sync(dst, src, len, &hints);
        if early {
            if decision.reason == Reason::BusyCores {
                // SAFETY: forwarded from this function's contract.
                return unsafe { self.copy_with_cores_busy(dst, src, len, &hints) };
            }
            // The common small request: the CPU path, nothing to time.
            self.counters.add(Counter::cpu_requests, 1);
            // SAFETY: forwarded from this function's contract.
            unsafe { self.cpu_copy(dst, src, len, &hints) };
            return Report::started(Path::Cpu, len);
        }
        // Requests in a band around their threshold are timed end to end for the band's A/B
        // trial: every one that went the unusual way but the first of its run (which found
        // that path idle), one in a few of the rest.
        let band = trial.band;
        let arm = if decision.path == Path::Cpu {
            Arm::Cpu
        } else {
            Arm::Offload
        };
        let began = band
            .is_some_and(|b| {
                if b.usual() != arm {
                    trial.explore == Explore::Timed
                } else {
                    self.adapt.sample_band()
                }
            })
            .then(Instant::now);
        let head = decision.head;
        let mut report = Report::started(decision.path, head);
        if head > 0 {
            self.counters.add(Counter::aligned_heads, 1);
            // SAFETY: head < 64 <= len, inside the caller's ranges.
            unsafe { self.cpu_copy(dst, src, head, &hints) };
        }
        // SAFETY: head <= len, so the body pointers stay inside the caller's ranges.
        let (d, s, body) = unsafe { (dst.add(head), src.add(head), len - head) };
        match decision.path {
            Path::Cpu => {
                self.counters.add(Counter::cpu_requests, 1);
                // SAFETY: forwarded from this function's contract.
                unsafe { self.cpu_copy(d, s, body, &hints) };
                report.cpu_bytes += body;
            }
            Path::Engine { .. } => {
                self.counters.add(Counter::engine_requests, 1);
                // SAFETY: forwarded; we wait for the engine part below.
                match unsafe { self.start_engine(d, s, body, hints, decision, &[]) } {
                    Some(f) if self.take_back(&f) => {
                        // SAFETY: the cancelled batch will never touch the buffers
                        // (completion rule 2), so they are ours again.
                        unsafe { self.cpu_copy(d, s, body, &hints) };
                        report.cpu_bytes += body;
                    }
                    Some(f) => self.finish(f, &mut report),
                    None => {
                        // SAFETY: the engine never received the buffers.
                        unsafe { self.cpu_copy(d, s, body, &hints) };
                        report.cpu_bytes += body;
                    }
                }
            }
            Path::Split { .. } => {
                // SAFETY: forwarded from this function's contract.
                unsafe { self.copy_split(d, s, body, decision, &hints, &mut report) }
            }
        }
        if let (Some(b), Some(t)) = (band, began) {
            self.adapt
                .record(hints.direction, b, arm, len, t.elapsed().as_nanos() as u64);
        }
        if bulk {
            self.active_bulk.fetch_sub(1, Ordering::Relaxed);
        }
        report
    }

    /// Takes back a synchronous engine part no worker has started by the deadline the
    /// decision gives ([`Mover::take_back_at`]): `true` then (the slot released, counted as
    /// [`Reason::TakenBack`]), and the caller copies it. On a virtual machine a parked worker
    /// wakes 50 µs to milliseconds late, and a caller that waits on the core its channel's
    /// worker is pinned to keeps that worker from starting at all; once the CPU would have
    /// finished, waiting on can only be slower.
    fn take_back(&self, f: &InFlight) -> bool {
        let part = Part {
            hints: &f.hints,
            channel: f.channel,
            len: f.len,
            submitted_ns: f.submitted_ns,
        };
        let Some(until) = self.take_back_at(&part) else {
            return false;
        };
        while !f.ticket.started() {
            if clock::now_ns() >= until {
                if !f.ticket.try_cancel() {
                    return false;
                }
                self.taken_back(&f.decision, Reason::TakenBack);
                return true;
            }
            std::hint::spin_loop();
        }
        false
    }

    /// Carries out a split decision: the engine copies its share of the `body` first while
    /// the CPU copies the rest; an engine share not yet started when the CPU is done is taken
    /// back and copied here rather than waited for.
    ///
    /// # Safety
    /// As [`Mover::copy_raw`] for `body` bytes at `d` and `s`.
    unsafe fn copy_split(
        &self,
        d: *mut u8,
        s: *const u8,
        body: usize,
        decision: Decision,
        hints: &Hints,
        report: &mut Report,
    ) {
        let Path::Split { engine_bytes, .. } = decision.path else {
            unreachable!("only split decisions are carried out as splits");
        };
        self.counters.add(Counter::split_requests, 1);
        self.counters
            .add(Counter::split_engine_bytes, engine_bytes as u64);
        // SAFETY: engine part [0, engine_bytes) and CPU part [engine_bytes, body) are
        // disjoint pieces of the caller's ranges; we wait for the engine part below.
        let started = unsafe { self.start_engine(d, s, engine_bytes, *hints, decision, &[]) };
        let cpu_from = if started.is_some() { engine_bytes } else { 0 };
        let t = Instant::now();
        // SAFETY: disjoint from the engine part, inside the caller's ranges.
        unsafe { self.cpu_copy(d.add(cpu_from), s.add(cpu_from), body - cpu_from, hints) };
        if started.is_some() {
            // Filed under the whole split's size, as the share is read (see `finish`).
            self.sample_cpu(
                &self.split_bandwidth,
                hints.direction,
                body - engine_bytes,
                body,
                t,
            );
        }
        report.cpu_bytes += body - cpu_from;
        self.counters
            .add(Counter::split_cpu_bytes, (body - engine_bytes) as u64);
        if let Some(f) = started {
            if f.ticket.try_cancel() {
                // The engine had not started its share: do it here rather than wait.
                self.taken_back(&f.decision, Reason::Reclaimed);
                // SAFETY: the cancelled batch will never touch the buffers (completion
                // rule 2), so the engine part is ours again.
                unsafe { self.cpu_copy(d, s, engine_bytes, hints) };
                report.cpu_bytes += engine_bytes;
            } else {
                self.finish(f, report);
            }
        }
    }

    /// The last epoch saw callers on every core a helper-thread engine does not use, so the
    /// engine could only compete with them: the CPU copies, as with policy `cpu`, without
    /// consulting the thresholds and without timing the copy (bandwidth measured while every
    /// core copies says nothing about a split made with a core to spare). The epochs keep
    /// ticking at the sampling rate, so the mover notices when callers leave.
    ///
    /// # Safety
    /// As [`Mover::copy_raw`].
    unsafe fn copy_with_cores_busy(
        &self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        hints: &Hints,
    ) -> Report {
        self.counters.add(Counter::cpu_requests, 1);
        // SAFETY: forwarded from this function's contract.
        unsafe { self.cpu_copy_timed(dst, src, len, hints, false) };
        if sample_cpu_copy(len, &self.estimates) {
            self.adapt.tick(&self.split_bandwidth, &self.counters);
        }
        Report::started(Path::Cpu, len)
    }

    /// The CPU path: the media kernels, under the slow-memory writer cap.
    ///
    /// # Safety
    /// As [`Mover::copy_raw`].
    pub(crate) unsafe fn cpu_copy(&self, dst: *mut u8, src: *const u8, len: usize, hints: &Hints) {
        let timed = self.policy == Policy::Auto && sample_cpu_copy(len, &self.estimates);
        // SAFETY: forwarded from this function's contract.
        unsafe { self.cpu_copy_timed(dst, src, len, hints, timed) };
    }

    /// [`Mover::cpu_copy`], timing the copy into the CPU bandwidth estimates if `timed`.
    ///
    /// # Safety
    /// As [`Mover::copy_raw`].
    unsafe fn cpu_copy_timed(
        &self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        hints: &Hints,
        timed: bool,
    ) {
        if len == 0 {
            return;
        }
        let persist = self.persist();
        let mode = match (hints.durable, hints.direction) {
            (true, _) if hints.defer_fence => CopyMode::Flushed,
            (true, _) => CopyMode::Durable,
            (false, Direction::ToSlow) if len >= persist.nt_threshold => CopyMode::NonTemporal,
            _ => CopyMode::Temporal,
        };
        let cap = self.cpu_writers.load(Ordering::Relaxed);
        let capped = cap > 0 && hints.direction == Direction::ToSlow;
        if capped {
            self.acquire_writer(cap);
        }
        let t = timed.then(Instant::now);
        // SAFETY: forwarded from this function's contract.
        unsafe { persist.copy(dst, src, len, mode) };
        if let Some(t) = t {
            self.sample_cpu(&self.bandwidth, hints.direction, len, len, t);
        }
        if capped {
            self.writers.fetch_sub(1, Ordering::Release);
        }
        self.counters.add(Counter::cpu_bytes, len as u64);
    }

    /// Takes one of `cap` CPU writer places (the cap read when the copy was decided, so a
    /// swapped profile cannot strand a writer that took no place).
    fn acquire_writer(&self, cap: usize) {
        let mut waited = false;
        loop {
            let n = self.writers.load(Ordering::Relaxed);
            if n < cap
                && self
                    .writers
                    .compare_exchange_weak(n, n + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                break;
            }
            if !waited {
                waited = true;
                self.counters.add(Counter::writer_waits, 1);
            }
            std::thread::yield_now();
        }
    }

    /// Folds the CPU copy of `len` bytes that started at `since` into `into`, in the bin of
    /// `at` bytes: the mover's `bandwidth` for a copy that ran alone (`at` = `len`), its
    /// `split_bandwidth` for the CPU side of a split (`at`: the whole split).
    fn sample_cpu(&self, into: &Bandwidth, dir: Direction, len: usize, at: usize, since: Instant) {
        let ns = since.elapsed().as_nanos() as f64;
        into.of(dir).cpu[bin(at)].update(len as f64 / ns, &self.estimates);
        self.adapt.tick(&self.split_bandwidth, &self.counters);
    }

    /// Builds the batch and submits it. `None` (slot released, counted) if the channel refused
    /// it; with policy `engine` a full queue is waited out instead.
    ///
    /// # Safety
    /// As [`Mover::copy_raw`], until the returned [`InFlight`] is finished.
    unsafe fn start_engine(
        &self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        hints: Hints,
        decision: Decision,
        records: &[DurableRecord],
    ) -> Option<InFlight> {
        let channel = match decision.path {
            Path::Engine { channel } | Path::Split { channel, .. } => channel,
            Path::Cpu => unreachable!("only engine and split decisions start the engine"),
        };
        let flags = match (hints.durable, hints.direction) {
            (true, _) => Flags::DURABLE,
            (false, Direction::ToSlow) => Flags::NONE,
            _ => Flags::CACHE_CONTROL,
        };
        let (mut batch, ticket) = Batch::new(plan::pair(
            dst,
            src,
            len,
            hints.direction,
            self.granule,
            flags,
        ));
        let recorded = channel < records.len();
        if recorded {
            batch = batch.with_durable_record(records[channel]);
        }
        // A bulk tenant's batch runs on the engine alone, and waits out a full queue (module
        // `qos`): no waiting thread may carry throttled work.
        let class = self.class(&hints);
        let bulk = class.is_bulk();
        if bulk {
            batch = batch.closed_to_helpers();
        }
        // A latency tenant waits for its copy: the worker yields to it if it submitted from
        // the worker's own core.
        if matches!(class, Class::Latency(_)) {
            batch = batch.waited_for_beside();
        }
        let submitted_ns = clock::now_ns();
        loop {
            // SAFETY: forwarded from this function's contract: the buffers stay valid until
            // the InFlight is finished, which waits for the ticket.
            match unsafe { self.engine.try_submit(channel, batch) } {
                Ok(position) => {
                    return Some(InFlight {
                        ticket,
                        dst,
                        src,
                        len,
                        hints,
                        submitted_ns,
                        decision,
                        channel,
                        position,
                        recorded,
                    })
                }
                Err(SubmitError::Full(b)) if self.policy == Policy::Engine || bulk => {
                    batch = b;
                    std::thread::yield_now();
                }
                Err(_) => {
                    self.refused(&decision);
                    return None;
                }
            }
        }
    }

    /// Waits for an engine part, updates the estimates, and repairs a partial or failed
    /// completion on the CPU.
    fn finish(&self, mut f: InFlight, report: &mut Report) {
        // A bulk tenant's copy waits on its budget: polling it would only take a core from
        // the latency tenants' copies (on a 2-core VM, a bulk caller's 2,000 polls on the
        // latency worker's core held a 64 KiB latency copy for 60 µs), so it parks at once.
        // A latency tenant's caller on the very core its channel's worker is pinned to parks
        // at once too: polling there kept the worker, once it had started the copy, off the
        // core until the polls ran out (64 KiB latency copies took 60–80 µs).
        let spin = match self.class(&f.hints) {
            Class::Bulk(_) => 0,
            Class::Latency(_) if self.on_worker_cpu(f.channel) => 0,
            _ => self.wait_spin,
        };
        let o = f.ticket.wait(spin);
        self.complete(&f, o, report);
    }

    fn complete(&self, f: &InFlight, o: Outcome, report: &mut Report) {
        self.release(&f.decision);
        let done = (o.bytes_completed as usize).min(f.len);
        // Helpers copied from the tail: CPU bytes, and not the engine's bandwidth.
        let helped = (o.helped_bytes as usize).min(done);
        self.counters
            .add(Counter::engine_bytes, (done - helped) as u64);
        self.counters.add(Counter::helped_bytes, helped as u64);
        report.engine_bytes += done - helped;
        report.cpu_bytes += helped;
        let engine_len = f.len - helped;
        if o.status == Status::Success
            && f.len >= MIN_SAMPLED
            && matches!(f.decision.path, Path::Engine { .. })
            && !self.class(&f.hints).is_bulk()
        {
            let took = o.finished_ns.saturating_sub(f.submitted_ns).max(1) as f64;
            self.bandwidth.of(f.hints.direction).turnaround[bin(f.len)]
                .update_or_start(f.len as f64 / took, &TURNAROUND);
        }
        // A bulk tenant's batch ran under its budget: its pauses say nothing of the engine.
        if o.status == Status::Success
            && engine_len >= MIN_SAMPLED
            && !self.class(&f.hints).is_bulk()
        {
            // The engine side of a split ran beside the CPU side: its rate goes to the split's
            // estimates, in the bin of the whole split, which is where a split's share reads
            // them (filed under the part's own size, the estimates of a size were fed by the
            // splits of sizes twice as large and never by its own: a tune's 1 MiB writes
            // split on a neutral CPU prior beside a measured engine rate). The start-up delay
            // does not depend on what the caller does meanwhile.
            let (into, at) = match f.decision.path {
                Path::Split { body, .. } => (&self.split_bandwidth, body),
                _ => (&self.bandwidth, engine_len),
            };
            into.of(f.hints.direction).engine[bin(at)].update(
                engine_len as f64 / o.finished_ns.saturating_sub(o.started_ns).max(1) as f64,
                &self.estimates,
            );
            let startup = o.started_ns.saturating_sub(f.submitted_ns).max(1) as f64;
            for b in [&self.bandwidth, &self.split_bandwidth] {
                b.of(f.hints.direction)
                    .startup_ns
                    .update(startup, &self.estimates);
            }
            self.adapt.tick(&self.split_bandwidth, &self.counters);
        }
        match o.status {
            Status::Success => return,
            Status::Partial => self.counters.add(Counter::partial_completions, 1),
            Status::Error | Status::Mismatch | Status::Cancelled => {
                self.counters.add(Counter::engine_errors, 1)
            }
        }
        let rest = f.len - done;
        self.counters.add(Counter::repaired_bytes, rest as u64);
        report.repaired_bytes += rest;
        // SAFETY: the engine has finished with the batch (its outcome is published), so the
        // remaining range belongs to us again; it lies inside the caller's ranges.
        unsafe { self.cpu_copy(f.dst.add(done), f.src.add(done), rest, &f.hints) };
        report.cpu_bytes += rest;
    }
}

mod asynchronous;

pub use asynchronous::{Detached, Transfer};

#[cfg(test)]
mod tests;
