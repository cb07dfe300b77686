//! A small heap, key generators and a probe of colliding keys for the unit tests of this
//! folder.

use pmem_ordering::{Pool, PoolOptions};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

use super::hashing::hash;
use super::SlotProbe;

/// A heap of 8 MiB in an anonymous pool, one lane.
pub(super) fn heap() -> Heap {
    let pool = Pool::anonymous("cceh-unit", 8 << 20, &PoolOptions::new()).unwrap();
    let config = HeapConfig {
        lanes: 1,
        lane_log_bytes: 16 << 10,
        chunk_size: 16 << 10,
    };
    Heap::create(pool, config, FencePolicy::Batched).unwrap()
}

/// Keys whose hash starts with the given bit, from `from` on.
pub(super) fn keys_with_top_bit(bit: u64, from: u64) -> impl Iterator<Item = u64> {
    (from..).filter(move |&k| hash(k) >> 63 == bit)
}

/// Keys whose home bucket (of 16) is `bucket`, from `from` on.
pub(super) fn keys_at_home(bucket: u64, from: u64) -> impl Iterator<Item = u64> {
    (from..).filter(move |&k| hash(k) & 15 == bucket)
}

/// A key of the tests of hashed key words: `id`, with a key word it may share with other ids,
/// whose entries carry the id in their value's high half (as a byte-key map's value points at
/// a record holding the key) and a payload in its low half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Colliding {
    pub(super) id: u64,
    pub(super) word: u64,
}

impl Colliding {
    /// Id `id` in one of `groups` groups whose ids share a key word (`1 + id % groups`).
    pub(super) fn grouped(id: u64, groups: u64) -> Colliding {
        Colliding {
            id,
            word: 1 + id % groups,
        }
    }

    /// The value word of this key's entry with `payload`.
    pub(super) fn value(self, payload: u32) -> u64 {
        self.id << 32 | u64::from(payload)
    }
}

/// The payload of an entry's value word (see [`Colliding::value`]).
pub(super) fn payload(value: u64) -> u32 {
    value as u32
}

/// The id an entry's value word carries (see [`Colliding::value`]).
pub(super) fn id_of(value: u64) -> u64 {
    value >> 32
}

impl SlotProbe for Colliding {
    fn word(&self) -> u64 {
        self.word
    }

    fn matches(&self, value: u64) -> bool {
        id_of(value) == self.id
    }
}
