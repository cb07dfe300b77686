//! Client histories of SET and GET on a few keys, recorded by concurrent clients of the
//! cluster (`client`), and checked key by key for linearizability by stateright's
//! `LinearizabilityTester` against a register.
//!
//! A SET whose outcome is unknown (the connection failed or timed out, or the server said it
//! may or may not be applied) stays invoked and never returns: the tester may take it as
//! applied at any point after its invocation, or not at all, as Jepsen and porcupine model
//! such operations. It gets a thread of its own, so its client goes on. A GET that failed has
//! no effect and is left out.

#![allow(dead_code)]

pub mod client;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use stateright::semantics::register::{Register, RegisterOp, RegisterRet};
use stateright::semantics::{ConsistencyTester, LinearizabilityTester};

/// A key's value as a register: `None` while the key is absent.
pub type Value = Option<String>;

/// One operation: who, on which key, what, and when (ticks of the history's clock).
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The tester's thread: the client's, or one of its own for an operation left pending.
    pub thread: u64,
    pub key: String,
    pub op: RegisterOp<Value>,
    pub invoked: u64,
    /// When it returned and what (`None`: the outcome is unknown).
    pub returned: Option<(u64, RegisterRet<Value>)>,
}

/// The operations of every client, with a clock all of them tick: an operation's
/// invocation is taken before its request is sent, its return after its reply is read, so
/// the clock orders them as real time does.
#[derive(Debug, Default)]
pub struct History {
    clock: AtomicU64,
    pending_threads: AtomicU64,
    ops: Mutex<Vec<Recorded>>,
}

/// Threads of pending operations sort after the clients' (the tester tries threads in
/// order, so it tries the completed operations first).
const PENDING_THREADS: u64 = 1 << 32;

impl History {
    /// A tick of the clock.
    pub fn now(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    /// A thread for an operation left pending.
    pub fn pending_thread(&self) -> u64 {
        PENDING_THREADS + self.pending_threads.fetch_add(1, Ordering::Relaxed)
    }

    pub fn record(&self, op: Recorded) {
        self.ops.lock().unwrap().push(op);
    }

    /// (completed, pending) operations.
    pub fn counts(&self) -> (usize, usize) {
        let ops = self.ops.lock().unwrap();
        let pending = ops.iter().filter(|op| op.returned.is_none()).count();
        (ops.len() - pending, pending)
    }

    /// What the last completed read of `key` by `thread` returned.
    pub fn last_read(&self, thread: u64, key: &str) -> Option<Value> {
        let ops = self.ops.lock().unwrap();
        ops.iter().rev().find_map(|op| match &op.returned {
            Some((_, RegisterRet::ReadOk(value))) if op.thread == thread && op.key == key => {
                Some(value.clone())
            }
            _ => None,
        })
    }

    /// Check each key's history; the keys checked and their operations, or why one is not
    /// linearizable.
    pub fn check(&self) -> Result<BTreeMap<String, usize>, String> {
        let ops = self.ops.lock().unwrap().clone();
        // The tester searches depth first, a frame per operation: give it room.
        std::thread::Builder::new()
            .stack_size(256 << 20)
            .spawn(move || check(&ops))
            .unwrap()
            .join()
            .unwrap()
    }
}

/// Check `ops`, key by key.
pub fn check(ops: &[Recorded]) -> Result<BTreeMap<String, usize>, String> {
    let mut by_key: BTreeMap<&str, Vec<&Recorded>> = BTreeMap::new();
    for op in ops {
        by_key.entry(&op.key).or_default().push(op);
    }
    let mut checked = BTreeMap::new();
    for (key, ops) in by_key {
        enum Event<'a> {
            Invoke(&'a Recorded),
            Return(&'a Recorded, &'a RegisterRet<Value>),
        }
        let mut events: Vec<(u64, Event)> = Vec::new();
        for op in &ops {
            events.push((op.invoked, Event::Invoke(op)));
            if let Some((at, ret)) = &op.returned {
                events.push((*at, Event::Return(op, ret)));
            }
        }
        events.sort_by_key(|(at, _)| *at);
        let mut tester = LinearizabilityTester::new(Register::<Value>(None));
        for (_, event) in &events {
            let valid = match event {
                Event::Invoke(op) => tester.on_invoke(op.thread, op.op.clone()).map(|_| ()),
                Event::Return(op, ret) => tester.on_return(op.thread, (*ret).clone()).map(|_| ()),
            };
            valid.map_err(|e| format!("key {key}: the history is malformed: {e}"))?;
        }
        if !tester.is_consistent() {
            let mut text = format!("key {key}: not linearizable; its operations:\n");
            for op in ops.iter().take(200) {
                text.push_str(&format!(
                    "  thread {} {:?} invoked at {} returned {:?}\n",
                    op.thread, op.op, op.invoked, op.returned
                ));
            }
            return Err(text);
        }
        checked.insert(key.to_string(), ops.len());
    }
    Ok(checked)
}

/// The checker's own tests: it refuses what is not linearizable, so its passing means
/// something.
#[cfg(test)]
mod checker {
    use super::*;

    fn set(thread: u64, value: &str, invoked: u64, returned: Option<u64>) -> Recorded {
        Recorded {
            thread,
            key: "k".into(),
            op: RegisterOp::Write(Some(value.into())),
            invoked,
            returned: returned.map(|at| (at, RegisterRet::WriteOk)),
        }
    }

    fn get(thread: u64, got: Option<&str>, invoked: u64, returned: u64) -> Recorded {
        Recorded {
            thread,
            key: "k".into(),
            op: RegisterOp::Read,
            invoked,
            returned: Some((returned, RegisterRet::ReadOk(got.map(String::from)))),
        }
    }

    #[test]
    fn a_read_of_an_overwritten_value_after_the_overwrite_is_refused() {
        let history = [
            set(0, "a", 0, Some(1)),
            set(1, "b", 2, Some(3)),
            get(0, Some("a"), 4, 5),
        ];
        assert!(check(&history).is_err());
        // Concurrent with the overwrite, the same read is fine.
        let history = [
            set(0, "a", 0, Some(1)),
            set(1, "b", 2, Some(5)),
            get(0, Some("a"), 3, 4),
        ];
        assert_eq!(check(&history).unwrap()["k"], 3);
    }

    #[test]
    fn a_value_never_written_is_refused_and_so_is_a_lost_acknowledged_write() {
        assert!(check(&[set(0, "a", 0, Some(1)), get(1, Some("z"), 2, 3)]).is_err());
        assert!(check(&[set(0, "a", 0, Some(1)), get(1, None, 2, 3)]).is_err());
    }

    #[test]
    fn a_pending_write_may_take_effect_late_or_never_but_not_before_it_was_invoked() {
        // Its client went on; a read sees it afterwards.
        let late = [
            set(PENDING_THREADS, "a", 0, None),
            set(0, "b", 1, Some(2)),
            get(1, Some("a"), 3, 4),
        ];
        assert!(check(&late).is_ok());
        let never = [set(PENDING_THREADS, "a", 0, None), get(1, None, 3, 4)];
        assert!(check(&never).is_ok());
        let early = [get(1, Some("a"), 0, 1), set(PENDING_THREADS, "a", 2, None)];
        assert!(check(&early).is_err());
        // Once seen, it cannot be unseen by a later read.
        let flicker = [
            set(PENDING_THREADS, "a", 0, None),
            get(1, Some("a"), 1, 2),
            get(1, None, 3, 4),
        ];
        assert!(check(&flicker).is_err());
    }
}
