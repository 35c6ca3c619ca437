//! SVG charts for the report (plotters, SVG backend only: text is left to
//! the SVG viewer, no font files are read).

use plotters::prelude::*;
use std::io;
use std::path::Path;

/// One line of a line chart: a name and its points.
pub type Series = (String, Vec<(f64, f64)>);

fn err<E: std::fmt::Display>(e: E) -> io::Error {
    io::Error::other(format!("cannot draw chart: {e}"))
}

const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// A line chart of `series` to `path`; `log_x` puts x on a log scale (all x
/// must then be positive).
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    log_x: bool,
    series: &[Series],
) -> io::Result<()> {
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        return Ok(());
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.1 } else { 1.0 };
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut b = ChartBuilder::on(&root);
    b.caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .draw()
                .map_err(err)?;
            for (i, (name, p)) in series.iter().enumerate() {
                let color = COLORS[i % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(p.iter().copied(), color.stroke_width(2)))
                    .map_err(err)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                    });
                chart
                    .draw_series(
                        p.iter()
                            .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
                    )
                    .map_err(err)?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(err)?;
        }};
    }
    if log_x {
        draw!(b
            .build_cartesian_2d((x0..x1).log_scale(), 0.0..y1)
            .map_err(err)?);
    } else {
        draw!(b.build_cartesian_2d(x0..x1, 0.0..y1).map_err(err)?);
    }
    root.present().map_err(err)
}

/// A bar chart (one bar per `(name, value)`) to `path`.
pub fn bar_chart(
    path: &Path,
    title: &str,
    y_label: &str,
    bars: &[(String, f64)],
) -> io::Result<()> {
    if bars.is_empty() {
        return Ok(());
    }
    let y1 = bars.iter().map(|b| b.1).fold(0.0, f64::max) * 1.15;
    let y1 = if y1 > 0.0 { y1 } else { 1.0 };
    let n = bars.len();
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n as f64, 0.0..y1)
        .map_err(err)?;
    let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 && i < names.len() {
                names[i].clone()
            } else {
                String::new()
            }
        })
        .y_desc(y_label)
        .draw()
        .map_err(err)?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
            let color = COLORS[i % COLORS.len()];
            Rectangle::new(
                [(i as f64 + 0.1, 0.0), (i as f64 + 0.9, *v)],
                color.filled(),
            )
        }))
        .map_err(err)?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
            Text::new(
                format!("{v:.0}"),
                (i as f64 + 0.3, *v + y1 * 0.02),
                ("sans-serif", 13),
            )
        }))
        .map_err(err)?;
    root.present().map_err(err)
}
