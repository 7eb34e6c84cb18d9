//! The client's asynchronous calls: `read`, `pread`, `write` and `pwrite` as futures, with
//! the synchronous calls' semantics and errors (a write that completed is durable and atomic
//! on the server).
//!
//! A call is handed to the client's I/O thread (started by the first one), which runs it on
//! the client's connection while the caller goes on computing; the future is woken when the
//! call is done. Buffers are owned (`IoBuf`: a `Vec<u8>`, or memory lent by a caller) and
//! handed back with the result, as the local `Fs`'s asynchronous calls do. Calls on one
//! client run one at a time, in the order they were made, interleaved with the synchronous
//! calls; for more at once, open more clients.

use std::future::Future;
use std::pin::Pin;
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;

use switchyard_store::{Errno, Fd, IoBuf};

use super::{Client, Inner};

/// A call waiting for the I/O thread.
type Job = Box<dyn FnOnce(&mut Inner) + Send>;

/// The thread that runs a client's asynchronous calls.
pub(super) struct IoThread {
    jobs: mpsc::Sender<Job>,
    thread: JoinHandle<()>,
}

/// Where a call's result waits for its future.
struct Slot<T> {
    result: Option<T>,
    waker: Option<Waker>,
}

/// An asynchronous call of a [`Client`]; its output is the call's result and its buffer.
pub struct Pending<T> {
    slot: Arc<Mutex<Slot<T>>>,
}

impl<T> Future for Pending<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        match s.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Client {
    /// Runs `call` on the I/O thread; the future resolves to its result.
    fn submit<T: Send + 'static>(
        &self,
        call: impl FnOnce(&mut Inner) -> T + Send + 'static,
    ) -> Pending<T> {
        let slot = Arc::new(Mutex::new(Slot {
            result: None,
            waker: None,
        }));
        let done = slot.clone();
        let job: Job = Box::new(move |inner| {
            let r = call(inner);
            let mut s = done.lock().unwrap_or_else(|e| e.into_inner());
            s.result = Some(r);
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        });
        let mut io = self.io.lock().unwrap_or_else(|e| e.into_inner());
        let io = io.get_or_insert_with(|| {
            let (jobs, rx) = mpsc::channel::<Job>();
            let inner = self.inner.clone();
            // Inside a program, the I/O thread takes none of its signals.
            let _signals = crate::signals::SignalsBlocked::new();
            let thread = std::thread::Builder::new()
                .name("switchyard-client-io".into())
                .spawn(move || {
                    for job in rx {
                        let mut g = inner.lock().unwrap_or_else(|e| e.into_inner());
                        job(&mut g);
                    }
                })
                .expect("spawning the client's I/O thread");
            IoThread { jobs, thread }
        });
        io.jobs
            .send(job)
            .expect("the I/O thread lives as long as its client");
        Pending { slot }
    }

    /// Reads into `buf` at the descriptor's offset, which it advances.
    pub fn read_async<B: IoBuf + Send + 'static>(
        &self,
        fd: Fd,
        mut buf: B,
    ) -> Pending<(Result<usize, Errno>, B)> {
        self.submit(move |i| (i.read_fd(fd, buf.as_mut_slice(), None), buf))
    }

    /// Reads into `buf` at `off`.
    pub fn pread_async<B: IoBuf + Send + 'static>(
        &self,
        fd: Fd,
        mut buf: B,
        off: u64,
    ) -> Pending<(Result<usize, Errno>, B)> {
        self.submit(move |i| (i.read_fd(fd, buf.as_mut_slice(), Some(off)), buf))
    }

    /// Writes `data` at the descriptor's offset (the end, for an append descriptor), which
    /// it advances.
    pub fn write_async<B: IoBuf + Send + 'static>(
        &self,
        fd: Fd,
        data: B,
    ) -> Pending<(Result<usize, Errno>, B)> {
        self.submit(move |i| (i.write_fd(fd, data.as_slice(), None), data))
    }

    /// Writes `data` at `off`.
    pub fn pwrite_async<B: IoBuf + Send + 'static>(
        &self,
        fd: Fd,
        data: B,
        off: u64,
    ) -> Pending<(Result<usize, Errno>, B)> {
        self.submit(move |i| (i.write_fd(fd, data.as_slice(), Some(off)), data))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // Calls already made finish first; then the thread ends with its queue.
        let io = self.io.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(IoThread { jobs, thread }) = io {
            drop(jobs);
            let _ = thread.join();
        }
    }
}
