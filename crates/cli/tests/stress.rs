//! Several processes at once on one mount: making, renaming, linking and removing files and
//! directories in shared directories, while holding directories open as working directories
//! and as descriptors that others remove. Only the errors POSIX gives for losing a race
//! (ENOENT, EEXIST, ENOTEMPTY) may appear; a held directory must stay usable (fstat), the
//! tree must walk cleanly afterwards, and `fsck` must find the store healthy.
//!
//! `SWITCHYARD_STRESS_SECS` sets how long the workers run (default 120 s; run it longer
//! with e.g. `SWITCHYARD_STRESS_SECS=600 cargo test --release -p switchyard --test stress`).

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Mount, Rng};

const WORKERS: usize = 4;
const SHARED: usize = 3;
const NAMES: u32 = 6;
/// The environment variable that makes this test binary a worker (its value: the mount).
const WORKER: &str = "SWITCHYARD_STRESS_WORKER";

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// The errno of a failed call, 0 on success.
fn err(r: libc::c_int) -> i32 {
    if r < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    } else {
        0
    }
}

/// One worker process: random operations on the shared directories of `root` until `secs`
/// pass. Prints every unexpected error and exits non-zero if there was one.
fn worker(root: &Path, seed: u64, secs: u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut held: Vec<std::fs::File> = Vec::new();
    let mut bad: Vec<String> = Vec::new();
    let mut ops = 0u64;
    let t0 = Instant::now();
    let pick = |rng: &mut Rng, kind: &str| pick(root, rng, kind);
    while t0.elapsed() < Duration::from_secs(secs) {
        ops += 1;
        let op = rng.below(11);
        let (what, e) = match op {
            0..=6 => name_op(root, &mut rng, op, seed),
            7 => hold(&mut held, &pick(&mut rng, "d")),
            8 => {
                // Every held directory, removed or not, still answers fstat.
                let e = held
                    .iter()
                    .find_map(|f| f.metadata().err())
                    .and_then(|e| e.raw_os_error())
                    .unwrap_or(0);
                // Held descriptors never fail, whatever happened to their names.
                if e != 0 {
                    bad.push(format!("fstat of a held directory: errno {e}"));
                }
                ("fstat", 0)
            }
            9 => create_in(&pick(&mut rng, "d"), &mut rng),
            _ => {
                let s = root.join(format!("s{}", rng.below(SHARED as u64)));
                let r = std::fs::read_dir(&s).map(|it| it.count());
                (
                    "readdir",
                    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0),
                )
            }
        };
        if ![0, libc::ENOENT, libc::EEXIST, libc::ENOTEMPTY].contains(&e) {
            bad.push(format!(
                "{what}: errno {e} ({})",
                std::io::Error::from_raw_os_error(e)
            ));
        }
    }
    // Leave the mount, so it can be unmounted.
    // SAFETY: a valid C string.
    unsafe { libc::chdir(c(Path::new("/")).as_ptr()) };
    println!("worker {seed}: {ops} operations");
    if !bad.is_empty() {
        bad.truncate(20);
        println!("unexpected: {bad:?}");
        std::process::exit(1);
    }
}

/// A name in one of the shared directories of `root`: `kind` (`d` or `f`) and a number.
fn pick(root: &Path, rng: &mut Rng, kind: &str) -> PathBuf {
    root.join(format!("s{}", rng.below(SHARED as u64)))
        .join(format!("{kind}{}", rng.below(NAMES as u64)))
}

/// Operation `op` (0 to 6) on names in `root`: mkdir, rmdir, create (with bytes of `seed`),
/// unlink, rename of a file or of a directory, link; its name and errno.
fn name_op(root: &Path, rng: &mut Rng, op: u64, seed: u64) -> (&'static str, i32) {
    match op {
        0 => {
            let d = pick(root, rng, "d");
            // SAFETY: a valid C string.
            ("mkdir", err(unsafe { libc::mkdir(c(&d).as_ptr(), 0o755) }))
        }
        1 => {
            let d = pick(root, rng, "d");
            // SAFETY: a valid C string.
            ("rmdir", err(unsafe { libc::rmdir(c(&d).as_ptr()) }))
        }
        2 => {
            let f = pick(root, rng, "f");
            let r = std::fs::write(&f, vec![seed as u8; rng.below(9000) as usize]);
            (
                "create",
                r.err().and_then(|e| e.raw_os_error()).unwrap_or(0),
            )
        }
        3 => {
            let f = pick(root, rng, "f");
            // SAFETY: a valid C string.
            ("unlink", err(unsafe { libc::unlink(c(&f).as_ptr()) }))
        }
        4 | 5 => {
            let kind = if op == 4 { "f" } else { "d" };
            let (a, b) = (pick(root, rng, kind), pick(root, rng, kind));
            // SAFETY: valid C strings.
            let e = err(unsafe { libc::rename(c(&a).as_ptr(), c(&b).as_ptr()) });
            ("rename", e)
        }
        6 => {
            let (a, b) = (pick(root, rng, "f"), pick(root, rng, "f"));
            // SAFETY: valid C strings.
            (
                "link",
                err(unsafe { libc::link(c(&a).as_ptr(), c(&b).as_ptr()) }),
            )
        }
        _ => unreachable!("operations 0 to 6 are on names"),
    }
}

/// Holds directory `d` open (others may remove it meanwhile), at most three at a time.
fn hold(held: &mut Vec<std::fs::File>, d: &Path) -> (&'static str, i32) {
    // Hold a directory open (others may remove it meanwhile).
    match std::fs::File::open(d) {
        Ok(f) => {
            held.push(f);
            if held.len() > 3 {
                held.remove(0);
            }
            ("hold", 0)
        }
        Err(e) => ("hold", e.raw_os_error().unwrap_or(-1)),
    }
}

/// Works in directory `d` as the working directory, which others may remove: creates and
/// removes a file there.
fn create_in(d: &Path, rng: &mut Rng) -> (&'static str, i32) {
    // Work in a directory as the working directory, which others may remove.
    // SAFETY: a valid C string.
    let e = err(unsafe { libc::chdir(c(d).as_ptr()) });
    if e != 0 {
        ("chdir", e)
    } else {
        let name = CString::new(format!("w{}", rng.below(3))).unwrap();
        // SAFETY: a valid C string; the descriptor is closed at once.
        let fd = unsafe {
            libc::open(
                name.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                0o644,
            )
        };
        let e = err(fd);
        if fd >= 0 {
            // SAFETY: a descriptor we own.
            unsafe { libc::close(fd) };
            // SAFETY: a valid C string.
            unsafe { libc::unlink(name.as_ptr()) };
        }
        ("create in the working directory", e)
    }
}

/// Reads every name below `dir` (stat, and read_dir of directories): nothing may fail.
fn walk(dir: &Path, seen: &mut usize) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p: PathBuf = e.unwrap().path();
        let m = std::fs::symlink_metadata(&p).unwrap();
        *seen += 1;
        if m.is_dir() {
            walk(&p, seen);
        } else {
            std::fs::read(&p).unwrap();
        }
    }
}

#[test]
fn processes_racing_on_shared_directories_see_only_posix_errors() {
    if let Ok(root) = std::env::var(WORKER) {
        // A worker: run by the test below.
        let seed: u64 = std::env::var("SEED").unwrap().parse().unwrap();
        let secs: u64 = std::env::var("SECS").unwrap().parse().unwrap();
        worker(Path::new(&root), seed, secs);
        return;
    }
    let secs: u64 = std::env::var("SWITCHYARD_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let work = tempfile::tempdir().unwrap();
    let m = Mount::new(work.path());
    for i in 0..SHARED {
        std::fs::create_dir(m.path(&format!("s{i}"))).unwrap();
    }
    let me = std::env::current_exe().unwrap();
    let workers: Vec<_> = (0..WORKERS)
        .map(|i| {
            Command::new(&me)
                .args([
                    "--exact",
                    "processes_racing_on_shared_directories_see_only_posix_errors",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(WORKER, &m.dir)
                .env("SEED", (i + 1).to_string())
                .env("SECS", secs.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut failed = Vec::new();
    for w in workers {
        let out = w.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let report: Vec<&str> = text
            .lines()
            // The harness prints its "test … " prefix on the same line.
            .filter_map(|l| {
                ["worker ", "unexpected: "]
                    .iter()
                    .find_map(|k| l.find(k).map(|i| &l[i..]))
            })
            .collect();
        println!("{}", report.join("\n"));
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().take(8).collect();
            failed.push(format!("{}\n{}", report.join("\n"), tail.join("\n")));
        }
    }
    assert!(
        failed.is_empty(),
        "workers saw unexpected errors:\n{}",
        failed.join("\n")
    );
    let mut seen = 0;
    walk(&m.dir, &mut seen);
    println!("{seen} names walked after the run");
    m.fsck();
}
