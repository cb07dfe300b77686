//! The DRAM index over the leaves: each leaf by its lower bound, the number of pairs. Bounds
//! are kept short (a split's is the shortest prefix of the upper half's first key that sorts
//! after the lower half's last, as a B+-tree's suffix truncation) and inline up to
//! [`INLINE`] bytes, so a search compares bytes held in the index's own nodes instead of
//! following a pointer per bound; and the leaves' states live in an arena beside the tree,
//! which holds their numbers: its nodes stay small, and a million keys' tree fits in the
//! caches.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;

use super::keys::KeyIndex;
use super::leaf::Leaf;

/// Bytes of a bound kept inline.
const INLINE: usize = 22;

/// The DRAM index: every leaf by its lower bound (the first leaf's is the empty key), and the
/// number of pairs.
#[derive(Default)]
pub(crate) struct Index {
    /// Each leaf's number in `arena`, by its bound.
    bounds: BTreeMap<LeafBound, u32>,
    arena: Vec<Leaf>,
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
}

impl Index {
    /// The leaf whose range holds `key`, with its bound.
    pub fn leaf_of(&self, key: &[u8]) -> Option<(&LeafBound, &Leaf)> {
        let (bound, &id) = self
            .bounds
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        Some((bound, &self.arena[id as usize]))
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

    /// Add `leaf` under `bound`.
    pub fn insert(&mut self, bound: LeafBound, leaf: Leaf) {
        let id = match self.unused.pop() {
            Some(id) => {
                self.arena[id as usize] = leaf;
                id
            }
            None => {
                self.arena.push(leaf);
                (self.arena.len() - 1) as u32
            }
        };
        if let Some(old) = self.bounds.insert(bound, id) {
            self.unused.push(old);
        }
    }

    /// Take out the leaf whose bound is `bound`.
    pub fn remove(&mut self, bound: &[u8]) {
        if let Some(id) = self.bounds.remove(bound) {
            self.unused.push(id);
        }
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
}
