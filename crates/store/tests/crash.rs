//! The crash-state harness: bounded here (CI); `switchyard crashtest --exhaustive` runs longer.

use switchyard_store::crash::{run, Options};

#[test]
fn every_crash_image_recovers_to_before_or_after() {
    let report = run(&Options::default(), |_| {});
    eprintln!(
        "{} workloads, {} crash points, {} distinct images",
        report.workloads, report.crash_points, report.images
    );
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert!(report.images >= 20_000, "only {} images", report.images);
}

/// Proof that the harness can fail: with log entries left unflushed before their commit, it
/// must find crash images that do not recover.
#[test]
fn a_missing_flush_is_caught() {
    let opts = Options {
        inject_missing_flush: true,
        max_violations: 1,
        ..Options::default()
    };
    let report = run(&opts, |_| {});
    assert!(
        !report.violations.is_empty(),
        "the injected missing flush went unnoticed over {} images",
        report.images
    );
    eprintln!("caught: {}", report.violations[0]);
}
