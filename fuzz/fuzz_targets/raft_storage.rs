//! Fuzz the replicated node's storage with bytes from outside: bytes offered as a snapshot
//! (arbitrary, or a valid snapshot with bytes flipped), and bytes found in the Raft log's map
//! or in the log's and the state machine's markers, give a typed error or a usable log and
//! state machine, never a panic; a refused snapshot changes nothing.
//!
//! The first byte picks what the rest is: 0, a snapshot; 1, flips applied to a valid
//! snapshot (pairs of position and mask); 2, log entries (pieces split at 0xFF, each stored
//! at the index its first byte names); 3, the markers' bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use openraft::EntryPayload;
use pmem_kv_cluster::log_store::core::{LogCore, LOG_MAP, META_MAP};
use pmem_kv_cluster::state_machine::core::{SmCore, SM_MAP};
use pmem_kv_cluster::types::{Entry, SnapshotMeta};
use pmem_kv_cluster::{Condition, KvRaft, Write};
use pmem_structures::{Store, StoreOptions};

fn set(index: u64, key: &[u8]) -> Entry {
    Entry {
        log_id: openraft::testing::log_id::<KvRaft>(1, 1, index),
        payload: EntryPayload::Normal(Write::Set {
            key: key.to_vec(),
            value: b"value".to_vec(),
            when: Condition::Always,
            get: false,
            integer_reply: false,
        }),
    }
}

/// Install `bytes` as a snapshot claiming `meta` on a state machine holding one key: taken
/// whole, or refused with nothing changed.
fn offer(meta: &SnapshotMeta, bytes: &[u8]) {
    let store = Store::anonymous(8 << 20, &StoreOptions::new()).expect("a store");
    let mut sm = SmCore::open(&store).expect("a state machine");
    sm.apply(&set(1, b"mine")).expect("an entry");
    let before = sm.maps().read_all().expect("the state");
    match sm.install_snapshot(meta, bytes) {
        Ok(()) => {
            let (now, _) = sm.maps().read_all().expect("the state");
            assert_eq!(&now, meta, "a taken snapshot leaves what it claims");
        }
        Err(_) => {
            let now = sm.maps().read_all().expect("the state");
            assert_eq!(now.0, before.0, "a refused snapshot changes nothing");
            assert_eq!(now.1, before.1, "a refused snapshot changes nothing");
        }
    }
}

/// A valid snapshot up to index 5 of a few keys.
fn valid_snapshot() -> (SnapshotMeta, Vec<u8>) {
    let store = Store::anonymous(8 << 20, &StoreOptions::new()).expect("a store");
    let mut sm = SmCore::open(&store).expect("a state machine");
    for (i, key) in [&b"a"[..], b"b", b"c", b"d", b"e"].iter().enumerate() {
        sm.apply(&set(i as u64 + 1, key)).expect("an entry");
    }
    sm.maps().build_snapshot().expect("a snapshot")
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => offer(&valid_snapshot().0, rest),
        1 => {
            let (meta, mut bytes) = valid_snapshot();
            for flip in rest.chunks_exact(3) {
                let at = usize::from(u16::from_le_bytes([flip[0], flip[1]])) % bytes.len();
                bytes[at] ^= flip[2];
            }
            offer(&meta, &bytes);
        }
        2 => {
            let store = Store::anonymous(8 << 20, &StoreOptions::new()).expect("a store");
            let log = store
                .btree_map::<u64, Vec<u8>>(LOG_MAP)
                .expect("the log's map");
            for piece in rest.split(|&b| b == 0xFF).take(16) {
                if let Some((&index, bytes)) = piece.split_first() {
                    log.upsert(u64::from(index), bytes).expect("a stored piece");
                }
            }
            drop(log);
            if let Ok(log) = LogCore::open(&store) {
                let _ = log.maps().entries(..);
                let _ = log.maps().vote();
            }
        }
        _ => {
            let store = Store::anonymous(8 << 20, &StoreOptions::new()).expect("a store");
            let meta = store
                .hash_map::<String, Vec<u8>>(META_MAP)
                .expect("the log's markers");
            let sm_meta = store
                .hash_map::<String, Vec<u8>>(SM_MAP)
                .expect("the sm's markers");
            for (i, name) in ["vote", "committed", "purged"].iter().enumerate() {
                if rest.first().is_some_and(|b| b & (1 << i) != 0) {
                    meta.upsert(*name, rest).expect("a marker");
                }
            }
            for (i, name) in ["applied", "membership", "flushing"].iter().enumerate() {
                if rest.first().is_some_and(|b| b & (8 << i) != 0) {
                    sm_meta.upsert(*name, rest).expect("a marker");
                }
            }
            drop((meta, sm_meta));
            if let Ok(log) = LogCore::open(&store) {
                let _ = log.maps().vote();
                let _ = log.maps().committed();
                let _ = log.maps().entries(..);
            }
            if let Ok(sm) = SmCore::open(&store) {
                let _ = sm.maps().applied_state();
                let _ = sm.maps().build_snapshot();
            }
        }
    }
});
