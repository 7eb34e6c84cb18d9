//! Work descriptors, modelled on Intel DSA's: an operation, a length and flags. A [`Batch`]
//! is an ordered list of descriptors executed by one channel, with one completion.

use crate::completion::{Completion, Ticket};
use crate::sync::Arc;

/// What a descriptor does. Pointers are raw because engines run outside the borrow checker's
/// view; see [`crate::Engine::try_submit`] for the validity contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Copy `len` bytes from `src` to `dst` (the ranges must not overlap).
    Copy {
        /// Destination.
        dst: *mut u8,
        /// Source.
        src: *const u8,
    },
    /// Fill `len` bytes at `dst` with the little-endian 8-byte `pattern`, repeated.
    Fill {
        /// Destination.
        dst: *mut u8,
        /// The pattern.
        pattern: u64,
    },
    /// Compare `len` bytes at `a` and `b`; a difference ends the batch with
    /// [`crate::Status::Mismatch`] and `bytes_completed` at the first differing byte.
    Compare {
        /// First operand.
        a: *const u8,
        /// Second operand.
        b: *const u8,
    },
    /// Write back every cache line of `[addr, addr + len)`.
    Flush {
        /// First byte.
        addr: *const u8,
    },
}

/// Descriptor flags (bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Flags(u8);

impl Flags {
    /// The destination is durable (streamed or flushed, then fenced) before completion.
    pub const DURABLE: Flags = Flags(1);
    /// Write the destination into the CPU cache (DSA's cache-control bit); without it,
    /// non-durable writes bypass the cache.
    pub const CACHE_CONTROL: Flags = Flags(2);
    /// Order this descriptor after every earlier descriptor of the batch (a store fence before
    /// it starts).
    pub const FENCE: Flags = Flags(4);
    /// No flags.
    pub const NONE: Flags = Flags(0);

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, o: Flags) -> Flags {
        Flags(self.0 | o.0)
    }
}

/// One unit of engine work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// The operation.
    pub op: Op,
    /// Bytes it covers.
    pub len: usize,
    /// Flags.
    pub flags: Flags,
}

#[cfg(not(loom))]
impl Descriptor {
    /// The copy kernel mode its flags ask for.
    pub(crate) fn mode(&self) -> switchyard_media::CopyMode {
        use switchyard_media::CopyMode;
        if self.flags.contains(Flags::DURABLE) {
            CopyMode::Durable
        } else if self.flags.contains(Flags::CACHE_CONTROL) {
            CopyMode::Temporal
        } else {
            CopyMode::NonTemporal
        }
    }

    /// Executes the first `len <= self.len` bytes with `p`'s kernels; `Some(offset)` of the
    /// first difference a compare found. A `FENCE` flag is the caller's to honour.
    ///
    /// # Safety
    /// The buffers it names must be valid for `len` bytes, not overlapping, and not accessed by
    /// others meanwhile ([`crate::Engine::try_submit`]'s contract).
    pub(crate) unsafe fn execute(
        &self,
        p: &switchyard_media::Persist,
        len: usize,
    ) -> Option<usize> {
        // SAFETY: forwarded from this function's contract.
        unsafe {
            match self.op {
                Op::Copy { dst, src } => p.copy(dst, src, len, self.mode()),
                Op::Fill { dst, pattern } => p.fill(dst, pattern, len, self.mode()),
                Op::Compare { a, b } => return p.compare(a, b, len),
                Op::Flush { addr } => {
                    p.flush(addr, len);
                    if self.flags.contains(Flags::DURABLE) {
                        p.fence();
                    }
                }
            }
        }
        None
    }
}

/// An ordered list of descriptors, executed in order by one channel.
///
/// Completion is a *prefix*: `bytes_completed` counts bytes of the descriptors in order, so a
/// partial completion names exactly where the submitter must resume.
pub struct Batch {
    /// The completion, which also holds the descriptors (helpers reach them through it).
    pub(crate) completion: Arc<Completion>,
    /// Where the worker records this batch's completion durably, if anywhere.
    #[cfg(not(loom))]
    pub(crate) durable: Option<crate::durable::DurableRecord>,
    /// Whether the engine notes that its submitter runs on the worker's core
    /// ([`Batch::waited_for_beside`]).
    pub(crate) note_core: bool,
}

// SAFETY: the raw pointers in the descriptors are only dereferenced by the engine under the
// contract of `Engine::try_submit`: the submitter keeps every buffer valid and unaliased until
// the batch's ticket reports done or cancelled.
unsafe impl Send for Batch {}

impl Batch {
    /// A batch over `descriptors`, and the ticket its submitter keeps to learn the outcome.
    pub fn new(descriptors: Vec<Descriptor>) -> (Batch, Ticket) {
        let completion = Arc::new(Completion::new(descriptors));
        let ticket = Ticket::new(completion.clone());
        (
            Batch {
                completion,
                #[cfg(not(loom))]
                durable: None,
                note_core: false,
            },
            ticket,
        )
    }

    /// Total bytes of all descriptors.
    pub fn len(&self) -> usize {
        self.completion.descriptors.iter().map(|d| d.len).sum()
    }

    /// Whether the batch covers no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes the worker record this batch's completion in `record` once its data is durable,
    /// before the completion is published (see [`crate::durable`]).
    #[cfg(not(loom))]
    pub fn with_durable_record(mut self, record: crate::durable::DurableRecord) -> Batch {
        self.completion.forbid_help();
        self.durable = Some(record);
        self
    }

    /// Keeps helpers ([`crate::Probe::help`]) away from this batch: only the engine executes
    /// it (a throttled tenant's work must not move to a waiting CPU).
    pub fn closed_to_helpers(self) -> Batch {
        self.completion.forbid_help();
        self
    }

    /// Has a helper-thread engine note, at submission, whether the submitter runs on the core
    /// its worker is pinned to (a `sched_getcpu`, about 20 ns): for a caller that waits for
    /// the batch with its latency at stake. A worker that finishes such a batch from its own
    /// core yields that core once before idling, so the caller, preempted there while it
    /// waited, does not wait through the worker's idle spin.
    pub fn waited_for_beside(mut self) -> Batch {
        self.note_core = true;
        self
    }

    /// The descriptors in execution order.
    pub fn descriptors(&self) -> &[Descriptor] {
        &self.completion.descriptors
    }
}
