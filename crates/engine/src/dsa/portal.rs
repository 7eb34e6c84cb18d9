//! Portals: how a work descriptor reaches a work queue.
//!
//! - [`MappedPortal`] with [`Instr::Movdir64b`]: a dedicated queue's portal page mapped from
//!   its character device, written with `MOVDIR64B` (one 64-byte posted write). A dedicated
//!   queue drops what arrives while it is full and says nothing, so the engine never has more
//!   descriptors outstanding than the queue's size (its credits).
//! - [`MappedPortal`] with [`Instr::Enqcmd`]: a shared queue's portal written with `ENQCMD`,
//!   which reports whether the queue accepted the descriptor; a full queue is retried.
//! - [`WritePortal`]: `write(2)` of the descriptor to the queue's character device, for kernels
//!   and CPUs where user space cannot use the instructions (the kernel submits it).
//!
//! Both instructions are detected at run time ([`cpu_has_movdir64b`], [`cpu_has_enqcmd`]).
//! None of these was exercised against a DSA device here: `MOVDIR64B` runs for real into the
//! device model's emulated portal and, through [`MappedPortal`], into a mapped file standing in
//! for a queue's device; [`WritePortal`] writes such a file; `ENQCMD` is compiled but never
//! executed (no host available had it).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use crate::dsa::descriptor::HwDesc;

/// Why a work queue did not take a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The queue is full (a shared queue said so): retry later.
    Full,
    /// Submission failed for good (the kernel refused the `write`).
    Failed,
}

/// Where descriptors are submitted.
pub trait Portal: Send + Sync {
    /// Submits `desc`. `Err(Refused::Full)` when the queue reported itself full; `Ok` means handed to
    /// the queue (a dedicated queue reports nothing: the caller keeps within its credits).
    ///
    /// # Safety
    /// Every address in `desc` (buffers, descriptor list, completion records) must stay valid
    /// until its completion record is written.
    unsafe fn submit(&self, desc: &HwDesc) -> Result<(), Refused>;
}

/// Whether the CPU executes `MOVDIR64B` (CPUID leaf 7, ECX bit 28).
pub fn cpu_has_movdir64b() -> bool {
    leaf7_ecx() >> 28 & 1 == 1
}

/// Whether the CPU executes `ENQCMD` (CPUID leaf 7, ECX bit 29).
pub fn cpu_has_enqcmd() -> bool {
    leaf7_ecx() >> 29 & 1 == 1
}

#[cfg(target_arch = "x86_64")]
pub(crate) fn leaf7_ecx() -> u32 {
    #[allow(unused_unsafe)]
    // SAFETY: CPUID is available on every x86_64 CPU and has no side effects.
    let r = unsafe { std::arch::x86_64::__cpuid_count(7, 0) };
    r.ecx
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn leaf7_ecx() -> u32 {
    0
}

/// Writes the 64 bytes at `src` to `dst` with one `MOVDIR64B`: a single 64-byte write that is
/// never split or combined, weakly ordered like a non-temporal store (fence before another
/// thread may rely on it).
///
/// # Safety
/// The CPU must have `MOVDIR64B` ([`cpu_has_movdir64b`]); `dst` must be 64-byte aligned and
/// valid for a 64-byte write; `src` valid for a 64-byte read.
#[cfg(target_arch = "x86_64")]
pub unsafe fn movdir64b(dst: *mut u8, src: *const HwDesc) {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        std::arch::asm!(
            "movdir64b {dst}, [{src}]",
            dst = in(reg) dst,
            src = in(reg) src,
            options(nostack, preserves_flags)
        );
    }
}

/// Submits the 64 bytes at `src` to the shared-queue portal `dst` with `ENQCMD`; false when
/// the queue was full (the instruction sets ZF: retry).
///
/// # Safety
/// The CPU must have `ENQCMD` ([`cpu_has_enqcmd`]), the process a PASID (the kernel gives one
/// when it opens a shared queue); `dst` a mapped shared-queue portal, 64-byte aligned.
#[cfg(target_arch = "x86_64")]
unsafe fn enqcmd(dst: *mut u8, src: *const HwDesc) -> bool {
    let full: u8;
    // SAFETY: forwarded from this function's contract.
    unsafe {
        std::arch::asm!(
            "enqcmd {dst}, [{src}]",
            "setz {full}",
            dst = in(reg) dst,
            src = in(reg) src,
            full = out(reg_byte) full,
            options(nostack)
        );
    }
    full == 0
}

/// The instruction a [`MappedPortal`] submits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instr {
    /// `MOVDIR64B` (dedicated queues).
    Movdir64b,
    /// `ENQCMD` (shared queues).
    Enqcmd,
}

/// A work queue's portal page mapped into this process.
#[derive(Debug)]
pub struct MappedPortal {
    page: *mut u8,
    instr: Instr,
    _fd: OwnedFd,
}

// SAFETY: the portal page is device memory that any thread may write descriptors to; the
// mapping lives as long as the value.
unsafe impl Send for MappedPortal {}
// SAFETY: as above; submissions are single instructions, atomic at the device.
unsafe impl Sync for MappedPortal {}

const PORTAL_BYTES: usize = 4096;

impl MappedPortal {
    /// Maps the portal of the queue whose character device is `dev` and submits with `instr`;
    /// fails when the CPU lacks the instruction or the mapping fails.
    pub fn open(dev: &Path, instr: Instr) -> std::io::Result<MappedPortal> {
        let has = match instr {
            Instr::Movdir64b => cpu_has_movdir64b(),
            Instr::Enqcmd => cpu_has_enqcmd(),
        };
        if !has || !cfg!(target_arch = "x86_64") {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!("this CPU lacks {instr:?}"),
            ));
        }
        let fd: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dev)?
            .into();
        // SAFETY: a fresh shared mapping of the portal page of an open character device; the
        // kernel decides whether it may be mapped, and we check the result.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PORTAL_BYTES,
                libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(MappedPortal {
            page: page.cast(),
            instr,
            _fd: fd,
        })
    }
}

impl Drop for MappedPortal {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once.
        unsafe { libc::munmap(self.page.cast(), PORTAL_BYTES) };
    }
}

impl Portal for MappedPortal {
    unsafe fn submit(&self, desc: &HwDesc) -> Result<(), Refused> {
        // The descriptor's buffers and records must be visible to the device before it reads
        // the descriptor.
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        #[cfg(target_arch = "x86_64")]
        match self.instr {
            // SAFETY: `open` checked the instruction; the page is a mapped, aligned portal.
            Instr::Movdir64b => unsafe { movdir64b(self.page, desc) },
            Instr::Enqcmd => {
                // SAFETY: as above; opening the shared queue gave the process its PASID.
                if !unsafe { enqcmd(self.page, desc) } {
                    return Err(Refused::Full);
                }
            }
        }
        Ok(())
    }
}

/// Submission by `write(2)` on the queue's character device.
#[derive(Debug)]
pub struct WritePortal {
    fd: OwnedFd,
}

impl WritePortal {
    /// Opens the queue's character device `dev`.
    pub fn open(dev: &Path) -> std::io::Result<WritePortal> {
        let fd = std::fs::OpenOptions::new().write(true).open(dev)?.into();
        Ok(WritePortal { fd })
    }
}

impl Portal for WritePortal {
    unsafe fn submit(&self, desc: &HwDesc) -> Result<(), Refused> {
        let bytes = desc.as_bytes();
        // SAFETY: writes 64 bytes from a live descriptor to an open descriptor.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        if n == bytes.len() as isize {
            return Ok(());
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN | libc::EBUSY | libc::EINTR) => Err(Refused::Full),
            _ => Err(Refused::Failed),
        }
    }
}
