//! The calls programs make, one by one, from a C program under the preload library
//! (`tests/c/calls.c`): results as Linux gives them on a local file system, record locks that
//! keep another process out, fork and exec as documented, refusals that say so, and paths
//! outside the prefix left to libc.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::Served;

/// `tests/c/calls.c`, built for large files as distributions build programs (so it calls
/// `open64`, `mmap64` and the rest).
fn program(dir: &Path) -> PathBuf {
    let exe = dir.join("calls");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/calls.c");
    let ok = Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-D_FILE_OFFSET_BITS=64"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(ok.success());
    exe
}

#[test]
fn every_call_behaves_as_on_a_local_file_system() {
    let s = Served::start(64);
    let exe = program(s.dir.path());
    let out = s.run(exe.to_str().unwrap(), &["calls", &s.prefix]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "calls ok\n");
    // Each refusal named its call, once.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a shared mmap is not supported"), "{err}");
    assert!(err.contains("flock is not supported"), "{err}");
    assert_eq!(err.lines().count(), 2, "{err}");
}

#[test]
fn a_record_lock_keeps_another_process_out() {
    let s = Served::start(32);
    let exe = program(s.dir.path());
    let file = s.path("locked");
    let mut holder = s
        .command(exe.to_str().unwrap())
        .args(["lock", &file])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "locked\n");
    let out = s.run(exe.to_str().unwrap(), &["trylock", &file]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("held by {}\n", holder.id())
    );
    // The holder closes another descriptor of the file: its lock goes (POSIX).
    holder.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let mut out = BufReader::new(holder.stdout.take().unwrap());
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "released\n");
    let free = s.run(exe.to_str().unwrap(), &["canlock", &file]);
    assert_eq!(String::from_utf8_lossy(&free.stdout), "free\n");
    holder.stdin.as_mut().unwrap().write_all(b"end\n").unwrap();
    assert!(holder.wait().unwrap().success());
    // A lock also goes with its process.
    let mut holder = s
        .command(exe.to_str().unwrap())
        .args(["lock", &file])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    line.clear();
    BufReader::new(holder.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "locked\n");
    holder.kill().unwrap();
    holder.wait().unwrap();
    let again = s.run(exe.to_str().unwrap(), &["canlock", &file]);
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        "free\n",
        "the lock outlived its process"
    );
}

/// Two processes each holding a byte the other waits for: one wait is refused with
/// `EDEADLK` (the server sees both waiters), and once that process lets go the other's wait
/// ends with the lock. Without the check both waited for good.
#[test]
fn a_wait_that_would_deadlock_two_processes_is_refused() {
    let s = Served::start(32);
    let exe = program(s.dir.path());
    let out = s.run(exe.to_str().unwrap(), &["deadlock", &s.path("pair")]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "deadlock ok\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn fork_and_exec_do_what_the_docs_say() {
    let s = Served::start(32);
    let exe = program(s.dir.path());
    let out = s.run(exe.to_str().unwrap(), &["fork", &s.prefix]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "fork ok\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("UCX cannot be used in such a child"));
    let out = s.run(exe.to_str().unwrap(), &["exec", &s.prefix]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("exec ok"));
    let out = s.run(exe.to_str().unwrap(), &["spawn", &s.prefix]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("spawn ok"));
}

#[test]
fn paths_outside_the_prefix_go_to_libc_even_without_a_server() {
    let s = Served::start(16);
    let host = s.dir.path().join("host.txt");
    std::fs::write(&host, b"host bytes").unwrap();
    let mut cmd = s.command("cat");
    cmd.env("SWITCHYARD_SERVER", "127.0.0.1:1");
    let out = cmd.arg(&host).output().unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, b"host bytes");
    assert!(out.stderr.is_empty());
    // Under the prefix, the call fails and says why, once.
    let mut cmd = s.command("cat");
    cmd.env("SWITCHYARD_SERVER", "127.0.0.1:1");
    let out = cmd.args([s.path("a"), s.path("b")]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("switchyard preload: cannot reach the store")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains("Transport endpoint is not connected"), "{err}");
}
