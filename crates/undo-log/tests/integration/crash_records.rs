//! Record blocks under crashes, with the protocol the byte-key maps follow, modelled by two tiny
//! "maps" (slot words that publish records, and an intent line each) next to transactions that
//! allocate and free blocks of their own:
//!
//! - epoch 1: reserve a block, write the record (its owner and a sequence number first) and
//!   flush it; write the map's intent line (new block, old block) and flush it; one fence;
//! - epoch 2: publish the new block, retire the old one, store and flush the slot; one fence;
//!   then release the old block.
//!
//! Every crash image is recovered as a map would: `Heap::open`, then for each block its intent
//! names, unless its record says another map owns it, `resolve_record(reachable = a slot of
//! the map points at it)`, then `trim_record_chunks`. The heap must then hold exactly the blocks the
//! slots point at (no leak, nothing freed that is reachable), each record intact, the slots
//! must be the state before or after the interrupted operation, and a fresh reservation must
//! not land on a live block. The workload makes intents go stale, naming blocks freed and then
//! reused by a transaction and by the other map's record.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::Arc;

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, Report, SimBackend, SimConfig};
use pmem_ordering::{Backend, PPtr, Pool};
use pmem_test_kit::fixture::{check_chunks, heap_config, recover_heap, simulated_heap_with};
use pmem_test_kit::{run_crash_test, SplitMix64};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig, RecordBlock, TxError};

/// 128 KiB with 4 KiB chunks: record chunks, record runs and transactions' chunks reuse each
/// other's space often.
const POOL_SIZE: u64 = 128 << 10;
const ROOT_SIZE: u64 = 1024;
const HEAP: HeapConfig = heap_config(1, 4096, 4096);

/// Record slots per map; map `m` has slots `m * MAP_SLOTS ..`.
const MAP_SLOTS: usize = 4;
const MAPS: usize = 2;
/// Slots of blocks allocated by transactions, after the maps'.
const TX_SLOTS: usize = 4;
const SLOTS: usize = MAPS * MAP_SLOTS + TX_SLOTS;
/// Where the intent lines start in the root (one 64-byte line per map).
const INTENTS_AT: u64 = 256;

/// One operation of the workload.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// Publish a new record of `size` bytes in a map's slot, retiring the one it replaces.
    Put { slot: usize, size: u64 },
    /// Reserve a record and give it back (the maps' "the key already exists").
    Cancel { size: u64 },
    /// Unpublish a map slot's record.
    Remove { slot: usize },
    /// A transaction allocates a block for an empty transaction slot, or frees its block.
    Toggle { slot: usize, size: u64 },
    /// A transaction frees a map slot's record and empties the slot (a structure removed).
    TxFree { slot: usize },
}

/// What a slot holds: (offset, size asked for, sequence number written in the record).
type Slots = Vec<Option<(u64, u64, u64)>>;

fn map_of(slot: usize) -> usize {
    slot / MAP_SLOTS
}

fn owner_tag(map: usize) -> u64 {
    0x5EC0_0000 + map as u64
}

fn slot_offset<B: Backend>(pool: &Pool<B>, slot: usize) -> u64 {
    pool.root_offset() + 8 * slot as u64
}

fn intent_offset<B: Backend>(pool: &Pool<B>, map: usize) -> u64 {
    pool.root_offset() + INTENTS_AT + 64 * map as u64
}

/// The bytes of a record after its owner and sequence words.
fn body(seq: u64, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (seq.wrapping_mul(41).wrapping_add(i * 5) % 251) as u8 + 1)
        .collect()
}

fn body_len(block_size: u64) -> u64 {
    block_size.min(128) - 16
}

/// Write and flush a record into `block`, and return the flush.
fn write_record<B: Backend>(
    pool: &Pool<B>,
    block: RecordBlock,
    map: usize,
    seq: u64,
) -> pmem_ordering::Pending {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&owner_tag(map).to_le_bytes());
    bytes.extend_from_slice(&seq.to_le_bytes());
    bytes.extend_from_slice(&body(seq, body_len(block.size)));
    pool.flush(pool.write(block.offset, &bytes).unwrap())
}

/// Write and flush a map's intent line: (new offset, new size, old offset, old size).
fn write_intent<B: Backend>(
    pool: &Pool<B>,
    map: usize,
    new: Option<RecordBlock>,
    old: Option<RecordBlock>,
) -> pmem_ordering::Pending {
    let words = [
        new.map_or(0, |b| b.offset),
        new.map_or(0, |b| b.size),
        old.map_or(0, |b| b.offset),
        old.map_or(0, |b| b.size),
    ];
    let w = pool
        .write(intent_offset(pool, map), bytemuck::bytes_of(&words))
        .unwrap();
    pool.flush(w)
}

/// Run one operation on the heap; returns the slots after it.
fn apply<B: Backend>(heap: &Heap<B>, pool: &Pool<B>, op: Op, seq: u64, before: &Slots) -> Slots {
    let mut next = before.clone();
    match op {
        Op::Put { slot, size } => {
            let map = map_of(slot);
            let new = match heap.reserve_record(size) {
                Ok(b) => b,
                Err(TxError::PoolFull { .. }) => return next,
                Err(e) => panic!("reserve {size}: {e}"),
            };
            let old = before[slot].map(|(offset, _, _)| heap.record_block(offset).unwrap());
            // Epoch 1: the record, then the intent; one fence.
            let record = write_record(pool, new, map, seq);
            let intent = write_intent(pool, map, Some(new), old);
            pool.fence(record.and(intent));
            // Epoch 2: the bits and the slot; one fence.
            let mut pending = heap.publish_record(new).unwrap();
            let mut retired = None;
            if let Some(old) = old {
                let (block, p) = heap.retire_record(old.offset).unwrap();
                pending = pending.and(p);
                retired = Some(block);
            }
            let w = pool.store_u64(slot_offset(pool, slot), new.offset).unwrap();
            pool.fence(pending.and(pool.flush(w)));
            // No reader holds the old block any more (one thread).
            if let Some(block) = retired {
                heap.release_record(block).unwrap();
            }
            next[slot] = Some((new.offset, size, seq));
        }
        Op::Cancel { size } => match heap.reserve_record(size) {
            Ok(b) => heap.cancel_record(b).unwrap(),
            Err(TxError::PoolFull { .. }) => {}
            Err(e) => panic!("reserve {size}: {e}"),
        },
        Op::Remove { slot } => {
            let Some((offset, _, _)) = before[slot] else {
                return next;
            };
            let map = map_of(slot);
            let old = heap.record_block(offset).unwrap();
            pool.fence(write_intent(pool, map, None, Some(old)));
            let (block, pending) = heap.retire_record(offset).unwrap();
            let w = pool.store_u64(slot_offset(pool, slot), 0).unwrap();
            pool.fence(pending.and(pool.flush(w)));
            heap.release_record(block).unwrap();
            next[slot] = None;
        }
        Op::TxFree { slot } => {
            let Some((offset, _, _)) = before[slot] else {
                return next;
            };
            heap.transaction(|tx| {
                tx.free(PPtr::<u8>::new(offset))?;
                tx.write_value(slot_offset(pool, slot), &0u64)
            })
            .unwrap();
            next[slot] = None;
        }
        Op::Toggle { slot, size } => {
            let at = slot_offset(pool, slot);
            let result = heap.transaction(|tx| match before[slot] {
                None => {
                    let p = tx.alloc(size)?;
                    tx.write(p.offset(), &body(seq, size.min(64)))?;
                    tx.write_value(at, &p.offset())?;
                    Ok(Some((p.offset(), size, seq)))
                }
                Some((offset, _, _)) => {
                    tx.free(PPtr::<u8>::new(offset))?;
                    tx.write_value(at, &0u64)?;
                    Ok(None)
                }
            });
            match result {
                Ok(entry) => next[slot] = entry,
                Err(TxError::PoolFull { .. }) => {}
                Err(e) => panic!("transaction on slot {slot}: {e}"),
            }
        }
    }
    next
}

/// Run `ops` under the crash harness; every completed operation is one harness operation.
fn run(
    name: &str,
    ops: &[Op],
    points: CrashPoints,
    images: Images,
    fail_on_unpersisted: bool,
) -> Report {
    let states: RefCell<Vec<Slots>> = RefCell::new(vec![vec![None; SLOTS]]);
    let test = CrashTest::new(name, SimConfig::x86())
        .pool("crash-records", POOL_SIZE, ROOT_SIZE)
        .points(points)
        .images(images)
        .seed(0x2EC0)
        .fail_on_unpersisted(fail_on_unpersisted);
    run_crash_test(
        &test,
        |pool| {
            assert_eq!(intent_offset(pool, 0) % 64, 0, "intent lines are lines");
            simulated_heap_with(pool, HEAP, FencePolicy::Batched);
        },
        |pool| {
            let heap = Heap::open(pool.clone()).unwrap();
            for (seq, &op) in ops.iter().enumerate() {
                let before = states.borrow().last().unwrap().clone();
                let after = apply(&heap, pool, op, seq as u64 + 1, &before);
                pool.operation_completed();
                states.borrow_mut().push(after);
            }
        },
        |pool, crash| check(pool, crash.operations_completed as usize, &states.borrow()),
    )
}

/// Recover as a map would: resolve the blocks each intent names that the map owns.
fn resolve_intents(heap: &Heap<SimBackend>, slots: &[u64]) -> Result<(), String> {
    let pool = heap.pool();
    for map in 0..MAPS {
        let intent: [u64; 4] = pool.read(intent_offset(pool, map)).unwrap();
        for (offset, size) in [(intent[0], intent[1]), (intent[2], intent[3])] {
            if offset == 0 {
                continue;
            }
            // A stale intent may name a block another map's record now holds: that map decides
            // it. Anything else is resolved, a transaction's block included, which the
            // allocator must leave alone whatever it is told.
            let tag = pool.read::<u64>(offset).unwrap();
            if (0..MAPS).any(|other| other != map && tag == owner_tag(other)) {
                continue;
            }
            let mine = &slots[map * MAP_SLOTS..(map + 1) * MAP_SLOTS];
            let reachable = mine.contains(&offset);
            heap.resolve_record(offset, size, reachable)
                .map_err(|e| format!("resolving {offset:#x} of map {map}: {e}"))?;
        }
    }
    Ok(())
}

fn check(pool: &Arc<Pool<SimBackend>>, done: usize, states: &[Slots]) -> Result<(), String> {
    let heap = recover_heap(pool)?;
    let slots: Vec<u64> = (0..SLOTS)
        .map(|i| pool.read::<u64>(slot_offset(pool, i)).unwrap())
        .collect();
    resolve_intents(&heap, &slots)?;
    heap.trim_record_chunks()
        .map_err(|e| format!("trimming record chunks: {e}"))?;
    let blocks = heap
        .check_heap()
        .map_err(|e| format!("heap walk failed: {e}"))?;

    // The slots are the state before the interrupted operation, or after it.
    let pointers = |s: &Slots| -> Vec<u64> { s.iter().map(|e| e.map_or(0, |b| b.0)).collect() };
    let state = [done, done + 1]
        .into_iter()
        .filter(|&k| k < states.len())
        .map(|k| &states[k])
        .find(|s| pointers(s) == slots)
        .ok_or_else(|| {
            format!(
                "after {done} operations the slots hold {slots:x?}; the model allows {:x?}{}",
                pointers(&states[done]),
                states
                    .get(done + 1)
                    .map(|s| format!(" or {:x?}", pointers(s)))
                    .unwrap_or_default()
            )
        })?;

    // Allocated blocks are exactly the reachable ones.
    let referenced: BTreeSet<u64> = slots.iter().copied().filter(|&p| p != 0).collect();
    let walked: BTreeSet<u64> = blocks.iter().map(|b| b.0).collect();
    if walked != referenced {
        let leaked: Vec<_> = walked.difference(&referenced).collect();
        let dangling: Vec<_> = referenced.difference(&walked).collect();
        return Err(format!(
            "the heap walk disagrees with the slots: leaked {leaked:x?}, not allocated {dangling:x?}"
        ));
    }
    for (a, b) in blocks.iter().zip(blocks.iter().skip(1)) {
        if a.0 + a.1 > b.0 {
            return Err(format!("blocks {a:x?} and {b:x?} overlap"));
        }
    }
    // Each record is a record block holding what its map wrote; each transaction's block is not
    // a record block.
    for (slot, entry) in state.iter().enumerate() {
        let Some((offset, size, seq)) = *entry else {
            continue;
        };
        let record = heap.record_block(offset);
        if slot >= MAPS * MAP_SLOTS {
            if record.is_some() {
                return Err(format!(
                    "slot {slot}: a transaction's block is a record block"
                ));
            }
            continue;
        }
        let Some(record) = record else {
            return Err(format!(
                "slot {slot}: {offset:#x} is not a published record block"
            ));
        };
        if record.size < size {
            return Err(format!("slot {slot}: {record:?} for {size} bytes"));
        }
        let head: [u64; 2] = pool.read(offset).unwrap();
        let mut rest = vec![0u8; body_len(record.size) as usize];
        pool.read_bytes(offset + 16, &mut rest).unwrap();
        if head != [owner_tag(map_of(slot)), seq] || rest != body(seq, rest.len() as u64) {
            return Err(format!(
                "slot {slot}: the record at {offset:#x} lost its contents"
            ));
        }
    }
    let stats = heap.alloc_stats();
    if stats.objects != blocks.len() as u64 {
        return Err(format!(
            "{stats:?} but the walk found {} blocks",
            blocks.len()
        ));
    }
    // No chunk lost: record chunks a crash left empty were trimmed.
    check_chunks(&heap, &blocks)?;
    // What is free is really free: a fresh reservation never lands on a reachable block.
    for size in [64, 100, 1000, 5000] {
        match heap.reserve_record(size) {
            Ok(b) => {
                if let Some(live) = blocks
                    .iter()
                    .find(|l| b.offset < l.0 + l.1 && l.0 < b.offset + b.size)
                {
                    return Err(format!(
                        "after recovery, reserve_record({size}) returned {b:x?}, over the live block {live:x?}"
                    ));
                }
            }
            Err(TxError::PoolFull { .. }) => {}
            Err(e) => return Err(format!("reserve_record({size}) after recovery: {e}")),
        }
    }
    Ok(())
}

fn put(slot: usize, size: u64) -> Op {
    Op::Put { slot, size }
}

fn remove(slot: usize) -> Op {
    Op::Remove { slot }
}

fn toggle(slot: usize, size: u64) -> Op {
    Op::Toggle {
        slot: MAPS * MAP_SLOTS + slot,
        size,
    }
}

/// Map 0 has slots 0..4, map 1 slots 4..8. Chunks are taken lowest first, so the comments can
/// say where each block lands.
fn small() -> Vec<Op> {
    vec![
        put(0, 100),             // A: a fresh 128 B record chunk, slot 0
        put(4, 100),             // B: slot 1 of that chunk, map 1's
        put(0, 120),             // A2 replaces A (slot 2); A is released
        put(1, 5000),            // R: a two-chunk record run
        Op::Cancel { size: 64 }, // a 64 B record chunk formatted, then given back
        remove(1),               // R released: map 0's intent names it from now on
        toggle(0, 3000),         // a transaction's run on R's first chunk: R's stale intent
        remove(4),               // B released: map 1's intent names it from now on
        put(2, 90),              // slot 0 of the 128 B chunk again (A's place)
        put(3, 110),             // slot 1 (B's place) for map 0: map 1's stale intent names it
        toggle(1, 64),           // a transaction's 64 B chunk
        toggle(0, 0),            // the transaction's run freed
        put(5, 2000),            // a one-chunk record run of map 1 where R began
        remove(0),               // A2 released
        remove(2),
        remove(3),      // the 128 B record chunk is empty: back to the free pool
        toggle(2, 100), // a transaction's 128 B chunk over it (A's place)
        toggle(3, 100), // and B's place: map 0's intent names a transaction's block
        put(6, 64),
        put(6, 1),
        remove(5),
        put(7, 64),             // next to slot 6's record
        Op::TxFree { slot: 6 }, // a transaction frees a record beside a live one
        Op::TxFree { slot: 7 }, // and the chunk's last: the chunk goes back in it
        put(1, 9000),           // a record run
        Op::TxFree { slot: 1 }, // freed by a transaction
    ]
}

/// The words of each map's intent line.
type Intents = [[u64; 4]; MAPS];

/// The slots, the intent lines and the record chunks after each operation of `ops`, on an
/// anonymous pool.
fn replay(ops: &[Op]) -> Vec<(Slots, Intents, u64)> {
    let pool = Arc::new(
        Pool::anonymous("crash-records", POOL_SIZE, &{
            pmem_ordering::PoolOptions::new().root_size(ROOT_SIZE)
        })
        .unwrap(),
    );
    let heap = Heap::create(pool.clone(), HEAP, FencePolicy::Batched).unwrap();
    let mut slots: Slots = vec![None; SLOTS];
    let mut out = Vec::new();
    for (seq, &op) in ops.iter().enumerate() {
        slots = apply(&heap, &pool, op, seq as u64 + 1, &slots);
        let intents = [0, 1].map(|m| pool.read(intent_offset(&pool, m)).unwrap());
        out.push((slots.clone(), intents, heap.alloc_stats().record_chunks));
    }
    out
}

#[test]
fn the_small_workload_leaves_intents_stale_over_reused_blocks() {
    let ops = small();
    let after = replay(&ops);
    let tx_slot = |i: usize, slot: usize| after[i].0[MAPS * MAP_SLOTS + slot].unwrap().0;
    let record = |i: usize, slot: usize| after[i].0[slot].unwrap().0;
    // After the transaction's run (op 7): map 0's intent names the released run R, whose first
    // chunk the transaction's run now starts.
    assert_eq!(after[6].1[0][2], tx_slot(6, 0));
    // After op 10: map 1's intent names B, now map 0's record in slot 3.
    assert_eq!(after[9].1[1][2], record(9, 3));
    // After op 18: map 0's intent names B's place, the last record of the 128 B chunk, where
    // a transaction's block now is.
    assert_eq!(after[17].1[0][2], tx_slot(17, 3));
    // The transactions that free slot 6's and 7's records (ops 23, 24) give their chunk back
    // with the last.
    assert!(matches!(ops[23], Op::TxFree { slot: 7 }));
    assert_eq!((after[21].2, after[22].2, after[23].2), (1, 1, 0));
    // A one-chunk record run where R began (op 13).
    assert_eq!(record(12, 5), after[5].1[0][2]);
}

#[test]
fn the_maps_protocol_every_event_x86() {
    let ops = small();
    let r = run(
        "records-small",
        &ops,
        CrashPoints::Every,
        Images::Enumerate {
            limit: 256,
            fallback: 12,
        },
        true,
    );
    assert_eq!(r.operations, ops.len() as u64);
    assert_eq!(r.points, r.events + 1);
}

/// Operations on random slots of random sizes, until the pool fills now and then.
fn random_ops(seed: u64, count: usize) -> Vec<Op> {
    let sizes = [
        1u64, 64, 100, 200, 500, 1000, 1024, 1025, 3000, 5000, 9000, 13000, 20000,
    ];
    let mut rng = SplitMix64::new(seed);
    (0..count)
        .map(|_| {
            let size = sizes[rng.below(sizes.len() as u64) as usize];
            match rng.below(10) {
                0..=4 => put(rng.below((MAPS * MAP_SLOTS) as u64) as usize, size),
                5..=6 => remove(rng.below((MAPS * MAP_SLOTS) as u64) as usize),
                7 if rng.below(2) == 0 => Op::Cancel { size },
                7 => Op::TxFree {
                    slot: rng.below((MAPS * MAP_SLOTS) as u64) as usize,
                },
                _ => toggle(rng.below(TX_SLOTS as u64) as usize, size),
            }
        })
        .collect()
}

/// The seed of the random workload, chosen for a sequence that reaches the states
/// `the_random_workload_fills_the_pool_and_reuses_space` asks for.
const RANDOM_SEED: u64 = 2;

#[test]
fn random_operations_sampled_x86() {
    let ops = random_ops(RANDOM_SEED, 150);
    let r = run(
        "records-random",
        &ops,
        CrashPoints::Sample(1500),
        Images::Random(3),
        false,
    );
    assert!(r.points > 1000, "{r:?}");
}

/// The random workload is only worth its time if it reaches the interesting states: a full
/// pool, several record runs, intents gone stale over blocks in use again.
#[test]
fn the_random_workload_fills_the_pool_and_reuses_space() {
    let (full, runs, stale) = reached(RANDOM_SEED);
    assert!(full >= 1, "the pool never filled");
    assert!(runs >= 3, "few record runs live at once: {runs}");
    assert!(stale >= 5, "few stale intents over reused blocks: {stale}");
}

/// What the random workload of `seed` reaches on an anonymous pool of the crash test's size:
/// (operations that met a full pool, the most record runs live at once, stale intents naming
/// a block in use, summed over the operations).
fn reached(seed: u64) -> (u64, u64, u64) {
    let pool = Arc::new(
        Pool::anonymous("crash-records", POOL_SIZE, &{
            pmem_ordering::PoolOptions::new().root_size(ROOT_SIZE)
        })
        .unwrap(),
    );
    let heap = Heap::create(pool.clone(), HEAP, FencePolicy::Batched).unwrap();
    let mut slots: Slots = vec![None; SLOTS];
    let (mut full, mut runs, mut stale) = (0, 0, 0);
    for (seq, op) in random_ops(seed, 150).into_iter().enumerate() {
        let free_before = heap.alloc_stats().bytes_free;
        let after = apply(&heap, &pool, op, seq as u64 + 1, &slots);
        if matches!(op, Op::Put { .. } | Op::Toggle { .. })
            && after == slots
            && heap.alloc_stats().bytes_free == free_before
        {
            full += 1;
        }
        slots = after;
        runs = runs.max(
            slots
                .iter()
                .flatten()
                .filter(|e| heap.record_block(e.0).is_some_and(|b| b.size >= 4096))
                .count(),
        );
        // An intent naming a block that is no record of its map any more.
        for map in 0..MAPS {
            let intent: [u64; 4] = pool.read(intent_offset(&pool, map)).unwrap();
            for offset in [intent[0], intent[2]] {
                let live = slots[map * MAP_SLOTS..(map + 1) * MAP_SLOTS]
                    .iter()
                    .flatten()
                    .any(|e| e.0 == offset);
                if offset != 0 && !live && heap.check_heap().unwrap().iter().any(|b| b.0 == offset)
                {
                    stale += 1;
                }
            }
        }
    }
    (full, runs as u64, stale)
}
