//! Criterion benches of undo-log transactions, on heaps in pool files in /dev/shm (else the
//! temporary directory) opened with **emulated** granularity: flush instructions and fences are
//! issued as on persistent memory, but the files are in DRAM (or the page cache), not persistent
//! memory.
//!
//! The operations are the ones `pmem-bench` times (`pmem_bench::txbench`), one group per
//! comparison so each ratio is read off one run:
//!
//! * `tx_words`: a transaction snapshotting then writing K random words, K = 1, 2, 8, 32, 128,
//!   under the strict, batched and ideal fence policies;
//! * `themis_workloads`: one transaction of each workload of Themis, Table II (SPS, LL,
//!   Hashmap, CQ, TATP update_location, TPCC new_order) under the same three policies;
//! * `object_update`: an object replaced in place vs out of place, 64 B to 4 KiB (throughput in
//!   bytes).
//!
//! Each variant runs on its own heap in its own fresh pool file, removed when its bench ends.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pmem_bench::poolfile::default_pool_dir;
use pmem_bench::txbench::{variants, Section, TxRunner, TxVariant};
use pmem_ordering::Granularity;

fn bench_transactions(c: &mut Criterion) {
    let dir = default_pool_dir();
    for section in Section::ALL {
        let mut g = c.benchmark_group(format!("{} (emulated)", section.name()));
        for variant in variants(section) {
            let mut runner = TxRunner::new(
                &dir,
                "pmem-bench-criterion",
                variant,
                Some(Granularity::Emulated),
            )
            .expect("set up the variant");
            if let TxVariant::Object { bytes, .. } = variant {
                g.throughput(Throughput::Bytes(bytes));
            }
            g.bench_function(
                BenchmarkId::new(variant.function(), variant.parameter()),
                |b| b.iter(|| runner.step().expect("a benchmark transaction failed")),
            );
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(Duration::from_millis(1500))
        .warm_up_time(Duration::from_millis(300))
        .sample_size(20);
    targets = bench_transactions
}
criterion_main!(benches);
