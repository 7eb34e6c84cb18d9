//! `switchyard bench preload`: unmodified programs' file I/O through the file preload library
//! (`libswitchyard_preload.so`, see `crates/preload`) against the same store's FUSE mount and
//! against tmpfs, and large copies through the memcpy preload library, in one run.
//!
//! One store, formatted in a scratch region, is at once mounted with FUSE in this process (as
//! `switchyard mount` does) and served to other processes (as `switchyard serve` does): fio
//! under the preload library reaches it through the client (one-sided reads, metadata and
//! write commits by request), fio on the mount through the kernel. Both see the same files.
//! The same fio jobs — 4 KiB random reads and writes, 1 MiB sequential reads and writes,
//! buffered, one thread — run on the three systems in rounds whose order rotates; the figures
//! are each system's median IOPS and the medians of the ratios paired within a round.
//! Then a single-threaded program copies buffers of 4 KiB to 4 MiB with and without the
//! memcpy preload library (as `bench memcpy`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;
use switchyard_media::Region;
use switchyard_mover::Mover;
use switchyard_options::size;
use switchyard_remote::{Key, ServeOptions, ServerStats};
use switchyard_store::{Owner, Store};

use crate::fio;
use crate::measure::{scratch_dir, Measured, Rounds};
use crate::memcpy;

/// `bench preload` options.
#[derive(Args)]
pub struct PreloadBenchArgs {
    /// Scratch directory for the store's region, tmpfs's files and the mount point, removed
    /// afterwards (default /dev/shm when it exists, else the working directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Configuration file for the mover (TOML).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The file preload library [default: libswitchyard_preload.so next to this binary;
    /// build it with `cargo build --release -p switchyard-preload`].
    #[arg(long)]
    library: Option<PathBuf>,
    /// The memcpy preload library [default: libswitchyard_memcpy.so next to this binary].
    #[arg(long)]
    memcpy_library: Option<PathBuf>,
    /// About a minute: 3 rounds of 1 s per system and job, and shorter copy rounds.
    #[arg(long)]
    quick: bool,
    /// Print one JSON record per job and copy size (and a summary record) instead of tables.
    #[arg(long)]
    json: bool,
    /// Rounds per job (default 5; 3 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds each system runs per round (default 2; 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Size of fio's file (default 256M).
    #[arg(long, value_parser = size::parse)]
    file_size: Option<u64>,
}

/// One fio job shape.
#[derive(Debug, Clone, Copy, Serialize)]
struct Shape {
    rw: &'static str,
    bs: u64,
}

const SHAPES: [Shape; 4] = [
    Shape {
        rw: "randread",
        bs: 4 << 10,
    },
    Shape {
        rw: "randwrite",
        bs: 4 << 10,
    },
    Shape {
        rw: "read",
        bs: 1 << 20,
    },
    Shape {
        rw: "write",
        bs: 1 << 20,
    },
];

const SYSTEMS: [&str; 3] = ["preload", "mount", "tmpfs"];

/// Copy sizes of the memcpy part.
const COPY_SIZES: [usize; 4] = [4 << 10, 64 << 10, 1 << 20, 4 << 20];

#[derive(Debug, Clone, Serialize)]
struct Record {
    bench: &'static str,
    rw: &'static str,
    bs: u64,
    preload_iops: f64,
    mount_iops: f64,
    tmpfs_iops: f64,
    preload_p50_us: f64,
    mount_p50_us: f64,
    tmpfs_p50_us: f64,
    /// Median over rounds of preload ÷ mount in the same round.
    preload_vs_mount: f64,
    /// Median over rounds of preload ÷ tmpfs in the same round.
    preload_vs_tmpfs: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Summary {
    summary: bool,
    bench: &'static str,
    rounds: usize,
    seconds: f64,
    file_size: u64,
    transport: String,
    fio: String,
}

/// Runs the benchmark.
pub fn run(a: &PreloadBenchArgs) -> anyhow::Result<()> {
    let Some(fio_version) = fio::version() else {
        bail!("fio is needed for this benchmark: install it (Debian: apt-get install fio)");
    };
    let (library, memcpy_library) = libraries(a)?;
    let rounds = a.rounds.unwrap_or(if a.quick { 3 } else { 5 }).max(1);
    let secs = a.seconds.unwrap_or(if a.quick { 1.0 } else { 2.0 });
    let file_size = a.file_size.unwrap_or(256 << 20);
    if secs <= 0.0 || file_size < 1 << 20 || !file_size.is_multiple_of(4096) {
        bail!("--seconds must be positive and --file-size a multiple of 4K of at least 1M");
    }
    switchyard_remote::keep_message_buffers();
    let (work, tmpfs, mnt) = scratch(&scratch_dir(&a.dir))?;
    let cfg = switchyard_config::Config::load_or_default(a.config.as_deref())?.mover;
    let (store, region_len) = new_store(&cfg, work.path(), file_size)?;

    // Served to other processes from a thread of this one, and mounted.
    let key_path = work.path().join("store.key");
    let stop = Arc::new(AtomicBool::new(false));
    let (server, addr) = serve(&store, &key_path, &stop)?;
    let mount = mount(&store, &mnt)?;
    let prefix = format!("/switchyard-bench-preload-{}", std::process::id());
    let env = preload_env(&library, &prefix, addr, &key_path);
    let transport = transport(addr, &key_path)?;
    eprintln!(
        "scratch in {}; {} of region; served on {addr} ({transport}); {rounds} rounds × {secs} s \
         per system and job; {} fio file; {fio_version}",
        work.path().display(),
        size::show(region_len),
        size::show(file_size),
    );

    let systems: [(PathBuf, bool); 3] = [
        (PathBuf::from(&prefix), true),
        (mnt.clone(), false),
        (tmpfs.clone(), false),
    ];
    // fio lays out its file once per system (the preload and the mount share one).
    layout(&mnt, file_size)?;
    layout(&tmpfs, file_size)?;
    let bar = indicatif::ProgressBar::new(SHAPES.len() as u64);
    let mut records = Vec::new();
    for shape in SHAPES {
        bar.set_message(format!("{} {}", shape.rw, size::show(shape.bs)));
        let got = Rounds::run(SYSTEMS.len(), rounds, |i| {
            let (dir, preloaded) = &systems[i];
            let env: Vec<(&str, &str)> = if *preloaded {
                env.iter().map(|(k, v)| (*k, v.as_str())).collect()
            } else {
                Vec::new()
            };
            fio_job(dir, shape, file_size, secs, &env)
        })?;
        records.push(record(shape, &got));
        bar.inc(1);
    }
    bar.finish_and_clear();
    mount.unmount().context("unmounting the store")?;
    stop.store(true, Ordering::Relaxed);
    let _ = server.join();
    // The store's mover and its engine threads go before the copies are timed.
    drop(store);

    let copies = memcpy::compare(
        &memcpy_library,
        &COPY_SIZES,
        rounds,
        if a.quick { 100 } else { 300 },
    )?;
    let summary = Summary {
        summary: true,
        bench: "preload",
        rounds,
        seconds: secs,
        file_size,
        transport,
        fio: fio_version,
    };
    output(a.json, &records, &copies, &summary)?;
    Ok(())
}

/// Mounts `store` on `mnt` with FUSE in this process.
fn mount(store: &Arc<Store>, mnt: &Path) -> anyhow::Result<switchyard_fuse::Mount> {
    switchyard_fuse::mount_inodes(
        store.clone(),
        mnt,
        &switchyard_fuse::FuseConfig::default(),
        switchyard_fuse::Access::Owner,
        false,
    )
    .with_context(|| format!("mounting the store on {}", mnt.display()))
}

/// The environment of a preloaded fio: the preload `library`, the path `prefix` it serves,
/// and the server at `addr` with the key at `key_path`.
fn preload_env(
    library: &Path,
    prefix: &str,
    addr: std::net::SocketAddr,
    key_path: &Path,
) -> [(&'static str, String); 4] {
    [
        ("LD_PRELOAD", library.to_string_lossy().into_owned()),
        ("SWITCHYARD_PREFIX", prefix.to_string()),
        ("SWITCHYARD_SERVER", addr.to_string()),
        ("SWITCHYARD_KEY", key_path.to_string_lossy().into_owned()),
    ]
}

/// A scratch directory in `dir`, and in it tmpfs's directory and the mount point.
fn scratch(dir: &Path) -> anyhow::Result<(tempfile::TempDir, PathBuf, PathBuf)> {
    let work = tempfile::Builder::new()
        .prefix("switchyard-bench-preload.")
        .tempdir_in(dir)
        .with_context(|| format!("creating a scratch directory in {}", dir.display()))?;
    let (tmpfs, mnt) = (work.path().join("tmpfs"), work.path().join("mnt"));
    std::fs::create_dir(&tmpfs)?;
    std::fs::create_dir(&mnt)?;
    Ok((work, tmpfs, mnt))
}

/// A store in a store file in `dir`, written through first, with room for fio's file of
/// `file_size` and a copy of it; and the store file's length.
fn new_store(
    cfg: &switchyard_mover::Config,
    dir: &Path,
    file_size: u64,
) -> anyhow::Result<(Arc<Store>, u64)> {
    let mover = Arc::new(Mover::start(cfg)?);
    let region_len = (2 * file_size + (256 << 20)).next_multiple_of(2 << 20);
    let region_path = dir.join("store.region");
    crate::mount::touch(&region_path, region_len)?;
    let region = Region::create(&region_path, region_len, cfg.persist())?;
    let store = Arc::new(Store::format(region, mover, Owner::current())?);
    Ok((store, region_len))
}

/// Serves `store` on a free port of the loopback address with the key at `key_path` (made if
/// there is none), from a thread of this process until `stop` is set: the thread, and the
/// address it listens on.
fn serve(
    store: &Arc<Store>,
    key_path: &Path,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<(Server, std::net::SocketAddr)> {
    let opts = ServeOptions {
        listen: "127.0.0.1:0".parse().expect("an address"),
        read_only: false,
        key: Key::load_or_create(key_path)?,
    };
    let (tx, rx) = mpsc::channel();
    let server = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            switchyard_remote::serve(&store, &opts, &ServerStats::default(), &stop, |a| {
                let _ = tx.send(a);
            })
            .map_err(|e| e.to_string())
        })
    };
    let Ok(addr) = rx.recv() else {
        let e = server
            .join()
            .map_err(|_| anyhow::anyhow!("the server panicked"))?;
        bail!(
            "serving the store: {}",
            e.err().map_or(String::new(), |e| e.to_string())
        );
    };
    Ok((server, addr))
}

/// The thread that serves the store.
type Server = std::thread::JoinHandle<Result<(), String>>;

/// The record of fio job `shape`: each system's IOPS and p50, and the preload's ratios.
fn record(shape: Shape, got: &Rounds) -> Record {
    let iops = |i| got.gib_s(i) * (1u64 << 30) as f64 / shape.bs as f64;
    Record {
        bench: "preload",
        rw: shape.rw,
        bs: shape.bs,
        preload_iops: iops(0),
        mount_iops: iops(1),
        tmpfs_iops: iops(2),
        preload_p50_us: got.p50_us(0),
        mount_p50_us: got.p50_us(1),
        tmpfs_p50_us: got.p50_us(2),
        preload_vs_mount: got.ratio(0, 1),
        preload_vs_tmpfs: got.ratio(0, 2),
    }
}

/// The records, the copies' rows and the summary, as JSON lines (`json`) or tables.
fn output(
    json: bool,
    records: &[Record],
    copies: &[memcpy::Record],
    summary: &Summary,
) -> anyhow::Result<()> {
    if json {
        for r in records {
            println!("{}", serde_json::to_string(r)?);
        }
        for r in copies {
            println!("{}", serde_json::to_string(r)?);
        }
        println!("{}", serde_json::to_string(summary)?);
    } else {
        print_table(records, summary);
        println!();
        memcpy::print_rows(copies);
    }
    Ok(())
}

/// The file preload library and the memcpy preload library (built beside this binary unless
/// named).
fn libraries(a: &PreloadBenchArgs) -> anyhow::Result<(PathBuf, PathBuf)> {
    let library = memcpy::library(
        a.library.as_ref(),
        "libswitchyard_preload.so",
        "switchyard-preload",
    )?;
    let memcpy_library = memcpy::library(
        a.memcpy_library.as_ref(),
        "libswitchyard_memcpy.so",
        "switchyard-preload-memcpy",
    )?;
    Ok((library, memcpy_library))
}

/// How the client reaches the server (its data path).
fn transport(addr: std::net::SocketAddr, key: &Path) -> anyhow::Result<String> {
    let c = switchyard_remote::Client::connect(addr, &Key::load(key)?, false)?;
    Ok(c.data_path().to_string())
}

/// Creates fio's file in `dir` at full size (a short sequential read lays it out).
fn layout(dir: &Path, file_size: u64) -> anyhow::Result<()> {
    let shape = Shape {
        rw: "read",
        bs: 1 << 20,
    };
    fio_job(dir, shape, file_size, 0.1, &[]).map(drop)
}

fn fio_job(
    dir: &Path,
    shape: Shape,
    file_size: u64,
    secs: f64,
    env: &[(&str, &str)],
) -> anyhow::Result<Measured> {
    fio::Job {
        dir,
        prefix: "fio",
        engine: "psync",
        rw: shape.rw,
        bs: shape.bs,
        size: file_size,
        jobs: 1,
        secs,
        direct: false,
    }
    .run(&[], env)
}

fn print_table(records: &[Record], s: &Summary) {
    println!(
        "{:<14} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10} {:>14} {:>14}",
        "job",
        "preload IOPS",
        "mount IOPS",
        "tmpfs IOPS",
        "preload µs",
        "mount µs",
        "tmpfs µs",
        "preload÷mount",
        "preload÷tmpfs"
    );
    for r in records {
        println!(
            "{:<14} {:>12.0} {:>12.0} {:>12.0} {:>10.1} {:>10.1} {:>10.1} {:>14.2} {:>14.2}",
            format!("{} {}", r.rw, size::show(r.bs)),
            r.preload_iops,
            r.mount_iops,
            r.tmpfs_iops,
            r.preload_p50_us,
            r.mount_p50_us,
            r.tmpfs_p50_us,
            r.preload_vs_mount,
            r.preload_vs_tmpfs
        );
    }
    println!(
        "(buffered, one thread; {} rounds × {} s per system; {} file; the preload's data path: \
         {}; {})",
        s.rounds,
        s.seconds,
        size::show(s.file_size),
        s.transport,
        s.fio
    );
}
