//! Behaviour of the threads engine against the contract.

use std::time::Duration;
use switchyard_engine::{
    Batch, Descriptor, DurableRecord, Engine, FaultPlan, Flags, Op, Status, SubmitError,
    ThreadsConfig, ThreadsEngine,
};
use switchyard_media::trace::Event;
use switchyard_media::trace::Recorder;

fn engine(f: impl FnOnce(&mut ThreadsConfig)) -> ThreadsEngine {
    let mut cfg = ThreadsConfig {
        pin: false,
        ..ThreadsConfig::default()
    };
    f(&mut cfg);
    ThreadsEngine::start(cfg).unwrap()
}

fn copies(dst: &mut [u8], src: &[u8], piece: usize, flags: Flags) -> Vec<Descriptor> {
    (0..src.len())
        .step_by(piece)
        .map(|o| {
            let len = piece.min(src.len() - o);
            // SAFETY: o + len <= len of both slices.
            let (d, s) = unsafe { (dst.as_mut_ptr().add(o), src.as_ptr().add(o)) };
            Descriptor {
                op: Op::Copy { dst: d, src: s },
                len,
                flags,
            }
        })
        .collect()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn a_batch_of_copies_completes_byte_exact_and_advances_the_record() {
    let e = engine(|_| {});
    for round in 0..3u64 {
        let src = pattern(300_000, round as u8);
        let mut dst = vec![0u8; src.len()];
        let (b, mut t) = Batch::new(copies(&mut dst, &src, 65536, Flags::NONE));
        // SAFETY: src/dst outlive the wait below and nothing else touches them.
        let pos = unsafe { e.try_submit(0, b) }.unwrap();
        assert_eq!(pos, round);
        let o = t.wait(1000);
        assert_eq!((o.status, o.bytes_completed), (Status::Success, 300_000));
        assert!(o.finished_ns >= o.started_ns);
        assert_eq!(dst, src);
        let rec = e.record(0);
        assert_eq!(
            (rec.seq, rec.status, rec.bytes_completed),
            (round + 1, Some(Status::Success), 300_000)
        );
    }
    assert_eq!(e.queue_depth(0), 0);
}

#[test]
fn durable_copies_are_flushed_and_fenced_before_completion() {
    let rec = Recorder::new();
    let e = engine(|c| c.persist = c.persist.traced(&rec));
    let src = pattern(70_001, 3);
    let mut dst = vec![0u8; 70_100];
    let d = &mut dst[7..];
    let (b, mut t) = Batch::new(copies(d, &src, 4096, Flags::DURABLE));
    // SAFETY: buffers outlive the wait.
    unsafe { e.try_submit(0, b) }.unwrap();
    assert_eq!(t.wait(1000).status, Status::Success);
    assert_eq!(rec.first_non_durable(d.as_ptr() as usize, src.len()), None);
}

#[test]
fn fill_compare_and_flush_descriptors() {
    let e = engine(|_| {});
    let mut a = vec![0u8; 10_000];
    let mut b = vec![0u8; 10_000];
    let descs = vec![
        Descriptor {
            op: Op::Fill {
                dst: a.as_mut_ptr(),
                pattern: 0x0102_0304_0506_0708,
            },
            len: a.len(),
            flags: Flags::CACHE_CONTROL,
        },
        Descriptor {
            op: Op::Fill {
                dst: b.as_mut_ptr(),
                pattern: 0x0102_0304_0506_0708,
            },
            len: b.len(),
            flags: Flags::DURABLE,
        },
        Descriptor {
            op: Op::Compare {
                a: a.as_ptr(),
                b: b.as_ptr(),
            },
            len: a.len(),
            flags: Flags::FENCE,
        },
        Descriptor {
            op: Op::Flush { addr: a.as_ptr() },
            len: a.len(),
            flags: Flags::DURABLE,
        },
    ];
    let (batch, mut t) = Batch::new(descs);
    // SAFETY: buffers outlive the wait.
    unsafe { e.try_submit(0, batch) }.unwrap();
    assert_eq!(t.wait(1000).status, Status::Success);
    assert_eq!(a[..8], [8, 7, 6, 5, 4, 3, 2, 1]);
    b[5000] ^= 1;
    let (batch, mut t) = Batch::new(vec![Descriptor {
        op: Op::Compare {
            a: a.as_ptr(),
            b: b.as_ptr(),
        },
        len: a.len(),
        flags: Flags::NONE,
    }]);
    // SAFETY: buffers outlive the wait.
    unsafe { e.try_submit(0, batch) }.unwrap();
    let o = t.wait(1000);
    assert_eq!((o.status, o.bytes_completed), (Status::Mismatch, 5000));
}

#[test]
fn injected_partial_and_error_completions_report_an_exact_prefix() {
    let e = engine(|c| {
        c.faults = FaultPlan {
            partial_every: 2,
            error_every: 3,
            ..FaultPlan::default()
        }
    });
    let mut seen = (0, 0);
    for n in 1..=6u64 {
        let src = pattern(200_000, n as u8);
        let mut dst = vec![0u8; src.len()];
        let (b, mut t) = Batch::new(copies(&mut dst, &src, 8192, Flags::NONE));
        // SAFETY: buffers outlive the wait.
        unsafe { e.try_submit(0, b) }.unwrap();
        let o = t.wait(1000);
        let k = o.bytes_completed as usize;
        match o.status {
            Status::Success => assert_eq!(k, src.len()),
            Status::Partial => seen.0 += 1,
            Status::Error => seen.1 += 1,
            s => panic!("unexpected {s:?}"),
        }
        assert_eq!(dst[..k], src[..k], "the completed prefix is really done");
        assert!(
            dst[k..].iter().all(|&x| x == 0),
            "nothing beyond the prefix was written"
        );
    }
    assert_eq!(seen, (2, 2), "batches 2,4 partial; 3,6 error");
}

#[test]
fn suspended_channels_refuse_and_hold_work_until_resumed() {
    let e = engine(|_| {});
    let src = pattern(4096, 1);
    let mut dst = vec![0u8; 4096];
    let (b, mut t) = Batch::new(copies(&mut dst, &src, 4096, Flags::NONE));
    e.suspend(0);
    assert!(e.is_suspended(0));
    // SAFETY: buffers outlive the wait.
    let b = match unsafe { e.try_submit(0, b) } {
        Err(SubmitError::Suspended(b)) => b,
        other => panic!("expected Suspended, got {other:?}"),
    };
    e.resume(0);
    // SAFETY: buffers outlive the wait.
    unsafe { e.try_submit(0, b) }.unwrap();
    assert_eq!(t.wait(1000).status, Status::Success);
    assert_eq!(dst, src);
}

/// A channel with a budget of one 64 KiB descriptor per 2 ms epoch takes at least 15 epoch
/// boundaries for a 1 MiB batch of 64 KiB descriptors, accepts another batch meanwhile
/// (paused, not suspended), loses no byte, and counts its pauses; once the budget is lifted
/// it pauses no more.
#[test]
fn a_budgeted_channel_pauses_between_descriptors_and_keeps_accepting() {
    use switchyard_engine::Budget;
    let e = engine(|_| {});
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
    let begin = std::time::Instant::now();
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
    assert!(begin.elapsed() >= epoch * 15, "{:?}", begin.elapsed());
    assert_eq!(dst, src);
    assert_eq!(small_dst, small);
    let paused = e.pauses(0);
    assert!(paused.epochs >= 15 && paused.ns > 0, "{paused:?}");
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

#[test]
fn a_full_queue_pushes_back_and_cancelled_batches_are_never_run() {
    let e = engine(|c| {
        c.queue_depth = 2;
        c.faults.delay = Duration::from_millis(30);
    });
    let src = pattern(4096, 9);
    let mut dsts = vec![vec![0u8; 4096]; 4];
    let mut tickets = Vec::new();
    let mut full = false;
    for d in dsts.iter_mut() {
        let (b, t) = Batch::new(copies(d, &src, 4096, Flags::NONE));
        // SAFETY: buffers outlive the waits below.
        match unsafe { e.try_submit(0, b) } {
            Ok(_) => tickets.push(t),
            Err(SubmitError::Full(_)) => full = true,
            Err(other) => panic!("{other:?}"),
        }
    }
    assert!(full, "a queue of 2 behind a 30 ms batch must fill");
    assert!(e.queue_depth(0) >= 2);
    let last = tickets.last().unwrap();
    assert!(!last.started());
    assert!(last.try_cancel());
    let outcomes: Vec<_> = tickets.iter_mut().map(|t| t.wait(0).status).collect();
    assert_eq!(outcomes.last(), Some(&Status::Cancelled));
    let cancelled_ix = outcomes.len() - 1;
    assert!(dsts[cancelled_ix].iter().all(|&x| x == 0));
    assert_eq!(dsts[0], src);
    // The channel record still counts the cancelled batch, in order.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while e.record(0).seq < outcomes.len() as u64 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::yield_now();
    }
    assert_eq!(e.record(0).status, Some(Status::Cancelled));
}

#[test]
fn dropping_the_engine_finishes_queued_work() {
    let src = pattern(65536, 4);
    let mut dst = vec![0u8; 65536];
    let mut t = {
        let e = engine(|c| c.faults.delay = Duration::from_millis(5));
        let (b, t) = Batch::new(copies(&mut dst, &src, 4096, Flags::NONE));
        // SAFETY: buffers outlive the engine, which finishes all work on drop.
        unsafe { e.try_submit(0, b) }.unwrap();
        t
    };
    assert_eq!(t.wait(0).status, Status::Success);
    assert_eq!(dst, src);
}

/// A 64-byte aligned line standing in for a record in persistent memory.
#[repr(C, align(64))]
struct Line([u8; 64]);

#[test]
fn a_durable_record_is_written_after_the_data_is_durable_and_before_completion() {
    let rec = Recorder::new();
    let e = engine(|c| c.persist = c.persist.traced(&rec));
    let mut line = Line([0; 64]);
    // SAFETY: `line` is aligned, outlives every batch below, and only the engine writes it.
    let r = unsafe { DurableRecord::new(line.0.as_mut_ptr()) };
    let line_addr = line.0.as_ptr() as usize;
    for round in 0..3u64 {
        let src = pattern(100_000, round as u8);
        let mut dst = vec![0u8; src.len()];
        let (b, mut t) = Batch::new(copies(&mut dst, &src, 16384, Flags::DURABLE));
        // SAFETY: buffers outlive the wait.
        let pos = unsafe { e.try_submit(0, b.with_durable_record(r)) }.unwrap();
        // The volatile record can only say "done" once the durable one does.
        assert_eq!(t.wait(1000).status, Status::Success);
        let img = r.image();
        assert_eq!(img.seq, pos + 1);
        assert!(img.covers(pos) && !img.covers(pos + 1));
        assert_eq!(rec.first_non_durable(line_addr, 8), None);
        // The record's store comes after the last data byte became durable.
        let ev = rec.events();
        let record_store = ev
            .iter()
            .rposition(|t| matches!(t.event, Event::Store { addr, .. } if addr == line_addr))
            .expect("the worker stored the record");
        let before =
            Recorder::first_non_durable_in(&ev[..record_store], dst.as_ptr() as usize, dst.len());
        assert_eq!(before, None, "record written before the data was durable");
        assert_eq!(dst, src);
    }
}

#[test]
fn an_incomplete_batch_leaves_a_hole_until_the_submitter_repairs_it() {
    let e = engine(|c| {
        c.faults = FaultPlan {
            partial_every: 2,
            ..FaultPlan::default()
        }
    });
    let mut line = Line([0; 64]);
    // SAFETY: as above.
    let r = unsafe { DurableRecord::new(line.0.as_mut_ptr()) };
    let persist = switchyard_media::Persist::detect();
    let mut holes = Vec::new();
    for _ in 0..4 {
        let src = pattern(200_000, 9);
        let mut dst = vec![0u8; src.len()];
        let (b, mut t) = Batch::new(copies(&mut dst, &src, 4096, Flags::DURABLE));
        // SAFETY: buffers outlive the wait.
        let pos = unsafe { e.try_submit(0, b.with_durable_record(r)) }.unwrap();
        let o = t.wait(1000);
        let img = r.image();
        assert_eq!(img.seq, pos + 1);
        if o.status == Status::Success {
            assert!(img.covers(pos));
        } else {
            assert!(
                !img.covers(pos),
                "a partial batch must not count as complete"
            );
            holes.push(pos);
        }
    }
    assert_eq!(holes.len(), 2);
    for &pos in &holes {
        r.clear_hole(&persist, pos);
        assert!(r.image().covers(pos));
    }
}

/// Helps `probe`'s batch until there is nothing left to take; the bytes copied.
fn help_all(probe: &switchyard_engine::Probe, persist: &switchyard_media::Persist) -> usize {
    std::iter::from_fn(|| Some(probe.help(persist)).filter(|&n| n > 0)).sum()
}

/// An engine whose worker waits `delay` after starting each batch.
fn delayed(delay: Duration) -> ThreadsEngine {
    engine(|c| {
        c.faults = FaultPlan {
            delay,
            ..FaultPlan::default()
        }
    })
}

/// A waiter helping from the tail while the worker is held up (an injected start delay) takes
/// every descriptor; the outcome counts them as done and helped, and the data is exact.
#[test]
fn a_helper_copies_the_tail_of_a_started_batch_and_the_outcome_counts_it() {
    let e = delayed(Duration::from_millis(200));
    let persist = switchyard_media::Persist::detect();
    let src = pattern(16 * 4096 + 100, 7);
    let mut dst = vec![0u8; src.len()];
    let (b, mut t) = Batch::new(copies(&mut dst, &src, 4096, Flags::CACHE_CONTROL));
    let probe = t.probe();
    // SAFETY: buffers outlive the wait.
    unsafe { e.try_submit(0, b) }.unwrap();
    while !t.started() {
        std::thread::yield_now();
    }
    let helped = help_all(&probe, &persist);
    assert_eq!(
        helped,
        src.len(),
        "the worker slept through it: the helper did it all"
    );
    let o = t.wait(1000);
    assert_eq!(
        (o.status, o.bytes_completed),
        (Status::Success, src.len() as u64)
    );
    assert_eq!(o.helped_bytes, src.len() as u64);
    assert_eq!(dst, src);
    assert_eq!(probe.help(&persist), 0, "a finished batch is not helped");
}

/// A batch queued behind one the worker is held up on is helped too: the helper takes all of
/// it, and the worker, reaching it, finds nothing left and publishes it done.
#[test]
fn a_queued_batch_is_helped_before_the_worker_reaches_it() {
    let e = delayed(Duration::from_millis(200));
    let persist = switchyard_media::Persist::detect();
    let (first_src, src) = (pattern(4096, 1), pattern(8 * 4096, 2));
    let (mut first_dst, mut dst) = (vec![0u8; 4096], vec![0u8; src.len()]);
    let (first, mut first_t) = Batch::new(copies(&mut first_dst, &first_src, 4096, Flags::NONE));
    let (queued, mut t) = Batch::new(copies(&mut dst, &src, 4096, Flags::NONE));
    let probe = t.probe();
    // SAFETY: buffers outlive the waits.
    unsafe {
        e.try_submit(0, first).unwrap();
        e.try_submit(0, queued).unwrap();
    }
    while !first_t.started() {
        std::thread::yield_now();
    }
    let helped = help_all(&probe, &persist);
    assert!(!t.started(), "the worker is still held on the first batch");
    assert_eq!(helped, src.len());
    let o = t.wait(1000);
    assert_eq!(
        (o.status, o.helped_bytes),
        (Status::Success, src.len() as u64)
    );
    assert_eq!(dst, src);
    assert_eq!(
        first_t.wait(1000).helped_bytes,
        0,
        "nobody helped the first batch"
    );
    assert_eq!(first_dst, first_src);
}

/// Helpers racing the worker on many batches, with injected partial completions: every byte
/// is copied once by someone, a Success outcome covers the whole batch, a Partial one an exact
/// prefix, and helped bytes never exceed what completed.
#[test]
fn helpers_and_the_worker_meet_in_the_middle_and_prefixes_stay_exact() {
    // The worker pauses 50 µs after starting each batch, so the helper, spinning by then,
    // claims descriptors from the tail whatever the scheduler does (without it, a busy
    // machine let the worker finish all 30 batches before the helper first ran).
    let e = engine(|c| {
        c.faults = FaultPlan {
            partial_every: 3,
            delay: std::time::Duration::from_micros(50),
            ..FaultPlan::default()
        }
    });
    let persist = switchyard_media::Persist::detect();
    let mut total_helped = 0;
    for n in 1..=30u64 {
        let src = pattern(1 << 20, n as u8);
        let mut dst = vec![0u8; src.len()];
        let (b, mut t) = Batch::new(copies(&mut dst, &src, 16384, Flags::NONE));
        let probe = t.probe();
        let go = std::sync::Arc::new(std::sync::Barrier::new(2));
        let ready = go.clone();
        let helper = std::thread::spawn(move || {
            ready.wait();
            let mut helped = 0;
            while !probe.is_finished() {
                helped += probe.help(&persist);
            }
            helped
        });
        // SAFETY: buffers outlive the wait.
        unsafe { e.try_submit(0, b) }.unwrap();
        go.wait();
        let o = t.wait(1000);
        let helped = helper.join().unwrap();
        assert_eq!(o.helped_bytes, helped as u64);
        let k = o.bytes_completed as usize;
        match o.status {
            Status::Success => assert_eq!(k, src.len()),
            Status::Partial => assert!(n % 3 == 0),
            s => panic!("unexpected {s:?}"),
        }
        assert_eq!(
            dst[..k],
            src[..k],
            "batch {n}: the completed prefix is really done"
        );
        total_helped += helped;
    }
    assert!(total_helped > 0, "no helper ever got a descriptor");
}

/// Batches that record a durable completion, or order a descriptor with a fence, are never
/// helped.
#[test]
fn fenced_and_durably_recorded_batches_are_not_helped() {
    let e = delayed(Duration::from_millis(20));
    let persist = switchyard_media::Persist::detect();
    let src = pattern(8 * 4096, 3);
    let mut dst = vec![0u8; src.len()];
    let mut descs = copies(&mut dst, &src, 4096, Flags::NONE);
    descs[4].flags = Flags::FENCE;
    let (b, mut t) = Batch::new(descs);
    let probe = t.probe();
    // SAFETY: buffers outlive the wait.
    unsafe { e.try_submit(0, b) }.unwrap();
    while !t.started() {
        std::thread::yield_now();
    }
    assert_eq!(probe.help(&persist), 0);
    assert_eq!(t.wait(1000).helped_bytes, 0);
    assert_eq!(dst, src);

    let mut line = Line([0; 64]);
    // SAFETY: `line` is aligned, outlives the batch, and only the engine writes it.
    let r = unsafe { DurableRecord::new(line.0.as_mut_ptr()) };
    let mut dst = vec![0u8; src.len()];
    let (b, mut t) = Batch::new(copies(&mut dst, &src, 4096, Flags::DURABLE));
    let probe = t.probe();
    // SAFETY: buffers outlive the wait.
    unsafe { e.try_submit(0, b.with_durable_record(r)) }.unwrap();
    while !t.started() {
        std::thread::yield_now();
    }
    assert_eq!(probe.help(&persist), 0);
    assert_eq!(t.wait(1000).helped_bytes, 0);
    assert_eq!(dst, src);
}
