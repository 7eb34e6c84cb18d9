//! Streams over served descriptors: `fopen`, `fdopen` and `fileno`, and the standard streams
//! when their descriptors are served. glibc's `fopen` opens through its own internal `open`,
//! and its streams write through its internal `write`, which this library cannot see, so a
//! stream on a served descriptor is made with `fopencookie` over it.

use std::sync::atomic::Ordering;

use libc::{c_char, c_int, c_void, off64_t, size_t, ssize_t};
use switchyard_store::Errno;

use crate::calls::{close_fd, open_store};
use crate::route::{self, Route};
use crate::state::{self, FILES, STATE};
use crate::{real, serve, set_errno};

/// The `open` flags of an `fopen` mode.
///
/// # Safety
/// `mode` is null or a C string.
unsafe fn flags(mode: *const c_char) -> Option<c_int> {
    if mode.is_null() {
        return None;
    }
    // SAFETY: a C string by the caller's contract.
    let m = unsafe { std::ffi::CStr::from_ptr(mode) }.to_bytes();
    let plus = m.contains(&b'+');
    let mut f = match (m.first()?, plus) {
        (b'r', false) => libc::O_RDONLY,
        (b'r', true) => libc::O_RDWR,
        (b'w', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        (b'w', true) => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        (b'a', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        (b'a', true) => libc::O_RDWR | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    if m.contains(&b'x') {
        f |= libc::O_EXCL;
    }
    if m.contains(&b'e') {
        f |= libc::O_CLOEXEC;
    }
    Some(f)
}

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieFunctions {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    /// glibc's stream over caller-supplied functions.
    fn fopencookie(
        cookie: *mut c_void,
        mode: *const c_char,
        funcs: CookieFunctions,
    ) -> *mut libc::FILE;
}

fn fd_of(cookie: *mut c_void) -> c_int {
    cookie as usize as c_int
}

unsafe extern "C" fn cookie_read(cookie: *mut c_void, buf: *mut c_char, size: size_t) -> ssize_t {
    // SAFETY: stdio's buffer of `size` bytes, read through the served descriptor.
    unsafe { crate::calls::read(fd_of(cookie), buf.cast(), size) }
}

unsafe extern "C" fn cookie_write(
    cookie: *mut c_void,
    buf: *const c_char,
    size: size_t,
) -> ssize_t {
    let mut done = 0usize;
    while done < size {
        // SAFETY: stdio's buffer of `size` bytes.
        let n = unsafe { crate::calls::write(fd_of(cookie), buf.add(done).cast(), size - done) };
        if n <= 0 {
            return if done > 0 { done as ssize_t } else { -1 };
        }
        done += n as usize;
    }
    done as ssize_t
}

unsafe extern "C" fn cookie_seek(cookie: *mut c_void, pos: *mut off64_t, whence: c_int) -> c_int {
    // SAFETY: stdio passes a valid position.
    let to = unsafe { crate::calls::lseek64(fd_of(cookie), *pos, whence) };
    if to < 0 {
        return -1;
    }
    // SAFETY: as above.
    unsafe { *pos = to };
    0
}

unsafe extern "C" fn cookie_close(cookie: *mut c_void) -> c_int {
    let fd = fd_of(cookie);
    let mut st = STATE.write();
    let before = st.files.len();
    st.files.retain(|_, f| *f != fd);
    FILES.fetch_sub(before - st.files.len(), Ordering::AcqRel);
    drop(st);
    crate::Ret::ret(serve(|| close_fd(fd)))
}

/// A stream over the served descriptor `fd`, which it then owns.
///
/// # Safety
/// `mode` is a C string.
unsafe fn stream(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    let funcs = CookieFunctions {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: Some(cookie_seek),
        close: Some(cookie_close),
    };
    // SAFETY: our callbacks and a cookie that is the descriptor number.
    let f = unsafe { fopencookie(fd as usize as *mut c_void, mode, funcs) };
    if !f.is_null() {
        STATE.write().files.insert(f as usize, fd);
        FILES.fetch_add(1, Ordering::AcqRel);
    }
    f
}

extern "C" {
    static mut stdin: *mut libc::FILE;
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
}

/// Makes the standard stream of `fd` (0, 1 or 2), now a served descriptor, a stream over it:
/// glibc's own `stdin`, `stdout` and `stderr` write through its internal `write`, which this
/// library cannot see. What the old stream buffered is flushed first; `stderr` stays
/// unbuffered.
pub fn rebind_standard(fd: c_int) {
    let (slot, mode) = match fd {
        0 => (std::ptr::addr_of_mut!(stdin), c"r"),
        1 => (std::ptr::addr_of_mut!(stdout), c"w"),
        2 => (std::ptr::addr_of_mut!(stderr), c"w"),
        _ => return,
    };
    // SAFETY: a served descriptor and a mode literal; the stream variables are libc's, and
    // replacing one with another open stream is what `freopen` does to them.
    unsafe {
        let old = slot.read();
        if !old.is_null() {
            libc::fflush(old);
        }
        let f = stream(fd, mode.as_ptr());
        if f.is_null() {
            return;
        }
        if fd == 2 {
            libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0);
        }
        slot.write(f);
    }
}

/// `fopen(3)`.
///
/// # Safety
/// As `fopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: the program's path.
    match unsafe { route::at(libc::AT_FDCWD, path) } {
        // SAFETY: the program's arguments passed on.
        Route::Libc => unsafe { real::fopen64()(path, mode) },
        // SAFETY: the path made absolute.
        Route::Host(h) => unsafe { real::fopen64()(h.as_ptr(), mode) },
        Route::Fail(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        Route::Store(s) => {
            // SAFETY: the program's mode string.
            let Some(fl) = (unsafe { flags(mode) }) else {
                set_errno(Errno(libc::EINVAL));
                return std::ptr::null_mut();
            };
            match serve(|| open_store(&s, fl, 0o666)) {
                // SAFETY: a served descriptor and the program's mode.
                Ok(fd) => unsafe { stream(fd, mode) },
                Err(e) => {
                    set_errno(e);
                    std::ptr::null_mut()
                }
            }
        }
    }
}

/// `fopen(3)`.
///
/// # Safety
/// As `fopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: same contract.
    unsafe { fopen64(path, mode) }
}

/// `fdopen(3)`.
///
/// # Safety
/// As `fdopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    match state::get(fd) {
        // SAFETY: the program's arguments passed on.
        None => unsafe { real::fdopen()(fd, mode) },
        // SAFETY: a served descriptor and the program's mode.
        Some(_) => unsafe { stream(fd, mode) },
    }
}

/// `fileno(3)`.
///
/// # Safety
/// As `fileno(3)`.
#[no_mangle]
pub unsafe extern "C" fn fileno(f: *mut libc::FILE) -> c_int {
    if FILES.load(Ordering::Acquire) > 0 {
        if let Some(&fd) = STATE.read().files.get(&(f as usize)) {
            return fd;
        }
    }
    // SAFETY: the program's argument passed on.
    unsafe { real::fileno()(f) }
}
