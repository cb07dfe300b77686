//! What a write batch of the store (`crate::store::batch`) asks of a map of records: its
//! changes planned (new records written, the structure's writes planned), then applied.
//!
//! A batch's record does not go through the two-fence protocol of [`super`]: it is reserved,
//! written and flushed before the batch's commit point, and the batch's log names it (to
//! publish) and the record it replaces or removes (to retire). The commit fence makes the
//! records and the log durable together; the apply publishes and retires the blocks and
//! stores the slots or leaves with no fence of its own, and the batch's next fence makes all
//! of it durable. A crash after the commit point is repaired at open: the log's images of the
//! slots and leaves are copied in again, and each block it names is resolved allocated or
//! free ([`pmem_undo_log::Heap::resolve_record`]), whatever the bits held at the crash. No
//! intent line is needed: the log names every block in doubt.
//!
//! The plan of the ordered map is in `tree/batch.rs`.

use pmem_ordering::Backend;
use pmem_undo_log::{Heap, RecordBlock};

use super::error::RecordMapError;
use super::hash::RecordHashMap;
use super::layout::check_sizes;
use super::layout::MAX_KEY_BYTES;
use crate::cceh::SlotWrite;
use crate::fastfair::LeafImage;

/// One key's change: its new value, or `None` to remove it.
pub(crate) type RecordChange<'a> = (&'a [u8], Option<&'a [u8]>);

/// A map's planned batch: the structure's writes, the records to publish and retire.
#[derive(Debug, Default)]
pub(crate) struct RecordPlan {
    /// A hash map's slot writes.
    pub slots: Vec<SlotWrite>,
    /// An ordered map's leaf images, each with its layer's root object.
    pub leaves: Vec<(u64, LeafImage)>,
    /// New records, reserved, written and flushed: published by the apply.
    pub publish: Vec<RecordBlock>,
    /// Records the batch replaces or removes (offset and block size): retired by the apply.
    pub retire: Vec<RecordBlock>,
    /// Keys added minus keys removed.
    pub delta: i64,
    /// An ordered map's layers below the top that the batch removes keys from (by block
    /// offset), each with one of those keys: retired after the batch if it leaves them empty.
    pub removed_from: Vec<(u64, Vec<u8>)>,
}

impl RecordPlan {
    /// Give back the reserved blocks of a plan that will not be committed.
    pub(crate) fn cancel<B: Backend>(self, heap: &Heap<B>) {
        for block in self.publish {
            // Reserved by this plan and never published: the heap takes it back.
            let _ = heap.cancel_record(block);
        }
    }

    /// Publish the new records (stores flushed, no fence): the apply's first step, before
    /// any slot or leaf reaches them.
    pub(crate) fn publish_all<B: Backend>(&self, heap: &Heap<B>) -> Result<(), RecordMapError> {
        for &block in &self.publish {
            // Flushed; the batch's fence makes it durable.
            let _flushed = heap.publish_record(block)?;
        }
        Ok(())
    }

    /// Retire the records replaced or removed (stores flushed, no fence): the apply's last
    /// step, once no slot or leaf reaches them. Returns the retired blocks, for the limbo
    /// once the batch's fence made their retirement durable.
    pub(crate) fn retire_all<B: Backend>(
        &self,
        heap: &Heap<B>,
    ) -> Result<Vec<RecordBlock>, RecordMapError> {
        let mut retired = Vec::with_capacity(self.retire.len());
        for block in &self.retire {
            let (block, _flushed) = heap.retire_record(block.offset)?;
            retired.push(block);
        }
        Ok(retired)
    }
}

/// The published record block at `offset`, as a plan names it for retirement.
pub(super) fn published<B: Backend>(
    heap: &Heap<B>,
    offset: u64,
) -> Result<RecordBlock, RecordMapError> {
    heap.record_block(offset)
        .ok_or_else(|| RecordMapError::CorruptRecord {
            offset,
            reason: "a key's entry points at a block that is not a published record".into(),
        })
}

impl<B> RecordHashMap<B>
where
    B: Backend,
{
    /// Plan `changes` (one per key): each new value's record staged, the table's slot writes
    /// planned (splits made first). The caller holds the map's writer gate. On an error the
    /// staged records are given back and the map holds what it held (a split made meanwhile
    /// changed no key).
    pub(crate) fn plan_batch(
        &self,
        changes: &[RecordChange<'_>],
    ) -> Result<RecordPlan, RecordMapError> {
        let heap = self.heap();
        let mut plan = RecordPlan::default();
        match self.plan_into(changes, &mut plan) {
            Ok(()) => Ok(plan),
            Err(e) => {
                plan.cancel(heap);
                Err(e)
            }
        }
    }

    fn plan_into(
        &self,
        changes: &[RecordChange<'_>],
        plan: &mut RecordPlan,
    ) -> Result<(), RecordMapError> {
        let heap = self.heap();
        let mut writes = Vec::with_capacity(changes.len());
        for &(key, value) in changes {
            if key.len() > MAX_KEY_BYTES && value.is_none() {
                continue;
            }
            check_sizes(key, value.unwrap_or_default())?;
            let old = {
                let _guard = self.records.pin();
                self.record_of(key)?
            };
            if let Some(old) = old {
                plan.retire.push(published(heap, old)?);
            }
            match value {
                Some(value) => {
                    let block = self.records.stage_for_batch(heap, key, value)?;
                    plan.publish.push(block);
                    plan.delta += i64::from(old.is_none());
                    writes.push((self.probe(key), Some(block.offset)));
                }
                None if old.is_some() => {
                    plan.delta -= 1;
                    writes.push((self.probe(key), None));
                }
                None => {}
            }
        }
        // Pinned (the map's own epoch) while the plan's probes read the records they meet.
        let _guard = self.records.pin();
        plan.slots = self.table.plan_batch(&writes)?;
        Ok(())
    }

    /// Apply `plan` (after the batch's commit point): publish, store the slots, retire; every
    /// store flushed, the batch's fence makes them durable. Returns the retired blocks for
    /// [`RecordHashMap::defer_batch_retired`].
    pub(crate) fn apply_batch(
        &self,
        plan: &RecordPlan,
    ) -> Result<Vec<RecordBlock>, RecordMapError> {
        let heap = self.heap();
        plan.publish_all(heap)?;
        for write in &plan.slots {
            self.table.apply_slot_write(write)?;
        }
        plan.retire_all(heap)
    }

    /// Hand the blocks a batch retired to the limbo (after its last fence).
    pub(crate) fn defer_batch_retired(&self, blocks: Vec<RecordBlock>) {
        self.records.defer_retired(blocks);
    }
}
