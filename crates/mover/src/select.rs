//! Which engine a mover starts, and why: `[engine] kind` (or a command's `--engine`).
//!
//! | kind      | starts |
//! |-----------|--------|
//! | `threads` | the `threads` engine (worker threads as channels), exactly as configured |
//! | `dsa`     | the DSA engine on the enabled user work queues [`dsa::discover`] finds, or fails with what is missing and the `accel-config` commands that set a queue up |
//! | `auto`    | `dsa` where such a queue exists and opens, `threads` otherwise |
//!
//! The choice comes with a reason ([`Choice::reason`], kept by the mover:
//! [`crate::Mover::engine_reason`]) that `stat`, the banners, `tune` and every benchmark's
//! header print, e.g. `threads (auto): no DSA work queue for user space: …`.
//!
//! The default is `threads`, not `auto`: the DSA engine has run only on its device model (see
//! `docs/dsa.md`), and a mover must not put user data on an engine no one has run on hardware
//! without being asked to. `auto` is the intended default once the engine's suite has passed
//! on a DSA device.
//!
//! For DSA, `engine.channels` is how many of the discovered queues to use (0: all of them),
//! `engine.queue_depth`, `engine.descriptor_bytes` and `engine.spin_us` keep their meaning,
//! and `pin` and `linger_us` (the threads engine's workers) are not used.

use std::path::Path;
use std::sync::Arc;

use switchyard_engine::dsa::{self, DsaConfig, DsaEngine, Missing, WorkQueue};
use switchyard_engine::{Engine, ThreadsEngine};

use crate::config::{Config, ConfigError};

/// The engine kinds `[engine] kind` and `--engine` accept.
pub const KINDS: [&str; 3] = ["threads", "dsa", "auto"];

/// The engine `[engine] kind` resolves to on this machine, and why; not started yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// `threads` or `dsa`.
    pub kind: &'static str,
    /// Channels it starts.
    pub channels: usize,
    /// Why this engine, in words (starts with the engine's name).
    pub reason: String,
    /// The work queues a DSA choice uses.
    queues: Vec<WorkQueue>,
    /// Whether it was `auto`'s choice (a DSA engine that fails to open falls back to threads).
    auto: bool,
}

/// An engine started from a configuration, and why it is that engine.
#[derive(Clone)]
pub struct StartedEngine {
    /// The engine (several movers may share it).
    pub engine: Arc<dyn Engine>,
    /// Why this engine ([`Choice::reason`], or why `auto` fell back when DSA would not open).
    pub reason: String,
}

/// What `config` chooses on this machine (DSA work queues from the kernel's sysfs tree).
pub fn choose(config: &Config) -> Result<Choice, ConfigError> {
    let found = match config.engine.kind.as_str() {
        "dsa" | "auto" => dsa::discover(
            Path::new(dsa::sysfs::SYSFS_ROOT),
            Path::new(dsa::sysfs::DEV_ROOT),
        ),
        // `threads` (and a kind that does not exist) looks for no device.
        _ => Ok(Vec::new()),
    };
    choose_from(config, found)
}

/// What `config` chooses given what discovery `found`.
pub fn choose_from(
    config: &Config,
    found: Result<Vec<WorkQueue>, Missing>,
) -> Result<Choice, ConfigError> {
    let threads = |reason: String| Choice {
        kind: "threads",
        channels: config.engine.effective_channels(),
        reason,
        queues: Vec::new(),
        auto: false,
    };
    let kind = config.engine.kind.as_str();
    match kind {
        "threads" => return Ok(threads("threads: engine.kind = \"threads\"".into())),
        "dsa" | "auto" => {}
        _ => return Err(no_such_engine(kind)),
    }
    let auto = kind == "auto";
    let queues = match (found, auto) {
        (Ok(q), _) => q,
        (Err(m), true) => {
            let first = m.to_string().lines().next().unwrap_or_default().to_string();
            return Ok(threads(format!("threads (auto): {first}")));
        }
        (Err(m), false) => return Err(ConfigError::Invalid(format!("engine.kind = \"dsa\": {m}"))),
    };
    let wanted = match config.engine.channels {
        0 => queues.len(),
        n => n,
    };
    let needed = if config.qos.tenants.is_empty() {
        1
    } else {
        config.qos.latency_channels + config.qos.bulk_channels
    };
    if wanted > queues.len() || needed > wanted {
        let why = format!(
            "engine.channels = {} and {needed} channel(s) for qos need more work queues than \
             the {} found ({})",
            config.engine.channels,
            queues.len(),
            names(&queues)
        );
        if auto {
            return Ok(threads(format!("threads (auto): DSA: {why}")));
        }
        return Err(ConfigError::Invalid(format!(
            "engine.kind = \"dsa\": {why}"
        )));
    }
    let queues: Vec<WorkQueue> = queues.into_iter().take(wanted).collect();
    Ok(Choice {
        kind: "dsa",
        channels: wanted,
        reason: format!(
            "dsa{}: work queue(s) {}",
            if auto { " (auto)" } else { "" },
            names(&queues)
        ),
        queues,
        auto,
    })
}

/// The error for an engine kind this build does not have.
pub(crate) fn no_such_engine(kind: &str) -> ConfigError {
    ConfigError::Invalid(format!(
        "engine.kind = {kind:?}: no such engine (available: \"threads\", \"dsa\", \"auto\")"
    ))
}

fn names(queues: &[WorkQueue]) -> String {
    queues
        .iter()
        .map(|q| format!("{}/{}", q.device, q.name))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Choice {
    /// Starts the chosen engine with `config`'s settings. A DSA engine that `auto` chose and
    /// that does not open (a device lacking an operation, a queue the user may not open)
    /// gives way to the threads engine, with that reason; one that `dsa` asked for fails.
    pub fn start(self, config: &Config) -> Result<StartedEngine, ConfigError> {
        let e = &config.engine;
        let persist = config.persist();
        if self.kind == "dsa" {
            let dsa = DsaConfig {
                queue_depth: e.queue_depth,
                descriptor_bytes: e.descriptor_bytes,
                spin: std::time::Duration::from_micros(e.spin_us),
                persist,
            };
            match DsaEngine::open(&self.queues, dsa) {
                Ok(engine) => {
                    return Ok(StartedEngine {
                        engine: Arc::new(engine),
                        reason: self.reason,
                    })
                }
                Err(err) if !self.auto => {
                    return Err(ConfigError::Invalid(format!(
                        "engine.kind = \"dsa\": cannot open the work queues ({}): {err}",
                        names(&self.queues)
                    )))
                }
                Err(err) => {
                    let why = format!(
                        "threads (auto): DSA work queue(s) {} found but not opened: {err}",
                        names(&self.queues)
                    );
                    return threads(config, why);
                }
            }
        }
        threads(config, self.reason)
    }
}

/// The threads engine `config` describes, started, with `reason`.
fn threads(config: &Config, reason: String) -> Result<StartedEngine, ConfigError> {
    let engine =
        ThreadsEngine::start(config.engine.threads_config(config.persist())).map_err(|err| {
            ConfigError::Invalid(format!("engine: cannot start worker threads: {err}"))
        })?;
    Ok(StartedEngine {
        engine: Arc::new(engine),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_engine::dsa::Mode;

    fn config(kind: &str) -> Config {
        let mut c = Config::default();
        c.engine.kind = kind.into();
        c
    }

    fn queue(name: &str) -> WorkQueue {
        WorkQueue {
            name: name.into(),
            device: "dsa0".into(),
            mode: Mode::Dedicated,
            size: 16,
            priority: 10,
            max_transfer_size: 2 << 20,
            max_batch_size: 32,
            block_on_fault: false,
            op_cap: [0x3f, 1, 0, 0],
            dev_path: "/nonexistent/dsa/wq".into(),
        }
    }

    fn missing() -> Result<Vec<WorkQueue>, Missing> {
        Err(Missing {
            reason: "/sys/bus/dsa/devices cannot be read: is the idxd driver loaded?".into(),
        })
    }

    #[test]
    fn threads_is_the_default_and_looks_for_no_device() {
        let c = choose(&Config::default()).unwrap();
        assert_eq!(c.kind, "threads");
        assert!(c.reason.starts_with("threads: "), "{}", c.reason);
    }

    #[test]
    fn auto_without_a_queue_is_threads_and_says_why_in_one_line() {
        let c = choose_from(&config("auto"), missing()).unwrap();
        assert_eq!(c.kind, "threads");
        assert!(
            c.reason
                .starts_with("threads (auto): no DSA work queue for user space: /sys/bus/dsa"),
            "{}",
            c.reason
        );
        assert!(!c.reason.contains('\n'), "{}", c.reason);
    }

    #[test]
    fn dsa_without_a_queue_fails_saying_what_is_missing_and_how_to_set_one_up() {
        let e = choose_from(&config("dsa"), missing())
            .unwrap_err()
            .to_string();
        assert!(e.contains("engine.kind = \"dsa\""), "{e}");
        assert!(e.contains("idxd driver"), "{e}");
        assert!(e.contains("accel-config enable-wq dsa0/wq0.0"), "{e}");
    }

    #[test]
    fn a_queue_makes_auto_and_dsa_choose_dsa_with_its_queues() {
        for kind in ["auto", "dsa"] {
            let c = choose_from(&config(kind), Ok(vec![queue("wq0.0"), queue("wq0.1")])).unwrap();
            assert_eq!((c.kind, c.channels), ("dsa", 2), "{kind}");
            assert!(c.reason.contains("dsa0/wq0.0, dsa0/wq0.1"), "{}", c.reason);
        }
        let mut one = config("dsa");
        one.engine.channels = 1;
        assert_eq!(
            choose_from(&one, Ok(vec![queue("wq0.0"), queue("wq0.1")]))
                .unwrap()
                .channels,
            1
        );
    }

    #[test]
    fn too_few_queues_fail_dsa_and_send_auto_to_threads() {
        let mut c = config("dsa");
        c.engine.channels = 3;
        let e = choose_from(&c, Ok(vec![queue("wq0.0")])).unwrap_err();
        assert!(e.to_string().contains("more work queues"), "{e}");
        c.engine.kind = "auto".into();
        let ch = choose_from(&c, Ok(vec![queue("wq0.0")])).unwrap();
        assert_eq!(ch.kind, "threads");
        assert!(ch.reason.contains("more work queues"), "{}", ch.reason);
    }

    #[test]
    fn auto_falls_back_to_threads_when_the_queue_does_not_open() {
        let c = choose_from(&config("auto"), Ok(vec![queue("wq0.0")])).unwrap();
        assert_eq!(c.kind, "dsa");
        let started = c.start(&config("auto")).unwrap();
        assert_eq!(started.engine.info().name, "threads");
        assert!(
            started
                .reason
                .starts_with("threads (auto): DSA work queue(s) dsa0/wq0.0 found but not opened"),
            "{}",
            started.reason
        );
        let c = choose_from(&config("dsa"), Ok(vec![queue("wq0.0")])).unwrap();
        let e = c.start(&config("dsa")).err().unwrap().to_string();
        assert!(
            e.contains("cannot open the work queues (dsa0/wq0.0)"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_kind_is_no_such_engine() {
        let e = choose_from(&config("ioat"), missing())
            .unwrap_err()
            .to_string();
        assert!(e.contains("no such engine"), "{e}");
    }
}
