//! Runs the `pmem-bench` binary the way users and CI do. Times are printed, never asserted.

use std::path::Path;
use std::process::{Command, Output};

use pmem_bench::ccehbench::{CcehOp, CCEH_KEYS_QUICK};
use pmem_bench::datalogbench::{FILE_BYTES_QUICK, WRITE_SIZES};
use pmem_bench::fastfairbench::{FastFairOp, FASTFAIR_KEYS_QUICK};
use pmem_bench::poolfile::default_pool_dir;
use pmem_bench::primitives::all_variants;
use pmem_bench::txbench::{Workload, OBJECT_SIZES, TX_WORDS};
use pmem_bench::ycsb::{KeyDistribution, Scale, Structure, Variant, Workload as YcsbWorkload};
use pmem_structures::fastfair::ShiftPolicy;
use serde_json::Value;

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
    let byte_key_lines = ["rows", "targets"]
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
        + flush_section_lines(&report);
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

/// The markdown table lines of the page-size section (pools, then speeds), the alloc section
/// and the service section (its Redis table unless skipped, then redb's), which run by
/// default: a header and a rule per table, and one line per row. The service section's rows
/// are checked in tests/service.rs.
fn page_size_alloc_and_service_lines(report: &Value) -> usize {
    let rows = |section: &str, table: &str| {
        report[section][table]
            .as_array()
            .unwrap_or_else(|| panic!("{section} {table} in a default run"))
            .len()
    };
    assert!(rows("page_size", "rows") > 0 && rows("alloc", "rows") > 0);
    let network = rows("service", "network");
    let redis_table = if network == 0 { 0 } else { network + 2 };
    let service = redis_table + rows("service", "embedded") + 2;
    (rows("page_size", "pools") + 2)
        + (rows("page_size", "rows") + 2)
        + (rows("alloc", "rows") + 2)
        + service
}

/// The markdown table lines of the read-after-persist and PERC sections, which run by default:
/// the machine table, then one table of loads and three of PERC's loops.
fn flush_section_lines(report: &Value) -> usize {
    let rows = |section: &str, table: &str| {
        report[section][table]
            .as_array()
            .unwrap_or_else(|| panic!("{section} {table} in a default run"))
            .len()
            + 2
    };
    let machine = 6 + 2;
    machine
        + rows("read_after_persist", "rows")
        + rows("perc", "fence_rows")
        + rows("perc", "set_rows")
        + rows("perc", "chase_rows")
}

/// The YCSB section of a default-shaped run at `scale`: for every structure and variant, a
/// load and every workload it can run, with both distributions where keys are chosen, on 1 and
/// 2 threads, with sane numbers; E skipped with a reason where there is no scan. Returns the
/// number of rows.
fn check_ycsb_section(report: &Value, stdout: &str, scale: Scale) -> usize {
    let ycsb = &report["ycsb"];
    assert_eq!(
        ycsb["scale"]["records"].as_u64(),
        Some(scale.records),
        "{ycsb}"
    );
    assert_eq!(ycsb["scale"]["ops"].as_u64(), Some(scale.ops), "{ycsb}");
    let rows = ycsb["rows"].as_array().expect("ycsb rows");
    let skipped = ycsb["skipped"].as_array().expect("ycsb skipped");
    for structure in Structure::ALL {
        assert!(
            stdout.contains(&format!("YCSB: {}", structure.name())),
            "{stdout}"
        );
        for variant in structure.variants() {
            let of_variant =
                |r: &&Value| r["structure"] == structure.name() && r["variant"] == variant.name();
            let mine: Vec<&Value> = rows.iter().filter(of_variant).collect();
            let scans = structure.no_scan_reason().is_none();
            if !scans {
                assert!(
                    skipped
                        .iter()
                        .any(|k| of_variant(&k) && k["workload"] == "E"),
                    "{} {}: E not reported skipped",
                    structure.name(),
                    variant.name()
                );
            }
            for threads in [1u64, 2] {
                let mut expected = vec![(YcsbWorkload::Load, None)];
                for w in YcsbWorkload::RUNS {
                    if w == YcsbWorkload::E && !scans {
                        continue;
                    }
                    if w == YcsbWorkload::InsertOnly {
                        expected.push((w, None));
                    } else {
                        expected.extend(KeyDistribution::ALL.map(|d| (w, Some(d.name()))));
                    }
                }
                for (w, d) in expected {
                    let row = mine
                        .iter()
                        .find(|r| {
                            r["workload"] == w.name()
                                && r["threads"].as_u64() == Some(threads)
                                && r["distribution"].as_str() == d
                        })
                        .unwrap_or_else(|| {
                            panic!(
                                "no YCSB row {} {} {} {d:?} {threads} threads",
                                structure.name(),
                                variant.name(),
                                w.name()
                            )
                        });
                    check_ycsb_row(row, w, variant, scale);
                }
            }
        }
    }
    rows.len()
}

fn check_ycsb_row(row: &Value, workload: YcsbWorkload, variant: Variant, scale: Scale) {
    let ops = if workload == YcsbWorkload::Load {
        scale.records
    } else {
        scale.ops
    };
    assert_eq!(row["ops"].as_u64(), Some(ops), "{row}");
    positive(row, "ops_per_sec");
    positive(row, "seconds");
    // The batched CCEH load is not timed call by call; everything else is.
    let batched = workload == YcsbWorkload::Load && variant.structure() == Structure::Cceh;
    if batched {
        assert!(row["p50_ns"].is_null(), "{row}");
    } else {
        let p50 = positive(row, "p50_ns");
        let p99 = positive(row, "p99_ns");
        let p999 = positive(row, "p999_ns");
        assert!(p50 <= p99 && p99 <= p999, "{row}");
    }
    let writes = matches!(
        workload,
        YcsbWorkload::Load | YcsbWorkload::A | YcsbWorkload::InsertOnly
    );
    if writes {
        positive(row, "fences_per_op");
        positive(row, "flushes_per_op");
        let sent = positive(row, "media_bytes_per_op");
        let media = positive(row, "xpline_bytes_per_op");
        let ewr = positive(row, "ewr");
        assert!((ewr - sent / media).abs() < 1e-6 * ewr, "{row}");
        let amp = positive(row, "write_amplification");
        assert!((amp * ewr - 1.0).abs() < 1e-6, "{row}");
    }
    if workload == YcsbWorkload::C {
        assert_eq!(
            row["fences_per_op"].as_f64(),
            Some(0.0),
            "reads fence nothing: {row}"
        );
        assert!(row["ewr"].is_null(), "{row}");
    }
}

/// A cell of the transaction sections: positive time, rate and batch; fences counted.
fn check_cell(cell: &Value) {
    for key in [
        "ns_per_op",
        "ops_per_sec",
        "ops_per_sample",
        "fences_per_op",
        "bytes_to_media_per_op",
    ] {
        positive(cell, key);
    }
    let samples = cell["samples_ns_per_op"].as_array().expect("samples");
    assert!(!samples.is_empty());
    assert!(samples.iter().all(|s| s.as_f64().is_some_and(|x| x > 0.0)));
}

fn check_transaction_sections(report: &Value, stdout: &str) {
    let policies = ["strict", "batched", "ideal"];
    let tx = report["transactions"].as_array().expect("transactions");
    assert_eq!(tx.len(), TX_WORDS.len(), "one row per K");
    for (row, k) in tx.iter().zip(TX_WORDS) {
        assert_eq!(row["words"].as_u64(), Some(k), "{row}");
        for p in policies {
            check_cell(&row[p]);
        }
        positive(row, "batched_over_strict");
        positive(row, "ideal_over_strict");
        // The fence counts are exact (crates/undo-log/tests/fences.rs): K + 2, 3, 2.
        let fences = |p: &str| row[p]["fences_per_op"].as_f64().unwrap();
        assert_eq!(fences("strict"), (k + 2) as f64, "{row}");
        assert_eq!(fences("batched"), 3.0, "{row}");
        assert_eq!(fences("ideal"), 2.0, "{row}");
    }

    let workloads = report["workloads"].as_array().expect("workloads");
    assert_eq!(workloads.len(), Workload::ALL.len(), "one row per workload");
    for (row, w) in workloads.iter().zip(Workload::ALL) {
        assert_eq!(row["workload"], w.name(), "{row}");
        for p in policies {
            check_cell(&row[p]);
        }
        let share = positive(row, "nt_t_share");
        assert!(share <= 1.0, "{row}");
        positive(row, "speedup_batched");
        positive(row, "speedup_ideal");
        let fences = |p: &str| row[p]["fences_per_op"].as_f64().unwrap();
        assert!(fences("batched") <= fences("strict"), "{row}");
        assert!(stdout.contains(&format!("\n{} ", w.name())), "{stdout}");
    }
    let average = &report["workload_average"];
    let share = positive(average, "nt_t_share");
    assert!(share <= 1.0);
    positive(average, "speedup_batched");
    positive(average, "speedup_ideal");
    assert!(stdout.contains("nt->t share"), "{stdout}");
    assert!(stdout.contains("\naverage "), "{stdout}");

    // Every workload with 1 and 2 threads, under strict and batched.
    let runs = report["themis_threads"]["runs"]
        .as_array()
        .expect("themis_threads runs");
    assert_eq!(runs.len(), Workload::ALL.len() * 2 * 2, "{runs:?}");
    for w in Workload::ALL {
        let run = |policy: &str, threads: u64| {
            runs.iter()
                .find(|r| {
                    r["workload"] == w.name()
                        && r["policy"] == policy
                        && r["threads"].as_u64() == Some(threads)
                })
                .unwrap_or_else(|| panic!("{} {policy} {threads} threads", w.name()))
        };
        for threads in [1, 2] {
            let (strict, batched) = (run("strict", threads), run("batched", threads));
            for r in [strict, batched] {
                positive(r, "ops_per_sec");
                positive(r, "fences_per_op");
                let share = positive(r, "nt_t_share");
                assert!(share <= 1.0, "{r}");
            }
            let fences = |r: &Value| r["fences_per_op"].as_f64().unwrap();
            assert!(fences(batched) <= fences(strict), "{strict} {batched}");
        }
    }
    assert!(stdout.contains("strict 2T/1T"), "{stdout}");
    for control in ["control_before", "control_after"] {
        positive(&report["themis_threads"][control], "one_thread_per_sec");
        positive(&report["themis_threads"][control], "two_threads_per_sec");
    }

    let objects = report["objects"].as_array().expect("objects");
    assert_eq!(objects.len(), OBJECT_SIZES.len(), "one row per size");
    for (row, bytes) in objects.iter().zip(OBJECT_SIZES) {
        assert_eq!(row["bytes"].as_u64(), Some(bytes), "{row}");
        check_cell(&row["in_place"]);
        check_cell(&row["out_of_place"]);
        positive(row, "out_over_in");
    }
}

/// The datalog section: a write row per size and path, then a read row per path.
fn check_datalog_section(report: &Value, stdout: &str) {
    let datalog = &report["datalog"];
    assert_eq!(
        datalog["file_bytes"].as_u64(),
        Some(FILE_BYTES_QUICK),
        "{datalog}"
    );
    let rows = datalog["rows"].as_array().expect("datalog rows");
    assert_eq!(rows.len(), WRITE_SIZES.len() * 2 + 2, "{datalog}");
    for row in rows {
        positive(row, "ops_per_sec");
        let p50 = positive(row, "p50_ns");
        assert!(p50 <= positive(row, "p99_ns"), "{row}");
        if row["operation"] == "write" {
            // Every write is committed by at least the entries' fence and the tail's.
            assert!(positive(row, "fences_per_op") >= 2.0, "{row}");
            assert!(positive(row, "bytes_to_media_per_op") >= 64.0, "{row}");
            positive(row, "write_amplification");
        } else {
            assert_eq!(row["fences_per_op"].as_f64(), Some(0.0), "{row}");
            assert!(row["write_amplification"].is_null(), "{row}");
        }
    }
    let ratios = datalog["ratios"].as_array().expect("datalog ratios");
    assert_eq!(ratios.len(), WRITE_SIZES.len());
    assert!(
        stdout.contains("64 B writes: copy-on-write takes"),
        "{stdout}"
    );
    assert!(
        stdout.contains("this run is on DRAM, not Optane"),
        "{stdout}"
    );
}

fn check_fastfair_section(report: &Value, stdout: &str) {
    let ff = &report["fastfair"];
    assert_eq!(ff["keys"].as_u64(), Some(FASTFAIR_KEYS_QUICK), "{ff}");
    let rows = ff["rows"].as_array().expect("fastfair rows");
    assert_eq!(rows.len(), ShiftPolicy::ALL.len() * FastFairOp::ALL.len());
    for policy in ShiftPolicy::ALL {
        for op in FastFairOp::ALL {
            let row = rows
                .iter()
                .find(|r| r["policy"] == policy.name() && r["operation"] == op.name().as_str())
                .unwrap_or_else(|| panic!("no fastfair row for {} / {}", policy.name(), op.name()));
            positive(row, "ops_per_sec");
            let p50 = positive(row, "p50_ns");
            assert!(p50 <= positive(row, "p99_ns"), "{row}");
            if op == FastFairOp::Insert {
                // At least one line persisted per insert under every policy.
                assert!(positive(row, "fences_per_op") >= 1.0, "{row}");
                assert!(positive(row, "media_bytes_per_op") >= 64.0, "{row}");
            } else {
                assert_eq!(row["fences_per_op"].as_f64(), Some(0.0), "{row}");
            }
        }
    }
    positive(ff, "redo_over_per_shift");
    positive(ff, "fast_over_per_shift");
    assert!(stdout.contains("fastfair: "), "{stdout}");
}

/// The store path vs raw section of a quick run: for CCEH and FAST&FAIR, every single-call
/// operation of their sections (CCEH's batched inserts aside) and every YCSB run, each with
/// positive raw and store rates and a positive store/raw ratio per repetition. Returns the
/// number of rows.
fn check_store_section(report: &Value, stdout: &str) -> usize {
    let store = &report["store_path"];
    let reps = store["repetitions"].as_u64().expect("repetitions");
    assert!(
        reps >= 2,
        "both orders (raw first, store first) run: {store}"
    );
    let rows = store["rows"].as_array().expect("store_path rows");
    let single: Vec<(&str, String)> = [CcehOp::Insert, CcehOp::Get, CcehOp::Remove]
        .into_iter()
        .map(|op| ("CCEH", op.name()))
        .chain(
            FastFairOp::ALL
                .into_iter()
                .map(|op| ("FAST&FAIR", op.name())),
        )
        .collect();
    let ycsb: Vec<(&str, &str)> = ["CCEH", "FAST&FAIR"]
        .into_iter()
        .flat_map(|s| {
            [
                "YCSB load",
                "YCSB A ",
                "YCSB B ",
                "YCSB C ",
                "YCSB E ",
                "YCSB insert-only",
            ]
            .into_iter()
            .filter(move |w| s == "FAST&FAIR" || !w.starts_with("YCSB E"))
            .map(move |w| (s, w))
        })
        .collect();
    assert_eq!(rows.len(), single.len() + ycsb.len(), "{store}");
    let find = |structure: &str, matches: &dyn Fn(&str) -> bool| {
        rows.iter()
            .find(|r| r["structure"] == structure && r["operation"].as_str().is_some_and(matches))
            .unwrap_or_else(|| panic!("no store_path row for {structure}: {store}"))
    };
    let rows_checked = single
        .iter()
        .map(|(s, op)| find(s, &|o| o == op))
        .chain(ycsb.iter().map(|(s, w)| find(s, &|o| o.starts_with(w))));
    for row in rows_checked {
        positive(row, "raw_ops_per_sec");
        positive(row, "store_ops_per_sec");
        let ratio = positive(row, "ratio");
        let samples = row["ratio_samples"].as_array().expect("ratio samples");
        assert_eq!(samples.len() as u64, reps, "{row}");
        assert!(
            samples.iter().all(|x| x.as_f64().is_some_and(|x| x > 0.0)),
            "{row}"
        );
        assert_eq!(row["within_target"].as_bool(), Some(ratio >= 0.97), "{row}");
        let line = format!("{:.3}", ratio);
        assert!(
            stdout.contains(&line),
            "the ratio {line} is printed: {stdout}"
        );
    }
    assert!(stdout.contains("store path vs raw"), "{stdout}");
    assert!(stdout.contains("store/raw"), "{stdout}");
    rows.len()
}

fn check_cceh_section(report: &Value, stdout: &str) {
    let cceh = &report["cceh"];
    assert_eq!(cceh["keys"].as_u64(), Some(CCEH_KEYS_QUICK), "{cceh}");
    let rows = cceh["rows"].as_array().expect("cceh rows");
    assert_eq!(rows.len(), CcehOp::ALL.len(), "one row per operation");
    for (row, op) in rows.iter().zip(CcehOp::ALL) {
        assert_eq!(row["operation"], op.name().as_str(), "{row}");
        assert!(stdout.contains(&format!("\n{} ", op.name())), "{stdout}");
        positive(row, "ops_per_sec");
        positive(row, "ns_per_op");
        let samples = row["samples_ops_per_sec"].as_array().expect("samples");
        assert!(!samples.is_empty());
        assert!(samples.iter().all(|s| s.as_f64().is_some_and(|x| x > 0.0)));
        let sampled = matches!(op, CcehOp::Insert | CcehOp::Get);
        if sampled {
            let p50 = positive(row, "p50_ns");
            let p99 = positive(row, "p99_ns");
            assert!(p50 <= p99, "{row}");
            positive(row, "latency_samples");
        } else {
            assert!(row["p50_ns"].is_null() && row["p99_ns"].is_null(), "{row}");
        }
        match op {
            // One fence per insert, more for the splits; one per remove.
            CcehOp::Insert
            | CcehOp::InsertBatch
            | CcehOp::InsertBatchHelper
            | CcehOp::InsertBatchInline => {
                assert!(positive(row, "fences_per_op") >= 1.0, "{row}");
                assert!(positive(row, "flushes_per_op") >= 1.0, "{row}");
            }
            CcehOp::Remove => {
                positive(row, "fences_per_op");
                positive(row, "flushes_per_op");
            }
            CcehOp::Get | CcehOp::GetBatch => {
                assert_eq!(row["fences_per_op"].as_f64(), Some(0.0), "{row}");
                assert_eq!(row["flushes_per_op"].as_f64(), Some(0.0), "{row}");
            }
        }
    }
    // A key takes 16 bytes of slot; a table is never fuller than its slots.
    assert!(positive(cceh, "table_bytes_per_key") >= 16.0, "{cceh}");
    assert!(
        positive(cceh, "table_bytes_per_key_cycle_mean") >= 16.0,
        "{cceh}"
    );
    positive(cceh, "helper_on_over_off");
    positive(cceh, "inline_over_off");
    positive(cceh, "global_depth");
    assert!(
        cceh["reference"]
            .as_str()
            .is_some_and(|r| r.contains("2.2 M inserts/s")),
        "{cceh}"
    );
    assert!(stdout.contains("bytes per key"), "{stdout}");
    assert!(stdout.contains("not measured by this run"), "{stdout}");
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
        check_cell(&row["strict"]);
        check_cell(&row["batched"]);
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
