//! A small heap and key generators for the unit tests of this folder.

use std::sync::Arc;

use pmem_ordering::{Pool, PoolOptions};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

use super::hashing::hash;

/// A heap of 8 MiB in an anonymous pool, one lane.
pub(super) fn heap() -> Heap {
    let pool = Pool::anonymous("cceh-unit", 8 << 20, &PoolOptions::new()).unwrap();
    let config = HeapConfig {
        lanes: 1,
        lane_log_bytes: 16 << 10,
        chunk_size: 16 << 10,
    };
    Heap::create(Arc::new(pool), config, FencePolicy::Batched).unwrap()
}

/// Keys whose hash starts with the given bit, from `from` on.
pub(super) fn keys_with_top_bit(bit: u64, from: u64) -> impl Iterator<Item = u64> {
    (from..).filter(move |&k| hash(k) >> 63 == bit)
}

/// Keys whose home bucket (of 16) is `bucket`, from `from` on.
pub(super) fn keys_at_home(bucket: u64, from: u64) -> impl Iterator<Item = u64> {
    (from..).filter(move |&k| hash(k) & 15 == bucket)
}
