//! A served open's file offset, which the processes that share the open share, as they
//! share a kernel open file description's.
//!
//! An open's offset starts in the process's own memory. When a process forks or hands the
//! open to a program it `exec`s, the offset moves into a page of a `memfd`, mapped shared, and
//! the open's reserved descriptor numbers become `O_PATH` descriptors of that memfd (in place
//! of `/dev/null`): `fork` keeps the mapping in both processes, and a program `exec`'d with
//! the numbers reopens the memfd through one of them (`/proc/self/fd`) and maps the page
//! again. The numbers themselves carry the page, so a child that closes every other
//! descriptor before `exec` (Python's `subprocess` does) still hands it on. So
//! `{ echo a; ls; echo b; } > /sy/out` in a shell writes `a`, the listing and `b` one after
//! another, as on any file system. Within a process a lock orders the calls (as the kernel's
//! `f_pos` lock does); across processes a write reserves its range with one atomic add, so
//! writers at once never overlap.

use std::sync::atomic::{AtomicU64, Ordering};

use libc::c_int;
use parking_lot::{Mutex, MutexGuard};

use crate::real;

/// Bytes of the shared page (one offset in it).
const PAGE: usize = 4096;

/// An offset.
pub struct Offset(Mutex<Place>);

/// Where the offset lives.
struct Place {
    private: u64,
    shared: Option<Shared>,
}

/// A shared page holding the offset.
struct Shared {
    at: *mut AtomicU64,
}

// SAFETY: the page is mapped for the life of `Shared` and only reached through atomics.
unsafe impl Send for Shared {}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: unmapping the page this value mapped.
        unsafe { libc::munmap(self.at.cast(), PAGE) };
    }
}

impl Shared {
    fn cell(&self) -> &AtomicU64 {
        // SAFETY: `at` points into the mapped page for as long as `self` lives.
        unsafe { &*self.at }
    }

    /// Maps the page of `fd` (a memfd of this library's, open for reading and writing).
    fn map(fd: c_int) -> Option<Shared> {
        // SAFETY: a shared mapping of a descriptor, at an address the kernel picks.
        let p = unsafe {
            real::mmap64()(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        (p != libc::MAP_FAILED).then(|| Shared { at: p.cast() })
    }
}

/// The name of the memfds that hold offsets (as `/proc/self/fd` shows it).
const NAME: &std::ffi::CStr = c"switchyard-offset";

impl Offset {
    /// An offset of this process alone.
    pub fn new(at: u64) -> Offset {
        Offset(Mutex::new(Place {
            private: at,
            shared: None,
        }))
    }

    /// The offset kept in the page whose memfd the reserved number `fd` names (handed over
    /// across `exec`); `None` if `fd` is not such a number.
    pub fn adopt(fd: c_int) -> Option<Offset> {
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
        let expect = format!("/memfd:{}", NAME.to_str().expect("ASCII"));
        if !link.to_string_lossy().starts_with(&expect) {
            return None;
        }
        let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
        // SAFETY: reopening the file an O_PATH descriptor names, through procfs, to map it.
        let rw = unsafe {
            real::open()(
                path.as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC,
                0 as libc::c_uint,
            )
        };
        if rw < 0 {
            return None;
        }
        let shared = Shared::map(rw);
        // SAFETY: the descriptor just opened; the mapping keeps the file.
        unsafe { real::close()(rw) };
        Some(Offset(Mutex::new(Place {
            private: 0,
            shared: Some(shared?),
        })))
    }

    /// The offset, held (other threads of this process wait).
    pub fn lock(&self) -> Held<'_> {
        Held(self.0.lock())
    }

    /// Moves the offset into a shared page if it is not there yet. Returns an `O_PATH`
    /// descriptor of the page's memfd for the caller to reserve the open's numbers with (and
    /// close), or `None` if the offset was shared already or no page could be made (it then
    /// stays this process's).
    pub fn share(&self) -> Option<c_int> {
        let mut p = self.0.lock();
        if p.shared.is_some() {
            return None;
        }
        // SAFETY: a NUL-terminated name and plain flags; then sizing the new memfd.
        let fd = unsafe {
            let fd = libc::memfd_create(NAME.as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return None;
            }
            if real::ftruncate64()(fd, PAGE as i64) != 0 {
                real::close()(fd);
                return None;
            }
            fd
        };
        let shared = Shared::map(fd);
        let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
        // SAFETY: an O_PATH descriptor of the memfd through procfs, then closing the memfd
        // (the mapping and that descriptor keep the file).
        let o_path = unsafe {
            let o = real::open()(
                path.as_ptr(),
                libc::O_PATH | libc::O_CLOEXEC,
                0 as libc::c_uint,
            );
            real::close()(fd);
            o
        };
        let (Some(s), true) = (shared, o_path >= 0) else {
            if o_path >= 0 {
                // SAFETY: the descriptor just opened.
                unsafe { real::close()(o_path) };
            }
            return None;
        };
        s.cell().store(p.private, Ordering::Release);
        p.shared = Some(s);
        Some(o_path)
    }
}

/// The offset, held by this thread.
pub struct Held<'a>(MutexGuard<'a, Place>);

impl Held<'_> {
    /// Where it is.
    pub fn get(&self) -> u64 {
        match &self.0.shared {
            Some(s) => s.cell().load(Ordering::Acquire),
            None => self.0.private,
        }
    }

    /// Moves it to `at`.
    pub fn set(&mut self, at: u64) {
        match &self.0.shared {
            Some(s) => s.cell().store(at, Ordering::Release),
            None => self.0.private = at,
        }
    }

    /// Reserves `len` bytes from where it is (moving it past them): their first byte.
    pub fn reserve(&mut self, len: u64) -> u64 {
        match &self.0.shared {
            Some(s) => s.cell().fetch_add(len, Ordering::AcqRel),
            None => {
                let at = self.0.private;
                self.0.private += len;
                at
            }
        }
    }

    /// A reservation ending at `reserved` used only up to `used`: the offset goes back to
    /// `used` unless another process moved it meanwhile.
    pub fn settle(&mut self, reserved: u64, used: u64) {
        if reserved == used {
            return;
        }
        match &self.0.shared {
            Some(s) => {
                let _ =
                    s.cell()
                        .compare_exchange(reserved, used, Ordering::AcqRel, Ordering::Acquire);
            }
            None => self.0.private = used,
        }
    }
}
