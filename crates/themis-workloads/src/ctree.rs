//! CTree: a crit-bit tree mapping `u64` keys to `u64` values (Themis, Table II, "insert/delete
//! nodes in crit-bit tree"; the shape of PMDK's `ctree_map` example).
//!
//! Layout: the root is `[tree, count]`. `tree` is a tagged offset: 0 for an empty tree, a leaf's
//! offset, or an internal node's offset with bit 0 set ([`INTERNAL_TAG`]; blocks are at least
//! 8-byte aligned, so the bit is free). A leaf is a heap block of [`LEAF_BYTES`] holding
//! `[key, value]`; an internal node one of [`NODE_BYTES`] holding `[bit, child 0, child 1]`:
//! the keys under child `d` have bit `bit` equal to `d`, and `bit` falls strictly along every
//! path from the root (the crit-bit invariant), so a lookup tests one bit per level.
//!
//! An insert of a new key allocates a leaf and an internal node and swings one pointer (the
//! slot where the new bit belongs) and the count: two words logged. An existing key's value is
//! overwritten in place (one word). A remove swings the pointer to the removed leaf's parent
//! over to the leaf's sibling, frees both, and logs that pointer and the count.

use pmem_ordering::{Backend, Hardware, PPtr, Pool};

use super::{corrupt, step_limit, words};
use pmem_undo_log::{Heap, TxError};

/// Bytes of a leaf: `[key, value]`.
pub const LEAF_BYTES: u64 = 16;
/// Bytes of an internal node: `[bit, child 0, child 1]`.
pub const NODE_BYTES: u64 = 24;
/// The tag on a pointer to an internal node.
pub const INTERNAL_TAG: u64 = 1;

/// A decoded tree pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    Empty,
    Leaf(u64),
    Internal(u64),
}

impl Link {
    fn decode(word: u64) -> Link {
        match word {
            0 => Link::Empty,
            w if w & INTERNAL_TAG != 0 => Link::Internal(w & !INTERNAL_TAG),
            w => Link::Leaf(w),
        }
    }
}

/// Where a key's search ended: the slot holding the leaf, the leaf's words, and the slot that
/// points to the leaf's parent with that parent's words (`None` when the leaf is the root).
struct Found {
    leaf_slot: u64,
    leaf: u64,
    key: u64,
    value: u64,
    parent: Option<(u64, u64, [u64; 3])>,
}

/// A crit-bit tree from `u64` to `u64` in a heap.
///
/// ```
/// use pmem_ordering::{Pool, PoolOptions};
/// use pmem_themis_workloads::CritBitTree;
/// use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
///
/// let pool = Pool::anonymous("ctree", 4 << 20, &PoolOptions::new())?;
/// let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
/// let tree = CritBitTree::create(&heap, heap.pool().root_offset())?;
/// assert_eq!(tree.insert(9, 90)?, None);
/// assert_eq!(tree.insert(3, 30)?, None);
/// assert_eq!(tree.insert(9, 91)?, Some(90));
/// assert_eq!(tree.remove(3)?, Some(30));
/// assert_eq!(tree.to_vec()?, vec![(9, 91)]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CritBitTree<'h, B: Backend = Hardware> {
    heap: &'h Heap<B>,
    root: u64,
}

impl<B: Backend> Clone for CritBitTree<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for CritBitTree<'_, B> {}

impl<B: Backend> std::fmt::Debug for CritBitTree<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CritBitTree")
            .field("root", &self.root)
            .finish()
    }
}

impl<'h, B: Backend> CritBitTree<'h, B> {
    /// Bytes of the root: `[tree, count]`.
    pub const ROOT_BYTES: u64 = 16;

    /// Make an empty tree rooted at `root` (overwriting, in one transaction, whatever was
    /// there).
    pub fn create(heap: &'h Heap<B>, root: u64) -> Result<CritBitTree<'h, B>, TxError> {
        heap.transaction(|tx| tx.write_value(root, &[0u64, 0]))?;
        Ok(CritBitTree { heap, root })
    }

    /// The tree rooted at `root`.
    pub fn open(heap: &'h Heap<B>, root: u64) -> Result<CritBitTree<'h, B>, TxError> {
        heap.pool().check_range(root, Self::ROOT_BYTES)?;
        Ok(CritBitTree { heap, root })
    }

    /// The root's offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    fn damaged(&self, detail: impl std::fmt::Display) -> TxError {
        corrupt("crit-bit tree", self.root, detail)
    }

    /// Follow `key`'s bits from the root to a leaf; `None` for an empty tree.
    fn search(&self, pool: &Pool<B>, key: u64) -> Result<Option<Found>, TxError> {
        let mut slot = self.root;
        let mut parent = None;
        let mut above = 64u64;
        for _ in 0..step_limit(pool) {
            match Link::decode(pool.read(slot)?) {
                Link::Empty if parent.is_none() => return Ok(None),
                Link::Empty => return Err(self.damaged("an internal node has a null child")),
                Link::Leaf(leaf) => {
                    let [key, value] = words::<B, 2>(pool, leaf)?;
                    return Ok(Some(Found {
                        leaf_slot: slot,
                        leaf,
                        key,
                        value,
                        parent,
                    }));
                }
                Link::Internal(node) => {
                    let n = words::<B, 3>(pool, node)?;
                    if n[0] >= above {
                        return Err(self.damaged(format!(
                            "node {node:#x} tests bit {} under bit {above}",
                            n[0]
                        )));
                    }
                    above = n[0];
                    parent = Some((slot, node, n));
                    slot = node + 8 + 8 * ((key >> n[0]) & 1);
                }
            }
        }
        Err(self.damaged("the walk does not end (a cycle?)"))
    }

    /// The slot where an internal node testing `bit` belongs on `key`'s path: the first slot
    /// that holds a leaf or a node testing a lower bit.
    fn slot_for_bit(&self, pool: &Pool<B>, key: u64, bit: u64) -> Result<u64, TxError> {
        let mut slot = self.root;
        for _ in 0..step_limit(pool) {
            match Link::decode(pool.read(slot)?) {
                Link::Internal(node) => {
                    let tested: u64 = pool.read(node)?;
                    if tested < bit {
                        return Ok(slot);
                    }
                    slot = node + 8 + 8 * ((key >> tested) & 1);
                }
                Link::Leaf(_) | Link::Empty => return Ok(slot),
            }
        }
        Err(self.damaged("the walk does not end (a cycle?)"))
    }

    /// Map `key` to `value`; returns the value it replaced.
    pub fn insert(&self, key: u64, value: u64) -> Result<Option<u64>, TxError> {
        self.heap.transaction(|tx| {
            let pool = tx.pool();
            let count_at = self.root + 8;
            let count: u64 = pool.read(count_at)?;
            let Some(found) = self.search(pool, key)? else {
                let leaf = tx.alloc(LEAF_BYTES)?.offset();
                tx.snapshot(self.root, 16)?;
                tx.write_value(leaf, &[key, value])?;
                tx.write_value(self.root, &[leaf, 1u64])?;
                return Ok(None);
            };
            if found.key == key {
                tx.write_value(found.leaf + 8, &value)?;
                return Ok(Some(found.value));
            }
            // The highest bit where the new key differs from its nearest neighbour.
            let bit = 63 - u64::from((found.key ^ key).leading_zeros());
            let slot = self.slot_for_bit(pool, key, bit)?;
            let displaced: u64 = pool.read(slot)?;
            tx.snapshot(slot, 8)?;
            tx.snapshot(count_at, 8)?;
            let leaf = tx.alloc(LEAF_BYTES)?.offset();
            let node = tx.alloc(NODE_BYTES)?.offset();
            tx.write_value(leaf, &[key, value])?;
            let children = if (key >> bit) & 1 == 1 {
                [displaced, leaf]
            } else {
                [leaf, displaced]
            };
            tx.write_value(node, &[bit, children[0], children[1]])?;
            tx.write_value(slot, &(node | INTERNAL_TAG))?;
            tx.write_value(count_at, &(count + 1))?;
            Ok(None)
        })
    }

    /// Remove `key`; returns its value if it was there.
    pub fn remove(&self, key: u64) -> Result<Option<u64>, TxError> {
        self.heap.transaction(|tx| {
            let pool = tx.pool();
            let Some(found) = self.search(pool, key)? else {
                return Ok(None);
            };
            if found.key != key {
                return Ok(None);
            }
            let count_at = self.root + 8;
            let count: u64 = pool.read(count_at)?;
            match found.parent {
                None => {
                    tx.write_value(self.root, &[0u64, 0])?;
                }
                Some((parent_slot, parent, [_, child0, child1])) => {
                    let sibling = if found.leaf_slot == parent + 8 {
                        child1
                    } else {
                        child0
                    };
                    tx.snapshot(parent_slot, 8)?;
                    tx.snapshot(count_at, 8)?;
                    tx.write_value(parent_slot, &sibling)?;
                    tx.write_value(count_at, &count.wrapping_sub(1))?;
                    tx.free(PPtr::<u8>::new(parent))?;
                }
            }
            tx.free(PPtr::<u8>::new(found.leaf))?;
            Ok(Some(found.value))
        })
    }

    /// The value of `key`.
    pub fn get(&self, key: u64) -> Result<Option<u64>, TxError> {
        Ok(self
            .search(self.heap.pool(), key)?
            .filter(|f| f.key == key)
            .map(|f| f.value))
    }

    /// Number of keys (the persistent count).
    pub fn len(&self) -> Result<u64, TxError> {
        Ok(self.heap.pool().read(self.root + 8)?)
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> Result<bool, TxError> {
        Ok(self.heap.pool().read::<u64>(self.root)? == 0)
    }

    /// Visit every block in key order: `leaf(key, value, offset)` for leaves, `node(offset)`
    /// for internal nodes. Checks the crit-bit invariant on the way.
    fn walk(
        &self,
        mut leaf: impl FnMut(u64, u64, u64),
        mut node: impl FnMut(u64),
    ) -> Result<(), TxError> {
        let pool = self.heap.pool();
        let mut steps = step_limit(pool);
        // (link, the bit tested above it) in depth-first order, child 0 first.
        let mut stack = vec![(pool.read::<u64>(self.root)?, 64u64)];
        while let Some((word, above)) = stack.pop() {
            steps = steps
                .checked_sub(1)
                .ok_or_else(|| self.damaged("the walk does not end (a cycle?)"))?;
            match Link::decode(word) {
                Link::Empty if above == 64 => {}
                Link::Empty => return Err(self.damaged("an internal node has a null child")),
                Link::Leaf(at) => {
                    let [k, v] = words::<B, 2>(pool, at)?;
                    leaf(k, v, at);
                }
                Link::Internal(at) => {
                    let [bit, child0, child1] = words::<B, 3>(pool, at)?;
                    if bit >= above {
                        return Err(
                            self.damaged(format!("node {at:#x} tests bit {bit} under bit {above}"))
                        );
                    }
                    node(at);
                    stack.push((child1, bit));
                    stack.push((child0, bit));
                }
            }
        }
        Ok(())
    }

    /// Every `(key, value)` in ascending key order.
    pub fn to_vec(&self) -> Result<Vec<(u64, u64)>, TxError> {
        let mut out = Vec::new();
        self.walk(|k, v, _| out.push((k, v)), |_| {})?;
        Ok(out)
    }

    /// Every heap block the tree owns: its leaves and internal nodes.
    pub fn blocks(&self) -> Result<Vec<u64>, TxError> {
        let mut leaves = Vec::new();
        let mut nodes = Vec::new();
        self.walk(|_, _, at| leaves.push(at), |at| nodes.push(at))?;
        leaves.extend(nodes);
        Ok(leaves)
    }
}
