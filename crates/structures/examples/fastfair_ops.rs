//! A FAST&FAIR tree (FAST shifts, 512-byte nodes) of `KEYS` keys (1M by default) in an
//! anonymous pool, then `N` operations of one kind, each kind run inside a function of its own
//! so that callgrind can count it alone:
//!
//! ```text
//! cargo build --release -p pmem-structures --example fastfair_ops
//! valgrind --tool=callgrind --toggle-collect='*measured_gets*' \
//!     target/release/examples/fastfair_ops get 100000
//! valgrind --tool=callgrind --toggle-collect='*measured_scans*' \
//!     target/release/examples/fastfair_ops scan 10000
//! valgrind --tool=callgrind --toggle-collect='*measured_bulk_scans*' \
//!     target/release/examples/fastfair_ops bulk-scan 10000
//! valgrind --tool=callgrind --toggle-collect='*measured_inserts*' \
//!     target/release/examples/fastfair_ops insert 100000
//! ```
//!
//! Gets look up present keys; a scan takes the first 100 pairs from a present key on, one
//! `next` at a time (`scan`, each pair checked as it comes) or in bulk
//! (`bulk-scan`, `Range::next_into` into one buffer emptied before each scan; each scan's count
//! and end keys checked against the sorted keys after the measured function); inserts
//! add keys not in the tree, some of which split a leaf (`callgrind_annotate --inclusive=yes`
//! tells the splits' share, `split_insert`; the run prints how many splits it made). Outside
//! valgrind it prints the rate. A measurement driver, not a test: it checks only that every
//! lookup found its key, every scan returned its keys from its start on (ascending, counted or
//! bounded against the sorted keys) and every insert
//! added its key.

use std::hint::black_box;
use std::time::Instant;

use pmem_ordering::{Hardware, Pool, PoolOptions};
use pmem_structures::raw::fastfair::{FastFair, FastFairConfig};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

type Tree = FastFair<Hardware>;

/// Pairs a scan asks for.
const SCAN_KEYS: usize = 100;

#[path = "support/splitmix.rs"]
mod splitmix;

/// Distinct pseudo-random keys (splitmix64 from `seed`).
fn keys(count: usize, seed: u64) -> Vec<u64> {
    splitmix::distinct_keys(count, seed)
}

#[inline(never)]
fn measured_gets(tree: &Tree, keys: &[u64], calls: usize) -> usize {
    let mut found = 0;
    for i in 0..calls {
        let key = keys[i % keys.len()];
        if tree.get(black_box(key)).expect("get").is_some() {
            found += 1;
        }
    }
    found
}

/// Every scan's pairs, checked to ascend from the scan's start. The driver's own work per pair
/// is kept to a compare and two adds (the values are summed, and the sum made opaque once, so
/// no pair's read is optimised away), so that the count is mostly the range's.
#[inline(never)]
fn measured_scans(tree: &Tree, starts: &[u64], calls: usize) -> usize {
    let mut pairs = 0;
    let mut values = 0u64;
    for i in 0..calls {
        let start = starts[i % starts.len()];
        // The smallest key the next pair may have: the start, then one past the last key
        // (below `u64::MAX`, the reserved key, so the add cannot overflow).
        let mut floor = start;
        let mut range = tree.range(black_box(start)..);
        for _ in 0..SCAN_KEYS {
            let Some(pair) = range.next() else { break };
            let (k, v) = pair.expect("scan");
            assert!(k >= floor, "scan out of order");
            floor = k + 1;
            values = values.wrapping_add(v);
            pairs += 1;
        }
    }
    black_box(values);
    pairs
}

/// One buffer, emptied before each scan, holds its pairs in bulk; each scan's pair count, first
/// key and last key go to `seen` (reserved by the caller, one entry per scan), for
/// [`check_bulk_scans`] after the measured function. Reusing the buffer keeps the pairs in
/// cache, as a caller's would be: a buffer of every scan's pairs would time page faults and
/// memory writes, not the scan.
#[inline(never)]
fn measured_bulk_scans(tree: &Tree, starts: &[u64], seen: &mut Vec<(usize, u64, u64)>) {
    let mut out = Vec::with_capacity(SCAN_KEYS + 1);
    for i in 0..seen.capacity() {
        let start = starts[i % starts.len()];
        out.clear();
        let got = tree
            .range(black_box(start)..)
            .next_into(&mut out, SCAN_KEYS)
            .expect("scan");
        let (first, last) = match (out.first(), out.last()) {
            (Some(&(f, _)), Some(&(l, _))) => (f, l),
            _ => (0, 0),
        };
        seen.push((got, first, last));
    }
}

/// Bulk scans checked against the tree's keys, sorted: each began at its start and ended
/// `SCAN_KEYS - 1` keys later (or at the last key). The pairs of all scans, summed.
fn check_bulk_scans(starts: &[u64], sorted: &[u64], seen: &[(usize, u64, u64)]) -> usize {
    let mut pairs = 0;
    for (i, &(count, first, last)) in seen.iter().enumerate() {
        let start = starts[i % starts.len()];
        let at = sorted
            .binary_search(&start)
            .expect("a start key is in the tree");
        let expected = SCAN_KEYS.min(sorted.len() - at);
        assert_eq!(count, expected, "scan from {start}: pair count");
        assert_eq!(first, start, "scan missed its start");
        assert_eq!(
            last,
            sorted[at + expected - 1],
            "scan from {start}: last key"
        );
        pairs += count;
    }
    pairs
}

/// Inserts of keys not in the tree: the count of those inserted.
#[inline(never)]
fn measured_inserts(tree: &Tree, keys: &[u64]) -> usize {
    let mut inserted = 0;
    for &key in keys {
        if tree.insert(black_box(key), key).expect("insert") {
            inserted += 1;
        }
    }
    inserted
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage =
        "usage: fastfair_ops get|scan|bulk-scan|insert CALLS (env KEYS: keys prefilled, 1M)";
    let op = args.get(1).ok_or(usage)?.clone();
    let calls: usize = args.get(2).ok_or(usage)?.parse()?;
    let prefill: usize = std::env::var("KEYS").map_or(Ok(1_000_000), |k| k.parse())?;
    let pool_bytes = (prefill as u64 * 128).next_power_of_two().max(64 << 20);
    let pool = Pool::anonymous("fastfair-ops", pool_bytes, &PoolOptions::new())?;
    let heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
    let tree: Tree = FastFair::create(&heap, heap.pool().root_offset(), FastFairConfig::default())?;
    let present = keys(prefill, 1);
    for &k in &present {
        tree.insert(k, k)?;
    }
    let start = Instant::now();
    let done = match op.as_str() {
        "get" => {
            let found = measured_gets(&tree, &present, calls);
            assert_eq!(found, calls, "a key was not found");
            found
        }
        "scan" => {
            let pairs = measured_scans(&tree, &present, calls);
            println!("{pairs} pairs");
            calls
        }
        "bulk-scan" => {
            let mut seen = Vec::with_capacity(calls);
            measured_bulk_scans(&tree, &present, &mut seen);
            let mut sorted = present.clone();
            sorted.sort_unstable();
            println!("{} pairs", check_bulk_scans(&present, &sorted, &seen));
            calls
        }
        "insert" => {
            let fresh = keys(calls, 2);
            let before = heap.tx_stats().committed;
            let inserted = measured_inserts(&tree, &fresh);
            assert_eq!(inserted, calls, "a fresh key was already present");
            // Each split is one transaction, and nothing else in an insert runs one.
            println!("{} splits", heap.tx_stats().committed - before);
            inserted
        }
        _ => return Err(usage.into()),
    };
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{op} x{done} ({prefill} keys): {:.3} M/s",
        done as f64 / secs / 1e6
    );
    Ok(())
}
