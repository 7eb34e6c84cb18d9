//! # switchyard-engine — copy engines behind one contract
//!
//! The contract is modelled on Intel DSA, the most capable on-chip DMA interface, so that
//! hardware engines can plug in later with exactly the same semantics:
//!
//! - [`Descriptor`]s (copy, fill, compare, flush; flags durable, cache-control, fence) grouped
//!   in a [`Batch`] that one channel executes in order;
//! - per-channel **bounded submission queues** with back-pressure ([`SubmitError::Full`]);
//! - a per-batch completion the submitter owns ([`Ticket`]), and a per-channel
//!   [`CompletionRecord`]: a monotonic 64-bit sequence number with the status and
//!   `bytes_completed` of the latest batch. A partial completion ([`Status::Partial`]) is
//!   normal: the submitter finishes the rest;
//! - channels can be suspended and resumed; queue depth can be queried;
//! - a channel can be given a byte budget per epoch ([`Budget`]): once spent, it pauses
//!   between descriptors until the next epoch and keeps accepting work (EasyIO §4.4's
//!   throttling of a bulk channel);
//! - a thread waiting for a batch may **help**: copy descriptors from the batch's tail
//!   while the channel works from its head ([`Probe::help`]); the outcome covers both, and
//!   [`Outcome::helped_bytes`] says how much the helper did. Helping relies on the channel
//!   claiming each descriptor through the batch's completion before executing it, as the
//!   `threads` engine does; DSA executes a batch without asking, so a hardware engine must
//!   keep its batches closed to helpers.
//!
//! The [`threads`] engine (worker threads as channels) implements it and is the default
//! everywhere. The [`dsa`] engine implements it on Intel DSA work queues; it is proven on a
//! device model (feature `testing`), not yet on hardware; the mover selects it with
//! `[engine] kind = "dsa"` or `"auto"` (`switchyard_mover::select`).
//!
//! The protocols shared between threads — the ring, the completion records, the wake word,
//! helping —
//! are model-checked with loom (`RUSTFLAGS="--cfg loom" cargo test -p switchyard-engine
//! --release --lib loom`, as `scripts/test.sh` runs it).

#![warn(missing_docs)]
// Under loom only the protocol modules are built; the threads engine that uses the rest is not.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

pub mod budget;
pub mod clock;
mod completion;
pub mod cpus;
mod descriptor;
#[cfg(not(loom))]
pub mod dsa;
#[cfg(not(loom))]
pub mod durable;
#[cfg(feature = "testing")]
pub mod fault;
mod ring;
mod sync;
#[cfg(not(loom))]
pub mod threads;
mod wake;

pub use budget::Budget;
pub use completion::{CompletionRecord, Outcome, Probe, RecordSnapshot, Status, Ticket};
pub use descriptor::{Batch, Descriptor, Flags, Op};
#[cfg(not(loom))]
pub use durable::{DurableRecord, RecordImage};
#[cfg(feature = "testing")]
pub use fault::FaultPlan;
#[cfg(not(loom))]
pub use threads::{ThreadsConfig, ThreadsEngine};

/// What an engine is and can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineInfo {
    /// Short name for reports ("threads", "dsa", …).
    pub name: &'static str,
    /// Number of channels.
    pub channels: usize,
    /// Capacity of each channel's submission queue, in batches.
    pub queue_depth: usize,
    /// Largest descriptor the mover should build (page size for engines that need
    /// page-bounded descriptors).
    pub descriptor_bytes: usize,
    /// Whether the engine's channels run on the same CPU cores as the application (helper
    /// threads), so offloading competes with the caller for cores.
    pub uses_cpu_cores: bool,
}

/// Why a batch was not accepted. The batch is handed back.
pub enum SubmitError {
    /// The channel's queue is full: retry later or copy on the CPU.
    Full(Batch),
    /// The channel is suspended.
    Suspended(Batch),
    /// No such channel.
    NoSuchChannel(Batch),
}

impl SubmitError {
    /// The batch that was not accepted.
    pub fn into_batch(self) -> Batch {
        match self {
            SubmitError::Full(b) | SubmitError::Suspended(b) | SubmitError::NoSuchChannel(b) => b,
        }
    }
}

impl std::fmt::Debug for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SubmitError::Full(_) => "Full",
            SubmitError::Suspended(_) => "Suspended",
            SubmitError::NoSuchChannel(_) => "NoSuchChannel",
        })
    }
}

/// A copy engine.
pub trait Engine: Send + Sync {
    /// What it is.
    fn info(&self) -> EngineInfo;

    /// Queues `batch` on `channel` without blocking; returns its position (sequence number) in
    /// the channel's order.
    ///
    /// # Safety
    /// Every buffer named by the batch's descriptors must stay valid for the described length,
    /// and destinations must not be read or written by anyone else, until the batch's ticket
    /// reports an outcome (done or cancelled).
    unsafe fn try_submit(&self, channel: usize, batch: Batch) -> Result<u64, SubmitError>;

    /// Batches submitted to `channel` and not yet finished.
    fn queue_depth(&self, channel: usize) -> usize;

    /// A consistent reading of `channel`'s completion record.
    fn record(&self, channel: usize) -> RecordSnapshot;

    /// Stops `channel` from starting queued batches and refuses new ones until resumed.
    fn suspend(&self, channel: usize);

    /// Lets a suspended channel run again.
    fn resume(&self, channel: usize);

    /// Whether `channel` is suspended.
    fn is_suspended(&self, channel: usize) -> bool;

    /// Limits the bytes `channel` starts per epoch ([`Budget`]), or lifts the limit (`None`).
    /// A channel whose epoch budget is spent pauses between descriptors until the next epoch
    /// and keeps accepting submissions (unlike [`Engine::suspend`]). Returns whether the
    /// engine enforces budgets; one that does not ignores the call.
    fn set_budget(&self, channel: usize, budget: Option<Budget>) -> bool {
        let _ = (channel, budget);
        false
    }

    /// Moves the time `channel`'s budget lapses ([`Budget::lapses_ns`]) to `lapses_ns`,
    /// keeping its bytes and epoch; nothing without a budget.
    fn renew_budget(&self, channel: usize, lapses_ns: u64) {
        let _ = (channel, lapses_ns);
    }

    /// `channel`'s budget as set (lapsed or not).
    fn budget(&self, channel: usize) -> Option<Budget> {
        let _ = channel;
        None
    }

    /// The CPU `channel`'s worker is pinned to, for an engine whose channels are threads on
    /// the application's cores; `None` otherwise. A caller on that CPU that polls for its
    /// copy keeps the worker from running it.
    fn worker_cpu(&self, channel: usize) -> Option<usize> {
        let _ = channel;
        None
    }

    /// How often and how long `channel` paused for its budget.
    fn pauses(&self, channel: usize) -> Pauses {
        let _ = channel;
        Pauses::default()
    }
}

/// A channel's pauses for its budget ([`Engine::set_budget`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pauses {
    /// Epochs in which the channel paused.
    pub epochs: u64,
    /// Nanoseconds it spent paused.
    pub ns: u64,
}

#[cfg(all(test, loom))]
mod loom_tests;
