//! Copy, fill and compare kernels for slow memory.
//!
//! | mode                      | body stores    | head/tail lines | ends with |
//! |---------------------------|----------------|-----------------|-----------|
//! | [`CopyMode::Temporal`]    | `memcpy`, or the shifted loop | —  | —         |
//! | [`CopyMode::NonTemporal`] | streaming      | temporal        | `sfence`  |
//! | [`CopyMode::Durable`]     | streaming (≥ `nt_threshold`) or temporal + flush | flushed | `sfence` |
//! | [`CopyMode::Flushed`]     | as `Durable`   | flushed         | —         |
//!
//! Non-temporal stores need a 64-byte aligned destination, so the kernels copy the unaligned
//! head (up to the first line boundary) and the sub-line tail with ordinary stores and, for
//! durable copies, flush those lines. Sources may have any alignment (unaligned loads).
//!
//! **Shifted copies.** A temporal copy whose source and destination differ in address mod 32
//! (a read into a user buffer at an arbitrary offset, say) does not go to `memcpy` once it is
//! [`Persist::shifted_min`] bytes or longer: glibc copies from 2 KiB up with `rep movsb`, which
//! between shifted buffers runs well behind a loop of unaligned loads and aligned stores on
//! the machines measured (8 B shifts are the worst). Buffers in the same phase, or 32 bytes
//! apart, keep `memcpy`, which is faster than the loop there. `switchyard bench copy --shift 8`
//! measures both in one run; `docs/scheduler.md` ("Copy kernels") has the figures.

use crate::persist::{Persist, CACHE_LINE};

/// How a copy treats the CPU caches and durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyMode {
    /// Ordinary stores: the data stays in cache. Use for destinations in DRAM that will be read
    /// soon.
    Temporal,
    /// Streaming stores that bypass the cache, fenced at the end so the data is visible (but
    /// not necessarily durable) before anything the caller publishes afterwards.
    NonTemporal,
    /// Durable when the call returns: every destination line streamed or flushed, then fenced.
    Durable,
    /// As `Durable` without the closing fence: durable once the calling thread next fences.
    /// For callers that fence anyway before relying on the data (a commit), so one fence
    /// drains this copy and their own flushes together.
    Flushed,
}

/// The SIMD width used by the non-temporal and shifted-copy kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Simd {
    /// 16-byte streaming stores (baseline x86_64).
    Sse2,
    /// 32-byte streaming stores.
    Avx2,
    /// 64-byte streaming stores: one instruction per cache line.
    Avx512,
}

impl Simd {
    /// The widest level this CPU supports.
    pub fn detect() -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Simd::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Simd::Avx2;
            }
        }
        Simd::Sse2
    }

    /// Lowercase name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Simd::Sse2 => "sse2",
            Simd::Avx2 => "avx2",
            Simd::Avx512 => "avx512",
        }
    }
}

impl Persist {
    /// Copies `len` bytes from `src` to `dst` in the given mode.
    ///
    /// # Safety
    /// `src` must be valid for reads and `dst` for writes of `len` bytes, the two ranges must
    /// not overlap, and no other thread may access `dst` during the call.
    pub unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize, mode: CopyMode) {
        if len == 0 {
            return;
        }
        match mode {
            CopyMode::Temporal => {
                // SAFETY: `src` is readable for `len` bytes (this function's contract).
                unsafe { self.record_store(dst, src, len, false) };
                if self.shifted(dst, src, len) {
                    // SAFETY: forwarded from this function's contract; `shifted` checked the
                    // SIMD level.
                    unsafe { copy_shifted(self.simd, dst, src, len) };
                } else {
                    // SAFETY: forwarded from this function's contract.
                    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
                }
            }
            CopyMode::NonTemporal => {
                // SAFETY: forwarded from this function's contract.
                unsafe { self.copy_streaming(dst, src, len, false) };
                self.fence();
            }
            CopyMode::Durable | CopyMode::Flushed => {
                if len < self.nt_threshold {
                    // SAFETY: `src` is readable for `len` bytes (this function's contract).
                    unsafe { self.record_store(dst, src, len, false) };
                    // SAFETY: forwarded from this function's contract.
                    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
                    self.flush(dst, len);
                } else {
                    // SAFETY: forwarded from this function's contract.
                    unsafe { self.copy_streaming(dst, src, len, true) };
                }
                if mode == CopyMode::Durable {
                    self.fence();
                }
            }
        }
    }

    /// Whether a temporal copy of `len` bytes from `src` to `dst` takes the shifted loop (see
    /// the module docs): long enough, shifted against each other mod 32, and a SIMD level with
    /// a loop.
    #[inline]
    fn shifted(&self, dst: *const u8, src: *const u8, len: usize) -> bool {
        self.shifted_min != 0
            && len >= self.shifted_min
            && !(dst as usize).wrapping_sub(src as usize).is_multiple_of(32)
            && self.simd != Simd::Sse2
    }

    /// Streams the line-aligned body; copies head and tail with ordinary stores, flushing them
    /// when `flush_edges`. Does not fence.
    ///
    /// # Safety
    /// As for [`Persist::copy`].
    unsafe fn copy_streaming(&self, dst: *mut u8, src: *const u8, len: usize, flush_edges: bool) {
        let misalign = dst as usize % CACHE_LINE;
        let head = if misalign == 0 {
            0
        } else {
            (CACHE_LINE - misalign).min(len)
        };
        let body = (len - head) & !(CACHE_LINE - 1);
        let tail = len - head - body;
        if head > 0 {
            // SAFETY: `src` is readable for the stored length (this function's contract).
            unsafe { self.record_store(dst, src, head, false) };
            // SAFETY: head <= len, within both ranges.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
            if flush_edges {
                self.flush(dst, head);
            }
        }
        if body > 0 {
            // SAFETY: (1) dst + head is 64-byte aligned by construction; (2) head + body <= len
            // so both ranges stay inside the caller's buffers; (3) the SIMD level was detected
            // on this CPU.
            let (d, s) = unsafe { (dst.add(head), src.add(head)) };
            // SAFETY: `src` is readable for the stored length (this function's contract).
            unsafe { self.record_store(d, s, body, true) };
            // SAFETY: aligned dst, in-range body and detected SIMD level, as argued above.
            unsafe { stream_body(self.simd, d, s, body) };
        }
        if tail > 0 {
            // SAFETY: head + body + tail == len.
            let (d, s) = unsafe { (dst.add(head + body), src.add(head + body)) };
            // SAFETY: `src` is readable for the stored length (this function's contract).
            unsafe { self.record_store(d, s, tail, false) };
            // SAFETY: the tail lies inside both ranges.
            unsafe { std::ptr::copy_nonoverlapping(s, d, tail) };
            if flush_edges {
                self.flush(d, tail);
            }
        }
    }

    /// Fills `len` bytes at `dst` with the 8-byte `pattern` repeated (byte `i` of the range is
    /// byte `i % 8` of the little-endian pattern), in the given mode.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes and not accessed by other threads during
    /// the call.
    pub unsafe fn fill(&self, dst: *mut u8, pattern: u64, len: usize, mode: CopyMode) {
        const CHUNK: usize = 4096;
        let mut block = [0u8; CHUNK];
        for (i, b) in block.iter_mut().enumerate() {
            *b = pattern.to_le_bytes()[i % 8];
        }
        let mut done = 0;
        while done < len {
            let n = CHUNK.min(len - done);
            // The pattern phase restarts at every CHUNK boundary, and CHUNK % 8 == 0.
            // SAFETY: done + n <= len; `block` is a separate stack buffer.
            unsafe { self.copy(dst.add(done), block.as_ptr(), n, mode) };
            done += n;
        }
    }

    /// Returns the offset of the first byte where `a` and `b` differ, or `None` if the `len`
    /// bytes are equal.
    ///
    /// # Safety
    /// Both pointers must be valid for reads of `len` bytes, and nothing may write to them
    /// during the call.
    pub unsafe fn compare(&self, a: *const u8, b: *const u8, len: usize) -> Option<usize> {
        // SAFETY: forwarded from this function's contract.
        let (x, y) = unsafe {
            (
                std::slice::from_raw_parts(a, len),
                std::slice::from_raw_parts(b, len),
            )
        };
        const CHUNK: usize = 256;
        let mut off = 0;
        for (cx, cy) in x.chunks(CHUNK).zip(y.chunks(CHUNK)) {
            if cx != cy {
                return cx.iter().zip(cy).position(|(p, q)| p != q).map(|i| off + i);
            }
            off += cx.len();
        }
        None
    }
}

/// Streams `len` bytes (a multiple of 64) from `src` to the 64-byte aligned `dst`.
///
/// # Safety
/// `dst` 64-byte aligned and valid for `len` bytes of writes, `src` valid for `len` bytes of
/// reads, no overlap, `simd` supported by this CPU.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_body(simd: Simd, dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: forwarded; each variant requires exactly what this function requires.
    unsafe {
        match simd {
            Simd::Avx512 => lines_avx512::<true>(dst, src, len),
            Simd::Avx2 => lines_avx2::<true>(dst, src, len),
            Simd::Sse2 => stream_sse2(dst, src, len),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn stream_body(_simd: Simd, dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
}

/// Copies `len` bytes with ordinary stores to whole lines of `dst`: `memcpy` up to `dst`'s first
/// line boundary, the SIMD loop (unaligned loads, aligned stores) over the whole lines, `memcpy`
/// for the rest.
///
/// # Safety
/// `src` valid for reads and `dst` for writes of `len` bytes, no overlap, `simd` supported by
/// this CPU.
#[cfg(target_arch = "x86_64")]
unsafe fn copy_shifted(simd: Simd, dst: *mut u8, src: *const u8, len: usize) {
    let head = ((CACHE_LINE - dst as usize % CACHE_LINE) % CACHE_LINE).min(len);
    let body = (len - head) & !(CACHE_LINE - 1);
    // SAFETY: head + body <= len keeps every piece inside the caller's ranges; dst + head is
    // 64-byte aligned by construction; the SIMD level is the caller's to check.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        let (d, s) = (dst.add(head), src.add(head));
        match simd {
            Simd::Avx512 => lines_avx512::<false>(d, s, body),
            Simd::Avx2 => lines_avx2::<false>(d, s, body),
            Simd::Sse2 => std::ptr::copy_nonoverlapping(s, d, body),
        }
        let done = head + body;
        std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done);
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn copy_shifted(_simd: Simd, dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
}

/// AVX-512 loop over whole lines: four per iteration, then single lines; streaming stores if
/// `STREAM`, else ordinary (temporal) ones.
///
/// # Safety
/// As [`stream_body`], and the CPU supports AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn lines_avx512<const STREAM: bool>(dst: *mut u8, src: *const u8, len: usize) {
    use core::arch::x86_64::*;
    let store = |d: *mut __m512i, v: __m512i| {
        // SAFETY: every caller below passes a 64-byte aligned `d` inside the destination.
        unsafe {
            if STREAM {
                _mm512_stream_si512(d, v)
            } else {
                _mm512_store_si512(d, v)
            }
        }
    };
    let mut off = 0;
    // SAFETY: for the whole loop, off + 256 <= len (or off + 64 <= len below), so every access lies in
    // the caller's ranges; dst + off is 64-byte aligned because dst is and off is a multiple of
    // 64; loadu accepts any alignment.
    unsafe {
        while off + 256 <= len {
            let s = src.add(off) as *const __m512i;
            let d = dst.add(off) as *mut __m512i;
            let a = _mm512_loadu_si512(s);
            let b = _mm512_loadu_si512(s.add(1));
            let c = _mm512_loadu_si512(s.add(2));
            let e = _mm512_loadu_si512(s.add(3));
            store(d, a);
            store(d.add(1), b);
            store(d.add(2), c);
            store(d.add(3), e);
            off += 256;
        }
        while off < len {
            let v = _mm512_loadu_si512(src.add(off) as *const __m512i);
            store(dst.add(off) as *mut __m512i, v);
            off += 64;
        }
    }
}

/// AVX2 loop over whole lines: two 32-byte stores per line, streaming if `STREAM`.
///
/// # Safety
/// As [`stream_body`], and the CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn lines_avx2<const STREAM: bool>(dst: *mut u8, src: *const u8, len: usize) {
    use core::arch::x86_64::*;
    let store = |d: *mut __m256i, v: __m256i| {
        // SAFETY: every caller below passes a 32-byte aligned `d` inside the destination.
        unsafe {
            if STREAM {
                _mm256_stream_si256(d, v)
            } else {
                _mm256_store_si256(d, v)
            }
        }
    };
    let mut off = 0;
    // SAFETY: for the whole loop, off + 128 <= len (or + 64 below) keeps accesses in range; dst + off
    // is 32-byte aligned since dst is 64-byte aligned and off a multiple of 32.
    unsafe {
        while off + 128 <= len {
            let s = src.add(off) as *const __m256i;
            let d = dst.add(off) as *mut __m256i;
            let v = [
                _mm256_loadu_si256(s),
                _mm256_loadu_si256(s.add(1)),
                _mm256_loadu_si256(s.add(2)),
                _mm256_loadu_si256(s.add(3)),
            ];
            for (i, x) in v.into_iter().enumerate() {
                store(d.add(i), x);
            }
            off += 128;
        }
        while off < len {
            let s = src.add(off) as *const __m256i;
            let d = dst.add(off) as *mut __m256i;
            let (a, b) = (_mm256_loadu_si256(s), _mm256_loadu_si256(s.add(1)));
            store(d, a);
            store(d.add(1), b);
            off += 64;
        }
    }
}

/// SSE2 streaming loop: four 16-byte stores per line.
///
/// # Safety
/// As [`stream_body`].
#[cfg(target_arch = "x86_64")]
unsafe fn stream_sse2(dst: *mut u8, src: *const u8, len: usize) {
    use core::arch::x86_64::*;
    let mut off = 0;
    // SAFETY: for the whole loop, off + 64 <= len keeps accesses in range; dst + off + 16 i is 16-byte
    // aligned; SSE2 is baseline on x86_64.
    unsafe {
        while off < len {
            let s = src.add(off) as *const __m128i;
            let d = dst.add(off) as *mut __m128i;
            for i in 0..4 {
                _mm_stream_si128(d.add(i), _mm_loadu_si128(s.add(i)));
            }
            off += 64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn modes() -> impl Strategy<Value = CopyMode> {
        prop_oneof![
            Just(CopyMode::Temporal),
            Just(CopyMode::NonTemporal),
            Just(CopyMode::Durable),
            Just(CopyMode::Flushed)
        ]
    }

    fn simds() -> Vec<Simd> {
        let best = Simd::detect();
        [Simd::Sse2, Simd::Avx2, Simd::Avx512]
            .into_iter()
            .filter(|s| *s <= best)
            .collect()
    }

    proptest! {
        #[test]
        fn copy_is_byte_exact(len in 0usize..20_000, so in 0usize..128, d_off in 0usize..128,
                              mode in modes(), simd_ix in 0usize..3, nt in 0usize..4096,
                              shifted_min in 0usize..4096) {
            let simds = simds();
            let p = Persist {
                simd: simds[simd_ix % simds.len()],
                nt_threshold: nt,
                shifted_min,
                ..Persist::detect()
            };
            let src: Vec<u8> = (0..len + so).map(|i| (i * 131 + 7) as u8).collect();
            let mut dst = vec![0xAAu8; len + d_off + 64];
            // SAFETY: both ranges are inside their vectors and distinct allocations.
            unsafe { p.copy(dst.as_mut_ptr().add(d_off), src.as_ptr().add(so), len, mode) };
            prop_assert_eq!(&dst[d_off..d_off + len], &src[so..so + len]);
            prop_assert!(dst[..d_off].iter().all(|&b| b == 0xAA));
            prop_assert!(dst[d_off + len..].iter().all(|&b| b == 0xAA));
        }

        #[test]
        fn fill_repeats_the_pattern(len in 0usize..10_000, off in 0usize..64, pattern: u64, mode in modes()) {
            let p = Persist::detect();
            let mut dst = vec![0u8; len + off + 8];
            // SAFETY: the range is inside the vector.
            unsafe { p.fill(dst.as_mut_ptr().add(off), pattern, len, mode) };
            for i in 0..len {
                prop_assert_eq!(dst[off + i], pattern.to_le_bytes()[i % 8]);
            }
            prop_assert!(dst[off + len..].iter().all(|&b| b == 0));
        }

        #[test]
        fn compare_finds_the_first_difference(len in 1usize..5000, at in proptest::option::of(0usize..5000)) {
            let p = Persist::detect();
            let a: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut b = a.clone();
            let at = at.map(|x| x % len);
            if let Some(i) = at { b[i] ^= 0xFF; }
            // SAFETY: both vectors hold len bytes.
            prop_assert_eq!(unsafe { p.compare(a.as_ptr(), b.as_ptr(), len) }, at);
        }
    }
}
