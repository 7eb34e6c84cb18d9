//! Real, unmodified programs on a mount (the store's own, or a served store's through
//! `mount --remote`): each writes, remounts, and checks.

use std::io::ErrorKind;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{errno, fsck, run, Mount};

/// POSIX operations and their errnos through a mount, checked again after a remount.
pub fn posix_operations_and_errnos(start: fn(&Path) -> Mount) {
    let work = tempfile::tempdir().unwrap();
    let m = start(work.path());
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(m.path("a"), &data).unwrap();
    std::fs::create_dir(m.path("d")).unwrap();
    std::fs::write(m.path("d/x"), b"x").unwrap();
    std::os::unix::fs::symlink("a", m.path("s")).unwrap();
    std::fs::hard_link(m.path("a"), m.path("h")).unwrap();
    std::fs::rename(m.path("d/x"), m.path("d/y")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(m.path("d/y"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let f = std::fs::OpenOptions::new()
        .append(true)
        .open(m.path("d/y"))
        .unwrap();
    std::io::Write::write_all(&mut &f, b"yz").unwrap();
    drop(f);
    assert_eq!(errno(std::fs::read(m.path("nope"))), libc::ENOENT);
    assert_eq!(errno(std::fs::create_dir(m.path("d"))), libc::EEXIST);
    assert_eq!(errno(std::fs::remove_dir(m.path("d"))), libc::ENOTEMPTY);
    assert_eq!(errno(std::fs::read(m.path("a/b"))), libc::ENOTDIR);
    assert_eq!(errno(std::fs::write(m.path("d"), b"")), libc::EISDIR);
    let long = "n".repeat(300);
    assert_eq!(
        errno(std::fs::write(m.path(&long), b"")),
        libc::ENAMETOOLONG
    );
    let mut names: Vec<String> = std::fs::read_dir(&m.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "d", "h", "s"]);
    let m = m.remount();
    assert_eq!(std::fs::read(m.path("a")).unwrap(), data);
    assert_eq!(std::fs::read(m.path("s")).unwrap(), data);
    assert_eq!(std::fs::read_link(m.path("s")).unwrap(), Path::new("a"));
    assert_eq!(std::fs::read(m.path("d/y")).unwrap(), b"xyz");
    let meta = std::fs::metadata(m.path("h")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.nlink(), meta.len()), (2, data.len() as u64));
    assert_eq!(
        std::fs::metadata(m.path("d/y")).unwrap().mode() & 0o777,
        0o600
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.path("a"))
        .unwrap();
    f.set_len(10).unwrap();
    drop(f);
    assert_eq!(std::fs::read(m.path("a")).unwrap(), &data[..10]);
    assert_eq!(
        std::fs::read_dir(m.path("missing")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    m.fsck();
}

/// `cp -a` and `diff -r` of a source tree, a tar archive extracted and re-created byte for
/// byte, and a git repository, on a mount and after a remount.
pub fn tar_cp_and_git(start: fn(&Path) -> Mount) {
    let work = tempfile::tempdir().unwrap();
    let m = start(work.path());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // cp -a of a source tree, and a tar archive of it extracted on the mount.
    run(Command::new("cp").arg("-a").arg(&src).arg(m.path("tree")));
    let tar_args = |c: &mut Command| {
        c.args([
            "--sort=name",
            "--mtime=2020-01-01",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--format=gnu",
        ]);
    };
    let archive = work.path().join("a.tar");
    let mut c = Command::new("tar");
    tar_args(&mut c);
    run(c.arg("-cf").arg(&archive).arg("-C").arg(&src).arg("."));
    std::fs::create_dir(m.path("x")).unwrap();
    run(Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(m.path("x")));
    // git: a repository on the mount.
    let git = |args: &[&str]| {
        let mut c = Command::new("git");
        c.arg("-C")
            .arg(m.path("repo"))
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args);
        run(&mut c)
    };
    run(Command::new("cp").arg("-a").arg(&src).arg(m.path("repo")));
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "on the mount"]);
    let head = git(&["rev-parse", "HEAD"]);
    let m = m.remount();
    run(Command::new("diff").arg("-r").arg(&src).arg(m.path("tree")));
    let again = work.path().join("b.tar");
    let mut c = Command::new("tar");
    tar_args(&mut c);
    run(c.arg("-cf").arg(&again).arg("-C").arg(m.path("x")).arg("."));
    assert!(
        std::fs::read(&archive).unwrap() == std::fs::read(&again).unwrap(),
        "the archive re-created from the mount differs"
    );
    let git = |args: &[&str]| {
        let mut c = Command::new("git");
        c.arg("-C").arg(m.path("repo")).args(args);
        run(&mut c)
    };
    assert_eq!(git(&["rev-parse", "HEAD"]), head);
    git(&["fsck", "--full", "--strict"]);
    assert!(git(&["status", "--porcelain"]).is_empty());
    m.fsck();
}

/// sqlite3 builds a database in thousands of transactions; `integrity_check` after a
/// remount.
pub fn sqlite_transactions(start: fn(&Path) -> Mount) {
    let work = tempfile::tempdir().unwrap();
    let m = start(work.path());
    let mut sql = String::from("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT);\n");
    for i in 0..3000 {
        sql.push_str(&format!(
            "BEGIN; INSERT INTO t (v) VALUES ('{}'); COMMIT;\n",
            "v".repeat(i % 200)
        ));
    }
    sql.push_str("CREATE INDEX tv ON t (v);\n");
    let db = m.path("db.sqlite");
    let mut c = Command::new("sqlite3")
        .arg(&db)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(c.stdin.as_mut().unwrap(), sql.as_bytes()).unwrap();
    drop(c.stdin.take());
    assert!(c.wait().unwrap().success());
    let m = m.remount();
    let db = m.path("db.sqlite");
    let q = |s: &str| run(Command::new("sqlite3").arg(&db).arg(s));
    assert_eq!(q("PRAGMA integrity_check;").trim(), "ok");
    assert_eq!(q("SELECT count(*) FROM t;").trim(), "3000");
    m.fsck();
}

/// One fio job on the mount: `extra` adds or overrides options.
pub fn fio(dir: &Path, name: &str, extra: &[&str]) -> serde_json::Value {
    let out = Command::new("fio")
        .args([
            &format!("--name={name}"),
            &format!("--directory={}", dir.display()),
            "--size=16M",
            "--verify=crc32c",
            "--verify_state_save=0", // no state files in the working directory
            "--output-format=json",
        ])
        .args(extra)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fio {name} {extra:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap()
}

/// fio jobs (psync and libaio, sequential and random) write and verify, and verify again
/// after a remount.
pub fn fio_jobs_verify(start: fn(&Path) -> Mount) {
    let work = tempfile::tempdir().unwrap();
    let m = start(work.path());
    let jobs: [(&str, &[&str]); 6] = [
        ("seq4k", &["--ioengine=psync", "--rw=write", "--bs=4k"]),
        ("seq1m", &["--ioengine=psync", "--rw=write", "--bs=1m"]),
        ("rand4k", &["--ioengine=psync", "--rw=randwrite", "--bs=4k"]),
        (
            "rand64k",
            &["--ioengine=psync", "--rw=randwrite", "--bs=64k"],
        ),
        (
            "aio1m",
            &[
                "--ioengine=libaio",
                "--direct=1",
                "--iodepth=8",
                "--rw=write",
                "--bs=1m",
            ],
        ),
        (
            "aio4k",
            &[
                "--ioengine=libaio",
                "--direct=1",
                "--iodepth=8",
                "--rw=randwrite",
                "--bs=4k",
            ],
        ),
    ];
    for (name, args) in jobs {
        // Written and verified in one run...
        fio(&m.dir, name, args);
    }
    let m = m.remount();
    for (name, args) in jobs {
        // ...and verified again from the store after a clean unmount.
        let mut a = args.to_vec();
        a.push("--verify_only");
        fio(&m.dir, name, &a);
    }
    m.fsck();
}

/// Which process a test kills.
pub enum Kill {
    /// The mount (the store's owner, or the client of a served store).
    Mount,
    /// The server a remote mount mounts.
    Server,
}

/// fio writes with verification on a mount until `kill` is SIGKILLed mid-job; after recovery
/// the store is clean (fsck) and every 4K block fio saw complete is there, with fio's
/// checksum and offset.
pub fn killed_mid_fio(start: fn(&Path) -> Mount, kill: Kill) {
    killed_mid(start, kill, false);
}

/// fio writes with verification, each write fsynced, on a mount until it is SIGKILLed
/// mid-job; after recovery the store is clean (fsck) and every 4K block whose fsync fio saw
/// return is there, with fio's checksum and offset (what a mount with the kernel's writeback
/// cache promises: a write is in the store once it is synced or closed).
pub fn killed_mid_synced_fio(start: fn(&Path) -> Mount) {
    killed_mid(start, Kill::Mount, true);
}

/// SIGKILLs what `kill` names of `m`; a remote mount whose server is killed is killed too: it
/// waits for its server to come back (as an NFS hard mount), and the job ends once it goes.
fn kill_mid_job(m: &mut Mount, kill: Kill) {
    let mut child = match kill {
        Kill::Mount => m.child.take().unwrap(),
        Kill::Server => m.server.take().expect("a remote mount").child,
    };
    child.kill().unwrap(); // SIGKILL, mid-job
    child.wait().unwrap();
    if let (Kill::Server, Some(mut mount)) = (kill, m.child.take()) {
        mount.kill().unwrap();
        mount.wait().unwrap();
    }
}

/// [`killed_mid_fio`], with an fsync after every write where `synced`.
fn killed_mid(start: fn(&Path) -> Mount, kill: Kill, synced: bool) {
    let work = tempfile::tempdir().unwrap();
    let mut m = start(work.path());
    let dir = m.dir.clone();
    let fio = std::thread::spawn(move || {
        Command::new("fio")
            .arg(if synced { "--fsync=1" } else { "--fsync=0" })
            .args([
                "--name=killed",
                &format!("--directory={}", dir.display()),
                "--ioengine=psync",
                "--rw=write",
                "--bs=4k",
                "--size=256M",
                "--fallocate=none", // the file grows as fio writes: its size is progress
                "--verify=crc32c",
                "--verify_state_save=0", // no state files in the working directory
                "--do_verify=0",
                "--output-format=json",
            ])
            .output()
            .unwrap()
    });
    // Kill once fio is well into the job (a fixed delay let a fast run finish first).
    let file = m.path("killed.0.0");
    let t0 = Instant::now();
    while std::fs::metadata(&file).map_or(0, |f| f.len()) < 16 << 20 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "fio made no progress"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    kill_mid_job(&mut m, kill);
    let out = fio.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&text[text.find('{').expect("fio JSON")..])
        .expect("fio JSON after its error");
    let mut done = v["jobs"][0]["write"]["io_bytes"].as_u64().unwrap();
    assert!(
        done > 0 && done < 256 << 20,
        "fio wrote {done} bytes before the kill"
    );
    if synced {
        // fio counts a write when it returns, before its fsync: the last one it counted
        // may not have been synced.
        done -= 4096;
    }
    if let Some(mut c) = m.child.take() {
        c.kill().unwrap();
        c.wait().unwrap();
    }
    if let Some(mut s) = m.server.take() {
        s.child.kill().unwrap();
        s.child.wait().unwrap();
    }
    run(Command::new("fusermount3").arg("-u").arg(&m.dir));
    fsck(&m.store);
    let m = m.restart();
    // Every 4K block fio saw complete is there, with fio's checksum and offset.
    let out = Command::new("fio")
        .args([
            "--name=killed",
            &format!("--directory={}", m.dir.display()),
            "--ioengine=psync",
            "--rw=write",
            "--bs=4k",
            &format!("--size={}", done / 4096 * 4096),
            "--verify=crc32c",
            "--verify_state_save=0", // no state files in the working directory
            "--verify_only",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "verify after the kill: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
