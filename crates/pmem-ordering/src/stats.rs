//! Per-thread persistence statistics.
//!
//! Every pool operation counts itself in the calling thread's counters (plain thread-local
//! cells: no atomics, no sharing). A benchmark takes [`thread_stats`] before and after a run and
//! divides the difference by the operation count; a multi-threaded run sums what each worker
//! returns.

use std::cell::Cell;
use std::ops::{Add, Sub};

/// Counters of persistence events made by one thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Temporal store operations (one per `write`, whatever its length).
    pub stores: u64,
    /// Bytes written with temporal stores.
    pub store_bytes: u64,
    /// Non-temporal store operations.
    pub nt_stores: u64,
    /// Bytes written with non-temporal stores.
    pub nt_bytes: u64,
    /// Cache lines flushed.
    pub flushes: u64,
    /// Bytes covered by the flushed lines (64 per line).
    pub flushed_bytes: u64,
    /// Fences issued.
    pub fences: u64,
    /// Fences that only ordered a non-temporal store before a later temporal store of the same
    /// thread: the fences the Themis persistency model makes unnecessary (seed 004 Sec. III-B,
    /// Eq. 3). Counted whether or not the pool's model actually issued them.
    pub themis_elidable_fences: u64,
    /// Non-temporal -> temporal orderings that needed no fence because this thread had already
    /// fenced since the non-temporal store (the per-thread fence epoch). Under the Themis and
    /// ideal models, a fence the x86 model would have issued counts as issued here, so this and
    /// `themis_elidable_fences` read the same for one workload under every model.
    pub fences_saved_by_epoch: u64,
    /// Flushes of a line with no store pending on it (found by the simulated backend only: the
    /// hardware cannot tell).
    pub redundant_flushes: u64,
    /// Fences issued while this thread had no flush or non-temporal store pending.
    pub redundant_fences: u64,
}

impl Stats {
    /// Bytes this thread made durable or asked to make durable: flushed lines plus nt bytes.
    pub fn bytes_to_media(&self) -> u64 {
        self.flushed_bytes + self.nt_bytes
    }
}

macro_rules! field_wise {
    ($trait:ident, $method:ident, $op:ident) => {
        impl $trait for Stats {
            type Output = Stats;
            fn $method(self, o: Stats) -> Stats {
                Stats {
                    stores: self.stores.$op(o.stores),
                    store_bytes: self.store_bytes.$op(o.store_bytes),
                    nt_stores: self.nt_stores.$op(o.nt_stores),
                    nt_bytes: self.nt_bytes.$op(o.nt_bytes),
                    flushes: self.flushes.$op(o.flushes),
                    flushed_bytes: self.flushed_bytes.$op(o.flushed_bytes),
                    fences: self.fences.$op(o.fences),
                    themis_elidable_fences: self
                        .themis_elidable_fences
                        .$op(o.themis_elidable_fences),
                    fences_saved_by_epoch: self.fences_saved_by_epoch.$op(o.fences_saved_by_epoch),
                    redundant_flushes: self.redundant_flushes.$op(o.redundant_flushes),
                    redundant_fences: self.redundant_fences.$op(o.redundant_fences),
                }
            }
        }
    };
}
field_wise!(Add, add, wrapping_add);
field_wise!(Sub, sub, wrapping_sub);

/// The calling thread's counters and fence bookkeeping.
struct ThreadCounters {
    stores: Cell<u64>,
    store_bytes: Cell<u64>,
    nt_stores: Cell<u64>,
    nt_bytes: Cell<u64>,
    flushes: Cell<u64>,
    fences: Cell<u64>,
    themis_elidable_fences: Cell<u64>,
    fences_saved_by_epoch: Cell<u64>,
    redundant_flushes: Cell<u64>,
    redundant_fences: Cell<u64>,
    /// Flushes and nt-stores issued since this thread's last fence.
    pending_since_fence: Cell<u64>,
}

thread_local! {
    static COUNTERS: ThreadCounters = const {
        ThreadCounters {
            stores: Cell::new(0),
            store_bytes: Cell::new(0),
            nt_stores: Cell::new(0),
            nt_bytes: Cell::new(0),
            flushes: Cell::new(0),
            fences: Cell::new(0),
            themis_elidable_fences: Cell::new(0),
            fences_saved_by_epoch: Cell::new(0),
            redundant_flushes: Cell::new(0),
            redundant_fences: Cell::new(0),
            pending_since_fence: Cell::new(0),
        }
    };
}

#[inline]
fn bump(cell: &Cell<u64>, by: u64) {
    cell.set(cell.get().wrapping_add(by));
}

/// The calling thread's counters so far.
pub fn thread_stats() -> Stats {
    COUNTERS.with(|c| Stats {
        stores: c.stores.get(),
        store_bytes: c.store_bytes.get(),
        nt_stores: c.nt_stores.get(),
        nt_bytes: c.nt_bytes.get(),
        flushes: c.flushes.get(),
        flushed_bytes: c.flushes.get() * crate::isa::CACHE_LINE as u64,
        fences: c.fences.get(),
        themis_elidable_fences: c.themis_elidable_fences.get(),
        fences_saved_by_epoch: c.fences_saved_by_epoch.get(),
        redundant_flushes: c.redundant_flushes.get(),
        redundant_fences: c.redundant_fences.get(),
    })
}

/// Zero the calling thread's counters (the fence epoch is kept: it is not a statistic).
pub fn reset_thread_stats() {
    COUNTERS.with(|c| {
        for cell in [
            &c.stores,
            &c.store_bytes,
            &c.nt_stores,
            &c.nt_bytes,
            &c.flushes,
            &c.fences,
            &c.themis_elidable_fences,
            &c.fences_saved_by_epoch,
            &c.redundant_flushes,
            &c.redundant_fences,
        ] {
            cell.set(0);
        }
    })
}

#[inline]
pub(crate) fn count_store(bytes: usize) {
    COUNTERS.with(|c| {
        bump(&c.stores, 1);
        bump(&c.store_bytes, bytes as u64);
    })
}

pub(crate) fn count_nt_store(bytes: usize) {
    COUNTERS.with(|c| {
        bump(&c.nt_stores, 1);
        bump(&c.nt_bytes, bytes as u64);
        bump(&c.pending_since_fence, 1);
    })
}

#[inline]
pub(crate) fn count_flush(lines: usize) {
    COUNTERS.with(|c| {
        bump(&c.flushes, lines as u64);
        bump(&c.pending_since_fence, lines as u64);
    })
}

#[inline]
pub(crate) fn count_fence() {
    COUNTERS.with(|c| {
        bump(&c.fences, 1);
        if c.pending_since_fence.get() == 0 {
            bump(&c.redundant_fences, 1);
        }
        c.pending_since_fence.set(0);
    })
}

pub(crate) fn count_themis_elidable() {
    COUNTERS.with(|c| bump(&c.themis_elidable_fences, 1))
}

pub(crate) fn count_fence_saved_by_epoch() {
    COUNTERS.with(|c| bump(&c.fences_saved_by_epoch, 1))
}

/// Recorded by the simulated backend when a flush hits a line with nothing pending.
pub(crate) fn count_redundant_flush() {
    COUNTERS.with(|c| bump(&c.redundant_flushes, 1))
}
