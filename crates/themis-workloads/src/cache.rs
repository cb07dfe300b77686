//! PC: a persistent cache, a set-associative hash table whose values are arrays of words
//! updated in place (Themis, Table II, "update in hash-table"; the persistent-cache benchmark of
//! the coupled-undo-logging workloads the paper builds on, Themis, Sec. V-A).
//!
//! Layout: the root is `[table, sets, ways, value words, count]`; `table` is one heap block of
//! `sets * ways` entries of `1 + value words` words each: `[key + 1, value...]` (a first word of
//! 0 marks a free entry). A key may only sit in the `ways` entries of set `hash(key) % sets`
//! ([`crate::hashmap::hash`]); its victim way, when the set is full, is
//! `(hash(key) / sets) % ways`. Both are part of the format.
//!
//! An update of a cached key overwrites its value in place; a new key fills a free way of its
//! set (and bumps the count) or evicts the victim way's key. Each word stored is logged on its
//! own, as the per-store undo logging the paper evaluates does (Themis, Sec. V-A): an update of
//! a `V`-word value is a `V`-store transaction, all of whose log entries are snapshot before the
//! first store.

use pmem_ordering::{Backend, Hardware, Pool};

use super::hashmap::hash;
use super::{corrupt, words};
use pmem_undo_log::{Heap, TxError};

/// One entry of the table as [`PersistentCache::entries`] lists it: `None` when free, else the
/// key and its value.
pub type CacheEntry = Option<(u64, Vec<u64>)>;

/// What an update did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// The key was cached: its value was overwritten.
    Overwrote,
    /// The key took a free way of its set.
    Inserted,
    /// The set was full: the key replaced this one.
    Evicted(u64),
}

/// The shape of a [`PersistentCache`]: how many sets, ways and words per value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheShape {
    /// Sets of the table (a key's hash picks one).
    pub sets: u64,
    /// Entries per set.
    pub ways: u64,
    /// Words of every value.
    pub value_words: u64,
}

impl CacheShape {
    /// Words of one entry: the key word and the value.
    pub fn entry_words(&self) -> u64 {
        1 + self.value_words
    }

    /// Bytes of the table, or `None` if it overflows.
    fn table_bytes(&self) -> Option<u64> {
        self.sets
            .checked_mul(self.ways)?
            .checked_mul(self.entry_words())?
            .checked_mul(8)
    }

    /// The set of `key`.
    pub fn set_of(&self, key: u64) -> u64 {
        hash(key) % self.sets
    }

    /// The way `key` evicts when its set is full.
    pub fn victim_of(&self, key: u64) -> u64 {
        (hash(key) / self.sets) % self.ways
    }
}

/// A persistent cache from `u64` keys to fixed-size arrays of `u64` in a heap.
///
/// ```
/// use pmem_ordering::{Pool, PoolOptions};
/// use pmem_themis_workloads::cache::{CacheShape, PersistentCache, Update};
/// use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
///
/// let pool = Pool::anonymous("pc", 4 << 20, &PoolOptions::new())?;
/// let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
/// let shape = CacheShape { sets: 16, ways: 2, value_words: 4 };
/// let pc = PersistentCache::create(&heap, heap.pool().root_offset(), shape)?;
/// assert_eq!(pc.update(7, &[1, 2, 3, 4])?, Update::Inserted);
/// assert_eq!(pc.update(7, &[5, 6, 7, 8])?, Update::Overwrote);
/// assert_eq!(pc.get(7)?, Some(vec![5, 6, 7, 8]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PersistentCache<'h, B: Backend = Hardware> {
    heap: &'h Heap<B>,
    root: u64,
    table: u64,
    shape: CacheShape,
}

impl<B: Backend> Clone for PersistentCache<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for PersistentCache<'_, B> {}

impl<B: Backend> std::fmt::Debug for PersistentCache<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentCache")
            .field("root", &self.root)
            .field("table", &self.table)
            .field("shape", &self.shape)
            .finish()
    }
}

impl<'h, B: Backend> PersistentCache<'h, B> {
    /// Bytes of the root: `[table, sets, ways, value words, count]`.
    pub const ROOT_BYTES: u64 = 40;

    /// Make an empty cache of `shape` rooted at `root`, in one transaction (whatever the root
    /// held is overwritten, not freed).
    pub fn create(
        heap: &'h Heap<B>,
        root: u64,
        shape: CacheShape,
    ) -> Result<PersistentCache<'h, B>, TxError> {
        if shape.sets == 0 || shape.ways == 0 || shape.value_words == 0 {
            return Err(TxError::InvalidConfig {
                reason: format!("a cache needs sets, ways and value words, not {shape:?}"),
            });
        }
        let bytes = shape.table_bytes().ok_or_else(|| TxError::InvalidConfig {
            reason: format!("a cache of {shape:?} overflows the address space"),
        })?;
        let table = heap.transaction(|tx| {
            let table = tx.alloc(bytes)?.offset();
            tx.write(table, &vec![0u8; bytes as usize])?;
            tx.write_value(root, &[table, shape.sets, shape.ways, shape.value_words, 0])?;
            Ok::<_, TxError>(table)
        })?;
        Ok(PersistentCache {
            heap,
            root,
            table,
            shape,
        })
    }

    /// The cache rooted at `root`.
    pub fn open(heap: &'h Heap<B>, root: u64) -> Result<PersistentCache<'h, B>, TxError> {
        let [table, sets, ways, value_words, _] = words::<B, 5>(heap.pool(), root)?;
        let shape = CacheShape {
            sets,
            ways,
            value_words,
        };
        let bytes = shape
            .table_bytes()
            .filter(|_| table != 0 && sets != 0 && ways != 0 && value_words != 0)
            .ok_or_else(|| corrupt("cache", root, "no table (never created?)"))?;
        heap.pool()
            .check_range(table, bytes)
            .map_err(|e| corrupt("cache", root, e))?;
        Ok(PersistentCache {
            heap,
            root,
            table,
            shape,
        })
    }

    /// The root's offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The cache's shape.
    pub fn shape(&self) -> CacheShape {
        self.shape
    }

    fn entry(&self, set: u64, way: u64) -> u64 {
        self.table + 8 * self.shape.entry_words() * (set * self.shape.ways + way)
    }

    /// The stored key words of `key`'s set.
    fn set_keys(&self, pool: &Pool<B>, set: u64) -> Result<Vec<u64>, TxError> {
        (0..self.shape.ways)
            .map(|way| Ok(pool.read::<u64>(self.entry(set, way))?))
            .collect()
    }

    /// Cache `value` under `key`: overwrite it in place if cached, else take a free way of its
    /// set or evict the set's victim. A value of the wrong length is refused before any write.
    pub fn update(&self, key: u64, value: &[u64]) -> Result<Update, TxError> {
        if value.len() as u64 != self.shape.value_words {
            return Err(TxError::InvalidConfig {
                reason: format!(
                    "a cache of {}-word values was given {} words",
                    self.shape.value_words,
                    value.len()
                ),
            });
        }
        let stored = key.wrapping_add(1);
        if stored == 0 {
            return Err(TxError::InvalidConfig {
                reason: "key u64::MAX is reserved (its stored form marks a free entry)".into(),
            });
        }
        self.heap.transaction(|tx| {
            let pool = tx.pool();
            let set = self.shape.set_of(key);
            let keys = self.set_keys(pool, set)?;
            let (way, outcome) = if let Some(way) = keys.iter().position(|&k| k == stored) {
                (way as u64, Update::Overwrote)
            } else if let Some(way) = keys.iter().position(|&k| k == 0) {
                (way as u64, Update::Inserted)
            } else {
                let way = self.shape.victim_of(key);
                (way, Update::Evicted(keys[way as usize].wrapping_sub(1)))
            };
            let entry = self.entry(set, way);
            let count_at = self.root + 32;
            let value_at = entry + 8;
            for i in 0..self.shape.value_words {
                tx.snapshot(value_at + 8 * i, 8)?;
            }
            if outcome != Update::Overwrote {
                tx.snapshot(entry, 8)?;
            }
            if outcome == Update::Inserted {
                tx.snapshot(count_at, 8)?;
            }
            for (i, w) in value.iter().enumerate() {
                tx.write_value(value_at + 8 * i as u64, w)?;
            }
            if outcome != Update::Overwrote {
                tx.write_value(entry, &stored)?;
            }
            if outcome == Update::Inserted {
                let count: u64 = pool.read(count_at)?;
                tx.write_value(count_at, &(count + 1))?;
            }
            Ok(outcome)
        })
    }

    /// The value cached under `key`.
    pub fn get(&self, key: u64) -> Result<Option<Vec<u64>>, TxError> {
        let pool = self.heap.pool();
        let stored = key.wrapping_add(1);
        let set = self.shape.set_of(key);
        for way in 0..self.shape.ways {
            let entry = self.entry(set, way);
            if pool.read::<u64>(entry)? == stored && stored != 0 {
                return Ok(Some(self.value_at(pool, entry)?));
            }
        }
        Ok(None)
    }

    fn value_at(&self, pool: &Pool<B>, entry: u64) -> Result<Vec<u64>, TxError> {
        (0..self.shape.value_words)
            .map(|i| Ok(pool.read::<u64>(entry + 8 + 8 * i)?))
            .collect()
    }

    /// Number of keys cached (the persistent count).
    pub fn len(&self) -> Result<u64, TxError> {
        Ok(self.heap.pool().read(self.root + 32)?)
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> Result<bool, TxError> {
        Ok(self.len()? == 0)
    }

    /// Every entry, set by set and way by way: `None` for a free one, else `(key, value)`.
    /// Checks that each key sits in its own set.
    pub fn entries(&self) -> Result<Vec<CacheEntry>, TxError> {
        let pool = self.heap.pool();
        let mut out = Vec::new();
        for set in 0..self.shape.sets {
            for way in 0..self.shape.ways {
                let entry = self.entry(set, way);
                let stored: u64 = pool.read(entry)?;
                if stored == 0 {
                    out.push(None);
                    continue;
                }
                let key = stored - 1;
                if self.shape.set_of(key) != set {
                    return Err(corrupt(
                        "cache",
                        self.root,
                        format!("key {key} is in set {set}, not its own"),
                    ));
                }
                out.push(Some((key, self.value_at(pool, entry)?)));
            }
        }
        Ok(out)
    }

    /// Every heap block the cache owns: the table.
    pub fn blocks(&self) -> Vec<u64> {
        vec![self.table]
    }
}
