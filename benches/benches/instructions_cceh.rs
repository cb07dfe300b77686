//! Instructions per operation of the raw CCEH table (1M keys), under callgrind.
//! The set-up, the batches and how to read the counts: `instructions/fixtures.rs`.

use std::hint::black_box;

use iai_callgrind::{library_benchmark, library_benchmark_group, main};
use pmem_bench::ccehbench::Table;

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

measured!(cceh_get, ops_10000, cceh, "get", run_get, Table);
measured!(
    cceh_insert_no_split,
    ops_10000,
    cceh,
    "insert_no_split",
    run_insert,
    Table
);
measured!(cceh_insert, ops_10000, cceh, "insert", run_insert, Table);
measured!(cceh_upsert, ops_10000, cceh, "upsert", run_upsert, Table);
measured!(cceh_remove, ops_10000, cceh, "remove", run_remove, Table);

library_benchmark_group!(
    name = cceh;
    benchmarks = cceh_get, cceh_insert_no_split, cceh_insert, cceh_upsert, cceh_remove
);

main!(
    setup = prepare(&[Structure::Cceh]);
    library_benchmark_groups = cceh
);
