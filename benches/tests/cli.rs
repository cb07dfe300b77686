//! Runs the `pmem-bench` binary the way users and CI do. Times are printed, never asserted.

use std::path::Path;
use std::process::{Command, Output};

use pmem_bench::ccehbench::CcehOp;
use pmem_bench::datalogbench::WRITE_SIZES;
use pmem_bench::fastfairbench::FastFairOp;
use pmem_bench::poolfile::default_pool_dir;
use pmem_bench::primitives::all_variants;
use pmem_bench::txbench::{Workload, OBJECT_SIZES, TX_WORDS};
use pmem_bench::ycsb::{Scale, Structure};
use pmem_structures::raw::fastfair::ShiftPolicy;
use serde_json::Value;

mod quick_sections;

use quick_sections::{
    check_cceh_section, check_datalog_section, check_fastfair_section, check_store_section,
    check_transaction_sections, check_ycsb_section, cluster_lines, flush_section_lines,
    page_size_alloc_and_service_lines,
};

fn pmem_bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmem-bench"))
        .args(args)
        .output()
        .expect("run the pmem-bench binary")
}

fn arg(p: &Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}

/// Run `pmem-bench --quick` with its pools in `pool_dir`, the JSON written to a temporary file,
/// and `extra` options; it must succeed. Returns its standard output and the parsed JSON.
fn quick_run(pool_dir: &tempfile::TempDir, extra: &[&str]) -> (String, Value) {
    let out_dir = tempfile::tempdir().expect("make an output directory");
    let json = out_dir.path().join("results.json");
    let mut args = vec![
        "--quick",
        "--pool-dir",
        arg(pool_dir.path()),
        "--json",
        arg(&json),
    ];
    args.extend_from_slice(extra);
    let out = pmem_bench(&args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pmem-bench failed:\n{stdout}\n{stderr}"
    );
    let report =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read the JSON output"))
            .expect("the JSON output parses");
    (stdout, report)
}

fn positive(row: &Value, key: &str) -> f64 {
    let x = row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {row}"));
    assert!(
        x.is_finite() && x > 0.0,
        "{key} = {x} is not positive in {row}"
    );
    x
}

#[test]
fn quick_run_writes_a_json_row_for_every_variant() {
    let pool_dir = pool_dir();
    let out_dir = tempfile::tempdir().expect("make an output directory");
    let markdown = out_dir.path().join("results.md");
    let (stdout, report) = quick_run(&pool_dir, &["--markdown", arg(&markdown)]);
    assert!(stdout.contains("emulated granularity"), "{stdout}");
    assert!(stdout.contains("NOT persistent memory"), "{stdout}");

    let rows = report["rows"].as_array().expect("rows is an array");
    let variants = all_variants();
    assert_eq!(rows.len(), variants.len(), "one row per variant");
    for v in variants {
        let row = rows
            .iter()
            .find(|r| r["group"] == v.group().name() && r["variant"] == v.id().as_str())
            .unwrap_or_else(|| panic!("no row for {} / {}", v.group().name(), v.id()));
        positive(row, "ns_per_op");
        positive(row, "ops_per_sec");
        positive(row, "ops_per_sample");
        let samples = row["samples_ns_per_op"].as_array().expect("samples");
        assert!(!samples.is_empty());
        assert!(samples.iter().all(|s| s.as_f64().is_some_and(|x| x > 0.0)));
        if v.baseline().is_some() {
            positive(row, "ratio");
        }
        if v.is_counted() {
            for key in ["fences_per_op", "flushes_per_op", "nt_bytes_per_op"] {
                assert!(
                    row[key].as_f64().is_some_and(|x| x >= 0.0),
                    "{key} in {row}"
                );
            }
            // Every variant writes something to the media, by flush or by nt-store.
            let media = row["flushed_bytes_per_op"].as_f64().unwrap()
                + row["nt_bytes_per_op"].as_f64().unwrap();
            assert!(media > 0.0, "nothing written to the media in {row}");
        }
    }

    check_transaction_sections(&report, &stdout);
    check_cceh_section(&report, &stdout);
    check_fastfair_section(&report, &stdout);
    check_datalog_section(&report, &stdout);
    let store_rows = check_store_section(&report, &stdout);
    let ycsb_rows = check_ycsb_section(&report, &stdout, Scale::quick());
    // The byte-key section runs by default; its rows are checked in tests/byte_keys.rs.
    let byte_key_lines = ["rows", "comparison", "targets"]
        .map(|table| {
            report["byte_keys"][table]
                .as_array()
                .unwrap_or_else(|| panic!("byte_keys {table} in a default run"))
                .len()
                + 2
        })
        .iter()
        .sum::<usize>();

    let md = std::fs::read_to_string(&markdown).expect("read the markdown output");
    // Each table has a header and a rule; the workloads' has an average row too.
    let table_lines = (rows.len() + 2)
        + (TX_WORDS.len() + 2)
        + (Workload::ALL.len() + 3)
        + (Workload::ALL.len() + 2)
        + (OBJECT_SIZES.len() + 2)
        + (CcehOp::ALL.len() + 2)
        + (ShiftPolicy::ALL.len() * FastFairOp::ALL.len() + 2)
        + (WRITE_SIZES.len() * 2 + 2 + 2)
        + (store_rows + 2)
        + byte_key_lines
        + (ycsb_rows + 2 * Structure::ALL.len())
        + page_size_alloc_and_service_lines(&report)
        + flush_section_lines(&report)
        + cluster_lines(&report);
    // With the feature, the PMDK copy and transaction tables follow.
    #[cfg(feature = "pmdk")]
    let table_lines = table_lines
        + (pmem_bench::primitives::NT_SIZES.len() + 2)
        + (pmem_bench::pmdk::PMDK_TX_WORDS.len() + 2);
    #[cfg(not(feature = "pmdk"))]
    {
        assert!(report["pmdk"].is_null(), "{}", report["pmdk"]);
        assert!(stdout.contains("--features pmdk"), "{stdout}");
        assert!(stdout.contains("libpmem-dev"), "{stdout}");
    }
    assert_eq!(
        md.lines().filter(|l| l.starts_with("| ")).count(),
        table_lines,
        "header, rule and one line per row of each table:\n{md}"
    );
    let left: Vec<_> = std::fs::read_dir(pool_dir.path())
        .expect("list the pool directory")
        .collect();
    assert!(left.is_empty(), "the pool file was not removed: {left:?}");
}

#[test]
fn a_missing_pool_dir_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("make a directory");
    let missing = dir.path().join("no-such-dir");
    let out = pmem_bench(&["--quick", "--pool-dir", arg(&missing)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn an_unwritable_output_is_a_clear_error_before_measuring() {
    let dir = tempfile::tempdir().expect("make a directory");
    let json = dir.path().join("no-such-dir").join("out.json");
    let out = pmem_bench(&[
        "--quick",
        "--pool-dir",
        arg(dir.path()),
        "--json",
        arg(&json),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("cannot write"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        !stderr.contains("flush_kinds"),
        "measured before failing: {stderr}"
    );
}

#[test]
fn help_explains_every_option() {
    let out = pmem_bench(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for option in [
        "--quick",
        "--section",
        "--structure",
        "--variant",
        "--workload",
        "--distribution",
        "--keys",
        "--ops",
        "--threads",
        "--seed",
        "--pool-dir",
        "--granularity",
        "--json",
        "--markdown",
        "--plot",
        "--byte-key-map",
    ] {
        assert!(help.contains(option), "--help does not mention {option}");
    }
    for section in ["byte-keys", "service"] {
        assert!(
            help.contains(section),
            "--help does not list the {section} section"
        );
    }
}

#[test]
fn a_bad_granularity_is_rejected() {
    let out = pmem_bench(&["--quick", "--granularity", "sometimes"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("emulated"), "{stderr}");
}

#[cfg(target_os = "linux")]
#[test]
fn an_unwritable_pool_dir_is_a_clear_error() {
    // procfs refuses new files, even to root.
    let out = pmem_bench(&["--quick", "--pool-dir", "/proc"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("not writable"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The PMDK section of a quick run: every copy size and every K, with positive times and ratios
/// on both sides, and libpmem treating the pools as persistent memory (no msync fallback).
#[cfg(feature = "pmdk")]
#[test]
fn quick_run_compares_with_pmdk() {
    use pmem_bench::pmdk::PMDK_TX_WORDS;
    use pmem_bench::primitives::NT_SIZES;

    let pool_dir = pool_dir();
    let (stdout, report) = quick_run(&pool_dir, &[]);
    assert!(stdout.contains("pmdk_copy: "), "{stdout}");
    assert!(stdout.contains("pmdk_tx: "), "{stdout}");
    assert!(stdout.contains("pmem_memcpy_persist"), "{stdout}");

    let pmdk = &report["pmdk"];
    assert!(pmdk.is_object(), "no pmdk section in {report}");
    assert_eq!(pmdk["copy_is_pmem"], true, "{pmdk}");
    assert_eq!(pmdk["obj_is_pmem"], true, "{pmdk}");
    for key in [
        "pmdk_version",
        "libpmem_flush",
        "libpmem_movnt",
        "our_flush",
    ] {
        assert!(
            pmdk[key].as_str().is_some_and(|s| !s.is_empty()),
            "{key} in {pmdk}"
        );
    }
    let side = |row: &Value, key: &str| {
        let side = &row[key];
        positive(side, "ns_per_op");
        positive(side, "ops_per_sec");
        positive(side, "ops_per_sample");
        let samples = side["samples_ns_per_op"].as_array().expect("samples");
        assert!(samples.iter().all(|s| s.as_f64().is_some_and(|x| x > 0.0)));
    };

    let copy = pmdk["copy"].as_array().expect("copy is an array");
    assert_eq!(copy.len(), NT_SIZES.len(), "one copy row per size");
    for (row, &bytes) in copy.iter().zip(NT_SIZES.iter()) {
        assert_eq!(row["bytes"].as_u64(), Some(bytes as u64), "{row}");
        for key in ["pmdk", "ours_nt", "ours_persist"] {
            side(row, key);
        }
        positive(row, "nt_over_pmdk");
        positive(row, "persist_over_pmdk");
    }

    let tx = pmdk["tx"].as_array().expect("tx is an array");
    assert_eq!(tx.len(), PMDK_TX_WORDS.len(), "one transaction row per K");
    for (row, &k) in tx.iter().zip(PMDK_TX_WORDS.iter()) {
        assert_eq!(row["words"].as_u64(), Some(k), "{row}");
        side(row, "pmdk");
        quick_sections::check_cell(&row["strict"]);
        quick_sections::check_cell(&row["batched"]);
        assert_eq!(row["strict"]["policy"], "strict", "{row}");
        assert_eq!(row["batched"]["policy"], "batched", "{row}");
        positive(row, "strict_over_pmdk");
        positive(row, "batched_over_pmdk");
    }

    let left: Vec<_> = std::fs::read_dir(pool_dir.path())
        .expect("list the pool directory")
        .collect();
    assert!(
        left.is_empty(),
        "PMDK pool files were not removed: {left:?}"
    );
}

/// A private pool directory where a default run would put its pools (tmpfs when there is one),
/// so that concurrent runs do not meet.
fn pool_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("pmem-bench-test")
        .tempdir_in(default_pool_dir())
        .expect("make a pool directory")
}

#[test]
fn the_ycsb_options_choose_structures_variants_workloads_and_scale() {
    let pools = pool_dir();
    let out_dir = tempfile::tempdir().expect("make an output directory");
    let json = out_dir.path().join("ycsb.json");
    let out = pmem_bench(&[
        "--section",
        "ycsb",
        "--structure",
        "fastfair",
        "--variant",
        "fast,redo",
        "--workload",
        "e",
        "--distribution",
        "zipfian",
        "--threads",
        "2",
        "--keys",
        "3000",
        "--ops",
        "1500",
        "--seed",
        "7",
        "--pool-dir",
        arg(pools.path()),
        "--json",
        arg(&json),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read the JSON output"))
            .expect("the JSON output parses");
    assert!(report["cceh"].is_null() && report["rows"].as_array().unwrap().is_empty());
    assert!(
        report["store_path"].is_null(),
        "the structures section did not run"
    );
    let rows = report["ycsb"]["rows"].as_array().expect("ycsb rows");
    let got: Vec<(String, String, Option<String>, u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["variant"].as_str().unwrap().to_string(),
                r["workload"].as_str().unwrap().to_string(),
                r["distribution"].as_str().map(str::to_string),
                r["threads"].as_u64().unwrap(),
                r["ops"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, String, Option<String>, u64, u64)> = ["fast", "redo"]
        .into_iter()
        .flat_map(|v| {
            [
                (v.to_string(), "load".to_string(), None, 2, 3000),
                (
                    v.to_string(),
                    "E".to_string(),
                    Some("zipfian".to_string()),
                    2,
                    1500,
                ),
            ]
        })
        .collect();
    assert_eq!(got, expected);
    assert!(!stdout.contains("YCSB: CCEH"), "{stdout}");
    assert!(std::fs::read_dir(pools.path()).unwrap().next().is_none());
}

#[test]
fn a_variant_outside_the_chosen_structures_is_refused() {
    let out = pmem_bench(&["--structure", "fastfair", "--variant", "helper-on"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("helper-on is a CCEH variant"), "{stderr}");
    let out = pmem_bench(&["--variant", "turbo"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("copy-on-write"),
        "lists the variants: {stderr}"
    );
    for bad in [["--threads", "0"], ["--keys", "0"], ["--ops", "0"]] {
        let out = pmem_bench(&bad);
        assert!(!out.status.success(), "{bad:?} accepted");
    }
}

#[cfg(not(feature = "pmdk"))]
#[test]
fn the_pmdk_section_without_the_feature_says_how_to_get_it() {
    let out = pmem_bench(&["--section", "pmdk"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--features pmdk"), "{stderr}");
}

#[test]
fn plot_writes_png_charts() {
    let pools = pool_dir();
    let charts = tempfile::tempdir().expect("make a chart directory");
    let plot_dir = charts.path().join("charts");
    let out = pmem_bench(&[
        "--quick",
        "--section",
        "primitives,ycsb",
        "--structure",
        "cceh,datalog",
        "--workload",
        "c",
        "--threads",
        "1",
        "--pool-dir",
        arg(pools.path()),
        "--plot",
        arg(&plot_dir),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for name in ["ycsb-cceh.png", "ycsb-datalog.png", "crossover.png"] {
        let bytes = std::fs::read(plot_dir.join(name)).expect("the chart exists");
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is no PNG");
        assert!(stderr.contains(name), "{stderr}");
    }
    assert!(!plot_dir.join("ycsb-fastfair.png").exists());
}

/// A number in `row[key]` that is finite and not negative.
fn non_negative(row: &Value, key: &str) -> f64 {
    let x = row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {row}"));
    assert!(x.is_finite() && x >= 0.0, "{key} = {x} in {row}");
    x
}

/// Whether `skipped` names `variant` (or every variant) with a reason.
fn skipped_with_reason(skipped: &Value, variant: &str) -> bool {
    skipped.as_array().is_some_and(|s| {
        s.iter().any(|k| {
            (k["variant"] == variant
                || k["variant"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("every")))
                && k["reason"].as_str().is_some_and(|r| !r.is_empty())
        })
    })
}

#[test]
fn quick_flush_sections_report_every_variant_or_why_not() {
    use pmem_bench::flushlat::lines::Persist;
    use pmem_bench::flushlat::perc::{FENCE_EVERY, SET_LIST_LINES};
    use pmem_bench::flushlat::rap::{DELAYS_NS, PERSISTS};

    let pool_dir = pool_dir();
    let (stdout, report) = quick_run(&pool_dir, &["--section", "read-after-persist,perc"]);
    assert!(stdout.contains("read-after-persist: one load"), "{stdout}");
    assert!(stdout.contains("NOT persistent memory"), "{stdout}");
    assert!(
        stdout.contains("Optane buffering (EuroSys'22), Sec. 3.5"),
        "{stdout}"
    );
    assert!(stdout.contains("PERC, Sec. 4.3.3"), "{stdout}");

    let rap = &report["read_after_persist"];
    assert!(rap["machine"]["cpu_model"].is_string(), "{rap}");
    let rows = rap["rows"].as_array().expect("read_after_persist rows");
    for row in rows {
        let median = non_negative(row, "median_cycles");
        assert!(non_negative(row, "p90_cycles") >= median, "{row}");
        non_negative(row, "median_ns");
        assert!(row["samples"].as_u64().is_some_and(|n| n > 0), "{row}");
    }
    for baseline in ["cache hit", "cold"] {
        assert!(
            rows.iter().any(|r| r["variant"]
                .as_str()
                .is_some_and(|v| v.starts_with(baseline)))
                || skipped_with_reason(&rap["skipped"], baseline),
            "{baseline} missing: {rap}"
        );
    }
    for persist in PERSISTS {
        let name = match persist {
            Persist::None => "store, no flush".to_string(),
            other => other.name(),
        };
        for delay in DELAYS_NS {
            assert!(
                rows.iter()
                    .any(|r| r["variant"] == name.as_str() && r["delay_ns"] == delay)
                    || skipped_with_reason(&rap["skipped"], &persist.name()),
                "{name} after {delay} ns neither measured nor skipped: {rap}"
            );
        }
    }

    let perc = &report["perc"];
    let skipped = &perc["skipped"];
    assert!(non_negative(perc, "empty_loop_ns") > 0.0 || skipped_with_reason(skipped, "every"));
    let fence = perc["fence_rows"].as_array().expect("fence rows");
    for flush in ["clwb", "clflushopt", "none (store only)"] {
        for every in FENCE_EVERY {
            assert!(
                fence
                    .iter()
                    .any(|r| r["flush"] == flush && r["fence_every"] == every)
                    || skipped_with_reason(skipped, flush),
                "{flush} every {every} missing: {perc}"
            );
        }
    }
    assert!(
        fence
            .iter()
            .any(|r| r["flush"] == "clflush" && r["fence_every"].is_null())
            || skipped_with_reason(skipped, "clflush")
    );
    let sets = perc["set_rows"].as_array().expect("set rows");
    for lines in SET_LIST_LINES {
        for layout in ["same set", "different sets"] {
            assert!(
                sets.iter()
                    .any(|r| r["lines"] == lines && r["layout"] == layout)
                    || !perc["machine"]["caches_unavailable"].is_null(),
                "{layout} x {lines} missing: {perc}"
            );
        }
    }
    let chase = perc["chase_rows"].as_array().expect("chase rows");
    assert!(chase.iter().any(|r| r["variant"] == "load next"), "{perc}");
    assert!(
        chase
            .iter()
            .any(|r| r["variant"] == "load next, write node"),
        "{perc}"
    );
    for row in fence.iter().chain(sets) {
        assert!(non_negative(row, "ns_per_line") > 0.0, "{row}");
    }
    for row in chase {
        assert!(non_negative(row, "ns_per_node") > 0.0, "{row}");
    }
}
