//! Power cuts on page media: crash images at page granularity.
//!
//! A store file through the page cache reaches the disk a page at a time, whenever the
//! kernel writes a dirty page back, in any order; only a sync (`msync`) orders anything. The
//! harness runs a workload — random operations, some followed by a sync as `fsync` would
//! do — on a memory region that reports [`Granularity::Page`], traced. Replaying the trace,
//! it keeps what the disk holds after each sync and, for every page dirtied since its last
//! sync, the versions it took at each fence and sync since. At every fence and sync (a crash
//! point) it builds images: the disk as synced with any subset of the dirty pages written
//! back, each in any of its versions (none, the newest of each, then seeded random picks).
//! Each distinct image is mounted in a fresh region (a power cut: the page cache is gone, so
//! recovery keeps what the last completed sync made durable), must hold one of the states
//! the program could have observed since that sync — every operation before it, then each
//! later one wholly or not at all, in order — must pass `fsck` once unmounted, and stays
//! usable.
//!
//! The injected bug ([`PowerOptions::inject_anchor_first`]) makes each sync write its
//! anchor before the region: the harness must find images that do not recover.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use switchyard_media::trace::{Event, Recorder};
use switchyard_media::{Granularity, Persist, Region};

use super::ops::{apply, setup};
use super::oracle::{state, State};
use super::{all_ops, cpu_mover, mover, Op, Options, Report, REGION};
use crate::commits::SyncPolicy;
use crate::fs::{Fs, OpenFlags};
use crate::fsck;
use crate::store::{Owner, Store};

/// Page size of the modelled disk.
const PAGE: usize = 4096;

/// How hard the page-granularity mode looks.
#[derive(Debug, Clone)]
pub struct PowerOptions {
    /// Seed of the sequences and the picks.
    pub seed: u64,
    /// Random operation sequences.
    pub sequences: usize,
    /// Operations in each.
    pub sequence_len: usize,
    /// Random images per crash point, besides "nothing written back" and "all, newest".
    pub images_per_point: usize,
    /// Each sync writes its anchor before the region (the bug the mode must catch).
    pub inject_anchor_first: bool,
    /// Stop after this many violations.
    pub max_violations: usize,
}

impl Default for PowerOptions {
    fn default() -> Self {
        PowerOptions {
            seed: 7,
            sequences: 200,
            sequence_len: 10,
            images_per_point: 32,
            inject_anchor_first: false,
            max_violations: 10,
        }
    }
}

/// Runs the page-granularity power-cut mode.
pub fn run_power(opts: &PowerOptions, mut progress: impl FnMut(&Report)) -> Report {
    let ops = all_ops()
        .into_iter()
        .filter(|o| !matches!(o, Op::WriteAsync(..) | Op::AppendAsync(..)))
        .collect::<Vec<_>>();
    let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);
    let mut report = Report::default();
    let mut seen = HashSet::new();
    for _ in 0..opts.sequences {
        let w: Vec<(Op, bool)> = (0..opts.sequence_len)
            .map(|_| {
                (
                    ops[rng.random_range(0..ops.len())].clone(),
                    rng.random_bool(0.4),
                )
            })
            .collect();
        run_power_workload(&w, opts, &mut rng, &mut seen, &mut report);
        progress(&report);
        if report.violations.len() >= opts.max_violations {
            break;
        }
    }
    report
}

/// One page as the replay knows it: its versions since it was last synced.
#[derive(Default)]
struct Dirty {
    /// Distinct contents it held at crash points since its last sync, oldest first.
    versions: Vec<Arc<[u8]>>,
}

/// The disk and the page cache as the trace replays.
struct PageReplay {
    lo: usize,
    current: Vec<u8>,
    disk: Vec<u8>,
    /// Pages stored to since their last sync.
    dirty: BTreeMap<usize, Dirty>,
}

impl PageReplay {
    fn store(&mut self, addr: usize, data: &[u8]) {
        if addr < self.lo || addr + data.len() > self.lo + self.current.len() {
            return;
        }
        let off = addr - self.lo;
        self.current[off..off + data.len()].copy_from_slice(data);
        for p in off / PAGE..(off + data.len()).div_ceil(PAGE) {
            self.dirty.entry(p).or_default();
        }
    }

    /// Notes each dirty page's content now (a moment it may have been written back at).
    fn snapshot(&mut self) {
        for (&p, d) in self.dirty.iter_mut() {
            let now = &self.current[p * PAGE..(p + 1) * PAGE];
            if d.versions.last().is_none_or(|v| &v[..] != now) {
                d.versions.push(Arc::from(now));
            }
        }
    }

    /// `msync` of `[addr, addr + len)`: those pages are on the disk as they are now.
    fn sync(&mut self, addr: usize, len: usize) {
        let lo = addr.saturating_sub(self.lo);
        let hi = (addr + len).saturating_sub(self.lo).min(self.current.len());
        for p in lo / PAGE..hi.div_ceil(PAGE) {
            if self.dirty.remove(&p).is_some() {
                let r = p * PAGE..(p + 1) * PAGE;
                self.disk[r.clone()].copy_from_slice(&self.current[r]);
            }
        }
    }
}

/// Runs one workload (each operation, then a sync where its flag says) and checks the
/// images of power cuts during it.
fn run_power_workload(
    ops: &[(Op, bool)],
    opts: &PowerOptions,
    rng: &mut rand::rngs::StdRng,
    seen: &mut HashSet<(u32, u32)>,
    report: &mut Report,
) {
    report.workloads += 1;
    let mut recorder = Recorder::new();
    let persist = Persist::detect().traced(&recorder);
    let region = Region::memory_as(REGION, persist, Granularity::Page).expect("memory region");
    let base_ptr = region.as_ptr();
    let mover = cpu_mover(persist);
    let store = Store::format(region, mover.clone(), Owner::current()).expect("format");
    store
        .set_sync_policy(SyncPolicy::Interval(Duration::from_secs(3600)))
        .expect("policy");
    let mut fs = Fs::new(store);
    setup(&fs);
    fs.store().sync().expect("sync after set-up");
    if opts.inject_anchor_first {
        fs.store().inject_anchor_first();
    }
    // SAFETY: the region is REGION bytes and nothing writes it while we copy (the set-up is
    // synced and the background writer sleeps).
    let base = unsafe { std::slice::from_raw_parts(base_ptr, REGION as usize) }.to_vec();
    recorder.capture(base_ptr, REGION as usize);
    recorder.reset();
    let mut states = vec![state(&fs).expect("state")];
    // (event index once the operation and its sync returned, whether it synced)
    let mut bounds = Vec::new();
    let cpu_opts = Options::default();
    for (op, sync) in ops {
        fs = apply(fs, op, &mover, &cpu_opts);
        if *sync {
            fs.store().sync().expect("sync");
        }
        bounds.push((recorder.events().len(), *sync));
        states.push(state(&fs).expect("state"));
    }
    let events = recorder.events();
    drop(fs);
    drop(recorder);
    let mut replay = PageReplay {
        lo: base_ptr as usize,
        current: base.clone(),
        disk: base,
        dirty: BTreeMap::new(),
    };
    let (mut op_index, mut durable) = (0usize, 0usize);
    for (i, t) in events.iter().enumerate() {
        while op_index < bounds.len() && i >= bounds[op_index].0 {
            if bounds[op_index].1 {
                durable = op_index + 1;
            }
            op_index += 1;
        }
        match t.event {
            Event::Store { addr, .. } => {
                if let Some(data) = &t.data {
                    replay.store(addr, data);
                }
            }
            Event::Flush { .. } => {}
            Event::Fence | Event::Sync { .. } => {
                replay.snapshot();
                if op_index < ops.len() {
                    let allowed = &states[durable..=op_index + 1];
                    check_point(&replay, allowed, &ops[op_index].0, opts, rng, seen, report);
                    if report.violations.len() >= opts.max_violations {
                        return;
                    }
                }
                if let Event::Sync { addr, len } = t.event {
                    replay.sync(addr, len);
                }
            }
        }
    }
}

/// The images of a power cut now: the synced disk with some dirty pages written back.
fn check_point(
    replay: &PageReplay,
    allowed: &[State],
    op: &Op,
    opts: &PowerOptions,
    rng: &mut rand::rngs::StdRng,
    seen: &mut HashSet<(u32, u32)>,
    report: &mut Report,
) {
    report.crash_points += 1;
    let pages: Vec<(&usize, &Dirty)> = replay.dirty.iter().collect();
    // A pick per dirty page: 0 = not written back, k = its k-th version.
    let mut picks: Vec<Vec<usize>> = vec![
        vec![0; pages.len()],
        pages.iter().map(|(_, d)| d.versions.len()).collect(),
    ];
    for _ in 0..opts.images_per_point {
        picks.push(
            pages
                .iter()
                .map(|(_, d)| {
                    if rng.random_bool(0.5) {
                        0
                    } else {
                        rng.random_range(1..=d.versions.len().max(1))
                    }
                })
                .collect(),
        );
    }
    let base_crc = crc32c::crc32c(&replay.disk);
    for pick in picks {
        let mut img = replay.disk.clone();
        let mut crc = 0u32;
        for (&(&p, d), &k) in pages.iter().zip(&pick) {
            if k == 0 || d.versions.is_empty() {
                continue;
            }
            let v = &d.versions[k - 1];
            img[p * PAGE..(p + 1) * PAGE].copy_from_slice(v);
            crc = crc32c::crc32c_append(crc, &(p as u64).to_le_bytes());
            crc = crc32c::crc32c_append(crc, v);
        }
        if !seen.insert((base_crc, crc)) {
            continue;
        }
        report.images += 1;
        if let Err(v) = check_power_image(&img, allowed) {
            report.violations.push(format!(
                "power cut during {op:?} with {} dirty pages: {v}",
                pages.len()
            ));
            if report.violations.len() >= opts.max_violations {
                return;
            }
        }
    }
}

/// Mounts a power-cut image in a fresh region (recovery keeps what was durable), checks its
/// state is one of `allowed`, that it stays usable, and that `fsck` passes once it is
/// unmounted.
fn check_power_image(img: &[u8], allowed: &[State]) -> Result<(), String> {
    let region = Region::memory_as(img.len() as u64, Persist::detect(), Granularity::Page)
        .map_err(|e| e.to_string())?;
    // SAFETY: a fresh private mapping of img.len() bytes that nothing else references.
    unsafe { std::ptr::copy_nonoverlapping(img.as_ptr(), region.as_mut_ptr(), img.len()) };
    let fs = Fs::new(Store::mount(region, mover()).map_err(|e| format!("mount: {e}"))?);
    let s = state(&fs)?;
    if !allowed.contains(&s) {
        let names = |s: &State| {
            s.iter()
                .map(|(p, n)| format!("{p}:{:o}:{}:{}", n.mode, n.nlink, n.body.len()))
                .collect::<Vec<_>>()
        };
        return Err(format!(
            "state is none of the {} the program could have seen since the last sync: got \
             {:?}, allowed {:?}",
            allowed.len(),
            names(&s),
            allowed.iter().map(names).collect::<Vec<_>>()
        ));
    }
    let fd = fs
        .open("/.probe", OpenFlags::CREATE, 0o644)
        .map_err(|e| format!("create after recovery: {e}"))?;
    fs.write(fd, &[7u8; 10000])
        .map_err(|e| format!("write after recovery: {e}"))?;
    fs.close(fd).map_err(|e| e.to_string())?;
    fs.unlink("/.probe").map_err(|e| e.to_string())?;
    let region = fs.into_store().map_err(|e| e.to_string())?.into_region();
    // SAFETY: the region is mapped and no store uses it any more.
    let after = unsafe { std::slice::from_raw_parts(region.as_ptr(), region.len()) };
    let f = fsck::check(after);
    if !f.healthy() {
        return Err(format!("fsck after recovery: {:?}", f.problems));
    }
    Ok(())
}
