//! The Raft log and vote in a store, as plain synchronous calls (the openraft trait impl in
//! `mod.rs` wraps them; the crash tests drive them directly on a simulated pool).
//!
//! Two maps: `raft.log`, an ordered map from log index to the encoded entry, and `raft.meta`,
//! a small map holding the vote, the last committed log id and the last purged log id. Every
//! write is durable when the store call returns, so every method below is durable when it
//! returns. What keeps the log free of holes across a crash at any point:
//!
//! * **append** takes only entries that follow the last (a gap or an overwrite is refused
//!   before anything is written) and writes them in index order, one alone as a single
//!   write, more in write batches of up to 128 (each all or nothing): a crash keeps a prefix;
//! * **truncate** removes from the last index down: a crash keeps a prefix of the log;
//! * **purge** makes the new "last purged" durable first, then removes from the first index
//!   up in batches of up to 128: a crash leaves entries at or below the marker, which
//!   [`LogCore::open`] removes (they are not part of the log any more) before anything reads
//!   the log.
//!
//! [`LogCore::open`] refuses a log with a hole, or an entry stored under another index than
//! its own, with a typed error: Raft must never run on such a log.

use std::ops::{Bound, RangeBounds};

use openraft::entry::RaftEntry;
use pmem_structures::raw::pmem_ordering::{Backend, Hardware};
use pmem_structures::{BTreeMap, HashMap, Store};

use crate::error::{decode, encode, ClusterError};
use crate::types::{Entry, LogId, Vote};

/// The log's map: index -> encoded entry.
pub const LOG_MAP: &str = "raft.log";
/// The log's small map of markers.
pub const META_MAP: &str = "raft.meta";

/// The most entries one write batch appends or purges (well under the store's batch limits
/// for the smallest batch area).
const CHUNK: usize = 128;

const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const PURGED: &str = "purged";

/// The two maps, shared by the log store and its readers.
pub struct LogMaps<B: Backend = Hardware> {
    store: Store<B>,
    log: BTreeMap<u64, Vec<u8>, B>,
    meta: HashMap<String, Vec<u8>, B>,
}

impl<B: Backend> Clone for LogMaps<B> {
    fn clone(&self) -> Self {
        LogMaps {
            store: self.store.clone(),
            log: self.log.clone(),
            meta: self.meta.clone(),
        }
    }
}

impl<B: Backend> LogMaps<B> {
    /// The maps of `store`, made if new.
    pub fn open(store: &Store<B>) -> Result<LogMaps<B>, ClusterError> {
        Ok(LogMaps {
            store: store.clone(),
            log: store.btree_map(LOG_MAP)?,
            meta: store.hash_map(META_MAP)?,
        })
    }

    /// The entries present with indexes in `range`, in order, from the first present one up
    /// to the first missing one after it.
    pub fn entries(&self, range: impl RangeBounds<u64>) -> Result<Vec<Entry>, ClusterError> {
        let start = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => match i.checked_add(1) {
                Some(i) => i,
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => 0,
        };
        let end = range.end_bound().cloned();
        let mut entries = Vec::new();
        // The range may start below the first entry (purged or never written): the entries
        // from the first present one on, as long as they are consecutive.
        let mut expected = None;
        for pair in self.log.range((Bound::Included(start), end)) {
            let (index, bytes) = pair?;
            if expected.is_some_and(|e| e != index) {
                break;
            }
            entries.push(decode_entry(index, &bytes)?);
            expected = Some(index + 1);
        }
        Ok(entries)
    }

    /// The vote last saved.
    pub fn vote(&self) -> Result<Option<Vote>, ClusterError> {
        self.marker(VOTE)
    }

    /// The committed log id last saved.
    pub fn committed(&self) -> Result<Option<LogId>, ClusterError> {
        self.marker(COMMITTED)
    }

    fn marker<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<T>, ClusterError> {
        match self.meta.get(key)? {
            Some(bytes) => Ok(Some(decode(&bytes, || format!("the log's {key} marker"))?)),
            None => Ok(None),
        }
    }

    fn set_marker<T: serde::Serialize>(&self, key: &str, value: &T) -> Result<(), ClusterError> {
        let bytes = encode(value, || format!("the log's {key} marker"))?;
        self.meta.upsert(key, bytes)?;
        Ok(())
    }
}

fn decode_entry(index: u64, bytes: &[u8]) -> Result<Entry, ClusterError> {
    let entry: Entry = decode(bytes, || format!("the Raft log entry at index {index}"))?;
    if entry.index() != index {
        return Err(ClusterError::MisplacedEntry {
            index,
            found: entry.log_id(),
        });
    }
    Ok(entry)
}

/// The log's writer: the maps and where the log starts and ends.
pub struct LogCore<B: Backend = Hardware> {
    maps: LogMaps<B>,
    /// The last purged log id (entries up to it are gone).
    purged: Option<LogId>,
    /// The last entry's log id (`None`: no entry after `purged`).
    last: Option<LogId>,
}

impl<B: Backend> LogCore<B> {
    /// Open the log in `store` (made if new): finish a purge a crash interrupted, and refuse
    /// a log with a hole or a misplaced entry.
    pub fn open(store: &Store<B>) -> Result<LogCore<B>, ClusterError> {
        let maps = LogMaps::open(store)?;
        let purged: Option<LogId> = maps.marker(PURGED)?;
        let floor = purged.as_ref().map(|p| p.index());
        let mut leftovers = Vec::new();
        // The index the next entry must have (`None`: any, the log has no purge yet and no
        // entry seen).
        let mut expected = floor.map(|f| f + 1);
        let mut last_index = floor;
        for pair in maps.log.iter() {
            let (index, _) = pair?;
            if floor.is_some_and(|f| index <= f) {
                leftovers.push(index);
                continue;
            }
            if let Some(expected) = expected {
                if index != expected {
                    return Err(ClusterError::LogGap {
                        present: expected - 1,
                        next: index,
                    });
                }
            }
            expected = Some(index + 1);
            last_index = Some(index);
        }
        let last = match (last_index, floor) {
            (Some(i), f) if Some(i) != f => {
                let bytes = maps.log.get(i)?.ok_or(ClusterError::LogGap {
                    present: i.saturating_sub(1),
                    next: i + 1,
                })?;
                Some(decode_entry(i, &bytes)?.log_id())
            }
            _ => None,
        };
        // Finish the purge a crash interrupted, lowest first (as `purge` goes).
        for index in leftovers {
            maps.log.remove(index)?;
        }
        Ok(LogCore { maps, purged, last })
    }

    /// The maps, for readers.
    pub fn maps(&self) -> &LogMaps<B> {
        &self.maps
    }

    /// The last purged log id.
    pub fn purged(&self) -> Option<&LogId> {
        self.purged.as_ref()
    }

    /// The last log id: the last entry's, or the last purged one's if there is no entry.
    pub fn last(&self) -> Option<&LogId> {
        self.last.as_ref().or(self.purged.as_ref())
    }

    /// Save the vote (durable on return).
    pub fn save_vote(&mut self, vote: &Vote) -> Result<(), ClusterError> {
        self.maps.set_marker(VOTE, vote)
    }

    /// Save the committed log id (durable on return).
    pub fn save_committed(&mut self, committed: Option<&LogId>) -> Result<(), ClusterError> {
        match committed {
            Some(committed) => self.maps.set_marker(COMMITTED, committed),
            None => {
                self.maps.meta.remove(COMMITTED)?;
                Ok(())
            }
        }
    }

    /// Append `entries` after the last (durable on return). An entry that is not the next
    /// index is refused (a gap, or an overwrite that must be a truncation first); the entries
    /// before it stay appended.
    pub fn append(&mut self, entries: impl IntoIterator<Item = Entry>) -> Result<(), ClusterError> {
        let entries: Vec<Entry> = entries.into_iter().collect();
        // All checked before any is written: a refused append changes nothing.
        let mut next = self.last().map(|last| last.index() + 1);
        let mut encoded = Vec::with_capacity(entries.len());
        for entry in &entries {
            let index = entry.index();
            if next.is_some_and(|n| n != index) {
                return Err(ClusterError::LogGap {
                    present: next.unwrap_or(0).wrapping_sub(1),
                    next: index,
                });
            }
            next = Some(index + 1);
            encoded.push((
                index,
                encode(entry, || format!("the Raft log entry at index {index}"))?,
            ));
        }
        // One entry is one single write (its fences); more go in batches (three fences each,
        // whatever their size), lowest first, so a crash keeps a prefix of them.
        for (chunk, written) in encoded.chunks(CHUNK).zip(entries.chunks(CHUNK)) {
            if let [(index, bytes)] = chunk {
                self.maps.log.upsert(*index, bytes)?;
            } else {
                let log = &self.maps.log;
                self.maps.store.write(|batch| {
                    for (index, bytes) in chunk {
                        log.put_in(batch, *index, bytes)?;
                    }
                    Ok::<_, ClusterError>(())
                })?;
            }
            self.last = written.last().map(|e| e.log_id());
        }
        Ok(())
    }

    /// Remove every entry after `keep` (all of them for `None`), last first (durable on
    /// return).
    pub fn truncate_after(&mut self, keep: Option<&LogId>) -> Result<(), ClusterError> {
        let Some(last) = self.last else {
            return Ok(());
        };
        let from = keep.map_or(0, |k| k.index() + 1);
        let floor = self.purged.as_ref().map_or(0, |p| p.index() + 1);
        let from = from.max(floor);
        let mut index = last.index();
        while index >= from {
            self.maps.log.remove(index)?;
            if index == 0 {
                break;
            }
            index -= 1;
        }
        self.last = match keep {
            Some(keep) if keep.index() >= floor && keep.index() < last.index() => Some(*keep),
            Some(_) if from > last.index() => Some(last),
            _ => None,
        };
        Ok(())
    }

    /// Remove every entry up to `upto` (inclusive), the marker first (durable on return).
    pub fn purge(&mut self, upto: &LogId) -> Result<(), ClusterError> {
        if self.purged.as_ref().is_some_and(|p| p >= upto) {
            return Ok(());
        }
        // The first entry present (the log may start above the last purge, or above 0).
        let first = match self.maps.log.iter().next() {
            Some(pair) => Some(pair?.0),
            None => None,
        };
        self.maps.set_marker(PURGED, upto)?;
        self.purged = Some(*upto);
        if let (Some(last), Some(from)) = (self.last, first) {
            let to = upto.index().min(last.index());
            // In batches, lowest first: what a crash leaves below the marker, the next open
            // removes.
            let mut low = from;
            while low <= to {
                let high = to.min(low + CHUNK as u64 - 1);
                let log = &self.maps.log;
                self.maps.store.write(|batch| {
                    for index in low..=high {
                        log.delete_in(batch, index)?;
                    }
                    Ok::<_, ClusterError>(())
                })?;
                low = high + 1;
            }
            if upto.index() >= last.index() {
                self.last = None;
            }
        }
        Ok(())
    }
}
