//! Errors across the boundary: negative errno values, a message per thread for the last
//! failure, and panics caught before they reach C.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use switchyard_store::Errno;

thread_local! {
    /// The message of this thread's last failure (NUL-terminated).
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// A failure: its errno and message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub errno: i32,
    pub message: String,
}

impl Failure {
    /// `errno` with `message`.
    pub fn new(errno: i32, message: impl Into<String>) -> Failure {
        Failure {
            errno,
            message: message.into(),
        }
    }
}

impl From<Errno> for Failure {
    fn from(e: Errno) -> Failure {
        Failure::new(e.0, std::io::Error::from_raw_os_error(e.0).to_string())
    }
}

/// Records `message` as this thread's last failure.
fn remember(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// Runs `f`, turning its failure into `-errno` (its message remembered) and a panic into
/// `-EIO`; `ok` converts success into the returned value.
pub(crate) fn guard<T>(f: impl FnOnce() -> Result<T, Failure>, ok: impl FnOnce(T) -> i64) -> i64 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => ok(v),
        Ok(Err(e)) => {
            remember(&e.message);
            -i64::from(e.errno.max(1))
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            remember(&format!("internal error (a bug in libswitchyard): {what}"));
            -i64::from(libc::EIO)
        }
    }
}

/// [`guard`] for calls that return 0 on success.
pub(crate) fn status(f: impl FnOnce() -> Result<(), Failure>) -> i32 {
    guard(f, |()| 0) as i32
}

/// A C string argument as UTF-8: `-EFAULT` for a null pointer, `-EINVAL` for bytes that are
/// not UTF-8.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that stays valid for `'a`.
pub(crate) unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::new(
            libc::EFAULT,
            format!("{what}: a null pointer"),
        ));
    }
    // SAFETY: not null; the caller promises a NUL-terminated string valid for 'a.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Failure::new(libc::EINVAL, format!("{what}: not UTF-8")))
}

/// The message of the calling thread's last failure in this library ("" if none): valid until
/// the thread's next call into the library.
#[no_mangle]
pub extern "C" fn sy_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// A message for the error `err` (negative or positive errno), valid until the calling
/// thread's next call into the library.
#[no_mangle]
pub extern "C" fn sy_strerror(err: i32) -> *const c_char {
    let e = err.checked_abs().unwrap_or(libc::EINVAL);
    remember(&std::io::Error::from_raw_os_error(e).to_string());
    sy_last_error()
}

versioned!(sy_last_error, sy_strerror,);
