//! The Themis workloads against std models on an anonymous pool: every structure holds what the
//! model holds after random operation sequences, owns exactly the heap's live blocks, survives a
//! reopen, and rolls back with an enclosing transaction.

use std::collections::{BTreeSet, HashMap, VecDeque};

use pmem_test_kit::fixture::{anonymous_heap_under, heap_holds_exactly, TEST_HEAP_16K_LOGS};
use pmem_test_kit::SplitMix64;
use pmem_themis_workloads::tpcc::{LineInput, NewOrder, Order, Stock, TpccConfig};
use pmem_themis_workloads::{ChainedHashMap, List, Queue, Sps, Tatp, Tpcc};
use pmem_undo_log::{FencePolicy, Heap, TxError};

fn heap(policy: FencePolicy) -> Heap {
    anonymous_heap_under("workloads", 16 << 20, TEST_HEAP_16K_LOGS, policy)
}

fn root(heap: &Heap) -> u64 {
    heap.pool().root_offset()
}

/// The heap's live blocks are exactly `blocks` (in any order: the heap walk's is by offset).
fn assert_owns_every_block(heap: &Heap, mut blocks: Vec<u64>) {
    blocks.sort_unstable();
    heap_holds_exactly(heap, &blocks, "structure").unwrap_or_else(|e| panic!("{e}"));
}

/// Fences of one call, from the heap's transaction totals.
fn fences<R>(heap: &Heap, f: impl FnOnce() -> R) -> (u64, u64, R) {
    let before = heap.tx_stats();
    let r = f();
    let after = heap.tx_stats();
    (
        after.fences - before.fences,
        after.nt_t_fences - before.nt_t_fences,
        r,
    )
}

#[test]
fn list_matches_a_btreeset() {
    for policy in [FencePolicy::Strict, FencePolicy::Batched] {
        let heap = heap(policy);
        let list = List::create(&heap, root(&heap)).unwrap();
        let mut model = BTreeSet::new();
        let mut rng = SplitMix64::new(1);
        for step in 0..3000 {
            let key = rng.below(96);
            match rng.below(3) {
                0 | 1 => assert_eq!(list.insert(key).unwrap(), model.insert(key), "{step}"),
                _ => assert_eq!(list.remove(key).unwrap(), model.remove(&key), "{step}"),
            }
            if step % 500 == 0 {
                assert_eq!(
                    list.to_vec().unwrap(),
                    Vec::from_iter(model.iter().copied())
                );
            }
        }
        assert_eq!(
            list.to_vec().unwrap(),
            Vec::from_iter(model.iter().copied())
        );
        assert_eq!(list.len().unwrap(), model.len());
        for key in 0..100 {
            assert_eq!(list.contains(key).unwrap(), model.contains(&key), "{key}");
        }
        assert_owns_every_block(&heap, list.blocks().unwrap());
        // Extreme keys sort at both ends.
        assert!(list.insert(u64::MAX).unwrap());
        assert!(list.insert(0).unwrap() != model.contains(&0));
        assert_eq!(list.iter().last().unwrap().unwrap().0, u64::MAX);
    }
}

#[test]
fn list_empties_and_refills() {
    let heap = heap(FencePolicy::Batched);
    let list = List::create(&heap, root(&heap)).unwrap();
    assert!(list.is_empty().unwrap());
    for k in (0..50).rev() {
        assert!(list.insert(k).unwrap());
    }
    for k in 0..50 {
        assert!(list.remove(k).unwrap());
        assert!(!list.remove(k).unwrap());
    }
    assert!(list.is_empty().unwrap());
    assert_owns_every_block(&heap, Vec::new());
    assert_eq!(heap.alloc_stats().objects, 0);
}

#[test]
fn hashmap_matches_a_std_hashmap() {
    for policy in [FencePolicy::Strict, FencePolicy::Batched] {
        let heap = heap(policy);
        // Few buckets, so chains are long and removes hit every position in them.
        let map = ChainedHashMap::create(&heap, root(&heap), 8).unwrap();
        let mut model = HashMap::new();
        let mut rng = SplitMix64::new(2);
        for step in 0..3000 {
            let key = rng.below(120);
            match rng.below(3) {
                0 | 1 => {
                    let value = rng.next_u64();
                    assert_eq!(
                        map.insert(key, value).unwrap(),
                        model.insert(key, value),
                        "{step}"
                    );
                }
                _ => assert_eq!(map.remove(key).unwrap(), model.remove(&key), "{step}"),
            }
        }
        assert_eq!(map.to_std().unwrap(), model);
        assert_eq!(map.len().unwrap(), model.len() as u64);
        for key in 0..130 {
            assert_eq!(map.get(key).unwrap(), model.get(&key).copied(), "{key}");
            assert_eq!(map.contains_key(key).unwrap(), model.contains_key(&key));
        }
        assert_owns_every_block(&heap, map.blocks().unwrap());
    }
}

#[test]
fn hashmap_reopens_with_its_contents() {
    let heap = heap(FencePolicy::Batched);
    let at = root(&heap) + 64;
    let map = ChainedHashMap::create(&heap, at, 32).unwrap();
    for k in 0..40 {
        map.insert(k, k * 10).unwrap();
    }
    let pool = heap
        .into_pool()
        .unwrap_or_else(|_| panic!("a structure still holds the heap"));
    let heap = Heap::open(pool).unwrap();
    let map = ChainedHashMap::open(&heap, at).unwrap();
    assert_eq!(map.bucket_count(), 32);
    assert_eq!(map.len().unwrap(), 40);
    assert_eq!(map.get(39).unwrap(), Some(390));
    assert_owns_every_block(&heap, map.blocks().unwrap());
}

#[test]
fn opening_an_uncreated_structure_is_an_error() {
    let heap = heap(FencePolicy::Batched);
    let r = root(&heap);
    assert!(matches!(
        ChainedHashMap::open(&heap, r),
        Err(TxError::CorruptHeap { .. })
    ));
    assert!(matches!(
        Sps::open(&heap, r),
        Err(TxError::CorruptHeap { .. })
    ));
    assert!(matches!(
        Tatp::open(&heap, r),
        Err(TxError::CorruptHeap { .. })
    ));
    assert!(matches!(
        Tpcc::open(&heap, r),
        Err(TxError::CorruptHeap { .. })
    ));
    assert!(List::open(&heap, heap.pool().size()).is_err());
}

#[test]
fn a_cycle_is_reported_not_followed() {
    let heap = heap(FencePolicy::Batched);
    let list = List::create(&heap, root(&heap)).unwrap();
    list.insert(1).unwrap();
    list.insert(2).unwrap();
    let nodes = list.blocks().unwrap();
    // Point the last node back at the first, as a damaged pool might.
    heap.transaction(|tx| tx.write_value(nodes[1] + 8, &nodes[0]))
        .unwrap();
    assert!(matches!(list.to_vec(), Err(TxError::CorruptHeap { .. })));
    assert!(matches!(list.contains(3), Err(TxError::CorruptHeap { .. })));
}

#[test]
fn queue_matches_a_vecdeque() {
    for policy in [FencePolicy::Strict, FencePolicy::Batched] {
        let heap = heap(policy);
        let queue = Queue::create(&heap, root(&heap)).unwrap();
        let mut model = VecDeque::new();
        let mut rng = SplitMix64::new(3);
        for step in 0..3000 {
            // Biased to grow, then to drain, so the queue empties and refills.
            let enqueue_bias = if step < 1500 { 3 } else { 1 };
            if rng.below(enqueue_bias + 1) != 0 {
                let v = rng.next_u64();
                queue.enqueue(v).unwrap();
                model.push_back(v);
            } else {
                assert_eq!(queue.dequeue().unwrap(), model.pop_front(), "{step}");
            }
            assert_eq!(queue.peek().unwrap(), model.front().copied());
        }
        assert_eq!(queue.to_vec().unwrap(), Vec::from(model.clone()));
        assert_eq!(queue.len().unwrap(), model.len());
        assert_owns_every_block(&heap, queue.blocks().unwrap());
        while let Some(v) = model.pop_front() {
            assert_eq!(queue.dequeue().unwrap(), Some(v));
        }
        assert_eq!(queue.dequeue().unwrap(), None);
        assert!(queue.is_empty().unwrap());
        assert_owns_every_block(&heap, Vec::new());
    }
}

#[test]
fn sps_matches_a_vec() {
    let heap = heap(FencePolicy::Batched);
    let sps = Sps::create(&heap, root(&heap), 1000).unwrap();
    let mut model: Vec<u64> = (0..1000).collect();
    let mut rng = SplitMix64::new(4);
    for _ in 0..300 {
        // Small index range for some transactions, so pairs repeat and overlap.
        let range = if rng.below(2) == 0 { 8 } else { 1000 };
        let pairs: Vec<(u64, u64)> = (0..rng.below(40) + 1)
            .map(|_| (rng.below(range), rng.below(range)))
            .collect();
        sps.swap_all(&pairs).unwrap();
        for &(i, j) in &pairs {
            model.swap(i as usize, j as usize);
        }
    }
    sps.swap(3, 999).unwrap();
    model.swap(3, 999);
    assert_eq!(sps.to_vec().unwrap(), model);
    assert_eq!(sps.get(999).unwrap(), model[999]);
    assert_eq!(sps.len(), 1000);
    assert_owns_every_block(&heap, sps.blocks());
}

#[test]
#[should_panic(expected = "out of bounds")]
fn sps_panics_on_an_index_out_of_bounds() {
    let heap = heap(FencePolicy::Batched);
    let sps = Sps::create(&heap, root(&heap), 10).unwrap();
    let _ = sps.swap(1, 10);
}

#[test]
fn tatp_matches_a_vec() {
    let heap = heap(FencePolicy::Batched);
    let tatp = Tatp::create(&heap, root(&heap), 500).unwrap();
    let mut model = vec![0u64; 500];
    let mut rng = SplitMix64::new(5);
    for _ in 0..2000 {
        let s_id = rng.below(510) + 1;
        let location = rng.next_u64();
        let known = s_id <= 500;
        assert_eq!(tatp.update_location(s_id, location).unwrap(), known);
        if known {
            model[s_id as usize - 1] = location;
        }
    }
    assert_eq!(tatp.locations().unwrap(), model);
    assert_eq!(tatp.subscriber(0).unwrap(), None);
    assert_eq!(tatp.subscriber(501).unwrap(), None);
    let s = tatp.subscriber(77).unwrap().unwrap();
    assert_eq!((s.s_id, s.sub_nbr, s.vlr_location), (77, 77, model[76]));
    assert_owns_every_block(&heap, tatp.blocks());
}

#[test]
fn tpcc_matches_a_model() {
    let heap = heap(FencePolicy::Batched);
    let config = TpccConfig {
        districts: 4,
        items: 200,
        orders_kept: 5,
    };
    let db = Tpcc::create(&heap, root(&heap), config).unwrap();
    assert_eq!(db.config(), config);
    let mut stock: Vec<Stock> = (1..=200).map(|i| db.stock(i).unwrap().unwrap()).collect();
    let mut orders: Vec<Vec<Order>> = vec![Vec::new(); 4];
    let mut rng = SplitMix64::new(6);
    for _ in 0..400 {
        let input = NewOrder {
            district: rng.below(4) + 1,
            customer: rng.below(3000),
            lines: (0..rng.below(15) + 1)
                .map(|_| LineInput {
                    // A small item range, so an order names an item twice now and then.
                    item: rng.below(40) + 1,
                    quantity: rng.below(10) + 1,
                })
                .collect(),
        };
        let d = input.district as usize - 1;
        let expected_id = orders[d].last().map_or(1, |o| o.o_id + 1);
        assert_eq!(db.new_order(&input).unwrap(), Some(expected_id));
        for l in &input.lines {
            let s = &mut stock[l.item as usize - 1];
            *s = s.after_order(l.quantity);
        }
        orders[d].push(Order::expected(&input, expected_id));
    }
    for d in 1..=4u64 {
        let kept = &orders[d as usize - 1];
        let district = db.district(d).unwrap().unwrap();
        assert_eq!(district.next_o_id, kept.last().unwrap().o_id + 1);
        let tail = &kept[kept.len().saturating_sub(5)..];
        assert_eq!(db.orders(d).unwrap(), tail.to_vec());
        if let Some(first) = kept.first() {
            assert_eq!(db.order(d, first.o_id).unwrap(), None, "retired");
        }
    }
    for i in 1..=200u64 {
        assert_eq!(db.stock(i).unwrap().unwrap(), stock[i as usize - 1], "{i}");
    }
    assert_owns_every_block(&heap, db.blocks().unwrap());
}

#[test]
fn tpcc_refuses_invalid_orders_without_a_transaction() {
    let heap = heap(FencePolicy::Batched);
    let db = Tpcc::create(&heap, root(&heap), TpccConfig::default()).unwrap();
    let line = |item, quantity| LineInput { item, quantity };
    let before = heap.tx_stats();
    for input in [
        NewOrder {
            district: 0,
            customer: 1,
            lines: vec![line(1, 1)],
        },
        NewOrder {
            district: 11,
            customer: 1,
            lines: vec![line(1, 1)],
        },
        NewOrder {
            district: 1,
            customer: 1,
            lines: vec![],
        },
        NewOrder {
            district: 1,
            customer: 1,
            lines: vec![line(1, 1), line(10_001, 1)],
        },
        NewOrder {
            district: 1,
            customer: 1,
            lines: vec![line(1, 11)],
        },
        NewOrder {
            district: 1,
            customer: 1,
            lines: vec![line(1, 1); 16],
        },
    ] {
        assert!(!db.is_valid(&input));
        assert_eq!(db.new_order(&input).unwrap(), None, "{input:?}");
    }
    assert_eq!(heap.tx_stats(), before);
    assert_eq!(db.district(1).unwrap().unwrap().next_o_id, 1);
}

#[test]
fn operations_in_a_failed_enclosing_transaction_roll_back() {
    let heap = heap(FencePolicy::Batched);
    let base = root(&heap);
    let list = List::create(&heap, base).unwrap();
    let map = ChainedHashMap::create(&heap, base + 8, 16).unwrap();
    let queue = Queue::create(&heap, base + 32).unwrap();
    for k in 0..10 {
        list.insert(k).unwrap();
        map.insert(k, k).unwrap();
        queue.enqueue(k).unwrap();
    }
    let blocks = |_: ()| {
        let mut b = list.blocks().unwrap();
        b.extend(map.blocks().unwrap());
        b.extend(queue.blocks().unwrap());
        b
    };
    let before = blocks(());
    /// The enclosing transaction's own reason to fail.
    #[derive(Debug)]
    enum Failed {
        Tx(#[allow(dead_code)] TxError),
        Requested,
    }
    impl From<TxError> for Failed {
        fn from(e: TxError) -> Failed {
            Failed::Tx(e)
        }
    }
    let failed: Result<(), Failed> = heap.transaction(|_| {
        assert!(list.insert(100)?);
        assert!(list.remove(3)?);
        assert_eq!(map.insert(100, 1)?, None);
        assert_eq!(map.remove(4)?, Some(4));
        queue.enqueue(100)?;
        assert_eq!(queue.dequeue()?, Some(0));
        Err(Failed::Requested)
    });
    assert!(matches!(failed, Err(Failed::Requested)), "{failed:?}");
    assert_eq!(list.to_vec().unwrap(), Vec::from_iter(0..10));
    assert_eq!(map.len().unwrap(), 10);
    assert_eq!(map.get(4).unwrap(), Some(4));
    assert_eq!(map.get(100).unwrap(), None);
    assert_eq!(queue.to_vec().unwrap(), Vec::from_iter(0..10));
    assert_eq!(blocks(()), before);
    assert_owns_every_block(&heap, before);
}

#[test]
fn batched_fences_each_transaction_once_for_its_snapshots() {
    // SPS: S swaps of distinct entries log 2S words. Strict fences each entry; batched fences
    // once for all of them. Both add the commit's two.
    for swaps in [1u64, 8, 64] {
        let pairs: Vec<(u64, u64)> = (0..swaps).map(|i| (2 * i, 2 * i + 1)).collect();
        let strict = heap(FencePolicy::Strict);
        let sps = Sps::create(&strict, root(&strict), 256).unwrap();
        let (f, nt_t, r) = fences(&strict, || sps.swap_all(&pairs));
        r.unwrap();
        assert_eq!(
            (f, nt_t),
            (2 * swaps + 2, 2 * swaps),
            "strict, {swaps} swaps"
        );
        let batched = heap(FencePolicy::Batched);
        let sps = Sps::create(&batched, root(&batched), 256).unwrap();
        let (f, nt_t, r) = fences(&batched, || sps.swap_all(&pairs));
        r.unwrap();
        assert_eq!((f, nt_t), (3, 1), "batched, {swaps} swaps");
    }
    // TATP: one store, so the policies agree.
    for policy in [FencePolicy::Strict, FencePolicy::Batched] {
        let heap = heap(policy);
        let tatp = Tatp::create(&heap, root(&heap), 10).unwrap();
        let (f, nt_t, r) = fences(&heap, || tatp.update_location(3, 9));
        assert!(r.unwrap());
        assert_eq!((f, nt_t), (3, 1), "{policy:?}");
    }
    // TPCC: batched never fences more than strict.
    let input = NewOrder {
        district: 1,
        customer: 1,
        lines: (1..=10)
            .map(|item| LineInput { item, quantity: 1 })
            .collect(),
    };
    let per_policy: Vec<(u64, u64)> = [FencePolicy::Strict, FencePolicy::Batched]
        .into_iter()
        .map(|policy| {
            let heap = heap(policy);
            let db = Tpcc::create(&heap, root(&heap), TpccConfig::default()).unwrap();
            db.new_order(&input).unwrap();
            let (f, nt_t, r) = fences(&heap, || db.new_order(&input));
            r.unwrap();
            (f, nt_t)
        })
        .collect();
    let (strict, batched) = (per_policy[0], per_policy[1]);
    assert!(strict.1 >= 12, "strict logs each stock row: {strict:?}");
    assert!(batched.0 < strict.0, "{batched:?} vs {strict:?}");
}
