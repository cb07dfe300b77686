//! Retired records wait here until no lock-free reader can still be reading them.
//!
//! An overwrite or remove frees the old record on the media at once (its cleared allocation
//! bit is durable with the slot change), but a reader that loaded the old slot just before may
//! still be copying the record. So the heap keeps the block out of circulation until
//! [`Limbo::drain`] hands it back, which happens once `crossbeam-epoch` has seen every reader
//! pinned at the time of the retire leave: readers pin around the slot load and the copy.
//! When the structure is dropped no reader is left, and [`Limbo::take_all`] hands back the
//! blocks still waiting too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_epoch as epoch;
use pmem_undo_log::RecordBlock;

/// Retired blocks: those readers may still see, and those whose readers have all gone.
#[derive(Default)]
struct Waiting {
    /// By offset: retired, readers may still hold them.
    pinned: HashMap<u64, RecordBlock>,
    /// Readers gone: may be handed out again.
    ready: Vec<RecordBlock>,
}

/// The retired blocks of one structure.
#[derive(Default)]
pub(crate) struct Limbo {
    waiting: Arc<Mutex<Waiting>>,
}

fn lock(waiting: &Mutex<Waiting>) -> MutexGuard<'_, Waiting> {
    // Every change is one whole step under the lock.
    waiting.lock().unwrap_or_else(|p| p.into_inner())
}

impl Limbo {
    /// Hand `block` back once every reader pinned now has unpinned.
    pub(crate) fn defer(&self, block: RecordBlock) {
        lock(&self.waiting).pinned.insert(block.offset, block);
        let waiting = Arc::clone(&self.waiting);
        let guard = epoch::pin();
        guard.defer(move || {
            let mut w = lock(&waiting);
            // Gone already if the structure was dropped and took everything back.
            if let Some(block) = w.pinned.remove(&block.offset) {
                w.ready.push(block);
            }
        });
    }

    /// How many blocks still wait for readers to leave.
    pub(crate) fn waiting(&self) -> usize {
        lock(&self.waiting).pinned.len()
    }

    /// The blocks that may be handed out again now.
    pub(crate) fn drain(&self) -> Vec<RecordBlock> {
        std::mem::take(&mut lock(&self.waiting).ready)
    }

    /// Every block still retired: the structure is being dropped, so no reader is left.
    pub(crate) fn take_all(&self) -> Vec<RecordBlock> {
        let mut w = lock(&self.waiting);
        let mut all = std::mem::take(&mut w.ready);
        all.extend(w.pinned.drain().map(|(_, b)| b));
        all
    }
}
