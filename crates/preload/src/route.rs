//! Which paths are the store's: those under `SWITCHYARD_PREFIX`, after relative paths are
//! joined to the working directory (or the directory descriptor) they are relative to and
//! `.` and `..` are resolved by name.

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

use libc::{c_char, c_int};
use switchyard_store::Errno;

use crate::{inside, state};

/// The prefix, normalised (`None`: the library is off).
static PREFIX: OnceLock<Option<Vec<u8>>> = OnceLock::new();

/// The environment variable a working directory in the store is handed on in, across `exec`.
pub const CWD_VAR: &str = "SWITCHYARD_PRELOAD_CWD";

/// Reads `SWITCHYARD_PREFIX` (and an inherited working directory in the store).
pub fn init() {
    let prefix = std::env::var_os("SWITCHYARD_PREFIX").and_then(|p| {
        let p = normalise(std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()));
        if p.len() > 1 {
            Some(p)
        } else {
            let line = b"switchyard preload: SWITCHYARD_PREFIX must be an absolute path other than /; off\n";
            // SAFETY: writing a static buffer to stderr with libc's write.
            unsafe { crate::real::write()(2, line.as_ptr().cast(), line.len()) };
            None
        }
    });
    let on = prefix.is_some();
    let _ = PREFIX.set(prefix);
    if on {
        if let Some(cwd) = std::env::var(CWD_VAR).ok().filter(|c| c.starts_with('/')) {
            state::STATE.write().cwd = Some(cwd);
        }
    }
}

/// The prefix, normalised; `None` while the library is off.
pub fn prefix() -> Option<&'static [u8]> {
    PREFIX.get().and_then(|p| p.as_deref())
}

/// The prefix as the user gave it, for messages.
pub fn prefix_display() -> String {
    match PREFIX.get() {
        Some(Some(p)) => String::from_utf8_lossy(p).into_owned(),
        _ => "the prefix".into(),
    }
}

/// Where a path goes.
pub enum Route {
    /// To libc, unchanged.
    Libc,
    /// To libc as this absolute path (a relative path from a working directory in the store
    /// that leads out of it).
    Host(CString),
    /// To the store, as this path from its root.
    Store(String),
    /// Nowhere: the call fails (a store path that is not UTF-8).
    Fail(Errno),
}

/// Where `path`, relative to `dirfd` (or the working directory for `AT_FDCWD`), goes.
/// An empty path goes to libc (callers that take `AT_EMPTY_PATH` check for it first).
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub unsafe fn at(dirfd: c_int, path: *const c_char) -> Route {
    let Some(Some(prefix)) = PREFIX.get() else {
        return Route::Libc;
    };
    if path.is_null() || inside() {
        return Route::Libc;
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    if p.is_empty() {
        return Route::Libc;
    }
    let full = if p[0] == b'/' {
        if !p.starts_with(prefix) && !p.windows(2).any(|w| w == b"//" || w == b"/.") {
            return Route::Libc;
        }
        normalise(p)
    } else {
        let base = if dirfd == libc::AT_FDCWD {
            match state::STATE.read().cwd.clone() {
                Some(c) => c,
                None => return Route::Libc,
            }
        } else {
            match state::dir_path(dirfd) {
                Some(d) => d,
                None => return Route::Libc,
            }
        };
        let mut joined = prefix.clone();
        joined.extend_from_slice(base.as_bytes());
        joined.push(b'/');
        joined.extend_from_slice(p);
        normalise(&joined)
    };
    match in_store(prefix, &full) {
        Some([]) => Route::Store("/".into()),
        Some(rest) => match String::from_utf8(rest.to_vec()) {
            Ok(s) => Route::Store(s),
            Err(_) => Route::Fail(Errno(libc::EILSEQ)),
        },
        // An absolute path outside the prefix (unless `..` led it out of it) is the kernel's.
        None if p[0] == b'/' && !p.starts_with(prefix) => Route::Libc,
        None => Route::Host(CString::new(full).expect("no NUL inside a C string")),
    }
}

/// The host path of a store path (the prefix in front).
pub fn host_path(store: &str) -> Vec<u8> {
    let Some(Some(prefix)) = PREFIX.get() else {
        return store.as_bytes().to_vec();
    };
    let mut p = prefix.clone();
    if store != "/" {
        p.extend_from_slice(store.as_bytes());
    }
    p
}

/// The store path of `full` (normalised), if it is under `prefix`: empty for the prefix
/// itself, else starting with `/`.
fn in_store<'a>(prefix: &[u8], full: &'a [u8]) -> Option<&'a [u8]> {
    let rest = full.strip_prefix(prefix)?;
    (rest.is_empty() || rest[0] == b'/').then_some(rest)
}

/// `path` made absolute-looking by name: empty components and `.` dropped, `..` removes
/// the name before it (never above the root).
fn normalise(path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::with_capacity(path.len() + 1);
    for c in parts {
        out.push(b'/');
        out.extend_from_slice(c);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}
