//! `verify()` of the byte-key maps and their records' checksums: healthy maps give no findings
//! and count their blocks and keys (after overwrites, removes and a reopen); damage written
//! into a record behind the map's back is reported as the finding of its kind at the record's
//! offset, and `get` refuses the record with `CorruptRecord`; random bit flips never make
//! `verify()` or a full read panic, and a flip inside a record's bytes is always reported and
//! never served (flips in the index's inline words may be: counted, not asserted); a map
//! of the format without checksums is refused at open.
//!
//! The damage is written at offsets of the record format (`records/layout.rs`), spelled out
//! here as constants: a change of format must change them.

use std::collections::BTreeMap as Model;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::fastfair::FastFairConfig;
use pmem_structures::raw::records::{hash::key_word, RecordHashMap, RecordMapError, RecordTreeMap};
use pmem_structures::raw::verify::{Problem, Verification};
use pmem_structures::{Error, Store, StoreOptions, StructureKind};
use pmem_test_kit::damage::{assert_found, flip_byte, load, scribble};
use pmem_test_kit::fixture::{anonymous_heap, reopen};
use pmem_test_kit::SplitMix64;
use pmem_undo_log::{Heap, TxError};

// A record: owner and key length (8 bytes), value length (4), CRC-32C (4), key, value.
const VALUE_LEN_AT: u64 = 8;
const KEY_AT: u64 = 16;
// The head of a map's root object: magic, version, intent area.
const VERSION_AT: u64 = 8;
const ROOT_BYTES: u64 = 128;

type HashMap = RecordHashMap<pmem_ordering::Hardware>;
type TreeMap = RecordTreeMap<pmem_ordering::Hardware>;

/// An allocated, zeroed root object for a map.
fn new_root(heap: &Heap) -> u64 {
    heap.transaction(|tx| -> Result<u64, TxError> {
        let root = tx.alloc(ROOT_BYTES)?.offset();
        tx.write(root, &[0u8; ROOT_BYTES as usize])?;
        Ok(root)
    })
    .unwrap()
}

/// Keys with shared prefixes of 0, 7 and 14 bytes (layers in the ordered map), short and
/// long (past a record's first line).
fn key(i: u64) -> Vec<u8> {
    match i % 4 {
        0 => format!("k{i}").into_bytes(),
        1 => format!("tenant1{i:05}").into_bytes(),
        2 => format!("tenant1:user:0{i:06}").into_bytes(),
        _ => format!("{i:08}-{}", "x".repeat(60)).into_bytes(),
    }
}

fn value(i: u64, round: u64) -> Vec<u8> {
    let len = (i * 37 + round * 11) % 300;
    (0..len).map(|b| (b + i + round) as u8).collect()
}

/// What a read of a map returns.
type Read<T> = Result<T, RecordMapError>;

/// What a lookup returns.
type Lookup = Read<Option<Vec<u8>>>;

/// The two maps behind one interface, for tests that run on both.
trait Map {
    fn upsert(&self, key: &[u8], value: &[u8]);
    fn remove(&self, key: &[u8]);
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, RecordMapError>;
    fn all(&self) -> Vec<Read<(Vec<u8>, Vec<u8>)>>;
    fn blocks(&self) -> Vec<u64>;
    fn len(&self) -> u64;
    fn verify(&self) -> Verification;
    /// The key words an entry for `key` may have.
    fn words_of(&self, key: &[u8]) -> Vec<u64>;
}

impl Map for HashMap {
    fn upsert(&self, key: &[u8], value: &[u8]) {
        RecordHashMap::upsert(self, key, value).unwrap();
    }
    fn remove(&self, key: &[u8]) {
        RecordHashMap::remove(self, key).unwrap();
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, RecordMapError> {
        RecordHashMap::get(self, key)
    }
    fn all(&self) -> Vec<Read<(Vec<u8>, Vec<u8>)>> {
        self.iter().collect()
    }
    fn blocks(&self) -> Vec<u64> {
        RecordHashMap::blocks(self).unwrap()
    }
    fn len(&self) -> u64 {
        RecordHashMap::len(self)
    }
    fn verify(&self) -> Verification {
        RecordHashMap::verify(self)
    }
    fn words_of(&self, key: &[u8]) -> Vec<u64> {
        vec![key_word(key)]
    }
}

impl Map for TreeMap {
    fn upsert(&self, key: &[u8], value: &[u8]) {
        RecordTreeMap::upsert(self, key, value).unwrap();
    }
    fn remove(&self, key: &[u8]) {
        RecordTreeMap::remove(self, key).unwrap();
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, RecordMapError> {
        RecordTreeMap::get(self, key)
    }
    fn all(&self) -> Vec<Read<(Vec<u8>, Vec<u8>)>> {
        // A damaged tree may hand back fewer or more entries; a bound keeps a read finite.
        self.iter().take(10_000).collect()
    }
    fn blocks(&self) -> Vec<u64> {
        RecordTreeMap::blocks(self).unwrap()
    }
    fn len(&self) -> u64 {
        RecordTreeMap::len(self)
    }
    fn verify(&self) -> Verification {
        RecordTreeMap::verify(self)
    }
    /// The slice words of every layer (`records/tree/mod.rs`): 7 key bytes big-endian, then
    /// how many the key has there (8: it goes on).
    fn words_of(&self, key: &[u8]) -> Vec<u64> {
        (0..=key.len() / 7)
            .map(|layer| {
                let rest = &key[(layer * 7).min(key.len())..];
                let take = rest.len().min(7);
                let mut bytes = [0u8; 8];
                bytes[..take].copy_from_slice(&rest[..take]);
                bytes[7] = if rest.len() > 7 { 8 } else { take as u8 };
                u64::from_be_bytes(bytes)
            })
            .collect()
    }
}

fn hash_map(heap: &Heap, root: u64) -> HashMap {
    let config = CcehConfig {
        buckets_per_segment: 16,
    };
    RecordHashMap::create(heap, root, config).unwrap()
}

fn tree_map(heap: &Heap, root: u64) -> TreeMap {
    let config = FastFairConfig {
        node_size: 256,
        ..FastFairConfig::default()
    };
    RecordTreeMap::create(heap, root, config).unwrap()
}

/// 600 keys written, a third overwritten, a fifth removed: the model of what is left.
fn fill(map: &dyn Map) -> Model<Vec<u8>, Vec<u8>> {
    let mut model = Model::new();
    for i in 0..600 {
        map.upsert(&key(i), &value(i, 0));
        model.insert(key(i), value(i, 0));
    }
    for i in (0..600).step_by(3) {
        map.upsert(&key(i), &value(i, 1));
        model.insert(key(i), value(i, 1));
    }
    for i in (0..600).step_by(5) {
        map.remove(&key(i));
        model.remove(&key(i));
    }
    model
}

fn assert_healthy(map: &dyn Map, model: &Model<Vec<u8>, Vec<u8>>) {
    let report = map.verify();
    assert!(report.is_healthy(), "{report}");
    assert_eq!(report.keys, model.len() as u64);
    assert_eq!(report.keys, map.len());
    assert_eq!(report.blocks_walked, map.blocks().len() as u64, "{report}");
}

/// The record holding `key`: the block among the map's whose key bytes are `key`.
fn record_of(heap: &Heap, map: &dyn Map, key: &[u8]) -> u64 {
    map.blocks()
        .into_iter()
        .find(|&b| {
            let mut header = [0u8; 16];
            let mut stored = vec![0u8; key.len()];
            heap.pool().read_bytes(b, &mut header).is_ok()
                && u64::from_le_bytes(header[..8].try_into().unwrap()) >> 40 == key.len() as u64
                && heap.pool().read_bytes(b + KEY_AT, &mut stored).is_ok()
                && stored == key
        })
        .expect("the key's record is one of the map's blocks")
}

/// The slot or leaf entry of `map` (at `root`) that points at `record`, which holds `key`:
/// of the words holding `record` right after one of the words `key` is filed under, in a
/// 16-byte entry of a block of the map other than its intent area, the one a lookup of `key`
/// reads (a CCEH split leaves stale copies of slots behind).
fn pointer_to(heap: &Heap, map: &dyn Map, root: u64, key: &[u8], record: u64) -> u64 {
    let intent_area = load(heap, root + 16);
    let words = map.words_of(key);
    let value = map.get(key).unwrap();
    map.blocks()
        .into_iter()
        .filter(|&b| b != intent_area)
        .flat_map(|b| {
            let size = heap.block_size(b).unwrap_or(0);
            (0..size / 16).map(move |e| b + 16 * e)
        })
        .filter(|&e| load(heap, e + 8) == record && words.contains(&load(heap, e)))
        .map(|e| e + 8)
        .find(|&at| {
            scribble(heap, at, 0);
            let read = map.get(key).ok().flatten();
            scribble(heap, at, record);
            read != value
        })
        .expect("some entry points at the record")
}

#[test]
fn healthy_maps_verify_clean_after_overwrites_removes_and_a_reopen() {
    let heap = anonymous_heap("verify-records", 32 << 20);
    let (hash_root, tree_root) = (new_root(&heap), new_root(&heap));
    let (hash_model, tree_model) = {
        let hash = hash_map(&heap, hash_root);
        let tree = tree_map(&heap, tree_root);
        let empty = hash.verify();
        assert!(empty.is_healthy(), "{empty}");
        assert_eq!(empty.structure, StructureKind::RecordHashMap);
        assert!(tree.verify().is_healthy());
        let hash_model = fill(&hash);
        let tree_model = fill(&tree);
        assert_healthy(&hash, &hash_model);
        assert_healthy(&tree, &tree_model);
        (hash_model, tree_model)
    };
    let heap = reopen(heap);
    let hash: HashMap = RecordHashMap::open(&heap, hash_root).unwrap();
    let tree: TreeMap = RecordTreeMap::open(&heap, tree_root).unwrap();
    assert_healthy(&hash, &hash_model);
    assert_healthy(&tree, &tree_model);
    let report = tree.verify();
    assert_eq!(report.structure, StructureKind::RecordBTreeMap);
    assert_eq!(
        report.to_string(),
        format!(
            "a FAST&FAIR B+-tree of byte strings at {tree_root:#x}: {} blocks, {} keys, no \
             damage found",
            report.blocks_walked,
            tree_model.len()
        )
    );
}

/// Damage one record of `map` at a time and check the finding and what `get` says.
fn damaged_records_are_reported_and_refused(heap: &Heap, map: &dyn Map, root: u64) {
    let model = fill(map);
    // A key in its record's first line, and one past it.
    for k in [key(2), key(7)] {
        let expected = model[&k].clone();
        let record = record_of(heap, map, &k);
        let value_at = record + KEY_AT + k.len() as u64;
        // One flipped bit in the value, in the key, in the value length (a set bit: shorter,
        // so still inside the block).
        let len_byte = load(heap, record + VALUE_LEN_AT) as u8;
        let len_bit = len_byte & len_byte.wrapping_neg();
        for (at, mask) in [
            (value_at + 1, 0x10),
            (record + KEY_AT + 3, 0x10),
            (record + VALUE_LEN_AT, len_bit),
        ] {
            flip_byte(heap, at, mask);
            let report = map.verify();
            assert_found(
                &report,
                record,
                |p| matches!(p, Problem::ChecksumMismatch { stored, computed } if stored != computed),
            );
            match map.get(&k) {
                Err(RecordMapError::CorruptRecord { offset, .. }) => assert_eq!(offset, record),
                other => panic!("get of a damaged record at {at:#x} gave {other:?}"),
            }
            assert!(
                map.all().iter().any(|r| matches!(
                    r,
                    Err(RecordMapError::CorruptRecord { offset, .. }) if *offset == record
                )),
                "a full read meets the damaged record"
            );
            flip_byte(heap, at, mask);
            assert_eq!(map.get(&k).unwrap(), Some(expected.clone()));
        }
        // A value length past the block.
        let lengths = load(heap, record + VALUE_LEN_AT);
        scribble(
            heap,
            record + VALUE_LEN_AT,
            (lengths & !0xffff_ffff) | 1 << 20,
        );
        let report = map.verify();
        assert_found(
            &report,
            record,
            |p| matches!(p, Problem::RecordTooLong { value_len, .. } if *value_len == 1 << 20),
        );
        assert!(matches!(
            map.get(&k),
            Err(RecordMapError::CorruptRecord { .. })
        ));
        scribble(heap, record + VALUE_LEN_AT, lengths);
        // Another owner.
        let owner_word = load(heap, record);
        scribble(heap, record, owner_word ^ 1);
        let report = map.verify();
        assert_found(&report, record, |p| {
            *p == Problem::WrongOwner {
                found: root ^ 64,
                expected: root,
            }
        });
        assert!(matches!(
            map.get(&k),
            Err(RecordMapError::CorruptRecord { .. })
        ));
        scribble(heap, record, owner_word);
        // The entry pointing at it moved outside the pool, then off its line.
        let pointer = pointer_to(heap, map, root, &k, record);
        let nowhere = heap.pool().size() + 4096;
        scribble(heap, pointer, nowhere);
        assert_found(&map.verify(), nowhere, |p| {
            matches!(p, Problem::OutOfPool { .. })
        });
        scribble(heap, pointer, record + 8);
        assert_found(&map.verify(), record + 8, |p| {
            *p == Problem::Misaligned { alignment: 64 }
        });
        scribble(heap, pointer, record);
        let report = map.verify();
        assert!(report.is_healthy(), "every damage was undone: {report}");
    }
}

#[test]
fn damaged_records_of_the_hash_map_are_reported_and_refused() {
    let heap = anonymous_heap("verify-records", 32 << 20);
    let root = new_root(&heap);
    let map = hash_map(&heap, root);
    damaged_records_are_reported_and_refused(&heap, &map, root);
    // A record filed under another key's word.
    let (a, b) = (key(1), key(3));
    let (record_a, record_b) = (record_of(&heap, &map, &a), record_of(&heap, &map, &b));
    let slot_a = pointer_to(&heap, &map, root, &a, record_a);
    scribble(&heap, slot_a, record_b);
    let report = map.verify();
    // Reported at the slot: its key word, then the record's offset.
    assert_found(&report, slot_a - 8, |p| {
        *p == Problem::KeyHashMismatch {
            record: record_b,
            word: key_word(&a),
            hash: key_word(&b),
        }
    });
    assert_found(&report, record_b, |p| {
        matches!(p, Problem::RecordReachedTwice { .. })
    });
    scribble(&heap, slot_a, record_a);
    assert!(map.verify().is_healthy());
}

#[test]
fn damaged_records_of_the_tree_map_are_reported_and_refused() {
    let heap = anonymous_heap("verify-records", 32 << 20);
    let root = new_root(&heap);
    let map = tree_map(&heap, root);
    damaged_records_are_reported_and_refused(&heap, &map, root);
    // Two records' entries swapped: each key is under the other's word, out of order.
    let (a, b) = (key(1), key(6));
    let (record_a, record_b) = (record_of(&heap, &map, &a), record_of(&heap, &map, &b));
    let (entry_a, entry_b) = (
        pointer_to(&heap, &map, root, &a, record_a),
        pointer_to(&heap, &map, root, &b, record_b),
    );
    scribble(&heap, entry_a, record_b);
    scribble(&heap, entry_b, record_a);
    let report = map.verify();
    assert!(
        report.findings.iter().any(
            |f| matches!(f.problem, Problem::KeyOutsideEntry { record, .. } if record == record_b)
        ),
        "{report}"
    );
    assert!(
        report
            .findings
            .iter()
            .any(|f| matches!(f.problem, Problem::KeysUnsorted { .. })),
        "{report}"
    );
    scribble(&heap, entry_a, record_a);
    scribble(&heap, entry_b, record_b);
    assert!(map.verify().is_healthy());
}

#[test]
fn a_damaged_record_reaches_the_store_user_as_corrupt_record() {
    let store = Store::anonymous(16 << 20, &StoreOptions::new()).unwrap();
    let map = store.hash_map::<Vec<u8>, Vec<u8>>("users").unwrap();
    map.insert(b"alice", b"engineer").unwrap();
    let (_, blocks) = store
        .owned_blocks()
        .unwrap()
        .into_iter()
        .find(|(name, _)| name == "users")
        .unwrap();
    let pool = engine(&store).pool();
    let record = blocks
        .into_iter()
        .find(|&b| {
            let mut bytes = [0u8; 5];
            pool.read_bytes(b + KEY_AT, &mut bytes).is_ok() && &bytes == b"alice"
        })
        .expect("the record of alice");
    let at = record + KEY_AT + 5;
    let word = at & !7;
    let original = pool.load_u64(word).unwrap();
    pool.persist(
        pool.store_u64(word, original ^ (1 << (8 * (at - word))))
            .unwrap(),
    );
    match map.get(b"alice") {
        Err(Error::CorruptRecord { offset, .. }) => assert_eq!(offset, record),
        other => panic!("a damaged record gave {other:?}"),
    }
    let err = map.get(b"alice").unwrap_err().to_string();
    assert!(err.contains(&format!("pool offset {record:#x}")), "{err}");
}

#[test]
fn a_map_of_the_format_without_checksums_is_refused_at_open() {
    let heap = anonymous_heap("verify-records", 16 << 20);
    let (hash_root, tree_root) = (new_root(&heap), new_root(&heap));
    {
        let hash = hash_map(&heap, hash_root);
        let tree = tree_map(&heap, tree_root);
        hash.upsert(b"k", b"v").unwrap();
        tree.upsert(b"k", b"v").unwrap();
    }
    // The hash map writes version 2; the ordered map 3 (its path-compressed layers).
    for (root, version) in [(hash_root, 2), (tree_root, 3)] {
        assert_eq!(
            load(&heap, root + VERSION_AT),
            version,
            "this build writes version {version}"
        );
        scribble(&heap, root + VERSION_AT, 1);
    }
    let message = |root, reads| {
        format!(
            "not a valid map of records at {root:#x}: format version 1 (records without \
             checksums), this build reads {reads}: copy the keys out with a build that reads \
             version 1"
        )
    };
    match RecordHashMap::open(&heap, hash_root) {
        Err(e @ RecordMapError::Corrupt { .. }) => {
            assert_eq!(e.to_string(), message(hash_root, 2))
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a version 1 hash map opened"),
    }
    match RecordTreeMap::open(&heap, tree_root) {
        Err(e @ RecordMapError::Corrupt { .. }) => {
            assert_eq!(e.to_string(), message(tree_root, 3))
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a version 1 tree map opened"),
    };
}

/// What the flips of [`flip_bits`] did.
#[derive(Debug, Default)]
struct Flips {
    /// Flips `verify` reported.
    reported: u64,
    /// Flips inside a live record's bytes (each reported, none served: asserted).
    in_records: u64,
    /// Flips elsewhere (the tables' and trees' inline words, which carry no checksum) after
    /// which a read served a pair the model does not hold at that moment (a removed record
    /// brought back, a key shown under another): counted, not asserted.
    silent_elsewhere: u64,
}

/// Flip `flips` random bits, each in a random line of a random block of `map`, then run
/// `verify` and a full read (every key of the model, and the iterator) with only that flip
/// in place (the word is restored after); fail if either panics, or if a flip inside a
/// record's bytes goes unreported or is served as data.
fn flip_bits(heap: &Heap, map: &dyn Map, seed: u64, flips: u64) -> Flips {
    let model = fill(map);
    let blocks = map.blocks();
    // Each live record's block, and the bytes of the record in it.
    let records: std::collections::HashMap<u64, u64> = model
        .iter()
        .map(|(k, v)| (record_of(heap, map, k), KEY_AT + (k.len() + v.len()) as u64))
        .collect();
    let mut rng = SplitMix64::new(seed);
    let mut outcome = Flips::default();
    for flip in 0..flips {
        let block = blocks[rng.below(blocks.len() as u64) as usize];
        let size = heap.block_size(block).expect("a live block");
        let word = block + 64 * rng.below(size / 64) + 8 * rng.below(8);
        let bit = rng.below(64);
        let original = load(heap, word);
        scribble(heap, word, original ^ (1 << bit));
        let read = catch_unwind(AssertUnwindSafe(|| {
            let report = map.verify();
            let served: Vec<(&Vec<u8>, Lookup)> = model.keys().map(|k| (k, map.get(k))).collect();
            (report, served, map.all())
        }));
        scribble(heap, word, original);
        let Ok((report, served, all)) = read else {
            panic!("verify or a read panicked on flip {flip} (seed {seed}): bit {bit} of {word:#x}")
        };
        outcome.reported += u64::from(!report.is_healthy());
        let wrong = served
            .into_iter()
            .any(|(k, got)| matches!(got, Ok(Some(v)) if v != model[k]))
            || all
                .into_iter()
                .flatten()
                .any(|(k, v)| model.get(&k) != Some(&v));
        let in_record = records
            .get(&block)
            .is_some_and(|&len| word + bit / 8 < block + len);
        if in_record {
            outcome.in_records += 1;
            assert!(
                !report.is_healthy(),
                "flip {flip} (seed {seed}): bit {bit} of {word:#x} in a record went unreported"
            );
            assert!(
                !wrong,
                "flip {flip} (seed {seed}): bit {bit} of {word:#x} in a record was served"
            );
        } else {
            outcome.silent_elsewhere += u64::from(wrong);
        }
    }
    assert!(map.verify().is_healthy(), "every flip was undone");
    eprintln!("seed {seed}: {flips} flips: {outcome:?}");
    outcome
}

#[test]
fn random_bit_flips_in_a_hash_map_never_panic_nor_serve_damage() {
    let heap = anonymous_heap("verify-records", 32 << 20);
    let map = hash_map(&heap, new_root(&heap));
    let flips = flip_bits(&heap, &map, 41, 200);
    assert!(flips.in_records > 0, "some flips must land in records");
}

#[test]
fn random_bit_flips_in_a_tree_map_never_panic_nor_serve_damage() {
    let heap = anonymous_heap("verify-records", 32 << 20);
    let map = tree_map(&heap, new_root(&heap));
    let flips = flip_bits(&heap, &map, 43, 200);
    assert!(flips.in_records > 0, "some flips must land in records");
}

/// The store's heap, to read its allocator and to damage its bytes on purpose.
fn engine(store: &Store) -> &Heap {
    // SAFETY: the test runs on one thread, so no handle of the store is in use while the heap
    // or its pool is written.
    unsafe { store.raw_heap() }
}
