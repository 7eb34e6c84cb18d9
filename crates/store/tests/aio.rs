//! The asynchronous API: same results as the synchronous calls, orderless writes, two-level
//! locking, and a 64-task stress on one file across both cores.

use std::future::Future;
use std::rc::Rc;
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use switchyard_engine::FaultPlan;
use switchyard_media::{Persist, Region};
use switchyard_mover::Mover;
use switchyard_rt::{spawn, Executor};
use switchyard_store::crash::engine_mover;
use switchyard_store::{Errno, Fs, OpenFlags, Owner, Store, WriteOrder};

/// A mover that sends every request to a threads engine whose batches wait `delay` first.
fn mover(delay: Duration, faults: FaultPlan) -> Arc<Mover> {
    engine_mover(FaultPlan { delay, ..faults })
}

fn fresh(m: Arc<Mover>) -> Fs {
    let region = Region::memory(32 << 20, Persist::detect()).unwrap();
    Fs::new(Store::format(region, m, Owner::current()).unwrap())
}

const RW: OpenFlags = OpenFlags {
    read: true,
    write: true,
    create: true,
    exclusive: false,
    truncate: false,
    append: false,
};

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9).wrapping_add(seed * 7919) >> 7) as u8)
        .collect()
}

/// Polls `f` once with a waker that does nothing.
fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    struct Nop;
    impl Wake for Nop {
        fn wake(self: Arc<Self>) {}
    }
    let w = Waker::from(Arc::new(Nop));
    std::pin::Pin::new(f).poll(&mut Context::from_waker(&w))
}

#[test]
fn async_calls_match_the_synchronous_ones() {
    let fs = Rc::new(fresh(mover(Duration::ZERO, FaultPlan::default())));
    let ex = Executor::new();
    let f2 = fs.clone();
    ex.block_on(async move {
        let fs = f2;
        let fd = fs.open("/f", RW, 0o644).unwrap();
        let a = pattern(300_000, 1);
        let (r, a) = fs.write_async(fd, a).await;
        assert_eq!(r, Ok(0));
        let (r, _) = fs.append_async(fd, pattern(5000, 2)).await;
        assert_eq!(r, Ok(300_000));
        let (r, b) = fs.pwrite_async(fd, pattern(70_000, 3), 123_457).await;
        assert_eq!(r, Ok(123_457));
        // The descriptor's offset moved by the first write only.
        let (r, head) = fs.read_async(fd, vec![0; 1000]).await;
        assert_eq!(r, Ok(1000));
        let mut want = a.clone();
        want[123_457..123_457 + b.len()].copy_from_slice(&b);
        want.extend(pattern(5000, 2));
        assert_eq!(head[..], want[300_000..301_000]);
        let (r, all) = fs.pread_async(fd, vec![0; 400_000], 0).await;
        assert_eq!(r, Ok(want.len()));
        assert_eq!(all[..want.len()], want[..]);
        assert_eq!(fs.read_all("/f").unwrap(), want);
        // Errors as the synchronous calls give them.
        let ro = fs.open("/f", OpenFlags::READ, 0).unwrap();
        assert_eq!(fs.write_async(ro, vec![1]).await.0, Err(Errno::EBADF));
        assert_eq!(
            fs.pread_async(ro, vec![0; 4], u64::MAX).await.0,
            Err(Errno::EINVAL)
        );
        fs.mkdir("/d", 0o755).unwrap();
        let d = fs.ino("/d").unwrap();
        assert_eq!(
            fs.store().read_async(d, 0, vec![0; 4]).await.0,
            Err(Errno::EISDIR)
        );
        assert_eq!(
            fs.store().write_async(d, 0, vec![0; 4]).await.0,
            Err(Errno::EISDIR)
        );
        assert_eq!(
            fs.store().read_async(9999, 0, vec![0; 4]).await.0,
            Err(Errno::ENOENT)
        );
    });
    let s = fs.store().mover().stats();
    assert!(s.engine_requests > 0, "{s:?}");
}

#[test]
fn an_orderless_write_commits_before_its_copy_finishes() {
    let fs = fresh(mover(Duration::from_millis(30), FaultPlan::default()));
    let fd = fs.open("/f", RW, 0o644).unwrap();
    let ino = fs.ino("/f").unwrap();
    let data = pattern(256 << 10, 5);
    let mut w = fs.store().write_async(ino, 0, data.clone());
    assert!(poll_once(&mut w).is_pending(), "the copy is delayed 30 ms");
    // The metadata is committed and the file lock released while the engine copies.
    assert_eq!(fs.store().getattr(ino).unwrap().size, 256 << 10);
    // A later reader waits for the copy (level 2) and sees the new bytes.
    let mut buf = vec![0u8; 256 << 10];
    assert_eq!(fs.pread(fd, &mut buf, 0), Ok(256 << 10));
    assert_eq!(buf, data);
    let (r, back) = loop {
        if let Poll::Ready(x) = poll_once(&mut w) {
            break x;
        }
    };
    assert_eq!((r, back.len()), (Ok(0), data.len()));
}

#[test]
fn the_ordered_variant_commits_only_after_the_copy() {
    let fs = fresh(mover(Duration::from_millis(20), FaultPlan::default()));
    fs.open("/f", RW, 0o644).unwrap();
    let ino = fs.ino("/f").unwrap();
    let mut w = fs
        .store()
        .write_async_ordered(ino, 0, pattern(64 << 10, 1), WriteOrder::Ordered);
    // The ordered write has copied and committed by the end of its first poll.
    assert!(poll_once(&mut w).is_ready());
    assert_eq!(fs.read_all("/f").unwrap(), pattern(64 << 10, 1));
}

#[test]
fn reads_never_block_later_writes_and_keep_their_blocks_from_reuse() {
    let fs = fresh(mover(Duration::from_millis(30), FaultPlan::default()));
    let fd = fs.open("/f", RW, 0o644).unwrap();
    let ino = fs.ino("/f").unwrap();
    let old = pattern(128 << 10, 1);
    fs.pwrite(fd, &old, 0).unwrap();
    let mut r = fs.store().read_async(ino, 0, vec![0; 128 << 10]);
    assert!(poll_once(&mut r).is_pending());
    // Overwrite the range the read copies from: the write does not wait for the read, and the
    // 32 blocks it replaces stay out of the free pool while the read may still copy them.
    let free = fs.statfs().free_blocks;
    fs.pwrite(fd, &pattern(128 << 10, 2), 0).unwrap();
    assert_eq!(fs.statfs().free_blocks, free - 32);
    fs.pwrite(fd, &pattern(128 << 10, 3), 0).unwrap();
    assert_eq!(fs.statfs().free_blocks, free - 64);
    let (n, got) = loop {
        if let Poll::Ready(x) = poll_once(&mut r) {
            break x;
        }
    };
    assert_eq!(n, Ok(128 << 10));
    assert_eq!(got, old, "the read returns the bytes of when it started");
    // Its last reader gone, the parked blocks are free again.
    assert_eq!(fs.statfs().free_blocks, free);
}

#[test]
fn partial_engine_completions_are_repaired_before_the_write_completes() {
    let fs = fresh(mover(
        Duration::ZERO,
        FaultPlan {
            partial_every: 3,
            ..FaultPlan::default()
        },
    ));
    let ex = Executor::new();
    ex.block_on(async {
        let fd = fs.open("/f", RW, 0o644).unwrap();
        for i in 0..12u64 {
            let d = pattern(100_000, i);
            let (r, _) = fs.pwrite_async(fd, d.clone(), i * 100_000).await;
            assert_eq!(r, Ok(i * 100_000));
            let (r, got) = fs.pread_async(fd, vec![0; 100_000], i * 100_000).await;
            assert_eq!((r, &got), (Ok(100_000), &d));
        }
    });
    assert!(fs.store().mover().stats().partial_completions > 0);
}

/// Runs `f` on another thread and fails if it does not finish within `limit` (a deadlock).
fn within(limit: Duration, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => t.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            t.join().unwrap();
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("no progress within {limit:?}: deadlock"),
    }
}

/// 64 tasks on one file, 32 on each of two executor threads: each owns a stripe whose edges
/// share pages with its neighbours', writes it again and again asynchronously and reads it
/// back. Shared pages are merged under the file lock, and every read sees its own task's last
/// write; at the end every stripe holds its last pattern.
#[test]
fn sixty_four_tasks_on_one_file_across_two_cores() {
    within(Duration::from_secs(120), || {
        const TASKS: u64 = 64;
        const STRIPE: u64 = 10_000;
        const ROUNDS: u64 = 12;
        let fs = Arc::new(fresh(mover(Duration::ZERO, FaultPlan::default())));
        let fd = fs.open("/shared", RW, 0o644).unwrap();
        let threads: Vec<_> = (0..2u64)
            .map(|core| {
                let fs = fs.clone();
                std::thread::spawn(move || {
                    let ex = Executor::new();
                    ex.block_on(async move {
                        let tasks: Vec<_> = (0..TASKS / 2)
                            .map(|k| {
                                let fs = fs.clone();
                                let task = core * (TASKS / 2) + k;
                                spawn(async move {
                                    let off = task * STRIPE;
                                    for round in 0..ROUNDS {
                                        let want = pattern(STRIPE as usize, task * 1000 + round);
                                        let (r, _) = fs.pwrite_async(fd, want.clone(), off).await;
                                        assert_eq!(r, Ok(off));
                                        let (r, got) =
                                            fs.pread_async(fd, vec![0; STRIPE as usize], off).await;
                                        assert_eq!(r, Ok(STRIPE as usize));
                                        assert!(got == want, "task {task} round {round}");
                                    }
                                })
                            })
                            .collect();
                        for t in tasks {
                            t.await;
                        }
                    });
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let all = fs.read_all("/shared").unwrap();
        assert_eq!(all.len() as u64, TASKS * STRIPE);
        for task in 0..TASKS {
            let s = (task * STRIPE) as usize;
            assert!(
                all[s..s + STRIPE as usize] == pattern(STRIPE as usize, task * 1000 + ROUNDS - 1),
                "stripe {task}"
            );
        }
        assert!(fs.store().mover().stats().engine_requests > 0);
    });
}

/// The futures in tokio's multi-threaded runtime: woken by the engine's worker, no polling.
#[test]
fn the_futures_work_in_tokio() {
    let fs = Arc::new(fresh(mover(Duration::from_millis(2), FaultPlan::default())));
    let fd = fs.open("/t", RW, 0o644).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let handles: Vec<_> = (0..8u64)
            .map(|i| {
                let fs = fs.clone();
                tokio::spawn(async move {
                    let d = pattern(64 << 10, i);
                    let (r, _) = fs.pwrite_async(fd, d.clone(), i << 16).await;
                    assert_eq!(r, Ok(i << 16));
                    let (r, got) = fs.pread_async(fd, vec![0; 64 << 10], i << 16).await;
                    assert_eq!((r, got), (Ok(64 << 10), d));
                })
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
    });
}
