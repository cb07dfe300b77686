//! Striped writer locks, each with a reader version and a share of the structure's key count.
//!
//! A structure hashes what a writer changes (a CCEH segment, a FAST&FAIR node) to one of its
//! stripes. A stripe is one word and one counter on a cache line of its own:
//!
//! * the word is the lock and the version in one: bit 0 is set while a writer holds the stripe,
//!   bit 1 while the holder changes something readers of the stripe may be reading, and the
//!   bits above count finished changes. Taking the lock is the only read-modify-write; every
//!   other update (unlock, change marks) is a plain store by the holder, because a locked
//!   instruction would wait for the holder's flushes in flight;
//! * the count is the keys added minus the keys removed by holders of the stripe (wrapping:
//!   keys may move between stripes, so one stripe's share can go below zero; the sum of all
//!   shares is the structure's count).
//!
//! Readers that take no lock use a [`Stripes::reader`]'s `read_begin` and `read_valid` around
//! their reads, in the manner of a sequence lock.

use crossbeam_utils::CachePadded;

use super::primitives::{fence, AtomicU64, Backoff, Ordering};

const LOCKED: u64 = 1;
const CHANGING: u64 = 2;
const CHANGE_STEP: u64 = 4;

struct Stripe {
    word: AtomicU64,
    count: AtomicU64,
}

impl Stripe {
    fn new() -> Stripe {
        Stripe {
            word: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

/// A fixed set of stripes, each padded to its own cache line(s) so that writers of different
/// stripes share no line.
pub(crate) struct Stripes {
    stripes: Box<[CachePadded<Stripe>]>,
}

impl Stripes {
    /// `n` free stripes with zero counts and versions.
    pub(crate) fn new(n: usize) -> Stripes {
        assert!(n > 0, "a structure needs at least one stripe");
        Stripes {
            stripes: (0..n).map(|_| CachePadded::new(Stripe::new())).collect(),
        }
    }

    /// Number of stripes.
    pub(crate) fn len(&self) -> usize {
        self.stripes.len()
    }

    /// Take stripe `i`'s lock: one compare-and-swap when it is free; spin, then yield, while a
    /// holder keeps it (a holder may be flushing for microseconds, or descheduled).
    #[inline]
    pub(crate) fn lock(&self, i: usize) -> StripeGuard<'_> {
        let stripe = &self.stripes[i];
        if stripe.try_lock() {
            return StripeGuard { stripe };
        }
        Self::lock_contended(stripe)
    }

    /// The waiting path of [`Stripes::lock`], out of line so the uncontended path inlines small.
    #[cold]
    #[inline(never)]
    fn lock_contended(stripe: &Stripe) -> StripeGuard<'_> {
        let backoff = Backoff::new();
        while !stripe.try_lock() {
            backoff.snooze();
        }
        StripeGuard { stripe }
    }

    /// Every stripe's lock, taken in index order: no other writer runs until the guards drop.
    /// Deadlock-free under the rule of [`Stripes::lock_set`].
    pub(crate) fn lock_all(&self) -> Vec<StripeGuard<'_>> {
        (0..self.len()).map(|i| self.lock(i)).collect()
    }

    /// The locks of the stripes whose bits are set in `mask` (stripe `i` is bit `i`), taken in
    /// index order. The rule that keeps writers free of deadlock: a writer waits for a stripe
    /// only while it holds none, or only lower-indexed ones (it took them all through one
    /// call of this, or of [`Stripes::lock_all`]). Then the holder of the highest stripe any
    /// waiter wants never waits itself.
    pub(crate) fn lock_set(&self, mask: u64) -> StripeSet<'_> {
        debug_assert!(self.len() >= 64 || mask >> self.len() == 0);
        // The set grows lock by lock, so a panic part way lets go of those already taken.
        let mut set = StripeSet {
            stripes: self,
            mask: 0,
        };
        for i in set_bits(mask) {
            // Held from here on by the set, which lets it go on drop as the guard would.
            std::mem::forget(self.lock(i));
            set.mask |= 1 << i;
        }
        set
    }

    /// Stripe `i`'s version word, for a lock-free read section ([`StripeReader::read_begin`]
    /// and [`StripeReader::read_valid`] around its reads); the stripe is indexed once.
    #[inline]
    pub(crate) fn reader(&self, i: usize) -> StripeReader<'_> {
        StripeReader {
            word: &self.stripes[i].word,
        }
    }

    /// Every stripe's version word, for a lock-free walk that reads many nodes: the stripes'
    /// slice is taken once and kept by the caller (in registers), where [`Stripes::reader`]
    /// per node would load it again after each acquire load.
    #[inline]
    pub(crate) fn readers(&self) -> StripeReaders<'_> {
        StripeReaders {
            stripes: &self.stripes,
        }
    }

    /// The structure's key count: the wrapping sum of every stripe's share.
    pub(crate) fn total(&self) -> u64 {
        self.stripes.iter().fold(0u64, |sum, s| {
            sum.wrapping_add(s.count.load(Ordering::Relaxed))
        })
    }

    /// Set the key count to `n` (at open, before the structure is shared: the count found by
    /// recovery goes to stripe 0, every other share to zero).
    pub(crate) fn set_total(&self, n: u64) {
        for (i, s) in self.stripes.iter().enumerate() {
            s.count.store(if i == 0 { n } else { 0 }, Ordering::Relaxed);
        }
    }
}

/// The stripes of a [`Stripes`], for lock-free readers of many nodes ([`Stripes::readers`]).
#[derive(Clone, Copy)]
pub(crate) struct StripeReaders<'a> {
    stripes: &'a [CachePadded<Stripe>],
}

impl<'a> StripeReaders<'a> {
    /// Stripe `i`'s version word, as [`Stripes::reader`] gives it.
    #[inline]
    pub(crate) fn reader(self, i: usize) -> StripeReader<'a> {
        StripeReader {
            word: &self.stripes[i].word,
        }
    }
}

/// One stripe's version word, for lock-free readers ([`Stripes::reader`]).
#[derive(Clone, Copy)]
pub(crate) struct StripeReader<'a> {
    word: &'a AtomicU64,
}

impl StripeReader<'_> {
    /// Wait until no change of the stripe runs and return its version word, for
    /// [`StripeReader::read_valid`] (which ignores the lock bit: a holder that changes nothing
    /// leaves readers valid).
    #[inline]
    pub(crate) fn read_begin(self) -> u64 {
        let v = self.word.load(Ordering::Acquire);
        if v & CHANGING == 0 {
            return v;
        }
        Self::read_wait(self.word)
    }

    /// The waiting path of [`StripeReader::read_begin`]: spin, then yield, since the change
    /// may be a split or merge running a transaction, or its writer descheduled.
    #[cold]
    #[inline(never)]
    fn read_wait(word: &AtomicU64) -> u64 {
        let backoff = Backoff::new();
        loop {
            let v = word.load(Ordering::Acquire);
            if v & CHANGING == 0 {
                return v;
            }
            backoff.snooze();
        }
    }

    /// Whether the stripe's version still reads `seen` after this thread's reads: if so, no
    /// change of the stripe overlapped them.
    #[inline]
    pub(crate) fn read_valid(self, seen: u64) -> bool {
        fence(Ordering::Acquire);
        // Equal but for the lock bit: one exclusive or and one test.
        (self.word.load(Ordering::Relaxed) ^ seen) & !LOCKED == 0
    }
}

/// A held stripe lock; dropping it releases the stripe with one plain store.
pub(crate) struct StripeGuard<'a> {
    stripe: &'a Stripe,
}

impl StripeGuard<'_> {
    /// Count `delta` keys added (or, wrapping, removed) under this lock.
    #[inline]
    pub(crate) fn count(&self, delta: u64) {
        self.stripe.count_held(delta);
    }
}

/// The locks of a set of stripes ([`Stripes::lock_set`]), held until it drops: a bit mask,
/// where a guard per stripe would need an allocation.
pub(crate) struct StripeSet<'a> {
    stripes: &'a Stripes,
    /// Bit `i` set: stripe `i` is held by this set.
    mask: u64,
}

impl StripeSet<'_> {
    /// The stripes held, as a bit mask (stripe `i` is bit `i`).
    pub(crate) fn mask(&self) -> u64 {
        self.mask
    }
}

impl Drop for StripeSet<'_> {
    fn drop(&mut self) {
        for i in set_bits(self.mask) {
            // The lock this set took for stripe `i`, let go as its guard's drop does.
            drop(StripeGuard {
                stripe: &self.stripes.stripes[i],
            });
        }
    }
}

impl Drop for StripeGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        let word = &self.stripe.word;
        let mut v = word.load(Ordering::Relaxed);
        if v & CHANGING != 0 {
            // A change cut short by a panic: let readers go on (they see a new version).
            v = (v & !CHANGING).wrapping_add(CHANGE_STEP);
        }
        word.store(v & !LOCKED, Ordering::Release);
    }
}

impl Stripe {
    /// One attempt at the lock: a compare-and-swap only if the word shows it free.
    #[inline]
    fn try_lock(&self) -> bool {
        let v = self.word.load(Ordering::Relaxed);
        v & LOCKED == 0
            && self
                .word
                .compare_exchange_weak(v, v | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }
}

/// The holder's updates: plain read-modify-writes (no locked instruction), correct because
/// only the holder of the stripe's lock makes them.
impl Stripe {
    #[inline]
    fn count_held(&self, delta: u64) {
        debug_assert!(self.word.load(Ordering::Relaxed) & LOCKED != 0);
        self.count.store(
            self.count.load(Ordering::Relaxed).wrapping_add(delta),
            Ordering::Relaxed,
        );
    }

    #[inline]
    fn change_begin_held(&self) {
        debug_assert!(self.word.load(Ordering::Relaxed) & LOCKED != 0);
        let v = self.word.load(Ordering::Relaxed);
        self.word.store(v | CHANGING, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    #[inline]
    fn change_end_held(&self) {
        let v = self.word.load(Ordering::Relaxed);
        self.word
            .store((v & !CHANGING).wrapping_add(CHANGE_STEP), Ordering::Release);
    }
}

/// A stripe whose lock the caller holds, indexed once ([`Stripes::held`]), for several of the
/// holder's updates.
#[derive(Clone, Copy)]
pub(crate) struct HeldStripe<'a> {
    stripe: &'a Stripe,
}

impl HeldStripe<'_> {
    /// Like [`Stripes::change_begin_held`].
    #[inline]
    pub(crate) fn change_begin(self) {
        self.stripe.change_begin_held();
    }

    /// Like [`Stripes::change_end_held`].
    #[inline]
    pub(crate) fn change_end(self) {
        self.stripe.change_end_held();
    }
}

/// Updates by the holder of stripe `i`'s lock, by index, since a structure change holding
/// several stripes through [`Stripes::lock_set`] has no one guard at hand. The caller must hold
/// stripe `i`'s lock; debug builds check that someone does.
impl Stripes {
    /// Stripe `i`, indexed once for several updates by its holder. The caller must hold
    /// stripe `i`'s lock.
    #[inline]
    pub(crate) fn held(&self, i: usize) -> HeldStripe<'_> {
        HeldStripe {
            stripe: &self.stripes[i],
        }
    }

    /// Like [`StripeGuard::count`] for stripe `i`.
    #[inline]
    pub(crate) fn count_held(&self, i: usize, delta: u64) {
        self.stripes[i].count_held(delta);
    }

    /// Mark the start of a change of stripe `i` that its readers must not overlap.
    #[inline]
    pub(crate) fn change_begin_held(&self, i: usize) {
        self.stripes[i].change_begin_held();
    }

    /// End the change of stripe `i`: readers that overlapped it see a new version.
    #[inline]
    pub(crate) fn change_end_held(&self, i: usize) {
        self.stripes[i].change_end_held();
    }
}

/// The indices of the bits set in `mask`, lowest first: the stripes a mask names, visited
/// without a test of every stripe.
pub(crate) fn set_bits(mask: u64) -> impl Iterator<Item = usize> {
    let mut rest = mask;
    std::iter::from_fn(move || {
        (rest != 0).then(|| {
            let i = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            i
        })
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn a_held_stripe_excludes_other_writers_of_it_only() {
        let stripes = Arc::new(Stripes::new(2));
        let guard = stripes.lock(0);
        let entered = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (stripes, entered) = (Arc::clone(&stripes), Arc::clone(&entered));
            std::thread::spawn(move || {
                let _g = stripes.lock(0);
                entered.store(true, Ordering::SeqCst);
            })
        };
        // The other stripe is free meanwhile.
        drop(stripes.lock(1));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !entered.load(Ordering::SeqCst),
            "a second writer entered a held stripe"
        );
        drop(guard);
        waiter.join().unwrap();
        assert!(entered.load(Ordering::SeqCst));
    }

    #[test]
    fn readers_see_a_change_but_not_a_lock_alone() {
        let stripes = Stripes::new(1);
        let seen = stripes.reader(0).read_begin();
        let guard = stripes.lock(0);
        assert!(
            stripes.reader(0).read_valid(seen),
            "taking the lock changed nothing"
        );
        stripes.change_begin_held(0);
        assert!(
            !stripes.reader(0).read_valid(seen),
            "a change in progress went unseen"
        );
        stripes.change_end_held(0);
        assert!(
            !stripes.reader(0).read_valid(seen),
            "a finished change went unseen"
        );
        drop(guard);
        let after = stripes.reader(0).read_begin();
        assert_ne!(after, seen);
        assert!(stripes.reader(0).read_valid(after));
        // The slice taken once reads the same word.
        assert!(stripes.readers().reader(0).read_valid(after));
        assert!(!stripes.readers().reader(0).read_valid(seen));
        // A version read while a holder changed nothing stays valid after it lets go.
        let guard = stripes.lock(0);
        let seen_locked = stripes.reader(0).read_begin();
        drop(guard);
        assert!(stripes.reader(0).read_valid(seen_locked));
    }

    #[test]
    fn a_change_cut_short_by_a_panic_releases_readers() {
        let stripes = Stripes::new(1);
        let seen = stripes.reader(0).read_begin();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _guard = stripes.lock(0);
            stripes.change_begin_held(0);
            panic!("writer dies mid-change");
        }));
        assert!(result.is_err());
        // read_begin would spin forever on a CHANGING bit left behind.
        let after = stripes.reader(0).read_begin();
        assert_ne!(after, seen);
        drop(stripes.lock(0));
    }

    #[test]
    fn counts_wrap_per_stripe_and_sum_to_the_total() {
        let stripes = Stripes::new(4);
        stripes.set_total(10);
        stripes.lock(1).count(3);
        let _held = stripes.lock(2);
        stripes.count_held(2, 5u64.wrapping_neg());
        drop(_held);
        assert_eq!(stripes.total(), 8);
        stripes.set_total(1);
        assert_eq!(stripes.total(), 1);
    }

    #[test]
    fn set_bits_visits_each_set_bit_lowest_first() {
        assert_eq!(set_bits(0).count(), 0);
        assert_eq!(set_bits(0b1010_0001).collect::<Vec<_>>(), [0, 5, 7]);
        assert_eq!(set_bits(1 << 63).collect::<Vec<_>>(), [63]);
        assert_eq!(
            set_bits(u64::MAX).collect::<Vec<_>>(),
            (0..64).collect::<Vec<_>>()
        );
    }

    #[test]
    fn lock_set_holds_its_stripes_and_no_other() {
        let stripes = Arc::new(Stripes::new(4));
        let held = stripes.lock_set(0b1010);
        assert_eq!(held.mask(), 0b1010);
        // Stripes 0 and 2 are free, 1 and 3 are not.
        drop(stripes.lock(0));
        drop(stripes.lock(2));
        let entered = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (stripes, entered) = (Arc::clone(&stripes), Arc::clone(&entered));
            std::thread::spawn(move || {
                let _g = stripes.lock(3);
                entered.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!entered.load(Ordering::SeqCst), "a held stripe was taken");
        drop(held);
        waiter.join().unwrap();
    }

    #[test]
    fn lock_all_holds_every_stripe() {
        let stripes = Arc::new(Stripes::new(3));
        let all = stripes.lock_all();
        assert_eq!(all.len(), 3);
        let entered = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (stripes, entered) = (Arc::clone(&stripes), Arc::clone(&entered));
            std::thread::spawn(move || {
                let _g = stripes.lock(2);
                entered.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!entered.load(Ordering::SeqCst));
        drop(all);
        waiter.join().unwrap();
    }
}
