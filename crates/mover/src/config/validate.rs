//! Checking a configuration before anything starts from it: every value in its range, with a
//! message that names the key, the value and what it must be.

use switchyard_media::FlushKind;

use super::{AdaptationConfig, Config, ConfigError, EngineConfig, EstimatesConfig, MediaConfig};

/// `Err` with `message`.
pub(super) fn bad(message: String) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid(message))
}

impl Config {
    /// Checks the ranges and names of the mover's sections; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_engine(&self.engine)?;
        validate_media(&self.media)?;
        validate_adaptation(&self.mover.adaptation)?;
        validate_estimates(&self.mover.estimates)?;
        super::qos::validate_qos(&self.qos, self.engine.effective_channels())?;
        if !(0.0..1.0).contains(&self.mover.split_share) {
            return bad(format!(
                "mover.split_share = {}: must be 0 (live estimates) or between 0 and 1",
                self.mover.split_share
            ));
        }
        Ok(())
    }
}

fn validate_engine(e: &EngineConfig) -> Result<(), ConfigError> {
    if !crate::select::KINDS.contains(&e.kind.as_str()) {
        return Err(crate::select::no_such_engine(&e.kind));
    }
    if e.queue_depth == 0 || e.queue_depth > 1 << 16 {
        return bad(format!(
            "engine.queue_depth = {}: must be 1..=65536",
            e.queue_depth
        ));
    }
    if e.descriptor_bytes < 4096 || !e.descriptor_bytes.is_power_of_two() {
        return bad(format!(
            "engine.descriptor_bytes = {}: must be a power of two >= 4096",
            e.descriptor_bytes
        ));
    }
    Ok(())
}

fn validate_media(m: &MediaConfig) -> Result<(), ConfigError> {
    if m.flush == "auto" {
        return Ok(());
    }
    match FlushKind::from_name(&m.flush) {
        None => bad(format!(
            "media.flush = {:?}: expected auto, clwb, clflushopt, clflush or none",
            m.flush
        )),
        Some(k) if !k.supported() => bad(format!(
            "media.flush = {:?}: this CPU lacks the instruction",
            m.flush
        )),
        Some(_) => Ok(()),
    }
}

fn validate_adaptation(a: &AdaptationConfig) -> Result<(), ConfigError> {
    let counts = [
        a.hold,
        a.explore,
        a.sample_band_every,
        a.ticks,
        a.starved,
        a.watch_every,
    ];
    if a.epoch_ms == 0 || counts.contains(&0) || a.evidence == 0 {
        return bad(
            "mover.adaptation: epoch_ms, hold, explore, evidence, sample_band_every, ticks, \
             starved and watch_every must be positive"
                .into(),
        );
    }
    if ![a.margin, a.step, a.deadband, a.explore_share]
        .iter()
        .all(|v| (0.0..1.0).contains(v))
    {
        return bad(
            "mover.adaptation: margin, step, deadband and explore_share must be in [0, 1)".into(),
        );
    }
    Ok(())
}

fn validate_estimates(e: &EstimatesConfig) -> Result<(), ConfigError> {
    if !(e.weight > 0.0 && e.weight <= 1.0)
        || e.outlier_factor < 1.0
        || e.sample_every == 0
        || e.bulk_sample_every == 0
    {
        return bad(
            "mover.estimates: weight must be in (0, 1], outlier_factor at least 1, sample_every \
             and bulk_sample_every positive"
                .into(),
        );
    }
    Ok(())
}
