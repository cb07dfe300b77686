//! Lock-free readers that announce themselves with plain stores, and the rare reclaimer that
//! pays for the barrier: an asymmetric fence, as RCU and folly's hazard pointers do.
//!
//! A reader ([`ReadSection`]) stores an odd sequence number into its thread's slot on entry,
//! with no fence but a compiler fence, and the next even number on exit (a release store). A
//! reclaimer that has unlinked memory starts a [`GracePeriod`]: one *heavy* barrier
//! (`membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` on Linux, which runs a full barrier on
//! every CPU running a thread of this process), then a read of every slot; the memory may be
//! freed once every slot seen odd has moved on. Readers thus pay a few plain instructions per
//! section instead of the locked instruction (a full barrier) of an epoch pin.
//!
//! # Why it is right
//!
//! Let the reclaimer unlink memory with store `U` (a directory swap), then run the heavy
//! barrier `H`, then read the slots. Take a reader section that stores `S` (odd) into its slot
//! and then loads the link (`L`). The kernel has every thread of the process that runs during
//! `H` execute a full barrier `F` at some point of its program, and a thread not running
//! passes through a context switch, which is one too; `H` returns only after, and everything
//! before `U` in the reclaimer's order is visible to what follows `F` in the reader's.
//!
//! * If `S` comes before `F` in the reader's program, `S` is visible once `H` returns: the
//!   reclaimer reads `S` (odd: the section is waited for) or a later store of the same slot,
//!   which comes after the section's exit. Exit and entry are release stores and the slot is
//!   read with acquire loads, so every load of the section happens before the memory is freed.
//! * If `S` comes after `F`, so does `L`, which therefore sees `U` or later: the section never
//!   reaches the unlinked memory.
//!
//! A slot created after the reclaimer's read of the slot list is created under the list's lock,
//! which the reclaimer held after `U`: its owner's first section sees `U` too.
//!
//! Where `membarrier` is missing (an old kernel, another OS, detected at the first use), the
//! readers fence for real after `S` (`fence(SeqCst)`) and the heavy barrier is the same fence:
//! then the two sequentially consistent fences order `U` before `L` or `S` before the
//! reclaimer's read, the same two cases.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Mutex;

use crossbeam_utils::CachePadded;

use super::primitives::{fence, AtomicU64, Ordering};

/// The bit of a slot's word set while a live thread holds the slot (a slot is reused once its
/// thread has exited). In the sequence's word, so that a section lent a slot gives it back
/// with its exit store: one store on every exit, and no flag to test. The sequence below it
/// would reach it after 2^62 sections of one slot, which no process lives to run.
const CLAIMED: u64 = 1 << 63;

/// One thread's announcement word: odd while it is inside a read section, [`CLAIMED`] while a
/// thread holds it.
#[derive(Debug)]
pub(crate) struct Slot {
    sequence: AtomicU64,
}

/// Every slot ever made: a slot is leaked so that a reclaimer may read it without a lock on
/// its owner's life, and reused by a later thread, so there are as many as threads ever ran
/// at once.
static SLOTS: Mutex<Vec<&'static CachePadded<Slot>>> = Mutex::new(Vec::new());

fn slots() -> std::sync::MutexGuard<'static, Vec<&'static CachePadded<Slot>>> {
    SLOTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A free slot, claimed for the caller (a new one if none is free).
fn claim_slot() -> &'static CachePadded<Slot> {
    let mut all = slots();
    for &slot in all.iter() {
        // A free slot has no thread to store to it: it stays free between the load and the
        // exchange but for another claimer's exchange, which would make this one fail.
        let word = slot.sequence.load(Ordering::Relaxed);
        if word & CLAIMED == 0
            && slot
                .sequence
                .compare_exchange(word, word | CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return slot;
        }
    }
    let slot: &'static CachePadded<Slot> = Box::leak(Box::new(CachePadded::new(Slot {
        sequence: AtomicU64::new(CLAIMED),
    })));
    all.push(slot);
    slot
}

/// A slot of its own for one execution of a loom model, which cannot use the process's list
/// (its atomics belong to one execution) nor std's thread-locals (loom's threads share one).
#[cfg(all(test, loom))]
pub(super) fn model_slot() -> &'static CachePadded<Slot> {
    Box::leak(Box::new(CachePadded::new(Slot {
        sequence: AtomicU64::new(CLAIMED),
    })))
}

/// This thread's slot, given back when the thread exits.
struct OwnSlot(&'static CachePadded<Slot>);

impl Drop for OwnSlot {
    fn drop(&mut self) {
        UNFENCED.with(|own| own.set(None));
        // Outside any section (sections end before their thread does): the sequence is even.
        self.0.sequence.fetch_and(!CLAIMED, Ordering::Release);
    }
}

thread_local! {
    /// This thread's slot once claimed, set only where the reclaimer's barrier reaches every
    /// thread (`membarrier`): a section that finds it announces with plain stores and checks
    /// nothing else (a constant initializer and no destructor: one load, no check of the
    /// thread-local's state, and the barrier mode known from the slot being there). Where the
    /// readers must fence, it stays empty and every section takes the cold path, which fences.
    static UNFENCED: Cell<Option<&'static CachePadded<Slot>>> = const { Cell::new(None) };
    /// The claim of this thread's slot, whose destructor gives it back.
    static CLAIM: OwnSlot = OwnSlot(claim_slot());
}

/// How the barriers are issued, decided at the first use.
#[cfg(not(loom))]
pub(super) mod barrier {
    use std::sync::atomic::AtomicU8;

    use super::{fence, Ordering};

    const UNKNOWN: u8 = 0;
    const MEMBARRIER: u8 = 1;
    const FENCES: u8 = 2;

    static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

    const CMD_QUERY: libc::c_int = 0;
    const CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

    #[cfg(target_os = "linux")]
    fn membarrier(cmd: libc::c_int) -> libc::c_long {
        // SAFETY: the membarrier system call takes a command and flags by value and touches no
        // memory of the caller.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_int) }
    }

    #[cfg(not(target_os = "linux"))]
    fn membarrier(_cmd: libc::c_int) -> libc::c_long {
        -1
    }

    /// Whether private expedited membarrier works here, registering this process for it.
    fn detect() -> u8 {
        let needed = (CMD_PRIVATE_EXPEDITED | CMD_REGISTER_PRIVATE_EXPEDITED) as libc::c_long;
        let supported = membarrier(CMD_QUERY);
        if supported >= 0
            && supported & needed == needed
            && membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) == 0
        {
            MEMBARRIER
        } else {
            FENCES
        }
    }

    #[cold]
    #[inline(never)]
    fn mode_slow() -> u8 {
        let mode = detect();
        // Registration is done before anyone reads MEMBARRIER: a reader that sees it fences
        // only with the compiler, and every heavy barrier after it reaches that reader.
        MODE.store(mode, Ordering::SeqCst);
        mode
    }

    #[inline(always)]
    fn mode() -> u8 {
        match MODE.load(Ordering::Relaxed) {
            UNKNOWN => mode_slow(),
            mode => mode,
        }
    }

    /// Whether readers may go without a fence: the reclaimer's barrier reaches every thread.
    /// True for good once true (the mode is decided once).
    pub(in crate::sync) fn readers_unfenced() -> bool {
        mode() == MEMBARRIER
    }

    /// The reader's side, after its announcement: nothing where the reclaimer's barrier
    /// reaches every thread, else a full fence.
    pub(in crate::sync) fn light() {
        if !readers_unfenced() {
            fence(Ordering::SeqCst);
        }
    }

    /// The reclaimer's side: a full barrier on every thread of the process, or this thread's
    /// own (which pairs with the readers' own fences).
    pub(in crate::sync) fn heavy() {
        if mode() == MEMBARRIER {
            let done = membarrier(CMD_PRIVATE_EXPEDITED);
            // The command was registered: it cannot fail but for a kernel bug. A full fence
            // on this side alone would not order the readers, so a failure must not pass.
            assert_eq!(
                done, 0,
                "membarrier(PRIVATE_EXPEDITED) failed after registration"
            );
        } else {
            fence(Ordering::SeqCst);
        }
    }
}

/// Under loom, the barriers where `membarrier` is missing: loom cannot run a system call, and
/// models the two sequentially consistent fences the argument above rests on.
#[cfg(loom)]
pub(super) mod barrier {
    use super::{fence, Ordering};

    pub(in crate::sync) fn readers_unfenced() -> bool {
        false
    }

    pub(in crate::sync) fn light() {
        fence(Ordering::SeqCst);
    }

    pub(in crate::sync) fn heavy() {
        fence(Ordering::SeqCst);
    }
}

/// A lock-free read in progress on this thread: memory unlinked after it began is not freed
/// before it ends (see the module docs). Nested sections share the outermost one's
/// announcement, and end before it (sections are scoped locals, dropped innermost first).
#[must_use]
pub(crate) struct ReadSection {
    slot: &'static CachePadded<Slot>,
    /// What the section stores on exit: the next even number after the outermost section's
    /// odd one, or, for a nested section, the odd number it found (storing it back changes
    /// nothing: the outer section goes on). One store either way.
    /// Without [`CLAIMED`] for a slot claimed for this section alone (a thread whose own slot
    /// is already gone, in a thread-local destructor): the store gives it back.
    exit: u64,
    /// The slot is this thread's: the section must end on it.
    _not_send: PhantomData<*const ()>,
}

impl ReadSection {
    /// Enter a read section.
    #[inline(always)]
    pub(crate) fn enter() -> ReadSection {
        match UNFENCED.with(Cell::get) {
            // The slot is there only where no fence is needed (see `UNFENCED`).
            Some(slot) => ReadSection::announce(slot, false),
            None => ReadSection::enter_fenced(),
        }
    }

    /// A section of a thread without [`UNFENCED`]'s slot: its first section (its slot is
    /// claimed, and kept in `UNFENCED` if the readers need no fence), every section where
    /// they do, and a section in a thread-local destructor once the claim is gone (a slot is
    /// borrowed for it).
    #[cold]
    #[inline(never)]
    fn enter_fenced() -> ReadSection {
        match CLAIM.try_with(|claim| claim.0) {
            Ok(slot) => {
                let section = ReadSection::on(slot, false);
                if barrier::readers_unfenced() {
                    UNFENCED.with(|own| own.set(Some(slot)));
                }
                section
            }
            Err(_) => ReadSection::on(claim_slot(), true),
        }
    }

    /// A section announced on `slot` (this thread's, or one borrowed for it), with the
    /// reader's barrier the mode asks for.
    pub(super) fn on(slot: &'static CachePadded<Slot>, borrowed: bool) -> ReadSection {
        let section = ReadSection::announce(slot, borrowed);
        barrier::light();
        section
    }

    /// The announcement alone, with no barrier but the compiler's: enough only where the
    /// reclaimer's barrier reaches every thread.
    #[inline(always)]
    fn announce(slot: &'static CachePadded<Slot>, borrowed: bool) -> ReadSection {
        // Only this thread stores to its slot: the load reads its own last store.
        let now = slot.sequence.load(Ordering::Relaxed);
        if now & 1 == 1 {
            return ReadSection::nested(slot, now, borrowed);
        }
        slot.sequence.store(now + 1, Ordering::Release);
        // The section's loads stay after the announcement in the compiled code (the CPU keeps
        // them after it where the reclaimer's barrier reaches it, or the fence of `on` does).
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        // The next even number. The claim bit above is kept (no carry reaches it: see
        // `CLAIMED`), or dropped for a lent slot.
        let exit = now + 2;
        ReadSection {
            slot,
            exit: if borrowed { exit & !CLAIMED } else { exit },
            _not_send: PhantomData,
        }
    }

    /// A section inside another of the same thread (the slot's word `now` is odd): it
    /// announces nothing, and stores `now` back on exit, which changes nothing (the outer
    /// section goes on). Out of line: lookups are seldom nested.
    #[cold]
    #[inline(never)]
    fn nested(slot: &'static CachePadded<Slot>, now: u64, borrowed: bool) -> ReadSection {
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        ReadSection {
            slot,
            exit: if borrowed { now & !CLAIMED } else { now },
            _not_send: PhantomData,
        }
    }

    /// Whether this section is nested in another of the same thread (it announced nothing of
    /// its own).
    #[cfg(all(test, not(loom)))]
    fn is_nested(&self) -> bool {
        self.exit & 1 == 1
    }
}

impl Drop for ReadSection {
    #[inline]
    fn drop(&mut self) {
        // Release: every load of the section happens before a reclaimer that sees this (and
        // before a claimer of a slot this gives back).
        self.slot.sequence.store(self.exit, Ordering::Release);
    }
}

/// The readers a reclaimer waits for: those inside a section when it started, after the
/// memory was unlinked (see the module docs).
#[derive(Debug)]
pub(crate) struct GracePeriod {
    readers: Vec<(&'static CachePadded<Slot>, u64)>,
}

impl GracePeriod {
    /// Start a grace period for memory already unlinked: once [`GracePeriod::has_passed`], no
    /// reader can still be reading it.
    pub(crate) fn start() -> GracePeriod {
        let all = slots();
        GracePeriod::over(all.iter().copied())
    }

    /// A grace period over `slots` alone: [`GracePeriod::start`] passes every slot, the loom
    /// model its own.
    pub(super) fn over(slots: impl IntoIterator<Item = &'static CachePadded<Slot>>) -> GracePeriod {
        barrier::heavy();
        let readers = slots
            .into_iter()
            .map(|slot| (slot, slot.sequence.load(Ordering::Acquire)))
            .filter(|&(_, seen)| seen & 1 == 1)
            .collect();
        GracePeriod { readers }
    }

    /// Whether every reader inside a section at the start has left it.
    pub(crate) fn has_passed(&self) -> bool {
        self.readers
            .iter()
            .all(|&(slot, seen)| slot.sequence.load(Ordering::Acquire) != seen)
    }

    /// Whether the calling thread is one of the readers still waited for: it would wait for
    /// itself.
    pub(crate) fn waits_for_this_thread(&self) -> bool {
        let own = UNFENCED
            .with(Cell::get)
            .or_else(|| CLAIM.try_with(|claim| claim.0).ok());
        own.is_some_and(|own| {
            self.readers.iter().any(|&(slot, seen)| {
                std::ptr::eq(slot, own) && slot.sequence.load(Ordering::Relaxed) == seen
            })
        })
    }
}

/// A read section held open on another thread until [`HeldSection::leave`]: the reader a grace
/// period must wait for, in tests.
#[cfg(test)]
pub(crate) struct HeldSection {
    leave: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

#[cfg(test)]
impl HeldSection {
    /// Start the thread; returns once it is inside its section.
    pub(crate) fn enter() -> HeldSection {
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (leave, leave_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let section = ReadSection::enter();
            entered_tx.send(()).unwrap();
            leave_rx.recv().unwrap();
            drop(section);
        });
        entered_rx.recv().unwrap();
        HeldSection { leave, thread }
    }

    /// End the section and join the thread.
    pub(crate) fn leave(self) {
        self.leave.send(()).unwrap();
        self.thread.join().unwrap();
    }
}

// Real threads and the process's slots: outside loom, whose atomics live in one model.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Whether `grace` passes within a few seconds: the slots are the process's, so sections
    /// of other tests running meanwhile may be waited for too (they are short).
    fn passes(grace: &GracePeriod) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !grace.has_passed() {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    #[test]
    fn a_grace_period_waits_for_the_sections_open_at_its_start_only() {
        let reader = HeldSection::enter();
        let grace = GracePeriod::start();
        assert!(!grace.has_passed(), "a reader is inside a section");
        assert!(!grace.waits_for_this_thread());
        // A section of this thread, begun after the start, is not waited for.
        let mine = ReadSection::enter();
        assert!(!grace.has_passed());
        reader.leave();
        assert!(passes(&grace), "the reader has left");
        drop(mine);
    }

    #[test]
    fn a_thread_inside_a_section_is_told_that_it_would_wait_for_itself() {
        let outer = ReadSection::enter();
        let nested = ReadSection::enter();
        assert!(nested.is_nested(), "a nested section announces nothing");
        assert!(!outer.is_nested());
        drop(nested);
        let grace = GracePeriod::start();
        assert!(grace.waits_for_this_thread());
        assert!(
            !grace.has_passed(),
            "the nested exit did not end the outer section"
        );
        drop(outer);
        assert!(passes(&grace));
        assert!(!grace.waits_for_this_thread());
    }
}
