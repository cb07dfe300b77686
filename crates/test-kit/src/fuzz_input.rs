//! The fuzz targets' inputs, decoded by `arbitrary` from libFuzzer's bytes, and their encoding
//! back into bytes, which writes the committed seeds ([`crate::fuzz_seeds`]).
//!
//! An input is a set-up followed by operations; `Vec::arbitrary_take_rest` reads each
//! operation after a byte whose low bit says another follows. The encoder mirrors the byte
//! layout of arbitrary 1.x (`derive(Arbitrary)` enum tags, `int_in_range`, `choose`, `ratio`,
//! little-endian integers, low-bit booleans); the kit's tests decode every encoded value back,
//! so a change of that layout fails them rather than silently weakening the seeds.

use arbitrary::{Arbitrary, Unstructured};
use pmem_ordering::sim::SimConfig;
use pmem_structures::raw::datalog::{Policy, WriteMode};
use pmem_structures::raw::fastfair::ShiftPolicy;
use pmem_undo_log::FencePolicy;

use crate::cceh::{Batch, CcehOp, FUZZ_KEYS as CCEH_KEYS};
use crate::datalog::{length_of, DatalogOp, FUZZ_FILES, FUZZ_SPAN, LEN_CLASSES, MODES};
use crate::fastfair::{FastFairOp, FUZZ_KEYS as FASTFAIR_KEYS};
use crate::records::{
    BoundKind, RecordKey, RecordOp, RecordSetup, RecordValue, MAX_TAIL, RECORD_OP_VARIANTS,
    SHAPE_DRAWS, TAIL_ALPHABET, VALUE_DRAWS,
};
use crate::store::{
    key_draw, NameId, StoreOp, StoreSetup, BATCH_CHANGES, KEY_DRAWS, KINDS, NAME_DRAWS,
    STORE_OP_VARIANTS,
};
use crate::ReservedKeyOp;

/// The fence policies the CCEH target runs under (Themis on a simulated Themis pool).
pub const CCEH_FENCE_POLICIES: [FencePolicy; 3] = [
    FencePolicy::Batched,
    FencePolicy::Strict,
    FencePolicy::Themis,
];

/// The write modes a datalog store is given.
pub const STORE_MODES: [WriteMode; 3] =
    [WriteMode::CopyOnWrite, WriteMode::Embedded, WriteMode::Auto];

fn choose_policy(u: &mut Unstructured) -> arbitrary::Result<FencePolicy> {
    Ok(*u.choose(&CCEH_FENCE_POLICIES)?)
}

fn choose_shift(u: &mut Unstructured) -> arbitrary::Result<ShiftPolicy> {
    Ok(*u.choose(&ShiftPolicy::ALL)?)
}

fn choose_mode(u: &mut Unstructured) -> arbitrary::Result<WriteMode> {
    Ok(*u.choose(&STORE_MODES)?)
}

/// The CCEH target's set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub struct CcehSetup {
    #[arbitrary(with = choose_policy)]
    pub policy: FencePolicy,
    /// Segments of 8 buckets rather than 4: a probing window then covers half a segment, so
    /// full windows displace keys before they split.
    pub wide_segments: bool,
    /// Also reopen the current image (everything persisted), besides the persisted one.
    pub check_current_image: bool,
}

impl CcehSetup {
    /// The simulator model the policy is correct under.
    pub fn sim(&self) -> SimConfig {
        match self.policy {
            FencePolicy::Themis => SimConfig::themis(),
            _ => SimConfig::x86(),
        }
    }
}

/// The FAST&FAIR target's set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub struct FastFairSetup {
    #[arbitrary(with = choose_shift)]
    pub policy: ShiftPolicy,
    /// Nodes of 256 bytes (three entry lines) rather than 128 (one).
    pub large_nodes: bool,
    /// The seed of the sampled crash points and images.
    pub crash_seed: u8,
}

impl FastFairSetup {
    /// The node size in bytes.
    pub fn node_size(&self) -> u64 {
        if self.large_nodes {
            256
        } else {
            128
        }
    }
}

/// The datalog target's set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub struct DatalogSetup {
    #[arbitrary(with = choose_mode)]
    pub mode: WriteMode,
    /// Clean logs eagerly (fold after 4 embeds, compact below 60% live from 2 pages), so short
    /// inputs reach log cleaning.
    pub eager_cleaning: bool,
    /// The seed of the sampled crash points and images.
    pub crash_seed: u8,
}

impl DatalogSetup {
    /// The store's policy.
    pub fn policy(&self) -> Policy {
        if self.eager_cleaning {
            Policy {
                mode: self.mode,
                fold_after_entries: 4,
                compact_live_percent: 60,
                compact_min_pages: 2,
                ..Policy::default()
            }
        } else {
            Policy::with_mode(self.mode)
        }
    }
}

/// The store target's set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub struct StoreFuzzSetup {
    /// The heap's fence policy (Themis on a simulated Themis pool).
    #[arbitrary(with = choose_policy)]
    pub policy: FencePolicy,
    /// The B+-trees' shift policy.
    #[arbitrary(with = choose_shift)]
    pub shift: ShiftPolicy,
    /// Hash map segments of 8 buckets rather than 4.
    pub wide_segments: bool,
    /// The seed of the sampled crash points and images.
    pub crash_seed: u8,
}

impl StoreFuzzSetup {
    /// The kit's store set-up it stands for.
    pub fn store(&self) -> StoreSetup {
        StoreSetup {
            policy: self.policy,
            shift: self.shift,
            wide_segments: self.wide_segments,
        }
    }
}

/// The byte-key maps target's set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub struct RecordFuzzSetup {
    /// The ordered map's shift policy.
    #[arbitrary(with = choose_shift)]
    pub shift: ShiftPolicy,
    /// Hash segments of 8 buckets rather than 4.
    pub wide_segments: bool,
    /// Tree nodes of 256 bytes rather than 128.
    pub large_nodes: bool,
    /// The seed of the sampled crash points and images.
    pub crash_seed: u8,
}

impl RecordFuzzSetup {
    /// The kit's set-up it stands for.
    pub fn records(&self) -> RecordSetup {
        RecordSetup {
            shift: self.shift,
            wide_segments: self.wide_segments,
            large_nodes: self.large_nodes,
        }
    }
}

/// A fuzz input: a set-up, then the operations.
#[derive(Clone, Debug, PartialEq, Eq, Arbitrary)]
pub struct FuzzInput<S, O> {
    pub setup: S,
    pub ops: Vec<O>,
}

/// The CCEH target's input.
pub type CcehInput = FuzzInput<CcehSetup, CcehOp>;
/// The FAST&FAIR target's input.
pub type FastFairInput = FuzzInput<FastFairSetup, FastFairOp>;
/// The datalog target's input.
pub type DatalogInput = FuzzInput<DatalogSetup, DatalogOp>;
/// The store target's input.
pub type StoreInput = FuzzInput<StoreFuzzSetup, StoreOp>;
/// The byte-key maps target's input.
pub type RecordInput = FuzzInput<RecordFuzzSetup, RecordOp>;

/// Bytes that `arbitrary` decodes back into given values.
#[derive(Default)]
pub struct FuzzBytes {
    bytes: Vec<u8>,
}

impl FuzzBytes {
    /// The bytes written so far.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// The tag of variant `index` of an enum of `count` variants: the derive picks
    /// `(u32 * count) >> 32`, so the least `u32` reaching `index`.
    pub(crate) fn variant(&mut self, index: u64, count: u64) {
        let tag = (index << 32).div_ceil(count);
        self.bytes.extend_from_slice(&(tag as u32).to_le_bytes());
    }

    /// `value` as `int_in_range(start..=end)` reads it: the offset from `start`, most
    /// significant byte first, in as many bytes as the range's width needs.
    fn in_range(&mut self, value: u64, start: u64, end: u64) {
        assert!(
            (start..=end).contains(&value),
            "{value} outside {start}..={end}"
        );
        let delta = end - start;
        let offset = value - start;
        let width = (0..8).take_while(|&i| delta >> (8 * i) > 0).count();
        for i in (0..width).rev() {
            self.bytes.push((offset >> (8 * i)) as u8);
        }
    }

    fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub(crate) fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    fn bool(&mut self, value: bool) {
        self.bytes.push(u8::from(value));
    }

    fn choice<T: PartialEq + std::fmt::Debug>(&mut self, value: &T, choices: &[T]) {
        let index = choices
            .iter()
            .position(|c| c == value)
            .unwrap_or_else(|| panic!("{value:?} is not among {choices:?}"));
        self.in_range(index as u64, 0, choices.len() as u64 - 1);
    }
}

/// A value that can be written as the bytes `arbitrary` decodes it from.
pub trait FuzzEncode {
    /// Appends the value's bytes.
    fn encode(&self, out: &mut FuzzBytes);

    /// The value's bytes alone.
    fn to_fuzz_bytes(&self) -> Vec<u8> {
        let mut out = FuzzBytes::default();
        self.encode(&mut out);
        out.into_bytes()
    }
}

impl<S: FuzzEncode, O: FuzzEncode> FuzzEncode for FuzzInput<S, O> {
    fn encode(&self, out: &mut FuzzBytes) {
        self.setup.encode(out);
        for op in &self.ops {
            out.bool(true);
            op.encode(out);
        }
    }
}

impl FuzzEncode for ReservedKeyOp {
    fn encode(&self, out: &mut FuzzBytes) {
        let index = ReservedKeyOp::ALL
            .iter()
            .position(|op| op == self)
            .expect("listed");
        out.variant(index as u64, ReservedKeyOp::ALL.len() as u64);
    }
}

impl FuzzEncode for Batch {
    fn encode(&self, out: &mut FuzzBytes) {
        out.in_range(self.first, 1, CCEH_KEYS);
        out.in_range(self.len, 1, 8);
        out.in_range(self.stride, 0, 3);
        out.u64(self.value);
        out.bool(self.helper);
        out.bool(self.inline_prefetch);
        out.bool(self.deep);
        // `ratio(1, 8)`: true when the draw in 1..=8 is 1.
        out.in_range(if self.with_reserved_key { 1 } else { 2 }, 1, 8);
    }
}

/// Both map operation enums have six variants.
const MAP_OP_VARIANTS: u64 = 6;

impl FuzzBytes {
    /// Variant `index` of a map operation enum, its keys (each in `keys`), then its value.
    fn map_op(&mut self, index: u64, keys: (u64, u64), key_fields: &[u64], value: Option<u64>) {
        self.variant(index, MAP_OP_VARIANTS);
        for &k in key_fields {
            self.in_range(k, keys.0, keys.1);
        }
        if let Some(v) = value {
            self.u64(v);
        }
    }
}

impl FuzzEncode for CcehOp {
    fn encode(&self, out: &mut FuzzBytes) {
        let keys = (1, CCEH_KEYS);
        match *self {
            CcehOp::Insert(k, v) => out.map_op(0, keys, &[k], Some(v)),
            CcehOp::Upsert(k, v) => out.map_op(1, keys, &[k], Some(v)),
            CcehOp::Remove(k) => out.map_op(2, keys, &[k], None),
            CcehOp::Get(k) => out.map_op(3, keys, &[k], None),
            CcehOp::InsertBatch(batch) => {
                out.map_op(4, keys, &[], None);
                batch.encode(out);
            }
            CcehOp::Reserved(op) => {
                out.map_op(5, keys, &[], None);
                op.encode(out);
            }
        }
    }
}

impl FuzzEncode for FastFairOp {
    fn encode(&self, out: &mut FuzzBytes) {
        let keys = (0, FASTFAIR_KEYS - 1);
        match *self {
            FastFairOp::Insert(k, v) => out.map_op(0, keys, &[k], Some(v)),
            FastFairOp::Upsert(k, v) => out.map_op(1, keys, &[k], Some(v)),
            FastFairOp::Remove(k) => out.map_op(2, keys, &[k], None),
            FastFairOp::Get(k) => out.map_op(3, keys, &[k], None),
            FastFairOp::Range(a, b) => out.map_op(4, keys, &[a, b], None),
            FastFairOp::Reserved(op) => {
                out.map_op(5, keys, &[], None);
                op.encode(out);
            }
        }
    }
}

impl FuzzEncode for DatalogOp {
    fn encode(&self, out: &mut FuzzBytes) {
        let file =
            |out: &mut FuzzBytes, f: u8| out.in_range(u64::from(f), 0, u64::from(FUZZ_FILES) - 1);
        let offset = |out: &mut FuzzBytes, o: u64| out.in_range(o, 0, FUZZ_SPAN - 1);
        match *self {
            DatalogOp::Create(f) => {
                out.variant(0, 5);
                file(out, f);
            }
            DatalogOp::Write {
                file: f,
                offset: o,
                len,
                mode,
            } => {
                out.variant(1, 5);
                file(out, f);
                offset(out, o);
                let (class, step) = (0..LEN_CLASSES)
                    .flat_map(|c| (0..16u8).map(move |s| (c, s)))
                    .find(|&(c, s)| length_of(c, s) == len)
                    .unwrap_or_else(|| panic!("a length of {len} bytes has no fuzz encoding"));
                out.u8(class);
                out.u8(step);
                out.choice(&mode, &MODES);
            }
            DatalogOp::Truncate(f, size) => {
                out.variant(2, 5);
                file(out, f);
                offset(out, size);
            }
            DatalogOp::Rename(from, to) => {
                out.variant(3, 5);
                file(out, from);
                file(out, to);
            }
            DatalogOp::Remove(f) => {
                out.variant(4, 5);
                file(out, f);
            }
        }
    }
}

impl FuzzEncode for CcehSetup {
    fn encode(&self, out: &mut FuzzBytes) {
        out.choice(&self.policy, &CCEH_FENCE_POLICIES);
        out.bool(self.wide_segments);
        out.bool(self.check_current_image);
    }
}

impl FuzzEncode for FastFairSetup {
    fn encode(&self, out: &mut FuzzBytes) {
        out.choice(&self.policy, &ShiftPolicy::ALL);
        out.bool(self.large_nodes);
        out.u8(self.crash_seed);
    }
}

impl FuzzEncode for DatalogSetup {
    fn encode(&self, out: &mut FuzzBytes) {
        out.choice(&self.mode, &STORE_MODES);
        out.bool(self.eager_cleaning);
        out.u8(self.crash_seed);
    }
}

impl FuzzEncode for StoreFuzzSetup {
    fn encode(&self, out: &mut FuzzBytes) {
        out.choice(&self.policy, &CCEH_FENCE_POLICIES);
        out.choice(&self.shift, &ShiftPolicy::ALL);
        out.bool(self.wide_segments);
        out.u8(self.crash_seed);
    }
}

impl FuzzEncode for NameId {
    fn encode(&self, out: &mut FuzzBytes) {
        out.in_range(self.draw(), 0, NAME_DRAWS);
    }
}

impl FuzzBytes {
    /// A store operation's key.
    fn store_key(&mut self, key: u64) {
        self.in_range(key_draw(key), 0, KEY_DRAWS);
    }
}

impl FuzzEncode for StoreOp {
    fn encode(&self, out: &mut FuzzBytes) {
        let variant = |out: &mut FuzzBytes, index: u64, name: Option<NameId>| {
            out.variant(index, STORE_OP_VARIANTS);
            if let Some(name) = name {
                name.encode(out);
            }
        };
        match *self {
            StoreOp::Open(name, kind) => {
                variant(out, 0, Some(name));
                out.choice(&kind, &KINDS);
            }
            StoreOp::Get(name, k) => {
                variant(out, 1, Some(name));
                out.store_key(k);
            }
            StoreOp::Insert(name, k, v) => {
                variant(out, 2, Some(name));
                out.store_key(k);
                out.u64(v);
            }
            StoreOp::Upsert(name, k, v) => {
                variant(out, 3, Some(name));
                out.store_key(k);
                out.u64(v);
            }
            StoreOp::Remove(name, k) => {
                variant(out, 4, Some(name));
                out.store_key(k);
            }
            StoreOp::Range(name, a, b) => {
                variant(out, 5, Some(name));
                out.store_key(a);
                out.store_key(b);
            }
            StoreOp::DropHandles(name) => variant(out, 6, Some(name)),
            StoreOp::RemoveStructure(name) => variant(out, 7, Some(name)),
            StoreOp::Reopen => variant(out, 8, None),
            StoreOp::Check => variant(out, 9, None),
            StoreOp::Batch(changes, len, commit) => {
                variant(out, 10, None);
                for change in changes {
                    change.name.encode(out);
                    out.store_key(change.key);
                    out.bool(change.value.is_some());
                    if let Some(v) = change.value {
                        out.u64(v);
                    }
                }
                out.in_range(u64::from(len), 0, BATCH_CHANGES as u64);
                out.bool(commit);
            }
        }
    }
}

impl FuzzEncode for RecordFuzzSetup {
    fn encode(&self, out: &mut FuzzBytes) {
        out.choice(&self.shift, &ShiftPolicy::ALL);
        out.bool(self.wide_segments);
        out.bool(self.large_nodes);
        out.u8(self.crash_seed);
    }
}

impl FuzzEncode for RecordKey {
    fn encode(&self, out: &mut FuzzBytes) {
        out.in_range(self.shape.draw(), 0, SHAPE_DRAWS);
        out.in_range(self.tail.len() as u64, 0, MAX_TAIL as u64);
        for byte in &self.tail {
            out.choice(byte, &TAIL_ALPHABET);
        }
    }
}

impl FuzzEncode for RecordValue {
    fn encode(&self, out: &mut FuzzBytes) {
        let (first, lo, hi) = self.class();
        out.in_range(first, 0, VALUE_DRAWS);
        if hi > 0 {
            out.in_range(u64::from(self.len), u64::from(lo), u64::from(hi));
            out.u8(self.fill);
        }
    }
}

impl FuzzEncode for BoundKind {
    fn encode(&self, out: &mut FuzzBytes) {
        let index = BoundKind::ALL
            .iter()
            .position(|b| b == self)
            .expect("listed");
        out.variant(index as u64, BoundKind::ALL.len() as u64);
    }
}

impl FuzzEncode for RecordOp {
    fn encode(&self, out: &mut FuzzBytes) {
        let variant = |out: &mut FuzzBytes, index: u64| out.variant(index, RECORD_OP_VARIANTS);
        match self {
            RecordOp::Insert(k, v) => {
                variant(out, 0);
                k.encode(out);
                v.encode(out);
            }
            RecordOp::Upsert(k, v) => {
                variant(out, 1);
                k.encode(out);
                v.encode(out);
            }
            RecordOp::Remove(k) => {
                variant(out, 2);
                k.encode(out);
            }
            RecordOp::Get(k) => {
                variant(out, 3);
                k.encode(out);
            }
            RecordOp::Range {
                start,
                start_bound,
                end,
                end_bound,
            } => {
                variant(out, 4);
                start.encode(out);
                start_bound.encode(out);
                end.encode(out);
                end_bound.encode(out);
            }
            RecordOp::Reopen => variant(out, 5),
            RecordOp::Check => variant(out, 6),
        }
    }
}

/// Decodes `bytes` the way a fuzz target receives them (`arbitrary_take_rest`).
pub fn decode<'a, T: Arbitrary<'a>>(bytes: &'a [u8]) -> arbitrary::Result<T> {
    T::arbitrary_take_rest(Unstructured::new(bytes))
}
