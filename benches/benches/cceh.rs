//! Criterion benches of the CCEH hash table, on heaps in pool files in /dev/shm (else the
//! temporary directory) opened with **emulated** granularity: flush instructions and fences are
//! issued as on persistent memory, but the files are in DRAM (or the page cache), not persistent
//! memory.
//!
//! One group, `cceh`, so every comparison is read off one run. Its unit of work is the whole key
//! set (throughput in keys per second): 1M uniformly random distinct keys, and 16M as well when
//! `PMEM_BENCH_LARGE=1` is set (that needs about 1.5 GiB of /dev/shm and adds about a quarter
//! of an hour: one 16M-key load takes about 10 s). Criterion may warn that it cannot complete
//! 10 samples in the target time: a sample is at least one whole load, and the untimed set-up
//! of a fresh table counts against the target too.
//! With 1 thread, or 2 threads that each take half of the keys on the shared table:
//!
//! * `insert helper off` / `insert helper on`: load the keys into a fresh table with
//!   `insert_batch`, the speculative helper thread off or on (depth 8): one helper per
//!   inserting thread;
//! * `get`: look every key up (hits) in a random order, in a full table;
//! * `remove`: remove every key in a random order from a full table, loaded untimed.
//!
//! The operations are the ones `pmem-bench` times (`pmem_bench::ccehbench`). Setting up a
//! fresh table (pool file, heap) is not timed; each iteration checks that every key was
//! inserted, found or removed.

use std::path::Path;
use std::time::Duration;

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use pmem_bench::ccehbench::{
    batch_options, get_all, insert_all, items, remove_all, CcehHeap, LookAhead, CCEH_KEYS,
};
use pmem_bench::keys::{random_keys, shuffled};
use pmem_bench::phase::{time_then_check, total_time};
use pmem_bench::poolfile::default_pool_dir;
use pmem_ordering::Granularity;

/// The pool file of the table being built or measured.
const POOL_FILE: &str = "pmem-bench-criterion-cceh.pool";
/// The pool file of the full table the lookups run on.
const GET_POOL_FILE: &str = "pmem-bench-criterion-cceh-get.pool";
/// Keys of the large size, run only with `PMEM_BENCH_LARGE=1`.
const LARGE_KEYS: u64 = 16_000_000;
/// Thread counts compared.
const THREADS: [usize; 2] = [1, 2];

fn sizes() -> Vec<u64> {
    let mut sizes = vec![CCEH_KEYS];
    if std::env::var("PMEM_BENCH_LARGE").is_ok_and(|v| v == "1") {
        sizes.push(LARGE_KEYS);
    }
    sizes
}

fn parameter(keys: u64, threads: usize) -> String {
    let plural = if threads == 1 { "" } else { "s" };
    format!("{}M keys, {threads} thread{plural}", keys / 1_000_000)
}

/// A fresh table on a fresh heap, loaded with `items` unless `empty`; `f` gets the table.
fn with_table<R>(
    dir: &Path,
    file: &str,
    keys: u64,
    load: Option<&[(u64, u64)]>,
    f: impl FnOnce(&pmem_bench::ccehbench::Table) -> R,
) -> R {
    let fresh = CcehHeap::create(dir, file, keys, Some(Granularity::Emulated))
        .expect("set up a heap for the table");
    let table = fresh.table().expect("create the table");
    if let Some(items) = load {
        let inserted = insert_all(&table, items, batch_options(false), 1).expect("load the table");
        assert_eq!(inserted, items.len() as u64, "keys lost while loading");
    }
    f(&table)
}

fn bench_cceh(c: &mut Criterion) {
    let dir = default_pool_dir();
    let mut g = c.benchmark_group("cceh");
    g.sampling_mode(SamplingMode::Flat);
    for keys in sizes() {
        let key_set = random_keys(keys, 0xCCE4);
        let items = items(&key_set);
        let lookups = shuffled(&key_set, 0x6E7);
        let removals = shuffled(&key_set, 0x4E3);
        drop(key_set);
        g.throughput(Throughput::Elements(keys));
        // About ten whole loads per variant.
        g.measurement_time(Duration::from_secs(5 * keys.div_ceil(CCEH_KEYS)));

        for threads in THREADS {
            for look_ahead in LookAhead::ALL {
                let name = format!("insert {}", look_ahead.name());
                g.bench_function(BenchmarkId::new(name, parameter(keys, threads)), |b| {
                    b.iter_custom(|iters| {
                        total_time(iters, || {
                            with_table(&dir, POOL_FILE, keys, None, |table| {
                                time_then_check(
                                    || insert_all(table, &items, look_ahead.options(), threads),
                                    |inserted| {
                                        assert_eq!(inserted.expect("insert"), keys, "keys lost")
                                    },
                                )
                            })
                        })
                    })
                });
            }
        }

        with_table(&dir, GET_POOL_FILE, keys, Some(&items), |table| {
            for threads in THREADS {
                g.bench_function(BenchmarkId::new("get", parameter(keys, threads)), |b| {
                    b.iter_custom(|iters| {
                        total_time(iters, || {
                            time_then_check(
                                || get_all(table, &lookups, threads),
                                |hits| assert_eq!(hits.expect("get"), keys, "keys not found"),
                            )
                        })
                    })
                });
            }
        });

        for threads in THREADS {
            g.bench_function(BenchmarkId::new("remove", parameter(keys, threads)), |b| {
                b.iter_custom(|iters| {
                    total_time(iters, || {
                        with_table(&dir, POOL_FILE, keys, Some(&items), |table| {
                            time_then_check(
                                || remove_all(table, &removals, threads),
                                |removed| {
                                    assert_eq!(removed.expect("remove"), keys, "keys not removed")
                                },
                            )
                        })
                    })
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .sample_size(10);
    targets = bench_cceh
}
criterion_main!(benches);
