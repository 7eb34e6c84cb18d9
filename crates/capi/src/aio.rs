//! Asynchronous store I/O from C: reads and writes start at submission
//! ([`sy_submit_pread`], [`sy_submit_pwrite`]) and their completions are reaped later from the
//! store's queue ([`sy_store_poll`], [`sy_store_wait`]), while the caller computes.
//!
//! On a store in this process a submitted write is orderless (EasyIO §4.2: its metadata
//! commits while the engine copies, and it is in the store and atomic when its completion is
//! reaped, durable as `sy_fsync` says: no asynchronous write is synced by itself, even of an
//! `O_SYNC` descriptor), and a read's engine copies run after it returns; the engine's worker wakes a
//! waiting reaper when a batch finishes. On a served store the calls run on the client's I/O
//! thread. Either way the caller's buffer is lent, not copied: it must stay valid and
//! untouched until the completion is reaped (or the store closed, which waits for them).

use std::ffi::c_void;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use switchyard_store::{Errno, Fd, IoBuf};

use crate::error::{guard, status, Failure};
use crate::handle::handle;
use crate::mover::{slots, sy_completion};
use crate::store::{sy_store, Backend};

/// A submitted request's future: its result, in bytes or a negative errno.
type Running = Pin<Box<dyn Future<Output = i64> + Send>>;

/// A submitted request, running or finished.
pub(crate) enum Request {
    Running(Running),
    Done(i64),
}

/// A caller's buffer, lent to a request until its completion is reaped.
#[derive(Default)]
pub(crate) struct Lent {
    ptr: usize,
    len: usize,
}

// SAFETY: the caller of sy_submit_* promises `len` bytes at `ptr` that stay valid, in place and
// untouched by anyone else until the completion is reaped or the store closed; the request
// owns the `Lent` that long (closing drops the requests first, and each waits for its copies).
unsafe impl IoBuf for Lent {
    fn as_ptr(&self) -> *const u8 {
        self.ptr as *const u8
    }
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr as *mut u8
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// A waker that unparks the thread waiting for completions.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls every queued request once with `waker`, moving up to `out.len()` finished ones into
/// `out`; returns how many.
fn reap(s: &sy_store, out: &mut [sy_completion], waker: &Waker) -> usize {
    let mut cx = Context::from_waker(waker);
    let mut q = s.queue.lock();
    let (mut n, mut i) = (0, 0);
    while i < q.len() && n < out.len() {
        let ready = match &mut q[i].0 {
            Request::Done(r) => Poll::Ready(*r),
            Request::Running(f) => f.as_mut().poll(&mut cx),
        };
        if let Poll::Ready(result) = ready {
            let (_, user_data) = q.swap_remove(i);
            out[n] = sy_completion { user_data, result };
            n += 1;
        } else {
            i += 1;
        }
    }
    n
}

/// Starts `request` on this thread (its first poll does the work the engine does not) and
/// queues it under `user_data`; a request finished at once is queued finished.
fn start(s: &sy_store, mut request: Running, user_data: u64) {
    let waker = Waker::noop();
    let r = match request.as_mut().poll(&mut Context::from_waker(waker)) {
        Poll::Ready(r) => Request::Done(r),
        Poll::Pending => Request::Running(request),
    };
    s.queue.lock().push((r, user_data));
}

/// Submits a read of up to `len` bytes at `off` of descriptor `fd` into `buf`; its
/// completion (bytes read, or a negative errno), with `user_data`, is reaped later. 0 or a
/// negative errno (the request was not submitted).
///
/// # Safety
/// `s` is a store handle or null; `buf` is writable for `len` bytes and stays valid and
/// untouched until the completion is reaped or the store closed.
#[no_mangle]
pub unsafe extern "C" fn sy_submit_pread(
    s: *const sy_store,
    fd: i32,
    buf: *mut c_void,
    len: usize,
    off: i64,
    user_data: u64,
) -> i32 {
    status(|| {
        // SAFETY: the caller's promise, forwarded.
        let store = unsafe { handle(s, "store") }?;
        let (fd, off, buf) = request_args(fd, buf.cast(), len, off)?;
        let open = store.files.open("store")?;
        let backend = lent(&open);
        let request: Running = match backend {
            Backend::Local(fs) => {
                let f = fs.pread_async(fd, buf, off);
                Box::pin(async move { result(f.await.0) })
            }
            Backend::Remote(c) => {
                let f = c.pread_async(fd, buf, off);
                Box::pin(async move { result(f.await.0) })
            }
        };
        start(store, request, user_data);
        Ok(())
    })
}

/// Submits a write of `len` bytes from `buf` at `off` of descriptor `fd` (orderless on a
/// store in this process); its completion (bytes written, or a negative errno), with
/// `user_data`, is reaped later, and the write is in the store and atomic by then (durable
/// as `sy_fsync` says). 0 or a negative errno (the request was not submitted).
///
/// # Safety
/// `s` is a store handle or null; `buf` is readable for `len` bytes and stays valid and
/// unchanged until the completion is reaped or the store closed.
#[no_mangle]
pub unsafe extern "C" fn sy_submit_pwrite(
    s: *const sy_store,
    fd: i32,
    buf: *const c_void,
    len: usize,
    off: i64,
    user_data: u64,
) -> i32 {
    status(|| {
        // SAFETY: the caller's promise, forwarded.
        let store = unsafe { handle(s, "store") }?;
        let (fd, off, buf) = request_args(fd, buf.cast_mut().cast(), len, off)?;
        let open = store.files.open("store")?;
        let backend = lent(&open);
        let request: Running = match backend {
            Backend::Local(fs) => {
                let f = fs.pwrite_async(fd, buf, off);
                Box::pin(async move { result(f.await.0.map(|_| len)) })
            }
            Backend::Remote(c) => {
                let f = c.pwrite_async(fd, buf, off);
                Box::pin(async move { result(f.await.0) })
            }
        };
        start(store, request, user_data);
        Ok(())
    })
}

/// The open store `b`, for a request to borrow beyond this call: queued requests are dropped,
/// each waiting for its copies, before the backend is ([`crate::store::sy_store_close`]
/// empties the queue before it drops the backend it took), and the caller queues its request
/// while it holds the store open, so no close comes between.
fn lent(b: &Backend) -> &'static Backend {
    // SAFETY: as above: the backend outlives every request that borrows it.
    unsafe { &*(b as *const Backend) }
}

/// A request's descriptor, offset and lent buffer, checked.
fn request_args(fd: i32, buf: *mut u8, len: usize, off: i64) -> Result<(Fd, u64, Lent), Failure> {
    let fd = u32::try_from(fd)
        .map(Fd)
        .map_err(|_| Failure::from(Errno::EBADF))?;
    let off = u64::try_from(off).map_err(|_| Failure::new(libc::EINVAL, "a negative offset"))?;
    if buf.is_null() && len > 0 {
        return Err(Failure::new(libc::EFAULT, "a null buffer"));
    }
    Ok((
        fd,
        off,
        Lent {
            ptr: buf as usize,
            len,
        },
    ))
}

/// A call's result as a completion's: bytes, or a negative errno.
fn result(r: Result<usize, Errno>) -> i64 {
    r.map_or_else(|e| -i64::from(e.0), |n| n as i64)
}

/// Reaps finished requests of `s`, up to `max`, into `out` without waiting: how many, or a
/// negative errno.
///
/// # Safety
/// `s` is a store handle or null; `out` is writable for `max` completions (or null with 0).
#[no_mangle]
pub unsafe extern "C" fn sy_store_poll(
    s: *const sy_store,
    out: *mut sy_completion,
    max: usize,
) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promise, forwarded.
            let s = unsafe { handle(s, "store") }?;
            // SAFETY: the caller's promise, forwarded.
            Ok(reap(s, unsafe { slots(out, max) }?, Waker::noop()))
        },
        |n| n as i64,
    )
}

/// Reaps finished requests of `s` into `out` (up to `max`), waiting until at least `min` have
/// been reaped or none is left queued: how many, or a negative errno (`-EINVAL` if
/// `min > max`).
///
/// # Safety
/// As [`sy_store_poll`].
#[no_mangle]
pub unsafe extern "C" fn sy_store_wait(
    s: *const sy_store,
    out: *mut sy_completion,
    max: usize,
    min: usize,
) -> i64 {
    guard(
        || {
            if min > max {
                return Err(Failure::new(libc::EINVAL, "sy_store_wait: min > max"));
            }
            // SAFETY: the caller's promise, forwarded.
            let s = unsafe { handle(s, "store") }?;
            // SAFETY: the caller's promise, forwarded.
            let out = unsafe { slots(out, max) }?;
            let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
            let mut n = 0;
            loop {
                n += reap(s, &mut out[n..], &waker);
                if n >= min || s.queue.lock().is_empty() {
                    return Ok(n);
                }
                // Woken by the engine's worker (or the client's I/O thread) when a request
                // finishes; the timeout covers a wake-up that went to another reaper.
                std::thread::park_timeout(Duration::from_millis(1));
            }
        },
        |n| n as i64,
    )
}

/// Requests submitted to `s` and not yet reaped.
///
/// # Safety
/// `s` is a store handle or null.
#[no_mangle]
pub unsafe extern "C" fn sy_store_pending(s: *const sy_store) -> i64 {
    guard(
        || {
            // SAFETY: the caller's promise, forwarded.
            let s = unsafe { handle(s, "store") }?;
            let n = s.queue.lock().len();
            Ok(n)
        },
        |n| n as i64,
    )
}

versioned!(
    sy_submit_pread,
    sy_submit_pwrite,
    sy_store_poll,
    sy_store_wait,
    sy_store_pending,
);
