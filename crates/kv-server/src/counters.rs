//! Counters for INFO, kept per thread slot so the workers on different cores never write
//! one cache line (a shared atomic per command would bounce between them).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;

/// Slots: more than the workers a server runs, so threads rarely share one.
const SLOTS: usize = 64;

/// Commands counted, at most (the command table checks it has no more).
pub(crate) const MAX_COMMANDS: usize = 128;

/// One command's counts in one slot.
#[derive(Default)]
struct PerCommand {
    calls: AtomicU64,
    micros: AtomicU64,
    /// Ran and answered an error.
    failed: AtomicU64,
    /// Refused before running (wrong arity, inside a refused MULTI).
    rejected: AtomicU64,
}

/// What a slot counts.
struct Slot {
    commands: AtomicU64,
    errors: AtomicU64,
    keys_written: AtomicU64,
    fences: AtomicU64,
    flushes: AtomicU64,
    per_command: Box<[PerCommand]>,
}

impl Default for Slot {
    fn default() -> Slot {
        Slot {
            commands: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            keys_written: AtomicU64::new(0),
            fences: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            per_command: (0..MAX_COMMANDS).map(|_| PerCommand::default()).collect(),
        }
    }
}

/// The sums INFO reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) commands: u64,
    /// Error replies, requests that named no command included.
    pub(crate) errors: u64,
    pub(crate) keys_written: u64,
    pub(crate) fences: u64,
    pub(crate) flushes: u64,
}

/// One command's sums (commandstats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CommandTotals {
    pub(crate) calls: u64,
    pub(crate) micros: u64,
    pub(crate) failed: u64,
    pub(crate) rejected: u64,
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

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

impl Counters {
    fn slot(&self) -> &Slot {
        &self.slots[slot_index()]
    }

    /// A request that named no command.
    pub(crate) fn unknown(&self) {
        let slot = self.slot();
        bump(&slot.commands, 1);
        bump(&slot.errors, 1);
    }

    /// A request for `command` refused before it ran.
    pub(crate) fn rejected(&self, command: usize) {
        let slot = self.slot();
        bump(&slot.commands, 1);
        bump(&slot.errors, 1);
        bump(&slot.per_command[command].rejected, 1);
    }

    /// A run of `command` that took `took`.
    pub(crate) fn called(&self, command: usize, took: Duration, failed: bool) {
        let slot = self.slot();
        bump(&slot.commands, 1);
        let counts = &slot.per_command[command];
        bump(&counts.calls, 1);
        bump(&counts.micros, took.as_micros() as u64);
        if failed {
            bump(&slot.errors, 1);
            bump(&counts.failed, 1);
        }
    }

    pub(crate) fn write(&self, keys: u64, fences: u64, flushes: u64) {
        let slot = self.slot();
        bump(&slot.keys_written, keys);
        bump(&slot.fences, fences);
        bump(&slot.flushes, flushes);
    }

    pub(crate) fn totals(&self) -> Totals {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        self.slots
            .iter()
            .fold(Totals::default(), |sum, slot| Totals {
                commands: sum.commands + load(&slot.commands),
                errors: sum.errors + load(&slot.errors),
                keys_written: sum.keys_written + load(&slot.keys_written),
                fences: sum.fences + load(&slot.fences),
                flushes: sum.flushes + load(&slot.flushes),
            })
    }

    /// The sums of the command at `index` in the command table.
    pub(crate) fn command_totals(&self, index: usize) -> CommandTotals {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        self.slots.iter().map(|slot| &slot.per_command[index]).fold(
            CommandTotals::default(),
            |sum, counts| CommandTotals {
                calls: sum.calls + load(&counts.calls),
                micros: sum.micros + load(&counts.micros),
                failed: sum.failed + load(&counts.failed),
                rejected: sum.rejected + load(&counts.rejected),
            },
        )
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
                        counters.called(3, Duration::from_micros(2), false);
                        counters.called(3, Duration::from_micros(1), true);
                        counters.rejected(5);
                        counters.unknown();
                        counters.write(2, 3, 5);
                    }
                });
            }
        });
        let expected = Totals {
            commands: 16000,
            errors: 12000,
            keys_written: 8000,
            fences: 12000,
            flushes: 20000,
        };
        assert_eq!(counters.totals(), expected);
        let three = CommandTotals {
            calls: 8000,
            micros: 12000,
            failed: 4000,
            rejected: 0,
        };
        assert_eq!(counters.command_totals(3), three);
        assert_eq!(counters.command_totals(5).rejected, 4000);
    }
}
