//! [`U64Map`]: the one contract of the two persistent `u64 -> u64` maps, CCEH
//! ([`crate::cceh::Cceh`]) and FAST&FAIR ([`crate::fastfair::FastFair`]), and the one shape of
//! their refusal of a reserved key ([`ReservedKey`]).
//!
//! Both take `&self` for every operation and are safe to share between threads. Each reserves
//! one key for its own bookkeeping ([`U64Map::RESERVED_KEY`]: CCEH 0, FAST&FAIR `u64::MAX`);
//! every operation given it fails with the structure's `ReservedKey` error, holding a
//! [`ReservedKey`], and changes nothing.
//!
//! Iteration has one shape for both: [`U64Map::iter`] returns an iterator of
//! `Result<(u64, u64), Error>` items, the shape of FAST&FAIR's range scans. An error ends the
//! iteration (it is the last item). FAST&FAIR yields its pairs in key order, read leaf by leaf
//! without a lock; CCEH yields a consistent snapshot in no particular order (an error taking
//! the snapshot is its only item).

use pmem_ordering::Backend;

use crate::cceh::{self, Cceh, CcehError};
use crate::fastfair::{self, FastFair, FastFairError};

/// A key a structure reserves for its own use: refused by every operation of that structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("key {key:#x} is reserved: {reason}; it cannot be stored, looked up or removed")]
pub struct ReservedKey {
    /// The reserved key.
    pub key: u64,
    /// Why the structure reserves it.
    pub reason: &'static str,
}

/// A persistent map from `u64` keys to `u64` values (CCEH or FAST&FAIR), one key reserved.
pub trait U64Map {
    /// What can go wrong.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The iterator of [`U64Map::iter`].
    type Iter<'a>: Iterator<Item = Result<(u64, u64), Self::Error>>
    where
        Self: 'a;

    /// The key this map refuses (see [`ReservedKey`]).
    const RESERVED_KEY: u64;

    /// The value of `key`, if present.
    fn get(&self, key: u64) -> Result<Option<u64>, Self::Error>;

    /// Insert `key -> value` if `key` is absent: `true` if it was inserted, `false` if the key
    /// was present (its value is left unchanged).
    fn insert(&self, key: u64, value: u64) -> Result<bool, Self::Error>;

    /// Set `key -> value`, present or not: the value it replaced, if any.
    fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, Self::Error>;

    /// Remove `key`: the value it had, if it was present.
    fn remove(&self, key: u64) -> Result<Option<u64>, Self::Error>;

    /// Number of keys.
    fn len(&self) -> u64;

    /// Whether the map holds no key.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every `(key, value)` pair (see the module docs for order and errors).
    fn iter(&self) -> Self::Iter<'_>;

    /// Walk the whole structure, verify its invariants and return the number of keys; a
    /// violation is a typed error, never a panic.
    fn check(&self) -> Result<u64, Self::Error>;
}

// The point operations below forward to the structure's own and are `#[inline(always)]`: the
// Store's maps call them on every operation, and left out of line (as the inliner did for
// `get`) each costs a frame of its own, about 18 instructions a call under callgrind.
impl<B> U64Map for Cceh<B>
where
    B: Backend,
{
    type Error = CcehError;
    type Iter<'a>
        = cceh::Iter
    where
        Self: 'a;

    const RESERVED_KEY: u64 = cceh::EMPTY_KEY;

    #[inline(always)]
    fn get(&self, key: u64) -> Result<Option<u64>, CcehError> {
        Cceh::get(self, key)
    }

    #[inline(always)]
    fn insert(&self, key: u64, value: u64) -> Result<bool, CcehError> {
        Cceh::insert(self, key, value)
    }

    #[inline(always)]
    fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, CcehError> {
        Cceh::upsert(self, key, value)
    }

    #[inline(always)]
    fn remove(&self, key: u64) -> Result<Option<u64>, CcehError> {
        Cceh::remove(self, key)
    }

    fn len(&self) -> u64 {
        Cceh::len(self)
    }

    fn iter(&self) -> cceh::Iter {
        Cceh::iter(self)
    }

    fn check(&self) -> Result<u64, CcehError> {
        Cceh::check(self)
    }
}

impl<B> U64Map for FastFair<B>
where
    B: Backend,
{
    type Error = FastFairError;
    type Iter<'a>
        = fastfair::Range<'a, B>
    where
        Self: 'a;

    const RESERVED_KEY: u64 = fastfair::EMPTY_KEY;

    #[inline(always)]
    fn get(&self, key: u64) -> Result<Option<u64>, FastFairError> {
        FastFair::get(self, key)
    }

    #[inline(always)]
    fn insert(&self, key: u64, value: u64) -> Result<bool, FastFairError> {
        FastFair::insert(self, key, value)
    }

    #[inline(always)]
    fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, FastFairError> {
        FastFair::upsert(self, key, value)
    }

    #[inline(always)]
    fn remove(&self, key: u64) -> Result<Option<u64>, FastFairError> {
        FastFair::remove(self, key)
    }

    fn len(&self) -> u64 {
        FastFair::len(self)
    }

    fn iter(&self) -> fastfair::Range<'_, B> {
        FastFair::iter(self)
    }

    fn check(&self) -> Result<u64, FastFairError> {
        FastFair::check(self)
    }
}
