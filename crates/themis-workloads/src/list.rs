//! LL: a sorted singly linked list of `u64` keys (Themis, Table II, "insert/delete nodes in
//! linked-list").
//!
//! Layout: the root is one word, the offset of the first node (0: empty). A node is a heap block
//! of [`NODE_BYTES`] holding `[key, next]`; keys are unique and ascending along the list.
//!
//! An insert allocates a node and swings one pointer (the root's or the predecessor's `next`);
//! a remove swings one pointer and frees the node. Either way one word is logged, plus the
//! allocator's bitmap word at commit.

use pmem_ordering::{Backend, Hardware, PPtr, Pool};

use super::{corrupt, step_limit, words};
use pmem_undo_log::{Heap, TxError};

/// Bytes of a node: `[key, next]`.
pub const NODE_BYTES: u64 = 16;

/// A sorted linked list of unique `u64` keys in a heap.
///
/// ```
/// use pmem_ordering::{Pool, PoolOptions};
/// use pmem_themis_workloads::List;
/// use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
///
/// let pool = Pool::anonymous("list", 4 << 20, &PoolOptions::new())?;
/// let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
/// let list = List::create(&heap, heap.pool().root_offset())?;
/// assert!(list.insert(5)?);
/// assert!(list.insert(2)?);
/// assert!(!list.insert(5)?);
/// assert!(list.remove(5)?);
/// assert_eq!(list.to_vec()?, vec![2]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct List<'h, B: Backend = Hardware> {
    heap: &'h Heap<B>,
    root: u64,
}

impl<B: Backend> Clone for List<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for List<'_, B> {}

impl<B: Backend> std::fmt::Debug for List<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("List").field("root", &self.root).finish()
    }
}

impl<'h, B: Backend> List<'h, B> {
    /// Bytes of the root: the head pointer.
    pub const ROOT_BYTES: u64 = 8;

    /// Make an empty list rooted at `root` (overwriting, in one transaction, whatever was there).
    pub fn create(heap: &'h Heap<B>, root: u64) -> Result<List<'h, B>, TxError> {
        heap.transaction(|tx| tx.write_value(root, &0u64))?;
        Ok(List { heap, root })
    }

    /// The list rooted at `root`.
    pub fn open(heap: &'h Heap<B>, root: u64) -> Result<List<'h, B>, TxError> {
        heap.pool().check_range(root, Self::ROOT_BYTES)?;
        Ok(List { heap, root })
    }

    /// The root's offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The pointer slot that leads to the first node with a key `>= key`, and that node (0 if
    /// there is none).
    fn find(&self, pool: &Pool<B>, key: u64) -> Result<(u64, u64), TxError> {
        let limit = step_limit(pool);
        let mut slot = self.root;
        for _ in 0..limit {
            let node: u64 = pool.read(slot)?;
            if node == 0 {
                return Ok((slot, 0));
            }
            let k: u64 = pool.read(node)?;
            if k >= key {
                return Ok((slot, node));
            }
            slot = node + 8;
        }
        Err(corrupt(
            "list",
            self.root,
            "the walk does not end (a cycle?)",
        ))
    }

    /// Insert `key`; `false` (and no write) if it is already there.
    pub fn insert(&self, key: u64) -> Result<bool, TxError> {
        self.heap.transaction(|tx| {
            let (slot, next) = self.find(tx.pool(), key)?;
            if next != 0 && tx.read::<u64>(next)? == key {
                return Ok(false);
            }
            tx.snapshot(slot, 8)?;
            let node = tx.alloc(NODE_BYTES)?;
            tx.write_value(node.offset(), &[key, next])?;
            tx.write_value(slot, &node.offset())?;
            Ok(true)
        })
    }

    /// Remove `key`; `false` (and no write) if it is not there.
    pub fn remove(&self, key: u64) -> Result<bool, TxError> {
        self.heap.transaction(|tx| {
            let (slot, node) = self.find(tx.pool(), key)?;
            if node == 0 {
                return Ok(false);
            }
            let [k, next] = words::<B, 2>(tx.pool(), node)?;
            if k != key {
                return Ok(false);
            }
            tx.write_value(slot, &next)?;
            tx.free(PPtr::<u8>::new(node))?;
            Ok(true)
        })
    }

    /// Whether `key` is in the list.
    pub fn contains(&self, key: u64) -> Result<bool, TxError> {
        let pool = self.heap.pool();
        let (_, node) = self.find(pool, key)?;
        Ok(node != 0 && pool.read::<u64>(node)? == key)
    }

    /// The keys in ascending order (each item an error if the list is damaged; iteration stops
    /// after the first error).
    pub fn iter(&self) -> Iter<'h, B> {
        let pool: &'h Pool<B> = self.heap.pool();
        Iter {
            pool,
            root: self.root,
            slot: Some(self.root),
            steps: step_limit(pool),
        }
    }

    /// The keys in ascending order.
    pub fn to_vec(&self) -> Result<Vec<u64>, TxError> {
        self.iter().map(|r| r.map(|(k, _)| k)).collect()
    }

    /// Number of keys (a walk of the list).
    pub fn len(&self) -> Result<usize, TxError> {
        self.iter().try_fold(0, |n, r| r.map(|_| n + 1))
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> Result<bool, TxError> {
        Ok(self.heap.pool().read::<u64>(self.root)? == 0)
    }

    /// The offsets of the nodes, in list order: every heap block the list owns.
    pub fn blocks(&self) -> Result<Vec<u64>, TxError> {
        self.iter().map(|r| r.map(|(_, node)| node)).collect()
    }
}

/// The keys of a [`List`] with their nodes' offsets, in order.
pub struct Iter<'a, B: Backend> {
    pool: &'a Pool<B>,
    root: u64,
    /// The pointer slot to follow next; `None` once done or failed.
    slot: Option<u64>,
    steps: u64,
}

impl<B: Backend> std::fmt::Debug for Iter<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iter").field("slot", &self.slot).finish()
    }
}

impl<B: Backend> Iterator for Iter<'_, B> {
    /// `(key, node offset)`.
    type Item = Result<(u64, u64), TxError>;

    fn next(&mut self) -> Option<Self::Item> {
        let slot = self.slot.take()?;
        let step = || -> Result<Option<(u64, u64)>, TxError> {
            let node: u64 = self.pool.read(slot)?;
            if node == 0 {
                return Ok(None);
            }
            if self.steps == 0 {
                return Err(corrupt(
                    "list",
                    self.root,
                    "the walk does not end (a cycle?)",
                ));
            }
            let key: u64 = self.pool.read(node)?;
            Ok(Some((key, node)))
        };
        match step() {
            Ok(Some((key, node))) => {
                self.steps -= 1;
                self.slot = Some(node + 8);
                Some(Ok((key, node)))
            }
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}
