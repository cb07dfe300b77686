//! Counters for INFO, kept per thread slot so the workers on different cores never write
//! one cache line (a shared atomic per command would bounce between them).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

/// Slots: more than the workers a server runs, so threads rarely share one.
const SLOTS: usize = 64;

/// What a slot counts.
#[derive(Default)]
struct Slot {
    commands: AtomicU64,
    keys_written: AtomicU64,
    fences: AtomicU64,
    flushes: AtomicU64,
}

/// The sums INFO reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) commands: u64,
    pub(crate) keys_written: u64,
    pub(crate) fences: u64,
    pub(crate) flushes: u64,
}

pub(crate) struct Counters {
    slots: Box<[CachePadded<Slot>]>,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            slots: (0..SLOTS)
                .map(|_| CachePadded::new(Slot::default()))
                .collect(),
        }
    }
}

fn slot_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS;
    }
    SLOT.with(|slot| *slot)
}

impl Counters {
    fn slot(&self) -> &Slot {
        &self.slots[slot_index()]
    }

    pub(crate) fn command(&self) {
        self.slot().commands.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn write(&self, keys: u64, fences: u64, flushes: u64) {
        let slot = self.slot();
        slot.keys_written.fetch_add(keys, Ordering::Relaxed);
        slot.fences.fetch_add(fences, Ordering::Relaxed);
        slot.flushes.fetch_add(flushes, Ordering::Relaxed);
    }

    pub(crate) fn totals(&self) -> Totals {
        self.slots
            .iter()
            .fold(Totals::default(), |sum, slot| Totals {
                commands: sum.commands + slot.commands.load(Ordering::Relaxed),
                keys_written: sum.keys_written + slot.keys_written.load(Ordering::Relaxed),
                fences: sum.fences + slot.fences.load(Ordering::Relaxed),
                flushes: sum.flushes + slot.flushes.load(Ordering::Relaxed),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_sum_up() {
        let counters = Counters::default();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        counters.command();
                        counters.write(2, 3, 5);
                    }
                });
            }
        });
        let expected = Totals {
            commands: 4000,
            keys_written: 8000,
            fences: 12000,
            flushes: 20000,
        };
        assert_eq!(counters.totals(), expected);
    }
}
