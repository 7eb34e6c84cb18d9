//! Unique names: `mkstemp`, `mkostemp`, `mkstemps`, `mkostemps` (and their `64` forms) and
//! `mkdtemp`. glibc's own create their file through its internal `open`, which this library
//! cannot see, so on a template under the prefix the name is made here.

use std::sync::atomic::{AtomicU64, Ordering};

use libc::{c_char, c_int};
use switchyard_store::{Errno, Files};

use super::open_store;
use crate::route::{self, Route};
use crate::{conn, real, serve, set_errno};

/// Names tried before giving up (`EEXIST`), as glibc.
const TRIES: u32 = 62 * 62 * 62;

/// Letters of a unique name.
const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

static STATE: AtomicU64 = AtomicU64::new(0);

/// The next 64 random-looking bits (xorshift, seeded from the clock and the process).
fn next() -> u64 {
    let mut x = STATE.load(Ordering::Relaxed);
    if x == 0 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        x = t ^ (u64::from(std::process::id()) << 32) | 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    STATE.store(x, Ordering::Relaxed);
    x
}

/// What to make under a unique name.
#[derive(Clone, Copy)]
enum Make {
    /// A file, opened with these extra flags.
    File(c_int),
    /// A directory.
    Dir,
}

/// Fills the six `X`s before `suffix` bytes of `template` with fresh letters and makes the
/// name in the store, until one is new. Returns the descriptor (0 for a directory).
///
/// # Safety
/// `template` is a writable C string.
unsafe fn make(
    template: *mut c_char,
    store: String,
    suffix: usize,
    what: Make,
) -> Result<c_int, Errno> {
    // SAFETY: a C string by the caller's contract.
    let len = unsafe { libc::strlen(template) };
    if len < 6 + suffix {
        return Err(Errno(libc::EINVAL));
    }
    // SAFETY: within the string's `len` bytes, which the caller lets us write.
    let xs =
        unsafe { std::slice::from_raw_parts_mut(template.add(len - 6 - suffix).cast::<u8>(), 6) };
    // The store path ends as the template does (its last name is the template's).
    let mut path = store.into_bytes();
    let at = path
        .len()
        .checked_sub(6 + suffix)
        .ok_or(Errno(libc::EINVAL))?;
    if xs != b"XXXXXX" || path[at..at + 6] != *b"XXXXXX" {
        return Err(Errno(libc::EINVAL));
    }
    for _ in 0..TRIES {
        let mut r = next();
        for (i, b) in xs.iter_mut().enumerate() {
            *b = LETTERS[(r % 62) as usize];
            path[at + i] = *b;
            r /= 62;
        }
        let path = std::str::from_utf8(&path).map_err(|_| Errno(libc::EINVAL))?;
        let made = match what {
            Make::File(flags) => open_store(
                path,
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | flags,
                0o600,
            ),
            Make::Dir => Files::mkdir(&*conn::client()?, path, 0o700).map(|()| 0),
        };
        match made {
            Err(e) if e.0 == libc::EEXIST => continue,
            r => return r,
        }
    }
    Err(Errno(libc::EEXIST))
}

/// The store path `template` names, if it is under the prefix.
///
/// # Safety
/// `template` is null or a C string.
unsafe fn served(template: *const c_char) -> Option<String> {
    // SAFETY: by the caller's contract.
    match unsafe { route::at(libc::AT_FDCWD, template) } {
        Route::Store(s) => Some(s),
        _ => None,
    }
}

/// `mkostemps(3)`: the one every other `mk*temp*` file call comes to.
///
/// # Safety
/// As `mkostemps(3)`.
#[no_mangle]
pub unsafe extern "C" fn mkostemps(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    // SAFETY: the program's template.
    let Some(store) = (unsafe { served(template) }) else {
        // SAFETY: the program's arguments passed on.
        return unsafe { real::mkostemps()(template, suffix, flags) };
    };
    let Ok(suffix) = usize::try_from(suffix) else {
        set_errno(Errno(libc::EINVAL));
        return -1;
    };
    // SAFETY: the program's writable template.
    crate::Ret::ret(serve(|| unsafe {
        make(
            template,
            store,
            suffix,
            Make::File(flags & !libc::O_ACCMODE),
        )
    }))
}

/// `mkostemps64`.
///
/// # Safety
/// As `mkostemps(3)`.
#[no_mangle]
pub unsafe extern "C" fn mkostemps64(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { mkostemps(template, suffix, flags) }
}

/// `mkstemp(3)`.
///
/// # Safety
/// As `mkstemp(3)`.
#[no_mangle]
pub unsafe extern "C" fn mkstemp(template: *mut c_char) -> c_int {
    // SAFETY: same contract.
    unsafe { mkostemps(template, 0, 0) }
}

/// `mkstemp64`.
///
/// # Safety
/// As `mkstemp(3)`.
#[no_mangle]
pub unsafe extern "C" fn mkstemp64(template: *mut c_char) -> c_int {
    // SAFETY: same contract.
    unsafe { mkostemps(template, 0, 0) }
}

/// `mkostemp(3)`.
///
/// # Safety
/// As `mkostemp(3)`.
#[no_mangle]
pub unsafe extern "C" fn mkostemp(template: *mut c_char, flags: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { mkostemps(template, 0, flags) }
}

/// `mkostemp64`.
///
/// # Safety
/// As `mkostemp(3)`.
#[no_mangle]
pub unsafe extern "C" fn mkostemp64(template: *mut c_char, flags: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { mkostemps(template, 0, flags) }
}

/// `mkstemps(3)`.
///
/// # Safety
/// As `mkstemps(3)`.
#[no_mangle]
pub unsafe extern "C" fn mkstemps(template: *mut c_char, suffix: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { mkostemps(template, suffix, 0) }
}

/// `mkstemps64`.
///
/// # Safety
/// As `mkstemps(3)`.
#[no_mangle]
pub unsafe extern "C" fn mkstemps64(template: *mut c_char, suffix: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { mkostemps(template, suffix, 0) }
}

/// `mkdtemp(3)`.
///
/// # Safety
/// As `mkdtemp(3)`.
#[no_mangle]
pub unsafe extern "C" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    // SAFETY: the program's template.
    let Some(store) = (unsafe { served(template) }) else {
        // SAFETY: the program's argument passed on.
        return unsafe { real::mkdtemp()(template) };
    };
    // SAFETY: the program's writable template.
    match serve(|| unsafe { make(template, store, 0, Make::Dir) }) {
        Ok(_) => template,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}
