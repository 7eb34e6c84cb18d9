//! PMDK's libpmem as the peer baseline, loaded at run time.
//!
//! Loaded with `dlopen` after setting `PMEM_IS_PMEM_FORCE=1`, because libpmem reads its
//! environment in a library constructor: linking it at build time would run that before
//! `main`. `pmem_memcpy_persist` always takes the persistent-memory path (non-temporal stores
//! above `PMEM_MOVNT_THRESHOLD`, flush, drain). Without libpmem installed the PMDK column is
//! reported as unavailable, never faked.

use libloading::{Library, Symbol};

type MemcpyPersist =
    unsafe extern "C" fn(*mut libc::c_void, *const libc::c_void, usize) -> *mut libc::c_void;

/// A loaded libpmem.
pub struct Pmdk {
    _lib: Library,
    memcpy_persist: MemcpyPersist,
}

impl Pmdk {
    /// Loads libpmem.so.1, or explains why not.
    pub fn load() -> Result<Pmdk, String> {
        // SAFETY: set before any thread that could read the environment concurrently exists
        // (called at the start of the benchmark, before workers start).
        unsafe { std::env::set_var("PMEM_IS_PMEM_FORCE", "1") };
        // SAFETY: libpmem's constructor only reads the environment and CPUID.
        let lib = unsafe { Library::new("libpmem.so.1") }
            .map_err(|e| format!("libpmem.so.1 not loadable ({e}); install libpmem1"))?;
        // SAFETY: the symbol has this C signature in libpmem.h (PMDK 1.x).
        let f: Symbol<MemcpyPersist> =
            unsafe { lib.get(b"pmem_memcpy_persist\0") }.map_err(|e| e.to_string())?;
        let memcpy_persist = *f;
        Ok(Pmdk {
            _lib: lib,
            memcpy_persist,
        })
    }

    /// `pmem_memcpy_persist(dst, src, len)`.
    ///
    /// # Safety
    /// As `memcpy`: valid, non-overlapping ranges.
    pub unsafe fn memcpy_persist(&self, dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: forwarded from this function's contract.
        unsafe { (self.memcpy_persist)(dst.cast(), src.cast(), len) };
    }
}
