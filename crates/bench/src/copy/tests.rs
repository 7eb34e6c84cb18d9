//! `bench copy` on the DSA engine over its device model: the engine's benchmark runs in the
//! test suite where no host has a DSA device, and what it measures is labelled as the model's
//! (`dsa-model`), never as hardware's.

use std::sync::Arc;

use clap::Parser;
use switchyard_engine::dsa::model::{ModelConfig, ModelEngine, MODEL_ENGINE_NAME};
use switchyard_engine::dsa::DsaConfig;
use switchyard_mover::StartedEngine;

use super::{measure_on, table, CopyArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    copy: CopyArgs,
}

#[test]
fn a_short_run_on_the_dsa_model_is_labelled_as_the_models() {
    let dir = tempfile::tempdir().unwrap();
    let region = dir.path().join("copy.region");
    let cli = Cli::parse_from([
        "copy",
        "--no-profile",
        "--quick",
        "--region",
        region.to_str().unwrap(),
        "--region-size",
        "8M",
        "--sizes",
        "64K,1M",
        "--threads",
        "1",
        "--rounds",
        "2",
    ]);
    let a = &cli.copy;
    let cfg = a.mover.load_config().unwrap().mover;
    let model = Arc::new(
        ModelEngine::start(
            1,
            &ModelConfig::default(),
            DsaConfig {
                persist: cfg.persist(),
                ..DsaConfig::default()
            },
        )
        .unwrap(),
    );
    let started = StartedEngine {
        engine: model.clone(),
        reason: format!("{MODEL_ENGINE_NAME}: the DSA engine on its device model (a test double)"),
    };
    let (records, summary, movers) = measure_on(a, &cfg, &started).unwrap();

    assert!(!records.is_empty());
    for r in &records {
        assert_eq!(r.engine, "dsa-model (1 channel)", "{r:?}");
    }
    let on_engine: Vec<_> = records.iter().filter(|r| r.path == "engine").collect();
    assert_eq!(on_engine.len(), 4, "two directions × two sizes");
    assert!(on_engine.iter().all(|r| r.gib_per_s > 0.0), "{on_engine:?}");
    assert_eq!(summary.setup.engine.kind, MODEL_ENGINE_NAME);
    assert!(summary.setup.engine_line().contains("device model"));
    let text = table::tables(&records);
    let header = text.lines().next().unwrap();
    assert!(header.contains("dsa-model"), "{header}");
    assert!(text.contains("CPU seconds per GiB"), "{text}");
    // The copies went through the model, and it found every descriptor valid.
    assert!(movers[1].stats().engine_bytes > 0);
    assert!(model.models()[0].executed() > 0);
    assert_eq!(model.models()[0].rejected(), 0);
}
