//! The device model's behaviour on raw descriptors, as the specification describes it.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::dsa::descriptor::{encode_batch, flag, opcode, status, HwCompletion, HwDesc};
use crate::dsa::model::{ModelConfig, ModelDevice};
use crate::dsa::portal::{Portal, Refused};
use crate::dsa::sysfs::Mode;

fn wait(r: &HwCompletion) -> u8 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(code) = r.written() {
            return code;
        }
        assert!(
            Instant::now() < deadline,
            "the model never wrote the record"
        );
        std::thread::yield_now();
    }
}

fn memmove(dst: *mut u8, src: *const u8, len: u32, r: &HwCompletion, flags: u32) -> HwDesc {
    HwDesc {
        completion_addr: r as *const HwCompletion as u64,
        src: src as u64,
        dst: dst as u64,
        size: len,
        ..HwDesc::new(opcode::MEMMOVE, flag::CRAV | flag::RCR | flags)
    }
}

#[test]
fn descriptors_reach_the_model_through_movdir64b_where_the_cpu_has_it() {
    let m = ModelDevice::start(ModelConfig::default());
    let p = m.portal();
    if !p.uses_movdir64b() {
        eprintln!("this CPU lacks MOVDIR64B: the portal copied descriptors instead (skipped)");
    }
    let (src, mut dst) = ([7u8; 256], [0u8; 256]);
    let r = HwCompletion::default();
    // SAFETY: the buffers and record outlive the wait below.
    unsafe { p.submit(&memmove(dst.as_mut_ptr(), src.as_ptr(), 256, &r, 0)) }.unwrap();
    assert_eq!(wait(&r), status::SUCCESS);
    assert_eq!(dst, src);
    assert_eq!(m.executed(), 1);
}

#[test]
fn a_page_fault_completes_partially_with_the_faulting_address() {
    let m = ModelDevice::start(ModelConfig::default());
    let src = vec![5u8; 3 * 4096];
    let mut dst = vec![0u8; 3 * 4096];
    m.mark_absent(dst[6000..].as_ptr(), 100);
    let r = HwCompletion::default();
    let d = memmove(dst.as_mut_ptr(), src.as_ptr(), 3 * 4096, &r, 0);
    // SAFETY: the buffers and record outlive the wait below.
    unsafe { m.portal().submit(&d) }.unwrap();
    assert_eq!(wait(&r), status::PAGE_FAULT_NOBOF);
    assert_eq!(r.bytes_completed.load(Ordering::Relaxed), 6000);
    assert_eq!(
        r.fault_addr.load(Ordering::Relaxed),
        dst[6000..].as_ptr() as u64
    );
    assert_eq!(r.fault_info.load(Ordering::Relaxed) & 1, 1, "a write fault");
    assert!(dst[..6000].iter().all(|&x| x == 5) && dst[6000..].iter().all(|&x| x == 0));
}

#[test]
fn a_full_shared_queue_refuses_and_a_full_dedicated_queue_drops() {
    let shared = ModelDevice::start(ModelConfig {
        mode: Mode::Shared,
        size: 4,
        ..ModelConfig::default()
    });
    shared.occupy(4);
    let r = HwCompletion::default();
    let noop = HwDesc {
        completion_addr: &r as *const HwCompletion as u64,
        ..HwDesc::new(opcode::NOOP, flag::CRAV | flag::RCR)
    };
    // SAFETY: the record outlives the wait below.
    assert_eq!(unsafe { shared.portal().submit(&noop) }, Err(Refused::Full));
    shared.release(1);
    // SAFETY: as above.
    unsafe { shared.portal().submit(&noop) }.unwrap();
    assert_eq!(wait(&r), status::SUCCESS);

    let dedicated = ModelDevice::start(ModelConfig {
        size: 2,
        ..ModelConfig::default()
    });
    dedicated.occupy(2);
    let r = HwCompletion::default();
    let noop = HwDesc {
        completion_addr: &r as *const HwCompletion as u64,
        ..noop
    };
    // SAFETY: never executed (dropped).
    assert_eq!(unsafe { dedicated.portal().submit(&noop) }, Ok(()));
    assert_eq!(dedicated.dropped(), 1);
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(r.written(), None, "a dropped descriptor completes never");
}

#[test]
fn a_drain_completes_after_every_earlier_descriptor() {
    let m = ModelDevice::start(ModelConfig::default());
    let src = vec![1u8; 1 << 20];
    let mut dsts = vec![vec![0u8; 1 << 20]; 4];
    let records: Vec<HwCompletion> = (0..5).map(|_| HwCompletion::default()).collect();
    for (d, r) in dsts.iter_mut().zip(&records) {
        let desc = memmove(d.as_mut_ptr(), src.as_ptr(), 1 << 20, r, 0);
        // SAFETY: buffers and records outlive the waits below.
        unsafe { m.portal().submit(&desc) }.unwrap();
    }
    let drain = HwDesc {
        completion_addr: &records[4] as *const HwCompletion as u64,
        ..HwDesc::new(opcode::DRAIN, flag::CRAV | flag::RCR)
    };
    // SAFETY: as above.
    unsafe { m.portal().submit(&drain) }.unwrap();
    assert_eq!(wait(&records[4]), status::SUCCESS);
    assert!(records[..4]
        .iter()
        .all(|r| r.written() == Some(status::SUCCESS)));
}

#[test]
fn batch_rules_fences_and_check_result() {
    let m = ModelDevice::start(ModelConfig::default());
    let (a, b) = ([1u8; 64], [2u8; 64]);
    let mut c = [0u8; 64];
    let recs: Vec<HwCompletion> = (0..4).map(|_| HwCompletion::default()).collect();
    let batch_rec = HwCompletion::default();
    let compare = HwDesc {
        completion_addr: &recs[0] as *const HwCompletion as u64,
        src: a.as_ptr() as u64,
        dst: b.as_ptr() as u64,
        size: 64,
        ..HwDesc::new(opcode::COMPARE, flag::CRAV | flag::RCR | flag::CR)
    };
    let nested = encode_batch(std::ptr::null(), 2, &recs[1]);
    let unfenced = memmove(c.as_mut_ptr(), a.as_ptr(), 32, &recs[2], 0);
    let fenced = memmove(c[32..].as_mut_ptr(), a.as_ptr(), 32, &recs[3], flag::FENCE);
    let list = [compare, nested, unfenced, fenced];
    // SAFETY: the list, buffers and records outlive the wait below.
    unsafe {
        m.portal()
            .submit(&encode_batch(list.as_ptr(), 4, &batch_rec))
    }
    .unwrap();
    assert_eq!(wait(&batch_rec), status::BATCH_FAIL);
    assert_eq!(recs[0].written(), Some(status::SUCCESS));
    assert_eq!(recs[0].result.load(Ordering::Relaxed), 1, "a difference");
    assert_eq!(recs[0].bytes_completed.load(Ordering::Relaxed), 0);
    assert_eq!(
        recs[1].written(),
        Some(status::BAD_OPCODE),
        "no batch in a batch"
    );
    assert_eq!(
        recs[2].written(),
        Some(status::SUCCESS),
        "no fence: it runs"
    );
    assert_eq!(recs[3].written(), None, "fenced after a failure: abandoned");
    assert_eq!(&c[..32], &a[..32]);
    assert!(c[32..].iter().all(|&x| x == 0));
    assert_eq!(m.rejected(), 1);
}

#[test]
fn a_doze_on_a_record_returns() {
    if !crate::dsa::wait::cpu_has_waitpkg() {
        eprintln!("this CPU lacks waitpkg: the doze yields instead of UMWAIT (skipped)");
    }
    let r = HwCompletion::default();
    let began = Instant::now();
    crate::dsa::wait::doze(&r.status);
    r.status.store(status::SUCCESS, Ordering::Release);
    crate::dsa::wait::doze(&r.status);
    assert!(began.elapsed() < Duration::from_secs(1));
}

/// A 4 KiB file standing in for a queue's character device (no device here): the production
/// portals open, map and write it exactly as they would the device.
fn stand_in(name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("sy-dsa-{name}-{}", std::process::id()));
    std::fs::File::create(&path).unwrap().set_len(4096).unwrap();
    path
}

#[test]
fn the_mapped_portal_writes_a_descriptor_with_one_movdir64b() {
    use crate::dsa::portal::{cpu_has_movdir64b, Instr, MappedPortal};
    let path = stand_in("movdir64b");
    if !cpu_has_movdir64b() {
        let err = MappedPortal::open(&path, Instr::Movdir64b).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::Unsupported);
        eprintln!("this CPU lacks MOVDIR64B: the mapped portal refused to open (skipped)");
        std::fs::remove_file(&path).unwrap();
        return;
    }
    let p = MappedPortal::open(&path, Instr::Movdir64b).unwrap();
    let r = HwCompletion::default();
    let d = memmove(0x1000 as *mut u8, 0x2000 as *const u8, 77, &r, 0);
    // SAFETY: nothing reads the descriptor's addresses: the portal is an ordinary file.
    unsafe { p.submit(&d) }.unwrap();
    drop(p);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..64], d.as_bytes());
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn the_write_portal_writes_the_64_descriptor_bytes() {
    use crate::dsa::portal::WritePortal;
    let path = stand_in("write");
    let p = WritePortal::open(&path).unwrap();
    let r = HwCompletion::default();
    let d = memmove(0x1000 as *mut u8, 0x2000 as *const u8, 99, &r, 0);
    // SAFETY: as above.
    unsafe { p.submit(&d) }.unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..64], d.as_bytes());
    std::fs::remove_file(&path).unwrap();
}
