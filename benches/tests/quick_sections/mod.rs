//! What a quick `pmem-bench` run must print and write per section: the checks
//! `quick_run_writes_a_json_row_for_every_variant` (and the PMDK test) apply to its report.

use pmem_bench::ccehbench::{CcehOp, CCEH_KEYS_QUICK};
use pmem_bench::datalogbench::{FILE_BYTES_QUICK, WRITE_SIZES};
use pmem_bench::fastfairbench::{FastFairOp, FASTFAIR_KEYS_QUICK};
use pmem_bench::txbench::{Workload, OBJECT_SIZES, TX_WORDS};
use pmem_bench::ycsb::{KeyDistribution, Scale, Structure, Variant, Workload as YcsbWorkload};
use pmem_structures::raw::fastfair::ShiftPolicy;
use serde_json::Value;

use super::positive;

/// The markdown table lines of the page-size section (pools, then speeds), the alloc section
/// and the service section (its Redis table unless skipped, then redb's), which run by
/// default: a header and a rule per table, and one line per row. The service section's rows
/// are checked in tests/service.rs.
pub fn page_size_alloc_and_service_lines(report: &Value) -> usize {
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

/// The markdown table lines of the cluster section, which runs by default: its throughput
/// table unless skipped, then the failover rounds' (its rows are checked in tests/cluster.rs).
pub fn cluster_lines(report: &Value) -> usize {
    let cluster = &report["cluster"];
    let network = cluster["network"].as_array().expect("cluster rows").len();
    let rounds = cluster["failover"]["rounds"]
        .as_array()
        .expect("failover rounds")
        .len();
    assert!(rounds > 0, "{cluster}");
    let throughput = if network == 0 { 0 } else { network + 2 };
    throughput + rounds + 2
}

/// The markdown table lines of the read-after-persist and PERC sections, which run by default:
/// the machine table, then one table of loads and three of PERC's loops.
pub fn flush_section_lines(report: &Value) -> usize {
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
pub fn check_ycsb_section(report: &Value, stdout: &str, scale: Scale) -> usize {
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

pub fn check_ycsb_row(row: &Value, workload: YcsbWorkload, variant: Variant, scale: Scale) {
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
pub fn check_cell(cell: &Value) {
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

pub fn check_transaction_sections(report: &Value, stdout: &str) {
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
        // The fence counts are exact (crates/undo-log/tests/integration/fences.rs): K + 2, 3, 2.
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
pub fn check_datalog_section(report: &Value, stdout: &str) {
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

pub fn check_fastfair_section(report: &Value, stdout: &str) {
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
pub fn check_store_section(report: &Value, stdout: &str) -> usize {
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

pub fn check_cceh_section(report: &Value, stdout: &str) {
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
