//! `switchyard-bench`: Switchyard's benchmarks (`bench …`), the crash-state harness
//! (`crashtest`) and the report that draws the benchmarks' results (`report`), as a program of
//! their own so that the product, `switchyard`, links none of what they need. `switchyard
//! bench …`, `switchyard crashtest` and `switchyard report` run this program, found next to
//! `switchyard`, with their arguments.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use switchyard_bench::{
    aio, apps, copy, crashtest, decide, durability, explore, fs, idle, large, memcpy, meta, mix,
    mount as mount_bench, preload, qos, remote, report, tunes,
};

/// Switchyard's benchmarks, crash-state harness and report (`switchyard bench`, `switchyard
/// crashtest` and `switchyard report` run this program).
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure the data-movement paths.
    #[command(subcommand)]
    Bench(Bench),
    /// Crash-state testing: crash images at every fence, recovered and checked against an
    /// oracle.
    Crashtest(crashtest::CrashArgs),
    /// Draw what `bench copy`, `bench mix` and `tune` measured (their --json output) as one
    /// self-contained HTML page: latency, bandwidth by threads, the breakdown by optimisation
    /// and CPU cost per GiB. Runs no benchmark.
    Report(report::ReportArgs),
}

#[derive(Subcommand)]
enum Bench {
    /// Latency of the store's asynchronous writes: orderless (metadata committed while the
    /// engine copies) against ordered (committed after the copy), every copy on the engine.
    Aio(aio::AioArgs),
    /// Applications on the store, synchronous against asynchronous on the same core (and
    /// asynchronous with an executor that does not help the engine): grep, snappy
    /// decompression, SHA-256, BFS and a fileserver; then FxMark's DWAL and DRBL
    /// throughput-latency curves.
    Apps(apps::AppsArgs),
    /// Copy throughput, latency and CPU cost of glibc memcpy, PMDK, and Switchyard's cpu-only,
    /// engine-only and scheduled paths, over sizes, threads and both directions.
    Copy(copy::CopyArgs),
    /// The file store's reads, writes and appends, 1..N threads, against fio's libpmem engine
    /// (the hardware ceiling) and psync on tmpfs, in one run; and mount times.
    Fs(fs::FsArgs),
    /// The same fio jobs on the store's FUSE mount, on a passthrough FUSE file system (FUSE's
    /// own cost) and on tmpfs, in one run.
    Mount(mount_bench::MountBenchArgs),
    /// What durability costs: sqlite3 with synchronous=FULL (rollback journal and WAL) and
    /// fs_mark-like small files (create, write 16 KiB, fsync, close) on the store's mount
    /// over a store file on a disk, in the default and the `always` sync mode, against the
    /// same programs on that disk's file system, in one run.
    Sync(durability::SyncBenchArgs),
    /// Metadata operations per second (create, stat, open/close, rename, readdir, unlink),
    /// 1..N threads in private and shared directories: the store in process, through its
    /// mount, and tmpfs through system calls, in one run.
    Meta(meta::MetaBenchArgs),
    /// What mkfs, fsck, stat and a mount (clean and after a crash) cost on a 1 TiB sparse
    /// store file, empty and with a million files, each in its own process (time and peak
    /// memory), against the same files in a store just large enough for them.
    Large(large::LargeBenchArgs),
    /// Request-size mixes (Fastmove's bulk and mixed, and Table 1's TPC-C, fileserver and
    /// graph-walk mixes), reads and writes, 1..N threads, through cpu-only, engine-only,
    /// default and tuned scheduling; with --grid, the best static setting for comparison.
    Mix(mix::MixArgs),
    /// The channel manager: a latency tenant's 64 KiB reads (Poisson arrivals) beside a bulk
    /// tenant's 2 MiB copies, alone, on a shared channel, on separate channels, with the bulk
    /// thread CPU-throttled, with the engine throttling the bulk channel, and under fixed
    /// budgets (latency against budget).
    Qos(qos::QosArgs),
    /// An unmodified program's memcpy with the memcpy preload library against plain libc, by
    /// size (below and above the library's threshold), each run in a process of its own.
    Memcpy(memcpy::MemcpyArgs),
    /// Unmodified programs' file I/O (fio: 4 KiB random and 1 MiB sequential reads and writes)
    /// through the file preload library, on the same store's FUSE mount and on tmpfs, in one
    /// run; and copies of 4 KiB to 4 MiB with and without the memcpy preload library.
    Preload(preload::PreloadBenchArgs),
    /// Reading a served store (`serve`) over UCX: one-sided reads, reads with the data in
    /// messages, the transport's raw gets and the store read in process, by request size;
    /// CPU per GiB on client and server; `stat` with and without the metadata cache.
    Remote(remote::RemoteArgs),
    /// Cost of one scheduling decision (median over batches).
    Decide(decide::DecideArgs),
    /// What an adaptation trial sees of a path the traffic does not usually take: bulk
    /// writes split one in N, or in runs, each timed, against the CPU's in the same slice,
    /// and against splitting every request.
    Explore(explore::ExploreArgs),
    /// CPU used by an idle engine after a burst of work.
    Idle(idle::IdleArgs),
    /// How far quick tunes' thresholds lie from full tunes': full and quick tunes run
    /// alternately (full, quick, full, …, full), each quick one compared with the full tune
    /// before and after it, and each full tune with the next (the host's own drift).
    Tunes(tunes::TunesArgs),
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`switchyard bench copy --json | head`), as Unix tools do.
    // SAFETY: called first thing, before any thread exists; SIG_DFL is a valid disposition.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let r = match Cli::parse().command {
        Command::Bench(b) => run(b),
        Command::Crashtest(a) => crashtest::run(&a),
        Command::Report(a) => report::run(&a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("error: {}", chain.join(": "));
            ExitCode::FAILURE
        }
    }
}

/// Runs the benchmark `b` names.
fn run(b: Bench) -> anyhow::Result<()> {
    match b {
        Bench::Aio(a) => aio::run(&a),
        Bench::Apps(a) => apps::run(&a),
        Bench::Copy(a) => copy::run(&a),
        Bench::Fs(a) => fs::run(&a),
        Bench::Mount(a) => mount_bench::run(&a),
        Bench::Meta(a) => meta::run(&a),
        Bench::Sync(a) => durability::run(&a),
        Bench::Large(a) => large::run(&a),
        Bench::Mix(a) => mix::run(&a),
        Bench::Decide(a) => decide::run(&a),
        Bench::Explore(a) => explore::run(&a),
        Bench::Remote(a) => remote::run(&a),
        Bench::Qos(a) => qos::run(&a),
        Bench::Memcpy(a) => memcpy::run(&a),
        Bench::Preload(a) => preload::run(&a),
        Bench::Idle(a) => idle::run(&a),
        Bench::Tunes(a) => tunes::run(&a),
    }
}
