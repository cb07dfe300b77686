//! `redis-benchmark --csv` output, parsed: a header line naming the columns, then one line per
//! test, every field quoted. Columns are found by name, so added or reordered columns do not
//! break the parse; a missing column, a field that is no number or no line for the test asked
//! is a [`CsvError`], never a panic.

use serde::Serialize;

/// The columns read, by their names in the header.
const COLUMNS: [&str; 7] = [
    "rps",
    "avg_latency_ms",
    "min_latency_ms",
    "p50_latency_ms",
    "p95_latency_ms",
    "p99_latency_ms",
    "max_latency_ms",
];

/// One test's line: throughput and latencies as `redis-benchmark` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BenchmarkLine {
    /// Requests per second.
    pub ops_per_sec: f64,
    /// Mean latency, milliseconds.
    pub avg_ms: f64,
    /// Least latency, milliseconds.
    pub min_ms: f64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 95th percentile latency, milliseconds.
    pub p95_ms: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
    /// Greatest latency, milliseconds.
    pub max_ms: f64,
}

/// Why `redis-benchmark`'s output could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CsvError {
    /// No line starts with the `"test"` column.
    #[error("no CSV header (a line starting with \"test\") in redis-benchmark's output: {0:?}")]
    NoHeader(String),
    /// The header lacks a column the section reads.
    #[error("redis-benchmark's CSV header has no {column:?} column: {header:?}")]
    MissingColumn {
        /// The column.
        column: &'static str,
        /// The header line.
        header: String,
    },
    /// No line for the test asked for.
    #[error("no {test} line in redis-benchmark's CSV output: {output:?}")]
    NoRow {
        /// The test (`SET`, `GET`).
        test: String,
        /// The output.
        output: String,
    },
    /// A field that should be a non-negative number is not.
    #[error("redis-benchmark's {column} for {test} is {value:?}, not a non-negative number")]
    BadNumber {
        /// The test.
        test: String,
        /// The column.
        column: &'static str,
        /// The field as printed.
        value: String,
    },
    /// The run ended inside `redis-benchmark`'s millisecond timer, so it printed no rate.
    #[error(
        "redis-benchmark's {column} for {test} is \"inf\": the run ended within its \
         millisecond timer; give it more requests"
    )]
    TooFast {
        /// The test.
        test: String,
        /// The column.
        column: &'static str,
    },
    /// A line with fewer fields than the header.
    #[error("redis-benchmark's CSV line has {found} fields, the header {expected}: {line:?}")]
    ShortLine {
        /// Fields in the line.
        found: usize,
        /// Fields in the header.
        expected: usize,
        /// The line.
        line: String,
    },
}

/// The fields of one CSV line: split on commas, each field's surrounding quotes removed
/// (`redis-benchmark` quotes every field and puts no comma inside one).
fn fields(line: &str) -> Vec<String> {
    line.split(',')
        .map(|f| f.trim().trim_matches('"').to_string())
        .collect()
}

/// The lines of `output` as they would show on a terminal: a carriage return (progress
/// updates) leaves only what follows it.
fn visible_lines(output: &str) -> impl Iterator<Item = &str> {
    output
        .lines()
        .map(|l| l.rsplit('\r').next().unwrap_or(l).trim())
        .filter(|l| !l.is_empty())
}

/// The line of `test` (`SET`, `GET`, as `redis-benchmark` names it) in `output`.
pub fn parse(output: &str, test: &str) -> Result<BenchmarkLine, CsvError> {
    let mut lines = visible_lines(output).skip_while(|l| !l.starts_with("\"test\""));
    let header_line = lines
        .next()
        .ok_or_else(|| CsvError::NoHeader(output.to_string()))?;
    let header = fields(header_line);
    let mut index = [0usize; COLUMNS.len()];
    for (slot, column) in index.iter_mut().zip(COLUMNS) {
        *slot = header
            .iter()
            .position(|h| h == column)
            .ok_or_else(|| CsvError::MissingColumn {
                column,
                header: header_line.to_string(),
            })?;
    }
    let line = lines
        .find(|l| {
            fields(l)
                .first()
                .is_some_and(|t| t.eq_ignore_ascii_case(test))
        })
        .ok_or_else(|| CsvError::NoRow {
            test: test.to_string(),
            output: output.to_string(),
        })?;
    let row = fields(line);
    if row.len() < header.len() {
        return Err(CsvError::ShortLine {
            found: row.len(),
            expected: header.len(),
            line: line.to_string(),
        });
    }
    let mut values = [0f64; COLUMNS.len()];
    for ((value, &i), column) in values.iter_mut().zip(&index).zip(COLUMNS) {
        let text = &row[i];
        if text == "inf" {
            return Err(CsvError::TooFast {
                test: test.to_string(),
                column,
            });
        }
        *value = text
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| CsvError::BadNumber {
                test: test.to_string(),
                column,
                value: text.clone(),
            })?;
    }
    let [ops_per_sec, avg_ms, min_ms, p50_ms, p95_ms, p99_ms, max_ms] = values;
    Ok(BenchmarkLine {
        ops_per_sec,
        avg_ms,
        min_ms,
        p50_ms,
        p95_ms,
        p99_ms,
        max_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from redis-benchmark 7.0.15 (`-t set -P 16 --csv`, Debian's redis-tools).
    const SAMPLE: &str = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\
\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
\"SET\",\"90909.09\",\"6.836\",\"0.888\",\"7.399\",\"11.727\",\"11.807\",\"11.815\"\n";

    #[test]
    fn a_run_too_short_to_time_is_named() {
        let too_fast = SAMPLE.replace("\"90909.09\"", "\"inf\"");
        assert_eq!(
            parse(&too_fast, "SET"),
            Err(CsvError::TooFast {
                test: "SET".to_string(),
                column: "rps",
            })
        );
    }

    #[test]
    fn the_captured_sample_parses() {
        let line = parse(SAMPLE, "SET").unwrap();
        assert_eq!(
            line,
            BenchmarkLine {
                ops_per_sec: 90909.09,
                avg_ms: 6.836,
                min_ms: 0.888,
                p50_ms: 7.399,
                p95_ms: 11.727,
                p99_ms: 11.807,
                max_ms: 11.815,
            }
        );
    }

    #[test]
    fn progress_text_and_other_tests_around_the_table_are_skipped() {
        let noisy = format!(
            "WARNING: Could not fetch server CONFIG\nSET: rps=1000.0 (overall: 900.0)\r{SAMPLE}\
             \"GET\",\"1.0\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\"\n"
        );
        assert_eq!(parse(&noisy, "SET").unwrap().ops_per_sec, 90909.09);
        assert_eq!(parse(&noisy, "GET").unwrap().p99_ms, 6.0);
    }

    #[test]
    fn columns_are_found_by_name() {
        let reordered =
            "\"test\",\"p99_latency_ms\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\
\"p50_latency_ms\",\"p95_latency_ms\",\"max_latency_ms\",\"extra\"\n\
\"GET\",\"9\",\"100\",\"1\",\"0.5\",\"1\",\"2\",\"10\",\"x\"\n";
        let line = parse(reordered, "GET").unwrap();
        assert_eq!((line.ops_per_sec, line.p99_ms), (100.0, 9.0));
    }

    #[test]
    fn unexpected_output_is_a_typed_error() {
        assert!(matches!(parse("", "SET"), Err(CsvError::NoHeader(_))));
        assert!(matches!(
            parse("Could not connect to Redis at 127.0.0.1:1\n", "SET"),
            Err(CsvError::NoHeader(_))
        ));
        assert!(matches!(
            parse(SAMPLE, "GET"),
            Err(CsvError::NoRow { ref test, .. }) if test == "GET"
        ));
        let no_p99 = SAMPLE.replace("p99_latency_ms", "p98_latency_ms");
        assert!(matches!(
            parse(&no_p99, "SET"),
            Err(CsvError::MissingColumn {
                column: "p99_latency_ms",
                ..
            })
        ));
        let bad = SAMPLE.replace("90909.09", "fast");
        assert!(matches!(
            parse(&bad, "SET"),
            Err(CsvError::BadNumber { column: "rps", .. })
        ));
        let negative = SAMPLE.replace("90909.09", "-1");
        assert!(matches!(
            parse(&negative, "SET"),
            Err(CsvError::BadNumber { .. })
        ));
        let short = SAMPLE.replace(",\"11.815\"", "");
        assert!(matches!(
            parse(&short, "SET"),
            Err(CsvError::ShortLine {
                found: 7,
                expected: 8,
                ..
            })
        ));
    }
}
