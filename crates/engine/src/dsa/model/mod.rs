//! A model of a DSA device with one work queue, for tests only: nothing in the product runs on
//! it. It enforces what the hardware would:
//!
//! - descriptors arrive through an **emulated portal page** (ordinary 64-byte-aligned memory):
//!   [`ModelPortal`] writes each one into the next 64-byte slot with the real `MOVDIR64B`
//!   where the CPU has it (a plain 64-byte copy where it does not:
//!   [`ModelPortal::uses_movdir64b`]), fences, and raises the slot's flag; the model's thread
//!   takes descriptors from the slots in order;
//! - **queue capacity**: a dedicated queue that receives a descriptor while it holds `size`
//!   drops it silently, as hardware does ([`ModelDevice::dropped`]); a shared queue refuses it
//!   ([`crate::dsa::Refused::Full`], `ENQCMD`'s retry). [`ModelDevice::occupy`] fills entries
//!   as another process would;
//! - **validation** (`validate.rs`): reserved fields zero, privilege, defined flags, no
//!   block-on-fault on a queue without it, completion records 32-byte aligned, transfer sizes
//!   in `1..=max_transfer_size`, batches of `2..=max_batch_size` descriptors at a 64-byte
//!   aligned list, no batch or drain inside a batch, and (stricter than the specification
//!   requires) no fence outside a batch; a descriptor that breaks a rule completes with the
//!   rule's status code ([`ModelDevice::rejected`] counts them);
//! - **execution** (`exec.rs`) with the specification's status codes and `bytes_completed`,
//!   fences and the check-result flag in batches, and **page faults** on ranges a test marks
//!   absent ([`ModelDevice::mark_absent`]): the operation stops at the first absent byte with
//!   `PAGE_FAULT_NOBOF`, the bytes before it done and the faulting address in the record;
//! - **drain**: descriptors run one at a time in arrival order, so a drain completes after
//!   every earlier one.

mod engine;
mod exec;
pub(crate) mod validate;

pub use engine::{ModelEngine, MODEL_ENGINE_NAME};

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use switchyard_media::Persist;

use crate::dsa::descriptor::HwDesc;
use crate::dsa::portal::{Portal, Refused};
use crate::dsa::sysfs::{Mode, WorkQueue};

/// Fault-info bit: the fault was on a write.
pub(crate) const FAULT_WRITE: u8 = 1;

/// Slots of the emulated portal page (64 bytes each: one 4 KiB page).
const SLOTS: usize = 64;

/// The model's work queue.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// Dedicated or shared.
    pub mode: Mode,
    /// Entries.
    pub size: u32,
    /// Largest transfer of one descriptor.
    pub max_transfer_size: u64,
    /// Most descriptors in a batch.
    pub max_batch_size: u32,
    /// Whether the queue allows block-on-fault.
    pub block_on_fault: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            mode: Mode::Dedicated,
            size: 16,
            max_transfer_size: 2 << 20,
            max_batch_size: 32,
            block_on_fault: false,
        }
    }
}

#[repr(C, align(64))]
struct Slot(std::cell::UnsafeCell<[u8; 64]>);

/// State shared by the portal, the model's thread and the test.
pub(crate) struct Shared {
    pub(crate) config: ModelConfig,
    pub(crate) persist: Persist,
    page: Box<[Slot]>,
    full: Box<[AtomicBool]>,
    tail: AtomicUsize,
    /// Entries held: accepted and not completed, plus [`ModelDevice::occupy`]'s.
    occupied: AtomicUsize,
    absent: Mutex<Vec<(usize, usize)>>,
    pub(crate) rejected: AtomicU64,
    dropped: AtomicU64,
    executed: AtomicU64,
    shutdown: AtomicBool,
    thread: Mutex<Option<std::thread::Thread>>,
}

// SAFETY: a slot's bytes are written only by the submitter that reserved it (through `tail`)
// while its `full` flag is clear, and read only by the model's thread after it observed the
// flag set (Acquire), before clearing it (Release).
unsafe impl Sync for Shared {}

impl Shared {
    /// The first address in `[addr, addr + len)` a test marked absent.
    pub(crate) fn absent_in(&self, addr: usize, len: usize) -> Option<usize> {
        let end = addr.saturating_add(len);
        let ranges = self.absent.lock().expect("absent ranges");
        ranges
            .iter()
            .filter(|&&(a, b)| a < end && b > addr)
            .map(|&(a, _)| a.max(addr))
            .min()
    }

    fn wake(&self) {
        if let Some(t) = &*self.thread.lock().expect("model thread") {
            t.unpark();
        }
    }
}

/// A running device model (see the module docs). Dropping it stops its thread.
pub struct ModelDevice {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl ModelDevice {
    /// Starts a model of one work queue configured as `config`.
    pub fn start(config: ModelConfig) -> ModelDevice {
        ModelDevice::start_with(config, Persist::detect())
    }

    /// [`ModelDevice::start`] whose device writes memory with `persist`'s kernels (a traced
    /// `Persist` records the device's stores, flushes and fences, as the crash harness needs).
    pub fn start_with(config: ModelConfig, persist: Persist) -> ModelDevice {
        let shared = Arc::new(Shared {
            config,
            persist,
            page: (0..SLOTS)
                .map(|_| Slot(std::cell::UnsafeCell::new([0; 64])))
                .collect(),
            full: (0..SLOTS).map(|_| AtomicBool::new(false)).collect(),
            tail: AtomicUsize::new(0),
            occupied: AtomicUsize::new(0),
            absent: Mutex::new(Vec::new()),
            rejected: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            executed: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("dsa-model".into())
            .spawn(move || consume(&s))
            .expect("spawn the model's thread");
        *shared.thread.lock().expect("model thread") = Some(thread.thread().clone());
        ModelDevice {
            shared,
            thread: Some(thread),
        }
    }

    /// The queue as discovery would describe it (every operation the model runs in `op_cap`).
    pub fn work_queue(&self) -> WorkQueue {
        let c = &self.shared.config;
        WorkQueue {
            name: "wq0.0".into(),
            device: "dsa0".into(),
            mode: c.mode,
            size: c.size,
            priority: 10,
            max_transfer_size: c.max_transfer_size,
            max_batch_size: c.max_batch_size,
            block_on_fault: c.block_on_fault,
            op_cap: [0x3f, 1, 0, 0],
            dev_path: "/dev/null".into(),
        }
    }

    /// A portal to the emulated page.
    pub fn portal(&self) -> ModelPortal {
        ModelPortal {
            shared: self.shared.clone(),
            movdir64b: cfg!(target_arch = "x86_64") && crate::dsa::portal::cpu_has_movdir64b(),
        }
    }

    /// Makes accesses to `[addr, addr + len)` fault until [`ModelDevice::mark_present`].
    pub fn mark_absent(&self, addr: *const u8, len: usize) {
        let a = addr as usize;
        self.shared
            .absent
            .lock()
            .expect("absent")
            .push((a, a + len));
    }

    /// Makes every range present again.
    pub fn mark_present(&self) {
        self.shared.absent.lock().expect("absent").clear();
    }

    /// Takes `n` entries of the queue, as another process's descriptors would.
    pub fn occupy(&self, n: usize) {
        self.shared.occupied.fetch_add(n, Ordering::AcqRel);
    }

    /// Gives back `n` entries taken by [`ModelDevice::occupy`].
    pub fn release(&self, n: usize) {
        self.shared.occupied.fetch_sub(n, Ordering::AcqRel);
    }

    /// Descriptors that completed with a validation error.
    pub fn rejected(&self) -> u64 {
        self.shared.rejected.load(Ordering::Relaxed)
    }

    /// Descriptors a full dedicated queue dropped (a submitter that overran its credits).
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Descriptors taken from the portal and run (valid or not).
    pub fn executed(&self) -> u64 {
        self.shared.executed.load(Ordering::Relaxed)
    }
}

impl Drop for ModelDevice {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The model's portal: descriptors go into the emulated page (see the module docs).
pub struct ModelPortal {
    shared: Arc<Shared>,
    movdir64b: bool,
}

impl ModelPortal {
    /// Whether descriptors are written with the real `MOVDIR64B` (else a 64-byte copy: this
    /// CPU lacks the instruction).
    pub fn uses_movdir64b(&self) -> bool {
        self.movdir64b
    }

    /// Takes a queue entry: `false` when the queue is full.
    fn take_entry(&self) -> bool {
        let size = self.shared.config.size as usize;
        self.shared
            .occupied
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |o| {
                (o < size).then_some(o + 1)
            })
            .is_ok()
    }
}

impl Portal for ModelPortal {
    unsafe fn submit(&self, desc: &HwDesc) -> Result<(), Refused> {
        let s = &*self.shared;
        if !self.take_entry() {
            if s.config.mode == Mode::Shared {
                return Err(Refused::Full);
            }
            // A dedicated queue drops it and says nothing.
            s.dropped.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let i = s.tail.fetch_add(1, Ordering::Relaxed) % SLOTS;
        while s.full[i].load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let slot = s.page[i].0.get().cast::<u8>();
        #[cfg(target_arch = "x86_64")]
        if self.movdir64b {
            // SAFETY: the CPU has MOVDIR64B (checked at creation); the slot is 64-byte aligned,
            // ours (reserved through `tail`, its flag clear) and 64 bytes long.
            unsafe { crate::dsa::portal::movdir64b(slot, desc) };
            // MOVDIR64B is weakly ordered: fence before publishing the slot.
            // SAFETY: SFENCE has no preconditions.
            unsafe { std::arch::x86_64::_mm_sfence() };
        }
        if !self.movdir64b {
            // SAFETY: as above; a plain copy of the 64 bytes.
            unsafe { std::ptr::copy_nonoverlapping(desc.as_bytes().as_ptr(), slot, 64) };
        }
        s.full[i].store(true, Ordering::Release);
        s.wake();
        Ok(())
    }
}

/// The model's thread: takes descriptors from the slots in order and runs them.
fn consume(s: &Shared) {
    let mut head = 0usize;
    let mut idle = 0u32;
    loop {
        let i = head % SLOTS;
        if s.full[i].load(Ordering::Acquire) {
            // SAFETY: the flag is set (Acquire), so the submitter's write is complete and no
            // one writes the slot until we clear it; HwDesc has no invalid bit patterns.
            let d: HwDesc = unsafe { std::ptr::read(s.page[i].0.get().cast::<HwDesc>()) };
            s.full[i].store(false, Ordering::Release);
            head += 1;
            idle = 0;
            // Dispatched: the entry is free again (as on hardware, before execution).
            s.occupied.fetch_sub(1, Ordering::AcqRel);
            exec::run(s, &d);
            s.executed.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        idle += 1;
        if idle < 1000 {
            std::hint::spin_loop();
        } else {
            std::thread::park_timeout(std::time::Duration::from_millis(1));
        }
    }
}
