//! `switchyard report`: one self-contained HTML page from what `bench copy`, `bench mix` and
//! `tune` measured (their `--json` output), with the figures of Fastmove's evaluation:
//!
//! 1. latency by request size, one thread, normalised to cpu-only (Fastmove Fig. 9; the
//!    cpu-only latencies in a table, as its Table 4), with tune's turning-point sweep and the
//!    thresholds it chose;
//! 2. bandwidth by threads at 64 KiB (Fig. 10), and tune's engine and CPU-writer scaling
//!    with the M it chose;
//! 3. the breakdown by optimisation of `bulk` and `mixed`, normalised to cpu-only (Fig. 11);
//! 4. CPU seconds per GiB moved per path and per policy (the Efficient PM paper's metric).
//!
//! The page names the machine, engine and medium of every input and when each was measured.
//! The report runs nothing: it reads files. Its plots are inline SVG (see `chart`), and the
//! page has no script and loads nothing, so it can be mailed or archived as one file.

mod chart;
mod input;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use plotters::style::{RGBColor, BLACK};
use switchyard_mover::profile::NEVER;

use crate::measure::Setup;
use chart::{BarSeries, Bars, Lines, Panel, Series, XAxis};
use input::{CopyRun, Kind, MixRun, TuneRun};

/// `report` options.
#[derive(Args)]
#[command(after_help = "\
Example, on the machine to be measured (a few minutes; --quick on each command is quicker):

  switchyard tune --json > tune.json
  switchyard bench copy --json > copy.json
  switchyard bench mix --json > mix.json
  switchyard report                        # writes report.html

tune also writes ./switchyard.profile.toml, which bench copy's `scheduled` path and bench \
mix's `tuned` policy then use.

With none of --copy, --mix and --tune, it reads copy.json, mix.json and tune.json from the \
working directory, those that exist. A figure whose input is missing says how to measure it.")]
pub struct ReportArgs {
    /// Output of `switchyard bench copy --json`: latency (figure 1), bandwidth by threads
    /// (figure 2) and CPU cost (figure 4) of each path.
    #[arg(long, value_name = "FILE")]
    copy: Option<PathBuf>,
    /// Output of `switchyard bench mix --json`: the breakdown by optimisation (figure 3) and
    /// CPU cost per policy (figure 4).
    #[arg(long, value_name = "FILE")]
    mix: Option<PathBuf>,
    /// Output of `switchyard tune --json`: the turning-point sweep and chosen thresholds
    /// (figure 1), engine and CPU-writer scaling and M (figure 2), and the profile.
    #[arg(long, value_name = "FILE")]
    tune: Option<PathBuf>,
    /// Where to write the page.
    #[arg(long, value_name = "FILE", default_value = "report.html")]
    out: PathBuf,
}

/// What the page is drawn from.
struct Inputs {
    copy: Option<(PathBuf, CopyRun)>,
    mix: Option<(PathBuf, MixRun)>,
    tune: Option<(PathBuf, TuneRun)>,
}

impl Inputs {
    /// The files named, or with none named, `copy.json`, `mix.json` and `tune.json` in the
    /// working directory, those that exist.
    fn read(a: &ReportArgs) -> anyhow::Result<Inputs> {
        let named = a.copy.is_some() || a.mix.is_some() || a.tune.is_some();
        let pick = |given: &Option<PathBuf>, kind: Kind| match given {
            Some(p) => Some(p.clone()),
            None if named => None,
            None => Some(PathBuf::from(kind.default_file())).filter(|p| p.exists()),
        };
        let copy = pick(&a.copy, Kind::Copy);
        let mix = pick(&a.mix, Kind::Mix);
        let tune = pick(&a.tune, Kind::Tune);
        if copy.is_none() && mix.is_none() && tune.is_none() {
            bail!(
                "nothing to report: pass --copy, --mix or --tune, or run it where copy.json, \
                 mix.json or tune.json is (`switchyard report --help` shows how to make them)"
            );
        }
        Ok(Inputs {
            copy: load(copy, Kind::Copy, input::copy)?,
            mix: load(mix, Kind::Mix, input::mix)?,
            tune: load(tune, Kind::Tune, input::tune)?,
        })
    }

    fn copy(&self) -> Option<&CopyRun> {
        self.copy.as_ref().map(|c| &c.1)
    }

    fn mix(&self) -> Option<&MixRun> {
        self.mix.as_ref().map(|c| &c.1)
    }

    fn tune(&self) -> Option<&TuneRun> {
        self.tune.as_ref().map(|c| &c.1)
    }
}

/// Reads the file at `path`, if any, as `kind`'s output with `read`.
fn load<T>(
    path: Option<PathBuf>,
    kind: Kind,
    read: fn(&Path) -> anyhow::Result<T>,
) -> anyhow::Result<Option<(PathBuf, T)>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let run = read(&path)
        .with_context(|| format!("reading {} ({} output)", path.display(), kind.command()))?;
    Ok(Some((path, run)))
}

/// Runs `switchyard report`.
pub fn run(a: &ReportArgs) -> anyhow::Result<()> {
    let inputs = Inputs::read(a)?;
    let figures = figures(&inputs);
    let page = page(&inputs, &figures, now())?;
    std::fs::write(&a.out, page).with_context(|| format!("writing {}", a.out.display()))?;
    let drawn = figures.iter().filter(|f| f.drawn()).count();
    println!(
        "wrote {}: {drawn} of {} figures drawn{}",
        a.out.display(),
        figures.len(),
        if drawn < figures.len() {
            " (the others say what to measure)"
        } else {
            ""
        }
    );
    Ok(())
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One figure of the page.
struct Figure {
    /// The `id` of its `<figure>` element.
    id: &'static str,
    /// Its caption's heading.
    title: &'static str,
    /// Its panels, in a grid of `cols` columns, each row `row_height` pixels tall.
    panels: Vec<Panel>,
    cols: usize,
    row_height: u32,
    /// What the figure shows and how it was measured (HTML).
    notes: Vec<String>,
    /// The numbers the plot is normalised by (HTML), where it is.
    table: Option<String>,
    /// Inputs it draws from that were not given.
    absent: Vec<Kind>,
}

impl Figure {
    /// Whether any panel has data.
    fn drawn(&self) -> bool {
        self.panels
            .iter()
            .any(|p| !matches!(p, Panel::Missing { .. }))
    }
}

/// The two directions, as the benches name them and as the page does.
const DIRECTIONS: [(&str, &str); 2] = [
    ("to_slow", "durable writes to slow memory"),
    ("from_slow", "reads from slow memory"),
];

/// `bench copy`'s paths in legend order: (name in the JSON, name on the page).
const COPY_PATHS: [(&str, &str); 5] = [
    ("cpu", "cpu-only"),
    ("engine", "engine-only"),
    ("scheduled", "scheduled (auto)"),
    ("glibc", "glibc memcpy"),
    ("pmdk", "PMDK"),
];

/// The breakdown steps of `bench mix` (Fig. 11), each adding one optimisation.
const STEPS: [(&str, &str); 6] = [
    ("cpu", "cpu-only"),
    ("engine", "engine-only"),
    ("limit", "+ limit M"),
    ("thresholds", "+ thresholds"),
    ("fixed", "+ split"),
    ("tuned", "+ adaptation (tuned)"),
];

/// `bench mix`'s scheduling policies (the breakdown steps aside).
const POLICIES: [(&str, &str); 5] = [
    ("cpu", "cpu-only"),
    ("engine", "engine-only"),
    ("default", "default thresholds"),
    ("fixed", "tuned, held fixed"),
    ("tuned", "tuned"),
];

/// A colour per path and policy, the same in every figure.
fn color(key: &str) -> RGBColor {
    match key {
        "cpu" => RGBColor(31, 119, 180),
        "engine" => RGBColor(255, 127, 14),
        "scheduled" | "tuned" => RGBColor(44, 160, 44),
        "glibc" => RGBColor(127, 127, 127),
        "pmdk" => RGBColor(148, 103, 189),
        "default" => RGBColor(140, 86, 75),
        "limit" => RGBColor(214, 39, 40),
        "thresholds" => RGBColor(227, 119, 194),
        "fixed" => RGBColor(188, 189, 34),
        "offload" => RGBColor(23, 190, 207),
        _ => BLACK,
    }
}

/// The lines of a panel whose input is absent.
fn not_measured(kind: Kind) -> Vec<String> {
    vec![
        "not measured: run".into(),
        format!("`{} > {}`", kind.command(), kind.default_file()),
        format!("and pass it with {} {}", kind.option(), kind.default_file()),
    ]
}

fn missing(title: String, kind: Kind) -> Panel {
    Panel::Missing {
        title,
        why: not_measured(kind),
    }
}

/// Sorted distinct values.
fn distinct<T: Ord>(it: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = it.collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

fn figures(i: &Inputs) -> Vec<Figure> {
    vec![
        latency(i.copy(), i.tune()),
        scaling(i.copy(), i.tune()),
        breakdown(i.mix()),
        cpu_cost(i.copy(), i.mix()),
    ]
}

/// Figure 1: latency by size, normalised to cpu-only.
fn latency(copy: Option<&CopyRun>, tune: Option<&TuneRun>) -> Figure {
    let threads = copy.and_then(|c| c.points.iter().map(|p| p.threads).min());
    let sizes = copy.map_or(Vec::new(), |c| distinct(c.points.iter().map(|p| p.size)));
    let mut panels = Vec::new();
    for (dir, what) in DIRECTIONS {
        let title = match threads {
            Some(t) => format!("{what}, {}", plural(t, "thread")),
            None => format!("{what}, one caller"),
        };
        if copy.is_none() && tune.is_none() {
            panels.push(missing(title, Kind::Copy));
            continue;
        }
        let mut series = Vec::new();
        if let (Some(c), Some(t)) = (copy, threads) {
            for (key, name) in COPY_PATHS {
                let points = sizes
                    .iter()
                    .filter_map(|&s| {
                        let p = c.point(key, dir, s, t)?;
                        let base = c.point("cpu", dir, s, t)?;
                        (p.p50_us > 0.0 && base.p50_us > 0.0)
                            .then(|| (s as f64, p.p50_us / base.p50_us))
                    })
                    .collect();
                series.push(Series {
                    name: name.into(),
                    color: color(key),
                    points,
                });
            }
        }
        let mut marks = Vec::new();
        if let Some(t) = tune {
            let (sweep, mark) = tune_sweep(t, dir);
            series.push(sweep);
            marks.extend(mark);
        }
        panels.push(Panel::Lines(Lines {
            title,
            x: XAxis::Size,
            y_label: "latency ÷ cpu-only latency".into(),
            y_log: true,
            series,
            marks,
            reference: Some(1.0),
        }));
    }
    let table = copy.zip(threads).map(|(c, t)| latency_table(c, t, &sizes));
    let mut notes = vec!["Below 1: faster than the CPU alone. Log scales.".to_string()];
    if copy.is_some() {
        notes.push(
            "From <code>bench copy</code>: each path's median (p50) latency ÷ cpu-only's at the \
             same size, one thread."
                .into(),
        );
    }
    if tune.is_some() {
        notes.push(
            "From <code>tune</code>: offloading every request (a CPU + engine split), mean time per request ÷ cpu-only's, one caller, 64 B \
             aligned; the dashed line is the threshold tune chose from it."
                .into(),
        );
    }
    Figure {
        id: "latency",
        title: "1. Latency by request size, normalised to cpu-only (cf. Fastmove Fig. 9)",
        panels,
        cols: 2,
        row_height: 440,
        notes,
        table,
        absent: absent(&[(Kind::Copy, copy.is_some()), (Kind::Tune, tune.is_some())]),
    }
}

/// The table of cpu-only p50 latencies by direction and size (`t` threads): the ratios'
/// baseline.
fn latency_table(c: &CopyRun, t: usize, sizes: &[u64]) -> String {
    let mut h = String::from("<table><caption>cpu-only p50 latency, µs (");
    h += &plural(t, "thread");
    h += "): the baseline of the ratios</caption><tr><th></th>";
    for &s in sizes {
        h += &format!("<th>{}</th>", chart::bytes(s as f64));
    }
    h += "</tr>";
    for (dir, what) in DIRECTIONS {
        h += &format!("<tr><th>{what}</th>");
        for &s in sizes {
            h += &match c.point("cpu", dir, s, t) {
                Some(p) => format!("<td>{}</td>", chart::num(p.p50_us)),
                None => "<td>–</td>".to_string(),
            };
        }
        h += "</tr>";
    }
    h + "</table>"
}

/// tune's sweep of offloading every request in direction `dir` (mean time ÷ cpu-only's, by
/// size), and the threshold it chose there (none when it never offloads).
fn tune_sweep(t: &TuneRun, dir: &str) -> (Series, Option<(f64, String)>) {
    let mut sweep: Vec<_> = t
        .measurements
        .sweep
        .iter()
        .filter(|p| p.direction == dir && p.aligned && p.ratio > 0.0)
        .map(|p| (p.size as f64, 1.0 / p.ratio))
        .collect();
    sweep.sort_by(|a, b| a.0.total_cmp(&b.0));
    let series = Series {
        name: "offload all (tune, mean)".into(),
        color: color("offload"),
        points: sweep,
    };
    let th = &t.profile.tuned.thresholds;
    let at = if dir == "to_slow" {
        th.to_slow.local_aligned
    } else {
        th.from_slow.local_aligned
    };
    let mark = (at < NEVER).then(|| {
        (
            at as f64,
            format!("tuned threshold {}", chart::bytes(at as f64)),
        )
    });
    (series, mark)
}

fn absent(given: &[(Kind, bool)]) -> Vec<Kind> {
    given.iter().filter(|g| !g.1).map(|g| g.0).collect()
}

/// The measured size closest to `want` on a log scale (the smaller one on a tie).
fn nearest(sizes: &[u64], want: u64) -> Option<u64> {
    let d = |s: u64| ((s as f64).ln() - (want as f64).ln()).abs();
    sizes
        .iter()
        .copied()
        .min_by(|&a, &b| d(a).total_cmp(&d(b)).then(a.cmp(&b)))
}

/// Figure 2: bandwidth by threads.
fn scaling(copy: Option<&CopyRun>, tune: Option<&TuneRun>) -> Figure {
    let mut panels = Vec::new();
    let size = copy.and_then(|c| nearest(&distinct(c.points.iter().map(|p| p.size)), 64 << 10));
    for (dir, what) in DIRECTIONS {
        let (Some(c), Some(size)) = (copy, size) else {
            panels.push(missing(format!("{what}, 64 KiB requests"), Kind::Copy));
            continue;
        };
        let threads = distinct(c.points.iter().map(|p| p.threads));
        let series = COPY_PATHS
            .iter()
            .map(|&(key, name)| Series {
                name: name.into(),
                color: color(key),
                points: threads
                    .iter()
                    .filter_map(|&t| c.point(key, dir, size, t))
                    .map(|p| (p.threads as f64, p.gib_per_s))
                    .collect(),
            })
            .collect();
        panels.push(Panel::Lines(Lines {
            title: format!("{what}, {} requests", chart::bytes(size as f64)),
            x: XAxis::Threads,
            y_label: "GiB/s, all threads".into(),
            y_log: false,
            series,
            marks: Vec::new(),
            reference: None,
        }));
    }
    let title = "tune: 64 KiB, engine reads and CPU writes".to_string();
    match tune {
        None => panels.push(missing(title, Kind::Tune)),
        Some(t) => panels.push(tune_scaling(t, title)),
    }
    let mut notes = vec!["Aggregate bandwidth of all threads.".to_string()];
    if copy.is_some() {
        notes.push(
            "From <code>bench copy</code>: every path at the measured size closest to 64 KiB \
             (the size of Fastmove's Fig. 10), 1 to N threads."
                .into(),
        );
    }
    if tune.is_some() {
        notes.push(
            "From <code>tune</code>: the engine alone with 1 to 2N concurrent callers, whose \
             saturation point is M (the concurrency limit), and CPU-only durable writes, \
             whose saturation point caps concurrent CPU writers (no cap when it is at least \
             the core count)."
                .into(),
        );
    }
    Figure {
        id: "scaling",
        title: "2. Bandwidth by threads (cf. Fastmove Fig. 10)",
        panels,
        cols: 3,
        row_height: 420,
        notes,
        table: None,
        absent: absent(&[(Kind::Copy, copy.is_some()), (Kind::Tune, tune.is_some())]),
    }
}

/// tune's scaling of engine reads and CPU-only durable writes by callers, with the M and the
/// writer cap it chose.
fn tune_scaling(t: &TuneRun, title: String) -> Panel {
    let points = |v: &[input::ScalePoint]| {
        v.iter()
            .map(|p| (p.threads as f64, p.gib_s))
            .collect::<Vec<_>>()
    };
    let tuned = &t.profile.tuned;
    let mut marks = vec![(
        tuned.concurrency_limit as f64,
        format!("M = {}", tuned.concurrency_limit),
    )];
    if tuned.cpu_writers > 0 {
        marks.push((
            tuned.cpu_writers as f64,
            format!("writer cap {}", tuned.cpu_writers),
        ));
    }
    Panel::Lines(Lines {
        title,
        x: XAxis::Threads,
        y_label: "GiB/s, all callers".into(),
        y_log: false,
        series: vec![
            Series {
                name: "engine-only reads".into(),
                color: color("engine"),
                points: points(&t.measurements.engine_scaling),
            },
            Series {
                name: "cpu-only durable writes".into(),
                color: color("cpu"),
                points: points(&t.measurements.writer_scaling),
            },
        ],
        marks,
        reference: None,
    })
}

/// The cases of `workloads` in direction `dir`, in workload order, then by threads.
fn cases<'a>(m: &'a MixRun, dir: &str, workloads: &[&str]) -> Vec<&'a input::MixCase> {
    let mut v: Vec<_> = m
        .cases
        .iter()
        .filter(|c| c.direction == dir && workloads.contains(&c.workload.as_str()))
        .collect();
    v.sort_by_key(|c| (workloads.iter().position(|w| *w == c.workload), c.threads));
    v
}

/// Figure 3: the breakdown by optimisation.
fn breakdown(mix: Option<&MixRun>) -> Figure {
    let mut panels = Vec::new();
    let mut table = None;
    let dirs = [
        ("from_slow", "reads from slow memory"),
        ("to_slow", "durable writes to slow memory"),
    ];
    if let Some(m) = mix {
        let mut h = String::from(
            "<table><caption>cpu-only GiB/s, all threads: the baseline of the \
             ratios</caption><tr><th>workload</th><th>direction</th><th>threads</th>\
             <th>GiB/s</th></tr>",
        );
        for (dir, what) in dirs {
            let cs = cases(m, dir, &["bulk", "mixed"]);
            let series = STEPS
                .iter()
                .map(|&(key, name)| BarSeries {
                    name: name.into(),
                    color: color(key),
                    values: cs
                        .iter()
                        .map(|c| Some(c.gib_s(key)? / c.gib_s("cpu").filter(|&v| v > 0.0)?))
                        .collect(),
                })
                .collect();
            for c in &cs {
                if let Some(v) = c.gib_s("cpu") {
                    h += &format!(
                        "<tr><td>{}</td><td>{what}</td><td>{}</td><td>{}</td></tr>",
                        esc(&c.workload),
                        c.threads,
                        chart::num(v)
                    );
                }
            }
            panels.push(Panel::Bars(Bars {
                title: format!("bulk and mixed, {what}"),
                groups: cs
                    .iter()
                    .map(|c| format!("{} ×{}", c.workload, c.threads))
                    .collect(),
                y_label: "throughput ÷ cpu-only".into(),
                series,
                reference: Some(1.0),
            }));
        }
        table = Some(h + "</table>");
    } else {
        for (_, what) in dirs {
            panels.push(missing(format!("bulk and mixed, {what}"), Kind::Mix));
        }
    }
    Figure {
        id: "breakdown",
        title: "3. Breakdown by optimisation (cf. Fastmove Fig. 11)",
        panels,
        cols: 2,
        row_height: 420,
        notes: vec![
            "Fastmove's synthetic <code>bulk</code> (mean 256 KiB) and <code>mixed</code> \
             (8–256 KiB) workloads, ×N callers, each policy's median GiB/s ÷ cpu-only's. \
             Steps, each adding one optimisation to the one before: offload everything to \
             the engine; + the concurrency limit M; + the size thresholds; + the CPU + engine \
             split of bulk copies; + online adaptation (= the tuned scheduler). M and the thresholds are the engine profile's."
                .into(),
        ],
        table,
        absent: absent(&[(Kind::Mix, mix.is_some())]),
    }
}

/// Figure 4: CPU cost per GiB.
fn cpu_cost(copy: Option<&CopyRun>, mix: Option<&MixRun>) -> Figure {
    let mut panels = Vec::new();
    let threads = copy.and_then(|c| c.points.iter().map(|p| p.threads).min());
    for (dir, what) in DIRECTIONS {
        let (Some(c), Some(t)) = (copy, threads) else {
            panels.push(missing(format!("bench copy: {what}"), Kind::Copy));
            continue;
        };
        let sizes = distinct(c.points.iter().map(|p| p.size));
        let series = COPY_PATHS
            .iter()
            .map(|&(key, name)| Series {
                name: name.into(),
                color: color(key),
                points: sizes
                    .iter()
                    .filter_map(|&s| c.point(key, dir, s, t))
                    .filter(|p| p.cpu_s_per_gib > 0.0)
                    .map(|p| (p.size as f64, p.cpu_s_per_gib))
                    .collect(),
            })
            .collect();
        panels.push(Panel::Lines(Lines {
            title: format!("bench copy: {what}, {}", plural(t, "thread")),
            x: XAxis::Size,
            y_label: "CPU s/GiB (log scale)".into(),
            y_log: true,
            series,
            marks: Vec::new(),
            reference: None,
        }));
    }
    for (dir, what) in DIRECTIONS {
        panels.push(match mix {
            Some(m) => mix_cpu_cost(m, dir, what),
            None => missing(format!("bench mix: {what}"), Kind::Mix),
        });
    }
    Figure {
        id: "cpu-cost",
        title: "4. CPU seconds per GiB moved, per path and policy",
        panels,
        cols: 2,
        row_height: 420,
        notes: vec![
            "CPU time of the whole process — the callers and the engine's worker threads — \
             per GiB moved (lower is cheaper). With the <code>threads</code> engine the \
             engine's work is CPU work too, so offloading saves no CPU here; an on-chip DMA \
             engine's would not be counted."
                .into(),
        ],
        table: None,
        absent: absent(&[(Kind::Copy, copy.is_some()), (Kind::Mix, mix.is_some())]),
    }
}

/// bench mix's CPU seconds per GiB by policy, per workload, in direction `dir` (`what`), at
/// the fewest threads measured.
fn mix_cpu_cost(m: &MixRun, dir: &str, what: &str) -> Panel {
    let fewest = m
        .cases
        .iter()
        .filter(|c| c.direction == dir)
        .map(|c| c.threads)
        .min();
    let cs: Vec<_> = m
        .cases
        .iter()
        .filter(|c| c.direction == dir && Some(c.threads) == fewest)
        .collect();
    Panel::Bars(Bars {
        title: format!(
            "bench mix: {what}, {}",
            plural(fewest.unwrap_or(0), "thread")
        ),
        groups: cs.iter().map(|c| c.workload.clone()).collect(),
        y_label: "CPU s/GiB".into(),
        series: POLICIES
            .iter()
            .map(|&(key, name)| BarSeries {
                name: name.into(),
                color: color(key),
                values: cs.iter().map(|c| c.cpu_s_per_gib(key)).collect(),
            })
            .collect(),
        reference: None,
    })
}

/// `s` with HTML's special characters escaped.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Seconds since the epoch as a UTC date and time, `2026-11-22 14:10 UTC`.
fn utc(unix: u64) -> String {
    // Days to a civil date: Howard Hinnant's `civil_from_days`.
    let days = (unix / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let secs = unix % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60
    )
}

/// What backs a medium, as a reader wants to know it.
fn backing(s: &Setup) -> String {
    let m = &s.media;
    let memory = matches!(m.fs.as_str(), "tmpfs" | "ramfs" | "hugetlbfs");
    format!(
        "{} region on {}{}",
        m.kind,
        m.fs,
        if memory { " (DRAM-backed)" } else { "" }
    )
}

/// The setup table: one row per input.
fn setup_table(i: &Inputs) -> String {
    let mut rows: Vec<(Kind, &Path, &Setup)> = Vec::new();
    if let Some((p, c)) = &i.copy {
        rows.push((Kind::Copy, p, &c.setup));
    }
    if let Some((p, m)) = &i.mix {
        rows.push((Kind::Mix, p, &m.setup));
    }
    if let Some((p, t)) = &i.tune {
        rows.push((Kind::Tune, p, &t.setup));
    }
    let mut h = String::from(
        "<table class=\"setup\"><tr><th>input</th><th>measured</th><th>machine</th>\
         <th>engine</th><th>media</th></tr>",
    );
    for (kind, path, s) in &rows {
        let m = &s.machine;
        h += &format!(
            "<tr><td><code>{}</code><br>{}{}</td><td>{}</td><td>{}, {}, flush {}, SIMD {}</td>\
             <td>{}, {}</td><td><code>{}</code><br>{}</td></tr>",
            esc(&path.display().to_string()),
            esc(kind.command().trim_end_matches(" --json")),
            if s.quick { " (--quick)" } else { "" },
            utc(s.unix_time),
            esc(&m.cpu),
            plural(m.cores, "core"),
            esc(&m.flush),
            esc(&m.simd),
            esc(&s.engine.kind),
            plural(s.engine.channels, "channel"),
            esc(&s.media.region),
            esc(&backing(s)),
        );
    }
    h += "</table>";
    let differ = rows.windows(2).any(|w| {
        let (a, b) = (w[0].2, w[1].2);
        a.machine != b.machine
            || a.engine != b.engine
            || a.media.kind != b.media.kind
            || a.media.fs != b.media.fs
    });
    if differ {
        h += "<p class=\"warn\">The inputs were measured on different machines, engines or \
              media: compare across figures with care.</p>";
    }
    h
}

/// The page's head and style, and the start of its body.
const HEAD: &str = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
     <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
     <title>Switchyard report</title>\n<style>\n\
     body { font-family: sans-serif; max-width: 1240px; margin: 1.5em auto; padding: 0 1em; \
     color: #222; line-height: 1.4; }\n\
     h1 { font-size: 1.6em; margin-bottom: 0.2em; }\n\
     table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }\n\
     th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; \
     vertical-align: top; }\n\
     caption { text-align: left; font-style: italic; padding-bottom: 0.3em; }\n\
     figure { margin: 2em 0; padding-top: 1em; border-top: 1px solid #ddd; }\n\
     figcaption { font-weight: bold; font-size: 1.15em; margin-bottom: 0.5em; }\n\
     figure svg { width: 100%; height: auto; display: block; }\n\
     p.note { margin: 0.4em 0; font-size: 0.95em; }\n\
     .missing { border: 2px dashed #aaa; padding: 2em; color: #555; text-align: center; }\n\
     .warn { color: #a40; font-weight: bold; }\n\
     pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }\n\
     </style>\n</head>\n<body>\n<h1>Switchyard data-movement report</h1>\n";

/// The whole page.
fn page(i: &Inputs, figures: &[Figure], made: u64) -> anyhow::Result<String> {
    let mut h = String::from(HEAD);
    h += "<section id=\"setup\">\n<h2>Measured on</h2>\n";
    h += &setup_table(i);
    if let Some((path, t)) = &i.tune {
        h += &format!(
            "<p>The engine profile from <code>{}</code> (what the tuned scheduler \
             uses):</p>\n<pre>{}</pre>\n",
            esc(&path.display().to_string()),
            esc(&crate::tune::describe(&t.profile))
        );
    }
    h += "</section>\n";
    for f in figures {
        h += &figure_html(f)?;
    }
    let files: Vec<String> = [
        i.copy.as_ref().map(|c| &c.0),
        i.mix.as_ref().map(|c| &c.0),
        i.tune.as_ref().map(|c| &c.0),
    ]
    .into_iter()
    .flatten()
    .map(|p| format!("<code>{}</code>", esc(&p.display().to_string())))
    .collect();
    h += &format!(
        "<footer><p>Made by <code>switchyard report</code> {} on {} from {}.</p></footer>\n\
         </body>\n</html>\n",
        env!("CARGO_PKG_VERSION"),
        utc(made),
        files.join(", ")
    );
    Ok(h)
}

/// Figure `f` as HTML: its panels, notes, what was not measured and its table; or, with
/// nothing to draw, what to run.
fn figure_html(f: &Figure) -> anyhow::Result<String> {
    let mut h = format!(
        "<figure id=\"{}\">\n<figcaption>{}</figcaption>\n",
        f.id,
        esc(f.title)
    );
    if f.drawn() {
        h += &chart::figure(&f.panels, f.cols, f.row_height)
            .with_context(|| format!("drawing figure {:?}", f.id))?;
        h += "\n";
        for n in &f.notes {
            h += &format!("<p class=\"note\">{n}</p>\n");
        }
        for k in &f.absent {
            h += &format!(
                "<p class=\"note missing-input\">Not measured here: <code>{}</code> \
                 (run <code>{} &gt; {}</code> and pass it with <code>{}</code>).</p>\n",
                k.command(),
                k.command(),
                k.default_file(),
                k.option()
            );
        }
        if let Some(t) = &f.table {
            h += t;
            h += "\n";
        }
    } else {
        h += "<div class=\"missing\">";
        for k in &f.absent {
            h += &format!(
                "<p>not measured: run <code>{} &gt; {}</code>, then \
                 <code>switchyard report {} {}</code></p>",
                k.command(),
                k.default_file(),
                k.option(),
                k.default_file()
            );
        }
        h += "</div>\n";
    }
    h += "</figure>\n";
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::input::tests::{copy_text, file, mix_text, tune_text};
    use super::*;

    fn inputs(copy: bool, mix: bool, tune: bool) -> Inputs {
        let read = |text: String| {
            let f = file(&text);
            (f.path().to_path_buf(), f)
        };
        Inputs {
            copy: copy.then(|| {
                let (p, f) = read(copy_text());
                (p, input::copy(f.path()).unwrap())
            }),
            mix: mix.then(|| {
                let (p, f) = read(mix_text());
                (p, input::mix(f.path()).unwrap())
            }),
            tune: tune.then(|| {
                let (p, f) = read(tune_text());
                (p, input::tune(f.path()).unwrap())
            }),
        }
    }

    fn lines(p: &Panel) -> &Lines {
        match p {
            Panel::Lines(l) => l,
            _ => panic!("not a line chart"),
        }
    }

    fn series<'a>(l: &'a Lines, name: &str) -> &'a [(f64, f64)] {
        &l.series.iter().find(|s| s.name == name).unwrap().points
    }

    #[test]
    fn latency_is_normalised_to_cpu_only_at_each_size() {
        let i = inputs(true, false, true);
        let f = latency(i.copy(), i.tune());
        let w = lines(&f.panels[0]);
        assert_eq!(series(w, "cpu-only"), [(4096.0, 1.0), (65536.0, 1.0)]);
        assert_eq!(series(w, "engine-only"), [(4096.0, 3.0), (65536.0, 3.0)]);
        // Tune's sweep: time per request is the inverse of the bandwidth ratio.
        assert_eq!(
            series(w, "offload all (tune, mean)"),
            [(4096.0, 2.0), (65536.0, 0.8)]
        );
        assert_eq!(w.marks, [(65536.0, "tuned threshold 64 KiB".to_string())]);
        assert!(w.title.contains("1 thread"));
        assert!(f.absent.is_empty());
        let table = f.table.unwrap();
        assert!(table.contains("<th>64 KiB</th>") && table.contains("<td>16</td>"));
    }

    #[test]
    fn scaling_takes_the_size_nearest_64k_and_tunes_m() {
        assert_eq!(nearest(&[4096, 16384, 262144], 65536), Some(16384));
        assert_eq!(nearest(&[4096, 65536, 1 << 20], 65536), Some(65536));
        assert_eq!(nearest(&[], 65536), None);
        let i = inputs(true, false, true);
        let f = scaling(i.copy(), i.tune());
        let r = lines(&f.panels[1]);
        assert!(r.title.contains("64 KiB"));
        assert_eq!(series(r, "engine-only"), [(1.0, 2.0), (2.0, 2.0)]);
        assert_eq!(lines(&f.panels[2]).marks[0].1, "M = 2");
    }

    #[test]
    fn the_breakdown_is_each_step_over_cpu_only() {
        let i = inputs(false, true, false);
        let f = breakdown(i.mix());
        let Panel::Bars(b) = &f.panels[0] else {
            panic!("bars")
        };
        assert_eq!(b.groups, ["bulk ×1"]);
        let step = |name: &str| b.series.iter().find(|s| s.name == name).unwrap().values[0];
        assert_eq!(step("cpu-only"), Some(1.0));
        assert_eq!(step("+ limit M"), Some(0.75));
        assert_eq!(step("+ split"), Some(1.2));
        assert_eq!(step("+ adaptation (tuned)"), Some(1.25));
        // No bulk or mixed writes in this run: the panel has no groups.
        let Panel::Bars(w) = &f.panels[1] else {
            panic!("bars")
        };
        assert!(w.groups.is_empty());
    }

    #[test]
    fn absent_inputs_become_placeholders_that_say_what_to_run() {
        let i = inputs(false, true, false);
        let figs = figures(&i);
        let html = page(&i, &figs, 0).unwrap();
        for id in ["latency", "scaling", "breakdown", "cpu-cost"] {
            assert!(html.contains(&format!("<figure id=\"{id}\">")), "{id}");
        }
        assert!(!figs[0].drawn() && !figs[1].drawn());
        assert!(figs[2].drawn() && figs[3].drawn());
        assert!(
            html.contains("not measured: run <code>switchyard bench copy --json &gt; copy.json")
        );
        assert!(html.contains("not measured: run <code>switchyard tune --json &gt; tune.json"));
        // Figure 4 draws mix's panels and says copy's are missing.
        assert!(html.contains("Not measured here: <code>switchyard bench copy --json"));
        assert_eq!(html.matches("<svg").count(), 2);
        assert!(html.contains("Test CPU, 2 cores, flush clwb, SIMD avx512"));
        assert!(html.contains("file region on tmpfs (DRAM-backed)"));
        assert!(html.contains("2026-11-22 14:14 UTC"));
        assert!(!html.contains("class=\"warn\""));
    }

    #[test]
    fn inputs_from_different_machines_are_flagged() {
        let mut i = inputs(true, true, false);
        i.mix.as_mut().unwrap().1.setup.machine.cpu = "Other CPU".into();
        let html = page(&i, &figures(&i), 0).unwrap();
        assert!(html.contains("class=\"warn\""));
    }

    #[test]
    fn dates_are_utc_and_text_is_escaped() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc(1_795_356_849), "2026-11-22 14:14 UTC");
        assert_eq!(utc(4_102_444_799), "2099-12-31 23:59 UTC");
        assert_eq!(esc("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}
