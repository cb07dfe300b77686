//! Criterion benches of the datalog store, on heaps in pool files in /dev/shm (else the
//! temporary directory) opened with **emulated** granularity: flush instructions and fences are
//! issued as on persistent memory, but the files are in DRAM, not persistent memory.
//!
//! One group, `datalog`, so every comparison is read off one run (Optane guide (FAST'20), Sec. 5.1.2, Fig. 11):
//!
//! * `overwrite cow` / `overwrite embedded`, for 64 B, 256 B, 1 KiB and 4 KiB: one random
//!   overwrite per iteration (offsets aligned to the size, uniformly random over a 64 MiB file),
//!   copy-on-write against embedded writes. A 4 KiB aligned write is a whole page, which the
//!   embedded path also writes copy-on-write: the two rows should match;
//! * `read 4 KiB`: one random page read per iteration from a 1 MiB region of a 64 MiB file
//!   that took 64-byte overwrites first: copy-on-write ones (no merging), or embedded ones (8
//!   or 32 per page on average before folding: the read merges them over the base page and
//!   checks their checksums). The read-path cost of embedded writes.
//!
//! Setting up a store (a 1 GiB pool file, written once so no timed write takes a first-touch
//! page fault, and the 64 MiB file) is not timed. The operations are the ones `pmem-bench`
//! times (`pmem_bench::datalogbench`).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pmem_bench::datalogbench::{
    overwrite_all, payload, prepare, read_all, DatalogHeap, FILE_BYTES, MODES, READ_BYTES,
    WRITE_SIZES,
};
use pmem_bench::keys::random_offsets;
use pmem_bench::poolfile::default_pool_dir;
use pmem_ordering::Granularity;
use pmem_structures::raw::datalog::{WriteMode, PAGE};

const POOL_FILE: &str = "pmem-bench-criterion-datalog.pool";
/// Room for the file, copy-on-write churn and the logs of however many iterations criterion
/// runs (a log's live part is bounded by folding, about 6 KiB per page).
const POOL_BYTES: u64 = 1 << 30;
/// Offsets drawn per benchmark, cycled through.
const OFFSETS: usize = 1 << 16;
/// The region the read benchmarks overwrite and read.
const HOT_PAGES: u64 = 256;

fn bench_datalog(c: &mut Criterion) {
    let dir = default_pool_dir();
    let mut g = c.benchmark_group("datalog");
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    g.sample_size(20);
    g.throughput(Throughput::Elements(1));
    for size in WRITE_SIZES {
        let offsets = random_offsets(OFFSETS, FILE_BYTES, size, size);
        let data = payload(size);
        for mode in MODES {
            let fresh =
                DatalogHeap::create_sized(&dir, POOL_FILE, POOL_BYTES, Some(Granularity::Emulated))
                    .expect("set up a heap for the store");
            let store = fresh.store(mode).expect("create the store");
            let id = prepare(&store, FILE_BYTES).expect("write the file");
            let mut next = 0;
            g.bench_function(
                BenchmarkId::new(format!("overwrite {}", mode.name()), format!("{size} B")),
                |b| {
                    b.iter(|| {
                        let at = offsets[next % OFFSETS];
                        next += 1;
                        overwrite_all(&store, id, &[at], &data, mode, None).expect("overwrite")
                    })
                },
            );
        }
    }
    let reads = random_offsets(OFFSETS, HOT_PAGES * PAGE, READ_BYTES, 0x2EAD);
    let mut buf = vec![0u8; READ_BYTES as usize];
    for (mode, per_page) in [
        (WriteMode::CopyOnWrite, 32),
        (WriteMode::Embedded, 8),
        (WriteMode::Embedded, 32),
    ] {
        let fresh =
            DatalogHeap::create_sized(&dir, POOL_FILE, POOL_BYTES, Some(Granularity::Emulated))
                .expect("set up a heap for the store");
        let store = fresh.store(mode).expect("create the store");
        let id = prepare(&store, FILE_BYTES).expect("write the file");
        let writes = random_offsets((HOT_PAGES * per_page) as usize, HOT_PAGES * PAGE, 64, 7);
        overwrite_all(&store, id, &writes, &payload(64), mode, None).expect("overwrite");
        let stats = store.file_stats(id).expect("stats");
        eprintln!(
            "datalog reads after {} 64 B writes per page ({}): {:.1} embedded entries per hot page",
            per_page,
            mode.name(),
            stats.embedded_entries as f64 / HOT_PAGES as f64
        );
        let mut next = 0;
        g.bench_function(
            BenchmarkId::new(
                "read 4 KiB",
                format!("after {per_page} {} writes per page", mode.name()),
            ),
            |b| {
                b.iter(|| {
                    let at = reads[next % OFFSETS];
                    next += 1;
                    let n = read_all(&store, id, &[at], &mut buf, None).expect("read");
                    assert_eq!(n, READ_BYTES);
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, bench_datalog);
criterion_main!(benches);
