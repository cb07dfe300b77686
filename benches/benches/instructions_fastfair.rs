//! Instructions per operation of the raw FAST&FAIR tree (FAST shifts, 1M keys), under callgrind.
//! The set-up, the batches and how to read the counts: `instructions/fixtures.rs`.

use std::hint::black_box;

use iai_callgrind::{library_benchmark, library_benchmark_group, main};
use pmem_bench::fastfairbench::Tree;

#[path = "instructions/fixtures.rs"]
mod fixtures;
#[path = "instructions/pools.rs"]
mod pools;

use fixtures::*;
use pools::{prepare, Structure};

/// One measured benchmark: `$name`, of `$op` on the map `$setup` makes, run by `$run`, its
/// id saying the batch size.
macro_rules! measured {
    ($name:ident, $id:ident, $setup:ident, $op:literal, $run:ident, $map:ty) => {
        #[library_benchmark]
        #[bench::$id(args = ($op), setup = $setup)]
        fn $name(f: &'static Fixture<$map>) -> usize {
            black_box($run(f))
        }
    };
}

measured!(fastfair_get, ops_10000, fastfair, "get", run_get, Tree);
measured!(
    fastfair_insert,
    ops_10000,
    fastfair,
    "insert",
    run_insert,
    Tree
);
measured!(fastfair_scan, scans_1000, fastfair, "scan", run_scan, Tree);
// The scans of `fastfair_scan`, each into one reused buffer with `Range::next_into`.
#[library_benchmark]
#[bench::scans_1000(args = ("scan"), setup = fastfair_bulk)]
fn fastfair_scan_bulk(f: &'static mut BulkScans) -> usize {
    black_box(run_scan_bulk(f))
}

measured!(
    fastfair_upsert,
    ops_10000,
    fastfair,
    "upsert",
    run_upsert,
    Tree
);
measured!(
    fastfair_remove,
    ops_10000,
    fastfair,
    "remove",
    run_remove,
    Tree
);

library_benchmark_group!(
    name = fastfair;
    benchmarks = fastfair_get, fastfair_insert, fastfair_scan, fastfair_scan_bulk, fastfair_upsert, fastfair_remove
);

main!(
    setup = prepare(&[Structure::FastFair]);
    library_benchmark_groups = fastfair
);
