//! SPS: swap random entries of an array (Themis, Table II). Its transactions are the large ones
//! of the paper's Fig. 8 (over a hundred stores), so a transaction here swaps as many pairs as
//! the caller passes to [`Sps::swap_all`].
//!
//! Layout: the root is `[array, len]`; the array is a heap block of `len` words, created holding
//! `0, 1, .., len - 1`, so it always holds a permutation of those.
//!
//! A transaction reads the entries it touches, applies the swaps in order in DRAM, snapshots
//! every touched word (each once), then writes their final values: under the batched policy
//! the whole transaction's log entries share one fence.

use std::collections::BTreeMap;

use pmem_ordering::{Backend, Hardware};

use super::{corrupt, words};
use pmem_undo_log::{Heap, TxError};

/// An array of `u64` in a heap whose entries are swapped in transactions.
///
/// ```
/// use pmem_ordering::{Pool, PoolOptions};
/// use pmem_themis_workloads::Sps;
/// use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
///
/// let pool = Pool::anonymous("sps", 4 << 20, &PoolOptions::new())?;
/// let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
/// let sps = Sps::create(&heap, heap.pool().root_offset(), 4)?;
/// sps.swap_all(&[(0, 3), (3, 1)])?;
/// assert_eq!(sps.to_vec()?, vec![3, 0, 2, 1]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Sps<'h, B: Backend = Hardware> {
    heap: &'h Heap<B>,
    root: u64,
    array: u64,
    len: u64,
}

impl<B: Backend> Clone for Sps<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for Sps<'_, B> {}

impl<B: Backend> std::fmt::Debug for Sps<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sps")
            .field("root", &self.root)
            .field("array", &self.array)
            .field("len", &self.len)
            .finish()
    }
}

impl<'h, B: Backend> Sps<'h, B> {
    /// Bytes of the root: `[array, len]`.
    pub const ROOT_BYTES: u64 = 16;

    /// Allocate an array of `len` entries holding `0..len` and root it at `root`, in one
    /// transaction (whatever the root held is overwritten, not freed).
    pub fn create(heap: &'h Heap<B>, root: u64, len: u64) -> Result<Sps<'h, B>, TxError> {
        if len == 0 {
            return Err(TxError::InvalidConfig {
                reason: "an SPS array needs at least one entry".into(),
            });
        }
        let bytes = len.checked_mul(8).ok_or_else(|| TxError::InvalidConfig {
            reason: format!("an array of {len} words overflows the address space"),
        })?;
        let array = heap.transaction(|tx| {
            let array = tx.alloc(bytes)?.offset();
            let init: Vec<u8> = (0..len).flat_map(u64::to_le_bytes).collect();
            tx.write(array, &init)?;
            tx.write_value(root, &[array, len])?;
            Ok::<_, TxError>(array)
        })?;
        Ok(Sps {
            heap,
            root,
            array,
            len,
        })
    }

    /// The array rooted at `root`.
    pub fn open(heap: &'h Heap<B>, root: u64) -> Result<Sps<'h, B>, TxError> {
        let [array, len] = words::<B, 2>(heap.pool(), root)?;
        if array == 0 || len == 0 {
            return Err(corrupt("SPS array", root, "no array (never created?)"));
        }
        heap.pool()
            .check_range(array, len.saturating_mul(8))
            .map_err(|e| corrupt("SPS array", root, e))?;
        Ok(Sps {
            heap,
            root,
            array,
            len,
        })
    }

    /// The root's offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the array is empty (never: `create` refuses that).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn at(&self, i: u64) -> u64 {
        assert!(
            i < self.len,
            "index {i} out of bounds of an SPS array of {}",
            self.len
        );
        self.array + 8 * i
    }

    /// Entry `i`. Panics if `i >= len`.
    pub fn get(&self, i: u64) -> Result<u64, TxError> {
        Ok(self.heap.pool().read(self.at(i))?)
    }

    /// Swap entries `i` and `j` in one transaction. Panics if either is `>= len`.
    pub fn swap(&self, i: u64, j: u64) -> Result<(), TxError> {
        self.swap_all(&[(i, j)])
    }

    /// Apply the swaps in order, all in one transaction. Panics (before writing anything) if an
    /// index is `>= len`.
    pub fn swap_all(&self, pairs: &[(u64, u64)]) -> Result<(), TxError> {
        for &(i, j) in pairs {
            self.at(i);
            self.at(j);
        }
        self.heap.transaction(|tx| {
            // Touched entries in first-touch order, with their values as the swaps go.
            let mut order: Vec<u64> = Vec::with_capacity(2 * pairs.len());
            let mut values: BTreeMap<u64, u64> = BTreeMap::new();
            for &(i, j) in pairs {
                for k in [i, j] {
                    if let std::collections::btree_map::Entry::Vacant(e) = values.entry(k) {
                        e.insert(tx.read(self.at(k))?);
                        order.push(k);
                    }
                }
                let (a, b) = (values[&i], values[&j]);
                values.insert(i, b);
                values.insert(j, a);
            }
            for &k in &order {
                tx.snapshot(self.at(k), 8)?;
            }
            for &k in &order {
                tx.write_value(self.at(k), &values[&k])?;
            }
            Ok(())
        })
    }

    /// Every entry.
    pub fn to_vec(&self) -> Result<Vec<u64>, TxError> {
        let mut bytes = vec![0u8; (self.len * 8) as usize];
        self.heap.pool().read_bytes(self.array, &mut bytes)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunks")))
            .collect())
    }

    /// Every heap block the structure owns: the array.
    pub fn blocks(&self) -> Vec<u64> {
        vec![self.array]
    }
}
