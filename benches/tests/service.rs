//! Runs the service section of `pmem-bench` as CI does (`--quick`): with Redis's tools when
//! they are installed (under `CI=true` they must be: `.ci/run` installs them), and with them
//! hidden, where the section says what it skipped. Times are printed, never asserted.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use pmem_bench::bytekeys::REDB_VERSION;
use pmem_bench::poolfile::default_pool_dir;
use pmem_bench::service::{PIPELINES, SERVERS, TESTS};
use serde_json::Value;

fn arg(p: &Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}

fn installed(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// What one quick run of the section gave.
struct Run {
    stdout: String,
    report: Value,
    markdown: String,
}

/// `pmem-bench --quick --section service` with its files in a private directory (checked
/// empty afterwards), JSON and markdown written; `path` replaces `PATH` when given.
fn quick_service_run(path: Option<&Path>) -> Run {
    let pools = tempfile::Builder::new()
        .prefix("pmem-bench-test")
        .tempdir_in(default_pool_dir())
        .expect("make a pool directory");
    let out_dir = tempfile::tempdir().expect("make an output directory");
    let json = out_dir.path().join("service.json");
    let markdown = out_dir.path().join("service.md");
    let mut command = Command::new(env!("CARGO_BIN_EXE_pmem-bench"));
    command.args([
        "--quick",
        "--section",
        "service",
        "--pool-dir",
        arg(pools.path()),
        "--json",
        arg(&json),
        "--markdown",
        arg(&markdown),
    ]);
    if let Some(path) = path {
        command.env("PATH", path);
    }
    let out: Output = command.output().expect("run the pmem-bench binary");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pmem-bench failed:\n{stdout}\n{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(pools.path())
        .expect("list the pool directory")
        .collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
    Run {
        stdout,
        report: serde_json::from_str(&std::fs::read_to_string(&json).expect("read the JSON"))
            .expect("the JSON output parses"),
        markdown: std::fs::read_to_string(&markdown).expect("read the markdown"),
    }
}

fn positive(row: &Value, key: &str) -> f64 {
    let x = row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {row}"));
    assert!(x.is_finite() && x > 0.0, "{key} = {x} in {row}");
    x
}

/// The in-process rows: inserts per insert and per batch, then gets, each for our two maps
/// and redb, ours with a ratio to redb. Returns the number of rows.
fn check_embedded(section: &Value) -> usize {
    assert_eq!(section["redb_version"], REDB_VERSION, "{section}");
    let rows = section["embedded"].as_array().expect("embedded rows");
    for (operation, commit) in [
        ("insert", "per insert"),
        ("insert", "per 1000 inserts"),
        ("get", "-"),
    ] {
        for engine in ["ours: hash map", "ours: ordered map", "redb"] {
            let row = rows
                .iter()
                .find(|r| {
                    r["operation"] == operation && r["commit"] == commit && r["engine"] == engine
                })
                .unwrap_or_else(|| panic!("no {operation} {commit} row of {engine}: {section}"));
            positive(row, "ops_per_sec");
            if engine == "redb" {
                assert!(row["ours_over_redb"].is_null(), "{row}");
            } else {
                positive(row, "ours_over_redb");
            }
        }
    }
    // Ours commits a write batch per 1000 inserts in the batched mode, and says so.
    for engine in ["ours: hash map", "ours: ordered map"] {
        let batched = rows
            .iter()
            .find(|r| {
                r["operation"] == "insert"
                    && r["commit"] == "per 1000 inserts"
                    && r["engine"] == engine
            })
            .expect("checked above");
        assert!(
            batched["note"]
                .as_str()
                .is_some_and(|n| n.contains("one write batch per 1000 inserts")),
            "{batched}"
        );
    }
    assert_eq!(rows.len(), 9, "{section}");
    rows.len()
}

#[test]
fn the_service_section_runs_quick_against_redis_and_redb() {
    let missing: Vec<&str> = ["redis-benchmark", "redis-server"]
        .into_iter()
        .filter(|tool| !installed(tool))
        .collect();
    assert!(
        missing.is_empty() || std::env::var_os("CI").is_none(),
        "{missing:?} not installed under CI (.ci/run installs redis-tools and redis-server)"
    );
    let run = quick_service_run(None);
    let section = &run.report["service"];
    assert!(section.is_object(), "no service section in {}", run.report);
    let embedded_rows = check_embedded(section);
    assert!(run.stdout.contains("against redb"), "{}", run.stdout);
    assert!(
        run.stdout.contains("NOT persistent memory"),
        "{}",
        run.stdout
    );
    if !missing.is_empty() {
        println!("skipped the Redis half: {missing:?} not installed");
        let reason = section["network_skipped"].as_str().expect("a skip reason");
        for tool in missing {
            assert!(reason.contains(tool), "{reason}");
            assert!(run.stdout.contains(tool), "{}", run.stdout);
        }
        return;
    }
    assert!(section["network_skipped"].is_null(), "{section}");
    for key in ["redis_server_version", "redis_benchmark_version"] {
        assert!(
            section[key].as_str().is_some_and(|v| !v.is_empty()),
            "{key}"
        );
    }
    assert!(run.stdout.contains("appendfsync") || run.stdout.contains("AOF"));
    let rows = section["network"].as_array().expect("network rows");
    assert_eq!(rows.len(), TESTS.len() * PIPELINES.len() * SERVERS.len());
    for test in TESTS {
        for pipeline in PIPELINES {
            let mut positions = Vec::new();
            for server in SERVERS {
                let row = rows
                    .iter()
                    .find(|r| {
                        r["test"] == test.to_ascii_uppercase()
                            && r["pipeline"] == pipeline
                            && r["server"] == server
                    })
                    .unwrap_or_else(|| panic!("no {test} -P {pipeline} row of {server}"));
                positive(row, "ops_per_sec");
                let p50 = positive(row, "p50_ms");
                let p99 = positive(row, "p99_ms");
                assert!(p99 >= p50, "percentiles out of order in {row}");
                let ratio = positive(row, "ours_over_this");
                if server == "ours" {
                    assert_eq!(ratio, 1.0, "{row}");
                }
                positions.push(row["position"].as_u64().expect("position"));
            }
            positions.sort_unstable();
            assert_eq!(positions, [0, 1, 2], "each server once per cell");
        }
    }
    // Two tables, each a header, a rule and its rows.
    let table_lines = run.markdown.lines().filter(|l| l.starts_with("| ")).count();
    assert_eq!(
        table_lines,
        rows.len() + 2 + embedded_rows + 2,
        "{}",
        run.markdown
    );
}

#[test]
fn without_redis_tools_the_section_says_what_it_skipped() {
    // A PATH with nothing on it hides redis-benchmark and redis-server.
    let empty = tempfile::tempdir().expect("make an empty directory");
    let run = quick_service_run(Some(empty.path()));
    let section = &run.report["service"];
    let reason = section["network_skipped"].as_str().expect("a skip reason");
    assert!(
        reason.contains("redis-benchmark is not installed (Debian package redis-tools)"),
        "{reason}"
    );
    assert!(
        reason.contains("redis-server is not installed (Debian package redis-server)"),
        "{reason}"
    );
    assert!(run.stdout.contains(reason), "{}", run.stdout);
    assert!(section["network"].as_array().is_some_and(|r| r.is_empty()));
    let embedded_rows = check_embedded(section);
    let table_lines = run.markdown.lines().filter(|l| l.starts_with("| ")).count();
    assert_eq!(table_lines, embedded_rows + 2, "{}", run.markdown);
    assert!(run.markdown.contains(reason), "{}", run.markdown);
}
