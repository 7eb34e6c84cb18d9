//! The working directory and canonical paths: `chdir`, `fchdir`, `getcwd`, `realpath` and
//! their fortified forms.

use std::ffi::CString;

use libc::{c_char, c_int, size_t};
use switchyard_store::{Errno, S_IFDIR};

use crate::route::{self, Route, CWD_VAR};
use crate::state::{self, STATE};
use crate::{conn, real, serve, set_errno, Ret};

extern "C" {
    /// glibc's report of a buffer overflow caught by a fortified call (aborts).
    fn __chk_fail() -> !;
}

/// Sets (or clears) the working directory in the store, and the variable that hands it on
/// across `exec`.
fn set_cwd(store: Option<String>) {
    match &store {
        Some(s) => {
            let (k, v) = (
                CString::new(CWD_VAR).expect("no NUL"),
                CString::new(s.as_str()),
            );
            if let Ok(v) = v {
                // SAFETY: NUL-terminated strings; setenv copies them.
                unsafe { libc::setenv(k.as_ptr(), v.as_ptr(), 1) };
            }
        }
        None => {
            if STATE.read().cwd.is_none() {
                return;
            }
            let k = CString::new(CWD_VAR).expect("no NUL");
            // SAFETY: a NUL-terminated name.
            unsafe { libc::unsetenv(k.as_ptr()) };
        }
    }
    STATE.write().cwd = store;
}

fn enter(store: &str) -> Result<(), Errno> {
    let (_, st) = conn::client()?.path_stat(store, true)?;
    if st.attr.kind() != S_IFDIR {
        return Err(Errno(libc::ENOTDIR));
    }
    set_cwd(Some(store.to_string()));
    Ok(())
}

/// `chdir(2)`: into the prefix, a working directory in the store.
///
/// # Safety
/// As `chdir(2)`.
#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    // SAFETY: the program's path.
    let r = unsafe { route::at(libc::AT_FDCWD, path) };
    let host = match r {
        Route::Store(s) => return serve(|| enter(&s)).ret(),
        Route::Fail(e) => return Err::<(), _>(e).ret(),
        Route::Host(h) => Some(h),
        Route::Libc => None,
    };
    // SAFETY: the program's path, or it made absolute.
    let rc = unsafe { real::chdir()(host.as_ref().map_or(path, |h| h.as_ptr())) };
    if rc == 0 && !crate::inside() {
        set_cwd(None);
    }
    rc
}

/// `fchdir(2)`.
///
/// # Safety
/// As `fchdir(2)`.
#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    match state::get(fd) {
        Some(o) if o.is_dir() => {
            set_cwd(Some(o.path.clone()));
            0
        }
        Some(_) => Err::<(), _>(Errno(libc::ENOTDIR)).ret(),
        None => {
            // SAFETY: the program's argument passed on.
            let rc = unsafe { real::fchdir()(fd) };
            if rc == 0 && !crate::inside() {
                set_cwd(None);
            }
            rc
        }
    }
}

/// Copies `path` (with its NUL) into `buf` of `size` bytes, or into a new `malloc`ed buffer
/// when `buf` is null (of `size` bytes, or as long as needed when `size` is 0).
fn give_path(path: &[u8], buf: *mut c_char, size: size_t) -> *mut c_char {
    let need = path.len() + 1;
    let (dst, cap) = if buf.is_null() {
        let cap = if size == 0 { need } else { size };
        // SAFETY: malloc of a non-zero size.
        (unsafe { libc::malloc(cap) }.cast::<c_char>(), cap)
    } else {
        (buf, size)
    };
    if dst.is_null() {
        set_errno(Errno(libc::ENOMEM));
        return dst;
    }
    if cap < need {
        if buf.is_null() {
            // SAFETY: freeing what we just allocated.
            unsafe { libc::free(dst.cast()) };
        }
        set_errno(Errno(libc::ERANGE));
        return std::ptr::null_mut();
    }
    // SAFETY: `dst` has room for `need` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(path.as_ptr(), dst.cast(), path.len());
        *dst.add(path.len()) = 0;
    }
    dst
}

/// `getcwd(3)`.
///
/// # Safety
/// As `getcwd(3)`.
#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    let cwd = if crate::inside() {
        None
    } else {
        STATE.read().cwd.clone()
    };
    match cwd {
        Some(c) => {
            if !buf.is_null() && size == 0 {
                set_errno(Errno(libc::EINVAL));
                return std::ptr::null_mut();
            }
            give_path(&route::host_path(&c), buf, size)
        }
        // SAFETY: the program's arguments passed on.
        None => unsafe { real::getcwd()(buf, size) },
    }
}

/// `get_current_dir_name(3)`.
///
/// # Safety
/// As `get_current_dir_name(3)`.
#[no_mangle]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    // SAFETY: a null buffer: getcwd allocates.
    unsafe { getcwd(std::ptr::null_mut(), 0) }
}

/// The fortified `getcwd`.
///
/// # Safety
/// As `getcwd(3)`, with `buflen` the size of `buf`.
#[no_mangle]
pub unsafe extern "C" fn __getcwd_chk(
    buf: *mut c_char,
    size: size_t,
    buflen: size_t,
) -> *mut c_char {
    if size > buflen {
        // SAFETY: glibc's overflow report.
        unsafe { __chk_fail() }
    }
    // SAFETY: same contract.
    unsafe { getcwd(buf, size) }
}

/// `realpath(3)`: a served path must exist; its canonical form is its form by name.
///
/// # Safety
/// As `realpath(3)`.
#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    // SAFETY: the program's path.
    let r = unsafe { route::at(libc::AT_FDCWD, path) };
    match r {
        Route::Store(s) => match serve(|| conn::client()?.path_stat(&s, true)) {
            Ok(_) => give_path(&route::host_path(&s), resolved, libc::PATH_MAX as size_t),
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        },
        Route::Fail(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        // SAFETY: the path made absolute.
        Route::Host(h) => unsafe { real::realpath()(h.as_ptr(), resolved) },
        // SAFETY: the program's arguments passed on.
        Route::Libc => unsafe { real::realpath()(path, resolved) },
    }
}

/// The fortified `realpath`.
///
/// # Safety
/// As `realpath(3)`.
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(
    path: *const c_char,
    resolved: *mut c_char,
    len: size_t,
) -> *mut c_char {
    if len < libc::PATH_MAX as size_t {
        // SAFETY: glibc's overflow report.
        unsafe { __chk_fail() }
    }
    // SAFETY: same contract.
    unsafe { realpath(path, resolved) }
}

/// `canonicalize_file_name(3)`.
///
/// # Safety
/// As `canonicalize_file_name(3)`.
#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    // SAFETY: same contract, realpath allocating.
    unsafe { realpath(path, std::ptr::null_mut()) }
}

/// The fortified `read`.
///
/// # Safety
/// As `read(2)`, with `buflen` the size of `buf`.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut libc::c_void,
    n: size_t,
    buflen: size_t,
) -> libc::ssize_t {
    if n > buflen {
        // SAFETY: glibc's overflow report.
        unsafe { __chk_fail() }
    }
    // SAFETY: same contract.
    unsafe { super::io::read(fd, buf, n) }
}

/// The fortified `pread`.
///
/// # Safety
/// As `pread(2)`, with `buflen` the size of `buf`.
#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut libc::c_void,
    n: size_t,
    off: libc::off_t,
    buflen: size_t,
) -> libc::ssize_t {
    if n > buflen {
        // SAFETY: glibc's overflow report.
        unsafe { __chk_fail() }
    }
    // SAFETY: same contract.
    unsafe { super::io::pread64(fd, buf, n, off) }
}

/// The fortified `pread`.
///
/// # Safety
/// As `pread(2)`, with `buflen` the size of `buf`.
#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut libc::c_void,
    n: size_t,
    off: libc::off_t,
    buflen: size_t,
) -> libc::ssize_t {
    // SAFETY: same contract.
    unsafe { __pread64_chk(fd, buf, n, off, buflen) }
}

/// The fortified `readlinkat`.
///
/// # Safety
/// As `readlinkat(2)`, with `buflen` the size of `buf`.
#[no_mangle]
pub unsafe extern "C" fn __readlinkat_chk(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
    buflen: size_t,
) -> libc::ssize_t {
    if n > buflen {
        // SAFETY: glibc's overflow report.
        unsafe { __chk_fail() }
    }
    // SAFETY: same contract.
    unsafe { super::names::readlinkat(dirfd, path, buf, n) }
}

/// The fortified `readlink`.
///
/// # Safety
/// As `readlink(2)`, with `buflen` the size of `buf`.
#[no_mangle]
pub unsafe extern "C" fn __readlink_chk(
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
    buflen: size_t,
) -> libc::ssize_t {
    // SAFETY: same contract.
    unsafe { __readlinkat_chk(libc::AT_FDCWD, path, buf, n, buflen) }
}
