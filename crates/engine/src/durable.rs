//! Durable completion records: a channel's completion record kept in persistent memory, so that
//! after a crash the owner of the memory can tell which batches finished (EasyIO §4.2).
//!
//! A batch may name a [`DurableRecord`], one 64-byte line in persistent memory (DSA's
//! completion-record address, placed in the persistent region). After the batch's data is
//! durable, the worker stores the batch's **sequence number plus one** into the line's `seq`
//! word and makes it durable, *before* it publishes the completion anywhere else. Batches of a
//! channel finish in queue order, so a line's `seq` only grows, and `seq > p` means every
//! batch at position `p` or earlier that named this line has finished.
//!
//! ```text
//!  offset  field
//!  0       seq u64      (position + 1) of the latest finished batch that named this line
//!  8       holes [u64; 6]  (position + 1) of finished batches whose data is NOT complete
//!  56      reserved u64
//! ```
//!
//! **Holes.** A batch that ends other than [`Status::Success`] (partial, error, cancelled)
//! left its data incomplete; the submitter completes it on the CPU. Before advancing `seq` past
//! such a batch the worker records it in a free hole word, and the submitter clears the hole
//! (durably) once its repair is durable. So "position `p` is complete" is
//! `seq > p && p + 1 ∉ holes` ([`RecordImage::covers`]). If all six hole words are taken the
//! worker waits for a submitter to clear one; repairs need no engine work, so this ends.
//! A submitter that cancels a batch naming a durable record must wait until the channel's
//! (volatile) record has passed the batch before it clears the hole the worker writes for it.
//!
//! **Wraparound.** The positions are the ring's: each packs the ring's lap counter with the
//! slot index (`lap × capacity + index`, see `ring.rs`), which is the counter EasyIO adds
//! beside the completion buffer's wrapping address. A 64-bit position wraps after 2^64 batches.

use switchyard_media::Persist;

use crate::completion::Status;

/// Bytes of one durable record.
pub const RECORD_BYTES: usize = 64;
/// Hole words per record.
pub const HOLES: usize = 6;

/// One durable completion record line (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct DurableRecord {
    line: *mut u64,
}

// SAFETY: the line is persistent memory the creator promised stays mapped while batches name it
// (DurableRecord::new); the worker and the submitter only touch it with 8-byte atomic stores and
// loads.
unsafe impl Send for DurableRecord {}
// SAFETY: as above.
unsafe impl Sync for DurableRecord {}

impl DurableRecord {
    /// A record at `line`.
    ///
    /// # Safety
    /// `line` must be 64-byte aligned, valid for reads and writes of [`RECORD_BYTES`] bytes
    /// until every batch naming this record has finished, and written by no one but the engine
    /// (the `seq` and hole words) and [`DurableRecord::clear_hole`].
    pub unsafe fn new(line: *mut u8) -> DurableRecord {
        assert!(
            (line as usize).is_multiple_of(RECORD_BYTES),
            "durable record must be 64-byte aligned"
        );
        DurableRecord { line: line.cast() }
    }

    fn word(&self, i: usize) -> *mut u64 {
        debug_assert!(i < RECORD_BYTES / 8);
        // SAFETY: inside the 64-byte line (i < 8).
        unsafe { self.line.add(i) }
    }

    fn load(&self, i: usize) -> u64 {
        // SAFETY: the line is valid and aligned (new's contract); concurrent writers use
        // atomic 8-byte stores.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.word(i)) }
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The record as it stands now.
    pub fn image(&self) -> RecordImage {
        let mut holes = [0u64; HOLES];
        for (k, h) in holes.iter_mut().enumerate() {
            *h = self.load(1 + k);
        }
        RecordImage {
            seq: self.load(0),
            holes,
        }
    }

    /// Worker: records that the batch at `position` finished with `status`; durable on return.
    pub(crate) fn finished(&self, p: &Persist, position: u64, status: Status) {
        if status != Status::Success {
            let k = loop {
                if let Some(k) = (0..HOLES).find(|&k| self.load(1 + k) == 0) {
                    break k;
                }
                std::thread::yield_now();
            };
            // SAFETY: inside the line, aligned; only the worker sets hole words.
            unsafe { p.store_u64(self.word(1 + k), position + 1) };
            p.flush(self.word(1 + k).cast(), 8);
            p.fence();
        }
        // SAFETY: as above; only the worker writes `seq`.
        unsafe { p.store_u64(self.word(0), position + 1) };
        p.persist(self.word(0).cast(), 8);
    }

    /// Submitter: the data of the batch at `position` is now complete and durable (repaired on
    /// the CPU and fenced); clears its hole, durably. Does nothing if it has none.
    pub fn clear_hole(&self, p: &Persist, position: u64) {
        for k in 0..HOLES {
            if self.load(1 + k) == position + 1 {
                // SAFETY: inside the line, aligned; this hole word is ours to clear (the worker
                // writes only zero hole words).
                unsafe { p.store_u64(self.word(1 + k), 0) };
                p.persist(self.word(1 + k).cast(), 8);
            }
        }
    }
}

/// A durable record as read back (from a live line or a crash image).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordImage {
    /// (position + 1) of the latest finished batch that named the record; 0 before any.
    pub seq: u64,
    /// (position + 1) of finished batches whose data is incomplete; 0 = free word.
    pub holes: [u64; HOLES],
}

impl RecordImage {
    /// Decodes the first [`RECORD_BYTES`] of `b` (little-endian words).
    pub fn decode(b: &[u8]) -> RecordImage {
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let mut holes = [0u64; HOLES];
        for (k, h) in holes.iter_mut().enumerate() {
            *h = w(1 + k);
        }
        RecordImage { seq: w(0), holes }
    }

    /// Whether the batch at `position` finished with its data complete.
    pub fn covers(&self, position: u64) -> bool {
        self.seq > position && !self.holes.contains(&(position + 1))
    }
}
