//! Random sequences of appends, truncations and purges on the Raft log store, each checked
//! against a std model after every call and after a reopen of the log: its entries, where it
//! starts (last purged) and ends (last log id). And random damage to a snapshot's bytes is
//! refused by the state machine, which keeps what it had.

use super::common;

use std::collections::BTreeMap;

use common::{id, observe_sm, set};
use pmem_kv_cluster::log_store::core::LogCore;
use pmem_kv_cluster::state_machine::core::SmCore;
use pmem_kv_cluster::types::{Entry, LogId};
use pmem_kv_cluster::ClusterError;
use pmem_structures::{Store, StoreOptions};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// Append this many entries after the last, at the current term.
    Append(u8),
    /// Keep entries up to this fraction (per 256) of the way from the first to the last.
    Truncate(u8),
    /// Purge up to this fraction of the way.
    Purge(u8),
    /// A new term for later appends.
    NewTerm,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u8..6).prop_map(Op::Append),
        2 => any::<u8>().prop_map(Op::Truncate),
        2 => any::<u8>().prop_map(Op::Purge),
        1 => Just(Op::NewTerm),
    ]
}

#[derive(Debug, Default, PartialEq)]
struct Model {
    purged: Option<LogId>,
    entries: BTreeMap<u64, Entry>,
}

impl Model {
    fn last(&self) -> Option<LogId> {
        self.entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(self.purged)
    }

    /// The log id at `fraction` of the way through the present entries, if any.
    fn at(&self, fraction: u8) -> Option<LogId> {
        let (first, last) = (
            *self.entries.keys().next()?,
            *self.entries.keys().next_back()?,
        );
        let index = first + (last - first) * u64::from(fraction) / 255;
        Some(self.entries[&index].log_id)
    }
}

fn observe(log: &LogCore) -> Model {
    let entries = log.maps().entries(..).unwrap();
    let model = Model {
        purged: log.purged().copied(),
        entries: entries.into_iter().map(|e| (e.log_id.index, e)).collect(),
    };
    assert_eq!(
        log.last().copied(),
        model.last(),
        "the log's cached last id"
    );
    model
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_log_follows_the_model_through_reopens(ops in proptest::collection::vec(op(), 1..40)) {
        let store = Store::anonymous(16 << 20, &StoreOptions::new()).unwrap();
        let mut log = LogCore::open(&store).unwrap();
        let mut model = Model::default();
        let mut term = 1;
        for op in &ops {
            match op {
                Op::Append(n) => {
                    let next = model.last().map_or(1, |l| l.index + 1);
                    let entries: Vec<Entry> =
                        (next..next + u64::from(*n)).map(|i| set(term, i, &format!("k{i}"), "v")).collect();
                    log.append(entries.iter().cloned()).unwrap();
                    for e in entries {
                        model.entries.insert(e.log_id.index, e);
                    }
                }
                Op::Truncate(f) => {
                    let keep = model.at(*f);
                    log.truncate_after(keep.as_ref()).unwrap();
                    let from = keep.map_or(0, |k| k.index + 1);
                    model.entries.retain(|&i, _| i < from);
                }
                Op::Purge(f) => {
                    if let Some(upto) = model.at(*f) {
                        log.purge(&upto).unwrap();
                        model.entries.retain(|&i, _| i > upto.index);
                        model.purged = Some(upto);
                    }
                }
                Op::NewTerm => term += 1,
            }
            prop_assert_eq!(&observe(&log), &model, "after {:?}", op);
            drop(log);
            log = LogCore::open(&store).unwrap();
            prop_assert_eq!(&observe(&log), &model, "after {:?} and a reopen", op);
        }
        // A gap after the last is refused (a log never written takes any first index).
        if let Some(last) = model.last() {
            let refused = log.append([set(term, last.index + 2, "gap", "x")]);
            prop_assert!(matches!(refused, Err(ClusterError::LogGap { .. })), "{:?}", refused);
            prop_assert_eq!(&observe(&log), &model);
        }
    }

    #[test]
    fn a_damaged_snapshot_is_refused_and_changes_nothing(at in any::<prop::sample::Index>(), mask in 1u8.., cut in any::<bool>()) {
        let leader_store = Store::anonymous(8 << 20, &StoreOptions::new()).unwrap();
        let mut leader = SmCore::open(&leader_store).unwrap();
        for i in 1..=6 {
            leader.apply(&set(1, i, &format!("key{i}"), &"v".repeat(i as usize))).unwrap();
        }
        let (meta, mut bytes) = leader.maps().build_snapshot().unwrap();
        let i = at.index(bytes.len());
        if cut {
            bytes.truncate(i);
        } else {
            bytes[i] ^= mask;
        }
        let store = Store::anonymous(8 << 20, &StoreOptions::new()).unwrap();
        let mut follower = SmCore::open(&store).unwrap();
        follower.apply(&set(1, 1, "mine", "x")).unwrap();
        let before = observe_sm(&follower).unwrap();
        let refused = follower.install_snapshot(&meta, &bytes);
        prop_assert!(
            matches!(refused, Err(ClusterError::BadSnapshot { .. } | ClusterError::Codec { .. })),
            "{:?}", refused
        );
        prop_assert_eq!(observe_sm(&follower).unwrap(), before);
        prop_assert_eq!(meta.last_log_id, Some(id(1, 6)));
    }
}

#[test]
fn appends_and_purges_past_one_batch_keep_the_log_whole() {
    let store = Store::anonymous(32 << 20, &StoreOptions::new()).unwrap();
    let mut log = LogCore::open(&store).unwrap();
    let entries: Vec<Entry> = (1..=300)
        .map(|i| set(1, i, &format!("k{i}"), "v"))
        .collect();
    log.append(entries.iter().cloned()).unwrap();
    assert_eq!(log.maps().entries(..).unwrap(), entries);
    log.purge(&id(1, 290)).unwrap();
    assert_eq!(log.maps().entries(..).unwrap(), entries[290..].to_vec());
    let log = LogCore::open(&store).unwrap();
    assert_eq!(log.purged().copied(), Some(id(1, 290)));
    assert_eq!(log.last().copied(), Some(id(1, 300)));
    assert_eq!(log.maps().entries(..).unwrap(), entries[290..].to_vec());
}
