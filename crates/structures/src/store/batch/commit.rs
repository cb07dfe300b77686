//! A batch's commit: every map's changes planned, the log committed (the commit point), the
//! plans applied, the log cleared (with the blocks a map of leaves drops freed). Three
//! fences, plus those of the room the plans make and of the clear's frees.

use pmem_ordering::Backend;
use pmem_undo_log::{Heap, RecordBlock};

use super::{BatchMap, Touched, WriteBatch};
use crate::cceh::SlotWrite;
use crate::fastfair::{KeyChange, LeafImage};
use crate::leafmap::LeafPlan;
use crate::records::RecordPlan;
use crate::store::batch_state::{Area, Log};
use crate::store::error::Error;
use crate::store::map::MapCore;
use crate::store::raw::{HashTable, Tree};
use crate::sync::WriterGate;
use crate::u64map::U64Map;

/// One map's planned changes.
enum Plan {
    /// A map of words: the structure's writes, and the reserved key's new value if it changes.
    HashWords(Vec<SlotWrite>, Option<Option<u64>>),
    TreeWords(Vec<LeafImage>, Option<Option<u64>>),
    /// A map of records.
    Records(RecordPlan),
    /// A map of leaves.
    Leaves(LeafPlan),
}

impl Plan {
    /// Give back what the plan reserved (it will not be committed).
    fn cancel<B: Backend>(self, heap: &Heap<B>) {
        match self {
            Plan::Records(plan) => plan.cancel(heap),
            Plan::Leaves(plan) => plan.cancel(heap),
            Plan::HashWords(..) | Plan::TreeWords(..) => {}
        }
    }

    /// The blocks the batch leaves unreachable, to free with the log's clear.
    fn frees(&self) -> &[u64] {
        match self {
            Plan::Leaves(plan) => &plan.free,
            _ => &[],
        }
    }
}

/// The changes of a map of words with reserved key `reserved`: the others, sorted, and the
/// reserved key's new value if the batch writes it.
fn split_reserved<B: Backend>(
    touched: &Touched<B>,
    reserved: u64,
) -> (Vec<KeyChange>, Option<Option<u64>>) {
    let mut side = None;
    let mut changes = Vec::with_capacity(touched.words.len());
    for (&key, &value) in &touched.words {
        if key == reserved {
            side = Some(value);
        } else {
            changes.push((key, value));
        }
    }
    changes.sort_unstable_by_key(|&(key, _)| key);
    (changes, side)
}

/// Log the reserved key's new value of `core`'s map.
fn log_side<S, B: Backend>(log: &mut Log, core: &MapCore<S, B>, side: Option<Option<u64>>) {
    if let Some(value) = side {
        let (offset, bytes) = core.side_image(value);
        log.bytes(offset, &bytes);
    }
}

impl<B: Backend> Touched<B> {
    /// Plan this map's changes, logging what the apply will write. The caller holds its gate.
    fn plan(&self, log: &mut Log) -> Result<Plan, Error> {
        Ok(match &self.map {
            BatchMap::HashWords(core) => {
                let (changes, side) = split_reserved(self, <HashTable<B> as U64Map>::RESERVED_KEY);
                let writes = core.raw.plan_batch(&changes)?;
                for write in &writes {
                    let (offset, bytes) = write.image();
                    log.bytes(offset, &bytes);
                }
                log_side(log, core, side);
                Plan::HashWords(writes, side)
            }
            BatchMap::TreeWords(core) => {
                let (changes, side) = split_reserved(self, <Tree<B> as U64Map>::RESERVED_KEY);
                let leaves = core.raw.plan_batch(&changes)?;
                for leaf in &leaves {
                    log.bytes(leaf.offset, &leaf.bytes);
                }
                log_side(log, core, side);
                Plan::TreeWords(leaves, side)
            }
            BatchMap::HashRecords(core) => {
                let plan = core.raw.plan_batch(&self.record_changes())?;
                log_records(log, &plan);
                for write in &plan.slots {
                    let (offset, bytes) = write.image();
                    log.bytes(offset, &bytes);
                }
                Plan::Records(plan)
            }
            BatchMap::TreeRecords(core) => {
                let plan = core.raw.plan_batch(&self.record_changes())?;
                log_records(log, &plan);
                for (_, leaf) in &plan.leaves {
                    log.bytes(leaf.offset, &leaf.bytes);
                }
                Plan::Records(plan)
            }
            BatchMap::TreeLeaves(core) => {
                let plan = core.raw.plan_batch(&self.record_changes())?;
                for &block in &plan.publish {
                    log.publish(block);
                }
                for (offset, bytes) in &plan.writes {
                    log.bytes(*offset, bytes);
                }
                for &block in &plan.free {
                    log.free(block);
                }
                Plan::Leaves(plan)
            }
        })
    }

    /// A map of records' changes, as its plan takes them.
    fn record_changes(&self) -> Vec<(&[u8], Option<&[u8]>)> {
        self.records
            .iter()
            .map(|(key, value)| (key.as_slice(), value.as_deref()))
            .collect()
    }

    /// Apply `plan` (after the commit point): every store flushed, none fenced. Returns the
    /// record blocks retired, for the limbo once the batch's fence made that durable.
    fn apply(&self, plan: &Plan) -> Result<Vec<RecordBlock>, Error> {
        match (&self.map, plan) {
            (BatchMap::HashWords(core), Plan::HashWords(writes, side)) => {
                for write in writes {
                    core.raw.apply_slot_write(write)?;
                }
                apply_side(core, *side)?;
                Ok(Vec::new())
            }
            (BatchMap::TreeWords(core), Plan::TreeWords(leaves, side)) => {
                for leaf in leaves {
                    core.raw.apply_leaf_image(leaf)?;
                }
                apply_side(core, *side)?;
                Ok(Vec::new())
            }
            (BatchMap::HashRecords(core), Plan::Records(plan)) => Ok(core.raw.apply_batch(plan)?),
            (BatchMap::TreeRecords(core), Plan::Records(plan)) => Ok(core.raw.apply_batch(plan)?),
            (BatchMap::TreeLeaves(core), Plan::Leaves(plan)) => {
                core.raw.apply_batch(plan)?;
                Ok(Vec::new())
            }
            _ => unreachable!("each map's plan is of its own kind"),
        }
    }

    /// After the batch's last fence: hand `retired` record blocks to the map's limbo, and
    /// retire the layers of an ordered map of records that `plan`'s removes left empty.
    fn finish(&self, retired: Vec<RecordBlock>, plan: &Plan) {
        match (&self.map, plan) {
            (BatchMap::HashRecords(core), _) => core.raw.defer_batch_retired(retired),
            (BatchMap::TreeRecords(core), Plan::Records(plan)) => {
                core.raw.finish_batch(retired, plan)
            }
            _ => debug_assert!(retired.is_empty()),
        }
    }
}

/// Log a plan's records: those to publish and those to retire.
fn log_records(log: &mut Log, plan: &RecordPlan) {
    for &block in &plan.publish {
        log.publish(block);
    }
    for &block in &plan.retire {
        log.retire(block);
    }
}

/// Store the reserved key's new value of `core`'s map (flushed), then show it to readers.
fn apply_side<S, B: Backend>(core: &MapCore<S, B>, side: Option<Option<u64>>) -> Result<(), Error> {
    if let Some(value) = side {
        let pool = core.shared.heap.pool();
        let (offset, bytes) = core.side_image(value);
        let _flushed = pool.flush(pool.write(offset, &bytes)?);
        core.publish_reserved(value);
    }
    Ok(())
}

impl<B: Backend> WriteBatch<B> {
    /// Commit the batch: every change it holds is durable, and visible, when this returns
    /// `Ok`; readers see each map's changes appear key by key meanwhile
    /// ([`Store::read_consistent`](crate::Store::read_consistent) sees them all at once).
    /// On an error nothing changed: a full pool ([`Error::PoolFull`]), a log past the store's
    /// write-batch area ([`Error::BatchLogFull`]), a structure's refusal. Room the commit made
    /// before failing (a split, a new layer of an ordered map of records) stays, holding the
    /// same keys.
    ///
    /// Fences: three (the commit point, the apply, the log's clear), whatever the batch's
    /// size, plus those of the room its maps need (a split, a directory doubling, a new layer
    /// are each their own transaction), of the first record block a reservation takes from
    /// a new chunk, and of the store's first batch (which makes the write-batch area).
    pub fn commit(mut self) -> Result<(), Error> {
        if self.changes == 0 {
            return Ok(());
        }
        // Every map not read through the batch is held from here, with one barrier for all.
        let gates: Vec<&WriterGate> = self
            .maps
            .iter()
            .filter(|t| !t.closed)
            .map(|t| t.map.gate())
            .collect();
        WriterGate::close_all(&gates);
        for touched in &mut self.maps {
            touched.closed = true;
        }
        let area = self.area()?;
        let heap = &self.shared.heap;
        let pool = heap.pool();
        let mut log = Log::default();
        let mut plans = Vec::with_capacity(self.maps.len());
        let cancel = |plans: Vec<Plan>| {
            plans.into_iter().for_each(|p: Plan| p.cancel(heap));
            // Records written into the blocks given back were flushed and not fenced: fenced
            // now, so the failed commit leaves no store in doubt (they are free blocks' bytes).
            pool.sfence();
        };
        for touched in &self.maps {
            match touched.plan(&mut log) {
                Ok(plan) => plans.push(plan),
                Err(e) => {
                    cancel(plans);
                    return Err(e);
                }
            }
        }
        if log.len() > area.capacity() {
            cancel(plans);
            return Err(Error::BatchLogFull {
                bytes: log.len(),
                max: area.capacity(),
            });
        }
        let sequence = self.shared.batches.next_sequence();
        if let Err(e) = area.commit(pool, &log, sequence) {
            // The commit line was not written whole: the batch is not there.
            cancel(plans);
            return Err(e);
        }
        // Committed: what follows cannot undo it (a crash is repaired from the log at open).
        let applying = &self.shared.batches.applying;
        applying.change_begin();
        let applied: Result<Vec<Vec<RecordBlock>>, Error> = self
            .maps
            .iter()
            .zip(&plans)
            .map(|(touched, plan)| touched.apply(plan))
            .collect();
        applying.change_end();
        let retired = applied?;
        pool.sfence();
        let frees: Vec<u64> = plans
            .iter()
            .flat_map(|p| p.frees().iter().copied())
            .collect();
        area.clear_freeing(heap, &frees, 0)?;
        for ((touched, retired), plan) in self.maps.iter().zip(retired).zip(&plans) {
            touched.finish(retired, plan);
        }
        Ok(())
    }

    /// The store's write-batch area, made by its first batch.
    fn area(&self) -> Result<Area, Error> {
        if let Some(area) = self.shared.batches.area() {
            return Ok(area);
        }
        let mut state = self.shared.lock();
        let area = match state.catalog.batch_area() {
            Some(offset) => Area::open(&self.shared.heap, offset)?,
            None => Area::create(&self.shared.heap, &mut state.catalog)?,
        };
        self.shared.batches.set_area(area);
        Ok(area)
    }
}
