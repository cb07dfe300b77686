//! Undo-log workloads for the crash cases: transfers between accounts (transactions alone)
//! and allocations and frees in transactions (the allocator), each checked after recovery
//! against the model of the transactions that committed, plus possibly the interrupted one.

use pmem_ordering::sim::{CrashFailure, CrashTest, Report, SimBackend};
use pmem_ordering::{PPtr, Pool};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig, TxError};
use std::sync::Arc;

use crate::fixture::{heap_config, recover_and_walk_heap, recover_heap, simulated_heap_with};
use crate::{crash_test_outcome_with_recovery, SplitMix64};

/// The pools' layout name.
pub const LAYOUT: &str = "undo-cases";
/// 128 KiB of 4 KiB chunks: a few allocations take fresh chunks and runs.
pub const POOL_BYTES: u64 = 128 << 10;
/// Room for the accounts (a line apart) and the allocation slots.
pub const ROOT_BYTES: u64 = 1024;
/// One lane whose log holds a transaction's snapshots.
const HEAP: HeapConfig = heap_config(1, 2048, 4096);

const ACCOUNTS: u64 = 6;
const START: u64 = 1000;
const SLOTS: usize = 8;

fn account(pool: &Arc<Pool<SimBackend>>, i: u64) -> u64 {
    // A cache line apart, so their stores persist independently.
    pool.root_offset() + 64 * i
}

fn slot(pool: &Arc<Pool<SimBackend>>, i: usize) -> u64 {
    pool.root_offset() + 512 + 8 * i as u64
}

/// Judges a recovered state against the model states after each transaction.
fn admitted<T: PartialEq>(states: &[T], now: &T, done: usize) -> bool {
    states.get(done) == Some(now) || states.get(done + 1) == Some(now)
}

/// Crash-tests `n` transfers (seeded) between six accounts, each one transaction under
/// `policy`: recovery (`Heap::open`) must leave the balances of the transfers that committed,
/// or of the interrupted one too, and the total unchanged.
pub fn crash_transfers(
    test: &CrashTest,
    policy: FencePolicy,
    n: usize,
    seed: u64,
) -> Result<Report, Box<CrashFailure>> {
    let mut rng = SplitMix64::new(seed);
    let transfers: Vec<(u64, u64, u64)> = (0..n)
        .map(|_| {
            let from = rng.below(ACCOUNTS);
            (
                from,
                (from + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS,
                rng.below(50) + 1,
            )
        })
        .collect();
    let mut states = vec![vec![START; ACCOUNTS as usize]];
    for &(from, to, amount) in &transfers {
        let mut next = states.last().expect("the initial state").clone();
        // A transfer that would overdraw moves nothing.
        if next[from as usize] >= amount {
            next[from as usize] -= amount;
            next[to as usize] += amount;
        }
        states.push(next);
    }
    crash_test_outcome_with_recovery(
        test,
        |pool| {
            let heap = simulated_heap_with(pool, HEAP, policy);
            heap.transaction(|tx| {
                (0..ACCOUNTS).try_for_each(|i| tx.write_value(account(pool, i), &START))
            })
            .expect("fund the accounts");
        },
        |pool| {
            let heap = Heap::open(pool.clone()).expect("open the heap");
            for &(from, to, amount) in &transfers {
                heap.transaction(|tx| {
                    let a: u64 = tx.read(account(pool, from))?;
                    let b: u64 = tx.read(account(pool, to))?;
                    if a >= amount {
                        tx.write_value(account(pool, from), &(a - amount))?;
                        tx.write_value(account(pool, to), &(b + amount))?;
                    }
                    Ok::<_, TxError>(())
                })
                .expect("a transfer");
                pool.operation_completed();
            }
        },
        |pool| recover_heap(pool).map(drop),
        |pool, crash| {
            let _heap = recover_heap(pool)?;
            let now = (0..ACCOUNTS)
                .map(|i| {
                    pool.read::<u64>(account(pool, i))
                        .map_err(|e| e.to_string())
                })
                .collect::<Result<Vec<u64>, String>>()?;
            let done = crash.operations_completed as usize;
            if !admitted(&states, &now, done) {
                return Err(format!("after {done} transfers the balances are {now:?}"));
            }
            Ok(())
        },
    )
}

/// What the slots hold: (requested size, tag written at the block's start).
type Slots = Vec<Option<(u64, u64)>>;

/// Crash-tests `n` transactions (seeded) under `policy`, each allocating a block for an empty
/// slot (16 B to two chunks, tagged) or freeing a full slot's block: recovery (`Heap::open`)
/// must leave the slots of the transactions that committed, or of the interrupted one too,
/// each block holding its tag, and the heap walk exactly the slots' blocks (no leak, no
/// double allocation).
pub fn crash_allocations(
    test: &CrashTest,
    policy: FencePolicy,
    n: usize,
    seed: u64,
) -> Result<Report, Box<CrashFailure>> {
    let mut rng = SplitMix64::new(seed);
    let toggles: Vec<(usize, u64)> = (0..n)
        .map(|_| {
            let size = [16, 64, 200, 5000][rng.below(4) as usize];
            (rng.below(SLOTS as u64) as usize, size)
        })
        .collect();
    let mut states: Vec<Slots> = vec![vec![None; SLOTS]];
    for (t, &(i, size)) in toggles.iter().enumerate() {
        let mut next = states.last().expect("the initial state").clone();
        next[i] = match next[i] {
            None => Some((size, t as u64 + 1)),
            Some(_) => None,
        };
        states.push(next);
    }
    crash_test_outcome_with_recovery(
        test,
        |pool| {
            simulated_heap_with(pool, HEAP, policy);
        },
        |pool| {
            let heap = Heap::open(pool.clone()).expect("open the heap");
            for (t, &(i, size)) in toggles.iter().enumerate() {
                heap.transaction(|tx| {
                    let at = slot(pool, i);
                    match tx.read::<u64>(at)? {
                        0 => {
                            let p = tx.alloc(size)?;
                            tx.write_value(p.offset(), &(t as u64 + 1))?;
                            tx.write_value(at, &p.offset())
                        }
                        offset => {
                            tx.free(PPtr::<u8>::new(offset))?;
                            tx.write_value(at, &0u64)
                        }
                    }
                })
                .expect("a toggle");
                pool.operation_completed();
            }
        },
        |pool| recover_heap(pool).map(drop),
        |pool, crash| {
            let (_heap, blocks) = recover_and_walk_heap(pool)?;
            let read = |at: u64| pool.read::<u64>(at).map_err(|e| e.to_string());
            let mut now: Slots = Vec::with_capacity(SLOTS);
            let mut owned = Vec::new();
            for i in 0..SLOTS {
                match read(slot(pool, i))? {
                    0 => now.push(None),
                    offset => {
                        let Some(&(_, size)) = blocks.iter().find(|(o, _)| *o == offset) else {
                            return Err(format!("slot {i} points at {offset:#x}, no block"));
                        };
                        owned.push(offset);
                        now.push(Some((size, read(offset)?)));
                    }
                }
            }
            owned.sort_unstable();
            let walked: Vec<u64> = blocks.iter().map(|&(o, _)| o).collect();
            if owned != walked {
                return Err(format!(
                    "the heap holds blocks {walked:x?}, the slots {owned:x?}"
                ));
            }
            // The walk reports usable sizes: compare requested sizes as lower bounds.
            let done = crash.operations_completed as usize;
            let fits = |model: &Slots| {
                model.iter().zip(&now).all(|(m, n)| match (m, n) {
                    (None, None) => true,
                    (Some((want, tag)), Some((got, found))) => got >= want && tag == found,
                    _ => false,
                })
            };
            if !(states.get(done).is_some_and(fits) || states.get(done + 1).is_some_and(fits)) {
                return Err(format!("after {done} transactions the slots hold {now:?}"));
            }
            Ok(())
        },
    )
}
