//! How `bench copy` prints what it measured: JSON lines, or the table of rates and latencies,
//! the table of CPU cost per GiB, and the summary. The engine's column is labelled with the
//! engine's name (`threads`, `dsa`, or `dsa-model` for the DSA engine on its device model), so
//! no figure reads as another engine's.

use std::fmt::Write;

use super::{find, sched_vs_best, Record, Summary};
use switchyard_options::size;

/// The records as JSON lines and the summary last (`json`), or the tables and the summary.
pub(super) fn output(json: bool, records: &[Record], summary: &Summary) -> anyhow::Result<()> {
    if json {
        for r in records {
            println!("{}", serde_json::to_string(r)?);
        }
        println!("{}", serde_json::to_string(summary)?);
    } else {
        print!("{}", tables(records));
        summary.print();
    }
    Ok(())
}

/// The engine's name as the records carry it (`dsa (2 channels)` → `dsa`).
fn engine_label(rs: &[Record]) -> &str {
    rs.first().map_or("engine", |r| {
        r.engine.split(" (").next().unwrap_or("engine")
    })
}

/// Every point's rates and latencies, then its CPU cost, as text.
pub(super) fn tables(rs: &[Record]) -> String {
    let engine = engine_label(rs);
    let mut out = String::new();
    let mut keys: Vec<(&str, u64, usize)> = rs
        .iter()
        .map(|r| (r.direction, r.size, r.threads))
        .collect();
    keys.dedup();
    let _ = writeln!(
        out,
        "{:<9} {:>5} {:>3} | {:>16} {:>16} {:>16} {:>16} {:>16} | {:>7}",
        "direction", "size", "thr", "glibc", "pmdk", "cpu", engine, "scheduled", "sch/best"
    );
    let _ = writeln!(
        out,
        "{:<9} {:>5} {:>3} | {:>16} {:>16} {:>16} {:>16} {:>16} |",
        "", "", "", "GiB/s p50µs", "GiB/s p50µs", "GiB/s p50µs", "GiB/s p50µs", "GiB/s p50µs"
    );
    for &(dir, sz, t) in &keys {
        let cell = |p: &str| {
            find(rs, p, dir, sz, t).map_or(format!("{:>16}", "n/a"), |r| {
                format!("{:>7.2} {:>8.1}", r.gib_per_s, r.p50_us)
            })
        };
        let ratio = sched_vs_best(rs, dir, sz, t).map_or("".into(), |x| format!("{x:.3}"));
        let _ = writeln!(
            out,
            "{:<9} {:>5} {:>3} | {} {} {} {} {} | {:>7}",
            dir,
            size::show(sz),
            t,
            cell("glibc"),
            cell("pmdk"),
            cell("cpu"),
            cell("engine"),
            cell("scheduled"),
            ratio
        );
    }
    let _ = writeln!(
        out,
        "\nCPU seconds per GiB moved (the process's CPU time, the engine's threads included)"
    );
    let _ = writeln!(
        out,
        "{:<9} {:>5} {:>3} | {:>10} {:>10} {:>10}",
        "direction", "size", "thr", "cpu", engine, "scheduled"
    );
    for &(dir, sz, t) in &keys {
        let cell = |p: &str| {
            find(rs, p, dir, sz, t).map_or(format!("{:>10}", "n/a"), |r| {
                format!("{:>10.3}", r.cpu_s_per_gib)
            })
        };
        let _ = writeln!(
            out,
            "{:<9} {:>5} {:>3} | {} {} {}",
            dir,
            size::show(sz),
            t,
            cell("cpu"),
            cell("engine"),
            cell("scheduled")
        );
    }
    out
}
