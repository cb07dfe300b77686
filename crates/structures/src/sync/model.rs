//! Loom models of the reader protocol of [`Stripes`] and [`SeqVersion`]: every interleaving
//! (and every reordering the memory model allows) of a writer changing two data words under a
//! change mark and a lock-free reader validating its read of them. A reader that validates
//! must never see a torn pair. And a model of [`readers`](super::readers): a reclaimer that
//! unlinks memory and waits out a grace period never frees it under a reader's section (in the
//! fence mode used where `membarrier` is missing; loom cannot issue the system call).
//!
//! The data words are loom atomics written and read with relaxed ordering: weaker than the
//! pool's release stores and acquire loads, so the models check that the protocol's own
//! fences suffice. Run (about a second once built):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test --release -p pmem-structures --lib \
//!     --target-dir target/loom sync::model
//! ```

use std::sync::atomic::AtomicUsize;

use loom::sync::Arc;
use loom::thread;

use super::primitives::{AtomicU64, Ordering};
use super::readers::{self, GracePeriod, ReadSection};
use super::{SeqVersion, Stripes};

/// Two words a writer changes together, as a shift moves an entry's key and value: in every
/// consistent state they are equal.
struct Pair([AtomicU64; 2]);

impl Pair {
    fn new() -> Pair {
        Pair([AtomicU64::new(0), AtomicU64::new(0)])
    }

    /// The writer's stores, second word first (as a right shift moves the value first).
    fn write(&self, v: u64) {
        self.0[1].store(v, Ordering::Relaxed);
        self.0[0].store(v, Ordering::Relaxed);
    }

    fn read(&self) -> (u64, u64) {
        (
            self.0[0].load(Ordering::Relaxed),
            self.0[1].load(Ordering::Relaxed),
        )
    }
}

/// Counts, across every execution of one model, the reads that validated and the validated
/// reads that saw the writer's pair: both must happen, or the model checked nothing.
struct Outcomes {
    validated: AtomicUsize,
    saw_new: AtomicUsize,
}

impl Outcomes {
    const fn new() -> Outcomes {
        Outcomes {
            validated: AtomicUsize::new(0),
            saw_new: AtomicUsize::new(0),
        }
    }

    fn record(&self, pair: (u64, u64)) {
        assert_eq!(pair.0, pair.1, "a validated read saw a torn pair {pair:?}");
        self.validated
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if pair.0 != 0 {
            self.saw_new
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn assert_both_seen(&self) {
        let validated = self.validated.load(std::sync::atomic::Ordering::Relaxed);
        let saw_new = self.saw_new.load(std::sync::atomic::Ordering::Relaxed);
        assert!(validated > 0, "no execution validated a read");
        assert!(saw_new > 0, "no validated read saw the writer's change");
        assert!(saw_new < validated, "no validated read saw the old pair");
    }
}

/// Read `pair` as a lock-free reader of stripe 0 does, recording the read if it validates.
fn read_stripe(stripes: &Stripes, pair: &Pair, outcomes: &Outcomes) {
    let stripe = stripes.reader(0);
    let seen = stripe.read_begin();
    let read = pair.read();
    if stripe.read_valid(seen) {
        outcomes.record(read);
    }
}

/// Write `v` to `pair` as a writer of stripe 0 does: under its lock, marked as a change.
fn write_stripe(stripes: &Stripes, pair: &Pair, v: u64) {
    let _guard = stripes.lock(0);
    stripes.change_begin_held(0);
    pair.write(v);
    stripes.change_end_held(0);
}

// The reader runs in a spawned thread and a writer on the model's main thread: loom then
// explores the schedules where the writer finishes before the reader starts as well.

#[test]
fn a_read_validated_by_its_stripe_never_sees_a_torn_pair() {
    static OUTCOMES: Outcomes = Outcomes::new();
    loom::model(|| {
        let stripes = Arc::new(Stripes::new(1));
        let pair = Arc::new(Pair::new());
        let reader = {
            let (stripes, pair) = (Arc::clone(&stripes), Arc::clone(&pair));
            thread::spawn(move || read_stripe(&stripes, &pair, &OUTCOMES))
        };
        write_stripe(&stripes, &pair, 1);
        reader.join().unwrap();
    });
    OUTCOMES.assert_both_seen();
}

#[test]
fn a_descent_validated_by_the_structure_version_never_sees_a_torn_pair() {
    static OUTCOMES: Outcomes = Outcomes::new();
    loom::model(|| {
        let version = Arc::new(SeqVersion::new());
        let pair = Arc::new(Pair::new());
        let reader = {
            let (version, pair) = (Arc::clone(&version), Arc::clone(&pair));
            thread::spawn(move || {
                let seen = version.read_begin();
                let read = pair.read();
                if version.read_valid(seen) {
                    OUTCOMES.record(read);
                }
            })
        };
        version.change_begin();
        pair.write(1);
        version.change_end();
        reader.join().unwrap();
    });
    OUTCOMES.assert_both_seen();
}

/// The link a reader follows: to the old memory until the reclaimer unlinks it.
const OLD: u64 = 1;
/// The link after the unlink.
const NEW: u64 = 2;
/// What the old memory holds until it is freed.
const LIVE: u64 = 7;

#[test]
fn a_grace_period_outlasts_every_section_that_can_reach_unlinked_memory() {
    static REACHED_OLD: AtomicUsize = AtomicUsize::new(0);
    static REACHED_NEW: AtomicUsize = AtomicUsize::new(0);
    loom::model(|| {
        let slot = readers::model_slot();
        let link = Arc::new(AtomicU64::new(OLD));
        let old = Arc::new(loom::cell::UnsafeCell::new(LIVE));
        let reader = {
            let (link, old) = (Arc::clone(&link), Arc::clone(&old));
            thread::spawn(move || {
                let section = ReadSection::on(slot, false);
                if link.load(Ordering::Acquire) == OLD {
                    // SAFETY: loom tracks this read against the reclaimer's write below and
                    // fails the model if they are not ordered: that is the property checked.
                    let seen = old.with(|p| unsafe { *p });
                    assert_eq!(seen, LIVE, "a section read memory already freed");
                    REACHED_OLD.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                } else {
                    REACHED_NEW.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                drop(section);
            })
        };
        link.store(NEW, Ordering::Release);
        let grace = GracePeriod::over([slot]);
        while !grace.has_passed() {
            thread::yield_now();
        }
        // The free: the memory is written for its next use.
        // SAFETY: as above, loom checks this write against every reader's read.
        old.with_mut(|p| unsafe { *p = 0 });
        reader.join().unwrap();
    });
    // Both sides of the argument ran: sections that reached the old memory and were waited
    // for, and sections that saw the unlink.
    assert!(REACHED_OLD.load(std::sync::atomic::Ordering::Relaxed) > 0);
    assert!(REACHED_NEW.load(std::sync::atomic::Ordering::Relaxed) > 0);
}
