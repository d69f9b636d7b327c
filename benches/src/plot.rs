//! `rma-plot`: reads the `--json` output of one or more runs and draws latency or
//! bandwidth against message size, log-log, one line per run (and a dashed line for its
//! reference when the run had `--reference`), as SVG and PNG.
//!
//! A run is the lines of one file that share benchmark, backend, window and sync. Text
//! is drawn with DejaVu Sans, embedded (no system fonts or fontconfig needed).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::osu::JsonLine;

/// What a run measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// `latency_us`.
    Latency,
    /// `bandwidth_mb_s`.
    Bandwidth,
}

impl Metric {
    /// The y axis' description.
    pub const fn heading(self) -> &'static str {
        match self {
            Metric::Latency => "Latency (us)",
            Metric::Bandwidth => "Bandwidth (MB/s)",
        }
    }
}

/// One line of the plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Its legend.
    pub label: String,
    /// What it measured.
    pub metric: Metric,
    /// (size, value) in size order.
    pub points: Vec<(f64, f64)>,
    /// (size, reference value), empty without `--reference`.
    pub reference: Vec<(f64, f64)>,
}

/// A text field of a line, `?` where it is missing.
fn text(s: &str) -> &str {
    if s.is_empty() {
        "?"
    } else {
        s
    }
}

/// Groups the JSON lines of each `(name, contents)` into runs. Blank lines and lines
/// starting with `#` are skipped (so a table with `--json` lines mixed in still reads).
pub fn read_runs(files: &[(String, String)]) -> Result<Vec<Run>, String> {
    // (file, key) -> run, in first-seen order.
    let mut runs: Vec<(usize, String, Run)> = Vec::new();
    for (f, (name, contents)) in files.iter().enumerate() {
        for (n, line) in contents.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let o: JsonLine =
                serde_json::from_str(line).map_err(|e| format!("{name}:{}: {e}", n + 1))?;
            let size = o.size as f64;
            let (metric, value, reference) = if let Some(v) = o.latency_us {
                (Metric::Latency, v, o.reference_us)
            } else if let Some(v) = o.bandwidth_mb_s {
                (Metric::Bandwidth, v, o.reference_mb_s)
            } else {
                return Err(format!(
                    "{name}:{}: neither latency_us nor bandwidth_mb_s",
                    n + 1
                ));
            };
            let key = format!(
                "{} {}/{}/{}",
                text(&o.benchmark),
                text(&o.backend),
                text(&o.window),
                text(&o.sync)
            );
            let i = match runs.iter().position(|(rf, k, _)| *rf == f && *k == key) {
                Some(i) => i,
                None => {
                    runs.push((
                        f,
                        key.clone(),
                        Run {
                            label: key.clone(),
                            metric,
                            points: Vec::new(),
                            reference: Vec::new(),
                        },
                    ));
                    runs.len() - 1
                }
            };
            let run = &mut runs[i].2;
            if run.metric != metric {
                return Err(format!(
                    "{name}:{}: {key} mixes latency and bandwidth",
                    n + 1
                ));
            }
            if size > 0.0 && value > 0.0 {
                run.points.push((size, value));
            }
            if let Some(r) = reference.filter(|r| *r > 0.0 && size > 0.0) {
                run.reference.push((size, r));
            }
        }
    }
    // Runs of the same key in several files: name the file.
    let mut count: HashMap<String, usize> = HashMap::new();
    for (_, k, _) in &runs {
        *count.entry(k.clone()).or_default() += 1;
    }
    let mut out = Vec::with_capacity(runs.len());
    for (f, k, mut run) in runs {
        if count[&k] > 1 {
            let stem = Path::new(&files[f].0)
                .file_stem()
                .map_or_else(|| files[f].0.clone(), |s| s.to_string_lossy().into_owned());
            run.label = format!("{k} [{stem}]");
        }
        run.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        run.reference.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !run.points.is_empty() {
            out.push(run);
        }
    }
    if out.is_empty() {
        return Err("no results to plot".into());
    }
    if out.iter().any(|r| r.metric != out[0].metric) {
        return Err("the runs mix latency and bandwidth: plot them separately".into());
    }
    Ok(out)
}

/// `1`, `512`, `4K`, `1M`.
fn size_label(x: f64) -> String {
    let x = x.round() as u64;
    match x {
        x if x >= 1 << 20 && x % (1 << 20) == 0 => format!("{}M", x >> 20),
        x if x >= 1 << 10 && x % (1 << 10) == 0 => format!("{}K", x >> 10),
        x => x.to_string(),
    }
}

fn value_label(y: f64) -> String {
    if y >= 100.0 {
        format!("{y:.0}")
    } else if y >= 1.0 {
        format!("{y:.1}")
    } else {
        let s = format!("{y:.3}");
        s.trim_end_matches('0').to_string()
    }
}

fn font() -> Result<(), String> {
    use std::sync::OnceLock;
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| "the embedded font does not load".to_string())
    })
    .clone()
}

fn draw_on<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    runs: &[Run],
    title: &str,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let all = || {
        runs.iter()
            .flat_map(|r| r.points.iter().chain(r.reference.iter()))
    };
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all() {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    // Room at both ends, so the end labels are not cut.
    let (x0, x1) = (x0 / 1.4, x1 * 1.4);
    let (y0, y1) = (y0 / 1.5, y1 * 1.5);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale().base(2.0), (y0..y1).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("Message size (bytes)")
        .x_labels(12)
        .y_desc(runs[0].metric.heading())
        .x_label_formatter(&|x| size_label(*x))
        .y_label_formatter(&|y| value_label(*y))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    for (i, run) in runs.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(
                LineSeries::new(run.points.iter().copied(), color.stroke_width(2)).point_size(3),
            )
            .map_err(e)?
            .label(run.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
            });
        if !run.reference.is_empty() {
            chart
                .draw_series(DashedLineSeries::new(
                    run.reference.iter().copied(),
                    6,
                    4,
                    color.stroke_width(1),
                ))
                .map_err(e)?
                .label(format!("{} (reference)", run.label))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 8, y)], color.stroke_width(1))
                });
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// Size of the pictures in pixels.
pub const PICTURE: (u32, u32) = (1100, 680);

/// Draws `runs` into `<out>.svg` and `<out>.png` (an `.svg` or `.png` extension of `out`
/// is dropped first); returns the two paths.
pub fn draw(runs: &[Run], title: &str, out: &Path) -> Result<Vec<PathBuf>, String> {
    font()?;
    let stem = match out.extension().and_then(|e| e.to_str()) {
        Some("svg" | "png") => out.with_extension(""),
        _ => out.to_path_buf(),
    };
    let with = |ext: &str| {
        let mut p = stem.clone().into_os_string();
        p.push(".");
        p.push(ext);
        PathBuf::from(p)
    };
    let (svg, png) = (with("svg"), with("png"));
    draw_on(
        SVGBackend::new(&svg, PICTURE).into_drawing_area(),
        runs,
        title,
    )
    .map_err(|e| format!("{}: {e}", svg.display()))?;
    draw_on(
        BitMapBackend::new(&png, PICTURE).into_drawing_area(),
        runs,
        title,
    )
    .map_err(|e| format!("{}: {e}", png.display()))?;
    Ok(vec![svg, png])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_binaries_write_and_explains_the_rest() {
        let line = r#" {"benchmark":"osu_put_bw","size":8,"bandwidth_mb_s":1.5e3,"reference_mb_s":null,"extra":true} "#;
        let runs = read_runs(&[("a".into(), line.into())]).unwrap();
        assert_eq!(runs[0].label, "osu_put_bw ?/?/?");
        assert_eq!(runs[0].metric, Metric::Bandwidth);
        assert_eq!(runs[0].points, vec![(8.0, 1500.0)]);
        assert!(runs[0].reference.is_empty());
        for bad in [
            "{",
            "{\"size\":1,}",
            "{\"latency_us\":1}",
            "{\"size\":1} x",
            "{\"size\":1}",
        ] {
            let e = read_runs(&[("f.json".into(), bad.into())]).unwrap_err();
            assert!(e.starts_with("f.json:1: "), "{bad}: {e}");
        }
    }

    #[test]
    fn groups_runs_and_labels_axes() {
        let line = |b: &str, size: u32, v: f64| {
            format!(
                "{{\"benchmark\":\"{b}\",\"backend\":\"shm\",\"window\":\"allocate\",\
                 \"sync\":\"flush\",\"size\":{size},\"latency_us\":{v},\"reference_us\":0.01}}"
            )
        };
        let a = format!(
            "{}\n{}\n",
            line("osu_put_latency", 2, 0.2),
            line("osu_put_latency", 1, 0.1)
        );
        let b = format!("# comment\n{}\n", line("osu_put_latency", 1, 0.3));
        let runs = read_runs(&[("a.json".into(), a), ("dir/b.json".into(), b)]).unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].label, "osu_put_latency shm/allocate/flush [a]");
        assert_eq!(runs[0].points, vec![(1.0, 0.1), (2.0, 0.2)]);
        assert_eq!(runs[0].reference.len(), 2);
        assert_eq!(runs[1].label, "osu_put_latency shm/allocate/flush [b]");
        let bw = "{\"size\":1,\"bandwidth_mb_s\":3}".to_string();
        assert!(read_runs(&[("a".into(), line("x", 1, 1.0)), ("b".into(), bw)]).is_err());
        assert!(read_runs(&[("a".into(), String::new())]).is_err());
        assert_eq!(size_label(4096.0), "4K");
        assert_eq!(size_label(1048576.0), "1M");
        assert_eq!(size_label(3.0), "3");
        assert_eq!(value_label(0.05), "0.05");
        assert_eq!(value_label(12345.0), "12345");
    }
}
