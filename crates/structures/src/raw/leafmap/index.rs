//! The DRAM index over the leaves: each leaf by its lower bound, the number of pairs. Bounds
//! are kept short (a split's is the shortest prefix of the upper half's first key that sorts
//! after the lower half's last, as a B+-tree's suffix truncation) and inline up to
//! [`INLINE`] bytes, so a search compares bytes held in the index's own nodes instead of
//! following a pointer per bound; and the leaves' states live in an arena beside the tree,
//! which holds their numbers: its nodes stay small, and a million keys' tree fits in the
//! caches. Each leaf's number also names its successor in a dense array beside the arena: a
//! scan descends the tree once, to its first leaf, and walks on through these links.
//!
//! Beside them, each leaf's number by where its block lies in the pool ([`Blocks`]): a scan
//! that starts at a key present finds the key's slot through the hash index and its leaf
//! from the slot's offset, without descending the tree (at a million keys, the descent's
//! misses were a fifth of a 100-pair scan).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Bound;

use super::keys::KeyIndex;
use super::leaf::Leaf;

/// Bytes of a bound kept inline.
const INLINE: usize = 22;

/// The last leaf's successor: none.
const LAST: u32 = u32::MAX;

/// The DRAM index: every leaf by its lower bound (the first leaf's is the empty key), and the
/// number of pairs.
#[derive(Default)]
pub(crate) struct Index {
    /// Each leaf's number in `arena`, by its bound.
    bounds: BTreeMap<LeafBound, u32>,
    arena: Vec<Leaf>,
    /// Each leaf's successor in key order, by number in `arena` ([`LAST`] for the last
    /// leaf): kept by [`Index::insert`] and [`Index::remove`], which every change of the
    /// leaves goes through.
    next: Vec<u32>,
    /// Numbers of `arena` no leaf has.
    unused: Vec<u32>,
    pub len: u64,
    /// Every live, undamaged slot by its key's hash: the point reads' way in.
    pub keys: KeyIndex,
    /// Leaves with slots found damaged at open: while there are none, a key the hash index
    /// lacks is absent without a look at its leaf.
    pub damaged_leaves: usize,
    /// Times the index was taken to change (each [`super::LeafMap::write`]): a scan resumes
    /// its next batch where the last stopped, without a search, while this is unchanged.
    pub generation: u64,
    /// Each leaf's number by its block's place in the pool: kept by [`Index::insert`] and
    /// [`Index::remove`] as the successor links are.
    blocks: Blocks,
}

impl Index {
    /// An empty index of leaves of `leaf_bytes` bytes (an index made with
    /// [`Index::default`] keeps no leaf by its block: [`Index::holding`] finds none).
    pub fn new(leaf_bytes: u64) -> Index {
        Index {
            blocks: Blocks::new(leaf_bytes),
            ..Index::default()
        }
    }

    /// The leaf whose block holds the pool offset `at`, with its number, if the index has
    /// one: a hash lookup, no search of the tree.
    #[inline]
    pub fn holding(&self, at: u64) -> Option<(u32, &Leaf)> {
        self.blocks.holding(at, &self.arena)
    }

    /// The leaf whose range holds `key`, with its bound.
    pub fn leaf_of(&self, key: &[u8]) -> Option<(&LeafBound, &Leaf)> {
        let (bound, &id) = self
            .bounds
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        Some((bound, &self.arena[id as usize]))
    }

    /// The leaf whose range holds `key`, with its number (for [`Index::chain`]).
    pub fn locate(&self, key: &[u8]) -> Option<(u32, &Leaf)> {
        let (_, &id) = self
            .bounds
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        Some((id, &self.arena[id as usize]))
    }

    /// The leaves from number `id` on, in key order, through the successor links: no search.
    pub fn chain(&self, id: u32) -> Chain<'_> {
        Chain { index: self, id }
    }

    /// The first leaf's number.
    pub fn first(&self) -> Option<u32> {
        self.bounds.values().next().copied()
    }

    /// The leaf whose range holds `key`, to change, with its bound.
    pub fn leaf_of_mut(&mut self, key: &[u8]) -> Option<(&LeafBound, &mut Leaf)> {
        let (bound, &id) = self
            .bounds
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        Some((bound, &mut self.arena[id as usize]))
    }

    /// The leaf whose bound is `bound`.
    pub fn get(&self, bound: &[u8]) -> Option<&Leaf> {
        Some(&self.arena[*self.bounds.get(bound)? as usize])
    }

    /// The leaf whose bound is `bound`, to change.
    pub fn get_mut(&mut self, bound: &[u8]) -> Option<&mut Leaf> {
        Some(&mut self.arena[*self.bounds.get(bound)? as usize])
    }

    /// The leaf before the one whose bound is `bound`.
    pub fn before(&self, bound: &[u8]) -> Option<&Leaf> {
        let (_, &id) = self
            .bounds
            .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(bound)))
            .next_back()?;
        Some(&self.arena[id as usize])
    }

    /// The leaves from the one whose bound is `bound` on, in key order.
    pub fn from(&self, bound: &[u8]) -> impl Iterator<Item = (&LeafBound, &Leaf)> + Clone + '_ {
        self.bounds
            .range::<[u8], _>((Bound::Included(bound), Bound::Unbounded))
            .map(|(b, &id)| (b, &self.arena[id as usize]))
    }

    /// Every leaf, in key order.
    pub fn leaves(&self) -> impl Iterator<Item = &Leaf> + '_ {
        self.bounds.values().map(|&id| &self.arena[id as usize])
    }

    /// Number of leaves.
    pub fn count(&self) -> usize {
        self.bounds.len()
    }

    /// Add `leaf` under `bound` (in place of the leaf that had it, if one did), linked
    /// between its neighbours in key order.
    pub fn insert(&mut self, bound: LeafBound, leaf: Leaf) {
        let id = match self.unused.pop() {
            Some(id) => {
                self.arena[id as usize] = leaf;
                id
            }
            None => {
                if self.arena.len() == self.arena.capacity() {
                    self.grow();
                }
                self.arena.push(leaf);
                self.next.push(LAST);
                (self.arena.len() - 1) as u32
            }
        };
        let key = bound.as_slice();
        let before = self
            .bounds
            .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(key)))
            .next_back()
            .map(|(_, &b)| b);
        let after = self
            .bounds
            .range::<[u8], _>((Bound::Excluded(key), Bound::Unbounded))
            .next()
            .map_or(LAST, |(_, &a)| a);
        self.next[id as usize] = after;
        if let Some(before) = before {
            self.next[before as usize] = id;
        }
        self.blocks.add(id, self.arena[id as usize].offset);
        if let Some(old) = self.bounds.insert(bound, id) {
            self.blocks.forget(old, self.arena[old as usize].offset);
            self.unused.push(old);
        }
    }

    /// Take out the leaf whose bound is `bound`, its predecessor linked to its successor.
    pub fn remove(&mut self, bound: &[u8]) {
        if let Some(id) = self.bounds.remove(bound) {
            let before = self
                .bounds
                .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(bound)))
                .next_back()
                .map(|(_, &b)| b);
            if let Some(before) = before {
                self.next[before as usize] = self.next[id as usize];
            }
            self.next[id as usize] = LAST;
            self.blocks.forget(id, self.arena[id as usize].offset);
            self.unused.push(id);
        }
    }

    /// Where the successor links disagree with the bounds' order, if they do (for
    /// `verify()`): walked from the first leaf, they must name every leaf of the tree, in
    /// its order, and end there.
    pub fn links_disagree(&self) -> Option<String> {
        let mut linked = self.first().map(|first| self.chain(first));
        for (place, (bound, &id)) in self.bounds.iter().enumerate() {
            match linked.as_mut().and_then(|c| c.next()) {
                Some((got, _)) if got == id => {}
                got => {
                    return Some(format!(
                        "leaf {place} in key order (bound {bound:?}) is number {id}, the \
                         successor links give {:?}",
                        got.map(|(g, _)| g)
                    ))
                }
            }
        }
        linked.and_then(|mut c| c.next()).map(|(extra, _)| {
            format!("the successor links run past the last leaf, to number {extra}")
        })
    }

    /// Where the leaves by block disagree with the bounds, if they do (for `verify()`): each
    /// leaf of the tree must be found at its block's first and last byte.
    pub fn blocks_disagree(&self) -> Option<String> {
        let last = self.blocks.leaf_bytes.checked_sub(1)?;
        self.bounds.iter().find_map(|(bound, &id)| {
            let offset = self.arena[id as usize].offset;
            [offset, offset + last].into_iter().find_map(|at| {
                let found = self.holding(at).map(|(got, _)| got);
                (found != Some(id)).then(|| {
                    format!(
                        "the leaf of bound {bound:?} (number {id}, block {offset:#x}) is not \
                         found by its block's byte {at:#x}: {found:?} is"
                    )
                })
            })
        })
    }

    /// Make room for twice as many leaf states, in a new allocation asked for 2 MiB pages
    /// before it is touched (see [`advise_huge_pages`]).
    fn grow(&mut self) {
        let capacity = (self.arena.capacity() * 2).max(16);
        let mut bigger = Vec::with_capacity(capacity);
        advise_huge_pages(&bigger);
        bigger.append(&mut self.arena);
        self.arena = bigger;
    }
}

/// Leaves' numbers by where their blocks lie: the pool cut into spans of `1 << shift` bytes,
/// the first power of two at least a leaf block's size, each span with the numbers of the
/// (at most three) leaves whose blocks meet it. A block meets one span or two; the leaf
/// holding an offset is among those of the offset's span, checked against each one's
/// offset. Blocks never overlap, so the one found is the only one.
#[derive(Default)]
struct Blocks {
    leaf_bytes: u64,
    shift: u32,
    spans: HashMap<u64, [u32; 3], BuildHasherDefault<SpanHasher>>,
}

impl Blocks {
    fn new(leaf_bytes: u64) -> Blocks {
        Blocks {
            leaf_bytes,
            shift: leaf_bytes.max(1).next_power_of_two().trailing_zeros(),
            spans: HashMap::default(),
        }
    }

    /// The spans the block at `offset` meets: none when the index keeps no blocks.
    fn spans_of(&self, offset: u64) -> impl Iterator<Item = u64> {
        let (last, shift) = (self.leaf_bytes.checked_sub(1), self.shift);
        last.into_iter()
            .flat_map(move |last| offset >> shift..=(offset + last) >> shift)
    }

    fn add(&mut self, id: u32, offset: u64) {
        for span in self.spans_of(offset) {
            let ids = self.spans.entry(span).or_insert([LAST; 3]);
            // Room always: no more than three blocks meet a span (see the type's docs). Were
            // there none, the leaf would only be found by a search of the tree.
            if let Some(free) = ids.iter_mut().find(|i| **i == LAST) {
                *free = id;
            }
        }
    }

    fn forget(&mut self, id: u32, offset: u64) {
        for span in self.spans_of(offset) {
            if let Some(ids) = self.spans.get_mut(&span) {
                for i in ids.iter_mut().filter(|i| **i == id) {
                    *i = LAST;
                }
                if ids.iter().all(|&i| i == LAST) {
                    self.spans.remove(&span);
                }
            }
        }
    }

    #[inline]
    fn holding<'a>(&self, at: u64, arena: &'a [Leaf]) -> Option<(u32, &'a Leaf)> {
        if self.leaf_bytes == 0 {
            return None;
        }
        let ids = self.spans.get(&(at >> self.shift))?;
        ids.iter().find_map(|&id| {
            let leaf = arena.get(id as usize)?;
            (leaf.offset <= at && at - leaf.offset < self.leaf_bytes).then_some((id, leaf))
        })
    }
}

/// The hash of a span's number: one multiply, folded (the spans' numbers are dense small
/// integers, which a multiply spreads over every bit the table reads).
#[derive(Default)]
struct SpanHasher(u64);

impl Hasher for SpanHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        let folded = u128::from(n ^ self.0) * 0x9e37_79b9_7f4a_7c15;
        self.0 = (folded as u64) ^ ((folded >> 64) as u64);
    }
}

/// The leaves from one on, in key order, by their successor links.
#[derive(Clone)]
pub(crate) struct Chain<'i> {
    index: &'i Index,
    id: u32,
}

impl<'i> Chain<'i> {
    /// The leaf [`Chain::next`] would give, without moving on; the line of its successor
    /// link is asked for, so the step past it later does not wait for it.
    #[inline]
    pub fn following(&self) -> Option<&'i Leaf> {
        let leaf = self.index.arena.get(self.id as usize)?;
        if let Some(link) = self.index.next.get(self.id as usize) {
            pmem_ordering::isa::prefetch_line((link as *const u32).cast());
        }
        Some(leaf)
    }
}

impl<'i> Iterator for Chain<'i> {
    type Item = (u32, &'i Leaf);

    #[inline]
    fn next(&mut self) -> Option<(u32, &'i Leaf)> {
        let id = self.id;
        let leaf = self.index.arena.get(id as usize)?;
        self.id = self.index.next[id as usize];
        Some((id, leaf))
    }
}

/// Ask for transparent huge pages (2 MiB) behind the whole pages of `arena`'s allocation
/// when it spans at least one: a scan at 10M keys reads leaf states spread over 176 MB, and
/// with 4 KiB pages each one is a TLB miss and a page walk. A hint, and only that: where
/// the host has transparent huge pages off, or in `never` mode, nothing changes.
fn advise_huge_pages(arena: &Vec<Leaf>) {
    const PAGE: usize = 4096;
    let start = arena.as_ptr() as usize;
    let end = start + arena.capacity() * std::mem::size_of::<Leaf>();
    let (first, last) = (start.next_multiple_of(PAGE), end / PAGE * PAGE);
    if last < first + (2 << 20) {
        return;
    }
    // SAFETY: `[first, last)` is whole pages inside `arena`'s own allocation, which this
    // function does not read or write; madvise(MADV_HUGEPAGE) changes no byte of memory and
    // no access right, it only lets the kernel back the range with huge pages (copying
    // what it holds when it collapses pages). Its result is ignored: a refusal leaves
    // 4 KiB pages, which work the same.
    unsafe {
        libc::madvise(
            first as *mut libc::c_void,
            last - first,
            libc::MADV_HUGEPAGE,
        );
    }
}

/// A leaf's lower bound: a byte string, inline when short.
#[derive(Clone)]
pub(crate) enum LeafBound {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl LeafBound {
    pub fn new(bound: &[u8]) -> LeafBound {
        if bound.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..bound.len()].copy_from_slice(bound);
            LeafBound::Inline {
                len: bound.len() as u8,
                bytes,
            }
        } else {
            LeafBound::Heap(bound.into())
        }
    }

    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match self {
            LeafBound::Inline { len, bytes } => &bytes[..*len as usize],
            LeafBound::Heap(bytes) => bytes,
        }
    }
}

impl Borrow<[u8]> for LeafBound {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for LeafBound {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for LeafBound {}

impl PartialOrd for LeafBound {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for LeafBound {
    /// As the bytes: what `Borrow<[u8]>` requires.
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl fmt::Debug for LeafBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_slice())
    }
}

/// The shortest prefix of `right` that sorts after `left`, for `left < right`: a bound
/// between them.
pub(crate) fn separator<'k>(left: &[u8], right: &'k [u8]) -> &'k [u8] {
    let common = left.iter().zip(right).take_while(|(a, b)| a == b).count();
    &right[..(common + 1).min(right.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_are_short_and_between() {
        let cases: [(&[u8], &[u8], &[u8]); 4] = [
            (b"apple", b"banana", b"b"),
            (b"user:0001", b"user:0002", b"user:0002"),
            (b"ab", b"abc", b"abc"),
            (b"", b"\0", b"\0"),
        ];
        for (left, right, want) in cases {
            let s = separator(left, right);
            assert_eq!(s, want);
            assert!(left < s && s <= right);
        }
        let long = LeafBound::new(&[b'b'; 40]);
        let short = LeafBound::new(b"abc");
        assert!(matches!(long, LeafBound::Heap(_)) && matches!(short, LeafBound::Inline { .. }));
        assert!(short < long && long.as_slice() == [b'b'; 40]);
    }

    /// The leaves' offsets as the successor links give them, from the first.
    fn linked(index: &Index) -> Vec<u64> {
        let first = index.first().expect("a first leaf");
        index.chain(first).map(|(_, leaf)| leaf.offset).collect()
    }

    proptest::proptest! {
        /// Leaves added (some in place of the leaf a bound had) and taken out in any order:
        /// the successor links name every leaf in the bounds' order, as a `BTreeMap` of the
        /// same bounds does, and a scan's walk from any leaf is the tail of that order.
        #[test]
        fn successor_links_follow_the_bounds_order(
            ops in proptest::collection::vec((proptest::bool::weighted(0.7), 0u8..24), 1..120)
        ) {
            let mut index = Index::default();
            let mut model = BTreeMap::new();
            index.insert(LeafBound::new(&[]), Leaf::empty(1));
            model.insert(Vec::new(), 1u64);
            for (i, &(add, b)) in ops.iter().enumerate() {
                let bound = vec![b'a' + b];
                let offset = 64 * (i as u64 + 2);
                if add {
                    index.insert(LeafBound::new(&bound), Leaf::empty(offset));
                    model.insert(bound, offset);
                } else {
                    index.remove(&bound);
                    model.remove(&bound);
                }
                proptest::prop_assert_eq!(index.links_disagree(), None);
                let want: Vec<u64> = model.values().copied().collect();
                proptest::prop_assert_eq!(&linked(&index), &want);
                let (key, _) = model.iter().nth(i % model.len()).unwrap();
                let (id, leaf) = index.locate(key).unwrap();
                let tail: Vec<u64> = index.chain(id).map(|(_, l)| l.offset).collect();
                proptest::prop_assert_eq!(leaf.offset, model[key]);
                proptest::prop_assert_eq!(&tail[..], &want[i % model.len()..]);
            }
        }
    }

    #[test]
    fn a_broken_successor_link_is_found() {
        let mut index = Index::default();
        for (i, bound) in [&b""[..], b"b", b"c", b"d"].into_iter().enumerate() {
            index.insert(LeafBound::new(bound), Leaf::empty(64 * (i as u64 + 1)));
        }
        assert_eq!(index.links_disagree(), None);
        assert_eq!(linked(&index), [64, 128, 192, 256]);
        // "b"'s leaf skipping "c"'s: a scan would miss its pairs.
        let (b, _) = index.locate(b"b").unwrap();
        let (d, _) = index.locate(b"d").unwrap();
        index.next[b as usize] = d;
        assert!(index.links_disagree().is_some());
        // The last leaf linked back to the first: a scan would never end.
        index.remove(b"c");
        assert_eq!(index.links_disagree(), None);
        index.next[d as usize] = index.first().unwrap();
        assert!(index.links_disagree().is_some());
    }
}
