//! The configuration file of the whole stack: each layer owns its sections — their keys,
//! defaults, checks and documentation — and this crate, above them all, composes them into
//! one file ([`Config`]), reads it, checks every section, applies the engine profile, and
//! prints it with each key's documentation and source ([`Config::to_commented_toml`]).
//!
//! | section | type | crate |
//! |---|---|---|
//! | `[engine]`, `[media]`, `[mover]` (with `.thresholds`, `.adaptation`, `.estimates`), `[qos]` | [`switchyard_mover::Config`] | `switchyard_mover` |
//! | `[runtime]` | [`RuntimeConfig`] | `switchyard_rt` |
//! | `[store]` | [`StoreConfig`] | `switchyard_store` |
//! | `[fuse]` | [`FuseConfig`] | `switchyard_fuse` |
//!
//! Each section's keys, with their defaults, are documented in the module that defines it
//! (`switchyard_mover::config`, `switchyard_rt::config`, `switchyard_store::config`,
//! `switchyard_fuse::FuseConfig`). The command line (`switchyard_options`), the C library and
//! the preload libraries read their configuration here, without a command-line parser.

#![warn(missing_docs)]

mod commented;
mod sections;

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Serialize;

pub use commented::Sources;
pub use switchyard_fuse::FuseConfig;
pub use switchyard_rt::RuntimeConfig;
pub use switchyard_store::{StoreConfig, SyncMode};

/// Where the engine profile lives unless told otherwise: the working directory, next to the
/// store.
pub const DEFAULT_PROFILE: &str = "switchyard.profile.toml";

/// The whole configuration: every layer's sections. Its TOML form is the configuration file;
/// a section or key the file leaves out has its layer's default, and an unknown one is an
/// error that names it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct Config {
    /// The mover's sections: `[engine]`, `[media]`, `[mover]` and `[qos]`, and the engine
    /// profile applied over them.
    #[serde(flatten)]
    pub mover: switchyard_mover::Config,
    /// The async runtime's executor (`switchyard_rt`).
    pub runtime: RuntimeConfig,
    /// The file store.
    pub store: StoreConfig,
    /// The FUSE mount (`switchyard_fuse`).
    pub fuse: FuseConfig,
}

/// A configuration that could not be loaded or cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("config {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The TOML is malformed or names an unknown section or key.
    #[error("config {path}: {message}")]
    Parse {
        /// The path.
        path: String,
        /// What the parser said, with the line.
        message: String,
    },
    /// A value of the runtime's, the store's or the mount's sections is out of range (the
    /// message names the key).
    #[error("config: {0}")]
    Invalid(String),
    /// The mover's sections are out of range, or the engine profile cannot be used here.
    #[error(transparent)]
    Mover(#[from] switchyard_mover::ConfigError),
}

impl Config {
    /// [`Config::load`] of `path` if given, else the defaults.
    pub fn load_or_default(path: Option<&Path>) -> Result<Config, Error> {
        path.map_or_else(|| Ok(Config::default()), Config::load)
    }

    /// Reads and checks a TOML file, and applies the engine profile it names
    /// (`mover.profile`), if any.
    pub fn load(path: &Path) -> Result<Config, Error> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: p.clone(),
            source,
        })?;
        let cfg: Config = toml::from_str(&text).map_err(|e| Error::Parse {
            path: p,
            message: e.to_string(),
        })?;
        cfg.validate()?;
        if cfg.mover.mover.profile.is_empty() {
            Ok(cfg)
        } else {
            let p = PathBuf::from(&cfg.mover.mover.profile);
            cfg.with_profile(&p)
        }
    }

    /// The configuration file `config` (or the defaults) with an engine profile applied:
    /// `profile` if given, else ./switchyard.profile.toml ([`DEFAULT_PROFILE`]) if it exists
    /// and the configuration names none; none with `no_profile`.
    pub fn load_with_profile(
        config: Option<&Path>,
        profile: Option<&Path>,
        no_profile: bool,
    ) -> Result<Config, Error> {
        let cfg = Config::load_or_default(config)?;
        let default = PathBuf::from(DEFAULT_PROFILE);
        match profile {
            _ if no_profile => Ok(cfg),
            Some(p) => cfg.with_profile(p),
            None if cfg.mover.applied_profile.is_none() && default.exists() => {
                cfg.with_profile(&default)
            }
            None => Ok(cfg),
        }
    }

    /// Loads the profile at `path`, refuses it if it was measured on another machine or
    /// engine, and applies it to the mover's sections
    /// ([`switchyard_mover::Config::with_profile`]).
    pub fn with_profile(mut self, path: &Path) -> Result<Config, Error> {
        self.mover = self.mover.with_profile(path)?;
        Ok(self)
    }

    /// Checks every section's ranges and names; the error names the key.
    pub fn validate(&self) -> Result<(), Error> {
        self.mover.validate()?;
        self.store.validate().map_err(Error::Invalid)?;
        self.fuse.validate().map_err(Error::Invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::{Config, Error};

    fn parse(text: &str) -> Result<Config, String> {
        toml::from_str::<Config>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn every_section_goes_to_its_layer() {
        let c = parse(
            "[engine]\nqueue_depth = 8\n[mover]\nsplit = false\n[runtime]\nspin_us = 7\n\
             [store]\nsync = \"always\"\n[fuse]\nworkers = 3\n[qos]\nbulk_channels = 2\n",
        )
        .unwrap();
        assert_eq!(c.mover.engine.queue_depth, 8);
        assert!(!c.mover.mover.split);
        assert_eq!(c.mover.qos.bulk_channels, 2);
        assert_eq!(c.runtime.spin_us, 7);
        assert_eq!(c.store.sync_every(), None);
        assert_eq!(c.fuse.workers, 3);
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn unknown_sections_and_keys_are_errors_with_the_line() {
        let e = parse("[engine]\nkind = \"threads\"\n\n[muver]\nsplit = false\n").unwrap_err();
        assert!(e.contains("muver") && e.contains("line 4"), "{e}");
        let e = parse("[engine]\nkind = \"threads\"\n[mover]\nthreshold = 3\n").unwrap_err();
        assert!(e.contains("threshold") && e.contains("line 4"), "{e}");
        let e = parse("[runtime]\nspin = 3\n").unwrap_err();
        assert!(e.contains("spin"), "{e}");
        let e = parse("[store]\nsync = \"never\"\n").unwrap_err();
        assert!(e.contains("never"), "{e}");
    }

    #[test]
    fn every_section_refuses_values_out_of_range_naming_the_key() {
        for (text, key) in [
            ("[fuse]\nmax_io = 100\n", "fuse.max_io"),
            ("[store]\nreserved_percent = 80\n", "store.reserved_percent"),
            ("[store]\nsync_interval_ms = 0\n", "store.sync_interval_ms"),
            ("[mover.adaptation]\nhold = 0\n", "mover.adaptation"),
            ("[mover.estimates]\nweight = 2.0\n", "mover.estimates"),
            ("[media]\nflush = \"wbinvd\"\n", "media.flush"),
        ] {
            let e = parse(text).unwrap().validate().unwrap_err();
            assert!(e.to_string().contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn a_file_is_read_checked_and_named_in_its_errors() {
        let dir = std::env::temp_dir().join(format!("switchyard-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.toml");
        std::fs::write(&path, "[store]\nreserved_percent = 7\n").unwrap();
        assert_eq!(Config::load(&path).unwrap().store.reserved_percent, 7);
        std::fs::write(&path, "[fuse]\nmax_io = 1\n").unwrap();
        assert!(matches!(Config::load(&path), Err(Error::Invalid(_))));
        std::fs::write(&path, "[fuse\n").unwrap();
        let e = Config::load(&path).unwrap_err();
        assert!(matches!(e, Error::Parse { .. }) && e.to_string().contains("c.toml"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(Config::load(&path), Err(Error::Read { .. })));
        assert_eq!(Config::load_or_default(None).unwrap(), Config::default());
    }
}
