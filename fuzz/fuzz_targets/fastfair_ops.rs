//! Fuzz the FAST&FAIR tree against a `BTreeMap` model, with crash injection.
//!
//! The first input byte picks the set-up: bits 0-1 the shift policy (per-shift, FAST, redo;
//! 3 is FAST too), bit 2 the node size (128 or 256 bytes: one or three entry lines), bits 3-7
//! the seed of the crash points. Every following pair of bytes is one operation on keys
//! 0..128, on a simulated pool:
//!
//! * byte 0, bits 0-2: the kind: 0-1 `insert`, 2 `upsert`, 3-4 `remove`, 5 `get`, 6 a `range`
//!   scan, 7 an operation on the reserved key `u64::MAX` (which must be refused and change
//!   nothing); bits 3-7 go into the value or the scan's length;
//! * byte 1, bits 0-6: the key.
//!
//! Every result is compared with the model while the sequence runs, and after it the simulator
//! must have seen every store persisted before its operation returned. Then the sequence is
//! crashed at a seeded sample of its events (the simulator's `CrashTest`, random crash images
//! besides the two extremes): each image is recovered with `Heap::open` and `FastFair::open`,
//! and must hold, in key order, the model after the operations that had returned, or after the
//! one that was running too; the tree must be well formed and the heap must hold exactly its
//! nodes and redo area.

#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimBackend, SimConfig};
use pmem_ordering::Pool;
use pmem_structures::fastfair::{FastFair, FastFairConfig, FastFairError, ShiftPolicy};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

const POOL_SIZE: u64 = 512 << 10;
const ROOT_SIZE: u64 = 1024;
/// Keys are 0..KEYS.
const KEYS: u64 = 128;
/// Operations run at most (the rest of a longer input is ignored).
const MAX_OPS: usize = 256;
/// Crash points sampled per input.
const CRASH_POINTS: usize = 24;

fn heap_config() -> HeapConfig {
    HeapConfig {
        lanes: 1,
        lane_log_bytes: 16 << 10,
        chunk_size: 4096,
    }
}

type Tree<'h, 'p> = FastFair<'h, SimBackend, &'p Pool<SimBackend>>;

fn reserved<T: std::fmt::Debug>(what: &str, result: Result<T, FastFairError>) {
    match result {
        Err(FastFairError::ReservedKey) => {}
        other => panic!("{what} with the reserved key gave {other:?}, not ReservedKey"),
    }
}

/// Apply an operation's effect to a model (for the crash checks).
fn apply(model: &mut BTreeMap<u64, u64>, index: usize, op: [u8; 2]) {
    let [a, b] = op;
    let k = u64::from(b) % KEYS;
    let value = (index as u64) << 8 | u64::from(a);
    match a & 7 {
        0 | 1 => {
            model.entry(k).or_insert(value);
        }
        2 => {
            model.insert(k, value);
        }
        3 | 4 => {
            model.remove(&k);
        }
        _ => {}
    }
}

/// Run one operation on the tree and check its result against the model (before `apply`).
fn step(tree: &Tree<'_, '_>, model: &BTreeMap<u64, u64>, index: usize, op: [u8; 2]) {
    let [a, b] = op;
    let k = u64::from(b) % KEYS;
    let value = (index as u64) << 8 | u64::from(a);
    match a & 7 {
        0 | 1 => {
            let inserted = tree.insert(k, value).expect("insert");
            assert_eq!(inserted, !model.contains_key(&k), "insert({k}) result");
        }
        2 => {
            let old = tree.upsert(k, value).expect("upsert");
            assert_eq!(old, model.get(&k).copied(), "upsert({k}) result");
        }
        3 | 4 => {
            let old = tree.remove(k).expect("remove");
            assert_eq!(old, model.get(&k).copied(), "remove({k}) result");
        }
        5 => assert_eq!(
            tree.get(k).expect("get"),
            model.get(&k).copied(),
            "get({k})"
        ),
        6 => {
            let end = k + u64::from(a >> 3);
            let got: Vec<(u64, u64)> = tree.range(k..end).collect::<Result<_, _>>().expect("range");
            let want: Vec<(u64, u64)> = model.range(k..end).map(|(&k, &v)| (k, v)).collect();
            assert_eq!(got, want, "range({k}..{end})");
        }
        _ => match (a >> 3) & 3 {
            0 => reserved("insert", tree.insert(u64::MAX, value)),
            1 => reserved("get", tree.get(u64::MAX)),
            2 => reserved("remove", tree.remove(u64::MAX)),
            _ => reserved("upsert", tree.upsert(u64::MAX, value)),
        },
    }
}

fn model_after(ops: &[[u8; 2]], n: usize) -> Vec<(u64, u64)> {
    let mut m = BTreeMap::new();
    for (i, &op) in ops[..n].iter().enumerate() {
        apply(&mut m, i, op);
    }
    m.into_iter().collect()
}

/// Recover a crash image and check it against the model after `done` operations.
fn check_recovered(pool: &Pool<SimBackend>, ops: &[[u8; 2]], done: usize) -> Result<(), String> {
    let heap = Heap::open(pool, FencePolicy::Batched).map_err(|e| e.to_string())?;
    let tree = FastFair::open(&heap, pool.root_offset()).map_err(|e| e.to_string())?;
    let now: Vec<(u64, u64)> = tree
        .range(..)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if now != model_after(ops, done) && (done >= ops.len() || now != model_after(ops, done + 1)) {
        return Err(format!(
            "after {done} operations the tree differs from the model"
        ));
    }
    if tree.check().map_err(|e| e.to_string())? != now.len() as u64 {
        return Err("the tree's check disagrees with its scan".into());
    }
    let blocks: Vec<u64> = heap
        .check_heap()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    if blocks != tree.blocks().map_err(|e| e.to_string())? {
        return Err("the heap's blocks are not exactly the tree's".into());
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Some((&setup, rest)) = data.split_first() else {
        return;
    };
    let policy = match setup & 3 {
        0 => ShiftPolicy::PerShift,
        2 => ShiftPolicy::Redo,
        _ => ShiftPolicy::Fast,
    };
    let node_size = if setup & 4 == 0 { 128 } else { 256 };
    let ops: Vec<[u8; 2]> = rest
        .chunks_exact(2)
        .take(MAX_OPS)
        .map(|c| [c[0], c[1]])
        .collect();
    let config = FastFairConfig { node_size, policy };
    let workload_ops = ops.clone();
    let report = CrashTest::new("fastfair-fuzz", SimConfig::x86())
        .pool("fastfair-fuzz", POOL_SIZE, ROOT_SIZE)
        .points(CrashPoints::Sample(CRASH_POINTS))
        .images(Images::Random(2))
        .seed(u64::from(setup >> 3))
        .fail_on_unpersisted(true)
        .run_with_setup(
            |pool| {
                let heap = Heap::create(pool, heap_config(), FencePolicy::Batched)
                    .expect("format the heap");
                FastFair::create(&heap, pool.root_offset(), config).expect("create the tree");
            },
            |pool| {
                let heap = Heap::open(pool, FencePolicy::Batched).expect("open the heap");
                let tree = FastFair::open(&heap, pool.root_offset()).expect("open the tree");
                let mut model = BTreeMap::new();
                for (index, &op) in workload_ops.iter().enumerate() {
                    step(&tree, &model, index, op);
                    apply(&mut model, index, op);
                    assert_eq!(
                        tree.len(),
                        model.len() as u64,
                        "len after operation {index}"
                    );
                    pool.operation_completed();
                }
            },
            |pool, crash| check_recovered(pool, &ops, crash.operations_completed as usize),
        );
    if let Err(failure) = report {
        panic!("{failure}");
    }
});
