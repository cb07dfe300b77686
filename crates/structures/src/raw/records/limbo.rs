//! Retired blocks wait here until no lock-free reader can still be reading them.
//!
//! An overwrite or remove frees the old record on the media at once (its cleared allocation
//! bit is durable with the slot change), but a reader that loaded the old slot just before may
//! still be copying the record. So the heap keeps the block out of circulation until
//! [`Limbo::drain`] hands it back, which happens once the map's epoch ([`super::reclaim`]) has
//! seen every reader pinned at the time of the retire leave: readers pin around the slot load
//! and the copy. The ordered map's layers emptied by removes wait here the same way before
//! their blocks are freed (`tree/retire.rs`). When the map is dropped no reader is left, and
//! [`Limbo::take_all`] hands back what is still waiting too.
//!
//! What is deferred to the epoch is only the move of an item's key from "pinned" to "ready"
//! under this limbo's lock: no heap, pool or layer, so a late deferred call (crossbeam runs it
//! whenever some thread collects) touches nothing but this limbo.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_epoch::Guard;

/// Retired items: those readers may still see, and those whose readers have all gone.
struct Waiting<T> {
    /// By key (a block's offset): retired, readers may still hold them.
    pinned: HashMap<u64, T>,
    /// Readers gone: may be handed out again.
    ready: Vec<T>,
}

impl<T> Default for Waiting<T> {
    fn default() -> Self {
        Waiting {
            pinned: HashMap::new(),
            ready: Vec::new(),
        }
    }
}

/// The retired items of one map.
pub(crate) struct Limbo<T> {
    waiting: Arc<Mutex<Waiting<T>>>,
}

impl<T> Default for Limbo<T> {
    fn default() -> Self {
        Limbo {
            waiting: Arc::default(),
        }
    }
}

fn lock<T>(waiting: &Mutex<Waiting<T>>) -> MutexGuard<'_, Waiting<T>> {
    // Every change is one whole step under the lock.
    waiting.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T: Send + 'static> Limbo<T> {
    /// Hand `item` (known by `key`) back once every reader pinned to the map's epoch now has
    /// unpinned; `guard` is a pin of that epoch.
    pub(crate) fn defer(&self, key: u64, item: T, guard: &Guard) {
        lock(&self.waiting).pinned.insert(key, item);
        let waiting = Arc::clone(&self.waiting);
        guard.defer(move || {
            let mut w = lock(&waiting);
            // Gone already if the map was dropped and took everything back.
            if let Some(item) = w.pinned.remove(&key) {
                w.ready.push(item);
            }
        });
    }

    /// How many items still wait for readers to leave.
    pub(crate) fn waiting(&self) -> usize {
        lock(&self.waiting).pinned.len()
    }

    /// The items that may be handed out again now.
    pub(crate) fn drain(&self) -> Vec<T> {
        let mut w = lock(&self.waiting);
        if w.ready.is_empty() {
            return Vec::new();
        }
        std::mem::take(&mut w.ready)
    }

    /// Put back an item [`Limbo::drain`] handed out and its taker could not use (its readers
    /// are gone still).
    pub(crate) fn requeue(&self, item: T) {
        lock(&self.waiting).ready.push(item);
    }

    /// Every item still retired: the map is being dropped, so no reader is left.
    pub(crate) fn take_all(&self) -> Vec<T> {
        let mut w = lock(&self.waiting);
        let mut all = std::mem::take(&mut w.ready);
        all.extend(w.pinned.drain().map(|(_, item)| item));
        all
    }
}

impl<T: Clone> Limbo<T> {
    /// Every item still retired, ready or not (for walks of the blocks a map owns).
    pub(crate) fn snapshot(&self) -> Vec<T> {
        let w = lock(&self.waiting);
        w.ready.iter().chain(w.pinned.values()).cloned().collect()
    }
}
