//! The channel manager end to end: tenants' channels, a bulk tenant that never moves to the
//! CPU, and the budget the controller sets from a latency tenant's objective.

use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_engine::{ThreadsConfig, ThreadsEngine};
use switchyard_media::Persist;
use switchyard_mover::config::{TenantConfig, Thresholds};
use switchyard_mover::{Config, Hints, Mover, Path};

const WEB: u16 = 1;
const GC: u16 = 2;

/// A mover over a 2-channel engine with a latency tenant `web` (p99 under `bound_us`) and a
/// bulk tenant `gc`; every copy from 64 KiB is offloaded.
fn mover(bound_us: f64) -> Mover {
    mover_pinned(bound_us, false)
}

/// [`mover`], its engine's workers pinned to cores if `pin`.
fn mover_pinned(bound_us: f64, pin: bool) -> Mover {
    let mut c = Config::default();
    c.engine.channels = 2;
    c.mover.thresholds = Thresholds::all(64 << 10);
    c.qos.tenants = vec![
        TenantConfig::latency("web", bound_us),
        TenantConfig::bulk("gc"),
    ];
    c.qos.min_samples = 4;
    c.validate().unwrap();
    let persist = Persist::detect();
    let engine = ThreadsEngine::start(ThreadsConfig {
        channels: 2,
        pin,
        persist,
        ..ThreadsConfig::default()
    })
    .unwrap();
    Mover::with_engine(&c, Arc::new(engine), persist)
}

fn data(n: usize, seed: u64) -> Vec<u8> {
    (0..n as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9).wrapping_add(seed) >> 7) as u8)
        .collect()
}

fn read(tenant: u16) -> Hints {
    Hints {
        tenant,
        ..Hints::read()
    }
}

/// A bulk tenant's copies run on its channel (0), whole on the engine, never split; a latency
/// tenant's on the next channel (1); each tenant's bytes are counted.
#[test]
fn each_class_keeps_to_its_channels_and_a_bulk_copy_stays_on_the_engine() {
    let m = mover(1_000_000.0);
    let src = data(2 << 20, 1);
    let mut dst = vec![0u8; src.len()];
    for _ in 0..4 {
        let r = m.copy(&mut dst, &src, read(GC)).unwrap();
        assert_eq!(dst, src);
        assert_eq!(r.path, Path::Engine { channel: 0 });
        assert_eq!((r.engine_bytes, r.cpu_bytes), (src.len(), 0), "{r:?}");
        dst.fill(0);
    }
    let s = m.stats();
    assert_eq!(s.split_requests, 0, "{s:?}");
    assert_eq!(
        m.engine().record(1).seq,
        0,
        "no bulk batch on the latency channel"
    );
    assert!(m.engine().record(0).seq >= 4);
    let small = data(256 << 10, 2);
    let mut out = vec![0u8; small.len()];
    let r = m.copy(&mut out, &small, read(WEB)).unwrap();
    assert_eq!(out, small);
    match r.path {
        Path::Engine { channel } | Path::Split { channel, .. } => assert_eq!(channel, 1),
        Path::Cpu => {}
    }
    let t = m.tenants();
    assert_eq!(
        (t[0].name.as_str(), t[0].requests, t[0].bytes),
        ("web", 1, 256 << 10)
    );
    assert_eq!(
        (t[1].name.as_str(), t[1].requests, t[1].bytes),
        ("gc", 4, 8 << 20)
    );
}

/// A latency tenant whose objective cannot be met (p99 under 10 ns) makes the controller
/// cut the bulk budget: the bulk channel pauses, the bulk tenant's bytes still all arrive on
/// the engine, and the counters say so. Once the latency tenant idles, the budget lapses and
/// bulk copies run without a pause.
#[test]
fn a_missed_objective_throttles_the_bulk_tenant_and_an_idle_one_lets_it_run_free() {
    let m = mover(0.01);
    let src = data(2 << 20, 3);
    let small = data(64 << 10, 4);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let throttled = std::thread::scope(|s| {
        s.spawn(|| {
            let mut out = vec![0u8; small.len()];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                m.copy(&mut out, &small, read(WEB)).unwrap();
                assert_eq!(out, small);
            }
        });
        let mut dst = vec![0u8; src.len()];
        let t = Instant::now();
        let mut seen = None;
        while seen.is_none() && t.elapsed() < Duration::from_secs(20) {
            let r = m.copy(&mut dst, &src, read(GC)).unwrap();
            assert_eq!(dst, src);
            assert_eq!(r.engine_bytes, src.len(), "{r:?}");
            dst.fill(0);
            let gc = &m.tenants()[1];
            if gc.throttled_epochs > 0 && gc.budget_mib_s.is_some() {
                seen = Some(m.tenants());
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        seen
    });
    let t = throttled.expect("the bulk tenant was throttled");
    assert!(t[0].misses > 0, "{t:?}");
    // The latency tenant is gone: the budget's lease lapses (the controller, deciding only on
    // latency traffic, leaves the budget as it was for the tenant's return), and bulk copies
    // run free.
    std::thread::sleep(Duration::from_millis(2));
    let now = switchyard_engine::clock::now_ns();
    let b = m.engine().budget(0).expect("the budget stays set");
    assert!(b.lapsed(now), "{b:?}");
    assert_eq!(m.tenants()[1].budget_mib_s, None, "{:?}", m.tenants());
    let before = m.engine().pauses(0).epochs;
    let mut dst = vec![0u8; src.len()];
    for _ in 0..8 {
        m.copy(&mut dst, &src, read(GC)).unwrap();
        assert_eq!(dst, src);
    }
    assert_eq!(
        m.engine().pauses(0).epochs,
        before,
        "a lapsed budget paused the channel"
    );
}

/// A throttled bulk copy in flight when the latency tenant goes quiet gets its bandwidth
/// back within the idle time: the budget's lease lapses in the engine, though no copy
/// finishes to run the controller until the bulk copy does.
#[test]
fn a_throttle_lapses_mid_copy_once_the_latency_tenant_idles() {
    let m = mover(0.01);
    let small = data(64 << 10, 5);
    let mut out = vec![0u8; small.len()];
    // Misses bring the budget down from the ceiling: a quarter per control period.
    let t = Instant::now();
    while m.tenants()[1].budget_mib_s.is_none_or(|b| b > 256.0) {
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", m.tenants());
        m.copy(&mut out, &small, read(WEB)).unwrap();
    }
    // At 256 MiB/s or less, 32 MiB would take 1,250 epochs or more, most of them paused.
    let before = m.engine().pauses(0).epochs;
    let src = data(32 << 20, 6);
    let mut dst = vec![0u8; src.len()];
    let r = m.copy(&mut dst, &src, read(GC)).unwrap();
    assert_eq!(dst, src);
    assert_eq!(r.engine_bytes, src.len());
    let paused = m.engine().pauses(0).epochs - before;
    // Paused only until the lease (500 µs, 5 epochs) ran out.
    assert!(paused <= 20, "{paused} paused epochs");
}

/// Without tenants the configuration is today's: one class, every channel, no budget.
#[test]
fn without_tenants_nothing_is_managed() {
    let m = Mover::start(&Config::default()).unwrap();
    assert!(m.tenants().is_empty());
    assert_eq!(m.engine().budget(0), None);
}

/// A configuration asking for more channels than the engine starts is refused, naming the fix.
#[test]
fn too_few_channels_for_the_tenants_is_refused() {
    let mut c = Config::default();
    c.engine.channels = 1;
    c.qos.tenants = vec![TenantConfig::bulk("gc")];
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("engine.channels = 2"), "{e}");
}

/// A bulk tenant's asynchronous reads queue on its channel however deep the queue is: read
/// admission (EasyIO Listing 2) would send the third and later ones to the CPU.
#[test]
fn a_bulk_tenants_asynchronous_reads_wait_in_their_queue() {
    let m = mover(1_000_000.0);
    let src: Vec<Vec<u8>> = (0..8).map(|i| data(1 << 20, i)).collect();
    let mut dst: Vec<Vec<u8>> = (0..8).map(|_| vec![0u8; 1 << 20]).collect();
    let transfers: Vec<_> = dst
        .iter_mut()
        .zip(&src)
        .map(|(d, s)| {
            // SAFETY: both buffers outlive the transfer, which is waited for below.
            unsafe { m.submit(d.as_mut_ptr(), s.as_ptr(), s.len(), read(GC)) }
        })
        .collect();
    for t in transfers {
        let r = t.wait();
        assert_eq!((r.engine_bytes, r.cpu_bytes), (1 << 20, 0), "{r:?}");
    }
    assert_eq!(dst, src);
    assert_eq!(m.stats().fallback_queue_depth, 0);
}

/// A latency tenant's synchronous copy queued behind a long unclassed one on its channel is
/// taken back once the CPU would have finished it: the caller copies it itself instead of
/// waiting for the worker, the counter says so, and both copies arrive whole.
#[test]
fn a_latency_copy_the_worker_cannot_start_is_taken_back() {
    let m = mover(1_000_000.0);
    let big = data(128 << 20, 5);
    let mut big_out = vec![0u8; big.len()];
    let small = data(64 << 10, 6);
    let mut out = vec![0u8; small.len()];
    // SAFETY: both buffers outlive the transfer, which is waited for below, and nothing else
    // touches them meanwhile.
    let mut t = unsafe {
        m.submit(
            big_out.as_mut_ptr(),
            big.as_ptr(),
            big.len(),
            Hints {
                tenant: 99,
                ..Hints::read()
            },
        )
    };
    let r = m.copy(&mut out, &small, read(WEB)).unwrap();
    let unfinished = !t.poll();
    let report = t.wait();
    assert_eq!(out, small);
    assert!(big_out == big, "the long copy arrived whole");
    assert_eq!(report.engine_bytes + report.cpu_bytes, big.len());
    assert!(
        unfinished,
        "the long copy should still run when the short one is done"
    );
    assert_eq!(r.path, Path::Engine { channel: 1 });
    assert_eq!((r.engine_bytes, r.cpu_bytes), (0, small.len()), "{r:?}");
    assert_eq!(m.stats().taken_back, 1);
}

/// A latency tenant's caller on the very core its channel's worker is pinned to (a small
/// machine's web server beside the engine): the engine says which core that is, and every
/// copy arrives whole, taken back or run by the worker, without the caller polling the worker
/// off its core.
#[test]
fn a_latency_caller_on_its_workers_core_gets_every_copy() {
    use switchyard_engine::cpus;
    let m = mover_pinned(1_000_000.0, true);
    let worker = m.engine().worker_cpu(1);
    assert_eq!(worker, cpus::worker_cpu(&cpus::allowed(), 1));
    let caller = std::thread::spawn(move || {
        if let Some(cpu) = worker {
            cpus::pin_current(&[cpu]);
        }
        for i in 0..200u64 {
            let src = data(64 << 10, i);
            let mut dst = vec![0u8; src.len()];
            let r = m.copy(&mut dst, &src, read(WEB)).unwrap();
            assert!(dst == src, "copy {i} arrived whole");
            assert_eq!(r.engine_bytes + r.cpu_bytes, src.len());
        }
        m.stats()
    });
    let s = caller.join().unwrap();
    assert_eq!(s.engine_requests + s.cpu_requests, 200, "{s:?}");
}
