//! `switchyard report` end to end: real JSON from the quick modes of `tune`, `bench copy` and
//! `bench mix`, drawn into a page that headless Chromium renders. Chromium is required
//! (`bash scripts/install-deps.sh` installs it): without it this test fails.

use std::path::Path;
use std::time::Duration;

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;

fn sy(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("switchyard").unwrap();
    c.current_dir(dir);
    c
}

/// Runs `switchyard args…` in `dir` and saves its standard output as `dir/file`.
fn json_to(dir: &Path, file: &str, args: &[&str]) {
    let out = sy(dir)
        .args(args)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    std::fs::write(dir.join(file), out).unwrap();
}

/// Headless Chromium on `page` with `args` before the URL; its standard output.
fn chromium(dir: &Path, page: &Path, args: &[&str]) -> String {
    let mut c = Command::new("chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
    ])
    .arg(format!(
        "--user-data-dir={}",
        dir.join("chromium").display()
    ))
    .args(args)
    .arg(format!("file://{}", page.display()))
    .timeout(Duration::from_secs(120));
    let out = c.output().unwrap_or_else(|e| {
        panic!("chromium did not run ({e}): `bash scripts/install-deps.sh` installs it")
    });
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The element `<figure id="id">…</figure>` of `dom`.
fn figure<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("<figure id=\"{id}\""))
        .unwrap_or_else(|| panic!("no figure {id}"));
    let len = dom[start..].find("</figure>").expect("figure closed");
    &dom[start..start + len]
}

/// The value of attribute `name` in the tag starting `tag`.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    Some(&tag[at..at + tag[at..].find('"')?])
}

/// Every `<polyline>`'s stroke colour and number of points.
fn polylines(fig: &str) -> Vec<(String, usize)> {
    fig.split("<polyline")
        .skip(1)
        .map(|t| {
            let t = &t[..t.find('>').unwrap()];
            (
                attr(t, "stroke").unwrap_or("").to_string(),
                attr(t, "points").unwrap_or("").split_whitespace().count(),
            )
        })
        .collect()
}

/// How many lines of colour `color` have at least `points` points: data series, not legend
/// swatches (2 points).
fn series(fig: &str, color: &str, points: usize) -> usize {
    polylines(fig)
        .iter()
        .filter(|(c, n)| c == color && *n >= points)
        .count()
}

/// The number of filled `<rect>`s of a colour other than white: bars and legend swatches.
fn bars(fig: &str) -> usize {
    fig.split("<rect")
        .skip(1)
        .filter(|t| attr(t, "fill").is_some_and(|f| f != "#FFFFFF" && f != "none"))
        .count()
}

const CPU: &str = "#1F77B4";
const ENGINE: &str = "#FF7F0E";
const SCHEDULED: &str = "#2CA02C";
const OFFLOAD: &str = "#17BECF";

/// Counts the pixels of each colour in `colors` in the PNG at `path`, checking its size.
fn pixels(path: &Path, size: (u32, u32), colors: &[[u8; 3]]) -> Vec<usize> {
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), size);
    let step = info.color_type.samples();
    assert!(step >= 3, "{:?}", info.color_type);
    let mut counts = vec![0; colors.len()];
    for px in buf[..info.buffer_size()].chunks_exact(step) {
        if let Some(i) = colors.iter().position(|c| px[..3] == c[..]) {
            counts[i] += 1;
        }
    }
    counts
}

#[test]
fn a_report_of_real_runs_renders_every_figure_in_chromium() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    measure(dir);
    sy(dir)
        .args(["report", "--copy", "copy.json", "--mix", "mix.json"])
        .args(["--tune", "tune.json", "--out", "report.html"])
        .assert()
        .success()
        .stdout(contains("4 of 4 figures drawn"));
    let page = dir.join("report.html");
    let dom = chromium(dir, &page, &["--dump-dom"]);

    check_setup(&dom);

    check_figures(&dom);
    assert!(!dom.contains("not measured"));

    // Rendered, the plots' colours are on screen.
    let shot = dir.join("report.png");
    chromium(
        dir,
        &page,
        &[
            "--force-color-profile=srgb",
            "--window-size=1280,4000",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    let [cpu, engine, scheduled] = [[0x1f, 0x77, 0xb4], [0xff, 0x7f, 0x0e], [0x2c, 0xa0, 0x2c]];
    let seen = pixels(&shot, (1280, 4000), &[cpu, engine, scheduled]);
    assert!(
        seen.iter().all(|&n| n > 500),
        "plot colours on screen: {seen:?}"
    );

    // One input only: the others' figures say what to run.
    sy(dir)
        .args(["report", "--tune", "tune.json", "--out", "tune-only.html"])
        .assert()
        .success()
        .stdout(contains("2 of 4 figures drawn"));
    let dom = chromium(dir, &dir.join("tune-only.html"), &["--dump-dom"]);
    let f = figure(&dom, "breakdown");
    assert!(!f.contains("<svg"));
    assert!(f.contains("not measured: run <code>switchyard bench mix --json &gt; mix.json"));
    let f = figure(&dom, "scaling");
    assert!(f.contains("<svg") && f.contains("not measured: run"));
}

/// Each figure's axes, labels, and series or bars, as `dom` draws them.
fn check_figures(dom: &str) {
    let f = figure(dom, "latency");
    assert_eq!(f.matches("<svg").count(), 1);
    for text in [
        "request size (log scale)",
        "latency ÷ cpu-only latency",
        "4 KiB",
        "1 MiB",
    ] {
        assert!(f.contains(text), "latency: {text}");
    }
    // Both directions: cpu, engine and scheduled over the 3 sizes, tune's sweep (≥ 6 sizes).
    for color in [CPU, ENGINE, SCHEDULED] {
        assert_eq!(series(f, color, 3), 2, "latency {color}");
    }
    assert_eq!(series(f, OFFLOAD, 6), 2, "tune's sweep");

    let f = figure(dom, "scaling");
    for text in [
        "threads",
        "GiB/s, all threads",
        "GiB/s, all callers",
        "64 KiB requests",
    ] {
        assert!(f.contains(text), "scaling: {text}");
    }
    // Copy's paths at 1..3 threads in both directions; tune's engine and writer scaling.
    assert_eq!(series(f, CPU, 3), 3, "scaling cpu");
    assert_eq!(series(f, ENGINE, 3), 3, "scaling engine");
    assert_eq!(series(f, SCHEDULED, 3), 2, "scaling scheduled");

    let f = figure(dom, "breakdown");
    for text in [
        "throughput ÷ cpu-only",
        "bulk ×1",
        "mixed ×2",
        "+ limit M",
        "+ thresholds",
    ] {
        assert!(f.contains(text), "breakdown: {text}");
    }
    // 2 directions × 2 workloads × 2 thread counts × 5 steps, and 2 × 5 legend swatches.
    assert!(bars(f) >= 50, "breakdown bars: {}", bars(f));

    let f = figure(dom, "cpu-cost");
    for text in [
        "CPU s/GiB",
        "request size (log scale)",
        "tpcc",
        "fileserver",
        "graph",
    ] {
        assert!(f.contains(text), "cpu-cost: {text}");
    }
    for color in [CPU, ENGINE, SCHEDULED] {
        assert_eq!(series(f, color, 3), 2, "cpu-cost {color}");
    }
    // Reads: 5 workloads, writes: 4, × 4 policies; and 2 × 4 legend swatches.
    assert!(bars(f) >= 36 + 8, "cpu-cost bars: {}", bars(f));
}

/// The setup names the machine, the engine, the media and when, for every input.
fn check_setup(dom: &str) {
    // The setup names the machine, the engine, the media and when, for every input.
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|x| x.1.trim().to_string())
        });
    if let Some(cpu) = cpu {
        assert_eq!(dom.matches(&format!("<td>{cpu}, ")).count(), 3, "{cpu}");
    }
    for text in ["flush ", "SIMD ", "threads, ", " region on ", " UTC</td>"] {
        assert_eq!(dom.matches(text).count(), 3, "{text}");
    }
}

/// tune, bench copy and bench mix, quickly, their `--json` outputs in `dir` (`tune.json`,
/// `copy.json`, `mix.json`).
fn measure(dir: &Path) {
    let scratch = dir.to_str().unwrap();
    // The profile tune writes in the working directory is what bench mix's `tuned` uses.
    json_to(
        dir,
        "tune.json",
        &["tune", "--quick", "--json", "--dir", scratch],
    );
    json_to(
        dir,
        "copy.json",
        &[
            "bench",
            "copy",
            "--quick",
            "--json",
            "--region-size",
            "64M",
            "--sizes",
            "4K,64K,1M",
            "--threads",
            "3",
            "--rounds",
            "3",
        ],
    );
    json_to(
        dir,
        "mix.json",
        &[
            "bench",
            "mix",
            "--quick",
            "--json",
            "--threads",
            "1,2",
            "--rounds",
            "1",
            "--slice-ms",
            "5",
            "--dir",
            scratch,
        ],
    );
}

#[test]
fn report_refuses_bad_inputs_by_name() {
    let d = tempfile::tempdir().unwrap();
    sy(d.path())
        .arg("report")
        .assert()
        .failure()
        .stderr(contains("nothing to report"));
    sy(d.path())
        .args(["report", "--copy", "absent.json"])
        .assert()
        .failure()
        .stderr(contains("absent.json").and(contains("No such file")));
    std::fs::write(
        d.path().join("mix.json"),
        "{\"bench\":\"mix\",\"workload\":\"bulk\"}\n",
    )
    .unwrap();
    sy(d.path())
        .args(["report", "--copy", "mix.json"])
        .assert()
        .failure()
        .stderr(contains("mix.json").and(contains("pass it with --mix")));
    // With no input named, ./mix.json is read, and its damage named.
    sy(d.path())
        .arg("report")
        .assert()
        .failure()
        .stderr(contains("mix.json").and(contains("did not finish")));
    assert!(!d.path().join("report.html").exists());
}
