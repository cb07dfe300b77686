//! The datalog store under simulated crashes: after recovery every file equals a `Vec<u8>`
//! model after the operations that returned, plus possibly the interrupted one, all or nothing
//! (durable linearizability); the namespace equals the model's; and the heap holds exactly the
//! store's blocks (nothing leaked, nothing freed twice).

use std::collections::BTreeMap;

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimBackend, SimConfig};
use pmem_ordering::Pool;
use pmem_structures::datalog::{Datalog, Policy, WriteMode, PAGE};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Create(&'static str),
    Write {
        file: &'static str,
        offset: u64,
        len: u64,
        mode: WriteMode,
    },
    Truncate(&'static str, u64),
    Rename(&'static str, &'static str),
    Remove(&'static str),
}

type Model = BTreeMap<String, Vec<u8>>;

/// The bytes operation `k` writes.
fn data(k: usize, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31) as u8) ^ (k as u8).wrapping_mul(17) ^ 0x5A)
        .collect()
}

fn apply(model: &mut Model, k: usize, op: &Op) {
    match *op {
        Op::Create(name) => {
            model.entry(name.into()).or_default();
        }
        Op::Write {
            file, offset, len, ..
        } => {
            if let Some(m) = model.get_mut(file) {
                let end = (offset + len) as usize;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[offset as usize..end].copy_from_slice(&data(k, len));
            }
        }
        Op::Truncate(file, size) => {
            if let Some(m) = model.get_mut(file) {
                m.resize(size as usize, 0);
            }
        }
        Op::Rename(from, to) => {
            if from != to && !model.contains_key(to) {
                if let Some(v) = model.remove(from) {
                    model.insert(to.into(), v);
                }
            }
        }
        Op::Remove(file) => {
            model.remove(file);
        }
    }
}

fn model_after(ops: &[Op], n: usize) -> Model {
    let mut m = Model::new();
    for (k, op) in ops[..n].iter().enumerate() {
        apply(&mut m, k, op);
    }
    m
}

type Store<'h, 'p> = Datalog<'h, SimBackend, &'p Pool<SimBackend>>;

fn run_op(store: &Store<'_, '_>, k: usize, op: &Op) {
    match *op {
        Op::Create(name) => {
            store.create_file(name).unwrap();
        }
        Op::Write {
            file,
            offset,
            len,
            mode,
        } => {
            let id = store.open_file(file).unwrap();
            store
                .write_at_with(id, offset, &data(k, len), mode)
                .unwrap();
        }
        Op::Truncate(file, size) => {
            let id = store.open_file(file).unwrap();
            store.truncate(id, size).unwrap();
        }
        Op::Rename(from, to) => store.rename(from, to).unwrap(),
        Op::Remove(file) => store.remove(file).unwrap(),
    }
}

fn contents(store: &Store<'_, '_>) -> Result<Model, String> {
    let mut out = Model::new();
    for name in store.list() {
        let id = store.open_file(&name).map_err(|e| e.to_string())?;
        let len = store.len(id).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; len as usize];
        store.read_at(id, 0, &mut buf).map_err(|e| e.to_string())?;
        out.insert(name, buf);
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

/// A policy that cleans logs eagerly, so short workloads crash inside log cleaning.
fn eager_cleaning(mode: WriteMode) -> Policy {
    Policy {
        mode,
        fold_after_entries: 6,
        compact_live_percent: 60,
        compact_min_pages: 2,
        ..Policy::default()
    }
}

fn describe(m: &Model) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}: {} bytes", v.len()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn run(name: &str, policy: Policy, ops: Vec<Op>, points: CrashPoints, seed: u64) -> u64 {
    run_on(SimConfig::x86(), name, policy, ops, points, seed)
}

fn run_on(
    sim: SimConfig,
    name: &str,
    policy: Policy,
    ops: Vec<Op>,
    points: CrashPoints,
    seed: u64,
) -> u64 {
    let workload_ops = ops.clone();
    let report = CrashTest::new(&format!("datalog-{name}"), sim)
        .pool("datalog", 512 << 10, 1024)
        .points(points)
        .images(Images::Random(3))
        .seed(seed)
        // Durable when it returns: no store of an operation may still be pending then.
        .fail_on_unpersisted(true)
        .run_with_setup(
            |pool| {
                let heap = Heap::create(pool, heap_config(), FencePolicy::Batched).unwrap();
                Datalog::create(&heap, pool.root_offset(), 4, policy).unwrap();
            },
            |pool| {
                let heap = Heap::open(pool, FencePolicy::Batched).unwrap();
                let store = Datalog::open(&heap, pool.root_offset(), policy).unwrap();
                for (k, op) in workload_ops.iter().enumerate() {
                    run_op(&store, k, op);
                    pool.operation_completed();
                }
            },
            |pool, crash| {
                let heap = Heap::open(pool, FencePolicy::Batched).map_err(|e| e.to_string())?;
                let store =
                    Datalog::open(&heap, pool.root_offset(), policy).map_err(|e| e.to_string())?;
                let now = contents(&store)?;
                let done = crash.operations_completed as usize;
                let before = model_after(&ops, done);
                let matches =
                    now == before || (done < ops.len() && now == model_after(&ops, done + 1));
                if !matches {
                    return Err(format!(
                        "after {done} operations the store holds [{}], the model [{}] (next op {:?})",
                        describe(&now),
                        describe(&before),
                        ops.get(done)
                    ));
                }
                let blocks: Vec<u64> = heap
                    .check_heap()
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .map(|(o, _)| o)
                    .collect();
                if blocks != store.blocks() {
                    return Err(format!(
                        "the heap's blocks {blocks:x?} are not the store's {:x?}",
                        store.blocks()
                    ));
                }
                // The recovered store keeps working: one more write lands.
                if let Some(name) = now.keys().next() {
                    let id = store.open_file(name).map_err(|e| e.to_string())?;
                    store.write_at(id, 3, b"again").map_err(|e| e.to_string())?;
                }
                Ok(())
            },
        )
        .unwrap_or_else(|f| panic!("{f}"));
    report.points
}

fn write(file: &'static str, offset: u64, len: u64, mode: WriteMode) -> Op {
    Op::Write {
        file,
        offset,
        len,
        mode,
    }
}

/// Small writes (1 to 300 bytes) at unaligned offsets over two pages.
fn small_writes(n: usize, mode: WriteMode, seed: u64) -> Vec<Op> {
    let mut x = seed | 1;
    let mut ops = vec![Op::Create("a")];
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = [1, 7, 64, 300][(x % 4) as usize];
        ops.push(write("a", (x >> 8) % (2 * PAGE), len, mode));
    }
    ops
}

#[test]
fn every_crash_of_small_embedded_writes_recovers() {
    let points = run(
        "embedded",
        eager_cleaning(WriteMode::Embedded),
        small_writes(40, WriteMode::Embedded, 1),
        CrashPoints::Every,
        1,
    );
    assert!(points > 300, "{points} crash points");
}

/// The commit protocol does not rely on stores to one line persisting in order: lines torn at
/// 8-byte granularity recover too (the checksums are never what decides validity).
#[test]
fn every_crash_of_mixed_writes_recovers_with_torn_lines() {
    let mut ops = small_writes(16, WriteMode::Embedded, 8);
    ops.extend(
        small_writes(4, WriteMode::CopyOnWrite, 9)
            .into_iter()
            .skip(1),
    );
    run_on(
        SimConfig::x86().torn(),
        "torn",
        eager_cleaning(WriteMode::Auto),
        ops,
        CrashPoints::Every,
        8,
    );
}

#[test]
fn every_crash_of_small_copy_on_write_writes_recovers() {
    run(
        "cow",
        eager_cleaning(WriteMode::CopyOnWrite),
        small_writes(12, WriteMode::CopyOnWrite, 2),
        CrashPoints::Every,
        2,
    );
}

#[test]
fn every_crash_of_truncates_renames_and_removes_recovers() {
    let e = WriteMode::Embedded;
    let c = WriteMode::CopyOnWrite;
    let ops = vec![
        Op::Create("a"),
        write("a", 10, 100, e),
        write("a", PAGE - 5, 20, e),
        Op::Create("b"),
        write("b", 0, 200, c),
        Op::Truncate("a", 50),
        write("a", 3000, 9, e),
        Op::Rename("a", "c"),
        Op::Truncate("c", PAGE + 100),
        Op::Rename("b", "d"),
        write("d", 4, 4, e),
        Op::Remove("c"),
        Op::Create("a"),
        write("a", 1, 1, e),
        Op::Truncate("d", 0),
        Op::Remove("d"),
    ];
    run(
        "namespace",
        eager_cleaning(WriteMode::Auto),
        ops,
        CrashPoints::Every,
        3,
    );
}

#[test]
fn a_sample_of_crashes_of_multi_page_writes_recovers() {
    let e = WriteMode::Embedded;
    let c = WriteMode::CopyOnWrite;
    let a = WriteMode::Auto;
    let ops = vec![
        Op::Create("big"),
        write("big", 0, 5 * PAGE + 17, c),
        write("big", 3 * PAGE - 40, 2 * PAGE + 80, e),
        write("big", 100, 3 * PAGE, a),
        Op::Truncate("big", 2 * PAGE + 1),
        write("big", 7 * PAGE + 1, 2 * PAGE, e),
        Op::Create("small"),
        write("small", 0, 1, e),
        write("big", PAGE + 1, 2 * PAGE - 2, c),
        Op::Truncate("big", 9 * PAGE),
        Op::Remove("big"),
        write("small", 4000, 200, a),
    ];
    run(
        "multi-page",
        eager_cleaning(WriteMode::Auto),
        ops,
        CrashPoints::Sample(600),
        4,
    );
}

#[test]
fn a_sample_of_crashes_of_a_long_overwrite_run_with_log_cleaning_recovers() {
    let mut ops = small_writes(150, WriteMode::Embedded, 5);
    ops.extend(
        small_writes(30, WriteMode::CopyOnWrite, 6)
            .into_iter()
            .skip(1),
    );
    run(
        "cleaning",
        eager_cleaning(WriteMode::Auto),
        ops,
        CrashPoints::Sample(800),
        5,
    );
}

/// Embedded writes that each cover the one before: every log page but the tail's dies, and is
/// reclaimed (compaction is off).
fn reclaim_policy() -> Policy {
    Policy {
        compact_live_percent: 0,
        ..Policy::with_mode(WriteMode::Embedded)
    }
}

fn covering_writes(n: usize) -> Vec<Op> {
    let mut ops = vec![Op::Create("a")];
    ops.extend((0..n).map(|k| write("a", 100 + (k % 2) as u64, 300, WriteMode::Embedded)));
    ops
}

#[test]
fn every_crash_while_dead_log_pages_are_reclaimed_recovers() {
    run(
        "reclaim",
        reclaim_policy(),
        covering_writes(40),
        CrashPoints::Every,
        6,
    );
}

#[test]
fn the_reclaim_workload_really_reclaims_pages() {
    let pool = Pool::simulated("datalog", 512 << 10, 1024, SimConfig::x86()).unwrap();
    let heap = Heap::create(&pool, heap_config(), FencePolicy::Batched).unwrap();
    let store = Datalog::create(&heap, pool.root_offset(), 4, reclaim_policy()).unwrap();
    let ops = covering_writes(40);
    for (k, op) in ops.iter().enumerate() {
        run_op(&store, k, op);
    }
    let stats = store.cleaning_stats();
    assert!(stats.pages_reclaimed >= 2, "{stats:?}");
    assert_eq!(stats.compactions, 0, "{stats:?}");
    let id = store.open_file("a").unwrap();
    assert!(store.file_stats(id).unwrap().log_pages <= 2);
    assert_eq!(contents(&store).unwrap(), model_after(&ops, ops.len()));
}

/// Embedded writes cycling over three ranges: entries die fast, so a two-page log is
/// compacted every few writes under the eager policy.
fn compacting_writes(n: usize) -> Vec<Op> {
    let mut ops = vec![Op::Create("a")];
    ops.extend((0..n).map(|k| write("a", [0, 500, PAGE + 100][k % 3], 300, WriteMode::Embedded)));
    ops
}

#[test]
fn every_crash_inside_log_compaction_recovers() {
    run(
        "compaction",
        eager_cleaning(WriteMode::Embedded),
        compacting_writes(30),
        CrashPoints::Every,
        7,
    );
}

#[test]
fn the_compaction_workload_really_compacts() {
    let pool = Pool::simulated("datalog", 512 << 10, 1024, SimConfig::x86()).unwrap();
    let heap = Heap::create(&pool, heap_config(), FencePolicy::Batched).unwrap();
    let policy = eager_cleaning(WriteMode::Embedded);
    let store = Datalog::create(&heap, pool.root_offset(), 4, policy).unwrap();
    let ops = compacting_writes(30);
    for (k, op) in ops.iter().enumerate() {
        run_op(&store, k, op);
    }
    let stats = store.cleaning_stats();
    assert!(stats.compactions >= 2, "{stats:?}");
    assert_eq!(contents(&store).unwrap(), model_after(&ops, ops.len()));
}

#[test]
fn the_crash_workloads_really_fold_and_compact() {
    // Run the cleaning workload without crashes and count what cleaning did.
    let pool = Pool::simulated("datalog", 512 << 10, 1024, SimConfig::x86()).unwrap();
    let heap = Heap::create(&pool, heap_config(), FencePolicy::Batched).unwrap();
    let store = Datalog::create(
        &heap,
        pool.root_offset(),
        4,
        eager_cleaning(WriteMode::Auto),
    )
    .unwrap();
    let mut ops = small_writes(150, WriteMode::Embedded, 5);
    ops.extend(
        small_writes(30, WriteMode::CopyOnWrite, 6)
            .into_iter()
            .skip(1),
    );
    for (k, op) in ops.iter().enumerate() {
        run_op(&store, k, op);
    }
    let stats = store.cleaning_stats();
    assert!(stats.folds >= 3, "{stats:?}");
    assert!(stats.compactions >= 3, "{stats:?}");
    assert_eq!(contents(&store).unwrap(), model_after(&ops, ops.len()));
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let file = prop_oneof![Just("a"), Just("b")];
    let mode = prop_oneof![
        Just(WriteMode::CopyOnWrite),
        Just(WriteMode::Embedded),
        Just(WriteMode::Auto)
    ];
    prop_oneof![
        6 => (file.clone(), 0..3 * PAGE, 1..2 * PAGE, mode)
            .prop_map(|(file, offset, len, mode)| Op::Write { file, offset, len, mode }),
        1 => (file.clone(), 0..3 * PAGE).prop_map(|(f, s)| Op::Truncate(f, s)),
        1 => (file.clone(), file.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => file.clone().prop_map(Op::Remove),
        2 => file.prop_map(Op::Create),
    ]
}

/// Only operations that succeed on the model (the workload unwraps every result).
fn valid(ops: Vec<Op>) -> Vec<Op> {
    let mut model = Model::new();
    let mut out = Vec::new();
    for op in ops {
        let ok = match &op {
            Op::Create(n) => !model.contains_key(*n),
            Op::Write { file, .. } | Op::Truncate(file, _) | Op::Remove(file) => {
                model.contains_key(*file)
            }
            Op::Rename(a, b) => model.contains_key(*a) && (a == b || !model.contains_key(*b)),
        };
        if ok {
            apply(&mut model, out.len(), &op);
            // The bytes of a write depend on its index: recompute with the kept index.
            out.push(op);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn random_sequences_recover_from_sampled_crashes(ops in proptest::collection::vec(op_strategy(), 1..14), seed in 0u64..1000) {
        let ops = valid(ops);
        run("proptest", eager_cleaning(WriteMode::Auto), ops, CrashPoints::Sample(60), seed);
    }
}
