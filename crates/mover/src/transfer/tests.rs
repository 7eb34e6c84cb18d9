//! Where a copy's timing is filed.

use std::sync::Arc;

use switchyard_engine::{ThreadsConfig, ThreadsEngine};
use switchyard_media::Persist;

use crate::bandwidth::{bin, Bandwidth};
use crate::config::Thresholds;
use crate::{Config, Direction, Hints, Mover, Policy};

/// A split's two sides are filed under the bin of the whole split, which is where its share
/// reads the estimates. Filed under each side's own size (half the split), 1 MiB splits fed
/// the 512 KiB bin and left their own at the neutral prior: a tune split its 1 MiB writes on
/// that prior beside a measured engine rate, and measured them at 0.38× the CPU.
#[test]
fn a_splits_sides_are_filed_under_the_whole_splits_bin() {
    let mut cfg = Config::default();
    cfg.mover.policy = Policy::Auto;
    cfg.mover.thresholds = Thresholds::all(0);
    cfg.mover.split_min_bytes = 0;
    cfg.mover.split_share = 0.5;
    let persist = Persist::detect();
    let engine = ThreadsEngine::start(ThreadsConfig {
        pin: false,
        persist,
        ..ThreadsConfig::default()
    })
    .unwrap();
    let m = Mover::with_engine(&cfg, Arc::new(engine), persist);
    let len = 1 << 20;
    let src: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    let mut dst = vec![0u8; len];
    let prior = Bandwidth::default();
    let (prior, est) = (
        prior.of(Direction::FromSlow),
        m.split_bandwidth.of(Direction::FromSlow),
    );
    let (whole, half) = (bin(len), bin(len / 2));
    // An engine part the CPU takes back (its worker not yet started: other tests' threads
    // share the cores) is not sampled, so this copies until one was.
    let t = std::time::Instant::now();
    while est.engine[whole].get() == prior.engine[whole].get()
        && t.elapsed() < std::time::Duration::from_secs(30)
    {
        m.copy(&mut dst, &src, Hints::read()).unwrap();
        assert_eq!(dst, src);
    }
    let s = m.stats();
    assert!(s.split_requests > 0, "{s:?}");
    assert_ne!(est.cpu[whole].get(), prior.cpu[whole].get(), "{s:?}");
    assert_ne!(est.engine[whole].get(), prior.engine[whole].get(), "{s:?}");
    assert_eq!(est.cpu[half].get(), prior.cpu[half].get());
    assert_eq!(est.engine[half].get(), prior.engine[half].get());
}
