//! Typed persist barriers and non-temporal -> temporal ordering.
//!
//! The type system carries the state of a write:
//!
//! ```text
//! pool.write(..)     -> Written      temporal store, still only in the cache
//! pool.flush(w)      -> Pending      write-back issued, not yet ordered
//! pool.nt_write(..)  -> NtPending    streaming store issued, not yet ordered (into Pending)
//! pool.fence(p)      -> Durable      every token it consumed is persistent
//! ```
//!
//! The first three are `#[must_use]` (a `Durable` is a record, which may be dropped), and the
//! pending tokens ([`Pending`], [`NtPending`]) are `!Send`: on x86 a flush or a non-temporal
//! store is ordered only by a fence *of the same thread* (Themis, Sec. II-C and Sec. III-B,
//! Eq. 1-2), so a token fenced by another thread would prove nothing.
//!
//! A temporal store that must follow a non-temporal one (an undo-log entry before the data it
//! protects) takes the [`NtPending`] token: [`crate::Pool::write_after`]. What that costs depends
//! on the pool's [`PersistModel`]:
//!
//! * [`PersistModel::X86`]: a fence is issued, unless this thread has already fenced since the
//!   token was made (the per-thread *fence epoch*), so a batch of log entries shares one fence;
//! * [`PersistModel::Themis`]: no fence: program order alone orders an nt-store before a later
//!   temporal store of the same thread (Themis, Sec. III-B, Eq. 3). No shipping CPU implements
//!   this; it is sound only under the simulator's Themis model;
//! * [`PersistModel::Ideal`]: no fence and no guarantee: the performance upper bound, not crash
//!   safe on any model.

use std::cell::Cell;
use std::marker::PhantomData;

/// Which persistency model the pool's code is written for (Themis, Sec. II-C and III-B).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PersistModel {
    /// The x86 persistency model of shipping CPUs: nt -> t ordering needs a fence.
    #[default]
    X86,
    /// The Themis extension: nt -> t ordering on one thread holds by program order.
    Themis,
    /// No nt -> t fences at all: an upper bound for benchmarks, never crash safe.
    Ideal,
}

impl PersistModel {
    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            PersistModel::X86 => "x86",
            PersistModel::Themis => "themis",
            PersistModel::Ideal => "ideal",
        }
    }
}

thread_local! {
    /// Non-temporal -> temporal fences this thread left out because its pool's model does not
    /// need them (Themis, ideal). With the fence epoch ([`fence_epoch`]) it gives the epoch the
    /// thread would be in under the x86 model, so the statistics count the fences x86 *would*
    /// have issued, and the same workload reports the same elidable fences under every model.
    static ELIDED_FENCES: Cell<u64> = const { Cell::new(0) };
}

/// The calling thread's fence epoch: how many fences it has issued, through any pool. Kept
/// with the thread's statistics ([`crate::stats::count_fence`] advances it), so a fence
/// touches one thread-local, but never reset with them.
#[inline]
pub(crate) fn fence_epoch() -> u64 {
    crate::stats::fence_epoch()
}

/// The fence epoch this thread would be in had every elided nt -> t fence been issued.
fn x86_fence_epoch() -> u64 {
    fence_epoch() + ELIDED_FENCES.with(Cell::get)
}

/// Record an nt -> t fence the model let this thread leave out.
pub(crate) fn elide_fence() {
    ELIDED_FENCES.with(|e| e.set(e.get() + 1));
}

/// Marker that makes a token `!Send` and `!Sync`.
type NotSend = PhantomData<*const ()>;

/// A temporal store that has reached the cache but has not been flushed.
#[must_use = "a store is not durable until it is flushed and fenced: pass it to `flush` or `persist`"]
#[derive(Debug)]
pub struct Written {
    pub(crate) pool: u64,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

impl Written {
    /// Offset of the first byte written.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Number of bytes written.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the write covered no byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// One token for the smallest range covering both writes (they must be to the same pool),
    /// so neighbouring writes are flushed together.
    #[inline]
    pub fn merge(self, other: Written) -> Written {
        assert_eq!(
            self.pool, other.pool,
            "cannot merge writes to two different pools"
        );
        if self.is_empty() {
            return other;
        }
        if other.is_empty() {
            return self;
        }
        let start = self.offset.min(other.offset);
        let end = (self.offset + self.len).max(other.offset + other.len);
        Written {
            pool: self.pool,
            offset: start,
            len: end - start,
        }
    }
}

/// A flush or non-temporal store that a fence of this thread has yet to order.
///
/// Tokens combine with [`Pending::and`], so one fence can consume a whole batch.
#[must_use = "a flush or non-temporal store is not durable until a fence consumes its token"]
#[derive(Debug)]
pub struct Pending {
    pub(crate) pool: u64,
    pub(crate) flushes: u32,
    pub(crate) nt_stores: u32,
    pub(crate) _not_send: NotSend,
}

impl Pending {
    pub(crate) fn flushed(pool: u64) -> Pending {
        Pending {
            pool,
            flushes: 1,
            nt_stores: 0,
            _not_send: PhantomData,
        }
    }

    /// Combine two pending tokens of the same pool into one.
    #[inline]
    pub fn and(self, other: impl Into<Pending>) -> Pending {
        let other = other.into();
        assert_eq!(
            self.pool, other.pool,
            "cannot combine tokens of two different pools"
        );
        Pending {
            pool: self.pool,
            flushes: self.flushes + other.flushes,
            nt_stores: self.nt_stores + other.nt_stores,
            _not_send: PhantomData,
        }
    }
}

/// A non-temporal store issued by this thread and not yet ordered.
///
/// Either fence it ([`crate::Pool::fence`], via `Into<Pending>`) or hand it to the temporal
/// store that must follow it ([`crate::Pool::write_after`]).
#[must_use = "a non-temporal store is unordered until a fence or `write_after` consumes its token"]
#[derive(Debug)]
pub struct NtPending {
    pub(crate) pool: u64,
    pub(crate) epoch: u64,
    /// [`x86_fence_epoch`] at the store, for the statistics.
    pub(crate) x86_epoch: u64,
    pub(crate) _not_send: NotSend,
}

impl NtPending {
    pub(crate) fn new(pool: u64) -> NtPending {
        NtPending {
            pool,
            epoch: fence_epoch(),
            x86_epoch: x86_fence_epoch(),
            _not_send: PhantomData,
        }
    }

    /// Whether this thread has fenced since the store, so it is already ordered and durable.
    pub fn is_fenced(&self) -> bool {
        fence_epoch() != self.epoch
    }

    /// Whether the x86 model would have fenced since the store: a real fence, or an nt -> t
    /// fence the pool's model elided.
    pub(crate) fn is_fenced_under_x86(&self) -> bool {
        x86_fence_epoch() != self.x86_epoch
    }
}

impl From<NtPending> for Pending {
    fn from(t: NtPending) -> Pending {
        Pending {
            pool: t.pool,
            flushes: 0,
            nt_stores: 1,
            _not_send: PhantomData,
        }
    }
}

/// A record that the stores behind the consumed tokens are persistent.
///
/// Zero-sized. The ordering that crash consistency rests on is enforced by the tokens before
/// it: a [`Written`] store must be flushed and a [`Pending`] flush fenced to be consumed, and
/// both are `#[must_use]`. No function of the project's structures or undo log asks for a
/// `Durable`, so it is not `#[must_use]` either: dropping one is fine, and code of one's own
/// that must run only after something is durable may ask for one as its argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durable {
    pub(crate) _private: (),
}

/// What a temporal store that follows a non-temporal one has had to do to be ordered after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NtOrdering {
    /// A fence was issued (x86 model, no fence since the nt-store).
    Fenced,
    /// This thread had already fenced since the nt-store.
    AlreadyFenced,
    /// No fence was issued: the Themis model orders them by program order.
    ThemisProgramOrder,
    /// No fence was issued and nothing orders them (ideal model).
    Unordered,
}
