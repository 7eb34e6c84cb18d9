//! The mover end to end: data, durability, decisions, fault repair.

mod common;

use common::{data, directions, mover_with, policies};
use proptest::prelude::*;
use std::sync::Arc;
use switchyard_engine::FaultPlan;
use switchyard_media::{trace::Recorder, Persist};
use switchyard_mover::config::{Locality, Thresholds};
use switchyard_mover::profile::{
    Bin, EngineId, Machine, Measured, Profile, Startup, Tuned, NEVER, PROFILE_VERSION,
};
use switchyard_mover::{Config, Direction, Hints, Mover, Path, Policy, Reason};

fn mover(policy: Policy, faults: FaultPlan, tweak: impl FnOnce(&mut Config)) -> Mover {
    mover_with(policy, faults, Persist::detect(), tweak)
}

/// A mover whose engine and CPU path both record into `rec`.
fn traced_mover(policy: Policy, rec: &Recorder) -> Mover {
    mover_with(
        policy,
        FaultPlan::default(),
        Persist::detect().traced(rec),
        |_| {},
    )
}

/// A zeroed buffer of `n` bytes starting on a 64-byte boundary (returned with its backing).
fn aligned(n: usize) -> (Vec<u8>, usize) {
    let v = vec![0u8; n + 64];
    let off = v.as_ptr().align_offset(64);
    (v, off)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Any size, alignment, direction and policy: the destination equals the source, nothing
    /// around it changes, and durable requests end flushed and fenced on whichever path ran.
    #[test]
    fn copies_are_byte_exact_and_durable_when_asked(
        len in 0usize..400_000, so in 0usize..128, d_off in 0usize..128,
        dir in directions(), durable: bool, policy in policies(), same_offset: bool)
    {
        let rec = Recorder::new();
        let m = traced_mover(policy, &rec);
        let d_off = if same_offset { so } else { d_off };
        let src = data(len + so, len as u64);
        let mut dst = vec![0x5Au8; len + d_off + 64];
        let hints = Hints { direction: dir, durable, ..Hints::default() };
        let r = m.copy(&mut dst[d_off..d_off + len], &src[so..], hints).unwrap();
        prop_assert_eq!(&dst[d_off..d_off + len], &src[so..]);
        prop_assert!(dst[..d_off].iter().chain(&dst[d_off + len..]).all(|&b| b == 0x5A));
        prop_assert_eq!(r.cpu_bytes + r.engine_bytes, len);
        if durable {
            prop_assert_eq!(rec.first_non_durable(dst[d_off..].as_ptr() as usize, len), None, "{:?}", r);
        }
    }
}

#[test]
fn partial_and_failed_engine_completions_are_finished_and_counted() {
    let m = mover(
        Policy::Engine,
        FaultPlan {
            partial_every: 2,
            error_every: 5,
            ..FaultPlan::default()
        },
        |_| {},
    );
    for n in 0..10u64 {
        let src = data(300_000, n);
        let mut dst = vec![0u8; src.len()];
        let r = m.copy(&mut dst, &src, Hints::write()).unwrap();
        assert_eq!(dst, src, "request {n}");
        assert_eq!(r.cpu_bytes + r.engine_bytes, src.len());
    }
    let s = m.stats();
    assert_eq!(s.partial_completions, 4, "batches 2,4,6,8 partial: {s:?}");
    assert_eq!(s.engine_errors, 2, "batches 5,10 failed: {s:?}");
    assert!(s.repaired_bytes > 0);
    assert_eq!(s.engine_requests, 10);
}

#[test]
fn async_transfers_complete_and_repair_too() {
    let m = mover(
        Policy::Engine,
        FaultPlan {
            partial_every: 1,
            ..FaultPlan::default()
        },
        |_| {},
    );
    let src = data(1 << 20, 3);
    let mut dst = vec![0u8; src.len()];
    // SAFETY: both buffers outlive the transfer, which is waited for below.
    let mut t = unsafe { m.submit(dst.as_mut_ptr(), src.as_ptr(), src.len(), Hints::read()) };
    while !t.poll() {
        std::hint::spin_loop();
    }
    let r = t.wait();
    assert_eq!(dst, src);
    assert_eq!(r.cpu_bytes + r.engine_bytes, src.len());
    assert_eq!(m.stats().partial_completions, 1);
}

#[test]
fn decisions_follow_the_rules() {
    let m = mover(Policy::Auto, FaultPlan::default(), |c| {
        c.mover.concurrency_limit = 1
    });
    // The asynchronous requests below come from a caller with other tasks to run (else the
    // engine's start-up delay on the neutral estimates would keep them on the CPU).
    switchyard_mover::beside::set_tasks_beside(1);
    let (buf, base) = aligned(8 << 20);
    let p = buf[base..].as_ptr();
    let at = |o: usize| p.wrapping_add(o);
    let w = Hints::write();
    let r = Hints::read();
    // Below threshold → CPU.
    assert_eq!(m.decide(at(0), at(4 << 20), 4096, &w, true).path, Path::Cpu);
    // Unequal 64 B offsets on a write → CPU (§5.2).
    assert_eq!(
        m.decide(at(3), at((4 << 20) + 5), 1 << 20, &w, true).path,
        Path::Cpu
    );
    // Equal offsets → offloaded (a bulk synchronous write is split) with a CPU head up to
    // the line boundary.
    let d = m.decide(at(3), at((4 << 20) + 3), 1 << 20, &w, true);
    assert!(
        matches!(d.path, Path::Split { engine_bytes, .. } if engine_bytes > 0 && engine_bytes < 1 << 20)
            && d.head == 61,
        "{d:?}"
    );
    // M = 1 is taken now: the next bulk synchronous request falls back to the CPU; an
    // asynchronous one does not wait for the engine, so M does not turn it away.
    assert_eq!(
        m.decide(at(0), at(4 << 20), 1 << 20, &w, true).path,
        Path::Cpu
    );
    let beyond_m = m.decide(at(0), at(4 << 20), 1 << 20, &r, false);
    assert!(matches!(beyond_m.path, Path::Engine { .. }), "{beyond_m:?}");
    m.release(&beyond_m);
    m.release(&d);
    // Bulk synchronous read → split; asynchronous → engine.
    let s = m.decide(at(0), at(4 << 20), 1 << 20, &r, true);
    assert!(
        matches!(s.path, Path::Split { engine_bytes, .. } if engine_bytes > 0 && engine_bytes < 1 << 20),
        "{s:?}"
    );
    m.release(&s);
    let a = m.decide(at(0), at(4 << 20), 1 << 20, &r, false);
    assert!(matches!(a.path, Path::Engine { .. }));
    m.release(&a);
    // A bulk synchronous DRAM-to-DRAM copy (a program's large memcpy) splits too.
    let dram = Hints {
        direction: Direction::Dram,
        ..Hints::default()
    };
    let c = m.decide(at(0), at(4 << 20), 1 << 20, &dram, true);
    assert!(
        matches!(c.path, Path::Split { engine_bytes, .. } if engine_bytes > 0 && engine_bytes < 1 << 20),
        "{c:?}"
    );
    m.release(&c);
    let st = m.stats();
    assert_eq!(
        (
            st.below_threshold,
            st.misaligned_writes,
            st.fallback_saturated
        ),
        (1, 1, 1)
    );
}

#[test]
fn every_decision_names_its_reason_and_counts_it() {
    let m = mover(
        Policy::Auto,
        FaultPlan {
            delay: std::time::Duration::from_millis(30),
            ..FaultPlan::default()
        },
        |c| c.mover.concurrency_limit = 64,
    );
    let (buf, base) = aligned(8 << 20);
    let p = buf[base..].as_ptr();
    let at = |o: usize| p.wrapping_add(o);
    let w = Hints::write();
    let r = Hints::read();
    let small = m.decide(at(0), at(4 << 20), 4096, &w, true);
    assert_eq!(
        (small.path, small.reason),
        (Path::Cpu, Reason::BelowThreshold)
    );
    let odd = m.decide(at(3), at((4 << 20) + 5), 1 << 20, &w, true);
    assert_eq!((odd.path, odd.reason), (Path::Cpu, Reason::MisalignedWrite));
    let bulk = m.decide(at(0), at(4 << 20), 1 << 20, &r, true);
    assert_eq!(bulk.reason, Reason::Offload, "{bulk:?}");
    m.release(&bulk);
    // Asynchronous reads queue on the slow engine until admission turns one away (their
    // caller has other tasks to run, so an engine no faster than the CPU still takes them).
    switchyard_mover::beside::set_tasks_beside(1);
    let n = 256 << 10;
    let src = vec![7u8; n];
    let mut dsts: Vec<Vec<u8>> = (0..16).map(|_| vec![0u8; n]).collect();
    let mut held = Vec::new();
    let mut turned_away = 0;
    for d in dsts.iter_mut() {
        // SAFETY: both buffers outlive the transfer, waited for below.
        let t = unsafe { m.submit(d.as_mut_ptr(), src.as_ptr(), n, r) };
        if t.probe().is_none() {
            turned_away += 1;
        }
        held.push(t);
    }
    for t in held {
        t.wait();
    }
    assert!(dsts.iter().all(|d| d == &src));
    let st = m.stats();
    assert!(turned_away > 0, "no read was turned away");
    assert_eq!(st.fallback_queue_depth, turned_away);
    assert_eq!((st.below_threshold, st.misaligned_writes), (1, 1));
}

/// An asynchronous copy goes to an engine that would finish it later than the CPU only when
/// the caller's runtime has other tasks to run meanwhile; otherwise the CPU copies it (a
/// task waiting on a slower engine runs slower than copying), bar one probe per interval
/// that keeps the estimates live.
#[test]
fn a_slower_engine_keeps_async_copies_on_the_cpu_when_no_other_task_can_run() {
    use switchyard_mover::beside::set_tasks_beside;
    let n = 256 << 10;
    let (buf, base) = aligned(2 * n);
    let p = buf[base..].as_ptr();
    let r = Hints::read();
    // Before any sample the engine's estimate is the CPU's rate plus a start-up delay: slower.
    let m = mover(Policy::Auto, FaultPlan::default(), |_| {});
    set_tasks_beside(1);
    let d = m.decide(p, p.wrapping_add(n), n, &r, false);
    assert_eq!(d.reason, Reason::Offload, "{d:?}");
    m.release(&d);
    set_tasks_beside(0);
    let probe = m.decide(p, p.wrapping_add(n), n, &r, false);
    assert_eq!(
        probe.reason,
        Reason::Offload,
        "the first is a probe: {probe:?}"
    );
    m.release(&probe);
    let d = m.decide(p, p.wrapping_add(n), n, &r, false);
    assert_eq!((d.path, d.reason), (Path::Cpu, Reason::EngineSlow));
    let s = m.stats();
    assert_eq!((s.explored, s.fallback_engine_slow), (1, 1), "{s:?}");
    // End to end, an engine whose batches start 2 ms late and reads small enough that the
    // start-up decides: once a probe has measured it, a lone caller's asynchronous reads are
    // copied by its CPU, byte for byte.
    let n = 16 << 10;
    let m = mover(
        Policy::Auto,
        FaultPlan {
            delay: std::time::Duration::from_millis(2),
            ..FaultPlan::default()
        },
        |c| c.mover.thresholds.from_slow = Locality::uniform(n, n),
    );
    let src = data(n, 3);
    let mut dst = vec![0u8; n];
    for _ in 0..20 {
        // SAFETY: both buffers outlive the transfer, waited for at once.
        let t = unsafe { m.submit(dst.as_mut_ptr(), src.as_ptr(), n, r) };
        t.wait();
        assert_eq!(dst, src);
        dst.fill(0);
    }
    let s = m.stats();
    assert_eq!(
        s.engine_requests, s.explored,
        "only probes reach the engine: {s:?}"
    );
    assert!(s.fallback_engine_slow >= 10, "{s:?}");
    assert_eq!(s.fallback_engine_slow + s.engine_requests, 20, "{s:?}");
}

#[test]
fn latency_critical_requests_avoid_a_busy_channel_and_suspended_channels_fall_back() {
    let m = mover(
        Policy::Auto,
        FaultPlan {
            delay: std::time::Duration::from_millis(50),
            ..FaultPlan::default()
        },
        |c| c.mover.concurrency_limit = 4,
    );
    let n = 1 << 20;
    let (mut s, so) = aligned(n);
    s[so..so + n].copy_from_slice(&data(n, 1));
    let src = &s[so..so + n];
    let (mut d1, o1) = aligned(n);
    // Occupy the channel with a slow async transfer.
    // SAFETY: buffers outlive the transfer, waited for below.
    let busy = unsafe { m.submit(d1[o1..].as_mut_ptr(), src.as_ptr(), n, Hints::write()) };
    let (mut d2, o2) = aligned(n);
    let lc = Hints {
        latency_critical: true,
        ..Hints::write()
    };
    assert_eq!(
        m.copy(&mut d2[o2..o2 + n], src, lc).unwrap().path,
        Path::Cpu
    );
    busy.wait();
    assert_eq!(m.stats().fallback_latency, 1);
    m.engine().suspend(0);
    let (mut d3, o3) = aligned(n);
    let r = m.copy(&mut d3[o3..o3 + n], src, Hints::write()).unwrap();
    assert_eq!((&d3[o3..o3 + n] == src, r.engine_bytes), (true, 0));
    assert_eq!(m.stats().fallback_queue_full, 1);
}

#[test]
fn the_writer_cap_is_respected_under_contention() {
    let m = Arc::new(mover(Policy::Cpu, FaultPlan::default(), |c| {
        c.mover.cpu_writers = 1
    }));
    let hs: Vec<_> = (0..4)
        .map(|i| {
            let m = m.clone();
            std::thread::spawn(move || {
                let src = data(256 << 10, i);
                let mut dst = vec![0u8; src.len()];
                for _ in 0..20 {
                    m.copy(&mut dst, &src, Hints::write()).unwrap();
                }
                assert_eq!(dst, src);
            })
        })
        .collect();
    hs.into_iter().for_each(|h| h.join().unwrap());
    assert_eq!(m.stats().cpu_requests, 80);
}

/// A profile that promises a fast, instantly starting engine for reads from 64 KiB on.
fn optimistic_profile(config: &Config) -> Profile {
    let bins = (0..switchyard_mover::bandwidth::BINS)
        .flat_map(|b| {
            ["to_slow", "from_slow"].map(|d| Bin {
                direction: d.into(),
                size: switchyard_mover::bandwidth::MIN_SAMPLED << b,
                cpu_gib_s: 8.0,
                engine_gib_s: 16.0,
            })
        })
        .collect();
    let mut thresholds = Thresholds::all(64 << 10);
    thresholds.to_slow = Locality::uniform(NEVER, NEVER);
    Profile {
        version: PROFILE_VERSION,
        machine: Machine::this(&config.persist()),
        engine: EngineId::of(config),
        measured: Measured {
            unix_time: 0,
            seconds: 0.0,
            quick: true,
        },
        tuned: Tuned {
            thresholds,
            concurrency_limit: 1,
            split_min_bytes: 256 << 10,
            cpu_writers: 0,
            nt_threshold: 1024,
            shifted_min: 1024,
            undecided: Vec::new(),
        },
        bins,
        startup: ["to_slow", "from_slow"]
            .map(|d| Startup {
                direction: d.into(),
                ns: 1_000.0,
            })
            .into(),
    }
}

/// Online adaptation end to end: the engine turns out to take 200 µs more per batch than the
/// profile promised. Among 64 KiB reads (the band above the tuned 64 KiB read threshold), the
/// explored ones the CPU copies beat the offloaded ones, so the read threshold rises; the
/// counters say so, the data stays exact, and with adaptation off nothing moves (and nothing
/// is explored).
#[test]
fn a_late_engine_raises_the_tuned_read_threshold() {
    let run = |adapt: bool| {
        let m = mover(
            Policy::Auto,
            FaultPlan {
                delay: std::time::Duration::from_micros(200),
                ..FaultPlan::default()
            },
            |c| {
                c.mover.adapt = adapt;
                let p = optimistic_profile(c);
                p.apply(c);
                c.applied_profile = Some(Arc::new(p));
            },
        );
        let len = 64 << 10;
        let src = data(len, 7);
        let mut dst = vec![0u8; len];
        let t = std::time::Instant::now();
        let limit = std::time::Duration::from_millis(if adapt { 20_000 } else { 300 });
        while t.elapsed() < limit && m.thresholds().from_slow.local_aligned == len {
            m.copy(&mut dst, &src, Hints::read()).unwrap();
            assert_eq!(dst, src);
            dst.fill(0);
        }
        (m.thresholds().from_slow.local_aligned, m.stats())
    };
    let (fixed, s) = run(false);
    assert_eq!(fixed, 64 << 10);
    assert_eq!(
        s.threshold_raised + s.threshold_lowered + s.split_nudges + s.explored,
        0
    );
    let (adapted, s) = run(true);
    assert_eq!(adapted, 128 << 10, "{s:?}");
    assert!(s.threshold_raised == 1 && s.threshold_lowered == 0, "{s:?}");
    assert!(s.explored > 0 && s.cpu_requests >= s.explored, "{s:?}");
}

/// Callers that copied during the last epoch count as busy cores: with one more caller than
/// the cores a helper-thread engine leaves free, bulk reads stay on the CPU; with one caller
/// they are offloaded.
#[test]
fn threads_that_copied_in_the_last_epoch_keep_bulk_on_the_cpu() {
    let spare = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .saturating_sub(1)
        .max(1);
    let run = |callers: usize| {
        let m = mover(Policy::Auto, FaultPlan::default(), |_| {});
        std::thread::scope(|s| {
            for k in 0..callers {
                let m = &m;
                s.spawn(move || {
                    let src = data(256 << 10, k as u64);
                    let mut dst = vec![0u8; 256 << 10];
                    let t = std::time::Instant::now();
                    while t.elapsed() < std::time::Duration::from_millis(300) {
                        m.copy(&mut dst, &src, Hints::read()).unwrap();
                        assert_eq!(dst, src);
                    }
                });
            }
        });
        m.stats()
    };
    let alone = run(1);
    assert_eq!(alone.fallback_busy_cores, 0, "{alone:?}");
    assert!(alone.split_requests > 0, "{alone:?}");
    let crowded = run(spare + 1);
    let bulk = crowded.cpu_requests + crowded.split_requests + crowded.engine_requests;
    assert!(
        crowded.fallback_busy_cores > bulk / 2,
        "{} of {bulk} kept on the CPU",
        crowded.fallback_busy_cores
    );
}

/// A start-up estimate so large that every split's engine share rounds to nothing (a profile
/// taken while the worker was preempted, or live samples from such a time) used to switch
/// splitting off for good: no split, so no sample that could correct it. One in EXPLORE such
/// splits is split anyway, and the live estimate comes back to what the engine really does.
#[test]
fn splits_are_explored_when_the_estimates_rule_them_out() {
    let m = mover(Policy::Auto, FaultPlan::default(), |c| {
        let mut p = optimistic_profile(c);
        for s in &mut p.startup {
            s.ns = 10_000_000.0;
        }
        p.apply(c);
        c.applied_profile = Some(Arc::new(p));
    });
    let startup = |m: &Mover| m.bandwidth().of(Direction::FromSlow).startup_ns.get();
    assert_eq!(startup(&m), 10_000_000.0);
    let src = data(256 << 10, 3);
    let mut dst = vec![0u8; 256 << 10];
    // About 50 ordinary samples suffice; a worker preempted by other tests' threads delays
    // some, so the loop runs until the estimate is back, with a generous bound.
    let t = std::time::Instant::now();
    while startup(&m) >= 100_000.0 && t.elapsed() < std::time::Duration::from_secs(60) {
        m.copy(&mut dst, &src, Hints::read()).unwrap();
        assert_eq!(dst, src);
    }
    let s = m.stats();
    assert!(
        startup(&m) < 100_000.0,
        "the live start-up delay follows the engine: {} ns, {s:?}",
        startup(&m)
    );
    assert!(s.explored > 0 && s.split_requests >= s.explored, "{s:?}");
    assert!(
        s.cpu_requests >= s.explored * (u64::from(Config::default().mover.adaptation.explore) - 1),
        "only one in EXPLORE is explored: {s:?}"
    );
}

/// A tune that found offloading nowhere writes "never" for every threshold and so for the
/// split minimum (its smallest threshold). Adaptation must still be able to find the split
/// such a tune missed: once the probe brings a band down to 256 KiB reads, the explored ones
/// are split, as the tuner measures offloading, never sent to the engine alone (which on a
/// 2-core machine never beats the CPU, so the trial could never move the threshold). With
/// adaptation off, nothing is offloaded.
#[test]
fn a_never_profile_explores_the_split() {
    let run = |adapt: bool| {
        let m = mover(Policy::Auto, FaultPlan::default(), |c| {
            c.mover.adapt = adapt;
            let mut p = optimistic_profile(c);
            p.tuned.thresholds = Thresholds::all(NEVER);
            p.tuned.split_min_bytes = NEVER;
            p.apply(c);
            c.applied_profile = Some(Arc::new(p));
        });
        let len = 256 << 10;
        let src = data(len, 5);
        let mut dst = vec![0u8; len];
        let t = std::time::Instant::now();
        let limit = std::time::Duration::from_millis(if adapt { 20_000 } else { 300 });
        while t.elapsed() < limit && m.stats().split_requests == 0 {
            m.copy(&mut dst, &src, Hints::read()).unwrap();
            assert_eq!(dst, src);
            dst.fill(0);
        }
        m.stats()
    };
    let fixed = run(false);
    assert_eq!(fixed.split_requests + fixed.engine_requests, 0, "{fixed:?}");
    let adapted = run(true);
    assert!(adapted.split_requests > 0, "{adapted:?}");
    assert_eq!(adapted.engine_requests, 0, "{adapted:?}");
}

/// A format-3 profile written before the shifted-copy threshold was measured still loads, and
/// applying it gives the built-in threshold; a measured one is applied as measured.
#[test]
fn the_shifted_copy_threshold_defaults_when_a_profile_lacks_it() {
    let config = Config::default();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    let mut p = optimistic_profile(&config);
    p.tuned.shifted_min = 0;
    p.save(&path).unwrap();
    let mut c = config.clone();
    Profile::load(&path).unwrap().apply(&mut c);
    assert_eq!(c.media.shifted_min, 0);
    assert_eq!(c.persist().shifted_min, 0);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("shifted_min = 0"));
    std::fs::write(&path, text.replace("shifted_min = 0\n", "")).unwrap();
    let loaded = Profile::load(&path).unwrap();
    assert_eq!(
        loaded.tuned.shifted_min,
        switchyard_media::persist::DEFAULT_SHIFTED_MIN
    );
}

/// A profile with the given read and write thresholds, M, CPU writer cap and kernel
/// thresholds (and the optimistic profile's bandwidths).
fn profile_with(config: &Config, read: usize, write: usize, m: usize, writers: usize) -> Profile {
    let mut p = optimistic_profile(config);
    p.tuned.thresholds.from_slow = Locality::uniform(read, read);
    p.tuned.thresholds.to_slow = Locality::uniform(write, write);
    p.tuned.concurrency_limit = m;
    p.tuned.cpu_writers = writers;
    p.tuned.nt_threshold = read.min(1 << 20) / 4;
    p.tuned.shifted_min = write.min(1 << 20) / 8;
    p
}

fn thresholds() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(4096),
        Just(16 << 10),
        Just(64 << 10),
        Just(NEVER)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Profiles swapped into a running mover while three threads copy through it: every
    /// request completes once with its bytes exact (durable ones flushed), the swapped-in
    /// settings are in effect afterwards, and nothing is left counted in flight or holding a
    /// writer place (a copy after the swaps still offloads and is still capped).
    #[test]
    fn a_profile_swap_under_load_loses_no_request_and_changes_no_byte(
        swaps in proptest::collection::vec((thresholds(), thresholds(), 1usize..3, 0usize..3), 1..6),
        seed: u64,
    ) {
        let cfg = {
            let mut c = Config::default();
            c.mover.policy = Policy::Auto;
            c
        };
        let m = mover(Policy::Auto, FaultPlan::default(), |_| {});
        let done = std::sync::atomic::AtomicBool::new(false);
        let copied = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let (m, done, copied) = (&m, &done, &copied);
                s.spawn(move || {
                    let mut k = 0u64;
                    while !done.load(std::sync::atomic::Ordering::Relaxed) || k < 8 {
                        let len = [3000usize, 20_000, 70_000, 300_000][(k as usize + t as usize) % 4];
                        let src = data(len, seed ^ (t << 32) ^ k);
                        let mut dst = vec![0u8; len];
                        let dir = [Direction::FromSlow, Direction::ToSlow][(k % 2) as usize];
                        let hints = Hints { direction: dir, durable: dir == Direction::ToSlow, ..Hints::default() };
                        let r = m.copy(&mut dst, &src, hints).unwrap();
                        assert_eq!(r.cpu_bytes + r.engine_bytes, len);
                        assert!(dst == src, "thread {t} request {k} ({len} B) came back changed");
                        copied.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        k += 1;
                    }
                });
            }
            for &(read, write, mm, writers) in &swaps {
                std::thread::sleep(std::time::Duration::from_millis(3));
                m.swap_profile(Arc::new(profile_with(&cfg, read, write, mm, writers)), &cfg);
            }
            std::thread::sleep(std::time::Duration::from_millis(3));
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let &(read, write, _, _) = swaps.last().unwrap();
        let p = m.profile();
        prop_assert_eq!(p.unwrap().tuned.thresholds.from_slow.local_aligned, read);
        prop_assert_eq!(m.stats().profiles_swapped, swaps.len() as u64);
        // Adaptation starts from the swapped-in thresholds (it may have moved them a bin since).
        let t = m.thresholds();
        for (now, want) in [(t.from_slow.local_aligned, read), (t.to_slow.local_aligned, write)] {
            prop_assert!(
                now == want || now == want.min(NEVER) * 2 || now == want / 2 || (want >= NEVER && now >= 1 << 20),
                "threshold {} after swapping in {}", now, want
            );
        }
        prop_assert_eq!(m.persist().nt_threshold, read.min(1 << 20) / 4);
        prop_assert!(copied.load(std::sync::atomic::Ordering::Relaxed) >= 24);
        // Nothing stranded: with an offloading profile a request still offloads, and with a
        // cap of one writer the writers' count is back to zero (a copy does not wait forever).
        m.swap_profile(Arc::new(profile_with(&cfg, 0, 0, 2, 1)), &cfg);
        let src = data(256 << 10, 1);
        let mut dst = vec![0u8; 256 << 10];
        // (Once the epoch that counted the three copying threads as busy cores has passed.)
        let t0 = std::time::Instant::now();
        let r = loop {
            let r = m.copy(&mut dst, &src, Hints::read()).unwrap();
            prop_assert_eq!(&dst, &src);
            if !matches!(r.path, Path::Cpu) || t0.elapsed().as_secs() >= 5 {
                break r;
            }
        };
        prop_assert!(!matches!(r.path, Path::Cpu), "{:?}", r);
        let r = m.copy(&mut dst, &src, Hints { direction: Direction::ToSlow, durable: true, ..Hints::default() }).unwrap();
        prop_assert_eq!(r.cpu_bytes + r.engine_bytes, 256 << 10);
    }
}
