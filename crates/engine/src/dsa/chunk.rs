//! How a contract [`Batch`] becomes hardware submissions, and how their completion records
//! become the batch's outcome.
//!
//! The batch's descriptors are cut into **pieces** of at most the queue's maximum transfer size
//! (zero-length descriptors have none: they are done by definition). Consecutive pieces form
//! **chunks** of at most the queue's maximum batch size: a chunk of one piece is submitted as
//! that work descriptor, a longer one as a DSA batch descriptor over a 64-byte-aligned list.
//! Each piece has its own completion record, so the outcome is exact: the batch's
//! `bytes_completed` is the prefix of pieces, in order, up to the first that did not succeed,
//! plus what that one completed (DSA may have run later pieces of the chunk too; the contract
//! hands everything after the prefix back to the submitter, who redoes it).
//!
//! Chunks of one batch run one after another (the next is submitted once the previous one's
//! record is written, and not at all after a failure), so a fence or a difference in one chunk
//! orders or stops the later ones as the contract says.

use crate::completion::Status;
use crate::descriptor::{Batch, Descriptor, Flags};
use crate::dsa::descriptor::{self as hw, flag, status, HwCompletion, HwDesc};

/// A piece: `len` bytes of descriptor `index` from `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub index: usize,
    pub offset: usize,
    pub len: u32,
}

/// The pieces of `descriptors[..front]` for a queue whose transfers are at most `max` bytes.
pub(crate) fn pieces(descriptors: &[Descriptor], front: usize, max: u64) -> Vec<Piece> {
    let max = max.clamp(1, u64::from(u32::MAX)) as usize;
    let mut out = Vec::new();
    for (index, d) in descriptors[..front].iter().enumerate() {
        let mut offset = 0;
        while offset < d.len {
            let len = (d.len - offset).min(max);
            out.push(Piece {
                index,
                offset,
                len: len as u32,
            });
            offset += len;
        }
    }
    out
}

/// One hardware submission in flight: its descriptors and records, which must not move or be
/// freed until its final record is written (boxed slices: moving the chunk moves no record).
pub(crate) struct Chunk {
    /// The pieces it covers.
    pub pieces: Vec<Piece>,
    descs: Box<[HwDesc]>,
    records: Box<[HwCompletion]>,
    /// The batch descriptor's record (chunks of two or more pieces).
    batch_record: Box<HwCompletion>,
}

impl Chunk {
    /// Encodes `pieces` of `batch`.
    pub(crate) fn new(batch: &Batch, pieces: Vec<Piece>) -> Chunk {
        let records: Box<[HwCompletion]> = pieces.iter().map(|_| HwCompletion::default()).collect();
        let single = pieces.len() == 1;
        let mut after_compare = false;
        let descs = pieces
            .iter()
            .zip(records.iter())
            .map(|(p, r)| {
                let d = &batch.descriptors()[p.index];
                let mut h = hw::encode(d, p.offset, p.len, r);
                // A fence orders within a DSA batch only; a lone descriptor has nothing before
                // it (the previous chunk finished first), and the first piece of a cut
                // descriptor carries the descriptor's fence. Every piece after a compare is
                // fenced, so a difference (flag CR) abandons the rest, as the contract's
                // "a difference ends the batch" says.
                let fenced = (d.flags.contains(Flags::FENCE) && p.offset == 0) || after_compare;
                if single || !fenced {
                    h.flags_opcode &= !flag::FENCE;
                } else {
                    h.flags_opcode |= flag::FENCE;
                }
                after_compare |= h.opcode() == hw::opcode::COMPARE;
                h
            })
            .collect();
        Chunk {
            pieces,
            descs,
            records,
            batch_record: Box::default(),
        }
    }

    /// The descriptor to hand to the portal.
    pub(crate) fn submission(&self) -> HwDesc {
        if self.descs.len() == 1 {
            self.descs[0]
        } else {
            hw::encode_batch(
                self.descs.as_ptr(),
                self.descs.len() as u32,
                &*self.batch_record,
            )
        }
    }

    /// The record the device writes last for this chunk.
    pub(crate) fn final_record(&self) -> &HwCompletion {
        if self.descs.len() == 1 {
            &self.records[0]
        } else {
            &self.batch_record
        }
    }

    /// Whether the device has finished the chunk (its final record is written).
    pub(crate) fn finished(&self) -> bool {
        self.final_record().written().is_some()
    }

    /// The chunk's outcome once [`Chunk::finished`]: `Success` and its bytes, or the status
    /// and bytes of the prefix up to the first piece that did not succeed.
    pub(crate) fn outcome(&self) -> (Status, u64) {
        if self.descs.len() > 1 {
            let code = self.batch_record.written().unwrap_or(status::NONE);
            if code != status::SUCCESS && code != status::BATCH_FAIL {
                // The batch descriptor itself was refused: nothing ran.
                return (Status::Error, 0);
            }
        }
        let mut done = 0u64;
        for (i, p) in self.pieces.iter().enumerate() {
            let r = &self.records[i];
            let Some(code) = r.written() else {
                return (Status::Error, done);
            };
            let opcode = self.descs[i].opcode();
            let d = hw::decode(code, r, opcode, u64::from(p.len));
            if d.status != Status::Success {
                return (d.status, done + d.bytes);
            }
            done += u64::from(p.len);
        }
        (Status::Success, done)
    }
}
