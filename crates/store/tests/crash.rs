//! The crash-state harness: bounded here (CI); `switchyard crashtest --exhaustive` runs longer.

use switchyard_store::crash::{run, run_async, CrashEngine, Options};

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

/// Proof that two-phase writes are crash-tested: with the commit skipping the flush of blocks
/// another party filled, the harness must find images whose file shows unwritten data.
#[test]
fn an_unflushed_two_phase_fill_is_caught() {
    let opts = Options {
        inject_unflushed_fill: true,
        max_violations: 1,
        ..Options::default()
    };
    let report = run(&opts, |_| {});
    assert!(
        !report.violations.is_empty(),
        "the unflushed fill went unnoticed over {} images",
        report.images
    );
    assert!(
        report.violations[0].contains("WritePrepared"),
        "{}",
        report.violations[0]
    );
}

/// Every copy through the DSA engine on its device model (durable writes as descriptors with
/// destination readback; the device's stores, flushes and fences are crash points): every
/// crash image of the synchronous and the asynchronous workloads recovers to before or after
/// the interrupted operation. Bounded (single operations and a few random sequences, no pairs:
/// each workload starts a device model and the engine's thread) to keep CI short.
#[test]
fn every_crash_image_with_copies_through_the_dsa_model_recovers_to_before_or_after() {
    let opts = Options {
        engine: CrashEngine::DsaModel,
        pairs: false,
        random_sequences: 12,
        ..Options::default()
    };
    let t = std::time::Instant::now();
    let report = run(&opts, |_| {});
    eprintln!(
        "dsa-model: {} workloads, {} crash points, {} distinct images, {} bytes through the \
         engine ({:.1} s)",
        report.workloads,
        report.crash_points,
        report.images,
        report.engine_bytes,
        t.elapsed().as_secs_f64()
    );
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert!(
        report.engine_bytes > 0,
        "no copy went through the DSA model"
    );
    assert!(report.images >= 1_000, "only {} images", report.images);
    let t = std::time::Instant::now();
    let report = run_async(&opts, |_| {});
    eprintln!(
        "dsa-model async: {} workloads, {} distinct images, {} during async writes, {} bytes \
         through the engine ({:.1} s)",
        report.workloads,
        report.images,
        report.async_images,
        report.engine_bytes,
        t.elapsed().as_secs_f64()
    );
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert!(
        report.engine_bytes > 0,
        "no copy went through the DSA model"
    );
    assert!(
        report.async_images >= 500,
        "only {} images of async writes",
        report.async_images
    );
}

/// Asynchronous writes: crash images between the metadata commit and the end of the engine's
/// copy recover to the state before or after the write.
#[test]
fn every_crash_image_of_async_writes_recovers_to_before_or_after() {
    let report = run_async(&Options::default(), |_| {});
    eprintln!(
        "async: {} workloads, {} crash points, {} distinct images, {} during async writes",
        report.workloads, report.crash_points, report.images, report.async_images
    );
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert!(
        report.async_images >= 5_000,
        "only {} images of async writes",
        report.async_images
    );
}

/// Asynchronous writes by a bulk tenant whose engine channel is throttled (paused between
/// and within copies after their metadata committed) recover to before or after each write
/// at every crash image, and the channel did pause.
#[test]
fn every_crash_image_of_throttled_async_writes_recovers_to_before_or_after() {
    let opts = Options {
        random_sequences: 20,
        ..Options::default()
    };
    let (report, paused) = switchyard_store::crash::run_async_throttled(&opts, |_| {});
    eprintln!(
        "throttled async: {} workloads, {} distinct images, {} during async writes, {paused} \
         paused epochs",
        report.workloads, report.images, report.async_images
    );
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert!(report.async_images >= 1_000, "{}", report.async_images);
    assert!(paused > 0, "the bulk channel never paused");
}

/// Proof that the asynchronous harness can fail: entries that do not name their copy let
/// recovery keep a mapping to unwritten data.
#[test]
fn an_unrecorded_orderless_write_is_caught() {
    let opts = Options {
        inject_unrecorded_orderless: true,
        max_violations: 1,
        ..Options::default()
    };
    let report = run_async(&opts, |_| {});
    assert!(
        !report.violations.is_empty(),
        "the unrecorded orderless write went unnoticed over {} images",
        report.images
    );
    eprintln!("caught: {}", report.violations[0]);
}

/// Power cuts on page media: any subset of the pages dirtied since the last sync may have
/// reached the disk, each as it was at any crash point since; every image recovers to a
/// state the program could have seen since its last completed sync.
#[test]
fn every_page_granularity_power_cut_recovers_to_a_state_since_the_last_sync() {
    let report = switchyard_store::crash::run_power(&Default::default(), |_| {});
    eprintln!(
        "power: {} workloads, {} crash points, {} distinct images",
        report.workloads, report.crash_points, report.images
    );
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert!(report.images >= 20_000, "only {} images", report.images);
}

/// Proof that the page-granularity mode can fail: with each sync writing its anchor before
/// the region, it must find images that do not recover.
#[test]
fn an_anchor_written_before_the_data_is_caught() {
    let opts = switchyard_store::crash::PowerOptions {
        inject_anchor_first: true,
        max_violations: 1,
        ..Default::default()
    };
    let report = switchyard_store::crash::run_power(&opts, |_| {});
    assert!(
        !report.violations.is_empty(),
        "the anchor written first went unnoticed over {} images",
        report.images
    );
    eprintln!("caught: {}", report.violations[0]);
}
