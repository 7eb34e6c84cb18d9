//! `switchyard bench …`, `switchyard crashtest` and `switchyard report`: the benchmarks, the
//! crash-state harness and the report are a program of their own, `switchyard-bench` (crate
//! `switchyard-bench`), so that the product links none of what they need (plotting, regular
//! expressions, compression, hashing, the store's test hooks). These commands replace this
//! process with that program, found next to this one, with the same arguments: its output,
//! exit status and signals are the command's.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;

/// The benchmarks' program's file name; it lies next to `switchyard` wherever cargo builds
/// both.
const PROGRAM: &str = "switchyard-bench";

/// Everything after the command, passed to `switchyard-bench` as it is (`--help` included).
#[derive(Args)]
#[command(disable_help_flag = true, disable_version_flag = true)]
pub struct Forward {
    /// The arguments of `switchyard-bench`'s command of the same name.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// Where `switchyard-bench` is: next to this program.
fn program() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("finding this program's path")?;
    Ok(me.with_file_name(PROGRAM))
}

/// Replaces this process with `switchyard-bench COMMAND ARGS…`. Returns only on failure: an
/// error that says how to build the program when it is missing.
pub fn run(command: &str, a: &Forward) -> anyhow::Result<()> {
    let path = program()?;
    if !path.is_file() {
        bail!(
            "`switchyard {command}` runs the benchmarks' program, {}, which is not there; build \
             it next to switchyard with `cargo build --release -p switchyard-bench` (or \
             without --release for a debug build of switchyard)",
            path.display()
        );
    }
    let err = std::process::Command::new(&path)
        .arg(command)
        .args(&a.args)
        .exec();
    Err(err).with_context(|| format!("running {}", path.display()))
}
