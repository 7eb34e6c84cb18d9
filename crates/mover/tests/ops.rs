//! Fills and compares through the mover: byte-exact on every path and in every direction,
//! durable when asked, with the engine's partial and failed completions finished on the CPU;
//! and the engine takes its part when the decision gives it one.

mod common;

use common::{data, directions, mover_with, policies};
use proptest::prelude::*;
use switchyard_engine::FaultPlan;
use switchyard_media::{trace::Recorder, Persist};
use switchyard_mover::{Hints, Mover, Policy};

fn mover(policy: Policy, faults: FaultPlan, persist: Persist) -> Mover {
    mover_with(policy, faults, persist, |_| {})
}

fn faults(on: bool) -> FaultPlan {
    if on {
        FaultPlan {
            partial_every: 2,
            error_every: 5,
            ..FaultPlan::default()
        }
    } else {
        FaultPlan::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every byte of the range takes the value, none outside it changes, and a durable fill
    /// ends flushed and fenced on whichever path ran.
    #[test]
    fn fills_are_byte_exact_and_durable_when_asked(
        len in 0usize..600_000, off in 0usize..128, byte: u8, dir in directions(),
        durable: bool, policy in policies(), faulty: bool)
    {
        let rec = Recorder::new();
        let m = mover(policy, faults(faulty), Persist::detect().traced(&rec));
        let mut buf = vec![0x5Au8; len + off + 64];
        let hints = Hints { direction: dir, durable, ..Hints::default() };
        let r = m.fill(&mut buf[off..off + len], byte, hints);
        prop_assert!(buf[off..off + len].iter().all(|&b| b == byte));
        prop_assert!(buf[..off].iter().chain(&buf[off + len..]).all(|&b| b == 0x5A));
        prop_assert_eq!(r.cpu_bytes + r.engine_bytes, len, "{:?}", r);
        if durable {
            prop_assert_eq!(rec.first_non_durable(buf[off..].as_ptr() as usize, len), None, "{:?}", r);
        }
    }

    /// The answer is the first differing byte (or none), wherever the differences fall
    /// relative to the engine's and the CPU's parts.
    #[test]
    fn compares_find_the_first_difference(
        len in 1usize..600_000, first in any::<prop::sample::Index>(),
        second in any::<prop::sample::Index>(), differ: bool, twice: bool,
        policy in policies(), faulty: bool)
    {
        let m = mover(policy, faults(faulty), Persist::detect());
        let a = data(len, len as u64);
        let mut b = a.clone();
        let (i, j) = (first.index(len), second.index(len));
        if differ {
            b[i] ^= 0x10;
            if twice {
                b[j] ^= 0x01;
            }
        }
        let want = differ.then(|| if twice { i.min(j) } else { i });
        prop_assert_eq!(m.compare(&a, &b, Hints::default()).unwrap(), want);
    }
}

#[test]
fn the_engine_takes_its_part_of_large_fills_and_compares() {
    let m = mover(Policy::Engine, FaultPlan::default(), Persist::detect());
    let mut buf = vec![0u8; 1 << 20];
    let r = m.fill(&mut buf, 7, Hints::default());
    assert!(buf.iter().all(|&b| b == 7));
    assert_eq!(r.engine_bytes, 1 << 20, "{r:?}");
    let other = buf.clone();
    assert_eq!(m.compare(&buf, &other, Hints::default()).unwrap(), None);
    let s = m.stats();
    assert_eq!((s.fill_requests, s.compare_requests), (1, 1));
    assert_eq!(s.fill_engine_bytes, 1 << 20);
    assert_eq!(s.compare_engine_bytes, 1 << 20);
    assert!(m.compare(&buf, &buf[1..], Hints::default()).is_err());
}
