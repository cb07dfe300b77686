//! Lock-free reads: the in-node binary search, and descents from the root validated by the
//! node's stripe version and the structure version (see the module docs, "Concurrency").
//!
//! The hot paths (a lookup's descent, a scan's leaf reads) are compiled once per node size
//! ([`by_shape`]), so a node's size, entry count and search probes are constants in them.

use pmem_ordering::{Backend, Pool, PoolError, Words};

use super::layout::{NodeShape, NodeView, HEADER_WORDS};
use super::{FastFair, FastFairError, EMPTY_KEY, RESERVED};

/// Evaluate `$body` with `$shape` bound to the tree's node shape, in a copy per valid node size
/// where the shape is a constant (the sizes [`FastFair::create`] and [`FastFair::open`]
/// accept); any other size, which a handle never has, gets the shape as loaded. The default
/// size is tested first, with one compare (a `match` alone lowers to a table jump behind a
/// power-of-two test, a dozen instructions per call).
macro_rules! by_shape {
    ($tree:expr, $shape:ident => $body:expr) => {
        if $tree.node_size == super::DEFAULT_NODE_SIZE {
            let $shape = NodeShape::of(super::DEFAULT_NODE_SIZE);
            $body
        } else {
            by_shape!(@others $tree, $shape => $body)
        }
    };
    (@others $tree:expr, $shape:ident => $body:expr) => {
        match $tree.node_size {
            128 => {
                let $shape = NodeShape::of(128);
                $body
            }
            256 => {
                let $shape = NodeShape::of(256);
                $body
            }
            512 => {
                let $shape = NodeShape::of(512);
                $body
            }
            1024 => {
                let $shape = NodeShape::of(1024);
                $body
            }
            2048 => {
                let $shape = NodeShape::of(2048);
                $body
            }
            4096 => {
                let $shape = NodeShape::of(4096);
                $body
            }
            _ => {
                let $shape = $tree.shape;
                $body
            }
        }
    };
}
pub(super) use by_shape;

/// The in-node search. Keys are sorted and free slots ([`EMPTY_KEY`]) sort last, so a search
/// over every slot needs no entry count.
impl NodeView<'_> {
    /// The first slot whose entry fails `below` (which holds for a prefix of the slots), by a
    /// binary search without data-dependent branches: the probes' lines are already being
    /// fetched, so a mispredicted branch per probe would cost more than the compare.
    #[inline(always)]
    fn partition(&self, below: impl Fn(u64) -> bool) -> usize {
        (self.partition_word(below) - HEADER_WORDS) / 2
    }

    /// [`Self::partition`]'s slot as its key word (`key_word(slot)`): the descent's form,
    /// which reads the child or value beside it without converting.
    ///
    /// Always inlined: where the view's shape is a constant ([`by_shape`]) the match below
    /// folds to one arm and the search unrolls into its probes (a load, a compare and a
    /// select each); elsewhere each node size still gets its own unrolled copy.
    #[inline(always)]
    fn partition_word(&self, below: impl Fn(u64) -> bool) -> usize {
        // Each arm passes the capacity it matched: the view's own.
        match self.capacity() {
            // SAFETY: `4` is the capacity just matched.
            4 => unsafe { self.partition_word_over(4, below) },
            // SAFETY: `12` is the capacity just matched.
            12 => unsafe { self.partition_word_over(12, below) },
            // SAFETY: `28` is the capacity just matched.
            28 => unsafe { self.partition_word_over(28, below) },
            // SAFETY: `60` is the capacity just matched.
            60 => unsafe { self.partition_word_over(60, below) },
            // SAFETY: `124` is the capacity just matched.
            124 => unsafe { self.partition_word_over(124, below) },
            // SAFETY: `252` is the capacity just matched.
            252 => unsafe { self.partition_word_over(252, below) },
            // SAFETY: `capacity` is the capacity just matched.
            capacity => unsafe { self.partition_word_over(capacity, below) },
        }
    }

    /// The binary search over the first `capacity` slots, walking key words: a probe's word
    /// index scales by 8 in an addressing mode, so each probe is an add, a load, a compare and
    /// a select (a slot index would need a shift more). Inlined into each arm of
    /// [`Self::partition_word`], where `capacity` is a constant. The result is
    /// `key_word(bound)` for a bound at most `capacity`.
    ///
    /// The probes read keys without a range check: the view was checked once, and every probe
    /// is a key word below the capacity's (the loop keeps `base + 2 * size <=
    /// key_word(capacity)`, and `half < size`).
    ///
    /// # Safety
    ///
    /// `capacity == self.capacity()`.
    #[inline(always)]
    unsafe fn partition_word_over(&self, capacity: usize, below: impl Fn(u64) -> bool) -> usize {
        let mut base = HEADER_WORDS;
        let mut size = capacity;
        if size == 0 {
            return base;
        }
        while size > 1 {
            let half = size / 2;
            let mid = base + 2 * half;
            // The view holds the header and `capacity` entries (the caller's promise).
            // SAFETY: `mid = base + 2 * half < base + 2 * size <= key_word(capacity)`: in the view.
            let probe = unsafe { self.word_unchecked(mid) };
            base = std::hint::select_unpredictable(below(probe), mid, base);
            size -= half;
        }
        // SAFETY: the loop ended with `size == 1` (it started at least 1, and `size - size / 2`
        // stays at least 1), so `base < base + 2 <= key_word(capacity)`.
        base + 2 * usize::from(below(unsafe { self.word_unchecked(base) }))
    }

    /// The first slot whose key is above `key` (free slots count as above every key), at most
    /// the capacity. Of a transient duplicate, the slot before the result is the right copy.
    #[inline(always)]
    pub(super) fn upper_bound(&self, key: u64) -> usize {
        self.partition(|k| k <= key)
    }

    /// The first slot whose key is at or above `key` (free slots count as above every key),
    /// at most the capacity.
    #[inline(always)]
    pub(super) fn lower_bound(&self, key: u64) -> usize {
        self.partition(|k| k < key)
    }

    /// Used slots (the first free slot).
    #[inline(always)]
    pub(super) fn count(&self) -> usize {
        self.partition(|k| k != EMPTY_KEY)
    }

    /// The child of this internal node that covers `key`.
    #[inline(always)]
    pub(super) fn child_for(&self, key: u64) -> u64 {
        let ub = self.partition_word(|k| k <= key);
        // SAFETY: an upper bound's key word is that of a slot at most the capacity.
        unsafe { self.child_left_of_key_word_unchecked(ub) }
    }

    /// The slot of `key` in this leaf (the right copy of a transient duplicate), if there.
    #[inline]
    pub(super) fn find(&self, key: u64) -> Option<usize> {
        let ub = self.upper_bound(key);
        (ub > 0 && self.key(ub - 1) == key).then(|| ub - 1)
    }

    /// The value of `key` in this leaf (the right copy of a transient duplicate), if there:
    /// a lookup's read of its leaf ([`step`]) as one call, for the tests.
    #[cfg(test)]
    fn leaf_value(&self, key: u64) -> Option<u64> {
        let ub = self.partition_word(|k| k <= key);
        // SAFETY: an upper bound's key word is that of a slot at most the capacity.
        unsafe { self.value_at_bound_unchecked(ub, key) }
    }

    /// [`Self::leaf_value`] given `ub`, the key word of the upper bound of `key` in this leaf,
    /// already searched.
    ///
    /// # Safety
    ///
    /// `ub` is `key_word(slot)` for some `slot <= self.capacity()`.
    #[inline(always)]
    unsafe fn value_at_bound_unchecked(&self, ub: usize, key: u64) -> Option<u64> {
        if ub == HEADER_WORDS {
            return None;
        }
        // The slot before the bound: its key word and, after it, its value word.
        let slot_word = ub - 2;
        // SAFETY: `slot_word + 1 < ub <= key_word(capacity)`, within the view (the caller's
        // promise).
        let found = unsafe { self.word_unchecked(slot_word) } == key;
        // SAFETY: as above.
        found.then(|| unsafe { self.word_unchecked(slot_word + 1) })
    }
}

/// What one node's read tells a descent.
pub(super) enum Step {
    /// Go on to this node: the sibling (the key is at or above the node's high key) or the
    /// child that covers the key.
    Next(u64),
    /// This node is the key's leaf; the key's value there if asked for and present.
    Leaf(Option<u64>),
}

/// One step of a lock-free descent toward `key` at the node `view` shows (its read to be
/// validated by the caller). At a leaf, the key's value is looked up if `VALUE`.
#[inline(always)]
pub(super) fn step<const VALUE: bool>(view: &NodeView<'_>, key: u64) -> Step {
    view.prefetch();
    if key >= view.high() {
        return Step::Next(view.sibling());
    }
    if !VALUE {
        if view.level() == 0 {
            return Step::Leaf(None);
        }
        return Step::Next(view.child_for(key));
    }
    // A lookup searches every node it reads, leaf or not; the level is read after the search
    // (acquire loads stay in program order), so it is tested at once, not kept aside.
    let ub = view.partition_word(|k| k <= key);
    if view.level() == 0 {
        // SAFETY: an upper bound's key word is that of a slot at most the capacity.
        return Step::Leaf(unsafe { view.value_at_bound_unchecked(ub, key) });
    }
    // SAFETY: as above.
    Step::Next(unsafe { view.child_left_of_key_word_unchecked(ub) })
}

impl<B: Backend> FastFair<B> {
    /// The value of `key`, if present. Takes no lock.
    #[inline]
    pub fn get(&self, key: u64) -> Result<Option<u64>, FastFairError> {
        if key == EMPTY_KEY {
            return Err(FastFairError::ReservedKey(RESERVED));
        }
        by_shape!(self, shape => self.descend::<true>(shape, key)).map(|(_, value, _)| value)
    }

    /// The leaf that covers `key`, found without a lock, and the structure version it was
    /// found under.
    pub(super) fn lock_free_leaf(&self, key: u64) -> Result<(u64, u64), FastFairError> {
        by_shape!(self, shape => self.descend::<false>(shape, key))
            .map(|(leaf, _, structure)| (leaf, structure))
    }

    /// [`FastFair::lock_free_leaf`] for a writer, in its copy for `shape` (the tree's node
    /// shape): always inlined, so that a writer compiled for a constant shape walks with it.
    #[inline(always)]
    pub(super) fn lock_free_leaf_in(
        &self,
        shape: NodeShape,
        key: u64,
    ) -> Result<(u64, u64), FastFairError> {
        self.descend::<false>(shape, key)
            .map(|(leaf, _, structure)| (leaf, structure))
    }

    /// Walk from the root to `key`'s leaf, validating each node's read by its stripe version
    /// and the whole walk by the structure version, restarting after a change. Returns the
    /// leaf, the key's value there if `VALUE` (read and validated with the leaf), and the
    /// structure version of the walk.
    ///
    /// The structure version is checked once, at the leaf, not per node: only a merge or a
    /// root change (the changes that move it) frees a node or moves the root, so while it
    /// holds from the walk's start to its leaf every link followed led to a live node, whose
    /// read its stripe validated. A walk that a merge overlapped may meanwhile read a freed
    /// node (still pool memory, read with the same checked loads); what it finds there is never
    /// used: the check at the leaf fails, and every anomaly (a null link, a node outside the
    /// pool, a walk that does not end) is an error only if the structure version did not move,
    /// else a restart.
    ///
    /// Always inlined into its callers' arms of [`by_shape`], where `shape` is a constant.
    #[inline(always)]
    fn descend<const VALUE: bool>(
        &self,
        shape: NodeShape,
        key: u64,
    ) -> Result<(u64, Option<u64>, u64), FastFairError> {
        let pool = self.pool();
        // The pool's words, checked once: each node's view is cut from it with one compare.
        let pool_words = whole_pool(pool)?;
        // The stripes' slice, kept in registers across the walk (acquire loads would make
        // the compiler load it again per node from `self`).
        let stripes = self.stripes.readers();
        let step_limit = self.step_limit;
        'restart: loop {
            let structure = self.structure_version.read_begin();
            let mut node = match self.meta.root_node_in(pool_words) {
                Some(root) => root,
                None => self.root_node()?,
            };
            // Steps are counted down in stretches of `CHECK_EVERY`; at the end of each the walk
            // checks the structure version (a walk that read a freed node may wander far
            // before it reaches a leaf) and its length.
            let mut stretch = CHECK_EVERY;
            let mut steps = 0;
            let anomaly = loop {
                stretch -= 1;
                if stretch == 0 {
                    if !self.structure_version.read_valid(structure) {
                        continue 'restart;
                    }
                    steps += CHECK_EVERY;
                    if steps > step_limit {
                        break Anomaly::Endless;
                    }
                    stretch = CHECK_EVERY;
                }
                let stripe = stripes.reader(Self::stripe_index(node));
                let seen = stripe.read_begin();
                let Some(view) = NodeView::within(pool_words, node, shape) else {
                    break Anomaly::OutsidePool(node);
                };
                let read = step::<VALUE>(&view, key);
                #[cfg(test)]
                super::test_interleaving::at(super::test_interleaving::Point::Read(node));
                // Each arm validates on its own, so the step's outcome needs no flag. The hook
                // hears whether the read stands: a read whose stripe held but whose walk a
                // merge or root change already overlapped is discarded at the leaf (the
                // structure version never returns to a value it left).
                match read {
                    Step::Leaf(found) => {
                        let valid =
                            stripe.read_valid(seen) && self.structure_version.read_valid(structure);
                        #[cfg(test)]
                        super::test_interleaving::at(super::test_interleaving::Point::Validated(
                            valid,
                        ));
                        if valid {
                            return Ok((node, found, structure));
                        }
                        continue 'restart;
                    }
                    Step::Next(next) => {
                        let valid = stripe.read_valid(seen);
                        #[cfg(test)]
                        super::test_interleaving::at(super::test_interleaving::Point::Validated(
                            valid && self.structure_version.read_valid(structure),
                        ));
                        if !valid {
                            continue 'restart;
                        }
                        if next == 0 {
                            break Anomaly::NullLink(node);
                        }
                        node = next;
                    }
                }
            };
            // A walk that a merge overlapped may have read a freed node: only then is the
            // anomaly the merge's, not the pool's.
            if !self.structure_version.read_valid(structure) {
                continue 'restart;
            }
            return Err(self.descent_error(anomaly, shape, key));
        }
    }

    /// The error a descent's anomaly stands for (the structure version did not move).
    #[cold]
    #[inline(never)]
    fn descent_error(&self, anomaly: Anomaly, shape: NodeShape, key: u64) -> FastFairError {
        match anomaly {
            Anomaly::Endless => self.corrupt(format!("a descent to {key} does not end")),
            Anomaly::NullLink(node) => {
                self.corrupt(format!("node {node:#x} has a null link for {key}"))
            }
            // The pool's own checked call names the fault (it refuses exactly the nodes
            // `NodeView::within` refuses).
            Anomaly::OutsidePool(node) => match NodeView::new(self.pool(), node, shape) {
                Err(e) => e.into(),
                Ok(_) => self.corrupt(format!("node {node:#x} lies outside the pool")),
            },
        }
    }
}

/// Steps between a descent's checks of the structure version before its leaf: more than a
/// walk through a well-formed tree takes (its height, and a few sibling moves).
const CHECK_EVERY: u64 = 64;

/// What stopped a lock-free descent short of a leaf.
#[derive(Clone, Copy, Debug)]
enum Anomaly {
    /// More steps than a well-formed tree of the pool can take.
    Endless,
    /// A sibling or child link of the node at this offset was null.
    NullLink(u64),
    /// A link led to this offset, where no whole node of the tree's size lies.
    OutsidePool(u64),
}

/// The words of the whole pool from offset 0, checked once: the lock-free reads cut each
/// node's view from it ([`NodeView::within`]).
#[inline]
pub(super) fn whole_pool<B: Backend>(pool: &Pool<B>) -> Result<Words<'_>, PoolError> {
    pool.words(0, usize::try_from(pool.size() / 8).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::super::layout::{sibling_offset, NodeImage};
    use super::super::test_heap::heap;
    use super::super::{FastFairConfig, ShiftPolicy};
    use super::*;

    /// A reader that reached a leaf before it split (through a parent read earlier) finds the
    /// keys that moved right by following the sibling link on the high key.
    #[test]
    fn a_stale_leaf_sends_a_reader_to_its_sibling() {
        let heap = heap();
        let config = FastFairConfig {
            node_size: 128,
            policy: ShiftPolicy::Fast,
        };
        let tree = FastFair::create(&heap, heap.pool().root_offset(), config).unwrap();
        for k in 0..4 {
            tree.insert(k * 10, k).unwrap();
        }
        // The single leaf a reader would have found before the split.
        let leaf = tree.root_node().unwrap();
        tree.insert(35, 99).unwrap();
        assert_eq!(tree.height().unwrap(), 2, "the leaf split");
        let sibling = heap.pool().load_u64(sibling_offset(leaf)).unwrap();
        assert_ne!(sibling, 0);
        let read = |node: u64, key: u64| {
            let view = tree.view(node).unwrap();
            step::<true>(&view, key)
        };
        match read(leaf, 35) {
            Step::Next(next) => assert_eq!(next, sibling),
            Step::Leaf(_) => panic!("a key above the high key must go right"),
        }
        assert!(matches!(read(sibling, 35), Step::Leaf(Some(99))));
        assert!(matches!(read(leaf, 0), Step::Leaf(Some(0))));
    }

    /// A bad link met by a lookup (no merge running, so the structure version holds) is a
    /// typed error naming it, never a panic or an endless walk: a null link, a node past the
    /// pool's end, a misaligned node, and a child link back to the root (a cycle).
    #[test]
    fn a_bad_link_is_an_error_when_no_merge_ran() {
        use pmem_ordering::PoolError;
        use pmem_undo_log::TxError;

        let heap = heap();
        let config = FastFairConfig {
            node_size: 128,
            policy: ShiftPolicy::Fast,
        };
        let tree = FastFair::create(&heap, heap.pool().root_offset(), config).unwrap();
        for k in 1..=8 {
            tree.insert(k * 10, k).unwrap();
        }
        assert_eq!(tree.height().unwrap(), 2);
        let root = tree.root_node().unwrap();
        let good = tree.view(root).unwrap().image();
        // Key 10 is below every separator of the root: its walk takes the leftmost link.
        let with_leftmost = |link: u64| {
            let image = NodeImage {
                leftmost: link,
                ..good.clone()
            };
            let _written = heap.pool().write(root, &image.bytes(128)).unwrap();
            let got = tree.get(10);
            let _written = heap.pool().write(root, &good.bytes(128)).unwrap();
            got
        };
        let null = with_leftmost(0).unwrap_err();
        assert!(
            matches!(&null, FastFairError::Corrupt { reason, .. } if reason.contains("null link")),
            "{null}"
        );
        let past_end = heap.pool().size();
        assert!(matches!(
            with_leftmost(past_end).unwrap_err(),
            FastFairError::Tx(TxError::Pool(PoolError::OutOfBounds { offset, .. }))
                if offset == past_end
        ));
        assert!(matches!(
            with_leftmost(root + 4).unwrap_err(),
            FastFairError::Tx(TxError::Pool(PoolError::Misaligned { .. }))
        ));
        let cycle = with_leftmost(root).unwrap_err();
        assert!(
            matches!(&cycle, FastFairError::Corrupt { reason, .. } if reason.contains("does not end")),
            "{cycle}"
        );
        // The repaired root reads as before.
        assert_eq!(tree.get(10).unwrap(), Some(1));
    }

    /// A key below every key of its leaf has no slot: the search must not compute one (the
    /// fuzz target found `find` subtracting 1 from an upper bound of 0 under overflow checks).
    #[test]
    fn a_key_below_every_key_of_its_leaf_is_absent() {
        for policy in [ShiftPolicy::PerShift, ShiftPolicy::Fast, ShiftPolicy::Redo] {
            // A fresh heap each: create refuses a root in use.
            let heap = heap();
            let config = FastFairConfig {
                node_size: 128,
                policy,
            };
            let tree = FastFair::create(&heap, heap.pool().root_offset(), config).unwrap();
            for k in 10..14 {
                tree.insert(k, k + 100).unwrap();
            }
            assert_eq!(tree.get(5).unwrap(), None);
            assert_eq!(tree.remove(5).unwrap(), None);
            assert_eq!(tree.upsert(5, 1).unwrap(), None);
            assert_eq!(tree.remove(5).unwrap(), Some(1));
            assert_eq!(tree.len(), 4);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// The unrolled binary searches agree with a linear scan of the slots, for every node
        /// size, on sorted keys with neighbouring duplicates (the right copy wins) and free
        /// slots after them.
        #[test]
        fn the_in_node_search_matches_a_linear_model(
            mut keys in proptest::collection::vec(0u64..40, 0..252),
            probes in proptest::collection::vec(0u64..42, 1..16),
        ) {
            keys.sort_unstable();
            let heap = heap();
            // A node of the largest size, viewed as each size in turn.
            let at = heap
                .transaction(|tx| Ok::<_, pmem_undo_log::TxError>(tx.alloc(4096)?.offset()))
                .unwrap();
            for node_size in [128u64, 256, 512, 1024, 2048, 4096] {
                let capacity = super::super::layout::capacity(node_size);
                let used = &keys[..keys.len().min(capacity)];
                let entries: Vec<(u64, u64)> =
                    used.iter().enumerate().map(|(i, &k)| (k, 1000 + i as u64)).collect();
                let image = super::super::layout::NodeImage {
                    level: 1,
                    sibling: 0,
                    leftmost: 7,
                    high: EMPTY_KEY,
                    entries: entries.clone(),
                };
                let _written = heap.pool().write(at, &image.bytes(node_size)).unwrap();
                let view = NodeView::new(
                    heap.pool(),
                    at,
                    super::super::layout::NodeShape::of(node_size),
                )
                .unwrap();
                for &k in &probes {
                    let upper = entries.iter().filter(|e| e.0 <= k).count();
                    let lower = entries.iter().filter(|e| e.0 < k).count();
                    proptest::prop_assert_eq!(view.upper_bound(k), upper);
                    proptest::prop_assert_eq!(view.lower_bound(k), lower);
                    let value = entries.iter().rev().find(|e| e.0 == k).map(|e| e.1);
                    proptest::prop_assert_eq!(view.leaf_value(k), value);
                    let child = if upper == 0 { 7 } else { entries[upper - 1].1 };
                    proptest::prop_assert_eq!(view.child_for(k), child);
                }
                proptest::prop_assert_eq!(view.count(), entries.len());
            }
        }
    }
}
