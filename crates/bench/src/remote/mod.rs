//! `switchyard bench remote`: reading a served store from another endpoint, against the
//! transport's own ceiling and the store read in process, in one run.
//!
//! A server (the store's owner) runs in a thread of this process on a store in memory; the
//! clients reach it over loopback through UCX like any other process would (on one host UCX
//! picks cross-memory attach for one-sided access). For each request size, in rotated rounds:
//!
//! - `raw` — UCX one-sided gets of the same sizes from a registered buffer on the same
//!   transport: the ceiling (RIMFS Table 1's "RDMA read");
//! - `raw-pull` — UCX messages of the same sizes sent from a registered buffer by rendezvous,
//!   fetched by the receiver's transport: the ceiling of pulled reads;
//! - `one-sided` — the client's reads on its cached map: gets of the data blocks, then the
//!   change word that validates them; or, where this UCX has no one-sided get over the
//!   transport (UCX 1.13 between processes of one host emulates it with the server's CPU),
//!   pulled (`DataPath`);
//! - `pulled` — the same reads by a client that pulls reads of 256 KiB or more whatever the
//!   UCX (`Client::connect_pulling`): one request that the server answers with the blocks,
//!   sent from where they lie;
//! - `in-messages` — the same reads with the data moved inside requests and replies (the
//!   RPC path RIMFS compares against);
//! - `local` — the store read in this process (no transport at all).
//!
//! And the metadata cache (RIMFS Fig. 8): `stat` of a path three directories deep with the
//! cache (each component checked by its change word) against without it (a request per
//! component). CPU cost is per GiB for the client's thread and the server's thread apart.
//! Then 1 MiB reads, one-sided and in messages, with a CPU hog on the server's core at 0–90%
//! (RIMFS Fig. 12; the `load` module); 1–4 clients on file-server- and mail-server-like
//! mixes (RIMFS Fig. 11; the `mixes` module); and with `--sshfs`, fio on sshfs against fio on a remote mount
//! over TCP between network namespaces ([`network`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use switchyard_media::{Persist, Region};
use switchyard_mover::{Config, Mover};
use switchyard_remote::{serve, server, Client, ClientStats, Key, ServeOptions, ServerStats};
use switchyard_store::{Files, OpenFlags, Owner, Store};
use switchyard_ucx::{Failures, Node};

mod load;
mod mixes;
pub mod network;

/// `bench remote` options.
#[derive(Args)]
pub struct RemoteArgs {
    /// A short run: fewer bytes per point and 3 rounds.
    #[arg(long)]
    quick: bool,
    /// One JSON record per line instead of the table.
    #[arg(long)]
    json: bool,
    /// Rounds (each runs every path once per size, in rotated order) [default: 5; 3 with
    /// --quick].
    #[arg(long)]
    rounds: Option<usize>,
    /// Also compare with sshfs (what a user would use today): the same fio jobs on an sshfs
    /// mount and on `mount --remote`, over TCP between network namespaces this run makes
    /// (needs root, openssh-server, sshfs and fio).
    #[arg(long)]
    sshfs: bool,
}

const SIZES: [usize; 5] = [512, 4 << 10, 128 << 10, 1 << 20, 2 << 20];
const PATHS: [&str; 6] = [
    "raw",
    "raw-pull",
    "one-sided",
    "pulled",
    "in-messages",
    "local",
];

/// One measured point.
#[derive(Serialize, Clone)]
struct Point {
    path: &'static str,
    size: usize,
    gib_per_s: f64,
    /// Median over rounds of the client thread's CPU seconds per GiB.
    client_cpu_s_per_gib: f64,
    /// The same for the server's thread (0 where no server is involved).
    server_cpu_s_per_gib: f64,
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    // SAFETY: clock_gettime writes the zeroed timespec we pass and reads nothing else.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
        ts
    };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A registered buffer served for raw gets and raw pulls, and the means to read it.
struct Raw {
    // The key goes before the node that unpacked it.
    key: switchyard_ucx::RKey,
    node: Node,
    ep: switchyard_ucx::Endpoint,
    base: u64,
    /// CPU time of the thread serving the buffer, in nanoseconds.
    cpu_ns: Arc<AtomicU64>,
}

impl Raw {
    /// A thread that registers `len` bytes and hands their key to one peer, and the peer.
    /// The thread also answers pulls: the peer's first message on the data endpoint is its
    /// worker address, each later one an offset and a length, answered by a message whose
    /// body is that range of the buffer, sent where it lies.
    fn start(len: usize, stop: Arc<AtomicBool>) -> anyhow::Result<Raw> {
        let cpu_ns = Arc::new(AtomicU64::new(0));
        let cpu = cpu_ns.clone();
        let (tx, rx) = mpsc::channel::<(SocketAddr, Vec<u8>, Vec<u8>, u64)>();
        std::thread::spawn(move || -> anyhow::Result<()> {
            // On the server's core, as the store's server.
            load::pin(Some(load::server_core()));
            let mut area = vec![7u8; len];
            let node = Node::new()?;
            // SAFETY: `area` outlives `node` (dropped first, below); peers only read it.
            let reg = unsafe { node.register(area.as_mut_ptr(), len, false) }?;
            let addr = node.listen("127.0.0.1:0".parse()?)?;
            tx.send((
                addr,
                node.address()?,
                node.pack_rkey(reg)?,
                area.as_ptr() as u64,
            ))?;
            let mut peer = None;
            let mut sending = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                node.wait(Duration::from_millis(50));
                while let Some(r) = node.next_connection() {
                    node.accept(r)?;
                }
                while let Some(mut m) = node.next_message() {
                    let b = node.body(&mut m)?;
                    let Some(to) = &peer else {
                        peer = Some(node.connect_address(&b, Failures::Undetected)?);
                        continue;
                    };
                    let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8"));
                    let (off, n) = (word(0) as usize, word(8) as usize);
                    anyhow::ensure!(off + n <= len, "a pull past the buffer");
                    // SAFETY: the range lies inside `area`, which outlives `node` (and with
                    // it every send); nothing writes `area` while the node lives.
                    let s = unsafe {
                        node.send_lent(
                            to,
                            Vec::new(),
                            Vec::new(),
                            &[(area.as_ptr().add(off), n)],
                            n > server::COPIED_PIECE,
                        )
                    }?;
                    sending.push(s);
                }
                sending.retain_mut(|s| node.sent(s).is_none());
                cpu.store(thread_cpu().as_nanos() as u64, Ordering::Relaxed);
            }
            drop(sending);
            drop(node);
            drop(area);
            Ok(())
        });
        let (addr, worker, key, base) = rx.recv()?;
        let node = Node::new()?;
        let ctl = node.connect(addr)?;
        let ep = node.connect_address(&worker, Failures::Undetected)?;
        node.link(&ep, &ctl);
        let key = node.unpack_rkey(&ep, &key)?;
        node.send(&ep, &[], &node.address()?)?;
        Ok(Raw {
            key,
            node,
            ep,
            base,
            cpu_ns,
        })
    }

    /// Pulls `buf.len()` bytes at `off` of the buffer into `buf`.
    fn pull(&self, buf: &mut [u8], off: usize) -> anyhow::Result<()> {
        let mut req = (off as u64).to_le_bytes().to_vec();
        req.extend_from_slice(&(buf.len() as u64).to_le_bytes());
        self.node.send(&self.ep, &[], &req)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(mut m) = self.node.next_message() {
                return Ok(self.node.body_into(&mut m, buf)?);
            }
            anyhow::ensure!(Instant::now() < deadline, "no answer to a raw pull");
            self.node.wait(Duration::from_millis(20));
        }
    }
}

/// Runs the benchmark.
pub fn run(a: &RemoteArgs) -> anyhow::Result<()> {
    let rounds = a.rounds.unwrap_or(if a.quick { 3 } else { 5 });
    let file = if a.quick { 64 << 20 } else { 256 << 20 };
    let region = Region::memory(file as u64 * 2 + (64 << 20), Persist::detect())?;
    let store = Store::format(
        region,
        Arc::new(Mover::start(&Config::default())?),
        Owner::current(),
    )?;
    let key = Key::random();
    let opts = ServeOptions {
        listen: "127.0.0.1:0".parse()?,
        read_only: false,
        key: key.clone(),
    };
    let stats = ServerStats::default();
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| -> anyhow::Result<()> {
        let (tx, rx) = mpsc::channel();
        let (store, opts, stats, stop2) = (&store, &opts, &stats, &stop);
        let server = s.spawn(move || {
            // The server's own core, where the load part's hog runs too.
            load::pin(Some(load::server_core()));
            serve(store, opts, stats, stop2, |b| tx.send(b).unwrap())
        });
        let result = (|| {
            let addr = rx.recv()?;
            measure(a, rounds, file, addr, &key, store, stats, &stop)
        })();
        stop.store(true, Ordering::Relaxed);
        server.join().expect("server thread")?;
        result
    })?;
    if a.sshfs {
        network::compare(rounds, a.quick, a.json)?;
    }
    Ok(())
}

/// Bytes a point reads (wrapping around the file): enough to time, bounded in requests for
/// the small sizes, and at most [`SLICE_BYTES`]. A slice of one pass over `--quick`'s 64 MiB
/// file lasted 3 ms at 1 MiB, and the per-round ratios of such slices were mostly noise: one
/// run put 1 MiB one-sided reads at 0.85× the raw gets by the median ratio while their median
/// rates were 20.0 and 18.4 GiB/s.
fn bytes_for(size: usize, quick: bool) -> usize {
    let ops = if quick { 4_000 } else { 20_000 };
    (size * ops).min(SLICE_BYTES)
}

/// Most bytes one path reads in one slice (a pass over the file without `--quick`).
const SLICE_BYTES: usize = 256 << 20;

#[allow(clippy::too_many_arguments)]
fn measure(
    a: &RemoteArgs,
    rounds: usize,
    file: usize,
    addr: SocketAddr,
    key: &Key,
    store: &Store,
    stats: &ServerStats,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let [(one, fd), (rpc, rfd), (pull, pfd)] = clients(addr, key, file)?;
    let ino = store.lookup(switchyard_store::ROOT, b"data")?.0;
    let raw = Raw::start(file, stop.clone())?;
    // The serving thread of each path: the raw buffer's, or the store's server.
    let server_cpu = |path: &str| {
        let c = if path.starts_with("raw") {
            &raw.cpu_ns
        } else {
            &stats.cpu_ns
        };
        Duration::from_nanos(c.load(Ordering::Relaxed))
    };
    if !a.json {
        println!(
            "bench remote: server and clients in one process over loopback (UCX {}); data \
             path {}; pulled: {}",
            switchyard_ucx::version(),
            one.data_path(),
            pull.data_path()
        );
    }
    let mut samples: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); SIZES.len() * PATHS.len()];
    // The client on the first core, the servers on theirs: the same places every round.
    load::pin(Some(0));
    let mut buf = vec![0u8; 2 << 20];
    for round in 0..rounds {
        for (si, &size) in SIZES.iter().enumerate() {
            let total = bytes_for(size, a.quick);
            for k in 0..PATHS.len() {
                let pi = (k + round + si) % PATHS.len();
                // Let the server's thread record its CPU time before and after.
                std::thread::sleep(Duration::from_millis(120));
                let (c0, s0, t0) = (thread_cpu(), server_cpu(PATHS[pi]), Instant::now());
                let mut off = 0usize;
                while off < total {
                    let b = &mut buf[..size];
                    // `file` is a multiple of every size.
                    let at = off % file;
                    match PATHS[pi] {
                        "raw" => raw.node.get(&raw.ep, b, raw.base + at as u64, &raw.key)?,
                        "raw-pull" => raw.pull(b, at)?,
                        "one-sided" => {
                            one.pread(fd, b, at as u64)?;
                        }
                        "pulled" => {
                            pull.pread(pfd, b, at as u64)?;
                        }
                        "in-messages" => {
                            rpc.pread(rfd, b, at as u64)?;
                        }
                        _ => {
                            store.read(ino, at as u64, b)?;
                        }
                    }
                    off += size;
                }
                let (wall, cpu) = (t0.elapsed(), thread_cpu() - c0);
                std::thread::sleep(Duration::from_millis(120));
                let scpu = server_cpu(PATHS[pi]) - s0;
                let gib = total as f64 / (1u64 << 30) as f64;
                samples[si * PATHS.len() + pi].push((
                    gib / wall.as_secs_f64(),
                    cpu.as_secs_f64() / gib,
                    scpu.as_secs_f64() / gib,
                ));
            }
        }
    }
    let points = points(&samples);
    let reads = one.stats();
    let loaded = load::measure(
        [("one-sided", &one, fd), ("in-messages", &rpc, rfd)],
        file,
        rounds,
    )?;
    let cache = metadata_cache(&one, rounds)?;
    let mixed = mixes::measure(addr, key, if a.quick { 1.5 } else { 4.0 })?;
    output(a.json, &mixed, &points, &samples, &loaded, &cache, &reads)?;
    drop(raw);
    Ok(())
}

/// Three clients of the server at `addr`, each with `/data` open: one that wrote it (`file`
/// bytes) and reads one-sided, one that moves data in messages, and one that pulls.
fn clients(
    addr: SocketAddr,
    key: &Key,
    file: usize,
) -> anyhow::Result<[(Client, switchyard_store::Fd); 3]> {
    let one = Client::connect(addr, key, true)?;
    let rpc = Client::connect(addr, key, false)?;
    rpc.force_in_messages();
    let pull = Client::connect_pulling(addr, key, false)?;
    let fd = one.open("/data", OpenFlags::CREATE, 0o644)?;
    let chunk = vec![0x5Au8; 4 << 20];
    for off in (0..file).step_by(chunk.len()) {
        one.pwrite(fd, &chunk[..chunk.len().min(file - off)], off as u64)?;
    }
    let rfd = rpc.open("/data", OpenFlags::READ, 0)?;
    let pfd = pull.open("/data", OpenFlags::READ, 0)?;
    Ok([(one, fd), (rpc, rfd), (pull, pfd)])
}

/// Each path and size's medians over rounds of its `samples` (rate, client and server CPU
/// per GiB).
fn points(samples: &[Vec<(f64, f64, f64)>]) -> Vec<Point> {
    samples
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let med = |f: fn(&(f64, f64, f64)) -> f64| {
                let mut x: Vec<f64> = v.iter().map(f).collect();
                x.sort_by(f64::total_cmp);
                x[x.len() / 2]
            };
            Point {
                path: PATHS[i % PATHS.len()],
                size: SIZES[i / PATHS.len()],
                gib_per_s: med(|s| s.0),
                client_cpu_s_per_gib: med(|s| s.1),
                server_cpu_s_per_gib: med(|s| s.2),
            }
        })
        .collect()
}

/// Everything measured, as JSON lines (`json`) or tables, and what the one-sided client did
/// during the reads (`reads`).
fn output(
    json: bool,
    mixed: &[mixes::Mixed],
    points: &[Point],
    samples: &[Vec<(f64, f64, f64)>],
    loaded: &[load::Loaded],
    cache: &Cache,
    reads: &ClientStats,
) -> anyhow::Result<()> {
    if json {
        for m in mixed {
            println!("{}", serde_json::to_string(m)?);
        }
        for p in points {
            println!("{}", serde_json::to_string(p)?);
        }
        for l in loaded {
            println!("{}", serde_json::to_string(l)?);
        }
        println!("{}", serde_json::to_string(cache)?);
    } else {
        load::print(loaded);
        mixes::print(mixed);
        print_table(points, samples, cache);
        println!(
            "one-sided client during the reads: {} requests, {} cache hits, {} misses, {} \
             reads repeated",
            reads.requests, reads.cache_hits, reads.cache_misses, reads.read_retries
        );
    }
    Ok(())
}

/// `stat` latency with and without the metadata cache.
#[derive(Serialize)]
struct Cache {
    stat_hit_us: f64,
    stat_miss_us: f64,
}

fn metadata_cache(c: &Client, rounds: usize) -> anyhow::Result<Cache> {
    c.mkdir("/a", 0o755).ok();
    c.mkdir("/a/b", 0o755).ok();
    c.mkdir("/a/b/c", 0o755).ok();
    let fd = c.open("/a/b/c/f", OpenFlags::CREATE, 0o644)?;
    c.close(fd)?;
    let n = 2_000;
    let time = |forget: bool| -> anyhow::Result<f64> {
        let mut v = Vec::new();
        for _ in 0..rounds {
            let t = Instant::now();
            for _ in 0..n {
                if forget {
                    c.forget();
                }
                c.stat("/a/b/c/f")?;
            }
            v.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
        }
        v.sort_by(f64::total_cmp);
        Ok(v[v.len() / 2])
    };
    c.stat("/a/b/c/f")?;
    Ok(Cache {
        stat_hit_us: time(false)?,
        stat_miss_us: time(true)?,
    })
}

fn print_table(points: &[Point], samples: &[Vec<(f64, f64, f64)>], cache: &Cache) {
    println!(
        "{:>7}  {:>12} {:>9} {:>14} {:>14}  {:>9} {:>9} {:>9} {:>10}",
        "size",
        "path",
        "GiB/s",
        "client cpu/GiB",
        "server cpu/GiB",
        "÷ raw",
        "÷ pull",
        "÷ local",
        "rpc ÷ this"
    );
    for (si, &size) in SIZES.iter().enumerate() {
        let at = |path: &str| {
            let pi = PATHS.iter().position(|p| *p == path).expect("a path");
            si * PATHS.len() + pi
        };
        let ratio = |a: usize, b: usize| {
            let mut r: Vec<f64> = samples[a]
                .iter()
                .zip(&samples[b])
                .map(|(x, y)| x.0 / y.0)
                .collect();
            r.sort_by(f64::total_cmp);
            r[r.len() / 2]
        };
        for path in PATHS {
            let p = &points[at(path)];
            println!(
                "{:>7}  {:>12} {:>9.3} {:>13.3}s {:>13.3}s  {:>9.2} {:>9.2} {:>9.2} {:>10}",
                switchyard_options::size::show(size as u64),
                path,
                p.gib_per_s,
                p.client_cpu_s_per_gib,
                p.server_cpu_s_per_gib,
                ratio(at(path), at("raw")),
                ratio(at(path), at("raw-pull")),
                ratio(at(path), at("local")),
                if path == "one-sided" {
                    format!("{:.2}", ratio(at("in-messages"), at("one-sided")))
                } else {
                    String::new()
                }
            );
        }
    }
    println!(
        "stat of a path 4 deep: {:.1} µs with the metadata cache, {:.1} µs without ({:.2}×)",
        cache.stat_hit_us,
        cache.stat_miss_us,
        cache.stat_miss_us / cache.stat_hit_us
    );
}
