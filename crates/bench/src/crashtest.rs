//! `crashtest`: the store's crash-state harness (`switchyard_store::crash`, built with the
//! store's `testing` feature, which only this program turns on): crash images at every fence
//! of each workload, recovered and checked against an oracle.

use anyhow::bail;
use clap::Args;
use switchyard_store::crash;

/// `crashtest` options.
#[derive(Args)]
pub struct CrashArgs {
    /// Many more subsets per crash point and 400 random sequences of 10 operations (tens of
    /// minutes) instead of the bounded run (about half a minute).
    #[arg(long)]
    exhaustive: bool,
    /// Seed for random subsets and sequences.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Prove the harness works: inject a missing flush and expect violations.
    #[arg(long)]
    inject_missing_flush: bool,
    /// Crash asynchronous (orderless) writes instead: their copies go to a delayed engine
    /// while their metadata commits.
    #[arg(long = "async")]
    asynchronous: bool,
    /// Where the workloads' copies go: `threads` (the CPU; with --async a delayed threads
    /// engine) or `dsa-model` (every copy through the DSA engine on its device model, a test
    /// double: durable writes as descriptors with destination readback).
    #[arg(long, value_name = "threads|dsa-model", default_value = "threads", value_parser = ["threads", "dsa-model"])]
    engine: String,
}

/// Runs the crash-state harness.
pub fn run(a: &CrashArgs) -> anyhow::Result<()> {
    let mut opts = if a.exhaustive {
        crash::Options::exhaustive()
    } else {
        crash::Options::default()
    };
    opts.seed = a.seed;
    opts.inject_missing_flush = a.inject_missing_flush;
    if a.engine == crash::CrashEngine::DsaModel.name() {
        opts.engine = crash::CrashEngine::DsaModel;
    }
    let bar = indicatif::ProgressBar::new_spinner();
    let progress = |r: &crash::Report| {
        bar.set_message(format!(
            "{} workloads, {} crash points, {} images, {} violations",
            r.workloads,
            r.crash_points,
            r.images,
            r.violations.len()
        ));
        bar.tick();
    };
    let report = if a.asynchronous {
        crash::run_async(&opts, progress)
    } else {
        crash::run(&opts, progress)
    };
    bar.finish_and_clear();
    println!(
        "engine: {}; {} workloads, {} crash points, {} distinct crash images ({} during \
         asynchronous writes), {} violations",
        opts.engine.name(),
        report.workloads,
        report.crash_points,
        report.images,
        report.async_images,
        report.violations.len()
    );
    for v in &report.violations {
        println!("VIOLATION: {v}");
    }
    match (report.violations.is_empty(), a.inject_missing_flush) {
        (true, false) => Ok(()),
        (false, true) => {
            println!("the injected missing flush was caught, as it must be");
            Ok(())
        }
        (true, true) => bail!("the injected missing flush was NOT caught"),
        (false, false) => bail!("crash consistency violated"),
    }
}
