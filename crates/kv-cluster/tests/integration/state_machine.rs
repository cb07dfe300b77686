//! The state machine's replies and refusals: every write's reply as the std model (Redis 7's
//! replies) gives it; entries every node refuses alike (a key past the limit) change nothing
//! but the applied index; snapshots round-trip, past one write batch's limit too, and a
//! damaged, mismatched, stale or too large one is refused with its typed error, nothing
//! changed; the state survives a reopen of its file.

use super::common;

use common::kv_model::KvState;
use common::{blank, del, incr, membership, normal, observe_sm, set};
use pmem_kv_cluster::state_machine::core::{SmCore, KEYSPACE, KEYSPACE_STAGED};
use pmem_kv_cluster::{ClusterError, Condition, Outcome, Write};
use pmem_structures::{Store, StoreOptions, MAX_BATCH_CHANGES};

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn anonymous() -> Store {
    Store::anonymous(16 << 20, &StoreOptions::new()).unwrap()
}

fn set_with(
    index: u64,
    key: &str,
    value: &str,
    when: Condition,
    get: bool,
    integer_reply: bool,
) -> pmem_kv_cluster::types::Entry {
    normal(
        1,
        index,
        Write::Set {
            key: b(key),
            value: b(value),
            when,
            get,
            integer_reply,
        },
    )
}

#[test]
fn every_write_replies_as_the_model_and_leaves_its_state() {
    let entries = vec![
        blank(1, 1),
        membership(1, 2, &[1, 2, 3]),
        set(1, 3, "k", "v"),
        set_with(4, "k", "w", Condition::IfAbsent, false, false),
        set_with(5, "k", "w", Condition::IfPresent, true, false),
        set_with(6, "n", "1", Condition::IfPresent, false, false),
        set_with(7, "n", "1", Condition::IfAbsent, false, true),
        set_with(8, "n", "2", Condition::IfAbsent, false, true),
        incr(1, 9, "n", 41),
        incr(1, 10, "n", i64::MAX),
        incr(1, 11, "k", 1),
        incr(1, 12, "fresh", -3),
        normal(
            1,
            13,
            Write::Append {
                key: b("k"),
                value: b("xyz"),
            },
        ),
        normal(
            1,
            14,
            Write::Append {
                key: b("new"),
                value: b("ab"),
            },
        ),
        normal(
            1,
            15,
            Write::MSet {
                pairs: vec![(b("m"), b("1")), (b("m"), b("2")), (b("o"), b("3"))],
            },
        ),
        del(1, 16, &["m", "m", "absent", "o"]),
        set(1, 17, "padded", "007"),
        incr(1, 18, "padded", 1),
        normal(1, 19, Write::Flush),
        set(1, 20, "after", "flush"),
    ];
    let store = anonymous();
    let mut sm = SmCore::open(&store).unwrap();
    let mut model = KvState::default();
    let mut replies = Vec::new();
    for entry in &entries {
        let got = sm.apply(entry).unwrap();
        let expected = model.apply(entry);
        assert_eq!(got, expected, "reply to {:?}", entry.payload);
        assert_eq!(observe_sm(&sm).unwrap(), model, "after {:?}", entry.payload);
        replies.push(got);
    }
    // Spot checks of the model itself against Redis 7's documented replies.
    assert_eq!(replies[3], Outcome::Null); // SET NX on a present key
    assert_eq!(replies[4], Outcome::Bulk(b("v"))); // SET XX GET
    assert_eq!(replies[6], Outcome::Integer(1)); // SETNX
    assert_eq!(replies[7], Outcome::Integer(0));
    assert_eq!(replies[8], Outcome::Integer(42));
    assert!(matches!(&replies[9], Outcome::Error(e) if e.contains("overflow")));
    assert!(matches!(&replies[10], Outcome::Error(e) if e.contains("not an integer")));
    assert!(matches!(&replies[17], Outcome::Error(e) if e.contains("not an integer")));
    assert_eq!(replies[15], Outcome::Integer(2));
}

#[test]
fn an_entry_every_node_refuses_advances_only_the_applied_index() {
    let store = anonymous();
    let mut sm = SmCore::open(&store).unwrap();
    sm.apply(&set(1, 1, "a", "1")).unwrap();
    let before = observe_sm(&sm).unwrap();
    let huge_key = "k".repeat(pmem_structures::raw::records::MAX_KEY_BYTES + 1);
    let entry = normal(
        1,
        2,
        Write::MSet {
            pairs: vec![(b("b"), b("2")), (huge_key.into_bytes(), b("x"))],
        },
    );
    let reply = sm.apply(&entry).unwrap();
    assert!(
        matches!(&reply, Outcome::Error(e) if e.starts_with("ERR ")),
        "{reply:?}"
    );
    let after = observe_sm(&sm).unwrap();
    assert_eq!(after.applied, Some(2));
    assert_eq!(
        after.keys, before.keys,
        "the refused MSET wrote nothing, not even its first pair"
    );
}

fn leader_and_snapshot() -> (SmCore, pmem_kv_cluster::types::SnapshotMeta, Vec<u8>) {
    let store = anonymous();
    let mut leader = SmCore::open(&store).unwrap();
    for entry in [
        membership(1, 1, &[1, 2]),
        set(1, 2, "a", "1"),
        set(1, 3, "b", "2"),
        blank(2, 4),
    ] {
        leader.apply(&entry).unwrap();
    }
    let (meta, bytes) = leader.maps().build_snapshot().unwrap();
    (leader, meta, bytes)
}

#[test]
fn a_snapshot_installs_whole_over_other_keys() {
    let (leader, meta, bytes) = leader_and_snapshot();
    assert_eq!(meta.last_log_id.as_ref().map(|l| l.index), Some(4));
    let store = anonymous();
    let mut follower = SmCore::open(&store).unwrap();
    follower.apply(&set(1, 1, "stale", "x")).unwrap();
    follower.install_snapshot(&meta, &bytes).unwrap();
    assert_eq!(observe_sm(&follower).unwrap(), observe_sm(&leader).unwrap());
    // The same snapshot again is taken (it takes nothing back).
    follower.install_snapshot(&meta, &bytes).unwrap();
    assert_eq!(observe_sm(&follower).unwrap(), observe_sm(&leader).unwrap());
}

#[test]
fn damaged_mismatched_and_stale_snapshots_are_refused_changing_nothing() {
    let (_leader, meta, bytes) = leader_and_snapshot();
    let store = anonymous();
    let mut follower = SmCore::open(&store).unwrap();
    follower.apply(&set(1, 1, "mine", "x")).unwrap();
    let before = observe_sm(&follower).unwrap();

    let mut damaged = bytes.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x40;
    let e = follower.install_snapshot(&meta, &damaged).unwrap_err();
    assert!(
        matches!(&e, ClusterError::BadSnapshot { reason, .. } if reason.contains("checksum")),
        "{e}"
    );

    let e = follower
        .install_snapshot(&meta, &bytes[..bytes.len() / 2])
        .unwrap_err();
    assert!(matches!(e, ClusterError::BadSnapshot { .. }), "{e}");

    let e = follower
        .install_snapshot(&meta, b"not a snapshot")
        .unwrap_err();
    assert!(matches!(e, ClusterError::BadSnapshot { .. }), "{e}");

    let mut other = meta.clone();
    other.last_log_id = Some(common::id(9, 9));
    let e = follower.install_snapshot(&other, &bytes).unwrap_err();
    assert!(
        matches!(&e, ClusterError::BadSnapshot { reason, .. } if reason.contains("not what was offered")),
        "{e}"
    );
    assert_eq!(observe_sm(&follower).unwrap(), before);

    // Ahead of the snapshot, the follower refuses it as stale.
    for index in 2..=6 {
        follower.apply(&blank(3, index)).unwrap();
    }
    let ahead = observe_sm(&follower).unwrap();
    let e = follower.install_snapshot(&meta, &bytes).unwrap_err();
    assert!(matches!(e, ClusterError::StaleSnapshot { .. }), "{e}");
    assert_eq!(observe_sm(&follower).unwrap(), ahead);
}

#[test]
fn the_state_survives_a_reopen_of_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.pool");
    let expected = {
        let store = Store::create(&path, 16 << 20, &StoreOptions::new()).unwrap();
        let mut sm = SmCore::open(&store).unwrap();
        for entry in [
            membership(1, 1, &[1]),
            set(1, 2, "a", "1"),
            incr(1, 3, "a", 1),
            normal(1, 4, Write::Flush),
            set(1, 5, "z", "26"),
        ] {
            sm.apply(&entry).unwrap();
        }
        observe_sm(&sm).unwrap()
    };
    let store = Store::open(&path).unwrap();
    let sm = SmCore::open(&store).unwrap();
    assert_eq!(observe_sm(&sm).unwrap(), expected);
    assert_eq!(expected.applied, Some(5));
    assert_eq!(expected.keys.len(), 1);
}

/// A leader of `keys` keys (MSETs of 1,000 pairs, values of `value_bytes`), its snapshot.
fn big_leader(
    keys: usize,
    value_bytes: usize,
) -> (SmCore, pmem_kv_cluster::types::SnapshotMeta, Vec<u8>) {
    let store = Store::anonymous(256 << 20, &StoreOptions::new()).unwrap();
    let mut leader = SmCore::open(&store).unwrap();
    leader.apply(&membership(1, 1, &[1, 2])).unwrap();
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..keys)
        .map(|i| {
            (
                format!("key:{i:06}").into_bytes(),
                vec![b'a' + (i % 26) as u8; value_bytes],
            )
        })
        .collect();
    for (n, chunk) in pairs.chunks(1000).enumerate() {
        let entry = normal(
            1,
            2 + n as u64,
            Write::MSet {
                pairs: chunk.to_vec(),
            },
        );
        assert_eq!(leader.apply(&entry).unwrap(), Outcome::Ok);
    }
    let (meta, bytes) = leader.maps().build_snapshot().unwrap();
    (leader, meta, bytes)
}

fn keyspaces(store: &Store) -> Vec<String> {
    let mut names: Vec<String> = store
        .names()
        .into_iter()
        .filter(|n| n == KEYSPACE || n == KEYSPACE_STAGED)
        .collect();
    names.sort();
    names
}

#[test]
fn a_snapshot_past_one_batchs_limit_installs_whole_under_the_other_name_and_back() {
    let keys = MAX_BATCH_CHANGES + 3_000;
    let (mut leader, meta, bytes) = big_leader(keys, 16);
    let store = Store::anonymous(256 << 20, &StoreOptions::new()).unwrap();
    let mut follower = SmCore::open(&store).unwrap();
    follower.apply(&set(1, 1, "stale", "x")).unwrap();
    follower.install_snapshot(&meta, &bytes).unwrap();
    let installed = observe_sm(&follower).unwrap();
    assert_eq!(installed, observe_sm(&leader).unwrap());
    assert_eq!(installed.keys.len(), keys);
    assert!(!installed.keys.contains_key(&b"stale"[..]));
    assert_eq!(keyspaces(&store), [KEYSPACE_STAGED]);

    // A later snapshot moves the keyspace back to its first name; a reopen finds it there.
    let last = meta.last_log_id.as_ref().unwrap().index;
    leader
        .apply(&del(1, last + 1, &["key:000000", "key:000001"]))
        .unwrap();
    let (meta, bytes) = leader.maps().build_snapshot().unwrap();
    follower.install_snapshot(&meta, &bytes).unwrap();
    assert_eq!(observe_sm(&follower).unwrap(), observe_sm(&leader).unwrap());
    assert_eq!(keyspaces(&store), [KEYSPACE]);
    drop(follower);
    let reopened = SmCore::open(&store).unwrap();
    assert_eq!(observe_sm(&reopened).unwrap().keys.len(), keys - 2);
}

#[test]
fn a_snapshot_that_does_not_fit_changes_nothing_and_leaves_no_staged_copy() {
    let (_leader, meta, bytes) = big_leader(MAX_BATCH_CHANGES + 3_000, 200);
    let store = Store::anonymous(4 << 20, &StoreOptions::new()).unwrap();
    let mut follower = SmCore::open(&store).unwrap();
    follower.apply(&set(1, 1, "mine", "x")).unwrap();
    let before = observe_sm(&follower).unwrap();
    let e = follower.install_snapshot(&meta, &bytes).unwrap_err();
    assert!(matches!(e, ClusterError::Store(_)), "{e}");
    assert_eq!(observe_sm(&follower).unwrap(), before);
    assert_eq!(keyspaces(&store), [KEYSPACE]);
    // The space the staged copy took is back: the state machine goes on.
    follower.apply(&set(1, 2, "next", "y")).unwrap();
    assert_eq!(observe_sm(&follower).unwrap().applied, Some(2));
}
