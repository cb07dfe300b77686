//! Criterion benches of the FAST&FAIR B+-tree, on heaps in pool files in /dev/shm (else the
//! temporary directory) opened with **emulated** granularity: flush instructions and fences are
//! issued as on persistent memory, but the files are in DRAM (or the page cache), not persistent
//! memory.
//!
//! One group, `fastfair`, so the in-place vs out-of-place comparison is read off one run. Its
//! unit of work is the whole key set (throughput in keys per second): 1M uniformly random
//! distinct keys, 512-byte nodes, for each shift policy (per-shift, FAST, redo-logged):
//!
//! * `insert/<policy>`: insert every key, one call per key, into a fresh tree (the set-up of
//!   the pool file and heap is not timed);
//! * `get/<policy>`: look every key up (hits) in a random order, in a full tree;
//! * `scan/<policy>`: 10 000 range scans of 100 keys from random keys, in a full tree (the
//!   throughput counts scans).
//!
//! The operations are the ones `pmem-bench` times (`pmem_bench::fastfairbench`); each
//! iteration checks that every key was inserted, found or scanned. Criterion may warn that it
//! cannot complete 10 samples in the target time: a sample is at least one whole load.

use std::time::Duration;

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use pmem_bench::fastfairbench::{get_all, insert_all, scan_all, FastFairHeap, FASTFAIR_KEYS};
use pmem_bench::keys::{random_keys_except_max, shuffled};
use pmem_bench::phase::{time_then_check, total_time};
use pmem_bench::poolfile::default_pool_dir;
use pmem_ordering::Granularity;
use pmem_structures::raw::fastfair::ShiftPolicy;

/// The pool file of the tree being built or measured.
const POOL_FILE: &str = "pmem-bench-criterion-fastfair.pool";
/// Range scans per iteration.
const SCANS: usize = 10_000;

fn bench_fastfair(c: &mut Criterion) {
    let dir = default_pool_dir();
    let keys = random_keys_except_max(FASTFAIR_KEYS, 0xFA57);
    let lookups = shuffled(&keys, 0x6E7);
    let starts: Vec<u64> = shuffled(&keys, 0x5CA).into_iter().take(SCANS).collect();
    let n = keys.len() as u64;
    let parameter = format!("{}M keys", n / 1_000_000);
    let mut g = c.benchmark_group("fastfair");
    g.sampling_mode(SamplingMode::Flat);
    g.measurement_time(Duration::from_secs(10));

    g.throughput(Throughput::Elements(n));
    for policy in ShiftPolicy::ALL {
        g.bench_function(
            BenchmarkId::new(format!("insert/{}", policy.name()), &parameter),
            |b| {
                b.iter_custom(|iters| {
                    total_time(iters, || {
                        let fresh =
                            FastFairHeap::create(&dir, POOL_FILE, n, Some(Granularity::Emulated))
                                .expect("set up a heap for the tree");
                        let tree = fresh.tree(policy).expect("create the tree");
                        time_then_check(
                            || insert_all(&tree, &keys),
                            |inserted| assert_eq!(inserted.expect("insert"), n, "keys lost"),
                        )
                    })
                })
            },
        );
    }

    for policy in ShiftPolicy::ALL {
        let fresh = FastFairHeap::create(&dir, POOL_FILE, n, Some(Granularity::Emulated))
            .expect("set up a heap for the tree");
        let tree = fresh.tree(policy).expect("create the tree");
        assert_eq!(insert_all(&tree, &keys).expect("load"), n);
        g.throughput(Throughput::Elements(n));
        g.bench_function(
            BenchmarkId::new(format!("get/{}", policy.name()), &parameter),
            |b| {
                b.iter_custom(|iters| {
                    total_time(iters, || {
                        time_then_check(
                            || get_all(&tree, &lookups),
                            |hits| assert_eq!(hits.expect("get"), n, "keys not found"),
                        )
                    })
                })
            },
        );
        g.throughput(Throughput::Elements(SCANS as u64));
        g.bench_function(
            BenchmarkId::new(format!("scan/{}", policy.name()), &parameter),
            |b| {
                b.iter_custom(|iters| {
                    total_time(iters, || {
                        time_then_check(
                            || scan_all(&tree, &starts),
                            |pairs| {
                                let pairs = pairs.expect("scan");
                                assert!(pairs >= SCANS as u64 * 90, "scans read too little");
                            },
                        )
                    })
                })
            },
        );
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .sample_size(10);
    targets = bench_fastfair
}
criterion_main!(benches);
