//! The page as HTML: its head and style, the table of where each input was measured, and each
//! figure as HTML.

use std::path::Path;

use anyhow::Context;

use super::chart;
use super::figures::{plural, Figure};
use super::input::Kind;
use super::Inputs;
use crate::measure::Setup;

/// `s` with HTML's special characters escaped.
pub(super) fn esc(s: &str) -> String {
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
pub(super) fn utc(unix: u64) -> String {
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
pub(super) fn backing(s: &Setup) -> String {
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
pub(super) fn setup_table(i: &Inputs) -> String {
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
pub(super) const HEAD: &str =
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
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
pub(super) fn page(i: &Inputs, figures: &[Figure], made: u64) -> anyhow::Result<String> {
    let mut h = String::from(HEAD);
    h += "<section id=\"setup\">\n<h2>Measured on</h2>\n";
    h += &setup_table(i);
    if let Some((path, t)) = &i.tune {
        h += &format!(
            "<p>The engine profile from <code>{}</code> (what the tuned scheduler \
             uses):</p>\n<pre>{}</pre>\n",
            esc(&path.display().to_string()),
            esc(&switchyard_options::tune::describe(&t.profile))
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
pub(super) fn figure_html(f: &Figure) -> anyhow::Result<String> {
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
