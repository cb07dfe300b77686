//! [`BTreeMap`]: a named ordered map of typed keys and values.

use std::marker::PhantomData;
use std::ops::{Bound, ControlFlow, RangeBounds};
use std::sync::Arc;

use pmem_ordering::{Backend, Hardware};

use super::batch::{BatchMap, WriteBatch};
use super::codec::{decode, decode_word, encode_word, with_read_buffer, word_encoding};
use super::encoded_range::EncodedRange;
use super::entries::BTreeEntries;
use super::error::Error;
use super::handle_methods::typed_map_methods;
use super::leaf_tree::{visit_range, LeafCursor, LeafTreeCore};
use super::map::TreeCore;
use super::record_map::RecordTreeCore;
use super::tree_layout::BTreeLayout;
use super::types::{Encode, Encoded, Key, Value};
use crate::fastfair::FastFairConfig;
use crate::records::tree::Scan;

/// A persistent ordered map from `K` to `V`, named in a [`Store`].
///
/// Keys are walked in their type's order: numeric for the integers (negative numbers first
/// for the signed ones), lexicographic for byte strings and `String`s. The map's layout is
/// chosen when it is made ([`BTreeLayout`], recorded in the store):
///
/// * [`BTreeLayout::Trees`], the default: FAST&FAIR (FAST'18 FAST&FAIR). A map whose key and
///   value both fit 8 bytes keeps them in the tree's slots; any other map is a trie of trees
///   keyed by 7 key bytes each whose entries point at records (see [`crate::records`]).
///   Lookups and scans take no lock.
/// * [`BTreeLayout::Leaves`]: pairs inline in persistent leaves, inner nodes in DRAM rebuilt
///   at open ([`crate::leafmap`]): scans read each leaf's pairs from one block. Lookups and
///   scans share a map-wide lock that each write takes alone (for its two fences, or a
///   write batch for its apply).
///
/// Both layouts give the same answers to every method. Cheap to clone; `Send + Sync +
/// 'static` for a store on a file. Each write is durable when it returns.
///
/// [`Store`]: super::Store
pub struct BTreeMap<K = u64, V = u64, B: Backend = Hardware> {
    pub(super) repr: TreeRepr<B>,
    pub(super) types: PhantomData<fn() -> (K, V)>,
}

/// Where an ordered map keeps its pairs.
pub(super) enum TreeRepr<B: Backend> {
    /// Inline in `u64` slots.
    Words(Arc<TreeCore<B>>),
    /// In records.
    Records(Arc<RecordTreeCore<B>>),
    /// Inline in leaves.
    Leaves(Arc<LeafTreeCore<B>>),
}

impl<K, V, B: Backend> Clone for BTreeMap<K, V, B> {
    fn clone(&self) -> Self {
        BTreeMap {
            repr: match &self.repr {
                TreeRepr::Words(core) => TreeRepr::Words(core.clone()),
                TreeRepr::Records(core) => TreeRepr::Records(core.clone()),
                TreeRepr::Leaves(core) => TreeRepr::Leaves(core.clone()),
            },
            types: PhantomData,
        }
    }
}

impl<K: Key, V: Value, B: Backend> BTreeMap<K, V, B> {
    typed_map_methods!(TreeRepr, Leaves);

    /// The map as a write batch names it.
    fn batch_map(&self) -> Result<BatchMap<B>, Error> {
        Ok(match &self.repr {
            TreeRepr::Words(core) => BatchMap::TreeWords(core.clone()),
            TreeRepr::Records(core) => BatchMap::TreeRecords(core.clone()),
            TreeRepr::Leaves(core) => BatchMap::TreeLeaves(core.clone()),
        })
    }

    /// The layout the map was created with (recorded in the store): for trees, the node size
    /// and shift policy of the tree (of each layer, for a map of records); for leaves, their
    /// shape.
    pub fn layout(&self) -> BTreeLayout {
        match &self.repr {
            TreeRepr::Words(core) => BTreeLayout::Trees(FastFairConfig {
                node_size: core.raw.node_size(),
                policy: core.raw.policy(),
            }),
            TreeRepr::Records(core) => BTreeLayout::Trees(core.raw.config()),
            TreeRepr::Leaves(core) => BTreeLayout::Leaves(core.raw.config()),
        }
    }

    /// Every `(key, value)` in key order, each `Ok` (or an error that ends the walk).
    pub fn iter(&self) -> BTreeIter<'_, K, V, B> {
        self.scan(Bound::Unbounded, Bound::Unbounded)
    }

    /// The `(key, value)`s with keys in `range`, in key order, each `Ok` (or an error that
    /// ends the walk): `map.range("user:".."user;")` is every key starting with `user:`. A
    /// scan beside writers sees every key present for its whole duration, and each key once.
    /// Trees are read without a lock, and a scan of a map of records pins the epoch while it
    /// lives (see [`super::HashMap::iter`]); leaves are copied a few dozen pairs at a time
    /// under the map's lock, which is let go in between.
    #[inline]
    pub fn range<A: Encode<K>, R: RangeBounds<A>>(&self, range: R) -> BTreeIter<'_, K, V, B> {
        // Encoded in place (no allocation): a map of words takes the words, one of records
        // copies what it keeps.
        let (start, end) = encoded_bounds(&range);
        self.scan(
            start.as_ref().map(Encoded::bytes),
            end.as_ref().map(Encoded::bytes),
        )
    }

    /// The `(key, value)`s with keys in `range`, in key order, each lent to `visit` as its
    /// encoding (what [`Self::get_into`] writes: a byte string's own bytes, an integer's
    /// big-endian bytes) until `visit` breaks: what it broke with, or `None` if it saw every
    /// pair. The borrowed scan, as [`Self::get_with`] is the borrowed read: no allocation per
    /// pair (see [`EncodedRange`]), read as [`Self::range`] reads. An error ends the walk.
    ///
    /// ```
    /// use std::ops::ControlFlow;
    /// # use pmem_structures::{Store, StoreOptions};
    /// # fn main() -> Result<(), pmem_structures::Error> {
    /// # let store = Store::anonymous(8 << 20, &StoreOptions::new())?;
    /// let users = store.btree_map::<String, String>("users")?;
    /// users.insert("user:1", "ada")?;
    /// users.insert("user:2", "brian")?;
    /// let mut bytes = 0;
    /// users.range_with("user:".."user;", |_key, value| {
    ///     bytes += value.len();
    ///     ControlFlow::<()>::Continue(())
    /// })?;
    /// assert_eq!(bytes, 8);
    /// let long = users.range_with("user:".."user;", |key, value| match value.len() > 3 {
    ///     true => ControlFlow::Break(key.to_vec()),
    ///     false => ControlFlow::Continue(()),
    /// })?;
    /// assert_eq!(long.as_deref(), Some(&b"user:2"[..]));
    /// # Ok(())
    /// # }
    /// ```
    pub fn range_with<A: Encode<K>, Rg: RangeBounds<A>, R>(
        &self,
        range: Rg,
        visit: impl FnMut(&[u8], &[u8]) -> ControlFlow<R>,
    ) -> Result<Option<R>, Error> {
        if let TreeRepr::Leaves(core) = &self.repr {
            let (start, end) = encoded_bounds(&range);
            let (start, end) = (
                start.as_ref().map(Encoded::bytes),
                end.as_ref().map(Encoded::bytes),
            );
            return visit_range(&core.raw, start, end, visit);
        }
        self.range_encoded(range).visit(visit)
    }

    /// Every `(key, value)` in key order, lent to `visit` ([`Self::range_with`] over all
    /// keys).
    pub fn iter_with<R>(
        &self,
        visit: impl FnMut(&[u8], &[u8]) -> ControlFlow<R>,
    ) -> Result<Option<R>, Error> {
        if let TreeRepr::Leaves(core) = &self.repr {
            return visit_range(&core.raw, Bound::Unbounded, Bound::Unbounded, visit);
        }
        self.iter_encoded().visit(visit)
    }

    /// The `(key, value)`s with keys in `range`, in key order, each lent as its encoding by
    /// [`EncodedRange::next_pair`] until the next call: [`Self::range_with`] as a cursor the
    /// caller steps (and may stop or drop at any pair).
    #[inline]
    pub fn range_encoded<A: Encode<K>, R: RangeBounds<A>>(
        &self,
        range: R,
    ) -> EncodedRange<'_, K, V, B> {
        let (start, end) = encoded_bounds(&range);
        let (start, end) = (
            start.as_ref().map(Encoded::bytes),
            end.as_ref().map(Encoded::bytes),
        );
        match &self.repr {
            TreeRepr::Words(core) => EncodedRange::words(
                core.range_entries((start.map(encode_word), end.map(encode_word))),
            ),
            TreeRepr::Records(core) => EncodedRange::records(core.raw.range(start, end)),
            TreeRepr::Leaves(core) => EncodedRange::leaves(LeafCursor::new(&core.raw, start, end)),
        }
    }

    /// Every `(key, value)` in key order, lent ([`Self::range_encoded`] over all keys).
    pub fn iter_encoded(&self) -> EncodedRange<'_, K, V, B> {
        match &self.repr {
            TreeRepr::Words(core) => {
                EncodedRange::words(core.range_entries((Bound::Unbounded, Bound::Unbounded)))
            }
            TreeRepr::Records(core) => EncodedRange::records(core.raw.iter()),
            TreeRepr::Leaves(core) => EncodedRange::leaves(LeafCursor::new(
                &core.raw,
                Bound::Unbounded,
                Bound::Unbounded,
            )),
        }
    }

    #[inline]
    fn scan(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> BTreeIter<'_, K, V, B> {
        let inner = match &self.repr {
            TreeRepr::Words(core) => TreeIterRepr::Words(
                core.range_entries((start.map(encode_word), end.map(encode_word))),
            ),
            TreeRepr::Records(core) => TreeIterRepr::Records(core.raw.range(start, end)),
            TreeRepr::Leaves(core) => TreeIterRepr::Leaves(LeafCursor::new(&core.raw, start, end)),
        };
        BTreeIter {
            inner,
            name: self.name(),
            done: false,
            error: None,
            types: PhantomData,
        }
    }
}

/// The encodings of `range`'s bounds (in place: no allocation).
#[inline(always)]
fn encoded_bounds<'r, K: Key, A: Encode<K> + 'r, R: RangeBounds<A>>(
    range: &'r R,
) -> (Bound<Encoded<'r>>, Bound<Encoded<'r>>) {
    (
        range.start_bound().map(|a| a.encode()),
        range.end_bound().map(|a| a.encode()),
    )
}

/// The `(key, value)` pairs of a [`BTreeMap`] in a range, in key order.
pub struct BTreeIter<'a, K, V, B: Backend> {
    inner: TreeIterRepr<'a, B>,
    name: &'a str,
    /// A walk of records or leaves met an error (a map of words' entries stop by themselves).
    done: bool,
    /// The error that ended the walk, until `next` returns it. Kept here rather than returned
    /// by the out-of-line paths: `next`'s item then comes from registers and a field, never
    /// from a call writing a whole `Result` (which keeps the item in memory in the caller's
    /// loop, a dozen loads and stores a pair).
    error: Option<Error>,
    types: PhantomData<fn() -> (K, V)>,
}

// The word tree's scan (a walk, the leaf it stands in, a batch buffer) is the larger; an
// iterator is made once per range and moved rarely, so the size difference is kept rather than
// boxed.
#[allow(clippy::large_enum_variant)]
enum TreeIterRepr<'a, B: Backend> {
    Words(BTreeEntries<'a, B>),
    Records(Scan<'a, B>),
    Leaves(LeafCursor<'a, B>),
}

/// The typed pair of a map of words' `(key, value)` words; an error ends the walk.
#[inline(always)]
fn decode_words<K: Key, V: Value, B: Backend>(
    entries: &mut BTreeEntries<'_, B>,
    (k, v): (u64, u64),
    name: &str,
) -> Result<(K, V), Error> {
    // Free for the integers: the word is the encoding (see `types::from_word`).
    let pair = decode_word(k, "key", name).and_then(|k| Ok((k, decode_word(v, "value", name)?)));
    if pair.is_err() {
        entries.stop();
    }
    pair
}

impl<K: Key, V: Value, B: Backend> BTreeIter<'_, K, V, B> {
    /// `next` past its inlined case: a map of words' next leaf, or a map of records or of
    /// leaves. `None` at the end, or on an error, left in `error`.
    #[inline(never)]
    fn next_slow(&mut self) -> Option<(K, V)> {
        if self.done {
            return None;
        }
        let item = match &mut self.inner {
            TreeIterRepr::Words(entries) => match entries.next_after_leaf() {
                Some(pair) => decode_words(entries, pair, self.name),
                None => match entries.take_error() {
                    Some(e) => Err(e),
                    None => return None,
                },
            },
            TreeIterRepr::Records(scan) => match scan.next()? {
                Ok((k, v)) => decode(k, "key", self.name)
                    .and_then(|k| Ok((k, decode(v, "value", self.name)?))),
                Err(e) => Err(e.into()),
            },
            TreeIterRepr::Leaves(cursor) => match cursor.next_pair()? {
                Ok((k, v)) => decode(k.to_vec(), "key", self.name)
                    .and_then(|k| Ok((k, decode(v.to_vec(), "value", self.name)?))),
                Err(e) => Err(e),
            },
        };
        match item {
            Ok(pair) => Some(pair),
            Err(e) => {
                self.done = true;
                self.error = Some(e);
                None
            }
        }
    }
}

impl<K: Key, V: Value, B: Backend> Iterator for BTreeIter<'_, K, V, B> {
    type Item = Result<(K, V), Error>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        // The common case first: a pair of the leaf a map of words holds in hand.
        if let TreeIterRepr::Words(entries) = &mut self.inner {
            if let Some(pair) = entries.next_buffered() {
                return Some(decode_words(entries, pair, self.name));
            }
        }
        match self.next_slow() {
            Some(pair) => Some(Ok(pair)),
            None => self.error.take().map(Err),
        }
    }
}
