//! [`EncodedRange`]: an ordered map's pairs in a range, each lent as its encoding until the
//! next one (the borrowed scan, as `get_with` is the borrowed read).

use std::marker::PhantomData;
use std::ops::ControlFlow;

use pmem_ordering::Backend;

use super::codec::word_width;
use super::entries::BTreeEntries;
use super::error::Error;
use super::leaf_tree::LeafCursor;
use super::types::{Key, LentPair, Value};
use crate::records::tree::Scan;

/// The `(key, value)` pairs of a [`BTreeMap`](super::BTreeMap) in a range, in key order, each
/// lent as its encoding (the bytes [`BTreeMap::get_into`](super::BTreeMap::get_into) writes: a
/// byte string's own bytes, an integer's big-endian bytes) until the next call of
/// [`EncodedRange::next_pair`]. Made by [`BTreeMap::range_encoded`](super::BTreeMap::range_encoded)
/// and [`BTreeMap::iter_encoded`](super::BTreeMap::iter_encoded).
///
/// Nothing is allocated per pair: a map of records copies each batch of pairs into one buffer
/// the scan reuses (and the thread's next scan takes over), a map of leaves likewise into the
/// range's own buffer, a map of words encodes each pair in place. It reads as
/// [`BTreeMap::range`](super::BTreeMap::range) does: every key present for the whole scan
/// seen once.
pub struct EncodedRange<'a, K, V, B: Backend> {
    inner: Lent<'a, B>,
    types: PhantomData<fn() -> (K, V)>,
}

// As for the typed iterator: the word tree's batches are the larger variant, and a range is
// made once and moved rarely.
#[allow(clippy::large_enum_variant)]
enum Lent<'a, B: Backend> {
    /// A map of words, and the encodings of the pair last lent.
    Words {
        entries: BTreeEntries<'a, B>,
        key: [u8; 8],
        value: [u8; 8],
    },
    /// A map of records.
    Records(Scan<'a, B>),
    /// A map of leaves.
    Leaves(LeafCursor<'a, B>),
}

impl<'a, K: Key, V: Value, B: Backend> EncodedRange<'a, K, V, B> {
    /// The pairs of a map of words.
    pub(super) fn words(entries: BTreeEntries<'a, B>) -> Self {
        EncodedRange {
            inner: Lent::Words {
                entries,
                key: [0; 8],
                value: [0; 8],
            },
            types: PhantomData,
        }
    }

    /// The pairs of a map of records.
    pub(super) fn records(scan: Scan<'a, B>) -> Self {
        EncodedRange {
            inner: Lent::Records(scan),
            types: PhantomData,
        }
    }

    /// The pairs of a map of leaves.
    pub(super) fn leaves(cursor: LeafCursor<'a, B>) -> Self {
        EncodedRange {
            inner: Lent::Leaves(cursor),
            types: PhantomData,
        }
    }

    /// The next pair's key and value encodings, lent until the next call; `None` at the
    /// range's end. An error ends the walk (`None` after it).
    #[inline]
    pub fn next_pair(&mut self) -> Option<Result<LentPair<'_>, Error>> {
        match &mut self.inner {
            Lent::Words {
                entries,
                key,
                value,
            } => match entries.next()? {
                Ok((k, v)) => {
                    *key = k.to_be_bytes();
                    *value = v.to_be_bytes();
                    Some(Ok((&key[..word_width::<K>()], &value[..word_width::<V>()])))
                }
                Err(e) => Some(Err(e)),
            },
            Lent::Records(scan) => Some(scan.next_pair()?.map_err(Error::from)),
            Lent::Leaves(cursor) => cursor.next_pair(),
        }
    }

    /// Lend each pair left to `visit`, in key order, until it breaks: what it broke with, or
    /// `None` if it saw every pair. An error ends the walk.
    pub fn visit<R>(
        mut self,
        mut visit: impl FnMut(&[u8], &[u8]) -> ControlFlow<R>,
    ) -> Result<Option<R>, Error> {
        while let Some(pair) = self.next_pair() {
            let (key, value) = pair?;
            if let ControlFlow::Break(r) = visit(key, value) {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }
}
