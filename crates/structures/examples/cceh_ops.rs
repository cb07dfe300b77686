//! A CCEH table of `KEYS` keys (1M by default) in an anonymous pool, then `N` operations of one
//! kind, each run inside a function of its own so that callgrind can count them alone:
//!
//! ```text
//! cargo build --release -p pmem-structures --example cceh_ops
//! valgrind --tool=callgrind --toggle-collect='*measured_gets*' \
//!     target/release/examples/cceh_ops get 100000
//! ```
//!
//! (`measured_inserts` for `insert`: keys not in the table, some of which split a segment;
//! `callgrind_annotate --inclusive=yes` tells the splits' share; and for `insert-no-split`:
//! keys of the table removed before the measured calls, so their segments have room, as the
//! `insert (no split)` instruction bench does). Outside valgrind it prints
//! the rate: `cceh_ops get 10000000 2` looks up with two threads, each half of the calls;
//! and first the rate of the prefill (`load`: one insert per key into an empty table).
//! `get-batch` looks up through `get_batch` (batches of 1024 keys, the path of the key
//! `AHEAD` places on, 8 by default, prefetched before each lookup). `PAGES=2m` maps the pool
//! on transparent huge pages (`MADV_HUGEPAGE`; 4 KiB pages by default): the line printed says
//! how much of the pool the kernel backed with them. Each rate is printed twice: per second
//! of wall clock, and CPU-normalised (per CPU-second of the process, times the threads: the
//! rate had each thread a CPU of its own, for runs on a machine shared with other work).
//! A measurement driver, not a test: it checks only that every lookup found its key.
//!
//! `get` is inlined into `measured_gets`, so the count is the lookup's and the loop's: the
//! loop's share is told by reading the compiled loop with callgrind's per-instruction counts
//! (`--dump-instr=yes`, then `callgrind_annotate` or `objdump -d` of `measured_gets`): the
//! key's load, the count's add and the pointer's step, compare and branch, about six per
//! call.

use std::hint::black_box;
use std::time::Instant;

use pmem_ordering::pool::PageSize;
use pmem_ordering::{Hardware, Pool, PoolOptions};
use pmem_structures::raw::cceh::{Cceh, CcehConfig};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

type Table = Cceh<Hardware>;

#[path = "support/splitmix.rs"]
mod splitmix;

/// Distinct pseudo-random keys (splitmix64 from `seed`).
fn keys(count: usize, seed: u64) -> Vec<u64> {
    splitmix::distinct_keys(count, seed)
}

/// `calls` lookups of `keys`, cycling through them; how many found their key. The loop is
/// kept to a few instructions per call (a pointer step and compare, the key's load, the
/// `Result` test and the count), so that the count of this function is nearly all `get`'s:
/// the loop's own share is counted from this function's lines (see the module docs).
#[inline(never)]
fn measured_gets(table: &Table, keys: &[u64], calls: usize) -> usize {
    let mut found = 0;
    let mut left = calls;
    while left > 0 && !keys.is_empty() {
        let round = &keys[..left.min(keys.len())];
        for &key in round {
            match table.get(key) {
                Ok(value) => found += usize::from(value.is_some()),
                Err(e) => panic!("get: {e}"),
            }
        }
        left -= round.len();
    }
    found
}

/// As [`measured_gets`], through [`Cceh::get_batch`] in batches of [`BATCH`] keys, each
/// lookup prefetching the path of the key `ahead` places on.
#[inline(never)]
fn measured_batch_gets(table: &Table, keys: &[u64], calls: usize, ahead: usize) -> usize {
    let mut found = 0;
    let mut left = calls;
    while left > 0 && !keys.is_empty() {
        let round = &keys[..left.min(keys.len())];
        for batch in round.chunks(BATCH) {
            let values = table.get_batch(batch, ahead).expect("get_batch");
            found += values.iter().filter(|v| v.is_some()).count();
        }
        left -= round.len();
    }
    found
}

/// Keys per [`Cceh::get_batch`] call of `get-batch`.
const BATCH: usize = 1024;

/// CPU seconds this process has run (user and system, every thread): on a machine shared
/// with other work, the calls per CPU-second tell the rate the process would have alone, but
/// for what the other work does to the caches.
fn cpu_seconds() -> f64 {
    // SAFETY: `rusage` is plain data, for which all-zero bytes are a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `getrusage` writes only the `rusage` it is given, which lives across the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return f64::NAN;
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

#[inline(never)]
fn measured_inserts(table: &Table, keys: &[u64]) -> usize {
    let mut inserted = 0;
    for &key in keys {
        if table.insert(black_box(key), key).expect("insert") {
            inserted += 1;
        }
    }
    inserted
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage =
        "usage: cceh_ops get|get-batch|insert|insert-no-split CALLS [THREADS] (env KEYS: keys prefilled, 1M; PAGES: 4k or 2m; AHEAD: get-batch's prefetch distance, 8)";
    let op = args.get(1).ok_or(usage)?.clone();
    let calls: usize = args.get(2).ok_or(usage)?.parse()?;
    let threads: usize = args.get(3).map_or(Ok(1), |t| t.parse())?;
    let prefill: usize = std::env::var("KEYS").map_or(Ok(1_000_000), |k| k.parse())?;
    let pool_bytes = (prefill as u64 * 128).next_power_of_two().max(64 << 20);
    let pages = match std::env::var("PAGES").as_deref() {
        Err(_) | Ok("4k") => PageSize::Base4K,
        Ok("2m") => PageSize::Huge2M,
        Ok(other) => return Err(format!("PAGES must be 4k or 2m, not {other}").into()),
    };
    let options = PoolOptions::new().page_size(pages);
    let pool = Pool::anonymous("cceh-ops", pool_bytes, &options)?;
    let heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
    let table: Table = Cceh::create(&heap, heap.pool().root_offset(), CcehConfig::default())?;
    let present = keys(prefill, 1);
    let (load_start, load_cpu_start) = (Instant::now(), cpu_seconds());
    for &k in &present {
        table.insert(k, k)?;
    }
    println!(
        "load x{prefill}: {:.2} M/s, CPU-normalised {:.2} M/s",
        prefill as f64 / load_start.elapsed().as_secs_f64() / 1e6,
        prefill as f64 / (cpu_seconds() - load_cpu_start) / 1e6
    );
    let start = Instant::now();
    let cpu_start = cpu_seconds();
    let done = match op.as_str() {
        "get" | "get-batch" => {
            let ahead: usize = std::env::var("AHEAD").map_or(Ok(8), |a| a.parse())?;
            let batched = op == "get-batch";
            let found: usize = std::thread::scope(|s| {
                let workers: Vec<_> = (0..threads)
                    .map(|t| {
                        let (table, present) = (&table, &present);
                        let share = &present[t * present.len() / threads..];
                        s.spawn(move || {
                            if batched {
                                measured_batch_gets(table, share, calls / threads, ahead)
                            } else {
                                measured_gets(table, share, calls / threads)
                            }
                        })
                    })
                    .collect();
                workers.into_iter().map(|w| w.join().expect("worker")).sum()
            });
            assert_eq!(found, calls / threads * threads, "a key was not found");
            found
        }
        "insert" => measured_inserts(&table, &keys(calls, 2)),
        "insert-no-split" => {
            let again = &present[present.len() - calls.min(present.len())..];
            for &k in again {
                table.remove(k)?;
            }
            let depth = table.global_depth()?;
            let inserted = measured_inserts(&table, again);
            assert_eq!(
                table.global_depth()?,
                depth,
                "a re-insert doubled the directory"
            );
            inserted
        }
        _ => return Err(usage.into()),
    };
    let secs = start.elapsed().as_secs_f64();
    let cpu_secs = cpu_seconds() - cpu_start;
    let obtained = heap.pool().pages()?;
    let depth = table.global_depth()?;
    println!(
        "{op} x{done} ({threads} thread(s), {prefill} keys): {:.2} M/s, CPU-normalised {:.2} M/s (global depth {depth}; pool: {} MiB resident, {} MiB of it on 2 MiB pages)",
        done as f64 / secs / 1e6,
        done as f64 / (cpu_secs / threads as f64) / 1e6,
        obtained.resident_bytes >> 20,
        obtained.huge_bytes >> 20
    );
    Ok(())
}
