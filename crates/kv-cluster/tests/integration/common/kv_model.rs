//! A std model of the state machine: a `BTreeMap` keyspace, the last applied index and the
//! voters of the last membership, and the replies Redis 7 gives.

use std::collections::{BTreeMap, BTreeSet};

use openraft::EntryPayload;
use pmem_kv_cluster::types::Entry;
use pmem_kv_cluster::{Condition, Outcome, Write};

/// What the state machine holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvState {
    pub applied: Option<u64>,
    pub voters: Vec<BTreeSet<u64>>,
    pub keys: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl KvState {
    /// Apply `entry` as Redis would; the reply.
    pub fn apply(&mut self, entry: &Entry) -> Outcome {
        self.applied = Some(entry.log_id.index);
        match &entry.payload {
            EntryPayload::Blank => Outcome::Ok,
            EntryPayload::Membership(m) => {
                self.voters = m.get_joint_config().to_vec();
                Outcome::Ok
            }
            EntryPayload::Normal(write) => self.write(write),
        }
    }

    fn write(&mut self, write: &Write) -> Outcome {
        match write {
            Write::Set {
                key,
                value,
                when,
                get,
                integer_reply,
            } => {
                let old = self.keys.get(key).cloned();
                let writes = match when {
                    Condition::Always => true,
                    Condition::IfAbsent => old.is_none(),
                    Condition::IfPresent => old.is_some(),
                };
                if writes {
                    self.keys.insert(key.clone(), value.clone());
                }
                if *integer_reply {
                    Outcome::Integer(writes as i64)
                } else if *get {
                    old.map_or(Outcome::Null, Outcome::Bulk)
                } else if writes {
                    Outcome::Ok
                } else {
                    Outcome::Null
                }
            }
            Write::Append { key, value } => {
                let v = self.keys.entry(key.clone()).or_default();
                v.extend_from_slice(value);
                Outcome::Integer(v.len() as i64)
            }
            Write::IncrBy { key, by } => {
                let old = match self.keys.get(key) {
                    None => 0i64,
                    Some(v) => match std::str::from_utf8(v)
                        .ok()
                        .and_then(|t| t.parse::<i64>().ok())
                    {
                        Some(n) if n.to_string().as_bytes() == v.as_slice() => n,
                        _ => {
                            return Outcome::Error(
                                "ERR value is not an integer or out of range".into(),
                            )
                        }
                    },
                };
                match old.checked_add(*by) {
                    Some(new) => {
                        self.keys.insert(key.clone(), new.to_string().into_bytes());
                        Outcome::Integer(new)
                    }
                    None => Outcome::Error("ERR increment or decrement would overflow".into()),
                }
            }
            Write::MSet { pairs } => {
                for (k, v) in pairs {
                    self.keys.insert(k.clone(), v.clone());
                }
                Outcome::Ok
            }
            Write::Del { keys } => Outcome::Integer(
                keys.iter()
                    .filter(|k| self.keys.remove(*k).is_some())
                    .count() as i64,
            ),
            Write::Flush => {
                self.keys.clear();
                Outcome::Ok
            }
        }
    }
}
