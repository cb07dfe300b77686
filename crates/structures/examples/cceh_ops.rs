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
//! the rate: `cceh_ops get 10000000 2` looks up with two threads, each half of the calls.
//! A measurement driver, not a test: it checks only that every lookup found its key.
//!
//! `get` is inlined into `measured_gets`, so the count is the lookup's and the loop's: the
//! loop's share is told by reading the compiled loop with callgrind's per-instruction counts
//! (`--dump-instr=yes`, then `callgrind_annotate` or `objdump -d` of `measured_gets`): the
//! key's load, the count's add and the pointer's step, compare and branch, about six per
//! call.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use pmem_ordering::{Hardware, Pool, PoolOptions};
use pmem_structures::cceh::{Cceh, CcehConfig};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

type Table<'h> = Cceh<Hardware, Arc<Pool>, &'h Heap<Hardware, Arc<Pool>>>;

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
fn measured_gets(table: &Table<'_>, keys: &[u64], calls: usize) -> usize {
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

#[inline(never)]
fn measured_inserts(table: &Table<'_>, keys: &[u64]) -> usize {
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
        "usage: cceh_ops get|insert|insert-no-split CALLS [THREADS] (env KEYS: keys prefilled, 1M)";
    let op = args.get(1).ok_or(usage)?.clone();
    let calls: usize = args.get(2).ok_or(usage)?.parse()?;
    let threads: usize = args.get(3).map_or(Ok(1), |t| t.parse())?;
    let prefill: usize = std::env::var("KEYS").map_or(Ok(1_000_000), |k| k.parse())?;
    let pool_bytes = (prefill as u64 * 128).next_power_of_two().max(64 << 20);
    let pool = Pool::anonymous("cceh-ops", pool_bytes, &PoolOptions::new())?;
    let heap = Heap::create(Arc::new(pool), HeapConfig::default(), FencePolicy::Batched)?;
    let table: Table<'_> = Cceh::create(&heap, heap.pool().root_offset(), CcehConfig::default())?;
    let present = keys(prefill, 1);
    for &k in &present {
        table.insert(k, k)?;
    }
    let start = Instant::now();
    let done = match op.as_str() {
        "get" => {
            let found: usize = std::thread::scope(|s| {
                let workers: Vec<_> = (0..threads)
                    .map(|t| {
                        let (table, present) = (&table, &present);
                        let share = &present[t * present.len() / threads..];
                        s.spawn(move || measured_gets(table, share, calls / threads))
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
    println!(
        "{op} x{done} ({threads} thread(s), {prefill} keys): {:.2} M/s",
        done as f64 / secs / 1e6
    );
    Ok(())
}
