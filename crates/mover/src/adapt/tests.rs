//! Adaptation on simulated engines: trials, bands, swaps, starved bands and split estimates.

use super::*;
use crate::bandwidth::bin;

fn settings() -> Settings {
    Settings {
        epochs: true,
        thresholds: true,
        split: true,
        pace: AdaptationConfig::default(),
    }
}

// The default pace, which the tests count in.
const HOLD: u32 = 3;
const MAX_SHIFT: u32 = 3;
const EXPLORE: u32 = 32;
const EVIDENCE: u64 = 8;
const DEADBAND: f64 = 0.05;

#[test]
fn the_counts_are_the_default_pace() {
    let p = AdaptationConfig::default();
    assert_eq!(
        (p.hold, p.max_shift, p.explore, p.evidence, p.deadband),
        (HOLD, MAX_SHIFT, EXPLORE, EVIDENCE, DEADBAND)
    );
}

/// A profile's estimates (they seed the split estimates only).
fn profiled() -> Bandwidth {
    let bw = Bandwidth::default();
    for b in 0..BINS {
        for d in ADAPTED {
            bw.of(d).cpu[b].set(10.0);
            bw.of(d).engine[b].set(10.0);
        }
    }
    bw
}

/// Writes never offloaded; reads from 256 KiB.
fn tuned() -> Thresholds {
    let mut t = Thresholds::all(256 << 10);
    t.to_slow = Locality::uniform(NEVER, NEVER);
    t
}

fn read(a: &Adapt) -> usize {
    a.threshold(Direction::FromSlow, false, false)
}

/// One epoch after a finished trial in `band` of `dir`: `EVIDENCE` requests of 1 MiB on
/// each path, at `cpu` and `offload` bytes/ns.
fn trial(a: &Adapt, c: &Counters, dir: Direction, band: Band, cpu: f64, offload: f64) {
    let len = 1usize << 20;
    for _ in 0..EVIDENCE {
        a.record(dir, band, Arm::Cpu, len, (len as f64 / cpu) as u64);
        a.record(dir, band, Arm::Offload, len, (len as f64 / offload) as u64);
    }
    a.epoch(&profiled(), c);
}

fn moves(c: &Counters) -> (u64, u64) {
    let s = c.snapshot();
    (s.threshold_raised, s.threshold_lowered)
}

#[test]
fn shifts_double_halve_and_keep_never() {
    assert_eq!(shifted(256 << 10, 1), 512 << 10);
    assert_eq!(shifted(256 << 10, -2), 64 << 10);
    assert_eq!(shifted(32 << 10, -3), MIN_SAMPLED);
    assert_eq!(shifted(4096, -1), 4096);
    assert_eq!(shifted(NEVER, 2), NEVER);
    assert_eq!(shifted(NEVER, -1), TOP / 2);
    assert_eq!(shifted(NEVER, 0), NEVER);
}

#[test]
fn votes_need_hold_epochs_in_a_row() {
    let mut v = Vote::default();
    assert_eq!(v.cast(1, HOLD), 0);
    assert_eq!(v.cast(1, HOLD), 0);
    assert_eq!(v.cast(1, HOLD), 1);
    assert_eq!(v.cast(1, HOLD), 0, "the count starts over after a step");
    assert_eq!(v.cast(-1, HOLD), 0);
    assert_eq!(v.cast(1, HOLD), 0);
    assert_eq!(v.cast(0, HOLD), 0);
    assert_eq!(v.cast(1, HOLD), 0);
    assert_eq!(v.cast(1, HOLD), 0);
    assert_eq!(v.cast(1, HOLD), 1);
}

#[test]
fn bands_lie_within_a_factor_of_two_of_the_threshold() {
    let a = Adapt::new(&tuned(), [1; 3], &profiled(), settings());
    let r = |len| a.band(Direction::FromSlow, 256 << 10, len);
    assert_eq!(r((128 << 10) - 1), None);
    assert_eq!(r(128 << 10), Some(Band::Below));
    assert_eq!(r((256 << 10) - 1), Some(Band::Below));
    assert_eq!(r(256 << 10), Some(Band::Above));
    assert_eq!(r((512 << 10) - 1), Some(Band::Above));
    assert_eq!(r(512 << 10), None);
    // A "never" threshold is explored from where a lowered one would re-enter.
    assert_eq!(a.band(Direction::ToSlow, NEVER, TOP / 2), Some(Band::Below));
    assert_eq!(a.band(Direction::ToSlow, NEVER, TOP / 2 - 1), None);
    assert_eq!(a.band(Direction::Dram, 256 << 10, 256 << 10), None);
    let fixed = Adapt::new(
        &tuned(),
        [1; 3],
        &profiled(),
        Settings {
            thresholds: false,
            ..settings()
        },
    );
    assert_eq!(fixed.band(Direction::FromSlow, 256 << 10, 256 << 10), None);
}

/// Traffic alternating between the two bands explores each of them.
#[test]
fn alternating_bands_are_each_explored() {
    let a = Adapt::new(&tuned(), [1; 3], &profiled(), settings());
    let mut got = [0; 2];
    for i in 0..64 * EXPLORE {
        let band = if i % 2 == 0 { Band::Below } else { Band::Above };
        if a.explore(Some(band)).explored() {
            got[band as usize] += 1;
        }
    }
    assert_eq!(got, [32, 32]);
}

#[test]
fn one_request_in_explore_of_a_band_is_explored() {
    let a = Adapt::new(&tuned(), [1; 3], &profiled(), settings());
    let n = (0..10 * BURST * EXPLORE)
        .filter(|_| a.explore(Some(Band::Above)).explored())
        .count();
    assert_eq!(n, 10 * BURST as usize);
    assert!(!(0..2 * EXPLORE).any(|_| a.explore(None).explored()));
}

/// Explored requests come in runs of BURST consecutive requests of the band, the first of
/// each not timed (it finds the other path idle).
#[test]
fn explored_requests_come_in_runs_whose_first_is_not_timed() {
    let a = Adapt::new(&tuned(), [1; 3], &profiled(), settings());
    let got: Vec<Explore> = (0..2 * BURST * EXPLORE)
        .map(|_| a.explore(Some(Band::Below)))
        .collect();
    let runs: Vec<usize> = got
        .iter()
        .enumerate()
        .filter(|(_, e)| **e == Explore::Untimed)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(runs.len(), 2, "{got:?}");
    for start in runs {
        let run = &got[start..start + BURST as usize];
        assert!(run[1..].iter().all(|e| *e == Explore::Timed), "{run:?}");
        assert_ne!(got.get(start + BURST as usize), Some(&Explore::Timed));
    }
}

/// Paths that do as well as each other, exactly or within noise of ±3%, move nothing
/// (whatever the bandwidth estimates say: thresholds move on trials alone).
#[test]
fn paths_that_agree_move_nothing() {
    let a = Adapt::new(&tuned(), [1; 3], &profiled(), settings());
    let c = Counters::default();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut noise = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        1.0 + ((x % 61) as f64 - 30.0) / 1000.0
    };
    for i in 0..500 {
        let band = if i % 2 == 0 { Band::Below } else { Band::Above };
        trial(
            &a,
            &c,
            Direction::FromSlow,
            band,
            10.0 * noise(),
            10.0 * noise(),
        );
    }
    assert_eq!(a.in_effect(), tuned());
    assert_eq!(moves(&c), (0, 0));
}

/// A trial needs `EVIDENCE` samples of both paths: one path alone, however lopsided,
/// moves nothing.
#[test]
fn a_trial_needs_evidence_of_both_paths() {
    let a = Adapt::new(&tuned(), [1; 3], &profiled(), settings());
    let c = Counters::default();
    for _ in 0..100 {
        for _ in 0..EVIDENCE - 1 {
            a.record(Direction::FromSlow, Band::Above, Arm::Cpu, 1 << 20, 10);
        }
        for _ in 0..10 * EVIDENCE {
            a.record(
                Direction::FromSlow,
                Band::Above,
                Arm::Offload,
                1 << 20,
                1 << 30,
            );
        }
        a.epoch(&profiled(), &c);
        a.trials[1][Band::Above as usize][Arm::Cpu as usize].reset();
    }
    assert_eq!(a.in_effect(), tuned());
}

/// The CPU beats offloading above the read threshold: it rises one bin per HOLD trials up
/// to the fence, then one bin per 2 × HOLD trials up to the bound, counted; the bands and
/// the short cut follow it. When offloading wins again below it, it comes back down.
#[test]
fn a_cpu_faster_above_the_threshold_raises_it_in_bounded_steps() {
    let a = Adapt::new(&tuned(), [1; 3], &profiled(), settings());
    let c = Counters::default();
    for _ in 0..HOLD - 1 {
        trial(&a, &c, Direction::FromSlow, Band::Above, 10.0, 5.0);
    }
    assert_eq!(read(&a), 256 << 10, "nothing before HOLD trials");
    trial(&a, &c, Direction::FromSlow, Band::Above, 10.0, 5.0);
    assert_eq!(read(&a), 512 << 10);
    assert_eq!(
        a.cpu_below(Direction::FromSlow),
        256 << 10,
        "the band below"
    );
    assert_eq!(
        a.band(Direction::FromSlow, read(&a), 256 << 10),
        Some(Band::Below)
    );
    for _ in 0..(MAX_SHIFT - 1) * HOLD {
        trial(&a, &c, Direction::FromSlow, Band::Above, 10.0, 5.0);
    }
    assert_eq!(read(&a), (256 << 10) << MAX_SHIFT, "at the fence");
    for _ in 0..HOLD {
        trial(&a, &c, Direction::FromSlow, Band::Above, 10.0, 5.0);
    }
    assert_eq!(
        read(&a),
        (256 << 10) << MAX_SHIFT,
        "past it takes more evidence"
    );
    for _ in 0..HOLD {
        trial(&a, &c, Direction::FromSlow, Band::Above, 10.0, 5.0);
    }
    assert_eq!(read(&a), (256 << 10) << (MAX_SHIFT + 1));
    for _ in 0..200 {
        trial(&a, &c, Direction::FromSlow, Band::Above, 10.0, 5.0);
    }
    assert_eq!(read(&a), (256 << 10) << LOWEST, "bounded");
    assert_eq!(moves(&c), (LOWEST as u64, 0));
    assert_eq!(a.min_threshold(Direction::FromSlow), (256 << 10) << LOWEST);
    // Offloading wins below: back to the tuned threshold, and on down to the bound while
    // it keeps winning.
    for _ in 0..400 {
        trial(&a, &c, Direction::FromSlow, Band::Below, 5.0, 10.0);
        if a.in_effect() == tuned() {
            break;
        }
    }
    assert_eq!(a.in_effect(), tuned());
    assert_eq!(moves(&c), (LOWEST as u64, LOWEST as u64));
    for _ in 0..400 {
        trial(&a, &c, Direction::FromSlow, Band::Below, 5.0, 10.0);
    }
    assert_eq!(read(&a), MIN_SAMPLED, "down to the smallest sampled size");
}

/// Offloading beats the CPU below a "never" write threshold: it re-enters at the largest
/// bins and comes down step by step, to the smallest sampled size.
#[test]
fn an_offload_faster_below_lowers_a_never_threshold() {
    let a = Adapt::new(&tuned(), [1; 3], &profiled(), settings());
    let c = Counters::default();
    for _ in 0..HOLD {
        trial(&a, &c, Direction::ToSlow, Band::Below, 5.0, 10.0);
    }
    assert_eq!(a.threshold(Direction::ToSlow, false, false), TOP / 2);
    for _ in 0..200 {
        trial(&a, &c, Direction::ToSlow, Band::Below, 5.0, 10.0);
    }
    assert_eq!(a.threshold(Direction::ToSlow, true, true), MIN_SAMPLED);
    assert_eq!(read(&a), 256 << 10, "reads saw no trial");
}

/// The engine of a simulated machine: the CPU copies at 10 bytes/ns; offloaded requests
/// at `fast` from `crossing` up, at 6 below it.
fn simulated(len: usize, arm: Arm, crossing: usize, fast: f64) -> u64 {
    let rate = match arm {
        Arm::Cpu => 10.0,
        Arm::Offload if len >= crossing => fast,
        Arm::Offload => 6.0,
    };
    (len as f64 / rate) as u64
}

/// Steady traffic of `sizes` (in a pseudo-random order) through an adapting mover for
/// `epochs` epochs of 4,000 requests, timed on `simulated`'s machine as the mover times
/// them.
fn steady(
    a: &Adapt,
    c: &Counters,
    dir: Direction,
    sizes: &[usize],
    epochs: usize,
    crossing: usize,
    fast: f64,
) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..epochs {
        for _ in 0..4000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = sizes[((x >> 33) % sizes.len() as u64) as usize];
            if len < a.cpu_below(dir) {
                continue;
            }
            let t = a.threshold(dir, false, false);
            let band = a.band(dir, t, len);
            let usual = if len >= t { Arm::Offload } else { Arm::Cpu };
            let explore = a.explore(band);
            let arm = if explore.explored() {
                match usual {
                    Arm::Cpu => Arm::Offload,
                    Arm::Offload => Arm::Cpu,
                }
            } else {
                usual
            };
            if let Some(b) = band {
                if (arm != b.usual() && explore == Explore::Timed)
                    || (arm == b.usual() && a.sample_band())
                {
                    a.record(dir, b, arm, len, simulated(len, arm, crossing, fast));
                }
            }
        }
        a.epoch(&profiled(), c);
    }
}

/// A profile that says "never" in both directions while offloading wins from 64 KiB up
/// on this (simulated) machine: steady traffic of 64–512 KiB reads finds the offload
/// within a few hundred epochs (a few seconds of 20 ms epochs): the band below the
/// threshold is brought down to the traffic, its trials move the threshold there, and
/// from there bin by bin to within one bin of the crossing. Writes, which saw no traffic,
/// stay as tuned.
#[test]
fn a_wrong_never_profile_finds_the_offload_where_the_traffic_is() {
    let never = Thresholds::all(NEVER);
    let a = Adapt::new(&never, [1; 3], &profiled(), settings());
    let c = Counters::default();
    let crossing = 64 << 10;
    steady(
        &a,
        &c,
        Direction::FromSlow,
        &[64 << 10, 128 << 10, 256 << 10, 512 << 10],
        300,
        crossing,
        14.0,
    );
    let t = read(&a);
    assert!(
        (crossing / 2..=crossing * 2).contains(&t),
        "the read threshold ended at {t}, the crossing is at {crossing}: {:?}",
        c.snapshot()
    );
    assert_eq!(a.threshold(Direction::ToSlow, false, false), NEVER);
}

/// The same wrong profile on a machine where the CPU wins at every size: the probe finds
/// nothing to gain and the threshold stays "never" (nothing is offloaded but the explored
/// one request in EXPLORE of the traffic's band).
#[test]
fn a_never_profile_that_is_right_stays() {
    let never = Thresholds::all(NEVER);
    let a = Adapt::new(&never, [1; 3], &profiled(), settings());
    let c = Counters::default();
    steady(
        &a,
        &c,
        Direction::FromSlow,
        &[64 << 10, 128 << 10, 256 << 10],
        300,
        0,
        7.0,
    );
    assert_eq!(read(&a), NEVER);
    assert_eq!(moves(&c).1, 0);
}

/// Trials that flip between "raise" and "stay" never complete a vote: the threshold never
/// moves.
#[test]
fn flapping_never_oscillates_the_threshold() {
    let a = Adapt::new(&tuned(), [1; 3], &profiled(), settings());
    let c = Counters::default();
    for i in 0..200 {
        let cpu = if i % 2 == 0 { 10.0 } else { 5.0 };
        trial(&a, &c, Direction::FromSlow, Band::Above, cpu, 5.0);
    }
    for i in 0..300 {
        let cpu = if i % 3 == 2 { 5.0 } else { 10.0 };
        trial(&a, &c, Direction::FromSlow, Band::Above, cpu, 5.0);
    }
    assert_eq!(a.in_effect(), tuned());
    assert_eq!(moves(&c), (0, 0));
}

/// Requests below every threshold take the short cut to the CPU only when the mover
/// schedules; while thresholds adapt, the band below the smallest one is not short-cut.
#[test]
fn the_cpu_short_cut_is_below_the_explored_bands_and_only_when_scheduling() {
    let a = Adapt::new(&tuned(), [1; 3], &profiled(), settings());
    assert_eq!(a.cpu_below(Direction::FromSlow), 128 << 10);
    assert_eq!(a.cpu_below(Direction::ToSlow), TOP / 2);
    let unadapted = Adapt::new(
        &tuned(),
        [1; 3],
        &profiled(),
        Settings {
            thresholds: false,
            ..settings()
        },
    );
    assert_eq!(unadapted.cpu_below(Direction::FromSlow), 256 << 10);
    assert_eq!(unadapted.cpu_below(Direction::ToSlow), NEVER);
    let fixed = Adapt::new(
        &tuned(),
        [1; 3],
        &profiled(),
        Settings {
            epochs: false,
            ..settings()
        },
    );
    for d in [Direction::ToSlow, Direction::FromSlow, Direction::Dram] {
        assert_eq!(fixed.cpu_below(d), 0);
    }
}

/// The incident behind A/B trials, with its numbers: a tuned read threshold of 92 KiB whose
/// 64 KiB bin the profile's estimates put 5% on the offload side. Live estimates taken
/// while the engine's worker spun beside the caller (CPU 15–25% slower in the 32–256 KiB
/// bins), or from splits' engine sides running beside their CPU sides (engine 25% slower
/// at 64 KiB), made the old model lower or raise it a bin. Epochs with such estimates and
/// no trial move nothing.
#[test]
fn estimates_biased_like_a_spinning_worker_move_no_threshold() {
    let profile = Bandwidth::default();
    let cpu = [11.1, 11.4, 10.3, 11.6, 11.1, 9.9, 10.3, 10.5];
    let engine = [9.9, 11.0, 12.8, 13.1, 13.8, 12.5, 13.4, 13.8];
    for b in 0..BINS {
        profile.of(Direction::FromSlow).cpu[b].set(cpu[b]);
        profile.of(Direction::FromSlow).engine[b].set(engine[b]);
    }
    profile.of(Direction::FromSlow).startup_ns.set(753.0);
    let mut t = tuned();
    t.from_slow = Locality::uniform(92 << 10, 80 << 10);
    let a = Adapt::new(&t, [1; 3], &profile, settings());
    let c = Counters::default();
    let spinning = Bandwidth::default();
    spinning.copy_from(&profile);
    for (b, v) in [(1, 9.0), (2, 8.5), (3, 8.4)] {
        spinning.of(Direction::FromSlow).cpu[b].set(v);
    }
    let beside = Bandwidth::default();
    beside.copy_from(&profile);
    beside.of(Direction::FromSlow).engine[2].set(9.6);
    for _ in 0..50 {
        a.epoch(&spinning, &c);
    }
    for _ in 0..50 {
        a.epoch(&beside, &c);
    }
    assert_eq!(a.in_effect(), t);
    assert_eq!(moves(&c), (0, 0));
}

#[test]
fn split_estimates_follow_live_ones_in_bounded_steps() {
    let prior = profiled();
    let a = Adapt::new(&tuned(), [1; 3], &prior, settings());
    let c = Counters::default();
    let live = profiled();
    let b = bin(1 << 20);
    live.of(Direction::FromSlow).engine[b].set(20.0);
    let epochs = |n: u32| (0..n).for_each(|_| a.epoch(&live, &c));
    epochs(HOLD);
    let e = a.split_estimates().of(Direction::FromSlow).engine[b].get();
    assert!((e - 12.5).abs() < 1e-9, "one step of 25%: {e}");
    epochs(10 * HOLD);
    let e = a.split_estimates().of(Direction::FromSlow).engine[b].get();
    assert!((e - 20.0).abs() <= DEADBAND * e, "converged: {e}");
    assert!(c.snapshot().split_nudges >= 3);
    let before = a
        .split_estimates()
        .engine_share(Direction::FromSlow, 1 << 20, 4096);
    epochs(100);
    let after = a
        .split_estimates()
        .engine_share(Direction::FromSlow, 1 << 20, 4096);
    assert_eq!(before, after, "settled");
    assert_eq!(a.in_effect(), tuned(), "estimates move no threshold");
}

/// Epochs of steady 64–448 KiB reads (offloading wins from 64 KiB) until the read threshold,
/// tuned at 1 MiB, is at 256 KiB or below; `None` if not within 100.
fn epochs_to_come_down(depths: [usize; 3]) -> Option<usize> {
    let a = Adapt::new(&Thresholds::all(1 << 20), depths, &profiled(), settings());
    let c = Counters::default();
    let sizes = [64 << 10, 128 << 10, 256 << 10, 448 << 10];
    (1..=100).find(|_| {
        steady(&a, &c, Direction::FromSlow, &sizes, 1, 64 << 10, 14.0);
        read(&a) <= 256 << 10
    })
}

/// A profile whose read threshold is 1 MiB with the tune undecided from 256 KiB (the paths
/// tied there when it ran), on traffic below 1 MiB where offloading wins: the first trial
/// tests the whole undecided range and moves the threshold to its floor, several epochs
/// sooner than waiting for the band just below 1 MiB to starve and then probing.
#[test]
fn trials_start_over_the_range_the_tune_left_undecided() {
    let undecided = [Undecided {
        direction: "from_slow".into(),
        aligned: true,
        from: 256 << 10,
        to: 1 << 20,
    }];
    let depths = undecided_depths(&undecided);
    assert_eq!(depths[Direction::FromSlow.index()], 2);
    assert_eq!(depths[Direction::ToSlow.index()], 1);
    let with = epochs_to_come_down(depths).expect("came down");
    let without = epochs_to_come_down([1; 3]).expect("came down by probing");
    assert!(
        with <= HOLD as usize + 1 && with + 3 <= without,
        "{with} epochs, {without} without the range"
    );
}

/// A quick profile's writes: 4 MiB for aligned copies, 728 KiB for unaligned ones, on steady
/// aligned 64–448 KiB writes where offloading wins from 64 KiB. The probe must count the
/// traffic's distance from the aligned threshold it is judged against: counted from the
/// smallest threshold (the unaligned one), the band was brought down to 364 KiB below 728
/// KiB, which the aligned band below 4 MiB never reached, and no trial ever ran (`bench mix
/// --grid` measured such a profile at 0.79× the grid's best on bulk writes).
#[test]
fn the_probe_counts_from_the_threshold_of_the_traffic_s_own_class() {
    let mut t = Thresholds::all(NEVER);
    t.to_slow = Locality {
        local_aligned: 4 << 20,
        local_unaligned: 728 << 10,
        remote_aligned: 4 << 20,
        remote_unaligned: 728 << 10,
    };
    let a = Adapt::new(&t, [1; 3], &profiled(), settings());
    let c = Counters::default();
    let crossing = 64 << 10;
    let sizes = [64 << 10, 128 << 10, 256 << 10, 448 << 10];
    steady(&a, &c, Direction::ToSlow, &sizes, 300, crossing, 14.0);
    let w = a.threshold(Direction::ToSlow, false, false);
    assert!(
        (crossing / 2..=crossing * 2).contains(&w),
        "the aligned write threshold ended at {w}, the crossing is at {crossing}: {:?}",
        c.snapshot()
    );
}
