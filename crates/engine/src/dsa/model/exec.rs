//! How the model executes a valid descriptor: the operation on memory, stopping at the first
//! byte of a page a test marked absent, and the completion record the specification asks for.

use std::sync::atomic::Ordering;

use switchyard_media::CopyMode;

use crate::dsa::descriptor::{flag, opcode, status, HwCompletion, HwDesc};
use crate::dsa::model::validate::validate;
use crate::dsa::model::{Shared, FAULT_WRITE};

/// How one descriptor ended: the status code, its result byte, bytes completed, and the
/// fault (address, fault-info bits) if a page was absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    pub code: u8,
    pub result: u8,
    pub bytes: u32,
    pub fault: Option<(u64, u8)>,
}

impl Ended {
    fn code(code: u8) -> Ended {
        Ended {
            code,
            result: 0,
            bytes: 0,
            fault: None,
        }
    }
}

/// Writes `e` into the record `d` asks for (if it asks for one), the status byte last with
/// Release, as the device does.
fn report(d: &HwDesc, e: Ended) {
    if d.flags() & (flag::CRAV | flag::RCR) != flag::CRAV | flag::RCR
        || !d.completion_addr.is_multiple_of(32)
    {
        return;
    }
    // SAFETY: the submitter keeps the completion record valid until it is written
    // (`Portal::submit`'s contract); it is 32-byte aligned (checked) and every field is atomic.
    let r = unsafe { &*(d.completion_addr as *const HwCompletion) };
    r.result.store(e.result, Ordering::Relaxed);
    r.bytes_completed.store(e.bytes, Ordering::Relaxed);
    let (addr, info) = e.fault.unwrap_or((0, 0));
    r.fault_addr.store(addr, Ordering::Relaxed);
    r.fault_info.store(info, Ordering::Relaxed);
    if e.code == status::INVALID_FLAGS {
        r.op_specific[0].store(d.flags() & !flag::DEFINED, Ordering::Relaxed);
    }
    r.status.store(e.code, Ordering::Release);
}

/// Validates and executes one descriptor taken from the portal, and reports it.
pub(crate) fn run(shared: &Shared, d: &HwDesc) {
    let e = match validate(d, &shared.config, false) {
        Err(code) => {
            shared.rejected.fetch_add(1, Ordering::Relaxed);
            Ended::code(code)
        }
        Ok(()) if d.opcode() == opcode::BATCH => run_batch(shared, d),
        Ok(()) => operate(shared, d),
    };
    report(d, e);
}

/// A batch: its descriptors in order; a fenced one waits for the earlier ones (the model runs
/// them one at a time anyway) and is abandoned, with every later one, when an earlier one
/// failed or, with `CR`, found a difference. An abandoned descriptor gets no record.
fn run_batch(shared: &Shared, b: &HwDesc) -> Ended {
    let list = b.src as usize;
    if let Some(at) = shared.absent_in(list, b.size as usize * 64) {
        return Ended {
            fault: Some((at as u64, 0)),
            ..Ended::code(status::BATCH_PAGE_FAULT)
        };
    }
    let (mut failed, mut done) = (false, 0u32);
    for i in 0..b.size as usize {
        // SAFETY: the list is 64-byte aligned (validated), present (checked above) and valid
        // for `size` descriptors until the batch's record is written (the submitter's contract).
        let d = unsafe { *(list as *const HwDesc).add(i) };
        if failed && d.flags() & flag::FENCE != 0 {
            break;
        }
        let e = match validate(&d, &shared.config, true) {
            Err(code) => {
                shared.rejected.fetch_add(1, Ordering::Relaxed);
                Ended::code(code)
            }
            Ok(()) => operate(shared, &d),
        };
        let ok = e.code == status::SUCCESS && !(d.flags() & flag::CR != 0 && e.result != 0);
        failed |= !ok;
        done += u32::from(ok);
        report(&d, e);
    }
    Ended {
        bytes: done,
        ..Ended::code(if failed {
            status::BATCH_FAIL
        } else {
            status::SUCCESS
        })
    }
}

/// How the model writes a descriptor's destination: durably (stores, flushes and a fence by
/// the device's thread) when it asks for a destination readback, else plain stores.
fn mode(d: &HwDesc) -> CopyMode {
    if d.flags() & flag::DRDBK != 0 {
        CopyMode::Durable
    } else {
        CopyMode::Temporal
    }
}

/// A valid non-batch descriptor on memory.
fn operate(shared: &Shared, d: &HwDesc) -> Ended {
    let len = d.size as usize;
    let (src, dst) = (d.src as usize, d.dst as usize);
    let (reads, writes) = match d.opcode() {
        opcode::MEMMOVE => (Some(src), Some(dst)),
        opcode::MEMFILL => (None, Some(dst)),
        opcode::COMPARE => (Some(src), Some(dst)),
        opcode::CFLUSH => (None, Some(dst)),
        _ => return Ended::code(status::SUCCESS),
    };
    let read_fault = reads
        .and_then(|a| shared.absent_in(a, len))
        .map(|at| (at, 0));
    let write_fault = writes.and_then(|a| shared.absent_in(a, len)).map(|at| {
        (
            at,
            if d.opcode() == opcode::COMPARE {
                0
            } else {
                FAULT_WRITE
            },
        )
    });
    // The first byte offset at which either operand faults.
    let fault = [
        read_fault.map(|(at, i)| (at - src, at, i)),
        write_fault.map(|(at, i)| (at - dst, at, i)),
    ]
    .into_iter()
    .flatten()
    .min();
    let n = fault.map_or(len, |(off, _, _)| off);
    let mut e = Ended {
        code: status::SUCCESS,
        result: 0,
        bytes: n as u32,
        fault: None,
    };
    // SAFETY: the submitter keeps the operands valid for `len` bytes until the record is
    // written (`Portal::submit`'s contract); only the present prefix of `n` bytes is touched.
    unsafe {
        match d.opcode() {
            // Through the model's kernels, so a traced `Persist` (the crash harness's) records
            // the device's stores; with `DRDBK` the data is durable before the record is
            // written, as the destination readback makes it on hardware.
            opcode::MEMMOVE if src.abs_diff(dst) >= n => {
                shared
                    .persist
                    .copy(dst as *mut u8, src as *const u8, n, mode(d))
            }
            opcode::MEMMOVE => std::ptr::copy(src as *const u8, dst as *mut u8, n),
            opcode::MEMFILL => shared.persist.fill(dst as *mut u8, d.src, n, mode(d)),
            opcode::COMPARE => {
                let (a, b) = (
                    std::slice::from_raw_parts(src as *const u8, n),
                    std::slice::from_raw_parts(dst as *const u8, n),
                );
                if let Some(k) = a.iter().zip(b).position(|(x, y)| x != y) {
                    e.result = 1;
                    e.bytes = k as u32;
                    return e;
                }
            }
            _ => shared.persist.flush(dst as *const u8, n),
        }
    }
    if let Some((_, at, info)) = fault {
        e.code = status::PAGE_FAULT_NOBOF;
        e.fault = Some((at as u64, info));
    }
    e
}
