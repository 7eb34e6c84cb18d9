//! Model checks of the engine's shared-memory protocols (run with `--cfg loom`).

use crate::completion::{CompletionRecord, Status};
use crate::descriptor::Batch;
use crate::ring::Ring;
use crate::sync::{park, Arc};
use crate::wake::Wake;
use loom::thread;

/// Two producers and a consumer on a ring of 1 (so pushes can find it full and slots are
/// reused across laps), with no waiting loops: every accepted item is popped exactly once,
/// each producer's items in order, and positions are consecutive from 0.
#[test]
fn ring_hands_over_every_item_once() {
    loom::model(|| {
        let ring = Arc::new(Ring::new(1));
        let producers: Vec<_> = (0..2u32)
            .map(|p| {
                let r = ring.clone();
                thread::spawn(move || (0..2 - p).filter(|&i| r.push((p, i)).is_ok()).count())
            })
            .collect();
        let mut popped = Vec::new();
        popped.extend(ring.pop());
        let accepted: usize = producers.into_iter().map(|h| h.join().unwrap()).sum();
        while let Some(x) = ring.pop() {
            popped.push(x);
        }
        assert_eq!(popped.len(), accepted);
        for (k, (pos, _)) in popped.iter().enumerate() {
            assert_eq!(*pos, k as u64);
        }
        for p in 0..2 {
            let mine: Vec<u32> = popped
                .iter()
                .filter(|(_, (q, _))| *q == p)
                .map(|(_, (_, i))| *i)
                .collect();
            assert!(
                mine.windows(2).all(|w| w[0] < w[1]),
                "producer {p} out of order: {mine:?}"
            );
        }
    });
}

/// A worker finishing a batch while its ticket waits (spinning zero times, so it parks): the
/// ticket always wakes and sees the published outcome, never a torn one.
#[test]
fn completion_wakes_a_parked_waiter_with_the_outcome() {
    loom::model(|| {
        let (batch, mut ticket) = Batch::new(Vec::new());
        let worker = thread::spawn(move || {
            assert!(batch.completion.begin(1));
            batch.completion.finish(Status::Partial, 42, 2);
        });
        let o = ticket.wait(0);
        assert_eq!(
            (o.status, o.bytes_completed, o.finished_ns),
            (Status::Partial, 42, 2)
        );
        worker.join().unwrap();
    });
}

/// Cancel races the worker's claim: exactly one wins, and a cancelled batch is never run.
#[test]
fn cancel_and_begin_are_exclusive() {
    loom::model(|| {
        let (batch, mut ticket) = Batch::new(Vec::new());
        let worker = thread::spawn(move || {
            if batch.completion.begin(1) {
                batch.completion.finish(Status::Success, 0, 2);
                true
            } else {
                false
            }
        });
        let cancelled = ticket.try_cancel();
        let ran = worker.join().unwrap();
        assert_ne!(cancelled, ran);
        let o = ticket.wait(0);
        assert_eq!(
            o.status,
            if cancelled {
                Status::Cancelled
            } else {
                Status::Success
            }
        );
    });
}

/// A reader of the channel record never sees a status/bytes pair from a different batch than
/// its sequence number says.
#[test]
fn record_snapshots_are_consistent() {
    loom::model(|| {
        let rec = Arc::new(CompletionRecord::default());
        let w = rec.clone();
        let writer = thread::spawn(move || {
            w.advance(Status::Success, 1);
            w.advance(Status::Partial, 2);
        });
        let s = rec.snapshot();
        match s.seq {
            0 => assert_eq!((s.status, s.bytes_completed), (None, 0)),
            1 => assert_eq!((s.status, s.bytes_completed), (Some(Status::Success), 1)),
            2 => assert_eq!((s.status, s.bytes_completed), (Some(Status::Partial), 2)),
            n => panic!("seq {n}"),
        }
        writer.join().unwrap();
    });
}

/// Worker parking with the wake word while a submitter pushes: no lost wake-up (loom reports a
/// deadlock if the worker parks forever) and every item is consumed.
#[test]
fn wake_word_loses_no_wakeup() {
    loom::model(|| {
        let ring = Arc::new(Ring::new(2));
        let wake = Arc::new(Wake::new());
        let (r, w) = (ring.clone(), wake.clone());
        let worker = thread::spawn(move || {
            let mut got = 0;
            loop {
                w.awake();
                while r.pop().is_some() {
                    got += 1;
                }
                if got == 2 {
                    return;
                }
                if w.sleep() {
                    park();
                }
            }
        });
        let me = worker.thread().clone();
        for i in 0..2 {
            ring.push(i).unwrap();
            if wake.notify() {
                me.unpark();
            }
        }
        worker.join().unwrap();
    });
}

/// A task registering its waker through a probe while the worker finishes the batch: either the
/// registration succeeds and the worker wakes the task, or it reports the batch finished (or
/// taken) and the task looks again itself. The wake-up is never lost.
#[test]
fn a_probe_registration_never_loses_the_wakeup() {
    use loom::sync::atomic::{AtomicBool, Ordering};
    struct Flag(Arc<AtomicBool>);
    impl std::task::Wake for Flag {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.store(true, Ordering::Release);
        }
    }
    loom::model(|| {
        let (batch, ticket) = Batch::new(Vec::new());
        let probe = ticket.probe();
        let woken = Arc::new(AtomicBool::new(false));
        let waker = std::task::Waker::from(std::sync::Arc::new(Flag(woken.clone())));
        let worker = thread::spawn(move || {
            assert!(batch.completion.begin(1));
            batch.completion.finish(Status::Success, 0, 2);
        });
        let registered = probe.register(&waker);
        worker.join().unwrap();
        assert!(probe.is_finished());
        if registered {
            assert!(
                woken.load(Ordering::Acquire),
                "the worker did not wake the task"
            );
        }
        // A second waiter never gets the cell.
        assert!(!probe.register(&waker));
        drop(ticket);
    });
}

/// Descriptors the loom models execute: each "copy" adds one to its loom-tracked cell, so
/// loom reports any two executions (or an execution and the owner's access) not ordered by
/// the protocol.
struct Cells([loom::cell::UnsafeCell<u32>; 2]);
// SAFETY: every access goes through loom's tracked cells; the protocol under test decides who
// may touch which, and loom reports any unsynchronised pair.
unsafe impl Sync for Cells {}
// SAFETY: as above.
unsafe impl Send for Cells {}

impl Cells {
    fn new() -> Arc<Cells> {
        Arc::new(Cells([
            loom::cell::UnsafeCell::new(0),
            loom::cell::UnsafeCell::new(0),
        ]))
    }

    fn run(&self, i: usize) {
        // SAFETY: the caller claimed descriptor `i`; loom checks the access is exclusive.
        self.0[i].with_mut(|p| unsafe { *p += 1 });
    }

    fn get(&self, i: usize) -> u32 {
        // SAFETY: loom checks the read is ordered after every write.
        self.0[i].with(|p| unsafe { *p })
    }

    /// A batch of two descriptors the models never execute for real.
    fn batch() -> (Batch, crate::completion::Ticket) {
        use crate::descriptor::{Descriptor, Flags, Op};
        let d = Descriptor {
            op: Op::Fill {
                dst: std::ptr::null_mut(),
                pattern: 0,
            },
            len: 1,
            flags: Flags::NONE,
        };
        Batch::new(vec![d, d])
    }
}

/// A helper that claims one descriptor from the back.
fn help_once(c: &crate::completion::Completion, cells: &Cells) {
    if let Some(g) = c.enter_helper() {
        if let Some(i) = c.claim_back() {
            cells.run(i);
            g.add(1);
        }
    }
}

/// A worker claiming from the front while a helper claims from the back: every
/// descriptor is executed exactly once, no execution races another access (loom checks the
/// cells), and the owner, once the batch is done, sees every write and the helped count.
#[test]
fn helpers_and_the_worker_execute_each_descriptor_once() {
    loom::model(|| {
        let (batch, mut ticket) = Cells::batch();
        let cells = Cells::new();
        let (c, hc) = (batch.completion.clone(), cells.clone());
        let helper = thread::spawn(move || help_once(&c, &hc));
        let wc = cells.clone();
        let worker = thread::spawn(move || {
            let c = &batch.completion;
            assert!(c.begin(1));
            let mut mine = 0;
            while let Some(i) = c.claim_front() {
                wc.run(i);
                mine += 1;
            }
            c.close();
            c.finish(Status::Success, 2, 2);
            mine
        });
        let o = ticket.wait(0);
        for k in 0..2 {
            assert_eq!(cells.get(k), 1, "descriptor {k}");
        }
        let mine = worker.join().unwrap();
        helper.join().unwrap();
        assert_eq!(mine + o.helped_bytes as usize, 2);
    });
}

/// A helper working on a queued batch while its submitter cancels it: once the cancel returns,
/// the submitter may use the buffers (loom reports a helper still writing them).
#[test]
fn a_cancel_waits_for_helpers_of_a_queued_batch() {
    loom::model(|| {
        let (batch, ticket) = Cells::batch();
        let cells = Cells::new();
        let (c, hc) = (batch.completion.clone(), cells.clone());
        let helper = thread::spawn(move || help_once(&c, &hc));
        assert!(ticket.try_cancel());
        // The submitter copies everything itself.
        for k in 0..2 {
            cells.run(k);
        }
        helper.join().unwrap();
        assert!(cells.get(0) + cells.get(1) <= 3);
        drop(batch);
    });
}

/// A channel paused for its budget (one byte per epoch, and the model's clock never reaches
/// the next epoch) keeps accepting work while paused, and the worker, reading the budget
/// after each pause, resumes once the controller lifts it: both items run, none is refused.
#[test]
fn a_paused_channel_accepts_work_and_resumes_when_its_budget_is_lifted() {
    use crate::budget::{pace, Budget, BudgetCell, Meter};
    loom::model(|| {
        let ring = Arc::new(Ring::new(2));
        let cell = Arc::new(BudgetCell::default());
        cell.set(Some(Budget {
            bytes: 1,
            epoch_ns: 1_000,
            lapses_ns: 0,
        }));
        ring.push(1u32).unwrap();
        let (r, c) = (ring.clone(), cell.clone());
        let worker = thread::spawn(move || {
            let mut meter = Meter::default();
            let mut ran = Vec::new();
            while ran.len() < 2 {
                let Some((_, item)) = r.pop() else {
                    crate::sync::yield_now();
                    continue;
                };
                pace(&c, &mut meter, 1, &|| 0, &mut |_| {
                    crate::sync::yield_now();
                    true
                });
                ran.push(item);
            }
            ran
        });
        assert!(ring.push(2).is_ok(), "a paused channel accepts work");
        cell.set(None);
        assert_eq!(worker.join().unwrap(), [1, 2]);
    });
}
