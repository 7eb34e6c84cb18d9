//! Turning one request into engine descriptors (Fastmove §5.1, "src/dst page pairing").
//!
//! An engine executes descriptors of at most one granule (a page for engines that need
//! page-bounded descriptors; [`switchyard_engine::EngineInfo::descriptor_bytes`] in general).
//! Cutting at the granule boundaries of *both* buffers doubles the descriptor count when they
//! are unaligned to each other. Slow memory is contiguous, so only the DRAM side needs
//! granule-bounded pieces: the first piece runs to the DRAM side's next boundary, then whole
//! granules, then the remainder. That halves the subtasks of unaligned copies.

use switchyard_engine::{Descriptor, Flags, Op};

use crate::hints::Direction;

/// Descriptors copying `len` bytes from `src` to `dst`, cut at `granule` boundaries of the DRAM
/// side (`src` for writes into slow memory, `dst` otherwise).
pub fn pair(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    dir: Direction,
    granule: usize,
    flags: Flags,
) -> Vec<Descriptor> {
    let dram = if dir == Direction::ToSlow {
        src as usize
    } else {
        dst as usize
    };
    let mut out = Vec::with_capacity(len / granule + 2);
    let mut off = 0;
    while off < len {
        let to_boundary = granule - (dram + off) % granule;
        let n = to_boundary.min(len - off);
        out.push(Descriptor {
            op: Op::Copy {
                dst: dst.wrapping_add(off),
                src: src.wrapping_add(off),
            },
            len: n,
            flags,
        });
        off += n;
    }
    out
}

/// Descriptors a pairing that respects the granule boundaries of both sides would need.
pub fn naive_count(dst: usize, src: usize, len: usize, granule: usize) -> usize {
    let mut cuts = std::collections::BTreeSet::new();
    for base in [dst, src] {
        let mut b = (base / granule + 1) * granule - base;
        while b < len {
            cuts.insert(b);
            b += granule;
        }
    }
    cuts.len() + usize::from(len > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn pieces_tile_the_request_and_respect_dram_boundaries(
            d in 0usize..8192, s in 0usize..8192, len in 0usize..100_000, to_slow: bool)
        {
            let g = 4096;
            let dir = if to_slow { Direction::ToSlow } else { Direction::FromSlow };
            let (dst, src) = ((1usize << 40) + d, (1usize << 41) + s);
            let descs = pair(dst as *mut u8, src as *const u8, len, dir, g, Flags::NONE);
            let mut off = 0;
            for desc in &descs {
                let Op::Copy { dst: pd, src: ps } = desc.op else { panic!() };
                prop_assert_eq!((pd as usize, ps as usize), (dst + off, src + off));
                let dram = if to_slow { ps as usize } else { pd as usize };
                prop_assert!(dram % g + desc.len <= g, "crosses a DRAM-side granule");
                off += desc.len;
            }
            prop_assert_eq!(off, len);
            // Never more than the naive pairing; about half when the sides are unaligned.
            let naive = naive_count(dst, src, len, g);
            prop_assert!(descs.len() <= naive);
            if d % g != s % g && len >= 8 * g {
                prop_assert!(descs.len() * 2 <= naive + 2, "{} vs naive {}", descs.len(), naive);
            }
        }
    }
}
