//! What every `switchyard` command shares: the mover's options and how they become a
//! [`Config`] (configuration file, engine profile), byte sizes as the command line writes
//! them ([`size`]), the counters file `switchyard stat` reads ([`counters`]), running the
//! tuner and describing its profile ([`tune`]), and the medium a measurement ran on
//! ([`medium`]). The product
//! commands (`crates/cli`) and the benchmarks (`crates/bench`) both take these, so they live
//! below both.

#![warn(missing_docs)]

pub mod counters;
pub mod medium;
pub mod size;
pub mod tune;

use std::path::{Path, PathBuf};

use clap::Args;
use switchyard_mover::Config;

/// Where the engine profile lives unless told otherwise: the working directory, next to the
/// store.
pub const DEFAULT_PROFILE: &str = "switchyard.profile.toml";

/// The mover's options, for every command that moves data.
#[derive(Args, Clone)]
pub struct MoverArgs {
    /// Configuration file (TOML; every knob is documented in `switchyard-mover`'s config).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Engine profile from `switchyard tune` [default: ./switchyard.profile.toml, if it
    /// exists]. A profile measured on another machine or engine is refused.
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Ignore any engine profile: the configuration's (or built-in) thresholds.
    #[arg(long, conflicts_with = "profile")]
    pub no_profile: bool,
}

impl MoverArgs {
    /// The configuration: the file if given, else the defaults, with the engine profile.
    pub fn load_config(&self) -> anyhow::Result<Config> {
        config_with_profile(
            self.config.as_deref(),
            self.profile.as_deref(),
            self.no_profile,
        )
    }
}

/// Lets this process open store and region files that other users can read or write
/// (`--allow-exposed-store`), warning once.
pub fn allow_exposed() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        eprintln!(
            "warning: --allow-exposed-store: store and region files that other users can read \
             or write are opened anyway"
        )
    });
    switchyard_media::private::allow_exposed(true);
}

/// The configuration file (or the defaults) with an engine profile applied: `profile` if
/// given, else ./switchyard.profile.toml if it exists and the configuration names none; none
/// with `no_profile`.
pub fn config_with_profile(
    config: Option<&Path>,
    profile: Option<&Path>,
    no_profile: bool,
) -> anyhow::Result<Config> {
    let cfg = Config::load_or_default(config)?;
    let default = PathBuf::from(DEFAULT_PROFILE);
    Ok(match profile {
        _ if no_profile => cfg,
        Some(p) => cfg.with_profile(p)?,
        None if cfg.applied_profile.is_none() && default.exists() => cfg.with_profile(&default)?,
        None => cfg,
    })
}
