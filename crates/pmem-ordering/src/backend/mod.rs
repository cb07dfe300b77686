//! Backends: the one path by which persistent memory is written, flushed and fenced.
//!
//! Structures are generic over [`Backend`]; [`Hardware`] runs the real instructions on the
//! mapping, [`crate::sim::SimBackend`] records every event for the crash simulator. Callers never
//! use a backend directly: [`crate::Pool`] checks bounds, keeps the statistics and hands out the
//! typed tokens, then calls the backend.
//!
//! [`Backend`] is sealed: only [`Hardware`] and [`crate::sim::SimBackend`] implement it. Other
//! crates name it as a bound (`Pool<B: Backend>`), but cannot add a backend, because the pool's
//! soundness rests on what these two do with the raw addresses it hands them.

mod hardware;

pub use hardware::Hardware;

use crate::barrier::PersistModel;

/// How stores reach persistence for a pool, in libpmem2's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Granularity {
    /// eADR: the CPU caches are in the persistence domain. Flushes are skipped, fences stay.
    /// Chosen for a file mapped with `MAP_SYNC` whose NVDIMM region's `persistence_domain`
    /// reads `cpu_cache` (for a device without a region of its own, such as device-mapper:
    /// when every region's does, as libpmem2 decides), or when forced.
    Byte,
    /// A DAX mapping made with `MAP_SYNC`: flush instructions plus a fence make a store durable.
    /// Chosen for such a mapping unless its region is known to be eADR.
    CacheLine,
    /// An ordinary file in the page cache: durability needs `msync`.
    Page,
    /// Not persistent memory (e.g. tmpfs), but flushes and fences are issued as on a
    /// cache-line-granular device, for benchmarks. Nothing is durable across a power failure;
    /// every report says so.
    Emulated,
}

impl Granularity {
    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Granularity::Byte => "byte (eADR)",
            Granularity::CacheLine => "cache line (DAX, MAP_SYNC)",
            Granularity::Page => "page (msync)",
            Granularity::Emulated => "emulated (flushes issued, not persistent memory)",
        }
    }
}

/// A pool's granularity and, for reports, how it was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GranularityChoice {
    pub(crate) granularity: Granularity,
    pub(crate) basis: String,
}

impl GranularityChoice {
    /// A granularity the caller asked for.
    pub(crate) fn forced(granularity: Granularity) -> GranularityChoice {
        GranularityChoice {
            granularity,
            basis: "forced by the caller".into(),
        }
    }
}

/// Keeps [`Backend`] closed to implementations outside this crate.
pub(crate) mod sealed {
    /// Implemented only by this crate's backends (the simulator's in `sim`).
    pub trait Sealed {}
    impl Sealed for super::Hardware {}
}

/// The primitive operations on a pool's memory.
///
/// Implementations are given raw addresses that [`crate::Pool`] has already checked to lie
/// inside its mapping. Sealed (see the module docs).
pub trait Backend: sealed::Sealed + Send + Sync + 'static {
    /// The persistency model this backend's code is written for.
    fn model(&self) -> PersistModel;

    /// A temporal (cached) store of `src` at `dst`, made of whole-word atomic accesses (the
    /// ragged ends merged into their words: [one access size per word](crate::pool#one-access-size-per-word)).
    ///
    /// # Safety
    /// `dst .. dst + src.len()` lies inside the pool's mapping (which holds the whole 8-byte
    /// words containing its ends too: the mapping is word-aligned and a whole number of words).
    unsafe fn store(&self, dst: *mut u8, src: &[u8]);

    /// A failure-atomic 8-byte store with release ordering.
    ///
    /// # Safety
    /// `dst` is 8-byte aligned and inside the pool's mapping.
    unsafe fn store_u64(&self, dst: *mut u64, value: u64);

    /// A failure-atomic 8-byte compare-and-swap (acquire-release); `Err` carries the value seen.
    ///
    /// # Safety
    /// `dst` is 8-byte aligned and inside the pool's mapping.
    unsafe fn compare_exchange_u64(
        &self,
        dst: *mut u64,
        current: u64,
        new: u64,
    ) -> Result<u64, u64>;

    /// A non-temporal store of `src` at `dst`, made of whole-word atomic stores, as
    /// [`Backend::store`] is (every aligned word inside the range one 8-byte store; its ragged
    /// ends merged into their words atomically), so other threads may access the range
    /// concurrently ([streaming stores](crate::pool#streaming-stores-and-other-threads)).
    ///
    /// # Safety
    /// `dst .. dst + src.len()` lies inside the pool's mapping, with the words holding its ends.
    unsafe fn nt_store(&self, dst: *mut u8, src: &[u8]);

    /// Write back every cache line of `[addr, addr + len)`; returns the lines flushed.
    ///
    /// # Safety
    /// The range lies inside the pool's mapping.
    unsafe fn flush(&self, addr: *const u8, len: usize) -> usize;

    /// A store fence of the calling thread.
    fn fence(&self);

    /// Called by [`crate::Pool::operation_completed`] at the end of each logical operation of a
    /// workload. The simulator records it; the hardware ignores it.
    fn operation_completed(&self) {}
}
