//! The byte-key maps (`hash_map::<Vec<u8>, Vec<u8>>` and `btree_map::<Vec<u8>, Vec<u8>>`,
//! kept in out-of-line records): [`RecordOp`], run on both maps of one store at once against
//! one `BTreeMap<Vec<u8>, Vec<u8>>` model by the [`driver`], and under simulated crashes by
//! [`crash::crash_record_ops`].
//!
//! Keys and values are described, not spelled out ([`RecordKey`], [`RecordValue`]), so an
//! operation on a 64 KiB key prints in a line. Keys come in shapes that reach the ordered
//! map's layers (each layer is keyed by 7 key bytes): a short tail alone (the empty key among
//! them), or after a prefix of 7, 14 or 21 bytes shared with other keys, after a 221-byte
//! shared prefix (31 layers), padded to exactly [`MAX_KEY_BYTES`], or one byte past it (which
//! writes must refuse with `KeyTooLarge`). Tails draw from a four-byte alphabet holding 0x00
//! and 0xff, so keys collide, order at the edges, and prefix one another. Values run from
//! empty to 48 KiB (several heap chunks).

pub mod crash;
pub mod driver;

use arbitrary::{Arbitrary, Unstructured};
use pmem_structures::raw::records::MAX_KEY_BYTES;

pub use crash::{crash_record_ops, crash_record_ops_outcome, crash_small_ops};
pub use driver::{run_record_ops, RecordDriver, RecordSetup};

/// The map's model: every map of a run must hold exactly these pairs.
pub type RecordModel = std::collections::BTreeMap<Vec<u8>, Vec<u8>>;

/// The bytes a key tail is drawn from.
pub const TAIL_ALPHABET: [u8; 4] = [0x00, b'a', b'b', 0xff];
/// The longest key tail.
pub const MAX_TAIL: usize = 3;

/// A 7-byte prefix: one full layer of the ordered map.
const PREFIX_7: &[u8] = b"tenant1";
/// 14 bytes, extending [`PREFIX_7`]: two layers.
const PREFIX_14: &[u8] = b"tenant1:user:0";
/// 21 bytes, extending [`PREFIX_14`]: three layers.
const PREFIX_21: &[u8] = b"tenant1:user:00000042";
/// The shared run after [`PREFIX_21`] in a long key.
const LONG_RUN: usize = 200;
/// The byte padding long and maximal keys.
const PAD: u8 = b'x';

/// Where a key's tail goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyShape {
    /// The tail alone (the empty key when the tail is empty).
    Bare,
    /// After a 7-byte prefix every such key shares.
    Shares7,
    /// After a 14-byte prefix (extending the 7-byte one).
    Shares14,
    /// After a 21-byte prefix (extending the 14-byte one).
    Shares21,
    /// After the 21-byte prefix and 200 more shared bytes.
    Long,
    /// The tail padded to exactly [`MAX_KEY_BYTES`].
    Max,
    /// The tail padded to one byte past [`MAX_KEY_BYTES`]: writes are refused.
    TooLong,
}

impl KeyShape {
    /// Every shape, with the first of its draws in `0..=SHAPE_DRAWS`: short shapes the most,
    /// each of the 64 KiB ones one time in sixteen.
    pub const DRAWS: [(KeyShape, u64); 7] = [
        (KeyShape::Bare, 0),
        (KeyShape::Shares7, 4),
        (KeyShape::Shares14, 7),
        (KeyShape::Shares21, 10),
        (KeyShape::Long, 13),
        (KeyShape::Max, 14),
        (KeyShape::TooLong, 15),
    ];

    /// The shape a draw in `0..=SHAPE_DRAWS` stands for.
    fn from_draw(draw: u64) -> KeyShape {
        KeyShape::DRAWS
            .iter()
            .rev()
            .find(|&&(_, first)| first <= draw)
            .map_or(KeyShape::Bare, |&(shape, _)| shape)
    }

    /// The first draw giving this shape.
    pub fn draw(self) -> u64 {
        KeyShape::DRAWS
            .iter()
            .find(|&&(shape, _)| shape == self)
            .map_or(0, |&(_, first)| first)
    }
}

/// The largest shape draw.
pub const SHAPE_DRAWS: u64 = 15;

/// A key: its shape and its tail (at most [`MAX_TAIL`] bytes of [`TAIL_ALPHABET`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordKey {
    /// Where the tail goes.
    pub shape: KeyShape,
    /// The key's own bytes.
    pub tail: Vec<u8>,
}

impl RecordKey {
    /// A key of `shape` with `tail`. Panics on a tail the fuzz encoding cannot hold (a test's
    /// own mistake).
    pub fn new(shape: KeyShape, tail: &[u8]) -> RecordKey {
        assert!(
            tail.len() <= MAX_TAIL && tail.iter().all(|b| TAIL_ALPHABET.contains(b)),
            "tail {tail:?} is not {MAX_TAIL} bytes of {TAIL_ALPHABET:?}"
        );
        RecordKey {
            shape,
            tail: tail.to_vec(),
        }
    }

    /// The key's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let padded = |len: usize| {
            let mut key = self.tail.clone();
            key.resize(len, PAD);
            key
        };
        match self.shape {
            KeyShape::Bare => self.tail.clone(),
            KeyShape::Shares7 => [PREFIX_7, &self.tail].concat(),
            KeyShape::Shares14 => [PREFIX_14, &self.tail].concat(),
            KeyShape::Shares21 => [PREFIX_21, &self.tail].concat(),
            KeyShape::Long => [PREFIX_21, &[PAD; LONG_RUN], &self.tail].concat(),
            KeyShape::Max => padded(MAX_KEY_BYTES),
            KeyShape::TooLong => padded(MAX_KEY_BYTES + 1),
        }
    }

    /// Whether the maps take it (writes of a longer key are refused).
    pub fn fits(&self) -> bool {
        self.shape != KeyShape::TooLong
    }
}

impl<'a> Arbitrary<'a> for RecordKey {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<RecordKey> {
        let shape = KeyShape::from_draw(u.int_in_range(0..=SHAPE_DRAWS)?);
        let len = u.int_in_range(0..=MAX_TAIL)?;
        let mut tail = Vec::with_capacity(len);
        for _ in 0..len {
            tail.push(*u.choose(&TAIL_ALPHABET)?);
        }
        Ok(RecordKey { shape, tail })
    }
}

/// A value: its length and the byte its contents derive from ([`RecordValue::bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordValue {
    /// Its length in bytes.
    pub len: u32,
    /// The seed of its contents (0 for the empty value).
    pub fill: u8,
}

/// The value lengths by class: the class's first draw in `0..=VALUE_DRAWS` and its lengths.
/// Empty one time in eight, up to 64 bytes one in two, up to 4 KiB one in four, and 8..48 KiB
/// (records of several 16 KiB chunks) one in eight.
pub const VALUE_CLASSES: [(u64, u32, u32); 4] =
    [(0, 0, 0), (1, 1, 64), (5, 65, 4096), (7, 8 << 10, 48 << 10)];
/// The largest value class draw.
pub const VALUE_DRAWS: u64 = 7;

impl RecordValue {
    /// A value of `len` bytes (of a [`VALUE_CLASSES`] range) derived from `fill`. Panics on a
    /// length outside them (a test's own mistake).
    pub fn new(len: u32, fill: u8) -> RecordValue {
        assert!(
            VALUE_CLASSES
                .iter()
                .any(|&(_, lo, hi)| (lo..=hi).contains(&len)),
            "a value of {len} bytes has no fuzz encoding"
        );
        RecordValue {
            len,
            fill: if len == 0 { 0 } else { fill },
        }
    }

    /// The class holding its length: its first draw and its lengths.
    pub fn class(self) -> (u64, u32, u32) {
        *VALUE_CLASSES
            .iter()
            .find(|&&(_, lo, hi)| (lo..=hi).contains(&self.len))
            .expect("a value's length is in a class")
    }

    /// Its bytes: distinct fills give distinct values, and no two neighbouring 256-byte runs
    /// of one value are equal.
    pub fn bytes(self) -> Vec<u8> {
        (0..self.len as usize)
            .map(|i| {
                self.fill
                    .wrapping_add((i as u8).wrapping_mul(31) ^ (i >> 8) as u8)
            })
            .collect()
    }
}

impl<'a> Arbitrary<'a> for RecordValue {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<RecordValue> {
        let draw = u.int_in_range(0..=VALUE_DRAWS)?;
        let &(_, lo, hi) = VALUE_CLASSES
            .iter()
            .rev()
            .find(|&&(first, ..)| first <= draw)
            .expect("draw 0 starts the first class");
        if hi == 0 {
            return Ok(RecordValue { len: 0, fill: 0 });
        }
        let len = u.int_in_range(lo..=hi)?;
        Ok(RecordValue {
            len,
            fill: u8::arbitrary(u)?,
        })
    }
}

/// How a range bound includes its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub enum BoundKind {
    /// `Bound::Included(key)`.
    Included,
    /// `Bound::Excluded(key)`.
    Excluded,
    /// `Bound::Unbounded` (the key is ignored).
    Unbounded,
}

impl BoundKind {
    /// Every kind, in the fuzz encoding's order.
    pub const ALL: [BoundKind; 3] = [
        BoundKind::Included,
        BoundKind::Excluded,
        BoundKind::Unbounded,
    ];

    /// The bound on `key`.
    pub fn on(self, key: &[u8]) -> std::ops::Bound<&[u8]> {
        match self {
            BoundKind::Included => std::ops::Bound::Included(key),
            BoundKind::Excluded => std::ops::Bound::Excluded(key),
            BoundKind::Unbounded => std::ops::Bound::Unbounded,
        }
    }
}

/// One operation, run on both maps of a store (a scan on the ordered one only).
#[derive(Clone, Debug, PartialEq, Eq, Arbitrary)]
pub enum RecordOp {
    /// `insert(key, value)`: `true` if the key was absent; `KeyTooLarge` for a key too long.
    Insert(RecordKey, RecordValue),
    /// `upsert(key, value)`: the old value; `KeyTooLarge` for a key too long.
    Upsert(RecordKey, RecordValue),
    /// `remove(key)`: the old value (none for a key too long).
    Remove(RecordKey),
    /// `get(key)` and `contains_key(key)`.
    Get(RecordKey),
    /// The ordered map's `range` between two bounds, in key order (empty when they cross).
    Range {
        /// The start key.
        start: RecordKey,
        /// How the start bound holds it.
        start_bound: BoundKind,
        /// The end key.
        end: RecordKey,
        /// How the end bound holds it.
        end_bound: BoundKind,
    },
    /// Drop both maps and the store, then `Heap::open` and `Store::load` on the same pool.
    Reopen,
    /// Both maps' `check()`, `len()` and full walks against the model, and
    /// `store.check_blocks()`.
    Check,
}

/// The number of [`RecordOp`] variants (for the fuzz encoder).
pub const RECORD_OP_VARIANTS: u64 = 7;

#[cfg(feature = "proptest")]
impl RecordKey {
    /// Any key, shapes weighted as the fuzz decoding weighs them.
    pub fn strategy() -> impl proptest::strategy::Strategy<Value = RecordKey> {
        use proptest::prelude::*;
        (
            0..=SHAPE_DRAWS,
            proptest::collection::vec(
                proptest::sample::select(TAIL_ALPHABET.to_vec()),
                0..=MAX_TAIL,
            ),
        )
            .prop_map(|(draw, tail)| RecordKey::new(KeyShape::from_draw(draw), &tail))
    }
}

#[cfg(feature = "proptest")]
impl RecordValue {
    /// Any value, length classes weighted as the fuzz decoding weighs them.
    pub fn strategy() -> impl proptest::strategy::Strategy<Value = RecordValue> {
        use proptest::prelude::*;
        (0..=VALUE_DRAWS, any::<u32>(), any::<u8>()).prop_map(|(draw, at, fill)| {
            let &(_, lo, hi) = VALUE_CLASSES
                .iter()
                .rev()
                .find(|&&(first, ..)| first <= draw)
                .expect("draw 0 starts the first class");
            RecordValue::new(lo + at % (hi - lo + 1), fill)
        })
    }
}

#[cfg(feature = "proptest")]
impl RecordOp {
    /// Any operation: writes the most, a reopen and a check now and then.
    pub fn strategy() -> impl proptest::strategy::Strategy<Value = RecordOp> {
        use proptest::prelude::*;
        let key = RecordKey::strategy;
        let value = RecordValue::strategy;
        let bound = || proptest::sample::select(BoundKind::ALL.to_vec());
        prop_oneof![
            5 => (key(), value()).prop_map(|(k, v)| RecordOp::Insert(k, v)),
            4 => (key(), value()).prop_map(|(k, v)| RecordOp::Upsert(k, v)),
            3 => key().prop_map(RecordOp::Remove),
            2 => key().prop_map(RecordOp::Get),
            2 => (key(), bound(), key(), bound()).prop_map(|(start, start_bound, end, end_bound)| {
                RecordOp::Range {
                    start,
                    start_bound,
                    end,
                    end_bound,
                }
            }),
            1 => Just(RecordOp::Reopen),
            1 => Just(RecordOp::Check),
        ]
    }
}

impl RecordOp {
    /// Whether it writes at most a few KiB: no 64 KiB key (a key one byte longer is refused
    /// before anything is written) and no value past 4 KiB. The crash-injecting runs take
    /// these, on small simulated pools.
    pub fn is_small(&self) -> bool {
        let small_key = |k: &RecordKey| k.shape != KeyShape::Max;
        match self {
            RecordOp::Insert(k, v) | RecordOp::Upsert(k, v) => small_key(k) && v.len <= 4096,
            RecordOp::Remove(k) | RecordOp::Get(k) => small_key(k),
            RecordOp::Range { start, end, .. } => small_key(start) && small_key(end),
            RecordOp::Reopen | RecordOp::Check => true,
        }
    }
}

impl crate::ModelOp for RecordOp {
    type Model = RecordModel;

    fn apply(&self, _index: usize, model: &mut RecordModel) {
        match self {
            RecordOp::Insert(k, v) if k.fits() => {
                model.entry(k.bytes()).or_insert_with(|| v.bytes());
            }
            RecordOp::Upsert(k, v) if k.fits() => {
                model.insert(k.bytes(), v.bytes());
            }
            RecordOp::Remove(k) => {
                model.remove(&k.bytes());
            }
            _ => {}
        }
    }
}

/// The model's pairs between two bounds, in key order: none when the bounds cross (where
/// `BTreeMap::range` would panic).
pub fn model_range(
    model: &RecordModel,
    start: std::ops::Bound<&[u8]>,
    end: std::ops::Bound<&[u8]>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    use std::ops::{Bound, RangeBounds};
    let bounds: (Bound<&[u8]>, Bound<&[u8]>) = (start, end);
    model
        .iter()
        .filter(|(k, _)| bounds.contains(k.as_slice()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
