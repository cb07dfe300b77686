//! Tests that write the private lane format directly: a log left as a crash would leave it, and
//! entries the scan must refuse.

use std::sync::Arc;

use pmem_ordering::{Granularity, Pool, PoolOptions};

use super::entry;
use crate::{FencePolicy, Heap, HeapConfig};

fn file_options() -> PoolOptions {
    PoolOptions::new().granularity(Granularity::Emulated)
}

fn config(lanes: u64, lane_log_bytes: u64, chunk_size: u64) -> HeapConfig {
    HeapConfig {
        lanes,
        lane_log_bytes,
        chunk_size,
    }
}

fn bytes(pool: &Pool, offset: u64, len: u64) -> Vec<u8> {
    let mut buf = vec![0u8; len as usize];
    pool.read_bytes(offset, &mut buf).unwrap();
    buf
}

/// A recognisable pattern for `len` bytes.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8 + 1)
        .collect()
}

#[test]
fn open_rolls_back_every_lane_with_an_uncommitted_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lanes.pool");
    let root;
    let original;
    {
        let pool = Pool::create(&path, "semantics-lanes", 1 << 20, &file_options()).unwrap();
        let heap: Heap = Heap::create(
            Arc::new(pool),
            config(3, 2048, 16 << 10),
            FencePolicy::Batched,
        )
        .unwrap();
        root = heap.pool().root_offset();
        heap.transaction(|tx| tx.write(root, &pattern(9, 1024)))
            .unwrap();
        original = bytes(heap.pool(), root, 1024);
        // Leave lanes 0 and 2 as a crash would: entries of their open generation in the log,
        // the data overwritten. Lane 1 is clean.
        let layout = *heap.layout();
        let pool = heap.pool();
        let mut buf = Vec::new();
        for (lane_no, ranges) in [
            (0usize, vec![(0u64, 100u64), (200, 16)]),
            (2, vec![(512, 64)]),
        ] {
            let generation = layout
                .lane(lane_no)
                .committed_generation(pool)
                .unwrap()
                .wrapping_add(1);
            let mut pos = layout.lane_log(lane_no);
            for (at, len) in ranges {
                let old = bytes(pool, root + at, len);
                entry::encode(&mut buf, generation, root + at, &old);
                let w = pool.write(pos, &buf).unwrap();
                pool.persist(w);
                pos += buf.len() as u64;
                let w = pool.write(root + at, &vec![0xEE; len as usize]).unwrap();
                pool.persist(w);
            }
        }
        assert_ne!(bytes(pool, root, 1024), original);
    }
    let pool = Pool::open(&path, "semantics-lanes", &file_options()).unwrap();
    let heap: Heap = Heap::open(pool).unwrap();
    assert_eq!(bytes(heap.pool(), root, 1024), original);
    // The lanes are clean: nothing is rolled back a second time.
    let layout = *heap.layout();
    for lane_no in 0..3 {
        let lane = layout.lane(lane_no);
        let generation = lane
            .committed_generation(heap.pool())
            .unwrap()
            .wrapping_add(1);
        let entries = lane.scan(heap.pool(), generation).unwrap();
        assert!(entries.is_empty(), "lane {lane_no}: {entries:?}");
    }
    heap.transaction(|tx| tx.write(root, &[1; 8])).unwrap();
    drop(heap);
    let pool = Pool::open(&path, "semantics-lanes", &file_options()).unwrap();
    let heap: Heap = Heap::open(pool).unwrap();
    assert_eq!(bytes(heap.pool(), root, 8), [1; 8]);
    assert_eq!(bytes(heap.pool(), root + 8, 1016), original[8..]);
}

#[test]
fn the_scan_stops_at_a_torn_or_stale_entry() {
    let pool = Arc::new(Pool::anonymous("lane-scan", 1 << 20, &PoolOptions::new()).unwrap());
    let heap = Heap::create(
        pool.clone(),
        config(1, 1024, 16 << 10),
        FencePolicy::Batched,
    )
    .unwrap();
    let root = pool.root_offset();
    let lane = heap.layout().lane(0);
    let log = heap.layout().lane_log(0);
    let generation = lane.committed_generation(&pool).unwrap().wrapping_add(1);
    let mut buf = Vec::new();
    // Three entries of the open generation: 16, 8 and 8 bytes.
    let mut pos = log;
    for (at, len) in [(0u64, 16u64), (64, 8), (128, 8)] {
        entry::encode(&mut buf, generation, root + at, &pattern(at, len as usize));
        let _ = pool.write(pos, &buf).unwrap();
        pos += buf.len() as u64;
    }
    assert_eq!(lane.scan(&pool, generation).unwrap().len(), 3);
    // A flipped byte in the second entry's snapshot: its checksum fails, the scan ends there.
    let second = log + entry::entry_size(16);
    let flipped = bytes(&pool, second + entry::ENTRY_HEADER, 1)[0] ^ 0xFF;
    let _ = pool
        .write(second + entry::ENTRY_HEADER, &[flipped])
        .unwrap();
    let found = lane.scan(&pool, generation).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].offset, root);
    assert_eq!(found[0].undo, entry::Undo::Restore(pattern(0, 16)));
    // The next generation finds none of them: they are stale.
    assert!(lane.scan(&pool, generation + 1).unwrap().is_empty());
}

#[test]
fn a_batch_is_one_group_and_a_torn_entry_drops_the_whole_group() {
    let pool = Arc::new(Pool::anonymous("lane-group", 1 << 20, &PoolOptions::new()).unwrap());
    let heap = Heap::create(
        pool.clone(),
        config(1, 1024, 16 << 10),
        FencePolicy::Batched,
    )
    .unwrap();
    let root = pool.root_offset();
    let lane = heap.layout().lane(0);
    let log = heap.layout().lane_log(0);
    for (at, len) in [(0u64, 16u64), (64, 8), (128, 8), (192, 8)] {
        let _ = pool.write(root + at, &pattern(at, len as usize)).unwrap();
    }
    let mut open = lane.begin(&pool).unwrap();
    let _ = open
        .append_many(&pool, &[(root, 16), (root + 64, 8), (root + 128, 8)])
        .unwrap();
    let _ = open.append(&pool, root + 192, 8).unwrap();
    let generation = lane.committed_generation(&pool).unwrap().wrapping_add(1);
    let found = lane.scan(&pool, generation).unwrap();
    let offsets: Vec<u64> = found.iter().map(|e| e.offset).collect();
    assert_eq!(offsets, [root, root + 64, root + 128, root + 192]);
    assert_eq!(found[2].undo, entry::Undo::Restore(pattern(128, 8)));
    // A flipped byte in the batch's last entry: the batch's one checksum fails, so none of its
    // entries is trusted, and the scan ends there, before the entry after the batch.
    let third = log + entry::entry_size(16) + entry::entry_size(8);
    let flipped = bytes(&pool, third + entry::ENTRY_HEADER, 1)[0] ^ 0xFF;
    let _ = pool.write(third + entry::ENTRY_HEADER, &[flipped]).unwrap();
    assert!(lane.scan(&pool, generation).unwrap().is_empty());
}
