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
mod figures;
mod html;
mod input;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;

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
    let figures = figures::figures(&inputs);
    let page = html::page(&inputs, &figures, now())?;
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

#[cfg(test)]
mod tests {
    use super::chart::{Lines, Panel};
    use super::figures::*;
    use super::html::*;
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
