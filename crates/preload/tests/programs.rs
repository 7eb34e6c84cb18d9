//! Unmodified programs on a store through the file preload library: cp, cat, tar (a
//! byte-identical round trip), sqlite3 (thousands of transactions, and two processes on one
//! database), fio (psync and pvsync2 with crc32c verification), git, and shells' redirections.

mod common;

use std::process::{Command, Stdio};

use common::Served;

#[test]
fn cp_and_cat_carry_every_byte() {
    let s = Served::start(64);
    let host = s.dir.path().join("big");
    std::fs::write(&host, pattern(3 << 20 | 123, 1)).unwrap();
    let big = s.path("big");
    s.run("cp", &[host.to_str().unwrap(), &big]);
    let out = s.run("cat", &[&big]);
    assert_eq!(out.stdout, std::fs::read(&host).unwrap());
    // And back out, and within the store.
    let back = s.dir.path().join("back");
    s.run("cp", &[&big, back.to_str().unwrap()]);
    s.run("cp", &[&big, &s.path("copy")]);
    s.run("cmp", &[&big, &s.path("copy")]);
    s.run("cmp", &[host.to_str().unwrap(), back.to_str().unwrap()]);
    // `cp` refuses to copy a file onto itself (it compares st_dev and st_ino).
    let same = s.command("cp").args([&big, &big]).output().unwrap();
    assert!(!same.status.success());
    assert!(String::from_utf8_lossy(&same.stderr).contains("same file"));
}

#[test]
fn a_tar_round_trip_is_byte_identical() {
    let s = Served::start(64);
    let src = s.dir.path().join("src");
    for (i, d) in ["a", "a/b", "a/b/c", "e"].iter().enumerate() {
        std::fs::create_dir_all(src.join(d)).unwrap();
        for j in 0..5 {
            let len = [0, 1, 4095, 4096, 70_000][j] + i;
            std::fs::write(
                src.join(d).join(format!("f{j}")),
                pattern(len, (i * 5 + j) as u64),
            )
            .unwrap();
        }
    }
    std::os::unix::fs::symlink("b/f1", src.join("a/link")).unwrap();
    let tar1 = s.dir.path().join("1.tar");
    let st = Command::new("tar")
        .args([
            "-C",
            src.to_str().unwrap(),
            "-cf",
            tar1.to_str().unwrap(),
            ".",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    s.run("mkdir", &[&s.path("t")]);
    s.run("tar", &["-C", &s.path("t"), "-xf", tar1.to_str().unwrap()]);
    let tar2 = s.path("2.tar");
    s.run("tar", &["-C", &s.path("t"), "-cf", &tar2, "."]);
    let out = s.dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    s.run("tar", &["-C", out.to_str().unwrap(), "-xf", &tar2]);
    let diff = Command::new("diff")
        .args([
            "-r",
            "--no-dereference",
            src.to_str().unwrap(),
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        diff.status.success(),
        "{}",
        String::from_utf8_lossy(&diff.stdout)
    );
    // The listing the store gives tar matches the original's (names, sizes, modes, link).
    let list = |args: &[&str], pre: bool| {
        let o = if pre {
            s.run("tar", args).stdout
        } else {
            Command::new("tar").args(args).output().unwrap().stdout
        };
        let mut l: Vec<String> = String::from_utf8_lossy(&o)
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                format!("{} {} {}", f[0], f[2], f[5..].join(" "))
            })
            .collect();
        l.sort();
        l
    };
    assert_eq!(
        list(&["-tvf", tar1.to_str().unwrap()], false),
        list(&["-tvf", &tar2], true)
    );
}

/// sqlite3 on `db` under the preload, running `sql` from its standard input.
fn sqlite(s: &Served, db: &str, sql: &str) -> std::process::Child {
    use std::io::Write;
    let mut c = s
        .command("sqlite3")
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(sql.as_bytes()).unwrap();
    c
}

#[test]
fn sqlite_keeps_thousands_of_transactions_and_two_writers() {
    let s = Served::start(64);
    let db = s.path("db.sqlite");
    let mut sql = String::from("CREATE TABLE t(id INTEGER PRIMARY KEY, who TEXT, v BLOB);\n");
    for i in 0..2000 {
        sql += &format!(
            "INSERT INTO t(who, v) VALUES ('first', randomblob({}));\n",
            i % 700
        );
    }
    let out = sqlite(&s, &db, &sql).wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Two processes write at once; the server's record locks keep them apart.
    let writer = |who: &str| {
        let mut sql = String::from(".timeout 20000\n");
        for _ in 0..300 {
            sql += &format!("INSERT INTO t(who, v) VALUES ('{who}', randomblob(100));\n");
        }
        sqlite(&s, &db, &sql)
    };
    let (a, b) = (writer("a"), writer("b"));
    for c in [a, b] {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            o.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let out = s.run(
        "sqlite3",
        &[
            &db,
            "SELECT who, count(*) FROM t GROUP BY who ORDER BY who; PRAGMA integrity_check;",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "a|300\nb|300\nfirst|2000\nok\n"
    );
}

#[test]
fn fio_verifies_what_it_wrote_with_psync_and_pvsync2() {
    let s = Served::start(96);
    for engine in ["psync", "pvsync2"] {
        for rw in ["randwrite", "write"] {
            let out = s.run(
                "fio",
                &[
                    "--name=verify",
                    &format!("--directory={}", s.prefix),
                    &format!("--filename={engine}-{rw}.dat"),
                    "--size=8M",
                    "--bs=4k",
                    &format!("--rw={rw}"),
                    &format!("--ioengine={engine}"),
                    "--verify=crc32c",
                    "--do_verify=1",
                    "--output-format=json",
                ],
            );
            let json = String::from_utf8_lossy(&out.stdout);
            assert!(json.contains("\"error\" : 0"), "{engine} {rw}: {json}");
            assert!(!json.contains("verify: bad"), "{engine} {rw}");
        }
    }
}

#[test]
fn git_commits_and_checks_a_repository() {
    let s = Served::start(96);
    let repo = s.path("repo");
    s.run("git", &["init", "-q", &repo]);
    let src = s.dir.path().join("files");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..40 {
        std::fs::write(
            src.join(format!("sub/{i}.txt")),
            pattern(100 + i * 97, i as u64),
        )
        .unwrap();
    }
    s.run("cp", &["-r", src.join("sub").to_str().unwrap(), &repo]);
    let git = |args: &[&str]| {
        let mut a = vec!["-C", &repo, "-c", "user.name=t", "-c", "user.email=t@t"];
        a.extend_from_slice(args);
        s.run("git", &a)
    };
    git(&["add", "."]);
    git(&["commit", "-qm", "first"]);
    std::fs::write(src.join("sub/0.txt"), b"changed").unwrap();
    s.run(
        "cp",
        &[
            src.join("sub/0.txt").to_str().unwrap(),
            &format!("{repo}/sub/0.txt"),
        ],
    );
    git(&["commit", "-qam", "second"]);
    let log = git(&["log", "--format=%s"]);
    assert_eq!(String::from_utf8_lossy(&log.stdout), "second\nfirst\n");
    git(&["fsck", "--strict"]);
    let status = git(&["status", "--porcelain"]);
    assert!(
        status.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
    let show = git(&["show", "HEAD~1:sub/5.txt"]);
    assert_eq!(show.stdout, pattern(100 + 5 * 97, 5));
}

/// Bytes that differ from offset to offset (so a misplaced block shows).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Including a child that Python's `subprocess` starts with `vfork` and whose output it
/// captures while its own standard output is a served file, and parents and children writing
/// one inherited descriptor in turn (their offset is shared, as the kernel shares it).
#[test]
fn shell_redirections_reach_the_programs_they_run() {
    let s = Served::start(32);
    let script = format!(
        "printf 'b\\na\\n' > {p}/in && sort {p}/in > {p}/out && sort -r {p}/in >> {p}/out \
         && wc -l < {p}/out && bash -c 'x=$(cat {p}/out | head -1); echo \"[$x]\"' > {p}/sub \
         && cat {p}/sub && python3 -c 'print(6 * 7)' > {p}/py && cat {p}/out {p}/py \
         && python3 -c 'import subprocess as s; print(s.run([\"echo\", \"c\"], \
            capture_output=True, text=True).stdout)' > {p}/vf && cat {p}/vf \
         && {{ echo one; ls -d {p}; echo three; }} > {p}/grp && cat {p}/grp \
         && python3 -c 'import subprocess as s; print(1, flush=True); s.run([\"echo\", \"2\"]); \
            print(3)' > {p}/seq && cat {p}/seq",
        p = s.prefix
    );
    let out = s.run("sh", &["-c", &script]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "4\n[a]\na\nb\nb\na\n42\nc\n\none\n{}\nthree\n1\n2\n3\n",
            s.prefix
        )
    );
}

/// `ln -s` with an absolute target through the prefix (as `ln -s "$PWD/f" link` makes in a
/// working directory under it) names the file in the store, as the kernel would resolve it
/// through a mount at the prefix: links to a file, to a directory and to the prefix itself.
#[test]
fn absolute_symlinks_through_the_prefix_reach_the_store() {
    let s = Served::start(32);
    let script = format!(
        "mkdir {p}/d && echo hi > {p}/d/f && ln -s {p}/d/f {p}/lf && ln -s {p}/d {p}/ld \
         && ln -s {p} {p}/top && cat {p}/lf && cat {p}/ld/f && cat {p}/top/d/f \
         && readlink {p}/lf && ls {p}/top/ld",
        p = s.prefix
    );
    let out = s.run("sh", &["-c", &script]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("hi\nhi\nhi\n{}/d/f\nf\n", s.prefix)
    );
}
