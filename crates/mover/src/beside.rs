//! A fact the caller's runtime supplies: how many other tasks the calling thread could run
//! while one of its tasks waits on a copy.
//!
//! An asynchronous copy sent to an engine slower than the CPU (a starved helper thread, a
//! busy device) makes the task that waits on it slower than copying would; it pays only when
//! the core has other work meanwhile. The mover cannot see the caller's run queue, so the
//! runtime says ([`set_tasks_beside`], per thread, before it polls a task) and the decision
//! reads it ([`Mover::decide`](crate::Mover::decide)). A thread no runtime describes has
//! none: its asynchronous copies go to a slower engine only as probes.

use std::cell::Cell;

thread_local!(static BESIDE: Cell<u32> = const { Cell::new(0) });

/// Says that the calling thread can run `n` other tasks while the task it is about to poll
/// waits on a copy (an executor calls this before each poll; 0 when it runs one task).
#[inline]
pub fn set_tasks_beside(n: usize) {
    BESIDE.with(|b| b.set(n.min(u32::MAX as usize) as u32));
}

/// What the calling thread's runtime last said ([`set_tasks_beside`]); 0 if nothing.
#[inline]
pub(crate) fn tasks_beside() -> u32 {
    BESIDE.with(Cell::get)
}
