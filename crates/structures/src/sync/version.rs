//! A structure version: a sequence lock around whole lock-free descents, for the changes that
//! free nodes or move the root (FAST&FAIR's merges and root changes). Those changes hold only
//! the stripes of the nodes they change, so two of them on disjoint nodes may run at once:
//! the odd version is also their writer lock, taken by one compare-and-swap, which serialises
//! them.

use super::primitives::{fence, AtomicU64, Backoff, Ordering};

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
        let v = self.word.load(Ordering::Acquire);
        if v & 1 == 0 {
            return v;
        }
        self.read_wait()
    }

    /// The waiting path of [`SeqVersion::read_begin`]: spin, then yield, since the change is a
    /// merge or root change running a transaction, or its writer may be descheduled.
    #[cold]
    #[inline(never)]
    fn read_wait(&self) -> u64 {
        let backoff = Backoff::new();
        loop {
            let v = self.word.load(Ordering::Acquire);
            if v & 1 == 0 {
                return v;
            }
            backoff.snooze();
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

    /// Make the version odd before a change, waiting while another change runs: the odd
    /// version is the changers' lock. One compare-and-swap, taken before the change's flushes
    /// (a locked instruction waits for the flushes in flight, so none is used to end it).
    /// A caller must not wait for anything while it holds this but the heap's lanes (it takes
    /// it after every stripe lock it needs), so it cannot deadlock with the stripe holders.
    #[inline]
    pub(crate) fn change_begin(&self) {
        let backoff = Backoff::new();
        loop {
            let v = self.word.load(Ordering::Relaxed);
            if v & 1 == 0
                && self
                    .word
                    .compare_exchange_weak(v, v | 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                fence(Ordering::Release);
                return;
            }
            backoff.snooze();
        }
    }

    /// Make the version even again after the change this thread began: a plain store, as
    /// only the holder writes an odd version.
    #[inline]
    pub(crate) fn change_end(&self) {
        let v = self.word.load(Ordering::Relaxed);
        debug_assert!(v & 1 == 1, "a change ended that did not begin");
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
        version.change_begin();
        assert!(
            !version.read_valid(seen),
            "a change in progress went unseen"
        );
        assert_eq!(version.current(), seen + 1);
        version.change_end();
        assert!(!version.read_valid(seen), "a finished change went unseen");
        let after = version.read_begin();
        assert_eq!(after, seen + 2);
        assert!(version.read_valid(after));
    }

    #[test]
    fn a_second_change_waits_for_the_first() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let version = Arc::new(SeqVersion::new());
        version.change_begin();
        let entered = Arc::new(AtomicBool::new(false));
        let second = {
            let (version, entered) = (Arc::clone(&version), Arc::clone(&entered));
            std::thread::spawn(move || {
                version.change_begin();
                entered.store(true, Ordering::SeqCst);
                version.change_end();
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !entered.load(Ordering::SeqCst),
            "two changes of the structure ran at once"
        );
        version.change_end();
        second.join().unwrap();
        assert!(entered.load(Ordering::SeqCst));
        assert_eq!(version.read_begin(), 4, "each change adds 2");
    }
}
