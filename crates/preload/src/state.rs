//! The process's served descriptors, directory streams, streams and working directory.
//!
//! Lock rule: no call to the server is made while [`STATE`] is locked (the server's client
//! does libc calls of its own, and `fork` takes this lock), so each function here copies out
//! what it needs and lets go.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use libc::c_int;
use parking_lot::{Mutex, RwLock};
use switchyard_store::Inodes;

use crate::dirs::DirStream;
use crate::offset::Offset;
use crate::{conn, inside, serve};

/// One open of a served file: what the kernel calls an open file description, shared by the
/// descriptors `dup` makes.
pub struct Open {
    /// The inode.
    pub ino: u64,
    /// Its path in the store when opened (for `fchdir` and paths relative to a directory).
    pub path: String,
    /// Its type bits.
    pub kind: u32,
    /// The status flags `F_GETFL` reports (access mode, `O_APPEND`, `O_NONBLOCK`, …).
    pub flags: AtomicI32,
    /// The file offset (shared with other processes once forked or handed on).
    pub offset: Offset,
    /// The connection the inode is open on ([`conn::generation`]); a child after `fork`
    /// opens it again on its own.
    pub generation: AtomicU64,
}

impl Open {
    /// Whether the access mode allows reading.
    pub fn readable(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & libc::O_ACCMODE != libc::O_WRONLY
    }

    /// Whether the access mode allows writing.
    pub fn writable(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & libc::O_ACCMODE != libc::O_RDONLY
    }

    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == switchyard_store::S_IFDIR
    }
}

impl Drop for Open {
    /// The last descriptor of the open is gone: the server may let an unlinked file go.
    fn drop(&mut self) {
        if self.generation.load(Ordering::Relaxed) != conn::generation() {
            return;
        }
        let ino = self.ino;
        let _ = serve(|| conn::client()?.release(ino));
    }
}

/// A descriptor number's view of an open.
pub struct Slot {
    /// The open it names.
    pub open: Arc<Open>,
    /// `FD_CLOEXEC` as the program set it (the reserved kernel descriptor always has it).
    pub cloexec: bool,
}

/// Everything the library tracks.
#[derive(Default)]
pub struct State {
    /// Served descriptors by number.
    pub fds: HashMap<c_int, Slot>,
    /// Directory streams by the `DIR *` handed out.
    pub dirs: HashMap<usize, Arc<Mutex<DirStream>>>,
    /// Streams over served descriptors by the `FILE *` handed out.
    pub files: HashMap<usize, c_int>,
    /// The working directory in the store, while the program's is under the prefix.
    pub cwd: Option<String>,
    /// Inodes this process has set a record lock on (since it last dropped its locks there):
    /// a close of another file costs no request to the server.
    pub locked: std::collections::HashSet<u64>,
}

/// The state, behind one lock.
pub static STATE: LazyLock<RwLock<State>> = LazyLock::new(RwLock::default);

/// Served descriptor numbers below [`MAX_FD`], one bit each, read without a lock so the
/// program's own descriptors go to libc at the cost of one load.
static SERVED: [AtomicU64; MAX_FD as usize / 64] =
    [const { AtomicU64::new(0) }; MAX_FD as usize / 64];

/// Served descriptors are numbered below this; a reservation above it is refused (`EMFILE`).
pub const MAX_FD: c_int = 1 << 16;

/// Open directory streams and streams (0: nothing to look up).
pub static DIRS: AtomicUsize = AtomicUsize::new(0);
/// Open streams over served descriptors.
pub static FILES: AtomicUsize = AtomicUsize::new(0);

fn bit(fd: c_int) -> (usize, u64) {
    (fd as usize / 64, 1 << (fd as usize % 64))
}

/// The open a served descriptor names; `None` for the program's own descriptors and for
/// calls the library makes itself.
pub fn get(fd: c_int) -> Option<Arc<Open>> {
    if inside() {
        return None;
    }
    served(fd)
}

/// The open a served descriptor names, for the library itself.
pub fn served(fd: c_int) -> Option<Arc<Open>> {
    if !(0..MAX_FD).contains(&fd) {
        return None;
    }
    let (w, b) = bit(fd);
    if SERVED[w].load(Ordering::Acquire) & b == 0 {
        return None;
    }
    STATE.read().fds.get(&fd).map(|s| s.open.clone())
}

/// Serves `fd` with `slot`; returns the open it served before, if any.
pub fn insert(fd: c_int, slot: Slot) -> Option<Arc<Open>> {
    let (w, b) = bit(fd);
    let mut st = STATE.write();
    SERVED[w].fetch_or(b, Ordering::AcqRel);
    st.fds.insert(fd, slot).map(|s| s.open)
}

/// Stops serving `fd`; returns its open.
pub fn remove(fd: c_int) -> Option<Arc<Open>> {
    if !(0..MAX_FD).contains(&fd) {
        return None;
    }
    let (w, b) = bit(fd);
    let mut st = STATE.write();
    SERVED[w].fetch_and(!b, Ordering::AcqRel);
    st.fds.remove(&fd).map(|s| s.open)
}

/// The store path of a served directory descriptor (for `*at` calls).
pub fn dir_path(fd: c_int) -> Option<String> {
    get(fd).filter(|o| o.is_dir()).map(|o| o.path.clone())
}

/// `fork` is about to copy the process: hold the locks so the child finds them free and
/// consistent, and let the connection go if nothing is open on it (see [`conn`]).
pub extern "C" fn before_fork() {
    let st = STATE.write();
    let idle = st.fds.is_empty() && st.dirs.is_empty();
    // Parent and child share each open's offset from now on (module `offset`).
    share_offsets(&st, |_| true);
    std::mem::forget(st);
    conn::lock_for_fork(idle);
}

/// Moves the offsets of the opens `which` picks into shared pages (module `offset`), and
/// reserves their descriptor numbers with the pages' memfds, which carry them across `exec`.
pub fn share_offsets(st: &State, which: impl Fn(&Slot) -> bool) {
    for s in st.fds.values().filter(|s| which(s)) {
        let Some(page) = s.open.offset.share() else {
            continue;
        };
        for (&n, other) in &st.fds {
            if Arc::ptr_eq(&other.open, &s.open) {
                // SAFETY: replacing our reservation at `n` with another of the same open, in
                // one step (the number is never free).
                unsafe { crate::real::dup3()(page, n, libc::O_CLOEXEC) };
            }
        }
        // SAFETY: the descriptor `share` made for this.
        unsafe { crate::real::close()(page) };
    }
}

/// Back in the parent after `fork`.
pub extern "C" fn after_fork_parent() {
    conn::unlock_after_fork(false);
    // SAFETY: `before_fork` took the write lock in this thread and forgot its guard.
    unsafe { STATE.force_unlock_write() };
}

/// In the child after `fork`: it has a copy of every descriptor but no connection.
pub extern "C" fn after_fork_child() {
    conn::unlock_after_fork(true);
    // SAFETY: as in the parent: the fork copied the lock held by this thread.
    unsafe { STATE.force_unlock_write() };
    // Record locks are not inherited (POSIX).
    STATE.write().locked.clear();
}

/// Notes that this process set a record lock on `ino`.
pub fn note_lock(ino: u64) {
    STATE.write().locked.insert(ino);
}

/// Releases the process's record locks on the open's inode (any close of the file does, as
/// POSIX says), if it set any there.
pub fn release_locks(open: &Open) {
    if open.generation.load(Ordering::Relaxed) != conn::generation() {
        return;
    }
    let ino = open.ino;
    if !STATE.write().locked.remove(&ino) {
        return;
    }
    let _ = serve(|| {
        conn::client()?.release_locks(ino, conn::lock_owner());
        Ok(())
    });
}
