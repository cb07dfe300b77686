//! Walks of the whole table: each segment once, its live slots, and the blocks it owns.

use pmem_ordering::Backend;

use super::hashing::belongs;
use super::layout::{slots_of, Entry};
use super::{Cceh, CcehError, EMPTY_KEY};

impl<B: Backend> Cceh<B> {
    /// Every `(key, value)` pair, in no particular order: a consistent snapshot, taken under
    /// the structure mutex and every stripe lock (writers wait meanwhile; lookups do not) when
    /// this is called. The items are `Result`s, the shape of [`crate::fastfair::FastFair::iter`]
    /// (see [`crate::raw::U64Map`]): a snapshot that could not be taken is one error item.
    pub fn iter(&self) -> Iter {
        match self.snapshot() {
            Ok(pairs) => Iter {
                pairs: pairs.into_iter(),
                error: None,
            },
            Err(error) => Iter {
                pairs: Vec::new().into_iter(),
                error: Some(error),
            },
        }
    }

    /// The pairs of [`Cceh::iter`].
    fn snapshot(&self) -> Result<Vec<(u64, u64)>, CcehError> {
        let _structure = self.structure();
        let _stripes = self.stripes.lock_all();
        let depth = self.global_depth()?;
        let mut all = Vec::with_capacity(self.len() as usize);
        for (start, segment, local) in self.segments()? {
            all.extend(self.live_slots(segment, local, start >> (depth - local))?);
        }
        Ok(all)
    }

    /// Every block the table owns (directory, a retired directory not yet freed, segments),
    /// for heap-walk checks.
    pub fn blocks(&self) -> Result<Vec<u64>, CcehError> {
        let directory = self.current_directory()?;
        let mut out: Vec<u64> = self.segments()?.into_iter().map(|(_, s, _)| s).collect();
        out.push(directory.offset());
        let retired = self.word(self.root.retired())?;
        if retired != 0 {
            out.push(retired);
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Each distinct segment once: (first directory index, offset, local depth).
    pub(super) fn segments(&self) -> Result<Vec<(u64, u64, u64)>, CcehError> {
        let directory = self.current_directory()?;
        let depth = self.word(directory.depth())?;
        let mut out = Vec::new();
        let mut i = 0;
        while i < 1u64 << depth {
            let entry = Entry::from_word(self.word(directory.entry(i))?);
            let local = entry.local_depth;
            if local > depth {
                return Err(CcehError::Corrupt {
                    root: self.root.offset(),
                    reason: format!("entry {i}: local depth {local} above global depth {depth}"),
                });
            }
            out.push((i, entry.segment, local));
            i += 1u64 << (depth - local);
        }
        Ok(out)
    }

    /// The live `(key, value)` pairs of a segment with local depth `local` and hash prefix
    /// `pattern`.
    fn live_slots(
        &self,
        segment: u64,
        local: u64,
        pattern: u64,
    ) -> Result<Vec<(u64, u64)>, CcehError> {
        let mut bytes = vec![0u8; self.shape.bytes() as usize];
        self.heap.pool().read_bytes(segment, &mut bytes)?;
        Ok(slots_of(&bytes)
            .filter(|&(k, _)| k != EMPTY_KEY && belongs(k, local, pattern))
            .collect())
    }
}

/// The pairs of a snapshot of a table ([`Cceh::iter`]), each `Ok`; or, if the snapshot could
/// not be taken, its one error.
#[derive(Debug)]
pub struct Iter {
    pairs: std::vec::IntoIter<(u64, u64)>,
    error: Option<CcehError>,
}

impl Iterator for Iter {
    type Item = Result<(u64, u64), CcehError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.error.take() {
            Some(error) => Some(Err(error)),
            None => self.pairs.next().map(Ok),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.pairs.len() + usize::from(self.error.is_some());
        (n, Some(n))
    }
}

impl ExactSizeIterator for Iter {}
