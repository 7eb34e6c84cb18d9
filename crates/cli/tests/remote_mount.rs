//! A served store mounted through its client (`switchyard mount --remote`), used by real,
//! unmodified programs: the same programs and checks as on the store's own mount, with the
//! server and the mount in processes of their own; and two mounts of one server seeing each
//! other's changes.

mod common;

use common::{programs, Mount};

#[test]
fn posix_operations_and_errnos_through_a_remote_mount() {
    programs::posix_operations_and_errnos(Mount::remote);
}

#[test]
fn tar_cp_and_git_on_a_remote_mount() {
    programs::tar_cp_and_git(Mount::remote);
}

#[test]
fn sqlite_builds_a_database_on_a_remote_mount() {
    programs::sqlite_transactions(Mount::remote);
}

#[test]
fn fio_jobs_verify_on_a_remote_mount() {
    programs::fio_jobs_verify(Mount::remote);
}

/// Over `tcp` only, as between two machines, data moves inside messages: reads are sent from
/// where the file's bytes lie and handed to the kernel from the reply.
#[test]
fn fio_jobs_verify_on_a_remote_mount_over_tcp() {
    programs::fio_jobs_verify(Mount::remote_over_tcp);
}

#[test]
fn tar_cp_and_git_on_a_remote_mount_over_tcp() {
    programs::tar_cp_and_git(Mount::remote_over_tcp);
}

/// Two mounts of one served store (two clients, as on two machines): what one writes, the
/// other reads once the writer closed it and the reader opens it (close-to-open), names and
/// attributes within the attribute lifetime, and concurrent appends from both interleave
/// whole, never torn or lost.
#[test]
fn two_mounts_of_one_server_see_each_others_changes() {
    let work = tempfile::tempdir().unwrap();
    let a = Mount::remote(work.path());
    let b = a.attach(&work.path().join("mnt2"));
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 253) as u8).collect();
    std::fs::write(a.path("f"), &data).unwrap();
    assert_eq!(std::fs::read(b.path("f")).unwrap(), data);
    // An overwrite in the middle, seen by the other mount at its next open even though it
    // read (and may have cached) the file before.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(b.path("f"))
        .unwrap();
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(1_000_000)).unwrap();
    std::io::Write::write_all(&mut f, &[0xee; 5000]).unwrap();
    drop(f);
    let mut want = data.clone();
    want[1_000_000..1_005_000].fill(0xee);
    assert_eq!(std::fs::read(a.path("f")).unwrap(), want);
    // Names: made on one side, removed on the other.
    std::fs::create_dir(a.path("d")).unwrap();
    std::fs::write(a.path("d/x"), b"x").unwrap();
    let settle = || std::thread::sleep(std::time::Duration::from_millis(1100));
    settle();
    assert_eq!(std::fs::read(b.path("d/x")).unwrap(), b"x");
    std::fs::remove_file(b.path("d/x")).unwrap();
    settle();
    assert!(!a.path("d/x").exists());
    // Appends from both mounts at once: every record whole, none lost.
    let writer = |m: &Mount, tag: u8| {
        let p = m.path("log");
        std::thread::spawn(move || {
            for _ in 0..200 {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&p)
                    .unwrap();
                std::io::Write::write_all(&mut f, &[tag; 100]).unwrap();
            }
        })
    };
    let (ta, tb) = (writer(&a, b'a'), writer(&b, b'b'));
    ta.join().unwrap();
    tb.join().unwrap();
    let log = std::fs::read(a.path("log")).unwrap();
    assert_eq!(log.len(), 400 * 100);
    for rec in log.chunks(100) {
        assert!(rec.iter().all(|&c| c == rec[0]), "a torn record");
    }
    assert_eq!(log.chunks(100).filter(|r| r[0] == b'a').count(), 200);
    drop(b);
    a.fsck();
}

#[test]
fn a_killed_server_loses_no_write_that_fio_saw_complete() {
    programs::killed_mid_fio(Mount::remote, programs::Kill::Server);
}

#[test]
fn a_killed_remote_mount_loses_no_write_that_fio_saw_complete() {
    programs::killed_mid_fio(Mount::remote, programs::Kill::Mount);
}

/// `stat` on both sides: the server's counters asked of it, the mount's saved next to the
/// key (at unmount), and the served store's saved next to it (at the server's stop).
#[test]
fn stat_shows_both_sides_of_a_remote_mount() {
    let work = tempfile::tempdir().unwrap();
    let mut m = Mount::remote(work.path());
    std::fs::write(m.path("f"), vec![7u8; 300_000]).unwrap();
    assert_eq!(std::fs::read(m.path("f")).unwrap().len(), 300_000);
    let addr = m.server.as_ref().unwrap().addr.clone();
    let key = format!("{}.key", m.store.display());
    let stat = |args: &[&str]| {
        let out = std::process::Command::new(common::bin())
            .arg("stat")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let number = |text: &str, name: &str| -> u64 {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {text}"));
        line.split_whitespace().last().unwrap().parse().unwrap()
    };
    let live = stat(&["--remote", &addr, "--key", &key]);
    assert!(live.contains("data from here one-sided over"), "{live}");
    assert_eq!(number(&live, "committed_bytes"), 300_000);
    m.stop();
    let served = stat(&["--store", m.store.to_str().unwrap()]);
    let served = &served[served.find("served (`switchyard serve`").expect(&served)..];
    assert_eq!(number(served, "committed_bytes"), 300_000);
    let mine: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{key}.remote.json")).unwrap())
            .unwrap();
    let rows = mine["counters"].as_array().unwrap();
    let one_sided = rows.iter().find(|r| r[0] == "one_sided_bytes").unwrap()[1]
        .as_u64()
        .unwrap();
    assert!(one_sided >= 300_000, "{mine}");
}

/// Two sqlite3 processes, each on its own mount of one served store (as on two machines),
/// write one database at once: the server's record locks order their transactions, and each
/// sees the other's pages (no stale cache), so no row is lost and the database stays whole.
#[test]
fn two_sqlite_processes_on_two_mounts_share_one_database() {
    let work = tempfile::tempdir().unwrap();
    let a = Mount::remote(work.path());
    let b = a.attach(&work.path().join("mnt2"));
    let q = |m: &Mount, sql: &str| {
        let out = std::process::Command::new("sqlite3")
            .arg(m.path("db.sqlite"))
            .arg(sql)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    q(
        &a,
        "CREATE TABLE t (id INTEGER PRIMARY KEY, who TEXT, v TEXT);",
    );
    let writer = |m: &Mount, who: &'static str| {
        let db = m.path("db.sqlite");
        std::thread::spawn(move || {
            let mut sql = String::from(".timeout 60000\n");
            for i in 0..300 {
                sql.push_str(&format!(
                    "BEGIN IMMEDIATE; INSERT INTO t (who, v) VALUES ('{who}', '{}'); COMMIT;\n",
                    "x".repeat(i % 300)
                ));
            }
            let mut c = std::process::Command::new("sqlite3")
                .arg(&db)
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            std::io::Write::write_all(c.stdin.as_mut().unwrap(), sql.as_bytes()).unwrap();
            drop(c.stdin.take());
            assert!(c.wait().unwrap().success(), "sqlite3 for {who} failed");
        })
    };
    let (ta, tb) = (writer(&a, "a"), writer(&b, "b"));
    ta.join().unwrap();
    tb.join().unwrap();
    for m in [&a, &b] {
        assert_eq!(q(m, "PRAGMA integrity_check;").trim(), "ok");
        assert_eq!(
            q(m, "SELECT who, count(*) FROM t GROUP BY who ORDER BY who;").trim(),
            "a|300\nb|300"
        );
    }
    drop(b);
    a.fsck();
}

/// A remote mount whose server is killed and started again rides through it, as an NFS hard
/// mount does: a file held open goes on being written, names and data written before the
/// kill are there, and new files can be made; a file unlinked while open (which the restarted
/// server reclaims) fails with ESTALE instead of reaching another file.
#[test]
fn a_remote_mount_rides_through_a_restart_of_its_server() {
    use std::io::Write;
    let work = tempfile::tempdir().unwrap();
    let mut m = Mount::remote(work.path());
    // The next server, started from a process that holds no file of the mount: a child
    // forked while this one does would close them at its exec, and the kernel's flush of
    // each would wait for the server it is about to become.
    let mut next = std::process::Command::new("sh")
        .args(["-c", "read go && exec \"$0\" \"$@\""])
        .arg(common::bin())
        .args([
            "serve",
            "--listen",
            &m.server.as_ref().unwrap().addr,
            "--store",
        ])
        .arg(&m.store)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::fs::write(m.path("f"), b"before").unwrap();
    std::fs::create_dir(m.path("d")).unwrap();
    let mut held = std::fs::File::create(m.path("d/g")).unwrap();
    held.write_all(b"one").unwrap();
    let mut orphan = std::fs::File::create(m.path("u")).unwrap();
    orphan.write_all(b"x").unwrap();
    std::fs::remove_file(m.path("u")).unwrap();
    // Dropped before the files: on a failure, the mount goes first, so that closing them
    // does not wait for a server that may never come.
    let _unblock = KillOnPanic(m.child.as_ref().unwrap().id());
    let mut child = m.server.take().unwrap().child;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    next.stdin.take().unwrap().write_all(b"go\n").unwrap();
    m.server = Some(common::Serve::of(next));
    held.write_all(b"two").unwrap();
    drop(held);
    assert_eq!(std::fs::read(m.path("f")).unwrap(), b"before");
    assert_eq!(std::fs::read(m.path("d/g")).unwrap(), b"onetwo");
    let stale = orphan.write_all(b"y").and_then(|_| orphan.sync_all());
    assert_eq!(common::errno(stale), libc::ESTALE);
    // A new file may get the stale one's number: it is the new file's, and the stale
    // descriptor still reaches nothing (the kernel, seeing the number come back with
    // another generation, fails it with EIO).
    std::fs::write(m.path("d/new"), b"after").unwrap();
    let stale = orphan.write_all(b"z").and_then(|_| orphan.sync_all());
    assert!([libc::ESTALE, libc::EIO].contains(&common::errno(stale)));
    drop(orphan);
    assert_eq!(std::fs::read(m.path("d/new")).unwrap(), b"after");
    assert!(common::mounted(&m.dir), "the mount went with its server");
    m.fsck();
}

/// More processes wait in `F_SETLKW` for a lock than the mount has request threads, and the
/// holder's close still gets through: each waiter gets the lock in turn. Waiting on the
/// request threads, two waiters took both, the holder's unlock was never served, and every
/// process on the mount hung (stress-ng's lockf stressor).
#[test]
fn lock_waiters_do_not_take_the_request_threads() {
    let work = tempfile::tempdir().unwrap();
    let m = Mount::remote_with(work.path(), &["--workers", "2"]);
    std::fs::write(m.path("lockfile"), b"").unwrap();
    // Holds the lock for a second, then closes.
    let py = |script: &str| {
        std::process::Command::new("timeout")
            .args(["-s", "KILL", "60", "python3", "-c", script])
            .arg(m.path("lockfile"))
            .arg(m.path("out"))
            .spawn()
            .unwrap()
    };
    let mut holder = py("import fcntl, os, sys, time\n\
         fd = os.open(sys.argv[1], os.O_RDWR)\n\
         fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n\
         print('held', flush=True)\n\
         time.sleep(1)\n\
         os.close(fd)\n");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            py("import fcntl, os, sys\n\
                fd = os.open(sys.argv[1], os.O_RDWR)\n\
                fcntl.lockf(fd, fcntl.LOCK_EX)\n\
                with open(sys.argv[2], 'a') as f: f.write('x')\n\
                fcntl.lockf(fd, fcntl.LOCK_UN)\n\
                os.close(fd)\n")
        })
        .collect();
    assert!(holder.wait().unwrap().success(), "the holder");
    for mut w in waiters {
        assert!(w.wait().unwrap().success(), "a waiter (killed after 60 s?)");
    }
    assert_eq!(std::fs::read(m.path("out")).unwrap(), b"xxxx");
    m.fsck();
}

/// Kills process `.0` when dropped during a panic.
struct KillOnPanic(u32);

impl Drop for KillOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // SAFETY: kill has no memory effects; the pid is a child of this test.
            unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
        }
    }
}
