//! Epoch-based reclamation scoped to one map: readers pin *this map's* epoch, so a reader of one
//! map (an iterator left idle, a thread stalled mid-lookup) holds back only the blocks this map
//! retired while it was pinned, never another map's or another store's.
//!
//! Each map owns a `crossbeam-epoch` [`Collector`]; a thread pins it through a handle it
//! registers once and keeps in a small per-thread cache ([`CACHED_HANDLES`] maps, the most
//! recently used first), so a pin costs a thread-local lookup and crossbeam's own pin. A
//! handle evicted from the cache, or left there after its map is dropped, keeps only the
//! collector's bookkeeping alive: what maps defer through it never holds a heap, a pool or a
//! layer (see `limbo.rs`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_epoch::{Collector, Guard, LocalHandle};

/// Collectors a thread keeps a handle of; past that the least recently used is dropped (and
/// registered again if that map is used again).
const CACHED_HANDLES: usize = 8;

thread_local! {
    /// This thread's handles, by collector id, most recently used first.
    static HANDLES: RefCell<Vec<(u64, LocalHandle)>> = const { RefCell::new(Vec::new()) };
}

/// One map's epochs.
pub(crate) struct Reclaim {
    collector: Collector,
    /// Tells this collector's handles apart in the per-thread cache.
    id: u64,
}

impl Default for Reclaim {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Reclaim {
            collector: Collector::new(),
            id: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl Reclaim {
    /// Pin this map's epoch: blocks it retires from now on are not reused until the guard is
    /// dropped.
    #[inline]
    pub(crate) fn pin(&self) -> Guard {
        let pinned = HANDLES.try_with(|handles| {
            let mut handles = handles.borrow_mut();
            if let Some((id, handle)) = handles.first() {
                if *id == self.id {
                    return handle.pin();
                }
            }
            match handles.iter().position(|(id, _)| *id == self.id) {
                Some(at) => {
                    let entry = handles.remove(at);
                    handles.insert(0, entry);
                }
                None => {
                    handles.insert(0, (self.id, self.collector.register()));
                    handles.truncate(CACHED_HANDLES);
                }
            }
            handles[0].1.pin()
        });
        // The thread's cache is gone (a map used from another thread-local's destructor): a
        // handle of its own, which the guard outlives safely (crossbeam keeps the
        // participant until its last guard is dropped).
        pinned.unwrap_or_else(|_| self.collector.register().pin())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// Whether what `reclaim` deferred has run, after a few tries to move its epoch on.
    fn collected(reclaim: &Reclaim, ran: &AtomicUsize, expected: usize) -> bool {
        for _ in 0..64 {
            reclaim.pin().flush();
            if ran.load(Ordering::SeqCst) == expected {
                return true;
            }
        }
        false
    }

    #[test]
    fn a_pinned_reader_of_one_map_holds_back_no_other() {
        let (mine, other) = (Reclaim::default(), Reclaim::default());
        let ran = Arc::new(AtomicUsize::new(0));
        let reader = mine.pin();
        for _ in 0..3 {
            let ran = ran.clone();
            other
                .pin()
                .defer(move || ran.fetch_add(1, Ordering::SeqCst));
        }
        assert!(
            collected(&other, &ran, 3),
            "the other map's deferred work waits"
        );
        let ran_mine = Arc::new(AtomicUsize::new(0));
        let r = ran_mine.clone();
        mine.pin().defer(move || r.fetch_add(1, Ordering::SeqCst));
        assert!(!collected(&mine, &ran_mine, 1), "ran under a pinned reader");
        drop(reader);
        assert!(collected(&mine, &ran_mine, 1));
    }

    #[test]
    fn many_maps_on_one_thread_each_pin_their_own_epoch() {
        let maps: Vec<Reclaim> = (0..3 * CACHED_HANDLES)
            .map(|_| Reclaim::default())
            .collect();
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..2 {
            for map in &maps {
                let guard = map.pin();
                let ran = ran.clone();
                guard.defer(move || ran.fetch_add(1, Ordering::SeqCst));
            }
            for map in &maps {
                map.pin().flush();
            }
        }
        let done = (0..64).any(|_| {
            maps.iter().for_each(|m| m.pin().flush());
            ran.load(Ordering::SeqCst) == 2 * maps.len()
        });
        assert!(
            done,
            "{} of {} ran",
            ran.load(Ordering::SeqCst),
            2 * maps.len()
        );
    }
}
