//! A `serve` of a fresh store (in memory, or one the test makes) in a thread of the test, and
//! programs run with the preload library against it.
#![allow(dead_code)] // each test crate uses its own part of this

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use switchyard_media::{Persist, Region};
use switchyard_mover::{Config, Mover};
use switchyard_remote::{serve, Key, ServeOptions, ServerStats};
use switchyard_store::{Owner, Store};

/// This build's libswitchyard_preload.so: the one `cargo test` built beside this test, in
/// target/<profile>/deps.
pub fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.with_file_name("libswitchyard_preload.so");
    assert!(lib.exists(), "no {}", lib.display());
    lib
}

/// A served store, stopped when dropped.
pub struct Served {
    pub dir: tempfile::TempDir,
    pub addr: String,
    pub key: PathBuf,
    /// Where programs see the store (a path that does not exist on this machine).
    pub prefix: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

impl Served {
    /// A fresh store of `mib` MiB in memory, served on loopback.
    pub fn start(mib: u64) -> Served {
        Served::start_with(move |_| {
            let region = Region::memory(mib << 20, Persist::detect()).unwrap();
            let mover = Arc::new(Mover::start(&Config::default()).unwrap());
            Store::format(region, mover, Owner::current()).unwrap()
        })
    }

    /// The store `make` makes in the test's directory (it is given its path), served on
    /// loopback.
    pub fn start_with(make: impl FnOnce(&Path) -> Store + Send + 'static) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let key_path = dir.path().join("store.key");
        let key = Key::load_or_create(&key_path).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let st = stop.clone();
        let at = dir.path().to_owned();
        let thread = std::thread::spawn(move || {
            let store = make(&at);
            let opts = ServeOptions {
                listen: "127.0.0.1:0".parse().unwrap(),
                read_only: false,
                key,
            };
            serve(&store, &opts, &ServerStats::default(), &st, |a| {
                tx.send(a).unwrap()
            })
            .unwrap();
        });
        let addr = rx.recv().unwrap().to_string();
        let prefix = format!(
            "/switchyard-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        assert!(!Path::new(&prefix).exists());
        Served {
            dir,
            addr,
            key: key_path,
            prefix,
            stop,
            thread: Some(thread),
        }
    }

    /// `name` under the prefix.
    pub fn path(&self, name: &str) -> String {
        format!("{}/{name}", self.prefix)
    }

    /// `cmd` with the preload library and this store's settings.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("LD_PRELOAD", library())
            .env("SWITCHYARD_PREFIX", &self.prefix)
            .env("SWITCHYARD_SERVER", &self.addr)
            .env("SWITCHYARD_KEY", &self.key)
            .current_dir(self.dir.path());
        cmd
    }

    /// Runs `program args…` under the preload; panics with its output unless it succeeds.
    pub fn run(&self, program: &str, args: &[&str]) -> Output {
        let out = self.command(program).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Nothing under the prefix may have reached this machine's own file system.
        assert!(
            !Path::new(&self.prefix).exists(),
            "{} was created",
            self.prefix
        );
    }
}
