//! Fuzz the CCEH table against a `HashMap` model, then reopen it from crash images.
//!
//! The first input byte picks the set-up: bit 0 also checks the fully persisted current image
//! (besides the image with nothing pending persisted), bits 1-2 the heap's fence policy (batched,
//! strict, or Themis on a simulated Themis pool), bit 3 segments of 8 buckets instead of 4 (a
//! window then covers half a segment, so full windows displace keys before they split). Every
//! following pair of bytes is one operation on keys 1..=64 of a table with tiny segments (so a
//! few keys split a segment and double the directory), on a simulated pool:
//!
//! * byte 0, bits 0-2: the kind: 0-1 `insert`, 2 `upsert`, 3 `remove`, 4-5 `get`,
//!   6 `insert_batch`, 7 an operation on the reserved key 0 (which must be refused and change
//!   nothing); bits 3-7 go into the value, the batch's length and key step, or the key-0
//!   operation;
//! * byte 1, bits 0-5: the key - 1; for `insert_batch`, bit 6 turns the helper thread on, bit 5
//!   the inline prefetch, and bit 7 sets their depth to 8 (else 1).
//!
//! Every result is compared with the model, and after every operation the simulator must have
//! seen all its stores persisted (no pmemcheck-style `Unpersisted` finding). Each operation
//! persists before it returns, so both crash images, opened as a fresh pool (`Heap::open` rolls
//! back nothing, `Cceh::open` checks the directory), must hold exactly the model, and the heap
//! exactly the table's directory and segments.

#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use pmem_ordering::sim::{Finding, SimBackend, SimConfig};
use pmem_ordering::Pool;
use pmem_structures::cceh::{BatchOptions, Cceh, CcehConfig, CcehError};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

const LAYOUT: &str = "cceh-fuzz";
const POOL_SIZE: u64 = 64 << 10;
const ROOT_SIZE: u64 = 1024;
/// Keys are 1..=KEYS.
const KEYS: u64 = 64;
/// Operations run at most (the rest of a longer input is ignored).
const MAX_OPS: usize = 512;
const CONFIG: CcehConfig = CcehConfig {
    buckets_per_segment: 4,
};
const WIDE: CcehConfig = CcehConfig {
    buckets_per_segment: 8,
};

fn heap_config() -> HeapConfig {
    HeapConfig {
        lanes: 2,
        lane_log_bytes: 4096,
        chunk_size: 4096,
    }
}

type Table<'h, 'p> = Cceh<'h, SimBackend, &'p Pool<SimBackend>>;

/// The key `k` (any byte) maps to, in 1..=KEYS.
fn key(k: u8) -> u64 {
    u64::from(k) % KEYS + 1
}

fn reserved<T: std::fmt::Debug>(what: &str, result: Result<T, CcehError>) {
    match result {
        Err(CcehError::ReservedKey) => {}
        other => panic!("{what} with key 0 gave {other:?}, not ReservedKey"),
    }
}

/// Run one operation on the table and the model; panic if they disagree.
fn step(table: &Table<'_, '_>, model: &mut HashMap<u64, u64>, index: usize, op: [u8; 2]) {
    let [a, b] = op;
    let k = key(b & 63);
    let value = (index as u64) << 8 | u64::from(a);
    match a & 7 {
        0 | 1 => {
            let inserted = table.insert(k, value).expect("insert");
            assert_eq!(inserted, !model.contains_key(&k), "insert({k}) result");
            model.entry(k).or_insert(value);
        }
        2 => {
            let old = table.upsert(k, value).expect("upsert");
            assert_eq!(old, model.insert(k, value), "upsert({k}) result");
        }
        3 => {
            let old = table.remove(k).expect("remove");
            assert_eq!(old, model.remove(&k), "remove({k}) result");
        }
        4 | 5 => {
            let got = table.get(k).expect("get");
            assert_eq!(got, model.get(&k).copied(), "get({k}) result");
        }
        6 => {
            let len = usize::from((a >> 3) & 7) + 1;
            let stride = u64::from(a >> 6); // 0 repeats one key inside the batch
            let items: Vec<(u64, u64)> = (0..len as u64)
                .map(|i| ((k - 1 + i * stride) % KEYS + 1, value + (i << 32)))
                .collect();
            let options = BatchOptions {
                helper: b & 64 != 0,
                inline_prefetch: b & 32 != 0,
                depth: if b & 128 != 0 { 8 } else { 1 },
            };
            let inserted = table.insert_batch(&items, options).expect("insert_batch");
            let mut expected = 0;
            for &(k, v) in &items {
                if let std::collections::hash_map::Entry::Vacant(e) = model.entry(k) {
                    e.insert(v);
                    expected += 1;
                }
            }
            assert_eq!(inserted, expected, "insert_batch({items:?}) result");
        }
        _ => match (a >> 3) & 3 {
            0 => reserved("insert", table.insert(0, value)),
            1 => reserved("get", table.get(0)),
            2 => reserved("remove", table.remove(0)),
            _ => reserved(
                "insert_batch",
                table.insert_batch(&[(k, value), (0, value)], BatchOptions::default()),
            ),
        },
    }
    assert_eq!(
        table.len(),
        model.len() as u64,
        "len after operation {index}"
    );
}

/// Open `image` as a pool, heap and table, and check it holds exactly `model`.
fn check_image(
    image: &[u8],
    what: &str,
    sim: SimConfig,
    policy: FencePolicy,
    model: &HashMap<u64, u64>,
) {
    let pool = Pool::from_image(image, Some(LAYOUT), sim)
        .unwrap_or_else(|e| panic!("{what}: the pool does not open: {e}"));
    let heap =
        Heap::open(&pool, policy).unwrap_or_else(|e| panic!("{what}: the heap does not open: {e}"));
    let table = Cceh::open(&heap, pool.root_offset())
        .unwrap_or_else(|e| panic!("{what}: the table does not open: {e}"));
    let contents: HashMap<u64, u64> = table.iter().expect("iterate").collect();
    assert_eq!(&contents, model, "{what}: contents differ from the model");
    assert_eq!(table.len(), model.len() as u64, "{what}: len");
    for k in 1..=KEYS {
        assert_eq!(
            table.get(k).expect("get"),
            model.get(&k).copied(),
            "{what}: get({k})"
        );
    }
    let blocks: Vec<u64> = heap
        .check_heap()
        .unwrap_or_else(|e| panic!("{what}: the heap check fails: {e}"))
        .into_iter()
        .map(|(offset, _)| offset)
        .collect();
    assert_eq!(
        blocks,
        table.blocks().expect("the table's blocks"),
        "{what}: the heap's blocks are not exactly the table's"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&setup, ops)) = data.split_first() else {
        return;
    };
    let (policy, sim) = match (setup >> 1) & 3 {
        1 => (FencePolicy::Strict, SimConfig::x86()),
        2 => (FencePolicy::Themis, SimConfig::themis()),
        _ => (FencePolicy::Batched, SimConfig::x86()),
    };
    let pool = Pool::simulated(LAYOUT, POOL_SIZE, ROOT_SIZE, sim).expect("a simulated pool");
    let heap = Heap::create(&pool, heap_config(), policy).expect("format the heap");
    let mut model = HashMap::new();
    {
        let config = if setup & 8 != 0 { WIDE } else { CONFIG };
        let table = Cceh::create(&heap, pool.root_offset(), config).expect("create the table");
        pool.operation_completed();
        for (index, op) in ops.chunks_exact(2).take(MAX_OPS).enumerate() {
            step(&table, &mut model, index, [op[0], op[1]]);
            pool.operation_completed();
        }
        let unpersisted: Vec<String> = pool
            .sim()
            .findings()
            .iter()
            .filter(|f| matches!(f, Finding::Unpersisted { .. }))
            .map(|f| f.to_string())
            .collect();
        assert!(unpersisted.is_empty(), "{unpersisted:?}");
    }

    check_image(
        &pool.sim().persisted_image(),
        "the persisted image",
        sim,
        policy,
        &model,
    );
    if setup & 1 == 1 {
        let mut current = vec![0u8; pool.size() as usize];
        pool.read_bytes(0, &mut current)
            .expect("read the whole pool");
        check_image(&current, "the current image", sim, policy, &model);
    }
});
