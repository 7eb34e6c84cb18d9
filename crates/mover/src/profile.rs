//! Engine profiles: what `switchyard tune` measured on one machine with one engine, saved as
//! versioned TOML, and applied to a [`Config`] when a mover starts.
//!
//! A profile is only valid where it was measured. It names the machine (CPU model, cores,
//! flush instruction, SIMD width) and the engine (kind, channels); [`Profile::check`] refuses
//! a profile whose names differ from this machine's, with both sides in the message, so a
//! copied or stale profile cannot silently misconfigure the scheduler.
//!
//! ```toml
//! version = 3
//! [machine]
//! cpu = "AMD EPYC 9B14"
//! cores = 2
//! flush = "clwb"
//! simd = "avx512"
//! [engine]
//! kind = "threads"
//! channels = 1
//! [measured]
//! unix_time = 1795000000
//! seconds = 11.5
//! quick = true
//! [tuned]
//! concurrency_limit = 1
//! split_min_bytes = 262144
//! cpu_writers = 0
//! nt_threshold = 1024
//! shifted_min = 1024
//! [tuned.thresholds]
//! to_slow = { local_aligned = 1099511627776, ... }
//! [[bins]]          # one per direction and size bin
//! direction = "from_slow"
//! size = 16384
//! cpu_gib_s = 9.1
//! engine_gib_s = 7.9
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};
use switchyard_media::Persist;

use crate::bandwidth::{self, Bandwidth};
use crate::config::{Config, Thresholds};
use crate::hints::Direction;

/// The profile format this build reads and writes.
pub const PROFILE_VERSION: u32 = 3;

/// A threshold that no request reaches: the engine never pays off on that path.
pub const NEVER: usize = 1 << 40;

/// The machine a profile was measured on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// CPU model name.
    pub cpu: String,
    /// Cores available to this process.
    pub cores: usize,
    /// Flush instruction in use.
    pub flush: String,
    /// Widest SIMD level of the non-temporal kernels.
    pub simd: String,
}

impl Machine {
    /// This machine, with the primitives `persist` selects.
    pub fn this(persist: &Persist) -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        Machine {
            cpu,
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            flush: persist.flush.name().to_string(),
            simd: persist.simd.name().to_string(),
        }
    }
}

impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, {} cores, {}, {}",
            self.cpu, self.cores, self.flush, self.simd
        )
    }
}

/// The engine a profile was measured with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineId {
    /// Engine kind (`threads` or `dsa`).
    pub kind: String,
    /// Channels.
    pub channels: usize,
}

impl EngineId {
    /// The engine `config` starts on this machine (`auto` resolved: [`crate::select`]); the
    /// configured kind where it cannot start.
    pub fn of(config: &Config) -> EngineId {
        match crate::select::choose(config) {
            Ok(c) => EngineId {
                kind: c.kind.into(),
                channels: c.channels,
            },
            Err(_) => EngineId {
                kind: config.engine.kind.clone(),
                channels: config.engine.effective_channels(),
            },
        }
    }
}

impl std::fmt::Display for EngineId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} × {} channels", self.kind, self.channels)
    }
}

/// When and how long the profile was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measured {
    /// Seconds since the epoch at the end of the run.
    pub unix_time: u64,
    /// Wall time of the run.
    pub seconds: f64,
    /// Whether it was a `--quick` run.
    pub quick: bool,
}

/// The scheduler settings derived from the measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tuned {
    /// Engine thresholds per direction, locality and alignment ([`NEVER`] where the engine
    /// never won). Without NUMA, remote thresholds equal local ones.
    pub thresholds: Thresholds,
    /// M: the fewest concurrent engine users that reach its peak bandwidth.
    pub concurrency_limit: usize,
    /// Offloaded copies at least this large are split between engine and CPU (the thresholds
    /// were measured splitting at every size, so this is the smallest of them).
    pub split_min_bytes: usize,
    /// Cap on concurrent CPU writers into slow memory (0: writes still scale at every
    /// measured thread count).
    pub cpu_writers: usize,
    /// Durable copies below this many bytes use temporal stores + flush.
    pub nt_threshold: usize,
    /// Temporal copies between shifted buffers from this many bytes use the SIMD loop; 0 =
    /// never. Profiles written before it was measured lack it and get the built-in default.
    #[serde(default = "default_shifted_min")]
    pub shifted_min: usize,
    /// Turning points the tuner could not decide (the paths tied within noise between two
    /// sizes): the threshold above is where offloading clearly wins (or never), and online
    /// adaptation settles the rest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecided: Vec<Undecided>,
}

/// A turning point left undecided: offloading neither clearly wins nor clearly loses from
/// `from` to `to`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Undecided {
    /// `to_slow` or `from_slow`.
    pub direction: String,
    /// Both ends 64 B aligned.
    pub aligned: bool,
    /// The smallest size from which offloading never clearly loses.
    pub from: usize,
    /// The smallest size from which it clearly wins ([`NEVER`]: nowhere).
    pub to: usize,
}

fn default_shifted_min() -> usize {
    switchyard_media::persist::DEFAULT_SHIFTED_MIN
}

/// Measured bandwidths of one direction and size bin (they seed the mover's live estimates).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bin {
    /// `to_slow` or `from_slow`.
    pub direction: String,
    /// Request size measured (the bin's lower bound).
    pub size: usize,
    /// One thread, CPU path: requests of this size per second, as bytes.
    pub cpu_gib_s: f64,
    /// One thread, engine path: bandwidth while the engine executes a request of this size
    /// (from its start to its completion), what the mover's live estimates track. Format
    /// version 2 held an end-to-end rate here, start-up and completion included.
    pub engine_gib_s: f64,
}

/// The engine's start-up delay per direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Startup {
    /// `to_slow` or `from_slow`.
    pub direction: String,
    /// From submission to the engine starting, ns.
    pub ns: f64,
}

/// A saved profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Format version ([`PROFILE_VERSION`]).
    pub version: u32,
    /// Where it was measured.
    pub machine: Machine,
    /// With which engine.
    pub engine: EngineId,
    /// When.
    pub measured: Measured,
    /// What the scheduler uses.
    pub tuned: Tuned,
    /// Per-bin bandwidths.
    pub bins: Vec<Bin>,
    /// Start-up delays.
    pub startup: Vec<Startup>,
}

/// A profile that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read or written.
    #[error("profile {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a profile of this format.
    #[error("profile {path}: {message}")]
    Parse {
        /// The path.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The profile was measured elsewhere.
    #[error(
        "profile {path} was measured on {theirs}, but this is {ours}; \
         run `switchyard tune` here (or pass another profile)"
    )]
    Elsewhere {
        /// The path.
        path: String,
        /// What the profile names.
        theirs: String,
        /// What this machine is.
        ours: String,
    },
}

/// The direction a profile names `name` (its `Direction::name`).
pub(crate) fn direction(name: &str) -> Option<Direction> {
    Direction::ALL.into_iter().find(|d| d.name() == name)
}

impl Profile {
    /// Reads a profile; refuses other versions and malformed files by name.
    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Io {
            path: p.clone(),
            source,
        })?;
        let parse = |message: String| ProfileError::Parse {
            path: p.clone(),
            message,
        };
        // The version first, so a newer format is named as such rather than as bad TOML.
        let v: toml::Value = toml::from_str(&text).map_err(|e| parse(e.to_string()))?;
        match v.get("version").and_then(|v| v.as_integer()) {
            Some(n) if n == PROFILE_VERSION as i64 => {}
            Some(n) => {
                return Err(parse(format!(
                    "format version {n}; this build reads version {PROFILE_VERSION} \
                     (run `switchyard tune` to measure this machine again)"
                )))
            }
            None => return Err(parse("no `version`: not a switchyard profile".into())),
        }
        let prof: Profile = toml::from_str(&text).map_err(|e| parse(e.to_string()))?;
        for b in &prof.bins {
            if direction(&b.direction).is_none() {
                return Err(parse(format!("bins: unknown direction {:?}", b.direction)));
            }
        }
        if prof.tuned.concurrency_limit == 0 {
            return Err(parse("tuned.concurrency_limit must be at least 1".into()));
        }
        Ok(prof)
    }

    /// Writes the profile (atomically: a temporary file renamed over `path`), owner-only.
    pub fn save(&self, path: &Path) -> Result<(), ProfileError> {
        let io = |source| ProfileError::Io {
            path: path.display().to_string(),
            source,
        };
        let text = toml::to_string_pretty(self).expect("a profile serialises");
        switchyard_media::private::write_private(path, text.as_bytes()).map_err(io)
    }

    /// Refuses a profile measured on another machine or with another engine than `config`
    /// starts here.
    pub fn check(&self, path: &Path, config: &Config) -> Result<(), ProfileError> {
        let machine = Machine::this(&config.persist());
        let engine = EngineId::of(config);
        if self.machine != machine || self.engine != engine {
            return Err(ProfileError::Elsewhere {
                path: path.display().to_string(),
                theirs: format!("{} with engine {}", self.machine, self.engine),
                ours: format!("{machine} with engine {engine}"),
            });
        }
        Ok(())
    }

    /// Puts the tuned settings into `config`: thresholds, M, the smallest split, the
    /// CPU-writer cap, the non-temporal threshold and the shifted-copy threshold.
    pub fn apply(&self, config: &mut Config) {
        let t = &self.tuned;
        config.mover.thresholds = t.thresholds;
        config.mover.concurrency_limit = t.concurrency_limit;
        config.mover.split_min_bytes = t.split_min_bytes;
        config.mover.cpu_writers = t.cpu_writers;
        config.media.nt_threshold = t.nt_threshold;
        config.media.shifted_min = t.shifted_min;
    }

    /// Seeds live estimates with the measured bandwidths and start-up delays.
    pub fn seed(&self, bw: &Bandwidth) {
        seed(&self.bins, &self.startup, bw);
    }
}

/// Seeds live estimates with bandwidths and start-up delays as a profile holds them.
pub(crate) fn seed(bins: &[Bin], startup: &[Startup], bw: &Bandwidth) {
    for b in bins {
        if let Some(d) = direction(&b.direction) {
            let e = bw.of(d);
            let i = bandwidth::bin(b.size);
            // GiB/s → bytes/ns.
            e.cpu[i].set(b.cpu_gib_s * 1.073_741_824);
            e.engine[i].set(b.engine_gib_s * 1.073_741_824);
        }
    }
    for s in startup {
        if let Some(d) = direction(&s.direction) {
            bw.of(d).startup_ns.set(s.ns);
        }
    }
}
