//! The C API on a store file on a disk file system, in this process: `sy_fsync`, `sy_sync`,
//! the writes of an `O_SYNC` or `O_DSYNC` descriptor and a configuration's `sync = "always"`
//! each return with no page of the store file dirty in this process's mapping of it
//! (`/proc/self/smaps`). The stores here sync on their own only once an hour otherwise, so a
//! clean mapping is the call's doing.

use std::ffi::CString;
use std::path::Path;
use std::ptr::null_mut;

use switchyard::store::*;

/// A mapping this dirty after a sync returned failed to write the store back.
const CLEAN_KB: u64 = 1024;

/// Without a sync, 32 MiB of new data leaves at least this much of the mapping dirty.
const DIRTY_KB: u64 = 8 * 1024;

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// Whether `dir` lies on tmpfs or ramfs, where a store has no disk to sync to.
fn in_memory(dir: &Path) -> bool {
    let p = c(dir.to_str().unwrap());
    // SAFETY: statfs is plain data, filled by the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable statfs.
    assert_eq!(unsafe { libc::statfs(p.as_ptr(), &mut st) }, 0);
    matches!(st.f_type as i64, 0x0102_1994 | 0x8584_58f6)
}

/// Kilobytes of this process's mappings of `file` that are dirty.
fn dirty_kb(file: &Path) -> u64 {
    switchyard_media::dirty_kb(std::process::id(), file).expect("the store is mapped")
}

/// A new 256 MiB store at `path` with the configuration `toml`.
fn create(path: &Path, toml: &str) -> *mut sy_store {
    let config = path.with_extension("toml");
    std::fs::write(&config, toml).unwrap();
    let (p, cfg) = (c(path.to_str().unwrap()), c(config.to_str().unwrap()));
    let mut s = null_mut();
    // SAFETY: valid strings and out pointer.
    let r = unsafe { sy_store_create(p.as_ptr(), 256 << 20, cfg.as_ptr(), &mut s) };
    assert_eq!(r, 0, "sy_store_create");
    s
}

/// Opens `name` with `flags` (and `O_CREAT | O_TRUNC | O_WRONLY`).
fn open(s: *mut sy_store, name: &str, flags: i32) -> i32 {
    let p = c(name);
    // SAFETY: a live store and a valid string.
    let fd = unsafe {
        sy_open(
            s,
            p.as_ptr(),
            libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY | flags,
            0o644,
        )
    };
    assert!(fd >= 0, "sy_open {name}: {fd}");
    fd
}

/// Writes 32 MiB to `fd` in 1 MiB `sy_write`s.
fn write_32m(s: *mut sy_store, fd: i32) {
    let buf: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + 3) as u8).collect();
    for _ in 0..32 {
        // SAFETY: a live store and a readable buffer.
        let n = unsafe { sy_write(s, fd, buf.as_ptr().cast(), buf.len()) };
        assert_eq!(n, buf.len() as i64);
    }
}

/// A file of 32 MiB written without a sync: the mapping is dirty.
fn dirty_file(s: *mut sy_store, store: &Path, name: &str) {
    let fd = open(s, name, 0);
    write_32m(s, fd);
    let kb = dirty_kb(store);
    assert!(
        kb >= DIRTY_KB,
        "only {kb} kB dirty after 32 MiB: the measure sees nothing"
    );
    // SAFETY: a live store.
    assert_eq!(unsafe { sy_close(s, fd) }, 0);
}

fn assert_clean(store: &Path, after: &str) {
    let kb = dirty_kb(store);
    assert!(
        kb < CLEAN_KB,
        "{kb} kB of the store file dirty after {after} returned"
    );
}

#[test]
fn sy_fsync_sy_sync_and_o_sync_writes_return_with_the_store_file_written_back() {
    let dir = tempfile::tempdir().unwrap();
    if in_memory(dir.path()) {
        eprintln!("skipped: the temporary directory is in memory: nothing to sync");
        return;
    }
    let store = dir.path().join("s.store");
    let s = create(&store, "[store]\nsync_interval_ms = 3600000\n");

    let fd = open(s, "/f", 0);
    write_32m(s, fd);
    assert!(dirty_kb(&store) >= DIRTY_KB);
    // SAFETY: a live store.
    assert_eq!(unsafe { sy_fsync(s, fd) }, 0);
    assert_clean(&store, "sy_fsync");
    // SAFETY: a live store.
    assert_eq!(unsafe { sy_close(s, fd) }, 0);

    dirty_file(s, &store, "/g");
    // SAFETY: a live store.
    assert_eq!(unsafe { sy_sync(s) }, 0);
    assert_clean(&store, "sy_sync");

    for flag in [libc::O_SYNC, libc::O_DSYNC] {
        dirty_file(s, &store, "/plain");
        let fd = open(s, "/synced", flag);
        write_32m(s, fd);
        assert_clean(&store, "writes of an O_SYNC or O_DSYNC descriptor");
        // SAFETY: a live store.
        assert_eq!(unsafe { sy_close(s, fd) }, 0);
    }
    // SAFETY: a live store; null is refused, a closed store too.
    unsafe {
        assert_eq!(sy_sync(std::ptr::null()), -libc::EFAULT);
        assert_eq!(sy_store_close(s), 0);
        assert_eq!(sy_sync(s), -libc::EBADF);
    }
}

#[test]
fn a_configuration_that_syncs_always_leaves_nothing_dirty() {
    let dir = tempfile::tempdir().unwrap();
    if in_memory(dir.path()) {
        eprintln!("skipped: the temporary directory is in memory: nothing to sync");
        return;
    }
    let store = dir.path().join("s.store");
    let s = create(&store, "[store]\nsync = \"always\"\n");
    let fd = open(s, "/f", 0);
    write_32m(s, fd);
    assert_clean(&store, "plain writes");
    // SAFETY: a live store.
    unsafe {
        assert_eq!(sy_close(s, fd), 0);
        assert_eq!(sy_store_close(s), 0);
    }
}
