//! # switchyard-mover — the Fastmove scheduler
//!
//! One call moves data between DRAM and slow memory with the cheapest engine available:
//! [`Mover::copy`] (synchronous) or [`Mover::submit`] (asynchronous, a [`Transfer`] to poll or
//! wait). Per request, [`Mover::decide`] picks the calling CPU, the engine, or a split of the
//! two (Fastmove, ACM ToS, §5), from the request's size, direction, alignment and locality and
//! the engine's live load; [`Mover::stats`] returns the counters that explain its choices.
//!
//! Decisions run at the caller, with atomics only (no central thread). Durable requests end
//! flushed and fenced on whichever path ran. Partial engine completions are finished on the CPU
//! and counted.
//!
//! Its configuration is its own: [`Config`] holds the sections `[engine]`, `[media]`,
//! `[mover]` and `[qos]` of the configuration file, with their defaults and checks
//! ([`mod@config`]); the top level reads the file and hands them over.

#![warn(missing_docs)]

pub mod adapt;
pub mod bandwidth;
pub mod beside;
pub mod config;
pub mod counters;
mod decide;
pub mod hints;
pub mod lab;
mod ops;
pub mod plan;
pub mod profile;
pub mod qos;
pub mod select;
mod transfer;
pub mod tune;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use switchyard_engine::Engine;
use switchyard_media::Persist;

pub use bandwidth::Bandwidth;
pub use config::{Config, ConfigError, Policy};
pub use counters::Stats;
pub use decide::{Decision, Path, Reason};
pub use hints::{Direction, Hints};
pub use select::{Choice, StartedEngine};
pub use transfer::{Detached, Report, Transfer};

/// A request the mover cannot carry out.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// Source and destination lengths differ.
    #[error("copy: destination is {dst} bytes but source is {src} bytes")]
    LengthMismatch {
        /// Destination length.
        dst: usize,
        /// Source length.
        src: usize,
    },
}

/// Validates `config` and starts the engine it names (several movers may share it), with why
/// it is that engine ([`select`]: `[engine] kind` is `threads`, `dsa` or `auto`).
pub fn start_engine(config: &Config) -> Result<StartedEngine, ConfigError> {
    config.validate()?;
    select::choose(config)?.start(config)
}

/// The data mover: scheduler state, the engine, and counters. Share it (`&Mover` is `Sync`).
pub struct Mover {
    pub(crate) policy: Policy,
    /// How the live estimates are sampled and averaged (`[mover.estimates]`).
    pub(crate) estimates: config::EstimatesConfig,
    /// Thresholds and split estimates in effect, and their online adaptation.
    pub(crate) adapt: adapt::Adapt,
    pub(crate) engine_channels: usize,
    /// M; a profile swapped in replaces it (as the fields below marked "swapped").
    pub(crate) concurrency_limit: AtomicUsize,
    pub(crate) split: bool,
    /// Swapped.
    pub(crate) split_min_bytes: AtomicUsize,
    pub(crate) split_share: f64,
    pub(crate) align_writes: bool,
    pub(crate) wait_spin: u32,
    /// Swapped.
    pub(crate) cpu_writers: AtomicUsize,
    pub(crate) granule: usize,
    /// The persistence primitives; its two kernel thresholds are read from `nt_threshold`
    /// and `shifted_min` (swapped).
    pub(crate) persist: Persist,
    pub(crate) nt_threshold: AtomicUsize,
    pub(crate) shifted_min: AtomicUsize,
    /// The profile in effect, if any (the `profiles_swapped` counter counts swaps).
    pub(crate) profile: std::sync::Mutex<Option<Arc<profile::Profile>>>,
    pub(crate) engine: Arc<dyn Engine>,
    /// Why it is this engine ([`select::Choice::reason`]).
    engine_reason: String,
    /// C: engine requests in flight.
    pub(crate) inflight: CachePadded<AtomicUsize>,
    /// S: next channel.
    pub(crate) rr: CachePadded<AtomicUsize>,
    pub(crate) writers: CachePadded<AtomicUsize>,
    /// Whether the engine's channels are threads on the application's cores.
    pub(crate) cores_shared: bool,
    /// Cores left for callers when every engine channel has one (at least 1).
    pub(crate) spare_cores: usize,
    /// Synchronous bulk (at or above the smallest threshold) copies in progress, the deciding
    /// caller included.
    pub(crate) active_bulk: CachePadded<AtomicUsize>,
    /// When the next asynchronous copy the estimates keep off a slower engine goes to it
    /// anyway, to measure it again (ns, [`switchyard_engine::clock`]).
    pub(crate) next_engine_probe_ns: CachePadded<AtomicU64>,
    /// Live estimates from copies that ran alone (CPU copies outside splits, engine-only
    /// requests), as `tune` measured the profile: the thresholds adapt on these.
    pub(crate) bandwidth: Bandwidth,
    /// Live estimates from the two sides of splits, which run at once and so slower than alone
    /// where they share the memory system or a core: a split's ratio adapts on these.
    pub(crate) split_bandwidth: Bandwidth,
    pub(crate) counters: counters::Counters,
    /// The channel manager, when tenants are configured.
    pub(crate) qos: Option<qos::Qos>,
    /// The rules that class callers by uid and path.
    classes: qos::Classes,
}

impl Mover {
    /// Validates `config`, starts its engine and returns the mover.
    pub fn start(config: &Config) -> Result<Mover, ConfigError> {
        let started = start_engine(config)?;
        Ok(Mover::with_started(config, &started, config.persist()))
    }

    /// A mover over an engine [`start_engine`] started (shared with other movers), keeping
    /// why it is that engine.
    pub fn with_started(config: &Config, started: &StartedEngine, persist: Persist) -> Mover {
        let mut m = Mover::with_engine(config, started.engine.clone(), persist);
        m.engine_reason.clone_from(&started.reason);
        m
    }

    /// A mover over an engine the caller built (tests use fault-injecting engines); its
    /// reason ([`Mover::engine_reason`]) says the caller chose it.
    pub fn with_engine(config: &Config, engine: Arc<dyn Engine>, persist: Persist) -> Mover {
        let m = &config.mover;
        let info = engine.info();
        let engine_reason = format!("{}: given by the program", info.name);
        let bandwidth = Bandwidth::default();
        if let Some(p) = &config.applied_profile {
            p.seed(&bandwidth);
        }
        let split_bandwidth = Bandwidth::default();
        split_bandwidth.copy_from(&bandwidth);
        let depths = config
            .applied_profile
            .as_ref()
            .map_or([1; 3], |p| adapt::undecided_depths(&p.tuned.undecided));
        let adapt = adapt::Adapt::new(
            &m.thresholds,
            depths,
            &bandwidth,
            adapt::Settings {
                epochs: m.policy == Policy::Auto,
                thresholds: m.adapt && m.policy == Policy::Auto && config.applied_profile.is_some(),
                split: m.adapt && m.split && m.split_share == 0.0,
                pace: m.adaptation,
            },
        );
        let mover = Mover {
            policy: m.policy,
            estimates: m.estimates,
            adapt,
            engine_channels: info.channels,
            concurrency_limit: AtomicUsize::new(if m.concurrency_limit == 0 {
                info.channels
            } else {
                m.concurrency_limit
            }),
            split: m.split,
            split_min_bytes: AtomicUsize::new(m.split_min_bytes),
            split_share: m.split_share,
            align_writes: m.align_writes,
            wait_spin: m.wait_spin,
            cpu_writers: AtomicUsize::new(m.cpu_writers),
            granule: info.descriptor_bytes,
            persist,
            nt_threshold: AtomicUsize::new(persist.nt_threshold),
            shifted_min: AtomicUsize::new(persist.shifted_min),
            profile: std::sync::Mutex::new(config.applied_profile.clone()),
            engine,
            engine_reason,
            inflight: CachePadded::new(AtomicUsize::new(0)),
            rr: CachePadded::new(AtomicUsize::new(0)),
            writers: CachePadded::new(AtomicUsize::new(0)),
            cores_shared: info.uses_cpu_cores,
            spare_cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .saturating_sub(info.channels)
                .max(1),
            active_bulk: CachePadded::new(AtomicUsize::new(0)),
            next_engine_probe_ns: CachePadded::new(AtomicU64::new(0)),
            bandwidth,
            split_bandwidth,
            counters: Default::default(),
            qos: qos::Qos::new(&config.qos),
            classes: qos::Classes::new(&config.qos),
        };
        if let Some(q) = &mover.qos {
            q.start(&*mover.engine);
        }
        mover
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// Each tenant's counters (empty without tenants in `[qos]`).
    pub fn tenants(&self) -> Vec<qos::TenantStats> {
        self.qos
            .as_ref()
            .map_or_else(Vec::new, |q| q.stats(&*self.engine))
    }

    /// The rules that class a front end's callers by uid and path (`uids` and `paths` in
    /// `[[qos.tenants]]`; empty without them).
    pub fn classes(&self) -> &qos::Classes {
        &self.classes
    }

    /// Reports one request's latency, `ns`, for a latency tenant whose configuration says it
    /// reports its own (`reported = true` in `[[qos.tenants]]`): the time its client waited,
    /// from the request's arrival to its answer, which the copies it made are only part of.
    /// Ignored for any other tenant.
    pub fn report_latency(&self, tenant: u16, ns: u64) {
        if let Some(q) = &self.qos {
            if let qos::Class::Latency(t) = q.class(tenant) {
                if q.reported(t) {
                    q.sample(t, ns, &*self.engine);
                }
            }
        }
    }

    /// The live bandwidth estimates.
    pub fn bandwidth(&self) -> &Bandwidth {
        &self.bandwidth
    }

    /// When an engine copy of `len` bytes in `direction` submitted now should be done, in
    /// [`switchyard_engine::clock`] nanoseconds, from the live estimates: start-up plus
    /// transfer. What an executor sleeps until before it checks the copy.
    pub fn expected_finish(&self, direction: Direction, len: usize) -> u64 {
        let e = self.bandwidth.of(direction);
        switchyard_engine::clock::now_ns()
            + (e.startup_ns.get() + len as f64 / e.engine[bandwidth::bin(len)].get()) as u64
    }

    /// The engine thresholds in effect: the configured (or tuned) ones, as online adaptation
    /// has moved them (see `threshold_raised` and `threshold_lowered` in [`Mover::stats`]).
    pub fn thresholds(&self) -> config::Thresholds {
        self.adapt.in_effect()
    }

    /// The engine.
    pub fn engine(&self) -> &dyn Engine {
        &*self.engine
    }

    /// Why the mover runs on this engine, in one line that starts with the engine's name
    /// (e.g. `threads (auto): no DSA work queue for user space: …`; see [`select`]).
    pub fn engine_reason(&self) -> &str {
        &self.engine_reason
    }

    /// The persistence primitives in use (with the kernel thresholds of the profile in
    /// effect).
    #[inline]
    pub fn persist(&self) -> Persist {
        Persist {
            nt_threshold: self.nt_threshold.load(Ordering::Relaxed),
            shifted_min: self.shifted_min.load(Ordering::Relaxed),
            ..self.persist
        }
    }

    /// The profile in effect (`None`: the configuration's or built-in thresholds); the
    /// `profiles_swapped` counter says how many [`Mover::swap_profile`] put in effect.
    pub fn profile(&self) -> Option<Arc<profile::Profile>> {
        self.profile
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Seeds every bandwidth estimate and start-up delay with `bw`'s, as a profile's seed
    /// them (the tuner's offload path, once it has measured them); the split estimates'
    /// adaptation starts over from them.
    pub(crate) fn seed_estimates(&self, bw: &Bandwidth) {
        self.bandwidth.copy_from(bw);
        self.split_bandwidth.copy_from(bw);
        self.adapt.seed_split(bw);
    }

    /// Puts `profile` in effect in this running mover, as if it had started with it (a
    /// profile measured on this machine with this engine: the caller checks, as
    /// [`Config::with_profile`] does): its thresholds become the base that adaptation moves
    /// from (adaptation starts over, and moves thresholds from now on, when the configuration
    /// lets it), its bandwidths and start-up delays seed the estimates, and M, the split
    /// minimum, the CPU writers' cap and the copy kernels' thresholds take its values.
    ///
    /// Copies in flight finish as they were decided; every later decision sees the new
    /// settings. Each setting changes atomically, so a decision racing the swap may combine
    /// old and new values for that one request: that changes the path it takes, never the
    /// bytes it copies, and every request still completes once.
    pub fn swap_profile(&self, profile: Arc<profile::Profile>, config: &Config) {
        let mut c = config.clone();
        profile.apply(&mut c);
        let m = &c.mover;
        let bandwidth = Bandwidth::default();
        profile.seed(&bandwidth);
        self.bandwidth.copy_from(&bandwidth);
        self.split_bandwidth.copy_from(&bandwidth);
        self.adapt.retune(
            &m.thresholds,
            adapt::undecided_depths(&profile.tuned.undecided),
            &bandwidth,
            m.adapt && m.policy == Policy::Auto,
        );
        self.concurrency_limit.store(
            if m.concurrency_limit == 0 {
                self.engine_channels
            } else {
                m.concurrency_limit
            },
            Ordering::Relaxed,
        );
        self.split_min_bytes
            .store(m.split_min_bytes, Ordering::Relaxed);
        self.cpu_writers.store(m.cpu_writers, Ordering::Relaxed);
        self.nt_threshold
            .store(c.media.nt_threshold, Ordering::Relaxed);
        self.shifted_min
            .store(c.media.shifted_min, Ordering::Relaxed);
        *self.profile.lock().unwrap_or_else(|e| e.into_inner()) = Some(profile);
        self.counters.add(counters::Counter::profiles_swapped, 1);
    }

    /// The path policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }
}
