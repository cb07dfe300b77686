//! Fuzz the datalog store against a model of `Vec<u8>` files, then crash it: recovery from
//! crash images at sampled events must give the model before or after the interrupted
//! operation, and a heap holding exactly the store's blocks.
//!
//! The first input byte picks the set-up: bits 0-1 the store's write mode (copy-on-write,
//! embedded, auto), bit 2 eager log cleaning (fold after 4 embeds, compact below 60% live,
//! from 2 pages), bits 3-7 the crash sampler's seed. Every following group of four bytes
//! `[a, b, c, d]` is one operation on files `f0`..`f3` of a store on a simulated pool:
//!
//! * `a` bits 0-2: the kind: 0-3 `write_at` (with the store's mode, or bits 6-7 of `d` naming
//!   one), 4 `truncate`, 5 `rename`, 6 `remove`, 7 `create`; bits 3-4 the file, bits 5-6 the
//!   other file of a rename;
//! * `b`, `c`: the offset (or new size), below three pages;
//! * `d` bits 0-5: the length: 1-16 bytes, or 64-byte steps, or page-sized steps, by bits 4-5.
//!
//! Operations on missing files must fail with `NotFound`, creating or renaming onto an
//! existing name with `Exists`, and change nothing. Every result is compared with the model,
//! and every file is read back in full after every operation.

#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimBackend, SimConfig};
use pmem_ordering::Pool;
use pmem_structures::datalog::{Datalog, DatalogError, Policy, WriteMode, PAGE};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

const POOL_SIZE: u64 = 256 << 10;
const ROOT_SIZE: u64 = 1024;
/// Operations run at most (the rest of a longer input is ignored).
const MAX_OPS: usize = 48;
/// Crash points checked per input.
const CRASH_POINTS: usize = 3;

type Model = BTreeMap<String, Vec<u8>>;
type Store<'h, 'p> = Datalog<'h, SimBackend, &'p Pool<SimBackend>>;

#[derive(Clone, Copy, Debug)]
enum Op {
    Write(u8, u64, u64, Option<WriteMode>),
    Truncate(u8, u64),
    Rename(u8, u8),
    Remove(u8),
    Create(u8),
}

fn name(f: u8) -> String {
    format!("f{f}")
}

fn decode(op: &[u8]) -> Op {
    let [a, b, c, d] = [op[0], op[1], op[2], op[3]];
    let file = (a >> 3) & 3;
    let offset = u64::from(u16::from_le_bytes([b, c])) % (3 * PAGE);
    let step = u64::from(d & 15) + 1;
    let len = match (d >> 4) & 3 {
        0 => step,
        1 => step * 64,
        2 => step * 64 + 13,
        _ => step * PAGE / 4 + 1,
    };
    let mode = match d >> 6 {
        1 => Some(WriteMode::CopyOnWrite),
        2 => Some(WriteMode::Embedded),
        3 => Some(WriteMode::Auto),
        _ => None,
    };
    match a & 7 {
        0..=3 => Op::Write(file, offset, len, mode),
        4 => Op::Truncate(file, offset),
        5 => Op::Rename(file, (a >> 5) & 3),
        6 => Op::Remove(file),
        _ => Op::Create(file),
    }
}

fn bytes(index: usize, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ (index as u8).wrapping_mul(101))
        .collect()
}

/// Apply `op` to the model; whether it should succeed.
fn apply(model: &mut Model, index: usize, op: Op) -> bool {
    match op {
        Op::Write(f, offset, len, _) => match model.get_mut(&name(f)) {
            Some(m) => {
                let end = (offset + len) as usize;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[offset as usize..end].copy_from_slice(&bytes(index, len));
                true
            }
            None => false,
        },
        Op::Truncate(f, size) => match model.get_mut(&name(f)) {
            Some(m) => {
                m.resize(size as usize, 0);
                true
            }
            None => false,
        },
        Op::Rename(a, b) => {
            if !model.contains_key(&name(a)) || (a != b && model.contains_key(&name(b))) {
                return false;
            }
            let v = model.remove(&name(a)).expect("present");
            model.insert(name(b), v);
            true
        }
        Op::Remove(f) => model.remove(&name(f)).is_some(),
        Op::Create(f) => {
            if model.contains_key(&name(f)) {
                return false;
            }
            model.insert(name(f), Vec::new());
            true
        }
    }
}

fn run(store: &Store<'_, '_>, index: usize, op: Op) -> Result<(), DatalogError> {
    match op {
        Op::Write(f, offset, len, mode) => {
            let id = store.open_file(&name(f))?;
            let mode = mode.unwrap_or(store.policy().mode);
            store.write_at_with(id, offset, &bytes(index, len), mode)
        }
        Op::Truncate(f, size) => {
            let id = store.open_file(&name(f))?;
            store.truncate(id, size)
        }
        Op::Rename(a, b) => store.rename(&name(a), &name(b)),
        Op::Remove(f) => store.remove(&name(f)),
        Op::Create(f) => store.create_file(&name(f)).map(|_| ()),
    }
}

fn contents(store: &Store<'_, '_>) -> Result<Model, String> {
    let mut out = Model::new();
    for n in store.list() {
        let id = store.open_file(&n).map_err(|e| e.to_string())?;
        let len = store.len(id).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; len as usize];
        let got = store.read_at(id, 0, &mut buf).map_err(|e| e.to_string())?;
        if got as u64 != len {
            return Err(format!("{n}: read {got} of {len} bytes"));
        }
        out.insert(n, buf);
    }
    Ok(out)
}

fn heap_config() -> HeapConfig {
    HeapConfig {
        lanes: 1,
        lane_log_bytes: 8192,
        chunk_size: 4096,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&setup, rest)) = data.split_first() else {
        return;
    };
    let mode = match setup & 3 {
        0 => WriteMode::CopyOnWrite,
        1 => WriteMode::Embedded,
        _ => WriteMode::Auto,
    };
    let policy = if setup & 4 != 0 {
        Policy {
            mode,
            fold_after_entries: 4,
            compact_live_percent: 60,
            compact_min_pages: 2,
            ..Policy::default()
        }
    } else {
        Policy::with_mode(mode)
    };
    let ops: Vec<Op> = rest.chunks_exact(4).take(MAX_OPS).map(decode).collect();
    // The model after each operation, and whether each succeeds.
    let mut models = vec![Model::new()];
    let mut succeeds = Vec::new();
    for (i, &op) in ops.iter().enumerate() {
        let mut m = models[i].clone();
        succeeds.push(apply(&mut m, i, op));
        models.push(m);
    }
    let workload_ops = ops.clone();
    let workload_models = models.clone();
    let result = CrashTest::new("datalog-fuzz", SimConfig::x86())
        .pool("datalog-fuzz", POOL_SIZE, ROOT_SIZE)
        .points(CrashPoints::Sample(CRASH_POINTS))
        .images(Images::Random(2))
        .seed(u64::from(setup >> 3))
        .run_with_setup(
            |pool| {
                let heap = Heap::create(pool, heap_config(), FencePolicy::Batched).unwrap();
                Datalog::create(&heap, pool.root_offset(), 4, policy).unwrap();
            },
            |pool| {
                let heap = Heap::open(pool, FencePolicy::Batched).unwrap();
                let store = Datalog::open(&heap, pool.root_offset(), policy).unwrap();
                for (i, &op) in workload_ops.iter().enumerate() {
                    match (run(&store, i, op), succeeds[i]) {
                        (Ok(()), true) => {}
                        (Err(DatalogError::NotFound { .. } | DatalogError::Exists { .. }), false) => {}
                        (got, ok) => panic!("operation {i} {op:?}: {got:?}, expected success {ok}"),
                    }
                    pool.operation_completed();
                    assert_eq!(
                        contents(&store).unwrap(),
                        workload_models[i + 1],
                        "after operation {i} {op:?}"
                    );
                }
            },
            |pool, crash| {
                let heap = Heap::open(pool, FencePolicy::Batched).map_err(|e| e.to_string())?;
                let store =
                    Datalog::open(&heap, pool.root_offset(), policy).map_err(|e| e.to_string())?;
                let now = contents(&store)?;
                let done = crash.operations_completed as usize;
                if now != models[done] && models.get(done + 1) != Some(&now) {
                    return Err(format!("after {done} operations the store differs from the model"));
                }
                let blocks: Vec<u64> = heap
                    .check_heap()
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .map(|(o, _)| o)
                    .collect();
                if blocks != store.blocks() {
                    return Err("the heap's blocks are not exactly the store's".into());
                }
                Ok(())
            },
        );
    if let Err(failure) = result {
        panic!("{failure}");
    }
});
