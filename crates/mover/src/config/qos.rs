//! `[qos]`: tenants and the channel manager that shares the engine between them (see
//! [`crate::qos`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::validate::bad;
use super::ConfigError;

/// `[qos]`: tenants, their channels, and the bulk budget's controller. Without tenants (the
/// default) there is one tenant and no channel manager.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct QosConfig {
    /// Tenants: a request's tenant id n (1-based) is the n-th; 0 or an id past the list is
    /// unclassed and uses the latency channels, untimed.
    pub tenants: Vec<TenantConfig>,
    /// Engine channels the bulk tenants share (the first ones).
    pub bulk_channels: usize,
    /// Engine channels for latency tenants and unclassed requests, after the bulk ones
    /// (EasyIO: up to 4).
    pub latency_channels: usize,
    /// Budget epoch, µs: the bulk channels start at most their budget's bytes per epoch.
    pub epoch_us: u64,
    /// Controller period, µs.
    pub control_us: u64,
    /// A latency tenant that starts no copy for this long is idle: a budget the controller
    /// set lapses, and the bulk channels run free until a latency tenant's next copy (µs).
    pub idle_us: u64,
    /// New latencies per latency tenant before the controller judges its percentile (fewer
    /// decide a miss they already prove: more over the bound than the percentile allows).
    pub min_samples: u64,
    /// Share of the budget a missed objective takes away.
    pub decrease: f64,
    /// Budget added when every latency tenant has more than `slack` of its bound to spare,
    /// MiB/s.
    pub step_mib_s: f64,
    /// Share of its bound a latency tenant must have to spare before the budget rises.
    pub slack: f64,
    /// Lowest bulk budget, MiB/s (or the bulk tenants' floors summed, if more).
    pub floor_mib_s: f64,
    /// Highest bulk budget, MiB/s: at the ceiling the budget is lifted.
    pub ceiling_mib_s: f64,
    /// A fixed bulk budget, MiB/s, which the controller leaves alone (it still judges the
    /// latency tenants and counts their misses); 0: the controller steers the budget.
    pub fixed_mib_s: f64,
}

impl Default for QosConfig {
    fn default() -> Self {
        QosConfig {
            tenants: Vec::new(),
            bulk_channels: 1,
            latency_channels: 1,
            epoch_us: 100,
            control_us: 1000,
            idle_us: 500,
            min_samples: 100,
            decrease: 0.25,
            step_mib_s: 256.0,
            slack: 0.2,
            floor_mib_s: 64.0,
            ceiling_mib_s: 65536.0,
            fixed_mib_s: 0.0,
        }
    }
}

/// What a tenant wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TenantKind {
    /// Latency-sensitive, with an objective: a percentile of its copies' latency under a
    /// bound.
    Latency,
    /// Bandwidth-oriented: throttled so the latency tenants keep their objectives.
    Bulk,
}

/// One tenant (`[[qos.tenants]]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Its name in reports.
    pub name: String,
    /// `latency` or `bulk`.
    pub kind: TenantKind,
    /// Latency tenants: the percentile judged, 0–100 (default 99).
    #[serde(default = "default_percentile")]
    pub percentile: f64,
    /// Latency tenants: the bound on that percentile, µs.
    #[serde(default)]
    pub bound_us: f64,
    /// Bulk tenants: bandwidth the budget never goes below, MiB/s (default 0).
    #[serde(default)]
    pub floor_mib_s: f64,
    /// Latency tenants: the application reports each request's latency as its clients see
    /// it (`Mover::report_latency`: from arrival to answer, queueing included); `false`
    /// (default): the mover times each synchronous copy.
    #[serde(default)]
    pub reported: bool,
    /// Callers by uid whose requests are this tenant's, through a mount or a program's
    /// descriptors ([`crate::qos::Classes`]); empty: any uid, if `paths` is given.
    #[serde(default)]
    pub uids: Vec<u32>,
    /// Files under these paths (from the store's root, whole components: `/logs` holds
    /// `/logs/a`, not `/logs2`) are this tenant's; empty: any path, if `uids` is given.
    /// A tenant with neither is chosen only by the caller's hints.
    #[serde(default)]
    pub paths: Vec<String>,
}

impl TenantConfig {
    /// A latency tenant whose p99 must stay under `bound_us`, its copies timed by the mover.
    pub fn latency(name: &str, bound_us: f64) -> TenantConfig {
        TenantConfig {
            name: name.into(),
            kind: TenantKind::Latency,
            percentile: default_percentile(),
            bound_us,
            floor_mib_s: 0.0,
            reported: false,
            uids: Vec::new(),
            paths: Vec::new(),
        }
    }

    /// A bulk tenant without a floor.
    pub fn bulk(name: &str) -> TenantConfig {
        TenantConfig {
            kind: TenantKind::Bulk,
            ..TenantConfig::latency(name, 0.0)
        }
    }
}

fn default_percentile() -> f64 {
    99.0
}

/// Checks `[qos]` against the `channels` the engine starts.
pub(super) fn validate_qos(q: &QosConfig, channels: usize) -> Result<(), ConfigError> {
    if q.tenants.is_empty() {
        return Ok(());
    }
    if q.tenants.len() > u16::MAX as usize {
        return bad(format!(
            "qos.tenants: {} tenants, at most 65535",
            q.tenants.len()
        ));
    }
    if q.bulk_channels == 0 || !(1..=4).contains(&q.latency_channels) {
        return bad(format!(
            "qos.bulk_channels = {}, qos.latency_channels = {}: need at least 1 bulk channel \
             and 1 to 4 latency channels",
            q.bulk_channels, q.latency_channels
        ));
    }
    let need = q.bulk_channels + q.latency_channels;
    if channels < need {
        return bad(format!(
            "qos: {} bulk and {} latency channels need engine.channels = {need} or more (it \
             starts {channels})",
            q.bulk_channels, q.latency_channels
        ));
    }
    if q.epoch_us == 0 || q.control_us < q.epoch_us || q.idle_us < q.epoch_us {
        return bad(format!(
            "qos.epoch_us = {}, qos.control_us = {}, qos.idle_us = {}: the epoch must be at \
             least 1 µs, and the control period and idle time at least one epoch",
            q.epoch_us, q.control_us, q.idle_us
        ));
    }
    if !(q.decrease > 0.0 && q.decrease < 1.0 && (0.0..1.0).contains(&q.slack)) {
        return bad(format!(
            "qos.decrease = {}, qos.slack = {}: both must lie in (0, 1) ([0, 1) for slack)",
            q.decrease, q.slack
        ));
    }
    if !(q.step_mib_s > 0.0 && q.floor_mib_s > 0.0 && q.ceiling_mib_s > q.floor_mib_s) {
        return bad(format!(
            "qos.step_mib_s = {}, qos.floor_mib_s = {}, qos.ceiling_mib_s = {}: the step and \
             floor must be positive and the ceiling above the floor",
            q.step_mib_s, q.floor_mib_s, q.ceiling_mib_s
        ));
    }
    if q.fixed_mib_s.is_nan() || q.fixed_mib_s < 0.0 {
        return bad(format!(
            "qos.fixed_mib_s = {}: must be 0 (steered) or a budget",
            q.fixed_mib_s
        ));
    }
    for t in &q.tenants {
        let name = &t.name;
        match t.kind {
            TenantKind::Latency
                if !(t.bound_us > 0.0 && t.percentile > 0.0 && t.percentile <= 100.0) =>
            {
                return bad(format!(
                    "qos tenant {name:?}: a latency tenant needs bound_us > 0 and a percentile \
                     in (0, 100] (bound_us = {}, percentile = {})",
                    t.bound_us, t.percentile
                ));
            }
            TenantKind::Bulk if t.floor_mib_s.is_nan() || t.floor_mib_s < 0.0 => {
                return bad(format!(
                    "qos tenant {name:?}: floor_mib_s = {} must not be negative",
                    t.floor_mib_s
                ));
            }
            _ => {}
        }
        if let Some(p) = t.paths.iter().find(|p| !p.starts_with('/')) {
            return bad(format!(
                "qos tenant {name:?}: paths = [{p:?}]: a path starts at the store's root, \
                 with '/'"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut QosConfig)) -> Result<(), ConfigError> {
        let mut q = QosConfig {
            tenants: vec![TenantConfig::latency("web", 20.0), TenantConfig::bulk("gc")],
            ..QosConfig::default()
        };
        f(&mut q);
        validate_qos(&q, 2)
    }

    /// Every out-of-range or NaN value is refused, naming its key; the defaults with two
    /// tenants on two channels pass.
    #[test]
    fn bad_qos_values_are_refused_by_name() {
        assert!(with(|_| {}).is_ok());
        let refused = |f: &dyn Fn(&mut QosConfig), key: &str| {
            let e = with(f).unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        };
        refused(&|q| q.latency_channels = 5, "latency_channels");
        refused(&|q| q.bulk_channels = 2, "engine.channels = 3");
        refused(&|q| q.control_us = 10, "control_us");
        refused(&|q| q.idle_us = 0, "idle_us");
        refused(&|q| q.decrease = f64::NAN, "decrease");
        refused(&|q| q.slack = 1.0, "slack");
        refused(&|q| q.ceiling_mib_s = 1.0, "ceiling_mib_s");
        refused(&|q| q.fixed_mib_s = -1.0, "fixed_mib_s");
        refused(&|q| q.tenants[0].bound_us = f64::NAN, "\"web\"");
        refused(&|q| q.tenants[0].percentile = 101.0, "percentile");
        refused(&|q| q.tenants[1].floor_mib_s = f64::NAN, "\"gc\"");
        refused(&|q| q.tenants[1].paths = vec!["logs".into()], "paths");
    }
}
