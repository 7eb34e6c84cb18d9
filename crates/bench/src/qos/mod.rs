//! `switchyard bench qos`: the channel manager (EasyIO §6.4.3, Fig. 12) in one run.
//!
//! A latency tenant serves 64 KiB reads from slow memory with Poisson arrivals (a web server;
//! each latency counts from the request's arrival, so time spent behind a late request is
//! counted, as a client would see it) beside a bulk tenant that copies 2 MiB every
//! `--bulk-period-us` (a garbage collector), on a 2-channel engine with every copy from
//! 64 KiB offloaded. Modes, in rotated rounds:
//!
//! - `idle`: the latency tenant alone (the baseline of every ratio);
//! - `idle again`: the same, a second time in each round: the A/A control. Its ratio to
//!   `idle` is how far the host's noise alone moves a ratio (on a VM whose sleeping vCPUs
//!   wake late, an idle tenant's p99 moved from 30 µs to milliseconds between slices);
//! - `shared`: both tenants on one channel, no manager (head-of-line blocking, EasyIO Fig. 4);
//! - `separate`: each class on its own channel, no throttling;
//! - `cpu-throttle`: separate channels, and the bulk tenant's thread limited to
//!   `--cpu-quota` of a core by a cgroup (v1 `cpu` controller; skipped where it cannot be
//!   written): its copies run on the engine, so this throttles almost nothing;
//! - `engine-throttle`: separate channels, and the controller steering the bulk channel's
//!   budget to keep the latency tenant's p99 under the objective;
//! - `budget N`: separate channels under a fixed budget of N MiB/s, for the curve of the
//!   latency tenant's p99 against the budget.
//!
//! Each mode reports the latency tenant's p50, p99 and max, their ratios to `idle` in the same
//! round (medians over rounds), the bulk tenant's GiB/s, and the process's CPU seconds per GiB
//! moved by both. In `separate` and `engine-throttle` the bulk tenant then copies back to back
//! for a tail after the latency tenant's last request (module `recovery`): how many epochs
//! the throttled bulk tenant takes to reach 90% of its unthrottled rate.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use switchyard_media::Region;
use switchyard_mover::config::{TenantConfig, Thresholds};
use switchyard_mover::lab::{rotated, DramBuffer};
use switchyard_mover::{Config, Hints, Mover};

use crate::cpu_time;
use crate::measure::{emit, median, scratch_dir, scratch_region, Setup};

mod cpu;
mod recovery;

use cpu::{CpuLatency, CpuQuota};

use recovery::{Tail, PIECE, TAIL_EPOCHS};

/// `bench qos` options.
#[derive(Args)]
pub struct QosArgs {
    /// Directory for the scratch region (default /dev/shm when it exists).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// About 30 s: 20 rounds per mode, three budgets on the curve.
    #[arg(long)]
    quick: bool,
    /// Print one JSON record per mode and a summary record instead of the table.
    #[arg(long)]
    json: bool,
    /// The latency tenant's requests per second (Poisson arrivals).
    #[arg(long, default_value_t = 5000.0)]
    rate: f64,
    /// The bulk tenant copies 2 MiB every this many µs (back to back when a copy takes longer).
    #[arg(long, default_value_t = 250)]
    bulk_period_us: u64,
    /// The latency objective, p99 in µs [default: 1.1 × the median p99 of the idle slices so
    /// far: seven calibration slices as long as the rounds' (after two thrown away), then
    /// each round's `idle` and `idle again`].
    #[arg(long)]
    objective_us: Option<f64>,
    /// Share of a core the bulk tenant's thread gets in `cpu-throttle`.
    #[arg(long, default_value_t = 0.2)]
    cpu_quota: f64,
    /// Rounds (default 60; 20 with --quick). Many short slices rather than a few long ones:
    /// this VM stalls for milliseconds at random, and a stall sets the max of the slice it
    /// hits; the median over rounds of each mode's ratio to `idle` passes over the hit ones
    /// (200 ms slices were hit in half the rounds on a bad day, 50 ms ones rarely).
    #[arg(long)]
    rounds: Option<usize>,
    /// Milliseconds each mode is measured per round.
    #[arg(long, default_value_t = 50)]
    ms: u64,
    /// Let idle CPUs enter their idle states as they would (by default the run holds the
    /// kernel's CPU latency request, /dev/cpu_dma_latency, at 0 µs, as cyclictest does).
    #[arg(long)]
    deep_idle: bool,
    /// Milliseconds each slice runs before it is measured: every mode starts a fresh mover,
    /// and the controller brings the budget down from the ceiling at first (its
    /// convergence, not its steady state).
    #[arg(long, default_value_t = 100)]
    warmup_ms: u64,
}

/// Bytes of a latency request and of a bulk copy.
const SMALL: usize = 64 << 10;
const BULK: usize = 2 << 20;
const WEB: u16 = 1;
const GC: u16 = 2;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Idle,
    IdleAgain,
    Shared,
    Separate,
    CpuThrottle,
    EngineThrottle,
    Budget(f64),
}

impl Mode {
    fn name(self) -> String {
        match self {
            Mode::Idle => "idle".into(),
            Mode::IdleAgain => "idle again".into(),
            Mode::Shared => "shared".into(),
            Mode::Separate => "separate".into(),
            Mode::CpuThrottle => "cpu-throttle".into(),
            Mode::EngineThrottle => "engine-throttle".into(),
            Mode::Budget(b) => format!("budget {b:.0}"),
        }
    }
}

/// One slice of one mode.
#[derive(Debug, Clone, Default)]
struct Slice {
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    bulk_gib_s: f64,
    cpu_s_per_gib: f64,
    /// The bulk tenant's copies after the latency tenant stopped (`separate` and
    /// `engine-throttle`).
    tail: Option<Tail>,
    /// The bulk budget when the latency tenant stopped, MiB/s (`None`: lifted).
    budget_at_stop: Option<f64>,
}

/// One mode over the rounds.
#[derive(Debug, Clone, Serialize)]
struct Record {
    bench: &'static str,
    mode: String,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    /// Medians over rounds of this mode ÷ `idle` in the same round.
    p50_vs_idle: f64,
    p99_vs_idle: f64,
    max_vs_idle: f64,
    bulk_gib_s: f64,
    cpu_s_per_gib: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Summary {
    summary: bool,
    bench: &'static str,
    /// The engine-throttle slices' objective, p99 µs (median over rounds).
    objective_us: f64,
    rate: f64,
    bulk_period_us: u64,
    /// Why `cpu-throttle` did not run, if it did not.
    cpu_throttle_skipped: Option<String>,
    /// Whether idle CPUs were kept out of deep idle states (`/dev/cpu_dma_latency` held at
    /// 0), and why not where they were not.
    cpu_latency_held: bool,
    cpu_latency_not_held: Option<String>,
    /// Once the latency tenant stops: epochs (`epoch_us` each) until the engine-throttled
    /// bulk tenant moves at 90% of its unthrottled rate (`separate`'s tail in the same round)
    /// over two epochs, each round's (`None`: not within the tail), and their median (a round
    /// that never recovered counts as later than any; `None` when the median round never did).
    recovery_epochs: Vec<Option<usize>>,
    recovery_epochs_median: Option<f64>,
    /// From that epoch to the end of the tail, its rate ÷ the unthrottled rate (median over
    /// the rounds that recovered).
    recovered_rate_vs_unthrottled: Option<f64>,
    /// The budget when the latency tenant stopped, per round, MiB/s (`None`: lifted).
    budget_at_stop_mib_s: Vec<Option<f64>>,
    epoch_us: u64,
    /// Each slice ran this long before it was measured.
    warmup_ms: u64,
    setup: Setup,
}

/// What the slices share.
struct Bench<'a> {
    region: &'a Region,
    span: usize,
    engine1: std::sync::Arc<dyn switchyard_engine::Engine>,
    engine2: std::sync::Arc<dyn switchyard_engine::Engine>,
    base: Config,
    rate: f64,
    bulk_period: Duration,
    quota: Option<CpuQuota>,
    /// Each slice runs this long before it is measured.
    warmup: Duration,
}

impl Bench<'_> {
    /// The mover for `mode` (made afresh per slice, so its budget starts from its own state).
    fn mover(&self, mode: Mode, objective_us: f64) -> Mover {
        let mut c = self.base.clone();
        if mode == Mode::Shared {
            return Mover::with_engine(&c, self.engine1.clone(), c.persist());
        }
        let bound_us = if mode == Mode::EngineThrottle {
            objective_us
        } else {
            1e12
        };
        c.qos.tenants = vec![
            TenantConfig {
                reported: true,
                ..TenantConfig::latency("web", bound_us)
            },
            TenantConfig::bulk("gc"),
        ];
        if let Mode::Budget(b) = mode {
            c.qos.fixed_mib_s = b;
        }
        Mover::with_engine(&c, self.engine2.clone(), c.persist())
    }

    /// Runs `mode` for `dur`.
    fn slice(&self, mode: Mode, objective_us: f64, dur: Duration) -> Slice {
        let m = self.mover(mode, objective_us);
        let half = self.span / 2;
        let stop = AtomicBool::new(false);
        let web_dram = DramBuffer::new(SMALL, 0);
        let gc_dram = DramBuffer::new(BULK, 0);
        let stopped_at = std::sync::OnceLock::new();
        let tail_wanted = matches!(mode, Mode::Separate | Mode::EngineThrottle);
        let epoch = Duration::from_micros(self.base.qos.epoch_us);
        let cpu0 = cpu_time::process();
        let begin = Instant::now();
        let measured_from = begin + self.warmup;
        let (latencies, (bulk_bytes, all_bulk_bytes, tail), budget_at_stop) =
            std::thread::scope(|s| {
                let bulk = (!matches!(mode, Mode::Idle | Mode::IdleAgain)).then(|| {
                    let (m, stop, gc_dram, stopped_at) = (&m, &stop, &gc_dram, &stopped_at);
                    let quota = self.quota.as_ref().filter(|_| mode == Mode::CpuThrottle);
                    s.spawn(move || {
                        if let Some(q) = quota {
                            q.place_me(true);
                        }
                        let (mut bytes, mut all) = (0u64, 0u64);
                        let mut tail = Tail::default();
                        let mut at = 0usize;
                        let mut next = Instant::now();
                        while !stop.load(Ordering::Relaxed) {
                            let off = half + at;
                            at = (at + BULK) % (half - BULK).max(BULK);
                            self.read(m, gc_dram, off, BULK, GC);
                            all += BULK as u64;
                            match stopped_at.get() {
                                None if Instant::now() >= measured_from => bytes += BULK as u64,
                                None => {}
                                t0 => tail.ended(t0.copied(), BULK),
                            }
                            next += self.bulk_period;
                            let now = Instant::now();
                            if next > now {
                                std::thread::sleep(next - now);
                            } else {
                                next = now;
                            }
                        }
                        // The tail: back to back, until TAIL_EPOCHS after the stop.
                        let t0 = stopped_at.get().copied();
                        while tail_wanted && t0.is_some_and(|t0| t0.elapsed() < epoch * TAIL_EPOCHS)
                        {
                            let off = half + at;
                            at = (at + PIECE) % (half - PIECE).max(PIECE);
                            self.read(m, gc_dram, off, PIECE, GC);
                            tail.ended(t0, PIECE);
                        }
                        if let Some(q) = quota {
                            q.place_me(false);
                        }
                        (bytes, all, tail)
                    })
                });
                let lat = self.web(&m, &web_dram, half, dur);
                let _ = stopped_at.set(Instant::now());
                let budget = m.tenants().get(1).and_then(|t| t.budget_mib_s);
                stop.store(true, Ordering::Relaxed);
                let bulk = bulk.map_or_else(Default::default, |h| h.join().expect("bulk thread"));
                (lat, bulk, budget)
            });
        let wall = (stopped_at.get().copied())
            .map_or(measured_from.elapsed(), |t0| t0 - measured_from)
            .as_secs_f64();
        let cpu = (cpu_time::process() - cpu0).as_secs_f64();
        let mut lat = latencies;
        lat.sort_unstable();
        // CPU over the whole slice, so bytes over it too.
        let moved = (all_bulk_bytes + (lat.len() * SMALL) as u64) as f64 / (1u64 << 30) as f64;
        Slice {
            p50_us: percentile_us(&lat, 0.5),
            p99_us: percentile_us(&lat, 0.99),
            max_us: lat.last().copied().unwrap_or(0) as f64 / 1000.0,
            bulk_gib_s: bulk_bytes as f64 / (1u64 << 30) as f64 / wall,
            cpu_s_per_gib: cpu / moved.max(1e-12),
            tail: tail_wanted.then_some(tail),
            budget_at_stop,
        }
    }

    /// Reads `len` bytes at `off` of the region into the start of `dram` for `tenant`.
    ///
    /// # Panics
    ///
    /// If the read would leave the region or the buffer.
    fn read(&self, m: &Mover, dram: &DramBuffer, off: usize, len: usize, tenant: u16) {
        assert!(
            off + len <= self.span && len <= dram.len(),
            "a read past its buffers"
        );
        // SAFETY: checked above: both ranges lie inside their buffers; each tenant's thread
        // has its own DRAM buffer and reads only.
        unsafe {
            m.copy_raw(
                dram.at(0),
                self.region.as_mut_ptr().add(off),
                len,
                Hints {
                    tenant,
                    ..Hints::read()
                },
            );
        }
    }

    /// The latency tenant: Poisson arrivals at `rate` for the warm-up and then `dur`, each a
    /// 64 KiB read at a pseudo-random place in the first `span` bytes; latencies from arrival,
    /// ns, of the arrivals after the warm-up.
    fn web(&self, m: &Mover, dram: &DramBuffer, span: usize, dur: Duration) -> Vec<u64> {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next_u = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng >> 11) as f64 / (1u64 << 53) as f64
        };
        let begin = Instant::now();
        let mut arrival = begin;
        let mut out = Vec::with_capacity((self.rate * dur.as_secs_f64() * 1.2) as usize);
        let slots = (span / SMALL).max(1);
        while arrival - begin < self.warmup + dur {
            let gap = -(1.0 - next_u()).ln() / self.rate;
            arrival += Duration::from_secs_f64(gap);
            // Sleep while far from the arrival (with a 1 ns timer slack), then spin.
            loop {
                let now = Instant::now();
                if now >= arrival {
                    break;
                }
                let left = arrival - now;
                if left > Duration::from_micros(80) {
                    std::thread::sleep(left - Duration::from_micros(60));
                } else {
                    std::hint::spin_loop();
                }
            }
            let off = (next_u() * slots as f64) as usize % slots * SMALL;
            self.read(m, dram, off, SMALL, WEB);
            let ns = arrival.elapsed().as_nanos() as u64;
            m.report_latency(WEB, ns);
            if arrival - begin >= self.warmup {
                out.push(ns);
            }
        }
        out
    }
}

/// Runs the benchmark.
pub fn run(a: &QosArgs) -> anyhow::Result<()> {
    let rounds = a.rounds.unwrap_or(if a.quick { 20 } else { 60 }).max(1);
    // SAFETY: PR_SET_TIMERSLACK only changes how late this thread's (the latency tenant's)
    // timed sleeps may end: 1 ns, so arrivals are served on time.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
    let dur = Duration::from_millis(a.ms.max(1));
    let [base, one, two] = configs();
    let dir = scratch_dir(&a.dir);
    let (_scratch, region) = scratch_region(&dir, "qos", 256 << 20, base.persist())?;
    // SAFETY: the region is mapped for its length and this bench is its only user.
    unsafe { std::ptr::write_bytes(region.as_mut_ptr(), 1, region.len()) };
    let (_cpu_latency, cpu_latency_not_held) = hold_cpu_latency(a.deep_idle);
    let (quota, cpu_throttle_skipped) = match CpuQuota::new(a.cpu_quota) {
        Ok(q) => (Some(q), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    let b = Bench {
        region: &region,
        span: region.len(),
        engine1: switchyard_mover::start_engine(&one)?.engine,
        engine2: switchyard_mover::start_engine(&two)?.engine,
        base,
        rate: a.rate,
        bulk_period: Duration::from_micros(a.bulk_period_us),
        quota,
        warmup: Duration::from_millis(a.warmup_ms),
    };
    // Idle p99s so far (without --objective-us): the default objective is 1.1 × their
    // median, taken afresh for each engine-throttle slice, so it follows the idle tenant as
    // this run measures it (on this VM the idle p99 drifted by a third between the
    // calibration and the rounds, and a fixed objective then held 1.4× the rounds' idle).
    // The controller judges the last ≤ 1,024 samples, the rounds each 50 ms slice: it held
    // the slices' p99 at 1.0–1.13× its objective, so 1.2× (the default before) put a
    // throttled p99 at 1.15–1.33× idle.
    let (mut idle_p99, calibration) = if a.objective_us.is_none() {
        calibrate(&b, dur)
    } else {
        (Vec::new(), String::new())
    };
    let objective = |idle: &[f64]| {
        a.objective_us
            .unwrap_or_else(|| 1.1 * median(&mut idle.to_vec()))
    };
    let first_objective = objective(&idle_p99);
    let modes = modes(a.quick, b.quota.is_some());
    let bar = indicatif::ProgressBar::new((modes.len() * rounds) as u64);
    announce(
        &dir,
        rounds,
        dur,
        first_objective,
        &calibration,
        &cpu_latency_not_held,
    );
    let mut objectives = Vec::new();
    let Ok(got) = rotated(modes.len(), rounds, |i| {
        bar.inc(1);
        let o = objective(&idle_p99);
        if modes[i] == Mode::EngineThrottle {
            objectives.push(o);
        }
        let slice = b.slice(modes[i], o, dur);
        if matches!(modes[i], Mode::Idle | Mode::IdleAgain) && a.objective_us.is_none() {
            idle_p99.push(slice.p99_us);
        }
        Ok::<_, std::convert::Infallible>(slice)
    });
    bar.finish_and_clear();
    let records = records(&modes, &got);
    let epoch_us = b.base.qos.epoch_us;
    let (epochs, mut after, budgets) = recoveries(&modes, &got, epoch_us);
    let summary = Summary {
        summary: true,
        bench: "qos",
        objective_us: median(&mut objectives),
        rate: a.rate,
        bulk_period_us: a.bulk_period_us,
        cpu_throttle_skipped,
        cpu_latency_held: cpu_latency_not_held.is_none(),
        cpu_latency_not_held: cpu_latency_not_held.clone(),
        recovery_epochs_median: recovery::median_epochs(&epochs),
        recovery_epochs: epochs,
        recovered_rate_vs_unthrottled: (!after.is_empty()).then(|| median(&mut after)),
        budget_at_stop_mib_s: budgets,
        epoch_us,
        warmup_ms: a.warmup_ms,
        setup: Setup::now(&two, &region, a.quick),
    };
    emit(a.json, &records, &summary, print_table)
}

/// The configuration every mode starts from (every copy of [`SMALL`] or more on the engine,
/// no adapting), and it with an engine of one channel and of two.
fn configs() -> [Config; 3] {
    let mut base = Config::default();
    base.mover.thresholds = Thresholds::all(SMALL);
    base.mover.adapt = false;
    let mut two = base.clone();
    two.engine.channels = 2;
    let mut one = base.clone();
    one.engine.channels = 1;
    [base, one, two]
}

/// Says on standard error what is measured, where, and against which objective.
fn announce(
    dir: &std::path::Path,
    rounds: usize,
    dur: Duration,
    first_objective: f64,
    calibration: &str,
    cpu_latency_not_held: &Option<String>,
) {
    eprintln!(
        "scratch region in {}; {rounds} rounds × {} ms per mode; latency objective p99 ≤ \
         {first_objective:.1} µs{calibration}; idle CPUs {}",
        dir.display(),
        dur.as_millis(),
        cpu_latency_not_held.as_ref().map_or(
            "poll (CPU latency request held at 0 µs)".to_string(),
            |why| format!("may enter deep idle states ({why})")
        )
    );
}

/// After the latency tenant stops, per round: the epochs the engine-throttled bulk tenant
/// took to reach 90% of its unthrottled rate, the share of that rate it ran at then, and its
/// budget at the stop.
fn recoveries(
    modes: &[Mode],
    got: &[Vec<Slice>],
    epoch_us: u64,
) -> (Vec<Option<usize>>, Vec<f64>, Vec<Option<f64>>) {
    let at = |m: Mode| modes.iter().position(|&x| x == m).expect("always run");
    let pairs = got[at(Mode::EngineThrottle)]
        .iter()
        .zip(&got[at(Mode::Separate)]);
    let recovered: Vec<Option<(usize, f64)>> = pairs
        .clone()
        .map(|(throttled, free)| {
            let (t, f) = (throttled.tail.as_ref()?, free.tail.as_ref()?);
            t.recovered(epoch_us as f64, f.rate(), 0.9)
        })
        .collect();
    let epochs: Vec<Option<usize>> = recovered.iter().map(|r| r.map(|r| r.0)).collect();
    let after: Vec<f64> = recovered.iter().flatten().map(|r| r.1).collect();
    let budgets = pairs.map(|(t, _)| t.budget_at_stop).collect();
    (epochs, after, budgets)
}

/// The CPU latency request held (none with `deep_idle`, or where it could not be), and why
/// it is not.
fn hold_cpu_latency(deep_idle: bool) -> (Option<CpuLatency>, Option<String>) {
    if deep_idle {
        (None, Some("--deep-idle".to_string()))
    } else {
        match CpuLatency::hold() {
            Ok(h) => (Some(h), None),
            Err(e) => (None, Some(format!("{e:#}"))),
        }
    }
}

/// The modes a run measures: the CPU throttle only where its cgroup could be made.
fn modes(quick: bool, cpu_throttle: bool) -> Vec<Mode> {
    let budgets: &[f64] = if quick {
        &[512.0, 2048.0, 8192.0]
    } else {
        &[256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0]
    };
    let mut modes = vec![Mode::Idle, Mode::IdleAgain, Mode::Shared, Mode::Separate];
    if cpu_throttle {
        modes.push(Mode::CpuThrottle);
    }
    modes.push(Mode::EngineThrottle);
    modes.extend(budgets.iter().map(|&x| Mode::Budget(x)));
    modes
}

/// Idle p99s of seven slices as long as the rounds', and how they calibrated the objective.
fn calibrate(b: &Bench, dur: Duration) -> (Vec<f64>, String) {
    // Seven idle slices as long as the rounds' (a p99 of fewer samples is lower: 200 ms
    // calibration slices put the objective at 1.6× the p99 of 50 ms idle slices), after
    // two thrown away (right after start-up a slice measured from 26 µs to 772 µs). The
    // VM's stalls only ever lengthen a slice's tail; the median passes over them.
    let idle_p99: Vec<f64> = (0..9)
        .map(|_| b.slice(Mode::Idle, 1e12, dur).p99_us)
        .skip(2)
        .collect();
    let calibration = format!(
        " (1.1 × the median of the idle p99s so far; calibrated on {})",
        idle_p99
            .iter()
            .map(|p| format!("{p:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    (idle_p99, calibration)
}

/// Each mode's record: medians over rounds, and medians of the ratios to the same round's
/// idle slice.
fn records(modes: &[Mode], got: &[Vec<Slice>]) -> Vec<Record> {
    modes
        .iter()
        .enumerate()
        .map(|(i, mode)| {
            let med =
                |f: &dyn Fn(&Slice) -> f64| median(&mut got[i].iter().map(f).collect::<Vec<_>>());
            let vs = |f: &dyn Fn(&Slice) -> f64| {
                median(
                    &mut got[i]
                        .iter()
                        .zip(&got[0])
                        .map(|(x, idle)| f(x) / f(idle).max(1e-9))
                        .collect::<Vec<_>>(),
                )
            };
            Record {
                bench: "qos",
                mode: mode.name(),
                p50_us: med(&|s| s.p50_us),
                p99_us: med(&|s| s.p99_us),
                max_us: med(&|s| s.max_us),
                p50_vs_idle: vs(&|s| s.p50_us),
                p99_vs_idle: vs(&|s| s.p99_us),
                max_vs_idle: vs(&|s| s.max_us),
                bulk_gib_s: med(&|s| s.bulk_gib_s),
                cpu_s_per_gib: med(&|s| s.cpu_s_per_gib),
            }
        })
        .collect()
}

fn print_table(records: &[Record], s: &Summary) {
    println!(
        "{:<16} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9}",
        "mode",
        "p50 µs",
        "p99 µs",
        "max µs",
        "p50÷idle",
        "p99÷idle",
        "max÷idle",
        "bulk GiB/s",
        "CPU s/GiB"
    );
    for r in records {
        println!(
            "{:<16} {:>8.1} {:>8.1} {:>9.1} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>9.3}",
            r.mode,
            r.p50_us,
            r.p99_us,
            r.max_us,
            r.p50_vs_idle,
            r.p99_vs_idle,
            r.max_vs_idle,
            r.bulk_gib_s,
            r.cpu_s_per_gib
        );
    }
    println!(
        "(latency tenant: 64 KiB reads, {:.0}/s Poisson, latency from arrival; bulk tenant: 2 MiB \
         every {} µs; ratios are medians of per-round ratios to idle; `idle again` is the \
         latency tenant alone a second time, the A/A control: a ratio within its distance from 1 \
         is noise)",
        s.rate, s.bulk_period_us
    );
    println!(
        "latency objective (engine-throttle): p99 ≤ {:.1} µs (median over rounds)",
        s.objective_us
    );
    let rounds: Vec<String> = (s.recovery_epochs.iter())
        .zip(&s.budget_at_stop_mib_s)
        .map(|(r, b)| {
            let r = r.map_or("never".into(), |r| r.to_string());
            let b = b.map_or("lifted".into(), |b| format!("{b:.0} MiB/s"));
            format!("{r} (budget {b})")
        })
        .collect();
    println!(
        "latency tenant stops: the engine-throttled bulk tenant reaches 90% of its unthrottled \
         rate after {} epochs of {} µs (median; per round: {}), then runs at {} of it",
        s.recovery_epochs_median
            .map_or(format!("more than {TAIL_EPOCHS}"), |e| format!("{e:.0}")),
        s.epoch_us,
        rounds.join(", "),
        s.recovered_rate_vs_unthrottled
            .map_or("-".into(), |r| format!("{r:.2}"))
    );
    if let Some(why) = &s.cpu_latency_not_held {
        println!("idle CPUs were free to enter deep idle states: {why}");
    }
    if let Some(why) = &s.cpu_throttle_skipped {
        println!("cpu-throttle skipped: {why}");
    }
}

/// The `p` quantile (0 < p ≤ 1) of `lat` (ns, sorted), in µs; 0 when there is none.
fn percentile_us(lat: &[u64], p: f64) -> f64 {
    let i = ((p * lat.len() as f64).ceil() as usize).clamp(1, lat.len().max(1)) - 1;
    lat.get(i).copied().unwrap_or(0) as f64 / 1000.0
}
