//! # switchyard-rt — the asynchronous runtime (EasyIO §4.1)
//!
//! A task that moves data to or from slow memory should not stall while the engine copies:
//! it yields, the runtime runs other tasks on the same core, and the task resumes when the
//! engine's completion record says its copy is done. No thread polls on the runtime's behalf
//! and no second call into the mover is needed to learn the outcome.
//!
//! - [`Executor`]: one per core (a thread), running `!Send` tasks. Between tasks it checks
//!   the completion of every outstanding copy (one Acquire load each) and wakes the tasks
//!   whose copies finished. With nothing to run it first **helps**: it copies descriptors from
//!   the tail of an outstanding engine batch while the engine works from its head
//!   ([`switchyard_engine::Probe::help`]), so the core copies instead of idling and the copy
//!   finishes sooner ([`Executor::set_helping`] turns this off). With nothing to help with it
//!   parks until woken when no copy is outstanding, else sleeps until just before the earliest
//!   copy is expected to finish (the engine's worker wakes it sooner if one finishes first) and
//!   spins on the completions from there; it never spins while no copy is outstanding.
//! - [`copy`]: a copy through the [`Mover`](switchyard_mover::Mover) as a future. Requests the
//!   mover keeps on the CPU (below the tuned threshold) complete inline, on the first poll; the
//!   rest go to the engine and the task yields until they finish. A task is never resumed
//!   before its copy is finished: the future returns only after the transfer reports complete.
//!
//! The futures work in any executor. Outside an [`Executor`] the task's waker is handed to the
//! engine with the batch ([`switchyard_engine::Probe::register`]) and the engine's worker wakes
//! it when the batch finishes: no polling. One waiter per batch: a second registration falls
//! back to asking to be polled again ([`wake_when_finished`]). The store's asynchronous API
//! (`switchyard_store::ReadFuture`, `WriteFuture`) is built on the same two calls.
//!
//! No work stealing: tasks are `!Send` (they own per-core state and borrow buffers), and an
//! executor's outstanding copies are checked by that executor alone. An application spreads
//! work by running one executor per application core. On the 2-core machines this project
//! is measured on, one core runs the application and the other the engine's worker, so there
//! is no second application core to steal for.

#![warn(missing_docs)]

pub mod config;
mod executor;
mod io;

pub use config::RuntimeConfig;
pub use executor::{spawn, Executor, JoinHandle};
pub use io::{copy, wake_when_finished, Copy};
