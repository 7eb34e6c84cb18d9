//! Handles as C holds them: a pointer to a shell the library never frees. Closing takes the
//! contents away after the calls in progress on them, so a later call fails with `-EBADF`
//! instead of touching freed memory; the shell's few bytes stay allocated.

use parking_lot::{MappedRwLockReadGuard, RwLock, RwLockReadGuard};

use crate::error::Failure;

/// What a handle points to: its contents while open, nothing once closed.
pub(crate) struct Shell<T>(RwLock<Option<T>>);

impl<T> Shell<T> {
    /// An open handle's shell around `contents`.
    pub fn new(contents: T) -> Shell<T> {
        Shell(RwLock::new(Some(contents)))
    }

    /// The contents, kept open for the guard's life (a close waits for it): `-EBADF` once
    /// closed. `what` names the handle in the message.
    pub fn open(&self, what: &str) -> Result<MappedRwLockReadGuard<'_, T>, Failure> {
        RwLockReadGuard::try_map(self.0.read(), Option::as_ref)
            .map_err(|_| Failure::new(libc::EBADF, format!("a closed {what}")))
    }

    /// Takes the contents away once no call holds them: `-EBADF` if closed already.
    pub fn close(&self, what: &str) -> Result<T, Failure> {
        let contents = self.0.write().take();
        contents.ok_or_else(|| Failure::new(libc::EBADF, format!("the {what} was closed already")))
    }
}

/// The handle behind `p`: `-EFAULT` for null. `what` names it in the message.
///
/// # Safety
/// `p` is null or a handle this library gave out (never freed).
pub(crate) unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller promises null or a handle, which is never freed.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::new(libc::EFAULT, format!("a null {what}")))
}
