//! What the command tests share: the `switchyard` binary, a mount
//! process that unmounts when dropped, `fsck`, errno helpers, `--json` output and scratch checks.
#![allow(dead_code)] // each test crate uses its own part of this

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod programs;

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
    /// For a remote mount (`mount --remote`): the `serve` process that owns the store.
    pub server: Option<Serve>,
    remote: bool,
    /// Environment of a remote mount's processes (its server's and its own).
    env: Env,
}

/// Variables set for a process.
type Env = &'static [(&'static str, &'static str)];

/// A `switchyard serve` process on loopback.
pub struct Serve {
    pub child: Child,
    /// Where it listens (`ADDR:PORT`).
    pub addr: String,
}

impl Serve {
    /// Serves `store` on a free loopback port.
    pub fn start(store: &Path) -> Serve {
        Serve::start_in(store, &[])
    }

    /// [`Serve::start`] with `env` set for the server.
    pub fn start_in(store: &Path, env: Env) -> Serve {
        Serve::start_at(store, "127.0.0.1:0", env)
    }

    /// Serves `store` on `listen` (`ADDR:PORT`), with `env` set for the server.
    pub fn start_at(store: &Path, listen: &str, env: Env) -> Serve {
        let child = Command::new(bin())
            .args(["serve", "--listen", listen, "--store"])
            .arg(store)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        Serve::of(child)
    }

    /// The server `child` runs (its standard output piped), once it listens.
    pub fn of(mut child: Child) -> Serve {
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        // "serving S on ADDR (key K); …"
        let addr = line
            .split(" on ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        // Keep reading, so its last words at exit find the pipe open.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Serve { child, addr }
    }

    /// SIGTERM, and a clean exit.
    pub fn stop(mut self) {
        // SAFETY: kill has no memory effects; the pid is our child's.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "serve exited with {status}");
    }
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

    /// A fresh 512 MiB store in `work`, served by `switchyard serve` and mounted on
    /// `work/mnt` through it (`mount --remote`).
    pub fn remote(work: &Path) -> Mount {
        Mount::remote_with(work, &[])
    }

    /// [`Mount::remote`] with more `switchyard mount` options (kept across remounts).
    pub fn remote_with(work: &Path, args: &[&str]) -> Mount {
        Mount::remote_in(work, args, &[])
    }

    /// [`Mount::remote`] with UCX on `tcp` only, as between two machines: data moves inside
    /// requests and replies.
    pub fn remote_over_tcp(work: &Path) -> Mount {
        Mount::remote_in(work, &[], &[("UCX_TLS", "tcp")])
    }

    /// [`Mount::remote_with`], the server and the mount run with `env`.
    fn remote_in(work: &Path, args: &[&str], env: Env) -> Mount {
        let store = Mount::mkfs(work, "512M");
        let dir = work.join("mnt");
        std::fs::create_dir_all(&dir).unwrap();
        let args = args.iter().map(|a| a.to_string()).collect();
        Mount::start_with(store, dir, args, true, env)
    }

    /// A fresh store of `size` in `work`, mounted on `work/mnt` with `args`.
    pub fn sized(work: &Path, size: &str, args: &[&str]) -> Mount {
        let store = Mount::mkfs(work, size);
        let dir = work.join("mnt");
        std::fs::create_dir_all(&dir).unwrap();
        let args = args.iter().map(|a| a.to_string()).collect();
        Mount::start_with(store, dir, args, false, &[])
    }

    /// A fresh store of `size` in `work`.
    fn mkfs(work: &Path, size: &str) -> PathBuf {
        let store = work.join("s.store");
        let ok = Command::new(bin())
            .args(["mkfs", "--size", size, "--store"])
            .arg(&store)
            .current_dir(work)
            .status()
            .unwrap();
        assert!(ok.success());
        store
    }

    /// A second mount, on `dir`, of the server this remote mount mounts (stopping it leaves
    /// the server running).
    pub fn attach(&self, dir: &Path) -> Mount {
        let s = self.server.as_ref().expect("a remote mount");
        std::fs::create_dir_all(dir).unwrap();
        let key = format!("{}.key", self.store.display());
        let child = Command::new(bin())
            .args(["mount", "--remote", &s.addr, "--key", &key])
            .arg(dir)
            .envs(self.env.iter().copied())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_mounted(dir);
        Mount {
            child: Some(child),
            store: self.store.clone(),
            dir: dir.to_owned(),
            args: Vec::new(),
            server: None,
            remote: true,
            env: self.env,
        }
    }

    /// Mounts an existing store.
    pub fn start(store: PathBuf, dir: PathBuf) -> Mount {
        Mount::start_with(store, dir, Vec::new(), false, &[])
    }

    fn start_with(
        store: PathBuf,
        dir: PathBuf,
        args: Vec<String>,
        remote: bool,
        env: Env,
    ) -> Mount {
        let server = remote.then(|| Serve::start_in(&store, env));
        let mut how = args.clone();
        if let Some(s) = &server {
            let key = format!("{}.key", store.display());
            how.extend(["--remote".into(), s.addr.clone(), "--key".into(), key]);
        }
        let child = Command::new(bin())
            .arg("mount")
            .args(&how)
            .arg("--store")
            .arg(&store)
            .arg(&dir)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_mounted(&dir);
        Mount {
            child: Some(child),
            store,
            dir,
            args,
            server,
            remote,
            env,
        }
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.join(p)
    }

    /// The same mount (and server) started again over the same store, after `self`'s
    /// processes are gone.
    pub fn restart(&self) -> Mount {
        Mount::start_with(
            self.store.clone(),
            self.dir.clone(),
            self.args.clone(),
            self.remote,
            self.env,
        )
    }

    /// Clean unmount (SIGTERM) and, for a remote mount, a clean stop of its server; then
    /// both start again.
    pub fn remount(mut self) -> Mount {
        self.stop();
        self.restart()
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill has no memory effects; the pid is our child's.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let status = c.wait().unwrap();
            assert!(status.success(), "mount exited with {status}");
            assert!(!mounted(&self.dir), "still mounted after SIGTERM");
        }
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }

    /// Unmounts cleanly, then checks the store (a mounted store is refused by `fsck`).
    pub fn fsck(mut self) {
        self.stop();
        fsck(&self.store);
    }
}

/// Waits (at most 10 s) until `dir` is a mount point.
pub fn wait_mounted(dir: &Path) {
    let t0 = Instant::now();
    while !mounted(dir) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "mount did not appear"
        );
        std::thread::sleep(Duration::from_millis(20));
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
        if let Some(mut s) = self.server.take() {
            let _ = s.child.kill();
            let _ = s.child.wait();
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

/// A `--json` command's output: one JSON value per line.
pub fn json_lines(stdout: Vec<u8>) -> Vec<serde_json::Value> {
    String::from_utf8(stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Fails if a file whose name contains `marker` is left in `dir` (a benchmark's scratch).
pub fn assert_no_scratch(dir: &std::path::Path, marker: &str) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(marker))
        .collect();
    assert!(left.is_empty(), "scratch files left behind: {left:?}");
}

/// A user other than root that tests run programs as (no account needed).
pub const OTHER_USER: u32 = 1001;

/// `dir` (a fresh directory) made [`OTHER_USER`]'s, with a copy of the `switchyard` binary in
/// it that user may run (the build's own directories may be closed to other users); the
/// copy's path.
pub fn program_for_other_user(dir: &Path) -> PathBuf {
    use std::os::unix::fs::{chown, PermissionsExt};
    let exe = dir.join("switchyard");
    std::fs::copy(bin(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown(dir, Some(OTHER_USER), Some(OTHER_USER)).unwrap();
    exe
}

/// `program` to be run as [`OTHER_USER`] (and group).
pub fn as_other_user(program: impl AsRef<std::ffi::OsStr>) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(program);
    c.uid(OTHER_USER).gid(OTHER_USER);
    c
}

/// A small xorshift generator: a test's random sequence follows from its seed (odd, non-zero).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform enough below `n` (0 for `n` = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
