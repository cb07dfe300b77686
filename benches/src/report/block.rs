//! One titled table of the report and how it is printed: aligned text or markdown, and the
//! number formats its cells share.

/// One titled table of the report with its footnotes, printed as text or as markdown.
pub struct Block {
    /// The line above the table (`None`: the section's preface introduces it).
    pub title: Option<String>,
    /// The column names.
    pub header: Vec<&'static str>,
    /// The cells, row by row.
    pub rows: Vec<Vec<String>>,
    /// The columns that hold text (left-aligned); the others are numbers.
    pub text_columns: &'static [usize],
    /// In the text form, a blank line between rows whose first cell differs.
    pub group_gaps: bool,
    /// One footnote per entry.
    pub legend: Vec<String>,
}

impl Block {
    fn is_text_column(&self, column: usize) -> bool {
        self.text_columns.contains(&column)
    }

    /// Title and blank line, aligned table, then one footnote per line.
    pub fn text(&self) -> String {
        let mut out = match &self.title {
            Some(title) => format!("{title}\n\n"),
            None => String::new(),
        };
        out.push_str(&align(
            &self.header,
            &self.rows,
            |col| self.is_text_column(col),
            self.group_gaps,
        ));
        out.push('\n');
        for line in &self.legend {
            out.push_str(line);
            out.push('\n');
        }
        out
    }

    /// A blank line and the bold title, markdown table, then the footnotes as a list.
    pub fn markdown(&self) -> String {
        let mut out = match &self.title {
            Some(title) => format!("\n**{title}**\n\n"),
            None => "\n".to_string(),
        };
        out.push_str(&markdown_table(&self.header, &self.rows, |i| {
            self.is_text_column(i)
        }));
        out.push('\n');
        for line in &self.legend {
            out.push_str(&format!("- {line}\n"));
        }
        out
    }
}

/// An aligned text table: the columns `left` says are text go left, the others right; with
/// `blank_between_groups`, a blank line separates rows whose first cell differs.
fn align(
    header: &[&str],
    rows: &[Vec<String>],
    left: impl Fn(usize) -> bool,
    blank_between_groups: bool,
) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
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
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let mut out = line(&header);
    out.push('\n');
    let mut previous_group: Option<&String> = None;
    for row in rows {
        if blank_between_groups && previous_group.is_some_and(|g| *g != row[0]) {
            out.push('\n');
        }
        previous_group = Some(&row[0]);
        out.push_str(&line(row));
        out.push('\n');
    }
    out
}

/// A markdown table: header, rule (text columns per `left` aligned left) and rows.
fn markdown_table(header: &[&str], rows: &[Vec<String>], left: impl Fn(usize) -> bool) -> String {
    let mut out = format!("| {} |\n", header.join(" | "));
    let rule: Vec<&str> = (0..header.len())
        .map(|i| if left(i) { "---" } else { "---:" })
        .collect();
    out.push_str(&format!("| {} |\n", rule.join(" | ")));
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

/// The columns of [`timing_cells`].
pub const TIMING_HEADER: [&str; 4] = ["ops/s", "ns/op", "p50 ns", "p99 ns"];

/// The cells the structure tables share: ops/s, ns/op, p50 and p99 (`-` when not sampled).
pub fn timing_cells(
    ops_per_sec: f64,
    ns_per_op: f64,
    p50_ns: Option<f64>,
    p99_ns: Option<f64>,
) -> [String; 4] {
    [
        format_rate(ops_per_sec),
        format_ns(ns_per_op),
        format_opt_ns(p50_ns),
        format_opt_ns(p99_ns),
    ]
}

/// A share as a percentage with one decimal.
pub fn format_share(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// Nanoseconds with three significant digits or more.
pub fn format_ns(ns: f64) -> String {
    if ns >= 100.0 {
        format!("{ns:.0}")
    } else if ns >= 10.0 {
        format!("{ns:.1}")
    } else {
        format!("{ns:.2}")
    }
}

/// [`format_ns`], or `-` for a figure not measured.
pub fn format_opt_ns(ns: Option<f64>) -> String {
    ns.map_or_else(|| "-".to_string(), format_ns)
}

/// A rate with a k / M / G suffix.
pub fn format_rate(per_sec: f64) -> String {
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
    use super::{align, format_ns, format_rate, format_share, timing_cells, Block};

    #[test]
    fn numbers_are_formatted_with_units() {
        assert_eq!(format_ns(1234.4), "1234");
        assert_eq!(format_ns(12.34), "12.3");
        assert_eq!(format_ns(1.234), "1.23");
        assert_eq!(format_rate(2.5e6), "2.50 M");
        assert_eq!(format_rate(12_345.0), "12.3 k");
        assert_eq!(format_rate(3e9), "3.00 G");
        assert_eq!(format_rate(12.0), "12");
        assert_eq!(format_share(0.917), "91.7%");
        assert_eq!(
            timing_cells(2.5e6, 400.0, None, Some(12.34)),
            ["2.50 M", "400", "-", "12.3"]
        );
    }

    #[test]
    fn tables_align_text_left_and_numbers_right() {
        let rows = vec![
            vec!["a".to_string(), "1".to_string()],
            vec!["a".to_string(), "100".to_string()],
            vec!["bb".to_string(), "2".to_string()],
        ];
        assert_eq!(
            align(&["name", "n"], &rows, |c| c == 0, true),
            "name    n\na       1\na     100\n\nbb      2\n"
        );
        assert_eq!(
            align(&["name", "n"], &rows, |c| c == 0, false),
            "name    n\na       1\na     100\nbb      2\n"
        );
    }

    #[test]
    fn blocks_print_title_table_and_legend() {
        let block = Block {
            title: Some("t".to_string()),
            header: vec!["name", "n"],
            rows: vec![vec!["a".to_string(), "1".to_string()]],
            text_columns: &[0],
            group_gaps: false,
            legend: vec!["note".to_string()],
        };
        assert_eq!(block.text(), "t\n\nname  n\na     1\n\nnote\n");
        assert_eq!(
            block.markdown(),
            "\n**t**\n\n| name | n |\n| --- | ---: |\n| a | 1 |\n\n- note\n"
        );
        let untitled = Block {
            title: None,
            ..block
        };
        assert_eq!(untitled.text(), "name  n\na     1\n\nnote\n");
        assert!(untitled.markdown().starts_with("\n| name | n |\n"));
    }
}
