//! The movers the tests drive: a threads engine (unpinned, 16 KiB descriptors, optional
//! injected faults) under a configuration with low thresholds, deterministic data, and the
//! policies and directions property tests range over.

use std::sync::Arc;

use proptest::prelude::*;
use switchyard_engine::{FaultPlan, ThreadsConfig, ThreadsEngine};
use switchyard_media::Persist;
use switchyard_mover::{Config, Direction, Mover, Policy};

/// A mover with `policy`, the engine's `faults` and `persist`, and thresholds of 16 KiB
/// (writes), 32 KiB (reads) and splits from 64 KiB, then `tweak`ed.
pub fn mover_with(
    policy: Policy,
    faults: FaultPlan,
    persist: Persist,
    tweak: impl FnOnce(&mut Config),
) -> Mover {
    let mut cfg = Config::default();
    cfg.mover.policy = policy;
    cfg.mover.thresholds.to_slow.local_aligned = 16 << 10;
    cfg.mover.thresholds.to_slow.local_unaligned = 16 << 10;
    cfg.mover.thresholds.from_slow.local_aligned = 32 << 10;
    cfg.mover.thresholds.from_slow.local_unaligned = 32 << 10;
    cfg.mover.split_min_bytes = 64 << 10;
    tweak(&mut cfg);
    let engine = ThreadsEngine::start(ThreadsConfig {
        pin: false,
        descriptor_bytes: 16 << 10,
        persist,
        faults,
        ..ThreadsConfig::default()
    })
    .unwrap();
    Mover::with_engine(&cfg, Arc::new(engine), persist)
}

/// `n` bytes that differ from offset to offset, by `seed`.
pub fn data(n: usize, seed: u64) -> Vec<u8> {
    (0..n as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9).wrapping_add(seed) >> 7) as u8)
        .collect()
}

/// Every policy.
pub fn policies() -> impl Strategy<Value = Policy> {
    prop_oneof![Just(Policy::Auto), Just(Policy::Cpu), Just(Policy::Engine)]
}

/// Every direction.
pub fn directions() -> impl Strategy<Value = Direction> {
    prop_oneof![
        Just(Direction::ToSlow),
        Just(Direction::FromSlow),
        Just(Direction::Dram)
    ]
}
