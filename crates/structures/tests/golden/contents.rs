//! What a golden pool file holds: the one definition that `examples/golden_pools.rs` writes
//! and `tests/integration/golden.rs` checks. Every kind of structure a store holds, under each of its
//! configurations that the pool records (segment size, node size, each shift policy, the
//! datalog's policy), typed keys and values inline and in records (a value spanning chunks
//! among them), byte keys deep enough to make trie layers, datalog files written both ways and
//! truncated, renamed and removed files, the keys the `u64` structures reserve for
//! themselves, and a catalog entry freed by a removed structure. The byte-key maps' first
//! writes are write batches (which give the store its write-batch area), the same pairs as
//! files written before batches existed hold by single writes. Files made since the store
//! serves the leaf layout also hold "events", an ordered map of leaves (pairs inline and in
//! records, leaves split and unlinked); [`check`] checks it where the file lists it.
//!
//! Changing what this file writes changes what every golden file must hold: add to it only
//! together with a new golden file, and keep reading the old ones the same way.

use std::collections::BTreeMap as Model;

use pmem_structures::raw::datalog::{DatalogConfig, Policy};
use pmem_structures::{
    BTreeLayout, CcehConfig, FastFairConfig, Granularity, HeapConfig, LeafMapConfig, ShiftPolicy,
    Store, StoreOptions, WriteMode,
};

/// Bytes of a golden pool.
pub const POOL_BYTES: u64 = 2 << 20;

/// The options the golden stores are made with: a small heap (so the file is small) and room
/// for a few names. Only the granularity applies at open.
pub fn options() -> StoreOptions {
    StoreOptions::new()
        .granularity(Granularity::Emulated)
        .heap(HeapConfig {
            lanes: 2,
            lane_log_bytes: 16 << 10,
            chunk_size: 64 << 10,
        })
        .max_structures(12)
}

/// One write of a map: `Some` upserts the value, `None` removes the key.
type Op<K, V> = (K, Option<V>);

fn apply<K: Ord + Clone, V: Clone>(ops: &[Op<K, V>]) -> Model<K, V> {
    let mut model = Model::new();
    for (key, value) in ops {
        match value {
            Some(v) => model.insert(key.clone(), v.clone()),
            None => model.remove(key),
        };
    }
    model
}

/// `u64 -> u64` in CCEH with 16-bucket segments: splits and doublings, key 0 (the one CCEH
/// reserves, kept in the catalog entry) removed and written again.
fn counters() -> Vec<Op<u64, u64>> {
    let mut ops: Vec<Op<u64, u64>> = (0..240).map(|k| (k, Some(k * 3 + 1))).collect();
    ops.extend((0..240).step_by(7).map(|k| (k, None)));
    ops.extend([(0, Some(7)), (5, Some(555)), (u64::MAX, Some(1))]);
    ops
}

/// `i64 -> u32` in FAST&FAIR with 128-byte nodes and redo-logged shifts: negative keys, a
/// tree several levels deep, merges from the removals, and `i64::MAX`, whose encoded word is
/// the one FAST&FAIR reserves.
fn orders() -> Vec<Op<i64, u32>> {
    let mut ops: Vec<Op<i64, u32>> = (-150..150).map(|k| (k, Some((k + 1000) as u32))).collect();
    ops.extend((-150..150).filter(|k| k % 3 == 0).map(|k| (k, None)));
    ops.extend([(i64::MIN, Some(0)), (i64::MAX, Some(u32::MAX))]);
    ops
}

/// `u64 -> u64` in FAST&FAIR with FAST shifts, `u64::MAX` (the key FAST&FAIR reserves) in it.
fn ticks() -> Vec<Op<u64, u64>> {
    let mut ops: Vec<Op<u64, u64>> = (0..120).map(|k| (k * 1_000_003, Some(k))).collect();
    ops.push((u64::MAX, Some(42)));
    ops
}

/// `u16 -> i8` in FAST&FAIR with a flush and fence per shifted entry.
fn levels() -> Vec<Op<u16, i8>> {
    (0..90u16)
        .rev()
        .map(|k| (k * 700, Some((k as i8).wrapping_sub(45))))
        .collect()
}

/// `String -> Vec<u8>` in CCEH records: overwrites, removals, an empty value, and one value
/// of 100 KiB (a record run of chunks).
fn users() -> Vec<Op<String, Vec<u8>>> {
    let mut ops: Vec<Op<String, Vec<u8>>> = (0..60)
        .map(|i| (format!("user-{i}"), Some(vec![i as u8; i * 5])))
        .collect();
    ops.extend((0..60).step_by(4).map(|i| (format!("user-{i}"), None)));
    ops.extend((0..60).step_by(5).map(|i| {
        (
            format!("user-{i}"),
            Some(format!("{{\"plan\":\"pro\",\"n\":{i}}}").into_bytes()),
        )
    }));
    ops.push((
        "big".to_string(),
        Some((0..100 << 10).map(|i| i as u8).collect()),
    ));
    ops
}

/// `Vec<u8> -> String` in a trie of FAST&FAIR layers: keys sharing 7, 14 and more bytes (new
/// layers), the empty key, keys that end where others go on.
fn sessions() -> Vec<Op<Vec<u8>, String>> {
    let mut ops: Vec<Op<Vec<u8>, String>> = (0..80)
        .map(|i| {
            let key = format!("session:user:{:08}", i * 37).into_bytes();
            (key, Some(format!("token-{i}")))
        })
        .collect();
    ops.extend([
        (Vec::new(), Some("empty key".to_string())),
        (
            b"session".to_vec(),
            Some("a prefix of the others".to_string()),
        ),
        (b"session:".to_vec(), Some(String::new())),
        (b"zz".to_vec(), Some("last".to_string())),
    ]);
    ops.extend(
        (0..80)
            .step_by(9)
            .map(|i| (format!("session:user:{:08}", i * 37).into_bytes(), None)),
    );
    ops
}

/// `[u8; 16] -> u128` in CCEH records (both too wide for a slot).
fn ids() -> Vec<Op<[u8; 16], u128>> {
    (0..40u128)
        .map(|i| ((i * 0x0101_0101).to_be_bytes(), Some(i << 70 | i)))
        .collect()
}

/// The datalog's files after [`write_files`], name -> contents.
/// "events", an ordered map of leaves of 4 KiB (31 slots of 128 bytes): 300 keys in order
/// split leaves; values of 300 bytes (every ninth key) live in records; removes of every key
/// from 120 to 199 empty and unlink the leaves between; some keys overwritten.
fn events() -> Vec<Op<String, Vec<u8>>> {
    let key = |i: u32| format!("event:{i:05}");
    let value = |i: u32, round: u8| match i % 9 {
        0 => vec![round ^ (i as u8); 300],
        _ => format!("payload {i} round {round}").into_bytes(),
    };
    let mut ops: Vec<Op<String, Vec<u8>>> = (0..300).map(|i| (key(i), Some(value(i, 0)))).collect();
    ops.extend((120..200).map(|i| (key(i), None)));
    ops.extend((0..300).step_by(7).map(|i| (key(i), Some(value(i, 1)))));
    ops
}

/// The shape of "events"' leaves.
pub const EVENT_LEAVES: LeafMapConfig = LeafMapConfig {
    leaf_bytes: 4096,
    slot_bytes: 128,
};

fn files_model() -> Model<String, Vec<u8>> {
    let mut journal = vec![b'.'; 8192];
    journal[100..105].copy_from_slice(b"hello");
    let across = b"across a page boundary";
    journal[4090..4090 + across.len()].copy_from_slice(across);
    journal.truncate(6000);
    let blob: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    Model::from([("blob".to_string(), blob), ("journal".to_string(), journal)])
}

fn write_files(store: &Store) -> Result<(), Box<dyn std::error::Error>> {
    let config = DatalogConfig {
        max_files: 8,
        policy: Policy::with_mode(WriteMode::Auto),
    };
    let files = store.datalog("files", config)?;
    let notes = files.create_file("notes")?;
    files.write_at(notes, 0, &[b'.'; 8192])?; // two whole pages: copy-on-write
    files.write_at(notes, 100, b"hello")?; // a small piece: embedded
    files.write_at_with(notes, 4090, b"across a page boundary", WriteMode::Embedded)?;
    files.truncate(notes, 6000)?; // a set-size entry
    files.rename("notes", "journal")?;
    let blob = files.create_file("blob")?;
    let bytes: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    files.write_at_with(blob, 0, &bytes, WriteMode::CopyOnWrite)?;
    let scratch = files.create_file("scratch")?;
    files.write_at(scratch, 0, b"gone")?;
    files.remove("scratch")?;
    Ok(())
}

/// Write every structure into `store` (a new, empty one).
pub fn write(store: &Store) -> Result<(), Box<dyn std::error::Error>> {
    // Made first and removed last: its catalog entry is left free between used ones.
    let scratch = store.hash_map::<u64, u64>("scratch")?;
    for k in 1..=10u64 {
        scratch.insert(k, k)?;
    }
    drop(scratch);
    let small_segments = CcehConfig {
        buckets_per_segment: 16,
    };
    let counters_map = store.hash_map_with::<u64, u64>("counters", small_segments)?;
    for (k, v) in counters() {
        match v {
            Some(v) => counters_map.upsert(k, v).map(drop)?,
            None => counters_map.remove(k).map(drop)?,
        }
    }
    let tree = |policy| FastFairConfig {
        node_size: 128,
        policy,
    };
    let orders_map = store.btree_map_with::<i64, u32>("orders", tree(ShiftPolicy::Redo))?;
    for (k, v) in orders() {
        match v {
            Some(v) => orders_map.upsert(k, v).map(drop)?,
            None => orders_map.remove(k).map(drop)?,
        }
    }
    let ticks_map = store.btree_map_with::<u64, u64>("ticks", tree(ShiftPolicy::Fast))?;
    for (k, v) in ticks() {
        ticks_map.upsert(k, v.expect("only upserts"))?;
    }
    let levels_map = store.btree_map_with::<u16, i8>("levels", tree(ShiftPolicy::PerShift))?;
    for (k, v) in levels() {
        levels_map.upsert(k, v.expect("only upserts"))?;
    }
    let users_map = store.hash_map::<String, Vec<u8>>("users")?;
    let sessions_config = FastFairConfig {
        node_size: 256,
        policy: ShiftPolicy::Fast,
    };
    let sessions_map = store.btree_map_with::<Vec<u8>, String>("sessions", sessions_config)?;
    // One batch over both byte-key maps: their first upserts (layers made for the batch's
    // keys sharing 16 bytes); the rest one by one.
    let (users_ops, sessions_ops) = (users(), sessions());
    let (users_batched, users_single) = users_ops.split_at(60);
    let (sessions_batched, sessions_single) = sessions_ops.split_at(80);
    store.write(|batch| {
        for (k, v) in users_batched {
            users_map.put_in(batch, k, v.as_ref().expect("upserts first"))?;
        }
        for (k, v) in sessions_batched {
            sessions_map.put_in(batch, k, v.as_ref().expect("upserts first"))?;
        }
        Ok::<_, pmem_structures::Error>(())
    })?;
    for (k, v) in users_single.iter().cloned() {
        match v {
            Some(v) => users_map.upsert(&k, &v).map(drop)?,
            None => users_map.remove(&k).map(drop)?,
        }
    }
    for (k, v) in sessions_single.iter().cloned() {
        match v {
            Some(v) => sessions_map.upsert(&k, &v).map(drop)?,
            None => sessions_map.remove(&k).map(drop)?,
        }
    }
    let ids_map = store.hash_map::<[u8; 16], u128>("ids")?;
    for (k, v) in ids() {
        ids_map.upsert(k, v.expect("only upserts"))?;
    }
    write_files(store)?;
    let events_map = store.btree_map_with::<String, Vec<u8>>("events", EVENT_LEAVES)?;
    for (k, v) in events() {
        match v {
            Some(v) => events_map.upsert(&k, &v).map(drop)?,
            None => events_map.remove(&k).map(drop)?,
        }
    }
    store.remove_structure("scratch")?;
    Ok(())
}

/// Fail with what differs unless `found` (in any order) holds exactly `model`'s pairs.
fn same<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
    name: &str,
    mut found: Vec<(K, V)>,
    model: Model<K, V>,
) -> Result<(), String> {
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let expected: Vec<(K, V)> = model.into_iter().collect();
    if found.len() != expected.len() {
        return Err(format!(
            "{name}: {} pairs, {} expected",
            found.len(),
            expected.len()
        ));
    }
    match found.iter().zip(&expected).position(|(f, e)| f != e) {
        Some(i) => Err(format!(
            "{name}: pair {i} is {:?}, {:?} expected",
            found[i], expected[i]
        )),
        None => Ok(()),
    }
}

/// Check that `store` holds exactly what [`write`] wrote: every pair through iteration and
/// through lookups, ordered scans of the B+-trees, the datalog's files byte for byte.
pub fn check(store: &Store) -> Result<(), Box<dyn std::error::Error>> {
    let names = store.names();
    let has_events = names.iter().any(|n| n == "events");
    let mut expected = vec![
        "counters", "files", "ids", "levels", "orders", "sessions", "ticks", "users",
    ];
    if has_events {
        expected.insert(1, "events");
    }
    if names != expected {
        return Err(format!("names {names:?}, {expected:?} expected").into());
    }

    let map = store.hash_map::<u64, u64>("counters")?;
    let model = apply(&counters());
    for (k, v) in &model {
        if map.get(*k)? != Some(*v) {
            return Err(format!("counters: key {k} does not hold {v}").into());
        }
    }
    if map.get(7u64)?.is_some() {
        return Err("counters: removed key 7 is found".into());
    }
    same("counters", map.iter().collect::<Result<_, _>>()?, model)?;

    let map = store.btree_map::<i64, u32>("orders")?;
    let model = apply(&orders());
    let scan: Vec<(i64, u32)> = map.range(-20i64..20).collect::<Result<_, _>>()?;
    let expected: Vec<(i64, u32)> = model.range(-20..20).map(|(k, v)| (*k, *v)).collect();
    if scan != expected {
        return Err(format!("orders: range -20..20 gave {scan:?}").into());
    }
    same("orders", map.iter().collect::<Result<_, _>>()?, model)?;

    let map = store.btree_map::<u64, u64>("ticks")?;
    if map.get(u64::MAX)? != Some(42) {
        return Err("ticks: the reserved key u64::MAX lost its value".into());
    }
    same(
        "ticks",
        map.iter().collect::<Result<_, _>>()?,
        apply(&ticks()),
    )?;

    let map = store.btree_map::<u16, i8>("levels")?;
    same(
        "levels",
        map.iter().collect::<Result<_, _>>()?,
        apply(&levels()),
    )?;

    let map = store.hash_map::<String, Vec<u8>>("users")?;
    let model = apply(&users());
    for (k, v) in &model {
        if map.get(k.as_str())?.as_ref() != Some(v) {
            return Err(format!("users: key {k} does not hold its value").into());
        }
    }
    same("users", map.iter().collect::<Result<_, _>>()?, model)?;

    let map = store.btree_map::<Vec<u8>, String>("sessions")?;
    let model = apply(&sessions());
    let prefix: Vec<(Vec<u8>, String)> = map
        .range(&b"session:"[..]..&b"session;"[..])
        .collect::<Result<_, _>>()?;
    let expected: Vec<(Vec<u8>, String)> = model
        .range(b"session:".to_vec()..b"session;".to_vec())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if prefix != expected {
        return Err(format!("sessions: the prefix scan gave {} pairs", prefix.len()).into());
    }
    same("sessions", map.iter().collect::<Result<_, _>>()?, model)?;

    if has_events {
        check_events(store)?;
    }

    let map = store.hash_map::<[u8; 16], u128>("ids")?;
    same("ids", map.iter().collect::<Result<_, _>>()?, apply(&ids()))?;

    let files = store.datalog("files", DatalogConfig::default())?;
    let model = files_model();
    let listed = files.list();
    if listed != model.keys().cloned().collect::<Vec<_>>() {
        return Err(format!("files: {listed:?}").into());
    }
    for (name, contents) in model {
        let id = files.open_file(&name)?;
        if files.len(id)? != contents.len() as u64 {
            return Err(format!("files: {name} is {} bytes", files.len(id)?).into());
        }
        let mut buf = vec![0u8; contents.len()];
        files.read_at(id, 0, &mut buf)?;
        if buf != contents {
            return Err(format!("files: {name} differs").into());
        }
    }
    Ok(())
}

/// "events": opened with the default layout asked (it keeps its own), every pair by lookups,
/// a range and the lent scan.
fn check_events(store: &Store) -> Result<(), Box<dyn std::error::Error>> {
    let map = store.btree_map::<String, Vec<u8>>("events")?;
    if map.layout() != BTreeLayout::Leaves(EVENT_LEAVES) {
        return Err(format!("events: layout {:?}", map.layout()).into());
    }
    let model = apply(&events());
    for (k, v) in &model {
        if map.get(k.as_str())?.as_ref() != Some(v) {
            return Err(format!("events: key {k} does not hold its value").into());
        }
    }
    if map.contains_key("event:00150")? {
        return Err("events: removed key event:00150 is found".into());
    }
    let range: Vec<(String, Vec<u8>)> = map
        .range("event:00100".."event:00210")
        .collect::<Result<_, _>>()?;
    let expected: Vec<(String, Vec<u8>)> = model
        .range("event:00100".to_string().."event:00210".to_string())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if range != expected {
        return Err(format!("events: the range gave {} pairs", range.len()).into());
    }
    let mut lent = 0u64;
    map.iter_with(|_, value| {
        lent += value.len() as u64;
        std::ops::ControlFlow::<()>::Continue(())
    })?;
    let bytes: u64 = model.values().map(|v| v.len() as u64).sum();
    if lent != bytes {
        return Err(
            format!("events: the lent scan gave {lent} value bytes, {bytes} expected").into(),
        );
    }
    same("events", map.iter().collect::<Result<_, _>>()?, model)?;
    Ok(())
}
