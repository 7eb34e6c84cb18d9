//! The checks a DSA device makes before it executes a descriptor, as the model enforces them.
//! A descriptor that fails one completes with the check's status code and does nothing.

use crate::dsa::descriptor::{flag, opcode, status, HwDesc};
use crate::dsa::model::ModelConfig;

/// Checks `d` (submitted to a queue configured as `cfg`; `in_batch` when it came from a
/// batch's list): `Err(status)` names the first rule it breaks.
pub(crate) fn validate(d: &HwDesc, cfg: &ModelConfig, in_batch: bool) -> Result<(), u8> {
    if d.pasid_priv >> 31 != 0 {
        return Err(status::PRIV_BAD);
    }
    if d.pasid_priv >> 20 != 0 || d.rsvd1 != 0 {
        return Err(status::NOZERO_RESERVE);
    }
    let op = d.opcode();
    let known = matches!(
        op,
        opcode::NOOP
            | opcode::BATCH
            | opcode::DRAIN
            | opcode::MEMMOVE
            | opcode::MEMFILL
            | opcode::COMPARE
            | opcode::CFLUSH
    );
    if !known || (in_batch && matches!(op, opcode::BATCH | opcode::DRAIN)) {
        return Err(status::BAD_OPCODE);
    }
    check_flags(d.flags(), op, cfg, in_batch)?;
    if d.flags() & flag::CRAV != 0 && !d.completion_addr.is_multiple_of(32) {
        return Err(status::CRA_ALIGN);
    }
    check_operands(d, op, cfg)
}

fn check_flags(f: u32, op: u8, cfg: &ModelConfig, in_batch: bool) -> Result<(), u8> {
    let invalid = f & !flag::DEFINED != 0
        || (f & flag::BOF != 0 && !cfg.block_on_fault)
        || (f & flag::RCR != 0 && f & flag::CRAV == 0)
        || (f & flag::FENCE != 0 && !in_batch)
        || (f & flag::CR != 0 && op != opcode::COMPARE)
        || (op == opcode::BATCH && f & (flag::CC | flag::DRDBK | flag::STORD) != 0);
    if invalid {
        Err(status::INVALID_FLAGS)
    } else {
        Ok(())
    }
}

fn check_operands(d: &HwDesc, op: u8, cfg: &ModelConfig) -> Result<(), u8> {
    let specific_ok = match op {
        opcode::COMPARE => d.op_specific[0] <= 1 && d.op_specific[1..].iter().all(|&b| b == 0),
        _ => d.op_specific.iter().all(|&b| b == 0),
    };
    if !specific_ok {
        return Err(status::NOZERO_RESERVE);
    }
    match op {
        opcode::NOOP | opcode::DRAIN => {
            if d.src != 0 || d.dst != 0 || d.size != 0 {
                return Err(status::NOZERO_RESERVE);
            }
        }
        opcode::BATCH => {
            if d.dst != 0 {
                return Err(status::NOZERO_RESERVE);
            }
            if d.size < 2 || d.size > cfg.max_batch_size {
                return Err(status::DESC_CNT_ERANGE);
            }
            if !d.src.is_multiple_of(64) {
                return Err(status::DESCLIST_ALIGN);
            }
        }
        _ => {
            if op == opcode::CFLUSH && d.src != 0 {
                return Err(status::NOZERO_RESERVE);
            }
            if d.size == 0 || u64::from(d.size) > cfg.max_transfer_size {
                return Err(status::XFER_ERANGE);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ModelConfig {
        ModelConfig {
            max_transfer_size: 4096,
            max_batch_size: 8,
            ..ModelConfig::default()
        }
    }

    fn memmove(size: u32) -> HwDesc {
        HwDesc {
            completion_addr: 0x1000,
            src: 0x2000,
            dst: 0x3000,
            size,
            ..HwDesc::new(opcode::MEMMOVE, flag::CRAV | flag::RCR)
        }
    }

    #[test]
    fn enforces_the_specification_rules() {
        let c = cfg();
        assert_eq!(validate(&memmove(4096), &c, false), Ok(()));
        assert_eq!(validate(&memmove(0), &c, false), Err(status::XFER_ERANGE));
        assert_eq!(
            validate(&memmove(4097), &c, false),
            Err(status::XFER_ERANGE)
        );
        let mut d = memmove(8);
        d.rsvd1 = 1;
        assert_eq!(validate(&d, &c, false), Err(status::NOZERO_RESERVE));
        let mut d = memmove(8);
        d.op_specific[3] = 1;
        assert_eq!(validate(&d, &c, false), Err(status::NOZERO_RESERVE));
        let mut d = memmove(8);
        d.completion_addr = 0x1010;
        assert_eq!(validate(&d, &c, false), Err(status::CRA_ALIGN));
        let mut d = memmove(8);
        d.flags_opcode |= flag::BOF;
        assert_eq!(validate(&d, &c, false), Err(status::INVALID_FLAGS));
        let mut d = memmove(8);
        d.flags_opcode |= 0x40;
        assert_eq!(validate(&d, &c, false), Err(status::INVALID_FLAGS));
        let mut d = memmove(8);
        d.pasid_priv = 1 << 31;
        assert_eq!(validate(&d, &c, false), Err(status::PRIV_BAD));
        let fenced = HwDesc {
            flags_opcode: memmove(8).flags_opcode | flag::FENCE,
            ..memmove(8)
        };
        assert_eq!(validate(&fenced, &c, true), Ok(()));
        assert_eq!(validate(&fenced, &c, false), Err(status::INVALID_FLAGS));
    }

    #[test]
    fn enforces_the_batch_rules() {
        let c = cfg();
        let batch = |count, list| HwDesc {
            completion_addr: 0x1000,
            src: list,
            size: count,
            ..HwDesc::new(opcode::BATCH, flag::CRAV | flag::RCR)
        };
        assert_eq!(validate(&batch(2, 0x4000), &c, false), Ok(()));
        assert_eq!(
            validate(&batch(1, 0x4000), &c, false),
            Err(status::DESC_CNT_ERANGE)
        );
        assert_eq!(
            validate(&batch(9, 0x4000), &c, false),
            Err(status::DESC_CNT_ERANGE)
        );
        assert_eq!(
            validate(&batch(2, 0x4020), &c, false),
            Err(status::DESCLIST_ALIGN)
        );
        assert_eq!(
            validate(&batch(2, 0x4000), &c, true),
            Err(status::BAD_OPCODE)
        );
        let drain = HwDesc::new(opcode::DRAIN, flag::CRAV | flag::RCR);
        assert_eq!(validate(&drain, &c, true), Err(status::BAD_OPCODE));
        assert_eq!(
            validate(&HwDesc::new(0x42, 0), &c, false),
            Err(status::BAD_OPCODE)
        );
    }
}
