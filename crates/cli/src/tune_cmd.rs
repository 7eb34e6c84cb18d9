//! `switchyard tune`: profiles this machine's copy paths and writes the engine profile that
//! every later command loads (see `switchyard_mover::tune` for what is measured and how, and
//! `switchyard_options::tune` for how the commands run it).

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;
use switchyard_mover::profile::Profile;
use switchyard_mover::tune::Measurements;
use switchyard_options::medium::Media;
use switchyard_options::tune::{describe, tune_to};
use switchyard_options::DEFAULT_PROFILE;

/// `tune` options.
#[derive(Args)]
pub struct TuneArgs {
    /// Configuration file (TOML): the engine to profile. Its thresholds are not read.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The engine to profile: `threads`, `dsa` (fails where no DSA work queue is set up) or
    /// `auto` (`dsa` where a usable work queue exists, else `threads`). [default: the
    /// configuration's `engine.kind`, threads]
    #[arg(long, value_name = "dsa|threads|auto", value_parser = switchyard_options::ENGINES)]
    engine: Option<String>,
    /// Where to write the profile.
    #[arg(long, default_value = DEFAULT_PROFILE)]
    out: PathBuf,
    /// Directory for the scratch region (the medium measured), removed afterwards. Default:
    /// the working directory, where the main job keeps its store.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Within 30 s: a coarser sweep, fewer rounds (within 2 minutes without it).
    #[arg(long)]
    quick: bool,
    /// Print the profile and every measurement as one JSON object (for `switchyard report`).
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Output<'a> {
    tune: bool,
    /// Why the profiled engine is that engine (`switchyard_mover::select`).
    engine_reason: &'a str,
    profile: &'a Profile,
    measurements: &'a Measurements,
    /// The scratch region measured (the profile names the machine, the engine and when).
    media: &'a Media,
}

/// Runs `switchyard tune`.
pub fn run(a: &TuneArgs) -> anyhow::Result<()> {
    let mut config = switchyard_config::Config::load_or_default(a.config.as_deref())?.mover;
    if let Some(kind) = &a.engine {
        config.engine.kind.clone_from(kind);
        config.validate()?;
    }
    let choice = switchyard_mover::select::choose(&config)?;
    if !a.json {
        eprintln!(
            "engine: {} ({} channel(s)); {}",
            choice.kind, choice.channels, choice.reason
        );
    }
    let (profile, m, media) = tune_to(&config, &a.dir, &a.out, a.quick)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&Output {
                tune: true,
                engine_reason: &choice.reason,
                profile: &profile,
                measurements: &m,
                media: &media,
            })?
        );
    } else {
        println!(
            "wrote {}, {}; engine: {}",
            a.out.display(),
            describe(&profile),
            choice.reason
        );
    }
    Ok(())
}
