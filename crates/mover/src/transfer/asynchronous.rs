//! Asynchronous copies: [`Mover::submit`] starts one and returns a [`Transfer`] to poll,
//! wait for or detach.

use switchyard_engine::DurableRecord;

use super::{InFlight, Report};
use crate::counters::Counter;
use crate::decide::Path;
use crate::hints::Hints;
use crate::qos::Class;
use crate::Mover;

impl Mover {
    /// Starts a copy and returns at once: small requests are copied inline (the handle is
    /// already complete), bulk ones go to the engine. Asynchronous requests are never split —
    /// the caller wants its core back.
    ///
    /// # Safety
    /// As [`Mover::copy_raw`], until the returned [`Transfer`] is waited for or dropped (drop
    /// waits). Leaking the `Transfer` (e.g. `mem::forget`) while it is pending leaves the engine
    /// writing into `dst`.
    pub unsafe fn submit(
        &self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        hints: Hints,
    ) -> Transfer<'_> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.submit_recorded(dst, src, len, hints, &[]) }
    }

    /// [`Mover::submit`], with the engine batch naming `records[channel]` as its durable
    /// completion record when there is one for the channel it goes to (see
    /// [`switchyard_engine::durable`]); [`Transfer::recorded`] then names the channel and
    /// position. Engine-bound reads follow EasyIO's admission rule (§4.4, Listing 2): they go
    /// to a channel with fewer than 2 batches queued, or to the CPU if there is none.
    ///
    /// # Safety
    /// As [`Mover::submit`].
    pub unsafe fn submit_recorded(
        &self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        hints: Hints,
        records: &[DurableRecord],
    ) -> Transfer<'_> {
        let decision = self.decide(dst, src, len, &hints, false);
        if let Some(q) = &self.qos {
            let class = q.class(hints.tenant);
            if let Class::Latency(_) = class {
                q.active(&*self.engine);
            }
            if let Class::Latency(t) | Class::Bulk(t) = class {
                q.record(t, len, None, &*self.engine);
            }
        }
        let mut report = Report::started(decision.path, decision.head);
        // SAFETY: head < len, inside the caller's ranges.
        unsafe { self.cpu_copy(dst, src, decision.head, &hints) };
        // SAFETY: as above.
        let (d, s, body) = unsafe {
            (
                dst.add(decision.head),
                src.add(decision.head),
                len - decision.head,
            )
        };
        let inflight = match decision.path {
            Path::Engine { .. } | Path::Split { .. } => {
                self.counters.add(Counter::engine_requests, 1);
                // SAFETY: forwarded; the Transfer waits before releasing the buffers.
                unsafe { self.start_engine(d, s, body, hints, decision, records) }
            }
            Path::Cpu => None,
        };
        if inflight.is_none() {
            if decision.path == Path::Cpu {
                self.counters.add(Counter::cpu_requests, 1);
            }
            // SAFETY: the engine holds none of the buffers.
            unsafe { self.cpu_copy(d, s, body, &hints) };
            report.cpu_bytes += body;
        }
        Transfer {
            mover: self,
            inflight,
            report,
        }
    }
}

/// An asynchronous copy. Poll it, wait for it, or drop it (dropping waits).
pub struct Transfer<'m> {
    mover: &'m Mover,
    inflight: Option<InFlight>,
    report: Report,
}

impl Transfer<'_> {
    /// Whether the copy is complete; completes the bookkeeping (and any repair) when it is.
    pub fn poll(&mut self) -> bool {
        let Some(f) = &self.inflight else { return true };
        match f.ticket.poll() {
            Some(o) => {
                let f = self.inflight.take().expect("checked above");
                self.mover.complete(&f, o, &mut self.report);
                true
            }
            None => false,
        }
    }

    /// A read-only handle that tells when the engine part is finished (`None`: nothing is
    /// outstanding, the next [`Transfer::poll`] completes). A runtime checks it between tasks
    /// and polls the transfer only then.
    pub fn probe(&self) -> Option<switchyard_engine::Probe> {
        self.inflight.as_ref().map(|f| f.ticket.probe())
    }

    /// The channel and position of the engine batch, if it is in flight and records its
    /// completion durably ([`Mover::submit_recorded`]).
    pub fn recorded(&self) -> Option<(usize, u64)> {
        self.inflight
            .as_ref()
            .filter(|f| f.recorded)
            .map(|f| (f.channel, f.position))
    }

    /// Detaches the copy from the borrow of its mover, for an owner that outlives the borrow
    /// (the store keeps unfinished writes with their files). Finish it with
    /// [`Mover::poll_detached`] or [`Mover::wait_detached`] on the same mover.
    pub fn detach(mut self) -> Detached {
        Detached {
            inflight: self.inflight.take(),
            report: self.report,
        }
    }

    /// Blocks until the copy is complete.
    pub fn wait(mut self) -> Report {
        self.finish_now();
        self.report
    }

    fn finish_now(&mut self) {
        if let Some(f) = self.inflight.take() {
            self.mover.finish(f, &mut self.report);
        }
    }
}

impl Drop for Transfer<'_> {
    fn drop(&mut self) {
        self.finish_now();
    }
}

/// A [`Transfer`] detached from its mover (see [`Transfer::detach`]). Dropping it before it is
/// finished blocks until the engine is done with the buffers (no repair: the copy may then be
/// incomplete).
pub struct Detached {
    inflight: Option<InFlight>,
    report: Report,
}

// SAFETY: the raw buffer pointers are owned by the copy's submitter, who promised (Mover::submit)
// that they stay valid and unaliased until the copy is finished, whichever thread finishes it.
unsafe impl Send for Detached {}
// SAFETY: every method that touches the pointers takes `&mut self`.
unsafe impl Sync for Detached {}

impl Detached {
    /// Whether the engine part has finished (the next poll completes the copy).
    pub fn probe(&self) -> Option<switchyard_engine::Probe> {
        self.inflight.as_ref().map(|f| f.ticket.probe())
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        if let Some(mut f) = self.inflight.take() {
            f.ticket.wait(0);
        }
    }
}

impl Mover {
    /// Completes a detached copy if its engine part has finished (repairing a partial
    /// completion on the CPU): its report, or `None` while it runs.
    pub fn poll_detached(&self, d: &mut Detached) -> Option<Report> {
        if let Some(f) = &d.inflight {
            let o = f.ticket.poll()?;
            let f = d.inflight.take().expect("checked above");
            self.complete(&f, o, &mut d.report);
        }
        Some(d.report)
    }

    /// Blocks until a detached copy is complete.
    pub fn wait_detached(&self, d: &mut Detached) -> Report {
        if let Some(f) = d.inflight.take() {
            self.finish(f, &mut d.report);
        }
        d.report
    }
}
