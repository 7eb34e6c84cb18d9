//! Calls that move a served file's bytes elsewhere: `copy_file_range` and `sendfile` (through
//! a buffer), and `mmap` (a private mapping holds a copy).

use libc::{c_int, c_uint, c_void, off_t, size_t, ssize_t};
use switchyard_store::{Errno, Inodes};

use super::io::{pread64, pwrite64, read, write};
use crate::state::{self, Open};
use crate::{conn, real, refuse, serve};

/// Copies `len` bytes from `fd_in` to `fd_out` through a buffer (at the given offsets, or
/// the descriptors' own), for a copy with a served side; stops at the end of the input.
///
/// # Safety
/// The offsets are null or point to writable `i64`s.
unsafe fn copy_through(
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    len: usize,
) -> ssize_t {
    let mut buf = vec![0u8; len.min(1 << 20)];
    let mut done = 0usize;
    while done < len {
        let want = (len - done).min(buf.len());
        let p = buf.as_mut_ptr().cast();
        // SAFETY: our buffer, and the caller's offsets.
        let n = unsafe {
            if off_in.is_null() {
                read(fd_in, p, want)
            } else {
                pread64(fd_in, p, want, *off_in)
            }
        };
        if n < 0 {
            return if done > 0 { done as ssize_t } else { -1 };
        }
        if n == 0 {
            break;
        }
        let mut put = 0usize;
        while put < n as usize {
            // SAFETY: as above.
            let w = unsafe {
                let p = buf[put..].as_ptr().cast();
                if off_out.is_null() {
                    write(fd_out, p, n as usize - put)
                } else {
                    pwrite64(fd_out, p, n as usize - put, *off_out + put as i64)
                }
            };
            if w <= 0 {
                return if done + put > 0 {
                    (done + put) as ssize_t
                } else {
                    -1
                };
            }
            put += w as usize;
        }
        // SAFETY: the caller's offsets.
        unsafe {
            if !off_in.is_null() {
                *off_in += n as i64;
            }
            if !off_out.is_null() {
                *off_out += n as i64;
            }
        }
        done += n as usize;
    }
    done as ssize_t
}

/// `copy_file_range(2)`; with a served side, copied through a buffer.
///
/// # Safety
/// As `copy_file_range(2)`.
#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    if state::get(fd_in).is_none() && state::get(fd_out).is_none() {
        // SAFETY: the program's arguments passed on.
        return unsafe { real::copy_file_range()(fd_in, off_in, fd_out, off_out, len, flags) };
    }
    if flags != 0 {
        crate::set_errno(Errno(libc::EINVAL));
        return -1;
    }
    // SAFETY: as the program's contract with copy_file_range.
    unsafe { copy_through(fd_in, off_in, fd_out, off_out, len) }
}

/// `sendfile64`; with a served side, copied through a buffer.
///
/// # Safety
/// As `sendfile(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out_fd: c_int,
    in_fd: c_int,
    off: *mut off_t,
    count: size_t,
) -> ssize_t {
    if state::get(in_fd).is_none() && state::get(out_fd).is_none() {
        // SAFETY: the program's arguments passed on.
        return unsafe { real::sendfile64()(out_fd, in_fd, off, count) };
    }
    // SAFETY: as the program's contract with sendfile.
    unsafe { copy_through(in_fd, off, out_fd, std::ptr::null_mut(), count) }
}

/// `sendfile(2)`.
///
/// # Safety
/// As `sendfile(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    off: *mut off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { sendfile64(out_fd, in_fd, off, count) }
}

/// A private mapping of a served file: anonymous memory holding the file's bytes from `off`
/// (zeros past its end).
fn map_private(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    o: &Open,
    off: off_t,
) -> Result<usize, Errno> {
    if flags & 0x0f != libc::MAP_PRIVATE {
        return Err(refuse("a shared mmap"));
    }
    if !o.readable() {
        return Err(Errno(libc::EACCES));
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as i64;
    if len == 0 || off < 0 || off % page != 0 {
        return Err(Errno(libc::EINVAL));
    }
    let anon = (flags & !0x0f) | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // SAFETY: an anonymous mapping where the program asked (its MAP_FIXED, if any, is its
    // own choice to replace what is there).
    let p = unsafe { real::mmap64()(addr, len, libc::PROT_READ | libc::PROT_WRITE, anon, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOMEM),
        ));
    }
    // SAFETY: the mapping just made is `len` writable bytes.
    let mem = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
    let c = conn::for_open(o)?;
    let mut at = 0;
    while at < len {
        match Inodes::read(&*c, o.ino, off as u64 + at as u64, &mut mem[at..]) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) => {
                // SAFETY: unmapping the mapping made above.
                unsafe { libc::munmap(p, len) };
                return Err(e);
            }
        }
    }
    // SAFETY: changing the protection of our own mapping to what the program asked for.
    if prot != libc::PROT_READ | libc::PROT_WRITE && unsafe { libc::mprotect(p, len, prot) } != 0 {
        // SAFETY: as above.
        unsafe { libc::munmap(p, len) };
        return Err(Errno(libc::EINVAL));
    }
    Ok(p as usize)
}

/// `mmap64`: a private mapping of a served file is served; a shared one is refused.
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    let served = if flags & libc::MAP_ANONYMOUS != 0 {
        None
    } else {
        state::get(fd)
    };
    match served {
        // SAFETY: the program's arguments passed on.
        None => unsafe { real::mmap64()(addr, len, prot, flags, fd, off) },
        Some(o) => match serve(|| map_private(addr, len, prot, flags, &o, off)) {
            Ok(p) => p as *mut c_void,
            Err(e) => {
                crate::set_errno(e);
                libc::MAP_FAILED
            }
        },
    }
}

/// `mmap(2)`. UCX's memory hooks (in the libraries the client links) rewrite the code of
/// the process's `mmap` when they load, so a program calling `mmap` rather than `mmap64`
/// reaches the kernel directly: on a served descriptor the kernel refuses it (`EBADF`, the
/// reserved number being an `O_PATH` descriptor), never maps the wrong bytes. Programs built
/// for large files (`_FILE_OFFSET_BITS=64`, as Debian builds git, coreutils and sqlite) call
/// `mmap64`, which is served.
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: same contract.
    unsafe { mmap64(addr, len, prot, flags, fd, off) }
}
