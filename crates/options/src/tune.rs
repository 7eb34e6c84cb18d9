//! Running the tuner as the commands do: on a scratch region next to the store, saving the
//! profile every later command loads ([`tune_on`], [`tune_to`]), and saying what a profile
//! sets ([`describe`]). `switchyard tune` and `up`'s background tune run it, and so do the
//! benchmarks that tune (`bench mix`, `bench tunes`); what is measured and how is
//! `switchyard_mover::tune`'s.

use std::path::Path;

use anyhow::Context;
use switchyard_media::Region;
use switchyard_mover::profile::{Profile, NEVER};
use switchyard_mover::tune::{self, Effort, Measurements};
use switchyard_mover::Config;

use crate::medium::Media;
use crate::size;

/// Runs the tuner with a progress bar and saves the profile; returns it, what was measured,
/// and on which medium.
pub fn tune_to(
    config: &Config,
    dir: &Path,
    out: &Path,
    quick: bool,
) -> anyhow::Result<(Profile, Measurements, Media)> {
    let scratch = scratch_in(dir)?;
    let bar = indicatif::ProgressBar::new(1);
    bar.set_style(
        indicatif::ProgressStyle::with_template("tuning {bar:40} {pos}/{len} {msg} ({eta} left)")
            .expect("template")
            .progress_chars("=> "),
    );
    let got = tune_on(
        config,
        scratch.path(),
        out,
        quick,
        &mut |what, done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            bar.set_message(what.to_string());
        },
    );
    bar.finish_and_clear();
    got
}

/// A scratch region file for the tuner in `dir`, removed when dropped.
pub fn scratch_in(dir: &Path) -> anyhow::Result<tempfile::NamedTempFile> {
    remove_stale_scratch(dir);
    tempfile::Builder::new()
        .prefix("switchyard-tune.")
        .suffix(".region")
        .tempfile_in(dir)
        .with_context(|| format!("creating a scratch region in {}", dir.display()))
}

/// Removes the scratch regions in `dir` that no tune holds: those of a tune that was killed
/// (a `switchyard up` stopped with SIGKILL during its background tune leaves one). A tune
/// holds its scratch region open, and so its owner lock, while it runs: a file this process
/// can open as a region is no one's. Anything else (held, not a region) stays.
fn remove_stale_scratch(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("switchyard-tune.") && name.ends_with(".region")) {
            continue;
        }
        if let Ok(region) = Region::open(e.path(), 0, switchyard_media::Persist::detect()) {
            drop(region);
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Runs the tuner on a 256 MiB region at `scratch` (which the caller removes), telling
/// `progress` how it goes, and saves the profile to `out`.
pub fn tune_on(
    config: &Config,
    scratch: &Path,
    out: &Path,
    quick: bool,
    progress: tune::Progress<'_>,
) -> anyhow::Result<(Profile, Measurements, Media)> {
    let region = Region::create(scratch, 256 << 20, config.persist())?;
    let effort = if quick { Effort::QUICK } else { Effort::FULL };
    let (profile, m) = tune::tune(&region, config, effort, quick, progress)?;
    let media = Media::of(&region);
    drop(region);
    profile.save(out)?;
    Ok((profile, m, media))
}

/// A threshold as a person reads it.
pub fn threshold(v: usize) -> String {
    if v >= NEVER {
        "never".into()
    } else {
        size::show(v as u64)
    }
}

/// One paragraph saying what a profile sets.
pub fn describe(p: &Profile) -> String {
    let t = &p.tuned.thresholds;
    let mut said = format!(
        "measured in {:.1} s on {} with engine {}:\n  engine thresholds: writes {} (unaligned {}), \
         reads {} (unaligned {})\n  M = {}, CPU writers cap = {}, non-temporal from {}, \
         shifted-copy loop from {}",
        p.measured.seconds,
        p.machine,
        p.engine,
        threshold(t.to_slow.local_aligned),
        threshold(t.to_slow.local_unaligned),
        threshold(t.from_slow.local_aligned),
        threshold(t.from_slow.local_unaligned),
        p.tuned.concurrency_limit,
        if p.tuned.cpu_writers == 0 {
            "none".to_string()
        } else {
            p.tuned.cpu_writers.to_string()
        },
        threshold(p.tuned.nt_threshold),
        match p.tuned.shifted_min {
            0 => "never".to_string(),
            n => threshold(n),
        },
    );
    for u in &p.tuned.undecided {
        said.push_str(&format!(
            "\n  {} {}: undecided from {} to {} (the paths tie within noise there); \
             adaptation settles it",
            if u.direction == "to_slow" {
                "writes"
            } else {
                "reads"
            },
            if u.aligned { "aligned" } else { "unaligned" },
            threshold(u.from),
            threshold(u.to)
        ));
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_tunes_scratch_region_goes_and_a_running_ones_stays() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join("switchyard-tune.killed.region");
        let live = dir.path().join("switchyard-tune.running.region");
        let other = dir.path().join("switchyard.store");
        let persist = switchyard_media::Persist::detect();
        for p in [&stale, &live, &other] {
            drop(Region::create(p, switchyard_media::MIN_REGION, persist).unwrap());
        }
        // A running tune holds its region open.
        let held = Region::open(&live, 0, persist).unwrap();
        let fresh = scratch_in(dir.path()).unwrap();
        assert!(!stale.exists(), "the killed tune's region is removed");
        assert!(
            live.exists() && other.exists(),
            "held and unrelated files stay"
        );
        assert!(fresh.path().exists());
        drop(held);
    }
}
