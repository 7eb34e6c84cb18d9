//! Crash-state testing in the style of Vinter and Chipmunk.
//!
//! A workload runs on a store in a memory region while the media recorder captures every
//! store (with its bytes), flush and fence. Replaying that trace over the image taken before
//! the workload, the harness tracks, per 64-byte line, what is durable (flushed, then fenced
//! by the flushing thread) and what is only in the cache. Just before every fence (the last
//! moment before more becomes durable) it builds crash images: nothing in flight persisted, everything persisted, every subset when few lines are
//! in flight, and seeded random subsets otherwise. Each distinct image is mounted (recovery
//! runs), checked with `fsck`, compared with the oracle — the logical state before or after
//! the interrupted operation — and must stay usable (create, write, read, delete).
//!
//! Lines are the unit of persistence: a cache line is written back whole. The 8-byte commit
//! words never straddle lines.
//!
//! [`run_async`] does the same for asynchronous writes: the workload's store sends its copies
//! to a threads engine whose worker waits before each batch, so the metadata commit of an
//! orderless write happens while its data is still unwritten, and the worker's own stores and
//! fences (the data, then the durable completion record) are crash points too. Every image in
//! between must recover to the state before the write or after it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use std::time::Duration;

use rand::{Rng, SeedableRng};
use switchyard_engine::{FaultPlan, ThreadsConfig, ThreadsEngine};
use switchyard_media::trace::{Event, Recorder};
use switchyard_media::{Persist, Region, CACHE_LINE};
use switchyard_mover::{Config, Mover, Policy};

use crate::fallocate::Falloc;
use crate::format::{is_special, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT};
use crate::fs::{Fs, OpenFlags};
use crate::fsck;
use crate::store::{Owner, Store};

/// Region size for crash workloads (small, so images are cheap).
const REGION: u64 = 2 << 20;

/// One file-system operation of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create an empty file.
    Create(&'static str),
    /// Write `len` bytes of `byte` at `off`.
    Write(&'static str, u64, usize, u8),
    /// Append `len` bytes of `byte`.
    Append(&'static str, usize, u8),
    /// Truncate to a size.
    Truncate(&'static str, u64),
    /// Remove a file.
    Unlink(&'static str),
    /// Create a directory.
    Mkdir(&'static str),
    /// Remove a directory.
    Rmdir(&'static str),
    /// Remove a directory that a front end holds (the kernel's working directory of some
    /// process): it stays, without links, until the mount ends; a crash leaves an orphan.
    RmdirHeld(&'static str),
    /// Rename.
    Rename(&'static str, &'static str),
    /// Hard link.
    Link(&'static str, &'static str),
    /// Exchange what two names name (`RENAME_EXCHANGE`).
    Exchange(&'static str, &'static str),
    /// Symlink (target, path).
    Symlink(&'static str, &'static str),
    /// A FIFO, socket or device node (path, type bits, device number).
    Mknod(&'static str, u32, u64),
    /// Change permission bits.
    Chmod(&'static str, u32),
    /// Set extended attribute `name` to `len` bytes of `byte`.
    SetXattr(&'static str, &'static str, usize, u8),
    /// Remove extended attribute `name`.
    RemoveXattr(&'static str, &'static str),
    /// fallocate(2) over `len` bytes at `off`.
    Fallocate(&'static str, u64, u64, Falloc),
    /// Unmount cleanly and mount again (the checkpoint, then the quick mount and lazy loads).
    Remount,
    /// Write `len` bytes of `byte` at `off` through the asynchronous API (orderless).
    WriteAsync(&'static str, u64, usize, u8),
    /// Append `len` bytes of `byte` through the asynchronous API.
    AppendAsync(&'static str, usize, u8),
    /// Write `len` bytes of `byte` at `off` in two phases, filled as a remote client would:
    /// stored into the reserved blocks unflushed (one-sided puts), then committed.
    WritePrepared(&'static str, u64, usize, u8),
    /// Prepare and fill a write of `len` bytes of `byte` at `off`, then drop it uncommitted.
    WriteAbandoned(&'static str, u64, usize, u8),
}

/// Every operation kind over the harness's namespace (`/a`, `/b`, `/d/`, `/d/x`, `/e/`).
pub fn all_ops() -> Vec<Op> {
    vec![
        Op::Create("/b"),
        Op::Write("/a", 100, 5000, 0xA1),
        Op::Write("/a", 4096, 4096, 0xA2),
        Op::Write("/b", 0, 20000, 0xB1),
        Op::Append("/a", 3000, 0xA3),
        Op::Truncate("/a", 1000),
        Op::Truncate("/a", 9000),
        Op::Unlink("/a"),
        Op::Unlink("/d/x"),
        Op::Mkdir("/e"),
        Op::Rmdir("/e"),
        Op::RmdirHeld("/d"),
        Op::Rename("/a", "/b"),
        Op::Rename("/a", "/d/x"),
        Op::Rename("/d", "/e"),
        Op::Link("/a", "/d/y"),
        Op::Exchange("/a", "/d/x"),
        Op::Exchange("/b", "/d"),
        Op::Symlink("/a", "/s"),
        Op::Mknod("/p", S_IFIFO, 0),
        Op::Mknod("/c", S_IFCHR, 0x0103),
        Op::Chmod("/a", 0o600),
        Op::SetXattr("/a", "user.k", 3000, 0xE1),
        Op::SetXattr("/d", "user.k", 10, 0xE2),
        Op::RemoveXattr("/a", "user.k"),
        Op::Fallocate("/a", 2000, 9000, Falloc::PunchHole),
        Op::Fallocate("/b", 0, 20000, Falloc::Allocate { keep_size: false }),
        Op::WritePrepared("/a", 2000, 7000, 0xA4),
        Op::WriteAbandoned("/a", 0, 9000, 0xA5),
        Op::Remount,
    ]
}

/// The asynchronous operations, with the synchronous ones they interleave with.
pub fn async_ops() -> Vec<Op> {
    vec![
        Op::WriteAsync("/a", 0, 8192, 0xC1),
        Op::WriteAsync("/a", 100, 20000, 0xC2),
        Op::WriteAsync("/b", 4096, 12288, 0xC3),
        Op::AppendAsync("/a", 9000, 0xC4),
        Op::Write("/a", 4096, 4096, 0xA2),
        Op::Truncate("/a", 1000),
        Op::Unlink("/a"),
        Op::Create("/b"),
        Op::Rename("/a", "/b"),
        Op::Remount,
    ]
}

fn apply(fs: Fs, op: &Op, mover: &Arc<Mover>, opts: &Options) -> Fs {
    let rw = OpenFlags {
        write: true,
        ..OpenFlags::READ
    };
    // Failures (ENOENT, EEXIST, ...) are fine: the oracle compares states either way.
    let _ = match *op {
        Op::Remount => {
            let region = fs.into_store().expect("close descriptors").into_region();
            return Fs::new(
                Store::mount(region, mover.clone()).expect("mount after a clean unmount"),
            );
        }
        Op::WriteAsync(p, off, len, byte) => fs.open(p, rw, 0).and_then(|fd| {
            let ex = switchyard_rt::Executor::new();
            let r = ex.block_on(fs.pwrite_async(fd, vec![byte; len], off)).0;
            fs.close(fd)?;
            r.map(|_| ())
        }),
        Op::AppendAsync(p, len, byte) => fs.open(p, rw, 0).and_then(|fd| {
            let ex = switchyard_rt::Executor::new();
            let r = ex.block_on(fs.append_async(fd, vec![byte; len])).0;
            fs.close(fd)?;
            r.map(|_| ())
        }),
        Op::Create(p) => fs
            .open(p, OpenFlags::CREATE, 0o644)
            .and_then(|fd| fs.close(fd)),
        Op::Write(p, off, len, byte) => fs
            .open(
                p,
                OpenFlags {
                    write: true,
                    ..OpenFlags::READ
                },
                0,
            )
            .and_then(|fd| {
                let r = fs.pwrite(fd, &vec![byte; len], off).map(|_| ());
                fs.close(fd)?;
                r
            }),
        Op::Append(p, len, byte) => fs
            .open(
                p,
                OpenFlags {
                    write: true,
                    append: true,
                    ..OpenFlags::READ
                },
                0,
            )
            .and_then(|fd| {
                let r = fs.write(fd, &vec![byte; len]).map(|_| ());
                fs.close(fd)?;
                r
            }),
        Op::Truncate(p, n) => fs.truncate(p, n),
        Op::Unlink(p) => fs.unlink(p),
        Op::Mkdir(p) => fs.mkdir(p, 0o755),
        Op::Rmdir(p) => fs.rmdir(p),
        Op::RmdirHeld(p) => fs
            .ino(p)
            .and_then(|ino| fs.store().hold(ino))
            .and_then(|()| fs.rmdir(p)),
        Op::Rename(a, b) => fs.rename(a, b),
        Op::Link(a, b) => fs.link(a, b),
        Op::Exchange(a, b) => fs.exchange(a, b),
        Op::Symlink(t, p) => fs.symlink(t, p),
        Op::Mknod(p, kind, rdev) => fs.mknod(p, kind | 0o644, rdev),
        Op::Chmod(p, m) => fs.chmod(p, m),
        Op::SetXattr(p, name, len, byte) => fs.ino(p).and_then(|ino| {
            let value = vec![byte; len];
            fs.store()
                .setxattr(ino, name.as_bytes(), &value, crate::XattrMode::Set)
        }),
        Op::Fallocate(p, off, len, mode) => fs
            .ino(p)
            .and_then(|ino| fs.store().fallocate(ino, off, len, mode)),
        Op::WritePrepared(p, off, len, byte) => fs.ino(p).and_then(|ino| {
            let store = fs.store();
            let mut w = store.prepare_write(ino, off, len as u64)?;
            // The injected bug: the commit takes the puts for the store's own flushed fill.
            w.filled = opts.inject_unflushed_fill;
            for t in w.targets() {
                // A one-sided put: the bytes land in the reserved blocks, unflushed.
                store
                    .pm
                    .write_unflushed(t.region_offset, &vec![byte; t.len as usize]);
            }
            store.commit_write(w).map(|_| ())
        }),
        Op::WriteAbandoned(p, off, len, byte) => fs.ino(p).and_then(|ino| {
            let mut w = fs.store().prepare_write(ino, off, len as u64)?;
            w.fill(&vec![byte; len])
        }),
        Op::RemoveXattr(p, name) => fs
            .ino(p)
            .and_then(|ino| fs.store().removexattr(ino, name.as_bytes())),
    };
    fs
}

/// What the oracle compares of one file. Timestamps are left out (they change with every
/// operation by design).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Type and permission bits.
    pub mode: u32,
    /// Links.
    pub nlink: u32,
    /// Bytes, a symlink's target, or a device node's number.
    pub body: Vec<u8>,
    /// The inode's generation: a crash must never leave a file under a (number,
    /// generation) pair that a handle to another file may hold.
    pub generation: u64,
    /// Extended attributes (the `listxattr` list, then each value).
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The logical state the oracle compares: path → file.
pub type State = BTreeMap<String, Node>;

/// Reads the whole namespace.
pub fn state(fs: &Fs) -> Result<State, String> {
    let mut out = State::new();
    let mut stack = vec!["".to_string()];
    while let Some(dir) = stack.pop() {
        let path = if dir.is_empty() {
            "/".to_string()
        } else {
            dir.clone()
        };
        for e in fs
            .readdir(&path)
            .map_err(|e| format!("readdir {path}: {e}"))?
        {
            let p = format!("{dir}/{}", String::from_utf8_lossy(&e.name));
            let a = fs.lstat(&p).map_err(|e| format!("lstat {p}: {e}"))?;
            let body = match a.mode & S_IFMT {
                S_IFDIR => {
                    stack.push(p.clone());
                    Vec::new()
                }
                S_IFLNK => fs.readlink(&p).map_err(|e| format!("readlink {p}: {e}"))?,
                k if is_special(k) => a.rdev().to_le_bytes().to_vec(),
                _ => fs.read_all(&p).map_err(|e| format!("read {p}: {e}"))?,
            };
            let store = fs.store();
            let generation = store
                .generation(e.ino)
                .map_err(|e| format!("generation {p}: {e}"))?;
            let list = store
                .listxattr(e.ino)
                .map_err(|e| format!("listxattr {p}: {e}"))?;
            let xattrs = list
                .split(|&b| b == 0)
                .filter(|n| !n.is_empty())
                .map(|n| Ok((n.to_vec(), store.getxattr(e.ino, n)?)))
                .collect::<Result<_, crate::Errno>>()
                .map_err(|e| format!("getxattr {p}: {e}"))?;
            out.insert(
                p,
                Node {
                    mode: a.mode,
                    nlink: a.nlink,
                    body,
                    generation,
                    xattrs,
                },
            );
        }
    }
    Ok(out)
}

/// A mover that sends every copy to a one-channel threads engine misbehaving as `faults` says
/// (the workloads of [`run_async`] use a delay before each batch, so a write's metadata commits
/// while its data is still unwritten).
pub fn engine_mover(faults: FaultPlan) -> Arc<Mover> {
    let mut cfg = Config::default();
    cfg.mover.policy = Policy::Engine;
    let persist = Persist::detect();
    let engine = ThreadsEngine::start(ThreadsConfig {
        pin: false,
        persist,
        faults,
        ..ThreadsConfig::default()
    })
    .expect("threads engine");
    Arc::new(Mover::with_engine(&cfg, Arc::new(engine), persist))
}

/// One CPU-only mover for every store the harness mounts: every copy runs on the calling
/// thread, so the trace is one thread's program order.
fn mover() -> Arc<Mover> {
    static MOVER: std::sync::OnceLock<Arc<Mover>> = std::sync::OnceLock::new();
    MOVER
        .get_or_init(|| {
            let mut cfg = Config::default();
            cfg.mover.policy = Policy::Cpu;
            Arc::new(Mover::start(&cfg).expect("default configuration is valid"))
        })
        .clone()
}

/// What the harness explored.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Workloads run.
    pub workloads: u64,
    /// Crash points (fences) visited.
    pub crash_points: u64,
    /// Distinct crash images mounted and checked.
    pub images: u64,
    /// Of those, images of a crash during an asynchronous write.
    pub async_images: u64,
    /// What went wrong (empty when the store is crash consistent).
    pub violations: Vec<String>,
}

/// How hard to look.
#[derive(Debug, Clone)]
pub struct Options {
    /// Seed for random subsets and random sequences.
    pub seed: u64,
    /// Random subsets per crash point when too many lines are in flight for all subsets.
    pub random_subsets: usize,
    /// All subsets when at most this many lines are in flight.
    pub exhaustive_lines: usize,
    /// Random sequences to run after the single operations and pairs.
    pub random_sequences: usize,
    /// Length of each random sequence.
    pub sequence_len: usize,
    /// Inject a missing flush (the harness must then report violations).
    pub inject_missing_flush: bool,
    /// Stop after this many violations.
    pub max_violations: usize,
    /// Inject orderless writes whose entries do not name their copy (recovery then cannot
    /// tell an unfinished one; [`run_async`] must report violations).
    pub inject_unrecorded_orderless: bool,
    /// Inject a commit that does not flush a two-phase write's blocks filled by another
    /// party ([`run`] must report violations).
    pub inject_unflushed_fill: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 1,
            random_subsets: 24,
            exhaustive_lines: 8,
            random_sequences: 80,
            sequence_len: 6,
            inject_missing_flush: false,
            max_violations: 10,
            inject_unrecorded_orderless: false,
            inject_unflushed_fill: false,
        }
    }
}

impl Options {
    /// Much longer runs: more subsets, more and longer random sequences.
    pub fn exhaustive() -> Options {
        Options {
            random_subsets: 64,
            exhaustive_lines: 10,
            random_sequences: 400,
            sequence_len: 10,
            ..Options::default()
        }
    }
}

/// Runs every operation alone, every ordered pair (ACE-style, over the small namespace), and
/// seeded random sequences.
pub fn run(opts: &Options, progress: impl FnMut(&Report)) -> Report {
    run_ops(&all_ops(), &mover(), opts, progress)
}

/// [`run`] over the asynchronous writes and the operations they meet ([`async_ops`]), on a
/// store whose copies go to a delayed threads engine.
pub fn run_async(opts: &Options, progress: impl FnMut(&Report)) -> Report {
    run_ops(
        &async_ops(),
        &engine_mover(FaultPlan {
            delay: Duration::from_millis(1),
            ..FaultPlan::default()
        }),
        opts,
        progress,
    )
}

fn run_ops(
    ops: &[Op],
    mover: &Arc<Mover>,
    opts: &Options,
    mut progress: impl FnMut(&Report),
) -> Report {
    let ops = ops.to_vec();
    let mut workloads: Vec<Vec<Op>> = ops.iter().map(|o| vec![o.clone()]).collect();
    for a in &ops {
        for b in &ops {
            workloads.push(vec![a.clone(), b.clone()]);
        }
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);
    for _ in 0..opts.random_sequences {
        workloads.push(
            (0..opts.sequence_len)
                .map(|_| ops[rng.random_range(0..ops.len())].clone())
                .collect(),
        );
    }
    let mut report = Report::default();
    let mut seen = HashSet::new();
    for w in &workloads {
        run_workload(w, mover, opts, &mut rng, &mut seen, &mut report);
        progress(&report);
        if report.violations.len() >= opts.max_violations {
            break;
        }
    }
    report
}

fn setup(fs: &Fs) {
    fs.mkdir("/d", 0o755).expect("setup mkdir");
    let fd = fs
        .open("/a", OpenFlags::CREATE, 0o644)
        .expect("setup create");
    fs.write(fd, &[0x5A; 6000]).expect("setup write");
    fs.close(fd).expect("setup close");
    let fd = fs
        .open("/d/x", OpenFlags::CREATE, 0o644)
        .expect("setup create");
    fs.write(fd, b"x").expect("setup write");
    fs.close(fd).expect("setup close");
}

/// Runs one workload under the recorder and checks every crash image it produces.
pub fn run_workload(
    ops: &[Op],
    mover: &Arc<Mover>,
    opts: &Options,
    rng: &mut rand::rngs::StdRng,
    seen: &mut HashSet<(u32, u32, usize)>,
    report: &mut Report,
) {
    report.workloads += 1;
    let region = Region::memory(REGION, Persist::detect()).expect("memory region");
    let base_ptr = region.as_ptr();
    let mut fs = Fs::new(Store::format(region, mover.clone(), Owner::current()).expect("format"));
    setup(&fs);
    if opts.inject_missing_flush {
        fs.store().inject_missing_entry_flush();
    }
    if opts.inject_unrecorded_orderless {
        fs.store().inject_unrecorded_orderless();
    }
    // SAFETY: the region is REGION bytes and nothing writes it while we copy (single thread).
    let base = unsafe { std::slice::from_raw_parts(base_ptr, REGION as usize) }.to_vec();
    let recorder = Recorder::install_capturing(base_ptr, REGION as usize);
    let mut states = vec![state(&fs).expect("state")];
    let mut bounds = Vec::new();
    for op in ops {
        fs = apply(fs, op, mover, opts);
        bounds.push(recorder.events().len());
        states.push(state(&fs).expect("state"));
    }
    let events = recorder.events();
    drop(recorder);
    // The recorder is gone, so the clean-unmount stores are not part of the trace.
    drop(fs);

    let lo = base_ptr as usize;
    let mut persisted = base.clone();
    let mut current = base;
    let mut dirty: BTreeMap<usize, ()> = BTreeMap::new();
    let mut pending: BTreeMap<usize, u64> = BTreeMap::new();
    let mut op_index = 0;
    for (i, t) in events.iter().enumerate() {
        while op_index < bounds.len() && i >= bounds[op_index] {
            op_index += 1;
        }
        match t.event {
            Event::Store {
                addr,
                len,
                non_temporal,
            } => {
                if addr < lo || addr >= lo + REGION as usize {
                    continue;
                }
                let off = addr - lo;
                let Some(data) = &t.data else { continue };
                current[off..off + len].copy_from_slice(data);
                for line in off / CACHE_LINE..(off + len).div_ceil(CACHE_LINE) {
                    if non_temporal {
                        dirty.remove(&line);
                        pending.insert(line, t.thread);
                    } else {
                        dirty.insert(line, ());
                    }
                }
            }
            Event::Flush { addr, len } => {
                if addr < lo || addr >= lo + REGION as usize {
                    continue;
                }
                let off = addr - lo;
                for line in off / CACHE_LINE..(off + len).div_ceil(CACHE_LINE) {
                    if dirty.remove(&line).is_some() {
                        pending.insert(line, t.thread);
                    }
                }
            }
            Event::Fence => {
                // The crash point: just before this fence, any subset of what was stored since
                // the previous one may have reached the media.
                if op_index < ops.len() {
                    report.crash_points += 1;
                    let inflight: Vec<usize> =
                        dirty.keys().chain(pending.keys()).copied().collect();
                    check_point(
                        &persisted,
                        &current,
                        &inflight,
                        &states[op_index],
                        &states[op_index + 1],
                        &ops[op_index],
                        opts,
                        rng,
                        seen,
                        report,
                    );
                    if report.violations.len() >= opts.max_violations {
                        return;
                    }
                }
                let done: Vec<usize> = pending
                    .iter()
                    .filter(|(_, &th)| th == t.thread)
                    .map(|(&l, _)| l)
                    .collect();
                for l in done {
                    pending.remove(&l);
                    let r = l * CACHE_LINE..(l + 1) * CACHE_LINE;
                    persisted[r.clone()].copy_from_slice(&current[r]);
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn check_point(
    persisted: &[u8],
    current: &[u8],
    inflight: &[usize],
    before: &State,
    after: &State,
    op: &Op,
    opts: &Options,
    rng: &mut rand::rngs::StdRng,
    seen: &mut HashSet<(u32, u32, usize)>,
    report: &mut Report,
) {
    let n = inflight.len();
    let mut subsets: Vec<Vec<bool>> = vec![vec![false; n], vec![true; n]];
    if n <= opts.exhaustive_lines {
        for m in 1..(1u64 << n).saturating_sub(1) {
            subsets.push((0..n).map(|k| m >> k & 1 == 1).collect());
        }
    } else {
        for _ in 0..opts.random_subsets {
            subsets.push((0..n).map(|_| rng.random_bool(0.5)).collect());
        }
    }
    let base_crc = crc32c::crc32c(persisted);
    for pick in subsets {
        let mut img = persisted.to_vec();
        let mut crc = 0u32;
        let mut chosen = 0usize;
        for (k, &line) in inflight.iter().enumerate() {
            if pick[k] {
                let r = line * CACHE_LINE..(line + 1) * CACHE_LINE;
                img[r.clone()].copy_from_slice(&current[r.clone()]);
                crc = crc32c::crc32c_append(crc, &(line as u64).to_le_bytes());
                crc = crc32c::crc32c_append(crc, &current[r]);
                chosen += 1;
            }
        }
        if !seen.insert((base_crc, crc, chosen)) {
            continue;
        }
        report.images += 1;
        if matches!(op, Op::WriteAsync(..) | Op::AppendAsync(..)) {
            report.async_images += 1;
        }
        if let Err(v) = check_image(&img, before, after) {
            report.violations.push(format!(
                "during {op:?}, {chosen} of {n} in-flight lines persisted: {v}"
            ));
            if report.violations.len() >= opts.max_violations {
                return;
            }
        }
    }
}

/// Mounts a crash image and checks it: fsck clean, state before or after, still usable.
pub fn check_image(img: &[u8], before: &State, after: &State) -> Result<(), String> {
    let f = fsck::check(img);
    if !f.healthy() {
        return Err(format!("fsck: {:?}", f.problems));
    }
    let region = Region::memory(img.len() as u64, Persist::detect()).map_err(|e| e.to_string())?;
    // SAFETY: a fresh private mapping of img.len() bytes that nothing else references.
    unsafe { std::ptr::copy_nonoverlapping(img.as_ptr(), region.as_mut_ptr(), img.len()) };
    let fs = Fs::new(Store::mount(region, mover()).map_err(|e| format!("mount: {e}"))?);
    let s = state(&fs)?;
    if &s != before && &s != after {
        return Err(format!(
            "state is neither before nor after: got {:?}, before {:?}, after {:?}",
            summary(&s),
            summary(before),
            summary(after)
        ));
    }
    let probe = "/.probe";
    let fd = fs
        .open(probe, OpenFlags::CREATE, 0o644)
        .map_err(|e| format!("create after recovery: {e}"))?;
    fs.write(fd, &[7u8; 10000])
        .map_err(|e| format!("write after recovery: {e}"))?;
    fs.close(fd).map_err(|e| e.to_string())?;
    if fs.read_all(probe).map_err(|e| e.to_string())? != vec![7u8; 10000] {
        return Err("read after recovery returned other bytes".into());
    }
    fs.unlink(probe)
        .map_err(|e| format!("unlink after recovery: {e}"))?;
    fs.unmount().map_err(|e| e.to_string())
}

fn summary(s: &State) -> Vec<(String, u32, u32, usize, u64, usize)> {
    s.iter()
        .map(|(p, n)| {
            let x = n.xattrs.len();
            (p.clone(), n.mode, n.nlink, n.body.len(), n.generation, x)
        })
        .collect()
}

/// A small valid store image (the crash harness's set-up state), built once.
pub fn sample_image() -> Vec<u8> {
    static IMAGE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let region = Region::memory(REGION, Persist::detect()).expect("memory region");
            let ptr = region.as_ptr();
            let fs = Fs::new(Store::format(region, mover(), Owner::current()).expect("format"));
            setup(&fs);
            fs.symlink("/a", "/s").expect("setup symlink");
            // SAFETY: the region is REGION bytes, mapped while `fs` lives, written by no one now.
            let img = unsafe { std::slice::from_raw_parts(ptr, REGION as usize) }.to_vec();
            drop(fs);
            img
        })
        .clone()
}

/// Feeds untrusted bytes to fsck and mount, for the fuzzer and the bad-input tests. `data` is
/// read as patches over [`sample_image`] (4-byte offset, then a byte) and, separately, as the
/// start of a raw image. Whatever the bytes, this must return without panicking.
pub fn probe_image(data: &[u8]) {
    let mut img = sample_image();
    for p in data.chunks_exact(5) {
        let off = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize % img.len();
        // Bias towards the metadata at the front of the image.
        let off = if p[0] & 1 == 0 { off % (64 << 10) } else { off };
        img[off] = p[4];
    }
    try_image(&img);
    let mut raw = vec![0u8; REGION as usize];
    let n = data.len().min(raw.len());
    raw[..n].copy_from_slice(&data[..n]);
    try_image(&raw);
}

fn try_image(img: &[u8]) {
    let _ = fsck::check(img);
    let Ok(region) = Region::memory(img.len() as u64, Persist::detect()) else {
        return;
    };
    // SAFETY: a fresh private mapping of img.len() bytes that nothing else references.
    unsafe { std::ptr::copy_nonoverlapping(img.as_ptr(), region.as_mut_ptr(), img.len()) };
    if let Ok(store) = Store::mount(region, mover()) {
        let fs = Fs::new(store);
        let _ = state(&fs);
        let _ = fs.unmount();
    }
}
