//! What a write batch of the store (`crate::store::batch`) asks of a leaf map: its changes
//! planned into the bytes its leaves will hold, then applied (`docs/write-batches.md`).
//!
//! The batch writes in place after its commit point, and a crash after that point is
//! repaired by copying the logged bytes in again, so the plan may rewrite any leaf it
//! touches: nothing but the bytes must be settled before the commit. Per leaf the batch's
//! changes fall in:
//!
//! * **In place**, when the leaf holds what it will hold: a remove clears its slot's bit, an
//!   overwrite rewrites the key's own slot, an insert takes a free slot (one a remove of the
//!   batch freed among them); the slots written and the bitmap word are logged.
//! * **Rebuilt**, when it would hold more than its slots: its pairs as they will be, in key
//!   order, are dealt out evenly to the leaf and new leaves, each filled to three quarters
//!   at most. The new leaves are record blocks ([`Heap::reserve_record`]), written and flushed
//!   before the commit point, unreachable and free on the media until the apply links them
//!   and publishes them (the log names them: `Publish`); a crash before the commit point
//!   leaves them free. The leaf's own new image (its header names the first new leaf) is
//!   logged. A moved pair keeps its slot's bytes, so its record moves with it.
//! * **Emptied**, when every pair of a leaf other than the first goes: the leaf before it in
//!   the chain is made to skip it (logged), and the leaf is freed with the log's clear
//!   (`Free`), as are the records of the pairs removed or overwritten. Nothing is ever
//!   unreachable and allocated across a crash, and no leaf is left empty.
//!
//! New values too large for a slot go to records reserved and written as new leaves are.
//! The DRAM state (each leaf's bitmap, fingerprints, prefixes and key order, the ordered
//! index, the hash index) follows in the apply, under the map's lock, from what the plan
//! worked out: the apply reads nothing from the pool. After a crash the map is opened after
//! the store's recovery has finished the batch, and rebuilds it all from the leaves.

use std::collections::{BTreeMap, HashMap};

use pmem_ordering::Backend;
use pmem_undo_log::{Heap, RecordBlock};

use super::index::{separator, Index, LeafBound};
use super::layout::{
    fingerprint, inline_header, leaf_header, low_bits, out_of_line_slot, LEAF_HEADER,
};
use super::leaf::{key_prefix, KeyPrefix, Leaf};
use super::{LeafMap, Result};
use crate::records::layout::{self as record_layout, check_sizes, owner_of, Header};
use crate::records::MAX_KEY_BYTES;

/// One key's change: its new value, or `None` to remove it.
pub(crate) type LeafChange<'a> = (&'a [u8], Option<&'a [u8]>);

/// A leaf map's planned batch.
#[derive(Default)]
pub(crate) struct LeafPlan {
    /// The bytes the apply writes (and the log holds): slots, bitmaps, next pointers, the
    /// new images of rebuilt leaves.
    pub writes: Vec<(u64, Vec<u8>)>,
    /// New leaves and records, reserved, written and flushed: published by the apply.
    pub publish: Vec<RecordBlock>,
    /// Leaves and records the batch leaves unreachable: freed with the log's clear.
    pub free: Vec<u64>,
    /// The DRAM state's changes, leaf by leaf.
    steps: Vec<Step>,
    /// Keys added minus keys removed.
    delta: i64,
}

impl LeafPlan {
    /// Give back the blocks a plan that will not be committed reserved.
    pub(crate) fn cancel<B: Backend>(self, heap: &Heap<B>) {
        for block in self.publish {
            // Reserved by this plan and never published: the heap takes it back.
            let _ = heap.cancel_record(block);
        }
    }
}

/// How one leaf's DRAM state changes.
enum Step {
    /// The leaf keeps its pairs' slots: its new bitmap and key order; the keys removed
    /// (hash, slot) and inserted (hash, slot, prefix).
    InPlace {
        bound: LeafBound,
        bitmap: u64,
        order: Vec<u8>,
        removed: Vec<(u64, usize)>,
        inserted: Vec<(u64, usize, KeyPrefix)>,
    },
    /// The leaf's pairs dealt to it and new leaves: every old key's (hash, slot), and each
    /// part's bound and state (the first is the leaf's own), its keys' (hash, slot).
    Rebuilt {
        old: Vec<(u64, u64)>,
        parts: Vec<(LeafBound, Leaf)>,
        new: Vec<(u64, u64)>,
    },
    /// The leaf unlinked: its keys' (hash, slot).
    Emptied {
        bound: LeafBound,
        old: Vec<(u64, u64)>,
    },
}

/// A change as the plan finds it: the key's hash and its slot, if present.
struct Found<'c> {
    key: &'c [u8],
    value: Option<&'c [u8]>,
    hash: u64,
    slot: Option<usize>,
    /// The record the key's slot names, if its pair is out of line.
    record: Option<u64>,
}

/// Where a rebuilt leaf's pair comes from.
enum Source {
    /// A slot of the leaf, unchanged.
    Slot(u64),
    /// New slot bytes.
    Bytes(Vec<u8>),
}

/// A rebuilt leaf, planned: the pairs in key order, each with its hash and source, and the
/// parts they are dealt to (offsets; the first is the leaf's own).
struct Rebuild {
    pairs: Vec<(Vec<u8>, u64, Source)>,
    parts: Vec<u64>,
    /// The leaf's keys before the batch: (hash, slot offset).
    old: Vec<(u64, u64)>,
}

/// One leaf the batch touches.
struct Group {
    bound: LeafBound,
    offset: u64,
    /// Its next leaf before the batch.
    next: u64,
    rebuild: Option<Rebuild>,
    emptied: bool,
}

impl<B: Backend> LeafMap<B> {
    /// Plan `changes` (one per key) for a write batch: new leaves and records reserved,
    /// written and flushed, the bytes the apply writes worked out. The caller keeps single
    /// writers out until the batch is applied (the store's writer gate). On an error what
    /// the plan reserved is given back and nothing changed.
    pub(crate) fn plan_batch(&self, changes: &[LeafChange<'_>]) -> Result<LeafPlan> {
        let mut plan = LeafPlan::default();
        match self.plan_into(changes, &mut plan) {
            Ok(()) => Ok(plan),
            Err(e) => {
                plan.cancel(&self.heap);
                Err(e)
            }
        }
    }

    fn plan_into(&self, changes: &[LeafChange<'_>], plan: &mut LeafPlan) -> Result<()> {
        let mut sorted: Vec<LeafChange<'_>> = Vec::with_capacity(changes.len());
        for &(key, value) in changes {
            match value {
                Some(value) => check_sizes(key, value)?,
                // No map holds such a key: removing it changes nothing.
                None if key.len() > MAX_KEY_BYTES => continue,
                None => {}
            }
            sorted.push((key, value));
        }
        sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let index = self.read();
        let mut groups = Vec::new();
        let mut at = 0;
        while at < sorted.len() {
            let (bound, leaf) = self.leaf_of(&index, sorted[at].0)?;
            let upper = index
                .from(bound.as_slice())
                .nth(1)
                .map(|(b, _)| b.as_slice());
            let mut end = at + 1;
            while end < sorted.len() && upper.is_none_or(|u| sorted[end].0 < u) {
                end += 1;
            }
            let group = self.plan_leaf(&index, bound, leaf, &sorted[at..end], plan)?;
            groups.push(group);
            at = end;
        }
        let links = self.links(&index, &groups)?;
        for group in &groups {
            if let Some(rebuild) = &group.rebuild {
                self.write_parts(group, rebuild, &links, plan)?;
            }
        }
        let rebuilt: Vec<u64> = groups
            .iter()
            .filter_map(|g| g.rebuild.as_ref())
            .flat_map(|r| r.parts.iter().copied())
            .collect();
        for (&leaf, &next) in &links {
            if !rebuilt.contains(&leaf) {
                plan.writes.push((leaf + 8, next.to_le_bytes().to_vec()));
            }
        }
        Ok(())
    }

    /// Plan the changes to one leaf (`changes`, sorted, all in its range).
    fn plan_leaf(
        &self,
        index: &Index,
        bound: &LeafBound,
        leaf: &Leaf,
        changes: &[LeafChange<'_>],
        plan: &mut LeafPlan,
    ) -> Result<Group> {
        if let Some(e) = leaf.damage(&self.config) {
            return Err(e);
        }
        let mut buf = super::leaf::SlotBuf::new();
        let mut found = Vec::with_capacity(changes.len());
        let (mut removes, mut inserts) = (0u32, 0u32);
        for &(key, value) in changes {
            let hash = index.keys.hash(key);
            let slot = self.find(leaf, key, hash, &mut buf)?;
            let record = match slot {
                Some(slot) => self
                    .slots()
                    .record_of(self.config.slot_at(leaf.offset, slot))?,
                None => None,
            };
            match (slot, value) {
                (Some(_), None) => removes += 1,
                (None, Some(_)) => inserts += 1,
                _ => {}
            }
            found.push(Found {
                key,
                value,
                hash,
                slot,
                record,
            });
        }
        plan.delta += i64::from(inserts) - i64::from(removes);
        let live = leaf.count as u32;
        let count = live + inserts - removes;
        let group = Group {
            bound: bound.clone(),
            offset: leaf.offset,
            next: self.heap.pool().load_u64(leaf.offset + 8)?,
            rebuild: None,
            emptied: false,
        };
        // Records the batch's removes and overwrites leave behind.
        for f in &found {
            if let (Some(record), true) = (f.record, f.slot.is_some()) {
                plan.free.push(record);
            }
        }
        if count == 0 && leaf.offset != self.head {
            plan.free.push(leaf.offset);
            plan.steps.push(Step::Emptied {
                bound: bound.clone(),
                old: self.keys_of(index, leaf)?,
            });
            return Ok(Group {
                emptied: true,
                ..group
            });
        }
        if u64::from(count) <= self.config.slots() {
            self.plan_in_place(bound, leaf, &found, plan)?;
            return Ok(group);
        }
        let rebuild = self.plan_rebuild(index, leaf, &found, count as usize, plan)?;
        Ok(Group {
            rebuild: Some(rebuild),
            ..group
        })
    }

    /// Every key of `leaf`: (hash, slot offset).
    fn keys_of(&self, index: &Index, leaf: &Leaf) -> Result<Vec<(u64, u64)>> {
        let slots = self.slots();
        let mut keys = Vec::with_capacity(leaf.count as usize);
        for &slot in leaf.ordered() {
            let at = self.config.slot_at(leaf.offset, slot as usize);
            let (key, _) = slots.pair(at)?;
            keys.push((index.keys.hash(&key), at));
        }
        Ok(keys)
    }

    /// A leaf that keeps its slots: removes clear bits, overwrites rewrite their own slot,
    /// inserts take free slots.
    fn plan_in_place(
        &self,
        bound: &LeafBound,
        leaf: &Leaf,
        found: &[Found<'_>],
        plan: &mut LeafPlan,
    ) -> Result<()> {
        let mut bitmap = leaf.bitmap;
        let mut removed = Vec::new();
        for f in found {
            if let (Some(slot), None) = (f.slot, f.value) {
                bitmap &= !(1u64 << slot);
                removed.push((f.hash, slot));
            }
        }
        let mut free = !bitmap & low_bits(self.config.slots());
        let mut inserted = Vec::new();
        // Each inserted key's place in the leaf's key order as it was, and its slot.
        let mut placed = Vec::new();
        for f in found {
            let Some(value) = f.value else { continue };
            let bytes = self.slot_bytes(f.key, value, plan)?;
            let slot = match f.slot {
                Some(slot) => slot,
                None => {
                    let slot = free.trailing_zeros() as usize;
                    free &= free - 1;
                    bitmap |= 1u64 << slot;
                    inserted.push((f.hash, slot, key_prefix(f.key)));
                    placed.push((self.position(leaf, f.key)?, slot));
                    slot
                }
            };
            plan.writes
                .push((self.config.slot_at(leaf.offset, slot), bytes));
        }
        if bitmap != leaf.bitmap {
            plan.writes
                .push((leaf.offset, bitmap.to_le_bytes().to_vec()));
        }
        // The new key order: the old one without the removed slots, the inserted keys (in
        // key order, as the changes are) each before the first old key above it.
        let mut order = Vec::with_capacity(64);
        let mut next = placed.iter().peekable();
        for (p, &slot) in leaf.ordered().iter().enumerate() {
            while let Some(&(_, s)) = next.next_if(|&&(q, _)| q == p) {
                order.push(s as u8);
            }
            if !removed.iter().any(|&(_, r)| r == slot as usize) {
                order.push(slot);
            }
        }
        order.extend(next.map(|&(_, s)| s as u8));
        plan.steps.push(Step::InPlace {
            bound: bound.clone(),
            bitmap,
            order,
            removed,
            inserted,
        });
        Ok(())
    }

    /// A leaf that overflows: its pairs as the batch leaves them, in key order, and the
    /// blocks they will be dealt to (the leaf and new ones, reserved here).
    fn plan_rebuild(
        &self,
        index: &Index,
        leaf: &Leaf,
        found: &[Found<'_>],
        count: usize,
        plan: &mut LeafPlan,
    ) -> Result<Rebuild> {
        let slots = self.slots();
        let mut pairs: BTreeMap<Vec<u8>, (u64, Source)> = BTreeMap::new();
        let mut old = Vec::with_capacity(leaf.count as usize);
        for &slot in leaf.ordered() {
            let at = self.config.slot_at(leaf.offset, slot as usize);
            let (key, _) = slots.pair(at)?;
            let hash = index.keys.hash(&key);
            old.push((hash, at));
            pairs.insert(key, (hash, Source::Slot(at)));
        }
        for f in found {
            match f.value {
                None => drop(pairs.remove(f.key)),
                Some(value) => {
                    let bytes = self.slot_bytes(f.key, value, plan)?;
                    pairs.insert(f.key.to_vec(), (f.hash, Source::Bytes(bytes)));
                }
            }
        }
        debug_assert_eq!(pairs.len(), count);
        let fill = (self.config.slots() * 3 / 4).max(1) as usize;
        let mut parts = vec![leaf.offset];
        for _ in 1..count.div_ceil(fill) {
            let block = self.heap.reserve_record(self.config.leaf_bytes)?;
            plan.publish.push(block);
            parts.push(block.offset);
        }
        Ok(Rebuild {
            pairs: pairs
                .into_iter()
                .map(|(key, (hash, source))| (key, hash, source))
                .collect(),
            parts,
            old,
        })
    }

    /// The next pointers the batch changes: by leaf (an existing one, or a part of a rebuilt
    /// one), its new next leaf.
    fn links(&self, index: &Index, groups: &[Group]) -> Result<BTreeMap<u64, u64>> {
        let mut links = BTreeMap::new();
        // Each touched leaf's last leaf in the new chain (an emptied one: the one before it).
        let mut tails: HashMap<u64, u64> = HashMap::new();
        for group in groups {
            if group.emptied {
                let before = index
                    .before(group.bound.as_slice())
                    .ok_or_else(|| self.no_first_leaf())?
                    .offset;
                let tail = tails.get(&before).copied().unwrap_or(before);
                links.insert(tail, group.next);
                tails.insert(group.offset, tail);
                continue;
            }
            let parts = group.rebuild.as_ref().map_or(&[][..], |r| &r.parts[..]);
            for pair in parts.windows(2) {
                links.insert(pair[0], pair[1]);
            }
            if let Some(&last) = parts.last() {
                links.insert(last, group.next);
            }
            tails.insert(group.offset, parts.last().copied().unwrap_or(group.offset));
        }
        Ok(links)
    }

    /// Deal a rebuilt leaf's pairs to its parts: the new leaves written and flushed now, the
    /// leaf's own image planned; and its DRAM step.
    fn write_parts(
        &self,
        group: &Group,
        rebuild: &Rebuild,
        links: &BTreeMap<u64, u64>,
        plan: &mut LeafPlan,
    ) -> Result<()> {
        let pool = self.heap.pool();
        let slot_bytes = self.config.slot_bytes as usize;
        let (n, k) = (rebuild.pairs.len(), rebuild.parts.len());
        let mut new = Vec::with_capacity(n);
        let mut parts = Vec::with_capacity(k);
        let mut from = 0;
        for (j, &offset) in rebuild.parts.iter().enumerate() {
            let m = n / k + usize::from(j < n % k);
            let pairs = &rebuild.pairs[from..from + m];
            let next = links.get(&offset).copied().unwrap_or(group.next);
            let mut image = vec![0u8; LEAF_HEADER as usize + m * slot_bytes];
            image[..LEAF_HEADER as usize].copy_from_slice(&leaf_header(
                self.root,
                low_bits(m as u64),
                next,
            ));
            let mut state = Leaf::empty(offset);
            for (i, (key, hash, source)) in pairs.iter().enumerate() {
                let to = LEAF_HEADER as usize + i * slot_bytes;
                match source {
                    Source::Slot(at) => pool.read_bytes(*at, &mut image[to..to + slot_bytes])?,
                    Source::Bytes(bytes) => image[to..to + bytes.len()].copy_from_slice(bytes),
                }
                state.fps[i] = fingerprint(*hash);
                state.prefixes[i] = key_prefix(key);
                state.order[i] = i as u8;
                new.push((*hash, self.config.slot_at(offset, i)));
            }
            state.bitmap = low_bits(m as u64);
            state.count = m as u8;
            let bound = if j == 0 {
                group.bound.clone()
            } else {
                LeafBound::new(separator(&rebuild.pairs[from - 1].0, &pairs[0].0))
            };
            if j == 0 {
                plan.writes.push((offset, image));
            } else {
                // Flushed; the batch's commit fence makes it durable, unreachable until the
                // apply links it.
                let _flushed = pool.flush(pool.write(offset, &image)?);
            }
            parts.push((bound, state));
            from += m;
        }
        plan.steps.push(Step::Rebuilt {
            old: rebuild.old.clone(),
            parts,
            new,
        });
        Ok(())
    }

    /// A slot's bytes for `key -> value`: inline if they fit, else naming a new record,
    /// reserved, written and flushed here (published by the apply).
    fn slot_bytes(&self, key: &[u8], value: &[u8], plan: &mut LeafPlan) -> Result<Vec<u8>> {
        if key.len() + value.len() <= self.config.inline_bytes() {
            return Ok([&inline_header(key, value)[..], key, value].concat());
        }
        let heap = &self.heap;
        let pool = heap.pool();
        let block = heap.reserve_record(record_layout::record_bytes(key.len(), value.len()))?;
        plan.publish.push(block);
        let at = block.offset;
        let header = record_layout::header(owner_of(self.root), key, value);
        let mut w = pool.write(at, &header)?;
        w = w.merge(pool.write(Header::key_at(at), key)?);
        w = w.merge(pool.write(Header::key_at(at) + key.len() as u64, value)?);
        // Flushed; the batch's commit fence makes it durable.
        let _flushed = pool.flush(w);
        Ok(out_of_line_slot(at).to_vec())
    }

    /// Apply `plan` (after the batch's commit point, single writers still kept out): the new
    /// blocks published, every planned byte written, each store flushed and none fenced (the
    /// batch's fence makes them durable); then the DRAM state follows. Readers wait for the
    /// map's lock meanwhile. The blocks the plan frees are the caller's (freed with the log's
    /// clear).
    pub(crate) fn apply_batch(&self, plan: &LeafPlan) -> Result<()> {
        let mut guard = self.write();
        let index: &mut Index = &mut guard;
        let pool = self.heap.pool();
        for &block in &plan.publish {
            // Flushed; the batch's fence makes it durable.
            let _flushed = self.heap.publish_record(block)?;
        }
        for (offset, bytes) in &plan.writes {
            let _flushed = pool.flush(pool.write(*offset, bytes)?);
        }
        for step in &plan.steps {
            self.apply_step(index, step)?;
        }
        index.len = index.len.wrapping_add_signed(plan.delta);
        Ok(())
    }

    /// One leaf's DRAM state, as the batch leaves it.
    fn apply_step(&self, index: &mut Index, step: &Step) -> Result<()> {
        match step {
            Step::InPlace {
                bound,
                bitmap,
                order,
                removed,
                inserted,
            } => {
                let leaf = index
                    .get_mut(bound.as_slice())
                    .ok_or_else(|| self.no_first_leaf())?;
                let offset = leaf.offset;
                leaf.bitmap = *bitmap;
                leaf.order[..order.len()].copy_from_slice(order);
                leaf.count = order.len() as u8;
                for &(hash, slot, prefix) in inserted {
                    leaf.fps[slot] = fingerprint(hash);
                    leaf.prefixes[slot] = prefix;
                }
                for &(hash, slot) in removed {
                    index.keys.remove(hash, self.config.slot_at(offset, slot));
                }
                for &(hash, slot, _) in inserted {
                    index.keys.insert(hash, self.config.slot_at(offset, slot));
                }
            }
            Step::Rebuilt { old, parts, new } => {
                for &(hash, at) in old {
                    index.keys.remove(hash, at);
                }
                for (bound, state) in parts {
                    // The first part's bound is the leaf's own: its state is replaced.
                    index.insert(bound.clone(), state.clone());
                }
                for &(hash, at) in new {
                    index.keys.insert(hash, at);
                }
            }
            Step::Emptied { bound, old } => {
                for &(hash, at) in old {
                    index.keys.remove(hash, at);
                }
                index.remove(bound.as_slice());
            }
        }
        Ok(())
    }
}
