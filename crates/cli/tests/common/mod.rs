//! What the tests of real programs on a real mount share: the `switchyard` binary, a mount
//! process that unmounts when dropped, `fsck`, and errno helpers.
#![allow(dead_code)] // each test crate uses its own part of this

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_switchyard")
}

pub fn mounted(dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(dir.to_str().unwrap()))
}

/// A `switchyard mount` process; dropping it unmounts.
pub struct Mount {
    pub child: Option<Child>,
    pub store: PathBuf,
    pub dir: PathBuf,
    pub args: Vec<String>,
}

impl Mount {
    /// A fresh 512 MiB store in `work`, mounted on `work/mnt`.
    pub fn new(work: &Path) -> Mount {
        Mount::with_args(work, &[])
    }

    /// [`Mount::new`] with more `switchyard mount` options (kept across remounts).
    pub fn with_args(work: &Path, args: &[&str]) -> Mount {
        Mount::sized(work, "512M", args)
    }

    /// A fresh store of `size` in `work`, mounted on `work/mnt` with `args`.
    pub fn sized(work: &Path, size: &str, args: &[&str]) -> Mount {
        let store = work.join("s.store");
        let ok = Command::new(bin())
            .args(["mkfs", "--size", size, "--store"])
            .arg(&store)
            .current_dir(work)
            .status()
            .unwrap();
        assert!(ok.success());
        let dir = work.join("mnt");
        std::fs::create_dir_all(&dir).unwrap();
        Mount::start_with(store, dir, args.iter().map(|a| a.to_string()).collect())
    }

    /// Mounts an existing store.
    pub fn start(store: PathBuf, dir: PathBuf) -> Mount {
        Mount::start_with(store, dir, Vec::new())
    }

    fn start_with(store: PathBuf, dir: PathBuf, args: Vec<String>) -> Mount {
        let child = Command::new(bin())
            .arg("mount")
            .args(&args)
            .arg("--store")
            .arg(&store)
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while !mounted(&dir) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "mount did not appear"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Mount {
            child: Some(child),
            store,
            dir,
            args,
        }
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.join(p)
    }

    /// Clean unmount (SIGTERM), then mount again.
    pub fn remount(mut self) -> Mount {
        self.stop();
        Mount::start_with(self.store.clone(), self.dir.clone(), self.args.clone())
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill has no memory effects; the pid is our child's.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let status = c.wait().unwrap();
            assert!(status.success(), "mount exited with {status}");
            assert!(!mounted(&self.dir), "still mounted after SIGTERM");
        }
    }

    /// Unmounts cleanly, then checks the store (a mounted store is refused by `fsck`).
    pub fn fsck(mut self) {
        self.stop();
        fsck(&self.store);
    }
}

/// `switchyard fsck` of a store no process has open: healthy (what recovery repairs is fine).
pub fn fsck(store: &Path) {
    let out = Command::new(bin())
        .args(["fsck", "--store"])
        .arg(store)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.dir)
                .status();
        }
    }
}

pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn errno(r: std::io::Result<impl Sized>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}
