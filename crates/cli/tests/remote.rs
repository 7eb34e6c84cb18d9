//! `switchyard serve` in a process of its own, reached by `cp` and `ls` in others: files
//! round-trip, a wrong key is refused, and a client or the server killed in the middle of a
//! write leaves the store consistent with every acknowledged write in it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command as Std, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use assert_cmd::Command;
use predicates::str::contains;
use switchyard_bench::remote::network::Namespace;

mod common;

fn sy(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("switchyard").unwrap();
    c.current_dir(dir);
    c
}

/// The address in `serve`'s first line ("serving S on ADDR …").
fn listening_on(out: &mut impl BufRead) -> String {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.split(" on ")
        .nth(1)
        .and_then(|s| s.split([' ', ',']).next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string()
}

/// A running `serve` on a fresh store in `dir`, and the address it listens on.
struct Server {
    child: Child,
    addr: String,
    /// Its standard output, kept open (a closed pipe would kill its last words).
    stdout: BufReader<std::process::ChildStdout>,
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Server {
        sy(dir).args(["mkfs", "--size", "1G"]).assert().success();
        Server::serve(dir, "127.0.0.1:0", extra)
    }

    /// `serve` of the store in `dir`, listening on `listen`.
    fn serve(dir: &Path, listen: &str, extra: &[&str]) -> Server {
        let mut child = Std::cargo_bin("switchyard")
            .unwrap()
            .current_dir(dir)
            .args(["serve", "--listen", listen])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let addr = listening_on(&mut stdout);
        Server {
            child,
            addr,
            stdout,
        }
    }

    fn path(&self, p: &str) -> String {
        format!("{}:{p}", self.addr)
    }

    /// SIGTERM, and what it said on the way out (standard error, then output).
    fn stop(mut self) -> String {
        // SAFETY: signalling a child we started and still own.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let mut said = self.child.wait_with_output_stderr();
        use std::io::Read;
        self.stdout.read_to_string(&mut said).unwrap();
        said
    }
}

trait StderrOutput {
    fn wait_with_output_stderr(&mut self) -> String;
}

impl StderrOutput for Child {
    fn wait_with_output_stderr(&mut self) -> String {
        let status = self.wait().unwrap();
        let mut err = String::new();
        use std::io::Read;
        if let Some(mut e) = self.stderr.take() {
            e.read_to_string(&mut err).unwrap();
        }
        assert!(status.success(), "serve failed: {err}");
        err
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until the served `/big` has some bytes (a `cp` into it is under way).
fn until_writing(dir: &Path, srv: &Server) {
    let t = Instant::now();
    loop {
        let out = sy(dir).args(["ls", &srv.path("/")]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if text
            .lines()
            .any(|l| l.ends_with(" big") && !l.contains(" 0 big"))
        {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "cp never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

#[test]
fn cp_and_ls_reach_a_served_store() {
    let d = tempfile::tempdir().unwrap();
    let srv = Server::start(d.path(), &[]);
    let data = pattern(3 << 20 | 123);
    std::fs::write(d.path().join("in"), &data).unwrap();
    sy(d.path())
        .args(["cp", "in", &srv.path("/f")])
        .assert()
        .success()
        .stdout(contains("data one-sided over"));
    sy(d.path())
        .args(["ls", &srv.path("/")])
        .assert()
        .success()
        .stdout(contains(format!("{} f", data.len())));
    sy(d.path())
        .args(["cp", &srv.path("/f"), "out"])
        .assert()
        .success();
    assert_eq!(std::fs::read(d.path().join("out")).unwrap(), data);
    let said = srv.stop();
    assert!(said.contains("stopping"), "{said}");
    // The store was unmounted cleanly and holds the file.
    sy(d.path())
        .args(["cp", "store:/f", "again"])
        .assert()
        .success();
    assert_eq!(std::fs::read(d.path().join("again")).unwrap(), data);
    sy(d.path()).args(["fsck"]).assert().success();
}

#[test]
fn a_wrong_key_is_refused_and_a_read_only_store_refuses_writes() {
    let d = tempfile::tempdir().unwrap();
    let srv = Server::start(d.path(), &["--read-only"]);
    std::fs::write(d.path().join("other.key"), format!("{}\n", "ab".repeat(32))).unwrap();
    sy(d.path())
        .args(["ls", &srv.path("/"), "--key", "other.key"])
        .assert()
        .failure()
        .stderr(contains("wrong key"));
    std::fs::write(d.path().join("in"), b"x").unwrap();
    sy(d.path())
        .args(["cp", "in", &srv.path("/f")])
        .assert()
        .failure()
        .stderr(contains("read-only"));
    sy(d.path()).args(["ls", &srv.path("/")]).assert().success();
}

/// Whether the store's `/big` holds a prefix of `data` (every acknowledged 1 MiB write of
/// `cp`, in order, and nothing else), read by a fresh `cp` out of the store.
fn holds_a_prefix(dir: &Path, from: &str, data: &[u8]) -> usize {
    sy(dir).args(["cp", from, "back"]).assert().success();
    let back = std::fs::read(dir.join("back")).unwrap();
    assert!(back.len() <= data.len());
    assert!(
        back == data[..back.len()],
        "not a prefix of what was written"
    );
    back.len()
}

/// A FIFO at `dir/in` that `cp` reads from, fed by a thread: `data`'s first `held` bytes at
/// once, the rest only after [`Feed::release`]. A copy from it cannot finish before the test
/// has done what it must do while the copy runs (a kill), however fast the copy is.
struct Feed {
    release: std::sync::mpsc::Sender<()>,
}

impl Feed {
    fn start(dir: &Path, data: &[u8], held: usize) -> Feed {
        let path = dir.join("in");
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let (release, wait) = std::sync::mpsc::channel();
        let data = data.to_vec();
        std::thread::spawn(move || {
            use std::io::Write;
            // Blocks until `cp` opens the other end; a reader that dies makes writes fail
            // (EPIPE), which ends the feed.
            let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            if f.write_all(&data[..held]).is_err() || wait.recv().is_err() {
                return;
            }
            let _ = f.write_all(&data[held..]);
        });
        Feed { release }
    }

    /// Lets the rest of the data through.
    fn release(&self) {
        let _ = self.release.send(());
    }
}

/// `cp` from the FIFO `dir/in` to `to`.
fn cp_from_feed(dir: &Path, to: &str) -> Child {
    Std::cargo_bin("switchyard")
        .unwrap()
        .current_dir(dir)
        .args(["cp", "in", to])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_client_killed_mid_write_leaves_committed_writes_and_nothing_else() {
    let d = tempfile::tempdir().unwrap();
    let srv = Server::start(d.path(), &[]);
    let data = pattern(600 << 20);
    let feed = Feed::start(d.path(), &data, 300 << 20);
    let mut cp = cp_from_feed(d.path(), &srv.path("/big"));
    until_writing(d.path(), &srv);
    cp.kill().unwrap();
    cp.wait().unwrap();
    feed.release();
    let n = holds_a_prefix(d.path(), &srv.path("/big"), &data);
    assert!(n.is_multiple_of(1 << 20), "a torn write: {n} bytes");
    assert!(n <= 300 << 20, "more was written than was fed: {n} bytes");
    let said = srv.stop();
    assert!(said.contains("stopping"), "{said}");
    sy(d.path()).args(["fsck"]).assert().success();
}

#[test]
fn a_server_killed_mid_write_fails_the_client_and_recovers_every_acknowledged_write() {
    let d = tempfile::tempdir().unwrap();
    let mut srv = Server::start(d.path(), &[]);
    let data = pattern(600 << 20);
    // The kill lands while the first half is being copied or after it, never after the
    // whole: the second half waits for the kill.
    let feed = Feed::start(d.path(), &data, 300 << 20);
    let cp = cp_from_feed(d.path(), &srv.path("/big"));
    until_writing(d.path(), &srv);
    srv.child.kill().unwrap();
    srv.child.wait().unwrap();
    feed.release();
    let t = Instant::now();
    let out = cp.wait_with_output().unwrap();
    assert!(t.elapsed() < Duration::from_secs(60), "cp hung");
    assert!(!out.status.success(), "cp wrote to a killed server");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.is_empty());
    // Recovery on the next open; the file holds whole 1 MiB writes, in order.
    sy(d.path()).args(["fsck"]).assert().success();
    let n = holds_a_prefix(d.path(), "store:/big", &data);
    assert!(n.is_multiple_of(1 << 20), "a torn write: {n} bytes");
    assert!(n <= 300 << 20, "more was written than was fed: {n} bytes");
}

#[test]
fn a_server_killed_with_a_client_connected_takes_its_port_again_at_once() {
    // The killed server's connections sit in TIME-WAIT on its port for a minute; a server
    // started again after a crash must not be refused its port meanwhile. A port another
    // server holds is still refused, with a message that says so.
    let d = tempfile::tempdir().unwrap();
    let mut srv = Server::start(d.path(), &[]);
    let feed = Feed::start(d.path(), &pattern(4 << 20), 2 << 20);
    let cp = cp_from_feed(d.path(), &srv.path("/big"));
    until_writing(d.path(), &srv);
    srv.child.kill().unwrap();
    srv.child.wait().unwrap();
    feed.release();
    let _ = cp.wait_with_output().unwrap();
    let addr = srv.addr.clone();
    drop(srv);
    let again = Server::serve(d.path(), &addr, &[]);
    assert_eq!(again.addr, addr);
    sy(d.path())
        .args(["ls", &again.path("/")])
        .assert()
        .success()
        .stdout(contains("big"));
    let other = tempfile::tempdir().unwrap();
    sy(other.path())
        .args(["mkfs", "--size", "64M"])
        .assert()
        .success();
    sy(other.path())
        .args(["serve", "--listen", &addr])
        .timeout(Duration::from_secs(60))
        .assert()
        .failure()
        .stderr(contains("the address is in use"));
    again.stop();
}

#[test]
fn cp_reaches_a_server_in_another_network_namespace() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: making a network namespace needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    sy(d.path())
        .args(["mkfs", "--size", "256M"])
        .assert()
        .success();
    let ns = Namespace::create("t").unwrap();
    let bin = assert_cmd::cargo::cargo_bin("switchyard");
    let listen = format!("{}:0", ns.inside);
    // As two machines would be: TCP only (UCX would otherwise see one host and try shared
    // memory), each side on its end of the veth pair.
    let mut child = Std::new("ip")
        .args(["netns", "exec", &ns.name])
        .arg(&bin)
        .args(["serve", "--listen", &listen])
        .env("UCX_TLS", "tcp")
        .env("UCX_NET_DEVICES", &ns.there)
        .current_dir(d.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let addr = listening_on(&mut out);
    assert!(addr.starts_with(&ns.inside), "{addr}");
    let data = pattern(5 << 20 | 77);
    std::fs::write(d.path().join("in"), &data).unwrap();
    let remote = format!("{addr}:/f");
    let client = |args: &[&str]| {
        sy(d.path())
            .args(args)
            .env("UCX_TLS", "tcp")
            .env("UCX_NET_DEVICES", &ns.here)
            .assert()
            .success();
    };
    client(&["cp", "in", &remote]);
    client(&["cp", &remote, "out"]);
    assert_eq!(std::fs::read(d.path().join("out")).unwrap(), data);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    drop(out);
}

#[test]
fn a_client_of_another_user_on_the_servers_host_reaches_it_without_shared_memory() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: running a client as another user needs root");
        return;
    }
    use common::{as_other_user, program_for_other_user, OTHER_USER};
    let d = tempfile::tempdir().unwrap();
    let srv = Server::start(d.path(), &[]);
    // The client's own directory, its copy of the program and of the key.
    let c = tempfile::tempdir().unwrap();
    let bin = program_for_other_user(c.path());
    let key = c.path().join("key");
    std::fs::copy(d.path().join("switchyard.store.key"), &key).unwrap();
    let data = pattern(3 << 20 | 5);
    std::fs::write(c.path().join("in"), &data).unwrap();
    for p in [&key, &c.path().join("in")] {
        std::os::unix::fs::chown(p, Some(OTHER_USER), Some(OTHER_USER)).unwrap();
    }
    let client = |args: &[&str]| {
        let out = as_other_user(&bin)
            .args(args)
            .arg("--key")
            .arg(&key)
            .current_dir(c.path())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {said}{err}");
        said
    };
    // Shared memory of the server's (root's) is not this user's to attach: the data moves
    // over TCP, inside messages.
    let said = client(&["cp", "in", &srv.path("/f")]);
    assert!(said.contains("inside messages over tcp"), "{said}");
    client(&["cp", &srv.path("/f"), "out"]);
    assert_eq!(std::fs::read(c.path().join("out")).unwrap(), data);
    // Root's client still shares memory with the server.
    sy(d.path())
        .args(["cp", &srv.path("/f"), "mine"])
        .assert()
        .success()
        .stdout(contains("data one-sided over"));
}
