//! `[store]`: the store's own section of the configuration file. The top level
//! (`switchyard_config`) reads the file and checks this section with
//! [`StoreConfig::validate`]; whoever mounts the store applies it
//! ([`Store::set_reserved_percent`](crate::Store::set_reserved_percent),
//! [`Store::set_sync_policy`](crate::Store::set_sync_policy) with [`StoreConfig::sync_every`]).
//!
//! ```toml
//! [store]
//! reserved_percent = 5       # share only root and the owner may fill (ext4's reserve)
//! sync = "interval"          # interval | always: when a store file on a disk reaches it
//! sync_interval_ms = 5000    # the periodic sync of `interval` (ext4 commits every 5 s)
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `[store]`: the reserve and when a store file on a disk is synced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Share of the data space, in percent, only root and the store's owner may fill (as
    /// ext4's reserved blocks), 0..=50.
    pub reserved_percent: u32,
    /// When a store file on a disk file system (page-cache media) writes what returned to
    /// its disk; persistent memory needs no sync and a memory file system has no disk, so
    /// there it changes nothing. `switchyard mount --sync` and `up --sync` override it.
    pub sync: SyncMode,
    /// The periodic sync of `sync = "interval"`, ms (at least 1): after a power cut the store
    /// holds every operation up to its last sync.
    pub sync_interval_ms: u64,
}

impl Default for StoreConfig {
    /// The values in the module's example.
    fn default() -> Self {
        StoreConfig {
            reserved_percent: 5,
            sync: SyncMode::Interval,
            sync_interval_ms: 5000,
        }
    }
}

impl StoreConfig {
    /// The interval between periodic syncs, or `None` when every operation is synced before
    /// it returns (`sync = "always"`): what a [`SyncPolicy`](crate::SyncPolicy) is made from.
    pub fn sync_every(&self) -> Option<std::time::Duration> {
        match self.sync {
            SyncMode::Interval => Some(std::time::Duration::from_millis(self.sync_interval_ms)),
            SyncMode::Always => None,
        }
    }

    /// `Ok` if every value is in its range; else what is wrong, naming the key
    /// (`store.reserved_percent = 80: ...`).
    pub fn validate(&self) -> Result<(), String> {
        if self.reserved_percent > 50 {
            return Err(format!(
                "store.reserved_percent = {}: must be 0..=50",
                self.reserved_percent
            ));
        }
        if self.sync_interval_ms == 0 {
            return Err("store.sync_interval_ms = 0: must be at least 1".into());
        }
        Ok(())
    }
}

/// `store.sync`: when a store file on a disk reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// An operation survives a power cut once fsync (fdatasync, syncfs, an O_SYNC write) or
    /// the periodic sync every `sync_interval_ms` returns, as on ext4.
    #[default]
    Interval,
    /// Every operation is synced before it returns (persistent-memory semantics on a disk
    /// file; a disk flush per operation, so slow).
    Always,
}

#[cfg(test)]
mod tests {
    use super::{StoreConfig, SyncMode};

    #[test]
    fn the_documented_example_is_the_default() {
        let text = example(include_str!("config.rs"));
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        let section: StoreConfig = parsed["store"].clone().try_into().unwrap();
        assert_eq!(section, StoreConfig::default());
        assert_eq!(section.validate(), Ok(()));
    }

    #[test]
    fn values_out_of_range_are_refused_naming_the_key() {
        for (text, key) in [
            ("reserved_percent = 80\n", "store.reserved_percent"),
            ("sync_interval_ms = 0\n", "store.sync_interval_ms"),
        ] {
            let c: StoreConfig = toml::from_str(text).unwrap();
            assert!(c.validate().unwrap_err().contains(key), "{text}");
        }
        let e = toml::from_str::<StoreConfig>("sync = \"never\"\n").unwrap_err();
        assert!(e.to_string().contains("never"), "{e}");
    }

    #[test]
    fn the_sync_mode_gives_the_interval() {
        let mut c = StoreConfig {
            sync_interval_ms: 250,
            ..StoreConfig::default()
        };
        assert_eq!(c.sync_every(), Some(std::time::Duration::from_millis(250)));
        c.sync = SyncMode::Always;
        assert_eq!(c.sync_every(), None);
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
