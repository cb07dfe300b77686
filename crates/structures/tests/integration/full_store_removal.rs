//! Removing a structure from a store with no room at all: when its list of blocks fits neither
//! its own largest block nor fresh blocks, the store empties it by its own removes (its entry
//! `Draining`) and then removes what is left. Run on every kind, and under simulated crashes (every event of a small case, samples of larger ones): after
//! recovery the structure is either whole, with its contents, or gone, the heap holds exactly
//! the listed structures' blocks, and the store's `verify()` finds nothing. A store with a
//! write-batch area (catalog version 3) drains the same way, its batch's map untouched.

use std::collections::BTreeMap as Model;

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimBackend, SimConfig};
use pmem_ordering::Granularity;
use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::datalog::{DatalogConfig, PAGE};
use pmem_structures::raw::fastfair::FastFairConfig;
use pmem_structures::{Datalog, Error, Store, StoreOptions};
use pmem_test_kit::run_crash_test;
use pmem_undo_log::Heap;

fn is_full(e: &Error) -> bool {
    matches!(e, Error::PoolFull { .. })
}

/// Write 4 KiB pages into the file `id` of `files` until the pool is full: no free chunk and
/// no free 4 KiB block is left (the size of a link of a removal's list).
fn fill_with_pages<B: pmem_ordering::Backend>(
    files: &Datalog<B>,
    id: pmem_structures::raw::datalog::FileId,
) {
    for p in 0u64.. {
        match files
            .write_at(id, p * PAGE, &[p as u8; PAGE as usize])
            .map_err(Error::from)
        {
            Ok(()) => {}
            Err(e) if is_full(&e) => return,
            Err(e) => panic!("{e}"),
        }
    }
}

fn key_bytes(i: u64) -> Vec<u8> {
    format!("tenant:{:03}:key:{i:06}", i % 7).into_bytes()
}

#[test]
fn every_kind_is_removed_from_a_store_with_no_room() {
    // The `u64` hash map lists its blocks in its directory; the others are emptied first
    // (those whose list fits their own largest block are removed at once).
    for victim in ["h", "b", "rh", "rb", "d"] {
        let store = Store::anonymous(
            8 << 20,
            &StoreOptions::new().granularity(Granularity::Emulated),
        )
        .unwrap();
        let filler = store.datalog("filler", DatalogConfig::default()).unwrap();
        let pages = filler.create_file("pages").unwrap();
        let insert: Box<dyn Fn(u64) -> Result<(), Error>> = match victim {
            "h" => {
                let m = store.hash_map::<u64, u64>("h").unwrap();
                Box::new(move |i| m.insert(i, i).map(drop))
            }
            "b" => {
                let m = store.btree_map::<u64, u64>("b").unwrap();
                Box::new(move |i| m.insert(i, i).map(drop))
            }
            "rh" => {
                let m = store.hash_map::<Vec<u8>, Vec<u8>>("rh").unwrap();
                Box::new(move |i| m.insert(key_bytes(i), b"v").map(drop))
            }
            "rb" => {
                let m = store.btree_map::<Vec<u8>, Vec<u8>>("rb").unwrap();
                Box::new(move |i| m.insert(key_bytes(i), b"v").map(drop))
            }
            _ => {
                // Eight files of 1 KiB writes, a page each.
                let d = store.datalog("d", DatalogConfig::default()).unwrap();
                let ids: Vec<_> = (0..8)
                    .map(|f| d.create_file(&format!("f{f}")).unwrap())
                    .collect();
                Box::new(move |i| {
                    let (id, at) = (ids[i as usize % 8], (i / 8) * PAGE);
                    d.write_at(id, at, &[i as u8; 1024]).map_err(Error::from)
                })
            }
        };
        let mut n = 0;
        loop {
            match insert(n) {
                Ok(()) => n += 1,
                Err(e) if is_full(&e) => break,
                Err(e) => panic!("{victim}: {e}"),
            }
        }
        drop(insert);
        fill_with_pages(&filler, pages);
        drop(filler);
        store
            .remove_structure(victim)
            .unwrap_or_else(|e| panic!("remove {victim} ({n} entries) with no room: {e}"));
        assert_eq!(store.names(), vec!["filler".to_string()]);
        store.check_blocks().unwrap();
        assert!(
            store.verify().is_healthy(),
            "{victim}: {:?}",
            store.verify()
        );
    }
}

type SimStore = Store<SimBackend>;

/// 4-bucket segments: records and segments outnumber what the map's largest block (its
/// intent area) can list.
const TABLE: CcehConfig = CcehConfig {
    buckets_per_segment: 4,
};

/// Which map the crash runs remove.
#[derive(Clone, Copy, Debug)]
enum Victim {
    RecordHash,
    RecordTree,
}

fn victim_map(store: &SimStore, victim: Victim) -> Result<Model<Vec<u8>, Vec<u8>>, Error> {
    match victim {
        Victim::RecordHash => store
            .hash_map_with::<Vec<u8>, Vec<u8>>("victim", TABLE)?
            .iter()
            .collect(),
        Victim::RecordTree => store
            .btree_map_with::<Vec<u8>, Vec<u8>>(
                "victim",
                FastFairConfig {
                    node_size: 128,
                    ..FastFairConfig::default()
                },
            )?
            .iter()
            .collect(),
    }
}

/// The map a batch writes before the fill, in [`crash_removal`]'s stores with a write-batch
/// area.
const BATCHED: &str = "batched";

/// What the batch before the fill writes.
fn batched_model() -> Model<Vec<u8>, Vec<u8>> {
    (0..3u8).map(|i| (vec![b'k', i], vec![i; 4])).collect()
}

/// Crash-test the removal of a map of `keys` keys from a simulated store filled up with pages;
/// with `batch_area`, a batch over another map first gives the store its write-batch area.
fn crash_removal(
    name: &str,
    victim: Victim,
    keys: u64,
    points: CrashPoints,
    batch_area: bool,
) -> u64 {
    let test = CrashTest::new(name, SimConfig::x86())
        .pool("pmem-store", 1 << 20, 64 + 4 * 128)
        .points(points)
        .images(Images::Random(1))
        .seed(28);
    let options = pmem_test_kit::crash_store_options(4);
    let model: Model<Vec<u8>, Vec<u8>> = (0..keys)
        .map(|i| (key_bytes(i), vec![i as u8; 8]))
        .collect();
    let report = run_crash_test(
        &test,
        |pool| {
            let store = SimStore::format(pool.clone(), &options).expect("format the store");
            if batch_area {
                let batched = store.hash_map::<Vec<u8>, Vec<u8>>(BATCHED).unwrap();
                store
                    .write(|batch| {
                        for (k, v) in batched_model() {
                            batched.put_in(batch, k, v)?;
                        }
                        Ok::<_, Error>(())
                    })
                    .expect("the batch that makes the area");
            }
            // Made through `victim_map`'s configuration, then filled.
            victim_map(&store, victim).expect("make the map");
            for (k, v) in &model {
                match victim {
                    Victim::RecordHash => store
                        .hash_map::<Vec<u8>, Vec<u8>>("victim")
                        .unwrap()
                        .insert(k, v)
                        .map(drop),
                    Victim::RecordTree => store
                        .btree_map::<Vec<u8>, Vec<u8>>("victim")
                        .unwrap()
                        .insert(k, v)
                        .map(drop),
                }
                .expect("fill the map");
            }
            let files = store.datalog("filler", DatalogConfig::default()).unwrap();
            let pages = files.create_file("pages").unwrap();
            fill_with_pages(&files, pages);
        },
        |pool| {
            let store = SimStore::load(Heap::open(pool.clone()).unwrap()).expect("load the store");
            store.remove_structure("victim").expect("remove the map");
            pool.operation_completed();
        },
        |pool, crash| {
            let store = pmem_test_kit::reload_store(pool)?;
            pmem_test_kit::store_is_whole(&store)?;
            if batch_area {
                let batched = store
                    .hash_map::<Vec<u8>, Vec<u8>>(BATCHED)
                    .and_then(|m| m.iter().collect::<Result<Model<_, _>, _>>())
                    .map_err(|e| e.to_string())?;
                if batched != batched_model() {
                    return Err(format!("the batch's map holds {batched:?}"));
                }
            }
            let listed = store.names().contains(&"victim".to_string());
            if crash.operations_completed == 1 && listed {
                return Err("the removal returned, and the map is still listed".into());
            }
            if listed {
                let now = victim_map(&store, victim).map_err(|e| e.to_string())?;
                if now != model {
                    return Err(format!(
                        "the map is listed with {} of its {} pairs",
                        now.len(),
                        model.len()
                    ));
                }
            }
            Ok(())
        },
    );
    report.points
}

#[test]
fn every_crash_of_a_removal_that_empties_a_hash_map_first_recovers() {
    // 130 records, 40-odd segments: more than the 127 its 1 KiB intent area lists.
    let points = crash_removal(
        "drain-hash",
        Victim::RecordHash,
        130,
        CrashPoints::Every,
        false,
    );
    assert!(points > 1000, "{points} crash points");
}

#[test]
fn crashes_in_a_drain_beside_a_write_batch_area_recover() {
    // The catalog is version 3 (a batch made its write-batch area) when the entry turns
    // `Draining`: both load, the drain finishes, the batch's map keeps what it committed.
    let points = crash_removal(
        "drain-beside-batches",
        Victim::RecordHash,
        130,
        CrashPoints::Sample(200),
        true,
    );
    // Samples of one event are counted once: 190 distinct points when this was written.
    assert!(points > 150, "{points} crash points");
}

#[test]
fn crashes_in_a_removal_that_empties_an_ordered_map_first_recover() {
    // 700 records: more than the 511 its largest block (a layer's 4 KiB redo area) lists.
    let points = crash_removal(
        "drain-tree",
        Victim::RecordTree,
        700,
        CrashPoints::Sample(300),
        false,
    );
    assert!(points >= 300, "{points} crash points");
}
