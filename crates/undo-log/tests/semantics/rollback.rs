//! Rollback on `Err` and on panic, and flattened nesting: a failed or panicking transaction, or
//! a failed nested one, leaves no write behind and releases its lane.

use super::*;

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
        let heap = Arc::new(anonymous_heap_under(
            LAYOUT,
            1 << 20,
            heap_config(1, 4096, 16 << 10),
            policy,
        ));
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
