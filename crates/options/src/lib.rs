//! What every `switchyard` command shares: the options that choose the configuration file and
//! the engine profile, read into a [`Config`] by `switchyard_config`, byte sizes as the command
//! line writes them ([`size`]), the counters file `switchyard stat` reads ([`counters`]),
//! running the tuner and describing its profile ([`tune`]), and the medium a measurement ran
//! on ([`medium`]). The product
//! commands (`crates/cli`) and the benchmarks (`crates/bench`) both take these, so they live
//! below both.

#![warn(missing_docs)]

pub mod counters;
pub mod medium;
pub mod size;
pub mod tune;

use std::path::{Path, PathBuf};

use clap::Args;
use switchyard_config::Config;

pub use switchyard_config::DEFAULT_PROFILE;

/// The mover's options, for every command that moves data.
#[derive(Args, Clone)]
pub struct MoverArgs {
    /// Configuration file (TOML; every key is documented by the layer that owns it, and
    /// `switchyard config` prints them all).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Engine profile from `switchyard tune` [default: ./switchyard.profile.toml, if it
    /// exists]. A profile measured on another machine or engine is refused.
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Ignore any engine profile: the configuration's (or built-in) thresholds.
    #[arg(long, conflicts_with = "profile")]
    pub no_profile: bool,
    /// The copy engine: `threads` (worker threads), `dsa` (Intel DSA work queues; fails,
    /// saying what is missing and how to set a queue up, where there is none) or `auto` (`dsa`
    /// where a usable work queue exists, else `threads`, saying why). [default: the
    /// configuration's `engine.kind`, threads]
    #[arg(long, value_name = "dsa|threads|auto", value_parser = ENGINES)]
    pub engine: Option<String>,
}

/// The values of `--engine` ([`switchyard_mover::select::KINDS`]).
pub const ENGINES: [&str; 3] = switchyard_mover::select::KINDS;

impl MoverArgs {
    /// The configuration: the file if given, else the defaults, with `--engine` over its
    /// `engine.kind`, and the engine profile (which must have been measured with that
    /// engine).
    pub fn load_config(&self) -> anyhow::Result<Config> {
        let mut cfg = Config::load_or_default(self.config.as_deref())?;
        if self.engine.is_some() {
            self.apply_engine(&mut cfg.mover)?;
            if let Some(p) = cfg.mover.applied_profile.clone() {
                p.check(Path::new(&cfg.mover.mover.profile), &cfg.mover)
                    .map_err(switchyard_mover::ConfigError::from)?;
            }
        }
        let default = PathBuf::from(DEFAULT_PROFILE);
        Ok(match &self.profile {
            _ if self.no_profile => cfg,
            Some(p) => cfg.with_profile(p)?,
            None if cfg.mover.applied_profile.is_none() && default.exists() => {
                cfg.with_profile(&default)?
            }
            None => cfg,
        })
    }

    /// Puts `--engine`, if given, in `mover`'s `engine.kind` (for a command that reads the
    /// configuration file itself).
    pub fn apply_engine(&self, mover: &mut switchyard_mover::Config) -> anyhow::Result<()> {
        if let Some(kind) = &self.engine {
            mover.engine.kind.clone_from(kind);
            mover.validate()?;
        }
        Ok(())
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

/// The configuration file (or the defaults) with an engine profile applied
/// ([`Config::load_with_profile`]).
pub fn config_with_profile(
    config: Option<&Path>,
    profile: Option<&Path>,
    no_profile: bool,
) -> anyhow::Result<Config> {
    Ok(Config::load_with_profile(config, profile, no_profile)?)
}
