//! The process's connection to `serve`: made at the first call under the prefix.
//!
//! UCX does not survive `fork`: a child inherits the parent's UCX state without the thread
//! that serves its events, and cannot connect. So a process with nothing open on its
//! connection (no served descriptor or directory stream) closes it just before it forks;
//! the parent connects again at its next call under the prefix, and the child makes its own.
//! A process that forks while it holds served files keeps its connection (its opens and
//! record locks live on it), and the child cannot reach the store: its calls under the
//! prefix fail with `ENOTCONN` and one line on stderr. `exec` starts afresh either way.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use switchyard_remote::{Client, Key};
use switchyard_store::{Errno, Inodes};

use crate::state::Open;

/// Where the server is and the key that proves the right to use it.
struct Target {
    addr: Result<SocketAddr, String>,
    key: PathBuf,
}

static TARGET: OnceLock<Target> = OnceLock::new();

/// Which connection is this process's: 1 at start, one more in each child after `fork`.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// The connection, with the generation it was made in.
static CONN: Mutex<Option<(u64, Arc<Client>)>> = Mutex::new(None);

/// Whether the failure to connect was reported (once per process).
static WARNED: AtomicBool = AtomicBool::new(false);

/// Whether the connection was kept across the last `fork` (it had files open).
static KEPT_AT_FORK: AtomicBool = AtomicBool::new(false);

/// Whether this process is a child forked while its parent's connection had files open.
static STRANDED: AtomicBool = AtomicBool::new(false);

/// Reads `SWITCHYARD_SERVER` and `SWITCHYARD_KEY`.
pub fn init() {
    let server = std::env::var("SWITCHYARD_SERVER").unwrap_or_else(|_| "127.0.0.1:7070".into());
    let addr = server
        .to_socket_addrs()
        .map_err(|e| e.to_string())
        .and_then(|mut a| a.next().ok_or_else(|| "no address".to_string()))
        .map_err(|e| format!("SWITCHYARD_SERVER={server}: {e}"));
    let key = std::env::var_os("SWITCHYARD_KEY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("switchyard.store.key"));
    // Relative to where the program started, not wherever it is when it first connects.
    let key = std::path::absolute(&key).unwrap_or(key);
    let _ = TARGET.set(Target { addr, key });
}

/// The current generation.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// The owner the server's record locks are held for: this process.
pub fn lock_owner() -> u64 {
    // SAFETY: getpid has no preconditions.
    u64::from(unsafe { libc::getpid() } as u32)
}

/// The connection, made now if this process has none. A failure is reported on stderr once
/// and fails the call with `ENOTCONN`.
pub fn client() -> Result<Arc<Client>, Errno> {
    let generation = generation();
    if STRANDED.load(Ordering::Relaxed) {
        warn(&format!(
            "this process was forked while its parent had files under {} open, and UCX cannot \
             be used in such a child (exec a program instead)",
            crate::route::prefix_display()
        ));
        return Err(Errno(libc::ENOTCONN));
    }
    let mut conn = CONN.lock();
    if let Some((g, c)) = conn.as_ref() {
        if *g == generation {
            return Ok(c.clone());
        }
    }
    // The parent's connection: its endpoints are the parent's; dropping them here could
    // disturb it, so the child leaves them be.
    if let Some(old) = conn.take() {
        std::mem::forget(old);
    }
    let c = Arc::new(connect().map_err(|why| {
        warn(&format!("cannot reach the store: {why}"));
        Errno(libc::ENOTCONN)
    })?);
    *conn = Some((generation, c.clone()));
    Ok(c)
}

/// One line on stderr, the first time only.
fn warn(why: &str) {
    if !WARNED.swap(true, Ordering::Relaxed) {
        let line = format!("switchyard preload: {why}\n");
        // SAFETY: writing a buffer we own to stderr with libc's write.
        unsafe { crate::real::write()(2, line.as_ptr().cast(), line.len()) };
    }
}

fn connect() -> Result<Client, String> {
    let t = TARGET.get().ok_or("not set up")?;
    let addr = t.addr.clone()?;
    let key = Key::load(&t.key).map_err(|e| format!("key {}: {e}", t.key.display()))?;
    let c = match Client::connect(addr, &key, true) {
        Ok(c) => c,
        Err(e) if e.0.contains("read-only") => {
            Client::connect(addr, &key, false).map_err(|e| format!("{addr}: {e}"))?
        }
        Err(e) => return Err(format!("{addr}: {e}")),
    };
    // Absolute symlink targets the program wrote name paths under the prefix.
    if let Some(prefix) = crate::route::prefix() {
        c.set_link_root(prefix);
    }
    Ok(c)
}

/// The connection, with `open`'s inode open on it (a child after `fork` opens its inherited
/// descriptors' inodes on its own connection at their first use).
pub fn for_open(open: &Open) -> Result<Arc<Client>, Errno> {
    let c = client()?;
    let generation = generation();
    if open.generation.load(Ordering::Acquire) != generation {
        c.open(open.ino)?;
        open.generation.store(generation, Ordering::Release);
    }
    Ok(c)
}

/// Holds the connection's lock across `fork`; closes the connection first when nothing is
/// open on it (`idle`).
pub fn lock_for_fork(idle: bool) {
    let mut conn = CONN.lock();
    if idle {
        if let Some((_, c)) = conn.take() {
            let _ = crate::serve(|| {
                drop(c);
                Ok(())
            });
        }
    }
    KEPT_AT_FORK.store(conn.is_some(), Ordering::Relaxed);
    std::mem::forget(conn);
}

/// Lets go of the lock [`lock_for_fork`] took; in the child, starts a new generation.
pub fn unlock_after_fork(child: bool) {
    if child {
        GENERATION.fetch_add(1, Ordering::AcqRel);
        if KEPT_AT_FORK.load(Ordering::Relaxed) {
            STRANDED.store(true, Ordering::Relaxed);
        }
    }
    // SAFETY: `lock_for_fork` locked it in this thread and forgot the guard.
    unsafe { CONN.force_unlock() };
}
