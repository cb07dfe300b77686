//! Changes that need every stripe at once (FAST&FAIR's splits and merges), with priority over
//! the single-stripe writers: those wait while such a change is pending, so a stream of them
//! cannot starve it.

use super::primitives::{AtomicU64, Backoff, Ordering};
use super::{StripeGuard, Stripes};

/// Counts the changes waiting for or holding every stripe.
pub(crate) struct ExclusiveGate {
    pending: AtomicU64,
}

/// Every stripe held by one change; dropping it lets the stripes go.
pub(crate) struct Exclusive<'a> {
    _guards: Vec<StripeGuard<'a>>,
    pending: &'a AtomicU64,
}

impl ExclusiveGate {
    /// No change pending.
    pub(crate) fn new() -> ExclusiveGate {
        ExclusiveGate {
            pending: AtomicU64::new(0),
        }
    }

    /// Wait while a change that needs every stripe is pending (a single-stripe writer calls
    /// this before it takes its stripe).
    #[inline]
    pub(crate) fn wait_clear(&self) {
        let backoff = Backoff::new();
        while self.pending.load(Ordering::Relaxed) != 0 {
            backoff.snooze();
        }
    }

    /// Announce a change, then take every stripe of `stripes` in index order (writers hold
    /// one stripe at a time, so this cannot deadlock): no other writer runs until the
    /// returned guard drops.
    #[inline]
    pub(crate) fn enter<'a>(&'a self, stripes: &'a Stripes) -> Exclusive<'a> {
        self.pending.fetch_add(1, Ordering::Relaxed);
        Exclusive {
            _guards: stripes.lock_all(),
            pending: &self.pending,
        }
    }
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        self.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn writers_wait_while_a_change_is_pending_and_run_after_it() {
        let stripes = Arc::new(Stripes::new(2));
        let gate = Arc::new(ExclusiveGate::new());
        let held = gate.enter(&stripes);
        let passed = Arc::new(AtomicBool::new(false));
        let writer = {
            let (gate, passed) = (Arc::clone(&gate), Arc::clone(&passed));
            std::thread::spawn(move || {
                gate.wait_clear();
                passed.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !passed.load(Ordering::SeqCst),
            "a writer passed a pending change"
        );
        drop(held);
        writer.join().unwrap();
        assert!(passed.load(Ordering::SeqCst));
        // Every stripe is free again.
        drop(stripes.lock(0));
        drop(stripes.lock(1));
    }
}
