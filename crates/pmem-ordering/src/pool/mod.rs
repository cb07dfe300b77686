//! Pools: a memory-mapped file (or anonymous region) with a header, a root object and a heap.
//!
//! One file past 600 lines: the `Pool` type's safe accessors share one contract (bounds checks,
//! one access size per word), stated once here beside them.
//!
//! Persistent pointers are offsets from the pool's base ([`PPtr`]), since the mapping moves
//! between runs. Every access is bounds-checked and returns [`PoolError::OutOfBounds`] rather
//! than touching memory outside the pool, so an offset read from a corrupted pool cannot cause
//! undefined behaviour.
//!
//! At open, a pool learns how persistence works for its file ([`Granularity`]): it first tries
//! `MAP_SHARED_VALIDATE | MAP_SYNC`, which only a DAX file on persistent memory accepts. If the
//! mapping succeeds, the `persistence_domain` in sysfs of the NVDIMM region behind the file's
//! device decides, as in libpmem2: `cpu_cache` (eADR) gives *byte* granularity, anything else,
//! or a file that cannot be read, *cache-line* granularity; a device with no region of its own
//! (device-mapper) gets byte only if every region reads `cpu_cache`
//! ([`Pool::granularity_basis`] says which region and what it read). Otherwise the file is in
//! the page cache and every persist ends in `msync` (page granularity). *Emulated* granularity
//! is used only when the caller forces it with [`PoolOptions::granularity`]; a forced
//! granularity is never overridden by detection.
//!
//! # One access size per word
//!
//! A pool is shared between threads, and every access the safe API makes is atomic, and made
//! to whole, aligned 8-byte words: 8-byte stores and loads ([`Pool::store_u64`],
//! [`Pool::load_u64`], the [`Words`] and [`WordStores`] views) are release/acquire atomics;
//! byte copies ([`Pool::write`], [`Pool::read_bytes`]) are relaxed atomic accesses of the words
//! they cover, the ragged ends of a range loaded as their whole word and stored by merging the
//! new bytes into it with a compare-exchange, which keeps the word's other bytes as another
//! thread may be storing them. No access is ever one or a few bytes wide: Rust's memory model
//! makes overlapping atomic accesses of different sizes undefined behaviour when they race
//! (Miri refuses them), and a byte store racing with another thread's 8-byte load of its word
//! would be one. Threads may therefore read bytes another thread is writing (FAIR's lock-free
//! readers do) without a data race or mixed-size access.
//!
//! The mapping is page-aligned and a pool's size is a whole number of words (a header page for
//! every pool this library makes; a header read from a file whose size is not a multiple of 8
//! is refused), so the word containing any byte of the pool lies in the pool.
//!
//! # Streaming stores and other threads
//!
//! [`Pool::nt_write`] streams whole words with 8-byte `movnti` stores, each an atomic store of
//! its word to Rust's memory model (an aligned quadword store is single-copy atomic on x86-64;
//! see [`crate::isa::nt_store_words`]), and merges its ragged ends as [`Pool::write`] does; so
//! it is safe, and may race with any other access of the safe API like any atomic store. The
//! wider streaming stores (SSE2/AVX/AVX-512, [`crate::isa::nt_copy`]) and the `movnti`
//! intrinsic ([`crate::isa::movnti_u64`]) are plain, non-atomic writes to the memory model:
//! they are `unsafe`, under this one rule:
//!
//! > Every access another thread makes to a byte of the streamed range either *happens before*
//! > the streaming store or *happens after* it through synchronisation: the writing thread
//! > releases (unlocks a lock, makes a release store or CAS, sends on a channel, ends as a joined
//! > thread) and the other thread acquires that before its access. No access of another thread
//! > is concurrent with the streaming store.
//!
//! A pool cannot know that no other thread reaches a range (any holder of the pool can read and
//! write every byte of it), so it never streams with them. The rule is about Rust's memory
//! model, not persistence: ordering a streaming store for *durability* is still the business of
//! a fence of the same thread ([`crate::barrier`]).

mod create;
#[cfg(target_os = "linux")]
mod domain;
mod error;
pub mod header;
pub mod hugetlbfs;
mod lock;
mod magic;
pub(crate) mod mapping;
mod open;
pub mod pages;
mod pptr;
mod word_stores;
mod words;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub use create::UnfinishedFile;
pub use error::PoolError;
pub use header::Header;
pub use magic::MagicText;
pub use open::PoolOptions;
pub use pages::{ObtainedPages, PageSize};
pub use pptr::PPtr;
pub use word_stores::WordStores;
pub use words::Words;

use crate::backend::{Backend, Granularity, Hardware};
use crate::barrier::{self, Durable, NtOrdering, NtPending, Pending, PersistModel, Written};
use crate::stats;
use mapping::Mapping;

/// A pool of persistent memory, written through backend `B`.
///
/// `Pool` is `Sync`: threads may share it. Every access of the safe API, streaming stores
/// included, is made of atomic loads and stores of whole words, so concurrent access is free of
/// data races ([one access size per word](self#one-access-size-per-word)).
/// Keeping concurrent *logical* updates consistent (locks, CAS protocols) is the structure's
/// business.
///
/// A pool on a file holds an exclusive lock on it from [`Pool::create`] or [`Pool::open`] until
/// it is dropped, so opening the file again, from this process or another, fails with
/// [`PoolError::AlreadyOpen`] and changes nothing. The lock is advisory: it keeps out other
/// pools, not other programs. It belongs to the open file, so a child process forked while the
/// pool is open shares it until the child execs (the pool's descriptor is close-on-exec) or
/// exits. While a pool file is open, no other program may truncate or rewrite it: as with any
/// memory mapping, an access to a page cut off by truncation faults (SIGBUS), and bytes changed
/// behind the pool's back void its crash-consistency guarantees.
pub struct Pool<B: Backend = Hardware> {
    map: Mapping,
    /// The pool file, kept open because its open file description holds the exclusive lock;
    /// `None` for anonymous and simulated pools. Declared after `map` so that the mapping is
    /// gone before the lock is released.
    file: Option<File>,
    backend: B,
    header: Header,
    path: Option<PathBuf>,
    granularity: Granularity,
    /// How `granularity` was chosen, for file pools; `None` for anonymous and simulated pools.
    granularity_basis: Option<String>,
    /// Process-unique id, so tokens of one pool cannot be consumed by another.
    id: u64,
    /// For a pool made by [`Pool::create_unpublished`]: where its file is until published.
    staging: Option<create::Staging>,
}

impl<B: Backend> std::fmt::Debug for Pool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("path", &self.path)
            .field("layout", &self.header.layout)
            .field("size", &self.header.size)
            .field("granularity", &self.granularity)
            .field("granularity_basis", &self.granularity_basis)
            .field("model", &self.backend.model())
            .finish()
    }
}

fn next_pool_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl<B: Backend> Pool<B> {
    pub(crate) fn from_parts(
        map: Mapping,
        backend: B,
        header: Header,
        path: Option<PathBuf>,
        granularity: Granularity,
    ) -> Pool<B> {
        Pool {
            map,
            file: None,
            backend,
            header,
            path,
            granularity,
            granularity_basis: None,
            id: next_pool_id(),
            staging: None,
        }
    }

    /// Write the header with its magic last, each half persisted, so that a crash in between
    /// leaves a pool that reads as incomplete.
    fn write_header(&self) -> Result<(), PoolError> {
        let bytes = self.header.encode();
        let body = self.write(8, &bytes[8..])?;
        self.persist(body);
        let magic = self.write(0, &bytes[..8])?;
        self.persist(magic);
        Ok(())
    }

    /// The decoded header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The layout name.
    pub fn layout(&self) -> &str {
        &self.header.layout
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.header.size
    }

    /// The pool file, or `None` for anonymous and simulated pools.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// How persistence works for this pool.
    pub fn granularity(&self) -> Granularity {
        self.granularity
    }

    /// How a pool file's granularity was chosen, for reports: forced by the caller, `MAP_SYNC`
    /// refused, or the persistence domain of the file's NVDIMM region as read from sysfs.
    /// `None` for anonymous and simulated pools.
    pub fn granularity_basis(&self) -> Option<&str> {
        self.granularity_basis.as_deref()
    }

    /// The persistency model the pool's code is written for.
    pub fn model(&self) -> PersistModel {
        self.backend.model()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Offset of the root object.
    pub fn root_offset(&self) -> u64 {
        self.header.root_offset
    }

    /// Size of the root object.
    pub fn root_size(&self) -> u64 {
        self.header.root_size
    }

    /// First byte after the root object: the space an allocator may manage.
    pub fn heap_offset(&self) -> u64 {
        self.header.heap_offset
    }

    /// The root object as a `T`; an error if the root is too small for one.
    pub fn root<T: bytemuck::Pod>(&self) -> Result<PPtr<T>, PoolError> {
        let needed = std::mem::size_of::<T>() as u64;
        if needed > self.header.root_size {
            return Err(PoolError::RootTooSmall {
                root_size: self.header.root_size,
                needed,
            });
        }
        Ok(PPtr::new(self.header.root_offset))
    }

    /// The address of `[offset, offset + len)`, or an error if it leaves the pool.
    #[inline]
    fn addr(&self, offset: u64, len: usize) -> Result<*mut u8, PoolError> {
        let end = offset.checked_add(len as u64);
        match end {
            Some(end) if end <= self.header.size => {
                // SAFETY: offset + len <= size, the length of the mapping.
                Ok(unsafe { self.map.base().add(offset as usize) })
            }
            _ => Err(PoolError::OutOfBounds {
                offset,
                len: len as u64,
                size: self.header.size,
            }),
        }
    }

    /// The address of the `count` 8-byte words at `offset`, checked to be aligned and in
    /// the pool (for the word views).
    #[inline]
    fn addr_words(&self, offset: u64, count: usize) -> Result<*mut u8, PoolError> {
        if !offset.is_multiple_of(8) {
            return Err(PoolError::Misaligned { offset });
        }
        // Not `ok_or(..)`: that builds (and drops) the error on every call.
        let Some(len) = count.checked_mul(8) else {
            return Err(PoolError::OutOfBounds {
                offset,
                len: u64::MAX,
                size: self.header.size,
            });
        };
        self.addr(offset, len)
    }

    #[inline]
    fn addr_u64(&self, offset: u64) -> Result<*mut u64, PoolError> {
        if !offset.is_multiple_of(8) {
            return Err(PoolError::Misaligned { offset });
        }
        Ok(self.addr(offset, 8)? as *mut u64)
    }

    /// Check that `[offset, offset + len)` lies inside the pool.
    pub fn check_range(&self, offset: u64, len: u64) -> Result<(), PoolError> {
        let len = usize::try_from(len).map_err(|_| PoolError::OutOfBounds {
            offset,
            len,
            size: self.header.size,
        })?;
        self.addr(offset, len).map(|_| ())
    }

    // ---------------------------------------------------------------- reads

    /// Copy `buf.len()` bytes at `offset` into `buf`.
    pub fn read_bytes(&self, offset: u64, buf: &mut [u8]) -> Result<(), PoolError> {
        let src = self.addr(offset, buf.len())?;
        // SAFETY: the range was checked to lie in the mapping.
        unsafe { crate::mem::load_bytes(src, buf) };
        Ok(())
    }

    /// Read a plain-data value at `offset` (any alignment).
    pub fn read<T: bytemuck::Pod>(&self, offset: u64) -> Result<T, PoolError> {
        let mut value = T::zeroed();
        self.read_bytes(offset, bytemuck::bytes_of_mut(&mut value))?;
        Ok(value)
    }

    /// Read the value a persistent pointer points to.
    pub fn get<T: bytemuck::Pod>(&self, ptr: PPtr<T>) -> Result<T, PoolError> {
        self.read(ptr.offset())
    }

    /// Hint the CPU to bring the lines of `[offset, offset + len)` into the cache. A hint
    /// only: it reads nothing, stores nothing, and a range outside the pool is ignored (so a
    /// speculative walk may pass offsets it read from a concurrently changing structure).
    pub fn prefetch(&self, offset: u64, len: u64) {
        let Ok(len) = usize::try_from(len) else {
            return;
        };
        let Ok(start) = self.addr(offset, len) else {
            return;
        };
        for line in crate::isa::cache_lines(start.addr(), len) {
            crate::isa::prefetch_line(start.with_addr(line));
        }
    }

    /// A read-only view of the `count` 8-byte words at `offset` (8-byte aligned), checked once:
    /// for hot read paths that load many words of one region (a hash bucket, a tree node).
    /// Loads through it are the same acquire loads as [`Pool::load_u64`]; it cannot store, so
    /// every store still goes through the pool (counted, and traced by the simulator).
    pub fn words(&self, offset: u64, count: usize) -> Result<Words<'_>, PoolError> {
        let start = self.addr_words(offset, count)?;
        // SAFETY: in the mapping (which outlives `self`'s borrow), 8-aligned (page-aligned base);
        // every access is atomic but streaming stores, whose rule keeps them from these loads.
        let words = unsafe { std::slice::from_raw_parts(start as *const AtomicU64, count) };
        Ok(Words { words })
    }

    /// A view for storing into the `count` 8-byte words at `offset` (8-byte aligned), checked
    /// once: for hot write paths that store many words of one region (a tree node's shift).
    /// Its stores are the same counted, failure-atomic release stores as [`Pool::store_u64`].
    pub fn word_stores(&self, offset: u64, count: usize) -> Result<WordStores<'_, B>, PoolError> {
        let start = self.addr_words(offset, count)?;
        Ok(WordStores::new(self, start as *mut u64, offset, count))
    }

    /// An 8-byte atomic load with acquire ordering (pairs with [`Pool::store_u64`]).
    pub fn load_u64(&self, offset: u64) -> Result<u64, PoolError> {
        let p = self.addr_u64(offset)?;
        // SAFETY: aligned and inside the mapping.
        Ok(unsafe { AtomicU64::from_ptr(p).load(Ordering::Acquire) })
    }

    // ---------------------------------------------------------------- writes

    /// Temporal store of `bytes` at `offset`. Durable only once flushed and fenced: the token
    /// says so.
    pub fn write(&self, offset: u64, bytes: &[u8]) -> Result<Written, PoolError> {
        let dst = self.addr(offset, bytes.len())?;
        // SAFETY: the range was checked to lie in the mapping.
        unsafe { self.backend.store(dst, bytes) };
        stats::count_store(bytes.len());
        Ok(self.written(offset, bytes.len()))
    }

    /// Temporal store of a plain-data value at `offset`.
    pub fn write_value<T: bytemuck::Pod>(
        &self,
        offset: u64,
        value: &T,
    ) -> Result<Written, PoolError> {
        self.write(offset, bytemuck::bytes_of(value))
    }

    /// Store a value where a persistent pointer points.
    pub fn set<T: bytemuck::Pod>(&self, ptr: PPtr<T>, value: &T) -> Result<Written, PoolError> {
        self.write_value(ptr.offset(), value)
    }

    /// Failure-atomic 8-byte store (release ordering): the way to commit.
    pub fn store_u64(&self, offset: u64, value: u64) -> Result<Written, PoolError> {
        let p = self.addr_u64(offset)?;
        // SAFETY: aligned and inside the mapping.
        unsafe { self.backend.store_u64(p, value) };
        stats::count_store(8);
        Ok(self.written(offset, 8))
    }

    /// Failure-atomic 8-byte compare-and-swap. The outer `Result` is the access check; the inner
    /// one is the CAS outcome: `Ok` with the write token, or `Err` with the value found.
    pub fn compare_exchange_u64(
        &self,
        offset: u64,
        current: u64,
        new: u64,
    ) -> Result<Result<Written, u64>, PoolError> {
        let p = self.addr_u64(offset)?;
        // SAFETY: aligned and inside the mapping.
        let outcome = unsafe { self.backend.compare_exchange_u64(p, current, new) };
        Ok(outcome.map(|_| {
            stats::count_store(8);
            self.written(offset, 8)
        }))
    }

    /// Non-temporal store of `bytes` at `offset`: bypasses the cache; ordered and durable after
    /// this thread's next fence. An out-of-bounds range is an error, as for every access.
    ///
    /// Whole words are streamed with 8-byte `movnti` stores, atomic ones to Rust's memory model,
    /// and the ragged ends merged into their words as [`Pool::write`] does, so another thread
    /// may read or write the range meanwhile without a data race
    /// ([streaming stores](self#streaming-stores-and-other-threads)); what it sees of a word is
    /// its old or its new value.
    pub fn nt_write(&self, offset: u64, bytes: &[u8]) -> Result<NtPending, PoolError> {
        let dst = self.addr(offset, bytes.len())?;
        // SAFETY: the range was checked to lie in the mapping, and with it the words holding
        // its ends (the mapping is page-aligned and a whole number of words).
        unsafe { self.backend.nt_store(dst, bytes) };
        stats::count_nt_store(dst as usize, bytes.len());
        Ok(NtPending::new(self.id))
    }

    /// Make sure everything behind `nt` persists no later than this thread's next temporal
    /// store, as the pool's model requires (see [`crate::barrier`]).
    pub fn order_after(&self, nt: NtPending) -> NtOrdering {
        self.order_after_as(nt, self.backend.model())
    }

    /// Like [`Pool::order_after`], but as if the pool's model were `model`: software that
    /// chooses its own fence policy (the undo log's *themis* and *ideal* policies) uses this to
    /// leave the fence out on any pool, so the simulator can show what that costs.
    pub fn order_after_as(&self, nt: NtPending, model: PersistModel) -> NtOrdering {
        self.check_token(nt.pool);
        if nt.is_fenced() {
            stats::count_fence_saved_by_epoch();
            return NtOrdering::AlreadyFenced;
        }
        if model == PersistModel::X86 {
            stats::count_themis_elidable();
            self.sfence();
            return NtOrdering::Fenced;
        }
        // No fence under Themis or ideal, but count what the x86 model would have done, so a
        // workload reports the same elidable fences under every model: in a batch, the fence
        // x86 issues for the first token orders the later ones too.
        if nt.is_fenced_under_x86() {
            stats::count_fence_saved_by_epoch();
        } else {
            stats::count_themis_elidable();
            barrier::elide_fence();
        }
        if model == PersistModel::Themis {
            NtOrdering::ThemisProgramOrder
        } else {
            NtOrdering::Unordered
        }
    }

    /// A temporal store that must persist after the non-temporal store behind `nt` (an
    /// undo-log entry before the data it protects).
    pub fn write_after(
        &self,
        nt: NtPending,
        offset: u64,
        bytes: &[u8],
    ) -> Result<Written, PoolError> {
        self.check_range(offset, bytes.len() as u64)?;
        let _ = self.order_after(nt);
        self.write(offset, bytes)
    }

    // ---------------------------------------------------------------- flushes and fences

    fn written(&self, offset: u64, len: usize) -> Written {
        Written {
            pool: self.id,
            offset,
            len: len as u64,
        }
    }

    #[inline]
    fn check_token(&self, pool: u64) {
        assert_eq!(
            pool, self.id,
            "a persist token was used on a pool other than the one that made it"
        );
    }

    /// Write back the lines of a write.
    #[inline]
    pub fn flush(&self, w: Written) -> Pending {
        self.check_token(w.pool);
        let addr = self
            .addr(w.offset, w.len as usize)
            .expect("a Written token always names a range inside its pool");
        // SAFETY: `addr` checked just above: the range lies in the mapping.
        unsafe { self.flush_at(addr, w.len as usize) }
    }

    /// Write back the lines of `[addr, addr + len)` and count them: the one flush path, under
    /// [`Pool::flush`] and the word views' checked flushes.
    ///
    /// # Safety
    /// The range lies inside the pool's mapping.
    #[inline]
    pub(crate) unsafe fn flush_at(&self, addr: *const u8, len: usize) -> Pending {
        // SAFETY: in the mapping (this function's contract).
        let lines = unsafe { self.backend.flush(addr, len) };
        stats::count_flush(addr as usize, len, lines);
        Pending::flushed(self.id)
    }

    /// Write back the lines of `[offset, offset + len)`, written by any means.
    #[inline]
    pub fn flush_range(&self, offset: u64, len: u64) -> Result<Pending, PoolError> {
        let len = usize::try_from(len).map_err(|_| PoolError::OutOfBounds {
            offset,
            len,
            size: self.header.size,
        })?;
        // One range check, not a second one through a token.
        let addr = self.addr(offset, len)?;
        // SAFETY: `addr` checked just above: the range lies in the mapping.
        Ok(unsafe { self.flush_at(addr, len) })
    }

    /// Fence this thread: everything behind the token is now durable.
    #[inline]
    pub fn fence(&self, pending: impl Into<Pending>) -> Durable {
        let pending = pending.into();
        self.check_token(pending.pool);
        self.sfence()
    }

    /// One fence for a batch of tokens.
    pub fn fence_all(&self, pending: impl IntoIterator<Item = Pending>) -> Durable {
        for p in pending {
            self.check_token(p.pool);
        }
        self.sfence()
    }

    /// A fence with no token: orders whatever this thread has flushed or nt-stored so far.
    #[inline]
    pub fn sfence(&self) -> Durable {
        self.backend.fence();
        stats::count_fence();
        Durable { _private: () }
    }

    /// Flush and fence a write: the one-call form.
    #[inline]
    pub fn persist(&self, w: Written) -> Durable {
        self.check_token(w.pool);
        let addr = self
            .addr(w.offset, w.len as usize)
            .expect("a Written token always names a range inside its pool");
        // SAFETY: `addr` checked just above: the range lies in the mapping.
        unsafe { self.persist_at(0, addr, w.len as usize) }
    }

    /// Write back the lines of `[addr, addr + len)`, then fence: [`Pool::flush_at`] and
    /// [`Pool::sfence`] (the same backend calls in the same order), counted in one step with
    /// `stores` 8-byte stores made before it and not counted yet (a word view's).
    ///
    /// # Safety
    /// The range lies inside the pool's mapping.
    #[inline]
    pub(crate) unsafe fn persist_at(&self, stores: u64, addr: *const u8, len: usize) -> Durable {
        // SAFETY: in the mapping (this function's contract).
        let lines = unsafe { self.backend.flush(addr, len) };
        self.backend.fence();
        stats::count_persist(stores, addr as usize, len, lines);
        Durable { _private: () }
    }

    /// Flush and fence `[offset, offset + len)`.
    pub fn persist_range(&self, offset: u64, len: u64) -> Result<Durable, PoolError> {
        let p = self.flush_range(offset, len)?;
        Ok(self.fence(p))
    }

    /// Tell the backend a logical operation of the workload has returned: the simulator checks
    /// that nothing it wrote is still unpersisted, and crash checks use it to know which
    /// operations completed.
    pub fn operation_completed(&self) {
        self.backend.operation_completed();
    }
}
