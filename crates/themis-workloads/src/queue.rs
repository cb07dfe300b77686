//! CQ: a FIFO queue of `u64` as a linked list with head and tail pointers (Themis, Table II,
//! "en/dequeue nodes in concurrent queue"; here one thread at a time, like every workload).
//!
//! Layout: the root is `[head, tail]` (0 and 0: empty). A node is a heap block of [`NODE_BYTES`]
//! holding `[value, next]`; values go in at the tail and out at the head.
//!
//! An enqueue allocates a node and logs two words (the old tail's `next` and the root's tail,
//! or the whole root when the queue was empty); a dequeue logs the root's head (and tail when the
//! queue empties) and frees the node.

use pmem_ordering::{Backend, Hardware, PPtr};

use super::{corrupt, step_limit, words};
use pmem_undo_log::{Heap, TxError};

/// Bytes of a node: `[value, next]`.
pub const NODE_BYTES: u64 = 16;

/// A FIFO queue of `u64` in a heap.
///
/// ```
/// use pmem_ordering::{Pool, PoolOptions};
/// use pmem_themis_workloads::Queue;
/// use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
///
/// let pool = Pool::anonymous("queue", 4 << 20, &PoolOptions::new())?;
/// let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
/// let queue = Queue::create(&heap, heap.pool().root_offset())?;
/// queue.enqueue(1)?;
/// queue.enqueue(2)?;
/// assert_eq!(queue.dequeue()?, Some(1));
/// assert_eq!(queue.to_vec()?, vec![2]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Queue<'h, B: Backend = Hardware> {
    heap: &'h Heap<B>,
    root: u64,
}

impl<B: Backend> Clone for Queue<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for Queue<'_, B> {}

impl<B: Backend> std::fmt::Debug for Queue<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("root", &self.root).finish()
    }
}

impl<'h, B: Backend> Queue<'h, B> {
    /// Bytes of the root: `[head, tail]`.
    pub const ROOT_BYTES: u64 = 16;

    /// Make an empty queue rooted at `root` (overwriting, in one transaction, whatever was
    /// there).
    pub fn create(heap: &'h Heap<B>, root: u64) -> Result<Queue<'h, B>, TxError> {
        heap.transaction(|tx| tx.write_value(root, &[0u64, 0]))?;
        Ok(Queue { heap, root })
    }

    /// The queue rooted at `root`.
    pub fn open(heap: &'h Heap<B>, root: u64) -> Result<Queue<'h, B>, TxError> {
        heap.pool().check_range(root, Self::ROOT_BYTES)?;
        Ok(Queue { heap, root })
    }

    /// The root's offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// Append `value` at the tail.
    pub fn enqueue(&self, value: u64) -> Result<(), TxError> {
        self.heap.transaction(|tx| {
            let [head, tail] = words::<B, 2>(tx.pool(), self.root)?;
            if (head == 0) != (tail == 0) {
                return Err(corrupt("queue", self.root, "one of head and tail is null"));
            }
            if tail == 0 {
                tx.snapshot(self.root, 16)?;
            } else {
                tx.snapshot(tail + 8, 8)?;
                tx.snapshot(self.root + 8, 8)?;
            }
            let node = tx.alloc(NODE_BYTES)?.offset();
            tx.write_value(node, &[value, 0u64])?;
            if tail == 0 {
                tx.write_value(self.root, &[node, node])?;
            } else {
                tx.write_value(tail + 8, &node)?;
                tx.write_value(self.root + 8, &node)?;
            }
            Ok(())
        })
    }

    /// Take the value at the head, if any.
    pub fn dequeue(&self) -> Result<Option<u64>, TxError> {
        self.heap.transaction(|tx| {
            let [head, tail] = words::<B, 2>(tx.pool(), self.root)?;
            if head == 0 {
                return Ok(None);
            }
            let [value, next] = words::<B, 2>(tx.pool(), head)?;
            if next == 0 {
                if head != tail {
                    return Err(corrupt("queue", self.root, "the tail is not the last node"));
                }
                tx.write_value(self.root, &[0u64, 0])?;
            } else {
                tx.write_value(self.root, &next)?;
            }
            tx.free(PPtr::<u8>::new(head))?;
            Ok(Some(value))
        })
    }

    /// The value at the head, if any.
    pub fn peek(&self) -> Result<Option<u64>, TxError> {
        let pool = self.heap.pool();
        let head: u64 = pool.read(self.root)?;
        if head == 0 {
            return Ok(None);
        }
        Ok(Some(pool.read(head)?))
    }

    /// `(value, node offset)` from head to tail; checks that the tail is the last node.
    fn nodes(&self) -> Result<Vec<(u64, u64)>, TxError> {
        let pool = self.heap.pool();
        let [mut node, tail] = words::<B, 2>(pool, self.root)?;
        let mut out = Vec::new();
        let mut steps = step_limit(pool);
        while node != 0 {
            steps = steps
                .checked_sub(1)
                .ok_or_else(|| corrupt("queue", self.root, "the walk does not end"))?;
            let [value, next] = words::<B, 2>(pool, node)?;
            out.push((value, node));
            node = next;
        }
        if out.last().map_or(0, |&(_, n)| n) != tail {
            return Err(corrupt(
                "queue",
                self.root,
                format!("the tail {tail:#x} is not the last node"),
            ));
        }
        Ok(out)
    }

    /// The values from head to tail.
    pub fn to_vec(&self) -> Result<Vec<u64>, TxError> {
        Ok(self.nodes()?.into_iter().map(|(v, _)| v).collect())
    }

    /// Number of values (a walk of the queue).
    pub fn len(&self) -> Result<usize, TxError> {
        Ok(self.nodes()?.len())
    }

    /// Whether the queue is empty.
    pub fn is_empty(&self) -> Result<bool, TxError> {
        Ok(self.heap.pool().read::<u64>(self.root)? == 0)
    }

    /// The offsets of the nodes from head to tail: every heap block the queue owns.
    pub fn blocks(&self) -> Result<Vec<u64>, TxError> {
        Ok(self.nodes()?.into_iter().map(|(_, n)| n).collect())
    }
}
