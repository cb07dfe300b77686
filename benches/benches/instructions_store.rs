//! Instructions per operation of the Store's typed u64 -> u64 hash and B+-tree maps (1M keys),
//! under callgrind.
//! The set-up, the batches and how to read the counts: `instructions/fixtures.rs`.

use std::hint::black_box;

use iai_callgrind::{library_benchmark, library_benchmark_group, main};
use pmem_structures::{BTreeMap, HashMap};

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

measured!(store_hash_get, ops_10000, store_hash, "get", run_get, HashMap<u64, u64>);
measured!(store_hash_insert_no_split, ops_10000, store_hash, "insert_no_split", run_insert, HashMap<u64, u64>);
measured!(store_hash_insert, ops_10000, store_hash, "insert", run_insert, HashMap<u64, u64>);
measured!(store_hash_upsert, ops_10000, store_hash, "upsert", run_upsert, HashMap<u64, u64>);
measured!(store_hash_remove, ops_10000, store_hash, "remove", run_remove, HashMap<u64, u64>);
measured!(store_btree_get, ops_10000, store_btree, "get", run_get, BTreeMap<u64, u64>);
measured!(store_btree_insert, ops_10000, store_btree, "insert", run_insert, BTreeMap<u64, u64>);
measured!(store_btree_scan, scans_1000, store_btree, "scan", run_scan, BTreeMap<u64, u64>);
measured!(store_btree_upsert, ops_10000, store_btree, "upsert", run_upsert, BTreeMap<u64, u64>);
measured!(store_btree_remove, ops_10000, store_btree, "remove", run_remove, BTreeMap<u64, u64>);

library_benchmark_group!(
    name = store;
    benchmarks = store_hash_get, store_hash_insert_no_split, store_hash_insert, store_hash_upsert, store_hash_remove, store_btree_get, store_btree_insert, store_btree_scan, store_btree_upsert, store_btree_remove
);

main!(
    setup = prepare(&[Structure::StoreHash, Structure::StoreBTree]);
    library_benchmark_groups = store
);
