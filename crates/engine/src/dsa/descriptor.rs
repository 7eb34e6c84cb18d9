//! The hardware formats of Intel DSA as Linux's `include/uapi/linux/idxd.h` declares them: the
//! 64-byte work descriptor, the 32-byte completion record, opcodes, flags and status codes, and
//! the translation of the contract's [`crate::Descriptor`]s into work descriptors.
//!
//! ```text
//!  work descriptor (64 bytes, 64-byte aligned)
//!  offset  size  field
//!  0       4     pasid:20 | reserved:11 | priv:1      (0 from user space: the portal or
//!                                                       ENQCMD supplies the PASID)
//!  4       4     flags:24 | opcode:8
//!  8       8     completion record address            (32-byte aligned)
//!  16      8     source / fill pattern / descriptor list address
//!  24      8     destination / second source
//!  32      4     transfer size / descriptor count
//!  36      2     interrupt handle                      (0: no interrupts are requested)
//!  38      2     reserved
//!  40      24    operation specific (compare: expected result at 40), else reserved
//!
//!  completion record (32 bytes, 32-byte aligned)
//!  0       1     status (0 until the device writes the record; written last)
//!  1       1     result (compare: 0 equal, 1 different)
//!  2       1     fault info (bit 0: the fault was on a write; bit 1: in a batch's list)
//!  3       1     reserved
//!  4       4     bytes completed (batch: descriptors completed)
//!  8       8     fault address
//!  16      16    operation specific (invalid flags for status INVALID_FLAGS)
//! ```

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::completion::Status;
use crate::descriptor::{Descriptor, Flags, Op};

/// Opcodes (`enum dsa_opcode`).
pub mod opcode {
    /// No operation.
    pub const NOOP: u8 = 0x00;
    /// A list of descriptors executed as one submission.
    pub const BATCH: u8 = 0x01;
    /// Completes when every earlier descriptor of the queue's submitter has completed.
    pub const DRAIN: u8 = 0x02;
    /// Copy (overlap allowed).
    pub const MEMMOVE: u8 = 0x03;
    /// Fill with an 8-byte pattern.
    pub const MEMFILL: u8 = 0x04;
    /// Compare two buffers.
    pub const COMPARE: u8 = 0x05;
    /// Write back (and evict) the cache lines of a range.
    pub const CFLUSH: u8 = 0x20;
}

/// Descriptor flags (`IDXD_OP_FLAG_*`).
pub mod flag {
    /// In a batch: wait for every earlier descriptor of the batch; abandon this one and the
    /// rest if one of them failed (or, with [`CR`], found a nonzero result).
    pub const FENCE: u32 = 0x0001;
    /// Block on fault: the device waits for a page fault to be resolved instead of ending the
    /// operation early. Valid only on queues configured with `block_on_fault`; never set here,
    /// so a fault is a partial completion.
    pub const BOF: u32 = 0x0002;
    /// The completion record address is valid.
    pub const CRAV: u32 = 0x0004;
    /// Request a completion record.
    pub const RCR: u32 = 0x0008;
    /// Request a completion interrupt.
    pub const RCI: u32 = 0x0010;
    /// Completion record status only.
    pub const CRSTS: u32 = 0x0020;
    /// Check result: a nonzero result (a compare that found a difference) counts as a failure
    /// for a later fenced descriptor of the batch.
    pub const CR: u32 = 0x0080;
    /// Cache control: write the destination into the cache (else to memory).
    pub const CC: u32 = 0x0100;
    /// Strict ordering of the destination writes.
    pub const STORD: u32 = 0x2000;
    /// Destination readback: read the destination after writing it, before completing, so
    /// the writes have reached the memory's persistence domain.
    pub const DRDBK: u32 = 0x4000;
    /// Every flag DSA 1.0 defines (others are reserved).
    pub const DEFINED: u32 = 0xffbf;
}

/// Completion status codes (`enum dsa_completion_status`), without the write bit.
pub mod status {
    /// Not yet written.
    pub const NONE: u8 = 0x00;
    /// Success.
    pub const SUCCESS: u8 = 0x01;
    /// A page fault ended the operation early (block on fault off): `bytes_completed` done,
    /// `fault_addr` faulted.
    pub const PAGE_FAULT_NOBOF: u8 = 0x03;
    /// A page fault with an interrupt request ended the operation early.
    pub const PAGE_FAULT_IR: u8 = 0x04;
    /// A batch in which a descriptor failed (or was abandoned).
    pub const BATCH_FAIL: u8 = 0x05;
    /// A page fault reading a batch's descriptor list.
    pub const BATCH_PAGE_FAULT: u8 = 0x06;
    /// Unknown or disallowed opcode (a batch or drain inside a batch).
    pub const BAD_OPCODE: u8 = 0x10;
    /// A reserved or disallowed flag.
    pub const INVALID_FLAGS: u8 = 0x11;
    /// A reserved field is not zero.
    pub const NOZERO_RESERVE: u8 = 0x12;
    /// Transfer size zero or above the queue's maximum.
    pub const XFER_ERANGE: u8 = 0x13;
    /// Batch descriptor count below 2 or above the queue's maximum.
    pub const DESC_CNT_ERANGE: u8 = 0x14;
    /// Descriptor list not 64-byte aligned.
    pub const DESCLIST_ALIGN: u8 = 0x18;
    /// Completion record address not 32-byte aligned.
    pub const CRA_ALIGN: u8 = 0x1a;
    /// The privilege bit is set on a user queue.
    pub const PRIV_BAD: u8 = 0x17;
    /// Mask of the status code in the status byte.
    pub const MASK: u8 = 0x7f;
}

/// A DSA work descriptor (`struct dsa_hw_desc`).
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HwDesc {
    /// pasid:20, reserved:11, priv:1.
    pub pasid_priv: u32,
    /// flags:24 (low bits), opcode:8 (high byte).
    pub flags_opcode: u32,
    /// Completion record address.
    pub completion_addr: u64,
    /// Source, fill pattern or descriptor list.
    pub src: u64,
    /// Destination or second source.
    pub dst: u64,
    /// Transfer size or descriptor count.
    pub size: u32,
    /// Interrupt handle.
    pub int_handle: u16,
    /// Reserved, zero.
    pub rsvd1: u16,
    /// Operation-specific bytes (compare: the expected result at 0).
    pub op_specific: [u8; 24],
}

const _: () = assert!(std::mem::size_of::<HwDesc>() == 64);
const _: () = assert!(std::mem::align_of::<HwDesc>() == 64);
const _: () = assert!(std::mem::offset_of!(HwDesc, size) == 32);
const _: () = assert!(std::mem::offset_of!(HwDesc, op_specific) == 40);

impl HwDesc {
    /// A descriptor with `opcode` and `flags` and every other field zero.
    pub fn new(opcode: u8, flags: u32) -> HwDesc {
        HwDesc {
            flags_opcode: (flags & 0x00ff_ffff) | (u32::from(opcode) << 24),
            ..HwDesc::default()
        }
    }

    /// The opcode.
    pub fn opcode(&self) -> u8 {
        (self.flags_opcode >> 24) as u8
    }

    /// The flags.
    pub fn flags(&self) -> u32 {
        self.flags_opcode & 0x00ff_ffff
    }

    /// The descriptor as the 64 bytes a portal receives.
    pub fn as_bytes(&self) -> &[u8; 64] {
        // SAFETY: HwDesc is repr(C), 64 bytes (asserted above), without padding (every field
        // is an integer and the offsets are asserted), so all 64 bytes are initialised.
        unsafe { &*(self as *const HwDesc).cast::<[u8; 64]>() }
    }
}

/// A DSA completion record (`struct dsa_completion_record`), written by the device while the
/// submitter may be reading it: every field is an atomic of the C field's size (the same
/// layout), so the record is shared memory without data races.
#[repr(C, align(32))]
#[derive(Debug, Default)]
pub struct HwCompletion {
    /// Status; nonzero once the record is written (the device writes it last).
    pub status: AtomicU8,
    /// Result (compare: 0 equal, 1 different).
    pub result: AtomicU8,
    /// Fault information.
    pub fault_info: AtomicU8,
    /// Reserved.
    pub rsvd: AtomicU8,
    /// Bytes completed (a batch: descriptors completed).
    pub bytes_completed: AtomicU32,
    /// The faulting address.
    pub fault_addr: AtomicU64,
    /// Operation specific (invalid flags for INVALID_FLAGS).
    pub op_specific: [AtomicU32; 4],
}

const _: () = assert!(std::mem::size_of::<HwCompletion>() == 32);
const _: () = assert!(std::mem::align_of::<HwCompletion>() == 32);
const _: () = assert!(std::mem::offset_of!(HwCompletion, bytes_completed) == 4);
const _: () = assert!(std::mem::offset_of!(HwCompletion, fault_addr) == 8);

impl HwCompletion {
    /// The status code once the device wrote the record (Acquire: the other fields are then
    /// visible), `None` before.
    pub fn written(&self) -> Option<u8> {
        let s = self.status.load(Ordering::Acquire) & status::MASK;
        (s != status::NONE).then_some(s)
    }
}

/// What one work descriptor's completion record means for the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// The contract status: `Success` when the whole descriptor is done.
    pub status: Status,
    /// Bytes of the descriptor done (a prefix).
    pub bytes: u64,
}

/// Maps a written completion record of a descriptor of `len` bytes to the contract: success
/// (a compare with a nonzero result is a [`Status::Mismatch`] at `bytes_completed`), a page
/// fault without blocking is [`Status::Partial`] with `bytes_completed` done, anything else is
/// [`Status::Error`] with nothing counted as done. The faulting address stays in the record:
/// the contract's outcome needs only the prefix, which says where the submitter resumes.
pub fn decode(code: u8, record: &HwCompletion, opcode: u8, len: u64) -> Decoded {
    let bytes = u64::from(record.bytes_completed.load(Ordering::Relaxed)).min(len);
    match code {
        status::SUCCESS
            if opcode == opcode::COMPARE && record.result.load(Ordering::Relaxed) != 0 =>
        {
            Decoded {
                status: Status::Mismatch,
                bytes,
            }
        }
        status::SUCCESS => Decoded {
            status: Status::Success,
            bytes: len,
        },
        status::PAGE_FAULT_NOBOF | status::PAGE_FAULT_IR => Decoded {
            status: Status::Partial,
            bytes,
        },
        _ => Decoded {
            status: Status::Error,
            bytes: 0,
        },
    }
}

/// The work descriptor for `len` bytes of `d` starting `offset` bytes into it, reporting to
/// `record`. Always requests a completion record and never blocks on faults; the contract's
/// flags map to `DRDBK` (durable), `CC` (cache control) and `FENCE`; a compare carries `CR`, so
/// a difference also abandons a later fenced descriptor of its batch as the contract's
/// "a difference ends the batch" asks.
pub fn encode(d: &Descriptor, offset: usize, len: u32, record: *const HwCompletion) -> HwDesc {
    let mut f = flag::CRAV | flag::RCR;
    if d.flags.contains(Flags::FENCE) {
        f |= flag::FENCE;
    }
    let writes = !matches!(d.op, Op::Compare { .. } | Op::Flush { .. });
    if writes && d.flags.contains(Flags::DURABLE) {
        f |= flag::DRDBK;
    }
    if writes && d.flags.contains(Flags::CACHE_CONTROL) && !d.flags.contains(Flags::DURABLE) {
        f |= flag::CC;
    }
    let (op, src, dst) = match d.op {
        Op::Copy { dst, src } => (
            opcode::MEMMOVE,
            src as u64 + offset as u64,
            dst as u64 + offset as u64,
        ),
        Op::Fill { dst, pattern } => (
            opcode::MEMFILL,
            pattern.rotate_right(8 * (offset % 8) as u32),
            dst as u64 + offset as u64,
        ),
        Op::Compare { a, b } => {
            f |= flag::CR;
            (
                opcode::COMPARE,
                a as u64 + offset as u64,
                b as u64 + offset as u64,
            )
        }
        Op::Flush { addr } => (opcode::CFLUSH, 0, addr as u64 + offset as u64),
    };
    HwDesc {
        completion_addr: record as u64,
        src,
        dst,
        size: len,
        ..HwDesc::new(op, f)
    }
}

/// A batch descriptor over `count` descriptors at `list` (64-byte aligned), reporting to
/// `record`.
pub fn encode_batch(list: *const HwDesc, count: u32, record: *const HwCompletion) -> HwDesc {
    HwDesc {
        completion_addr: record as u64,
        src: list as u64,
        size: count,
        ..HwDesc::new(opcode::BATCH, flag::CRAV | flag::RCR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_a_memmove_with_a_completion_record_and_no_block_on_fault() {
        let (a, mut b) = ([0u8; 8], [0u8; 8]);
        let rec = HwCompletion::default();
        let d = Descriptor {
            op: Op::Copy {
                dst: b.as_mut_ptr(),
                src: a.as_ptr(),
            },
            len: 8,
            flags: Flags::DURABLE | Flags::FENCE,
        };
        let h = encode(&d, 2, 6, &rec);
        assert_eq!(h.opcode(), opcode::MEMMOVE);
        assert_eq!(
            h.flags(),
            flag::CRAV | flag::RCR | flag::DRDBK | flag::FENCE
        );
        assert_eq!(h.flags() & flag::BOF, 0);
        assert_eq!(h.src, a.as_ptr() as u64 + 2);
        assert_eq!(h.size, 6);
        assert_eq!(h.as_bytes()[32], 6);
        assert_eq!(h.as_bytes()[7], opcode::MEMMOVE);
    }

    #[test]
    fn a_fill_resumed_mid_pattern_keeps_the_pattern_in_phase() {
        let mut b = [0u8; 16];
        let rec = HwCompletion::default();
        let d = Descriptor {
            op: Op::Fill {
                dst: b.as_mut_ptr(),
                pattern: 0x0807_0605_0403_0201,
            },
            len: 16,
            flags: Flags::NONE,
        };
        let h = encode(&d, 3, 13, &rec);
        assert_eq!(h.src.to_le_bytes()[0], 4);
    }

    #[test]
    fn statuses_map_to_the_contract() {
        let rec = HwCompletion::default();
        rec.bytes_completed.store(100, Ordering::Relaxed);
        rec.result.store(1, Ordering::Relaxed);
        let d = |code, op| decode(code, &rec, op, 4096);
        assert_eq!(d(status::SUCCESS, opcode::MEMMOVE).bytes, 4096);
        assert_eq!(d(status::SUCCESS, opcode::COMPARE).status, Status::Mismatch);
        assert_eq!(d(status::SUCCESS, opcode::COMPARE).bytes, 100);
        assert_eq!(
            d(status::PAGE_FAULT_NOBOF, opcode::MEMMOVE),
            Decoded {
                status: Status::Partial,
                bytes: 100
            }
        );
        assert_eq!(
            d(status::XFER_ERANGE, opcode::MEMMOVE).status,
            Status::Error
        );
    }
}
