//! A conformance suite for the mount as a multi-user file system, written from POSIX and the
//! Linux man pages (open(2), access(2), chmod(2), chown(2), utimensat(2), rename(2), link(2),
//! unlink(2), inode(7), path_resolution(7)). The store is mounted `--allow-other` by root,
//! and every case runs as the users it names, each in a thread of its own whose real,
//! effective and saved ids and supplementary groups are switched with raw system calls (which
//! change the calling thread only; the kernel checks a FUSE request against its thread's
//! credentials). Each case states the rule it checks; all cases run, and the test lists every
//! rule that failed.
//!
//! Needs root (to mount for everyone and to become other users).

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::Mount;

/// A user: uid, primary gid, supplementary groups.
#[derive(Clone, Copy)]
struct Who {
    name: &'static str,
    uid: u32,
    gid: u32,
    groups: &'static [u32],
}

const ROOT: Who = Who {
    name: "root",
    uid: 0,
    gid: 0,
    groups: &[0],
};
/// In the shared group 2000.
const ALICE: Who = Who {
    name: "alice",
    uid: 1001,
    gid: 1001,
    groups: &[1001, 2000],
};
/// Also in the shared group 2000.
const BOB: Who = Who {
    name: "bob",
    uid: 1002,
    gid: 1002,
    groups: &[1002, 2000],
};
/// In no group of the others.
const CAROL: Who = Who {
    name: "carol",
    uid: 1003,
    gid: 1003,
    groups: &[1003],
};
const SHARED: u32 = 2000;

/// Runs `f` as `who` in a thread of its own.
fn as_user<R: Send>(who: Who, f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: raw system calls with valid arguments; they change only this thread's
            // credentials (glibc's wrappers would change every thread's), and the thread
            // ends after `f`.
            unsafe {
                let groups: Vec<libc::gid_t> = who.groups.to_vec();
                assert_eq!(
                    libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()),
                    0
                );
                assert_eq!(
                    libc::syscall(libc::SYS_setresgid, who.gid, who.gid, who.gid),
                    0
                );
                assert_eq!(
                    libc::syscall(libc::SYS_setresuid, who.uid, who.uid, who.uid),
                    0
                );
            }
            f()
        })
        .join()
        .expect("case thread")
    })
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// The result of a system call: Ok, or the errno.
fn sys(r: libc::c_int) -> Result<(), i32> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
    }
}

fn open(p: &Path, flags: libc::c_int) -> Result<(), i32> {
    // SAFETY: a valid C string; the descriptor is closed at once.
    let fd = unsafe { libc::open(c(p).as_ptr(), flags | libc::O_CLOEXEC, 0o644) };
    if fd < 0 {
        return sys(-1);
    }
    // SAFETY: a descriptor we own.
    unsafe { libc::close(fd) };
    Ok(())
}

fn access(p: &Path, mode: libc::c_int) -> Result<(), i32> {
    // SAFETY: a valid C string.
    sys(unsafe { libc::access(c(p).as_ptr(), mode) })
}

fn unlink(p: &Path) -> Result<(), i32> {
    // SAFETY: a valid C string.
    sys(unsafe { libc::unlink(c(p).as_ptr()) })
}

fn mkdir(p: &Path, mode: u32) -> Result<(), i32> {
    // SAFETY: a valid C string.
    sys(unsafe { libc::mkdir(c(p).as_ptr(), mode) })
}

fn rename(a: &Path, b: &Path) -> Result<(), i32> {
    // SAFETY: valid C strings.
    sys(unsafe { libc::rename(c(a).as_ptr(), c(b).as_ptr()) })
}

fn rename2(a: &Path, b: &Path, flags: libc::c_uint) -> Result<(), i32> {
    // SAFETY: valid C strings; AT_FDCWD for both directories.
    sys(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            c(a).as_ptr(),
            libc::AT_FDCWD,
            c(b).as_ptr(),
            flags,
        )
    })
}

fn link(a: &Path, b: &Path) -> Result<(), i32> {
    // SAFETY: valid C strings.
    sys(unsafe { libc::link(c(a).as_ptr(), c(b).as_ptr()) })
}

fn chmod(p: &Path, mode: u32) -> Result<(), i32> {
    // SAFETY: a valid C string.
    sys(unsafe { libc::chmod(c(p).as_ptr(), mode) })
}

fn chown(p: &Path, uid: Option<u32>, gid: Option<u32>) -> Result<(), i32> {
    // SAFETY: a valid C string; -1 leaves an id unchanged.
    sys(unsafe {
        libc::chown(
            c(p).as_ptr(),
            uid.unwrap_or(u32::MAX),
            gid.unwrap_or(u32::MAX),
        )
    })
}

/// `utimensat` with (atime, mtime); `None` is `UTIME_NOW`, `Some(-1)` is `UTIME_OMIT`.
fn utimens(p: &Path, a: Option<i64>, m: Option<i64>) -> Result<(), i32> {
    let ts = |t: Option<i64>| match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(-1) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(s) => libc::timespec {
            tv_sec: s,
            tv_nsec: 0,
        },
    };
    let times = [ts(a), ts(m)];
    // SAFETY: a valid C string and two timespecs.
    sys(unsafe { libc::utimensat(libc::AT_FDCWD, c(p).as_ptr(), times.as_ptr(), 0) })
}

fn append(p: &Path, data: &[u8]) -> Result<(), i32> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(p)
        .map_err(|e| e.raw_os_error().unwrap_or(-1))?;
    f.write_all(data)
        .map_err(|e| e.raw_os_error().unwrap_or(-1))
}

fn truncate(p: &Path, len: i64) -> Result<(), i32> {
    // SAFETY: a valid C string.
    sys(unsafe { libc::truncate(c(p).as_ptr(), len) })
}

fn stat(p: &Path) -> libc::stat {
    // SAFETY: stat is plain data filled by the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a writable stat.
    let r = unsafe { libc::lstat(c(p).as_ptr(), &mut st) };
    assert_eq!(r, 0, "lstat {}", p.display());
    st
}

fn mode(p: &Path) -> u32 {
    stat(p).st_mode & 0o7777
}

fn ns(sec: i64, nsec: i64) -> i64 {
    sec * 1_000_000_000 + nsec
}

/// (atime, mtime, ctime) in ns.
fn times(p: &Path) -> (i64, i64, i64) {
    let st = stat(p);
    (
        ns(st.st_atime, st.st_atime_nsec),
        ns(st.st_mtime, st.st_mtime_nsec),
        ns(st.st_ctime, st.st_ctime_nsec),
    )
}

/// Makes a file (as root) with an owner, group and mode.
fn file(p: &Path, uid: u32, gid: u32, m: u32) {
    std::fs::write(p, b"data").unwrap();
    chown(p, Some(uid), Some(gid)).unwrap();
    chmod(p, m).unwrap();
}

/// Makes a directory (as root) with an owner, group and mode.
fn dir(p: &Path, uid: u32, gid: u32, m: u32) {
    std::fs::create_dir(p).unwrap();
    chown(p, Some(uid), Some(gid)).unwrap();
    chmod(p, m).unwrap();
}

/// Collects the rules that failed.
#[derive(Default)]
struct Suite {
    failed: Vec<String>,
    checked: usize,
}

impl Suite {
    fn check<T: PartialEq + std::fmt::Debug>(&mut self, rule: &str, got: T, want: T) {
        self.checked += 1;
        if got != want {
            self.failed
                .push(format!("{rule}: got {got:?}, want {want:?}"));
        }
    }
}

fn tick() {
    std::thread::sleep(Duration::from_millis(5));
}

#[test]
fn the_mount_follows_posix_for_every_user() {
    suite(|w| Mount::with_args(w, &["--allow-other"]), Writes::Strict);
}

/// The same suite on a mount with the kernel's writeback cache (`--writeback`), where the
/// file system drops set-id bits and capabilities on writes, truncates and chowns itself.
#[test]
fn the_writeback_mount_follows_posix_for_every_user() {
    suite(
        |w| Mount::with_args(w, &["--allow-other", "--writeback"]),
        Writes::Writeback,
    );
}

/// The same suite on a served store mounted through its client (`mount --remote`), with the
/// server in a process of its own.
#[test]
fn the_remote_mount_follows_posix_for_every_user() {
    suite(
        |w| Mount::remote_with(w, &["--allow-other"]),
        Writes::Strict,
    );
}

/// How a mount's writes reach its file system.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Writes {
    /// Each write(2) is a request.
    Strict,
    /// The kernel's writeback cache: the file system sees writes later.
    Writeback,
}

/// Every rule, on the mount `start` makes for every user, whose writes go as `writes` says.
fn suite(start: fn(&Path) -> Mount, writes: Writes) {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this suite mounts for every user and becomes other users: run it as root"
    );
    let work = tempfile::tempdir().unwrap();
    // Other users must be able to reach the mount point.
    chmod(work.path(), 0o755).unwrap();
    let m = start(work.path());
    chmod(&m.dir, 0o755).unwrap();
    let mut s = Suite::default();
    permission_matrix(&mut s, &m.dir);
    directories(&mut s, &m.dir);
    sticky(&mut s, &m.dir);
    set_id_bits(&mut s, &m.dir);
    ownership(&mut s, &m.dir);
    utimensat_rules(&mut s, &m.dir);
    timestamps(&mut s, &m.dir);
    rename_and_link(&mut s, &m.dir, ROOT);
    let own = m.dir.join("alice-home");
    dir(&own, ALICE.uid, ALICE.gid, 0o755);
    rename_and_link(&mut s, &own, ALICE);
    special_files(&mut s, &m.dir);
    xattrs(&mut s, &m.dir);
    acls(&mut s, &m.dir);
    fallocate(&mut s, &m.dir, writes);
    private(&mut s, &m);
    let m = m.remount();
    special_files_after_remount(&mut s, &m.dir);
    xattrs_after_remount(&mut s, &m.dir);
    acls_after_remount(&mut s, &m.dir);
    assert!(s.checked > 100, "only {} checks ran", s.checked);
    assert!(
        s.failed.is_empty(),
        "{} of {} checks failed:\n{}",
        s.failed.len(),
        s.checked,
        s.failed.join("\n")
    );
    m.fsck();
}

/// open(2)/access(2): the owner class applies to the owner, the group class to members of the
/// file's group (primary or supplementary), the other class to everyone else, and only the
/// first class that matches counts (a class can have fewer rights than the next); root reads
/// and writes regardless of the bits, and executes when any execute bit is set.
fn permission_matrix(s: &mut Suite, root: &Path) {
    let base = root.join("matrix");
    dir(&base, 0, 0, 0o755);
    let users = [(ALICE, "owner"), (BOB, "group"), (CAROL, "other")];
    for bits in 0..=7u32 {
        for (shift, class) in [(6, "owner"), (3, "group"), (0, "other")] {
            let m = bits << shift;
            let p = base.join(format!("f{m:03o}"));
            if !p.exists() {
                file(&p, ALICE.uid, SHARED, m);
            }
            for (who, who_class) in users {
                let applies = who_class == class;
                // The bits of the class that applies to `who` in this file.
                let mine = if applies { bits } else { 0 };
                let (p2, w) = (p.clone(), who);
                let got = as_user(w, move || {
                    (
                        open(&p2, libc::O_RDONLY).is_ok(),
                        open(&p2, libc::O_WRONLY).is_ok(),
                        access(&p2, libc::X_OK).is_ok(),
                    )
                });
                s.check(
                    &format!("mode {m:04o}: {} ({who_class} class) gets r,w,x", who.name),
                    got,
                    (mine & 4 != 0, mine & 2 != 0, mine & 1 != 0),
                );
            }
        }
    }
    // The first matching class wins even when a later one grants more.
    let p = base.join("owner-denied");
    file(&p, ALICE.uid, SHARED, 0o077);
    let p2 = p.clone();
    s.check(
        "mode 0077: the owner is denied although group and other may read",
        as_user(ALICE, move || open(&p2, libc::O_RDONLY)),
        Err(libc::EACCES),
    );
    let p = base.join("group-denied");
    file(&p, ALICE.uid, SHARED, 0o707);
    let p2 = p.clone();
    s.check(
        "mode 0707: a group member is denied although other may read",
        as_user(BOB, move || open(&p2, libc::O_RDONLY)),
        Err(libc::EACCES),
    );
    let p = base.join("root");
    file(&p, ALICE.uid, SHARED, 0o000);
    s.check(
        "mode 0000: root reads and writes anyway (CAP_DAC_OVERRIDE)",
        (open(&p, libc::O_RDONLY), open(&p, libc::O_WRONLY)),
        (Ok(()), Ok(())),
    );
    s.check(
        "mode 0000: root may not execute a file with no execute bit",
        access(&p, libc::X_OK),
        Err(libc::EACCES),
    );
    chmod(&p, 0o001).unwrap();
    s.check(
        "mode 0001: root may execute a file with any execute bit",
        access(&p, libc::X_OK),
        Ok(()),
    );
}

/// path_resolution(7), mkdir(2), unlink(2): listing a directory needs read, looking a name up
/// in it needs search (execute), and adding or removing a name needs write and search; the
/// permissions of the file removed do not matter.
fn directories(s: &mut Suite, root: &Path) {
    let d = root.join("dirs");
    dir(&d, 0, 0, 0o755);
    let no_r = d.join("no-read");
    dir(&no_r, ALICE.uid, ALICE.gid, 0o311);
    file(&no_r.join("f"), ALICE.uid, ALICE.gid, 0o644);
    let (a, b) = (no_r.clone(), no_r.clone());
    s.check(
        "a directory without read cannot be listed by others",
        as_user(CAROL, move || {
            std::fs::read_dir(&a)
                .map(|_| ())
                .map_err(|e| e.raw_os_error())
        }),
        Err(Some(libc::EACCES)),
    );
    s.check(
        "a directory with search but without read still resolves names",
        as_user(CAROL, move || open(&b.join("f"), libc::O_RDONLY)),
        Ok(()),
    );
    let no_x = d.join("no-search");
    dir(&no_x, ALICE.uid, ALICE.gid, 0o744);
    file(&no_x.join("f"), ALICE.uid, ALICE.gid, 0o644);
    let a = no_x.clone();
    s.check(
        "a directory without search resolves no name for others",
        as_user(CAROL, move || open(&a.join("f"), libc::O_RDONLY)),
        Err(libc::EACCES),
    );
    let ro = d.join("read-only");
    dir(&ro, ALICE.uid, ALICE.gid, 0o555);
    file(&ro.join("f"), ALICE.uid, ALICE.gid, 0o666);
    let (a, b) = (ro.clone(), ro.clone());
    s.check(
        "a directory without write takes no new name, even from its owner",
        as_user(ALICE, move || {
            open(&a.join("new"), libc::O_CREAT | libc::O_WRONLY)
        }),
        Err(libc::EACCES),
    );
    s.check(
        "a directory without write loses no name, whatever the file's mode",
        as_user(ALICE, move || unlink(&b.join("f"))),
        Err(libc::EACCES),
    );
    let rw = d.join("group-writable");
    dir(&rw, ALICE.uid, SHARED, 0o770);
    file(&rw.join("alice-ro"), ALICE.uid, ALICE.gid, 0o400);
    let (a, b, c2) = (rw.clone(), rw.clone(), rw.clone());
    s.check(
        "a group member with write and search on a directory removes a file it cannot write",
        as_user(BOB, move || unlink(&a.join("alice-ro"))),
        Ok(()),
    );
    s.check(
        "a group member creates in a group-writable directory, owning what it makes",
        as_user(BOB, move || {
            open(&b.join("bobs"), libc::O_CREAT | libc::O_WRONLY)?;
            let st = stat(&b.join("bobs"));
            Ok::<_, i32>((st.st_uid, st.st_gid))
        }),
        Ok((BOB.uid, BOB.gid)),
    );
    s.check(
        "others cannot create in a directory closed to them",
        as_user(CAROL, move || mkdir(&c2.join("carols"), 0o755)),
        Err(libc::EACCES),
    );
}

/// unlink(2), rename(2), inode(7): in a sticky directory a name may be removed or replaced
/// only by the file's owner, the directory's owner, or root (otherwise EPERM).
fn sticky(s: &mut Suite, root: &Path) {
    let t = root.join("tmp");
    dir(&t, CAROL.uid, CAROL.gid, 0o1777);
    for n in ["a1", "a2", "a3", "a4", "a5"] {
        let p = t.join(n);
        as_user(ALICE, move || std::fs::write(p, b"a").unwrap());
    }
    let b1 = t.join("b1");
    as_user(BOB, move || std::fs::write(b1, b"b").unwrap());
    let tt = t.clone();
    s.check(
        "sticky: another user may not unlink the file",
        as_user(BOB, move || unlink(&tt.join("a1"))),
        Err(libc::EPERM),
    );
    let tt = t.clone();
    s.check(
        "sticky: another user may not rename the file away",
        as_user(BOB, move || rename(&tt.join("a1"), &tt.join("moved"))),
        Err(libc::EPERM),
    );
    let tt = t.clone();
    s.check(
        "sticky: another user may not replace the file by renaming over it",
        as_user(BOB, move || rename(&tt.join("b1"), &tt.join("a1"))),
        Err(libc::EPERM),
    );
    let tt = t.clone();
    s.check(
        "sticky: the file's owner may unlink it",
        as_user(ALICE, move || unlink(&tt.join("a2"))),
        Ok(()),
    );
    let tt = t.clone();
    s.check(
        "sticky: the directory's owner may unlink any file in it",
        as_user(CAROL, move || unlink(&tt.join("a3"))),
        Ok(()),
    );
    s.check(
        "sticky: root may unlink any file",
        unlink(&t.join("a4")),
        Ok(()),
    );
    let tt = t.clone();
    s.check(
        "sticky: a user may still create in the directory",
        as_user(BOB, move || {
            open(&tt.join("b2"), libc::O_CREAT | libc::O_WRONLY)
        }),
        Ok(()),
    );
}

/// inode(7), write(2), truncate(2), chown(2), chmod(2): a write or truncate by a process
/// without CAP_FSETID clears set-user-ID, and set-group-ID when group execute is set (without
/// it the bit marks mandatory locking and stays); root's writes keep them; chown clears both
/// (group-execute permitting) for a regular file, even by root; chmod by an owner who is not
/// in the file's group drops set-group-ID; a set-group-ID directory gives its group to new
/// files and its set-group-ID bit to new directories.
fn set_id_bits(s: &mut Suite, root: &Path) {
    let d = root.join("setid");
    dir(&d, 0, 0, 0o777);
    let f = d.join("f");
    file(&f, ALICE.uid, SHARED, 0o6777);
    let ff = f.clone();
    as_user(BOB, move || append(&ff, b"x")).unwrap();
    s.check(
        "a write by another user clears S_ISUID and S_ISGID",
        mode(&f),
        0o777,
    );
    chmod(&f, 0o6777).unwrap();
    let ff = f.clone();
    as_user(ALICE, move || append(&ff, b"x")).unwrap();
    s.check("a write by the owner clears them too", mode(&f), 0o777);
    chmod(&f, 0o6777).unwrap();
    append(&f, b"x").unwrap();
    s.check("a write by root keeps them (CAP_FSETID)", mode(&f), 0o6777);
    chmod(&f, 0o2766).unwrap();
    let ff = f.clone();
    as_user(BOB, move || append(&ff, b"x")).unwrap();
    s.check(
        "S_ISGID without group execute survives a write",
        mode(&f),
        0o2766,
    );
    chmod(&f, 0o6777).unwrap();
    let ff = f.clone();
    as_user(BOB, move || truncate(&ff, 1)).unwrap();
    s.check("a truncate by another user clears them", mode(&f), 0o777);
    chmod(&f, 0o6755).unwrap();
    chown(&f, Some(BOB.uid), None).unwrap();
    s.check(
        "chown, even by root, clears them on a regular file",
        mode(&f),
        0o755,
    );
    let g = d.join("g");
    file(&g, CAROL.uid, SHARED, 0o755);
    let gg = g.clone();
    as_user(CAROL, move || chmod(&gg, 0o2755)).unwrap();
    s.check(
        "chmod g+s by an owner outside the file's group drops S_ISGID",
        mode(&g),
        0o755,
    );
    let sg = d.join("sgid-dir");
    dir(&sg, 0, SHARED, 0o2777);
    let ss = sg.clone();
    let made = as_user(CAROL, move || {
        std::fs::write(ss.join("x"), b"").unwrap();
        std::fs::create_dir(ss.join("y")).unwrap();
        let (x, y) = (stat(&ss.join("x")), stat(&ss.join("y")));
        (x.st_gid, y.st_gid, y.st_mode & 0o2000 != 0, x.st_uid)
    });
    s.check(
        "a set-group-ID directory gives new files its group and new directories its S_ISGID",
        made,
        (SHARED, SHARED, true, CAROL.uid),
    );
}

/// chown(2), chmod(2): only root changes a file's owner; the owner may change its group to
/// any group it is a member of, and nobody else may change the group; only the owner (or
/// root) changes the mode.
fn ownership(s: &mut Suite, root: &Path) {
    let d = root.join("own");
    dir(&d, 0, 0, 0o777);
    let f = d.join("f");
    file(&f, ALICE.uid, ALICE.gid, 0o644);
    let ff = f.clone();
    s.check(
        "the owner may not give the file away",
        as_user(ALICE, move || chown(&ff, Some(BOB.uid), None)),
        Err(libc::EPERM),
    );
    let ff = f.clone();
    s.check(
        "the owner may change the group to one it is in",
        as_user(ALICE, move || chown(&ff, None, Some(SHARED))),
        Ok(()),
    );
    s.check("the group changed", stat(&f).st_gid, SHARED);
    let ff = f.clone();
    s.check(
        "the owner may not change the group to one it is not in",
        as_user(ALICE, move || chown(&ff, None, Some(CAROL.gid))),
        Err(libc::EPERM),
    );
    let ff = f.clone();
    s.check(
        "another user may not change the group, even to its own",
        as_user(BOB, move || chown(&ff, None, Some(SHARED))),
        Err(libc::EPERM),
    );
    let ff = f.clone();
    s.check(
        "the owner may chown to itself (no change)",
        as_user(ALICE, move || chown(&ff, Some(ALICE.uid), None)),
        Ok(()),
    );
    let ff = f.clone();
    s.check(
        "another user may not chmod",
        as_user(BOB, move || chmod(&ff, 0o777)),
        Err(libc::EPERM),
    );
    let ff = f.clone();
    s.check(
        "the owner may chmod",
        as_user(ALICE, move || chmod(&ff, 0o600)),
        Ok(()),
    );
    s.check(
        "root may change the owner and group",
        chown(&f, Some(CAROL.uid), Some(CAROL.gid)).map(|()| {
            let st = stat(&f);
            (st.st_uid, st.st_gid)
        }),
        Ok((CAROL.uid, CAROL.gid)),
    );
}

/// utimensat(2): setting both times to the current time needs ownership or write permission
/// (EACCES otherwise); setting them to anything else needs ownership (EPERM otherwise);
/// UTIME_OMIT for both changes nothing and needs nothing.
fn utimensat_rules(s: &mut Suite, root: &Path) {
    let d = root.join("utime");
    dir(&d, 0, 0, 0o777);
    let w = d.join("writable");
    file(&w, ALICE.uid, ALICE.gid, 0o666);
    let r = d.join("read-only");
    file(&r, ALICE.uid, ALICE.gid, 0o644);
    let ww = w.clone();
    s.check(
        "UTIME_NOW by a non-owner with write permission",
        as_user(BOB, move || utimens(&ww, None, None)),
        Ok(()),
    );
    let rr = r.clone();
    s.check(
        "UTIME_NOW by a non-owner without write permission",
        as_user(BOB, move || utimens(&rr, None, None)),
        Err(libc::EACCES),
    );
    let ww = w.clone();
    s.check(
        "explicit times by a non-owner, even with write permission",
        as_user(BOB, move || utimens(&ww, Some(1_000_000), Some(1_000_000))),
        Err(libc::EPERM),
    );
    let ww = w.clone();
    s.check(
        "an explicit mtime with UTIME_OMIT atime by a non-owner",
        as_user(BOB, move || utimens(&ww, Some(-1), Some(1_000_000))),
        Err(libc::EPERM),
    );
    let before = times(&r);
    let rr = r.clone();
    s.check(
        "UTIME_OMIT for both by anyone",
        as_user(CAROL, move || utimens(&rr, Some(-1), Some(-1))),
        Ok(()),
    );
    s.check(
        "UTIME_OMIT for both changes no time",
        times(&r).0..=times(&r).1,
        before.0..=before.1,
    );
    let rr = r.clone();
    s.check(
        "explicit times by the owner",
        as_user(ALICE, move || {
            utimens(&rr, Some(1_000_000), Some(2_000_000))
        }),
        Ok(()),
    );
    let t = times(&r);
    s.check(
        "explicit times are stored",
        (t.0, t.1),
        (1_000_000 * 1_000_000_000, 2_000_000 * 1_000_000_000),
    );
    s.check(
        "explicit times by root on another's file",
        utimens(&w, Some(3_000_000), Some(-1)),
        Ok(()),
    );
    s.check(
        "UTIME_OMIT keeps the other time",
        times(&w).0,
        3_000_000 * 1_000_000_000,
    );
}

/// inode(7) "The file timestamps", write(2), chmod(2), link(2), unlink(2), rename(2),
/// mkdir(2): what changes which of atime, mtime and ctime.
fn timestamps(s: &mut Suite, root: &Path) {
    let d = root.join("times");
    dir(&d, 0, 0, 0o755);
    let f = d.join("f");
    std::fs::write(&f, b"x").unwrap();
    times_on_contents_and_attributes(s, &f, &d);
    times_on_names(s, &f, &d);
}

/// Which of atime, mtime and ctime differ between `before` and `after`.
fn changed(before: (i64, i64, i64), after: (i64, i64, i64)) -> (bool, bool, bool) {
    (
        after.0 != before.0,
        after.1 != before.1,
        after.2 != before.2,
    )
}

/// write(2), chmod(2), chown(2), truncate(2) on `f` in `d`: what changes which time.
fn times_on_contents_and_attributes(s: &mut Suite, f: &Path, d: &Path) {
    let (t0, d0) = (times(f), times(d));
    tick();
    append(f, b"y").unwrap();
    s.check(
        "write changes mtime and ctime, not atime",
        changed(t0, times(f)),
        (false, true, true),
    );
    s.check("write leaves the directory alone", times(d), d0);
    let t0 = times(f);
    tick();
    chmod(f, 0o600).unwrap();
    s.check(
        "chmod changes ctime only",
        changed(t0, times(f)),
        (false, false, true),
    );
    let t0 = times(f);
    tick();
    chown(f, Some(ALICE.uid), None).unwrap();
    s.check(
        "chown changes ctime only",
        changed(t0, times(f)),
        (false, false, true),
    );
    let t0 = times(f);
    tick();
    truncate(f, 0).unwrap();
    s.check(
        "truncate changes mtime and ctime",
        changed(t0, times(f)),
        (false, true, true),
    );
}

/// link(2), unlink(2), rename(2) of `f` in `d`, and mkdir(2) in `d`: what changes which time.
fn times_on_names(s: &mut Suite, f: &Path, d: &Path) {
    let (t0, d0) = (times(f), times(d));
    tick();
    link(f, &d.join("g")).unwrap();
    s.check(
        "link changes the file's ctime",
        changed(t0, times(f)),
        (false, false, true),
    );
    s.check(
        "link changes the directory's mtime and ctime",
        changed(d0, times(d)),
        (false, true, true),
    );
    let (t0, d0) = (times(f), times(d));
    tick();
    unlink(&d.join("g")).unwrap();
    s.check(
        "unlink of one of two links changes the file's ctime",
        changed(t0, times(f)),
        (false, false, true),
    );
    s.check(
        "unlink changes the directory's mtime and ctime",
        changed(d0, times(d)),
        (false, true, true),
    );
    let (t0, d0) = (times(f), times(d));
    tick();
    rename(f, &d.join("h")).unwrap();
    s.check(
        "rename changes the moved file's ctime (as Linux file systems do)",
        changed(t0, times(&d.join("h"))),
        (false, false, true),
    );
    s.check(
        "rename changes the directory's mtime and ctime",
        changed(d0, times(d)),
        (false, true, true),
    );
    let d0 = times(d);
    tick();
    mkdir(&d.join("sub"), 0o755).unwrap();
    s.check(
        "mkdir changes the parent's mtime and ctime",
        changed(d0, times(d)),
        (false, true, true),
    );
    let new = times(&d.join("sub"));
    s.check(
        "a new directory's times are all equal",
        (new.0 == new.1, new.1 == new.2),
        (true, true),
    );
}

/// rename(2), renameat2(2), link(2), rmdir(2): the corner cases, as `who` in `base`.
fn rename_and_link(s: &mut Suite, base: &Path, who: Who) {
    let base: PathBuf = base.join(format!("rename-{}", who.name));
    let b = base.clone();
    let got = as_user(who, move || {
        rename_tree(&b);
        let mut out = renames(&b);
        out.extend(exchanges_links_and_removals(&b));
        out
    });
    let want = [
        Ok(()),
        Ok(()),
        Ok(()),
        Err(libc::EINVAL),
        Err(libc::EISDIR),
        Err(libc::ENOTDIR),
        Err(libc::ENOTEMPTY),
        Ok(()),
        Err(libc::EEXIST),
        Ok(()),
        Ok(()),
        Ok(()),
        Ok(()),
        Err(libc::ENOENT),
        Err(libc::EINVAL),
        Err(libc::ENOENT),
        Err(libc::EPERM),
        Err(libc::EEXIST),
        Err(libc::EINVAL),
        Err(libc::ENOTEMPTY),
        Err(libc::EISDIR),
    ];
    assert_eq!(got.len(), want.len());
    for ((rule, r), w) in got.into_iter().zip(want) {
        s.check(&format!("{} ({})", rule, who.name), r, w);
    }
}

/// What the rename, link and rmdir cases start from in `b`: files `a` and `f`, directories
/// `d` (with `sub`), `e`, and `full` (holding `x`).
fn rename_tree(b: &Path) {
    let p = |n: &str| b.join(n);
    mkdir(b, 0o755).unwrap();
    std::fs::write(p("a"), b"a").unwrap();
    std::fs::write(p("f"), b"f").unwrap();
    mkdir(&p("d"), 0o755).unwrap();
    mkdir(&p("d/sub"), 0o755).unwrap();
    mkdir(&p("e"), 0o755).unwrap();
    mkdir(&p("full"), 0o755).unwrap();
    std::fs::write(p("full/x"), b"").unwrap();
}

/// rename(2) of names in `b` to themselves, between links, and of directories onto files,
/// subtrees and other directories: each rule and its result.
fn renames(b: &Path) -> Vec<(&'static str, Result<(), i32>)> {
    let p = |n: &str| b.join(n);
    let mut out = Vec::new();
    out.push((
        "rename of a name to itself succeeds",
        rename(&p("a"), &p("a")),
    ));
    link(&p("a"), &p("a2")).unwrap();
    out.push((
        "rename between two links of one file succeeds and changes nothing",
        rename(&p("a"), &p("a2")),
    ));
    out.push((
        "both links are still there",
        if p("a").exists() && p("a2").exists() {
            Ok(())
        } else {
            Err(0)
        },
    ));
    out.push((
        "a directory cannot move into its own subtree (EINVAL)",
        rename(&p("d"), &p("d/sub/d")),
    ));
    out.push((
        "a file cannot replace a directory (EISDIR)",
        rename(&p("f"), &p("e")),
    ));
    out.push((
        "a directory cannot replace a file (ENOTDIR)",
        rename(&p("e"), &p("f")),
    ));
    out.push((
        "a directory cannot replace a non-empty one (ENOTEMPTY)",
        rename(&p("e"), &p("full")),
    ));
    out.push((
        "a directory replaces an empty one",
        rename(&p("e"), &p("d/sub")),
    ));
    out
}

/// renameat2(2)'s RENAME_NOREPLACE and RENAME_EXCHANGE, a missing source, link(2) and
/// rmdir(2) and unlink(2) of names in `b`: each rule and its result.
fn exchanges_links_and_removals(b: &Path) -> Vec<(&'static str, Result<(), i32>)> {
    let p = |n: &str| b.join(n);
    let mut out = Vec::new();
    out.push((
        "RENAME_NOREPLACE refuses an existing name (EEXIST)",
        rename2(&p("f"), &p("a"), libc::RENAME_NOREPLACE),
    ));
    out.push((
        "RENAME_NOREPLACE moves to a free name",
        rename2(&p("f"), &p("g"), libc::RENAME_NOREPLACE),
    ));
    out.push((
        "RENAME_EXCHANGE swaps a file and a directory",
        rename2(&p("g"), &p("full"), libc::RENAME_EXCHANGE),
    ));
    out.push((
        "after the exchange each name holds the other's inode",
        if p("g").join("x").exists() && std::fs::read(p("full")).ok() == Some(b"f".to_vec()) {
            Ok(())
        } else {
            Err(0)
        },
    ));
    out.push((
        "RENAME_EXCHANGE back restores both",
        rename2(&p("full"), &p("g"), libc::RENAME_EXCHANGE),
    ));
    out.push((
        "RENAME_EXCHANGE needs both names (ENOENT)",
        rename2(&p("g"), &p("missing"), libc::RENAME_EXCHANGE),
    ));
    out.push((
        "RENAME_EXCHANGE cannot put a directory inside itself (EINVAL)",
        rename2(&p("d"), &p("d/sub"), libc::RENAME_EXCHANGE),
    ));
    out.push((
        "a missing source gives ENOENT",
        rename(&p("missing"), &p("x")),
    ));
    out.push((
        "a directory cannot be hard-linked (EPERM)",
        link(&p("d"), &p("d2")),
    ));
    out.push((
        "link to an existing name gives EEXIST",
        link(&p("g"), &p("a")),
    ));
    // SAFETY: a valid C string.
    out.push((
        "rmdir of \".\" gives EINVAL",
        sys(unsafe { libc::rmdir(c(&p("d/.")).as_ptr()) }),
    ));
    out.push(("rmdir of a non-empty directory gives ENOTEMPTY", {
        // SAFETY: a valid C string.
        sys(unsafe { libc::rmdir(c(&p("full")).as_ptr()) })
    }));
    out.push(("unlink of a directory gives EISDIR", unlink(&p("d"))));
    out
}

fn mknod(p: &Path, mode: u32, dev: libc::dev_t) -> Result<(), i32> {
    // SAFETY: a valid C string.
    sys(unsafe { libc::mknod(c(p).as_ptr(), mode, dev) })
}

/// mknod(2), mkfifo(3), unix(7): FIFOs, sockets and device nodes are files of the file system
/// whose I/O the kernel serves; making a device node needs CAP_MKNOD (EPERM otherwise); a
/// mount without `dev` (this one) does not open devices (EACCES).
fn special_files(s: &mut Suite, root: &Path) {
    let d = root.join("special");
    dir(&d, 0, 0, 0o777);
    let fifo = fifo(s, &d);
    sockets(s, &d);
    device_nodes(s, &d);
    s.check(
        "a FIFO cannot be truncated (EINVAL)",
        truncate(&fifo, 0),
        Err(libc::EINVAL),
    );
    s.check(
        "a FIFO can be renamed and linked like any file",
        rename(&fifo, &d.join("fifo2")).and_then(|()| link(&d.join("fifo2"), &d.join("fifo3"))),
        Ok(()),
    );
}

/// mkfifo(3) in `d`: a FIFO carries bytes from its writer to its reader, and keeps its mode;
/// its path.
fn fifo(s: &mut Suite, d: &Path) -> PathBuf {
    let fifo = d.join("fifo");
    s.check("mkfifo", mknod(&fifo, libc::S_IFIFO | 0o640, 0), Ok(()));
    let through = (|| {
        use std::io::{Read, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let mut r = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)?;
        let mut w = std::fs::OpenOptions::new().write(true).open(&fifo)?;
        w.write_all(b"through the pipe")?;
        let mut got = [0u8; 16];
        r.read_exact(&mut got)?;
        Ok::<_, std::io::Error>(got.to_vec())
    })();
    s.check(
        "a FIFO carries bytes from its writer to its reader",
        through.map_err(|e| e.raw_os_error()),
        Ok(b"through the pipe".to_vec()),
    );
    s.check(
        "a FIFO is a FIFO with its mode",
        stat(&fifo).st_mode,
        libc::S_IFIFO | 0o640,
    );
    fifo
}

/// bind(2) in `d` makes a socket file, through which a client talks to the listener.
fn sockets(s: &mut Suite, d: &Path) {
    let sock = d.join("sock");
    let bound = std::os::unix::net::UnixListener::bind(&sock);
    s.check("bind(2) makes a socket file", bound.is_ok(), true);
    s.check(
        "a socket file is a socket",
        stat(&sock).st_mode & libc::S_IFMT,
        libc::S_IFSOCK,
    );
    let talk = bound.map(|l| {
        use std::io::{Read, Write};
        let mut c = std::os::unix::net::UnixStream::connect(&sock)?;
        let (mut a, _) = l.accept()?;
        c.write_all(b"hello")?;
        let mut got = [0u8; 5];
        a.read_exact(&mut got)?;
        Ok::<_, std::io::Error>(got)
    });
    s.check(
        "a client connects to the socket and talks to its listener",
        talk.ok().and_then(|r| r.ok()),
        Some(*b"hello"),
    );
}

/// mknod(2) of device nodes in `d`: root's keep their type and number and do not open on a
/// nodev mount; a user without CAP_MKNOD makes FIFOs but no device nodes.
fn device_nodes(s: &mut Suite, d: &Path) {
    let null = d.join("null");
    s.check(
        "root makes a character device node",
        mknod(&null, libc::S_IFCHR | 0o666, libc::makedev(1, 3)),
        Ok(()),
    );
    let st = stat(&null);
    s.check(
        "the node keeps its type and device number",
        (st.st_mode & libc::S_IFMT, st.st_rdev),
        (libc::S_IFCHR, libc::makedev(1, 3)),
    );
    s.check(
        "a device node on a nodev mount does not open",
        open(&null, libc::O_RDONLY),
        Err(libc::EACCES),
    );
    s.check(
        "root makes a block device node",
        mknod(&d.join("blk"), libc::S_IFBLK | 0o600, libc::makedev(7, 0)),
        Ok(()),
    );
    let dd = d.to_path_buf();
    s.check(
        "a user without CAP_MKNOD may not make a device node",
        as_user(ALICE, move || {
            mknod(
                &dd.join("alices"),
                libc::S_IFCHR | 0o666,
                libc::makedev(1, 3),
            )
        }),
        Err(libc::EPERM),
    );
    let dd = d.to_path_buf();
    s.check(
        "a user may make a FIFO",
        as_user(ALICE, move || {
            mknod(&dd.join("alices-fifo"), libc::S_IFIFO | 0o600, 0)
        }),
        Ok(()),
    );
}

/// The same special files, read back after a clean unmount and mount.
fn special_files_after_remount(s: &mut Suite, root: &Path) {
    let d = root.join("special");
    let kinds: Vec<(&str, u32, libc::dev_t)> = ["fifo2", "sock", "null", "blk"]
        .iter()
        .map(|n| {
            let st = stat(&d.join(n));
            (*n, st.st_mode, st.st_rdev)
        })
        .collect();
    s.check(
        "special files survive a remount with their types, modes and device numbers",
        kinds,
        vec![
            ("fifo2", libc::S_IFIFO | 0o640, 0),
            ("sock", libc::S_IFSOCK | 0o755, 0),
            ("null", libc::S_IFCHR | 0o644, libc::makedev(1, 3)), // the umask applies
            ("blk", libc::S_IFBLK | 0o600, libc::makedev(7, 0)),
        ],
    );
    s.check("a FIFO's links survive", stat(&d.join("fifo3")).st_nlink, 2);
}

fn setxattr(p: &Path, name: &str, value: &[u8], flags: libc::c_int) -> Result<(), i32> {
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings and a value buffer of the given length.
    sys(unsafe {
        libc::lsetxattr(
            c(p).as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
}

/// getxattr(2) with a buffer of `cap` bytes (0: ask for the size).
fn getxattr(p: &Path, name: &str, cap: usize) -> Result<Vec<u8>, i32> {
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; cap];
    // SAFETY: valid C strings and a writable buffer of `cap` bytes.
    let r = unsafe { libc::lgetxattr(c(p).as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), cap) };
    if r < 0 {
        return Err(sys(-1).unwrap_err());
    }
    buf.truncate(if cap == 0 { 0 } else { r as usize });
    if cap == 0 {
        buf = vec![0; r as usize];
    }
    Ok(buf)
}

fn listxattr(p: &Path) -> Result<Vec<String>, i32> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: a valid C string and a writable buffer.
    let r = unsafe { libc::llistxattr(c(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(sys(-1).unwrap_err());
    }
    buf.truncate(r as usize);
    Ok(buf
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect())
}

fn removexattr(p: &Path, name: &str) -> Result<(), i32> {
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings.
    sys(unsafe { libc::lremovexattr(c(p).as_ptr(), n.as_ptr()) })
}

/// xattr(7), setxattr(2), getxattr(2), listxattr(2), removexattr(2): `user.` attributes on
/// regular files and directories, by whoever may write the file (read: whoever may read
/// it); `trusted.` ones by root only (and invisible to others); XATTR_CREATE and
/// XATTR_REPLACE; ERANGE for a short buffer, ENODATA for a missing name, EOPNOTSUPP for an
/// unknown namespace; a change updates ctime.
fn xattrs(s: &mut Suite, root: &Path) {
    let d = root.join("xattr");
    dir(&d, ALICE.uid, ALICE.gid, 0o755);
    let f = d.join("f");
    file(&f, ALICE.uid, ALICE.gid, 0o644);
    user_xattrs(s, &f);
    trusted_xattrs(s, &f);
    xattr_limits_and_removal(s, &f);
    s.check(
        "a directory takes user. attributes",
        setxattr(&d, "user.dir", b"d", 0).and_then(|()| getxattr(&d, "user.dir", 8)),
        Ok(b"d".to_vec()),
    );
    let l = d.join("link");
    std::os::unix::fs::symlink("f", &l).unwrap();
    s.check(
        "a symlink takes no user. attribute (EPERM)",
        setxattr(&l, "user.x", b"1", 0),
        Err(libc::EPERM),
    );
    s.check(
        "a symlink takes a trusted. attribute",
        setxattr(&l, "trusted.x", b"1", 0),
        Ok(()),
    );
    // Real tools: cp -a keeps attributes; tar records and restores them.
    let copy = d.join("copy");
    let out = std::process::Command::new("cp")
        .args(["-a", "--preserve=xattr"])
        .arg(&f)
        .arg(&copy)
        .status()
        .unwrap();
    s.check(
        "cp -a copies the attributes",
        (out.success(), getxattr(&copy, "user.colour", 64)),
        (true, Ok(b"green".to_vec())),
    );
}

/// `user.` attributes on Alice's file `f`: set by its owner, read back (sizes, ERANGE),
/// XATTR_CREATE and XATTR_REPLACE, empty values; read but not set by another user.
fn user_xattrs(s: &mut Suite, f: &Path) {
    let ff = f.to_path_buf();
    s.check(
        "the owner sets a user. attribute",
        as_user(ALICE, move || setxattr(&ff, "user.colour", b"blue", 0)),
        Ok(()),
    );
    s.check(
        "the value reads back",
        getxattr(f, "user.colour", 64),
        Ok(b"blue".to_vec()),
    );
    s.check(
        "a zero-size getxattr returns the value's size",
        getxattr(f, "user.colour", 0).map(|v| v.len()),
        Ok(4),
    );
    s.check(
        "a buffer too small gives ERANGE",
        getxattr(f, "user.colour", 2),
        Err(libc::ERANGE),
    );
    s.check(
        "XATTR_CREATE of an existing name gives EEXIST",
        setxattr(f, "user.colour", b"red", libc::XATTR_CREATE),
        Err(libc::EEXIST),
    );
    s.check(
        "XATTR_REPLACE of a missing name gives ENODATA",
        setxattr(f, "user.size", b"9", libc::XATTR_REPLACE),
        Err(libc::ENODATA),
    );
    s.check(
        "XATTR_REPLACE replaces",
        setxattr(f, "user.colour", b"green", libc::XATTR_REPLACE)
            .and_then(|()| getxattr(f, "user.colour", 64)),
        Ok(b"green".to_vec()),
    );
    s.check(
        "an empty value is a value",
        setxattr(f, "user.empty", b"", 0).and_then(|()| getxattr(f, "user.empty", 64)),
        Ok(Vec::new()),
    );
    let ff = f.to_path_buf();
    s.check(
        "another user reads a user. attribute of a file it may read",
        as_user(CAROL, move || getxattr(&ff, "user.colour", 64)),
        Ok(b"green".to_vec()),
    );
    let ff = f.to_path_buf();
    s.check(
        "another user may not set one on a file it may not write",
        as_user(CAROL, move || setxattr(&ff, "user.x", b"1", 0)),
        Err(libc::EACCES),
    );
}

/// `trusted.` attributes on `f`: root's only, and invisible to other users' lists.
fn trusted_xattrs(s: &mut Suite, f: &Path) {
    s.check(
        "root sets a trusted. attribute",
        setxattr(f, "trusted.tag", b"t", 0),
        Ok(()),
    );
    let ff = f.to_path_buf();
    s.check(
        "a user without CAP_SYS_ADMIN may not set a trusted. attribute",
        as_user(ALICE, move || setxattr(&ff, "trusted.mine", b"t", 0)),
        Err(libc::EPERM),
    );
    s.check(
        "root lists every name",
        listxattr(f),
        Ok(vec![
            "trusted.tag".to_string(),
            "user.colour".into(),
            "user.empty".into(),
        ]),
    );
    let ff = f.to_path_buf();
    s.check(
        "other users do not see trusted. names",
        as_user(CAROL, move || listxattr(&ff)),
        Ok(vec!["user.colour".to_string(), "user.empty".into()]),
    );
}

/// Missing names, unknown namespaces, names and values too large, and removal (which
/// updates ctime only) on `f`.
fn xattr_limits_and_removal(s: &mut Suite, f: &Path) {
    s.check(
        "a missing name gives ENODATA",
        getxattr(f, "user.none", 64),
        Err(libc::ENODATA),
    );
    s.check(
        "an unknown namespace gives EOPNOTSUPP",
        setxattr(f, "other.x", b"1", 0),
        Err(libc::EOPNOTSUPP),
    );
    s.check(
        "a name longer than 255 bytes gives ERANGE",
        setxattr(f, &format!("user.{}", "n".repeat(300)), b"1", 0),
        Err(libc::ERANGE),
    );
    s.check(
        "a value larger than the store keeps gives E2BIG",
        setxattr(f, "user.big", &vec![1u8; 8192], 0),
        Err(libc::E2BIG),
    );
    s.check(
        "a 3 KiB value is kept",
        setxattr(f, "user.large", &vec![7u8; 3072], 0)
            .and_then(|()| getxattr(f, "user.large", 4096)),
        Ok(vec![7u8; 3072]),
    );
    let t0 = times(f);
    tick();
    s.check(
        "removexattr removes",
        removexattr(f, "user.empty").and_then(|()| getxattr(f, "user.empty", 8)),
        Err(libc::ENODATA),
    );
    let t1 = times(f);
    s.check(
        "an attribute change updates ctime only",
        (t1.0 == t0.0, t1.1 == t0.1, t1.2 > t0.2),
        (true, true, true),
    );
    s.check(
        "removexattr of a missing name gives ENODATA",
        removexattr(f, "user.empty"),
        Err(libc::ENODATA),
    );
}

/// The attributes set above, read back after a clean unmount and mount.
fn xattrs_after_remount(s: &mut Suite, root: &Path) {
    let f = root.join("xattr/f");
    s.check(
        "attributes survive a remount",
        (
            listxattr(&f),
            getxattr(&f, "user.colour", 64),
            getxattr(&f, "user.large", 4096),
        ),
        (
            Ok(vec![
                "trusted.tag".to_string(),
                "user.colour".into(),
                "user.large".into(),
            ]),
            Ok(b"green".to_vec()),
            Ok(vec![7u8; 3072]),
        ),
    );
}

use switchyard_store::acl::{encode as acl, GROUP, GROUP_OBJ, MASK, NO_ID as ANY, OTHER};
use switchyard_store::acl::{USER, USER_OBJ};

const ACL_ACCESS: &str = "system.posix_acl_access";
const ACL_DEFAULT: &str = "system.posix_acl_default";

/// POSIX ACLs (acl(5), setfacl(1)), as ext4 keeps them: a named user or group gets the access
/// its entry and the mask give, where the mode alone would refuse it, and loses it as the mask
/// or its entry says; setting an ACL sets the mode's group bits to the mask, chmod sets the
/// mask; a default ACL is inherited by what is made in the directory (the umask then does
/// not apply) and a directory inherits it as its own default; invalid ones give EINVAL, a
/// default ACL on a file EACCES, and only the owner (or root) may set one.
fn acls(s: &mut Suite, root: &Path) {
    let d = root.join("acl");
    dir(&d, ALICE.uid, ALICE.gid, 0o755);
    let f = d.join("f");
    file(&f, ALICE.uid, ALICE.gid, 0o600);
    acl_grants(s, &f);
    acl_mask_and_refusals(s, &f);
    // A shared directory: everything made in it is the group's to read and write.
    let shared = d.join("shared");
    dir(&shared, ALICE.uid, ALICE.gid, 0o755);
    let inherit = acl(&[
        (USER_OBJ, 7, ANY),
        (GROUP_OBJ, 5, ANY),
        (GROUP, 7, SHARED),
        (MASK, 7, ANY),
        (OTHER, 5, ANY),
    ]);
    s.check(
        "the owner sets a default ACL",
        setxattr(&shared, ACL_DEFAULT, &inherit, 0),
        Ok(()),
    );
    s.check(
        "and one that lets the group in",
        setxattr(&shared, ACL_ACCESS, &inherit, 0),
        Ok(()),
    );
    default_acl_inherited_by_a_file(s, &shared);
    let sub = shared.join("sub");
    s.check("a directory made in it", mkdir(&sub, 0o700), Ok(()));
    s.check(
        "inherits the default ACL as its own",
        getxattr(&sub, ACL_DEFAULT, 256),
        Ok(inherit.clone()),
    );
    s.check(
        "and as its access ACL, masked by its mode",
        (
            mode(&sub) & 0o777,
            getxattr(&sub, ACL_ACCESS, 256).map(|a| a.len()),
        ),
        (0o700, Ok(4 + 5 * 8)),
    );
    let plain = d.join("plain");
    let pp = plain.clone();
    let created = as_user(ALICE, move || {
        // SAFETY: as above.
        let old = unsafe { libc::umask(0o027) };
        let r = std::fs::write(&pp, b"x").map_err(|e| e.raw_os_error().unwrap_or(0));
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        r
    });
    s.check(
        "without a default ACL the umask applies",
        created.map(|()| mode(&plain) & 0o777),
        Ok(0o640),
    );
    s.check(
        "removing the default ACL",
        removexattr(&shared, ACL_DEFAULT).map(|()| getxattr(&shared, ACL_DEFAULT, 256)),
        Ok(Err(libc::ENODATA)),
    );
}

/// Whether Bob may open `f` for reading.
fn bob_reads(f: &Path) -> Result<(), i32> {
    let ff = f.to_path_buf();
    as_user(BOB, move || open(&ff, libc::O_RDONLY))
}

/// Alice's access ACL on her file `f`: a named user entry grants Bob reading (not writing),
/// no one else; the mode's group bits are the mask; it reads back and is listed.
fn acl_grants(s: &mut Suite, f: &Path) {
    s.check(
        "without an ACL the mode refuses bob",
        bob_reads(f),
        Err(libc::EACCES),
    );
    let grant = acl(&[
        (USER_OBJ, 6, ANY),
        (USER, 4, BOB.uid),
        (GROUP_OBJ, 0, ANY),
        (MASK, 4, ANY),
        (OTHER, 0, ANY),
    ]);
    let ff = f.to_path_buf();
    let g = grant.clone();
    s.check(
        "the owner sets an access ACL",
        as_user(ALICE, move || setxattr(&ff, ACL_ACCESS, &g, 0)),
        Ok(()),
    );
    s.check(
        "a named user entry grants bob reading",
        bob_reads(f),
        Ok(()),
    );
    let ff = f.to_path_buf();
    s.check(
        "but not writing, which its entry does not give",
        as_user(BOB, move || open(&ff, libc::O_WRONLY)),
        Err(libc::EACCES),
    );
    s.check(
        "carol, named nowhere, is still refused",
        as_user(CAROL, {
            let ff = f.to_path_buf();
            move || open(&ff, libc::O_RDONLY)
        }),
        Err(libc::EACCES),
    );
    s.check("the mode's group bits are the mask", mode(f) & 0o777, 0o640);
    s.check(
        "the ACL reads back",
        getxattr(f, ACL_ACCESS, 256),
        Ok(grant),
    );
    s.check(
        "listxattr names it",
        listxattr(f).map(|l| l.contains(&ACL_ACCESS.to_string())),
        Ok(true),
    );
}

/// chmod sets the mask of `f`'s ACL (and takes Bob's reading); others may not set an ACL;
/// invalid ones, default ACLs on files, and ACLs the mode can say.
fn acl_mask_and_refusals(s: &mut Suite, f: &Path) {
    s.check("chmod g-r clears the mask", chmod(f, 0o600), Ok(()));
    s.check("and with it bob's reading", bob_reads(f), Err(libc::EACCES));
    s.check(
        "the ACL's mask follows the mode",
        getxattr(f, ACL_ACCESS, 256),
        Ok(acl(&[
            (USER_OBJ, 6, ANY),
            (USER, 4, BOB.uid),
            (GROUP_OBJ, 0, ANY),
            (MASK, 0, ANY),
            (OTHER, 0, ANY),
        ])),
    );
    let ff = f.to_path_buf();
    s.check(
        "another user may not set an ACL",
        as_user(BOB, move || {
            setxattr(
                &ff,
                ACL_ACCESS,
                &acl(&[(USER_OBJ, 7, ANY), (GROUP_OBJ, 7, ANY), (OTHER, 7, ANY)]),
                0,
            )
        }),
        Err(libc::EPERM),
    );
    s.check(
        "an ACL without an owning group entry gives EINVAL",
        setxattr(
            f,
            ACL_ACCESS,
            &acl(&[(USER_OBJ, 6, ANY), (OTHER, 0, ANY)]),
            0,
        ),
        Err(libc::EINVAL),
    );
    s.check(
        "a default ACL on a file gives EACCES",
        setxattr(
            f,
            ACL_DEFAULT,
            &acl(&[(USER_OBJ, 6, ANY), (GROUP_OBJ, 4, ANY), (OTHER, 0, ANY)]),
            0,
        ),
        Err(libc::EACCES),
    );
    s.check(
        "an ACL the mode can say is only the mode",
        setxattr(
            f,
            ACL_ACCESS,
            &acl(&[(USER_OBJ, 6, ANY), (GROUP_OBJ, 4, ANY), (OTHER, 4, ANY)]),
            0,
        )
        .map(|()| (mode(f) & 0o777, getxattr(f, ACL_ACCESS, 256))),
        Ok((0o644, Err(libc::ENODATA))),
    );
}

/// A file Alice makes in `shared` (with a default ACL) under umask 077 inherits the default
/// ACL, masked by the mode, so Bob of the shared group writes it.
fn default_acl_inherited_by_a_file(s: &mut Suite, shared: &Path) {
    let made = shared.join("made-by-alice");
    let mm = made.clone();
    let created = as_user(ALICE, move || {
        // SAFETY: umask has no preconditions; it is this process's, set back below.
        let old = unsafe { libc::umask(0o077) };
        let r = std::fs::write(&mm, b"x").map_err(|e| e.raw_os_error().unwrap_or(0));
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        r
    });
    s.check("alice makes a file with umask 077", created, Ok(()));
    s.check(
        "it inherits the default ACL, masked by the mode, not the umask",
        (mode(&made) & 0o777, getxattr(&made, ACL_ACCESS, 256)),
        (
            0o664,
            Ok(acl(&[
                (USER_OBJ, 6, ANY),
                (GROUP_OBJ, 5, ANY),
                (GROUP, 7, SHARED),
                (MASK, 6, ANY),
                (OTHER, 4, ANY),
            ])),
        ),
    );
    let mm = made.clone();
    s.check(
        "so bob, of the shared group, writes it",
        as_user(BOB, move || open(&mm, libc::O_WRONLY)),
        Ok(()),
    );
}

fn acls_after_remount(s: &mut Suite, root: &Path) {
    let made = root.join("acl/shared/made-by-alice");
    s.check(
        "ACLs survive a remount, and still grant",
        (
            getxattr(&made, ACL_ACCESS, 256).map(|a| a.len()),
            as_user(BOB, move || open(&made, libc::O_WRONLY)),
        ),
        (Ok(4 + 5 * 8), Ok(())),
    );
}

/// fallocate(2) on descriptor `fd`.
fn falloc(f: &std::fs::File, mode: libc::c_int, off: i64, len: i64) -> Result<(), i32> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: a descriptor we hold open.
    sys(unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) })
}

/// fallocate(2): mode 0 allocates and extends; KEEP_SIZE allocates without extending;
/// PUNCH_HOLE (with KEEP_SIZE) frees the range, which reads as zeros; ZERO_RANGE zeros it;
/// PUNCH_HOLE without KEEP_SIZE, and modes not built, give EOPNOTSUPP; a descriptor not open
/// for writing gives EBADF. st_blocks counts allocated space, so holes take none, and
/// lseek's SEEK_DATA and SEEK_HOLE find them.
fn fallocate(s: &mut Suite, root: &Path, writes: Writes) {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::MetadataExt;
    let d = root.join("falloc");
    dir(&d, 0, 0, 0o755);
    let p = d.join("f");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    let meta = |f: &std::fs::File| {
        let m = f.metadata().unwrap();
        (m.len(), m.blocks())
    };
    s.check(
        "mode 0 allocates 1 MiB and extends the file",
        falloc(&f, 0, 0, 1 << 20).map(|()| meta(&f)),
        Ok((1 << 20, 2048)),
    );
    s.check(
        "KEEP_SIZE past the end keeps the size",
        falloc(&f, libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20).map(|()| meta(&f).0),
        Ok(1 << 20),
    );
    std::fs::write(&p, vec![0xAB; 64 << 10]).unwrap();
    s.check(
        "PUNCH_HOLE|KEEP_SIZE frees the pages and keeps the size",
        falloc(
            &f,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            4096,
            32 << 10,
        )
        .map(|()| meta(&f)),
        Ok((64 << 10, (64 - 32) / 4 * 8)),
    );
    let mut back = Vec::new();
    (&f).seek(SeekFrom::Start(0)).unwrap();
    (&f).read_to_end(&mut back).unwrap();
    let mut want = vec![0xAB; 64 << 10];
    want[4096..4096 + (32 << 10)].fill(0);
    s.check("a punched hole reads as zeros", back == want, true);
    // lseek(2): SEEK_DATA and SEEK_HOLE find the punched hole (pages 1-8) and the end.
    seek_data_and_hole(s, &f, writes);
    s.check(
        "ZERO_RANGE over a partial page zeros exactly the range",
        falloc(&f, libc::FALLOC_FL_ZERO_RANGE, 100, 50).map(|()| {
            let b = std::fs::read(&p).unwrap();
            (b[99], b[100], b[149], b[150])
        }),
        Ok((0xAB, 0, 0, 0xAB)),
    );
    s.check(
        "PUNCH_HOLE without KEEP_SIZE gives EOPNOTSUPP",
        falloc(&f, libc::FALLOC_FL_PUNCH_HOLE, 0, 4096),
        Err(libc::EOPNOTSUPP),
    );
    s.check(
        "COLLAPSE_RANGE (not built) gives EOPNOTSUPP",
        falloc(&f, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096),
        Err(libc::EOPNOTSUPP),
    );
    let ro = std::fs::File::open(&p).unwrap();
    s.check(
        "a descriptor open only for reading gives EBADF",
        falloc(&ro, 0, 0, 4096),
        Err(libc::EBADF),
    );
}

/// lseek(2) of `f` by `off` from `whence`: the offset, or the errno.
fn lseek(f: &std::fs::File, off: i64, whence: libc::c_int) -> Result<i64, i32> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: a descriptor we hold open.
    let r = unsafe { libc::lseek(f.as_raw_fd(), off, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(r)
    }
}

/// SEEK_DATA and SEEK_HOLE find the data of `f` (64 KiB with pages 1-8 punched), its hole
/// and its end. With the writeback cache the file system cannot see the pages the kernel
/// holds dirty, so the kernel answers itself, as lseek(2) allows: the whole file is data, and
/// the only hole is its end.
fn seek_data_and_hole(s: &mut Suite, f: &std::fs::File, writes: Writes) {
    let seek = |off: i64, whence: libc::c_int| lseek(f, off, whence);
    if writes == Writes::Writeback {
        s.check(
            "SEEK_DATA and SEEK_HOLE through the writeback cache: all data, the end a hole",
            [
                seek(0, libc::SEEK_DATA),
                seek(0, libc::SEEK_HOLE),
                seek(5000, libc::SEEK_DATA),
                seek(64 << 10, libc::SEEK_DATA),
            ],
            [Ok(0), Ok(64 << 10), Ok(5000), Err(libc::ENXIO)],
        );
        return;
    }
    s.check(
        "SEEK_DATA and SEEK_HOLE find data, a punched hole and the end",
        [
            seek(0, libc::SEEK_DATA),
            seek(0, libc::SEEK_HOLE),
            seek(5000, libc::SEEK_HOLE),
            seek(5000, libc::SEEK_DATA),
            seek(40 << 10, libc::SEEK_HOLE),
            seek(64 << 10, libc::SEEK_DATA),
        ],
        [
            Ok(0),
            Ok(4096),
            Ok(5000),
            Ok(36 << 10),
            Ok(64 << 10),
            Err(libc::ENXIO),
        ],
    );
}

/// Issue: a 0600 file written through the mount could be read by every user straight from
/// the store file. Neither its contents nor its name reach another user by any route: the
/// mount (the kernel checks the modes) or the store file (owner-only).
fn private(s: &mut Suite, m: &Mount) {
    let d = m.dir.join("private");
    dir(&d, 0, 0, 0o700);
    std::fs::write(d.join("secret"), b"the-secret-bytes").unwrap();
    chmod(&d.join("secret"), 0o600).unwrap();
    let open_ = m.dir.join("open");
    dir(&open_, 0, 0, 0o755);
    std::fs::write(open_.join("secret"), b"the-secret-bytes").unwrap();
    chmod(&open_.join("secret"), 0o600).unwrap();
    let (dd, oo, store) = (d.clone(), open_.clone(), m.store.clone());
    let got = as_user(CAROL, move || {
        (
            open(&dd.join("secret"), libc::O_RDONLY),
            std::fs::read_dir(&dd)
                .map(|_| ())
                .map_err(|e| e.raw_os_error()),
            open(&oo.join("secret"), libc::O_RDONLY),
            open(&store, libc::O_RDONLY),
        )
    });
    s.check(
        "another user reads neither a private file, nor the names in a private directory, \
         nor a 0600 file in an open one, nor the store file",
        got,
        (
            Err(libc::EACCES),
            Err(Some(libc::EACCES)),
            Err(libc::EACCES),
            Err(libc::EACCES),
        ),
    );
    s.check("the store file is owner-only", mode(&m.store), 0o600);
}

/// The reserved share: another user fills an --allow-other mount to ENOSPC, `df` shows the
/// reserve as free but not available, and the owner can still write its share.
#[test]
fn other_users_cannot_take_the_reserved_share() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "this test mounts for every user: run it as root");
    let work = tempfile::tempdir().unwrap();
    chmod(work.path(), 0o755).unwrap();
    let m = Mount::sized(
        work.path(),
        "64M",
        &["--allow-other", "--reserved-percent", "10"],
    );
    chmod(&m.dir, 0o777).unwrap();
    let big = m.dir.join("carols");
    let filled = as_user(CAROL, move || {
        use std::io::Write;
        let mut f = std::fs::File::create(&big).unwrap();
        let chunk = vec![3u8; 1 << 20];
        loop {
            if let Err(e) = f.write_all(&chunk) {
                return e.raw_os_error();
            }
        }
    });
    assert_eq!(
        filled,
        Some(libc::ENOSPC),
        "another user's writes end in ENOSPC"
    );
    // SAFETY: statvfs is plain data filled by the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a writable statvfs.
    assert_eq!(unsafe { libc::statvfs(c(&m.dir).as_ptr(), &mut st) }, 0);
    let (free, avail) = (st.f_bfree as u64 * 4096, st.f_bavail as u64 * 4096);
    assert!(
        free >= 5 << 20 && avail < 1 << 20,
        "df: {free} bytes free, {avail} available to others"
    );
    // The owner (root here) writes into the reserve.
    std::fs::write(m.dir.join("owners"), vec![4u8; 4 << 20]).expect("the reserve is the owner's");
    m.fsck();
}
