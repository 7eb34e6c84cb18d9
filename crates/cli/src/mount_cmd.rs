//! `switchyard mount` and `switchyard umount`: the store as a file system for unmodified
//! programs (FUSE).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;

use switchyard_mover::Config;
use switchyard_store::{StoreConfig, SyncMode, SyncPolicy};

use crate::store_cmd::{self, MkfsArgs, StoreArgs};
use switchyard_options::size;
use switchyard_options::tune;

/// How often a mount saves its mover's counters for `switchyard stat`.
const STATS_EVERY: Duration = Duration::from_secs(5);

/// `--sync`'s values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SyncFlag {
    /// Sync at fsync and every --sync-interval-ms (ext4's semantics).
    Interval,
    /// Sync before every operation returns (persistent-memory semantics; slow).
    Always,
}

/// When a store file on a disk reaches its disk: `mount`'s and `up`'s `--sync` options.
#[derive(Args, Clone, Copy, Default)]
pub struct SyncArgs {
    /// When a store file on a disk file system (ext4, xfs: the page cache is between the
    /// store and the disk) writes what returned to its disk. With `interval` an operation
    /// survives a crash of the mount at once, and a power cut once fsync (fdatasync, an
    /// O_SYNC or O_DSYNC write, `sync FILE`) or the periodic sync every --sync-interval-ms
    /// returns, as on ext4; a power cut leaves the store as of its last completed sync. With
    /// `always` every operation is synced before it returns: persistent-memory semantics on
    /// a disk file, at the price of a disk flush per operation (slow). Persistent memory
    /// needs no sync, and a store on tmpfs has no disk: there it changes nothing. [default:
    /// the configuration's `store.sync`, interval]
    #[arg(long, value_enum, value_name = "interval|always")]
    sync: Option<SyncFlag>,
    /// Milliseconds between the periodic syncs of `--sync interval` (at least 1). [default:
    /// the configuration's `store.sync_interval_ms`, 5000]
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    sync_interval_ms: Option<u64>,
}

/// How writes cross the mount: `mount`'s and `up`'s `--writeback` and `--strict`.
#[derive(Args, Clone, Copy, Default)]
pub struct CacheArgs {
    /// The kernel's writeback cache: a write(2) returns once its bytes are in the page
    /// cache, and the kernel hands them to the store in large requests later, at the latest
    /// when the file is closed, fsynced or fdatasynced (which then also reach the disk, as
    /// --sync says). As on ext4, killing the mount (or a power cut) loses what was written
    /// and not yet closed or synced; small writes run many times faster. [default: the
    /// configuration's `fuse.writeback`; unset, on for `up` and off for `mount`]
    #[arg(long, conflicts_with = "strict")]
    writeback: bool,
    /// Every write(2) reaches the store before it returns (no writeback cache): it survives
    /// a crash of the mount at once, at the cost of one request per write(2).
    #[arg(long)]
    strict: bool,
}

impl CacheArgs {
    /// Whether the writeback cache is on: the flags, else the configuration's `configured`,
    /// else `default`.
    fn writeback(&self, configured: Option<bool>, default: bool) -> bool {
        if self.strict || self.writeback {
            return self.writeback;
        }
        configured.unwrap_or(default)
    }
}

impl SyncArgs {
    /// The policy these flags ask for over the configuration's `c`.
    fn policy(&self, c: &StoreConfig) -> anyhow::Result<SyncPolicy> {
        let mode = match self.sync {
            Some(SyncFlag::Interval) => SyncMode::Interval,
            Some(SyncFlag::Always) => SyncMode::Always,
            None => c.sync,
        };
        if mode == SyncMode::Always && self.sync_interval_ms.is_some() {
            bail!("--sync-interval-ms is for --sync interval: `always` syncs every operation");
        }
        Ok(match mode {
            SyncMode::Always => SyncPolicy::Always,
            SyncMode::Interval => SyncPolicy::Interval(Duration::from_millis(
                self.sync_interval_ms.unwrap_or(c.sync_interval_ms),
            )),
        })
    }
}

/// `mount` options.
#[derive(Args)]
pub struct MountArgs {
    #[command(flatten)]
    at: StoreArgs,
    /// Empty directory to mount the store on.
    dir: PathBuf,
    /// Request worker threads [default: the configuration's `fuse.workers`; 0 there is
    /// one per core, at least 2].
    #[arg(long)]
    workers: Option<usize>,
    /// Let every user of this machine use the mount (FUSE's `allow_other`), each with the
    /// access the files' owners, groups and modes give them, as on any file system. Without
    /// it only the user who mounted can. A user other than root needs `user_allow_other` in
    /// /etc/fuse.conf for this.
    #[arg(long)]
    allow_other: bool,
    /// Share of the store, in percent, that only root and the user who mounted may fill
    /// with data (as ext4's reserved blocks), so other users of an --allow-other mount
    /// cannot make the owner's writes fail. `df` shows it as the gap between free and
    /// available space. [default: the configuration's `store.reserved_percent`, 5]
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=50))]
    reserved_percent: Option<u32>,
    #[command(flatten)]
    sync: SyncArgs,
    #[command(flatten)]
    cache: CacheArgs,
    /// Mount the store that `switchyard serve` serves at ADDR:PORT (another process, or
    /// another machine) instead of opening a store file: names and attributes come from the
    /// server, data moves one-sided where the transport allows. Several machines and
    /// processes can mount one served store at once; each sees another's names and sizes at
    /// once, and a file's data as of its latest open or lock (close-to-open, as NFS); record
    /// locks (`fcntl`) hold across mounts. A read-only export is mounted read-only. The
    /// server syncs its store as its configuration's `store.sync` says; an fsync here asks
    /// it to sync. If the server goes away (killed, restarted), calls wait for it and go on
    /// once it is back, as on an NFS hard mount: open files and working directories stay;
    /// a file that did not survive fails with ESTALE, and record locks are lost.
    #[arg(
        long,
        value_name = "ADDR:PORT",
        conflicts_with_all = ["reserved_percent", "sync", "sync_interval_ms", "writeback"]
    )]
    remote: Option<String>,
    /// The served store's key, for --remote [default: the store file's path with `.key`
    /// added, as `serve` makes it].
    #[arg(long, requires = "remote")]
    key: Option<PathBuf>,
    /// Whether this is `up`'s mount (whose writes default to the writeback cache).
    #[arg(skip)]
    up: bool,
}

/// `up` options.
#[derive(Args)]
pub struct UpArgs {
    #[command(flatten)]
    at: StoreArgs,
    /// Where to mount (created if missing).
    #[arg(long, default_value = "mnt")]
    dir: PathBuf,
    /// Size of the store file when it is created (K/M/G; sparse until written).
    #[arg(long, default_value = "1G", value_parser = size::parse)]
    size: u64,
    /// Request worker threads [default: the configuration's `fuse.workers`; 0 there is
    /// one per core, at least 2].
    #[arg(long)]
    workers: Option<usize>,
    /// Let every user of this machine use the mount (FUSE's `allow_other`), each with the
    /// access the files' owners, groups and modes give them, as on any file system. Without
    /// it only the user who mounted can. A user other than root needs `user_allow_other` in
    /// /etc/fuse.conf for this.
    #[arg(long)]
    allow_other: bool,
    /// Share of the store, in percent, that only root and the user who mounted may fill
    /// with data (as ext4's reserved blocks), so other users of an --allow-other mount
    /// cannot make the owner's writes fail. `df` shows it as the gap between free and
    /// available space. [default: the configuration's `store.reserved_percent`, 5]
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=50))]
    reserved_percent: Option<u32>,
    #[command(flatten)]
    sync: SyncArgs,
    #[command(flatten)]
    cache: CacheArgs,
}

/// `umount` options.
#[derive(Args)]
pub struct UmountArgs {
    /// Where a store is mounted.
    dir: PathBuf,
}

/// Blocks the stop signals in this thread (and so in every thread it starts) and returns
/// their set, to be taken with `sigwait` by the one thread that handles them.
pub(crate) fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before any other use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; the signal numbers are valid; blocking signals in
    // this thread has no other effect on memory.
    unsafe {
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    set
}

/// Mounts the store on `dir` in the foreground until SIGINT, SIGTERM or SIGHUP, or until it
/// is unmounted from outside; either way the store is unmounted cleanly before this returns.
pub fn mount(a: &MountArgs) -> anyhow::Result<()> {
    mount_tuning(a, None)
}

/// The full tune `up` runs behind a mount that started without a profile.
struct BackgroundTune {
    /// The configuration the mount runs with (no profile applied).
    config: Config,
    /// The scratch region the tuner measures on, removed when the mount ends.
    scratch: tempfile::NamedTempFile,
    /// Where the profile is saved for the next start.
    out: PathBuf,
}

/// Lowers the calling thread's priority to the least (nice 19); threads it starts inherit it.
fn lower_priority() {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority on our own thread id; a failure leaves the priority as it was.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19) };
}

/// Runs `t` on a thread of its own at the lowest priority; when it finishes, the profile
/// goes into the running `mover` and is saved. Returns the scratch file to remove when the
/// mount ends (the tune may still be running then: the process ends with it).
fn start_background_tune(
    t: BackgroundTune,
    mover: std::sync::Arc<switchyard_mover::Mover>,
) -> tempfile::NamedTempFile {
    let BackgroundTune {
        config,
        scratch,
        out,
    } = t;
    let path = scratch.path().to_owned();
    std::thread::spawn(move || {
        lower_priority();
        let t0 = std::time::Instant::now();
        let tuned = tune::tune_on(&config, &path, &out, false, &mut |_, _, _| {});
        // The scratch region is done with (the mount's end would remove it too).
        let _ = std::fs::remove_file(&path);
        match tuned {
            Ok((p, _, _)) => {
                let said = tune::describe(&p);
                mover.swap_profile(std::sync::Arc::new(p), &config);
                println!(
                    "engine profile: the full tune finished in {:.1} s and is in effect in this \
                     mount now; saved to {} for the next start: {said}",
                    t0.elapsed().as_secs_f64(),
                    out.display()
                );
            }
            Err(e) => eprintln!(
                "engine profile: the background tune failed ({e:#}); this mount keeps the \
                 built-in thresholds (run `switchyard tune` to try again)"
            ),
        }
    });
    scratch
}

/// Who may use the mount `a` asks for (checking that `--allow-other` can be had).
fn access(a: &MountArgs) -> anyhow::Result<switchyard_fuse::Access> {
    if !a.dir.is_dir() {
        bail!("{} is not a directory", a.dir.display());
    }
    Ok(if a.allow_other {
        check_allow_other()?;
        switchyard_fuse::Access::AllUsers
    } else {
        switchyard_fuse::Access::Owner
    })
}

/// `mount --remote`: the FUSE front end over a client of a `serve`.
fn mount_remote(a: &MountArgs, addr: &str) -> anyhow::Result<()> {
    switchyard_remote::keep_message_buffers();
    let access = access(a)?;
    let set = block_stop_signals();
    let at = std::net::ToSocketAddrs::to_socket_addrs(addr)
        .with_context(|| format!("--remote {addr}: not ADDR:PORT"))?
        .next()
        .with_context(|| format!("--remote {addr}: no address"))?;
    let key_path = a
        .key
        .clone()
        .unwrap_or_else(|| crate::serve_cmd::default_key(&a.at.store));
    let key = switchyard_remote::Key::load(&key_path).with_context(|| {
        format!(
            "the server's key {} (give it with --key)",
            key_path.display()
        )
    })?;
    // Writable if the server allows it; a read-only export is mounted read-only.
    let client = match switchyard_remote::Client::connect(at, &key, true) {
        Ok(c) => c,
        Err(e) if e.0.contains("read-only") => switchyard_remote::Client::connect(at, &key, false)?,
        Err(e) => return Err(e.into()),
    };
    let read_only = !client.writable();
    let path = client.data_path();
    let mapped = if client.change_words_mapped() {
        " (the server's change words mapped here: cached names, attributes and maps are \
         checked without a request)"
    } else {
        ""
    };
    // As an NFS hard mount: a server that goes away (killed, restarted) is waited for.
    client.ride_through_restarts();
    let client = std::sync::Arc::new(client);
    let counters = client.clone();
    let cfg = a.at.mover.load_config()?;
    let fuse_cfg = switchyard_fuse::FuseConfig {
        workers: a.workers.unwrap_or(cfg.fuse.workers),
        // Other clients change a served store's files: strict, whatever the configuration.
        writeback: Some(false),
        ..cfg.fuse
    };
    let m = switchyard_fuse::mount_inodes(client, &a.dir, &fuse_cfg, access, read_only)
        .with_context(|| format!("mounting on {}", a.dir.display()))?;
    println!(
        "mounted the store served at {at} on {}{}; data moves {path}{mapped}.",
        a.dir.display(),
        if read_only { " read-only" } else { "" },
    );
    println!(
        "stop with Ctrl-C, `kill {}`, or `switchyard umount {}`",
        std::process::id(),
        a.dir.display()
    );
    let file = switchyard_options::counters::remote_path(&key_path);
    let transport = path.to_string();
    let save = saving(|| {
        let rows = counters.stats().rows();
        switchyard_options::counters::save_remote(&file, "mount --remote", &transport, &rows)
    });
    wait_for_unmount_or(m, &a.dir, set, save, || counters.stop_waiting())?;
    let s = counters.stats();
    println!(
        "unmounted ({} requests, {} bytes one-sided, {} in messages, cache {} hits / {} \
         misses)",
        s.requests, s.one_sided_bytes, s.message_bytes, s.cache_hits, s.cache_misses
    );
    Ok(())
}

/// A tick for [`wait_for_unmount`] that runs `save` (of counters for `switchyard stat`) at
/// the first tick, then every [`STATS_EVERY`], and at the last; its first failure is said
/// once.
pub(crate) fn saving(mut save: impl FnMut() -> anyhow::Result<()>) -> impl FnMut(bool) {
    let mut saved: Option<std::time::Instant> = None;
    let mut warned = false;
    move |last| {
        if !last && saved.is_some_and(|t| t.elapsed() < STATS_EVERY) {
            return;
        }
        if let Err(e) = save() {
            if !std::mem::replace(&mut warned, true) {
                eprintln!("counters not saved for `switchyard stat`: {e:#}");
            }
        }
        saved = Some(std::time::Instant::now());
    }
}

/// Serves mount `m` until it ends: a stop signal (from the set `set`) unmounts it, unless it
/// is busy; `tick` runs about every 100 ms with `false`, and once at the end with `true`.
fn wait_for_unmount(
    m: switchyard_fuse::Mount,
    dir: &Path,
    set: libc::sigset_t,
    tick: impl FnMut(bool),
) -> anyhow::Result<()> {
    wait_for_unmount_or(m, dir, set, tick, || {})
}

/// [`wait_for_unmount`], running `stopping` when a stop signal arrives, before the unmount
/// (for calls that wait on something that may never come).
fn wait_for_unmount_or(
    m: switchyard_fuse::Mount,
    dir: &Path,
    set: libc::sigset_t,
    mut tick: impl FnMut(bool),
    mut stopping: impl FnMut(),
) -> anyhow::Result<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || loop {
        let mut sig = 0;
        // SAFETY: `set` is an initialised signal set blocked in every thread of the process.
        unsafe { libc::sigwait(&set, &mut sig) };
        if tx.send(sig).is_err() {
            break;
        }
    });
    loop {
        tick(false);
        if let Ok(sig) = rx.recv_timeout(Duration::from_millis(100)) {
            eprintln!("signal {sig}: unmounting");
            stopping();
            // As umount(8) does: a busy mount (files open under it, a working directory in
            // it) stays mounted and served, rather than left behind broken.
            if let Err(e) = umount(&UmountArgs {
                dir: dir.to_owned(),
            }) {
                eprintln!(
                    "{e:#}\nstill mounted and serving: close what is open under {} and stop \
                     it again",
                    dir.display()
                );
            }
        }
        if m.finished() {
            tick(true);
            return m.join().context("the mount ended");
        }
    }
}

fn mount_tuning(a: &MountArgs, tune: Option<BackgroundTune>) -> anyhow::Result<()> {
    if let Some(addr) = &a.remote {
        return mount_remote(a, addr);
    }
    let access = access(a)?;
    let set = block_stop_signals();
    let cfg = a.at.mover.load_config()?;
    let sync = a.sync.policy(&cfg.store)?;
    let store = a.at.path.open_with(&cfg)?;
    store
        .set_reserved_percent(a.reserved_percent.unwrap_or(cfg.store.reserved_percent))
        .context("--reserved-percent")?;
    store.set_sync_policy(sync).context("--sync")?;
    let durability = store_cmd::durability(&store);
    let quick = store.mounted_quickly();
    let mover = store.shared_mover();
    let fuse_cfg = switchyard_fuse::FuseConfig {
        workers: a.workers.unwrap_or(cfg.fuse.workers),
        writeback: Some(a.cache.writeback(cfg.fuse.writeback, a.up)),
        ..cfg.fuse
    };
    let workers = fuse_cfg.effective_workers();
    let m = switchyard_fuse::mount(store, &a.dir, &fuse_cfg, access)
        .with_context(|| format!("mounting on {}", a.dir.display()))?;
    println!(
        "mounted {} on {} ({} request workers; {}).",
        a.at.store.display(),
        a.dir.display(),
        workers,
        if quick {
            "clean since the last unmount"
        } else {
            "recovered: every log checked"
        }
    );
    println!("{}", store_cmd::show_durability(&durability));
    println!("{}", show_cache(fuse_cfg.writeback == Some(true)));
    println!("engine: {}", mover.engine_reason());
    if a.allow_other {
        println!("every user may use it (allow_other; the kernel checks each file's permissions)");
    }
    println!(
        "stop with Ctrl-C, `kill {}`, or `switchyard umount {}`",
        std::process::id(),
        a.dir.display()
    );
    // Removed (if the tune still runs, from under it) when the mount ends.
    let _scratch = tune.map(|t| start_background_tune(t, mover.clone()));
    let stats = a.at.stats_path();
    wait_for_unmount(
        m,
        &a.dir,
        set,
        saving(|| {
            switchyard_options::counters::save_with(&stats, "mount", &mover, Some(&durability))
        }),
    )?;
    println!("unmounted; the store is clean");
    Ok(())
}

/// The main job: formats the store file if there is none, and mounts it on `./mnt` in the
/// foreground.
pub fn up(a: &UpArgs) -> anyhow::Result<()> {
    if a.at.store.exists() {
        println!("using the store in {}", a.at.store.display());
    } else {
        store_cmd::mkfs(&MkfsArgs {
            at: a.at.clone(),
            size: a.size,
            force: false,
        })?;
    }
    let common = &a.at.mover;
    let profile = common
        .profile
        .clone()
        .unwrap_or_else(|| PathBuf::from(switchyard_options::DEFAULT_PROFILE));
    let mut background = None;
    if common.no_profile {
        println!("engine profile: ignored (--no-profile); the mover uses its built-in thresholds");
    } else if profile.exists() {
        // Loading checks that it was measured here; the mount loads it again.
        let cfg = common.load_config()?;
        let p = cfg
            .mover
            .applied_profile
            .as_ref()
            .expect("a profile was applied");
        println!(
            "engine profile: {}, {}",
            profile.display(),
            tune::describe(p)
        );
    } else {
        let mut cfg = switchyard_config::Config::load_or_default(common.config.as_deref())?.mover;
        common.apply_engine(&mut cfg)?;
        let dir =
            a.at.store
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
        println!(
            "engine profile: none yet; mounting with the built-in thresholds while the full \
             tune (`switchyard tune`, about a minute) runs in the background at the lowest \
             priority; it goes into the running mount when done, and is saved to {} for the \
             next start",
            profile.display()
        );
        background = Some(BackgroundTune {
            config: cfg,
            scratch: tune::scratch_in(dir)?,
            out: profile.clone(),
        });
    }
    switchyard_media::private::create_dir_private(&a.dir)
        .with_context(|| format!("creating {}", a.dir.display()))?;
    mount_tuning(
        &MountArgs {
            at: a.at.clone(),
            dir: a.dir.clone(),
            workers: a.workers,
            allow_other: a.allow_other,
            reserved_percent: a.reserved_percent,
            sync: a.sync,
            cache: a.cache,
            remote: None,
            key: None,
            up: true,
        },
        background,
    )
}

/// The banner's line on how writes cross the mount.
fn show_cache(writeback: bool) -> &'static str {
    if writeback {
        "writes: the kernel's writeback cache (--writeback): a write(2) returns from the page \
         cache; a file's data is in the store once it is closed or fsynced"
    } else {
        "writes: strict (--strict): every write(2) is in the store when it returns"
    }
}

/// Checks that this user may mount with `allow_other`: root may; anyone else needs
/// `user_allow_other` in /etc/fuse.conf, or fusermount3 refuses with a terse message.
fn check_allow_other() -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    let conf = std::fs::read_to_string("/etc/fuse.conf").unwrap_or_default();
    if conf
        .lines()
        .any(|l| l.split('#').next().unwrap_or("").trim() == "user_allow_other")
    {
        return Ok(());
    }
    bail!(
        "--allow-other needs `user_allow_other` in /etc/fuse.conf when a user other than root \
         mounts (add that line as root), or mount as root"
    )
}

/// Unmounts a store mounted with `switchyard mount` (its process then exits).
pub fn umount(a: &UmountArgs) -> anyhow::Result<()> {
    let out = Command::new("fusermount3")
        .arg("-u")
        .arg(&a.dir)
        .output()
        .context("running fusermount3 (Debian package fuse3)")?;
    if !out.status.success() {
        bail!(
            "fusermount3 -u {}: {}",
            a.dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
