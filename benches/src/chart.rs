//! SVG charts for the report (plotters, SVG backend only: text is left to
//! the SVG viewer, no font files are read).
//!
//! Every chart draws an engine in the same colour ([`color`]). pagestream
//! engines are solid lines with filled markers (filled bars); baselines are
//! dashed lines with hollow markers (pale bars with an outline). Each point
//! or bar carries a whisker from the fastest to the slowest run; the series
//! of a line chart are shifted apart by a few pixels so that whiskers at
//! one x stay visible. Log axes
//! are drawn on the logarithm of the value, with ticks at the values
//! themselves (`1, 2, 4, …` for depths, `0.01, 0.1, 1` for densities,
//! `1, 10, 100, 1k` for rates) instead of plotters' exponent labels.

use crate::scan::Engine;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::io;
use std::ops::Range;
use std::path::Path;

fn err<E: std::fmt::Display>(e: E) -> io::Error {
    io::Error::other(format!("cannot draw chart: {e}"))
}

/// Every engine's colour, the same in every chart.
pub const COLORS: [(Engine, RGBColor); 15] = [
    (Engine::ThreadPool, RGBColor(31, 119, 180)),
    (Engine::TokioUring, RGBColor(255, 127, 14)),
    (Engine::Glommio, RGBColor(44, 160, 44)),
    (Engine::Uring, RGBColor(214, 39, 40)),
    (Engine::UringTokio, RGBColor(227, 119, 194)),
    (Engine::UringTokioBlockOn, RGBColor(188, 189, 34)),
    (Engine::ThreadPoolTokio, RGBColor(23, 190, 207)),
    (Engine::PreadLoop, RGBColor(90, 90, 90)),
    (Engine::FadvisePrefetch, RGBColor(140, 86, 75)),
    (Engine::TokioFs, RGBColor(148, 103, 189)),
    (Engine::GlommioStream, RGBColor(150, 150, 30)),
    (Engine::TokioIoUring, RGBColor(102, 51, 153)),
    (Engine::TokioUringFs, RGBColor(230, 160, 90)),
    (Engine::BareUringTokio, RGBColor(120, 120, 120)),
    (Engine::Fio, RGBColor(0, 0, 0)),
];

/// `e`'s colour.
pub fn color(e: Engine) -> RGBColor {
    COLORS
        .iter()
        .find(|(k, _)| *k == e)
        .map_or(BLACK, |(_, c)| *c)
}

/// `c` as `#rrggbb`.
pub fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// A marker shape, to tell apart two series of one engine (forward and
/// backward, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// A circle.
    Circle,
    /// A triangle.
    Triangle,
    /// A square.
    Square,
}

/// One measured point: median with the range of the runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Position on the x axis.
    pub x: f64,
    /// Median.
    pub median: f64,
    /// Slowest run.
    pub min: f64,
    /// Fastest run.
    pub max: f64,
}

/// One line of a line chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Whose colour and line style.
    pub engine: Engine,
    /// Marker shape.
    pub marker: Marker,
    /// The points, in x order.
    pub points: Vec<Point>,
}

/// One bar of a bar chart.
#[derive(Debug, Clone)]
pub struct Bar {
    /// Axis label.
    pub name: String,
    /// Whose colour and style.
    pub engine: Engine,
    /// Median with the range of the runs (`x` unused).
    pub value: Point,
}

/// How an axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Linear from zero.
    Linear,
    /// Logarithmic (every value must be positive).
    Log,
}

/// A number as a tick label: `0.001`, `1`, `16`, `250`, `1.5k`, `12k`, `2M`.
pub fn tick_label(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if a >= 1e6 {
        trim(format!("{:.1}", v / 1e6)) + "M"
    } else if a >= 1e4 {
        trim(format!("{:.0}", v / 1e3)) + "k"
    } else if a >= 1e3 {
        trim(format!("{:.1}", v / 1e3)) + "k"
    } else if a >= 1.0 || a == 0.0 {
        trim(format!("{v:.1}"))
    } else {
        trim(format!("{v:.4}"))
    }
}

/// Ticks of a log axis over `lo..=hi`: 1, 2 and 5 times each power of ten;
/// every multiple where that gives fewer than four, decades only where it
/// gives more than ten.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if lo <= 0.0 || hi < lo {
        return Vec::new();
    }
    let with = |mult: &[f64]| {
        let mut out = Vec::new();
        let mut p = 10f64.powi(lo.log10().floor() as i32);
        while p <= hi * 1.0001 {
            for m in mult {
                let v = p * m;
                if v >= lo * 0.9999 && v <= hi * 1.0001 {
                    out.push(v);
                }
            }
            p *= 10.0;
        }
        out
    };
    let t = with(&[1.0, 2.0, 5.0]);
    if t.len() > 10 {
        return with(&[1.0]);
    }
    if t.len() < 4 {
        let all = with(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        if all.len() <= 10 {
            return all;
        }
    }
    t
}

/// A value on an axis of `scale` (the chart's own coordinate).
fn to_axis(scale: Scale, v: f64) -> f64 {
    match scale {
        Scale::Linear => v,
        Scale::Log => v.max(f64::MIN_POSITIVE).log10(),
    }
}

/// Ticks of an axis of `scale` from `lo` to `hi` (axis coordinates), as
/// axis coordinates: at `data_ticks` (data values) if given, else 1-2-5
/// steps.
fn axis_ticks(scale: Scale, lo: f64, hi: f64, data_ticks: Option<&[f64]>) -> Vec<f64> {
    match (scale, data_ticks) {
        (_, Some(t)) => t.iter().map(|&v| to_axis(scale, v)).collect(),
        (Scale::Log, None) => log_ticks(10f64.powf(lo), 10f64.powf(hi))
            .into_iter()
            .map(|v| v.log10())
            .collect(),
        (Scale::Linear, None) => {
            // 1, 2 or 5 times a power of ten, 4 to 10 ticks.
            let span = (hi - lo).max(f64::MIN_POSITIVE);
            let raw = span / 6.0;
            let p = 10f64.powf(raw.log10().floor());
            let step = [1.0, 2.0, 5.0, 10.0]
                .into_iter()
                .map(|m| m * p)
                .find(|s| span / s <= 8.0)
                .unwrap_or(10.0 * p);
            let mut v = (lo / step).ceil() * step;
            let mut out = Vec::new();
            while v <= hi + step * 1e-9 {
                out.push(v);
                v += step;
            }
            out
        }
    }
}

fn label_of(scale: Scale, v: f64) -> String {
    match scale {
        Scale::Linear => tick_label(v),
        Scale::Log => tick_label(10f64.powf(v)),
    }
}

/// The range of an axis of `scale` holding `lo..=hi` (data values) with a
/// margin; linear axes start at zero.
fn axis_range(scale: Scale, lo: f64, hi: f64) -> (f64, f64) {
    match scale {
        Scale::Linear => (0.0, if hi > 0.0 { hi * 1.12 } else { 1.0 }),
        Scale::Log => {
            let (a, b) = (to_axis(scale, lo), to_axis(scale, hi));
            let pad = ((b - a) * 0.06).max(0.05);
            (a - pad, b + pad)
        }
    }
}

/// A linear `f64` axis with the given ticks (plotters picks its own
/// otherwise, and labels a log axis `1e2`).
struct Ticked {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ticked {
    fn new(lo: f64, hi: f64, ticks: Vec<f64>) -> Ticked {
        let hi = if hi > lo { hi } else { lo + 1.0 };
        Ticked { lo, hi, ticks }
    }
}

impl Ranged for Ticked {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let f = (v - self.lo) / (self.hi - self.lo);
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Ticked {
    fn format(v: &f64) -> String {
        tick_label(*v)
    }
}

/// A whisker from `lo` to `hi` at `x`, caps `half` wide (axis units).
fn whisker(x: f64, lo: f64, hi: f64, half: f64, style: ShapeStyle) -> [PathElement<(f64, f64)>; 3] {
    [
        PathElement::new(vec![(x, lo), (x, hi)], style),
        PathElement::new(vec![(x - half, lo), (x + half, lo)], style),
        PathElement::new(vec![(x - half, hi), (x + half, hi)], style),
    ]
}

/// Line style of `e`: pagestream solid and filled, baselines dashed and
/// hollow.
fn styles(e: Engine) -> (ShapeStyle, ShapeStyle, bool) {
    let c = color(e);
    let line = c.stroke_width(2);
    let mark = c.stroke_width(2);
    (line, mark, e.is_pagestream())
}

/// A line chart of `series` to `path`. `x_ticks`: the x values to label
/// (the measured ones, e.g. depths 1, 16, 64); `None` picks them.
#[allow(clippy::too_many_arguments)]
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    x_scale: Scale,
    y_scale: Scale,
    x_ticks: Option<&[f64]>,
    series: &[Series],
) -> io::Result<()> {
    let pts = || series.iter().flat_map(|s| s.points.iter());
    if pts().next().is_none() {
        return Ok(());
    }
    let fold = |f: fn(&Point) -> f64| {
        pts()
            .map(f)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                (a.min(v), b.max(v))
            })
    };
    let (x_lo, x_hi) = fold(|p| p.x);
    let (y_lo, _) = fold(|p| p.min);
    let (_, y_hi) = fold(|p| p.max);
    let (x0, x1) = match x_scale {
        Scale::Linear => {
            let pad = ((x_hi - x_lo) * 0.05).max(0.5);
            (x_lo - pad, x_hi + pad)
        }
        Scale::Log => axis_range(Scale::Log, x_lo, x_hi),
    };
    let (y0, y1) = axis_range(y_scale, y_lo.max(f64::MIN_POSITIVE), y_hi);
    let xt = axis_ticks(x_scale, x0, x1, x_ticks);
    let yt = axis_ticks(y_scale, y0, y1, None);
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(Ticked::new(x0, x1, xt), Ticked::new(y0, y1, yt))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|v| label_of(x_scale, *v))
        .y_label_formatter(&|v| label_of(y_scale, *v))
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .map_err(err)?;
    let half = (x1 - x0) * 0.006;
    // Series are shifted apart a little along x so their whiskers at one x
    // do not hide each other.
    let dodge = |i: usize| (i as f64 - (series.len() as f64 - 1.0) / 2.0) * (x1 - x0) * 0.005;
    for (i, s) in series.iter().enumerate() {
        let (line, mark, solid) = styles(s.engine);
        let shift = dodge(i);
        let xy: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|p| (to_axis(x_scale, p.x) + shift, to_axis(y_scale, p.median)))
            .collect();
        let anno = if solid {
            chart
                .draw_series(LineSeries::new(xy.iter().copied(), line))
                .map_err(err)?
        } else {
            chart
                .draw_series(DashedLineSeries::new(xy.iter().copied(), 7, 5, line))
                .map_err(err)?
        };
        // Solid: one line through the marker; dashed: a gap around it.
        let (a, b) = if solid {
            ((-4, 9), (9, 22))
        } else {
            ((-4, 4), (14, 22))
        };
        // Hollow markers are filled white, so the line does not show through.
        let fill = if solid {
            color(s.engine).filled()
        } else {
            WHITE.filled()
        };
        // A marker centred `dx` pixels right of the anchor.
        macro_rules! marker {
            (Circle, $at:expr, $dx:expr) => {
                EmptyElement::at($at)
                    + Circle::new(($dx, 0), 4, fill)
                    + Circle::new(($dx, 0), 4, mark)
            };
            (Triangle, $at:expr, $dx:expr) => {
                EmptyElement::at($at)
                    + Polygon::new(vec![($dx, -6), ($dx + 5, 4), ($dx - 5, 4)], fill)
                    + PathElement::new(vec![($dx, -6), ($dx + 5, 4), ($dx - 5, 4), ($dx, -6)], mark)
            };
            (Square, $at:expr, $dx:expr) => {
                EmptyElement::at($at)
                    + Rectangle::new([($dx - 4, -4), ($dx + 4, 4)], fill)
                    + Rectangle::new([($dx - 4, -4), ($dx + 4, 4)], mark)
            };
        }
        macro_rules! legend_and_points {
            ($kind:ident) => {{
                anno.label(s.name.as_str()).legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(a.0, 0), (a.1, 0)], line)
                        + PathElement::new(vec![(b.0, 0), (b.1, 0)], line)
                        + marker!($kind, (0, 0), 9)
                });
                for p in &s.points {
                    let x = to_axis(x_scale, p.x) + shift;
                    chart
                        .draw_series(whisker(
                            x,
                            to_axis(y_scale, p.min),
                            to_axis(y_scale, p.max),
                            half,
                            color(s.engine).stroke_width(1),
                        ))
                        .map_err(err)?;
                }
                chart
                    .draw_series(xy.iter().map(|&at| marker!($kind, at, 0)))
                    .map(|_| ())
            }};
        }
        match s.marker {
            Marker::Circle => legend_and_points!(Circle),
            Marker::Triangle => legend_and_points!(Triangle),
            Marker::Square => legend_and_points!(Square),
        }
        .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// Bars whose medians differ by more than this factor get a log axis.
pub const BAR_LOG_RATIO: f64 = 30.0;

/// A bar chart (one bar per [`Bar`], whiskers over the runs' range) to
/// `path`; the value axis is logarithmic when the bars differ by more than
/// [`BAR_LOG_RATIO`] (a cached read and a `tokio::fs` read in one chart).
pub fn bar_chart(path: &Path, title: &str, y_label: &str, bars: &[Bar]) -> io::Result<()> {
    if bars.is_empty() {
        return Ok(());
    }
    let y_hi = bars.iter().map(|b| b.value.max).fold(0.0, f64::max);
    let y_lo = bars
        .iter()
        .map(|b| b.value.min)
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let scale = if y_lo.is_finite() && y_hi / y_lo > BAR_LOG_RATIO {
        Scale::Log
    } else {
        Scale::Linear
    };
    let (y0, y1) = axis_range(scale, y_lo, y_hi);
    let yt = axis_ticks(scale, y0, y1, None);
    let y = |v: f64| to_axis(scale, v).max(y0);
    let n = bars.len();
    let xt: Vec<f64> = (0..n).map(|i| i as f64 + 0.5).collect();
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(60)
        .y_label_area_size(70)
        .build_cartesian_2d(Ticked::new(0.0, n as f64, xt), Ticked::new(y0, y1, yt))
        .map_err(err)?;
    let names: Vec<String> = bars.iter().map(|b| b.name.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|x| {
            names
                .get(x.floor().max(0.0) as usize)
                .cloned()
                .unwrap_or_default()
        })
        .x_label_style(("sans-serif", 12))
        .y_label_formatter(&|v| label_of(scale, *v))
        .y_desc(y_label)
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .map_err(err)?;
    for (i, b) in bars.iter().enumerate() {
        let c = color(b.engine);
        let (l, r) = (i as f64 + 0.15, i as f64 + 0.85);
        let rect = [(l, y0), (r, y(b.value.median))];
        if b.engine.is_pagestream() {
            chart
                .draw_series([Rectangle::new(rect, c.filled())])
                .map_err(err)?;
        } else {
            chart
                .draw_series([
                    Rectangle::new(rect, c.mix(0.18).filled()),
                    Rectangle::new(rect, c.stroke_width(2)),
                ])
                .map_err(err)?;
        }
        let mid = i as f64 + 0.5;
        chart
            .draw_series(whisker(
                mid,
                y(b.value.min),
                y(b.value.max),
                0.12,
                BLACK.stroke_width(1),
            ))
            .map_err(err)?;
        let font = ("sans-serif", 13)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        chart
            .draw_series([Text::new(
                format!("{:.0}", b.value.median),
                (mid, y(b.value.max) + (y1 - y0) * 0.01),
                font,
            )])
            .map_err(err)?;
    }
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_plain_numbers() {
        assert_eq!(tick_label(1.0), "1");
        assert_eq!(tick_label(16.0), "16");
        assert_eq!(tick_label(250.0), "250");
        assert_eq!(tick_label(1500.0), "1.5k");
        assert_eq!(tick_label(12000.0), "12k");
        assert_eq!(tick_label(0.01), "0.01");
        assert_eq!(tick_label(0.001), "0.001");
        assert_eq!(tick_label(2.5e6), "2.5M");
    }

    #[test]
    fn log_ticks_are_decades_or_1_2_5() {
        assert_eq!(log_ticks(1.0, 64.0), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        assert_eq!(
            log_ticks(0.01, 1.0),
            vec![0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]
        );
        let wide = log_ticks(1.0, 1e6);
        assert_eq!(wide, vec![1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]);
        let narrow = log_ticks(6e3, 4.5e4);
        assert_eq!(narrow, vec![6e3, 7e3, 8e3, 9e3, 1e4, 2e4, 3e4, 4e4]);
    }

    #[test]
    fn every_engine_has_its_own_colour() {
        for e in Engine::ALL.into_iter().chain(Engine::TOKIO) {
            let n = COLORS.iter().filter(|(k, _)| *k == e).count();
            assert_eq!(n, 1, "{e}");
        }
        for (i, (_, a)) in COLORS.iter().enumerate() {
            for (_, b) in &COLORS[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    /// A log-log chart labels its ticks with the measured depths and plain
    /// rates, draws each engine in its colour and a baseline's markers
    /// hollow (white fill).
    #[test]
    fn line_chart_labels_and_colours() {
        let p = |x: f64, y: f64| Point {
            x,
            median: y,
            min: y * 0.9,
            max: y * 1.1,
        };
        let series = [
            Series {
                name: "threadpool".into(),
                engine: Engine::ThreadPool,
                marker: Marker::Circle,
                points: vec![p(1.0, 900.0), p(16.0, 9000.0), p(64.0, 30000.0)],
            },
            Series {
                name: "pread-loop".into(),
                engine: Engine::PreadLoop,
                marker: Marker::Circle,
                points: vec![p(1.0, 800.0), p(16.0, 1000.0), p(64.0, 1100.0)],
            },
        ];
        let path = std::env::temp_dir().join(format!("chart-test-{}.svg", std::process::id()));
        line_chart(
            &path,
            "t",
            "max_ios",
            "pages/s",
            Scale::Log,
            Scale::Log,
            Some(&[1.0, 16.0, 64.0]),
            &series,
        )
        .expect("chart");
        let svg = std::fs::read_to_string(&path).expect("svg");
        let _ = std::fs::remove_file(&path);
        let texts: Vec<&str> = svg
            .split("</text>")
            .filter_map(|t| t.rsplit('>').next())
            .map(str::trim)
            .collect();
        for want in ["1", "16", "64", "1k", "10k"] {
            assert!(texts.contains(&want), "no tick {want:?} in {texts:?}");
        }
        assert!(!texts.iter().any(|t| t.contains("e+") || t.contains("e3")));
        let svg = svg.to_lowercase();
        for e in [Engine::ThreadPool, Engine::PreadLoop] {
            assert!(
                svg.contains(&format!("stroke=\"{}\"", hex(color(e)))),
                "{e}"
            );
        }
        // Filled markers for pagestream, white-filled ones for the baseline.
        assert!(svg.contains(&format!("fill=\"{}\"", hex(color(Engine::ThreadPool)))));
        let hollow = svg
            .split("<circle")
            .skip(1)
            .filter(|c| {
                c.split('>')
                    .next()
                    .is_some_and(|c| c.contains("fill=\"#ffffff\""))
            })
            .count();
        assert!(hollow >= 3, "{hollow} hollow markers");
    }
}
