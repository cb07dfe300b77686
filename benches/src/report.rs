//! The results of a run, as a text table, JSON and markdown.

use serde::Serialize;

use crate::machine::Machine;
use crate::measure::{Measurement, Plan};
use crate::primitives::{Group, Variant};

/// Where and how the run was made.
#[derive(Clone, Debug, Serialize)]
pub struct Setup {
    /// The machine.
    pub machine: Machine,
    /// The flush instruction chosen by `Isa::detected()`.
    pub flush: String,
    /// The streaming-copy kind chosen by `Isa::detected()`.
    pub copy: String,
    /// The pool file.
    pub pool_path: String,
    /// The pool's granularity, by name.
    pub granularity: String,
    /// What the granularity means for these results.
    pub granularity_note: String,
    /// Timed batches per variant.
    pub reps: usize,
    /// Target duration of one batch, in milliseconds.
    pub batch_ms: f64,
    /// Whether this was a `--quick` run.
    pub quick: bool,
}

/// One variant's results.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The group's name.
    pub group: String,
    /// The variant's id, unique in the report.
    pub variant: String,
    /// Payload bytes per operation.
    pub bytes_per_op: u64,
    /// Median nanoseconds per operation.
    pub ns_per_op: f64,
    /// Operations per second at the median time.
    pub ops_per_sec: f64,
    /// The variant this one is compared with.
    pub baseline: Option<String>,
    /// This variant's time over the baseline's (below 1: faster).
    pub ratio: Option<f64>,
    /// Fences issued per operation (`None`: not counted, the variant bypasses the pool).
    pub fences_per_op: Option<f64>,
    /// Cache lines flushed per operation.
    pub flushes_per_op: Option<f64>,
    /// Bytes written with non-temporal stores per operation.
    pub nt_bytes_per_op: Option<f64>,
    /// Bytes covered by flushed lines per operation.
    pub flushed_bytes_per_op: Option<f64>,
    /// Operations per timed batch.
    pub ops_per_sample: u64,
    /// Nanoseconds per operation of each timed batch.
    pub samples_ns_per_op: Vec<f64>,
}

/// A whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Where and how.
    pub setup: Setup,
    /// One row per variant, in report order.
    pub rows: Vec<Row>,
}

impl Setup {
    /// The setup of a run with `plan`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        machine: Machine,
        flush: &str,
        copy: &str,
        pool_path: &str,
        granularity: &str,
        granularity_note: String,
        plan: &Plan,
        quick: bool,
    ) -> Setup {
        Setup {
            machine,
            flush: flush.to_string(),
            copy: copy.to_string(),
            pool_path: pool_path.to_string(),
            granularity: granularity.to_string(),
            granularity_note,
            reps: plan.reps,
            batch_ms: plan.batch.as_secs_f64() * 1e3,
            quick,
        }
    }
}

impl Report {
    /// Build the rows from the measurements of every group, in order.
    pub fn new(setup: Setup, measurements: &[Measurement]) -> Report {
        let find = |v: Variant| measurements.iter().find(|m| m.variant == v);
        let rows = measurements
            .iter()
            .map(|m| {
                let ns = m.median_ns();
                let base = m.variant.baseline().and_then(find);
                Row {
                    group: m.variant.group().name().to_string(),
                    variant: m.variant.id(),
                    bytes_per_op: m.variant.bytes() as u64,
                    ns_per_op: ns,
                    ops_per_sec: 1e9 / ns,
                    baseline: base.map(|b| b.variant.id()),
                    ratio: base.map(|b| ns / b.median_ns()),
                    fences_per_op: m.per_op(|s| s.fences),
                    flushes_per_op: m.per_op(|s| s.flushes),
                    nt_bytes_per_op: m.per_op(|s| s.nt_bytes),
                    flushed_bytes_per_op: m.per_op(|s| s.flushed_bytes),
                    ops_per_sample: m.ops_per_sample,
                    samples_ns_per_op: m.samples_ns_per_op.clone(),
                }
            })
            .collect();
        Report { setup, rows }
    }

    /// The header line: machine, instructions, pool and what its granularity means.
    pub fn header(&self) -> String {
        let s = &self.setup;
        format!(
            "host {} | CPU {} | {} cores | flush {}, copy {} (Isa::detected) | pool {} | {}",
            s.machine.hostname,
            s.machine.cpu_model,
            s.machine.cores,
            s.flush,
            s.copy,
            s.pool_path,
            s.granularity_note
        )
    }

    /// How the numbers were taken.
    pub fn method(&self) -> String {
        format!(
            "ns/op: median of {} batches of ~{} ms per variant, the variants of a group \
             interleaved; ratio: ns/op over the baseline's; per-op counts from the pool's \
             thread_stats (- = bypasses the pool)",
            self.setup.reps, self.setup.batch_ms
        )
    }

    /// One line per group saying what its operations are.
    pub fn legend(&self) -> String {
        let mut out = String::new();
        for group in Group::ALL {
            if self.rows.iter().any(|r| r.group == group.name()) {
                out.push_str(&format!("{}: {}\n", group.name(), group.description()));
            }
        }
        out
    }

    fn cells(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = vec![
            "group",
            "variant",
            "ns/op",
            "ops/s",
            "ratio",
            "baseline",
            "fences/op",
            "flushes/op",
            "nt B/op",
            "flushed B/op",
        ];
        let opt = |x: Option<f64>, decimals: usize| match x {
            Some(v) => format!("{v:.decimals$}"),
            None => "-".to_string(),
        };
        let rows = self
            .rows
            .iter()
            .map(|r| {
                vec![
                    r.group.clone(),
                    r.variant.clone(),
                    format_ns(r.ns_per_op),
                    format_rate(r.ops_per_sec),
                    opt(r.ratio, 2),
                    r.baseline.clone().unwrap_or_else(|| "-".to_string()),
                    opt(r.fences_per_op, 2),
                    opt(r.flushes_per_op, 2),
                    opt(r.nt_bytes_per_op, 0),
                    opt(r.flushed_bytes_per_op, 0),
                ]
            })
            .collect();
        (header, rows)
    }

    /// The results as an aligned text table (text columns left, numbers right).
    pub fn table(&self) -> String {
        let (header, rows) = self.cells();
        let left = |col: usize| matches!(col, 0 | 1 | 5);
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: Vec<String>| {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if left(i) {
                        format!("{c:<w$}", w = widths[i])
                    } else {
                        format!("{c:>w$}", w = widths[i])
                    }
                })
                .collect();
            parts.join("  ").trim_end().to_string()
        };
        let mut out = line(header.iter().map(|h| h.to_string()).collect());
        out.push('\n');
        let mut previous_group: Option<String> = None;
        for row in rows {
            if previous_group.as_ref().is_some_and(|g| *g != row[0]) {
                out.push('\n');
            }
            previous_group = Some(row[0].clone());
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }

    /// The header, method and table as markdown.
    pub fn markdown(&self) -> String {
        let (header, rows) = self.cells();
        let mut out = format!("{}\n\n{}\n\n", self.header(), self.method());
        out.push_str(&format!("| {} |\n", header.join(" | ")));
        let rule: Vec<&str> = (0..header.len())
            .map(|i| {
                if matches!(i, 0 | 1 | 5) {
                    "---"
                } else {
                    "---:"
                }
            })
            .collect();
        out.push_str(&format!("| {} |\n", rule.join(" | ")));
        for row in rows {
            out.push_str(&format!("| {} |\n", row.join(" | ")));
        }
        out.push('\n');
        for line in self.legend().lines() {
            out.push_str(&format!("- {line}\n"));
        }
        out
    }

    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}

/// Nanoseconds with three significant digits or more.
fn format_ns(ns: f64) -> String {
    if ns >= 100.0 {
        format!("{ns:.0}")
    } else if ns >= 10.0 {
        format!("{ns:.1}")
    } else {
        format!("{ns:.2}")
    }
}

/// A rate with a k / M / G suffix.
fn format_rate(per_sec: f64) -> String {
    if per_sec >= 1e9 {
        format!("{:.2} G", per_sec / 1e9)
    } else if per_sec >= 1e6 {
        format!("{:.2} M", per_sec / 1e6)
    } else if per_sec >= 1e3 {
        format!("{:.1} k", per_sec / 1e3)
    } else {
        format!("{per_sec:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::{format_ns, format_rate};

    #[test]
    fn numbers_are_formatted_with_units() {
        assert_eq!(format_ns(1234.4), "1234");
        assert_eq!(format_ns(12.34), "12.3");
        assert_eq!(format_ns(1.234), "1.23");
        assert_eq!(format_rate(2.5e6), "2.50 M");
        assert_eq!(format_rate(12_345.0), "12.3 k");
        assert_eq!(format_rate(3e9), "3.00 G");
        assert_eq!(format_rate(12.0), "12");
    }
}
