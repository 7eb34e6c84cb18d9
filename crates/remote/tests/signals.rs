//! The threads a client starts inside a program (UCX's event thread, the client's I/O
//! thread) take none of the program's signals: a program that waits for SIGTERM in a signal
//! thread of its own must still get it. The server runs in a child process (this binary
//! again, see `server_for_the_signal_test`), so that every thread this process starts while
//! it connects is the client's.

mod common;

use std::collections::BTreeSet;
use std::future::Future;
use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::task::{Context, Waker};

use switchyard_mover::Config;
use switchyard_remote::{Client, Key};
use switchyard_store::Fd;

const SERVER_DIR: &str = "SWITCHYARD_TEST_SIGNALS_SERVER";

/// The process's threads.
fn threads() -> BTreeSet<u32> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect()
}

/// The signals thread `tid` blocks.
fn blocked(tid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("SigBlk:")).unwrap();
    u64::from_str_radix(line["SigBlk:".len()..].trim(), 16).unwrap()
}

/// In the child this binary runs for the test below: a server proving the key in the
/// directory named by the environment, its address on stdout, until stdin closes. Passes at
/// once in an ordinary run.
#[test]
fn server_for_the_signal_test() {
    let Some(dir) = std::env::var_os(SERVER_DIR) else {
        return;
    };
    let key = Key::load_or_create(&std::path::Path::new(&dir).join("key")).unwrap();
    let srv = common::start_with_key(false, Config::default(), key);
    println!("listening {}", srv.addr);
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

#[test]
fn threads_the_client_starts_take_no_signal() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "server_for_the_signal_test", "--nocapture"])
        .env(SERVER_DIR, dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(server.stdout.take().unwrap()).lines();
    let addr = lines
        .find_map(|l| l.unwrap().strip_prefix("listening ").map(str::to_owned))
        .expect("the server child said where it listens")
        .parse()
        .unwrap();
    let key = Key::load(&dir.path().join("key")).unwrap();
    let before = threads();
    let c = Client::connect(addr, &key, true).unwrap();
    // An asynchronous call starts the client's I/O thread.
    let mut pending = std::pin::pin!(c.read_async(Fd(999), vec![0u8; 10]));
    let mut cx = Context::from_waker(Waker::noop());
    while pending.as_mut().poll(&mut cx).is_pending() {
        std::thread::yield_now();
    }
    // (Not the harness's thread for the test above, should it start meanwhile.)
    let harness = |tid: &u32| {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
            .is_ok_and(|c| c.starts_with("server_for"))
    };
    let started: Vec<u32> = threads()
        .difference(&before)
        .copied()
        .filter(|t| !harness(t))
        .collect();
    assert!(
        started.len() >= 2,
        "UCX's thread and the I/O thread: {started:?}"
    );
    for tid in started {
        let mask = blocked(tid);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGUSR1] {
            assert_ne!(
                mask & (1 << (sig - 1)),
                0,
                "thread {tid} started by the client takes signal {sig} (SigBlk {mask:x})"
            );
        }
    }
    // The caller's own mask is as it was.
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() } as u32;
    assert_eq!(blocked(me) & (1 << (libc::SIGTERM - 1)), 0);
    drop(c);
    drop(server.stdin.take());
    server.wait().unwrap();
}
