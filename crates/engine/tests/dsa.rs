//! The DSA engine on the device model: what only a DSA queue does (page faults, a full shared
//! queue, credits on a dedicated queue, fences and differences inside a hardware batch), and a
//! property: the descriptors it builds for any copy are never rejected by the model's
//! validation of the specification's rules.

use std::time::Duration;

use proptest::prelude::*;
use switchyard_engine::dsa::model::{ModelConfig, ModelDevice};
use switchyard_engine::dsa::{DsaConfig, DsaEngine, Mode, Portal};
use switchyard_engine::{Batch, Descriptor, Engine, Flags, Op, Status};

/// The engine before the model: it drops first and finishes its work on the model.
struct Rig {
    engine: DsaEngine,
    model: ModelDevice,
}

fn rig(config: ModelConfig) -> Rig {
    let model = ModelDevice::start(config);
    let portal: Box<dyn Portal> = Box::new(model.portal());
    let engine =
        DsaEngine::start(vec![(model.work_queue(), portal)], DsaConfig::default()).unwrap();
    Rig { engine, model }
}

fn copy(dst: *mut u8, src: *const u8, len: usize, flags: Flags) -> Descriptor {
    Descriptor {
        op: Op::Copy { dst, src },
        len,
        flags,
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(13) ^ seed).collect()
}

#[test]
fn a_page_fault_is_a_partial_completion_the_submitter_finishes_on_the_cpu() {
    let r = rig(ModelConfig::default());
    let src = pattern(64 << 10, 1);
    let mut dst = vec![0u8; src.len()];
    // The destination's third page is absent: the copy stops there.
    r.model.mark_absent(dst[2 * 4096..].as_ptr(), 4096);
    let descs = vec![
        copy(dst.as_mut_ptr(), src.as_ptr(), 4096, Flags::NONE),
        copy(
            dst[4096..].as_mut_ptr(),
            src[4096..].as_ptr(),
            60 << 10,
            Flags::NONE,
        ),
    ];
    let (b, mut t) = Batch::new(descs);
    // SAFETY: the buffers outlive the wait below.
    unsafe { r.engine.try_submit(0, b) }.unwrap();
    let o = t.wait(1000);
    assert_eq!((o.status, o.bytes_completed), (Status::Partial, 2 * 4096));
    assert_eq!(r.engine.record(0).status, Some(Status::Partial));
    assert_eq!(&dst[..8192], &src[..8192]);
    // The mover's part: the rest on the CPU once the page is back.
    r.model.mark_present();
    let done = o.bytes_completed as usize;
    dst[done..].copy_from_slice(&src[done..]);
    assert_eq!(dst, src);
    assert_eq!(r.model.rejected(), 0);
}

#[test]
fn a_fault_in_a_later_chunk_reports_the_prefix_of_every_chunk_before_it() {
    // Chunks of at most two pieces of at most 4 KiB: ten 4 KiB copies make five chunks.
    let r = rig(ModelConfig {
        max_transfer_size: 4096,
        max_batch_size: 2,
        ..ModelConfig::default()
    });
    let src = pattern(10 * 4096, 5);
    let mut dst = vec![0u8; src.len()];
    // The source of the seventh copy is absent from its 100th byte: a read fault in chunk 4.
    r.model.mark_absent(src[6 * 4096 + 100..].as_ptr(), 1);
    let descs = (0..10)
        .map(|i| {
            copy(
                dst[i * 4096..].as_mut_ptr(),
                src[i * 4096..].as_ptr(),
                4096,
                Flags::NONE,
            )
        })
        .collect();
    let (b, mut t) = Batch::new(descs);
    // SAFETY: the buffers outlive the wait below.
    unsafe { r.engine.try_submit(0, b) }.unwrap();
    let o = t.wait(1000);
    assert_eq!(
        (o.status, o.bytes_completed),
        (Status::Partial, 6 * 4096 + 100)
    );
    assert_eq!(&dst[..6 * 4096 + 100], &src[..6 * 4096 + 100]);
    assert!(
        dst[8 * 4096..].iter().all(|&x| x == 0),
        "no chunk after the fault ran"
    );
    assert_eq!(r.engine.stats(0).submissions, 4);
}

#[test]
fn a_full_shared_queue_is_retried_until_it_takes_the_batch() {
    let r = rig(ModelConfig {
        mode: Mode::Shared,
        size: 4,
        ..ModelConfig::default()
    });
    r.model.occupy(4);
    let src = pattern(4096, 2);
    let mut dst = vec![0u8; 4096];
    let (b, mut t) = Batch::new(vec![copy(
        dst.as_mut_ptr(),
        src.as_ptr(),
        4096,
        Flags::NONE,
    )]);
    // SAFETY: the buffers outlive the wait below.
    unsafe { r.engine.try_submit(0, b) }.unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        t.poll().is_none(),
        "nothing can run while another process fills the queue"
    );
    assert!(r.engine.stats(0).retries > 0);
    r.model.release(4);
    assert_eq!(t.wait(1000).status, Status::Success);
    assert_eq!(dst, src);
}

#[test]
fn a_dedicated_queue_is_never_sent_more_than_its_size() {
    let r = rig(ModelConfig {
        size: 2,
        ..ModelConfig::default()
    });
    let src = pattern(256 << 10, 3);
    let mut dsts = vec![vec![0u8; src.len()]; 32];
    let mut tickets = Vec::new();
    for d in dsts.iter_mut() {
        let (b, t) = Batch::new(vec![copy(
            d.as_mut_ptr(),
            src.as_ptr(),
            src.len(),
            Flags::NONE,
        )]);
        // SAFETY: the buffers outlive the waits below.
        unsafe { r.engine.try_submit(0, b) }.unwrap();
        tickets.push(t);
    }
    for t in tickets.iter_mut() {
        assert_eq!(t.wait(1000).status, Status::Success);
    }
    assert!(dsts.iter().all(|d| *d == src));
    assert_eq!(r.model.dropped(), 0, "the engine kept within its credits");
    let s = r.engine.stats(0);
    assert!(s.max_in_flight <= 2 && s.submissions == 32, "{s:?}");
}

#[test]
fn a_fence_orders_a_batch_and_a_difference_ends_it() {
    let r = rig(ModelConfig::default());
    let a = pattern(8192, 4);
    let mut b = vec![0u8; 8192];
    let mut c = vec![0u8; 8192];
    // a → b, then (fenced) b → c: c must see a's bytes.
    let descs = vec![
        copy(b.as_mut_ptr(), a.as_ptr(), 8192, Flags::NONE),
        copy(c.as_mut_ptr(), b.as_ptr(), 8192, Flags::FENCE),
    ];
    let (batch, mut t) = Batch::new(descs);
    // SAFETY: the buffers outlive the wait below.
    unsafe { r.engine.try_submit(0, batch) }.unwrap();
    assert_eq!(t.wait(1000).status, Status::Success);
    assert_eq!(c, a);

    // A compare that finds a difference, then a copy: the copy must not run.
    let mut other = a.clone();
    other[100] ^= 1;
    let mut d = vec![0u8; 8192];
    let compare = Descriptor {
        op: Op::Compare {
            a: a.as_ptr(),
            b: other.as_ptr(),
        },
        len: 8192,
        flags: Flags::NONE,
    };
    let (batch, mut t) = Batch::new(vec![
        compare,
        copy(d.as_mut_ptr(), a.as_ptr(), 8192, Flags::NONE),
    ]);
    // SAFETY: as above.
    unsafe { r.engine.try_submit(0, batch) }.unwrap();
    let o = t.wait(1000);
    assert_eq!((o.status, o.bytes_completed), (Status::Mismatch, 100));
    assert!(
        d.iter().all(|&x| x == 0),
        "the copy after the difference ran"
    );
    assert_eq!(r.model.rejected(), 0);
}

#[test]
fn compare_and_fill_results() {
    let r = rig(ModelConfig {
        max_transfer_size: 4096,
        ..ModelConfig::default()
    });
    let mut buf = vec![0u8; 20_000];
    let fill = Descriptor {
        op: Op::Fill {
            dst: buf[5..].as_mut_ptr(),
            pattern: u64::from_le_bytes(*b"abcdefgh"),
        },
        len: 19_990,
        flags: Flags::DURABLE,
    };
    let (batch, mut t) = Batch::new(vec![fill]);
    // SAFETY: the buffer outlives the wait below.
    unsafe { r.engine.try_submit(0, batch) }.unwrap();
    assert_eq!(t.wait(1000).status, Status::Success);
    let want: Vec<u8> = b"abcdefgh".iter().cycle().take(19_990).copied().collect();
    assert_eq!(&buf[5..19_995], &want[..]);
    let copy_of = buf.clone();
    let compare = |at: usize| Descriptor {
        op: Op::Compare {
            a: buf.as_ptr(),
            b: copy_of.as_ptr(),
        },
        len: at,
        flags: Flags::NONE,
    };
    let (batch, mut t) = Batch::new(vec![compare(20_000)]);
    // SAFETY: as above.
    unsafe { r.engine.try_submit(0, batch) }.unwrap();
    assert_eq!(t.wait(1000).status, Status::Success);
    let mut changed = copy_of.clone();
    changed[12_345] = 0;
    let (batch, mut t) = Batch::new(vec![Descriptor {
        op: Op::Compare {
            a: buf.as_ptr(),
            b: changed.as_ptr(),
        },
        len: 20_000,
        flags: Flags::NONE,
    }]);
    // SAFETY: as above.
    unsafe { r.engine.try_submit(0, batch) }.unwrap();
    let o = t.wait(1000);
    assert_eq!((o.status, o.bytes_completed), (Status::Mismatch, 12_345));
    assert_eq!(r.model.rejected(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Random copies (sizes, offsets, descriptor counts) on queues with random limits: every
    /// descriptor the engine builds passes the model's validation, and the copy is exact.
    #[test]
    fn descriptors_for_random_copies_are_never_rejected(
        lens in proptest::collection::vec(0usize..20_000, 1..40),
        offset in 0usize..64,
        max_transfer in 1u64..9000,
        max_batch in 2u32..10,
        size in 1u32..6,
        shared in any::<bool>(),
        flags in 0u8..8,
    ) {
        let r = rig(ModelConfig {
            mode: if shared { Mode::Shared } else { Mode::Dedicated },
            size,
            max_transfer_size: max_transfer,
            max_batch_size: max_batch,
            block_on_fault: false,
        });
        let total: usize = lens.iter().sum();
        let src = pattern(total + offset, 9);
        let mut dst = vec![0u8; total + offset];
        let f = [Flags::NONE, Flags::DURABLE, Flags::CACHE_CONTROL, Flags::FENCE][flags as usize % 4];
        let mut at = offset;
        let descs: Vec<Descriptor> = lens
            .iter()
            .map(|&len| {
                let d = copy(dst[at..].as_mut_ptr(), src[at..].as_ptr(), len, f);
                at += len;
                d
            })
            .collect();
        let (b, mut t) = Batch::new(descs);
        // SAFETY: the buffers outlive the wait below.
        unsafe { r.engine.try_submit(0, b) }.unwrap();
        let o = t.wait(1000);
        prop_assert_eq!(r.model.rejected(), 0);
        prop_assert_eq!(r.model.dropped(), 0);
        prop_assert_eq!((o.status, o.bytes_completed), (Status::Success, total as u64));
        prop_assert_eq!(&dst[offset..], &src[offset..]);
    }
}

#[test]
fn a_queue_whose_device_lacks_an_operation_is_refused() {
    let model = ModelDevice::start(ModelConfig::default());
    let mut q = model.work_queue();
    q.op_cap[0] &= !(1 << 0x05);
    let err = DsaEngine::portal(&q).err().expect("compare is missing");
    assert_eq!(err.kind(), std::io::ErrorKind::Unsupported);
    assert!(err.to_string().contains("cannot run compare"), "{err}");
    let err = DsaEngine::open(&[q], DsaConfig::default()).err().unwrap();
    assert!(err.to_string().contains("wq0.0 (dsa0)"), "{err}");
}
