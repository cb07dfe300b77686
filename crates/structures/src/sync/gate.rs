//! Writer gates: how a write batch keeps a map's single writers out while it plans and applies,
//! with single writers paying a few plain instructions, not a shared counter.
//!
//! A single write of a map runs inside a *write section* of the map's [`WriterGate`]: it stores
//! the gate's address into its thread's slot (a plain store and a compiler fence), then checks
//! that the gate is open (a plain load), and clears the slot when it is done (a release store).
//! A batch *closes* the gate: it sets the closed flag, runs the heavy barrier of
//! [`super::readers`] (`membarrier`, which runs a full barrier on every CPU running a thread of
//! this process), then waits until no slot holds the gate's address. This is the asymmetric
//! fence of read sections turned around to exclude writers, as a reader-writer lock whose
//! readers never write a shared line (Linux's percpu-rwsem works the same way).
//!
//! # Why a closed gate has no single writer inside
//!
//! Let the closer store `C` (closed), run the heavy barrier `H`, then read the slots. Take a
//! writer that stores its slot `S`, then loads the flag (`L`). The barrier runs a full fence
//! `F` on the writer's CPU at some point of its program:
//!
//! * if `S` comes before `F`, `S` is visible once `H` returns: the closer sees the slot (and
//!   waits for the section's release exit, so every store of the write happens before what the
//!   batch does next) or a later store of it, which comes after the section's exit;
//! * if `S` comes after `F`, so does `L`, which sees `C`: the writer leaves its section without
//!   writing and waits for the gate to open.
//!
//! A slot made after the closer read the slot list is made under the list's lock, which the
//! closer took after `C`, so its first section sees `C` too. Where `membarrier` is missing, the
//! writer fences after `S` (`fence(SeqCst)`) and the heavy barrier is the closer's own fence:
//! two sequentially consistent fences give the same two cases.
//!
//! A closed gate remembers the thread that closed it: a single write that thread makes on the
//! map it holds would wait for itself, and is refused instead ([`GateClosedByThisThread`]).

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::{Condvar, Mutex, MutexGuard};

use crossbeam_utils::CachePadded;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_utils::Backoff;

use super::readers::barrier;

/// One thread's write-section word: the address of the gate it is writing behind, or 0.
#[derive(Debug)]
struct WriterSlot {
    gate: AtomicU64,
    /// Whether a live thread holds the slot.
    claimed: AtomicBool,
}

/// Every slot ever made (leaked, reused by later threads): the closer reads them all.
static SLOTS: Mutex<Vec<&'static CachePadded<WriterSlot>>> = Mutex::new(Vec::new());

fn slots() -> MutexGuard<'static, Vec<&'static CachePadded<WriterSlot>>> {
    SLOTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A free slot, claimed (a new one if none is free).
fn claim_slot() -> &'static CachePadded<WriterSlot> {
    let mut all = slots();
    for &slot in all.iter() {
        if slot
            .claimed
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return slot;
        }
    }
    let slot: &'static CachePadded<WriterSlot> =
        Box::leak(Box::new(CachePadded::new(WriterSlot {
            gate: AtomicU64::new(0),
            claimed: AtomicBool::new(true),
        })));
    all.push(slot);
    slot
}

/// This thread's slot, given back when the thread exits.
struct OwnSlot(&'static CachePadded<WriterSlot>);

impl Drop for OwnSlot {
    fn drop(&mut self) {
        UNFENCED.with(|own| own.set(None));
        // Outside any section: a section ends before its thread does.
        self.0.claimed.store(false, Ordering::Release);
    }
}

thread_local! {
    /// This thread's slot once claimed, set only where the closer's barrier reaches every
    /// thread: a section that finds it announces with a plain store (a constant initializer,
    /// no destructor: one load and a test). Elsewhere every section takes the cold path, which
    /// fences.
    static UNFENCED: Cell<Option<&'static CachePadded<WriterSlot>>> = const { Cell::new(None) };
    /// The claim of this thread's slot, whose destructor gives it back.
    static CLAIM: OwnSlot = OwnSlot(claim_slot());
    /// A byte whose address names this thread while it lives.
    static THREAD_MARK: u8 = const { 0 };
}

/// A number naming the calling thread, never 0 (the address of a thread-local).
fn this_thread() -> u64 {
    THREAD_MARK.with(|m| m as *const u8 as u64)
}

/// A single write of a gated map was made by the thread whose batch holds the map: it would
/// wait for itself forever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GateClosedByThisThread;

/// The gate of one map's single writers (see the module docs).
pub(crate) struct WriterGate {
    /// The thread that closed the gate ([`this_thread`]), 0 while it is open.
    closer: AtomicU64,
    /// Where writers wait for the gate to open.
    waiting: Mutex<()>,
    opened: Condvar,
}

impl Default for WriterGate {
    fn default() -> Self {
        WriterGate::new()
    }
}

/// A single write in progress behind a gate; dropping it ends the write section.
#[must_use]
pub(crate) struct WriteSection {
    slot: &'static CachePadded<WriterSlot>,
    /// The slot is this thread's: the section must end on it.
    _not_send: PhantomData<*const ()>,
}

impl Drop for WriteSection {
    #[inline]
    fn drop(&mut self) {
        // Release: every store of the write happens before a closer that sees the slot clear.
        self.slot.gate.store(0, Ordering::Release);
    }
}

impl WriterGate {
    /// An open gate.
    pub(crate) fn new() -> WriterGate {
        WriterGate {
            closer: AtomicU64::new(0),
            waiting: Mutex::new(()),
            opened: Condvar::new(),
        }
    }

    fn address(&self) -> u64 {
        self as *const WriterGate as u64
    }

    /// Enter a write section: returns once the gate is open and this thread is inside it.
    #[inline(always)]
    pub(crate) fn enter(&self) -> Result<WriteSection, GateClosedByThisThread> {
        if let Some(slot) = UNFENCED.with(Cell::get) {
            slot.gate.store(self.address(), Ordering::Relaxed);
            // The load of the flag stays after the announcement in the compiled code; the CPU
            // keeps it after it wherever the closer's barrier reaches it.
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
            if self.closer.load(Ordering::Relaxed) == 0 {
                return Ok(WriteSection {
                    slot,
                    _not_send: PhantomData,
                });
            }
        }
        self.enter_slow()
    }

    /// A section of a thread without [`UNFENCED`]'s slot (its first, or every one where
    /// writers must fence), or one that found the gate closed: announce with the writer's
    /// barrier, and wait while the gate is closed.
    #[cold]
    #[inline(never)]
    fn enter_slow(&self) -> Result<WriteSection, GateClosedByThisThread> {
        let slot = match CLAIM.try_with(|claim| claim.0) {
            Ok(slot) => {
                if barrier::readers_unfenced() {
                    UNFENCED.with(|own| own.set(Some(slot)));
                }
                slot
            }
            // A write from a thread-local destructor, once the claim is gone: a slot of its
            // own for this section (given back when it ends, below, by `BorrowedSection`).
            Err(_) => return self.enter_borrowed(),
        };
        loop {
            slot.gate.store(self.address(), Ordering::Relaxed);
            barrier::light();
            let closer = self.closer.load(Ordering::Relaxed);
            if closer == 0 {
                return Ok(WriteSection {
                    slot,
                    _not_send: PhantomData,
                });
            }
            slot.gate.store(0, Ordering::Release);
            if closer == this_thread() {
                return Err(GateClosedByThisThread);
            }
            self.wait_open();
        }
    }

    /// [`WriterGate::enter_slow`] on a slot claimed for the section alone; the slot stays
    /// claimed (a thread in its destructors writes rarely, and the slot list only grows).
    #[cold]
    fn enter_borrowed(&self) -> Result<WriteSection, GateClosedByThisThread> {
        let slot = claim_slot();
        loop {
            slot.gate.store(self.address(), Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.closer.load(Ordering::Relaxed) == 0 {
                return Ok(WriteSection {
                    slot,
                    _not_send: PhantomData,
                });
            }
            slot.gate.store(0, Ordering::Release);
            self.wait_open();
        }
    }

    /// Wait until the gate is open (it may close again before the caller enters).
    fn wait_open(&self) {
        let mut guard = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        while self.closer.load(Ordering::Acquire) != 0 {
            guard = self.opened.wait(guard).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Close the gates of `gates` for the calling thread with one heavy barrier, and wait
    /// until no single writer is inside any of them. Each must be open (the caller, the one
    /// batch of the store, closes a gate once and opens it again).
    pub(crate) fn close_all(gates: &[&WriterGate]) {
        if gates.is_empty() {
            return;
        }
        let me = this_thread();
        for gate in gates {
            debug_assert_eq!(gate.closer.load(Ordering::Relaxed), 0, "closed twice");
            gate.closer.store(me, Ordering::Relaxed);
        }
        barrier::heavy();
        let all: Vec<&'static CachePadded<WriterSlot>> = slots().clone();
        for slot in all {
            let backoff = Backoff::new();
            loop {
                let inside = slot.gate.load(Ordering::Acquire);
                if inside == 0 || !gates.iter().any(|g| g.address() == inside) {
                    break;
                }
                backoff.snooze();
            }
        }
    }

    /// Close this gate (see [`WriterGate::close_all`]).
    pub(crate) fn close(&self) {
        WriterGate::close_all(&[self]);
    }

    /// Open the gate again and wake the writers waiting for it.
    pub(crate) fn open(&self) {
        let _guard = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        self.closer.store(0, Ordering::Release);
        self.opened.notify_all();
    }

    /// Whether the calling thread holds the gate closed.
    #[cfg(test)]
    pub(crate) fn closed_by_this_thread(&self) -> bool {
        self.closer.load(Ordering::Relaxed) == this_thread()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_closed_gate_waits_for_the_writer_inside_and_keeps_new_ones_out() {
        let gate = Arc::new(WriterGate::new());
        let inside = gate.enter().expect("open");
        let closed = Arc::new(AtomicBool::new(false));
        let closer = {
            let (gate, closed) = (gate.clone(), closed.clone());
            std::thread::spawn(move || {
                gate.close();
                closed.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
                gate.open();
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !closed.load(Ordering::SeqCst),
            "the gate closed with a writer inside"
        );
        drop(inside);
        while !closed.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // Closed by another thread: this writer waits until it opens.
        let start = std::time::Instant::now();
        drop(gate.enter().expect("opens again"));
        assert!(
            start.elapsed() >= Duration::from_millis(20),
            "a writer entered a closed gate"
        );
        closer.join().unwrap();
    }

    #[test]
    fn the_closing_thread_is_refused_instead_of_waiting_for_itself() {
        let gate = WriterGate::new();
        gate.close();
        assert!(gate.closed_by_this_thread());
        assert_eq!(gate.enter().err(), Some(GateClosedByThisThread));
        gate.open();
        assert!(!gate.closed_by_this_thread());
        drop(gate.enter().expect("open"));
    }

    #[test]
    fn no_write_runs_while_the_gate_is_closed() {
        // Writers bump a counter inside their sections; the closer checks it does not move
        // while it holds the gate, many times over.
        let gate = Arc::new(WriterGate::new());
        let counter = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (gate, counter, stop) = (gate.clone(), counter.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let _w = gate.enter().expect("never closed by this thread");
                        let v = counter.load(Ordering::Relaxed);
                        counter.store(v + 1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for _ in 0..200 {
            gate.close();
            let before = counter.load(Ordering::Relaxed);
            std::thread::yield_now();
            assert_eq!(
                counter.load(Ordering::Relaxed),
                before,
                "a writer ran behind a closed gate"
            );
            gate.open();
        }
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
    }
}
