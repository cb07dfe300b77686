//! The committed seeds of the fuzz targets (`fuzz/seeds/<target>/<name>`): long operation
//! sequences that fill, split and empty the structures, which libFuzzer alone, growing inputs
//! a few bytes at a time, would take the whole smoke run to reach.
//!
//! One file past 600 lines: one maker per target, each a few short sequences, all gathered by
//! [`seeds`] for the example that writes them and the test that compares them; split, they
//! would be many files of a few dozen lines.
//!
//! Regenerate them after changing an input's layout with
//! `cargo run -p pmem-test-kit --example fuzz_seeds` (from the workspace root); the kit's test
//! `fuzz_seeds` fails while the committed files differ from what this module makes.

use pmem_structures::raw::datalog::{WriteMode, PAGE};
use pmem_structures::raw::fastfair::ShiftPolicy;
use pmem_undo_log::FencePolicy;

use crate::cceh::{Batch, CcehOp, FUZZ_KEYS as CCEH_KEYS};
use crate::datalog::{length_of, DatalogOp, FUZZ_SPAN, LEN_CLASSES, MODES};
use crate::fastfair::{FastFairOp, FUZZ_KEYS as FASTFAIR_KEYS};
use crate::fuzz_input::{
    CcehSetup, DatalogSetup, FastFairSetup, FuzzEncode, FuzzInput, RecordFuzzSetup, StoreFuzzSetup,
};
use crate::leafmap::{LeafFuzzSetup, LeafOp};
use crate::records::{
    BoundKind, KeyShape, RecordKey, RecordOp, RecordValue, MAX_TAIL, TAIL_ALPHABET, VALUE_CLASSES,
};
use crate::store::{
    BatchChange, NameId, StoreOp, BATCH_CHANGES, FUZZ_KEYS as STORE_KEYS, KINDS, NAMES, VALID_NAMES,
};
use crate::{ReservedKeyOp, SplitMix64};
use pmem_structures::StructureKind;

/// One seed file.
pub struct Seed {
    /// The fuzz target, and the folder under fuzz/seeds.
    pub target: &'static str,
    /// The file name.
    pub name: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

fn seed<S: FuzzEncode, O: FuzzEncode>(
    target: &'static str,
    name: &str,
    setup: S,
    ops: Vec<O>,
) -> Seed {
    Seed {
        target,
        name: name.to_string(),
        bytes: FuzzInput { setup, ops }.to_fuzz_bytes(),
    }
}

/// `keys` in an order shuffled by `rng` (Fisher-Yates).
fn shuffled(keys: impl Iterator<Item = u64>, rng: &mut SplitMix64) -> Vec<u64> {
    let mut keys: Vec<u64> = keys.collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.below(i as u64 + 1) as usize);
    }
    keys
}

/// Every seed of every target.
pub fn seeds() -> Vec<Seed> {
    let mut out = cceh_seeds();
    out.extend(fastfair_seeds());
    out.extend(datalog_seeds());
    out.extend(store_seeds());
    out.extend(record_seeds());
    out.extend(leaf_map_seeds());
    out
}

fn leaf_map_seeds() -> Vec<Seed> {
    // Leaves split, pairs moved into records and back, leaves emptied and unlinked.
    let grow_shrink = LeafOp::grow_then_shrink(300, 24, 7);
    // The same with a reopen every 40 operations and a stopped scan every 10.
    let with_reopens: Vec<LeafOp> = LeafOp::grow_then_shrink(240, 40, 8)
        .into_iter()
        .enumerate()
        .flat_map(|(i, op)| {
            let extra = match i % 40 {
                39 => Some(LeafOp::Reopen),
                9 | 19 | 29 => Some(LeafOp::Scan(
                    crate::leafmap::leaf_key(1, 0),
                    crate::leafmap::leaf_key(2, 63),
                    (i % 7) as u8,
                )),
                _ => None,
            };
            std::iter::once(op).chain(extra)
        })
        .collect();
    vec![
        seed(
            "leaf_map",
            "grow-shrink",
            LeafFuzzSetup { crash_seed: 1 },
            grow_shrink,
        ),
        seed(
            "leaf_map",
            "reopens-scans",
            LeafFuzzSetup { crash_seed: 2 },
            with_reopens,
        ),
    ]
}

fn cceh_seeds() -> Vec<Seed> {
    let mut rng = SplitMix64::new(1);
    // Fill every key (splits and directory doublings), batches in every option, key 0 refused,
    // then empty the table and refill a quarter of it.
    let mut fill = Vec::new();
    for (i, k) in shuffled(1..=CCEH_KEYS, &mut rng).into_iter().enumerate() {
        fill.push(CcehOp::Insert(k, i as u64));
        if i % 8 == 0 {
            fill.push(CcehOp::Get(k));
            fill.push(CcehOp::Upsert(k, i as u64 + 1000));
        }
    }
    for (i, [helper, inline_prefetch, deep]) in [
        [false, false, false],
        [true, false, true],
        [true, true, true],
        [false, true, false],
    ]
    .into_iter()
    .enumerate()
    {
        fill.push(CcehOp::InsertBatch(Batch {
            first: 1 + 9 * i as u64,
            len: 8,
            stride: i as u64,
            value: 5000 + i as u64,
            helper,
            inline_prefetch,
            deep,
            with_reserved_key: i == 3,
        }));
    }
    fill.extend(ReservedKeyOp::ALL.map(CcehOp::Reserved));
    fill.extend(
        shuffled(1..=CCEH_KEYS, &mut rng)
            .into_iter()
            .map(CcehOp::Remove),
    );
    fill.extend((1..=CCEH_KEYS / 4).map(|k| CcehOp::Insert(k * 3 % CCEH_KEYS + 1, k)));
    let setup = |policy, wide_segments, check_current_image| CcehSetup {
        policy,
        wide_segments,
        check_current_image,
    };
    // Random mixes with a lookup every few operations.
    let mixed = |seed| -> Vec<CcehOp> {
        CcehOp::mixed(300, CCEH_KEYS, seed)
            .into_iter()
            .enumerate()
            .flat_map(|(i, op)| {
                let lookup = match op {
                    CcehOp::Insert(k, _) | CcehOp::Upsert(k, _) | CcehOp::Remove(k)
                        if i % 5 == 0 =>
                    {
                        Some(CcehOp::Get(k))
                    }
                    _ => None,
                };
                std::iter::once(op).chain(lookup)
            })
            .collect()
    };
    vec![
        seed(
            "cceh_ops",
            "fill-remove-batch",
            setup(FencePolicy::Batched, false, true),
            fill,
        ),
        seed(
            "cceh_ops",
            "random-strict",
            setup(FencePolicy::Strict, false, false),
            mixed(2),
        ),
        seed(
            "cceh_ops",
            "random-themis",
            setup(FencePolicy::Themis, false, true),
            mixed(3),
        ),
        seed(
            "cceh_ops",
            "random-wide",
            setup(FencePolicy::Batched, true, false),
            mixed(4),
        ),
    ]
}

fn fastfair_seeds() -> Vec<Seed> {
    let mut out = Vec::new();
    for (p, policy) in ShiftPolicy::ALL.into_iter().enumerate() {
        // Every key in, every key out: splits up to a tall tree, then merges back to a leaf.
        let mut rng = SplitMix64::new(10 + p as u64);
        let mut fill_empty: Vec<FastFairOp> = shuffled(0..FASTFAIR_KEYS, &mut rng)
            .into_iter()
            .map(|k| FastFairOp::Insert(k, k + 1))
            .collect();
        fill_empty.extend(
            shuffled(0..FASTFAIR_KEYS, &mut rng)
                .into_iter()
                .map(FastFairOp::Remove),
        );
        let setup = FastFairSetup {
            policy,
            large_nodes: false,
            crash_seed: p as u8,
        };
        out.push(seed(
            "fastfair_ops",
            &format!("fill-empty-{}", policy.name()),
            setup,
            fill_empty,
        ));
        // Grow then shrink, with scans, lookups and the reserved key between.
        let mut rng = SplitMix64::new(20 + p as u64);
        let ops: Vec<FastFairOp> = FastFairOp::grow_then_shrink(200, FASTFAIR_KEYS, 30 + p as u64)
            .into_iter()
            .enumerate()
            .flat_map(|(i, op)| {
                let probe = match i % 12 {
                    0 => {
                        let a = rng.below(FASTFAIR_KEYS);
                        Some(FastFairOp::Range(a, (a + 20).min(FASTFAIR_KEYS - 1)))
                    }
                    6 => Some(FastFairOp::Get(rng.below(FASTFAIR_KEYS))),
                    11 => Some(FastFairOp::Reserved(ReservedKeyOp::ALL[i / 12 % 4])),
                    _ => None,
                };
                std::iter::once(op).chain(probe)
            })
            .collect();
        let setup = FastFairSetup {
            policy,
            large_nodes: true,
            crash_seed: 8 + p as u8,
        };
        out.push(seed(
            "fastfair_ops",
            &format!("grow-shrink-{}", policy.name()),
            setup,
            ops,
        ));
    }
    out
}

/// A write of a random encodable length at a random offset of file `file`.
fn random_write(rng: &mut SplitMix64, file: u8, classes: u8) -> DatalogOp {
    let len = length_of(rng.below(u64::from(classes)) as u8, rng.below(16) as u8);
    DatalogOp::Write {
        file,
        offset: rng.below(FUZZ_SPAN),
        len,
        mode: MODES[rng.below(MODES.len() as u64) as usize],
    }
}

fn datalog_seeds() -> Vec<Seed> {
    let setup = |mode, eager_cleaning, crash_seed| DatalogSetup {
        mode,
        eager_cleaning,
        crash_seed,
    };
    // One file, many writes of every size class, a few truncates.
    let writes = |seed, classes| {
        let mut rng = SplitMix64::new(seed);
        let mut ops = vec![DatalogOp::Create(0)];
        for i in 0..46 {
            ops.push(if i % 12 == 11 {
                DatalogOp::Truncate(0, rng.below(FUZZ_SPAN))
            } else {
                random_write(&mut rng, 0, classes)
            });
        }
        ops
    };
    // Several files: writes, renames (one onto an existing name, refused), removes, re-creates.
    let mixed = |seed| {
        let mut rng = SplitMix64::new(seed);
        let mut ops = vec![DatalogOp::Create(0), DatalogOp::Create(1)];
        for i in 0..46u64 {
            let f = (i % 3) as u8;
            ops.push(match i % 9 {
                3 => DatalogOp::Rename(f, (f + 1) % 3),
                5 => DatalogOp::Truncate(f, rng.below(2 * PAGE)),
                7 => DatalogOp::Remove((f + 2) % 3),
                8 => DatalogOp::Create((f + 1) % 3),
                _ => random_write(&mut rng, f, LEN_CLASSES),
            });
        }
        ops
    };
    vec![
        seed(
            "datalog_ops",
            "writes-cow",
            setup(WriteMode::CopyOnWrite, false, 1),
            writes(1, LEN_CLASSES),
        ),
        seed(
            "datalog_ops",
            "writes-embedded-eager",
            setup(WriteMode::Embedded, true, 2),
            writes(2, 3),
        ),
        seed(
            "datalog_ops",
            "mixed-auto",
            setup(WriteMode::Auto, false, 3),
            mixed(3),
        ),
        seed(
            "datalog_ops",
            "mixed-eager",
            setup(WriteMode::Auto, true, 4),
            mixed(4),
        ),
    ]
}

/// A store operation drawn by `rng`: every kind, map operations the most, keys 0 and `u64::MAX`
/// one time in five each.
fn random_store_op(rng: &mut SplitMix64, i: u64) -> StoreOp {
    let name = NameId::new(if rng.below(10) == 0 {
        VALID_NAMES + rng.below((NAMES.len() - VALID_NAMES) as u64) as usize
    } else {
        rng.below(VALID_NAMES as u64) as usize
    });
    let mut key = || match rng.below(5) {
        0 => 0,
        1 => u64::MAX,
        _ => 1 + rng.below(STORE_KEYS),
    };
    match i % 25 {
        0..=2 => StoreOp::Open(name, KINDS[(i / 25 % KINDS.len() as u64) as usize]),
        3 | 4 => StoreOp::Get(name, key()),
        5..=8 => StoreOp::Insert(name, key(), i),
        9..=11 => StoreOp::Upsert(name, key(), i + 1000),
        12..=14 => StoreOp::Remove(name, key()),
        15 => {
            let a = key();
            StoreOp::Range(name, a, key())
        }
        16..=18 => StoreOp::DropHandles(name),
        19..=21 => StoreOp::RemoveStructure(name),
        22 if i.is_multiple_of(2) => StoreOp::Reopen,
        22 => StoreOp::Check,
        _ => {
            let mut change = |j: u64| {
                let key = key();
                BatchChange {
                    name: NameId::new((key % VALID_NAMES as u64) as usize),
                    key,
                    value: (j != 3 || !i.is_multiple_of(3)).then_some(i * 10 + j),
                }
            };
            let changes = [change(0), change(1), change(2), change(3)];
            let len = (i / 25 % (BATCH_CHANGES as u64 + 1)) as u8;
            StoreOp::Batch(changes, len, !i.is_multiple_of(5))
        }
    }
}

fn store_seeds() -> Vec<Seed> {
    let name = NameId::new;
    let (users, orders, files, wide, longest) = (name(0), name(1), name(2), name(3), name(4));
    // Fill the catalog with one structure of each kind, meet every refusal, fill both maps
    // (their reserved keys too), then free a name and reuse it as another kind across reopens.
    let mut fill = vec![
        StoreOp::Open(users, StructureKind::HashMap),
        StoreOp::Open(orders, StructureKind::BTreeMap),
        StoreOp::Open(files, StructureKind::Datalog),
        StoreOp::Open(wide, StructureKind::HashMap),
        StoreOp::Open(users, StructureKind::BTreeMap),
        StoreOp::Insert(files, 1, 1),
        StoreOp::Open(name(5), StructureKind::HashMap),
        StoreOp::Open(name(6), StructureKind::Datalog),
        StoreOp::Get(name(7), 3),
        StoreOp::RemoveStructure(longest),
    ];
    let mut rng = SplitMix64::new(40);
    for (i, k) in shuffled(0..=STORE_KEYS + 1, &mut rng)
        .into_iter()
        .enumerate()
    {
        let k = if k == STORE_KEYS + 1 { u64::MAX } else { k };
        fill.push(StoreOp::Insert(users, k, i as u64));
        fill.push(StoreOp::Upsert(orders, k, i as u64 + 100));
        if i % 6 == 0 {
            fill.push(StoreOp::Range(orders, k, STORE_KEYS / 2));
            fill.push(StoreOp::Get(users, k));
        }
    }
    fill.extend([
        StoreOp::Check,
        StoreOp::RemoveStructure(users),
        StoreOp::DropHandles(users),
        StoreOp::RemoveStructure(users),
        StoreOp::Open(longest, StructureKind::BTreeMap),
        StoreOp::Insert(longest, u64::MAX, 7),
        StoreOp::Reopen,
        StoreOp::Check,
        StoreOp::Remove(orders, 0),
        StoreOp::Remove(orders, u64::MAX),
        StoreOp::RemoveStructure(files),
        StoreOp::Open(users, StructureKind::HashMap),
        StoreOp::Upsert(users, 0, 9),
        StoreOp::Reopen,
        StoreOp::RemoveStructure(orders),
        StoreOp::Check,
    ]);
    let random = |seed| -> Vec<StoreOp> {
        let mut rng = SplitMix64::new(seed);
        (0..120).map(|i| random_store_op(&mut rng, i)).collect()
    };
    let setup = |policy, shift, wide_segments, crash_seed| StoreFuzzSetup {
        policy,
        shift,
        wide_segments,
        crash_seed,
    };
    vec![
        seed(
            "store_ops",
            "fill-refuse-remove",
            setup(FencePolicy::Batched, ShiftPolicy::Fast, false, 1),
            fill,
        ),
        seed(
            "store_ops",
            "random-strict",
            setup(FencePolicy::Strict, ShiftPolicy::Redo, true, 2),
            random(41),
        ),
        seed(
            "store_ops",
            "random-themis",
            setup(FencePolicy::Themis, ShiftPolicy::PerShift, false, 3),
            random(42),
        ),
    ]
}

/// The key shapes that fit, short ones first.
const FITTING_SHAPES: [KeyShape; 6] = [
    KeyShape::Bare,
    KeyShape::Shares7,
    KeyShape::Shares14,
    KeyShape::Shares21,
    KeyShape::Long,
    KeyShape::Max,
];

/// A tail of up to [`MAX_TAIL`] alphabet bytes drawn by `rng`.
fn random_tail(rng: &mut SplitMix64) -> Vec<u8> {
    (0..rng.below(MAX_TAIL as u64 + 1))
        .map(|_| TAIL_ALPHABET[rng.below(TAIL_ALPHABET.len() as u64) as usize])
        .collect()
}

/// A key drawn by `rng`: the short shapes the most, a 64 KiB key one time in twenty and one
/// too long one time in forty.
fn random_record_key(rng: &mut SplitMix64) -> RecordKey {
    let shape = match rng.below(40) {
        0 => KeyShape::TooLong,
        1 | 2 => KeyShape::Max,
        3..=6 => KeyShape::Long,
        n => FITTING_SHAPES[(n % 4) as usize],
    };
    RecordKey::new(shape, &random_tail(rng))
}

/// A value drawn by `rng`, from every length class.
fn random_record_value(rng: &mut SplitMix64) -> RecordValue {
    let (_, lo, hi) = VALUE_CLASSES[rng.below(VALUE_CLASSES.len() as u64) as usize];
    RecordValue::new(
        lo + rng.below(u64::from(hi - lo) + 1) as u32,
        rng.below(256) as u8,
    )
}

/// A byte-key map operation drawn by `rng`: writes the most, a reopen and a check rarely.
fn random_record_op(rng: &mut SplitMix64) -> RecordOp {
    match rng.below(20) {
        0..=5 => RecordOp::Insert(random_record_key(rng), random_record_value(rng)),
        6..=9 => RecordOp::Upsert(random_record_key(rng), random_record_value(rng)),
        10..=13 => RecordOp::Remove(random_record_key(rng)),
        14 | 15 => RecordOp::Get(random_record_key(rng)),
        16 | 17 => RecordOp::Range {
            start: random_record_key(rng),
            start_bound: BoundKind::ALL[rng.below(3) as usize],
            end: random_record_key(rng),
            end_bound: BoundKind::ALL[rng.below(3) as usize],
        },
        18 => RecordOp::Reopen,
        _ => RecordOp::Check,
    }
}

fn record_seeds() -> Vec<Seed> {
    // Every tail of up to two bytes under each short shape: the ordered map grows layers at 7,
    // 14, 21 and 221 shared bytes, the hash map splits; then scans across the layers, values
    // grown across chunk sizes, and every key removed.
    let tails: Vec<Vec<u8>> = std::iter::once(Vec::new())
        .chain(TAIL_ALPHABET.iter().map(|&b| vec![b]))
        .chain(
            TAIL_ALPHABET
                .iter()
                .flat_map(|&a| TAIL_ALPHABET.iter().map(move |&b| vec![a, b])),
        )
        .collect();
    let mut rng = SplitMix64::new(50);
    let mut keys: Vec<RecordKey> = FITTING_SHAPES[..5]
        .iter()
        .flat_map(|&shape| tails.iter().map(move |t| RecordKey::new(shape, t)))
        .collect();
    let order = shuffled(0..keys.len() as u64, &mut rng);
    keys = order
        .into_iter()
        .map(|i| keys[i as usize].clone())
        .collect();
    let mut layers = Vec::new();
    for (i, k) in keys.iter().enumerate().take(60) {
        layers.push(RecordOp::Insert(
            k.clone(),
            RecordValue::new((i % 40) as u32, i as u8),
        ));
    }
    layers.push(RecordOp::Check);
    for (shape, bound) in [
        (KeyShape::Shares7, BoundKind::Included),
        (KeyShape::Shares14, BoundKind::Excluded),
        (KeyShape::Long, BoundKind::Unbounded),
    ] {
        layers.push(RecordOp::Range {
            start: RecordKey::new(shape, &[]),
            start_bound: bound,
            end: RecordKey::new(shape, &[0xff, 0xff, 0xff]),
            end_bound: BoundKind::Included,
        });
    }
    for (i, k) in keys.iter().enumerate().take(60).step_by(5) {
        let len = [100, 3000, 20 << 10][i % 3];
        layers.push(RecordOp::Upsert(k.clone(), RecordValue::new(len, 7)));
        layers.push(RecordOp::Get(k.clone()));
    }
    layers.push(RecordOp::Reopen);
    layers.extend(keys.iter().take(60).map(|k| RecordOp::Remove(k.clone())));
    layers.push(RecordOp::Check);

    // 64 KiB keys, keys one byte too long (refused), values of several chunks, reopens.
    let mut big = Vec::new();
    for (i, tail) in tails.iter().enumerate().take(12) {
        let value = RecordValue::new([0, 64, 4096, 40 << 10][i % 4], i as u8);
        big.push(RecordOp::Insert(RecordKey::new(KeyShape::Max, tail), value));
        big.push(RecordOp::Upsert(
            RecordKey::new(KeyShape::TooLong, tail),
            value,
        ));
        big.push(RecordOp::Insert(
            RecordKey::new(KeyShape::Long, tail),
            RecordValue::new(48 << 10, i as u8),
        ));
        big.push(RecordOp::Get(RecordKey::new(KeyShape::TooLong, tail)));
        if i % 4 == 3 {
            big.push(RecordOp::Reopen);
            big.push(RecordOp::Range {
                start: RecordKey::new(KeyShape::Bare, &[]),
                start_bound: BoundKind::Included,
                end: RecordKey::new(KeyShape::Max, &[0xff]),
                end_bound: BoundKind::Excluded,
            });
        }
    }
    for tail in tails.iter().take(12).step_by(2) {
        big.push(RecordOp::Remove(RecordKey::new(KeyShape::Max, tail)));
        big.push(RecordOp::Remove(RecordKey::new(KeyShape::TooLong, tail)));
        big.push(RecordOp::Upsert(
            RecordKey::new(KeyShape::Long, tail),
            RecordValue::new(0, 0),
        ));
    }
    big.push(RecordOp::Check);

    let random = |seed| -> Vec<RecordOp> {
        let mut rng = SplitMix64::new(seed);
        (0..120).map(|_| random_record_op(&mut rng)).collect()
    };
    let setup = |shift, wide_segments, large_nodes, crash_seed| RecordFuzzSetup {
        shift,
        wide_segments,
        large_nodes,
        crash_seed,
    };
    vec![
        seed(
            "record_maps",
            "layers-fill-empty",
            setup(ShiftPolicy::Fast, false, false, 1),
            layers,
        ),
        seed(
            "record_maps",
            "big-keys-values",
            setup(ShiftPolicy::Redo, true, false, 2),
            big,
        ),
        seed(
            "record_maps",
            "random-per-shift",
            setup(ShiftPolicy::PerShift, false, true, 3),
            random(51),
        ),
        seed(
            "record_maps",
            "random-wide",
            setup(ShiftPolicy::Fast, true, false, 4),
            random(52),
        ),
    ]
}
