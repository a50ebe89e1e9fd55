//! The SVG chart of ratios (`--svg`): one horizontal bar per workload and headline metric,
//! at the median ratio, with a whisker from min to max and a line at parity (1.0).

use std::path::Path;

use plotters::prelude::*;

use crate::compare::Report;
use crate::metrics::label;

const CHARTED: &[&str] = &[
    "ops_per_sec",
    "cpu_us_per_op",
    "p99_us",
    "boot_ms",
    "bytes_per_key",
];

pub fn write_svg(report: &Report, path: &Path) -> Result<(), String> {
    let mut rows: Vec<(String, f64, f64, f64)> = Vec::new();
    for w in &report.workloads {
        for metric in CHARTED {
            if let Some(s) = w.summary.get(*metric) {
                rows.push((
                    format!("{} {}", w.name, label(metric)),
                    s.ratio.median,
                    s.ratio.min,
                    s.ratio.max,
                ));
            }
        }
    }
    if rows.is_empty() {
        return Err("nothing to chart".into());
    }
    let x_max = rows.iter().map(|r| r.3).fold(1.0f64, f64::max) * 1.1;
    let height = 80 + 22 * rows.len() as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<std::io::Error>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let caption = format!(
        "{} / {} (median of paired ratios, whiskers min–max)",
        report.b_label, report.a_label
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(260)
        .build_cartesian_2d(0f64..x_max, 0f64..rows.len() as f64)
        .map_err(err)?;
    let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows.len())
        .y_label_formatter(&|y| {
            let i = y.floor() as usize;
            names.get(i).cloned().unwrap_or_default()
        })
        .x_desc("ratio")
        .draw()
        .map_err(err)?;
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| {
            let y = i as f64;
            Rectangle::new([(0.0, y + 0.2), (r.1, y + 0.8)], BLUE.mix(0.5).filled())
        }))
        .map_err(err)?;
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| {
            let y = i as f64 + 0.5;
            PathElement::new(vec![(r.2, y), (r.3, y)], BLACK)
        }))
        .map_err(err)?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(1.0, 0.0), (1.0, rows.len() as f64)],
            RED,
        )))
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
