//! `libswitchyard_memcpy.so`: an unmodified program's large `memcpy`, `memmove` and `memset`
//! go through the Switchyard mover (CPU, engine or split, as it decides per request), the rest to
//! libc — Intel DTO's job, on the mover.
//!
//! ```sh
//! LD_PRELOAD=libswitchyard_memcpy.so SWITCHYARD_MEMCPY_STATS=1 ./program
//! ```
//!
//! Environment: `SWITCHYARD_MEMCPY_MIN` (bytes, default 65536): smaller copies go straight to
//! libc; `SWITCHYARD_CONFIG`: the configuration file, of which it uses the mover's sections
//! (default: the built-in configuration, with `./switchyard.profile.toml` if present);
//! `SWITCHYARD_MEMCPY_STATS=1`: counters on stderr at exit.
//!
//! What keeps an arbitrary program safe:
//!
//! - **Recursion.** The mover and everything it calls run with a per-thread flag set, and the
//!   engine's channel workers are known by their names (`switchyard-…`): a copy made by them
//!   (the copy kernels', Rust's own, the allocator's) goes to libc.
//! - **Early calls.** Until libc's functions are found (`dlsym(RTLD_NEXT)`, in a constructor,
//!   or at the first call, whichever is first) copies use a byte loop; the mover starts at the
//!   first large copy, and large copies meanwhile, or from other threads while it starts, go
//!   to libc.
//! - **Fork.** A child never uses the parent's mover (its engine threads do not exist in the
//!   child): after `fork` every copy in the child goes to libc.
//! - **Threads.** The mover is shared by every thread.
//! - `memmove` of overlapping ranges goes to libc; a large `memset` goes to the mover's fill.
//!
//! Why by hand: interposing libc's functions needs `#[no_mangle]` definitions and `dlsym`;
//! no crate does this for a mover.

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;

use switchyard_mover::{Direction, Hints, Mover};

type Copy = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> *mut c_void;
type Set = unsafe extern "C" fn(*mut c_void, i32, usize) -> *mut c_void;

/// libc's `memcpy`, `memmove` and `memset` (0 until found).
static LIBC_MEMCPY: AtomicUsize = AtomicUsize::new(0);
static LIBC_MEMMOVE: AtomicUsize = AtomicUsize::new(0);
static LIBC_MEMSET: AtomicUsize = AtomicUsize::new(0);

/// The mover's state.
const UNSTARTED: u8 = 0;
const STARTING: u8 = 1;
const READY: u8 = 2;
const OFF: u8 = 3;
static STATE: AtomicU8 = AtomicU8::new(UNSTARTED);
static MOVER: OnceLock<Mover> = OnceLock::new();

/// Copies below this go to libc (`SWITCHYARD_MEMCPY_MIN`; until read, none is offloaded).
static MIN: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Where the counters go at exit (a duplicate of stderr; -1: not asked for).
static REPORT_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// Counters of the program's copies: calls and bytes through the mover, and calls at or above
/// `MIN` that went to libc (the mover starting on another thread, or off after a fork).
static MOVED_CALLS: AtomicU64 = AtomicU64::new(0);
static MOVED_BYTES: AtomicU64 = AtomicU64::new(0);
static LIBC_LARGE_CALLS: AtomicU64 = AtomicU64::new(0);
/// Fills through the mover: calls and bytes.
static FILLED_CALLS: AtomicU64 = AtomicU64::new(0);
static FILLED_BYTES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread is inside the mover (or starting it): its copies go to libc.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread is one of Switchyard's own (the engine's channel workers, named
    /// `switchyard-…`), whose copies always go to libc: 0 not known yet, 1 no, 2 yes.
    static OWN: Cell<u8> = const { Cell::new(0) };
}

/// Whether the calling thread is one of Switchyard's own (its name, read once per thread).
fn own_thread() -> bool {
    OWN.with(|own| {
        if own.get() == 0 {
            let mut name = [0u8; 16];
            // SAFETY: PR_GET_NAME writes at most 16 bytes (NUL included) into `name`.
            let ok = unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) } == 0;
            own.set(if ok && name.starts_with(b"switchyard-") {
                2
            } else {
                1
            });
        }
        own.get() == 2
    })
}

/// A byte loop no compiler turns back into a `memcpy` call (volatile accesses), for the
/// copies made before libc's functions are found.
///
/// # Safety
/// As `memmove`.
unsafe fn bytewise(dst: *mut u8, src: *const u8, n: usize) {
    if (dst as usize) <= (src as usize) {
        for i in 0..n {
            // SAFETY: in bounds by the caller's contract; forward order is safe when dst <= src.
            unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
        }
    } else {
        for i in (0..n).rev() {
            // SAFETY: as above; backward order is safe when dst > src.
            unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
        }
    }
}

/// Finds libc's functions (idempotent).
fn resolve() {
    if LIBC_MEMCPY.load(Ordering::Acquire) != 0 {
        return;
    }
    let was = INSIDE.with(|i| i.replace(true));
    for (name, slot) in [
        (c"memcpy", &LIBC_MEMCPY),
        (c"memmove", &LIBC_MEMMOVE),
        (c"memset", &LIBC_MEMSET),
    ] {
        // SAFETY: RTLD_NEXT with a NUL-terminated name: the next definition after this
        // library's, libc's.
        let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        slot.store(f as usize, Ordering::Release);
    }
    INSIDE.with(|i| i.set(was));
}

/// Reads the environment and arranges for fork and exit (once, from the constructor).
extern "C" fn setup() {
    resolve();
    let min = std::env::var("SWITCHYARD_MEMCPY_MIN")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(64 << 10)
        .max(1);
    MIN.store(min, Ordering::Relaxed);
    // SAFETY: registering handlers with no preconditions; both are `extern "C"` functions
    // that live as long as the process.
    unsafe {
        libc::pthread_atfork(None, None, Some(in_child));
        if std::env::var_os("SWITCHYARD_MEMCPY_STATS").is_some_and(|v| v != "0") {
            // A descriptor of its own for the report: programs close stderr at exit (coreutils
            // does, in an exit handler that runs before this library's).
            let fd = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 100);
            if fd >= 0 {
                REPORT_FD.store(fd, Ordering::Relaxed);
                libc::atexit(report);
            }
        }
    }
}

#[used]
#[link_section = ".init_array"]
static SETUP: extern "C" fn() = setup;

/// In a child after `fork`: the parent's mover has no engine threads here.
extern "C" fn in_child() {
    STATE.store(OFF, Ordering::Release);
}

/// Prints the counters on stderr (`SWITCHYARD_MEMCPY_STATS`).
extern "C" fn report() {
    let was = INSIDE.with(|i| i.replace(true));
    let mut line = format!(
        "switchyard memcpy: {} copies of {} bytes through the mover, {} fills of {} bytes \
         through the mover, {} large calls to libc",
        MOVED_CALLS.load(Ordering::Relaxed),
        MOVED_BYTES.load(Ordering::Relaxed),
        FILLED_CALLS.load(Ordering::Relaxed),
        FILLED_BYTES.load(Ordering::Relaxed),
        LIBC_LARGE_CALLS.load(Ordering::Relaxed),
    );
    if let Some(m) = MOVER.get() {
        let s = m.stats();
        line += &format!(
            "; mover: {} bytes on the CPU, {} on the engine, {} split requests",
            s.cpu_bytes, s.engine_bytes, s.split_requests
        );
    }
    line.push('\n');
    // SAFETY: writing a buffer we own to our duplicate of stderr.
    unsafe {
        libc::write(
            REPORT_FD.load(Ordering::Relaxed),
            line.as_ptr().cast(),
            line.len(),
        )
    };
    INSIDE.with(|i| i.set(was));
}

/// The mover, started at the first call that wants it; `None` while it starts (on another
/// thread), after a fork, or if it could not start.
fn mover() -> Option<&'static Mover> {
    match STATE.load(Ordering::Acquire) {
        READY => return MOVER.get(),
        UNSTARTED => {}
        _ => return None,
    }
    if STATE
        .compare_exchange(UNSTARTED, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return None;
    }
    let config = std::env::var_os("SWITCHYARD_CONFIG").map(std::path::PathBuf::from);
    let started = switchyard_config::Config::load_with_profile(config.as_deref(), None, false)
        .ok()
        .and_then(|c| Mover::start(&c.mover).ok());
    match started {
        Some(m) => {
            let _ = MOVER.set(m);
            STATE.store(READY, Ordering::Release);
            MOVER.get()
        }
        None => {
            STATE.store(OFF, Ordering::Release);
            None
        }
    }
}

/// Runs `op` (an `n`-byte copy or fill) on the mover if this call may (large enough, not
/// recursive, the mover available); returns whether it did.
fn through_mover(n: usize, op: impl FnOnce(&Mover)) -> bool {
    if n < MIN.load(Ordering::Relaxed) {
        return false;
    }
    let offload = INSIDE.with(|inside| {
        if inside.get() || own_thread() {
            // Switchyard's own call: not the program's, not counted.
            return None;
        }
        inside.set(true);
        let done = match mover() {
            Some(m) => {
                op(m);
                true
            }
            None => false,
        };
        inside.set(false);
        Some(done)
    });
    match offload {
        Some(true) => true,
        Some(false) => {
            LIBC_LARGE_CALLS.fetch_add(1, Ordering::Relaxed);
            false
        }
        None => false,
    }
}

/// A program's buffers in DRAM.
const DRAM: Hints = Hints {
    direction: Direction::Dram,
    durable: false,
    defer_fence: false,
    latency_critical: false,
    remote: false,
    tenant: 0,
};

/// Copies `n` bytes through the mover if this call may; returns whether it did.
///
/// # Safety
/// As `memcpy`: the ranges are valid and do not overlap.
unsafe fn copy_through_mover(dst: *mut c_void, src: *const c_void, n: usize) -> bool {
    // SAFETY: the caller's memcpy contract: valid, non-overlapping ranges.
    let done = through_mover(n, |m| unsafe {
        m.copy_raw(dst.cast(), src.cast(), n, DRAM);
    });
    if done {
        MOVED_CALLS.fetch_add(1, Ordering::Relaxed);
        MOVED_BYTES.fetch_add(n as u64, Ordering::Relaxed);
    }
    done
}

/// libc's function in `slot`, found now if need be (`None` before it can be).
fn libc_fn(slot: &AtomicUsize) -> Option<usize> {
    let f = slot.load(Ordering::Acquire);
    if f != 0 {
        return Some(f);
    }
    if INSIDE.with(Cell::get) {
        return None;
    }
    resolve();
    Some(slot.load(Ordering::Acquire)).filter(|&f| f != 0)
}

/// `memcpy(3)`: large copies through the mover, the rest to libc.
///
/// # Safety
/// As `memcpy(3)`.
#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    // SAFETY: the caller's memcpy contract, forwarded.
    if unsafe { copy_through_mover(dst, src, n) } {
        return dst;
    }
    match libc_fn(&LIBC_MEMCPY) {
        // SAFETY: libc's memcpy, with the caller's arguments.
        Some(f) => unsafe { std::mem::transmute::<usize, Copy>(f)(dst, src, n) },
        None => {
            // SAFETY: the caller's memcpy contract.
            unsafe { bytewise(dst.cast(), src.cast(), n) };
            dst
        }
    }
}

/// `memmove(3)`: large copies of ranges that do not overlap through the mover, the rest to
/// libc.
///
/// # Safety
/// As `memmove(3)`.
#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    let (d, s) = (dst as usize, src as usize);
    let apart =
        d.checked_add(n).is_some_and(|e| e <= s) || s.checked_add(n).is_some_and(|e| e <= d);
    // SAFETY: the ranges do not overlap, so memcpy's contract holds.
    if apart && unsafe { copy_through_mover(dst, src, n) } {
        return dst;
    }
    match libc_fn(&LIBC_MEMMOVE) {
        // SAFETY: libc's memmove, with the caller's arguments.
        Some(f) => unsafe { std::mem::transmute::<usize, Copy>(f)(dst, src, n) },
        None => {
            // SAFETY: the caller's memmove contract.
            unsafe { bytewise(dst.cast(), src.cast(), n) };
            dst
        }
    }
}

/// `memset(3)`: large fills through the mover (its fill: the engine's, the CPU's or both),
/// the rest to libc; a byte loop before libc is found.
///
/// # Safety
/// As `memset(3)`.
#[no_mangle]
pub unsafe extern "C" fn memset(dst: *mut c_void, c: i32, n: usize) -> *mut c_void {
    // SAFETY: the caller's memset contract: `dst` is writable for `n` bytes.
    if through_mover(n, |m| unsafe {
        m.fill_raw(dst.cast(), c as u8, n, DRAM);
    }) {
        FILLED_CALLS.fetch_add(1, Ordering::Relaxed);
        FILLED_BYTES.fetch_add(n as u64, Ordering::Relaxed);
        return dst;
    }
    match libc_fn(&LIBC_MEMSET) {
        // SAFETY: libc's memset, with the caller's arguments.
        Some(f) => unsafe { std::mem::transmute::<usize, Set>(f)(dst, c, n) },
        None => {
            let d = dst.cast::<u8>();
            for i in 0..n {
                // SAFETY: in bounds by the caller's contract.
                unsafe { d.add(i).write_volatile(c as u8) };
            }
            dst
        }
    }
}
