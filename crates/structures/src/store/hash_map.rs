//! [`HashMap`]: a named hash map of typed keys and values.

use std::marker::PhantomData;
use std::sync::Arc;

use pmem_ordering::{Backend, Hardware};

use super::batch::{BatchMap, WriteBatch};
use super::codec::{decode, decode_word, encode_word, with_read_buffer, word_encoding};
use super::entries::HashEntries;
use super::error::Error;
use super::handle_methods::typed_map_methods;
use super::map::HashCore;
use super::record_map::RecordHashCore;
use super::types::{Encode, Key, Value};
use crate::records::hash::Iter as RecordIter;

/// A persistent hash map from `K` to `V` (CCEH, FAST'19 CCEH), named in a [`Store`].
///
/// Keys and values are the types of [`super::types`]: `u64` (the default), the other integers,
/// `[u8; N]`, [`super::types::Pod`] types, byte strings (`Vec<u8>`) and `String`. A map whose
/// key and value both fit 8 bytes keeps them in the table's slots; any other map keeps each
/// pair in a record of its own, published by the slot (its key's 64-bit hash and the record's
/// offset): an insert costs two fences (see [`crate::records`]).
///
/// Cheap to clone; `Send + Sync + 'static` for a store on a file, so clones go to threads,
/// tasks and a service's state. Each write is durable when it returns; lookups take no lock.
///
/// [`Store`]: super::Store
pub struct HashMap<K = u64, V = u64, B: Backend = Hardware> {
    pub(super) repr: HashRepr<B>,
    pub(super) types: PhantomData<fn() -> (K, V)>,
}

/// Where a hash map keeps its pairs.
pub(super) enum HashRepr<B: Backend> {
    /// Inline in `u64` slots.
    Words(Arc<HashCore<B>>),
    /// In records.
    Records(Arc<RecordHashCore<B>>),
}

impl<K, V, B: Backend> Clone for HashMap<K, V, B> {
    fn clone(&self) -> Self {
        HashMap {
            repr: match &self.repr {
                HashRepr::Words(core) => HashRepr::Words(core.clone()),
                HashRepr::Records(core) => HashRepr::Records(core.clone()),
            },
            types: PhantomData,
        }
    }
}

impl<K: Key, V: Value, B: Backend> HashMap<K, V, B> {
    typed_map_methods!(HashRepr);

    /// The map as a write batch names it.
    fn batch_map(&self) -> Result<BatchMap<B>, Error> {
        Ok(match &self.repr {
            HashRepr::Words(core) => BatchMap::HashWords(core.clone()),
            HashRepr::Records(core) => BatchMap::HashRecords(core.clone()),
        })
    }

    /// Every `(key, value)`, in no particular order, each `Ok` (or an error that ends the
    /// walk): a snapshot of each segment as it is read, so a write concurrent with the walk
    /// may or may not be seen. A map of records pins the epoch while the iterator lives: blocks
    /// of records retired meanwhile are reused only once it is dropped.
    pub fn iter(&self) -> HashIter<'_, K, V, B> {
        let inner = match &self.repr {
            HashRepr::Words(core) => HashIterRepr::Words(core.entries()),
            HashRepr::Records(core) => HashIterRepr::Records(core.raw.iter()),
        };
        HashIter {
            inner,
            name: self.name(),
            done: false,
            types: PhantomData,
        }
    }
}

/// The `(key, value)` pairs of a [`HashMap`] ([`HashMap::iter`]).
pub struct HashIter<'a, K, V, B: Backend> {
    inner: HashIterRepr<'a, B>,
    name: &'a str,
    done: bool,
    types: PhantomData<fn() -> (K, V)>,
}

enum HashIterRepr<'a, B: Backend> {
    Words(HashEntries),
    Records(RecordIter<'a, B>),
}

impl<K: Key, V: Value, B: Backend> Iterator for HashIter<'_, K, V, B> {
    type Item = Result<(K, V), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = match &mut self.inner {
            HashIterRepr::Words(entries) => entries.next()?.and_then(|(k, v)| {
                Ok((
                    decode_word(k, "key", self.name)?,
                    decode_word(v, "value", self.name)?,
                ))
            }),
            HashIterRepr::Records(records) => match records.next()? {
                Ok((k, v)) => decode(k, "key", self.name)
                    .and_then(|k| Ok((k, decode(v, "value", self.name)?))),
                Err(e) => Err(e.into()),
            },
        };
        self.done = item.is_err();
        Some(item)
    }
}
