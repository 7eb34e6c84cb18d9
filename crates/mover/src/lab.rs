//! A measuring bench for copy paths, shared by `switchyard tune` and the benchmarks that
//! compare scheduler settings: callers on their own threads copy between a region and DRAM
//! for a fixed time, and the aggregate bandwidth is what they moved over the longest
//! caller's wall time. [`rotated`] interleaves the systems compared, and [`median`] summarises.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use switchyard_media::{CopyMode, Persist, Region};

use crate::hints::{Direction, Hints};
use crate::Mover;

/// The median of `v` (the upper one of an even count); `v` must not be empty.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Measures `systems` systems in `rounds` interleaved rounds; round `r` starts at system
/// `r % systems`, so drift on a noisy machine hits every system alike. Returns the results
/// indexed `[system][round]`, or the first error.
pub fn rotated<T, E>(
    systems: usize,
    rounds: usize,
    mut measure: impl FnMut(usize) -> Result<T, E>,
) -> Result<Vec<Vec<T>>, E> {
    let mut got: Vec<Vec<T>> = (0..systems).map(|_| Vec::with_capacity(rounds)).collect();
    for round in 0..rounds {
        for k in 0..systems {
            let i = (k + round) % systems;
            got[i].push(measure(i)?);
        }
    }
    Ok(got)
}

/// A measuring bench: a region (slow memory) and a DRAM buffer of the same span, every page
/// faulted in, for copies between them at known offsets.
pub struct Lab<'r> {
    region: &'r Region,
    dram: Vec<u8>,
    dram_off: usize,
    span: usize,
}

impl<'r> Lab<'r> {
    /// A bench over the first 256 MiB (at most) of `region`, whose contents it overwrites.
    pub fn new(region: &'r Region) -> Lab<'r> {
        let span = region.len().min(256 << 20);
        let mut dram = vec![0u8; span + 4096];
        let dram_off = dram.as_ptr().align_offset(4096);
        // Fault every page in before measuring.
        // SAFETY: the region is mapped for `span` bytes and this bench is its only user.
        unsafe { std::ptr::write_bytes(region.as_mut_ptr(), 1, span) };
        dram.iter_mut().for_each(|b| *b = 2);
        Lab {
            region,
            dram,
            dram_off,
            span,
        }
    }

    /// Aggregate GiB/s of `threads` callers copying in direction `dir` with `mover` for
    /// `dur`, request sizes taken in turn from `sizes` (each caller starts at its own place in
    /// the sequence); each caller in its own slice of the region and of DRAM, requests laid
    /// out one after another with their ends `misalign` bytes past a 64 B boundary.
    pub fn rate(
        &self,
        mover: &Mover,
        dir: Direction,
        sizes: &[usize],
        threads: usize,
        misalign: usize,
        dur: Duration,
    ) -> f64 {
        assert!(!sizes.is_empty(), "no request sizes");
        let per = self.span / threads;
        let biggest = sizes.iter().copied().max().unwrap_or(0) + misalign.next_multiple_of(64);
        assert!(
            biggest <= per,
            "a request of {biggest} B does not fit a caller's slice"
        );
        let barrier = Barrier::new(threads);
        let stop = AtomicBool::new(false);
        let totals: Vec<(u64, Duration)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let (barrier, stop) = (&barrier, &stop);
                    s.spawn(move || {
                        let hints = Hints {
                            direction: dir,
                            durable: dir == Direction::ToSlow,
                            ..Hints::default()
                        };
                        barrier.wait();
                        let begin = Instant::now();
                        let (mut bytes, mut k, mut at) = (0u64, t * 7919, 0usize);
                        while !stop.load(Ordering::Relaxed) {
                            let size = sizes[k % sizes.len()];
                            if at + size + misalign > per {
                                at = 0;
                            }
                            let off = t * per + at + misalign;
                            at += (size + misalign).next_multiple_of(64);
                            // SAFETY: off + size <= (t + 1) * per <= span, within both the
                            // region and the DRAM buffer; each thread has its own slice.
                            unsafe {
                                let r = self.region.as_mut_ptr().add(off);
                                let d = self.dram.as_ptr().add(self.dram_off + off) as *mut u8;
                                let (dst, src) = match dir {
                                    Direction::FromSlow => (d, r as *const u8),
                                    _ => (r, d as *const u8),
                                };
                                mover.copy_raw(dst, src, size, hints);
                            }
                            bytes += size as u64;
                            k += 1;
                            // One clock read per 8 requests keeps it off the measured path.
                            if t == 0 && k % 8 == 0 && begin.elapsed() >= dur {
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                        (bytes, begin.elapsed())
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("lab thread"))
                .collect()
        });
        let bytes: u64 = totals.iter().map(|t| t.0).sum();
        let wall = totals.iter().map(|t| t.1).max().unwrap_or_default();
        bytes as f64 / wall.as_secs_f64().max(1e-9) / (1u64 << 30) as f64
    }

    /// GiB/s of single-thread temporal reads of `size` bytes from the region into DRAM whose
    /// DRAM side lies `shift` bytes past the region side's 64-byte phase, with `persist`'s
    /// kernels.
    pub fn shifted_rate(&self, persist: Persist, size: usize, shift: usize, dur: Duration) -> f64 {
        let shift = shift % 64;
        // The DRAM buffer has 4096 bytes beyond `span` and `dram_off` < 4096: keep one line
        // spare for the shift.
        single_thread_rate(size, (self.span - 64) / size, dur, |off| {
            // SAFETY: off + size <= span - 64, so the region side lies in the region and the
            // DRAM side ends before dram_off + span <= span + 4096, the DRAM buffer's length
            // (dram_off < 4096); no other thread runs.
            unsafe {
                persist.copy(
                    self.dram.as_ptr().add(self.dram_off + off + shift) as *mut u8,
                    self.region.as_mut_ptr().add(off),
                    size,
                    CopyMode::Temporal,
                );
            }
        })
    }

    /// GiB/s of durable single-thread copies of `size` bytes with `persist`'s primitives and
    /// non-temporal threshold `nt`.
    pub fn durable_rate(&self, persist: Persist, size: usize, nt: usize, dur: Duration) -> f64 {
        let p = Persist {
            nt_threshold: nt,
            ..persist
        };
        single_thread_rate(size, self.span / size, dur, |off| {
            // SAFETY: off + size <= span, within the region and the DRAM buffer; no other
            // thread runs.
            unsafe {
                p.copy(
                    self.region.as_mut_ptr().add(off),
                    self.dram.as_ptr().add(self.dram_off + off),
                    size,
                    CopyMode::Durable,
                );
            }
        })
    }
}

/// GiB/s of `copy(off)` called for `dur` on one thread, each call copying `size` bytes at
/// offset `off`, cycling through `slots` (at least 1) consecutive slots.
fn single_thread_rate(
    size: usize,
    slots: usize,
    dur: Duration,
    mut copy: impl FnMut(usize),
) -> f64 {
    let slots = slots.max(1);
    let begin = Instant::now();
    let (mut bytes, mut k) = (0u64, 0usize);
    while begin.elapsed() < dur {
        // Many copies per clock read: small copies take well under a microsecond.
        for _ in 0..64 {
            copy((k % slots) * size);
            bytes += size as u64;
            k += 1;
        }
    }
    bytes as f64 / begin.elapsed().as_secs_f64() / (1u64 << 30) as f64
}
