//! Range scans that lend each pair: pairs, in key order, are copied (and checked) into a
//! buffer under the map's lock, a batch at a time, then lent to the caller's callback with
//! the lock released. Batches start small and double (16 pairs, then 32, up to 256): a short
//! scan copies few pairs it does not lend, a long one takes the lock seldom; a caller that
//! knows how many pairs it wants ([`LeafMap::scan_at_most`]) has them copied in one batch.
//! A scan not told how many ([`LeafMap::scan`]) starts with as many as the thread's last such
//! scan lent (from 16 to [`HINTED_BATCH_PAIRS`]): callers repeat their lengths (a page of
//! results, a service's scan of N), so one told nothing copies its pairs in one batch too,
//! as [`LeafMap::scan_at_most`] does, once the thread has made one such scan.
//! The next batch starts where the last stopped, found again by a search after the last key
//! lent only if a write came between (the index's generation moved). A batch finds its first
//! leaf once and walks on through the leaves' DRAM successor links (none when it resumes):
//! when its lower bound's key is in the map, through the hash index (the key's slot, then
//! the leaf whose block holds that slot, and the slot's place in the leaf's key order: no
//! search of the tree, whose misses were a fifth of a 100-pair scan at a million keys);
//! otherwise by a descent of the tree of bounds and a count of the leaf's keys below it.
//!
//! A leaf's slots sit in no order, so a batch copies the pairs it takes from a leaf in the
//! order of their slots (ascending addresses in the block, which the hardware's prefetchers
//! follow), asking for the slots [`PREFETCH_AHEAD`] ahead of the copy (into the next leaf
//! too, nothing past the batch's end), then checks each copied slot (its checksum: apart
//! from the copy, so that its loads do not wait on the copy's stores), and then lists them
//! in key order from the leaf's DRAM key order. The buffers are the thread's, reused: a scan
//! allocates nothing per pair, and nothing at all once they are large enough.

use std::cell::Cell;
use std::cmp::Ordering;
use std::ops::{Bound, ControlFlow};

use pmem_ordering::isa::prefetch_line;
use pmem_ordering::Backend;

use super::leaf::Leaf;
use super::{Index, LeafMap, Result};
use crate::records::MAX_KEY_BYTES;

/// Pairs copied, `(start, key_len, value_len)` of each in `bytes`, in key order.
#[derive(Default)]
struct Batch {
    /// The pairs' bytes (never shrunk: a batch writes over the last one's).
    bytes: Vec<u8>,
    pairs: Vec<(usize, usize, usize)>,
    /// The last key lent.
    last: Vec<u8>,
    /// Where the batch stopped: its leaf's number in the index and the position in the
    /// leaf's key order of the first pair not taken, valid while the index's generation is
    /// `generation`.
    resume_leaf: u32,
    resume_position: usize,
    generation: Option<u64>,
    /// Pairs the thread's last scan not told its length lent (0 before the first): the next
    /// such scan's first batch.
    lent_last: usize,
}

thread_local! {
    /// This thread's scan buffers between scans (a scan inside a scan's callback makes its
    /// own).
    static SPARE: Cell<Option<Box<Batch>>> = const { Cell::new(None) };
}

/// Pairs of a scan's first batch at least, when it is not told its length; each next batch
/// doubles, up to [`LAST_BATCH_PAIRS`].
const FIRST_BATCH_PAIRS: usize = 16;
/// Pairs of a batch at most.
const LAST_BATCH_PAIRS: usize = 256;
/// Pairs of the first batch of a scan not told its length, at most, however many the
/// thread's last such scan lent: what a scan copies and does not lend, when its caller
/// stops earlier than the last did, stays below this.
const HINTED_BATCH_PAIRS: usize = 128;
/// How many pairs ahead of the one being copied its slot is asked for: enough misses in
/// flight to cover the memory's latency, few enough not to stall on full miss buffers.
const PREFETCH_AHEAD: usize = 12;

/// Where a batch starts.
#[derive(Clone, Copy)]
enum From {
    /// The scan's lower bound.
    Start,
    /// After the last key lent.
    AfterLast,
}

/// The prefetches ahead of a batch's copy: the slots still to ask for in the leaf being
/// copied or the one after it, and how many the batch may still ask for.
struct Ahead<'i> {
    offset: u64,
    slots: u64,
    /// The leaf after `offset`'s, once the copy has entered that one.
    following: Option<&'i Leaf>,
    budget: usize,
}

impl<'i> Ahead<'i> {
    /// The copy enters `leaf`, taking the slots `taken` of it; `following` is the leaf after
    /// it, if the batch may reach it.
    fn enter(&mut self, leaf: &Leaf, taken: u64, following: Option<&'i Leaf>) {
        if self.offset == leaf.offset {
            // Some of this leaf's slots were asked for already: the rest of those taken.
            self.slots &= taken;
        } else {
            self.offset = leaf.offset;
            self.slots = taken;
        }
        self.following = following;
    }

    /// The next slot to ask for, if the batch has any left.
    #[inline]
    fn next(&mut self) -> Option<(u64, usize)> {
        if self.budget == 0 {
            return None;
        }
        if self.slots == 0 {
            let leaf = self.following.take()?;
            self.offset = leaf.offset;
            self.slots = leaf.live();
            if self.slots == 0 {
                return None;
            }
        }
        let slot = self.slots.trailing_zeros() as usize;
        self.slots &= self.slots - 1;
        self.budget -= 1;
        Some((self.offset, slot))
    }
}

/// Ask for the first two lines of `leaf`'s DRAM state (what a scan reads of it first).
#[inline]
fn prefetch_leaf(leaf: &Leaf) {
    let at = (leaf as *const Leaf).cast::<u8>();
    prefetch_line(at);
    prefetch_line(at.wrapping_add(64));
}

impl<B: Backend> LeafMap<B> {
    /// Visit the pairs whose keys lie between `start` and `end`, in key order, lending each
    /// key and value to `f` until it breaks: how many pairs it was lent. No pair is allocated.
    ///
    /// The scan holds the map's lock while it copies a batch of pairs, not while `f` runs, so
    /// `f` may read or write the map. The first batch copies as many pairs as the thread's
    /// last scan through this method lent (at least 16, at most 128), the next ones twice as
    /// many each. It is not a snapshot: a pair written during the scan
    /// may or may not be visited, as its key lies before or after the scan's position; each
    /// key is visited at most once, in increasing order.
    pub fn scan(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<u64> {
        self.scan_batches(start, end, usize::MAX, f)
    }

    /// [`LeafMap::scan`] lending `max` pairs at most: the first batch copies up to `max` of
    /// them (at most 256) at once, where an open-ended scan starts with as many as the
    /// thread's last one lent (16 to 128) and doubles, so a scan of a known length takes the
    /// lock once and copies no pair it does not lend (unless `f` breaks early). It leaves the
    /// open-ended scans' first batch as it was.
    pub fn scan_at_most(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        max: usize,
        f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<u64> {
        self.scan_batches(start, end, max, f)
    }

    /// The scans: batches of `size` pairs, doubling up to [`LAST_BATCH_PAIRS`], `max` pairs
    /// in all at most (`usize::MAX`: no limit, the first batch as many pairs as the thread's
    /// last such scan lent, from [`FIRST_BATCH_PAIRS`] to [`HINTED_BATCH_PAIRS`]).
    fn scan_batches(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        max: usize,
        mut f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<u64> {
        if max == 0 {
            return Ok(0);
        }
        let mut batch = SPARE.with(|s| s.take()).unwrap_or_default();
        batch.generation = None;
        let mut visited = 0usize;
        let mut from = From::Start;
        let mut size = match max {
            usize::MAX => batch.lent_last.clamp(FIRST_BATCH_PAIRS, HINTED_BATCH_PAIRS),
            max => max.min(LAST_BATCH_PAIRS),
        };
        let outcome = loop {
            let limit = size.min(max - visited);
            let ended = {
                let index = self.read();
                match self.fill(&index, &mut batch, from, start, end, limit) {
                    Ok(ended) => ended,
                    Err(e) => break Err(e),
                }
            };
            let mut stop = ended;
            for &(at, key_len, value_len) in &batch.pairs {
                let key = &batch.bytes[at..at + key_len];
                let value = &batch.bytes[at + key_len..at + key_len + value_len];
                visited += 1;
                if f(key, value).is_break() {
                    stop = true;
                    break;
                }
            }
            if stop || visited == max {
                break Ok(visited as u64);
            }
            if let Some(&(at, key_len, _)) = batch.pairs.last() {
                let Batch { bytes, last, .. } = &mut *batch;
                last.clear();
                last.extend_from_slice(&bytes[at..at + key_len]);
            }
            from = From::AfterLast;
            size = (size * 2).min(LAST_BATCH_PAIRS);
        };
        if max == usize::MAX && outcome.is_ok() {
            batch.lent_last = visited;
        }
        SPARE.with(|s| s.set(Some(batch)));
        outcome
    }

    /// The pairs whose keys lie between `start` and `end`, in key order, owned: a convenience
    /// over [`LeafMap::scan`].
    pub fn range_pairs(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut pairs = Vec::new();
        self.scan(start, end, |k, v| {
            pairs.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        })?;
        Ok(pairs)
    }

    /// Copy into `batch` up to `limit` (at least one) pairs in range, in key order, from
    /// `from` on: whether the scan has nothing after them (its end bound reached, or no leaf
    /// left).
    fn fill(
        &self,
        index: &Index,
        batch: &mut Batch,
        from: From,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<bool> {
        batch.pairs.clear();
        let Batch {
            bytes,
            pairs,
            last,
            resume_leaf,
            resume_position,
            generation,
            lent_last: _,
        } = batch;
        let resumed = matches!(from, From::AfterLast) && *generation == Some(index.generation);
        *generation = None;
        let (mut leaves, mut position) = if resumed {
            (index.chain(*resume_leaf), *resume_position)
        } else {
            let lower = match from {
                From::Start => start,
                From::AfterLast => Bound::Excluded(&last[..]),
            };
            let (id, position) = match self.start_by_hash(index, lower) {
                Some((id, first, position)) => {
                    if let Some(e) = first.damage(&self.config) {
                        return Err(e);
                    }
                    (id, position)
                }
                None => {
                    let (id, first) = match lower {
                        Bound::Unbounded => index.locate(&[]),
                        Bound::Included(k) | Bound::Excluded(k) => index.locate(k),
                    }
                    .ok_or_else(|| self.no_first_leaf())?;
                    if let Some(e) = first.damage(&self.config) {
                        return Err(e);
                    }
                    (id, self.lower_position(first, lower)?)
                }
            };
            (index.chain(id), position)
        };
        let end_key = match end {
            Bound::Included(e) | Bound::Excluded(e) => Some(e),
            Bound::Unbounded => None,
        };
        let pool = self.heap.pool();
        let slot_bytes = self.config.slot_bytes;
        let slots = self.slots();
        let mut ahead = Ahead {
            offset: u64::MAX,
            slots: 0,
            following: None,
            budget: limit,
        };
        let (mut asked, mut copied) = (0usize, 0usize);
        let mut used = 0usize;
        // Where each slot of the leaf being copied went in `bytes`: its key's start, the
        // key's length and the value's, in three arrays of words (a triple copied whole was
        // moved through the stack in halves, each a load waiting on two smaller stores).
        let mut key_at = [0usize; 64];
        let mut key_len = [0usize; 64];
        let mut value_len = [0usize; 64];
        while let Some((id, leaf)) = leaves.next() {
            if let Some(e) = leaf.damage(&self.config) {
                return Err(e);
            }
            let order = leaf.ordered();
            let first = std::mem::take(&mut position).min(order.len());
            let take = (order.len() - first).min(limit - pairs.len());
            let order = &order[first..first + take];
            let mut taken = 0u64;
            for &slot in order {
                taken |= 1 << slot;
            }
            // Those certainly past the end are not copied.
            let wanted = taken & !end_key.map_or(0, |e| leaf.beyond(e));
            let following = match pairs.len() + take < limit {
                true => leaves.following(),
                false => None,
            };
            if let Some(next) = following {
                prefetch_leaf(next);
            }
            ahead.enter(leaf, wanted, following);
            // The slots copied first, then checked (see `Slots::copy_slot`): slot `slot`'s
            // bytes at `base + k * slot_bytes` for the `k`-th of them, out-of-line pairs
            // after the last.
            let base = used;
            let mut at = base;
            let mut copy = wanted;
            while copy != 0 {
                let slot = copy.trailing_zeros() as usize;
                copy &= copy - 1;
                while asked < copied + PREFETCH_AHEAD {
                    let Some((offset, slot)) = ahead.next() else {
                        break;
                    };
                    pool.prefetch(self.config.slot_at(offset, slot), slot_bytes);
                    asked += 1;
                }
                slots.copy_slot(self.config.slot_at(leaf.offset, slot), bytes, at)?;
                at += slot_bytes as usize;
                copied += 1;
            }
            used = at;
            let (mut check, mut at) = (wanted, base);
            while check != 0 {
                let slot = check.trailing_zeros() as usize;
                check &= check - 1;
                let offset = self.config.slot_at(leaf.offset, slot);
                let (k, kl, vl) = slots.finish_pair(offset, bytes, at, &mut used)?;
                (key_at[slot], key_len[slot], value_len[slot]) = (k, kl, vl);
                at += slot_bytes as usize;
            }
            for &slot in order {
                let slot = slot as usize;
                let (at, key_len, value_len) = (key_at[slot], key_len[slot], value_len[slot]);
                if wanted & (1 << slot) == 0 || past(&bytes[at..at + key_len], end) {
                    return Ok(true);
                }
                pairs.push((at, key_len, value_len));
            }
            if pairs.len() == limit {
                *resume_leaf = id;
                *resume_position = first + take;
                *generation = Some(index.generation);
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Where a batch from `lower` starts, when `lower`'s key is in the map: its leaf (number
    /// and state) and the key's position in the leaf's key order (one past it for an
    /// excluded bound), found through the hash index (the key's slot, whose key is read and
    /// compared) and the leaf holding that slot, without a search of the tree. `None` when
    /// the key is absent (or its slot cannot be read, or its leaf not placed): the caller
    /// searches the tree, which reports what a damaged slot or leaf needs reported.
    pub(super) fn start_by_hash<'i>(
        &self,
        index: &'i Index,
        lower: Bound<&[u8]>,
    ) -> Option<(u32, &'i Leaf, usize)> {
        let (key, past) = match lower {
            Bound::Unbounded => return None,
            Bound::Included(k) => (k, 0),
            Bound::Excluded(k) => (k, 1),
        };
        if key.len() > MAX_KEY_BYTES {
            return None;
        }
        let slots = self.slots();
        let hash = index.keys.hash(key);
        let is_key = |slot| matches!(slots.compare(slot, key), Ok(Ordering::Equal));
        // The first slot of the key's hash, nearly always the key's own: its lines are asked
        // for while its leaf is found, and its key is compared once they are in.
        let mut at = index.keys.find(hash, |_| true)?;
        self.heap.pool().prefetch(at, self.config.slot_bytes);
        let mut place = index.holding(at);
        if let Some((_, leaf)) = place {
            prefetch_leaf(leaf);
        }
        if !is_key(at) {
            at = index.keys.find(hash, is_key)?;
            place = index.holding(at);
        }
        let (id, leaf) = place?;
        let slot = (at.checked_sub(self.config.slot_at(leaf.offset, 0))? / self.config.slot_bytes)
            as usize;
        if slot >= 64 || self.config.slot_at(leaf.offset, slot) != at {
            return None;
        }
        let position = leaf.ordered().iter().position(|&s| s as usize == slot)?;
        Some((id, leaf, position + past))
    }

    /// The first position of `leaf`'s key order whose key is inside `lower`.
    pub(super) fn lower_position(&self, leaf: &Leaf, lower: Bound<&[u8]>) -> Result<usize> {
        let (key, inclusive) = match lower {
            Bound::Unbounded => return Ok(0),
            Bound::Included(k) => (k, true),
            Bound::Excluded(k) => (k, false),
        };
        let slots = self.slots();
        leaf.rank(key, inclusive, |slot| {
            slots.compare(self.config.slot_at(leaf.offset, slot), key)
        })
    }
}

/// Whether `key` lies past `end`.
fn past(key: &[u8], end: Bound<&[u8]>) -> bool {
    match end {
        Bound::Unbounded => false,
        Bound::Included(e) => key > e,
        Bound::Excluded(e) => key >= e,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::ops::{Bound, ControlFlow};

    use pmem_ordering::{Pool, PoolOptions};
    use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

    use super::super::{LeafMap, LeafMapConfig};
    use super::{FIRST_BATCH_PAIRS, HINTED_BATCH_PAIRS, SPARE};

    /// The first batch the thread's next scan not told its length would copy.
    fn next_first_batch() -> usize {
        SPARE.with(|s| {
            let batch = s.take();
            let lent = batch.as_ref().map_or(0, |b| b.lent_last);
            s.set(batch);
            lent.clamp(FIRST_BATCH_PAIRS, HINTED_BATCH_PAIRS)
        })
    }

    fn key(i: u64) -> Vec<u8> {
        format!("key:{i:06}").into_bytes()
    }

    /// Open-ended scans stopped by their callbacks after many lengths, each starting with a
    /// batch as long as the last one lent (more, fewer, past the cap, at the range's end):
    /// the model's pairs every time; and one whose callback writes keys between the pairs it
    /// takes (leaves split under it, its batches resume by a search) lends every key present
    /// throughout, once each, in order.
    #[test]
    fn open_ended_scans_start_with_the_last_length_and_survive_writes_between_batches() {
        let pool = Pool::anonymous("leafmap-scan", 16 << 20, &PoolOptions::new()).unwrap();
        let heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched).unwrap();
        // Leaves of 8 slots of 64 bytes: a 100-pair scan crosses a dozen leaves or more.
        let config = LeafMapConfig {
            leaf_bytes: 64 + 8 * 64,
            slot_bytes: 64,
        };
        let map = LeafMap::create(&heap, heap.pool().root_offset(), config).unwrap();
        let mut model = BTreeMap::new();
        for i in (0..2000u64).step_by(2) {
            let v = i.to_le_bytes().to_vec();
            map.insert(&key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        let mut rng = pmem_ordering::sim::SplitMix64::new(7);
        for n in [100, 100, 3, 300, 1, 128, 129, 100, 40] {
            let from = key(rng.below(2000));
            let want: Vec<_> = model
                .range::<[u8], _>((Bound::Included(&from[..]), Bound::Unbounded))
                .take(n)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut got = Vec::new();
            let lent = map
                .scan(Bound::Included(&from), Bound::Unbounded, |k, v| {
                    got.push((k.to_vec(), v.to_vec()));
                    match got.len() < n {
                        true => ControlFlow::Continue(()),
                        false => ControlFlow::Break(()),
                    }
                })
                .unwrap();
            assert_eq!(got, want, "{n} pairs from {from:?}");
            assert_eq!(lent, want.len() as u64);
            assert_eq!(next_first_batch(), want.len().clamp(16, 128));
        }
        // A scan told its length leaves the hint alone.
        let hinted = next_first_batch();
        map.scan_at_most(Bound::Unbounded, Bound::Unbounded, 5, |_, _| {
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(next_first_batch(), hinted);
        // Odd keys written between the pairs a scan takes: the even ones, there throughout,
        // are all lent, in order, with their values.
        let mut lent = Vec::new();
        map.scan(Bound::Included(&key(500)), Bound::Unbounded, |k, v| {
            let i: u64 = std::str::from_utf8(&k[4..]).unwrap().parse().unwrap();
            assert!(lent.last().is_none_or(|&l| l < i), "in order, once each");
            lent.push(i);
            if i.is_multiple_of(2) {
                assert_eq!(v, i.to_le_bytes());
                for j in [i + 1, i + 3, i + 41] {
                    map.upsert(&key(j), b"new").unwrap();
                }
            }
            match lent.len() < 400 {
                true => ControlFlow::Continue(()),
                false => ControlFlow::Break(()),
            }
        })
        .unwrap();
        assert_eq!(lent.len(), 400);
        let last = *lent.last().unwrap();
        let even: Vec<u64> = lent
            .iter()
            .copied()
            .filter(|i| i.is_multiple_of(2))
            .collect();
        assert_eq!(even, (500..=last).step_by(2).collect::<Vec<_>>());
        assert!(map.verify().is_healthy());
    }
}
