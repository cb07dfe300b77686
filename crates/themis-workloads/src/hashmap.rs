//! Hashmap: a chained hash map `u64 -> u64` with a fixed bucket array (Themis, Table II,
//! "insert/delete nodes in hashmap").
//!
//! Layout: the root is `[buckets, bucket count, entry count]`; `buckets` is a heap block of one
//! word per bucket, each the offset of its chain's first entry (0: empty). An entry is a heap
//! block of [`ENTRY_BYTES`] holding `[key, value, next]`. A key goes to bucket
//! `hash(key) % bucket count` ([`hash`], fixed forever since it is part of the format).
//!
//! A new key is pushed at the head of its chain: the bucket word and the entry count are logged,
//! the entry is fresh. An existing key's value is overwritten in place (one word logged). A remove
//! unlinks the entry (its predecessor's pointer and the count logged) and frees it.

use pmem_ordering::{Backend, Hardware, PPtr, Pool};

use super::{corrupt, step_limit, words};
use pmem_undo_log::{Heap, TxError};

/// Bytes of an entry: `[key, value, next]`.
pub const ENTRY_BYTES: u64 = 24;

/// The map's hash: the SplitMix64 finalizer. Part of the persistent format.
pub fn hash(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A chained hash map from `u64` to `u64` in a heap.
///
/// ```
/// use pmem_ordering::{Pool, PoolOptions};
/// use pmem_themis_workloads::ChainedHashMap;
/// use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
///
/// let pool = Pool::anonymous("map", 4 << 20, &PoolOptions::new())?;
/// let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
/// let map = ChainedHashMap::create(&heap, heap.pool().root_offset(), 64)?;
/// assert_eq!(map.insert(7, 70)?, None);
/// assert_eq!(map.insert(7, 71)?, Some(70));
/// assert_eq!(map.get(7)?, Some(71));
/// assert_eq!(map.remove(7)?, Some(71));
/// assert_eq!(map.len()?, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ChainedHashMap<'h, B: Backend = Hardware> {
    heap: &'h Heap<B>,
    root: u64,
    buckets: u64,
    bucket_count: u64,
}

impl<B: Backend> Clone for ChainedHashMap<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for ChainedHashMap<'_, B> {}

impl<B: Backend> std::fmt::Debug for ChainedHashMap<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainedHashMap")
            .field("root", &self.root)
            .field("buckets", &self.buckets)
            .field("bucket_count", &self.bucket_count)
            .finish()
    }
}

impl<'h, B: Backend> ChainedHashMap<'h, B> {
    /// Bytes of the root: `[buckets, bucket count, entry count]`.
    pub const ROOT_BYTES: u64 = 24;

    /// Make an empty map with `bucket_count` buckets rooted at `root`, in one transaction
    /// (whatever the root held is overwritten, not freed).
    pub fn create(
        heap: &'h Heap<B>,
        root: u64,
        bucket_count: u64,
    ) -> Result<ChainedHashMap<'h, B>, TxError> {
        if bucket_count == 0 {
            return Err(TxError::InvalidConfig {
                reason: "a hash map needs at least one bucket".into(),
            });
        }
        let bytes = bucket_count
            .checked_mul(8)
            .ok_or_else(|| TxError::InvalidConfig {
                reason: format!("{bucket_count} buckets overflow the address space"),
            })?;
        let buckets = heap.transaction(|tx| {
            let buckets = tx.alloc(bytes)?;
            tx.write(buckets.offset(), &vec![0u8; bytes as usize])?;
            tx.write_value(root, &[buckets.offset(), bucket_count, 0])?;
            Ok::<_, TxError>(buckets.offset())
        })?;
        Ok(ChainedHashMap {
            heap,
            root,
            buckets,
            bucket_count,
        })
    }

    /// The map rooted at `root`.
    pub fn open(heap: &'h Heap<B>, root: u64) -> Result<ChainedHashMap<'h, B>, TxError> {
        let [buckets, bucket_count, _] = words::<B, 3>(heap.pool(), root)?;
        if buckets == 0 || bucket_count == 0 {
            return Err(corrupt(
                "hash map",
                root,
                "no bucket array (never created?)",
            ));
        }
        heap.pool()
            .check_range(buckets, bucket_count.saturating_mul(8))
            .map_err(|e| corrupt("hash map", root, e))?;
        Ok(ChainedHashMap {
            heap,
            root,
            buckets,
            bucket_count,
        })
    }

    /// The root's offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// Number of buckets.
    pub fn bucket_count(&self) -> u64 {
        self.bucket_count
    }

    fn bucket(&self, key: u64) -> u64 {
        self.buckets + 8 * (hash(key) % self.bucket_count)
    }

    /// The pointer slot leading to `key`'s entry and that entry's words, if the key is there.
    fn find(&self, pool: &Pool<B>, key: u64) -> Result<Option<(u64, u64, [u64; 3])>, TxError> {
        let mut slot = self.bucket(key);
        for _ in 0..step_limit(pool) {
            let entry: u64 = pool.read(slot)?;
            if entry == 0 {
                return Ok(None);
            }
            let e = words::<B, 3>(pool, entry)?;
            if e[0] == key {
                return Ok(Some((slot, entry, e)));
            }
            slot = entry + 16;
        }
        Err(corrupt("hash map", self.root, "a chain does not end"))
    }

    /// Map `key` to `value`; returns the value it replaced.
    pub fn insert(&self, key: u64, value: u64) -> Result<Option<u64>, TxError> {
        self.heap.transaction(|tx| {
            let pool = tx.pool();
            if let Some((_, entry, [_, old, _])) = self.find(pool, key)? {
                tx.write_value(entry + 8, &value)?;
                return Ok(Some(old));
            }
            let bucket = self.bucket(key);
            let count_at = self.root + 16;
            let head: u64 = pool.read(bucket)?;
            let count: u64 = pool.read(count_at)?;
            tx.snapshot(bucket, 8)?;
            tx.snapshot(count_at, 8)?;
            let entry = tx.alloc(ENTRY_BYTES)?;
            tx.write_value(entry.offset(), &[key, value, head])?;
            tx.write_value(bucket, &entry.offset())?;
            tx.write_value(count_at, &(count + 1))?;
            Ok(None)
        })
    }

    /// Remove `key`; returns its value if it was there.
    pub fn remove(&self, key: u64) -> Result<Option<u64>, TxError> {
        self.heap.transaction(|tx| {
            let pool = tx.pool();
            let Some((slot, entry, [_, value, next])) = self.find(pool, key)? else {
                return Ok(None);
            };
            let count_at = self.root + 16;
            let count: u64 = pool.read(count_at)?;
            tx.snapshot(slot, 8)?;
            tx.snapshot(count_at, 8)?;
            tx.write_value(slot, &next)?;
            tx.write_value(count_at, &count.wrapping_sub(1))?;
            tx.free(PPtr::<u8>::new(entry))?;
            Ok(Some(value))
        })
    }

    /// The value of `key`.
    pub fn get(&self, key: u64) -> Result<Option<u64>, TxError> {
        Ok(self.find(self.heap.pool(), key)?.map(|(_, _, [_, v, _])| v))
    }

    /// Whether `key` is in the map.
    pub fn contains_key(&self, key: u64) -> Result<bool, TxError> {
        Ok(self.find(self.heap.pool(), key)?.is_some())
    }

    /// Number of entries (the persistent count).
    pub fn len(&self) -> Result<u64, TxError> {
        Ok(self.heap.pool().read(self.root + 16)?)
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> Result<bool, TxError> {
        Ok(self.len()? == 0)
    }

    /// Every `(key, value, entry offset)`, bucket by bucket, each chain from its head.
    fn entries(&self) -> Result<Vec<(u64, u64, u64)>, TxError> {
        let pool = self.heap.pool();
        let mut steps = step_limit(pool);
        let mut out = Vec::new();
        for b in 0..self.bucket_count {
            let mut entry: u64 = pool.read(self.buckets + 8 * b)?;
            while entry != 0 {
                steps = steps
                    .checked_sub(1)
                    .ok_or_else(|| corrupt("hash map", self.root, "a chain does not end"))?;
                let [k, v, next] = words::<B, 3>(pool, entry)?;
                out.push((k, v, entry));
                entry = next;
            }
        }
        Ok(out)
    }

    /// Every `(key, value)`, in bucket order.
    pub fn iter(&self) -> Result<impl Iterator<Item = (u64, u64)>, TxError> {
        Ok(self.entries()?.into_iter().map(|(k, v, _)| (k, v)))
    }

    /// Every `(key, value)` into a std map.
    pub fn to_std(&self) -> Result<std::collections::HashMap<u64, u64>, TxError> {
        Ok(self.iter()?.collect())
    }

    /// Every heap block the map owns: the bucket array, then the entries in bucket order.
    pub fn blocks(&self) -> Result<Vec<u64>, TxError> {
        let mut out = vec![self.buckets];
        out.extend(self.entries()?.into_iter().map(|(_, _, e)| e));
        Ok(out)
    }
}
