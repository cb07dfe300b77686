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
    /// thread: the fences the Themis persistency model makes unnecessary (Themis, Sec. III-B,
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
    /// Bytes an Optane DIMM would write to its media for this thread's flushes and
    /// non-temporal stores, at its 256-byte XPLine granularity: see [`XPBUFFER_XPLINES`] for
    /// the model. With [`Stats::bytes_to_media`] it gives the effective write ratio of the Optane
    /// guide (FAST'20), Sec. 5.1 ([`Stats::effective_write_ratio`]).
    pub xpline_bytes: u64,
}

/// Bytes of an XPLine, the unit in which an Optane DIMM writes its media (Optane guide (FAST'20),
/// Sec. 2.1.1).
pub const XPLINE: usize = 256;

/// XPLines of the per-thread model of the DIMM's write-combining buffer (the XPBuffer, 16 KiB
/// per DIMM by the Optane guide (FAST'20), Sec. 5.1, Fig. 9). Every cache line flushed or written non-temporally
/// lands in its XPLine's entry; an XPLine that is not in the buffer costs one 256-byte media
/// write ([`XPLINE`]), later lines of a buffered XPLine combine for free. The model is
/// direct-mapped by XPLine address (the real buffer is shared by all threads writing one
/// DIMM and its policy is not documented), and it counts a media write when an XPLine enters
/// the buffer rather than when it leaves.
pub const XPBUFFER_XPLINES: usize = 64;

impl Stats {
    /// Bytes this thread made durable or asked to make durable: flushed lines plus nt bytes.
    pub fn bytes_to_media(&self) -> u64 {
        self.flushed_bytes + self.nt_bytes
    }

    /// The effective write ratio of the Optane guide (FAST'20), Sec. 5.1: bytes issued to the DIMM
    /// ([`Stats::bytes_to_media`]) over bytes written to its media ([`Stats::xpline_bytes`]).
    /// Below 1 the media writes more than it was sent (its write amplification is the
    /// inverse); above 1 the XPBuffer combined writes. `None` when nothing reached the media.
    pub fn effective_write_ratio(&self) -> Option<f64> {
        (self.xpline_bytes > 0).then(|| self.bytes_to_media() as f64 / self.xpline_bytes as f64)
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
                    xpline_bytes: self.xpline_bytes.$op(o.xpline_bytes),
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
    xpline_bytes: Cell<u64>,
    /// The XPBuffer model: entry `x % XPBUFFER_XPLINES` holds XPLine number `x` plus one (0:
    /// empty).
    xpbuffer: [Cell<usize>; XPBUFFER_XPLINES],
    /// Flushes and nt-stores issued since this thread's last fence.
    pending_since_fence: Cell<u64>,
    /// Fences issued by this thread so far, through any pool: the fence epoch of
    /// [`crate::barrier`], kept here so that a fence updates one thread-local. Not a
    /// statistic: never reset.
    fence_epoch: Cell<u64>,
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
            xpline_bytes: Cell::new(0),
            xpbuffer: [const { Cell::new(0) }; XPBUFFER_XPLINES],
            pending_since_fence: Cell::new(0),
            fence_epoch: Cell::new(0),
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
        xpline_bytes: c.xpline_bytes.get(),
    })
}

/// Zero the calling thread's counters and empty its XPBuffer model (the fence epoch is kept:
/// it is not a statistic).
pub fn reset_thread_stats() {
    COUNTERS.with(|c| {
        for entry in &c.xpbuffer {
            entry.set(0);
        }
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
            &c.xpline_bytes,
        ] {
            cell.set(0);
        }
    })
}

#[inline]
pub(crate) fn count_store(bytes: usize) {
    count_stores(1, bytes);
}

/// `count` temporal stores of `bytes` bytes in all.
#[inline]
pub(crate) fn count_stores(count: u64, bytes: usize) {
    COUNTERS.with(|c| {
        bump(&c.stores, count);
        bump(&c.store_bytes, bytes as u64);
    })
}

/// A non-temporal store of `bytes` bytes at address `addr`.
pub(crate) fn count_nt_store(addr: usize, bytes: usize) {
    COUNTERS.with(|c| {
        bump(&c.nt_stores, 1);
        bump(&c.nt_bytes, bytes as u64);
        bump(&c.pending_since_fence, 1);
        count_xplines(c, addr, bytes);
    })
}

/// `lines` cache lines flushed, covering the `len` bytes at address `addr`.
#[inline]
pub(crate) fn count_flush(addr: usize, len: usize, lines: usize) {
    COUNTERS.with(|c| {
        bump(&c.flushes, lines as u64);
        bump(&c.pending_since_fence, lines as u64);
        count_xplines(c, addr, len);
    })
}

/// Run the XPLines of `[addr, addr + len)` through the XPBuffer model.
#[inline]
fn count_xplines(c: &ThreadCounters, addr: usize, len: usize) {
    if len == 0 {
        return;
    }
    // A plain loop that tests its end after each XPLine: most flushes touch one.
    let last = (addr + len - 1) / XPLINE;
    let mut xpline = addr / XPLINE;
    loop {
        let entry = &c.xpbuffer[xpline % XPBUFFER_XPLINES];
        if entry.get() != xpline + 1 {
            entry.set(xpline + 1);
            bump(&c.xpline_bytes, XPLINE as u64);
        }
        if xpline == last {
            return;
        }
        xpline += 1;
    }
}

/// A fence of this thread: counted, and its fence epoch advanced.
#[inline]
pub(crate) fn count_fence() {
    COUNTERS.with(fence_counted);
}

/// `stores` 8-byte temporal stores, then `lines` cache lines flushed, covering the `len` bytes
/// at address `addr`, then a fence: what [`count_stores`], [`count_flush`] and [`count_fence`]
/// count, with one look-up of the thread's counters.
#[inline]
pub(crate) fn count_persist(stores: u64, addr: usize, len: usize, lines: usize) {
    COUNTERS.with(|c| {
        bump(&c.stores, stores);
        bump(&c.store_bytes, 8 * stores);
        bump(&c.flushes, lines as u64);
        count_xplines(c, addr, len);
        // The flush's lines are pending until the fence, which the rule of `fence_counted`
        // sees through `pending_since_fence`.
        bump(&c.pending_since_fence, lines as u64);
        fence_counted(c);
    })
}

#[inline]
fn fence_counted(c: &ThreadCounters) {
    bump(&c.fences, 1);
    if c.pending_since_fence.get() == 0 {
        bump(&c.redundant_fences, 1);
    }
    c.pending_since_fence.set(0);
    bump(&c.fence_epoch, 1);
}

/// The calling thread's fence epoch (see [`crate::barrier`]).
#[inline]
pub(crate) fn fence_epoch() -> u64 {
    COUNTERS.with(|c| c.fence_epoch.get())
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
