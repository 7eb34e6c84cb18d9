//! `[runtime]`: the executor's own section of the configuration file. The top level
//! (`switchyard_config`) reads the file and hands this section to [`Executor::with_config`].
//!
//! ```toml
//! [runtime]                  # the executor, with copies outstanding:
//! spin_us = 100              # spins this long past a copy's expected completion,
//! wake_early_us = 20         # wakes this long before it from a timed sleep,
//! max_park_us = 1000         # and parks at most this long
//! ```
//!
//! [`Executor::with_config`]: crate::Executor::with_config

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `[runtime]`: when an idle [`Executor`](crate::Executor) with copies outstanding wakes,
/// spins and parks. Every value is valid (a zero only makes the executor spin or park less).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// How long past a copy's expected completion the executor spins before it parks, µs.
    pub spin_us: u64,
    /// How long before a copy's expected completion a sleeping executor wakes to spin (a
    /// thread woken from a timed sleep runs a few microseconds late), µs.
    pub wake_early_us: u64,
    /// Longest park while copies are outstanding (a safety net for an expectation that was
    /// too optimistic), µs.
    pub max_park_us: u64,
}

impl Default for RuntimeConfig {
    /// The values in the module's example.
    fn default() -> Self {
        RuntimeConfig {
            spin_us: 100,
            wake_early_us: 20,
            max_park_us: 1000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RuntimeConfig;

    #[test]
    fn the_documented_example_is_the_default() {
        let text = example(include_str!("config.rs"));
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        let section: RuntimeConfig = parsed["runtime"].clone().try_into().unwrap();
        assert_eq!(section, RuntimeConfig::default());
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let e = toml::from_str::<RuntimeConfig>("spin = 3\n").unwrap_err();
        assert!(e.to_string().contains("spin"), "{e}");
    }

    /// The TOML between the module documentation's fences.
    fn example(source: &str) -> String {
        source
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| l.trim_start_matches("//!").trim_start().to_string() + "\n")
            .collect()
    }
}
