//! What the three operation enums share: applying a sequence to a std model, the models after
//! every prefix, and the operations on a structure's reserved key.

use std::fmt::Debug;

/// An operation with a std model of the structure it runs on.
pub trait ModelOp {
    /// The model: what the structure must hold after a sequence of operations.
    type Model: Clone + Debug + Default + PartialEq;

    /// The effect of this operation, the `index`-th of its sequence, on `model`. (The datalog's
    /// written bytes depend on the index; the maps ignore it.)
    fn apply(&self, index: usize, model: &mut Self::Model);
}

/// The models after every prefix of a sequence: what a crash image may recover to.
#[derive(Clone, Debug)]
pub struct History<M> {
    /// `after[n]` is the model after the first `n` operations.
    after: Vec<M>,
}

impl<M: Clone + Debug + Default + PartialEq> History<M> {
    /// The models after each prefix of `ops` (there are `ops.len() + 1`).
    pub fn of<O: ModelOp<Model = M>>(ops: &[O]) -> History<M> {
        let mut after = Vec::with_capacity(ops.len() + 1);
        let mut model = M::default();
        after.push(model.clone());
        for (index, op) in ops.iter().enumerate() {
            op.apply(index, &mut model);
            after.push(model.clone());
        }
        History { after }
    }

    /// The model after the first `n` operations.
    pub fn after(&self, n: usize) -> &M {
        &self.after[n]
    }

    /// The model after the whole sequence.
    pub fn last(&self) -> &M {
        self.after
            .last()
            .expect("a history holds at least the empty model")
    }

    /// Whether `now` is a durably linearizable recovery after `done` operations returned: the
    /// model after them, or (the interrupted operation all or nothing) after one more.
    pub fn admits(&self, now: &M, done: usize) -> bool {
        self.after.get(done) == Some(now) || self.after.get(done + 1) == Some(now)
    }
}

/// An operation on a structure's reserved key (CCEH's 0, FAST&FAIR's `u64::MAX`): it must be
/// refused with the structure's `ReservedKey` error and change nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, arbitrary::Arbitrary)]
pub enum ReservedKeyOp {
    Insert,
    Upsert,
    Get,
    Remove,
}

impl ReservedKeyOp {
    /// Every reserved-key operation.
    pub const ALL: [ReservedKeyOp; 4] = [
        ReservedKeyOp::Insert,
        ReservedKeyOp::Upsert,
        ReservedKeyOp::Get,
        ReservedKeyOp::Remove,
    ];

    /// Its method's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            ReservedKeyOp::Insert => "insert",
            ReservedKeyOp::Upsert => "upsert",
            ReservedKeyOp::Get => "get",
            ReservedKeyOp::Remove => "remove",
        }
    }

    /// Any of them.
    #[cfg(feature = "proptest")]
    pub fn strategy() -> impl proptest::strategy::Strategy<Value = ReservedKeyOp> {
        proptest::sample::select(ReservedKeyOp::ALL.to_vec())
    }
}

/// The message of an operation that failed where it should have worked.
pub(crate) fn failed(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what} failed: {e}")
}

/// `Ok` if the structure gave what the model gives, else a message naming both.
pub(crate) fn agree<T: Debug + PartialEq>(what: String, got: T, model: T) -> Result<(), String> {
    if got == model {
        Ok(())
    } else {
        Err(format!("{what} gave {got:?}, the model {model:?}"))
    }
}

/// Runs `ops` in order with `run` (which checks each against the model and applies it), telling
/// `pool` after each that an operation returned; the first disagreement names its operation.
pub(crate) fn run_each<B: pmem_ordering::Backend, O: Debug, M>(
    pool: &pmem_ordering::Pool<B>,
    ops: &[O],
    model: &mut M,
    mut run: impl FnMut(usize, &O, &mut M) -> Result<(), String>,
) -> Result<(), String> {
    for (index, op) in ops.iter().enumerate() {
        run(index, op, model).map_err(|e| format!("operation {index} {op:?}: {e}"))?;
        pool.operation_completed();
    }
    Ok(())
}
