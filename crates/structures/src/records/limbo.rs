//! Retired records wait here until no lock-free reader can still be reading them.
//!
//! An overwrite or remove frees the old record on the media at once (its cleared allocation
//! bit is durable with the slot change), but a reader that loaded the old slot just before may
//! still be copying the record. So the heap keeps the block out of circulation until
//! [`Limbo::drain`] hands it back, which happens once `crossbeam-epoch` has seen every reader
//! pinned at the time of the retire leave: readers pin around the slot load and the copy.

use std::sync::{Arc, Mutex};

use crossbeam_epoch as epoch;
use pmem_undo_log::RecordBlock;

/// Retired blocks whose readers have all gone, waiting to be handed back to the heap.
#[derive(Default)]
pub(crate) struct Limbo {
    ready: Arc<Mutex<Vec<RecordBlock>>>,
}

impl Limbo {
    /// Hand `block` back once every reader pinned now has unpinned.
    pub(crate) fn defer(&self, block: RecordBlock) {
        let ready = Arc::clone(&self.ready);
        let guard = epoch::pin();
        guard.defer(move || {
            ready
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(block)
        });
    }

    /// The blocks that may be handed out again now.
    pub(crate) fn drain(&self) -> Vec<RecordBlock> {
        let mut ready = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *ready)
    }
}
