//! `[fuse]`: the mount's own section of the configuration file. The top level
//! (`switchyard_config`) reads the file, checks this section with [`FuseConfig::validate`]
//! and hands it to [`mount`](crate::mount).
//!
//! ```toml
//! [fuse]
//! workers = 0                # request threads; 0 = one per core, at least 2
//! attr_ttl_ms = 60000        # how long the kernel caches attributes and names
//! max_io = 1048576           # largest read or write request the kernel sends
//! # writeback = true         # the kernel's writeback cache; unset: on for `up`, off for `mount`
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `[fuse]`: how the mount serves the kernel's requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FuseConfig {
    /// Request worker threads, each with its own `/dev/fuse` descriptor; 0 = one per core,
    /// at least 2.
    pub workers: usize,
    /// How long the kernel may cache attributes and names it was told (and that a name is
    /// not there), ms. Every change goes through the mount, so the caches cannot go stale;
    /// a minute rather than libfuse's second, so that a `find` or `git status` over a large
    /// tree that takes longer than a second finds them still valid (`find -ls` over 100,000
    /// files, the second time: 1.26 s with 1 s, 0.22 s with 60 s; tmpfs 0.20 s). A served
    /// store's mount caches nothing, whatever this says.
    pub attr_ttl_ms: u64,
    /// Largest read or write request the kernel sends, bytes (4 KiB to 1 MiB).
    pub max_io: u32,
    /// The kernel's writeback cache (`--writeback`; unset: on for `up`, off for `mount` and
    /// for a served store): a `write(2)` returns once its
    /// bytes are in the page cache, and the kernel sends them to the store in large
    /// requests later, at the latest when the file is closed or synced. A file's data is in
    /// the store once `close`, `fsync` or `fdatasync` returns (and on a disk once the sync
    /// returns), as on ext4; killing the mount loses what was written and not yet closed or
    /// synced. Off (strict): every `write(2)` reaches the store before it returns. A served
    /// store (`mount --remote`) is always strict: other clients change its files, and the
    /// kernel would keep its own idea of their sizes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writeback: Option<bool>,
}

impl Default for FuseConfig {
    /// The values in the module's example.
    fn default() -> Self {
        FuseConfig {
            workers: 0,
            attr_ttl_ms: 60_000,
            max_io: 1 << 20,
            writeback: None,
        }
    }
}

impl FuseConfig {
    /// Worker threads to start: the configured number, or one per core (at least 2).
    pub fn effective_workers(&self) -> usize {
        if self.workers > 0 {
            return self.workers;
        }
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .max(2)
    }

    /// `Ok` if every value is in its range; else what is wrong, naming the key (`fuse.max_io
    /// = 100: ...`).
    pub fn validate(&self) -> Result<(), String> {
        if !(4096..=1 << 20).contains(&self.max_io) {
            return Err(format!(
                "fuse.max_io = {}: must be 4096..=1048576",
                self.max_io
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::FuseConfig;

    #[test]
    fn the_documented_example_is_the_default() {
        let text = example(include_str!("config.rs"));
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        let section: FuseConfig = parsed["fuse"].clone().try_into().unwrap();
        assert_eq!(section, FuseConfig::default());
        assert_eq!(section.validate(), Ok(()));
    }

    #[test]
    fn values_out_of_range_are_refused_naming_the_key() {
        for max_io in [100, 2 << 20] {
            let c = FuseConfig {
                max_io,
                ..FuseConfig::default()
            };
            assert!(c.validate().unwrap_err().contains("fuse.max_io"));
        }
        let e = toml::from_str::<FuseConfig>("max_iops = 3\n").unwrap_err();
        assert!(e.to_string().contains("max_iops"), "{e}");
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
