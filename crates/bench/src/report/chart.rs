//! Charts for `switchyard report`, drawn with plotters into SVG text.
//!
//! Plotters runs with its SVG backend and no font feature. In SVG the browser lays out and
//! renders the text, so plotters' built-in estimate of a label's size is all the layout
//! needs: nothing (no system font, no font file) is read at build or at run time, and the
//! page carries no font. Each figure is one `<svg>` element holding its panels in a grid.

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The x axis of a line chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    /// Request sizes in bytes, on a log₂ scale, ticks at powers of two in KiB/MiB.
    Size,
    /// Thread counts, linear, a tick at every count.
    Threads,
}

/// One named line of a line chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend's name.
    pub name: String,
    /// The line's colour.
    pub color: RGBColor,
    /// (x, y) points in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// A line chart: series over sizes or threads.
#[derive(Debug, Clone)]
pub struct Lines {
    /// The panel's title.
    pub title: String,
    /// What x is.
    pub x: XAxis,
    /// The y axis' label, with its unit.
    pub y_label: String,
    /// A log₂ y axis (for ratios and costs that span octaves; every y must then be above 0)
    /// instead of a linear one from 0.
    pub y_log: bool,
    /// The lines; series without points are left out, legend included.
    pub series: Vec<Series>,
    /// Vertical markers at x, each with a label (tuned thresholds, M).
    pub marks: Vec<(f64, String)>,
    /// A horizontal reference line, e.g. 1 for ratios to a baseline.
    pub reference: Option<f64>,
}

/// One named set of bars, one bar per group.
#[derive(Debug, Clone)]
pub struct BarSeries {
    /// The legend's name.
    pub name: String,
    /// The bars' colour.
    pub color: RGBColor,
    /// The value per group; `None` draws no bar there.
    pub values: Vec<Option<f64>>,
}

/// A grouped bar chart, linear y from 0.
#[derive(Debug, Clone)]
pub struct Bars {
    /// The panel's title.
    pub title: String,
    /// The groups' names, left to right.
    pub groups: Vec<String>,
    /// The y axis' label, with its unit.
    pub y_label: String,
    /// The bars of each group, in this order.
    pub series: Vec<BarSeries>,
    /// A horizontal reference line, e.g. 1 for ratios to a baseline.
    pub reference: Option<f64>,
}

/// One panel of a figure.
#[derive(Debug, Clone)]
pub enum Panel {
    /// Lines over sizes or threads.
    Lines(Lines),
    /// Grouped bars.
    Bars(Bars),
    /// What the panel would show and the lines telling how to measure it.
    Missing {
        /// The panel's title.
        title: String,
        /// Lines of text in its place.
        why: Vec<String>,
    },
}

impl Panel {
    /// The panel's legend entries: every line with points, or every set of bars.
    fn legend(&self) -> Vec<(&str, RGBColor)> {
        match self {
            Panel::Lines(c) => c
                .series
                .iter()
                .filter(|s| !s.points.is_empty())
                .map(|s| (s.name.as_str(), s.color))
                .collect(),
            Panel::Bars(c) => c
                .series
                .iter()
                .map(|s| (s.name.as_str(), s.color))
                .collect(),
            Panel::Missing { .. } => Vec::new(),
        }
    }
}

/// Width of a figure, pixels (the page scales it down on narrow screens).
const WIDTH: u32 = 1200;

/// Draws `panels` in a grid of `cols` columns, each `row_height` pixels tall, into one
/// `<svg>` element.
pub fn figure(panels: &[Panel], cols: usize, row_height: u32) -> anyhow::Result<String> {
    let rows = panels.len().div_ceil(cols);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, row_height * rows as u32))
            .into_drawing_area();
        root.fill(&WHITE)?;
        // Every panel's legend takes as many rows as the tallest one's, so that the plots of
        // a row line up.
        let width = WIDTH as i32 / cols as i32;
        let legend_rows = panels
            .iter()
            .map(|p| legend_rows(&p.legend(), width).len())
            .max()
            .unwrap_or(1);
        for (area, panel) in root.split_evenly((rows, cols)).iter().zip(panels) {
            let legend = Legend {
                entries: panel.legend(),
                rows: legend_rows,
            };
            match panel {
                Panel::Lines(c) => lines(area, c, legend)?,
                Panel::Bars(c) => bars(area, c, legend)?,
                Panel::Missing { title, why } => missing(area, title, why)?,
            }
        }
        root.present()?;
    }
    Ok(out)
}

// Text sizes as plotters takes them; its SVG backend writes `font-size` as these ÷ 1.24
// (title 16 px, axis names 14 px, ticks and legend 12 px on the page).
const TITLE_PX: u32 = 20;
const AXIS_PX: u32 = 17;
const TICK_PX: u32 = 15;

/// A number with three significant digits, without trailing zeros.
pub fn num(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Bytes in the largest binary unit that keeps the number at least 1: `512 B`, `4 KiB`,
/// `1.5 MiB`.
pub fn bytes(v: f64) -> String {
    match v {
        v if v >= (1u64 << 30) as f64 => format!("{} GiB", num(v / (1u64 << 30) as f64)),
        v if v >= (1 << 20) as f64 => format!("{} MiB", num(v / (1 << 20) as f64)),
        v if v >= 1024.0 => format!("{} KiB", num(v / 1024.0)),
        v => format!("{} B", num(v)),
    }
}

/// The smallest and largest of `vs`, or `None` if there are none.
fn extent(vs: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    vs.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

fn lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    c: &Lines,
    legend: Legend,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let xs = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(c.marks.iter().map(|m| m.0));
    let ys = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(c.reference);
    let ((x0, x1), (y0, y1)) = match (extent(xs), extent(ys)) {
        (Some(x), Some(y)) => (x, y),
        _ => return missing(area, &c.title, &["no points".to_string()]),
    };
    let area = &header(area, &c.title, legend, Swatch::Line)?;
    let x = (x0, x1);
    let y = if c.y_log {
        // From the power of two below the data to the one above: a tick at either end.
        (
            2f64.powf((y0 / 1.1).log2().floor()),
            2f64.powf((y1 * 1.1).log2().ceil()),
        )
    } else {
        (0.0, if y1 > 0.0 { y1 * 1.15 } else { 1.0 })
    };
    match (c.x, c.y_log) {
        (XAxis::Size, true) => lines_on(
            area,
            c,
            (x.0 / 1.3..x.1 * 1.3).log_scale().base(2.0),
            (y.0..y.1).log_scale().base(2.0),
        ),
        (XAxis::Size, false) => lines_on(
            area,
            c,
            (x.0 / 1.3..x.1 * 1.3).log_scale().base(2.0),
            y.0..y.1,
        ),
        (XAxis::Threads, true) => lines_on(
            area,
            c,
            x.0 - 0.25..x.1 + 0.25,
            (y.0..y.1).log_scale().base(2.0),
        ),
        (XAxis::Threads, false) => lines_on(area, c, x.0 - 0.25..x.1 + 0.25, y.0..y.1),
    }
}

/// Draws a line chart on the axes given (linear or log, per axis).
fn lines_on<DB, X, Y>(area: &DrawingArea<DB, Shift>, c: &Lines, x: X, y: Y) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(46)
        .y_label_area_size(62)
        .build_cartesian_2d(x, y)?;
    let (x_range, y_range) = (chart.x_range(), chart.y_range());
    let x_fmt = |v: &f64| match c.x {
        XAxis::Size => bytes(*v),
        XAxis::Threads => num(*v),
    };
    let y_fmt = |v: &f64| num(*v);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(match c.x {
        XAxis::Size => "request size (log scale)",
        XAxis::Threads => "threads",
    })
    .y_desc(&c.y_label)
    .x_label_formatter(&x_fmt)
    .y_label_formatter(&y_fmt)
    .label_style(("sans-serif", TICK_PX))
    .axis_desc_style(("sans-serif", AXIS_PX))
    .light_line_style(WHITE);
    if c.x == XAxis::Threads {
        // A tick per thread count: the range is n + ½ wide, so whole steps fit n labels.
        mesh.x_labels((x_range.end - x_range.start).round() as usize);
    }
    mesh.draw()?;
    if let Some(r) = c.reference {
        chart.draw_series(LineSeries::new(
            [(x_range.start, r), (x_range.end, r)],
            BLACK.mix(0.5).stroke_width(1),
        ))?;
    }
    for (at, label) in &c.marks {
        chart.draw_series(DashedLineSeries::new(
            [(*at, y_range.start), (*at, y_range.end)],
            6,
            4,
            BLACK.mix(0.6).stroke_width(1),
        ))?;
        chart.draw_series(std::iter::once(Text::new(
            format!(" {label}"),
            (*at, y_range.end),
            ("sans-serif", TICK_PX).into_font().color(&BLACK.mix(0.8)),
        )))?;
    }
    for s in &c.series {
        chart.draw_series(LineSeries::new(
            s.points.iter().copied(),
            s.color.stroke_width(2),
        ))?;
        chart.draw_series(
            s.points
                .iter()
                .map(|&p| Circle::new(p, 3, s.color.filled())),
        )?;
    }
    Ok(())
}

fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    c: &Bars,
    legend: Legend,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let top = c
        .series
        .iter()
        .flat_map(|s| s.values.iter().flatten().copied())
        .chain(c.reference)
        .fold(0.0, f64::max);
    if c.groups.is_empty() || top <= 0.0 {
        return missing(area, &c.title, &["no values".to_string()]);
    }
    let n = c.groups.len();
    let area = &header(area, &c.title, legend, Swatch::Block)?;
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(46)
        .y_label_area_size(62)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..top * 1.15)?;
    // Group i is centred on x = i; ticks at whole numbers carry the group names.
    let x_fmt = |v: &f64| {
        let i = v.round();
        if (v - i).abs() < 1e-6 && i >= 0.0 {
            c.groups.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let y_fmt = |v: &f64| num(*v);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .y_desc(&c.y_label)
        .label_style(("sans-serif", TICK_PX))
        .axis_desc_style(("sans-serif", AXIS_PX))
        .light_line_style(WHITE)
        .draw()?;
    let width = 0.8 / c.series.len().max(1) as f64;
    for (k, s) in c.series.iter().enumerate() {
        chart.draw_series(s.values.iter().enumerate().filter_map(|(i, v)| {
            let left = i as f64 - 0.4 + k as f64 * width;
            v.map(|v| Rectangle::new([(left, 0.0), (left + width * 0.9, v)], s.color.filled()))
        }))?;
    }
    if let Some(r) = c.reference {
        chart.draw_series(LineSeries::new(
            [(-0.5, r), (n as f64 - 0.5, r)],
            BLACK.mix(0.5).stroke_width(1),
        ))?;
    }
    Ok(())
}

/// How a legend entry shows its series.
#[derive(Clone, Copy)]
enum Swatch {
    /// A line with a point, for line charts.
    Line,
    /// A filled square, for bars.
    Block,
}

/// Rough width of `text` in plotters' size `px`: what a sans-serif font's average glyph takes
/// (the browser renders the text, so this only has to leave room, not to be exact).
fn text_width(text: &str, px: u32) -> i32 {
    (text.chars().count() as f64 * px as f64 / 1.24 * 0.6).ceil() as i32
}

/// A panel's legend: its entries, in rows that take at least `rows` rows.
struct Legend<'a> {
    entries: Vec<(&'a str, RGBColor)>,
    rows: usize,
}

const LEGEND_ROW: i32 = 18;
const SWATCH: i32 = 22;
const LEGEND_GAP: i32 = 16;

/// The width of a legend entry.
fn entry_width(name: &str) -> i32 {
    SWATCH + text_width(name, TICK_PX) + LEGEND_GAP
}

/// `entries` in rows that fit `width` pixels (with a 12 pixel margin on each side).
fn legend_rows<'a>(entries: &[(&'a str, RGBColor)], width: i32) -> Vec<Vec<(&'a str, RGBColor)>> {
    let width = width - 24;
    let mut rows: Vec<Vec<(&str, RGBColor)>> = vec![Vec::new()];
    let mut used = 0;
    for &(name, color) in entries {
        let w = entry_width(name);
        if used + w > width && rows.last().is_some_and(|r| !r.is_empty()) {
            rows.push(Vec::new());
            used = 0;
        }
        rows.last_mut()
            .expect("one row at least")
            .push((name, color));
        used += w;
    }
    rows
}

/// Draws a panel's title and, below it, its legend, each row centred, so that the legend
/// never covers data. Returns the area left for the chart.
fn header<'a, DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    legend: Legend<'a>,
    swatch: Swatch,
) -> anyhow::Result<DrawingArea<DB, Shift>>
where
    DB::ErrorType: 'static,
{
    let area = area.titled(title, ("sans-serif", TITLE_PX))?;
    let width = area.dim_in_pixel().0 as i32;
    let rows = legend_rows(&legend.entries, width);
    let height = rows.len().max(legend.rows) as i32 * LEGEND_ROW + 6;
    let (strip, rest) = area.split_vertically(height);
    let text = ("sans-serif", TICK_PX)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (r, row) in rows.iter().enumerate() {
        let total: i32 = row.iter().map(|e| entry_width(e.0)).sum::<i32>() - LEGEND_GAP;
        let mut x = (width - total).max(0) / 2;
        let y = r as i32 * LEGEND_ROW + LEGEND_ROW / 2 + 2;
        for &(name, color) in row {
            match swatch {
                Swatch::Line => {
                    strip.draw(&PathElement::new(
                        vec![(x, y), (x + SWATCH - 6, y)],
                        color.stroke_width(2),
                    ))?;
                    strip.draw(&Circle::new((x + (SWATCH - 6) / 2, y), 3, color.filled()))?;
                }
                Swatch::Block => {
                    strip.draw(&Rectangle::new(
                        [(x + 2, y - 6), (x + 14, y + 6)],
                        color.filled(),
                    ))?;
                }
            }
            strip.draw(&Text::new(name.to_string(), (x + SWATCH, y), text.clone()))?;
            x += entry_width(name);
        }
    }
    Ok(rest)
}

/// A panel with no data: its title and, in its place, what to run to measure it.
fn missing<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    why: &[String],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let (w, h) = area.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    area.draw(&Rectangle::new(
        [(12, 12), (w - 12, h - 12)],
        ShapeStyle::from(BLACK.mix(0.3)).stroke_width(1),
    ))?;
    let style = |px: u32| {
        ("sans-serif", px)
            .into_font()
            .color(&BLACK.mix(0.75))
            .pos(Pos::new(HPos::Center, VPos::Center))
    };
    area.draw(&Text::new(title.to_string(), (w / 2, 34), style(TITLE_PX)))?;
    for (i, line) in why.iter().enumerate() {
        let y = h / 2 + (i as i32 * 2 - why.len() as i32 + 1) * 11;
        area.draw(&Text::new(line.clone(), (w / 2, y), style(TICK_PX + 1)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_sizes_read_as_people_write_them() {
        assert_eq!(num(1.0), "1");
        assert_eq!(num(0.0625), "0.0625");
        assert_eq!(num(1.5), "1.5");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(2048.0), "2048");
        assert_eq!(bytes(4096.0), "4 KiB");
        assert_eq!(bytes(1536.0 * 1024.0), "1.5 MiB");
        assert_eq!(bytes(512.0), "512 B");
    }

    fn series(name: &str, points: &[(f64, f64)]) -> Series {
        Series {
            name: name.into(),
            color: BLUE,
            points: points.to_vec(),
        }
    }

    #[test]
    fn a_figure_has_every_series_axis_label_and_placeholder() {
        let panels = [
            Panel::Lines(Lines {
                title: "sizes".into(),
                x: XAxis::Size,
                y_label: "latency ÷ cpu-only".into(),
                y_log: true,
                series: vec![
                    series("alpha", &[(4096.0, 1.0), (65536.0, 2.0)]),
                    series("empty", &[]),
                ],
                marks: vec![(16384.0, "threshold".into())],
                reference: Some(1.0),
            }),
            Panel::Bars(Bars {
                title: "bars".into(),
                groups: vec!["bulk ×1".into(), "mixed ×1".into()],
                y_label: "GiB/s".into(),
                series: vec![BarSeries {
                    name: "beta".into(),
                    color: RED,
                    values: vec![Some(1.0), None],
                }],
                reference: None,
            }),
            Panel::Missing {
                title: "absent".into(),
                why: vec!["not measured".into()],
            },
        ];
        let svg = figure(&panels, 2, 300).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..60]);
        for text in [
            "alpha",
            "beta",
            "latency ÷ cpu-only",
            "request size (log scale)",
            "4 KiB",
            "64 KiB",
            "threshold",
            "bulk ×1",
            "mixed ×1",
            "GiB/s",
            "not measured",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        // A series without points has no legend entry.
        assert!(!svg.contains("empty"));
        // Odd powers of two are ticks on a log₂ axis; sizes in between are not.
        assert!(svg.contains("32 KiB") && !svg.contains("48 KiB"));
        // One bar: the other group's value is absent.
        let bars_drawn = svg.matches("fill=\"#FF0000\"").count();
        assert_eq!(bars_drawn, 2, "one bar and its legend swatch");
    }
}
