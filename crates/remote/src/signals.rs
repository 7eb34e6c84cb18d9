//! Threads the client starts inside someone else's program take none of its signals.
//!
//! A thread inherits its creator's signal mask. A program that waits for SIGTERM in a
//! signal thread of its own (MariaDB's server, for one) blocks it in every other thread; a
//! thread started inside the program by a library with the signal unblocked — UCX's event
//! thread, the client's I/O thread — is then where the kernel delivers it, and the program
//! never sees it. So the client starts its threads (and creates the UCX context and worker,
//! which start UCX's) under [`SignalsBlocked`].

/// Every signal blocked in the calling thread while this lives (the kernel keeps SIGKILL and
/// SIGSTOP deliverable); threads started meanwhile keep that mask for good. The caller's own
/// mask comes back when it is dropped.
pub(crate) struct SignalsBlocked {
    old: libc::sigset_t,
}

impl SignalsBlocked {
    /// Blocks every signal in the calling thread.
    pub(crate) fn new() -> SignalsBlocked {
        // SAFETY: sigset_t is a plain bit array; sigfillset initialises `all` in full.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above, `old` is written by pthread_sigmask before any read.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are to sigset_t values this frame owns; SIG_BLOCK with a
        // valid set cannot fail.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        }
        SignalsBlocked { old }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: `old` is the mask pthread_sigmask returned in `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}
