//! Run one YCSB workload on a raw structure (FAST&FAIR or CCEH) and on the `Store`'s map over
//! it, the same plan on both, for profiling where the store's path differs from the raw one:
//!
//! ```sh
//! cargo build --release -p pmem-bench --example ycsb_profile
//! valgrind --tool=callgrind --toggle-collect='ycsb_profile::measured_raw' \
//!     target/release/examples/ycsb_profile E 100000 20000     # then `measured_store`
//! perf record -g target/release/examples/ycsb_profile E 1000000 1000000
//! ```
//!
//! Arguments: the workload (A, B, C or E; default E), records loaded (default 100,000),
//! operations run (default 20,000), the sides run (`both`, the default, `raw` or `store`:
//! one side alone, for a whole-program profile of it) and the structure (`fastfair`, the
//! default, against the Store's ordered map, or `cceh` against its hash map; E needs
//! `fastfair`). Each side loads the records one insert
//! each (not measured), then runs the workload's plan three times, the sides in alternating
//! order; each run's wall time is printed. (The toggles above count nothing when the plan runs
//! on threads of its own: then profile one side at a time.) Pools are files in /dev/shm at emulated granularity (flushes and fences
//! really issued), as in `pmem-bench --section structures`.

use std::time::Instant;

use pmem_bench::ycsb::store_targets::{with_store_target, StoreMapKind};
use pmem_bench::ycsb::{
    plan, run_plan, with_target, KeyDistribution, KeySpace, Plan, Setup, Target, Variant, Workload,
    YcsbError,
};
use pmem_ordering::Granularity;
use pmem_structures::raw::fastfair::FastFairConfig;

#[inline(never)]
fn measured_raw(target: &dyn Target, variant: Variant, workload: Workload, plan: &Plan) -> f64 {
    run(target, variant, workload, plan)
}

#[inline(never)]
fn measured_store(target: &dyn Target, variant: Variant, workload: Workload, plan: &Plan) -> f64 {
    run(target, variant, workload, plan)
}

fn run(target: &dyn Target, variant: Variant, workload: Workload, plan: &Plan) -> f64 {
    let distribution = workload.chooses_keys().then_some(KeyDistribution::Uniform);
    let start = Instant::now();
    run_plan(target, variant, workload, distribution, plan, false).expect("the workload runs");
    start.elapsed().as_secs_f64()
}

fn main() -> Result<(), YcsbError> {
    let mut args = std::env::args().skip(1);
    let workload = match args.next().as_deref().unwrap_or("E") {
        "A" => Workload::A,
        "B" => Workload::B,
        "C" => Workload::C,
        "E" => Workload::E,
        other => panic!("workload {other}: A, B, C or E"),
    };
    let records: u64 = args.next().map_or(100_000, |a| a.parse().expect("records"));
    let ops: u64 = args
        .next()
        .map_or(20_000, |a| a.parse().expect("operations"));
    let sides = args.next().unwrap_or_else(|| "both".to_string());
    let (run_raw, run_store) = match sides.as_str() {
        "both" => (true, true),
        "raw" => (true, false),
        "store" => (false, true),
        other => panic!("sides {other}: both, raw or store"),
    };
    let (variant, store_kind) = match args.next().as_deref().unwrap_or("fastfair") {
        "fastfair" => (
            Variant::FastFair(FastFairConfig::default().policy),
            StoreMapKind::BTreeMap,
        ),
        "cceh" => (Variant::CcehHelperOff, StoreMapKind::HashMap),
        other => panic!("structure {other}: fastfair or cceh"),
    };
    let dir = tempfile::Builder::new()
        .prefix("pmem-ycsb-profile-")
        .tempdir_in("/dev/shm")
        .expect("a directory for the pools");
    let setup = Setup {
        dir: dir.path().to_path_buf(),
        prefix: "profile".to_string(),
        granularity: Some(Granularity::Emulated),
    };
    let keys = KeySpace {
        loaded: records,
        next_insert: 0,
    };
    let load = plan(
        Workload::Load,
        KeyDistribution::Uniform,
        keys,
        records,
        1,
        7,
    )?;
    let keys = KeySpace {
        loaded: records,
        next_insert: load.next_insert,
    };
    // Three runs a side draw their inserts from one plan's fresh keys each.
    let mut runs = Vec::new();
    let mut next = keys;
    for _ in 0..3 {
        let p = plan(workload, KeyDistribution::Uniform, next, ops, 1, 11)?;
        next.next_insert = p.next_insert;
        runs.push(p);
    }
    let capacity = records + 3 * workload.max_inserts(ops) + 1;
    with_target(variant, &setup, capacity, |raw| {
        with_store_target(store_kind, &setup, capacity, |store| {
            if run_raw {
                run_plan(raw, variant, Workload::Load, None, &load, false)?;
            }
            if run_store {
                run_plan(store, variant, Workload::Load, None, &load, false)?;
            }
            for (i, p) in runs.iter().enumerate() {
                let raw_side = || run_raw.then(|| measured_raw(raw, variant, workload, p));
                let store_side = || run_store.then(|| measured_store(store, variant, workload, p));
                let (raw_secs, store_secs) = if i % 2 == 0 {
                    let r = raw_side();
                    (r, store_side())
                } else {
                    let s = store_side();
                    (raw_side(), s)
                };
                match (raw_secs, store_secs) {
                    (Some(r), Some(s)) => println!(
                        "run {i}: raw {:.1} ms, store {:.1} ms, store/raw throughput {:.3}",
                        r * 1e3,
                        s * 1e3,
                        r / s
                    ),
                    (Some(r), None) => println!("run {i}: raw {:.1} ms", r * 1e3),
                    (None, Some(s)) => println!("run {i}: store {:.1} ms", s * 1e3),
                    // Not asked for: `sides` names at least one.
                    (None, None) => {}
                }
            }
            Ok::<_, YcsbError>(())
        })
    })
}
