//! Programs under the preload library syncing a served store that lives in a file on a disk
//! file system: each sync call (and each write of an `O_SYNC` or `O_DSYNC` open) must leave
//! no page of the store file dirty in the server's mapping (this test process serves it, so
//! the mapping is in `/proc/self/smaps`) when it returns. The server syncs on its own only
//! once an hour, so a clean mapping is the call's doing.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::Served;
use switchyard_media::{Persist, Region};
use switchyard_mover::{Config, Mover};
use switchyard_store::{Owner, Store, SyncPolicy};

/// A mapping this dirty after a sync returned failed to write the store back.
const CLEAN_KB: u64 = 1024;

/// Without a sync, 32 MiB of new data leaves at least this much of the mapping dirty.
const DIRTY_KB: u64 = 8 * 1024;

/// Whether `dir` lies on tmpfs or ramfs, where a store has no disk to sync to.
fn in_memory(dir: &Path) -> bool {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statfs is plain data, filled by the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable statfs.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
    matches!(st.f_type as i64, 0x0102_1994 | 0x8584_58f6)
}

/// Kilobytes of this process's mappings of `file` that are dirty.
fn dirty_kb(file: &Path) -> u64 {
    switchyard_media::dirty_kb(std::process::id(), file).expect("the store is mapped")
}

/// A 512 MiB store (sparse) in the file `s.store` of the served directory, syncing on its own
/// once an hour (and when it runs short of blocks, which this one does not); `None` (said on
/// stderr) where the temporary directory is in memory.
fn served_on_disk() -> Option<(Served, PathBuf)> {
    let s = Served::start_with(|dir| {
        let region = Region::create(dir.join("s.store"), 512 << 20, Persist::detect()).unwrap();
        let mover = Arc::new(Mover::start(&Config::default()).unwrap());
        let store = Store::format(region, mover, Owner::current()).unwrap();
        store
            .set_sync_policy(SyncPolicy::Interval(Duration::from_secs(3600)))
            .unwrap();
        store
    });
    if in_memory(s.dir.path()) {
        eprintln!("skipped: the temporary directory is in memory: nothing to sync");
        return None;
    }
    let store = std::fs::canonicalize(s.dir.path().join("s.store")).unwrap();
    Some((s, store))
}

/// Syncs through calls `dd` and `sync` do not make: `synced pwritev2 FILE` writes 32 MiB with
/// `pwritev2(RWF_DSYNC)`, `synced range FILE` calls `sync_file_range` on it.
fn program(dir: &Path) -> PathBuf {
    const SRC: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
static char buf[1 << 20];
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    if (strcmp(argv[1], "pwritev2") == 0) {
        int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) { perror("open"); return 1; }
        memset(buf, 7, sizeof buf);
        struct iovec v = { buf, sizeof buf };
        for (int i = 0; i < 32; i++)
            if (pwritev2(fd, &v, 1, (off_t)i << 20, RWF_DSYNC) != (ssize_t)sizeof buf) {
                perror("pwritev2");
                return 1;
            }
        return close(fd);
    }
    int fd = open(argv[2], O_RDONLY);
    if (fd < 0) { perror("open"); return 1; }
    if (sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                  SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
        perror("sync_file_range");
        return 1;
    }
    return close(fd);
}
"#;
    let (src, exe) = (dir.join("synced.c"), dir.join("synced"));
    std::fs::write(&src, SRC).unwrap();
    let ok = std::process::Command::new("cc")
        .args(["-O1", "-Wall", "-Werror"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(ok.success());
    exe
}

#[test]
fn every_sync_call_and_o_sync_write_returns_with_the_store_file_written_back() {
    let Some((s, store)) = served_on_disk() else {
        return;
    };
    let host = s.dir.path().join("src");
    std::fs::write(
        &host,
        (0..32u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let dd = |to: &str, flags: &[&str]| {
        let mut args = vec![
            format!("if={}", host.display()),
            format!("of={}", s.path(to)),
            "bs=1M".into(),
            "status=none".into(),
        ];
        args.extend(flags.iter().map(|f| f.to_string()));
        s.run("dd", &args.iter().map(String::as_str).collect::<Vec<_>>());
    };
    let dirty = |what: &str| {
        let kb = dirty_kb(&store);
        assert!(
            kb >= DIRTY_KB,
            "{what}: only {kb} kB of the store file dirty: the measure sees nothing"
        );
    };
    let clean = |what: &str| {
        let kb = dirty_kb(&store);
        assert!(
            kb < CLEAN_KB,
            "{kb} kB of the store file dirty after {what}"
        );
    };
    // Calls that sync on their own.
    for (name, flags) in [
        ("fsync", "conv=fsync"),
        ("fdatasync", "conv=fdatasync"),
        ("o_sync", "oflag=sync"),
        ("o_dsync", "oflag=dsync"),
    ] {
        dd("plain", &[]);
        dirty("a write without sync");
        dd(name, &[flags]);
        clean(&format!("`dd {flags}`"));
    }
    let c = program(s.dir.path());
    let run_c = |mode: &str| {
        s.run(c.to_str().unwrap(), &[mode, &s.path("c")]);
    };
    dd("plain", &[]);
    dirty("a write without sync");
    run_c("pwritev2");
    clean("pwritev2 with RWF_DSYNC");
    dd("plain", &[]);
    dirty("a write without sync");
    run_c("range");
    clean("sync_file_range");
    // Syncs of the whole store: `sync -f FILE` (syncfs), `sync` (sync), `sync FILE` (fsync).
    for args in [&["-f", "PATH"][..], &[][..], &["PATH"][..]] {
        dd("plain", &[]);
        dirty("a write without sync");
        let p = s.path("plain");
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == "PATH" { p.as_str() } else { a })
            .collect();
        s.run("sync", &args);
        clean(&format!("`sync {}`", args.join(" ")));
    }
    // What was written reads back.
    let want = std::fs::read(&host).unwrap();
    for name in ["fsync", "o_dsync", "plain"] {
        let out = s.run("cat", &[&s.path(name)]);
        assert!(out.stdout == want, "{name} does not read back");
    }
}
