//! A full store can always shrink: every structure kind in a `Store` is filled
//! until the pool reports `PoolFull`, then shrunk with each operation that frees space
//! (datalog truncate and file remove, map removes, `remove_structure`). Each shrink succeeds,
//! the contents equal a std model, the heap walk passes, and afterwards there is room again.

use std::collections::BTreeMap as Model;

use pmem_ordering::Granularity;
use pmem_structures::raw::datalog::{DatalogConfig, Policy, WriteMode, PAGE};
use pmem_structures::{Error, Store, StoreOptions};

/// A small pool, so that filling it is quick.
const POOL: u64 = 4 << 20;

fn store() -> Store {
    Store::anonymous(
        POOL,
        &StoreOptions::new().granularity(Granularity::Emulated),
    )
    .expect("a small anonymous store")
}

fn is_full(e: &Error) -> bool {
    matches!(e, Error::PoolFull { .. })
}

/// Insert `key -> value(key)` for keys 0, 1, ... until the pool is full; the model of what
/// went in and the key that did not fit.
fn fill<K: Ord + Copy, V>(
    mut insert: impl FnMut(u64) -> Result<(K, V), Error>,
) -> (Model<K, V>, u64) {
    let mut model = Model::new();
    for i in 0.. {
        match insert(i) {
            Ok((k, v)) => {
                model.insert(k, v);
            }
            Err(e) if is_full(&e) => return (model, i),
            Err(e) => panic!("insert {i}: {e}"),
        }
    }
    unreachable!("the pool fills")
}

#[test]
fn a_full_u64_hash_map_removes_keys_and_has_room_again() {
    let store = store();
    let map = store.hash_map::<u64, u64>("h").unwrap();
    let (mut model, refused) = fill(|i| map.insert(i, i * 3).map(|_| (i, i * 3)));
    assert!(model.len() > 1000, "the pool held {} keys", model.len());
    for k in (0..refused).step_by(2) {
        assert_eq!(map.remove(k).unwrap(), model.remove(&k));
    }
    for (k, v) in &model {
        assert_eq!(map.get(*k).unwrap(), Some(*v));
    }
    assert_eq!(map.len(), model.len() as u64);
    store.check_blocks().unwrap();
    map.insert(refused, 1).unwrap();
    store.check_blocks().unwrap();
}

#[test]
fn a_full_u64_btree_map_removes_keys_and_has_room_again() {
    let store = store();
    let map = store.btree_map::<u64, u64>("b").unwrap();
    let (mut model, refused) = fill(|i| map.insert(i, i + 7).map(|_| (i, i + 7)));
    assert!(model.len() > 1000, "the pool held {} keys", model.len());
    // Every other key, then a whole range: merges as leaves empty.
    for k in (0..refused).step_by(2) {
        assert_eq!(map.remove(k).unwrap(), model.remove(&k));
    }
    for k in 0..refused / 2 {
        assert_eq!(map.remove(k).unwrap(), model.remove(&k));
    }
    for (k, v) in &model {
        assert_eq!(map.get(*k).unwrap(), Some(*v));
    }
    assert_eq!(map.len(), model.len() as u64);
    store.check_blocks().unwrap();
    map.insert(refused, 1).unwrap();
    store.check_blocks().unwrap();
}

fn key_bytes(i: u64) -> Vec<u8> {
    format!("key:{i:08}").into_bytes()
}

fn value_bytes(i: u64) -> Vec<u8> {
    vec![i as u8; 100]
}

/// A byte-key map's insert, and its remove or get, over either kind of map.
type InsertBytes = Box<dyn Fn(&[u8], &[u8]) -> Result<bool, Error>>;
type ReadBytes = Box<dyn Fn(&[u8]) -> Result<Option<Vec<u8>>, Error>>;

#[test]
fn full_byte_key_maps_remove_keys_and_have_room_again() {
    for ordered in [false, true] {
        let store = store();
        let (map_insert, map_remove, map_get): (InsertBytes, ReadBytes, ReadBytes) = if ordered {
            let m = store.btree_map::<Vec<u8>, Vec<u8>>("r").unwrap();
            let (a, b, c) = (m.clone(), m.clone(), m);
            (
                Box::new(move |k, v| a.insert(k, v)),
                Box::new(move |k| b.remove(k)),
                Box::new(move |k| c.get(k)),
            )
        } else {
            let m = store.hash_map::<Vec<u8>, Vec<u8>>("r").unwrap();
            let (a, b, c) = (m.clone(), m.clone(), m);
            (
                Box::new(move |k, v| a.insert(k, v)),
                Box::new(move |k| b.remove(k)),
                Box::new(move |k| c.get(k)),
            )
        };
        let (mut model, refused) =
            fill(|i| map_insert(&key_bytes(i), &value_bytes(i)).map(|_| (i, value_bytes(i))));
        assert!(
            model.len() > 100,
            "ordered {ordered}: {} records",
            model.len()
        );
        for k in (0..refused).step_by(2) {
            assert_eq!(map_remove(&key_bytes(k)).unwrap(), model.remove(&k));
        }
        for (k, v) in &model {
            assert_eq!(map_get(&key_bytes(*k)).unwrap().as_ref(), Some(v));
        }
        store.check_blocks().unwrap();
        map_insert(&key_bytes(refused), &value_bytes(refused)).unwrap();
        store.check_blocks().unwrap();
    }
}

/// A datalog filled with files "f0", "f1", ... of up to 8 pages each (written `write` bytes at
/// a time under `mode`) until the pool is full; the model of the files.
fn fill_datalog(
    files: &pmem_structures::Datalog,
    mode: WriteMode,
    write: usize,
) -> Model<String, Vec<u8>> {
    let mut model = Model::new();
    for n in 0u64.. {
        let name = format!("f{n}");
        let id = match files.create_file(&name).map_err(Error::from) {
            Ok(id) => id,
            Err(e) if is_full(&e) => break,
            Err(e) => panic!("{e}"),
        };
        let mut contents = Vec::new();
        let mut full = false;
        for chunk in 0..(8 * PAGE as usize / write) {
            let bytes = vec![(n as usize * 31 + chunk) as u8; write];
            match files
                .write_at_with(id, contents.len() as u64, &bytes, mode)
                .map_err(Error::from)
            {
                Ok(()) => contents.extend_from_slice(&bytes),
                Err(e) if is_full(&e) => {
                    full = true;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        model.insert(name, contents);
        if full {
            break;
        }
    }
    model
}

fn contents(files: &pmem_structures::Datalog, name: &str) -> Vec<u8> {
    let id = files.open_file(name).unwrap();
    let mut buf = vec![0u8; files.len(id).unwrap() as usize];
    assert_eq!(files.read_at(id, 0, &mut buf).unwrap(), buf.len());
    buf
}

fn assert_files(files: &pmem_structures::Datalog, model: &Model<String, Vec<u8>>) {
    assert_eq!(files.list(), model.keys().cloned().collect::<Vec<_>>());
    for (name, bytes) in model {
        assert!(contents(files, name) == *bytes, "file {name} differs");
    }
}

#[test]
fn a_full_datalog_truncates_and_removes_files_and_has_room_again() {
    for (mode, write) in [
        (WriteMode::CopyOnWrite, PAGE as usize),
        (WriteMode::CopyOnWrite, 1000),
        (WriteMode::Embedded, 700),
    ] {
        let what = format!("{mode:?}, {write}-byte writes");
        let store = store();
        let files = store
            .datalog(
                "files",
                DatalogConfig {
                    max_files: 512,
                    policy: Policy::with_mode(mode),
                },
            )
            .unwrap();
        let mut model = fill_datalog(&files, mode, write);
        assert!(model.len() > 4, "{what}: {} files", model.len());
        let names: Vec<String> = model.keys().cloned().collect();
        // Every file to half its length (mid-page for most), then some to zero.
        for name in &names {
            let id = files.open_file(name).unwrap();
            let half = model[name].len() as u64 / 2 + 1;
            let half = half.min(model[name].len() as u64);
            files
                .truncate(id, half)
                .unwrap_or_else(|e| panic!("{what}: truncate {name} to {half}: {e}"));
            model.get_mut(name).unwrap().truncate(half as usize);
        }
        assert_files(&files, &model);
        for name in names.iter().step_by(3) {
            let id = files.open_file(name).unwrap();
            files
                .truncate(id, 0)
                .unwrap_or_else(|e| panic!("{what}: truncate {name} to 0: {e}"));
            model.get_mut(name).unwrap().clear();
        }
        for name in names.iter().skip(1).step_by(3) {
            files
                .remove(name)
                .unwrap_or_else(|e| panic!("{what}: remove {name}: {e}"));
            model.remove(name);
        }
        assert_files(&files, &model);
        store.check_blocks().unwrap();
        // Room again (in the size class the fill used: 4 KiB data and log pages). A file cut
        // mid-page grows back with zeros past its old end, and a new file takes a page.
        let (name, old_len) = model
            .iter()
            .map(|(n, bytes)| (n.clone(), bytes.len()))
            .find(|(_, len)| len % PAGE as usize != 0 && len % (PAGE as usize) < 4000)
            .expect("a file cut mid-page");
        let id = files.open_file(&name).unwrap();
        files.write_at(id, old_len as u64 + 50, b"again").unwrap();
        let m = model.get_mut(&name).unwrap();
        m.resize(old_len + 50, 0);
        m.extend_from_slice(b"again");
        let id = files.create_file("new").unwrap();
        files.write_at(id, 0, &[9u8; PAGE as usize]).unwrap();
        model.insert("new".into(), vec![9u8; PAGE as usize]);
        assert_files(&files, &model);
        store.check_blocks().unwrap();
    }
}

/// A file whose last log page is exactly full when the pool fills: its truncate needs a log
/// entry and no page can be allocated, so it takes the room every log keeps past its tail.
#[test]
fn a_truncate_finds_log_room_when_the_tail_page_is_full_and_the_pool_too() {
    let store = store();
    let files = store
        .datalog(
            "files",
            DatalogConfig {
                max_files: 4,
                policy: Policy::with_mode(WriteMode::Embedded),
            },
        )
        .unwrap();
    let victim = files.create_file("victim").unwrap();
    let mut model = Vec::new();
    // Four embeds of 976 bytes: entries of 32 + 976 bytes fill the 4032 bytes a log page holds.
    for p in 0..4u64 {
        files
            .write_at(victim, p * PAGE, &[p as u8 + 1; 976])
            .unwrap();
        model.resize(p as usize * PAGE as usize, 0);
        model.extend_from_slice(&[p as u8 + 1; 976]);
    }
    let filler = files.create_file("filler").unwrap();
    for p in 0u64.. {
        match files
            .write_at_with(
                filler,
                p * PAGE,
                &[7u8; PAGE as usize],
                WriteMode::CopyOnWrite,
            )
            .map_err(Error::from)
        {
            Ok(()) => {}
            Err(e) if is_full(&e) => break,
            Err(e) => panic!("{e}"),
        }
    }
    files.truncate(victim, 2 * PAGE + 10).unwrap();
    model.truncate(2 * PAGE as usize + 10);
    assert_eq!(contents(&files, "victim"), model);
    store.check_blocks().unwrap();
    files.remove("filler").unwrap();
    files.truncate(victim, 0).unwrap();
    assert!(contents(&files, "victim").is_empty());
    store.check_blocks().unwrap();
}

#[test]
fn a_full_store_removes_each_kind_of_structure_and_has_room_again() {
    for victim in ["h", "b", "rh", "rb", "d"] {
        let store = store();
        let h = store.hash_map::<u64, u64>("h").unwrap();
        let b = store.btree_map::<u64, u64>("b").unwrap();
        let rh = store.hash_map::<Vec<u8>, Vec<u8>>("rh").unwrap();
        let rb = store.btree_map::<Vec<u8>, Vec<u8>>("rb").unwrap();
        let d = store.datalog("d", DatalogConfig::default()).unwrap();
        let f = d.create_file("f").unwrap();
        // Fill in turns, so every structure holds part of the pool.
        let mut full = [false; 5];
        let mut i = 0u64;
        while !full.iter().all(|&x| x) {
            let results: [Result<(), Error>; 5] = [
                h.insert(i, i).map(drop),
                b.insert(i, i).map(drop),
                rh.insert(key_bytes(i), value_bytes(i)).map(drop),
                rb.insert(key_bytes(i), value_bytes(i)).map(drop),
                d.write_at(f, i * PAGE, &[i as u8; PAGE as usize])
                    .map_err(Error::from),
            ];
            for (k, r) in results.into_iter().enumerate() {
                match r {
                    Ok(()) => {}
                    Err(e) if is_full(&e) => full[k] = true,
                    Err(e) => panic!("{e}"),
                }
            }
            i += 1;
        }
        let before: Vec<String> = store.names();
        drop((h, b, rh, rb, d));
        store
            .remove_structure(victim)
            .unwrap_or_else(|e| panic!("remove {victim} from a full store: {e}"));
        let after: Vec<String> = before.into_iter().filter(|n| n != victim).collect();
        assert_eq!(store.names(), after);
        store.check_blocks().unwrap();
        // Room again: the same kind made anew under the name takes the freed space (another
        // kind might not: the allocator's size classes keep freed blocks for their class).
        match victim {
            "h" => {
                let m = store.hash_map::<u64, u64>("h").unwrap();
                (0..1000).for_each(|k| assert!(m.insert(k, k).unwrap()));
            }
            "b" => {
                let m = store.btree_map::<u64, u64>("b").unwrap();
                (0..1000).for_each(|k| assert!(m.insert(k, k).unwrap()));
            }
            "rh" => {
                let m = store.hash_map::<Vec<u8>, Vec<u8>>("rh").unwrap();
                (0..100).for_each(|k| assert!(m.insert(key_bytes(k), value_bytes(k)).unwrap()));
            }
            "rb" => {
                let m = store.btree_map::<Vec<u8>, Vec<u8>>("rb").unwrap();
                (0..100).for_each(|k| assert!(m.insert(key_bytes(k), value_bytes(k)).unwrap()));
            }
            _ => {
                let d = store.datalog("d", DatalogConfig::default()).unwrap();
                let f = d.create_file("f").unwrap();
                d.write_at(f, 0, &[1u8; 8 * PAGE as usize]).unwrap();
            }
        }
        store.check_blocks().unwrap();
    }
}
