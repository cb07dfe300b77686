//! Persistent pointers: offsets from the pool base.

use std::marker::PhantomData;

/// A typed offset into a pool. Zero is null (offset 0 is the header, never an object).
///
/// Stored in pools as a plain little-endian `u64`, so it stays valid when the mapping moves.
#[repr(transparent)]
pub struct PPtr<T> {
    offset: u64,
    _type: PhantomData<fn() -> T>,
}

impl<T> PPtr<T> {
    /// A pointer to `offset`.
    pub const fn new(offset: u64) -> PPtr<T> {
        PPtr {
            offset,
            _type: PhantomData,
        }
    }

    /// The null pointer.
    pub const fn null() -> PPtr<T> {
        PPtr::new(0)
    }

    /// Whether this is null.
    pub const fn is_null(self) -> bool {
        self.offset == 0
    }

    /// The offset from the pool base.
    pub const fn offset(self) -> u64 {
        self.offset
    }

    /// The same offset seen as another type (e.g. a field inside the object).
    pub const fn cast<U>(self) -> PPtr<U> {
        PPtr::new(self.offset)
    }

    /// A pointer `bytes` further on, for fields of the object. Saturates instead of wrapping,
    /// so an overflowing offset (say, from a corrupted pool) fails the pool's bounds check.
    pub const fn byte_add(self, bytes: u64) -> PPtr<T> {
        PPtr::new(self.offset.saturating_add(bytes))
    }
}

impl<T> Clone for PPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for PPtr<T> {}
impl<T> PartialEq for PPtr<T> {
    fn eq(&self, o: &Self) -> bool {
        self.offset == o.offset
    }
}
impl<T> Eq for PPtr<T> {}
impl<T> std::hash::Hash for PPtr<T> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.offset.hash(h)
    }
}
impl<T> std::fmt::Debug for PPtr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PPtr({:#x})", self.offset)
    }
}

// SAFETY: PPtr is repr(transparent) over u64 (PhantomData is zero-sized), so every bit pattern
// is valid, it has no padding, and it is Copy + 'static whenever T: 'static.
unsafe impl<T: 'static> bytemuck::Zeroable for PPtr<T> {}
// SAFETY: as above.
unsafe impl<T: 'static> bytemuck::Pod for PPtr<T> {}
