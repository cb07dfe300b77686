//! Expiry times: where a key's deadline is kept, how commands change it, and how keys past
//! it go (lazily, when a command names them, and actively, in the background).
//!
//! A deadline is absolute (milliseconds since the Unix epoch, the wall clock), so a key
//! expired before a crash or a stop is still expired after it, and a time to live runs on
//! across a restart. It lives in two maps beside the keyspace: `expires` (key -> deadline),
//! for the lookups of commands, and `index` (big-endian deadline ++ key), which lists the
//! deadlines in order, for active expiry. Every change of a deadline writes the value and
//! both maps in one write batch, so after a crash the three agree. Keys without a deadline
//! have no entry: the maps hold what the keys with one need, and no more, and while no key
//! has one no command looks there.
//!
//! Lazy expiry: before a command runs, each key it names whose deadline is at or before the
//! command's time is deleted (durably, under its stripe, in one batch), so the command sees
//! it absent. Commands take their time once, at their start, as Redis 7 does.
//!
//! INFO's `avg_ttl` is exact, not sampled as Redis's is: the sum of every deadline is kept in
//! DRAM beside their count (the `expires` map's length), summed once at open and changed by
//! each committed batch that changes deadlines; the average time to live is the average
//! deadline less the time of asking (0 when that is past).
//!
//! Active expiry: every 100 ms a cycle takes up to 20 of the earliest index entries that are
//! due, checks each under its stripe against `expires`, deletes the keys (and any stale
//! entry) in one batch, and goes on while it found a full sample, within 25 ms. Redis samples
//! keys with a deadline at random and goes on while more than a quarter of a sample has
//! expired; the index gives only due keys, so each sample is all work.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pmem_structures::raw::pmem_ordering::Backend;
use pmem_structures::{Error, WriteBatch};

use crate::db::{Db, DbError, Maps};

/// The most index entries one step of active expiry takes.
const SAMPLE: usize = 20;
/// How often active expiry runs.
pub(crate) const CYCLE_PERIOD: Duration = Duration::from_millis(100);
/// How long one cycle may work (a quarter of the period, as Redis's slow cycle).
pub(crate) const CYCLE_BUDGET: Duration = Duration::from_millis(25);

/// A key's deadline before the batch and after it.
type DeadlineChange = (Option<u64>, Option<u64>);

thread_local! {
    /// The deadlines the batch this thread is writing changes, by key (a batch belongs to its
    /// thread): `Db::batch_write` adds what they change to the sum once the batch commits. By
    /// key, because a batch may change one key's deadline twice (an MSET or a pipeline naming
    /// it twice): what counts is the first change's old deadline and the last one's new.
    static DEADLINE_CHANGES: RefCell<HashMap<Vec<u8>, DeadlineChange>> =
        RefCell::new(HashMap::new());
}

/// What this thread's deadline changes since the last call add to the sum of deadlines.
pub(crate) fn take_deadline_change() -> i128 {
    DEADLINE_CHANGES.with(|changes| {
        changes
            .borrow_mut()
            .drain()
            .map(|(_, (old, new))| i128::from(new.unwrap_or(0)) - i128::from(old.unwrap_or(0)))
            .sum()
    })
}

/// The sum of every deadline in `maps` (INFO's `avg_ttl`).
pub(crate) fn sum_of_deadlines<B: Backend>(maps: &Maps<B>) -> Result<i128, Error> {
    let mut sum = 0i128;
    for entry in maps.expires.iter() {
        sum += i128::from(entry?.1);
    }
    Ok(sum)
}

/// Milliseconds since the Unix epoch, now (0 on a clock set before it).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The index entry of `key`'s deadline.
fn index_entry(deadline: u64, key: &[u8]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(8 + key.len());
    entry.extend_from_slice(&deadline.to_be_bytes());
    entry.extend_from_slice(key);
    entry
}

/// An index entry's deadline and key (`None`: too short to be one).
fn split_entry(entry: &[u8]) -> Option<(u64, &[u8])> {
    let (deadline, key) = entry.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*deadline), key))
}

/// The maps' side of every deadline change: each function puts into a batch what one
/// command or one step of active expiry writes (the `Db` functions below run them; the crash
/// test runs them on the simulator).
impl<B: Backend> Maps<B> {
    /// `key`'s deadline, if it has one (no lookup while no key has one).
    pub(crate) fn deadline(&self, key: &[u8]) -> Result<Option<u64>, Error> {
        if self.expires.is_empty() {
            return Ok(None);
        }
        self.expires.get(key)
    }

    /// Whether `key`'s deadline is at or before `now`.
    pub(crate) fn is_due(&self, key: &[u8], now: u64) -> Result<bool, Error> {
        Ok(self.deadline(key)?.is_some_and(|deadline| deadline <= now))
    }

    /// Change `key`'s deadline from `old` (what it is) to `new` in `batch`: both maps.
    pub(crate) fn change_deadline_in(
        &self,
        batch: &mut WriteBatch<B>,
        key: &[u8],
        old: Option<u64>,
        new: Option<u64>,
    ) -> Result<(), Error> {
        if old == new {
            return Ok(());
        }
        DEADLINE_CHANGES.with(|changes| {
            let mut changes = changes.borrow_mut();
            changes.entry(key.to_vec()).or_insert((old, new)).1 = new;
        });
        if let Some(old) = old {
            self.expires.delete_in(batch, key)?;
            self.index.delete_in(batch, &index_entry(old, key)[..])?;
        }
        if let Some(new) = new {
            // Before the commit makes the deadline readable.
            self.any_deadline.store(true, Ordering::Release);
            self.expires.put_in(batch, key, new)?;
            self.index
                .put_in(batch, &index_entry(new, key)[..], &[][..])?;
        }
        Ok(())
    }

    /// Set `key` to the string `value` with the deadline `new` where it has `old` (SET EX,
    /// SETEX, SET over a key with a deadline or over a hash, COPY).
    pub(crate) fn write_in(
        &self,
        batch: &mut WriteBatch<B>,
        key: &[u8],
        value: &[u8],
        old: Option<u64>,
        new: Option<u64>,
    ) -> Result<(), Error> {
        self.keys.put_in(batch, key, value)?;
        self.forget_hash_in(batch, key)?;
        self.change_deadline_in(batch, key, old, new)
    }

    /// Delete `key` (a string or a hash), whose deadline is `deadline` (an expired key; DEL
    /// of a key with one).
    pub(crate) fn delete_in(
        &self,
        batch: &mut WriteBatch<B>,
        key: &[u8],
        deadline: u64,
    ) -> Result<(), Error> {
        self.keys.delete_in(batch, key)?;
        self.forget_hash_in(batch, key)?;
        self.change_deadline_in(batch, key, Some(deadline), None)
    }

    /// Up to `SAMPLE` of the earliest index entries due at `now`.
    pub(crate) fn due_sample(&self, now: u64) -> Result<Vec<Vec<u8>>, Error> {
        let end = (now + 1).to_be_bytes();
        self.index
            .range::<&[u8], _>((Bound::Unbounded, Bound::Excluded(&end[..])))
            .take(SAMPLE)
            .map(|entry| entry.map(|(entry, _)| entry))
            .collect()
    }

    /// Active expiry's deletes for a sample of due index entries: each key whose deadline
    /// the entry still is, with its deadline; a stale entry alone. How many keys went.
    pub(crate) fn expire_sample_in(
        &self,
        batch: &mut WriteBatch<B>,
        sample: &[Vec<u8>],
    ) -> Result<u64, Error> {
        let mut deleted = 0;
        for entry in sample {
            match split_entry(entry) {
                Some((deadline, key)) if self.deadline(key)? == Some(deadline) => {
                    self.delete_in(batch, key, deadline)?;
                    deleted += 1;
                }
                // Stale: the key has another deadline, or none.
                _ => self.index.delete_in(batch, &entry[..])?,
            }
        }
        Ok(deleted)
    }

    /// Whether the deadline maps agree with each other and the keys: every deadline's key
    /// exists and is in the index under it, every index entry is a key's deadline. The
    /// number of keys and of deadlines, or what disagrees.
    pub(crate) fn check(&self) -> Result<Result<(u64, u64), String>, Error> {
        let mut deadlines = 0;
        for entry in self.expires.iter() {
            let (key, deadline) = entry?;
            if !self.keys.contains_key(&key[..])? {
                return Ok(Err(format!("deadline {deadline} of a missing key {key:?}")));
            }
            if !self.index.contains_key(&index_entry(deadline, &key)[..])? {
                return Ok(Err(format!("deadline {deadline} of {key:?} not indexed")));
            }
            deadlines += 1;
        }
        for entry in self.index.iter() {
            let (entry, _) = entry?;
            let Some((deadline, key)) = split_entry(&entry) else {
                return Ok(Err(format!("index entry {entry:?} too short")));
            };
            if self.expires.get(key)? != Some(deadline) {
                return Ok(Err(format!("index entry {deadline} of {key:?} is stale")));
            }
        }
        if self.index.len() != deadlines || self.expires.len() != deadlines {
            return Ok(Err("the index and the deadlines differ in length".into()));
        }
        if let Err(error) = self.check_hashes()? {
            return Ok(Err(error));
        }
        Ok(Ok((self.keys.check()?, deadlines)))
    }
}

impl Db {
    /// Set `key` to the string `value` with the deadline `new`, where it has `old` now: a
    /// single write when the deadline stays and the key is no hash, else one batch. The
    /// caller holds the key's stripe.
    pub(crate) fn write_key(
        &self,
        key: &[u8],
        value: &[u8],
        old: Option<u64>,
        new: Option<u64>,
    ) -> Result<(), DbError> {
        let single = self.with_maps(|maps| {
            if old != new || maps.hash_meta(key)?.is_some() {
                return Ok(false);
            }
            self.counted_write(1, || maps.keys.put(key, value))
                .map(|_| true)
        })??;
        if single {
            return Ok(());
        }
        self.batch_write(1, |maps, batch| maps.write_in(batch, key, value, old, new))
    }

    /// Change `key`'s deadline from `old` to `new` (one batch, nothing when they are the
    /// same). The caller holds the key's stripe and knows the key exists.
    pub(crate) fn change_deadline(
        &self,
        key: &[u8],
        old: Option<u64>,
        new: Option<u64>,
    ) -> Result<(), DbError> {
        if old == new {
            return Ok(());
        }
        self.batch_write(1, |maps, batch| {
            maps.change_deadline_in(batch, key, old, new)
        })
    }

    /// Delete `key` (a string or a hash) and its deadline; what it held in the keyspace. A
    /// single write for a string without a deadline, else one batch. The caller holds the
    /// key's stripe.
    pub(crate) fn delete_key(&self, key: &[u8]) -> Result<Option<Vec<u8>>, DbError> {
        let single = self.with_maps(|maps| {
            if maps.deadline(key)?.is_some() || maps.hash_meta(key)?.is_some() {
                return Ok(None);
            }
            self.counted_write(1, || maps.keys.remove(key)).map(Some)
        })??;
        match single {
            Some(removed) => Ok(removed),
            None => self.batch_write(1, |maps, batch| maps.delete_key_in(batch, key)),
        }
    }

    /// Lazy expiry: delete, durably, each of `keys` whose deadline is at or before `now`.
    /// Takes their stripes: the caller holds none.
    pub(crate) fn expire_due(&self, keys: &[&[u8]], now: u64) -> Result<(), DbError> {
        if !self.may_have_deadlines() {
            return Ok(());
        }
        let due = self.with_maps(|maps| {
            let mut due = Vec::new();
            for &key in keys {
                if maps.is_due(key, now)? {
                    due.push(key);
                }
            }
            Ok::<_, Error>(due)
        })??;
        if due.is_empty() {
            return Ok(());
        }
        let _locks = self.lock_keys(due.iter().copied());
        self.batch_write(due.len() as u64, |maps, batch| {
            for key in due {
                // Checked again under the stripe: a write may have come in between.
                if let Some(deadline) = maps.deadline(key)?.filter(|&d| d <= now) {
                    maps.delete_in(batch, key, deadline)?;
                }
            }
            Ok(())
        })
    }

    /// One cycle of active expiry: delete due keys, a sample at a time, until none is due or
    /// `budget` is spent. How many keys it deleted.
    pub(crate) fn expire_cycle(&self, budget: Duration) -> Result<u64, DbError> {
        let started = Instant::now();
        let mut deleted = 0;
        loop {
            let sample = self.with_maps(|maps| maps.due_sample(now_ms()))??;
            if sample.is_empty() {
                return Ok(deleted);
            }
            let keys = sample.iter().filter_map(|entry| split_entry(entry));
            let _locks = self.lock_keys(keys.map(|(_, key)| key));
            deleted += self.batch_write(sample.len() as u64, |maps, batch| {
                maps.expire_sample_in(batch, &sample)
            })?;
            if sample.len() < SAMPLE || started.elapsed() >= budget {
                return Ok(deleted);
            }
        }
    }

    /// How many keys have a deadline (INFO's `expires=`).
    pub(crate) fn deadline_count(&self) -> u64 {
        self.with_maps(|maps| maps.expires.len()).unwrap_or(0)
    }

    /// The average time to live at `now` of the keys with a deadline, in milliseconds
    /// (INFO's `avg_ttl`): their average deadline less `now`, 0 when none has one or that is
    /// past.
    pub(crate) fn average_ttl(&self, now: u64) -> u64 {
        let count = self.deadline_count();
        if count == 0 {
            return 0;
        }
        let average = *self.deadline_sum.lock() / i128::from(count);
        (average - i128::from(now)).clamp(0, i128::from(u64::MAX)) as u64
    }

    /// Check that the deadline maps agree with each other and the keys: every deadline's key
    /// exists and is in the index under it, every index entry is a key's deadline. The
    /// number of keys and of deadlines, or what disagrees.
    pub(crate) fn check_deadlines(&self) -> Result<(u64, u64), String> {
        match self.with_maps(Maps::check) {
            Ok(Ok(checked)) => checked,
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err("the keyspace is unavailable".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_entries_sort_by_deadline_then_key_and_split_back() {
        let early = index_entry(5, b"zz");
        let late = index_entry(256, b"a");
        assert!(early < late);
        assert_eq!(split_entry(&late), Some((256, &b"a"[..])));
        assert_eq!(split_entry(b"short"), None);
    }
}
