//! Reads, writes, offsets, syncs and sizes of served descriptors.

use libc::{c_int, c_void, iovec, off_t, size_t, ssize_t};
use switchyard_store::{Errno, Falloc, Inodes, Seek, SetAttr};

use super::by_fd;
use crate::state::{self, Open};
use crate::{conn, real, serve};

/// Reads at `off`, or at the open's offset (and moves it) when `None`.
pub fn read_at(o: &Open, buf: &mut [u8], off: Option<u64>) -> Result<usize, Errno> {
    if !o.readable() {
        return Err(Errno(libc::EBADF));
    }
    if o.is_dir() {
        return Err(Errno(libc::EISDIR));
    }
    let c = conn::for_open(o)?;
    match off {
        Some(off) => Inodes::read(&*c, o.ino, off, buf),
        None => {
            let mut pos = o.offset.lock();
            let at = pos.get();
            let n = Inodes::read(&*c, o.ino, at, buf)?;
            pos.set(at + n as u64);
            Ok(n)
        }
    }
}

/// Writes at `off`, or at the open's offset (and moves it) when `None`; at the end of the
/// file when the open appends (for `pwrite` too, as Linux does). A write of an `O_SYNC` or
/// `O_DSYNC` open returns once the server synced it ([`sync_open`]).
pub fn write_at(o: &Open, data: &[u8], off: Option<u64>) -> Result<usize, Errno> {
    let n = write_unsynced(o, data, off)?;
    if o.flags.load(std::sync::atomic::Ordering::Relaxed) & (libc::O_SYNC | libc::O_DSYNC) != 0 {
        sync_open(o)?;
    }
    Ok(n)
}

/// Makes what returned on `o`'s file durable: the server's fsync, which on a store file on
/// a disk syncs every change that returned (`fsync`, `fdatasync`, `sync_file_range`, and the
/// writes of `O_SYNC` and `O_DSYNC` opens).
fn sync_open(o: &Open) -> Result<(), Errno> {
    conn::for_open(o)?.fsync(o.ino)
}

/// [`write_at`] without its sync.
fn write_unsynced(o: &Open, data: &[u8], off: Option<u64>) -> Result<usize, Errno> {
    if !o.writable() {
        return Err(Errno(libc::EBADF));
    }
    if data.is_empty() {
        return Ok(0);
    }
    let c = conn::for_open(o)?;
    let append = o.flags.load(std::sync::atomic::Ordering::Relaxed) & libc::O_APPEND != 0;
    match off {
        Some(_) if append => c.append(o.ino, data).map(|_| data.len()),
        Some(off) => Inodes::write(&*c, o.ino, off, data),
        None => {
            let mut pos = o.offset.lock();
            if append {
                let at = c.append(o.ino, data)?;
                pos.set(at + data.len() as u64);
                Ok(data.len())
            } else {
                let len = data.len() as u64;
                let at = pos.reserve(len);
                let n = Inodes::write(&*c, o.ino, at, data);
                pos.settle(at + len, at + *n.as_ref().unwrap_or(&0) as u64);
                n
            }
        }
    }
}

/// A buffer the program passed.
///
/// # Safety
/// `p` points to `n` bytes the caller may write (or `n` is 0).
unsafe fn buffer<'a>(p: *mut c_void, n: usize) -> &'a mut [u8] {
    if n == 0 || p.is_null() {
        return &mut [];
    }
    // SAFETY: by the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(p.cast(), n) }
}

/// The program's vector of buffers.
///
/// # Safety
/// `iov` points to `cnt` iovecs, each naming memory of its length (or is unused when `cnt`
/// is 0).
unsafe fn vector<'a>(iov: *const iovec, cnt: c_int) -> Result<&'a [iovec], Errno> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return Err(Errno(libc::EINVAL));
    }
    if cnt == 0 {
        return Ok(&[]);
    }
    // SAFETY: by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(iov, cnt as usize) })
}

/// Reads into each buffer in turn until one comes back short.
///
/// # Safety
/// As [`vector`].
unsafe fn readv_at(
    o: &Open,
    iov: *const iovec,
    cnt: c_int,
    off: Option<u64>,
) -> Result<usize, Errno> {
    // SAFETY: by the caller's contract.
    let v = unsafe { vector(iov, cnt)? };
    let mut total = 0usize;
    for b in v {
        // SAFETY: each iovec names memory of its length (the caller's contract).
        let buf = unsafe { buffer(b.iov_base, b.iov_len) };
        let n = read_at(o, buf, off.map(|o| o + total as u64))?;
        total += n;
        if n < buf.len() {
            break;
        }
    }
    Ok(total)
}

/// Writes the buffers as one write (atomic, as `writev` is).
///
/// # Safety
/// As [`vector`].
unsafe fn writev_at(
    o: &Open,
    iov: *const iovec,
    cnt: c_int,
    off: Option<u64>,
) -> Result<usize, Errno> {
    // SAFETY: by the caller's contract.
    let v = unsafe { vector(iov, cnt)? };
    if let [one] = v {
        // SAFETY: the iovec names memory of its length.
        return write_at(o, unsafe { buffer(one.iov_base, one.iov_len) }, off);
    }
    let mut all = Vec::with_capacity(v.iter().map(|b| b.iov_len).sum());
    for b in v {
        // SAFETY: as above.
        all.extend_from_slice(unsafe { buffer(b.iov_base, b.iov_len) });
    }
    write_at(o, &all, off)
}

/// A program's offset argument: non-negative.
fn offset(off: off_t) -> Result<u64, Errno> {
    u64::try_from(off).map_err(|_| Errno(libc::EINVAL))
}

/// `read(2)`.
///
/// # Safety
/// As `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    by_fd!(
        fd,
        |o| read_at(&o, buffer(buf, n), None),
        real::read()(fd, buf, n)
    )
}

/// `write(2)`.
///
/// # Safety
/// As `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    by_fd!(
        fd,
        |o| write_at(&o, buffer(buf.cast_mut(), n), None),
        real::write()(fd, buf, n)
    )
}

/// `pread64`.
///
/// # Safety
/// As `pread(2)`.
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    by_fd!(
        fd,
        |o| read_at(&o, buffer(buf, n), Some(offset(off)?)),
        real::pread64()(fd, buf, n, off)
    )
}

/// `pread(2)`.
///
/// # Safety
/// As `pread(2)`.
#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: same contract.
    unsafe { pread64(fd, buf, n, off) }
}

/// `pwrite64`.
///
/// # Safety
/// As `pwrite(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    by_fd!(
        fd,
        |o| write_at(&o, buffer(buf.cast_mut(), n), Some(offset(off)?)),
        real::pwrite64()(fd, buf, n, off)
    )
}

/// `pwrite(2)`.
///
/// # Safety
/// As `pwrite(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: same contract.
    unsafe { pwrite64(fd, buf, n, off) }
}

/// `readv(2)`.
///
/// # Safety
/// As `readv(2)`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    by_fd!(
        fd,
        |o| readv_at(&o, iov, cnt, None),
        real::readv()(fd, iov, cnt)
    )
}

/// `writev(2)`.
///
/// # Safety
/// As `writev(2)`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    by_fd!(
        fd,
        |o| writev_at(&o, iov, cnt, None),
        real::writev()(fd, iov, cnt)
    )
}

/// `preadv64`.
///
/// # Safety
/// As `preadv(2)`.
#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    by_fd!(
        fd,
        |o| readv_at(&o, iov, cnt, Some(offset(off)?)),
        real::preadv64()(fd, iov, cnt, off)
    )
}

/// `preadv(2)`.
///
/// # Safety
/// As `preadv(2)`.
#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: same contract.
    unsafe { preadv64(fd, iov, cnt, off) }
}

/// `pwritev64`.
///
/// # Safety
/// As `pwritev(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
) -> ssize_t {
    by_fd!(
        fd,
        |o| writev_at(&o, iov, cnt, Some(offset(off)?)),
        real::pwritev64()(fd, iov, cnt, off)
    )
}

/// `pwritev(2)`.
///
/// # Safety
/// As `pwritev(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: same contract.
    unsafe { pwritev64(fd, iov, cnt, off) }
}

/// `preadv2` at an offset, or at the file offset when it is -1. The flags ask for hints this
/// store needs none of (every read is served at once).
///
/// # Safety
/// As `preadv2(2)`.
#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    by_fd!(
        fd,
        |o| readv_at(
            &o,
            iov,
            cnt,
            if off == -1 { None } else { Some(offset(off)?) }
        ),
        real::preadv64v2()(fd, iov, cnt, off, flags)
    )
}

/// `preadv2(2)`.
///
/// # Safety
/// As `preadv2(2)`.
#[no_mangle]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { preadv64v2(fd, iov, cnt, off, flags) }
}

/// `pwritev2`: as `pwritev`; `RWF_APPEND` appends, and `RWF_DSYNC` or `RWF_SYNC` returns
/// once the write is synced, as a write of an `O_DSYNC` open does.
///
/// # Safety
/// As `pwritev2(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    by_fd!(
        fd,
        |o| {
            let off = if off == -1 { None } else { Some(offset(off)?) };
            let n = if flags & libc::RWF_APPEND != 0 {
                let at = Inodes::stat(&*conn::for_open(&o)?, o.ino)?.attr.size;
                writev_at(&o, iov, cnt, Some(at))?
            } else {
                writev_at(&o, iov, cnt, off)?
            };
            if flags & (libc::RWF_DSYNC | libc::RWF_SYNC) != 0 {
                sync_open(&o)?;
            }
            Ok(n)
        },
        real::pwritev64v2()(fd, iov, cnt, off, flags)
    )
}

/// `pwritev2(2)`.
///
/// # Safety
/// As `pwritev2(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { pwritev64v2(fd, iov, cnt, off, flags) }
}

fn seek(o: &Open, off: off_t, whence: c_int) -> Result<u64, Errno> {
    let size =
        || -> Result<u64, Errno> { Ok(Inodes::stat(&*conn::for_open(o)?, o.ino)?.attr.size) };
    let mut pos = o.offset.lock();
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => pos.get() as i64,
        libc::SEEK_END => size()? as i64,
        // Where the file's data and holes lie, as the server's store maps its blocks.
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            let off = u64::try_from(off).map_err(|_| Errno(libc::ENXIO))?;
            let what = if whence == libc::SEEK_DATA {
                Seek::Data
            } else {
                Seek::Hole
            };
            let to = Inodes::seek(&*conn::for_open(o)?, o.ino, off, what)?;
            pos.set(to);
            return Ok(to);
        }
        _ => return Err(Errno(libc::EINVAL)),
    };
    let to = base
        .checked_add(off)
        .filter(|&t| t >= 0)
        .ok_or(Errno(libc::EINVAL))?;
    pos.set(to as u64);
    Ok(to as u64)
}

/// `lseek64`.
///
/// # Safety
/// As `lseek(2)`.
#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t {
    by_fd!(
        fd,
        |o| seek(&o, off, whence),
        real::lseek64()(fd, off, whence)
    )
}

/// `lseek(2)`.
///
/// # Safety
/// As `lseek(2)`.
#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    // SAFETY: same contract.
    unsafe { lseek64(fd, off, whence) }
}

/// `fsync(2)`.
///
/// # Safety
/// As `fsync(2)`.
#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    by_fd!(fd, |o| sync_open(&o), real::fsync()(fd))
}

/// `fdatasync(2)`: as `fsync` (the store has no cheaper sync of data alone).
///
/// # Safety
/// As `fdatasync(2)`.
#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    by_fd!(fd, |o| sync_open(&o), real::fdatasync()(fd))
}

/// `sync_file_range(2)`: on a served file, any request to write (flags other than 0) is an
/// fsync, stronger than Linux's, which neither flushes the disk's cache nor writes metadata.
///
/// # Safety
/// As `sync_file_range(2)`.
#[no_mangle]
pub unsafe extern "C" fn sync_file_range(
    fd: c_int,
    off: off_t,
    n: off_t,
    flags: libc::c_uint,
) -> c_int {
    const ALL: libc::c_uint = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    by_fd!(
        fd,
        |o| {
            if flags & !ALL != 0 || off < 0 || n < 0 || off.checked_add(n).is_none() {
                return Err(Errno(libc::EINVAL));
            }
            if flags == 0 {
                return Ok(());
            }
            sync_open(&o)
        },
        real::sync_file_range()(fd, off, n, flags)
    )
}

/// `syncfs(2)`: on a served descriptor, the whole served store.
///
/// # Safety
/// As `syncfs(2)`.
#[no_mangle]
pub unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    by_fd!(fd, |o| conn::for_open(&o)?.sync(), real::syncfs()(fd))
}

/// `sync(2)`: this machine's file systems, then the served store (connecting if this process
/// has not yet; a store that cannot be reached is left out, as `sync` reports nothing).
///
/// # Safety
/// As `sync(2)`.
#[no_mangle]
pub unsafe extern "C" fn sync() {
    // SAFETY: sync takes no arguments.
    unsafe { real::sync()() };
    if crate::inside() || crate::route::prefix().is_none() {
        return;
    }
    let _ = serve(|| conn::client()?.sync());
}

fn resize(o: &Open, len: off_t) -> Result<(), Errno> {
    if !o.writable() || o.is_dir() {
        return Err(Errno(libc::EINVAL));
    }
    let size = offset(len)?;
    let set = SetAttr {
        size: Some(size),
        ..SetAttr::default()
    };
    conn::for_open(o)?.setattr(o.ino, set).map(|_| ())
}

/// `ftruncate64`.
///
/// # Safety
/// As `ftruncate(2)`.
#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off_t) -> c_int {
    by_fd!(fd, |o| resize(&o, len), real::ftruncate64()(fd, len))
}

/// `ftruncate(2)`.
///
/// # Safety
/// As `ftruncate(2)`.
#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    // SAFETY: same contract.
    unsafe { ftruncate64(fd, len) }
}

fn allocate(o: &Open, mode: c_int, off: off_t, len: off_t) -> Result<(), Errno> {
    if !o.writable() {
        return Err(Errno(libc::EBADF));
    }
    let (off, len) = (offset(off)?, offset(len)?);
    if len == 0 {
        return Err(Errno(libc::EINVAL));
    }
    let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
    let how = match mode & !libc::FALLOC_FL_KEEP_SIZE {
        0 => Falloc::Allocate { keep_size },
        libc::FALLOC_FL_ZERO_RANGE => Falloc::ZeroRange { keep_size },
        libc::FALLOC_FL_PUNCH_HOLE if keep_size => Falloc::PunchHole,
        _ => return Err(Errno(libc::EOPNOTSUPP)),
    };
    conn::for_open(o)?.fallocate(o.ino, off, len, how)
}

/// `fallocate64`.
///
/// # Safety
/// As `fallocate(2)`.
#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    by_fd!(
        fd,
        |o| allocate(&o, mode, off, len),
        real::fallocate64()(fd, mode, off, len)
    )
}

/// `fallocate(2)`.
///
/// # Safety
/// As `fallocate(2)`.
#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: same contract.
    unsafe { fallocate64(fd, mode, off, len) }
}

/// `posix_fallocate64` (returns the error number).
///
/// # Safety
/// As `posix_fallocate(3)`.
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: off_t, len: off_t) -> c_int {
    match state::get(fd) {
        // SAFETY: the program's arguments passed on.
        None => unsafe { real::posix_fallocate64()(fd, off, len) },
        Some(o) => match serve(|| allocate(&o, 0, off, len)) {
            Ok(()) => 0,
            Err(e) => e.0,
        },
    }
}

/// `posix_fallocate(3)`.
///
/// # Safety
/// As `posix_fallocate(3)`.
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: same contract.
    unsafe { posix_fallocate64(fd, off, len) }
}

/// `posix_fadvise64`: advice a served file needs none of (there is no page cache to steer).
///
/// # Safety
/// As `posix_fadvise(3)`.
#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(
    fd: c_int,
    off: off_t,
    len: off_t,
    advice: c_int,
) -> c_int {
    match state::get(fd) {
        // SAFETY: the program's arguments passed on.
        None => unsafe { real::posix_fadvise64()(fd, off, len, advice) },
        Some(_) => 0,
    }
}

/// `posix_fadvise(3)`.
///
/// # Safety
/// As `posix_fadvise(3)`.
#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
    // SAFETY: same contract.
    unsafe { posix_fadvise64(fd, off, len, advice) }
}
