//! Deterministic interleavings of the lock-free lookup against writers, driving the real code.
//!
//! A reader thread runs `Cceh::get_observed` and stops at every `LookupStep`; a writer thread
//! runs a script of operations and stops before each one and at every [`WriteStep`] (the
//! `write_step` calls between a writer's stores, nothing outside tests). One thread runs at a
//! time: at each stop, the schedule says whether the running thread goes on or hands the turn
//! to the other. Every schedule up to a bound on the number of hand-overs is run, depth first
//! (each choice point is tried both ways), each on a fresh table built the same way, and the
//! lookup's result is checked against a model: it must be the key's value after some prefix of
//! the writer's script that the lookup overlapped (from the operations finished before it
//! began to those started before it ended).
//!
//! What this checks: the order of the writers' stores (slot commits, moves, the steps of a
//! split and of a doubling) and the lookup's re-reads and final checks, at every point a store
//! can land in the middle of a lookup. What it cannot check: the memory orderings of the atomics
//! themselves (acquire loads, release fences): the hand-over is a mutex, which orders
//! everything. Those are the pool's `Words` loads and the fences commented in `split.rs`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use pmem_undo_log::Heap;

use super::hashing::hash;
use super::test_heap::{heap, id_of, keys_at_home, keys_with_top_bit, payload, Colliding};
use super::{Cceh, CcehConfig, CcehError, WriteStep};

/// What a harness's writer does at a step: wait for its turn as the schedule says.
type StopAtStep = Box<dyn FnMut(WriteStep)>;

thread_local! {
    /// What a writer of this thread does at each of its steps: set by the harness in its
    /// writer thread only, so other tests' writers run straight through.
    static STEP_HOOK: RefCell<Option<StopAtStep>> = const { RefCell::new(None) };
}

/// A writer reached `step`: stop there if this thread is a harness's writer.
pub(super) fn write_step(step: WriteStep) {
    STEP_HOOK.with(|hook| {
        if let Some(stop) = hook.borrow_mut().as_mut() {
            stop(step);
        }
    });
}

/// The two threads of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Reader,
    Writer,
}

impl Who {
    fn other(self) -> Who {
        match self {
            Who::Reader => Who::Writer,
            Who::Writer => Who::Reader,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The state of one run, shared by its two threads.
struct RunState {
    turn: Who,
    finished: [bool; 2],
    /// The choices made at the points where the other thread could have run: `true` is a
    /// hand-over.
    choices: Vec<bool>,
    hand_overs: usize,
    /// Writer operations started and finished so far.
    ops_started: usize,
    ops_finished: usize,
}

/// The turn, passed between the reader and the writer of one run as a schedule says.
struct Baton {
    state: Mutex<RunState>,
    turn_changed: Condvar,
    /// The choices to make, in order, at the choice points; `false` (go on) past its end.
    replay: Vec<bool>,
    max_hand_overs: usize,
}

impl Baton {
    fn new(replay: Vec<bool>, max_hand_overs: usize) -> Baton {
        Baton {
            state: Mutex::new(RunState {
                turn: Who::Reader,
                finished: [false; 2],
                choices: Vec::new(),
                hand_overs: 0,
                ops_started: 0,
                ops_finished: 0,
            }),
            turn_changed: Condvar::new(),
            replay,
            max_hand_overs,
        }
    }

    fn lock(&self) -> MutexGuard<'_, RunState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait for `me`'s turn.
    fn wait_turn<'a>(
        &'a self,
        mut state: MutexGuard<'a, RunState>,
        me: Who,
    ) -> MutexGuard<'a, RunState> {
        while state.turn != me {
            state = self
                .turn_changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        state
    }

    /// A thread starts: it runs once it has the turn.
    fn start(&self, me: Who) {
        drop(self.wait_turn(self.lock(), me));
    }

    /// `me`, holding the turn, stops: it goes on or hands the turn over, as the schedule says.
    fn stop(&self, me: Who) {
        let mut state = self.lock();
        assert_eq!(state.turn, me, "only the thread holding the turn runs");
        let other = me.other();
        if state.finished[other.index()] || state.hand_overs >= self.max_hand_overs {
            return;
        }
        let hand_over = self
            .replay
            .get(state.choices.len())
            .copied()
            .unwrap_or(false);
        state.choices.push(hand_over);
        if hand_over {
            state.hand_overs += 1;
            state.turn = other;
            self.turn_changed.notify_all();
            drop(self.wait_turn(state, me));
        }
    }

    /// `me` is done (or panicked): the other thread runs to its end.
    fn finish(&self, me: Who) {
        let mut state = self.lock();
        state.finished[me.index()] = true;
        state.turn = me.other();
        self.turn_changed.notify_all();
    }
}

/// Hands the turn on when a thread of the run ends, even by a panic (else the other thread
/// would wait for the turn forever).
struct Finish<'a>(&'a Baton, Who);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.finish(self.1);
    }
}

/// A writer's operation.
#[derive(Clone, Copy, Debug)]
enum Op {
    Insert(u64, u64),
    Remove(u64),
}

impl Op {
    /// Apply to the model; what the table must return, as `Option<u64>` (insert: `Some(1)`
    /// when new, `Some(0)` when present; remove: the old value).
    fn apply(self, model: &mut BTreeMap<u64, u64>) -> Option<u64> {
        match self {
            Op::Insert(k, v) => {
                let new = !model.contains_key(&k);
                model.entry(k).or_insert(v);
                Some(u64::from(new))
            }
            Op::Remove(k) => model.remove(&k),
        }
    }
}

/// A lookup of `key` while a writer runs `script`, on a table of `buckets` buckets per segment
/// into which `setup` was inserted first.
struct Scenario {
    buckets: u64,
    setup: Vec<(u64, u64)>,
    script: Vec<Op>,
    key: u64,
    max_hand_overs: usize,
    /// `None`: a table of `u64` keys. `Some(word)`: a table of hashed key words where every key
    /// of the scenario is an id whose entries all share this key word, told apart through
    /// their values by a probe ([`Colliding`]).
    shared_word: Option<u64>,
}

/// The table of a run.
type RunTable = Cceh<pmem_ordering::Hardware>;

/// A scenario played on the model (a map), one operation at a time.
struct Model {
    /// The key's value after each prefix of the script (index `j`: after `j` operations).
    values: Vec<Option<u64>>,
    /// The whole contents after all of it.
    end: BTreeMap<u64, u64>,
    /// What each operation returns (see [`Op::apply`]).
    returns: Vec<Option<u64>>,
}

/// One schedule's outcome.
struct Run {
    /// The choices made at its choice points.
    choices: Vec<bool>,
    /// What the lookup returned.
    found: Option<u64>,
    /// The script prefixes the lookup overlapped: `(first, last)` operations done.
    window: (usize, usize),
}

/// What the schedules of a scenario showed.
#[derive(Debug, Default)]
struct Explored {
    schedules: usize,
    /// Each result the lookup returned, with how many schedules returned it.
    results: BTreeMap<Option<u64>, usize>,
    /// The most keys a run's writer displaced, the deepest directory and the most segments it
    /// left.
    displacements: u64,
    global_depth: u64,
    segments: usize,
}

impl Scenario {
    /// What the model says of the script.
    fn model(&self) -> Model {
        let mut model: BTreeMap<u64, u64> = self.setup.iter().copied().collect();
        let mut values = vec![model.get(&self.key).copied()];
        let mut returns = Vec::new();
        for op in &self.script {
            returns.push(op.apply(&mut model));
            values.push(model.get(&self.key).copied());
        }
        Model {
            values,
            end: model,
            returns,
        }
    }

    /// Run every schedule; panic at the first whose lookup returns a value no prefix of the
    /// script it overlapped explains.
    fn explore(&self) -> Explored {
        let Model {
            values,
            end: final_model,
            returns,
        } = self.model();
        let mut explored = Explored::default();
        let mut replay = Vec::new();
        loop {
            let heap = heap();
            let run = self.run_once(&heap, replay.clone(), &returns, &final_model);
            let Run {
                choices,
                found,
                window,
            } = run.0;
            explored.displacements = explored.displacements.max(run.1);
            explored.global_depth = explored.global_depth.max(run.2);
            explored.segments = explored.segments.max(run.3);
            let (first, last) = window;
            assert!(
                values[first..=last].contains(&found),
                "schedule {choices:?}: the lookup of {} returned {found:?}, but overlapping \
                 operations {first}..{last} of {:?} only explain {:?}",
                self.key,
                self.script,
                &values[first..=last],
            );
            explored.schedules += 1;
            *explored.results.entry(found).or_default() += 1;
            // Depth first: the last choice that went on is tried as a hand-over next.
            let Some(last_go_on) = choices.iter().rposition(|&hand_over| !hand_over) else {
                return explored;
            };
            replay = choices[..last_go_on].to_vec();
            replay.push(true);
        }
    }

    /// The probe of key `k` (an id) in a table of hashed key words.
    fn colliding(&self, k: u64, word: u64) -> Colliding {
        assert!(k < 1 << 32, "ids fit a value word's high half");
        Colliding { id: k, word }
    }

    /// Insert `k -> v` (a payload of 32 bits in a table of hashed key words): whether it was new.
    fn insert(&self, table: &RunTable, k: u64, v: u64) -> bool {
        let Some(word) = self.shared_word else {
            return table.insert(k, v).unwrap();
        };
        let probe = self.colliding(k, word);
        let value = probe.value(u32::try_from(v).expect("a 32-bit payload"));
        let old = table.put_probe(&probe, value, false, |_| Ok::<(), CcehError>(()));
        old.unwrap().is_none()
    }

    /// Remove `k`: its value, if it was there.
    fn remove(&self, table: &RunTable, k: u64) -> Option<u64> {
        let Some(word) = self.shared_word else {
            return table.remove(k).unwrap();
        };
        let old = table.remove_probe(&self.colliding(k, word), |_| Ok::<(), CcehError>(()));
        old.unwrap().map(|v| u64::from(payload(v)))
    }

    /// The lookup of `self.key`, calling `stop` at each of its steps.
    fn get_observed(&self, table: &RunTable, mut stop: impl FnMut()) -> Option<u64> {
        let found = match self.shared_word {
            None => table.get_observed(self.key, |_| stop()),
            Some(word) => table.get_probe_observed(
                &self.colliding(self.key, word),
                |v| u64::from(payload(v)),
                |_| stop(),
            ),
        };
        found.unwrap()
    }

    /// One schedule: the lookup's result, the choices made, and the span of script prefixes
    /// the lookup overlapped.
    fn run_once(
        &self,
        heap: &Heap,
        replay: Vec<bool>,
        returns: &[Option<u64>],
        final_model: &BTreeMap<u64, u64>,
    ) -> (Run, u64, u64, usize) {
        let config = CcehConfig {
            buckets_per_segment: self.buckets,
        };
        let root = heap.pool().root_offset();
        let table = match self.shared_word {
            None => Cceh::create(heap, root, config).unwrap(),
            Some(_) => Cceh::create_hashed(heap, root, config).unwrap(),
        };
        for &(k, v) in &self.setup {
            assert!(self.insert(&table, k, v));
        }
        let baton = Arc::new(Baton::new(replay, self.max_hand_overs));
        let (found, window) = std::thread::scope(|s| {
            s.spawn(|| {
                let _finish = Finish(&baton, Who::Writer);
                baton.start(Who::Writer);
                let hook = Arc::clone(&baton);
                STEP_HOOK.with(|h| {
                    *h.borrow_mut() = Some(Box::new(move |_| hook.stop(Who::Writer)));
                });
                for (op, &expected) in self.script.iter().zip(returns) {
                    baton.stop(Who::Writer);
                    baton.lock().ops_started += 1;
                    let got = match *op {
                        Op::Insert(k, v) => Some(u64::from(self.insert(&table, k, v))),
                        Op::Remove(k) => self.remove(&table, k),
                    };
                    baton.lock().ops_finished += 1;
                    assert_eq!(got, expected, "{op:?}");
                }
                STEP_HOOK.with(|h| *h.borrow_mut() = None);
            });
            let _finish = Finish(&baton, Who::Reader);
            baton.start(Who::Reader);
            baton.stop(Who::Reader);
            let first = baton.lock().ops_finished;
            let found = self.get_observed(&table, || baton.stop(Who::Reader));
            let last = baton.lock().ops_started;
            (found, (first, last))
        });
        let contents: BTreeMap<u64, u64> = table
            .iter()
            .map(Result::unwrap)
            .map(|(k, v)| match self.shared_word {
                None => (k, v),
                Some(_) => (id_of(v), u64::from(payload(v))),
            })
            .collect();
        assert_eq!(&contents, final_model, "the script's end state");
        let choices = baton.lock().choices.clone();
        let run = Run {
            choices,
            found,
            window,
        };
        let segments = table.segments().unwrap().len();
        let depth = table.global_depth().unwrap();
        (run, table.displacements(), depth, segments)
    }
}

mod scenarios;
