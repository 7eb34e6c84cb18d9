//! `switchyard bench tunes`: how far a quick tune's thresholds lie from a full tune's, with
//! the host's own drift measured beside it.
//!
//! Full and quick tunes run alternately, each on a fresh scratch region: full, quick, full,
//! quick, …, full. Each quick tune is compared, direction by direction, with the full tune
//! just before it and the one just after it, and each full tune with the next. A tune's
//! answer for a direction is a size range: its threshold where it decided one, or the range
//! it left undecided (the paths tied within noise from `from` to `to`). Two answers are the
//! number of size bins (octaves) between their ranges apart, 0 where they overlap; "never"
//! is apart from every size.
//!
//! Why alternate: on a 2-core VM the memory system has phases that last minutes. In one
//! session three full tunes two minutes apart wrote aligned writes "never", "256K" and "128K"
//! (at 1 MiB the CPU wrote 24.7 GiB/s and the split 24.7 in the first, 22.6 and 38.0 in the
//! second). Comparing five quick tunes in a row with one full tune measures that drift as
//! much as the quick tune; the full tunes either side of each quick one, and the distance
//! between consecutive full tunes, tell the two apart.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde::Serialize;
use switchyard_mover::profile::{Profile, NEVER};

use switchyard_options::tune::{scratch_in, threshold, tune_on};

/// `bench tunes` options.
#[derive(Args)]
pub struct TunesArgs {
    /// Quick tunes (a full tune runs before the first and after each).
    #[arg(long, default_value_t = 5)]
    quick_runs: usize,
    /// Directory for the scratch regions (the medium measured), each removed afterwards.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Keep every profile in this directory (full0.toml, quick1.toml, full1.toml, …), for
    /// `bench mix --profile`.
    #[arg(long)]
    keep: Option<PathBuf>,
    /// Configuration file (TOML): the engine to profile.
    #[arg(long)]
    config: Option<PathBuf>,
    /// One JSON record per line instead of the tables.
    #[arg(long)]
    json: bool,
}

/// The directions a profile sets a threshold for: (name, direction in the profile, aligned).
const DIRECTIONS: [(&str, &str, bool); 4] = [
    ("writes", "to_slow", true),
    ("writes unaligned", "to_slow", false),
    ("reads", "from_slow", true),
    ("reads unaligned", "from_slow", false),
];

/// A tune's answer for one direction: the sizes from `lo` to `hi` (equal where it decided;
/// [`NEVER`] for never).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
struct Answer {
    lo: usize,
    hi: usize,
    decided: bool,
}

impl Answer {
    fn of(p: &Profile, direction: &str, aligned: bool) -> Answer {
        let t = &p.tuned.thresholds;
        let l = if direction == "to_slow" {
            &t.to_slow
        } else {
            &t.from_slow
        };
        let at = if aligned {
            l.local_aligned
        } else {
            l.local_unaligned
        };
        match (p.tuned.undecided.iter()).find(|u| u.direction == direction && u.aligned == aligned)
        {
            Some(u) => Answer {
                lo: u.from,
                hi: u.to,
                decided: false,
            },
            None => Answer {
                lo: at,
                hi: at,
                decided: true,
            },
        }
    }

    fn show(self) -> String {
        if self.decided {
            threshold(self.lo)
        } else {
            format!("~{}-{}", threshold(self.lo), threshold(self.hi))
        }
    }
}

/// Size bins (octaves) between two answers' ranges: 0 where they overlap, infinite between
/// "never" and a size.
fn bins_apart(a: Answer, b: Answer) -> f64 {
    let log = |s: usize| {
        if s >= NEVER {
            f64::INFINITY
        } else {
            (s.max(1) as f64).log2()
        }
    };
    let (a0, a1, b0, b1) = (log(a.lo), log(a.hi), log(b.lo), log(b.hi));
    if a1 < b0 {
        b0 - a1
    } else if b1 < a0 {
        a0 - b1
    } else {
        0.0
    }
}

/// One tune run.
#[derive(Serialize)]
struct Run {
    record: &'static str,
    /// Its place in the sequence (full tunes 0..=N, quick tunes 1..=N).
    index: usize,
    quick: bool,
    /// Seconds from the start of the benchmark to the start of this tune.
    started_s: f64,
    seconds: f64,
    /// Per direction, in [`DIRECTIONS`] order.
    answers: Vec<Answer>,
}

/// Quick tune `index` against full tunes `index - 1` and `index`, in one direction.
#[derive(Serialize)]
struct Comparison {
    record: &'static str,
    index: usize,
    direction: &'static str,
    /// Bins from the earlier full tune and from the later one.
    before: f64,
    after: f64,
    /// The quick tune said it could not decide.
    undecided: bool,
}

/// Full tune `index - 1` against full tune `index`, in one direction: the host's drift.
#[derive(Serialize)]
struct Drift {
    record: &'static str,
    index: usize,
    direction: &'static str,
    bins: f64,
}

impl Comparison {
    /// Within one bin of either neighbour, or undecided.
    fn agrees(&self) -> bool {
        self.undecided || self.before.min(self.after) <= 1.0
    }
}

/// Runs `switchyard bench tunes`.
pub fn run(a: &TunesArgs) -> anyhow::Result<()> {
    let config = switchyard_config::Config::load_or_default(a.config.as_deref())?.mover;
    if let Some(k) = &a.keep {
        std::fs::create_dir_all(k)?;
    }
    let start = Instant::now();
    let mut fulls: Vec<Run> = Vec::new();
    let mut quicks: Vec<Run> = Vec::new();
    // full0, quick1, full1, quick2, …, full N.
    let plan: Vec<(usize, bool)> = (0..=a.quick_runs)
        .flat_map(|i| {
            std::iter::once((i, false)).chain((i < a.quick_runs).then_some((i + 1, true)))
        })
        .collect();
    for (n, &(index, quick)) in plan.iter().enumerate() {
        let name = format!("{}{index}", if quick { "quick" } else { "full" });
        if !a.json {
            eprintln!(
                "tune {}/{}: {name} ({:.0} s in)",
                n + 1,
                plan.len(),
                start.elapsed().as_secs_f64()
            );
        }
        let scratch = scratch_in(&a.dir)?;
        let out = match &a.keep {
            Some(k) => k.join(format!("{name}.toml")),
            None => scratch.path().with_extension("toml"),
        };
        let started_s = start.elapsed().as_secs_f64();
        let (profile, _, _) = tune_on(&config, scratch.path(), &out, quick, &mut |_, _, _| {})?;
        if a.keep.is_none() {
            std::fs::remove_file(&out).ok();
        }
        let run = Run {
            record: "tune",
            index,
            quick,
            started_s,
            seconds: profile.measured.seconds,
            answers: (DIRECTIONS.iter())
                .map(|&(_, d, al)| Answer::of(&profile, d, al))
                .collect(),
        };
        if quick {
            quicks.push(run);
        } else {
            fulls.push(run);
        }
    }
    let (comparisons, drifts) = compare(&fulls, &quicks);
    if a.json {
        for r in fulls.iter().chain(&quicks) {
            println!("{}", serde_json::to_string(r)?);
        }
        for c in &comparisons {
            println!("{}", serde_json::to_string(c)?);
        }
        for d in &drifts {
            println!("{}", serde_json::to_string(d)?);
        }
        return Ok(());
    }
    print(&fulls, &quicks, &comparisons, &drifts);
    Ok(())
}

/// Each quick tune against the full tunes either side, and each full tune against the next.
fn compare(fulls: &[Run], quicks: &[Run]) -> (Vec<Comparison>, Vec<Drift>) {
    let (mut out, mut drifts) = (Vec::new(), Vec::new());
    for (di, &(direction, _, _)) in DIRECTIONS.iter().enumerate() {
        for q in quicks {
            let (b, f) = (&fulls[q.index - 1], &fulls[q.index]);
            out.push(Comparison {
                record: "comparison",
                index: q.index,
                direction,
                before: bins_apart(q.answers[di], b.answers[di]),
                after: bins_apart(q.answers[di], f.answers[di]),
                undecided: !q.answers[di].decided,
            });
        }
        for w in fulls.windows(2) {
            drifts.push(Drift {
                record: "drift",
                index: w[1].index,
                direction,
                bins: bins_apart(w[0].answers[di], w[1].answers[di]),
            });
        }
    }
    (out, drifts)
}

fn show_bins(b: f64) -> String {
    if b.is_infinite() {
        "never≠".into()
    } else {
        format!("{b:.1}")
    }
}

fn print(fulls: &[Run], quicks: &[Run], comparisons: &[Comparison], drifts: &[Drift]) {
    println!(
        "tunes in the order run (each direction's threshold; ~from-to: left undecided, the \
         paths tie there):"
    );
    print!("{:>8} {:>8} {:>7}", "tune", "start s", "took s");
    for (name, _, _) in DIRECTIONS {
        print!(" {name:>18}");
    }
    println!();
    let mut all: Vec<&Run> = fulls.iter().chain(quicks).collect();
    all.sort_by(|x, y| x.started_s.total_cmp(&y.started_s));
    for r in all {
        let name = format!("{}{}", if r.quick { "quick" } else { "full" }, r.index);
        print!("{name:>8} {:>8.1} {:>7.1}", r.started_s, r.seconds);
        for ans in &r.answers {
            print!(" {:>18}", ans.show());
        }
        println!();
    }
    println!(
        "\nbins (octaves) from each quick tune to the full tune before it / after it (0: the \
         ranges overlap); and between consecutive full tunes (the host's drift):"
    );
    print!("{:>8}", "quick");
    for (name, _, _) in DIRECTIONS {
        print!(" {name:>18}");
    }
    println!();
    let cell = |c: &Comparison| {
        format!(
            "{}{} / {}",
            if c.undecided { "u " } else { "" },
            show_bins(c.before),
            show_bins(c.after)
        )
    };
    for q in quicks {
        print!("{:>8}", format!("quick{}", q.index));
        for (name, _, _) in DIRECTIONS {
            let c = (comparisons.iter())
                .find(|c| c.index == q.index && c.direction == name)
                .expect("every quick tune is compared in every direction");
            print!(" {:>18}", cell(c));
        }
        println!();
    }
    for w in fulls.windows(2) {
        print!("{:>8}", format!("full{}-{}", w[0].index, w[1].index));
        for (name, _, _) in DIRECTIONS {
            let d = (drifts.iter())
                .find(|d| d.index == w[1].index && d.direction == name)
                .expect("every pair of full tunes is compared in every direction");
            print!(" {:>18}", show_bins(d.bins));
        }
        println!();
    }
    let quick = comparisons;
    println!(
        "\nquick tunes (u: undecided) within one bin of a full tune either side, or undecided: \
         {} of {}; within one bin of both, or undecided: {} of {}; undecided: {}",
        quick.iter().filter(|c| c.agrees()).count(),
        quick.len(),
        (quick.iter())
            .filter(|c| c.undecided || c.before.max(c.after) <= 1.0)
            .count(),
        quick.len(),
        quick.iter().filter(|c| c.undecided).count(),
    );
    println!(
        "consecutive full tunes within one bin of each other: {} of {}",
        drifts.iter().filter(|d| d.bins <= 1.0).count(),
        drifts.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: usize) -> Answer {
        Answer {
            lo: s,
            hi: s,
            decided: true,
        }
    }

    fn tie(lo: usize, hi: usize) -> Answer {
        Answer {
            lo,
            hi,
            decided: false,
        }
    }

    #[test]
    fn answers_are_octaves_apart_and_overlapping_ranges_agree() {
        assert_eq!(bins_apart(at(128 << 10), at(128 << 10)), 0.0);
        assert_eq!(bins_apart(at(128 << 10), at(1 << 20)), 3.0);
        assert_eq!(bins_apart(at(1 << 20), at(128 << 10)), 3.0);
        // Inside a tie: the full tune said any size there is as good.
        assert_eq!(bins_apart(at(256 << 10), tie(128 << 10, 1 << 20)), 0.0);
        assert_eq!(bins_apart(at(32 << 10), tie(128 << 10, 1 << 20)), 2.0);
        assert_eq!(
            bins_apart(tie(64 << 10, 128 << 10), tie(512 << 10, NEVER)),
            2.0
        );
        // "never" is apart from every size, and not from a tie that reaches it.
        assert!(bins_apart(at(NEVER), at(4 << 20)).is_infinite());
        assert_eq!(bins_apart(at(NEVER), at(NEVER)), 0.0);
        assert_eq!(bins_apart(at(NEVER), tie(1 << 20, NEVER)), 0.0);
    }

    fn run(index: usize, quick: bool, answers: [Answer; 4]) -> Run {
        Run {
            record: "tune",
            index,
            quick,
            started_s: 0.0,
            seconds: 0.0,
            answers: answers.to_vec(),
        }
    }

    #[test]
    fn each_quick_tune_meets_the_full_tunes_either_side() {
        let k = 1 << 10;
        let fulls = [
            run(0, false, [at(NEVER), at(k << 10), at(256 * k), at(256 * k)]),
            run(
                1,
                false,
                [at(256 * k), at(256 * k), at(128 * k), at(128 * k)],
            ),
        ];
        let quicks = [run(
            1,
            true,
            [at(512 * k), tie(64 * k, 128 * k), at(32 * k), at(NEVER)],
        )];
        let (c, drifts) = compare(&fulls, &quicks);
        let q = |d: &str| c.iter().find(|c| c.direction == d).unwrap();
        // Far from the one before, a bin from the one after.
        assert!(q("writes").before.is_infinite());
        assert_eq!(q("writes").after, 1.0);
        assert!(q("writes").agrees());
        assert!(q("writes unaligned").undecided && q("writes unaligned").agrees());
        assert_eq!((q("reads").before, q("reads").after), (3.0, 2.0));
        assert!(!q("reads").agrees());
        assert!(!q("reads unaligned").agrees());
        let drift: Vec<f64> = drifts.iter().map(|d| d.bins).collect();
        assert!(drift[0].is_infinite());
        assert_eq!(&drift[1..], [2.0, 1.0, 1.0]);
    }
}
