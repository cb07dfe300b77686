//! PNG charts of `pmem-bench` results, drawn with plotters.
//!
//! Only plotters' pure-Rust parts are used (the bitmap backend, its PNG encoder and ab_glyph
//! for text), so charts need no system library. The text is drawn with DejaVu Sans Mono,
//! committed as `benches/assets/DejaVuSansMono.ttf` (Bitstream Vera license, beside it) and
//! compiled into the binary.
//!
//! * [`throughput_chart`]: ops/s of one structure's variants, bars grouped by run (workload,
//!   key distribution, threads);
//! * [`byte_key_chart`]: ops/s of one map kind's byte-key maps and its `u64` path, bars
//!   grouped by workload (both drawn by [`grouped_bar_chart`]);
//! * [`crossover_chart`]: ns per operation against write size, non-temporal store + fence vs
//!   store + flush (clwb where the CPU has it) + fence ([`crossover_points`] takes them from the primitives' `nt_vs_clwb`
//!   group).

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle};
use pmem_ordering::isa::Isa;

use crate::bytekeys::ByteKeyRow;
use crate::measure::Measurement;
use crate::primitives::{size_label, Variant};
use crate::ycsb::YcsbRow;

/// The font every chart's text uses.
const FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");
/// The family name the font is registered under.
const FAMILY: &str = "sans-serif";

/// Pixels per group of bars in a throughput chart.
pub const GROUP_WIDTH: u32 = 110;
/// Height of every chart.
pub const HEIGHT: u32 = 600;
/// Width of the crossover chart.
pub const CROSSOVER_WIDTH: u32 = 900;

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Nothing to draw.
    #[error("no data for the chart {0}")]
    NoData(String),
    /// A value that cannot be drawn (not finite, or not positive where it must be).
    #[error("the chart {chart} cannot show the value {value} of {what}")]
    BadValue {
        /// The chart.
        chart: String,
        /// What the value is.
        what: String,
        /// The value.
        value: f64,
    },
    /// The committed font could not be read (a damaged asset).
    #[error("the chart font could not be loaded")]
    Font,
    /// Drawing or writing the PNG failed.
    #[error("cannot draw {path}: {reason}")]
    Draw {
        /// The file.
        path: String,
        /// What plotters reported.
        reason: String,
    },
}

/// Register the font once per process; every later call returns the first outcome.
fn font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(PlotError::Font)
    }
}

fn draw_error(path: &Path) -> impl Fn(&dyn std::fmt::Display) -> PlotError + '_ {
    move |e| PlotError::Draw {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// Draw the series' legend at `position`, then write the image out.
fn legend_and_save<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, CT>,
    root: &DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>,
    position: SeriesLabelPosition,
    err: &impl Fn(&dyn std::fmt::Display) -> PlotError,
) -> Result<(), PlotError> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// Distinguishable series colours (the Tableau 10 palette's first six).
const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// The group a row's bar belongs to: `A zipf 2T`.
fn group_label(r: &YcsbRow) -> String {
    let d = match r.distribution.as_deref() {
        Some("uniform") => " unif",
        Some("zipfian") => " zipf",
        Some(other) => other,
        None => "",
    };
    format!("{}{} {}T", r.workload, d, r.threads)
}

/// One bar of a grouped bar chart: its group (a run), its series (a variant) and its ops/s.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// The group it stands in, named below the bars.
    pub group: String,
    /// Its series, in the legend.
    pub series: String,
    /// Its height.
    pub ops_per_sec: f64,
}

/// Grouped bars of ops/s of `structure`'s rows of `rows`: one group per run (workload, key
/// distribution, threads), one bar per variant; written to `path` as a PNG
/// [`GROUP_WIDTH`] pixels per group wide (at least 800) and [`HEIGHT`] high.
pub fn throughput_chart(path: &Path, structure: &str, rows: &[YcsbRow]) -> Result<(), PlotError> {
    let bars: Vec<Bar> = rows
        .iter()
        .filter(|r| r.structure == structure)
        .map(|r| Bar {
            group: group_label(r),
            series: r.variant.clone(),
            ops_per_sec: r.ops_per_sec,
        })
        .collect();
    grouped_bar_chart(path, &format!("{structure} throughput"), &bars)
}

/// Grouped bars of ops/s of the byte-key rows of one map kind (`hash map`, `ordered map`):
/// one group per workload, one bar per keys and value size (the `u64` path among them);
/// written to `path` as [`throughput_chart`] writes its charts.
pub fn byte_key_chart(path: &Path, map: &str, rows: &[ByteKeyRow]) -> Result<(), PlotError> {
    let bars: Vec<Bar> = rows
        .iter()
        .filter(|r| r.map == map)
        .map(|r| Bar {
            group: r.workload.clone(),
            series: if r.keys == "u64" {
                "u64 -> u64".to_string()
            } else {
                format!("{} -> {} B", r.keys, r.value_bytes)
            },
            ops_per_sec: r.ops_per_sec,
        })
        .collect();
    grouped_bar_chart(path, &format!("{map} throughput, byte keys"), &bars)
}

/// Grouped bars of `bars`, titled `chart_name`: groups in order of first appearance, one
/// colour per series; written to `path` as a PNG [`GROUP_WIDTH`] pixels per group wide (at
/// least 800) and [`HEIGHT`] high.
pub fn grouped_bar_chart(path: &Path, chart_name: &str, bars: &[Bar]) -> Result<(), PlotError> {
    let mut groups: Vec<&str> = Vec::new();
    let mut series: Vec<&str> = Vec::new();
    for b in bars {
        if !groups.contains(&b.group.as_str()) {
            groups.push(&b.group);
        }
        if !series.contains(&b.series.as_str()) {
            series.push(&b.series);
        }
        if !(b.ops_per_sec.is_finite() && b.ops_per_sec >= 0.0) {
            return Err(PlotError::BadValue {
                chart: chart_name.to_string(),
                what: format!("{} {}", b.series, b.group),
                value: b.ops_per_sec,
            });
        }
    }
    if bars.is_empty() {
        return Err(PlotError::NoData(chart_name.to_string()));
    }
    font()?;
    let err = draw_error(path);
    let top = bars.iter().map(|b| b.ops_per_sec / 1e6).fold(0.0, f64::max) * 1.15;
    let width = (GROUP_WIDTH * groups.len() as u32).max(800);
    let root = BitMapBackend::new(path, (width, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let n = groups.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(chart_name, (FAMILY, 24))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n as f64, 0.0..top.max(f64::MIN_POSITIVE))
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        // The groups are named below their bars instead: plotters' own ticks fall at round
        // numbers, not at group centres.
        .x_label_formatter(&|_| String::new())
        .y_label_style((FAMILY, 14))
        .y_desc("M ops/s")
        .axis_desc_style((FAMILY, 16))
        .draw()
        .map_err(|e| err(&e))?;
    let k = series.len() as f64;
    let width_of_bar = 0.8 / k;
    for (j, &name) in series.iter().enumerate() {
        let color = COLORS[j % COLORS.len()];
        let rects = bars.iter().filter(|b| b.series == name).filter_map(|b| {
            let i = groups.iter().position(|g| *g == b.group)? as f64;
            let x0 = i + 0.1 + j as f64 * width_of_bar;
            Some(Rectangle::new(
                [(x0, 0.0), (x0 + width_of_bar * 0.9, b.ops_per_sec / 1e6)],
                color.filled(),
            ))
        });
        chart
            .draw_series(rects)
            .map_err(|e| err(&e))?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
    }
    let label_style = TextStyle::from((FAMILY, 13).into_font())
        .pos(Pos::new(HPos::Center, VPos::Top))
        .color(&BLACK);
    for (i, g) in groups.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
        root.draw(&Text::new(*g, (x, y + 8), &label_style))
            .map_err(|e| err(&e))?;
    }
    legend_and_save(&mut chart, &root, SeriesLabelPosition::UpperRight, &err)
}

/// One write size of the non-temporal vs temporal comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossoverPoint {
    /// Bytes written per operation.
    pub bytes: usize,
    /// ns per `nt_write` + fence.
    pub nt_ns: f64,
    /// ns per `write` + the detected flush (clwb where the CPU has it) + fence.
    pub clwb_ns: f64,
}

/// The points of the primitives' `nt_vs_clwb` group among `measurements`: one per size that
/// has both variants, by size.
pub fn crossover_points(measurements: &[Measurement]) -> Vec<CrossoverPoint> {
    let median = |want: Variant| {
        measurements
            .iter()
            .find(|m| m.variant == want)
            .map(Measurement::median_ns)
    };
    let mut sizes: Vec<usize> = measurements
        .iter()
        .filter_map(|m| match m.variant {
            Variant::NtWrite(n) => Some(n),
            _ => None,
        })
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .into_iter()
        .filter_map(|n| {
            Some(CrossoverPoint {
                bytes: n,
                nt_ns: median(Variant::NtWrite(n))?,
                clwb_ns: median(Variant::WritePersist(n))?,
            })
        })
        .collect()
}

/// ns per operation against write size (log2 axis), one line for non-temporal store + fence
/// and one for store + flush + fence (the flush named as the CPU's detected one, clwb where it
/// has it); written to `path` as a PNG of [`CROSSOVER_WIDTH`] by
/// [`HEIGHT`] pixels. The sizes must be positive and the times positive and finite.
pub fn crossover_chart(path: &Path, points: &[CrossoverPoint]) -> Result<(), PlotError> {
    let flush = Isa::detected().flush().name();
    let chart_name = format!("nt store vs {flush}: ns per write");
    if points.is_empty() {
        return Err(PlotError::NoData(chart_name));
    }
    for p in points {
        for (what, value) in [
            ("size", p.bytes as f64),
            ("nt ns", p.nt_ns),
            ("clwb ns", p.clwb_ns),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(PlotError::BadValue {
                    chart: chart_name,
                    what: format!("{what} at {} bytes", p.bytes),
                    value,
                });
            }
        }
    }
    font()?;
    let err = draw_error(path);
    let mut points = points.to_vec();
    points.sort_by_key(|p| p.bytes);
    let log2 = |b: usize| (b as f64).log2();
    let x0 = log2(points[0].bytes);
    let x1 = log2(points[points.len() - 1].bytes);
    // Half a doubling of room on each side, so the end points are not on the frame.
    let (lo, hi) = (x0 - 0.5, x1 + 0.5);
    let top = points
        .iter()
        .map(|p| p.nt_ns.max(p.clwb_ns))
        .fold(0.0, f64::max)
        * 1.1;
    let root = BitMapBackend::new(path, (CROSSOVER_WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&chart_name, (FAMILY, 24))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(lo..hi, 0.0..top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        // One tick per doubling; only whole powers of two are named.
        .x_labels((hi - lo).ceil() as usize + 1)
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-6 && *x >= 0.0 {
                size_label(2f64.powf(x.round()) as usize)
            } else {
                String::new()
            }
        })
        .x_desc("bytes per write (log2 scale)")
        .y_desc("ns per write")
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 16))
        .draw()
        .map_err(|e| err(&e))?;
    let lines = [
        (
            "nt store + fence".to_string(),
            COLORS[0],
            points
                .iter()
                .map(|p| (log2(p.bytes), p.nt_ns))
                .collect::<Vec<_>>(),
        ),
        (
            format!("store + {flush} + fence"),
            COLORS[1],
            points.iter().map(|p| (log2(p.bytes), p.clwb_ns)).collect(),
        ),
    ];
    for (name, color, line) in lines {
        chart
            .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(line.into_iter().map(|c| Circle::new(c, 4, color.filled())))
            .map_err(|e| err(&e))?;
    }
    legend_and_save(&mut chart, &root, SeriesLabelPosition::UpperLeft, &err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The width and height from a PNG file's signature and IHDR chunk.
    fn png_size(path: &Path) -> (u32, u32) {
        let bytes = std::fs::read(path).unwrap();
        assert_eq!(
            &bytes[..8],
            b"\x89PNG\r\n\x1a\n",
            "{} is no PNG",
            path.display()
        );
        assert_eq!(&bytes[12..16], b"IHDR");
        let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        (be(16), be(20))
    }

    fn row(variant: &str, workload: &str, dist: Option<&str>, threads: usize, ops: f64) -> YcsbRow {
        YcsbRow {
            structure: "FAST&FAIR".into(),
            variant: variant.into(),
            workload: workload.into(),
            distribution: dist.map(Into::into),
            threads,
            ops: 1000,
            seconds: 1000.0 / ops,
            ops_per_sec: ops,
            p50_ns: Some(100.0),
            p99_ns: Some(200.0),
            p999_ns: Some(300.0),
            fences_per_op: 1.0,
            flushes_per_op: 1.0,
            nt_bytes_per_op: 0.0,
            media_bytes_per_op: 64.0,
            xpline_bytes_per_op: 256.0,
            write_amplification: Some(4.0),
            ewr: Some(0.25),
        }
    }

    #[test]
    fn charts_are_pngs_of_the_expected_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut rows = Vec::new();
        for (i, v) in ["per-shift", "fast", "redo"].into_iter().enumerate() {
            for t in [1, 2] {
                rows.push(row(v, "load", None, t, 1e6 + i as f64 * 1e5));
                rows.push(row(v, "A", Some("uniform"), t, 2e6));
                rows.push(row(v, "A", Some("zipfian"), t, 2.5e6));
                rows.push(row(v, "insert-only", None, t, 0.9e6));
            }
        }
        let mut other = row("helper-on", "C", Some("uniform"), 1, 5e6);
        other.structure = "CCEH".into();
        rows.push(other);
        let bars = dir.path().join("fastfair.png");
        throughput_chart(&bars, "FAST&FAIR", &rows).unwrap();
        // 8 groups (4 runs x 2 thread counts): 880 pixels.
        assert_eq!(png_size(&bars), (8 * GROUP_WIDTH, HEIGHT));
        let cceh = dir.path().join("cceh.png");
        throughput_chart(&cceh, "CCEH", &rows).unwrap();
        assert_eq!(png_size(&cceh), (800, HEIGHT));

        let points: Vec<CrossoverPoint> = [64usize, 256, 1024, 4096, 16384, 65536]
            .into_iter()
            .map(|b| CrossoverPoint {
                bytes: b,
                nt_ns: 100.0 + b as f64 / 40.0,
                clwb_ns: 160.0 + b as f64 / 20.0,
            })
            .collect();
        let byte_rows: Vec<ByteKeyRow> = ["u64", "16 random bytes", "user:%011d"]
            .into_iter()
            .flat_map(|keys| {
                ["load", "A", "E"].into_iter().map(move |w| ByteKeyRow {
                    map: "ordered map".into(),
                    keys: keys.into(),
                    key_bytes: 16,
                    value_bytes: 100,
                    workload: w.into(),
                    operation: "x".into(),
                    ops: 1000,
                    seconds: 0.001,
                    ops_per_sec: 1e6,
                    p50_ns: Some(100.0),
                    p99_ns: Some(200.0),
                    p999_ns: Some(300.0),
                    fences_per_op: Some(2.0),
                    flushes_per_op: Some(4.0),
                    media_bytes_per_op: Some(256.0),
                    median_call_fences: Some(2.0),
                    ratio_to_u64: None,
                })
            })
            .collect();
        let ordered = dir.path().join("bytekeys-ordered.png");
        byte_key_chart(&ordered, "ordered map", &byte_rows).unwrap();
        assert_eq!(
            png_size(&ordered),
            (800, HEIGHT),
            "3 groups: the 800-pixel floor"
        );
        assert!(matches!(
            byte_key_chart(&ordered, "hash map", &byte_rows),
            Err(PlotError::NoData(_))
        ));

        let cross = dir.path().join("crossover.png");
        crossover_chart(&cross, &points).unwrap();
        assert_eq!(png_size(&cross), (CROSSOVER_WIDTH, HEIGHT));
    }

    #[test]
    fn charts_refuse_missing_or_bad_data() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.png");
        assert!(matches!(
            throughput_chart(&p, "CCEH", &[]),
            Err(PlotError::NoData(_))
        ));
        assert!(matches!(
            crossover_chart(&p, &[]),
            Err(PlotError::NoData(_))
        ));
        let bad = [CrossoverPoint {
            bytes: 64,
            nt_ns: f64::NAN,
            clwb_ns: 1.0,
        }];
        assert!(matches!(
            crossover_chart(&p, &bad),
            Err(PlotError::BadValue { .. })
        ));
        let mut r = row("fast", "A", None, 1, 1.0);
        r.ops_per_sec = f64::INFINITY;
        assert!(matches!(
            throughput_chart(&p, "FAST&FAIR", &[r]),
            Err(PlotError::BadValue { .. })
        ));
        assert!(!p.exists());
    }

    #[test]
    fn crossover_points_pair_the_primitive_variants() {
        let m = |variant, ns: f64| Measurement {
            variant,
            ops_per_sample: 10,
            samples_ns_per_op: vec![ns, ns + 2.0, ns - 2.0],
            counted: None,
        };
        let ms = vec![
            m(Variant::WritePersist(256), 180.0),
            m(Variant::NtWrite(256), 110.0),
            m(Variant::WritePersist(64), 160.0),
            m(Variant::NtWrite(64), 100.0),
            m(Variant::NtWrite(1024), 120.0),
            m(Variant::PoolPersist, 5.0),
        ];
        assert_eq!(
            crossover_points(&ms),
            vec![
                CrossoverPoint {
                    bytes: 64,
                    nt_ns: 100.0,
                    clwb_ns: 160.0
                },
                CrossoverPoint {
                    bytes: 256,
                    nt_ns: 110.0,
                    clwb_ns: 180.0
                },
            ]
        );
    }
}
