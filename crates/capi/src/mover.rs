//! The mover from C: synchronous copies ([`sy_copy`]), asynchronous ones reaped from the
//! mover's completion queue ([`sy_copy_submit`], [`sy_mover_poll`], [`sy_mover_wait`]), and
//! the counters ([`sy_mover_counter`], [`sy_mover_stats_json`]).

use std::ffi::{c_char, c_void};
use std::sync::Mutex;

use parking_lot::MappedRwLockReadGuard;
use switchyard_mover::{qos, Detached, Direction, Hints, Mover};

use crate::error::{guard, status, text, Failure};
use crate::handle::{handle, Shell};

/// The copy reads slow memory into DRAM (default: DRAM into slow memory).
pub const SY_COPY_FROM_SLOW: u32 = 1;
/// The copy is DRAM to DRAM.
pub const SY_COPY_DRAM: u32 = 2;
/// The destination is durable when the copy completes (slow memory that is persistent).
pub const SY_COPY_DURABLE: u32 = 4;
/// Latency matters more than CPU cost: never wait behind queued engine work.
pub const SY_COPY_LATENCY: u32 = 8;

/// A finished asynchronous request.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct sy_completion {
    /// What the caller gave at submission.
    pub user_data: u64,
    /// Bytes moved, or a negative errno.
    pub result: i64,
}

/// A mover: its engine, its decisions and its completion queue. Thread-safe. Closed
/// ([`sy_mover_close`]), it stays a tombstone of a few bytes, so a late call fails with
/// `-EBADF` instead of touching freed memory.
#[allow(non_camel_case_types)]
pub struct sy_mover {
    open: Shell<Open>,
}

/// An open mover.
struct Open {
    mover: Mover,
    /// Submitted copies not yet reaped: the copy (none for 0 bytes), its user data, its
    /// length.
    pending: Mutex<Vec<(Option<Detached>, u64, usize)>>,
}

/// The hints of `flags`, or `-EINVAL` for bits this library does not know.
fn hints(flags: u32) -> Result<Hints, Failure> {
    let known = SY_COPY_FROM_SLOW | SY_COPY_DRAM | SY_COPY_DURABLE | SY_COPY_LATENCY;
    if flags & !known != 0 || flags & (SY_COPY_FROM_SLOW | SY_COPY_DRAM) == 3 {
        return Err(Failure::new(
            libc::EINVAL,
            format!("copy flags {flags:#x}: unknown bits, or two directions"),
        ));
    }
    Ok(Hints {
        direction: if flags & SY_COPY_FROM_SLOW != 0 {
            Direction::FromSlow
        } else if flags & SY_COPY_DRAM != 0 {
            Direction::Dram
        } else {
            Direction::ToSlow
        },
        durable: flags & SY_COPY_DURABLE != 0,
        latency_critical: flags & SY_COPY_LATENCY != 0,
        ..Hints::default()
    })
}

/// A copy's hints and buffers, its arguments checked.
fn copy_args(
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
    flags: u32,
) -> Result<(Hints, *mut u8, *const u8), Failure> {
    let h = hints(flags)?;
    let (dst, src) = (dst.cast::<u8>(), src.cast::<u8>());
    check_copy(dst, src, len)?;
    Ok((h, dst, src))
}

/// Checks a copy's arguments: pointers not null where `len > 0`, ranges that do not overlap
/// or wrap.
fn check_copy(dst: *mut u8, src: *const u8, len: usize) -> Result<(), Failure> {
    if len == 0 {
        return Ok(());
    }
    if dst.is_null() || src.is_null() {
        return Err(Failure::new(libc::EFAULT, "copy: a null buffer"));
    }
    let (d, s) = (dst as usize, src as usize);
    if d.checked_add(len).is_none() || s.checked_add(len).is_none() {
        return Err(Failure::new(
            libc::EINVAL,
            "copy: a range past the address space",
        ));
    }
    if d < s + len && s < d + len {
        return Err(Failure::new(
            libc::EINVAL,
            "copy: the buffers overlap (use memmove)",
        ));
    }
    Ok(())
}

/// The open mover behind `m` (held open for the guard's life): `-EFAULT` for null, `-EBADF`
/// once closed.
///
/// # Safety
/// `m` is null or a handle from [`sy_mover_new`].
unsafe fn mover<'a>(m: *const sy_mover) -> Result<MappedRwLockReadGuard<'a, Open>, Failure> {
    // SAFETY: forwarded from this function's contract.
    unsafe { handle(m, "mover") }?.open.open("mover")
}

/// Starts a mover with the configuration file at `config_path` (TOML, as `switchyard config`
/// prints it), or the defaults where it is null (with `./switchyard.profile.toml` applied if
/// it exists, as the commands do). Stores the mover in `*out`; 0 or a negative errno.
///
/// # Safety
/// `config_path` is null or a NUL-terminated string; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sy_mover_new(config_path: *const c_char, out: *mut *mut sy_mover) -> i32 {
    status(|| {
        if out.is_null() {
            return Err(Failure::new(libc::EFAULT, "sy_mover_new: out is null"));
        }
        let path = if config_path.is_null() {
            None
        } else {
            // SAFETY: not null; the caller promises a NUL-terminated string.
            Some(std::path::PathBuf::from(unsafe {
                text(config_path, "config_path")
            }?))
        };
        let config = switchyard_config::Config::load_with_profile(path.as_deref(), None, false)
            .map_err(|e| Failure::new(libc::EINVAL, e.to_string()))?;
        let mover =
            Mover::start(&config.mover).map_err(|e| Failure::new(libc::EINVAL, e.to_string()))?;
        let m = Box::new(sy_mover {
            open: Shell::new(Open {
                mover,
                pending: Mutex::new(Vec::new()),
            }),
        });
        // SAFETY: checked not null; the caller promises it is writable.
        unsafe { *out = Box::into_raw(m) };
        Ok(())
    })
}

/// Closes a mover: waits for the calls in progress on it and for its copies still in flight
/// (reaped or not), then stops its engine. Later calls on the handle fail with `-EBADF`.
/// 0, or `-EBADF` if it was closed already (`-EFAULT` for null).
///
/// # Safety
/// `m` is null or a handle from [`sy_mover_new`].
#[no_mangle]
pub unsafe extern "C" fn sy_mover_close(m: *const sy_mover) -> i32 {
    status(|| {
        // SAFETY: the caller's promise, forwarded.
        unsafe { handle(m, "mover") }?.open.close("mover").map(drop)
    })
}

/// Copies `len` bytes from `src` to `dst` (not overlapping) and returns when it is complete
/// (and durable, with [`SY_COPY_DURABLE`]): 0 or a negative errno.
///
/// # Safety
/// `m` is a live mover or null; `src` is readable and `dst` writable for `len` bytes, and no
/// one else writes `dst` until this returns.
#[no_mangle]
pub unsafe extern "C" fn sy_copy(
    m: *const sy_mover,
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
    flags: u32,
) -> i32 {
    status(|| {
        // SAFETY: the caller promises a live mover or null.
        let m = unsafe { mover(m) }?;
        let (h, dst, src) = copy_args(dst, src, len, flags)?;
        if len > 0 {
            // SAFETY: checked: not null, no overlap; the caller promises the buffers.
            unsafe { m.mover.copy_raw(dst, src, len, h) };
        }
        Ok(())
    })
}

/// Fills `len` bytes at `dst` with `byte` (`memset`), the mover choosing the path as for a
/// copy into `dst` (large fills go to the engine, or split between it and the calling
/// thread), and returns when every byte is written (and durable, with [`SY_COPY_DURABLE`]):
/// 0 or a negative errno. `flags` name the destination's side as for [`sy_copy`].
///
/// # Safety
/// `m` is a live mover or null; `dst` is writable for `len` bytes, and no one else accesses
/// it until this returns.
#[no_mangle]
pub unsafe extern "C" fn sy_fill(
    m: *const sy_mover,
    dst: *mut c_void,
    byte: u8,
    len: usize,
    flags: u32,
) -> i32 {
    status(|| {
        // SAFETY: the caller promises a live mover or null.
        let m = unsafe { mover(m) }?;
        let h = hints(flags)?;
        let dst = dst.cast::<u8>();
        if len > 0 && dst.is_null() {
            return Err(Failure::new(libc::EFAULT, "fill: a null buffer"));
        }
        if (dst as usize).checked_add(len).is_none() {
            return Err(Failure::new(
                libc::EINVAL,
                "fill: a range past the address space",
            ));
        }
        if len > 0 {
            // SAFETY: checked not null; the caller promises the buffer.
            unsafe { m.mover.fill_raw(dst, byte, len, h) };
        }
        Ok(())
    })
}

/// Compares `len` bytes at `a` and `b` (`memcmp`'s question, answered with where), the mover
/// choosing the path as for a copy from `a` into `b`: 0 when they are equal, 1 when they
/// differ (with the offset of the first differing byte in `*offset`, if `offset` is not
/// null), or a negative errno. The ranges may overlap.
///
/// # Safety
/// `m` is a live mover or null; `a` and `b` are readable for `len` bytes and no one writes
/// them until this returns; `offset` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn sy_compare(
    m: *const sy_mover,
    a: *const c_void,
    b: *const c_void,
    len: usize,
    flags: u32,
    offset: *mut usize,
) -> i32 {
    guard(
        || {
            // SAFETY: the caller promises a live mover or null.
            let m = unsafe { mover(m) }?;
            let h = hints(flags)?;
            let (a, b) = (a.cast::<u8>(), b.cast::<u8>());
            if len == 0 {
                return Ok(None);
            }
            if a.is_null() || b.is_null() {
                return Err(Failure::new(libc::EFAULT, "compare: a null buffer"));
            }
            if (a as usize).checked_add(len).is_none() || (b as usize).checked_add(len).is_none() {
                return Err(Failure::new(
                    libc::EINVAL,
                    "compare: a range past the address space",
                ));
            }
            // SAFETY: checked not null; the caller promises both ranges.
            Ok(unsafe { m.mover.compare_raw(a, b, len, h) })
        },
        |first| match first {
            None => 0,
            Some(i) => {
                if !offset.is_null() {
                    // SAFETY: the caller promises `offset` is writable when not null.
                    unsafe { *offset = i };
                }
                1
            }
        },
    ) as i32
}

/// Starts copying `len` bytes from `src` to `dst` and returns at once (0 or a negative
/// errno); the copy's completion, with `user_data`, is reaped by [`sy_mover_poll`] or
/// [`sy_mover_wait`]. The caller computes meanwhile; the buffers belong to the copy until
/// its completion is reaped.
///
/// # Safety
/// As [`sy_copy`], and the buffers stay valid and untouched until the completion is reaped
/// or the mover freed.
#[no_mangle]
pub unsafe extern "C" fn sy_copy_submit(
    m: *const sy_mover,
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
    flags: u32,
    user_data: u64,
) -> i32 {
    status(|| {
        // SAFETY: the caller promises a live mover or null.
        let m = unsafe { mover(m) }?;
        let (h, dst, src) = copy_args(dst, src, len, flags)?;
        let d = if len == 0 {
            None
        } else {
            // SAFETY: checked; the caller promises the buffers until the completion is reaped.
            Some(unsafe { m.mover.submit(dst, src, len, h) }.detach())
        };
        let mut p = m.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.push((d, user_data, len));
        Ok(())
    })
}

/// Moves up to `max` finished copies from the pending list into `out` (in any order), polling
/// each once; returns how many.
fn reap(m: &Open, out: &mut [sy_completion]) -> usize {
    let mut p = m.pending.lock().unwrap_or_else(|e| e.into_inner());
    let mut n = 0;
    let mut i = 0;
    while i < p.len() && n < out.len() {
        let done = (p[i].0.as_mut()).is_none_or(|d| m.mover.poll_detached(d).is_some());
        if done {
            let (_, user_data, len) = p.swap_remove(i);
            out[n] = sy_completion {
                user_data,
                result: len as i64,
            };
            n += 1;
        } else {
            i += 1;
        }
    }
    n
}

/// The completion slots of a poll or wait: `-EFAULT` for null with `max > 0`.
///
/// # Safety
/// `out` is null with `max` 0, or writable for `max` completions.
pub(crate) unsafe fn slots<'a>(
    out: *mut sy_completion,
    max: usize,
) -> Result<&'a mut [sy_completion], Failure> {
    if max == 0 {
        return Ok(&mut []);
    }
    if out.is_null() {
        return Err(Failure::new(libc::EFAULT, "completions: a null array"));
    }
    // SAFETY: not null; the caller promises `max` writable completions.
    Ok(unsafe { std::slice::from_raw_parts_mut(out, max) })
}

/// Reaps the finished copies, up to `max`, into `out` without waiting: how many, or a
/// negative errno.
///
/// # Safety
/// `m` is a live mover or null; `out` is writable for `max` completions (or null with 0).
#[no_mangle]
pub unsafe extern "C" fn sy_mover_poll(
    m: *const sy_mover,
    out: *mut sy_completion,
    max: usize,
) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promises, forwarded.
            let (m, out) = unsafe { (mover(m)?, slots(out, max)?) };
            Ok(reap(&m, out))
        },
        |n| n as i64,
    )
}

/// Reaps finished copies into `out` (up to `max`), waiting until at least `min` have been
/// reaped or none is left pending: how many, or a negative errno (`-EINVAL` if `min > max`).
///
/// # Safety
/// As [`sy_mover_poll`].
#[no_mangle]
pub unsafe extern "C" fn sy_mover_wait(
    m: *const sy_mover,
    out: *mut sy_completion,
    max: usize,
    min: usize,
) -> i64 {
    guard(
        || {
            if min > max {
                return Err(Failure::new(libc::EINVAL, "sy_mover_wait: min > max"));
            }
            // SAFETY: the caller's promises, forwarded.
            let (m, out) = unsafe { (mover(m)?, slots(out, max)?) };
            let mut n = reap(&m, out);
            while n < min {
                let next = {
                    let mut p = m.pending.lock().unwrap_or_else(|e| e.into_inner());
                    if p.is_empty() {
                        break;
                    }
                    p.remove(0)
                };
                let (d, user_data, len) = next;
                if let Some(mut d) = d {
                    m.mover.wait_detached(&mut d);
                }
                out[n] = sy_completion {
                    user_data,
                    result: len as i64,
                };
                n += 1;
                n += reap(&m, &mut out[n..]);
            }
            Ok(n)
        },
        |n| n as i64,
    )
}

/// Copies submitted and not yet reaped.
///
/// # Safety
/// `m` is a live mover or null.
#[no_mangle]
pub unsafe extern "C" fn sy_mover_pending(m: *const sy_mover) -> i64 {
    guard(
        || {
            // SAFETY: the caller promises a live mover or null.
            let m = unsafe { mover(m) }?;
            let n = m.pending.lock().unwrap_or_else(|e| e.into_inner()).len();
            Ok(n)
        },
        |n| n as i64,
    )
}

/// Stores the counter `name` (as `switchyard stat` names it, e.g. `engine_bytes`) in `*out`:
/// 0, or `-ENOENT` for a name the mover does not count.
///
/// # Safety
/// `m` is a live mover or null; `name` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn sy_mover_counter(
    m: *const sy_mover,
    name: *const c_char,
    out: *mut u64,
) -> i32 {
    status(|| {
        // SAFETY: the caller's promises, forwarded.
        let (m, name) = unsafe { (mover(m)?, text(name, "counter name")?) };
        if out.is_null() {
            return Err(Failure::new(libc::EFAULT, "sy_mover_counter: out is null"));
        }
        let stats = m.mover.stats();
        let v = (stats.rows().into_iter())
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .ok_or_else(|| Failure::new(libc::ENOENT, format!("no counter {name:?}")))?;
        // SAFETY: checked not null; the caller promises it is writable.
        unsafe { *out = v };
        Ok(())
    })
}

/// Writes every counter, and each tenant's, as JSON into `buf` (NUL-terminated, cut to
/// `len`) and returns the length the whole text needs without the NUL, as `snprintf` does; or
/// a negative errno.
///
/// # Safety
/// `m` is a live mover or null; `buf` is writable for `len` bytes (or null with 0).
#[no_mangle]
pub unsafe extern "C" fn sy_mover_stats_json(
    m: *const sy_mover,
    buf: *mut c_char,
    len: usize,
) -> i64 {
    guard(
        || {
            // SAFETY: the caller promises a live mover or null.
            let m = unsafe { mover(m) }?;
            let counters: serde_json::Map<String, serde_json::Value> = (m.mover.stats().rows())
                .into_iter()
                .map(|(n, v)| (n.to_string(), v.into()))
                .collect();
            let v = serde_json::json!({ "counters": counters, "tenants": m.mover.tenants() });
            let text = v.to_string();
            if len > 0 {
                if buf.is_null() {
                    return Err(Failure::new(libc::EFAULT, "sy_mover_stats_json: null buf"));
                }
                let n = text.len().min(len - 1);
                // SAFETY: `buf` is writable for `len` > n bytes (the caller's promise).
                unsafe {
                    std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast(), n);
                    *buf.add(n) = 0;
                }
            }
            Ok(text.len())
        },
        |n| n as i64,
    )
}

/// Makes the calling thread's copies (and store calls) carry `tenant` where nothing names
/// one (1-based into `qos.tenants` of the configuration; 0: none); returns the tenant it
/// carried before.
#[no_mangle]
pub extern "C" fn sy_thread_tenant(tenant: u16) -> u16 {
    qos::set_current(tenant)
}

versioned!(
    sy_mover_new,
    sy_mover_close,
    sy_copy,
    sy_fill,
    sy_compare,
    sy_copy_submit,
    sy_mover_poll,
    sy_mover_wait,
    sy_mover_pending,
    sy_mover_counter,
    sy_mover_stats_json,
    sy_thread_tenant,
);
