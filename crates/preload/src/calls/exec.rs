//! `exec`: served descriptors a program leaves open across `exec` (those without
//! `FD_CLOEXEC`: a shell's `cmd > /sy/out`) are handed to the new program.
//!
//! Before the new program replaces this one, each such descriptor's reserved number loses its
//! close-on-exec flag (so the number survives), and `SWITCHYARD_PRELOAD_FDS` in the new
//! program's environment names, per number, its open (duplicates share one), the inode, the
//! status flags, the offset, the type and the path; the number itself is then an `O_PATH`
//! descriptor of the page that holds the open's offset (module [`crate::offset`]). The
//! library in the new program adopts them at start (and drops the variable from its
//! environment): each open is opened again on its own connection at first use, its
//! duplicates still sharing one offset, and that offset shared with every process that
//! shares the open. This holds for `execve`, `execv`, `execvp`, `execvpe`, `posix_spawn` and
//! `posix_spawnp`; glibc's variadic `execl` family execs through an internal call this
//! library cannot interpose (and a variadic function cannot be defined in stable Rust):
//! there the served descriptors are closed.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

use libc::{c_char, c_int};

use crate::offset::Offset;
use crate::real;
use crate::state::{self, Open, Slot, STATE};

/// The environment variable the descriptors travel in.
const VAR: &str = "SWITCHYARD_PRELOAD_FDS";

/// The descriptors to hand on: `(number, entry)`, entries as `VAR` spells them. Their offsets
/// move into shared pages first (module `offset`), which the numbers then carry.
fn inherited() -> Vec<(c_int, String)> {
    let st = STATE.read();
    state::share_offsets(&st, |s| !s.cloexec);
    st.fds
        .iter()
        .filter(|(_, s)| !s.cloexec)
        .map(|(&fd, s)| {
            let o = &s.open;
            // Duplicates name one open (one offset): the new program keeps them together.
            let entry = format!(
                "{fd}:{}:{}:{}:{}:{}:{}",
                Arc::as_ptr(o) as usize,
                o.ino,
                o.flags.load(Ordering::Relaxed),
                o.offset.lock().get(),
                o.kind,
                o.path
            );
            (fd, entry)
        })
        .collect()
}

/// The environment `envp` without any old value of the descriptors' variable (a program may
/// pass on the environment it started with), and with `entries` when there are any; and the
/// strings it points into.
///
/// # Safety
/// `envp` is null or a null-terminated array of C strings.
unsafe fn environment(
    envp: *const *const c_char,
    entries: &str,
) -> (Vec<*const c_char>, Vec<CString>) {
    let mut keep = Vec::new();
    let prefix = format!("{VAR}=");
    if !envp.is_null() {
        let mut i = 0;
        loop {
            // SAFETY: a null-terminated array by the caller's contract.
            let p = unsafe { *envp.add(i) };
            if p.is_null() {
                break;
            }
            // SAFETY: each entry is a C string.
            if !unsafe { CStr::from_ptr(p) }
                .to_bytes()
                .starts_with(prefix.as_bytes())
            {
                keep.push(p);
            }
            i += 1;
        }
    }
    let mut own = Vec::new();
    if !entries.is_empty() {
        own.push(CString::new(format!("{prefix}{entries}")).expect("no NUL in the entries"));
        keep.push(own[0].as_ptr());
    }
    keep.push(std::ptr::null());
    (keep, own)
}

/// Runs `exec` (one of libc's, given the environment to use) with the served descriptors
/// handed on; restores their close-on-exec flags if it returns (it failed).
fn with_handoff(
    envp: *const *const c_char,
    exec: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    if crate::inside() {
        return exec(envp);
    }
    let fds = inherited();
    let entries: Vec<&str> = fds.iter().map(|(_, e)| e.as_str()).collect();
    // SAFETY: the program's environment (or `environ`), a null-terminated array.
    let (env, _strings) = unsafe { environment(envp, &entries.join(";")) };
    for (n, _) in &fds {
        // SAFETY: our reserved descriptor.
        unsafe { real::fcntl64()(*n, libc::F_SETFD, 0) };
    }
    let r = exec(env.as_ptr());
    let errno = std::io::Error::last_os_error();
    for (n, _) in &fds {
        // SAFETY: as above.
        unsafe { real::fcntl64()(*n, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    crate::set_errno(switchyard_store::Errno(
        errno.raw_os_error().unwrap_or(libc::ENOEXEC),
    ));
    r
}

extern "C" {
    static environ: *const *const c_char;
}

/// `posix_spawn(3)` and `posix_spawnp(3)`: the descriptors handed on as for `execve`; the
/// spawn's file actions apply after (a number they close or replace is no longer a
/// reservation, and the new program leaves it alone). Returns an error number, as they do.
fn spawn_with_handoff(
    envp: *const *const c_char,
    spawn: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    let saved = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let r = with_handoff(envp, spawn);
    crate::set_errno(switchyard_store::Errno(saved));
    r
}

/// `posix_spawn(3)`.
///
/// # Safety
/// As `posix_spawn(3)`.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    spawn_with_handoff(envp.cast(), |env| {
        // SAFETY: the program's arguments, with an environment built from its own.
        unsafe { real::posix_spawn()(pid, path, actions, attr, argv, env.cast()) }
    })
}

/// `posix_spawnp(3)`.
///
/// # Safety
/// As `posix_spawnp(3)`.
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    spawn_with_handoff(envp.cast(), |env| {
        // SAFETY: the program's arguments, with an environment built from its own.
        unsafe { real::posix_spawnp()(pid, file, actions, attr, argv, env.cast()) }
    })
}

/// The process's environment.
fn current() -> *const *const c_char {
    // SAFETY: reading libc's `environ` pointer (not what it points to).
    unsafe { environ }
}

/// `execve(2)`.
///
/// # Safety
/// As `execve(2)`.
#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the program's arguments, with an environment built from its own.
    with_handoff(envp, |env| unsafe { real::execve()(path, argv, env) })
}

/// `execv(3)`.
///
/// # Safety
/// As `execv(3)`.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as execve, with the process's environment.
    with_handoff(current(), |env| unsafe { real::execve()(path, argv, env) })
}

/// `execvpe(3)` (libc searches `PATH`).
///
/// # Safety
/// As `execvpe(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the program's arguments, with an environment built from its own.
    with_handoff(envp, |env| unsafe { real::execvpe()(file, argv, env) })
}

/// `execvp(3)`.
///
/// # Safety
/// As `execvp(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as execvpe, with the process's environment.
    with_handoff(current(), |env| unsafe { real::execvpe()(file, argv, env) })
}

/// Whether `fd` is a reservation: an `O_PATH` descriptor of `/dev/null`, or of a page that
/// holds an offset (module `offset`).
fn reserved(fd: c_int) -> bool {
    // SAFETY: fcntl on a number.
    let fl = unsafe { real::fcntl64()(fd, libc::F_GETFL) };
    if fl < 0 || fl & libc::O_PATH == 0 {
        return false;
    }
    std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok_and(|l| {
        let l = l.to_string_lossy();
        l == "/dev/null" || l.starts_with("/memfd:switchyard-offset")
    })
}

/// `vfork(2)`, as `fork`: a `vfork` child shares its parent's memory, so its `dup2`, `close`
/// and `exec` would change the parent's table of served descriptors (and allocate while the
/// parent's other threads may too). POSIX lets `vfork` be `fork`; the child then has a table
/// of its own. (Python's `subprocess` uses `vfork`.)
///
/// # Safety
/// As `vfork(2)`: the child only calls `exec` or `_exit` (with `fork` it could do more).
#[no_mangle]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    // SAFETY: fork has no preconditions; its handlers keep this library's locks consistent.
    unsafe { libc::fork() }
}

/// At start: adopts the descriptors a program handed on across `exec`.
pub fn adopt() {
    let Some(list) = std::env::var_os(VAR) else {
        return;
    };
    // The variable was for this program only.
    let name = CString::new(VAR).expect("no NUL");
    // SAFETY: a NUL-terminated name; at start, before the program's threads.
    unsafe { libc::unsetenv(name.as_ptr()) };
    let mut opens: HashMap<u64, Arc<Open>> = HashMap::new();
    for entry in list.to_string_lossy().split(';') {
        let mut f = entry.splitn(7, ':');
        let mut num = || f.next().and_then(|v| v.parse::<u64>().ok());
        let (Some(fd), Some(group), Some(ino), Some(flags), Some(offset), Some(kind)) =
            (num(), num(), num(), num(), num(), num())
        else {
            continue;
        };
        let Some(path) = f.next() else { continue };
        let fd = fd as c_int;
        // The number must still be a reservation the old program left open.
        if !(0..state::MAX_FD).contains(&fd) || !reserved(fd) {
            continue;
        }
        // SAFETY: fcntl on a number, with no pointers.
        unsafe { real::fcntl64()(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        let open = opens
            .entry(group)
            .or_insert_with(|| {
                Arc::new(Open {
                    ino,
                    path: path.to_string(),
                    kind: kind as u32,
                    flags: AtomicI32::new(flags as c_int),
                    offset: Offset::adopt(fd).unwrap_or_else(|| Offset::new(offset)),
                    // No connection yet: the first use opens the inode on this program's.
                    generation: AtomicU64::new(0),
                })
            })
            .clone();
        state::insert(
            fd,
            Slot {
                open,
                cloexec: false,
            },
        );
        crate::stdio::rebind_standard(fd);
    }
}
