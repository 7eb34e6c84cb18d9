//! UCX failures, with the operation that failed.

use std::ffi::CStr;

use crate::sys;

/// A UCX operation that failed: which one, and UCX's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Error {
    /// What was being done ("connect", "get", …).
    pub op: &'static str,
    /// UCX's status code (negative).
    pub status: i8,
}

impl Error {
    pub(crate) fn new(op: &'static str, status: sys::ucs_status_t) -> Error {
        Error { op, status }
    }

    /// Whether the peer is gone or unreachable (its endpoint failed, was closed, or timed
    /// out): the operation cannot succeed on this endpoint again.
    pub fn is_peer_failure(&self) -> bool {
        let s = self.status as sys::ucs_status_t;
        s == sys::UCS_ERR_CONNECTION_RESET
            || s == sys::UCS_ERR_NOT_CONNECTED
            || s == sys::UCS_ERR_UNREACHABLE
            || s == sys::UCS_ERR_CANCELED
            || s == sys::UCS_ERR_TIMED_OUT
            || s == sys::UCS_ERR_ENDPOINT_TIMEOUT
            || (sys::UCS_ERR_LAST_ENDPOINT_FAILURE..=sys::UCS_ERR_FIRST_LINK_FAILURE).contains(&s)
    }

    /// The errno closest to the failure, for callers that speak errno.
    pub fn errno(&self) -> i32 {
        let s = self.status as sys::ucs_status_t;
        if s == sys::UCS_ERR_TIMED_OUT || s == sys::UCS_ERR_ENDPOINT_TIMEOUT {
            libc::ETIMEDOUT
        } else if s == sys::UCS_ERR_UNREACHABLE {
            libc::EHOSTUNREACH
        } else if s == sys::UCS_ERR_NO_MEMORY {
            libc::ENOMEM
        } else if self.is_peer_failure() {
            libc::ENOTCONN
        } else if s == sys::UCS_ERR_BUSY {
            libc::EADDRINUSE
        } else if s == sys::UCS_ERR_INVALID_PARAM {
            libc::EINVAL
        } else {
            libc::EIO
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // SAFETY: `ucs_status_string` returns a pointer to a static NUL-terminated string for
        // every status value.
        let text = unsafe { CStr::from_ptr(sys::ucs_status_string(self.status as _)) };
        write!(f, "UCX {}: {}", self.op, text.to_string_lossy())
    }
}

impl std::error::Error for Error {}

/// `Ok` for `UCS_OK`, else the failure of `op`.
pub(crate) fn check(op: &'static str, status: sys::ucs_status_t) -> Result<(), Error> {
    if status == sys::UCS_OK {
        Ok(())
    } else {
        Err(Error::new(op, status))
    }
}
