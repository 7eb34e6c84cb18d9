//! The bounded submission queue of a channel.
//!
//! The algorithm is Dmitry Vyukov's bounded MPMC queue as crossbeam's `ArrayQueue` writes it
//! (<http://www.1024cores.net/home/lock-free-algorithms/queues/bounded-mpmc-queue>), plus one
//! addition: every push and pop returns the item's **position**, its 0-based rank in the
//! queue's total order. Positions are the channel's sequence numbers: the worker completes
//! batches in position order, so "completion record seq = n" means every batch at position
//! `< n` is finished, and a submitter learns its batch's seq from the push without a second
//! shared counter that could disagree with the queue order.
//!
//! ## Indices
//!
//! `head` and `tail` each pack a *lap* and an *index*: `index = x & (one_lap - 1)`,
//! `lap = x & !(one_lap - 1)`, with `one_lap` the smallest power of two above `cap`. Position of
//! a packed value: `(x / one_lap) * cap + index`.
//!
//! Each slot has a `stamp`:
//! - `stamp == tail`: the slot is free for the push at `tail`;
//! - `stamp == head + 1`: the slot holds the value for the pop at `head`;
//! - anything else: another thread is between reserving and publishing, or the ring is full /
//!   empty (checked against the other index).
//!
//! A push **reserves** the slot by CAS on `tail`, **fills** it, and **publishes** with a
//! Release store of `stamp = tail + 1`; a pop reserves by CAS on `head`, takes the value and
//! frees the slot with `stamp = head + one_lap` (the push index one lap later).

use crate::sync::{fence, spin_hint, AtomicUsize, Ordering, UnsafeCell};
use crossbeam_utils::CachePadded;
use std::mem::MaybeUninit;

struct Slot<T> {
    stamp: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// A bounded multi-producer multi-consumer queue whose pushes and pops report positions.
pub(crate) struct Ring<T> {
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
    slots: Box<[Slot<T>]>,
    cap: usize,
    one_lap: usize,
}

// SAFETY: (1) a value is written only by the thread that reserved its slot and read only by the
// thread that reserved it for popping; the stamp's Release/Acquire pair orders the two;
// (2) values move between threads, so T: Send suffices.
unsafe impl<T: Send> Sync for Ring<T> {}
// SAFETY: the ring owns its values; sending it sends them.
unsafe impl<T: Send> Send for Ring<T> {}

impl<T> Ring<T> {
    /// A ring holding at most `cap` items (`cap >= 1`).
    pub(crate) fn new(cap: usize) -> Ring<T> {
        assert!(cap >= 1, "ring capacity must be at least 1");
        let slots = (0..cap)
            .map(|i| Slot {
                stamp: AtomicUsize::new(i),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        Ring {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            slots,
            cap,
            one_lap: (cap + 1).next_power_of_two(),
        }
    }

    fn position(&self, packed: usize) -> u64 {
        (packed / self.one_lap) as u64 * self.cap as u64 + (packed & (self.one_lap - 1)) as u64
    }

    /// Appends `value`; returns its position, or gives the value back when the ring is full.
    pub(crate) fn push(&self, value: T) -> Result<u64, T> {
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            let index = tail & (self.one_lap - 1);
            let lap = tail & !(self.one_lap - 1);
            let next = if index + 1 < self.cap {
                tail + 1
            } else {
                lap.wrapping_add(self.one_lap)
            };
            let slot = &self.slots[index];
            let stamp = slot.stamp.load(Ordering::Acquire);
            if tail == stamp {
                match self
                    .tail
                    .compare_exchange(tail, next, Ordering::SeqCst, Ordering::Relaxed)
                {
                    Ok(_) => {
                        // SAFETY: the CAS reserved this slot for us alone until we publish the
                        // stamp; the previous value was taken by its pop (stamp == tail).
                        slot.value
                            .with_mut(|p| unsafe { p.write(MaybeUninit::new(value)) });
                        slot.stamp.store(tail + 1, Ordering::Release);
                        return Ok(self.position(tail));
                    }
                    Err(t) => tail = t,
                }
            } else if stamp.wrapping_add(self.one_lap) == tail + 1 {
                fence(Ordering::SeqCst);
                let head = self.head.load(Ordering::Relaxed);
                if head.wrapping_add(self.one_lap) == tail {
                    return Err(value);
                }
                spin_hint();
                tail = self.tail.load(Ordering::Relaxed);
            } else {
                spin_hint();
                tail = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Removes the oldest value with its position, or `None` when empty.
    pub(crate) fn pop(&self) -> Option<(u64, T)> {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let index = head & (self.one_lap - 1);
            let lap = head & !(self.one_lap - 1);
            let slot = &self.slots[index];
            let stamp = slot.stamp.load(Ordering::Acquire);
            if head + 1 == stamp {
                let next = if index + 1 < self.cap {
                    head + 1
                } else {
                    lap.wrapping_add(self.one_lap)
                };
                match self
                    .head
                    .compare_exchange(head, next, Ordering::SeqCst, Ordering::Relaxed)
                {
                    Ok(_) => {
                        // SAFETY: stamp == head + 1 means the pusher published a value here
                        // (Acquire above), and the CAS made us its only reader.
                        let v = slot.value.with(|p| unsafe { p.read().assume_init() });
                        slot.stamp
                            .store(head.wrapping_add(self.one_lap), Ordering::Release);
                        return Some((self.position(head), v));
                    }
                    Err(h) => head = h,
                }
            } else if stamp == head {
                fence(Ordering::SeqCst);
                let tail = self.tail.load(Ordering::Relaxed);
                if tail == head {
                    return None;
                }
                spin_hint();
                head = self.head.load(Ordering::Relaxed);
            } else {
                spin_hint();
                head = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Number of queued values (a snapshot).
    pub(crate) fn len(&self) -> usize {
        loop {
            let tail = self.tail.load(Ordering::SeqCst);
            let head = self.head.load(Ordering::SeqCst);
            if self.tail.load(Ordering::SeqCst) == tail {
                return (self.position(tail) - self.position(head)) as usize;
            }
        }
    }

    /// Number of values ever pushed (the next push's position).
    pub(crate) fn pushed(&self) -> u64 {
        self.position(self.tail.load(Ordering::SeqCst))
    }

    /// Whether the ring is empty (a snapshot).
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    proptest! {
        /// Against a VecDeque model: same contents, same full/empty answers, positions count
        /// pushes and pops.
        #[test]
        fn matches_a_fifo_model(cap in 1usize..9, ops in proptest::collection::vec(any::<bool>(), 0..200)) {
            let ring = Ring::new(cap);
            let mut model = VecDeque::new();
            let (mut pushed, mut popped) = (0u64, 0u64);
            for (i, push) in ops.into_iter().enumerate() {
                if push {
                    match ring.push(i) {
                        Ok(pos) => { prop_assert_eq!(pos, pushed); pushed += 1; model.push_back(i) }
                        Err(v) => { prop_assert_eq!(v, i); prop_assert_eq!(model.len(), cap) }
                    }
                } else {
                    match ring.pop() {
                        Some((pos, v)) => { prop_assert_eq!(pos, popped); popped += 1; prop_assert_eq!(Some(v), model.pop_front()) }
                        None => prop_assert!(model.is_empty()),
                    }
                }
                prop_assert_eq!(ring.len(), model.len());
            }
        }
    }

    #[test]
    fn threads_hand_over_every_item_once_in_order() {
        let ring = std::sync::Arc::new(Ring::new(4));
        let n = 20_000u64;
        let producers: Vec<_> = (0..2u64)
            .map(|p| {
                let r = ring.clone();
                std::thread::spawn(move || {
                    for i in 0..n {
                        let mut v = (p, i);
                        while let Err(back) = r.push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut next = [0u64; 2];
        let mut last_pos = None;
        while next.iter().sum::<u64>() < 2 * n {
            if let Some((pos, (p, i))) = ring.pop() {
                assert_eq!(i, next[p as usize]);
                next[p as usize] += 1;
                assert!(last_pos.is_none_or(|l| pos == l + 1));
                last_pos = Some(pos);
            }
        }
        producers.into_iter().for_each(|h| h.join().unwrap());
    }
}
