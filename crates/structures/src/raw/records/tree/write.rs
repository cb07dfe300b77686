//! Inserts, overwrites and removes: a descent, then the record protocol of [`crate::records`]
//! in the layer the key belongs to, making a layer first when the key meets another going on
//! with the same bytes (`layers.rs`), and retiring the layer a remove leaves empty
//! (`retire.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pmem_ordering::Backend;

use super::super::layout::check_sizes;
use super::super::Staged;
use super::{goes_on, is_layer, read_value, Attempt, Layer, RecordTreeMap, Result, MAX_KEY_BYTES};

/// What a writer's descent found, owned so that it outlives the pin it was found under.
pub(super) struct Target<B: Backend> {
    pub layer: Arc<Layer<B>>,
    pub word: u64,
    pub record: Option<u64>,
    /// Whether the record is the key's own.
    pub ours: bool,
    /// The layer below the entry, whose skipped bytes the key leaves.
    pub diverged: Option<Arc<Layer<B>>>,
}

impl<B> RecordTreeMap<B>
where
    B: Backend,
{
    /// The descent for `key`, pinned (the map's epoch), owned.
    pub(super) fn target(&self, key: &[u8]) -> Result<Target<B>> {
        let guard = self.records.pin();
        let spot = self.descend(key, &guard)?;
        let ours = match spot.record {
            Some(r) => self.holds(&spot, r, key)?,
            None => false,
        };
        Ok(Target {
            layer: self.owned(spot.layer)?,
            word: spot.word,
            record: spot.record,
            ours,
            diverged: spot.diverged.map(|l| self.owned(l)).transpose()?,
        })
    }

    pub(super) fn put(
        &self,
        key: &[u8],
        value: &[u8],
        replace: bool,
    ) -> Result<(bool, Option<Vec<u8>>)> {
        check_sizes(key, value)?;
        let heap = &self.heap;
        let pool = heap.pool();
        let mut staged: Option<Staged<'_>> = None;
        loop {
            self.release_retired();
            // The descent and the record reads it decides on are pinned, so those records
            // cannot be reused under it. The staging is not: a reservation on a full heap
            // waits for retired records, which a pinned thread would hold back. The layer is
            // touched again only pinned and alive (not dead), so its blocks are not freed
            // under the write; under the leaf lock of the write, the entry's record cannot be
            // retired by anyone else.
            let target = self.target(key)?;
            let attempt = if let Some(below) = &target.diverged {
                // The key leaves the run of bytes the layer below skips: a layer where it
                // does takes the entry's place. A staged record is given back first, so that
                // no writer holds an intent line while it waits for another (making a layer
                // claims one): with every line held that way, writers would wait forever.
                if let Some(s) = staged.take() {
                    s.abandon(heap);
                }
                self.split(&target.layer, target.word, below, key)
                    .map(|()| None)
            } else {
                match target.record {
                    Some(r) if !target.ours => {
                        // Another key going on with the same bytes: both go down to a layer
                        // at the first slice where they differ.
                        if let Some(s) = staged.take() {
                            s.abandon(heap);
                        }
                        self.push_down(&target.layer, target.word, r, key)
                            .map(|()| None)
                    }
                    Some(_) if !replace => {
                        if let Some(s) = staged.take() {
                            s.abandon(heap);
                        }
                        return Ok((false, None));
                    }
                    found => {
                        let s = match staged.as_mut() {
                            Some(s) => s,
                            None => staged.insert(self.records.stage(heap, key, value, found)?),
                        };
                        let new = s.new_offset().expect("a staged put has a record");
                        let layer = &target.layer;
                        let word = target.word;
                        let mut old_value = None;
                        let _guard = self.records.pin();
                        let put = if layer.is_dead() {
                            Err(Attempt::Retry)
                        } else {
                            layer.tree.put_with(word, new, replace, |old| {
                                // Checked under the leaf lock the layer was marked dead under.
                                if layer.is_dead() {
                                    return Err(Attempt::Retry);
                                }
                                if let Some(o) = old {
                                    if is_layer(o)
                                        || (goes_on(word) && !self.record_has_key(o, key)?)
                                    {
                                        return Err(Attempt::Retry);
                                    }
                                    old_value = Some(read_value(pool, o)?);
                                }
                                s.commit(heap, old).map_err(Attempt::from)
                            })
                        };
                        match put {
                            Ok(None) => {
                                self.count.fetch_add(1, Ordering::Relaxed);
                                Ok(Some((true, None)))
                            }
                            Ok(Some(_)) if !replace => Err(Attempt::Retry),
                            Ok(Some(_)) => Ok(Some((true, old_value))),
                            Err(e) => Err(e),
                        }
                    }
                }
            };
            match attempt {
                Ok(Some(done)) => {
                    if let Some(s) = staged.take() {
                        s.finish();
                    }
                    return Ok(done);
                }
                Ok(None) => continue,
                Err(Attempt::Retry) => {
                    // Most often a layer being retired: let its retirer finish the unlink.
                    std::thread::yield_now();
                    continue;
                }
                Err(Attempt::Fail(e)) => {
                    if let Some(s) = staged.take() {
                        // A split that found the heap full left the tree as it was.
                        let _ = s.undo(heap);
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Remove `key`; its value if it was there. Allocates nothing, so it succeeds on a full
    /// heap; the layer it leaves empty is retired (unlinked and freed).
    pub fn remove(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if key.len() > MAX_KEY_BYTES {
            return Ok(None);
        }
        let heap = &self.heap;
        let pool = heap.pool();
        loop {
            self.release_retired();
            let guard = self.records.pin();
            let spot = self.descend(key, &guard)?;
            let Some(r) = spot.record else {
                return Ok(None);
            };
            if !self.holds(&spot, r, key)? {
                return Ok(None);
            }
            let mut staged = self.records.stage_remove(heap, r)?;
            let mut old_value = None;
            let word = spot.word;
            let removed = spot.layer.tree.remove_with(word, |old| {
                if is_layer(old) || (goes_on(word) && !self.record_has_key(old, key)?) {
                    return Err(Attempt::Retry);
                }
                old_value = Some(read_value(pool, old)?);
                staged.commit(heap, Some(old)).map_err(Attempt::from)
            });
            match removed {
                Ok(Some(_)) => {
                    self.count.fetch_sub(1, Ordering::Relaxed);
                    staged.finish();
                    let emptied = (!std::ptr::eq(spot.layer, &*self.top)
                        && spot.layer.tree.is_empty())
                    .then(|| self.owned(spot.layer))
                    .transpose()?;
                    drop(guard);
                    if let Some(layer) = emptied {
                        // The remove is done and durable; a layer that cannot be retired now
                        // (every retire word in use, or an error) stays, whole and empty, until
                        // the next open retires it.
                        let _ = self.retire_if_empty(layer, key, false);
                        self.settle_retired();
                    }
                    return Ok(old_value);
                }
                Ok(None) => {
                    staged.abandon(heap);
                    return Ok(None);
                }
                Err(Attempt::Retry) => {
                    staged.abandon(heap);
                    continue;
                }
                Err(Attempt::Fail(e)) => {
                    // A merge whose transaction failed left the tree as it was.
                    let _ = staged.undo(heap);
                    return Err(e);
                }
            }
        }
    }
}
