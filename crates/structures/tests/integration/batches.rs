//! Write batches: what a batch does, what a failed one leaves, what it costs in fences, and
//! how it waits for and keeps out other writers.

use std::collections::BTreeMap as Model;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pmem_ordering::stats::thread_stats;
use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::fastfair::FastFairConfig;
use pmem_structures::{Error, Granularity, Store, StoreOptions};

fn store(bytes: u64) -> Store {
    Store::anonymous(
        bytes,
        &StoreOptions::new().granularity(Granularity::Emulated),
    )
    .unwrap()
}

fn small_tree() -> FastFairConfig {
    FastFairConfig {
        node_size: 128,
        ..FastFairConfig::default()
    }
}

const SMALL_TABLE: CcehConfig = CcehConfig {
    buckets_per_segment: 4,
};

#[test]
fn a_batch_writes_all_four_kinds_of_maps_and_reads_its_own_writes() {
    let store = store(32 << 20);
    let words = store
        .hash_map_with::<u64, u64>("words", SMALL_TABLE)
        .unwrap();
    let ordered = store
        .btree_map_with::<u64, u64>("ordered", small_tree())
        .unwrap();
    let bytes = store
        .hash_map_with::<Vec<u8>, Vec<u8>>("bytes", SMALL_TABLE)
        .unwrap();
    let text = store
        .btree_map_with::<String, String>("text", small_tree())
        .unwrap();
    words.insert(1, 10).unwrap();
    ordered.insert(1, 10).unwrap();
    bytes.insert(b"one", b"1").unwrap();
    text.insert("user:00000001", "ada").unwrap();
    let out = store
        .write(|batch| {
            assert_eq!(words.get_in(batch, 1u64)?, Some(10));
            assert_eq!(words.upsert_in(batch, 1u64, 11u64)?, Some(10));
            assert_eq!(words.get_in(batch, 1u64)?, Some(11), "reads its own write");
            assert!(!words.insert_in(batch, 1u64, 12u64)?);
            assert!(words.insert_in(batch, 0u64, 5u64)?, "the reserved key too");
            for k in 2..200u64 {
                words.put_in(batch, k, k * 10)?;
                ordered.put_in(batch, k, k * 10)?;
            }
            assert_eq!(ordered.remove_in(batch, 1u64)?, Some(10));
            assert_eq!(ordered.get_in(batch, 1u64)?, None);
            ordered.put_in(batch, u64::MAX, 7u64)?;
            assert_eq!(bytes.remove_in(batch, b"one")?, Some(b"1".to_vec()));
            for k in 0..100u32 {
                bytes.put_in(batch, format!("key-{k}").as_bytes(), vec![k as u8; 40])?;
                // Keys sharing 7-byte slices: the trie grows layers.
                text.put_in(batch, format!("user:{k:08}"), format!("name {k}"))?;
            }
            assert_eq!(
                text.upsert_in(batch, "user:00000001", "grace")?,
                Some("name 1".to_string())
            );
            Ok::<_, Error>(batch.len())
        })
        .unwrap();
    assert_eq!(out, 2 + 198 + (198 + 2) + (1 + 100) + 100);
    assert_eq!(words.get(1).unwrap(), Some(11));
    assert_eq!(words.get(0).unwrap(), Some(5));
    assert_eq!(words.len(), 200);
    assert_eq!(ordered.get(1).unwrap(), None);
    assert_eq!(ordered.get(u64::MAX).unwrap(), Some(7));
    assert_eq!(ordered.len(), 199);
    let scan: Vec<(u64, u64)> = ordered.range(2..6).collect::<Result<_, _>>().unwrap();
    assert_eq!(scan, [(2, 20), (3, 30), (4, 40), (5, 50)]);
    assert_eq!(bytes.get(b"one").unwrap(), None);
    assert_eq!(bytes.get(b"key-7").unwrap(), Some(vec![7u8; 40]));
    assert_eq!(bytes.len(), 100);
    assert_eq!(
        text.get("user:00000001").unwrap(),
        Some("grace".to_string())
    );
    assert_eq!(text.len(), 100);
    let users: Vec<String> = text
        .range("user:".."user;")
        .map(|p| p.map(|(k, _)| k))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(users.len(), 100);
    assert!(users.windows(2).all(|w| w[0] < w[1]));
    for count in [words.check(), ordered.check(), bytes.check(), text.check()] {
        count.unwrap();
    }
    store.check_blocks().unwrap();
    let report = store.verify();
    assert!(report.is_healthy(), "{report}");
}

/// The pairs of a `u64` ordered map.
fn pairs(map: &pmem_structures::BTreeMap<u64, u64>) -> Model<u64, u64> {
    map.iter().collect::<Result<_, _>>().unwrap()
}

#[test]
fn a_batch_that_fails_or_is_dropped_changes_nothing() {
    let store = store(16 << 20);
    let map = store
        .btree_map_with::<u64, u64>("map", small_tree())
        .unwrap();
    let names = store.hash_map::<String, String>("names").unwrap();
    for k in 0..50 {
        map.insert(k, k).unwrap();
    }
    names.insert("a", "1").unwrap();
    let before = pairs(&map);
    // An error from the closure.
    let result = store.write(|batch| {
        map.upsert_in(batch, 3u64, 300u64)?;
        names.put_in(batch, "b", "2")?;
        Err::<(), Error>(Error::InvalidConfig {
            reason: "the closure's own".into(),
        })
    });
    assert!(matches!(result, Err(Error::InvalidConfig { .. })));
    // A panic inside the closure.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.write(|batch| {
            map.upsert_in(batch, 4u64, 400u64)?;
            panic!("the closure panics");
            #[allow(unreachable_code)]
            Ok::<(), Error>(())
        })
    }));
    assert!(panicked.is_err());
    // Dropped without a commit.
    let mut batch = store.batch().unwrap();
    map.put_in(&mut batch, 5u64, 500u64).unwrap();
    drop(batch);
    // A value past the limit is refused where it is written, and the batch goes on.
    let mut batch = store.batch().unwrap();
    let huge = vec![0u8; pmem_structures::raw::records::MAX_KEY_BYTES + 1];
    let refused = names.put_in(&mut batch, String::from_utf8(huge).unwrap(), "x");
    assert!(
        matches!(refused, Err(Error::KeyTooLarge { .. })),
        "{refused:?}"
    );
    assert!(batch.is_empty());
    drop(batch);
    assert_eq!(pairs(&map), before);
    assert_eq!(names.get("b").unwrap(), None);
    // The maps take single writes again: no gate was left closed.
    map.upsert(3, 33).unwrap();
    names.upsert("b", "2").unwrap();
    store.check_blocks().unwrap();
}

#[test]
fn a_full_pool_fails_the_commit_and_changes_nothing() {
    let store = store(8 << 20);
    let map = store.hash_map::<Vec<u8>, Vec<u8>>("map").unwrap();
    map.insert(b"kept", b"value").unwrap();
    let blocks_before = store.check_blocks().unwrap();
    let result = store.write(|batch| {
        for k in 0..200u32 {
            map.put_in(batch, k.to_le_bytes(), vec![7u8; 32 << 10])?;
        }
        Ok::<_, Error>(())
    });
    assert!(matches!(result, Err(Error::PoolFull { .. })), "{result:?}");
    assert_eq!(map.len(), 1);
    assert_eq!(map.get(b"kept").unwrap(), Some(b"value".to_vec()));
    assert_eq!(map.get(0u32.to_le_bytes()).unwrap(), None);
    // The only block the failed batch leaves is the store's write-batch area.
    assert_eq!(store.check_blocks().unwrap(), blocks_before + 1);
    // And a smaller batch then commits.
    store
        .write(|batch| map.put_in(batch, b"small", b"v"))
        .unwrap();
    assert_eq!(map.get(b"small").unwrap(), Some(b"v".to_vec()));
}

#[test]
fn a_batch_costs_three_fences_whatever_its_size() {
    let store = store(32 << 20);
    let words = store.hash_map::<u64, u64>("words").unwrap();
    let ordered = store.btree_map::<u64, u64>("ordered").unwrap();
    let bytes = store.hash_map::<Vec<u8>, Vec<u8>>("bytes").unwrap();
    let text = store.btree_map::<Vec<u8>, Vec<u8>>("text").unwrap();
    // Room first (segments, leaves, the area, record chunks), so the counted batches need
    // no structural change: the keys go to the same leaves and segments again.
    let fill = |batch: &mut pmem_structures::WriteBatch, round: u64| {
        for k in 0..100u64 {
            let key = k * 1_000_003 % 10_007;
            words.put_in(batch, key + 1, round)?;
            ordered.put_in(batch, key, round)?;
            bytes.put_in(batch, key.to_be_bytes(), round.to_le_bytes())?;
            text.put_in(batch, key.to_be_bytes(), round.to_le_bytes())?;
        }
        Ok::<_, Error>(())
    };
    store.write(|batch| fill(batch, 0)).unwrap();
    for (round, size) in [(1u64, 1usize), (2, 10), (3, 100)] {
        let before = thread_stats().fences;
        store
            .write(|batch| {
                for k in 0..size as u64 {
                    let key = k * 1_000_003 % 10_007;
                    words.put_in(batch, key + 1, round)?;
                    ordered.put_in(batch, key, round)?;
                    bytes.put_in(batch, key.to_be_bytes(), round.to_le_bytes())?;
                    text.put_in(batch, key.to_be_bytes(), round.to_le_bytes())?;
                }
                Ok::<_, Error>(())
            })
            .unwrap();
        let fences = thread_stats().fences - before;
        assert_eq!(fences, 3, "a batch of {} writes over four maps", 4 * size);
    }
    assert_eq!(ordered.get(0).unwrap(), Some(3));
    assert_eq!(
        text.get(0u64.to_be_bytes()).unwrap(),
        Some(3u64.to_le_bytes().to_vec())
    );
    let _ = fill;
}

#[test]
fn a_single_write_on_a_map_this_threads_batch_holds_is_refused() {
    let store = store(8 << 20);
    let map = store.hash_map::<u64, u64>("map").unwrap();
    let other = store.hash_map::<u64, u64>("other").unwrap();
    let mut batch = store.batch().unwrap();
    assert_eq!(map.get_in(&mut batch, 1u64).unwrap(), None);
    let refused = map.insert(1, 1);
    assert!(matches!(refused, Err(Error::InBatch { .. })), "{refused:?}");
    // A map the batch has not read stays open to single writes.
    other.insert(1, 1).unwrap();
    assert!(matches!(store.batch(), Err(Error::InBatch { .. })));
    map.put_in(&mut batch, 2u64, 2u64).unwrap();
    batch.commit().unwrap();
    map.insert(1, 1).unwrap();
    assert_eq!(map.get(2).unwrap(), Some(2));
}

#[test]
fn a_single_writer_waits_for_the_batch_that_holds_its_map() {
    let store = store(8 << 20);
    let map = store.hash_map::<u64, u64>("map").unwrap();
    map.insert(1, 1).unwrap();
    let mut batch = store.batch().unwrap();
    let old = map.get_in(&mut batch, 1u64).unwrap().unwrap();
    let wrote = Arc::new(AtomicBool::new(false));
    let writer = {
        let (map, wrote) = (map.clone(), wrote.clone());
        std::thread::spawn(move || {
            // Waits until the batch ends, then increments what the batch left.
            let v = map.get(1).unwrap().unwrap();
            let _ = v;
            map.upsert(1, 1000).unwrap();
            wrote.store(true, Ordering::SeqCst);
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !wrote.load(Ordering::SeqCst),
        "a single write ran inside the batch"
    );
    map.upsert_in(&mut batch, 1u64, old + 1).unwrap();
    batch.commit().unwrap();
    writer.join().unwrap();
    assert!(wrote.load(Ordering::SeqCst));
    assert_eq!(
        map.get(1).unwrap(),
        Some(1000),
        "the single write came after the batch"
    );
}

#[test]
fn batches_taking_the_same_keys_in_opposite_orders_serialize_without_losing_updates() {
    let store = store(16 << 20);
    let a = store.hash_map::<u64, u64>("a").unwrap();
    let b = store.btree_map_with::<u64, u64>("b", small_tree()).unwrap();
    a.insert(1, 0).unwrap();
    b.insert(1, 0).unwrap();
    const ROUNDS: u64 = 200;
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let (store, a, b) = (store.clone(), a.clone(), b.clone());
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    store
                        .write(|batch| {
                            // One thread reads a then b, the other b then a.
                            let (x, y) = if t == 0 {
                                let x = a.get_in(batch, 1u64)?.unwrap();
                                (x, b.get_in(batch, 1u64)?.unwrap())
                            } else {
                                let y = b.get_in(batch, 1u64)?.unwrap();
                                (a.get_in(batch, 1u64)?.unwrap(), y)
                            };
                            a.upsert_in(batch, 1u64, x + 1)?;
                            b.upsert_in(batch, 1u64, y + 1)?;
                            Ok::<_, Error>(())
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(a.get(1).unwrap(), Some(2 * ROUNDS));
    assert_eq!(b.get(1).unwrap(), Some(2 * ROUNDS));
}

#[test]
fn a_consistent_read_never_sees_half_a_batch() {
    let store = store(16 << 20);
    let a = store.hash_map::<u64, u64>("a").unwrap();
    let b = store.btree_map_with::<u64, u64>("b", small_tree()).unwrap();
    for k in 0..32 {
        a.insert(k, 0).unwrap();
        b.insert(k, 0).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, a, b, stop) = (store.clone(), a.clone(), b.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                store
                    .write(|batch| {
                        for k in 0..32u64 {
                            a.put_in(batch, k, round)?;
                            b.put_in(batch, k, round)?;
                        }
                        Ok::<_, Error>(())
                    })
                    .unwrap();
            }
            round
        })
    };
    // Reads go on until they have seen the writer's third batch, so they span several.
    let (mut reads, mut latest) = (0, 0);
    while reads < 2_000 || latest < 3 {
        let seen = store
            .read_consistent(|| {
                let mut all = Vec::with_capacity(64);
                for k in 0..32 {
                    all.push(a.get(k)?.unwrap());
                    all.push(b.get(k)?.unwrap());
                }
                Ok(all)
            })
            .unwrap();
        assert!(
            seen.windows(2).all(|w| w[0] == w[1]),
            "a read saw two batches: {seen:?}"
        );
        latest = seen[0];
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    assert!(rounds >= 3);
}

#[test]
fn a_store_reopened_after_batches_holds_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("batches.pool");
    let options = StoreOptions::new().granularity(Granularity::Emulated);
    {
        let store = Store::create(&path, 16 << 20, &options).unwrap();
        let map = store
            .btree_map_with::<String, u64>("m", small_tree())
            .unwrap();
        for round in 0..5u64 {
            store
                .write(|batch| {
                    for k in 0..50 {
                        map.put_in(batch, format!("key/{k:04}"), round)?;
                    }
                    Ok::<_, Error>(())
                })
                .unwrap();
        }
    }
    let store = Store::open_with(&path, &options).unwrap();
    let map = store
        .btree_map_with::<String, u64>("m", small_tree())
        .unwrap();
    assert_eq!(map.len(), 50);
    assert_eq!(map.get("key/0049").unwrap(), Some(4));
    store.check_blocks().unwrap();
    assert!(store.verify().is_healthy());
}

/// Bytes of the heap's allocated blocks, and the blocks map `name` owns.
fn space(store: &Store, name: &str) -> (u64, usize) {
    let owned = store
        .owned_blocks()
        .unwrap()
        .into_iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, blocks)| blocks.len());
    (store.space().used, owned)
}

/// Keys of an ordered map of records that need layers: pairs sharing all but their last
/// byte of a 1 KiB run (one compressed layer each), keys leaving such a run half way (a split
/// of the compressed layer), and keys under 7, 14 and 21 shared bytes.
fn layered_keys(round: u32) -> Vec<Vec<u8>> {
    let mut run = format!("{round:05}").into_bytes();
    run.resize(1023, b'p');
    let mut keys = vec![[&run[..], b"a"].concat(), [&run[..], b"b"].concat()];
    let mut half = run[..500].to_vec();
    half.extend_from_slice(b"qq");
    keys.push(half);
    for i in 0..30u32 {
        let shared = ["tenant:", "tenant:user:00", "tenant:user:00:profile"][i as usize % 3];
        keys.push(format!("{shared}{round}/{i}").into_bytes());
    }
    keys
}

#[test]
fn batches_make_the_layers_single_writes_make_and_give_back_the_ones_they_empty() {
    let store = store(16 << 20);
    let batched = store
        .btree_map_with::<Vec<u8>, Vec<u8>>("batched", small_tree())
        .unwrap();
    let single = store
        .btree_map_with::<Vec<u8>, Vec<u8>>("single", small_tree())
        .unwrap();
    // The first batch makes the store's write-batch area: made before anything is measured.
    store
        .write(|batch| batched.put_in(batch, b"warm".to_vec(), b"up".to_vec()))
        .unwrap();
    assert_eq!(
        batched.remove(b"warm".to_vec()).unwrap(),
        Some(b"up".to_vec())
    );
    let empty = (space(&store, "batched"), space(&store, "single"));
    for round in 0..20u32 {
        let keys = layered_keys(round);
        // The first half single, so that the batch meets present records and layers too.
        let (before, after) = keys.split_at(keys.len() / 2);
        for k in before {
            assert!(single.insert(k, k).unwrap());
            assert!(batched.insert(k, k).unwrap());
        }
        for k in after {
            assert!(single.insert(k, k).unwrap());
        }
        store
            .write(|batch| {
                for k in after {
                    assert!(batched.insert_in(batch, k, k)?);
                }
                Ok::<_, Error>(())
            })
            .unwrap();
        let mut sorted = keys.clone();
        sorted.sort();
        let pairs: Vec<(Vec<u8>, Vec<u8>)> =
            sorted.iter().map(|k| (k.clone(), k.clone())).collect();
        assert_eq!(
            batched.iter().collect::<Result<Vec<_>, _>>().unwrap(),
            pairs,
            "round {round}"
        );
        assert_eq!(
            single.iter().collect::<Result<Vec<_>, _>>().unwrap(),
            pairs,
            "round {round}"
        );
        let verified = store.verify();
        assert!(verified.is_healthy(), "round {round}: {verified:?}");
        store.check_blocks().unwrap();
        // Every key removed by one batch: each layer they empty is retired, as a single
        // remove's is, and the map holds what an empty one holds.
        store
            .write(|batch| {
                for k in &keys {
                    assert_eq!(batched.remove_in(batch, k)?, Some(k.clone()));
                }
                Ok::<_, Error>(())
            })
            .unwrap();
        for k in &keys {
            assert_eq!(single.remove(k).unwrap(), Some(k.clone()));
        }
        assert!(batched.is_empty());
        assert_eq!(
            (space(&store, "batched"), space(&store, "single")),
            empty,
            "round {round}: a map emptied by a batch holds more than an empty one"
        );
    }
    store.check_blocks().unwrap();
    assert!(store.verify().is_healthy());
}
