//! Concurrent inserts into a FAST&FAIR tree (FAST shifts, 512-byte nodes) in an anonymous
//! pool: `WRITERS` threads each insert `KEYS` distinct pseudo-random keys (disjoint between
//! threads) into a tree that starts empty, so about one insert in twenty splits a leaf. It
//! prints the wall time and the rate of all writers together:
//!
//! ```text
//! cargo run --release -p pmem-structures --example fastfair_writers -- 2 200000
//! ```
//!
//! A measurement driver, not a test: it checks only that the tree holds every distinct key at
//! the end.

use std::time::Instant;

use pmem_ordering::{Pool, PoolOptions};
use pmem_structures::raw::fastfair::{FastFair, FastFairConfig};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

#[path = "support/splitmix.rs"]
mod splitmix;

/// Distinct pseudo-random keys of writer `writer` of `writers` (a splitmix64 sequence, each
/// key's residue mod `writers` naming its writer, so writers never share a key).
fn keys(count: usize, writer: u64, writers: u64) -> Vec<u64> {
    let mut state = writer.wrapping_mul(0x2545_F491_4F6C_DD1D) + 1;
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let z = splitmix::next(&mut state);
        let key = (z >> 8) / writers * writers + writer;
        out.push(key);
    }
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: fastfair_writers WRITERS KEYS_PER_WRITER";
    let writers: u64 = args.get(1).ok_or(usage)?.parse()?;
    let per_writer: usize = args.get(2).ok_or(usage)?.parse()?;
    let total = writers as usize * per_writer;
    let pool_bytes = (total as u64 * 128).max(64 << 20);
    let pool = Pool::anonymous("fastfair-writers", pool_bytes, &PoolOptions::new())?;
    let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
    let tree = FastFair::create(&heap, heap.pool().root_offset(), FastFairConfig::default())?;
    let key_sets: Vec<Vec<u64>> = (0..writers).map(|w| keys(per_writer, w, writers)).collect();
    let start = Instant::now();
    std::thread::scope(|s| {
        for set in &key_sets {
            let tree = &tree;
            s.spawn(move || {
                for &key in set {
                    // A repeated pseudo-random key is possible, if rare: not an error.
                    let _ = tree.insert(key, key).expect("insert");
                }
            });
        }
    });
    let elapsed = start.elapsed();
    let mut distinct: Vec<u64> = key_sets.into_iter().flatten().collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(tree.len(), distinct.len() as u64, "a key went missing");
    println!(
        "writers {writers} inserts {total} seconds {:.3} Mops/s {:.3}",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64() / 1e6
    );
    Ok(())
}
