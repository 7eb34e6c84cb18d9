//! `switchyard`: the command-line front end.

mod bench_cmd;
mod config_cmd;
mod mount_cmd;
mod serve_cmd;
mod stat;
mod store_cmd;
mod tune_cmd;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use bench_cmd::Forward;

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
    /// Measure the data-movement paths (`switchyard bench --help` lists the benchmarks). Runs
    /// the benchmarks' program, `switchyard-bench`, found next to this one.
    Bench(Forward),
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
    Tune(tune_cmd::TuneArgs),
    /// Crash-state testing: crash images at every fence, recovered and checked against an
    /// oracle. Runs `switchyard-bench crashtest`.
    Crashtest(Forward),
    /// Draw what `bench copy`, `bench mix` and `tune` measured (their --json output) as one
    /// self-contained HTML page: latency, bandwidth by threads, the breakdown by optimisation
    /// and CPU cost per GiB. Runs no benchmark (it is `switchyard-bench report`).
    Report(Forward),
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`switchyard ls | head`), as Unix tools do.
    // SAFETY: called first thing, before any thread exists; SIG_DFL is a valid disposition.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Bench(a) => bench_cmd::run("bench", &a),
        Command::Stat(a) => stat::run(&a),
        Command::Config(a) => config_cmd::run(&a),
        Command::Mkfs(a) => store_cmd::mkfs(&a),
        Command::Fsck(a) => store_cmd::fsck(&a),
        Command::Ls(a) => store_cmd::ls(&a),
        Command::Cp(a) => store_cmd::cp(&a),
        Command::Tune(a) => tune_cmd::run(&a),
        Command::Crashtest(a) => bench_cmd::run("crashtest", &a),
        Command::Report(a) => bench_cmd::run("report", &a),
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
