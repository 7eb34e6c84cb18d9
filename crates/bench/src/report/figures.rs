//! The report's four figures, each drawn from the inputs that measured it (a placeholder
//! that says what to run where one is missing).

use plotters::style::{RGBColor, BLACK};
use switchyard_mover::profile::NEVER;

use super::chart::{self, BarSeries, Bars, Lines, Panel, Series, XAxis};
use super::html::esc;
use super::input::{self, CopyRun, Kind, MixRun, TuneRun};
use super::Inputs;

/// One figure of the page.
pub(super) struct Figure {
    /// The `id` of its `<figure>` element.
    pub(super) id: &'static str,
    /// Its caption's heading.
    pub(super) title: &'static str,
    /// Its panels, in a grid of `cols` columns, each row `row_height` pixels tall.
    pub(super) panels: Vec<Panel>,
    pub(super) cols: usize,
    pub(super) row_height: u32,
    /// What the figure shows and how it was measured (HTML).
    pub(super) notes: Vec<String>,
    /// The numbers the plot is normalised by (HTML), where it is.
    pub(super) table: Option<String>,
    /// Inputs it draws from that were not given.
    pub(super) absent: Vec<Kind>,
}

impl Figure {
    /// Whether any panel has data.
    pub(super) fn drawn(&self) -> bool {
        self.panels
            .iter()
            .any(|p| !matches!(p, Panel::Missing { .. }))
    }
}

/// The two directions, as the benches name them and as the page does.
pub(super) const DIRECTIONS: [(&str, &str); 2] = [
    ("to_slow", "durable writes to slow memory"),
    ("from_slow", "reads from slow memory"),
];

/// `bench copy`'s paths in legend order: (name in the JSON, name on the page).
pub(super) const COPY_PATHS: [(&str, &str); 5] = [
    ("cpu", "cpu-only"),
    ("engine", "engine-only"),
    ("scheduled", "scheduled (auto)"),
    ("glibc", "glibc memcpy"),
    ("pmdk", "PMDK"),
];

/// The breakdown steps of `bench mix` (Fig. 11), each adding one optimisation.
pub(super) const STEPS: [(&str, &str); 6] = [
    ("cpu", "cpu-only"),
    ("engine", "engine-only"),
    ("limit", "+ limit M"),
    ("thresholds", "+ thresholds"),
    ("fixed", "+ split"),
    ("tuned", "+ adaptation (tuned)"),
];

/// `bench mix`'s scheduling policies (the breakdown steps aside).
pub(super) const POLICIES: [(&str, &str); 5] = [
    ("cpu", "cpu-only"),
    ("engine", "engine-only"),
    ("default", "default thresholds"),
    ("fixed", "tuned, held fixed"),
    ("tuned", "tuned"),
];

/// A colour per path and policy, the same in every figure.
pub(super) fn color(key: &str) -> RGBColor {
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
pub(super) fn not_measured(kind: Kind) -> Vec<String> {
    vec![
        "not measured: run".into(),
        format!("`{} > {}`", kind.command(), kind.default_file()),
        format!("and pass it with {} {}", kind.option(), kind.default_file()),
    ]
}

pub(super) fn missing(title: String, kind: Kind) -> Panel {
    Panel::Missing {
        title,
        why: not_measured(kind),
    }
}

/// Sorted distinct values.
pub(super) fn distinct<T: Ord>(it: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = it.collect();
    v.sort_unstable();
    v.dedup();
    v
}

pub(super) fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

pub(super) fn figures(i: &Inputs) -> Vec<Figure> {
    vec![
        latency(i.copy(), i.tune()),
        scaling(i.copy(), i.tune()),
        breakdown(i.mix()),
        cpu_cost(i.copy(), i.mix()),
    ]
}

/// Figure 1: latency by size, normalised to cpu-only.
pub(super) fn latency(copy: Option<&CopyRun>, tune: Option<&TuneRun>) -> Figure {
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
pub(super) fn latency_table(c: &CopyRun, t: usize, sizes: &[u64]) -> String {
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
pub(super) fn tune_sweep(t: &TuneRun, dir: &str) -> (Series, Option<(f64, String)>) {
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

pub(super) fn absent(given: &[(Kind, bool)]) -> Vec<Kind> {
    given.iter().filter(|g| !g.1).map(|g| g.0).collect()
}

/// The measured size closest to `want` on a log scale (the smaller one on a tie).
pub(super) fn nearest(sizes: &[u64], want: u64) -> Option<u64> {
    let d = |s: u64| ((s as f64).ln() - (want as f64).ln()).abs();
    sizes
        .iter()
        .copied()
        .min_by(|&a, &b| d(a).total_cmp(&d(b)).then(a.cmp(&b)))
}

/// Figure 2: bandwidth by threads.
pub(super) fn scaling(copy: Option<&CopyRun>, tune: Option<&TuneRun>) -> Figure {
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
pub(super) fn tune_scaling(t: &TuneRun, title: String) -> Panel {
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
pub(super) fn cases<'a>(m: &'a MixRun, dir: &str, workloads: &[&str]) -> Vec<&'a input::MixCase> {
    let mut v: Vec<_> = m
        .cases
        .iter()
        .filter(|c| c.direction == dir && workloads.contains(&c.workload.as_str()))
        .collect();
    v.sort_by_key(|c| (workloads.iter().position(|w| *w == c.workload), c.threads));
    v
}

/// Figure 3: the breakdown by optimisation.
pub(super) fn breakdown(mix: Option<&MixRun>) -> Figure {
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
pub(super) fn cpu_cost(copy: Option<&CopyRun>, mix: Option<&MixRun>) -> Figure {
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
pub(super) fn mix_cpu_cost(m: &MixRun, dir: &str, what: &str) -> Panel {
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
