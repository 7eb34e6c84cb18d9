//! `switchyard`: the command-line front end.

mod config_cmd;
mod mount_cmd;
mod serve_cmd;
mod stat;
mod store_cmd;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use switchyard_bench::{
    aio, apps, copy, decide, durability, explore, fs, idle, large, memcpy, meta, mix,
    mount as mount_bench, preload, qos, remote, report, tune, tunes,
};

/// Switchyard: a userspace storage stack for slow memory that moves data with the cheapest
/// engine available (CPU, DMA engine or helper threads), chosen per request.
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
    /// Print the configuration in effect as commented TOML: every key, what it does, and
    /// whether its value is the default, the configuration file's or the engine profile's.
    Config(config_cmd::ConfigArgs),
    /// Show the detected media primitives, the configuration in effect and the counters of the
    /// last run.
    Stat(stat::StatArgs),
    /// Format a store file (default ./switchyard.store).
    Mkfs(store_cmd::MkfsArgs),
    /// Check every invariant of a store; --repair runs recovery where that is safe.
    Fsck(store_cmd::FsckArgs),
    /// List a directory of the store.
    Ls(store_cmd::LsArgs),
    /// Copy a file into (`store:/path` as destination), out of, or within the store.
    Cp(store_cmd::CpArgs),
    /// The main job: format ./switchyard.store if it is missing and mount it on ./mnt (FUSE)
    /// in the foreground at once; without an engine profile, the full tune runs behind the
    /// mount and its profile goes into it when done. Ctrl-C unmounts cleanly.
    Up(mount_cmd::UpArgs),
    /// Mount the store as a file system (FUSE) in the foreground; Ctrl-C unmounts cleanly.
    Mount(mount_cmd::MountArgs),
    /// Unmount a store mounted with `switchyard mount`.
    Umount(mount_cmd::UmountArgs),
    /// Serve the store to other processes and machines (remote access over UCX: metadata
    /// by request, data one-sided where the transport allows) in the foreground; Ctrl-C
    /// stops and unmounts cleanly. `ls` and `cp` reach it with `ADDR:PORT:/path` operands.
    Serve(serve_cmd::ServeArgs),
    /// Profile this machine's copy paths (CPU, engine, split; both directions; aligned and
    /// unaligned; 1..N threads) and write the engine profile every later command loads.
    Tune(tune::TuneArgs),
    /// Crash-state testing: crash images at every fence, recovered and checked against an
    /// oracle.
    Crashtest(store_cmd::CrashArgs),
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
    // Die quietly on a closed pipe (`switchyard ls | head`), as Unix tools do.
    // SAFETY: called first thing, before any thread exists; SIG_DFL is a valid disposition.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Bench(Bench::Aio(a)) => aio::run(&a),
        Command::Bench(Bench::Apps(a)) => apps::run(&a),
        Command::Bench(Bench::Copy(a)) => copy::run(&a),
        Command::Bench(Bench::Fs(a)) => fs::run(&a),
        Command::Bench(Bench::Mount(a)) => mount_bench::run(&a),
        Command::Bench(Bench::Meta(a)) => meta::run(&a),
        Command::Bench(Bench::Sync(a)) => durability::run(&a),
        Command::Bench(Bench::Large(a)) => large::run(&a),
        Command::Bench(Bench::Mix(a)) => mix::run(&a),
        Command::Bench(Bench::Decide(a)) => decide::run(&a),
        Command::Bench(Bench::Explore(a)) => explore::run(&a),
        Command::Bench(Bench::Remote(a)) => remote::run(&a),
        Command::Bench(Bench::Qos(a)) => qos::run(&a),
        Command::Bench(Bench::Memcpy(a)) => memcpy::run(&a),
        Command::Bench(Bench::Preload(a)) => preload::run(&a),
        Command::Bench(Bench::Idle(a)) => idle::run(&a),
        Command::Bench(Bench::Tunes(a)) => tunes::run(&a),
        Command::Stat(a) => stat::run(&a),
        Command::Config(a) => config_cmd::run(&a),
        Command::Mkfs(a) => store_cmd::mkfs(&a),
        Command::Fsck(a) => store_cmd::fsck(&a),
        Command::Ls(a) => store_cmd::ls(&a),
        Command::Cp(a) => store_cmd::cp(&a),
        Command::Tune(a) => tune::run(&a),
        Command::Crashtest(a) => store_cmd::crashtest(&a),
        Command::Report(a) => report::run(&a),
        Command::Up(a) => mount_cmd::up(&a),
        Command::Mount(a) => mount_cmd::mount(&a),
        Command::Umount(a) => mount_cmd::umount(&a),
        Command::Serve(a) => serve_cmd::run(&a),
    };
    match r.context("switchyard") {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {:#}", e.root_cause_chain());
            ExitCode::FAILURE
        }
    }
}

trait Chain {
    fn root_cause_chain(&self) -> String;
}

impl Chain for anyhow::Error {
    fn root_cause_chain(&self) -> String {
        self.chain()
            .skip(1)
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(": ")
    }
}
