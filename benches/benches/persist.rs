//! Criterion benches of the persistence primitives, on a pool in /dev/shm (else the temporary
//! directory) opened with **emulated** granularity: flush instructions and fences are issued as
//! on persistent memory, but the file is in DRAM (or the page cache), not persistent memory.
//!
//! The operations are the ones `pmem-bench` times (`pmem_bench::primitives`); each group
//! compares its variants:
//!
//! * `flush_kinds`: write one cache line + flush + fence, per flush instruction of this CPU;
//! * `nt_vs_clwb`: `nt_write` + fence vs `write` + `persist`, 64 B to 64 KiB (throughput in
//!   bytes): the micro-buffering crossover of Optane guide (FAST'20), Sec. 5.2.1 (near 1 KB on Optane);
//! * `nt_then_temporal`: `nt_write` 64 B then `write_after` 8 B, x86 model (fence) vs ideal
//!   (none);
//! * `persist_vs_raw`: the pool's `write` + `persist` vs a plain store + `flush_line` + `sfence`
//!   on a memmap2 mapping of the same pool file.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pmem_bench::poolfile::{default_pool_dir, PoolFile};
use pmem_bench::primitives::{variants, Group, Primitive, POOL_SIZE};
use pmem_ordering::Granularity;

fn bench_primitives(c: &mut Criterion) {
    let file = PoolFile::create(
        &default_pool_dir(),
        "pmem-bench-criterion.pool",
        POOL_SIZE,
        Some(Granularity::Emulated),
    )
    .expect("create the benchmark pool");
    for group in Group::ALL {
        let list = variants(group);
        if list.is_empty() {
            continue;
        }
        let mut g = c.benchmark_group(format!("{} (emulated)", group.name()));
        for variant in list {
            let mut prim = Primitive::new(&file, variant).expect("set up the variant");
            let id = match variant.parameter() {
                Some(p) => BenchmarkId::new(variant.function(), p),
                None => BenchmarkId::from_parameter(variant.function()),
            };
            if group == Group::NtVsClwb {
                g.throughput(Throughput::Bytes(variant.bytes() as u64));
            }
            g.bench_function(id, |b| {
                b.iter(|| prim.step().expect("a benchmark operation failed"))
            });
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300))
        .sample_size(20);
    targets = bench_primitives
}
criterion_main!(benches);
