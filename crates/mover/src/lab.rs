//! A measuring bench for copy paths, shared by `switchyard tune` and the benchmarks that
//! compare scheduler settings: callers on their own threads copy between a region and DRAM
//! for a fixed time, and the aggregate bandwidth is what they moved over the longest
//! caller's wall time. Where the engine's workers leave enough CPUs free, each caller is
//! pinned to one of them, so that no caller shares a core with a worker (see
//! `switchyard_engine::cpus` for what that costs). [`rotated`] interleaves the systems
//! compared, and [`median`] summarises.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use switchyard_engine::cpus;
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

/// A page-aligned DRAM buffer that copies write through raw pointers from shared references
/// (benchmark threads each in their own slice). It owns its bytes through a raw pointer, never
/// a `Vec` or a slice, so such a write is not a write through a `&` reference.
pub struct DramBuffer {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer is plain bytes owned by this value; every write goes through `at`'s raw
// pointers, and callers keep concurrent writers on disjoint ranges.
unsafe impl Send for DramBuffer {}
// SAFETY: as above: shared access only hands out raw pointers.
unsafe impl Sync for DramBuffer {}

impl DramBuffer {
    /// `len` bytes (at least 1), 4 KiB aligned, each set to `fill`, every page faulted in.
    pub fn new(len: usize, fill: u8) -> DramBuffer {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).expect("buffer size");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = std::ptr::NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        // SAFETY: `ptr` is a fresh allocation of `layout.size()` bytes.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), fill, layout.size()) };
        DramBuffer { ptr, layout }
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Never: a buffer has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// A pointer to byte `off`, valid for reads and writes of `len() - off` bytes while the
    /// buffer lives.
    ///
    /// # Panics
    ///
    /// If `off > len()`.
    pub fn at(&self, off: usize) -> *mut u8 {
        assert!(
            off <= self.len(),
            "offset {off} past a buffer of {}",
            self.len()
        );
        // SAFETY: within the allocation (or one past its end).
        unsafe { self.ptr.as_ptr().add(off) }
    }
}

impl Drop for DramBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// A measuring bench: a region (slow memory) and a DRAM buffer of the same span, every page
/// faulted in, for copies between them at known offsets.
pub struct Lab<'r> {
    region: &'r Region,
    dram: DramBuffer,
    span: usize,
}

impl<'r> Lab<'r> {
    /// A bench over the first 256 MiB (at most) of `region`, whose contents it overwrites.
    pub fn new(region: &'r Region) -> Lab<'r> {
        let span = region.len().min(256 << 20);
        // One spare page past `span` for shifted copies.
        let dram = DramBuffer::new(span + 4096, 2);
        // Fault every page in before measuring.
        // SAFETY: the region is mapped for `span` bytes and this bench is its only user.
        unsafe { std::ptr::write_bytes(region.as_mut_ptr(), 1, span) };
        Lab { region, dram, span }
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
        // Callers on CPUs the engine's workers leave free, where there are enough: a caller
        // the OS put on a worker's core measured every offload at 0.97x the CPU, with a 49 µs
        // start-up (`switchyard_engine::cpus`), and one such slice made a tune's profile.
        let free = cpus::free_cpus(&cpus::allowed(), mover.engine().info().channels);
        let places = (threads <= free.len()).then(|| &free[..threads]);
        let totals: Vec<(u64, Duration)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let (barrier, stop) = (&barrier, &stop);
                    s.spawn(move || {
                        if let Some(p) = places {
                            cpus::pin_current(&p[t..=t]);
                        }
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
                                let d = self.dram.at(off);
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
        // The DRAM buffer has 4096 bytes beyond `span`: room for the shift.
        single_thread_rate(size, (self.span - 64) / size, dur, |off| {
            // SAFETY: off + size <= span - 64, so the region side lies in the region and the
            // DRAM side ends before span + 4096, the DRAM buffer's length; no other thread runs.
            unsafe {
                persist.copy(
                    self.dram.at(off + shift),
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
                    self.dram.at(off),
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

#[cfg(test)]
mod tests {
    use super::DramBuffer;

    #[test]
    fn a_dram_buffer_is_page_aligned_filled_and_writable_from_shared_references() {
        let b = DramBuffer::new(3 * 4096 + 5, 7);
        assert_eq!(b.at(0) as usize % 4096, 0);
        let shared = &b;
        std::thread::scope(|s| {
            for t in 0..2 {
                // SAFETY: each thread writes its own page of the buffer.
                s.spawn(move || unsafe {
                    std::ptr::write_bytes(shared.at(t * 4096), t as u8, 4096)
                });
            }
        });
        // SAFETY: every byte was initialised and no thread writes any more.
        let bytes = unsafe { std::slice::from_raw_parts(b.at(0), b.len()) };
        assert!(bytes[..4096].iter().all(|&x| x == 0));
        assert!(bytes[4096..8192].iter().all(|&x| x == 1));
        assert!(bytes[8192..].iter().all(|&x| x == 7));
    }

    #[test]
    #[should_panic(expected = "past a buffer")]
    fn a_dram_buffer_refuses_an_offset_past_its_end() {
        DramBuffer::new(100, 0).at(101);
    }
}
