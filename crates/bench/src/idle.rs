//! `switchyard bench idle`: CPU an idle engine costs.
//!
//! Runs a burst of engine copies (so every worker has spun and parked at least once), waits for
//! the spin window to pass, then measures process CPU time over the idle period.

use std::time::{Duration, Instant};

use clap::Args;
use switchyard_mover::{Config, Hints, Mover, Policy};

use crate::cpu_time;
use switchyard_options::MoverArgs;

/// `bench idle` options.
#[derive(Args)]
pub struct IdleArgs {
    #[command(flatten)]
    mover: MoverArgs,
    /// Length of the idle measurement, seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
}

/// Runs the measurement.
pub fn run(a: &IdleArgs) -> anyhow::Result<()> {
    let mut cfg: Config = a.mover.load_config()?.mover;
    cfg.mover.policy = Policy::Engine;
    let m = Mover::start(&cfg)?;
    let src = vec![3u8; 1 << 20];
    let mut dst = vec![0u8; 1 << 20];
    for _ in 0..200 {
        m.copy(&mut dst, &src, Hints::write())?;
    }
    std::thread::sleep(Duration::from_micros(cfg.engine.spin_us * 4) + Duration::from_millis(50));
    let (c0, t0) = (cpu_time::process(), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(a.seconds));
    let (cpu, wall) = (cpu_time::process() - c0, t0.elapsed());
    let info = m.engine().info();
    println!(
        "idle engine ({} × {} channel): {:.3} ms CPU over {:.2} s = {:.3}% of one core",
        info.name,
        info.channels,
        cpu.as_secs_f64() * 1e3,
        wall.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64()
    );
    Ok(())
}
