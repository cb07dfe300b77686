//! What a structure's root records, and the roots it refuses: each structure reopens with the
//! configuration it was created with (nothing passed to `open`), `create` on a root in use is
//! refused and changes nothing, and `open` on a root of another kind (or an unknown magic) says
//! in words what the root holds. The errors' `Debug` prints the same message as `Display`.

use pmem_ordering::MagicText;
use pmem_structures::raw::cceh::{Cceh, CcehConfig, CcehError};
use pmem_structures::raw::datalog::{Datalog, DatalogConfig, DatalogError, Policy, WriteMode};
use pmem_structures::raw::fastfair::{FastFair, FastFairConfig, FastFairError, ShiftPolicy};
use pmem_structures::raw::kind::StructureKind;
use pmem_test_kit::fixture::{anonymous_heap, reopen};
use pmem_undo_log::Heap;

/// Bytes of the largest root (FAST&FAIR's and the datalog's are 64, CCEH's 32).
const ROOT_SLOT: u64 = 64;

fn heap() -> Heap {
    anonymous_heap("roots", 16 << 20)
}

/// The `slot`th 64-byte root in the pool's root object.
fn root(heap: &Heap, slot: u64) -> u64 {
    let pool = heap.pool();
    assert!(
        pool.root_size() >= (slot + 1) * ROOT_SLOT,
        "the pool's root object ({} bytes) holds no root slot {slot}",
        pool.root_size()
    );
    pool.root_offset() + slot * ROOT_SLOT
}

/// The root's bytes, to see that a refused call changed none of them.
fn root_bytes(heap: &Heap, root: u64) -> [u8; ROOT_SLOT as usize] {
    heap.pool().read(root).unwrap()
}

#[test]
fn cceh_reopens_with_the_segment_size_it_was_created_with() {
    let heap = heap();
    let at = root(&heap, 0);
    let config = CcehConfig {
        buckets_per_segment: 8,
    };
    assert_ne!(config, CcehConfig::default());
    let table = Cceh::create(&heap, at, config).unwrap();
    for key in 1..=100 {
        table.insert(key, key * 10).unwrap();
    }
    drop(table);
    let heap = reopen(heap);
    let table = Cceh::open(&heap, at).unwrap();
    assert_eq!(table.config(), config);
    assert_eq!(table.get(77).unwrap(), Some(770));
}

#[test]
fn fastfair_reopens_with_the_node_size_and_shift_policy_it_was_created_with() {
    let heap = heap();
    let at = root(&heap, 0);
    let config = FastFairConfig {
        node_size: 256,
        policy: ShiftPolicy::Redo,
    };
    assert_ne!(config, FastFairConfig::default());
    let tree = FastFair::create(&heap, at, config).unwrap();
    for key in 1..=100 {
        tree.insert(key, key * 10).unwrap();
    }
    drop(tree);
    let heap = reopen(heap);
    let tree = FastFair::open(&heap, at).unwrap();
    assert_eq!(tree.node_size(), 256);
    assert_eq!(tree.policy(), ShiftPolicy::Redo);
    assert_eq!(tree.get(77).unwrap(), Some(770));
}

#[test]
fn datalog_reopens_with_the_inodes_and_policy_it_was_created_with() {
    let heap = heap();
    let at = root(&heap, 0);
    let config = DatalogConfig {
        max_files: 7,
        policy: Policy {
            mode: WriteMode::Embedded,
            auto_embed_max: 1000,
            fold_after_entries: 9,
            fold_after_bytes: 5000,
            compact_live_percent: 50,
            compact_min_pages: 3,
        },
    };
    assert_ne!(config, DatalogConfig::default());
    let store = Datalog::create(&heap, at, config).unwrap();
    let file = store.create_file("f").unwrap();
    store.write_at(file, 10, b"recorded").unwrap();
    drop(store);
    let heap = reopen(heap);
    let store = Datalog::open(&heap, at).unwrap();
    assert_eq!(store.config(), config);
    assert_eq!(store.policy(), config.policy);
    let mut buf = [0u8; 8];
    store
        .read_at(store.open_file("f").unwrap(), 10, &mut buf)
        .unwrap();
    assert_eq!(&buf, b"recorded");
}

#[test]
fn a_datalog_config_the_root_cannot_record_is_refused() {
    let heap = heap();
    let at = root(&heap, 0);
    for (policy, what) in [
        (
            Policy {
                fold_after_entries: u32::MAX as usize + 1,
                ..Policy::default()
            },
            "fold_after_entries",
        ),
        (
            Policy {
                compact_min_pages: u32::MAX as usize + 1,
                ..Policy::default()
            },
            "compact_min_pages",
        ),
    ] {
        let config = DatalogConfig {
            policy,
            ..DatalogConfig::default()
        };
        match Datalog::create(&heap, at, config) {
            Err(e @ DatalogError::InvalidConfig { .. }) => {
                assert!(e.to_string().contains(what), "{e}")
            }
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: created a store whose policy the root cannot hold"),
        }
        assert_eq!(root_bytes(&heap, at), [0u8; ROOT_SLOT as usize]);
    }
}

#[test]
fn a_datalog_root_whose_policy_words_are_damaged_is_refused() {
    // The policy's first word is the root's fifth (byte 32): a store made before the policy was
    // recorded has 0 there; a mode code above 3 names no mode.
    for (word, what) in [(0u64, "write mode code 0"), (9, "write mode code 9")] {
        let heap = heap();
        let at = root(&heap, 0);
        drop(Datalog::create(&heap, at, DatalogConfig::default()).unwrap());
        let pool = heap.pool();
        pool.persist(pool.write(at + 32, &word.to_le_bytes()).unwrap());
        match Datalog::open(&heap, at) {
            Err(e @ DatalogError::Corrupt { .. }) => {
                assert!(e.to_string().contains(what), "{e}")
            }
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: opened a store with no valid policy"),
        }
    }
}

const KINDS: [StructureKind; 3] = [
    StructureKind::HashMap,
    StructureKind::BTreeMap,
    StructureKind::Datalog,
];

/// Make a structure of `kind` at `root` holding one value, key 5 (or file "f") = 50.
fn create_with_data(heap: &Heap, kind: StructureKind, root: u64) {
    match kind {
        StructureKind::HashMap => {
            let table = Cceh::create(heap, root, CcehConfig::default()).unwrap();
            table.insert(5, 50).unwrap();
        }
        StructureKind::BTreeMap => {
            let tree = FastFair::create(heap, root, FastFairConfig::default()).unwrap();
            tree.insert(5, 50).unwrap();
        }
        StructureKind::Datalog => {
            let store = Datalog::create(heap, root, DatalogConfig::default()).unwrap();
            let file = store.create_file("f").unwrap();
            store.write_at(file, 0, &[50]).unwrap();
        }
        other => panic!("no test structure for {other}"),
    }
}

/// The value [`create_with_data`] stored, read back through `open`.
fn stored_value(heap: &Heap, kind: StructureKind, root: u64) -> u64 {
    match kind {
        StructureKind::HashMap => Cceh::open(heap, root).unwrap().get(5).unwrap().unwrap(),
        StructureKind::BTreeMap => FastFair::open(heap, root).unwrap().get(5).unwrap().unwrap(),
        StructureKind::Datalog => {
            let store = Datalog::open(heap, root).unwrap();
            let mut buf = [0u8; 1];
            store
                .read_at(store.open_file("f").unwrap(), 0, &mut buf)
                .unwrap();
            u64::from(buf[0])
        }
        other => panic!("no test structure for {other}"),
    }
}

/// How a call was refused: whether with the expected variant, its message, its `Debug`.
struct Refusal {
    expected_variant: bool,
    message: String,
    debug: String,
}

impl Refusal {
    fn of<E: std::error::Error>(error: E, expected_variant: bool) -> Refusal {
        Refusal {
            expected_variant,
            message: error.to_string(),
            debug: format!("{error:?}"),
        }
    }
}

/// `create` of `kind` at `root`, which must be refused.
fn create_refusal(heap: &Heap, kind: StructureKind, root: u64) -> Refusal {
    match kind {
        StructureKind::HashMap => match Cceh::create(heap, root, CcehConfig::default()) {
            Err(e) => {
                let expected = matches!(e, CcehError::AlreadyExists { .. });
                Refusal::of(e, expected)
            }
            Ok(_) => panic!("created {kind} over a root in use"),
        },
        StructureKind::BTreeMap => match FastFair::create(heap, root, FastFairConfig::default()) {
            Err(e) => {
                let expected = matches!(e, FastFairError::AlreadyExists { .. });
                Refusal::of(e, expected)
            }
            Ok(_) => panic!("created {kind} over a root in use"),
        },
        StructureKind::Datalog => match Datalog::create(heap, root, DatalogConfig::default()) {
            Err(e) => {
                let expected = matches!(e, DatalogError::AlreadyExists { .. });
                Refusal::of(e, expected)
            }
            Ok(_) => panic!("created {kind} over a root in use"),
        },
        other => panic!("no test structure for {other}"),
    }
}

/// `open` of `kind` at `root`, which must be refused.
fn open_refusal(heap: &Heap, kind: StructureKind, root: u64) -> Refusal {
    match kind {
        StructureKind::HashMap => match Cceh::open(heap, root) {
            Err(e) => {
                let expected = matches!(e, CcehError::WrongKind { .. });
                Refusal::of(e, expected)
            }
            Ok(_) => panic!("opened {kind} at a root that holds none"),
        },
        StructureKind::BTreeMap => match FastFair::open(heap, root) {
            Err(e) => {
                let expected = matches!(e, FastFairError::WrongKind { .. });
                Refusal::of(e, expected)
            }
            Ok(_) => panic!("opened {kind} at a root that holds none"),
        },
        StructureKind::Datalog => match Datalog::open(heap, root) {
            Err(e) => {
                let expected = matches!(e, DatalogError::WrongKind { .. });
                Refusal::of(e, expected)
            }
            Ok(_) => panic!("opened {kind} at a root that holds none"),
        },
        other => panic!("no test structure for {other}"),
    }
}

#[test]
fn create_on_a_root_in_use_is_refused_and_changes_nothing() {
    for held in KINDS {
        let heap = heap();
        let at = root(&heap, 0);
        create_with_data(&heap, held, at);
        let before = root_bytes(&heap, at);
        let blocks = heap.check_heap().unwrap();
        for attempted in KINDS {
            let refusal = create_refusal(&heap, attempted, at);
            assert!(
                refusal.expected_variant,
                "{attempted} over {held}: {}",
                refusal.message
            );
            assert!(
                refusal
                    .message
                    .starts_with(&format!("root {at:#x} already holds {held}: ")),
                "{}",
                refusal.message
            );
            assert_eq!(refusal.debug, refusal.message);
            assert_eq!(root_bytes(&heap, at), before, "{attempted} over {held}");
            assert_eq!(
                heap.check_heap().unwrap(),
                blocks,
                "{attempted} over {held}"
            );
        }
        assert_eq!(
            stored_value(&heap, held, at),
            50,
            "{held} after the refusals"
        );
    }
}

#[test]
fn open_of_another_kind_names_both_kinds_in_words() {
    let heap = heap();
    let mut pairings = 0;
    for (slot, held) in KINDS.into_iter().enumerate() {
        let at = root(&heap, slot as u64);
        create_with_data(&heap, held, at);
        for opened in KINDS.into_iter().filter(|&k| k != held) {
            let refusal = open_refusal(&heap, opened, at);
            assert!(refusal.expected_variant, "{}", refusal.message);
            assert_eq!(
                refusal.message,
                format!(
                    "root {at:#x} holds {}, not {}",
                    held.describe(),
                    opened.describe()
                )
            );
            assert_eq!(refusal.debug, refusal.message);
            pairings += 1;
        }
        assert_eq!(
            stored_value(&heap, held, at),
            50,
            "{held} after the refusals"
        );
    }
    assert_eq!(pairings, 6);
    // The message in full.
    let fastfair_root = root(&heap, 1);
    assert_eq!(
        open_refusal(&heap, StructureKind::HashMap, fastfair_root).message,
        format!("root {fastfair_root:#x} holds a FAST&FAIR B+-tree, not a CCEH hash table")
    );
}

#[test]
fn an_unknown_magic_prints_as_text_and_is_neither_opened_nor_overwritten() {
    let heap = heap();
    let at = root(&heap, 0);
    let magic = *b"NOTASTRU";
    let pool = heap.pool();
    pool.persist(pool.write(at, &magic).unwrap());
    let text = MagicText::from_word(u64::from_le_bytes(magic)).to_string();
    assert_eq!(text, "\"NOTASTRU\"");
    for kind in KINDS {
        let refusal = open_refusal(&heap, kind, at);
        assert!(refusal.expected_variant, "{}", refusal.message);
        assert_eq!(
            refusal.message,
            format!(
                "root {at:#x} holds an unknown structure (magic {text}), not {}",
                kind.describe()
            )
        );
        assert_eq!(refusal.debug, refusal.message);
        let refusal = create_refusal(&heap, kind, at);
        assert!(refusal.expected_variant, "{}", refusal.message);
        assert!(
            refusal
                .message
                .contains("an unknown structure (magic \"NOTASTRU\")"),
            "{}",
            refusal.message
        );
    }
    assert_eq!(&root_bytes(&heap, at)[..8], &magic);
}

#[test]
fn open_of_an_all_zero_root_says_it_holds_nothing() {
    let heap = heap();
    let at = root(&heap, 0);
    for kind in KINDS {
        let refusal = open_refusal(&heap, kind, at);
        assert!(refusal.expected_variant, "{}", refusal.message);
        assert_eq!(
            refusal.message,
            format!(
                "root {at:#x} holds nothing (an all-zero root), not {}",
                kind.describe()
            )
        );
    }
}
