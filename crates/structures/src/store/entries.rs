//! The maps' iterators: the structure's own, in the store's error type, followed by the key
//! the structure reserves (whose value the catalog entry keeps) when it is in the map.

use std::sync::Arc;

use pmem_undo_log::Heap;

use super::error::Error;
use crate::cceh;
use crate::fastfair;

/// `(key, value)` pairs of a map, each `Ok`, or an error that ends the walk.
///
/// The reserved key's pair comes last: for the ordered map it is `u64::MAX`, the largest key,
/// so the order holds.
#[derive(Debug)]
pub struct Entries<I> {
    raw: I,
    last: Option<(u64, u64)>,
    done: bool,
}

/// The pairs of a [`HashMap`](super::HashMap), in no particular order.
pub type HashEntries = Entries<cceh::Iter>;

/// The pairs of a [`BTreeMap`](super::BTreeMap) in a range, in key order.
pub type BTreeEntries<'a, B, P> = Entries<fastfair::Range<'a, B, P, Arc<Heap<B, P>>>>;

impl<I> Entries<I> {
    pub(crate) fn new(raw: I, last: Option<(u64, u64)>) -> Entries<I> {
        Entries {
            raw,
            last,
            done: false,
        }
    }
}

impl<I, E> Iterator for Entries<I>
where
    I: Iterator<Item = Result<(u64, u64), E>>,
    Error: From<E>,
{
    type Item = Result<(u64, u64), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.raw.next() {
            Some(Ok(pair)) => Some(Ok(pair)),
            Some(Err(e)) => {
                self.done = true;
                Some(Err(Error::from(e)))
            }
            None => {
                self.done = true;
                self.last.take().map(Ok)
            }
        }
    }
}
