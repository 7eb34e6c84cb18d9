//! The mover over the DSA engine on its device model (`ModelEngine`): whatever copy the mover
//! is asked for, every descriptor it has the engine build passes the model's checks of the
//! specification, and a page fault anywhere in the destination (the model's partial
//! completion, with the bytes before the faulting page done) is finished on the CPU, so the
//! copy is byte-exact.

use std::sync::Arc;

use proptest::prelude::*;
use switchyard_engine::dsa::model::{ModelConfig, ModelEngine};
use switchyard_engine::dsa::{DsaConfig, Mode};
use switchyard_media::Persist;
use switchyard_mover::{Config, Direction, Hints, Mover, Policy};

/// `n` bytes that differ from offset to offset, by `seed`.
fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// A mover that gives the engine every copy it can, over one model channel configured as
/// `model`, with 16 KiB descriptors.
fn model_mover(model: &ModelConfig) -> (Mover, Arc<ModelEngine>) {
    let mut cfg = Config::default();
    cfg.mover.policy = Policy::Engine;
    let persist = Persist::detect();
    let dsa = DsaConfig {
        descriptor_bytes: 16 << 10,
        persist,
        ..DsaConfig::default()
    };
    let engine = Arc::new(ModelEngine::start(1, model, dsa).unwrap());
    (Mover::with_engine(&cfg, engine.clone(), persist), engine)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn copies_through_the_dsa_model_are_exact_and_never_rejected_wherever_a_page_faults(
        len in 1usize..300_000, so in 0usize..64, d_off in 0usize..64,
        fault_at in proptest::option::of(0usize..300_000),
        dir in prop_oneof![Just(Direction::ToSlow), Just(Direction::FromSlow), Just(Direction::Dram)],
        durable: bool, shared: bool,
        max_transfer in 4096u64..70_000, max_batch in 2u32..10,
    ) {
        let model = ModelConfig {
            mode: if shared { Mode::Shared } else { Mode::Dedicated },
            size: 8,
            max_transfer_size: max_transfer,
            max_batch_size: max_batch,
            block_on_fault: false,
        };
        let (m, engine) = model_mover(&model);
        let src = data(len + so, len as u8);
        let mut dst = vec![0x5Au8; len + d_off + 64];
        if let Some(at) = fault_at {
            // The page holding this byte of the destination is absent to the device.
            engine.models()[0].mark_absent(dst[d_off + at % len..].as_ptr(), 1);
        }
        let hints = Hints { direction: dir, durable, ..Hints::default() };
        let r = m.copy(&mut dst[d_off..d_off + len], &src[so..], hints).unwrap();
        prop_assert_eq!(&dst[d_off..d_off + len], &src[so..]);
        prop_assert!(dst[..d_off].iter().chain(&dst[d_off + len..]).all(|&b| b == 0x5A));
        prop_assert_eq!(r.cpu_bytes + r.engine_bytes, len);
        prop_assert_eq!(engine.models()[0].rejected(), 0);
    }
}

/// A fault in the middle of a large copy: the engine did the bytes before the faulting page,
/// the CPU the rest, and the destination is exact.
#[test]
fn a_fault_mid_copy_is_finished_on_the_cpu() {
    let (m, engine) = model_mover(&ModelConfig::default());
    let src = data(256 << 10, 7);
    let mut dst = vec![0u8; src.len()];
    engine.models()[0].mark_absent(dst[100 << 10..].as_ptr(), 1);
    let r = m.copy(&mut dst, &src, Hints::write()).unwrap();
    assert_eq!(dst, src);
    // The engine stopped at the faulting page; without the fault it would have done it all.
    assert!(
        r.engine_bytes > 0 && r.engine_bytes <= (100 << 10) + 4096,
        "{r:?}"
    );
    assert_eq!(r.engine_bytes + r.cpu_bytes, src.len());
    assert_eq!(engine.models()[0].rejected(), 0);
}
