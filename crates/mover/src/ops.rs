//! Fills and compares: the engine's two other memory operations (DSA's memory fill and
//! compare), decided as a copy is.
//!
//! A fill of `len` bytes at `dst` is decided as a copy of `len` bytes into `dst` (its
//! direction, threshold, split and channel), a compare of `a` with `b` as a copy from `a`
//! into `b`: below the threshold the caller's CPU does it; on the engine path the engine runs
//! one descriptor ([`Op::Fill`], [`Op::Compare`]) on the decision's channel; on a split the
//! engine takes the first part while the CPU does the rest. A partial or failed engine
//! completion is finished on the CPU, so a fill is always whole and a compare's answer always
//! right.

use switchyard_engine::{Batch, Descriptor, Flags, Op, Status, Ticket};
use switchyard_media::CopyMode;

use crate::counters::Counter;
use crate::decide::{Decision, Path};
use crate::hints::{Direction, Hints};
use crate::transfer::Report;
use crate::{MoveError, Mover};

impl Mover {
    /// Fills `dst` with `byte` (`memset`), choosing the path as for a copy into `dst`;
    /// returns when every byte is written (and durable, if `hints.durable`).
    pub fn fill(&self, dst: &mut [u8], byte: u8, hints: Hints) -> Report {
        // SAFETY: `dst` is borrowed exclusively for the whole call, which returns only after
        // the engine's part completed.
        unsafe { self.fill_raw(dst.as_mut_ptr(), byte, dst.len(), hints) }
    }

    /// [`Mover::fill`] on a raw pointer.
    ///
    /// # Safety
    /// `dst` valid for writes of `len` bytes and not accessed by anyone else until this
    /// returns.
    pub unsafe fn fill_raw(&self, dst: *mut u8, byte: u8, len: usize, hints: Hints) -> Report {
        let pattern = u64::from_le_bytes([byte; 8]);
        self.counters.add(Counter::fill_requests, 1);
        let decision = self.decide(dst, dst, len, &hints, true);
        let op = Op::Fill { dst, pattern };
        let (ticket, engine_len) = self.start_op(op, len, &decision, &hints);
        let mode = cpu_mode(&hints);
        let mut report = Report::started(decision.path, len - engine_len);
        // SAFETY: the CPU's part lies past the engine's, inside `dst` (the caller's contract).
        unsafe {
            self.persist
                .fill(dst.add(engine_len), pattern, len - engine_len, mode)
        };
        if let Some(mut t) = ticket {
            let o = t.wait(self.wait_spin);
            let done = (o.bytes_completed as usize).min(engine_len);
            if done < engine_len {
                // SAFETY: the engine's unfinished tail, inside `dst`; the engine is done with it.
                unsafe {
                    self.persist
                        .fill(dst.add(done), pattern, engine_len - done, mode)
                };
                self.counters
                    .add(Counter::repaired_bytes, (engine_len - done) as u64);
                report.repaired_bytes += engine_len - done;
                report.cpu_bytes += engine_len - done;
            }
            report.engine_bytes += done;
            self.counters.add(Counter::fill_engine_bytes, done as u64);
        }
        self.release(&decision);
        if hints.durable {
            self.persist.fence();
        }
        report
    }

    /// Compares `a` with `b` (`memcmp`), choosing the path as for a copy from `a` into `b`:
    /// the offset of the first byte where they differ, or `None` when they are equal.
    pub fn compare(&self, a: &[u8], b: &[u8], hints: Hints) -> Result<Option<usize>, MoveError> {
        if a.len() != b.len() {
            return Err(MoveError::LengthMismatch {
                dst: b.len(),
                src: a.len(),
            });
        }
        // SAFETY: both slices are borrowed for the whole call, which returns only after the
        // engine's part completed.
        Ok(unsafe { self.compare_raw(a.as_ptr(), b.as_ptr(), a.len(), hints) })
    }

    /// [`Mover::compare`] on raw pointers.
    ///
    /// # Safety
    /// `a` and `b` valid for reads of `len` bytes, and not written by anyone until this
    /// returns.
    pub unsafe fn compare_raw(
        &self,
        a: *const u8,
        b: *const u8,
        len: usize,
        hints: Hints,
    ) -> Option<usize> {
        self.counters.add(Counter::compare_requests, 1);
        let decision = self.decide(b, a, len, &hints, true);
        let (ticket, engine_len) = self.start_op(Op::Compare { a, b }, len, &decision, &hints);
        // SAFETY: the CPU's part lies past the engine's, inside both ranges.
        let cpu = unsafe {
            self.persist
                .compare(a.add(engine_len), b.add(engine_len), len - engine_len)
        }
        .map(|i| engine_len + i);
        let mut first = cpu;
        if let Some(mut t) = ticket {
            let o = t.wait(self.wait_spin);
            let done = (o.bytes_completed as usize).min(engine_len);
            self.counters
                .add(Counter::compare_engine_bytes, done as u64);
            let engine = if o.status == Status::Mismatch {
                Some(done)
            } else if done < engine_len {
                self.counters
                    .add(Counter::repaired_bytes, (engine_len - done) as u64);
                // SAFETY: the engine's unfinished tail, inside both ranges.
                unsafe {
                    self.persist
                        .compare(a.add(done), b.add(done), engine_len - done)
                }
                .map(|i| done + i)
            } else {
                None
            };
            // The engine's part comes first: a difference there is the first one.
            first = engine.or(cpu);
        }
        self.release(&decision);
        first
    }

    /// Submits the engine's part of `op` (the first bytes of its `len`) as `decision` says:
    /// the ticket and the part's length, or `(None, 0)` for the CPU path or a refused batch.
    fn start_op(
        &self,
        op: Op,
        len: usize,
        decision: &Decision,
        hints: &Hints,
    ) -> (Option<Ticket>, usize) {
        let (channel, engine_len) = match decision.path {
            Path::Cpu => return (None, 0),
            Path::Engine { channel } => (channel, len),
            Path::Split {
                channel,
                engine_bytes,
                ..
            } => (channel, engine_bytes.min(len)),
        };
        if engine_len == 0 {
            return (None, 0);
        }
        let flags = match (hints.durable, hints.direction) {
            (true, _) => Flags::DURABLE,
            (false, Direction::ToSlow) => Flags::NONE,
            _ => Flags::CACHE_CONTROL,
        };
        let (batch, ticket) = Batch::new(vec![Descriptor {
            op,
            len: engine_len,
            flags,
        }]);
        // SAFETY: the buffers are the caller's for the whole call (fill_raw's and
        // compare_raw's contracts), which waits for the ticket before returning.
        match unsafe { self.engine.try_submit(channel, batch) } {
            Ok(_) => (Some(ticket), engine_len),
            Err(_) => {
                self.counters.add(Counter::fallback_queue_full, 1);
                (None, 0)
            }
        }
    }
}

/// The CPU kernels' mode for a request with `hints` (as the engine's flags above).
fn cpu_mode(hints: &Hints) -> CopyMode {
    match (hints.durable, hints.direction) {
        (true, _) => CopyMode::Durable,
        (false, Direction::ToSlow) => CopyMode::NonTemporal,
        _ => CopyMode::Temporal,
    }
}
