//! Slow-memory regions from C: a file (a DAX file on persistent memory, or any file) mapped
//! by the library, for durable copies into it with [`sy_copy`](crate::mover::sy_copy) and
//! [`SY_COPY_DURABLE`](crate::mover::SY_COPY_DURABLE): the copy returns when the bytes are
//! out of the CPU caches (on persistent memory: durable; on a file in the page cache, as
//! durable as the page cache is, which survives the process but not the machine).

use std::ffi::{c_char, c_void};

use switchyard_media::{MediaError, Persist, Region, MIN_REGION};

use crate::error::{guard, status, text, Failure};
use crate::handle::{handle, Shell};

/// A mapped region. Thread-safe; closed ([`sy_region_close`]) it stays a tombstone, as every
/// handle does, but its memory is unmapped: pointers into it must not be used after.
#[allow(non_camel_case_types)]
pub struct sy_region {
    open: Shell<Region>,
}

/// The failure of a region that would not map.
fn media_failure(e: MediaError) -> Failure {
    let errno = match &e {
        MediaError::NotFound { .. } => libc::ENOENT,
        MediaError::Busy { .. } => libc::EBUSY,
        MediaError::Exposed { .. } => libc::EACCES,
        MediaError::TooSmall { .. } => libc::EINVAL,
        _ => libc::EIO,
    };
    Failure::new(errno, e.to_string())
}

/// Maps the file at `path` as a region: with `create`, made (owner-only) or grown to `size`
/// bytes; without, as it is. The file is locked for this process as a store file is (another
/// owner: `-EBUSY`). 0 or a negative errno.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn sy_region_open(
    path: *const c_char,
    size: u64,
    create: i32,
    out: *mut *mut sy_region,
) -> i32 {
    status(|| {
        if out.is_null() {
            return Err(Failure::new(libc::EFAULT, "out is null"));
        }
        // SAFETY: the caller promises a NUL-terminated string.
        let path = unsafe { text(path, "path") }?;
        let persist = Persist::detect();
        let region = if create != 0 {
            Region::create(path, size, persist)
        } else {
            Region::open(path, MIN_REGION, persist)
        }
        .map_err(media_failure)?;
        let r = Box::new(sy_region {
            open: Shell::new(region),
        });
        // SAFETY: checked not null; the caller promises it is writable.
        unsafe { *out = Box::into_raw(r) };
        Ok(())
    })
}

/// The first byte of the region's mapping (valid until [`sy_region_close`]), or null for a
/// null or closed region.
///
/// # Safety
/// `r` is null or a region handle.
#[no_mangle]
pub unsafe extern "C" fn sy_region_base(r: *const sy_region) -> *mut c_void {
    // SAFETY: the caller's promise, forwarded.
    unsafe { handle(r, "region") }
        .and_then(|r| r.open.open("region").map(|g| g.as_mut_ptr().cast()))
        .unwrap_or(std::ptr::null_mut())
}

/// The region's length in bytes, or a negative errno (`-EBADF` once closed).
///
/// # Safety
/// `r` is null or a region handle.
#[no_mangle]
pub unsafe extern "C" fn sy_region_len(r: *const sy_region) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promise, forwarded.
            let len = unsafe { handle(r, "region") }?.open.open("region")?.len();
            Ok(len)
        },
        |n| n as i64,
    )
}

/// Unmaps the region and releases its file: 0, or `-EBADF` if closed already.
///
/// # Safety
/// `r` is null or a region handle; no copy into or out of it is in flight.
#[no_mangle]
pub unsafe extern "C" fn sy_region_close(r: *const sy_region) -> i32 {
    status(|| {
        // SAFETY: the caller's promise, forwarded.
        unsafe { handle(r, "region") }?
            .open
            .close("region")
            .map(drop)
    })
}

versioned!(
    sy_region_open,
    sy_region_base,
    sy_region_len,
    sy_region_close
);
