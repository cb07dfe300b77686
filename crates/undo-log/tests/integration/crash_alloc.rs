//! Allocations and frees under crashes: after recovery the heap walk holds exactly the blocks
//! the root's pointer array references (nothing leaked, nothing handed out twice), each with
//! the contents written when it was allocated, and the array equals the model after the
//! transactions that completed, plus possibly the interrupted one.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::Arc;

use pmem_ordering::sim::{
    CrashFailure, CrashPoints, CrashTest, Finding, Images, Report, SimConfig,
};
use pmem_ordering::{Backend, PPtr, Pool};
use pmem_test_kit::crash_test_outcome;
use pmem_test_kit::fixture::{
    check_chunks, heap_config, recover_and_walk_heap, simulated_heap_with,
};
use pmem_test_kit::SplitMix64;
use pmem_undo_log::{FencePolicy, Heap, HeapConfig, TxError};

/// Pointer slots in the root: slot `i` is the `u64` at `root + 8 * i` (0 = empty).
const SLOTS: usize = 16;
/// 128 KiB with 4 KiB chunks: 29 usable chunks, so runs and fresh chunks come often.
const POOL_SIZE: u64 = 128 << 10;
const ROOT_SIZE: u64 = 1024;
/// One lane whose log holds a transaction of a few toggles, and the smallest chunks.
const ALLOC_HEAP: HeapConfig = heap_config(1, 2048, 4096);

/// Toggle a slot: allocate a block of `size` bytes for it if it is empty, free its block
/// otherwise. Toggling one slot twice in a transaction allocates and frees in it.
#[derive(Clone, Copy, Debug)]
struct Toggle {
    slot: usize,
    size: u64,
}

/// What each slot holds: (offset, requested size, seed of the contents).
type Slots = Vec<Option<(u64, u64, u64)>>;

fn slot_offset<B: Backend>(pool: &Pool<B>, slot: usize) -> u64 {
    pool.root_offset() + 8 * slot as u64
}

/// Bytes written into a block: the head (up to 128 bytes) and, for larger blocks, the last 8.
fn head(seed: u64, size: u64) -> Vec<u8> {
    (0..size.min(128))
        .map(|i| (seed.wrapping_mul(37).wrapping_add(i * 3) % 253) as u8 + 1)
        .collect()
}

fn tail(seed: u64) -> [u8; 8] {
    (seed ^ 0xA5A5_5A5A_0F0F_F0F0).to_le_bytes()
}

/// Run `transactions` under the crash harness.
fn run(
    name: &str,
    policy: FencePolicy,
    order: Order,
    sim: SimConfig,
    transactions: &[Vec<Toggle>],
    points: CrashPoints,
    images: Images,
) -> Result<Report, Box<CrashFailure>> {
    // states[k]: the slots after k transactions (an aborted one changes nothing).
    let states: RefCell<Vec<Slots>> = RefCell::new(vec![vec![None; SLOTS]]);
    let aborted: RefCell<Vec<u64>> = RefCell::new(Vec::new());
    let test = CrashTest::new(&format!("{name}-{}", policy.name()), sim)
        .pool("crash-alloc", POOL_SIZE, ROOT_SIZE)
        .points(points)
        .images(images)
        .seed(0xA110C);
    let report = crash_test_outcome(
        &test,
        |pool| {
            simulated_heap_with(pool, ALLOC_HEAP, policy);
        },
        |pool| {
            let heap = Heap::open(pool.clone()).unwrap();
            for (t, toggles) in transactions.iter().enumerate() {
                let before = states.borrow().last().unwrap().clone();
                let result = heap.transaction(|tx| {
                    let mut next = before.clone();
                    let mut slot_writes = Vec::new();
                    for &Toggle { slot, size } in toggles {
                        let at = slot_offset(pool, slot);
                        match next[slot] {
                            None => {
                                let seed = (t * SLOTS + slot) as u64;
                                let p = tx.alloc(size)?;
                                tx.write(p.offset(), &head(seed, size))?;
                                if size > 128 {
                                    tx.write(p.offset() + size - 8, &tail(seed))?;
                                }
                                slot_writes.push((at, p.offset()));
                                next[slot] = Some((p.offset(), size, seed));
                            }
                            Some((offset, _, _)) => {
                                tx.free(PPtr::<u8>::new(offset))?;
                                slot_writes.push((at, 0));
                                next[slot] = None;
                            }
                        }
                        if order == Order::Interleaved {
                            for (at, p) in slot_writes.drain(..) {
                                tx.write_value(at, &p)?;
                            }
                        }
                    }
                    for (at, p) in slot_writes {
                        tx.write_value(at, &p)?;
                    }
                    Ok::<_, TxError>(next)
                });
                let after = match result {
                    Ok(next) => next,
                    // Rolled back whole: the model does not change.
                    Err(TxError::PoolFull { .. }) => {
                        aborted.borrow_mut().push(t as u64);
                        before
                    }
                    Err(e) => panic!("transaction {t}: {e}"),
                };
                pool.operation_completed();
                states.borrow_mut().push(after);
            }
        },
        |pool, crash| check(pool, crash, policy, &states.borrow()),
    )?;
    check_findings(&report, &aborted.borrow());
    Ok(report)
}

/// Every committed transaction returns with its stores persistent. A rolled-back one may leave
/// unflushed stores behind, in blocks it had allocated (and gave back) and in the bitmap of a
/// chunk it had taken from the free pool, whose contents mean nothing; the simulator reports
/// those lines at every later operation until something flushes them.
fn check_findings(report: &Report, aborted: &[u64]) {
    let mut residue = BTreeSet::new();
    for f in report.unpersisted() {
        let Finding::Unpersisted {
            operation, lines, ..
        } = f
        else {
            continue;
        };
        if aborted.contains(operation) {
            residue.extend(lines.iter().copied());
        } else {
            assert!(
                lines.iter().all(|l| residue.contains(l)),
                "a committed transaction left stores unpersisted: {f}"
            );
        }
    }
}

fn check<B: Backend>(
    pool: &Arc<Pool<B>>,
    crash: &pmem_ordering::sim::Crash,
    policy: FencePolicy,
    states: &[Slots],
) -> Result<(), String> {
    let (heap, blocks) = recover_and_walk_heap(pool)?;
    if heap.policy() != policy {
        return Err(format!(
            "recovered under the {} policy, created under {}",
            heap.policy().name(),
            policy.name()
        ));
    }
    let slots: Vec<u64> = (0..SLOTS)
        .map(|i| pool.read::<u64>(slot_offset(pool, i)).unwrap())
        .collect();
    let done = crash.operations_completed as usize;
    let pointers = |s: &Slots| -> Vec<u64> { s.iter().map(|e| e.map_or(0, |b| b.0)).collect() };
    let state = [done, done + 1]
        .into_iter()
        .filter(|&k| k < states.len())
        .map(|k| &states[k])
        .find(|s| pointers(s) == slots)
        .ok_or_else(|| {
            format!(
                "after {done} transactions the slots hold {slots:x?}; the model allows {:x?}{}",
                pointers(&states[done]),
                states
                    .get(done + 1)
                    .map(|s| format!(" or {:x?}", pointers(s)))
                    .unwrap_or_default()
            )
        })?;

    // The heap walk holds exactly the referenced blocks.
    let referenced: BTreeSet<u64> = slots.iter().copied().filter(|&p| p != 0).collect();
    let walked: BTreeSet<u64> = blocks.iter().map(|b| b.0).collect();
    if walked != referenced {
        let leaked: Vec<_> = walked.difference(&referenced).collect();
        let dangling: Vec<_> = referenced.difference(&walked).collect();
        return Err(format!(
            "the heap walk disagrees with the slots: leaked {leaked:x?}, not allocated {dangling:x?}"
        ));
    }
    for (&(offset, size), w) in blocks.iter().zip(blocks.iter().skip(1)) {
        if offset + size > w.0 {
            return Err(format!("blocks {offset:#x}+{size} and {:#x} overlap", w.0));
        }
    }
    // Each block is big enough and holds what was written into it.
    for (i, entry) in state.iter().enumerate() {
        let Some((offset, size, seed)) = *entry else {
            continue;
        };
        let &(_, block) = blocks.iter().find(|b| b.0 == offset).expect("walked");
        if block < size {
            return Err(format!("slot {i}: a {block}-byte block for {size} bytes"));
        }
        let mut buf = vec![0u8; size.min(128) as usize];
        pool.read_bytes(offset, &mut buf).unwrap();
        if buf != head(seed, size) {
            return Err(format!(
                "slot {i}: the block at {offset:#x} lost its contents"
            ));
        }
        if size > 128 && pool.read::<[u8; 8]>(offset + size - 8).unwrap() != tail(seed) {
            return Err(format!(
                "slot {i}: the end of the block at {offset:#x} is wrong"
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
    check_chunks(&heap, &blocks)?;
    // The free lists were rebuilt from the pool: what is allocated now is really free.
    for size in [64, 4096] {
        match heap.transaction(|tx| tx.alloc(size)) {
            Ok(p) => {
                if let Some(b) = blocks
                    .iter()
                    .find(|b| p.offset() + size > b.0 && p.offset() < b.0 + b.1)
                {
                    return Err(format!(
                        "after recovery, alloc({size}) returned {:#x}, inside the live block {b:x?}",
                        p.offset()
                    ));
                }
            }
            Err(TxError::PoolFull { .. }) => {}
            Err(e) => return Err(format!("alloc({size}) after recovery: {e}")),
        }
    }
    Ok(())
}

/// When a transaction writes the slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    /// Each slot right after its allocation or free.
    Interleaved,
    /// All slots after all the allocations and frees: consecutive allocator intents of one
    /// bitmap word then share one log entry (rewritten in place as it grows).
    SlotsLast,
}

fn t(slot: usize, size: u64) -> Toggle {
    Toggle { slot, size }
}

/// A small workload, every event crashed: small classes, runs of 1-3 chunks, fresh chunks,
/// a chunk emptied by frees, alloc and free in one transaction.
fn small() -> Vec<Vec<Toggle>> {
    vec![
        vec![t(0, 100), t(1, 3000)],
        vec![t(2, 64), t(3, 9000)],
        vec![t(0, 0), t(4, 200), t(5, 40)],
        vec![t(3, 0), t(6, 5000), t(7, 500)],
        vec![t(2, 0), t(4, 0), t(5, 0)],
        vec![t(8, 1000), t(8, 0), t(1, 0), t(9, 64)],
        vec![t(6, 0), t(7, 0), t(9, 0)],
    ]
}

/// Many small blocks allocated and freed per transaction, in few chunks: with the slots written
/// last, their intents merge into shared entries; chunks are formatted and emptied.
fn merged() -> Vec<Vec<Toggle>> {
    vec![
        (0..6).map(|i| t(i, 64)).chain([t(6, 100)]).collect(),
        vec![t(0, 0), t(1, 0), t(2, 0), t(7, 64)],
        vec![t(3, 0), t(4, 0), t(5, 0), t(6, 0), t(8, 3000)],
        (0..5).map(|i| t(i, 64)).collect(),
        (0..5).map(|i| t(i, 0)).chain([t(7, 0), t(8, 0)]).collect(),
    ]
}

/// A larger seeded workload, sampled: random toggles of random sizes, until the pool fills
/// now and then (a transaction that meets `PoolFull` rolls back whole).
fn large() -> Vec<Vec<Toggle>> {
    random_toggles(LARGE_SEED)
}

/// The seed of the large workload, chosen for a sequence that fills the pool several times
/// (checked by `the_large_workload_fills_the_pool_and_uses_runs`).
const LARGE_SEED: u64 = 3;

/// 80 transactions of 1-3 toggles of random slots and sizes.
fn random_toggles(seed: u64) -> Vec<Vec<Toggle>> {
    let sizes = [
        1u64, 40, 64, 65, 100, 200, 300, 512, 700, 1000, 1024, 1025, 3000, 4096, 5000, 8192, 9000,
        13000, 20000,
    ];
    let mut rng = SplitMix64::new(seed);
    (0..80)
        .map(|_| {
            (0..1 + rng.below(3))
                .map(|_| {
                    t(
                        rng.below(SLOTS as u64) as usize,
                        sizes[rng.below(sizes.len() as u64) as usize],
                    )
                })
                .collect()
        })
        .collect()
}

fn expect_caught(result: Result<Report, Box<CrashFailure>>) {
    let failure = result.expect_err("the themis policy must fail under the x86 model");
    assert!(
        failure.crash.is_some(),
        "caught by a crash image, not by something else: {failure}"
    );
}

#[test]
fn small_workload_every_event_strict_x86() {
    let r = run(
        "alloc-small",
        FencePolicy::Strict,
        Order::Interleaved,
        SimConfig::x86(),
        &small(),
        CrashPoints::Every,
        Images::Random(6),
    )
    .unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(r.operations, small().len() as u64);
    assert_eq!(r.points, r.events + 1);
}

#[test]
fn small_workload_every_event_batched_x86() {
    run(
        "alloc-small",
        FencePolicy::Batched,
        Order::Interleaved,
        SimConfig::x86(),
        &small(),
        CrashPoints::Every,
        Images::Random(6),
    )
    .unwrap_or_else(|f| panic!("{f}"));
}

#[test]
fn small_workload_themis_policy_is_caught_under_x86() {
    expect_caught(run(
        "alloc-small",
        FencePolicy::Themis,
        Order::Interleaved,
        SimConfig::x86(),
        &small(),
        CrashPoints::Every,
        Images::Random(6),
    ));
}

#[test]
fn small_workload_every_event_themis_under_themis() {
    for policy in [FencePolicy::Themis, FencePolicy::Batched] {
        run(
            "alloc-small",
            policy,
            Order::Interleaved,
            SimConfig::themis(),
            &small(),
            CrashPoints::Every,
            Images::Random(6),
        )
        .unwrap_or_else(|f| panic!("{f}"));
    }
}

#[test]
fn merged_intents_workload_every_event_strict_and_batched_x86() {
    for policy in [FencePolicy::Strict, FencePolicy::Batched] {
        let r = run(
            "alloc-merged",
            policy,
            Order::SlotsLast,
            SimConfig::x86(),
            &merged(),
            CrashPoints::Every,
            Images::Random(2),
        )
        .unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(r.operations, merged().len() as u64);
        assert_eq!(r.points, r.events + 1);
    }
}

#[test]
fn merged_intents_workload_themis_policy_is_caught_under_x86() {
    expect_caught(run(
        "alloc-merged",
        FencePolicy::Themis,
        Order::SlotsLast,
        SimConfig::x86(),
        &merged(),
        CrashPoints::Every,
        Images::Random(2),
    ));
}

#[test]
fn large_workload_sampled_strict_and_batched_x86() {
    for policy in [FencePolicy::Strict, FencePolicy::Batched] {
        let r = run(
            "alloc-large",
            policy,
            Order::Interleaved,
            SimConfig::x86(),
            &large(),
            CrashPoints::Sample(1500),
            Images::Random(3),
        )
        .unwrap_or_else(|f| panic!("{f}"));
        assert!(r.points > 1000, "{r:?}");
    }
}

#[test]
fn large_workload_themis_policy_is_caught_under_x86() {
    expect_caught(run(
        "alloc-large",
        FencePolicy::Themis,
        Order::Interleaved,
        SimConfig::x86(),
        &large(),
        CrashPoints::Sample(1500),
        Images::Random(3),
    ));
}

#[test]
fn large_workload_sampled_themis_under_themis() {
    run(
        "alloc-large",
        FencePolicy::Themis,
        Order::Interleaved,
        SimConfig::themis(),
        &large(),
        CrashPoints::Sample(1500),
        Images::Random(3),
    )
    .unwrap_or_else(|f| panic!("{f}"));
}

/// What `workload` reaches on an anonymous pool of the crash tests' size: (transactions that met
/// a full pool, the most runs live at once, blocks freed).
fn reached_states(workload: &[Vec<Toggle>]) -> (u64, usize, u64) {
    let pool = Arc::new(
        Pool::anonymous("crash-alloc", POOL_SIZE, &{
            pmem_ordering::PoolOptions::new().root_size(ROOT_SIZE)
        })
        .unwrap(),
    );
    let heap = Heap::create(pool.clone(), ALLOC_HEAP, FencePolicy::Batched).unwrap();
    let mut slots: Slots = vec![None; SLOTS];
    let (mut full, mut runs, mut frees) = (0, 0, 0);
    for toggles in workload {
        let result = heap.transaction(|tx| {
            let mut next = slots.clone();
            let mut freed = 0;
            for Toggle { slot, size } in toggles.iter().copied() {
                match next[slot] {
                    None => {
                        let p = tx.alloc(size)?;
                        next[slot] = Some((p.offset(), size, 0));
                    }
                    Some((offset, _, _)) => {
                        tx.free(PPtr::<u8>::new(offset))?;
                        next[slot] = None;
                        freed += 1;
                    }
                }
            }
            Ok::<_, TxError>((next, freed))
        });
        match result {
            Ok((next, freed)) => {
                slots = next;
                frees += freed;
            }
            Err(TxError::PoolFull { .. }) => full += 1,
            Err(e) => panic!("{e}"),
        }
        runs = runs.max(
            heap.check_heap()
                .unwrap()
                .iter()
                .filter(|b| b.1 >= 4096)
                .count(),
        );
    }
    (full, runs, frees)
}

#[test]
fn the_large_workload_fills_the_pool_and_uses_runs() {
    // The sampled workload is only worth its time if it reaches the interesting states.
    let (full, runs, frees) = reached_states(&large());
    assert!(full >= 1, "the pool never filled");
    assert!(runs >= 3, "few runs: {runs}");
    assert!(frees >= 20, "few frees: {frees}");
}
