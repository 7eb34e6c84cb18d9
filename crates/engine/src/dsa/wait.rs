//! How the completion thread waits for a completion record once its bounded spin found nothing:
//! with `UMONITOR`/`UMWAIT` on the record's status line where the CPU has `waitpkg` (the core
//! dozes in a light power state until the device writes the line or a short deadline passes),
//! else by yielding its core. No host here has `waitpkg`, so the first path is compiled but was
//! never executed.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// TSC ticks one `UMWAIT` may last (about 10 µs at 2 GHz): short, so a record in another chunk,
/// a new submission or shutdown is noticed soon, and well under the OS's limit
/// (`IA32_UMWAIT_CONTROL`).
const DOZE_TICKS: u64 = 20_000;

/// Whether the CPU has `UMONITOR`/`UMWAIT` (CPUID leaf 7, ECX bit 5), cached.
pub fn cpu_has_waitpkg() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| crate::dsa::portal::leaf7_ecx() >> 5 & 1 == 1)
}

/// Waits a little for `status` (a completion record's status byte) to become nonzero.
pub(crate) fn doze(status: &AtomicU8) {
    #[cfg(target_arch = "x86_64")]
    if cpu_has_waitpkg() {
        // SAFETY: the CPU has waitpkg (checked); `status` is a live byte we only monitor.
        unsafe { umwait_on(status) };
        return;
    }
    let _ = status;
    std::thread::yield_now();
}

/// Arms the monitor on `status`'s line, checks it once more (a write between the last look and
/// the arming would otherwise be missed), and waits until the line is written or
/// [`DOZE_TICKS`] pass, in the C0.2 state.
///
/// # Safety
/// The CPU must have `waitpkg`.
#[cfg(target_arch = "x86_64")]
unsafe fn umwait_on(status: &AtomicU8) {
    let addr = status as *const AtomicU8;
    // SAFETY: UMONITOR only arms address monitoring of a valid address; no memory is written.
    unsafe {
        std::arch::asm!("umonitor {a}", a = in(reg) addr, options(nostack, preserves_flags));
    }
    if status.load(Ordering::Acquire) != 0 {
        return;
    }
    // SAFETY: RDTSC has no preconditions.
    let deadline = unsafe { std::arch::x86_64::_rdtsc() } + DOZE_TICKS;
    // SAFETY: UMWAIT waits and writes no memory; control 0 asks for C0.2; EDX:EAX is the TSC
    // deadline; it sets CF, which we declare clobbered by not preserving flags.
    unsafe {
        std::arch::asm!(
            "umwait {c:e}",
            c = in(reg) 0u32,
            in("edx") (deadline >> 32) as u32,
            in("eax") deadline as u32,
            options(nostack)
        );
    }
}
