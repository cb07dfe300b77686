//! What transactions and the allocator promise, on ordinary (non-simulated) pools: rollback on
//! `Err` and on panic, flattened nesting, the typed errors of the log and the allocator, the
//! allocator's bookkeeping, reopening a file pool, and concurrent use.

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use pmem_ordering::{Granularity, PPtr, Pool, PoolOptions};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig, Layout, TxError};

// ------------------------------------------------------------------------------------ helpers

fn anon(size: u64) -> Arc<Pool> {
    Arc::new(Pool::anonymous("semantics", size, &PoolOptions::new()).unwrap())
}

fn config(lanes: u64, lane_log_bytes: u64, chunk_size: u64) -> HeapConfig {
    HeapConfig {
        lanes,
        lane_log_bytes,
        chunk_size,
    }
}

fn new_heap(policy: FencePolicy, size: u64, config: HeapConfig) -> Heap {
    Heap::create(anon(size), config, policy).unwrap()
}

/// A heap with 2 lanes of 4 KiB, 16 KiB chunks, in a 1 MiB pool.
fn small_heap(policy: FencePolicy) -> Heap {
    new_heap(policy, 1 << 20, config(2, 4096, 16 << 10))
}

fn bytes(pool: &Pool, offset: u64, len: u64) -> Vec<u8> {
    let mut buf = vec![0u8; len as usize];
    pool.read_bytes(offset, &mut buf).unwrap();
    buf
}

/// A recognisable pattern for `len` bytes.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8 + 1)
        .collect()
}

/// Run `f` on another thread and fail if it does not finish in time (a lane leaked by a
/// transaction would make the next one wait forever).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what} did not finish: a lane was never released"))
}

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The error type of an application using the heap.
#[derive(Debug)]
enum AppError {
    Tx(TxError),
    Refused(u32),
}

impl From<TxError> for AppError {
    fn from(e: TxError) -> Self {
        AppError::Tx(e)
    }
}

fn alloc_one(heap: &Heap, size: u64) -> PPtr<u8> {
    heap.transaction(|tx| {
        let p = tx.alloc(size)?;
        tx.write(p.offset(), &pattern(size, size.min(256) as usize))?;
        Ok::<_, TxError>(p)
    })
    .unwrap()
}

fn free_one(heap: &Heap, p: PPtr<u8>) {
    heap.transaction(|tx| tx.free(p)).unwrap();
}

fn offsets(blocks: &[(u64, u64)]) -> BTreeSet<u64> {
    blocks.iter().map(|b| b.0).collect()
}

// --------------------------------------------------------------------- rollback on Err / panic

#[test]
fn err_rolls_back_every_write_and_returns_the_users_error() {
    for policy in FencePolicy::ALL {
        let heap = small_heap(policy);
        let pool = heap.pool();
        let root = pool.root_offset();
        heap.transaction(|tx| tx.write(root, &pattern(1, 1024)))
            .unwrap();
        let old_block = alloc_one(&heap, 300);
        let data_before = bytes(pool, root, 1024);
        let heap_before = heap.check_heap().unwrap();
        let stats_before = heap.tx_stats();

        let result: Result<(), AppError> = heap.transaction(|tx| {
            tx.write(root, &[0xAA; 100])?;
            tx.write(root + 50, &[0xBB; 250])?; // overlaps the first write
            tx.write_value(root + 512, &u64::MAX)?;
            tx.write(root, &[0xCC; 8])?; // again, already snapshotted
            tx.snapshot(root + 700, 100)?;
            tx.write(root + 720, &[0xDD; 10])?;
            let fresh = tx.alloc(5000)?;
            tx.write(fresh.offset(), &[0xEE; 5000])?;
            tx.free(old_block)?;
            Err(AppError::Refused(7))
        });
        assert!(
            matches!(result, Err(AppError::Refused(7))),
            "{policy:?}: {result:?}"
        );
        assert_eq!(bytes(pool, root, 1024), data_before, "{policy:?}");
        assert_eq!(heap.check_heap().unwrap(), heap_before, "{policy:?}");
        let stats = heap.tx_stats();
        assert_eq!(stats.aborted, stats_before.aborted + 1, "{policy:?}");
        assert_eq!(stats.committed, stats_before.committed, "{policy:?}");
        // The rolled-back free gave up its claim: the block can be freed now.
        free_one(&heap, old_block);
        assert!(heap.check_heap().unwrap().is_empty(), "{policy:?}");
    }
}

#[test]
fn a_tx_error_returned_by_the_closure_is_returned_as_is() {
    for policy in FencePolicy::ALL {
        let heap = small_heap(policy);
        let root = heap.pool().root_offset();
        let before = bytes(heap.pool(), root, 64);
        let result = heap.transaction(|tx| {
            tx.write(root, &[9; 64])?;
            Err::<(), _>(TxError::InvalidFree {
                offset: 1,
                reason: "made up",
            })
        });
        assert!(
            matches!(result, Err(TxError::InvalidFree { offset: 1, .. })),
            "{result:?}"
        );
        assert_eq!(bytes(heap.pool(), root, 64), before);
        // Through the application's error type, `?` wraps it.
        let result: Result<(), AppError> = heap.transaction(|tx| {
            tx.write(root, &[9; 64])?;
            tx.free(PPtr::<u8>::new(root))?;
            Ok(())
        });
        assert!(
            matches!(result, Err(AppError::Tx(TxError::InvalidFree { .. }))),
            "{result:?}"
        );
        assert_eq!(bytes(heap.pool(), root, 64), before);
    }
}

#[test]
fn panic_rolls_back_propagates_and_releases_the_lane() {
    for policy in FencePolicy::ALL {
        let heap = Arc::new(small_heap(policy));
        let root = heap.pool().root_offset();
        heap.transaction(|tx| tx.write(root, &pattern(2, 512)))
            .unwrap();
        let old_block = alloc_one(&heap, 64);
        let data_before = bytes(heap.pool(), root, 512);
        let heap_before = heap.check_heap().unwrap();
        let lanes = heap.layout().lanes;
        // More panics than lanes: a lane leaked by each would leave none.
        for i in 0..lanes + 1 {
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                heap.transaction(|tx| {
                    tx.write(root + 8 * i, &[0x77; 200])?;
                    let p = tx.alloc(100)?;
                    tx.write(p.offset(), &[1; 100])?;
                    tx.free(old_block)?;
                    if i < 1000 {
                        panic!("boom {i}");
                    }
                    Ok::<_, TxError>(())
                })
            }));
            let payload = outcome.expect_err("the panic propagates");
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_default();
            assert_eq!(message, format!("boom {i}"), "{policy:?}");
            assert_eq!(bytes(heap.pool(), root, 512), data_before, "{policy:?}");
            assert_eq!(heap.check_heap().unwrap(), heap_before, "{policy:?}");
        }
        assert_eq!(heap.tx_stats().aborted, lanes + 1);
        // More transactions than lanes, from two threads at once: each needs a free lane.
        let h = heap.clone();
        within("transactions after the panics", move || {
            std::thread::scope(|s| {
                for t in 0..2u64 {
                    let h = &h;
                    s.spawn(move || {
                        for i in 0..lanes * 2 {
                            h.transaction(|tx| tx.write_value(root + 1024 + 8 * t, &i))
                                .unwrap();
                        }
                    });
                }
            });
        });
        free_one(&heap, old_block);
        assert!(heap.check_heap().unwrap().is_empty());
    }
}

// ------------------------------------------------------------------------------------ nesting

#[test]
fn nested_transactions_join_the_outer_one() {
    for policy in FencePolicy::ALL {
        // One lane: a nested call that did not join would wait for it forever.
        let heap = Arc::new(new_heap(policy, 1 << 20, config(1, 4096, 16 << 10)));
        let h = heap.clone();
        within("a nested transaction", move || {
            let root = h.pool().root_offset();
            let before = h.tx_stats();
            h.transaction(|tx| {
                tx.write(root, &[1; 8])?;
                let p = h.transaction(|inner| {
                    inner.write(root + 64, &[2; 8])?;
                    // Doubly nested.
                    h.transaction(|inner2| inner2.write(root + 128, &[3; 8]))?;
                    inner.alloc(64)
                })?;
                tx.write(p.offset(), &[4; 64])?;
                tx.write(root + 192, &p.offset().to_le_bytes())
            })
            .unwrap();
            let after = h.tx_stats();
            assert_eq!(after.committed, before.committed + 1, "one transaction");
            let pool = h.pool();
            assert_eq!(bytes(pool, root, 8), [1; 8]);
            assert_eq!(bytes(pool, root + 64, 8), [2; 8]);
            assert_eq!(bytes(pool, root + 128, 8), [3; 8]);
            let p: u64 = pool.read(root + 192).unwrap();
            assert_eq!(offsets(&h.check_heap().unwrap()), BTreeSet::from([p]));
        });

        // The inner writes roll back with the outer transaction.
        let root = heap.pool().root_offset();
        let before = bytes(heap.pool(), root, 512);
        let heap_before = heap.check_heap().unwrap();
        let result: Result<(), AppError> = heap.transaction(|tx| {
            tx.write(root, &[5; 8])?;
            heap.transaction(|inner| {
                inner.write(root + 64, &[6; 8])?;
                inner.write(root + 300, &[6; 100])?;
                inner.alloc(64)
            })?;
            tx.write(root + 128, &[7; 8])?;
            Err(AppError::Refused(1))
        });
        assert!(matches!(result, Err(AppError::Refused(1))), "{policy:?}");
        assert_eq!(bytes(heap.pool(), root, 512), before, "{policy:?}");
        assert_eq!(heap.check_heap().unwrap(), heap_before, "{policy:?}");
    }
}

#[test]
fn a_failed_nested_transaction_dooms_the_outer_one_even_if_swallowed() {
    for policy in FencePolicy::ALL {
        let heap = small_heap(policy);
        let root = heap.pool().root_offset();
        let before = bytes(heap.pool(), root, 512);
        let stats_before = heap.tx_stats();
        let result = heap.transaction(|tx| {
            tx.write(root, &[1; 64])?;
            let inner: Result<(), AppError> = heap.transaction(|inner| {
                inner.write(root + 64, &[2; 64])?;
                Err(AppError::Refused(3))
            });
            assert!(matches!(inner, Err(AppError::Refused(3))));
            // The outer closure swallows the error and carries on...
            tx.write(root + 128, &[3; 64])?;
            tx.alloc(64)?;
            Ok::<_, TxError>(())
        });
        // ...but the whole transaction rolls back.
        assert!(
            matches!(result, Err(TxError::NestedAborted)),
            "{policy:?}: {result:?}"
        );
        assert_eq!(bytes(heap.pool(), root, 512), before, "{policy:?}");
        assert!(heap.check_heap().unwrap().is_empty(), "{policy:?}");
        let stats = heap.tx_stats();
        assert_eq!(stats.aborted, stats_before.aborted + 1);
        assert_eq!(stats.committed, stats_before.committed);
        assert!(TxError::NestedAborted.to_string().contains("rolled back"));

        // Propagated with `?`, the outer call returns the inner error itself.
        let result: Result<(), AppError> = heap.transaction(|tx| {
            tx.write(root, &[1; 64])?;
            heap.transaction(|inner| {
                inner.write(root + 64, &[2; 64])?;
                Err::<(), _>(AppError::Refused(4))
            })?;
            Ok(())
        });
        assert!(matches!(result, Err(AppError::Refused(4))), "{result:?}");
        assert_eq!(bytes(heap.pool(), root, 512), before, "{policy:?}");

        // The heap works normally afterwards.
        heap.transaction(|tx| tx.write(root, &[8; 8])).unwrap();
        assert_eq!(bytes(heap.pool(), root, 8), [8; 8]);
    }
}

#[test]
fn a_nested_panic_caught_by_the_outer_closure_still_rolls_everything_back() {
    for policy in FencePolicy::ALL {
        let heap = small_heap(policy);
        let root = heap.pool().root_offset();
        let before = bytes(heap.pool(), root, 512);
        let result = heap.transaction(|tx| {
            tx.write(root, &[1; 64])?;
            let caught = catch_unwind(AssertUnwindSafe(|| {
                heap.transaction(|inner| {
                    inner.write(root + 64, &[2; 64])?;
                    inner.alloc(64)?;
                    if root > 0 {
                        panic!("inner panic");
                    }
                    Ok::<_, TxError>(())
                })
            }));
            assert!(caught.is_err(), "the inner panic reaches the outer closure");
            Ok::<_, TxError>(())
        });
        assert!(
            matches!(result, Err(TxError::NestedAborted)),
            "{policy:?}: a transaction whose nested part panicked must not commit: {result:?}"
        );
        assert_eq!(bytes(heap.pool(), root, 512), before, "{policy:?}");
        assert!(heap.check_heap().unwrap().is_empty(), "{policy:?}");
    }
}

// ------------------------------------------------------------------------- log capacity errors

/// Bytes of a log entry's header (the lane format is private to the crate: this is the 24 the
/// capacity below leaves out).
const ENTRY_HEADER: u64 = 24;

/// A heap with one lane of 1024 bytes of log: 1000 snapshot bytes at most (24-byte header).
fn tiny_log_heap(policy: FencePolicy) -> Heap {
    new_heap(policy, 1 << 20, config(1, 1024, 16 << 10))
}

#[test]
fn a_snapshot_larger_than_the_lane_log_is_refused_before_anything_is_written() {
    for policy in FencePolicy::ALL {
        let heap = tiny_log_heap(policy);
        let pool = heap.pool();
        let root = pool.root_offset();
        let layout = *heap.layout();
        // A committed transaction first, so the log holds older entries.
        heap.transaction(|tx| tx.write(root, &pattern(3, 600)))
            .unwrap();
        let lane_area = |pool: &Pool| {
            bytes(
                pool,
                layout.lane_header(0),
                ENTRY_HEADER + layout.lane_log_bytes + 40,
            )
        };
        let log_before = lane_area(pool);
        let data_before = bytes(pool, root, 2048);

        for len in [1001u64, 1024, 2000] {
            let result = heap.transaction(|tx| tx.write(root, &vec![0x55; len as usize]));
            match result {
                Err(TxError::SnapshotTooLarge {
                    len: l,
                    capacity: 1000,
                }) if l == len => {}
                other => panic!("{policy:?}, {len} bytes: {other:?}"),
            }
            let result = heap.transaction(|tx| tx.snapshot(root + 8, len));
            assert!(
                matches!(result, Err(TxError::SnapshotTooLarge { .. })),
                "{result:?}"
            );
            assert_eq!(bytes(pool, root, 2048), data_before, "{policy:?}");
            assert_eq!(
                lane_area(pool),
                log_before,
                "{policy:?}: the log was written"
            );
        }
        // Swallowed, the refused write changes nothing and the rest commits.
        heap.transaction(|tx| {
            let refused = tx.write(root + 700, &[0x66; 1500]);
            assert!(matches!(refused, Err(TxError::SnapshotTooLarge { .. })));
            tx.write(root + 2000, &[0x67; 8])
        })
        .unwrap();
        assert_eq!(bytes(pool, root, 2000), data_before[..2000]);
        assert_eq!(bytes(pool, root + 2000, 8), [0x67; 8]);
        // After earlier writes in the same transaction, `?` rolls them back.
        let before = bytes(pool, root, 2048);
        let result = heap.transaction(|tx| {
            tx.write(root, &[1; 100])?;
            tx.write(root + 200, &[2; 1100])
        });
        assert!(matches!(result, Err(TxError::SnapshotTooLarge { .. })));
        assert_eq!(bytes(pool, root, 2048), before, "{policy:?}");
        // Exactly the capacity fits.
        heap.transaction(|tx| tx.write(root, &[3; 1000])).unwrap();
        assert_eq!(bytes(pool, root, 1000), vec![3; 1000]);
        // A fresh block is not snapshotted, so it can be written whatever its size.
        heap.transaction(|tx| {
            let p = tx.alloc(6000)?;
            tx.write(p.offset(), &[4; 6000])
        })
        .unwrap();
    }
}

#[test]
fn log_full_when_snapshots_add_up_and_the_transaction_rolls_back() {
    for policy in FencePolicy::ALL {
        let heap = tiny_log_heap(policy);
        let pool = heap.pool();
        let root = pool.root_offset();
        let before = bytes(pool, root, 2048);
        // Each 100-byte snapshot takes 24 + 104 = 128 bytes: eight fill the 1024-byte log.
        let result = heap.transaction(|tx| {
            for i in 0..9u64 {
                tx.write(root + 128 * i, &[i as u8 + 1; 100])?;
            }
            Ok::<_, TxError>(())
        });
        match result {
            Err(TxError::LogFull {
                needed: 128,
                free: 0,
            }) => {}
            other => panic!("{policy:?}: {other:?}"),
        }
        assert_eq!(bytes(pool, root, 2048), before, "{policy:?}");

        let result = heap.transaction(|tx| {
            for i in 0..7u64 {
                tx.write(root + 128 * i, &[i as u8 + 1; 100])?;
            }
            tx.write(root + 1024, &[9; 200])
        });
        match result {
            Err(TxError::LogFull {
                needed: 224,
                free: 128,
            }) => {}
            other => panic!("{policy:?}: {other:?}"),
        }
        assert_eq!(bytes(pool, root, 2048), before, "{policy:?}");

        // Swallowed, the refused write wrote nothing and the others commit.
        heap.transaction(|tx| {
            for i in 0..8u64 {
                tx.write(root + 128 * i, &[i as u8 + 1; 100])?;
            }
            assert!(matches!(
                tx.write(root + 1024, &[9; 8]),
                Err(TxError::LogFull { .. })
            ));
            Ok::<_, TxError>(())
        })
        .unwrap();
        for i in 0..8u64 {
            assert_eq!(bytes(pool, root + 128 * i, 100), vec![i as u8 + 1; 100]);
        }
        assert_eq!(bytes(pool, root + 1024, 8), before[1024..1032]);
    }
}

#[test]
fn a_log_full_at_commit_rolls_back_data_and_allocations() {
    for policy in FencePolicy::ALL {
        let heap = tiny_log_heap(policy);
        let pool = heap.pool();
        let root = pool.root_offset();
        let before = bytes(pool, root, 2048);
        // The user's snapshots fill the log; the allocator's metadata has no room at commit.
        let result = heap.transaction(|tx| {
            for i in 0..8u64 {
                tx.write(root + 128 * i, &[0xA0 + i as u8; 100])?;
            }
            let p = tx.alloc(64)?;
            tx.write(p.offset(), &[1; 64])
        });
        assert!(
            matches!(result, Err(TxError::LogFull { .. })),
            "{policy:?}: {result:?}"
        );
        assert_eq!(bytes(pool, root, 2048), before, "{policy:?}");
        assert!(heap.check_heap().unwrap().is_empty(), "{policy:?}");
        assert_eq!(heap.alloc_stats().objects, 0);

        // Room for the chunk word of a fresh chunk but not for its bitmap word: the commit
        // fails after writing some metadata, which must be rolled back too.
        let result = heap.transaction(|tx| {
            for i in 0..7u64 {
                tx.write(root + 128 * i, &[0xB0 + i as u8; 100])?;
            }
            tx.write(root + 1024, &[0xBF; 72])?; // 24 + 72 bytes: 992 used, 32 free
            let p = tx.alloc(64)?;
            tx.write(p.offset(), &[2; 64])
        });
        assert!(
            matches!(result, Err(TxError::LogFull { .. })),
            "{policy:?}: {result:?}"
        );
        assert_eq!(bytes(pool, root, 2048), before, "{policy:?}");
        assert!(heap.check_heap().unwrap().is_empty(), "{policy:?}");

        // Nothing leaked: the allocator works as on a new heap.
        let p = alloc_one(&heap, 64);
        assert_eq!(heap.check_heap().unwrap(), vec![(p.offset(), 64)]);
        let q = alloc_one(&heap, 100_000);
        assert_eq!(offsets(&heap.check_heap().unwrap()).len(), 2);
        free_one(&heap, p);
        free_one(&heap, q);
        assert!(heap.check_heap().unwrap().is_empty());
    }
}

// ----------------------------------------------------------------------------------- allocator

/// 128 KiB pool, 4 KiB chunks: classes 64..1024 B, larger sizes are runs of chunks.
fn chunky_heap() -> Heap {
    new_heap(FencePolicy::Batched, 128 << 10, config(1, 4096, 4096))
}

fn table_chunks(layout: &Layout) -> u64 {
    (layout.alloc_size / layout.chunk_size * 8).div_ceil(layout.chunk_size)
}

/// Allocate `size`-byte blocks until the pool is full, `batch` per transaction.
fn fill(heap: &Heap, size: u64, batch: usize) -> Vec<PPtr<u8>> {
    let mut all = Vec::new();
    loop {
        let (got, full) = heap
            .transaction(|tx| {
                let mut got = Vec::new();
                for _ in 0..batch {
                    match tx.alloc(size) {
                        Ok(p) => got.push(p),
                        Err(TxError::PoolFull { requested, .. }) => {
                            assert_eq!(requested, size);
                            return Ok((got, true));
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok((got, false))
            })
            .unwrap();
        all.extend(got);
        if full {
            return all;
        }
    }
}

#[test]
fn pool_full_for_small_and_large_sizes_then_frees_make_room() {
    let heap = chunky_heap();
    let layout = *heap.layout();
    let usable = layout.alloc_size / layout.chunk_size - table_chunks(&layout);
    let total = heap.alloc_stats();
    assert_eq!(total.total_chunks, layout.alloc_size / layout.chunk_size);
    assert_eq!(total.free_chunks, usable);

    // Small blocks until full.
    let small = fill(&heap, 64, 100);
    assert!(small.len() as u64 >= usable * 60, "{} blocks", small.len());
    assert_eq!(heap.alloc_stats().free_chunks, 0);
    for size in [64, 1, 1024] {
        match heap.transaction(|tx| tx.alloc(size)) {
            Err(e @ TxError::PoolFull { requested, .. }) => {
                assert_eq!(requested, size);
                let message = e.to_string();
                assert!(
                    message.contains("pool full") && message.contains(&format!("{size} bytes")),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    match heap.transaction(|tx| tx.alloc(4096 * 3)) {
        Err(TxError::PoolFull {
            requested: 12288, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // Free every block of two chunks' worth: those chunks return to the free pool, so a
    // two-chunk run fits again (if they are adjacent) and a one-chunk run does.
    let (first, rest) = small.split_at(2 * 63);
    for chunk in first.chunks(40) {
        heap.transaction(|tx| {
            for &p in chunk {
                tx.free(p)?;
            }
            Ok::<_, TxError>(())
        })
        .unwrap();
    }
    assert_eq!(heap.alloc_stats().free_chunks, 2);
    let run = alloc_one(&heap, 5000);
    assert!(matches!(
        heap.transaction(|tx| tx.alloc(64)),
        Err(TxError::PoolFull { .. })
    ));
    free_one(&heap, run);
    for chunk in rest.chunks(100) {
        heap.transaction(|tx| {
            for &p in chunk {
                tx.free(p)?;
            }
            Ok::<_, TxError>(())
        })
        .unwrap();
    }
    assert!(heap.check_heap().unwrap().is_empty());
    let stats = heap.alloc_stats();
    assert_eq!(stats.free_chunks, usable);
    assert_eq!(stats.bytes_free, usable * layout.chunk_size);

    // Large blocks: the whole region in one run, and not a byte more.
    let max = usable * layout.chunk_size;
    match heap.transaction(|tx| tx.alloc(max + 1)) {
        Err(TxError::PoolFull { requested, free }) => {
            assert_eq!((requested, free), (max + 1, max));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        heap.transaction(|tx| tx.alloc(u64::MAX)),
        Err(TxError::PoolFull { .. })
    ));
    let all = alloc_one(&heap, max);
    assert_eq!(heap.check_heap().unwrap(), vec![(all.offset(), max)]);
    assert!(matches!(
        heap.transaction(|tx| tx.alloc(1)),
        Err(TxError::PoolFull { free: 0, .. })
    ));
    free_one(&heap, all);
    // And runs of every length fill it as well.
    let runs = fill(&heap, 4096 * 3, 4);
    assert_eq!(runs.len() as u64, usable / 3);
}

#[test]
fn zero_sized_allocations_are_refused() {
    let heap = chunky_heap();
    let result = heap.transaction(|tx| tx.alloc(0));
    match result {
        Err(e @ TxError::InvalidAllocSize { size: 0, .. }) => {
            assert!(e.to_string().contains("invalid allocation size 0"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    // Swallowed, it leaves the transaction usable.
    let p = heap
        .transaction(|tx| {
            assert!(tx.alloc(0).is_err());
            tx.alloc(1)
        })
        .unwrap();
    assert_eq!(heap.check_heap().unwrap(), vec![(p.offset(), 64)]);
}

#[test]
fn invalid_frees_are_refused() {
    let heap = chunky_heap();
    let layout = *heap.layout();
    let small = alloc_one(&heap, 64);
    let run = alloc_one(&heap, 2 * 4096);
    let freed = alloc_one(&heap, 64);
    free_one(&heap, freed);
    let blocks = heap.check_heap().unwrap();
    assert_eq!(blocks.len(), 2);
    let small_chunk_start = (small.offset() - layout.alloc_offset) / layout.chunk_size
        * layout.chunk_size
        + layout.alloc_offset;
    let last_chunk = layout.alloc_offset + layout.alloc_size - layout.chunk_size;
    let root = heap.pool().root_offset();
    let cases: Vec<(u64, &str)> = vec![
        (small.offset() + 8, "inside a small block"),
        (small.offset() + 64, "a free slot"),
        (small_chunk_start, "the bitmap of a small chunk"),
        (run.offset() + 8, "inside a run"),
        (
            run.offset() + layout.chunk_size,
            "the second chunk of a run",
        ),
        (freed.offset(), "a block freed before"),
        (last_chunk, "a free chunk"),
        (layout.alloc_offset, "the chunk table"),
        (layout.alloc_offset + 8, "inside the chunk table"),
        (root, "the root object, outside the region"),
        (layout.lane_log(0), "a lane log, outside the region"),
        (
            layout.alloc_offset + layout.alloc_size,
            "just past the region",
        ),
        (u64::MAX - 7, "far outside the pool"),
    ];
    let before = heap.check_heap().unwrap();
    for (offset, what) in cases {
        let result = heap.transaction(|tx| {
            tx.write(root, &[1; 8])?;
            tx.free(PPtr::<u8>::new(offset))
        });
        match result {
            Err(e @ TxError::InvalidFree { offset: o, .. }) if o == offset => {
                assert!(e.to_string().contains("invalid free"), "{e}")
            }
            other => panic!("{what} ({offset:#x}): {other:?}"),
        }
        assert_eq!(heap.check_heap().unwrap(), before, "{what}");
    }
    // Twice in one transaction.
    let result = heap.transaction(|tx| {
        tx.free(small)?;
        tx.free(small)
    });
    match result {
        Err(TxError::InvalidFree { offset, reason }) => {
            assert_eq!(offset, small.offset());
            assert!(reason.contains("already freed"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let result = heap.transaction(|tx| {
        tx.free(run)?;
        tx.free(run)
    });
    assert!(
        matches!(result, Err(TxError::InvalidFree { .. })),
        "{result:?}"
    );
    assert_eq!(heap.check_heap().unwrap(), before);
    // The refused transactions released their claims: freeing works.
    heap.transaction(|tx| {
        tx.free(small)?;
        tx.free(run)
    })
    .unwrap();
    assert!(heap.check_heap().unwrap().is_empty());
}

#[test]
fn alloc_and_free_in_one_transaction_leave_nothing_allocated() {
    let heap = chunky_heap();
    let stats_before = heap.alloc_stats();
    heap.transaction(|tx| {
        let a = tx.alloc(100)?;
        tx.write(a.offset(), &[1; 100])?;
        let b = tx.alloc(3 * 4096)?;
        tx.write(b.offset(), &[2; 3 * 4096])?;
        let c = tx.alloc(64)?;
        tx.free(a)?;
        tx.free(b)?;
        // Freed twice: the first free already gave the reservation back.
        assert!(matches!(tx.free(a), Err(TxError::InvalidFree { .. })));
        tx.free(c)
    })
    .unwrap();
    assert!(heap.check_heap().unwrap().is_empty());
    assert_eq!(heap.alloc_stats(), stats_before);
}

#[test]
fn allocations_never_overlap_and_stay_inside_the_region() {
    let heap = new_heap(FencePolicy::Batched, 4 << 20, config(1, 16 << 10, 16 << 10));
    let layout = *heap.layout();
    let region_start = layout.alloc_offset + table_chunks(&layout) * layout.chunk_size;
    let region_end = layout.alloc_offset + layout.alloc_size;
    let sizes = [
        1u64, 8, 63, 64, 65, 100, 128, 129, 255, 256, 500, 512, 1000, 1024, 2000, 4096, 4097, 8000,
        16384, 16385, 40000, 70000,
    ];
    let mut rng = Rng(7);
    // (pointer, requested size, seed of its contents)
    let mut live: Vec<(PPtr<u8>, u64, u64)> = Vec::new();
    let mut seed = 0;
    let check = |live: &[(PPtr<u8>, u64, u64)]| {
        let blocks = heap.check_heap().unwrap();
        assert_eq!(blocks.len(), live.len());
        let mut by_offset: Vec<(u64, u64)> = blocks.clone();
        by_offset.sort();
        for w in by_offset.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "{:?} overlaps {:?}", w[0], w[1]);
        }
        for &(p, requested, seed) in live {
            let &(_, size) = blocks
                .iter()
                .find(|b| b.0 == p.offset())
                .expect("every allocation is in the heap walk");
            assert!(size >= requested, "{size} < {requested}");
            if requested > layout.chunk_size / 4 {
                assert_eq!(size % layout.chunk_size, 0, "a run is whole chunks");
                assert_eq!((p.offset() - layout.alloc_offset) % layout.chunk_size, 0);
            } else {
                assert!(size.is_power_of_two() && size < 2 * requested.max(64));
            }
            assert!(p.offset() >= region_start && p.offset() + size <= region_end);
            assert_eq!(
                bytes(heap.pool(), p.offset(), requested),
                pattern(seed, requested as usize),
                "contents of the block at {:#x}",
                p.offset()
            );
        }
    };
    for round in 0..6 {
        // Allocate a batch of every size, in a few transactions.
        for group in sizes.chunks(5) {
            let got = heap
                .transaction(|tx| {
                    let mut got = Vec::new();
                    for &size in group {
                        seed += 1;
                        let p = tx.alloc(size)?;
                        tx.write(p.offset(), &pattern(seed, size as usize))?;
                        got.push((p, size, seed));
                    }
                    Ok::<_, TxError>(got)
                })
                .unwrap();
            live.extend(got);
        }
        check(&live);
        // Free about half of them, at random.
        let mut kept = Vec::new();
        let mut doomed = Vec::new();
        for b in live.drain(..) {
            if rng.below(2) == 0 {
                doomed.push(b);
            } else {
                kept.push(b);
            }
        }
        for group in doomed.chunks(7) {
            heap.transaction(|tx| {
                for &(p, _, _) in group {
                    tx.free(p)?;
                }
                Ok::<_, TxError>(())
            })
            .unwrap();
        }
        live = kept;
        check(&live);
        assert!(round < 6);
    }
}

#[test]
fn alloc_stats_agree_with_the_heap_walk() {
    let heap = chunky_heap();
    let layout = *heap.layout();
    let table = table_chunks(&layout);
    let total = layout.alloc_size / layout.chunk_size;
    let mut rng = Rng(11);
    let mut live: Vec<PPtr<u8>> = Vec::new();
    for step in 0..120 {
        if live.len() < 30 && rng.below(3) != 0 {
            let size = [10, 64, 100, 200, 500, 1000, 3000, 5000, 9000][rng.below(9) as usize];
            match heap.transaction(|tx| tx.alloc(size)) {
                Ok(p) => live.push(p),
                Err(TxError::PoolFull { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        } else if !live.is_empty() {
            let p = live.swap_remove(rng.below(live.len() as u64) as usize);
            free_one(&heap, p);
        }
        let blocks = heap.check_heap().unwrap();
        let stats = heap.alloc_stats();
        assert_eq!(stats.objects, blocks.len() as u64, "step {step}");
        assert_eq!(
            stats.bytes_allocated,
            blocks.iter().map(|b| b.1).sum::<u64>(),
            "step {step}"
        );
        assert_eq!(stats.total_chunks, total);
        // Chunks in use: those of runs, and those holding small blocks.
        let mut used = BTreeSet::new();
        for &(offset, size) in &blocks {
            let first = (offset - layout.alloc_offset) / layout.chunk_size;
            let last = (offset + size - 1 - layout.alloc_offset) / layout.chunk_size;
            used.extend(first..=last);
        }
        assert_eq!(
            stats.free_chunks,
            total - table - used.len() as u64,
            "step {step}: {stats:?}"
        );
        assert!(stats.bytes_free >= stats.free_chunks * layout.chunk_size);
        assert!(stats.bytes_free + stats.bytes_allocated <= (total - table) * layout.chunk_size);
        assert_eq!(
            offsets(&blocks),
            live.iter().map(|p| p.offset()).collect::<BTreeSet<_>>()
        );
    }
}

#[test]
fn an_aborted_transactions_allocations_are_returned() {
    for policy in FencePolicy::ALL {
        let heap = new_heap(policy, 128 << 10, config(1, 4096, 4096));
        let keep = alloc_one(&heap, 200);
        let heap_before = heap.check_heap().unwrap();
        let stats_before = heap.alloc_stats();
        let sizes = [64u64, 64, 300, 5000, 1000, 9000];
        let mut aborted = Vec::new();
        let result: Result<(), AppError> = heap.transaction(|tx| {
            for &size in &sizes {
                let p = tx.alloc(size)?;
                tx.write(p.offset(), &[0xAB; 64])?;
                aborted.push(p);
            }
            Err(AppError::Refused(0))
        });
        assert!(matches!(result, Err(AppError::Refused(0))));
        assert_eq!(heap.check_heap().unwrap(), heap_before, "{policy:?}");
        assert_eq!(heap.alloc_stats(), stats_before, "{policy:?}");
        // The same space is handed out again.
        let again: Vec<PPtr<u8>> = sizes.iter().map(|&s| alloc_one(&heap, s)).collect();
        assert_eq!(again, aborted, "{policy:?}");
        for p in again {
            free_one(&heap, p);
        }

        // Filling the heap inside an aborted transaction takes nothing away.
        let mut n_aborted = 0;
        let _ = heap.transaction(|tx| {
            while tx.alloc(64).is_ok() {
                n_aborted += 1;
            }
            Err::<(), _>(AppError::Refused(1))
        });
        assert_eq!(heap.check_heap().unwrap(), heap_before, "{policy:?}");
        let filled = fill(&heap, 64, 200);
        assert_eq!(filled.len(), n_aborted, "{policy:?}");
        for chunk in filled.chunks(200) {
            heap.transaction(|tx| {
                for &p in chunk {
                    tx.free(p)?;
                }
                Ok::<_, TxError>(())
            })
            .unwrap();
        }
        free_one(&heap, keep);
        assert!(heap.check_heap().unwrap().is_empty());
    }
}

// ------------------------------------------------------------------------- open, reopen, errors

fn file_options() -> PoolOptions {
    PoolOptions::new().granularity(Granularity::Emulated)
}

#[test]
fn a_file_pool_reopens_with_the_same_data_and_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap.pool");
    let sizes = [1u64, 64, 300, 1000, 5000, 20000, 70000];
    let (root, data, blocks, stats, live) = {
        let pool = Pool::create(&path, "semantics-reopen", 2 << 20, &file_options()).unwrap();
        let heap: Heap = Heap::create(
            Arc::new(pool),
            config(2, 8192, 16 << 10),
            FencePolicy::Strict,
        )
        .unwrap();
        let root = heap.pool().root_offset();
        heap.transaction(|tx| tx.write(root, &pattern(5, 3000)))
            .unwrap();
        let mut live: Vec<(PPtr<u8>, u64)> = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let p = heap
                .transaction(|tx| {
                    let p = tx.alloc(size)?;
                    tx.write(p.offset(), &pattern(100 + i as u64, size as usize))?;
                    tx.write_value(root + 3000 + 8 * i as u64, &p.offset())?;
                    Ok::<_, TxError>(p)
                })
                .unwrap();
            live.push((p, 100 + i as u64));
        }
        // Free two of them.
        for i in [1, 4] {
            free_one(&heap, live[i].0);
        }
        let live: Vec<_> = live
            .into_iter()
            .enumerate()
            .filter(|(i, _)| *i != 1 && *i != 4)
            .map(|(i, (p, seed))| (p, seed, sizes[i]))
            .collect();
        let data = bytes(heap.pool(), root, 3000 + 8 * sizes.len() as u64);
        (
            root,
            data,
            heap.check_heap().unwrap(),
            heap.alloc_stats(),
            live,
        )
    };

    let pool = Pool::open(&path, "semantics-reopen", &file_options()).unwrap();
    let heap: Heap = Heap::open(Arc::new(pool), FencePolicy::Batched).unwrap();
    assert_eq!(heap.layout().lanes, 2);
    assert_eq!(heap.layout().lane_log_bytes, 8192);
    assert_eq!(bytes(heap.pool(), root, data.len() as u64), data);
    assert_eq!(heap.check_heap().unwrap(), blocks);
    assert_eq!(heap.alloc_stats(), stats);
    for &(p, seed, size) in &live {
        assert_eq!(
            bytes(heap.pool(), p.offset(), size),
            pattern(seed, size as usize)
        );
    }
    // The free lists were rebuilt: new blocks land in free space only.
    let mut more = Vec::new();
    for &size in &sizes {
        more.push(alloc_one(&heap, size));
    }
    let now = heap.check_heap().unwrap();
    assert_eq!(now.len(), blocks.len() + sizes.len());
    let mut sorted = now.clone();
    sorted.sort();
    for w in sorted.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "{:?} overlaps {:?}", w[0], w[1]);
    }
    for &(p, seed, size) in &live {
        assert_eq!(
            bytes(heap.pool(), p.offset(), size),
            pattern(seed, size as usize)
        );
    }
}

#[test]
fn open_and_create_refuse_the_wrong_kind_of_pool() {
    let pool = anon(1 << 20);
    match Heap::open(&*pool, FencePolicy::Batched) {
        Err(e @ TxError::NotFormatted) => assert!(e.to_string().contains("Heap::create")),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened an unformatted pool"),
    }
    let heap = Heap::create(&*pool, config(2, 4096, 16 << 10), FencePolicy::Batched).unwrap();
    drop(heap);
    match Heap::create(&*pool, config(2, 4096, 16 << 10), FencePolicy::Batched) {
        Err(TxError::AlreadyFormatted) => {}
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("formatted a pool twice"),
    }
    // Another configuration does not make it formattable either.
    assert!(matches!(
        Heap::create(&*pool, config(4, 1024, 4096), FencePolicy::Batched),
        Err(TxError::AlreadyFormatted)
    ));
    assert!(Heap::open(&*pool, FencePolicy::Strict).is_ok());
}

#[test]
fn a_damaged_superblock_is_refused() {
    // Bytes of the magic, version, lane count, allocator offset, chunk size and checksum.
    for byte in [0u64, 7, 8, 16, 20, 40, 56, 120, 123] {
        let pool = anon(1 << 20);
        drop(Heap::create(&*pool, config(2, 4096, 16 << 10), FencePolicy::Batched).unwrap());
        let at = pool.heap_offset() + byte;
        let old: u8 = pool.read(at).unwrap();
        let w = pool.write(at, &[old ^ 0x5A]).unwrap();
        let _ = pool.persist(w);
        match Heap::open(&*pool, FencePolicy::Batched) {
            Err(e @ TxError::BadSuperblock { .. }) => {
                assert!(e.to_string().contains("superblock"), "{e}")
            }
            Err(e) => panic!("byte {byte}: {e}"),
            Ok(_) => panic!("byte {byte}: opened a damaged superblock"),
        }
        // Nor is it formatted over.
        assert!(matches!(
            Heap::create(&*pool, config(2, 4096, 16 << 10), FencePolicy::Batched),
            Err(TxError::AlreadyFormatted)
        ));
    }
}

#[test]
fn a_corrupt_chunk_table_is_refused_at_open() {
    let chunk = 16u64 << 10;
    // (what, chunk index relative to the first past the table, word)
    let kind_small = 1u64;
    let kind_head = 2u64;
    // Kind 3 marked run continuations in an early draft; run chunks now stay 0.
    let kind_retired = 3u64;
    let cases: Vec<(&str, Vec<(u64, u64)>)> = vec![
        ("an unknown kind", vec![(0, 0xFF)]),
        ("a free word with stray bits", vec![(0, 0x100)]),
        (
            "a size class that does not exist",
            vec![(0, kind_small | 60 << 8)],
        ),
        (
            "a small word with stray bits",
            vec![(0, kind_small | 1 << 20)],
        ),
        ("a run of length 0", vec![(0, kind_head)]),
        ("a run past the end", vec![(0, kind_head | 1000 << 16)]),
        (
            "a run over a chunk in use",
            vec![(0, kind_head | 2 << 16), (1, kind_small)],
        ),
        (
            "a word of a kind no longer written",
            vec![(3, kind_retired)],
        ),
        ("a table chunk marked free", vec![(u64::MAX, 0)]),
    ];
    for (what, words) in cases {
        let pool = anon(1 << 20);
        let layout = *Heap::create(&*pool, config(1, 4096, chunk), FencePolicy::Batched)
            .unwrap()
            .layout();
        let first = table_chunks(&layout);
        for (c, word) in words {
            let c = if c == u64::MAX { 0 } else { first + c };
            let w = pool.store_u64(layout.alloc_offset + 8 * c, word).unwrap();
            let _ = pool.persist(w);
        }
        match Heap::open(&*pool, FencePolicy::Batched) {
            Err(e @ TxError::CorruptHeap { .. }) => {
                assert!(e.to_string().contains("corrupted"), "{e}")
            }
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: opened a corrupt heap"),
        }
    }
    // A bitmap marking an object past a small chunk's last: 64-byte class in a 16 KiB chunk
    // holds 255 objects (one 64-byte line of bitmap), so bit 255 must be clear.
    let pool = anon(1 << 20);
    let heap = Heap::create(&*pool, config(1, 4096, chunk), FencePolicy::Batched).unwrap();
    let p = heap.transaction(|tx| tx.alloc(64)).unwrap();
    let layout = *heap.layout();
    drop(heap);
    let chunk_start = (p.offset() - layout.alloc_offset) / chunk * chunk + layout.alloc_offset;
    assert_eq!(
        p.offset(),
        chunk_start + 64,
        "the first object follows the bitmap"
    );
    let w = pool.store_u64(chunk_start + 24, 1 << 63).unwrap();
    let _ = pool.persist(w);
    assert!(matches!(
        Heap::open(&*pool, FencePolicy::Batched),
        Err(TxError::CorruptHeap { .. })
    ));
}

#[test]
fn invalid_configurations_are_refused() {
    let probe = anon(1 << 20);
    let heap_offset = probe.heap_offset();
    // A pool with room for exactly one 4 KiB chunk: only the chunk table would fit.
    let one = Layout::plan(heap_offset, 1 << 20, &config(1, 1024, 4096)).unwrap();
    let one_chunk_pool = one.alloc_offset + 4096;
    let cases: Vec<(u64, HeapConfig)> = vec![
        (1 << 20, config(0, 4096, 4096)),
        (1 << 20, config(1025, 256, 4096)),
        (1 << 20, config(1, 0, 4096)),
        (1 << 20, config(1, 192, 4096)),
        (1 << 20, config(1, 1000, 4096)),
        (1 << 20, config(1, 4096, 0)),
        (1 << 20, config(1, 4096, 2048)),
        (1 << 20, config(1, 4096, 5000)),
        (1 << 20, config(1, 4096, 1 << 20)),
        (1 << 20, config(1, u64::MAX / 64 * 64, 4096)),
        (1 << 20, config(1024, 64 << 10, 4096)),
        (one_chunk_pool, config(1, 1024, 4096)),
    ];
    for (size, cfg) in cases {
        let pool = anon(size);
        match Heap::create(&*pool, cfg, FencePolicy::Batched) {
            Err(e @ TxError::InvalidConfig { .. }) => {
                assert!(e.to_string().contains("invalid heap configuration"), "{e}")
            }
            Err(e) => panic!("{cfg:?} in {size} bytes: {e}"),
            Ok(_) => panic!("{cfg:?} in {size} bytes was accepted"),
        }
        // Nothing was formatted.
        assert!(
            matches!(
                Heap::open(&*pool, FencePolicy::Batched),
                Err(TxError::NotFormatted)
            ),
            "{cfg:?}"
        );
    }
    // The smallest valid values work.
    let pool = anon(1 << 20);
    let heap = Heap::create(&*pool, config(1, 256, 4096), FencePolicy::Batched).unwrap();
    heap.transaction(|tx| tx.write(pool.root_offset(), &[1; 232]))
        .unwrap();
    let two_chunk_pool = anon(one_chunk_pool + 4096);
    assert!(Heap::create(
        &*two_chunk_pool,
        config(1, 1024, 4096),
        FencePolicy::Batched
    )
    .is_ok());
}

// --------------------------------------------------------------------------------- concurrency

fn concurrent_run(lanes: u64, rounds: u64) {
    let heap = Arc::new(new_heap(
        FencePolicy::Batched,
        8 << 20,
        config(lanes, 8192, 16 << 10),
    ));
    let root = heap.pool().root_offset();
    let sizes = [
        1u64, 40, 64, 100, 256, 700, 2000, 4096, 5000, 16384, 20000, 50000,
    ];
    let h = heap.clone();
    // Each thread's live blocks: (pointer, requested size, seed of its contents).
    let lives: Vec<Vec<(PPtr<u8>, u64, u64)>> = within("the threads", move || {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..2u64)
                .map(|t| {
                    let h = &h;
                    s.spawn(move || {
                        let mut rng = Rng(t + 100);
                        let counter = root + 256 * t;
                        let mut live: Vec<(PPtr<u8>, u64, u64)> = Vec::new();
                        for i in 0..rounds {
                            let free_at = (!live.is_empty()
                                && (rng.below(3) == 0 || live.len() > 24))
                                .then(|| rng.below(live.len() as u64) as usize);
                            let size = sizes[rng.below(sizes.len() as u64) as usize];
                            let seed = t * 1_000_000 + i;
                            let outcome = h
                                .transaction(|tx| {
                                    let c: u64 = tx.read(counter)?;
                                    tx.write_value(counter, &(c + 1))?;
                                    if let Some(k) = free_at {
                                        tx.free(live[k].0)?;
                                        return Ok::<_, TxError>(None);
                                    }
                                    let p = tx.alloc(size)?;
                                    tx.write(p.offset(), &pattern(seed, size.min(64) as usize))?;
                                    if size > 64 {
                                        tx.write(p.offset() + size - 1, &[(seed % 251) as u8])?;
                                    }
                                    Ok(Some(p))
                                })
                                .unwrap();
                            match (outcome, free_at) {
                                (Some(p), _) => live.push((p, size, seed)),
                                (None, Some(k)) => {
                                    live.swap_remove(k);
                                }
                                (None, None) => unreachable!(),
                            }
                        }
                        live
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        })
    });
    for t in 0..2u64 {
        let c: u64 = heap.pool().read(root + 256 * t).unwrap();
        assert_eq!(c, rounds, "thread {t}'s counter");
    }
    let blocks = heap.check_heap().unwrap();
    let all: BTreeSet<u64> = lives.iter().flatten().map(|b| b.0.offset()).collect();
    assert_eq!(
        all.len(),
        lives[0].len() + lives[1].len(),
        "two threads hold the same block"
    );
    assert_eq!(
        offsets(&blocks),
        all,
        "the heap walk is the union of the live blocks"
    );
    let mut sorted = blocks.clone();
    sorted.sort();
    for w in sorted.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "{:?} overlaps {:?}", w[0], w[1]);
    }
    for &(p, size, seed) in lives.iter().flatten() {
        let len = size.min(64);
        assert_eq!(
            bytes(heap.pool(), p.offset(), len),
            pattern(seed, len as usize)
        );
        if size > 64 {
            assert_eq!(
                bytes(heap.pool(), p.offset() + size - 1, 1),
                [(seed % 251) as u8]
            );
        }
    }
    assert_eq!(heap.alloc_stats().objects, all.len() as u64);
    assert_eq!(heap.tx_stats().committed, 2 * rounds);
}

#[test]
fn two_threads_transact_and_allocate_on_two_lanes() {
    concurrent_run(2, 400);
}

#[test]
fn two_threads_share_one_lane() {
    concurrent_run(1, 200);
}
