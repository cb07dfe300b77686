//! Runs the byte-key section of `pmem-bench` as CI does (`--quick`). Times are printed, never
//! asserted.

use std::path::Path;
use std::process::Command;

use pmem_bench::bytekeys::{ByteWorkload, MapKind, CONFIGS};
use pmem_bench::poolfile::default_pool_dir;
use serde_json::Value;

fn arg(p: &Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}

#[test]
fn the_byte_key_section_runs_quick_lists_its_rows_and_counts_fences_for_inserts() {
    let pools = tempfile::Builder::new()
        .prefix("pmem-bench-test")
        .tempdir_in(default_pool_dir())
        .expect("make a pool directory");
    let out_dir = tempfile::tempdir().expect("make an output directory");
    let json = out_dir.path().join("byte-keys.json");
    let plot_dir = out_dir.path().join("charts");
    let out = Command::new(env!("CARGO_BIN_EXE_pmem-bench"))
        .args([
            "--quick",
            "--section",
            "byte-keys",
            "--pool-dir",
            arg(pools.path()),
            "--json",
            arg(&json),
            "--plot",
            arg(&plot_dir),
        ])
        .output()
        .expect("run the pmem-bench binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pmem-bench failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("emulated granularity"), "{stdout}");
    assert!(stdout.contains("byte keys through the store"), "{stdout}");
    assert!(stdout.contains("byte-key speed targets"), "{stdout}");

    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read the JSON output"))
            .expect("the JSON output parses");
    let section = &report["byte_keys"];
    let rows = section["rows"].as_array().expect("byte_keys rows");
    let mut expected = 0;
    for config in CONFIGS {
        for workload in config.map.workloads() {
            expected += 1;
            let row = rows
                .iter()
                .find(|r| {
                    r["map"] == config.map.name()
                        && r["keys"] == config.keys.name()
                        && r["value_bytes"] == config.value_bytes as u64
                        && r["workload"] == workload.name()
                })
                .unwrap_or_else(|| panic!("no row for {config:?} {workload:?}: {section}"));
            let ops_per_sec = row["ops_per_sec"].as_f64().expect("ops_per_sec");
            assert!(ops_per_sec.is_finite() && ops_per_sec > 0.0, "{row}");
            assert!(row["p99_ns"].as_f64().is_some_and(|x| x > 0.0), "{row}");
            let ours = config.map.is_ours();
            // The leaf map has no u64 path to compare with.
            assert_eq!(
                row["ratio_to_u64"].is_null(),
                config.is_u64()
                    || !ours
                    || matches!(config.map, MapKind::Leaf | MapKind::StoreLeaf),
                "{row}"
            );
            assert_eq!(row["fences_per_op"].is_null(), !ours, "{row}");
            if *workload == ByteWorkload::Load && ours {
                assert!(
                    row["fences_per_op"].as_f64().is_some_and(|f| f > 0.0),
                    "an insert fences: {row}"
                );
                assert!(row["media_bytes_per_op"].as_f64().is_some_and(|b| b > 0.0));
            }
        }
    }
    assert_eq!(
        rows.len(),
        expected,
        "one row per map and workload: {section}"
    );
    // Ours against LMDB and redb, every workload, with the run's conditions printed.
    assert!(
        stdout.contains("byte keys beside LMDB and redb"),
        "{stdout}"
    );
    assert!(stdout.contains("ordered / LMDB"), "{stdout}");
    assert!(stdout.contains("leaf / LMDB"), "{stdout}");
    assert!(stdout.contains("Store leaves / LMDB"), "{stdout}");
    // Each leaf map's open, timed after its workloads.
    let opens = section["opens"].as_array().expect("opens");
    assert_eq!(opens.len(), 3, "{section}");
    assert!(opens
        .iter()
        .all(|o| o["seconds"].as_f64().is_some_and(|x| x > 0.0)));
    assert!(
        stdout.contains("the DRAM index rebuilt from the leaves"),
        "{stdout}"
    );
    assert!(stdout.contains("1-minute load average"), "{stdout}");
    let comparison = section["comparison"].as_array().expect("comparison");
    assert_eq!(comparison.len(), ByteWorkload::ORDERED.len(), "{section}");
    for c in comparison {
        for field in [
            "ordered",
            "lmdb",
            "redb",
            "ordered_over_lmdb",
            "ordered_over_redb",
            "leaf",
            "leaf_over_lmdb",
            "leaf_over_redb",
            "store_leaf",
            "store_leaf_over_lmdb",
            "store_leaf_over_redb",
        ] {
            assert!(c[field].as_f64().is_some_and(|x| x > 0.0), "{field}: {c}");
        }
        assert_eq!(c["hash_over_lmdb"].is_null(), c["workload"] == "E", "{c}");
    }
    let peers = section["peers"].as_array().expect("peers");
    assert_eq!(peers.len(), 2, "{section}");
    assert_eq!(section["conditions"]["threads"], 1);
    assert!(section["conditions"]["load_before"].is_array(), "{section}");
    let targets = section["targets"].as_array().expect("byte_keys targets");
    assert_eq!(targets.len(), 6, "{section}");
    assert!(targets.iter().all(|t| t["met"].is_boolean()));
    for name in ["bytekeys-hash.png", "bytekeys-ordered.png"] {
        let bytes = std::fs::read(plot_dir.join(name)).expect("the chart exists");
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is no PNG");
    }
    let left: Vec<_> = std::fs::read_dir(pools.path())
        .expect("list the pool directory")
        .collect();
    assert!(left.is_empty(), "pool files left behind: {left:?}");
}

#[test]
fn byte_key_maps_and_sizes_are_chosen_on_the_command_line() {
    let pools = tempfile::Builder::new()
        .prefix("pmem-bench-test")
        .tempdir_in(default_pool_dir())
        .expect("make a pool directory");
    let out_dir = tempfile::tempdir().expect("make an output directory");
    let json = out_dir.path().join("byte-keys.json");
    let out = Command::new(env!("CARGO_BIN_EXE_pmem-bench"))
        .args([
            "--quick",
            "--section",
            "byte-keys",
            "--byte-key-map",
            "ordered-100,lmdb,redb",
            "--keys",
            "3000",
            "--ops",
            "1000",
            "--pool-dir",
            arg(pools.path()),
            "--json",
            arg(&json),
        ])
        .output()
        .expect("run the pmem-bench binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pmem-bench failed:\n{stdout}\n{stderr}"
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read the JSON output"))
            .expect("the JSON output parses");
    let section = &report["byte_keys"];
    assert_eq!(section["records"], 3000);
    assert_eq!(section["ops"], 1000);
    assert_eq!(section["scans"], 200);
    let rows = section["rows"].as_array().expect("byte_keys rows");
    let maps: std::collections::BTreeSet<&str> =
        rows.iter().filter_map(|r| r["map"].as_str()).collect();
    assert_eq!(
        maps,
        ["LMDB", "ordered map", "redb"].into_iter().collect(),
        "{section}"
    );
    assert_eq!(rows.len(), 3 * ByteWorkload::ORDERED.len());
    for row in rows {
        let expected = if row["workload"] == "load" {
            3000
        } else if row["workload"] == "E" {
            200
        } else {
            1000
        };
        assert_eq!(row["ops"], expected, "{row}");
    }
    // No hash map measured: its ratios are absent, the ordered map's present.
    for c in section["comparison"].as_array().expect("comparison") {
        assert!(c["hash"].is_null() && c["hash_over_lmdb"].is_null(), "{c}");
        assert!(
            c["ordered_over_redb"].as_f64().is_some_and(|x| x > 0.0),
            "{c}"
        );
    }

    let out = Command::new(env!("CARGO_BIN_EXE_pmem-bench"))
        .args([
            "--quick",
            "--section",
            "byte-keys",
            "--byte-key-map",
            "sqlite",
        ])
        .output()
        .expect("run the pmem-bench binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("no byte-key map sqlite"), "{stderr}");
    assert!(stderr.contains("ordered-100"), "{stderr}");
}
