//! `pmem-bench --keys` for the structures section, the pools' resident memory beside the bytes
//! the structures allocate, and the primitives section's lines-per-fence row, run through the
//! binary as users do. Times are printed, never asserted.

use std::path::Path;
use std::process::Command;

use pmem_bench::ccehbench::CcehPlan;
use pmem_bench::fastfairbench::FastFairPlan;
use pmem_bench::poolfile::default_pool_dir;
use pmem_bench::primitives::{Variant, LINES_PER_FENCE};
use serde_json::Value;

fn arg(p: &Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}

/// Run `pmem-bench --quick` with `extra` options, its pools in a private directory; it must
/// succeed. Returns its standard output and the parsed JSON.
fn quick_run(extra: &[&str]) -> (String, Value) {
    let pools = tempfile::Builder::new()
        .prefix("pmem-bench-test")
        .tempdir_in(default_pool_dir())
        .expect("make a pool directory");
    let out_dir = tempfile::tempdir().expect("make an output directory");
    let json = out_dir.path().join("results.json");
    let mut args = vec![
        "--quick",
        "--pool-dir",
        arg(pools.path()),
        "--json",
        arg(&json),
    ];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_pmem-bench"))
        .args(&args)
        .output()
        .expect("run the pmem-bench binary");
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

fn number(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

/// The pool's resident bytes and the bytes the structure allocated, both present and the
/// first within 1.3x of the second (plus the heap's fixed metadata, which a small table
/// does not amortise).
fn check_memory(section: &Value, allocated_key: &str) {
    let resident = number(section, "pool_resident_bytes");
    let allocated = number(section, allocated_key);
    assert!(allocated > 0.0, "{section}");
    assert!(resident > 0.0, "{section}");
    let heap_metadata = f64::from(4u32 << 20);
    assert!(
        resident <= 1.3 * allocated + heap_metadata,
        "resident {resident} for {allocated} allocated: {section}"
    );
}

#[test]
fn keys_sets_the_structures_sections_key_count_and_memory_is_reported() {
    let keys = 150_000u64;
    let (stdout, report) = quick_run(&[
        "--section",
        "structures",
        "--structure",
        "cceh,fastfair",
        "--keys",
        &keys.to_string(),
    ]);
    let cceh = &report["cceh"];
    assert_eq!(cceh["keys"].as_u64(), Some(keys), "{cceh}");
    // More keys than the quick plan's: fewer rounds, in proportion.
    let quick = CcehPlan::quick();
    assert_eq!(
        cceh["rounds"].as_u64(),
        Some(quick.with_keys(keys).rounds as u64),
        "{cceh}"
    );
    assert!(quick.with_keys(keys).rounds < quick.rounds);
    check_memory(cceh, "table_bytes");

    let ff = &report["fastfair"];
    assert_eq!(ff["keys"].as_u64(), Some(keys), "{ff}");
    assert_eq!(
        ff["rounds"].as_u64(),
        Some(FastFairPlan::quick().with_keys(keys).rounds as u64),
        "{ff}"
    );
    check_memory(ff, "tree_bytes");

    assert!(
        stdout.contains(&format!("cceh: {keys} uniformly random")),
        "{stdout}"
    );
    assert_eq!(stdout.matches("holds").count(), 2, "{stdout}");
    assert!(stdout.contains("MiB the heap allocated"), "{stdout}");
    // The reference figures name the machine they come from.
    assert!(stdout.contains("AMD EPYC"), "{stdout}");
    assert!(!stdout.contains("on this machine"), "{stdout}");
}

#[test]
fn rounds_shrink_with_keys_beyond_the_plan_and_never_reach_zero() {
    let full = CcehPlan::full();
    assert_eq!(full.with_keys(full.keys).rounds, full.rounds);
    assert_eq!(full.with_keys(1_000).rounds, full.rounds);
    assert_eq!(
        full.with_keys(4 * full.keys).rounds,
        full.rounds.div_ceil(4)
    );
    assert_eq!(full.with_keys(16 * full.keys).rounds, 1);
    assert_eq!(full.with_keys(u64::MAX).rounds, 1);
    assert_eq!(full.with_keys(0).keys, 1);
    let ff = FastFairPlan::full();
    assert_eq!(ff.with_keys(16 * ff.keys).rounds, 1);
    assert_eq!(ff.with_keys(16 * ff.keys).scans, ff.scans);
}

#[test]
fn the_primitives_section_has_a_lines_per_fence_row() {
    let (stdout, report) = quick_run(&["--section", "primitives"]);
    let id = Variant::LinesPerFence(LINES_PER_FENCE).id();
    let rows = report["rows"].as_array().expect("rows is an array");
    let row = rows
        .iter()
        .find(|r| r["variant"] == id.as_str())
        .unwrap_or_else(|| panic!("no {id} row in {rows:?}"));
    assert_eq!(row["group"], "flush_kinds", "{row}");
    assert_eq!(
        row["bytes_per_op"].as_u64(),
        Some(64 * LINES_PER_FENCE as u64)
    );
    // One fence for all the lines, each line flushed once.
    assert_eq!(number(row, "fences_per_op"), 1.0, "{row}");
    assert_eq!(
        number(row, "flushes_per_op"),
        LINES_PER_FENCE as f64,
        "{row}"
    );
    assert!(stdout.contains(&id), "{stdout}");
}
