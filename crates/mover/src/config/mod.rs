//! The mover's sections of the configuration file — the copy engine, the persistence
//! primitives, the scheduler and the tenants — with their defaults and their checks. The other
//! layers own theirs (`[runtime]` in `switchyard_rt`, `[store]` in `switchyard_store`, `[fuse]`
//! in `switchyard_fuse`); the top level (`switchyard_config`) reads the file, hands each layer
//! its sections, and prints the whole with each key's documentation (these fields') and where
//! its value came from (`switchyard config`).
//!
//! ```toml
//! [engine]
//! kind = "threads"           # threads | dsa (Intel DSA work queues) | auto (dsa where a
//!                            # usable work queue exists, else threads); see `select`
//! channels = 0               # worker threads; 0 = one per core beyond the first (at least 1);
//!                            # dsa: work queues to use, 0 = every one found
//! queue_depth = 64           # batches per channel queue
//! spin_us = 50               # idle worker busy-spins this long,
//! linger_us = 1000           # then polls between yields this long, then parks
//! pin = true                 # pin workers to the last cores
//! descriptor_bytes = 65536   # descriptor granule (DRAM-side boundaries, Fastmove §5.1)
//!
//! [media]
//! flush = "auto"             # auto | clwb | clflushopt | clflush | none (eADR)
//! nt_threshold = 1024        # durable copies below this use temporal stores + flush
//! shifted_min = 1024         # temporal copies this long whose source and destination differ
//!                            # in address mod 32 use the SIMD loop, not memcpy; 0 = never
//!
//! [mover]
//! policy = "auto"            # auto (schedule) | cpu (CPU only) | engine (engine only)
//! concurrency_limit = 0      # M: engine requests in flight; 0 = number of channels
//! split = true               # split bulk copies to/from slow memory between engine and CPU (§5.3)
//! split_min_bytes = 262144   # smallest request that is split
//! split_share = 0.0          # engine's share of a split; 0 = from live bandwidth estimates
//! cpu_writers = 0            # cap on concurrent CPU writers into slow memory; 0 = none
//! align_writes = true        # §5.2: writes with unequal 64 B offsets stay on the CPU
//! wait_spin = 2000           # polls of a completion before parking
//! adapt = true               # online adaptation of thresholds (with a profile) and split
//! profile = ""               # engine profile from `switchyard tune`; "" = none
//!
//! [mover.thresholds]         # bytes at or above which a request uses the engine
//! to_slow   = { local_aligned = 8388608, local_unaligned = 8388608, remote_aligned = 131072, remote_unaligned = 131072 }
//! from_slow = { local_aligned = 262144, local_unaligned = 262144, remote_aligned = 131072, remote_unaligned = 131072 }
//! dram      = { local_aligned = 262144, local_unaligned = 262144, remote_aligned = 131072, remote_unaligned = 131072 }
//!
//! [mover.adaptation]         # online adaptation's pace and evidence (see `adapt`)
//! epoch_ms = 20              # time between epochs of sampled traffic
//! margin = 0.05              # a path must win a trial by this much to move a threshold
//! hold = 3                   # trials in a row per step
//! max_shift = 3              # bins from the tuned value on `hold` trials (then twice as many)
//! step = 0.25                # largest step of a split estimate
//! deadband = 0.05            # split estimates this close to the live ones stay
//! explore = 32               # one in this many requests near a threshold takes the other path
//! explore_share = 0.25       # engine share of a split the estimates ruled out
//! evidence = 8               # samples per path before a band's trial counts
//! sample_band_every = 16     # one in this many usual-path requests in a band is timed
//! ticks = 8                  # sampled copies between looks at the clock
//! starved = 5                # epochs without timed requests before a direction is watched
//! watch_every = 16           # one in this many requests below watched bands reports its size
//!
//! [mover.estimates]          # the live bandwidth estimates
//! weight = 0.125             # weight of a new sample in the moving average
//! outlier_factor = 4.0       # a sample counts as at most this factor off the estimate
//! sample_every = 64          # one in this many CPU copies of 16 KiB.. is timed, per thread
//! bulk_sample_every = 4      # one in this many bulk CPU copies is timed
//! bulk_bytes = 262144        # from this size a CPU copy is bulk
//!
//! [qos]                      # tenants and the channel manager (see `qos`); none by default
//! bulk_channels = 1          # channels the bulk tenants share
//! latency_channels = 1       # channels for latency tenants and unclassed requests (1-4)
//! epoch_us = 100             # bulk budget epoch
//! control_us = 1000          # controller period
//! idle_us = 500              # a latency tenant idle this long lets the bulk budget lapse
//! min_samples = 100          # new latencies per tenant before a decision (fewer prove a miss)
//! decrease = 0.25            # share of the budget a missed objective takes away
//! step_mib_s = 256.0         # budget added when every objective has slack
//! slack = 0.2                # share of its bound a tenant must have to spare to raise it
//! floor_mib_s = 64.0         # lowest bulk budget
//! ceiling_mib_s = 65536.0    # at the ceiling the budget is lifted
//! fixed_mib_s = 0.0          # a fixed bulk budget the controller leaves alone; 0 = steered
//! tenants = []               # e.g. [{ name = "web", kind = "latency", bound_us = 20.0,
//!                            #         uids = [33] },
//!                            #       { name = "gc", kind = "bulk", paths = ["/archive"] }]
//! ```
//!
//! The threshold defaults were measured on a 2-core machine with the threads engine and a
//! DRAM-backed region (`switchyard bench copy`). `switchyard tune` measures them on this
//! machine and writes a profile (see [`crate::profile`]); naming it in `mover.profile` (or
//! passing it with [`Config::with_profile`]) replaces the thresholds, M, the CPU-writer cap and
//! the non-temporal threshold with the measured ones, and seeds the live bandwidth estimates.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::Path;
use switchyard_engine::ThreadsConfig;
use switchyard_media::{FlushKind, Persist};

use crate::profile::{Profile, ProfileError};

mod qos;
mod validate;

pub use qos::{QosConfig, TenantConfig, TenantKind};

/// The mover's configuration: `[engine]`, `[media]`, `[mover]` and `[qos]`, and the engine
/// profile applied over them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The copy engine.
    pub engine: EngineConfig,
    /// Persistence primitives.
    pub media: MediaConfig,
    /// The scheduler.
    pub mover: MoverConfig,
    /// Tenants and the channel manager.
    pub qos: QosConfig,
    /// The profile applied by [`Config::with_profile`] (its bandwidths seed the mover).
    #[serde(skip)]
    pub applied_profile: Option<std::sync::Arc<Profile>>,
}

/// `[engine]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Engine kind: `threads`, `dsa` (Intel DSA work queues; fails where there is none) or
    /// `auto` (`dsa` where a usable work queue exists, else `threads`); see
    /// [`crate::select`].
    pub kind: String,
    /// Channels; 0 = one per core beyond the first, at least 1. For `dsa`, the work queues
    /// to use; 0 = every one found.
    pub channels: usize,
    /// Batches per channel queue.
    pub queue_depth: usize,
    /// Idle busy-spin, µs.
    pub spin_us: u64,
    /// Idle polling between yields of the core after the spin, before parking, µs.
    pub linger_us: u64,
    /// Pin workers to cores.
    pub pin: bool,
    /// Descriptor granule, bytes.
    pub descriptor_bytes: usize,
}

impl Default for EngineConfig {
    /// The `threads` engine's own defaults ([`ThreadsConfig::default`]), bar the channel
    /// count, which follows the cores.
    fn default() -> Self {
        let t = ThreadsConfig::default();
        EngineConfig {
            kind: "threads".into(),
            channels: 0,
            queue_depth: t.queue_depth,
            spin_us: t.spin.as_micros() as u64,
            linger_us: t.linger.as_micros() as u64,
            pin: t.pin,
            descriptor_bytes: t.descriptor_bytes,
        }
    }
}

/// `[mover.adaptation]`: the pace and the evidence of online adaptation (see
/// `switchyard_mover::adapt` for what each step does).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AdaptationConfig {
    /// Time between epochs (of sampled traffic), ms.
    pub epoch_ms: u64,
    /// Relative advantage one path must show in a trial before a threshold moves.
    pub margin: f64,
    /// Trials in a row (epochs, for split estimates) that must wish for the same step before
    /// it is taken.
    pub hold: u32,
    /// Farthest a threshold moves from the tuned value on `hold` trials per step, in size
    /// bins (factors of 2); past it a step needs twice as many.
    pub max_shift: u32,
    /// Largest step of a split estimate, relative to its value.
    pub step: f64,
    /// Split estimates within this relative distance of the live ones are left alone.
    pub deadband: f64,
    /// One in this many synchronous requests in a band around a threshold takes the other
    /// path, and one in this many splits the estimates rule out is split anyway.
    pub explore: u32,
    /// The engine's share of a split made although the estimates gave the engine none.
    pub explore_share: f64,
    /// Samples each path of a band needs before the band's trial counts.
    pub evidence: u64,
    /// One in this many requests in a band on its usual path is timed (every explored one
    /// is).
    pub sample_band_every: u32,
    /// Sampled copies per thread between two looks at the clock.
    pub ticks: u32,
    /// Epochs in a row in which a direction's bands saw no timed request before the mover
    /// looks at the sizes that pass below them.
    pub starved: u32,
    /// One in this many requests below a watched direction's bands reports its size.
    pub watch_every: u32,
}

impl Default for AdaptationConfig {
    fn default() -> Self {
        AdaptationConfig {
            epoch_ms: 20,
            margin: 0.05,
            hold: 3,
            max_shift: 3,
            step: 0.25,
            deadband: 0.05,
            explore: 32,
            explore_share: 0.25,
            evidence: 8,
            sample_band_every: 16,
            ticks: 8,
            starved: 5,
            watch_every: 16,
        }
    }
}

/// `[mover.estimates]`: how the live bandwidth estimates (`switchyard_mover::bandwidth`) are
/// sampled and averaged. The size bins themselves (16 KiB to 2 MiB) are fixed: a profile
/// stores one value per bin.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EstimatesConfig {
    /// Weight of a new sample in an estimate's moving average.
    pub weight: f64,
    /// A sample counts as at most this factor above or below the estimate (a preempted worker
    /// or a page fault moves it a bounded step).
    pub outlier_factor: f64,
    /// One in this many CPU copies from 16 KiB up to `bulk_bytes` is timed, per thread (two
    /// clock reads and a store to a shared line must not tax every request).
    pub sample_every: u32,
    /// One in this many CPU copies of `bulk_bytes` or more is timed, per thread.
    pub bulk_sample_every: u32,
    /// Size from which a CPU copy counts as bulk for sampling, bytes.
    pub bulk_bytes: usize,
}

impl Default for EstimatesConfig {
    fn default() -> Self {
        EstimatesConfig {
            weight: 0.125,
            outlier_factor: 4.0,
            sample_every: 64,
            bulk_sample_every: 4,
            bulk_bytes: 256 << 10,
        }
    }
}

impl EngineConfig {
    /// The `threads` engine's settings this section gives, with `persist`'s kernels.
    pub fn threads_config(&self, persist: Persist) -> ThreadsConfig {
        ThreadsConfig {
            channels: self.effective_channels(),
            queue_depth: self.queue_depth,
            spin: std::time::Duration::from_micros(self.spin_us),
            linger: std::time::Duration::from_micros(self.linger_us),
            pin: self.pin,
            descriptor_bytes: self.descriptor_bytes,
            persist,
            ..ThreadsConfig::default()
        }
    }

    /// Channels to start: the configured number, or one per core beyond the first.
    pub fn effective_channels(&self) -> usize {
        if self.channels > 0 {
            return self.channels;
        }
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        cores.saturating_sub(1).max(1)
    }
}

/// `[media]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MediaConfig {
    /// Flush instruction: `auto` or a [`FlushKind`] name.
    pub flush: String,
    /// Durable-copy non-temporal threshold, bytes.
    pub nt_threshold: usize,
    /// Shortest temporal copy between shifted buffers that takes the SIMD loop, bytes; 0 =
    /// never (see `switchyard_media::kernels`).
    pub shifted_min: usize,
}

impl Default for MediaConfig {
    fn default() -> Self {
        MediaConfig {
            flush: "auto".into(),
            nt_threshold: switchyard_media::persist::DEFAULT_NT_THRESHOLD,
            shifted_min: switchyard_media::persist::DEFAULT_SHIFTED_MIN,
        }
    }
}

/// Which paths the mover may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Schedule each request (Fastmove).
    #[default]
    Auto,
    /// Always the calling CPU.
    Cpu,
    /// Always the engine (waiting for queue space rather than falling back).
    Engine,
}

/// Thresholds for one direction, by locality and alignment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Locality {
    /// Local memory, source and destination 64 B aligned.
    pub local_aligned: usize,
    /// Local memory, unaligned.
    pub local_unaligned: usize,
    /// Remote (other socket) memory, aligned.
    pub remote_aligned: usize,
    /// Remote memory, unaligned.
    pub remote_unaligned: usize,
}

impl Locality {
    /// `local` for local memory and `remote` for remote memory, aligned or not.
    pub const fn uniform(local: usize, remote: usize) -> Locality {
        Locality {
            local_aligned: local,
            local_unaligned: local,
            remote_aligned: remote,
            remote_unaligned: remote,
        }
    }
}

/// `[mover.thresholds]`: engine thresholds per direction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    /// DRAM → slow memory (writes).
    pub to_slow: Locality,
    /// Slow memory → DRAM (reads).
    pub from_slow: Locality,
    /// DRAM → DRAM.
    pub dram: Locality,
}

impl Thresholds {
    /// The same threshold `v` everywhere.
    pub const fn all(v: usize) -> Thresholds {
        let l = Locality::uniform(v, v);
        Thresholds {
            to_slow: l,
            from_slow: l,
            dram: l,
        }
    }
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            // Measured: the threads engine never beat the CPU on synchronous durable writes up
            // to 4 MiB on a 2-core machine, so writes stay on the CPU up to 8 MiB.
            to_slow: Locality::uniform(8 << 20, 128 << 10),
            from_slow: Locality::uniform(256 << 10, 128 << 10),
            dram: Locality::uniform(256 << 10, 128 << 10),
        }
    }
}

/// `[mover]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MoverConfig {
    /// Path policy.
    pub policy: Policy,
    /// M; 0 = number of channels.
    pub concurrency_limit: usize,
    /// Split bulk synchronous copies (to, from and within DRAM) between engine and CPU.
    pub split: bool,
    /// Smallest split request, bytes.
    pub split_min_bytes: usize,
    /// The engine's fixed share of a split request, in (0, 1); 0 = from the live bandwidth
    /// estimates (§5.3). A fixed share is for experiments (the grid of `bench mix`).
    pub split_share: f64,
    /// Cap on concurrent CPU writers into slow memory; 0 = no cap.
    pub cpu_writers: usize,
    /// Keep writes with unequal 64 B offsets on the CPU.
    pub align_writes: bool,
    /// Completion polls before parking.
    pub wait_spin: u32,
    /// Online adaptation ([`crate::adapt`]): nudge the thresholds (when a profile is applied)
    /// and the split's estimates when live measurements disagree; `false` holds them fixed.
    pub adapt: bool,
    /// How online adaptation paces itself and how much evidence it wants.
    pub adaptation: AdaptationConfig,
    /// How the live bandwidth estimates are sampled and averaged.
    pub estimates: EstimatesConfig,
    /// Engine thresholds.
    pub thresholds: Thresholds,
    /// Engine profile to load at start (`switchyard tune`); empty for none.
    pub profile: String,
}

impl Default for MoverConfig {
    fn default() -> Self {
        MoverConfig {
            policy: Policy::Auto,
            concurrency_limit: 0,
            split: true,
            split_min_bytes: 256 << 10,
            split_share: 0.0,
            cpu_writers: 0,
            align_writes: true,
            wait_spin: 2000,
            adapt: true,
            adaptation: AdaptationConfig::default(),
            estimates: EstimatesConfig::default(),
            thresholds: Thresholds::default(),
            profile: String::new(),
        }
    }
}

/// A mover configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A value is out of range.
    #[error("config: {0}")]
    Invalid(String),
    /// The profile named cannot be used here.
    #[error(transparent)]
    Profile(#[from] ProfileError),
}

impl Config {
    /// Loads the profile at `path`, refuses it if it was measured on another machine or
    /// engine, and applies it (see [`Profile::apply`]).
    pub fn with_profile(mut self, path: &Path) -> Result<Config, ConfigError> {
        let prof = Profile::load(path)?;
        prof.check(path, &self)?;
        prof.apply(&mut self);
        self.mover.profile = path.display().to_string();
        self.applied_profile = Some(std::sync::Arc::new(prof));
        self.validate()?;
        Ok(self)
    }

    /// The persistence primitives this configuration selects.
    pub fn persist(&self) -> Persist {
        let mut p = Persist::detect();
        if let Some(k) = FlushKind::from_name(&self.media.flush) {
            p.flush = k;
        }
        p.nt_threshold = self.media.nt_threshold;
        p.shifted_min = self.media.shifted_min;
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_is_the_default() {
        let doc = include_str!("mod.rs");
        let toml_text: String = doc
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| l.trim_start_matches("//!").trim_start().to_string() + "\n")
            .collect();
        let parsed: Config = toml::from_str(&toml_text).unwrap();
        assert_eq!(parsed, Config::default());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_clear_errors() {
        let e = toml::from_str::<Config>("[mover]\nthreshold = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("threshold"), "{e}");
        let c: Config = toml::from_str("[media]\nflush = \"wbinvd\"\n").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("wbinvd"));
        for kind in ["threads", "dsa", "auto"] {
            let c: Config = toml::from_str(&format!("[engine]\nkind = {kind:?}\n")).unwrap();
            assert!(c.validate().is_ok(), "{kind}");
        }
        let c: Config = toml::from_str("[engine]\nkind = \"ioat\"\n").unwrap();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("no such engine"));
    }

    #[test]
    fn every_mover_section_refuses_values_out_of_range_naming_the_key() {
        for (text, key) in [
            ("[mover.adaptation]\nhold = 0\n", "mover.adaptation"),
            ("[mover.adaptation]\nmargin = 1.5\n", "mover.adaptation"),
            ("[mover.estimates]\nweight = 2.0\n", "mover.estimates"),
            ("[mover.estimates]\nsample_every = 0\n", "mover.estimates"),
        ] {
            let c: Config = toml::from_str(text).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
        let e = toml::from_str::<Config>("[engine]\nspin = 3\n").unwrap_err();
        assert!(e.to_string().contains("spin"), "{e}");
    }
}
