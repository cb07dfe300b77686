//! Bank transfers under crashes: the total is preserved, and the balances equal the model after
//! the transfers that completed, plus possibly the interrupted one.

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimBackend, SimConfig};
use pmem_ordering::Pool;
use pmem_test_kit::crash_test_outcome;
use pmem_test_kit::fixture::{heap_config, recover_heap, simulated_heap_with};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig, TxError};
use std::sync::Arc;

const ACCOUNTS: u64 = 6;
const START: u64 = 1000;
/// One lane whose log holds a transfer's two snapshots.
const BANK_HEAP: HeapConfig = heap_config(1, 1024, 4096);

/// Transfers (from, to, amount): a fixed sequence, so the model is known.
fn transfers() -> Vec<(u64, u64, u64)> {
    (0..5u64)
        .map(|i| (i % ACCOUNTS, (i * 5 + 1) % ACCOUNTS, 10 + i))
        .collect()
}

fn balances_after(n: usize) -> Vec<u64> {
    let mut b = vec![START; ACCOUNTS as usize];
    for &(from, to, amount) in &transfers()[..n] {
        b[from as usize] -= amount;
        b[to as usize] += amount;
    }
    b
}

fn account(pool: &Arc<Pool<SimBackend>>, i: u64) -> u64 {
    // Accounts a cache line apart, so their stores persist independently.
    pool.root_offset() + 64 * i
}

fn run(policy: FencePolicy, sim: SimConfig) -> Result<(), String> {
    let test = CrashTest::new(&format!("bank-{}", policy.name()), sim)
        .pool("bank", 64 << 10, 1024)
        .points(CrashPoints::Every)
        .images(Images::Random(6));
    crash_test_outcome(
        &test,
        |pool| {
            let heap = simulated_heap_with(pool, BANK_HEAP, policy);
            heap.transaction(|tx| {
                for i in 0..ACCOUNTS {
                    tx.write_value(account(pool, i), &START)?;
                }
                Ok::<_, TxError>(())
            })
            .unwrap();
        },
        |pool| {
            let heap = Heap::open(pool.clone()).unwrap();
            for (from, to, amount) in transfers() {
                heap.transaction(|tx| {
                    let a: u64 = tx.read(account(pool, from))?;
                    let b: u64 = tx.read(account(pool, to))?;
                    tx.write_value(account(pool, from), &(a - amount))?;
                    tx.write_value(account(pool, to), &(b + amount))
                })
                .unwrap();
                pool.operation_completed();
            }
        },
        |pool, crash| {
            let heap = recover_heap(pool)?;
            let now: Vec<u64> = (0..ACCOUNTS)
                .map(|i| pool.read::<u64>(account(pool, i)).unwrap())
                .collect();
            let done = crash.operations_completed as usize;
            let total: u64 = now.iter().sum();
            if total != START * ACCOUNTS {
                return Err(format!("total is {total}: {now:?}"));
            }
            let ok = now == balances_after(done)
                || (done < transfers().len() && now == balances_after(done + 1));
            if !ok {
                return Err(format!("after {done} transfers the balances are {now:?}"));
            }
            drop(heap);
            Ok(())
        },
    )
    .map(|_| ())
    .map_err(|f| f.to_string())
}

#[test]
fn strict_survives_every_crash_under_x86() {
    run(FencePolicy::Strict, SimConfig::x86()).unwrap();
}

#[test]
fn batched_survives_every_crash_under_x86() {
    run(FencePolicy::Batched, SimConfig::x86()).unwrap();
}

#[test]
fn themis_policy_is_caught_under_x86() {
    let failure = run(FencePolicy::Themis, SimConfig::x86()).unwrap_err();
    assert!(failure.contains("bank-themis"), "{failure}");
}

#[test]
fn themis_policy_survives_every_crash_under_themis() {
    run(FencePolicy::Themis, SimConfig::themis()).unwrap();
}

#[test]
fn strict_and_batched_survive_under_themis_too() {
    run(FencePolicy::Strict, SimConfig::themis()).unwrap();
    run(FencePolicy::Batched, SimConfig::themis()).unwrap();
}
