//! A structure version: a sequence lock for changes that hold every stripe of a [`Stripes`]
//! (FAST&FAIR's merges and root changes), around whole lock-free descents. Its writers are
//! serialised by those stripes, so it has no lock of its own.
//!
//! [`Stripes`]: super::Stripes

use super::primitives::{fence, spin_loop, AtomicU64, Ordering};

/// Even while no change runs, odd while one does; each change adds 2.
pub(crate) struct SeqVersion {
    word: AtomicU64,
}

impl SeqVersion {
    /// Version 0, no change running.
    pub(crate) fn new() -> SeqVersion {
        SeqVersion {
            word: AtomicU64::new(0),
        }
    }

    /// Wait until no change runs and return the version.
    #[inline]
    pub(crate) fn read_begin(&self) -> u64 {
        loop {
            let v = self.word.load(Ordering::Acquire);
            if v & 1 == 0 {
                return v;
            }
            spin_loop();
        }
    }

    /// Whether the version still reads `seen` after this thread's reads: if so, no change
    /// overlapped them.
    #[inline]
    pub(crate) fn read_valid(&self, seen: u64) -> bool {
        fence(Ordering::Acquire);
        self.word.load(Ordering::Relaxed) == seen
    }

    /// The version as it is now, change running or not: a writer that holds the stripes
    /// compares it with the one its lock-free descent began under.
    #[inline]
    pub(crate) fn current(&self) -> u64 {
        self.word.load(Ordering::Relaxed)
    }

    /// Make the version odd before a change. The caller serialises writers (it holds every
    /// stripe), so a plain store does: no locked read-modify-write, which would wait for the
    /// flushes in flight.
    #[inline]
    pub(crate) fn change_begin_held(&self) {
        let v = self.word.load(Ordering::Relaxed);
        self.word.store(v.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Make the version even again after the change.
    #[inline]
    pub(crate) fn change_end_held(&self) {
        let v = self.word.load(Ordering::Relaxed);
        self.word.store(v.wrapping_add(1), Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_change_invalidates_readers_that_overlap_it() {
        let version = SeqVersion::new();
        let seen = version.read_begin();
        assert!(version.read_valid(seen), "nothing changed yet");
        version.change_begin_held();
        assert!(
            !version.read_valid(seen),
            "a change in progress went unseen"
        );
        assert_eq!(version.current(), seen + 1);
        version.change_end_held();
        assert!(!version.read_valid(seen), "a finished change went unseen");
        let after = version.read_begin();
        assert_eq!(after, seen + 2);
        assert!(version.read_valid(after));
    }
}
