//! What CCEH and FAST&FAIR share: point operations on u64 keys and values, checked against a
//! map model the same way for both.

use std::fmt::{Debug, Display};

use crate::model::{agree, failed};
use crate::ReservedKeyOp;

/// A persistent index of u64 keys and values with one reserved key.
pub(crate) trait KeyValueIndex {
    type Error: Debug + Display;

    /// The key the index refuses.
    const RESERVED_KEY: u64;

    fn insert(&self, key: u64, value: u64) -> Result<bool, Self::Error>;
    fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, Self::Error>;
    fn remove(&self, key: u64) -> Result<Option<u64>, Self::Error>;
    fn get(&self, key: u64) -> Result<Option<u64>, Self::Error>;

    /// Whether `error` is the index's refusal of the reserved key.
    fn is_reserved_key_error(error: &Self::Error) -> bool;
}

/// A point operation on an index.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PointOp {
    Insert(u64, u64),
    Upsert(u64, u64),
    Remove(u64),
    Get(u64),
    Reserved(ReservedKeyOp),
}

/// Runs `op` on `index` and checks its result against the model, which `model` looks keys up
/// in (before the operation).
pub(crate) fn check_point<I: KeyValueIndex>(
    index: &I,
    op: PointOp,
    model: impl Fn(u64) -> Option<u64>,
) -> Result<(), String> {
    match op {
        PointOp::Insert(k, v) => {
            let inserted = index.insert(k, v).map_err(|e| failed("insert", e))?;
            agree(format!("insert({k})"), inserted, model(k).is_none())
        }
        PointOp::Upsert(k, v) => {
            let old = index.upsert(k, v).map_err(|e| failed("upsert", e))?;
            agree(format!("upsert({k})"), old, model(k))
        }
        PointOp::Remove(k) => {
            let old = index.remove(k).map_err(|e| failed("remove", e))?;
            agree(format!("remove({k})"), old, model(k))
        }
        PointOp::Get(k) => {
            let got = index.get(k).map_err(|e| failed("get", e))?;
            agree(format!("get({k})"), got, model(k))
        }
        PointOp::Reserved(op) => {
            let key = I::RESERVED_KEY;
            let outcome = match op {
                ReservedKeyOp::Insert => index.insert(key, 1).map(|r| format!("{r:?}")),
                ReservedKeyOp::Upsert => index.upsert(key, 1).map(|r| format!("{r:?}")),
                ReservedKeyOp::Get => index.get(key).map(|r| format!("{r:?}")),
                ReservedKeyOp::Remove => index.remove(key).map(|r| format!("{r:?}")),
            };
            refused(
                &format!("{} of the reserved key {key}", op.name()),
                outcome,
                I::is_reserved_key_error,
            )
        }
    }
}

/// `Ok` if `outcome` is the refusal of the reserved key.
pub(crate) fn refused<T: Debug, E: Debug>(
    what: &str,
    outcome: Result<T, E>,
    is_reserved_key_error: impl Fn(&E) -> bool,
) -> Result<(), String> {
    match outcome {
        Err(e) if is_reserved_key_error(&e) => Ok(()),
        other => Err(format!("{what} gave {other:?}, not ReservedKey")),
    }
}
