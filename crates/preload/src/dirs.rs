//! Directory streams over served directories: `opendir`, `fdopendir`, `readdir`,
//! `closedir` and the rest. A stream reads the whole listing when opened (and again when
//! rewound), as the server answers a directory in one reply.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use libc::{c_char, c_int, c_long};
use parking_lot::Mutex;
use switchyard_store::{
    Errno, Inodes, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFREG, S_IFSOCK,
};

use crate::calls::{close_fd, open_store};
use crate::state::{self, Open, DIRS, STATE};
use crate::{conn, real, serve, set_errno};

/// One open directory stream.
pub struct DirStream {
    /// The served descriptor it reads (`dirfd`).
    fd: c_int,
    /// The directory.
    open: Arc<Open>,
    /// (name, inode, `d_type`), `.` and `..` first.
    entries: Vec<(Vec<u8>, u64, u8)>,
    /// The next entry.
    pos: usize,
    /// What `readdir` last returned points here.
    ent: Box<libc::dirent64>,
}

fn d_type(kind: u32) -> u8 {
    match kind {
        S_IFREG => libc::DT_REG,
        S_IFDIR => libc::DT_DIR,
        S_IFLNK => libc::DT_LNK,
        S_IFIFO => libc::DT_FIFO,
        S_IFSOCK => libc::DT_SOCK,
        S_IFCHR => libc::DT_CHR,
        S_IFBLK => libc::DT_BLK,
        _ => libc::DT_UNKNOWN,
    }
}

/// The directory's entries, `.` and `..` first.
fn listing(o: &Open) -> Result<Vec<(Vec<u8>, u64, u8)>, Errno> {
    let c = conn::for_open(o)?;
    let parent = Inodes::stat(&*c, o.ino)?.attr.parent;
    let mut out = vec![
        (b".".to_vec(), o.ino, libc::DT_DIR),
        (b"..".to_vec(), parent, libc::DT_DIR),
    ];
    out.extend(
        c.readdir(o.ino)?
            .into_iter()
            .map(|e| (e.name, e.ino, d_type(e.kind))),
    );
    Ok(out)
}

/// A stream over the served directory descriptor `fd` (which the stream then owns).
fn stream(fd: c_int) -> Result<usize, Errno> {
    let open = state::served(fd).ok_or(Errno(libc::EBADF))?;
    if !open.is_dir() {
        return Err(Errno(libc::ENOTDIR));
    }
    let entries = listing(&open)?;
    let ds = Arc::new(Mutex::new(DirStream {
        fd,
        open,
        entries,
        pos: 0,
        // SAFETY: zeroed is a valid dirent64 (integers and bytes).
        ent: Box::new(unsafe { std::mem::zeroed() }),
    }));
    let key = Arc::as_ptr(&ds) as usize;
    STATE.write().dirs.insert(key, ds);
    DIRS.fetch_add(1, Ordering::AcqRel);
    Ok(key)
}

/// The stream behind `dirp`, if it is one of ours.
fn ours(dirp: *mut libc::DIR) -> Option<Arc<Mutex<DirStream>>> {
    if DIRS.load(Ordering::Acquire) == 0 || crate::inside() {
        return None;
    }
    STATE.read().dirs.get(&(dirp as usize)).cloned()
}

fn to_dir(r: Result<usize, Errno>) -> *mut libc::DIR {
    match r {
        Ok(p) => p as *mut libc::DIR,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// `opendir(3)`.
///
/// # Safety
/// As `opendir(3)`.
#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    // SAFETY: the program's path (or null, which libc rejects).
    match unsafe { crate::route::at(libc::AT_FDCWD, path) } {
        // SAFETY: the program's argument passed on.
        crate::route::Route::Libc => unsafe { real::opendir()(path) },
        // SAFETY: the path made absolute.
        crate::route::Route::Host(h) => unsafe { real::opendir()(h.as_ptr()) },
        crate::route::Route::Fail(e) => to_dir(Err(e)),
        crate::route::Route::Store(s) => to_dir(serve(|| {
            let fd = open_store(&s, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0)?;
            stream(fd).inspect_err(|_| {
                let _ = close_fd(fd);
            })
        })),
    }
}

/// `fdopendir(3)`.
///
/// # Safety
/// As `fdopendir(3)`.
#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut libc::DIR {
    match state::get(fd) {
        // SAFETY: the program's argument passed on.
        None => unsafe { real::fdopendir()(fd) },
        Some(_) => to_dir(serve(|| stream(fd))),
    }
}

/// `readdir64(3)`.
///
/// # Safety
/// As `readdir(3)`.
#[no_mangle]
pub unsafe extern "C" fn readdir64(dirp: *mut libc::DIR) -> *mut libc::dirent64 {
    let Some(ds) = ours(dirp) else {
        // SAFETY: the program's argument passed on.
        return unsafe { real::readdir64()(dirp) };
    };
    let mut d = ds.lock();
    let d = &mut *d;
    let Some((name, ino, kind)) = d.entries.get(d.pos) else {
        return std::ptr::null_mut();
    };
    d.pos += 1;
    let e = &mut *d.ent;
    e.d_ino = *ino;
    e.d_off = d.pos as i64;
    e.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    e.d_type = *kind;
    let n = name.len().min(e.d_name.len() - 1);
    for (dst, src) in e.d_name.iter_mut().zip(&name[..n]) {
        *dst = *src as c_char;
    }
    e.d_name[n] = 0;
    e as *mut libc::dirent64
}

/// `readdir(3)` (`struct dirent` is `struct dirent64` on this ABI).
///
/// # Safety
/// As `readdir(3)`.
#[no_mangle]
pub unsafe extern "C" fn readdir(dirp: *mut libc::DIR) -> *mut libc::dirent64 {
    // SAFETY: same contract.
    unsafe { readdir64(dirp) }
}

/// `closedir(3)`.
///
/// # Safety
/// As `closedir(3)`.
#[no_mangle]
pub unsafe extern "C" fn closedir(dirp: *mut libc::DIR) -> c_int {
    let Some(ds) = ours(dirp) else {
        // SAFETY: the program's argument passed on.
        return unsafe { real::closedir()(dirp) };
    };
    STATE.write().dirs.remove(&(dirp as usize));
    DIRS.fetch_sub(1, Ordering::AcqRel);
    let fd = ds.lock().fd;
    drop(ds);
    crate::Ret::ret(serve(|| close_fd(fd)))
}

/// `dirfd(3)`.
///
/// # Safety
/// As `dirfd(3)`.
#[no_mangle]
pub unsafe extern "C" fn dirfd(dirp: *mut libc::DIR) -> c_int {
    match ours(dirp) {
        Some(ds) => ds.lock().fd,
        // SAFETY: the program's argument passed on.
        None => unsafe { real::dirfd()(dirp) },
    }
}

/// `rewinddir(3)`: the listing is read again.
///
/// # Safety
/// As `rewinddir(3)`.
#[no_mangle]
pub unsafe extern "C" fn rewinddir(dirp: *mut libc::DIR) {
    let Some(ds) = ours(dirp) else {
        // SAFETY: the program's argument passed on.
        return unsafe { real::rewinddir()(dirp) };
    };
    let mut d = ds.lock();
    let open = d.open.clone();
    if let Ok(es) = serve(|| listing(&open)) {
        d.entries = es;
    }
    d.pos = 0;
}

/// `telldir(3)`.
///
/// # Safety
/// As `telldir(3)`.
#[no_mangle]
pub unsafe extern "C" fn telldir(dirp: *mut libc::DIR) -> c_long {
    match ours(dirp) {
        Some(ds) => ds.lock().pos as c_long,
        // SAFETY: the program's argument passed on.
        None => unsafe { real::telldir()(dirp) },
    }
}

/// `seekdir(3)`.
///
/// # Safety
/// As `seekdir(3)`.
#[no_mangle]
pub unsafe extern "C" fn seekdir(dirp: *mut libc::DIR, pos: c_long) {
    match ours(dirp) {
        Some(ds) => ds.lock().pos = pos.max(0) as usize,
        // SAFETY: the program's argument passed on.
        None => unsafe { real::seekdir()(dirp, pos) },
    }
}
