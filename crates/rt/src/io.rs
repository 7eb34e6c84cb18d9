//! Copies through the mover as futures.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use switchyard_engine::Probe;
use switchyard_mover::{Hints, Mover, Report, Transfer};

use crate::executor;

/// Starts a copy of `len` bytes from `src` to `dst` through `mover` and returns a future of
/// its [`Report`]. Requests the mover keeps on the CPU are copied before this returns; the
/// future of an engine copy is ready once the engine finished it (and the mover repaired any
/// partial completion).
///
/// # Safety
/// As [`Mover::submit`]: `src` valid for reads and `dst` for writes of `len` bytes, not
/// overlapping, and `dst` not accessed by anyone else until the future completes or is dropped
/// (dropping waits for the copy). Leaking the future (`mem::forget`) while the copy is pending
/// leaves the engine writing into `dst`.
pub unsafe fn copy<'m>(
    mover: &'m Mover,
    dst: *mut u8,
    src: *const u8,
    len: usize,
    hints: Hints,
) -> Copy<'m> {
    // SAFETY: forwarded from this function's contract.
    let transfer = unsafe { mover.submit(dst, src, len, hints) };
    // Not computed for copies the CPU already finished.
    let expected_ns = if transfer.probe().is_some() {
        mover.expected_finish(hints.direction, len)
    } else {
        0
    };
    Copy {
        transfer: Some(transfer),
        expected_ns,
    }
}

/// A copy in progress (see [`copy`]).
pub struct Copy<'m> {
    transfer: Option<Transfer<'m>>,
    expected_ns: u64,
}

impl Future for Copy<'_> {
    type Output = Report;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Report> {
        let expected_ns = self.expected_ns;
        let t = self
            .transfer
            .as_mut()
            .expect("a Copy polled after it completed");
        if t.poll() {
            let t = self.transfer.take().expect("checked above");
            // Complete: `wait` returns the report without blocking.
            return Poll::Ready(t.wait());
        }
        let probe = t
            .probe()
            .expect("an unfinished transfer has an engine part");
        wake_when_finished(probe, expected_ns, cx.waker());
        Poll::Pending
    }
}

/// Arranges for `waker` to be woken once the batch behind `probe` has finished: by the
/// [`Executor`](crate::Executor) running this thread, which checks it between tasks (and parks
/// until `expected_ns` at most); elsewhere (tokio, …) by the engine's worker when it finishes
/// the batch; and if the batch already finished or already has a waiter, at once.
pub fn wake_when_finished(probe: Probe, expected_ns: u64, waker: &Waker) {
    match executor::wait_for(probe, expected_ns, waker) {
        Ok(()) => {}
        Err(probe) if probe.register(waker) => {}
        Err(_) => waker.wake_by_ref(),
    }
}
