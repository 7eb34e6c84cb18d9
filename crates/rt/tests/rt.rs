//! The runtime end to end: tasks interleave while their copies are in flight, no task is
//! resumed before its copy finished, an idle executor parks, and the futures work elsewhere.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use switchyard_engine::{FaultPlan, ThreadsConfig, ThreadsEngine};
use switchyard_media::Persist;
use switchyard_mover::{Config, Direction, Hints, Mover, Policy};
use switchyard_rt::{copy, spawn, Executor};

fn mover(policy: Policy, delay: Duration) -> Arc<Mover> {
    let mut cfg = Config::default();
    cfg.mover.policy = policy;
    let persist = Persist::detect();
    let engine = ThreadsEngine::start(ThreadsConfig {
        pin: false,
        persist,
        faults: FaultPlan {
            delay,
            ..FaultPlan::default()
        },
        ..ThreadsConfig::default()
    })
    .unwrap();
    Arc::new(Mover::with_engine(&cfg, Arc::new(engine), persist))
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9).wrapping_add(seed) >> 5) as u8)
        .collect()
}

/// This thread's CPU time (user + system), from /proc.
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // Fields 14 and 15 (utime, stime) are 11 and 12 after the command name; clock ticks.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// 32 tasks each copy their own 256 KiB buffer through the engine (each batch held 2 ms, so
/// copies are in flight while other tasks run): every task finds its destination complete when
/// it resumes, and several copies were outstanding at once.
#[test]
fn tasks_interleave_and_resume_only_after_their_copy() {
    let m = mover(Policy::Engine, Duration::from_millis(2));
    let ex = Executor::new();
    // Waiting only: a helping executor would take over the held batches itself.
    ex.set_helping(false);
    let in_flight = Rc::new(Cell::new(0usize));
    let most = Rc::new(Cell::new(0usize));
    let handles: Vec<_> = (0..32u64)
        .map(|k| {
            let (m, in_flight, most) = (m.clone(), in_flight.clone(), most.clone());
            ex.spawn(async move {
                let src = pattern(256 << 10, k);
                let mut dst = vec![0u8; src.len()];
                in_flight.set(in_flight.get() + 1);
                most.set(most.get().max(in_flight.get()));
                // SAFETY: both buffers live in this task until the copy's future completes.
                let report =
                    unsafe { copy(&m, dst.as_mut_ptr(), src.as_ptr(), src.len(), Hints::read()) }
                        .await;
                in_flight.set(in_flight.get() - 1);
                assert_eq!(dst, src, "task {k} resumed before its copy finished");
                assert_eq!(report.engine_bytes + report.cpu_bytes, src.len());
                report.engine_bytes
            })
        })
        .collect();
    let engine_bytes: usize = ex.block_on(async {
        let mut total = 0;
        for h in handles {
            total += h.await;
        }
        total
    });
    assert!(engine_bytes > 0, "the engine copied");
    assert!(
        most.get() > 4,
        "at most {} copies were outstanding",
        most.get()
    );
    assert_eq!(ex.outstanding(), 0);
}

/// A task's 1 MiB copy whose batch the engine holds for 200 ms after starting it: an executor
/// with nothing else to run copies the batch's descriptors itself from the tail, so the copy
/// completes, exact, with every byte helped; one that only waits leaves it all to the engine.
#[test]
fn an_idle_executor_helps_the_engine_finish_its_copies() {
    let m = mover(Policy::Engine, Duration::from_millis(200));
    for helping in [true, false] {
        let ex = Executor::new();
        ex.set_helping(helping);
        let src = pattern(1 << 20, 5);
        let mut dst = vec![0u8; src.len()];
        // SAFETY: both buffers outlive the awaited copy.
        let report = ex.block_on(unsafe {
            copy(&m, dst.as_mut_ptr(), src.as_ptr(), src.len(), Hints::read())
        });
        assert_eq!(dst, src);
        assert_eq!(report.engine_bytes + report.cpu_bytes, src.len());
        if helping {
            assert_eq!(
                report.cpu_bytes,
                src.len(),
                "the executor helped with every byte"
            );
        } else {
            assert_eq!(
                report.engine_bytes,
                src.len(),
                "the engine copied every byte"
            );
        }
    }
    assert_eq!(m.stats().helped_bytes, 1 << 20);
}

/// Small requests stay on the CPU and complete on the first poll; tasks spawn tasks.
#[test]
fn small_copies_complete_inline_and_tasks_spawn_tasks() {
    let m = mover(Policy::Auto, Duration::ZERO);
    let ex = Executor::new();
    let got = ex.block_on(async {
        let inner = spawn(async move {
            let src = pattern(4096, 1);
            let mut dst = vec![0u8; 4096];
            // SAFETY: both buffers outlive the awaited copy.
            let f = unsafe {
                copy(
                    &m,
                    dst.as_mut_ptr(),
                    src.as_ptr(),
                    4096,
                    Hints {
                        direction: Direction::ToSlow,
                        ..Hints::default()
                    },
                )
            };
            let report = f.await;
            assert_eq!(dst, src);
            report
        });
        inner.await
    });
    assert_eq!((got.cpu_bytes, got.engine_bytes), (4096, 0));
}

/// An executor whose task waits 300 ms for a wake from another thread, with no copy
/// outstanding, parks: it uses almost no CPU meanwhile.
#[test]
fn an_idle_executor_parks() {
    let ex = Executor::new();
    let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    ex.block_on(WaitFlag {
        flag: flag.clone(),
        started: false,
    });
    assert!(t0.elapsed() >= Duration::from_millis(300));
    let used = thread_cpu() - cpu0;
    assert!(
        used <= Duration::from_millis(50),
        "an idle executor used {used:?} of CPU"
    );
}

/// Sets its flag from another thread after 300 ms and wakes the waiting task.
struct WaitFlag {
    flag: Arc<std::sync::atomic::AtomicBool>,
    started: bool,
}

impl Future for WaitFlag {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.flag.load(std::sync::atomic::Ordering::Acquire) {
            return Poll::Ready(());
        }
        if !self.started {
            self.started = true;
            let (flag, waker) = (self.flag.clone(), cx.waker().clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                flag.store(true, std::sync::atomic::Ordering::Release);
                waker.wake();
            });
        }
        Poll::Pending
    }
}

/// The copy future in a foreign executor (a minimal one here): it completes correctly.
#[test]
fn copies_work_in_any_executor() {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let m = mover(Policy::Engine, Duration::from_millis(1));
    let src = pattern(1 << 20, 9);
    let mut dst = vec![0u8; 1 << 20];
    // SAFETY: both buffers outlive the future, which is polled to completion below.
    let mut f = std::pin::pin!(unsafe {
        copy(&m, dst.as_mut_ptr(), src.as_ptr(), src.len(), Hints::read())
    });
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let report = loop {
        if let Poll::Ready(r) = f.as_mut().poll(&mut Context::from_waker(&waker)) {
            break r;
        }
        std::thread::park();
    };
    assert_eq!(dst, src);
    assert!(report.engine_bytes > 0);
}
