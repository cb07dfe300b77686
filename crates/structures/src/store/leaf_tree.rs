//! The shared state of an ordered map in the leaf layout ([`crate::leafmap`]), and its scans
//! as the handles walk them: [`LeafCursor`] copies the pairs of a range a chunk at a time
//! through the leaf map's lending scan, then lends them one by one (for
//! [`EncodedRange`](super::EncodedRange)) or decodes them (for [`BTreeIter`](super::BTreeIter)).

use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use pmem_ordering::Backend;

use super::catalog::Listed;
use super::error::Error;
use super::raw::LeafTree;
use super::registry::{Core, Shared};
use super::types::LentPair;
use crate::sync::{WriteSection, WriterGate};

/// An ordered map of the leaf layout: its shared state.
pub(crate) struct LeafTreeCore<B: Backend> {
    pub(super) raw: LeafTree<B>,
    pub(super) name: String,
    /// Keeps the store (heap, file, lock) alive as long as a handle is.
    pub(super) shared: Arc<Shared<B>>,
    /// Keeps single writers out while a write batch holds the map (`batch/`).
    pub(super) gate: WriterGate,
}

impl<B: Backend> Core<B> for LeafTreeCore<B> {
    type Raw = LeafTree<B>;
    fn wrap(
        raw: LeafTree<B>,
        _listed: &Listed,
        name: &str,
        shared: Arc<Shared<B>>,
    ) -> Result<Self, Error> {
        Ok(LeafTreeCore {
            raw,
            name: name.to_string(),
            shared,
            gate: WriterGate::new(),
        })
    }
    fn raw(&self) -> &LeafTree<B> {
        &self.raw
    }
}

impl<B: Backend> LeafTreeCore<B> {
    /// Enter the map's writer gate for a single write (see `batch/`).
    #[inline(always)]
    pub(super) fn enter(&self) -> Result<WriteSection, Error> {
        self.gate.enter().map_err(|_| Error::InBatch {
            name: self.name.clone(),
        })
    }
}

/// Pairs a cursor copies per call of the leaf map's scan: enough that the scan's set-up (a
/// descent of the DRAM index) is paid once per chunk, few enough that a range the caller
/// stops early copies little past where it stopped.
const CHUNK_PAIRS: usize = 64;

/// The pairs of a leaf-layout map in a range, copied a chunk at a time and lent one by one.
///
/// Each chunk is one scan of the leaf map from just after the last key lent, so a cursor
/// holds no lock between chunks: it reads as the map's scan reads (each key at most once, in
/// increasing order; every key present for the whole walk is seen).
pub(crate) struct LeafCursor<'a, B: Backend> {
    map: &'a LeafTree<B>,
    /// Where the next chunk starts.
    next: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    /// The chunk: the pairs' bytes, and each pair's key start, key length and value length.
    bytes: Vec<u8>,
    spans: Vec<(usize, usize, usize)>,
    /// The next span to lend.
    at: usize,
    /// No chunk follows the one held (the range's end was reached, or an error ended it).
    finished: bool,
}

impl<'a, B: Backend> LeafCursor<'a, B> {
    /// The pairs of `map` with keys from `start` to `end`.
    pub(super) fn new(map: &'a LeafTree<B>, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Self {
        LeafCursor {
            map,
            next: start.map(<[u8]>::to_vec),
            end: end.map(<[u8]>::to_vec),
            bytes: Vec::new(),
            spans: Vec::new(),
            at: 0,
            finished: false,
        }
    }

    /// The next pair, lent until the next call; `None` at the end. An error ends the walk.
    pub(super) fn next_pair(&mut self) -> Option<Result<LentPair<'_>, Error>> {
        if self.at == self.spans.len() {
            if self.finished {
                return None;
            }
            if let Err(e) = self.fill() {
                self.finished = true;
                return Some(Err(e));
            }
            if self.spans.is_empty() {
                return None;
            }
        }
        let (key_at, key_len, value_len) = self.spans[self.at];
        self.at += 1;
        let key = &self.bytes[key_at..key_at + key_len];
        let value = &self.bytes[key_at + key_len..key_at + key_len + value_len];
        Some(Ok((key, value)))
    }

    /// Copy the next chunk of pairs.
    fn fill(&mut self) -> Result<(), Error> {
        self.bytes.clear();
        self.spans.clear();
        self.at = 0;
        let (bytes, spans) = (&mut self.bytes, &mut self.spans);
        // Told the chunk's length: the leaf map copies it in one batch, under one lock.
        self.map.scan_at_most(
            bound_ref(&self.next),
            bound_ref(&self.end),
            CHUNK_PAIRS,
            |key, value| {
                let at = bytes.len();
                bytes.extend_from_slice(key);
                bytes.extend_from_slice(value);
                spans.push((at, key.len(), value.len()));
                match spans.len() < CHUNK_PAIRS {
                    true => ControlFlow::Continue(()),
                    false => ControlFlow::Break(()),
                }
            },
        )?;
        match self.spans.last() {
            Some(&(at, key_len, _)) if self.spans.len() == CHUNK_PAIRS => {
                self.next = Bound::Excluded(self.bytes[at..at + key_len].to_vec());
            }
            _ => self.finished = true,
        }
        Ok(())
    }
}

fn bound_ref(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    bound.as_ref().map(Vec::as_slice)
}

/// Lend the pairs of `map` with keys from `start` to `end` to `visit` until it breaks: what
/// it broke with, or `None` if it saw every pair (the handles' `range_with`, straight through
/// the leaf map's scan, copying nothing past the scan's own buffer). The scan is not told how
/// many pairs `visit` takes: its first batch is as long as the thread's last such scan lent
/// (see [`LeafTree::scan`]), so a caller taking the same number each time, as a service's
/// scans of N do, has them copied in one batch, as the raw map's `scan_at_most` would.
pub(super) fn visit_range<B: Backend, R>(
    map: &LeafTree<B>,
    start: Bound<&[u8]>,
    end: Bound<&[u8]>,
    mut visit: impl FnMut(&[u8], &[u8]) -> ControlFlow<R>,
) -> Result<Option<R>, Error> {
    let mut broke = None;
    map.scan(start, end, |key, value| match visit(key, value) {
        ControlFlow::Continue(()) => ControlFlow::Continue(()),
        ControlFlow::Break(r) => {
            broke = Some(r);
            ControlFlow::Break(())
        }
    })?;
    Ok(broke)
}
