//! Two-level locking and completion checking (EasyIO §4.3) under shuttle's randomized and PCT
//! schedulers, with the store's real in-flight tracking, built on shuttle's locks and atomics
//! (`crate::sync` under `--cfg shuttle`): a write's pending copies are a [`PendingWrite`],
//! settled by its own `try_settle` and `collect` (the code `src/store/lock.rs` calls), and the
//! reads in flight with the limbo of blocks freed under them are [`Readers`]. Around them the
//! model has the inode lock (an RwLock over the slot, as the store's), taken and then passed
//! through level 2 by the store's own [`gate`] (the code `Store::try_lock` and the
//! asynchronous read's start run), an engine channel answering [`Completions`] as the threads
//! engine does, and the free list.
//!
//! Modelled, one file:
//! - level 1: the inode lock (an RwLock over the mapping and the pending write);
//! - an engine channel: a FIFO of copies, a worker that writes the block and then advances the
//!   channel's completion record (`seq` = copies finished), as the threads engine does;
//! - an orderless write: under the write lock, settle the previous write (its position below
//!   the record's seq) or release the lock and yield; take a fresh block from the free list,
//!   submit its copy, commit the new mapping with the copy's position as the pending write,
//!   retire the replaced block, release; then wait until the record passes the position;
//! - a read: under the read lock, the same level-2 check; note the block, enter the readers,
//!   release; copy the block; leave (the last reader frees the limbo);
//! - retire: [`Readers::retire`] (free the block now if no read is in flight, else park it in
//!   the limbo); a read's end is [`Readers::leave`] (the last reader frees the limbo).
//!
//! Checked: a read returns exactly the version its mapping named (never an unfinished copy,
//! never a block reused under it); the file ends with the last version; no schedule deadlocks,
//! with many tasks on one file.

use shuttle::future::{block_on, spawn, yield_now};
use shuttle::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use shuttle::sync::{Arc, Mutex, RwLock};

use super::{gate, Completions, Part, PendingWrite, Readers};

const BLOCKS: usize = 6;

struct File {
    /// The block the file maps, and the version written there.
    mapping: (usize, u64),
    /// The last write's copy while it may be running (a copy is its position).
    pending: Option<Arc<PendingWrite<u64>>>,
}

struct Model {
    file: RwLock<File>,
    /// Block contents (the version written into each).
    blocks: Vec<AtomicU64>,
    free: Mutex<Vec<usize>>,
    /// The store's own tracking of reads in flight (blocks are `u64` there).
    readers: Readers,
    /// The channel's queue: (position, block, version); `queued` numbers positions.
    queue: Mutex<Vec<(u64, usize, u64)>>,
    queued: AtomicU64,
    /// The completion record: copies finished, in order.
    seq: AtomicU64,
}

impl Model {
    fn new() -> Model {
        Model {
            file: RwLock::new(File {
                mapping: (0, 0),
                pending: None,
            }),
            blocks: (0..BLOCKS).map(|_| AtomicU64::new(0)).collect(),
            free: Mutex::new((1..BLOCKS).collect()),
            readers: Readers::default(),
            queue: Mutex::new(Vec::new()),
            queued: AtomicU64::new(0),
            seq: AtomicU64::new(0),
        }
    }

    fn finished(&self, pos: u64) -> bool {
        self.seq.load(Ordering::Acquire) > pos
    }

    /// The engine's worker: one queued copy, if any.
    fn work(&self) -> bool {
        let next = {
            let mut q = self.queue.lock().unwrap();
            if q.is_empty() {
                return false;
            }
            q.remove(0)
        };
        let (pos, block, version) = next;
        self.blocks[block].store(version, Ordering::Relaxed);
        // The record is advanced after the data, with Release (completion rule 5).
        assert_eq!(
            self.seq.load(Ordering::Relaxed),
            pos,
            "copies finish in order"
        );
        self.seq.store(pos + 1, Ordering::Release);
        true
    }

    fn release(&self, blocks: Vec<u64>) {
        let mut free = self.free.lock().unwrap();
        free.extend(blocks.into_iter().map(|b| b as usize));
    }

    /// Level 1 and the commit; `None` when the previous copy is unfinished or no block is
    /// free (the caller yields and tries again, holding nothing).
    fn try_write(&self, version: u64) -> Option<Arc<PendingWrite<u64>>> {
        let mut f = self.file.write().unwrap();
        // Level 2: the previous write's copy must have finished.
        gate(f.pending.as_ref(), self).ok()?;
        // Space may be held by reads in flight; they finish without us.
        let block = self.free.lock().unwrap().pop()?;
        let pos = {
            let mut q = self.queue.lock().unwrap();
            let pos = self.queued.fetch_add(1, Ordering::Relaxed);
            q.push((pos, block, version));
            pos
        };
        // The metadata commits while the copy is queued (orderless write).
        let (old, _) = std::mem::replace(&mut f.mapping, (block, version));
        let part = Part {
            recorded: (0, pos),
            copy: pos,
            expected_ns: 0,
        };
        let pending = Arc::new(PendingWrite::new(vec![part], vec![(0, pos)]));
        f.pending = Some(pending.clone());
        self.release(self.readers.retire(vec![old as u64]));
        Some(pending)
    }

    async fn write(&self, version: u64) {
        let pending = loop {
            if let Some(p) = self.try_write(version) {
                break p;
            }
            yield_now().await;
        };
        // The write completes once its copy has: its own future collects it, as the store's
        // `try_settle_own` does.
        while !(pending.is_settled() || pending.collect(self)) {
            yield_now().await;
        }
    }

    fn try_read(&self) -> Option<(usize, u64)> {
        let f = self.file.read().unwrap();
        gate(f.pending.as_ref(), self).ok()?;
        self.readers.enter();
        Some(f.mapping)
    }

    async fn read(&self) {
        let (block, version) = loop {
            if let Some(m) = self.try_read() {
                break m;
            }
            yield_now().await;
        };
        // The copy runs with the lock released: later writes go ahead.
        yield_now().await;
        let got = self.blocks[block].load(Ordering::Relaxed);
        assert_eq!(
            got, version,
            "a read saw block {block} with version {got}, not {version}"
        );
        self.release(self.readers.leave());
    }
}

/// The model's engine channel answers as the threads engine does: a copy is done once the
/// channel's record has passed its position; it never completes partly here.
impl Completions for Model {
    type Copy = u64;

    fn recorded_done(&self, _channel: usize, position: u64) -> bool {
        self.finished(position)
    }

    fn poll(&self, copy: &mut u64) -> Option<bool> {
        self.finished(*copy).then_some(false)
    }

    fn clear_hole(&self, _channel: usize, _position: u64) {}
}

fn scenario(writers: u64, readers: usize) {
    let m = Arc::new(Model::new());
    let done = Arc::new(AtomicUsize::new(0));
    let tasks = writers as usize + readers;
    let engine = {
        let (m, done) = (m.clone(), done.clone());
        shuttle::thread::spawn(move || {
            while done.load(Ordering::Acquire) < tasks || m.work() {
                if !m.work() {
                    shuttle::thread::yield_now();
                }
            }
        })
    };
    block_on(async {
        let mut handles = Vec::new();
        for v in 1..=writers {
            let (m, done) = (m.clone(), done.clone());
            handles.push(spawn(async move {
                m.write(v).await;
                done.fetch_add(1, Ordering::Release);
            }));
        }
        for _ in 0..readers {
            let (m, done) = (m.clone(), done.clone());
            handles.push(spawn(async move {
                m.read().await;
                done.fetch_add(1, Ordering::Release);
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
    });
    engine.join().unwrap();
    let f = m.file.read().unwrap();
    assert!(f.pending.as_ref().is_none_or(|p| p.try_settle(&*m)));
    let (block, version) = f.mapping;
    assert_eq!(m.blocks[block].load(Ordering::Relaxed), version);
    // Every block is mapped or free again: no read is in flight, so nothing waits in limbo.
    assert!(m.readers.retire(Vec::new()).is_empty());
    let free = m.free.lock().unwrap().len();
    assert_eq!(free + 1, BLOCKS, "a block leaked");
}

#[test]
fn two_level_locking_random_schedules() {
    shuttle::check_random(|| scenario(3, 3), 3000);
}

#[test]
fn two_level_locking_pct_schedules() {
    shuttle::check_pct(|| scenario(3, 3), 3000, 3);
}

#[test]
fn many_tasks_on_one_file_never_deadlock() {
    shuttle::check_random(|| scenario(6, 6), 300);
}
