//! Replaying a workload's trace over the image taken before it: per 64-byte line, what is
//! durable and what only in the cache; and, at each crash point, the crash images built from
//! the lines in flight, each checked against the oracle.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use rand::Rng;
use switchyard_media::CACHE_LINE;

use super::oracle::{check_image, State};
use super::{Op, Options, Report, REGION};

/// The media as the trace replays. A line is written back whole; a store marks it dirty, a
/// flush (or a non-temporal store) makes it pending on the flushing thread, and that thread's
/// next fence makes it durable.
pub(super) struct Replay {
    /// Address of the region's first byte in the traced process.
    lo: usize,
    /// What is durable.
    persisted: Vec<u8>,
    /// What a reader sees (durable or not).
    current: Vec<u8>,
    /// Lines stored and not yet flushed.
    dirty: BTreeSet<usize>,
    /// Lines flushed (or stored non-temporally), with the thread whose fence makes them durable.
    pending: BTreeMap<usize, u64>,
}

impl Replay {
    /// The media holding `base`, durable, for a region mapped at `lo`.
    pub fn new(base: Vec<u8>, lo: usize) -> Replay {
        Replay {
            lo,
            persisted: base.clone(),
            current: base,
            dirty: BTreeSet::new(),
            pending: BTreeMap::new(),
        }
    }

    /// The lines `[addr, addr + len)` covers, as offsets into the region; none outside it.
    fn lines(&self, addr: usize, len: usize) -> std::ops::Range<usize> {
        if addr < self.lo || addr >= self.lo + REGION as usize {
            return 0..0;
        }
        let off = addr - self.lo;
        off / CACHE_LINE..(off + len).div_ceil(CACHE_LINE)
    }

    /// A store of `data` at `addr` by `thread`.
    pub fn store(&mut self, addr: usize, data: &[u8], non_temporal: bool, thread: u64) {
        let lines = self.lines(addr, data.len());
        if lines.is_empty() {
            return;
        }
        let off = addr - self.lo;
        self.current[off..off + data.len()].copy_from_slice(data);
        for line in lines {
            if non_temporal {
                self.dirty.remove(&line);
                self.pending.insert(line, thread);
            } else {
                self.dirty.insert(line);
            }
        }
    }

    /// A flush of `[addr, addr + len)` by `thread`.
    pub fn flush(&mut self, addr: usize, len: usize, thread: u64) {
        for line in self.lines(addr, len) {
            if self.dirty.remove(&line) {
                self.pending.insert(line, thread);
            }
        }
    }

    /// A fence by `thread`: what it flushed is durable.
    pub fn fence(&mut self, thread: u64) {
        let done: Vec<usize> = self
            .pending
            .iter()
            .filter(|(_, &th)| th == thread)
            .map(|(&l, _)| l)
            .collect();
        for l in done {
            self.pending.remove(&l);
            let r = l * CACHE_LINE..(l + 1) * CACHE_LINE;
            self.persisted[r.clone()].copy_from_slice(&self.current[r]);
        }
    }

    /// Lines that may or may not have reached the media if the power failed now.
    fn inflight(&self) -> Vec<usize> {
        self.dirty
            .iter()
            .chain(self.pending.keys())
            .copied()
            .collect()
    }
}

/// What a run of the harness carries from crash point to crash point.
pub(super) struct Explorer<'a> {
    pub opts: &'a Options,
    pub rng: &'a mut rand::rngs::StdRng,
    /// (durable image, chosen lines, count) of every image already checked.
    pub seen: &'a mut HashSet<(u32, u32, usize)>,
    pub report: &'a mut Report,
}

impl Explorer<'_> {
    /// The crash point just before a fence during `op`: any subset of the lines in flight may
    /// have reached the media. Builds the images (none, all, every subset when few lines are
    /// in flight, else seeded random subsets) and checks each distinct one.
    pub fn check_point(&mut self, replay: &Replay, before: &State, after: &State, op: &Op) {
        self.report.crash_points += 1;
        let inflight = replay.inflight();
        let n = inflight.len();
        let mut subsets: Vec<Vec<bool>> = vec![vec![false; n], vec![true; n]];
        if n <= self.opts.exhaustive_lines {
            for m in 1..(1u64 << n).saturating_sub(1) {
                subsets.push((0..n).map(|k| m >> k & 1 == 1).collect());
            }
        } else {
            for _ in 0..self.opts.random_subsets {
                subsets.push((0..n).map(|_| self.rng.random_bool(0.5)).collect());
            }
        }
        let base_crc = crc32c::crc32c(&replay.persisted);
        for pick in subsets {
            let mut img = replay.persisted.clone();
            let mut crc = 0u32;
            let mut chosen = 0usize;
            for (k, &line) in inflight.iter().enumerate() {
                if pick[k] {
                    let r = line * CACHE_LINE..(line + 1) * CACHE_LINE;
                    img[r.clone()].copy_from_slice(&replay.current[r.clone()]);
                    crc = crc32c::crc32c_append(crc, &(line as u64).to_le_bytes());
                    crc = crc32c::crc32c_append(crc, &replay.current[r]);
                    chosen += 1;
                }
            }
            if !self.seen.insert((base_crc, crc, chosen)) {
                continue;
            }
            self.report.images += 1;
            if matches!(op, Op::WriteAsync(..) | Op::AppendAsync(..)) {
                self.report.async_images += 1;
            }
            if let Err(v) = check_image(&img, before, after) {
                self.report.violations.push(format!(
                    "during {op:?}, {chosen} of {n} in-flight lines persisted: {v}"
                ));
                if self.done() {
                    return;
                }
            }
        }
    }

    /// Whether enough violations were found to stop.
    pub fn done(&self) -> bool {
        self.report.violations.len() >= self.opts.max_violations
    }
}
