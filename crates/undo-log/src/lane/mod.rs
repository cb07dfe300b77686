//! The lane protocol: the one owner of a lane's undo log and of its generation.
//!
//! A lane is one transaction's undo log at a time: a header line holding the lane's *committed
//! generation* `g`, then an array of entries packed from position 0 (the entry format is in
//! [`entry`]). Themis, Sec. V-A moved from a linked-list log to an array: appending is one
//! write, with no splice. Every step of a lane's life is here:
//!
//! * **format** ([`Lane::format`]): generation 0, and the head of the log zeroed, so bytes the
//!   pool held before cannot pass for an entry of generation 1;
//! * **begin** ([`Lane::begin`]): the open transaction is generation `g + 1`; beginning writes
//!   nothing;
//! * **append** ([`OpenLog::append_with_intents`]): snapshot ranges (and log allocator
//!   intents) as entries of generation `g + 1`, written with non-temporal stores; the caller
//!   orders the returned token before its data write (that ordering is the fence policy's
//!   business, in `tx.rs`);
//! * **commit** ([`OpenLog::commit`]): one 8-byte store of `g + 1` into the header, persisted,
//!   invalidates every entry at once (the caller has made the data durable first);
//! * **roll back** ([`OpenLog::roll_back`]): restore the entries newest first, persist them,
//!   then commit the generation, which cleans the lane;
//! * **recover** ([`Lane::recover`]): at open, roll back whatever generation `g + 1` entries a
//!   crash left in the log.
//!
//! Rolling back (and so recovery) may be interrupted by a crash any number of times: running it
//! again restores the same bytes.

mod entry;
use pmem_ordering::{Backend, NtPending, Pool};

use crate::TxError;

pub(crate) use self::entry::Intent;
use self::entry::{entry_size, Entry, Undo, ENTRY_HEADER, INTENT_SIZE};

/// Bytes of a lane's header (one cache line holding the committed generation).
pub(crate) const HEADER_BYTES: u64 = 64;

/// The largest encoding buffer a finished transaction hands on to the next one.
const KEPT_BUFFER_BYTES: usize = 1 << 20;

/// Where one lane lives in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lane {
    /// The lane's number, for error reports.
    index: usize,
    /// Offset of the header (the committed generation).
    header: u64,
    /// Bytes of the log that follows the header.
    capacity: u64,
}

impl Lane {
    /// Lane `index`, its header at `header`, its log of `capacity` bytes right after.
    pub(crate) fn new(index: usize, header: u64, capacity: u64) -> Lane {
        Lane {
            index,
            header,
            capacity,
        }
    }

    fn log(&self) -> u64 {
        self.header + HEADER_BYTES
    }

    /// Zero the header (generation 0) and the head of the log of a new heap's lane, flushed but
    /// not fenced: the caller's next persist (the superblock's) orders them.
    pub(crate) fn format<B: Backend>(&self, pool: &Pool<B>) -> Result<(), TxError> {
        let w = pool.write(self.header, &[0u8; HEADER_BYTES as usize + 64])?;
        let _ = pool.flush(w);
        Ok(())
    }

    fn committed_generation<B: Backend>(&self, pool: &Pool<B>) -> Result<u64, TxError> {
        Ok(pool.load_u64(self.header)?)
    }

    /// Open a transaction on this lane: its entries carry the generation after the committed
    /// one. Writes nothing.
    pub(crate) fn begin<B: Backend>(&self, pool: &Pool<B>) -> Result<OpenLog, TxError> {
        Ok(OpenLog {
            lane: *self,
            generation: self.committed_generation(pool)?.wrapping_add(1),
            used: 0,
            entries: 0,
            buf: Vec::new(),
            last_intent: None,
            restored_words: Vec::new(),
            fresh_intents: Vec::new(),
        })
    }

    /// Open a transaction on this lane in `log`, the log of a transaction that has ended, as
    /// [`Lane::begin`] does, keeping `log`'s scratch buffers (emptied): a thread's transactions
    /// then reuse one set of buffers, and the log is reset where it lies instead of moved.
    /// Writes nothing; refused, `log` is unchanged.
    pub(crate) fn begin_in<B: Backend>(
        &self,
        pool: &Pool<B>,
        log: &mut OpenLog,
    ) -> Result<(), TxError> {
        let generation = self.committed_generation(pool)?.wrapping_add(1);
        log.lane = *self;
        log.generation = generation;
        log.used = 0;
        log.entries = 0;
        log.last_intent = None;
        log.buf.clear();
        // A transaction that logged a large range leaves a large buffer: not kept for ever.
        if log.buf.capacity() > KEPT_BUFFER_BYTES {
            log.buf = Vec::new();
        }
        log.restored_words.clear();
        log.fresh_intents.clear();
        Ok(())
    }

    /// Recover the lane after a crash: roll back its open transaction, if it has one. Returns
    /// how many entries were restored.
    pub(crate) fn recover<B: Backend>(&self, pool: &Pool<B>) -> Result<usize, TxError> {
        let generation = self.committed_generation(pool)?.wrapping_add(1);
        let entries = self.scan(pool, generation)?;
        // Every intent: whatever the crash interrupted may have written the allocator's words.
        self.roll_back(pool, generation, &entries, true)?;
        Ok(entries.len())
    }

    fn scan<B: Backend>(&self, pool: &Pool<B>, generation: u64) -> Result<Vec<Entry>, TxError> {
        entry::scan(pool, self.index, self.log(), self.capacity, generation)
    }

    /// Undo `entries` (newest first), persist the restored bytes, then invalidate the log by
    /// committing `generation`: after this the lane is clean. Allocator intents are undone only
    /// if `intents` says so. Running it again after a crash in the middle restores the same
    /// bytes (an intent's undo gives the same word however often it is applied).
    fn roll_back<B: Backend>(
        &self,
        pool: &Pool<B>,
        generation: u64,
        entries: &[Entry],
        intents: bool,
    ) -> Result<(), TxError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut pending = None;
        for e in entries.iter().rev() {
            let w = match &e.undo {
                Undo::Restore(old) => pool.write(e.offset, old)?,
                Undo::Intent(intent) if intents => {
                    let word = intent.undo(pool.load_u64(e.offset)?);
                    pool.store_u64(e.offset, word)?
                }
                Undo::Intent(_) => continue,
            };
            let p = pool.flush(w);
            pending = Some(match pending {
                None => p,
                Some(prev) => p.and(prev),
            });
        }
        if let Some(p) = pending {
            pool.fence(p);
        }
        self.commit(pool, generation)
    }

    /// Store `generation` as committed and persist it: every entry of it is invalid from then on.
    fn commit<B: Backend>(&self, pool: &Pool<B>, generation: u64) -> Result<(), TxError> {
        let w = pool.store_u64(self.header, generation)?;
        pool.persist(w);
        Ok(())
    }
}

/// Sort `intents` into the entries they need (pushed on `fresh`) and the new value of the
/// log's last entry (`last_intent`), if they join it (see [`OpenLog::append_with_intents`]);
/// `restored_words` are the words already logged whole.
fn plan_intents(
    restored_words: &[u64],
    last_intent: Option<(u64, u64, Intent)>,
    intents: &[(u64, Intent)],
    fresh: &mut Vec<(u64, Intent)>,
) -> Option<(u64, Intent)> {
    let mut rewrite: Option<(u64, Intent)> = None;
    for &(offset, intent) in intents {
        if matches!(intent, Intent::Word(_)) && restored_words.contains(&offset) {
            continue;
        }
        let log_last = rewrite.or(last_intent.map(|(_, o, last)| (o, last)));
        let merged = match (fresh.last_mut(), log_last) {
            (Some((o, last)), _) if *o == offset => last.merge(intent).map(|m| *last = m),
            (None, Some((o, last))) if o == offset => {
                last.merge(intent).map(|m| rewrite = Some((offset, m)))
            }
            _ => None,
        };
        if merged.is_none() {
            fresh.push((offset, intent));
        }
    }
    rewrite
}

/// The log of a lane's open transaction: its generation and how far its entries reach.
pub(crate) struct OpenLog {
    lane: Lane,
    /// The generation this transaction's entries carry.
    generation: u64,
    /// Bytes of the log used so far.
    used: u64,
    /// Entries written (and not rolled back).
    entries: usize,
    /// Scratch buffer for encoding entries.
    buf: Vec<u8>,
    /// The log's last entry, if it is an intent: its position, word and intent.
    last_intent: Option<(u64, u64, Intent)>,
    /// Words with an intent to restore them whole in the log.
    restored_words: Vec<u64>,
    /// Scratch of [`OpenLog::append_with_intents`]: the intents that need entries of their own.
    fresh_intents: Vec<(u64, Intent)>,
}

impl OpenLog {
    /// Snapshot `[offset, offset + len)` (a range the caller has checked lies in the pool) as
    /// the next entry, written with non-temporal stores. Returns the entry's token, which the
    /// caller must order before it overwrites the range. Refuses, writing nothing, a snapshot
    /// larger than the whole log or than what is left of it.
    #[cfg(test)]
    pub(crate) fn append<B: Backend>(
        &mut self,
        pool: &Pool<B>,
        offset: u64,
        len: u64,
    ) -> Result<NtPending, TxError> {
        self.append_many(pool, &[(offset, len)])
    }

    /// Snapshot each `(offset, len)` of `ranges` (ranges the caller has checked lie in the pool)
    /// as the next entries, in order: one prefetch pass over the old bytes, the entries encoded
    /// into one buffer, and one non-temporal copy of it into the log. Returns the token of the
    /// copy, which the caller must order before it overwrites any of the ranges. Refuses,
    /// writing nothing, a snapshot larger than the whole log, or entries that do not fit in
    /// what is left of it.
    ///
    /// One copy is enough for the crash rules: the entries' stores may reach persistence in any
    /// order and a crash may tear any of them, but each entry carries its own checksum, and no
    /// range is overwritten before the caller has ordered the whole copy (a fence under the x86
    /// model), so a crash before that finds each data range unchanged, whatever the scan makes
    /// of the log.
    pub(crate) fn append_many<B: Backend>(
        &mut self,
        pool: &Pool<B>,
        ranges: &[(u64, u64)],
    ) -> Result<NtPending, TxError> {
        let needed = self.snapshot_bytes(ranges)?;
        self.check_room(needed)?;
        self.buf.clear();
        self.buf.reserve(needed as usize);
        self.push_snapshots(pool, ranges)?;
        self.copy_out(pool, self.used, needed, ranges.len())
    }

    /// Log `intents` (each an allocator word's offset and how to undo its change) as the next
    /// entries; returns the token of the copy, which the caller orders before it changes any of
    /// the words. Refuses, writing nothing, entries that do not fit.
    pub(crate) fn append_intents<B: Backend>(
        &mut self,
        pool: &Pool<B>,
        intents: &[(u64, Intent)],
    ) -> Result<NtPending, TxError> {
        self.append_with_intents(pool, intents, &[])
    }

    /// Log `intents` as [`OpenLog::append_intents`] does, then snapshot `ranges` as
    /// [`OpenLog::append_many`] does, all in one non-temporal copy: a transaction that
    /// allocates before it snapshots pays one copy for both. The intents' entries and the
    /// snapshots' group keep their own checksums (the format is theirs alone); only the copy is
    /// shared, and it is ordered as one before any range or allocator word is overwritten.
    /// All or nothing: refused, nothing is logged. Without intents it is
    /// [`OpenLog::append_many`], which skips the intents' bookkeeping.
    ///
    /// Two rules keep a transaction that allocates many blocks to a few intent entries: a word
    /// to restore whole is logged once (the first value is the one from before the
    /// transaction), and bits of the same word as the log's last entry join its mask, that
    /// entry rewritten in place (the copy then starts at it). The rewrite is safe because
    /// nothing this transaction stores depends on that entry yet (allocator words are written
    /// at commit, after the copy is ordered) and it is the last entry: a crash that tears it
    /// ends the scan there, and what follows it is this same copy, which protects nothing yet.
    pub(crate) fn append_with_intents<B: Backend>(
        &mut self,
        pool: &Pool<B>,
        intents: &[(u64, Intent)],
        ranges: &[(u64, u64)],
    ) -> Result<NtPending, TxError> {
        if intents.is_empty() {
            return self.append_many(pool, ranges);
        }
        let snapshot_bytes = self.snapshot_bytes(ranges)?;
        self.fresh_intents.clear();
        let rewrite = plan_intents(
            &self.restored_words,
            self.last_intent,
            intents,
            &mut self.fresh_intents,
        );
        let fresh = self.fresh_intents.len();
        let needed = INTENT_SIZE * fresh as u64 + snapshot_bytes;
        self.check_room(needed)?;
        self.buf.clear();
        self.buf
            .reserve((needed + rewrite.map_or(0, |_| INTENT_SIZE)) as usize);
        let start = match (rewrite, self.last_intent) {
            (Some((offset, merged)), Some((at, _, _))) => {
                self.last_intent = Some((at, offset, merged));
                entry::push_intent(&mut self.buf, self.generation, offset, merged);
                at
            }
            _ => self.used,
        };
        for (i, &(offset, intent)) in self.fresh_intents.iter().enumerate() {
            entry::push_intent(&mut self.buf, self.generation, offset, intent);
            if let Intent::Word(_) = intent {
                self.restored_words.push(offset);
            }
            if i + 1 == fresh {
                self.last_intent = Some((self.used + INTENT_SIZE * i as u64, offset, intent));
            }
        }
        self.push_snapshots(pool, ranges)?;
        self.copy_out(pool, start, needed, fresh + ranges.len())
    }

    /// The log bytes the snapshots of `ranges` take; refuses a snapshot larger than the whole
    /// log.
    #[inline(always)]
    fn snapshot_bytes(&self, ranges: &[(u64, u64)]) -> Result<u64, TxError> {
        let capacity = self.lane.capacity;
        let mut bytes = 0;
        for &(_, len) in ranges {
            let size = entry_size(len);
            // Bits 30 and 31 of an entry's length are flags: no snapshot reaches them.
            if size > capacity || len >= entry::SNAPSHOT_LEN_LIMIT {
                return Err(TxError::SnapshotTooLarge {
                    len,
                    capacity: capacity - ENTRY_HEADER,
                });
            }
            bytes += size;
        }
        Ok(bytes)
    }

    /// Refuse `needed` more bytes of entries if they do not fit in what is left of the log.
    #[inline(always)]
    fn check_room(&self, needed: u64) -> Result<(), TxError> {
        let capacity = self.lane.capacity;
        if self.used + needed > capacity {
            return Err(TxError::LogFull {
                needed,
                free: capacity - self.used,
            });
        }
        Ok(())
    }

    /// Encode the snapshots of `ranges` (if any) as one group at the end of the buffer, their
    /// old bytes read from the pool.
    // Inlined into both appends: a call costs the snapshot-only path a few instructions a range.
    #[inline(always)]
    fn push_snapshots<B: Backend>(
        &mut self,
        pool: &Pool<B>,
        ranges: &[(u64, u64)],
    ) -> Result<(), TxError> {
        if ranges.is_empty() {
            return Ok(());
        }
        // Start every load of the old bytes before waiting on the first: K random words cost
        // about one miss instead of K in a row.
        if ranges.len() > 1 {
            for &(offset, len) in ranges {
                pool.prefetch(offset, len);
            }
        }
        // The buffer lives as long as the thread's transaction state, which the heap reuses:
        // after the first transactions it has room, and encoding allocates nothing.
        let group = self.buf.len();
        for (i, &(offset, len)) in ranges.iter().enumerate() {
            let continued = i + 1 < ranges.len();
            let body = entry::push_snapshot(&mut self.buf, self.generation, offset, len, continued);
            pool.read_bytes(offset, &mut self.buf[body..body + len as usize])?;
        }
        // One group, one checksum (see `entry`).
        entry::seal_group(&mut self.buf[group..]);
        self.last_intent = None;
        Ok(())
    }

    /// Copy the encoded buffer into the log at `start` with non-temporal stores, and count
    /// `needed` more bytes and `entries` more entries as used. Returns the copy's token.
    #[inline(always)]
    fn copy_out<B: Backend>(
        &mut self,
        pool: &Pool<B>,
        start: u64,
        needed: u64,
        entries: usize,
    ) -> Result<NtPending, TxError> {
        // The lane is this transaction's alone: `Heap` hands lanes out under its mutex, whose
        // unlock and lock order one holder's accesses before the next's, and only `Heap::open`'s
        // recovery reads a log otherwise.
        let token = pool.nt_write(self.lane.log() + start, &self.buf)?;
        self.used += needed;
        self.entries += entries;
        Ok(token)
    }

    /// Commit the transaction's log: if it wrote entries, invalidate them with one persisted
    /// 8-byte store of its generation. The caller has made the data durable first.
    pub(crate) fn commit<B: Backend>(&self, pool: &Pool<B>) -> Result<(), TxError> {
        if self.used > 0 {
            self.lane.commit(pool, self.generation)?;
        }
        Ok(())
    }

    /// Restore every entry of the transaction and clean the lane; undo its allocator intents
    /// only if `published` (the commit wrote the allocator's words, and still holds its lock).
    /// The entries must be durable (fenced) already. Once it has succeeded the log is empty, so
    /// a second call does nothing.
    pub(crate) fn roll_back<B: Backend>(
        &mut self,
        pool: &Pool<B>,
        published: bool,
    ) -> Result<(), TxError> {
        if self.entries == 0 {
            return Ok(());
        }
        let entries = self.lane.scan(pool, self.generation)?;
        debug_assert_eq!(entries.len(), self.entries, "the log holds every snapshot");
        self.lane
            .roll_back(pool, self.generation, &entries, published)?;
        self.entries = 0;
        self.used = 0;
        self.last_intent = None;
        self.restored_words.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests;
