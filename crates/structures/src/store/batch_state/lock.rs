//! The store's batch state in DRAM: the lock that lets one write batch run at a time, the
//! version readers check to see each batch whole ([`crate::Store::read_consistent`]), and
//! the write-batch area once known.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::area::Area;
use crate::sync::SeqVersion;

thread_local! {
    /// A byte whose address names this thread while it lives.
    static THREAD_MARK: u8 = const { 0 };
}

/// A number naming the calling thread, never 0.
fn this_thread() -> u64 {
    THREAD_MARK.with(|m| m as *const u8 as u64)
}

/// The batch lock: the holding thread, 0 when free.
#[derive(Default)]
struct LockState {
    holder: Mutex<u64>,
    freed: Condvar,
}

/// A store's batch state.
#[derive(Default)]
pub(crate) struct Batches {
    lock: Arc<LockState>,
    /// Odd while a batch applies: readers that saw it change read again.
    pub applying: SeqVersionCell,
    /// The store's write-batch area, once opened or made.
    area: Mutex<Option<Area>>,
    /// The sequence number of the last batch committed.
    sequence: AtomicU64,
}

/// [`SeqVersion`] with a `Default`.
pub(crate) struct SeqVersionCell(SeqVersion);

impl Default for SeqVersionCell {
    fn default() -> Self {
        SeqVersionCell(SeqVersion::new())
    }
}

impl std::ops::Deref for SeqVersionCell {
    type Target = SeqVersion;
    fn deref(&self) -> &SeqVersion {
        &self.0
    }
}

/// The batch lock, held until dropped.
pub(crate) struct BatchHold {
    lock: Arc<LockState>,
}

impl Drop for BatchHold {
    fn drop(&mut self) {
        let mut holder = lock(&self.lock.holder);
        *holder = 0;
        self.lock.freed.notify_one();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each change under these locks is one store: nothing is left half done by a panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Batches {
    /// Take the batch lock, waiting while another thread holds it; `None` if this thread holds
    /// it already (it would wait for itself).
    pub(crate) fn hold(&self) -> Option<BatchHold> {
        let me = this_thread();
        let mut holder = lock(&self.lock.holder);
        while *holder != 0 {
            if *holder == me {
                return None;
            }
            holder = self
                .lock
                .freed
                .wait(holder)
                .unwrap_or_else(|p| p.into_inner());
        }
        *holder = me;
        Some(BatchHold {
            lock: self.lock.clone(),
        })
    }

    /// The area, if known (the caller holds the batch lock, or is the store's open).
    pub(crate) fn area(&self) -> Option<Area> {
        *lock(&self.area)
    }

    /// Remember the store's area.
    pub(crate) fn set_area(&self, area: Area) {
        *lock(&self.area) = Some(area);
    }

    /// The next batch's sequence number.
    pub(crate) fn next_sequence(&self) -> u64 {
        self.sequence.fetch_add(1, Ordering::Relaxed) + 1
    }
}
