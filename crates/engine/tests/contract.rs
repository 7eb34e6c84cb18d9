//! The engine contract, one suite run against every engine: the `threads` engine (the
//! reference) and the DSA engine over the device model (`dsa::model`, feature `testing`).
//! Each test is written once, generic over a constructor ([`Make`]).
//!
//! The same suite runs on real DSA work queues (two enabled user queues, see `docs/dsa.md`)
//! with `cargo test -p switchyard-engine --test contract -- --ignored`; no host here has one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_engine::dsa::descriptor::HwDesc;
use switchyard_engine::dsa::model::{ModelConfig, ModelDevice};
use switchyard_engine::dsa::{DsaConfig, DsaEngine, Mode, Portal, Refused};
use switchyard_engine::{
    Batch, Budget, Descriptor, DurableRecord, Engine, FaultPlan, Flags, Op, Status, SubmitError,
    ThreadsConfig, ThreadsEngine,
};

/// An engine under test, with what it runs on. Fields drop in order: the engine (which
/// finishes its work) before the device model it submits to.
struct Rig {
    engine: Box<dyn Engine>,
    models: Vec<ModelDevice>,
    gate: Option<Arc<AtomicBool>>,
    stalled: bool,
}

impl Rig {
    /// Lets a stalled rig's channel run.
    fn unstall(&mut self) {
        if std::mem::take(&mut self.stalled) {
            for m in &self.models {
                m.release(m.work_queue().size as usize);
            }
            if let Some(g) = &self.gate {
                g.store(false, Ordering::Release);
            }
        }
    }
}

impl Drop for Rig {
    /// A test that failed while its rig was stalled must not leave the engine's drop waiting
    /// for a queue that never frees.
    fn drop(&mut self) {
        self.unstall();
    }
}

/// A real queue's portal that answers "full" while its gate is closed (a stalled hardware rig).
struct Gate {
    inner: Box<dyn Portal>,
    closed: Arc<AtomicBool>,
}

impl Portal for Gate {
    unsafe fn submit(&self, desc: &HwDesc) -> Result<(), Refused> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Refused::Full);
        }
        // SAFETY: forwarded from this function's contract.
        unsafe { self.inner.submit(desc) }
    }
}

/// Builds a rig of `channels` channels, each with a submission queue of `depth` batches;
/// `stalled`: its channels do not start work for a while (threads: each batch waits 30 ms;
/// DSA: another process holds every entry of the shared queue until [`Rig::unstall`]).
type Make = fn(channels: usize, depth: usize, stalled: bool) -> Rig;

fn threads(channels: usize, depth: usize, stalled: bool) -> Rig {
    let cfg = ThreadsConfig {
        channels,
        queue_depth: depth,
        pin: false,
        faults: FaultPlan {
            delay: if stalled {
                Duration::from_millis(30)
            } else {
                Duration::ZERO
            },
            ..FaultPlan::default()
        },
        ..ThreadsConfig::default()
    };
    Rig {
        engine: Box::new(ThreadsEngine::start(cfg).unwrap()),
        models: Vec::new(),
        gate: None,
        stalled: false,
    }
}

fn dsa(channels: usize, depth: usize, stalled: bool) -> Rig {
    let models: Vec<ModelDevice> = (0..channels)
        .map(|_| {
            ModelDevice::start(ModelConfig {
                mode: Mode::Shared,
                size: 8,
                max_transfer_size: 16 << 10,
                max_batch_size: 8,
                ..ModelConfig::default()
            })
        })
        .collect();
    if stalled {
        models.iter().for_each(|m| m.occupy(8));
    }
    let queues = models
        .iter()
        .map(|m| (m.work_queue(), Box::new(m.portal()) as Box<dyn Portal>))
        .collect();
    let cfg = DsaConfig {
        queue_depth: depth,
        ..DsaConfig::default()
    };
    Rig {
        engine: Box::new(DsaEngine::start(queues, cfg).unwrap()),
        models,
        gate: None,
        stalled,
    }
}

/// The DSA engine on this host's enabled user work queues (the first `channels` of them).
fn hardware(channels: usize, depth: usize, stalled: bool) -> Rig {
    let queues = switchyard_engine::dsa::discover(
        std::path::Path::new(switchyard_engine::dsa::sysfs::SYSFS_ROOT),
        std::path::Path::new(switchyard_engine::dsa::sysfs::DEV_ROOT),
    )
    .unwrap_or_else(|missing| panic!("{missing}"));
    assert!(
        queues.len() >= channels,
        "this test needs {channels} enabled user work queues"
    );
    let gate = Arc::new(AtomicBool::new(stalled));
    let with = queues[..channels]
        .iter()
        .map(|q| {
            let one = DsaEngine::portal(q).unwrap();
            let p: Box<dyn Portal> = Box::new(Gate {
                inner: one,
                closed: gate.clone(),
            });
            (q.clone(), p)
        })
        .collect();
    let cfg = DsaConfig {
        queue_depth: depth,
        ..DsaConfig::default()
    };
    Rig {
        engine: Box::new(DsaEngine::start(with, cfg).unwrap()),
        models: Vec::new(),
        gate: Some(gate),
        stalled,
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn copies(dst: &mut [u8], src: &[u8], piece: usize, flags: Flags) -> Vec<Descriptor> {
    (0..src.len())
        .step_by(piece)
        .map(|o| {
            let len = piece.min(src.len() - o);
            // SAFETY: o + len <= the length of both slices.
            let (d, s) = unsafe { (dst.as_mut_ptr().add(o), src.as_ptr().add(o)) };
            Descriptor {
                op: Op::Copy { dst: d, src: s },
                len,
                flags,
            }
        })
        .collect()
}

fn copies_complete_byte_exact_and_advance_the_record(make: Make) {
    let rig = make(1, 64, false);
    let e = &rig.engine;
    for round in 0..3u64 {
        // 300 000 bytes in 64 KiB descriptors: DSA cuts them at the model's 16 KiB transfers
        // and into chunks of 8.
        let src = pattern(300_000, round as u8);
        let mut dst = vec![0u8; src.len()];
        let (b, mut t) = Batch::new(copies(&mut dst, &src, 65536, Flags::NONE));
        // SAFETY: src and dst outlive the wait below and nothing else touches them.
        let pos = unsafe { e.try_submit(0, b) }.unwrap();
        assert_eq!(pos, round);
        let o = t.wait(1000);
        assert_eq!((o.status, o.bytes_completed), (Status::Success, 300_000));
        assert_eq!(o.helped_bytes, 0);
        assert_eq!(dst, src);
        let rec = e.record(0);
        assert_eq!(
            (rec.seq, rec.status, rec.bytes_completed),
            (round + 1, Some(Status::Success), 300_000)
        );
    }
    assert_eq!(e.queue_depth(0), 0);
}

fn fill_compare_and_flush(make: Make) {
    let rig = make(1, 64, false);
    let e = &rig.engine;
    let mut buf = vec![0u8; 10_000];
    let fill = Descriptor {
        op: Op::Fill {
            dst: buf[3..].as_mut_ptr(),
            pattern: 0x0807_0605_0403_0201,
        },
        len: 9_000,
        flags: Flags::CACHE_CONTROL,
    };
    let (b, mut t) = Batch::new(vec![fill]);
    // SAFETY: buf outlives the wait.
    unsafe { e.try_submit(0, b) }.unwrap();
    assert_eq!(t.wait(1000).status, Status::Success);
    assert!(buf[3..9_003]
        .iter()
        .enumerate()
        .all(|(i, &x)| x == (i % 8) as u8 + 1));
    assert_eq!((buf[2], buf[9_003]), (0, 0));

    let a = pattern(20_000, 1);
    let mut b2 = a.clone();
    b2[17_321] ^= 0xff;
    let compare = |len| Descriptor {
        op: Op::Compare {
            a: a.as_ptr(),
            b: b2.as_ptr(),
        },
        len,
        flags: Flags::NONE,
    };
    let flush = Descriptor {
        op: Op::Flush { addr: a.as_ptr() },
        len: 20_000,
        flags: Flags::DURABLE,
    };
    let (b, mut t) = Batch::new(vec![compare(17_000), flush]);
    // SAFETY: a and b2 outlive the wait.
    unsafe { e.try_submit(0, b) }.unwrap();
    assert_eq!(t.wait(1000).status, Status::Success);
    let (b, mut t) = Batch::new(vec![flush, compare(20_000)]);
    // SAFETY: as above.
    unsafe { e.try_submit(0, b) }.unwrap();
    let o = t.wait(1000);
    assert_eq!(
        (o.status, o.bytes_completed),
        (Status::Mismatch, 20_000 + 17_321)
    );
}

fn suspended_channels_refuse_and_resume(make: Make) {
    let rig = make(2, 8, false);
    let e = &rig.engine;
    e.suspend(1);
    assert!(e.is_suspended(1) && !e.is_suspended(0));
    let src = pattern(4096, 3);
    let mut dst = vec![0u8; 4096];
    let (b, _t) = Batch::new(copies(&mut dst, &src, 4096, Flags::NONE));
    // SAFETY: refused, so never run.
    let back = unsafe { e.try_submit(1, b) }.unwrap_err();
    assert!(matches!(back, SubmitError::Suspended(_)));
    let b = back.into_batch();
    // SAFETY: no such channel: never run.
    let refused = unsafe { e.try_submit(7, b) };
    assert!(matches!(refused, Err(SubmitError::NoSuchChannel(_))));
    e.resume(1);
    let (b, mut t) = Batch::new(copies(&mut dst, &src, 1000, Flags::NONE));
    // SAFETY: buffers outlive the wait.
    unsafe { e.try_submit(1, b) }.unwrap();
    assert_eq!(t.wait(1000).status, Status::Success);
    assert_eq!(dst, src);
    assert_eq!(e.record(1).seq, 1);
    assert_eq!(e.record(0).seq, 0);
}

fn a_full_queue_pushes_back_and_cancelled_batches_never_run(make: Make) {
    let mut rig = make(1, 2, true);
    let src = pattern(4096, 9);
    let mut dsts = vec![vec![0u8; 4096]; 5];
    let (mut tickets, mut full) = (Vec::new(), false);
    for d in dsts.iter_mut() {
        let (b, t) = Batch::new(copies(d, &src, 4096, Flags::NONE));
        // SAFETY: buffers outlive the waits below.
        match unsafe { rig.engine.try_submit(0, b) } {
            Ok(_) => tickets.push(t),
            Err(SubmitError::Full(_)) => full = true,
            Err(other) => panic!("{other:?}"),
        }
    }
    assert!(full, "a queue of 2 behind a stalled channel must fill");
    assert!(rig.engine.queue_depth(0) >= 2);
    let last = tickets.last().unwrap();
    assert!(!last.started());
    assert!(last.try_cancel());
    rig.unstall();
    let outcomes: Vec<_> = tickets.iter_mut().map(|t| t.wait(0).status).collect();
    assert_eq!(outcomes.last(), Some(&Status::Cancelled));
    assert!(dsts[outcomes.len() - 1].iter().all(|&x| x == 0));
    assert_eq!(dsts[0], src);
    let deadline = Instant::now() + Duration::from_secs(5);
    while rig.engine.record(0).seq < outcomes.len() as u64 {
        assert!(Instant::now() < deadline);
        std::thread::yield_now();
    }
    assert_eq!(rig.engine.record(0).status, Some(Status::Cancelled));
}

fn dropping_the_engine_finishes_queued_work(make: Make) {
    let src = pattern(200_000, 4);
    let mut dst = vec![0u8; src.len()];
    let mut t = {
        let rig = make(1, 8, false);
        let (b, t) = Batch::new(copies(&mut dst, &src, 4096, Flags::NONE));
        // SAFETY: buffers outlive the engine, which finishes all work on drop.
        unsafe { rig.engine.try_submit(0, b) }.unwrap();
        t
    };
    assert_eq!(t.wait(0).status, Status::Success);
    assert_eq!(dst, src);
}

fn empty_and_zero_length_batches_succeed(make: Make) {
    let rig = make(1, 8, false);
    let (b, mut t) = Batch::new(Vec::new());
    // SAFETY: no buffers.
    unsafe { rig.engine.try_submit(0, b) }.unwrap();
    assert_eq!(t.wait(1000).status, Status::Success);
    let mut x = [0u8; 1];
    let zero = Descriptor {
        op: Op::Copy {
            dst: x.as_mut_ptr(),
            src: [1u8].as_ptr(),
        },
        len: 0,
        flags: Flags::NONE,
    };
    let (b, mut t) = Batch::new(vec![zero, zero]);
    // SAFETY: zero-length: nothing is touched.
    unsafe { rig.engine.try_submit(0, b) }.unwrap();
    let o = t.wait(1000);
    assert_eq!((o.status, o.bytes_completed), (Status::Success, 0));
    assert_eq!(rig.engine.record(0).seq, 2);
}

/// A 64-byte aligned line standing in for a record in persistent memory.
#[repr(C, align(64))]
struct Line([u8; 64]);

fn a_durable_record_covers_finished_batches(make: Make) {
    let rig = make(1, 8, false);
    let mut line = Line([0; 64]);
    // SAFETY: `line` is aligned, outlives every batch below, and only the engine writes it.
    let r = unsafe { DurableRecord::new(line.0.as_mut_ptr()) };
    for round in 0..3u64 {
        let src = pattern(10_000, round as u8);
        let mut dst = vec![0u8; src.len()];
        let (b, mut t) = Batch::new(copies(&mut dst, &src, 4096, Flags::DURABLE));
        // SAFETY: buffers outlive the wait.
        let pos = unsafe { rig.engine.try_submit(0, b.with_durable_record(r)) }.unwrap();
        assert_eq!(t.wait(1000).status, Status::Success);
        assert!(r.image().covers(pos));
        assert_eq!(dst, src);
    }
}

fn concurrent_submitters_get_distinct_positions_and_all_finish(make: Make) {
    let rig = make(2, 4, false);
    let e = &*rig.engine;
    std::thread::scope(|s| {
        for who in 0..4u8 {
            s.spawn(move || {
                for i in 0..50 {
                    let src = pattern(5_000 + i, who);
                    let mut dst = vec![0u8; src.len()];
                    let (mut b, mut t) = Batch::new(copies(&mut dst, &src, 1024, Flags::NONE));
                    loop {
                        // SAFETY: buffers outlive the wait.
                        match unsafe { e.try_submit(usize::from(who % 2), b) } {
                            Ok(_) => break,
                            Err(back) => b = back.into_batch(),
                        }
                        std::thread::yield_now();
                    }
                    assert_eq!(t.wait(100).status, Status::Success);
                    assert_eq!(dst, src);
                }
            });
        }
    });
    assert_eq!(e.record(0).seq + e.record(1).seq, 200);
}

fn a_budgeted_channel_pauses_and_keeps_accepting(make: Make) {
    let rig = make(1, 8, false);
    let e = &rig.engine;
    let epoch = Duration::from_millis(2);
    let budget = Budget {
        bytes: 65536,
        epoch_ns: epoch.as_nanos() as u64,
        lapses_ns: 0,
    };
    assert!(e.set_budget(0, Some(budget)));
    assert_eq!(e.budget(0), Some(budget));
    let src = pattern(1 << 20, 3);
    let mut dst = vec![0u8; src.len()];
    let small = pattern(4096, 4);
    let mut small_dst = vec![0u8; 4096];
    let begin = Instant::now();
    let (a, mut ta) = Batch::new(copies(&mut dst, &src, 65536, Flags::NONE));
    // SAFETY: every buffer outlives the waits below and nothing else touches them.
    unsafe { e.try_submit(0, a) }.unwrap();
    std::thread::sleep(epoch);
    let (b, mut tb) = Batch::new(copies(&mut small_dst, &small, 4096, Flags::NONE));
    // SAFETY: as above.
    unsafe { e.try_submit(0, b) }.expect("a paused channel accepts work");
    assert!(!e.is_suspended(0));
    assert_eq!(ta.wait(1000).status, Status::Success);
    assert_eq!(tb.wait(1000).status, Status::Success);
    // 1 MiB + 4 KiB at 64 KiB per 2 ms epoch is 16 epochs' budget and a little: less the
    // first epoch (begun before the submission) and the last, which a channel may overshoot
    // by less than one piece (the DSA engine's pieces are 16 KiB here), at least 14 epochs
    // pass. A channel slowed by a loaded host may not pause in every epoch.
    assert!(begin.elapsed() >= epoch * 14, "{:?}", begin.elapsed());
    assert_eq!((&dst, &small_dst), (&src, &small));
    let paused = e.pauses(0);
    assert!(paused.epochs >= 7 && paused.ns > 0, "{paused:?}");
    e.set_budget(0, None);
    assert_eq!(e.budget(0), None);
    dst.fill(0);
    let (c, mut tc) = Batch::new(copies(&mut dst, &src, 65536, Flags::NONE));
    // SAFETY: as above.
    unsafe { e.try_submit(0, c) }.unwrap();
    assert_eq!(tc.wait(1000).status, Status::Success);
    assert_eq!(dst, src);
    assert_eq!(e.pauses(0).epochs, paused.epochs);
}

macro_rules! suite {
    ($($test:ident),* $(,)?) => {
        mod threads_engine {
            $(#[test] fn $test() { super::$test(super::threads) })*
        }
        mod dsa_engine_on_the_model {
            $(#[test] fn $test() { super::$test(super::dsa) })*
        }
        mod dsa_engine_on_hardware {
            $(
                #[test]
                #[ignore = "needs DSA work queues set up with accel-config (docs/dsa.md)"]
                fn $test() { super::$test(super::hardware) }
            )*
        }
    };
}

suite!(
    copies_complete_byte_exact_and_advance_the_record,
    fill_compare_and_flush,
    suspended_channels_refuse_and_resume,
    a_full_queue_pushes_back_and_cancelled_batches_never_run,
    dropping_the_engine_finishes_queued_work,
    empty_and_zero_length_batches_succeed,
    a_durable_record_covers_finished_batches,
    concurrent_submitters_get_distinct_positions_and_all_finish,
    a_budgeted_channel_pauses_and_keeps_accepting,
);
