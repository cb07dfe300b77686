//! What the crash tests of the log store and the state machine share: a small store on a
//! simulated pool, opened as a restart opens it, and entries to feed them.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::Arc;

use openraft::EntryPayload;
use pmem_kv_cluster::types::{Entry, LogId};
use pmem_kv_cluster::{Condition, KvRaft, Write};
use pmem_structures::raw::pmem_ordering::sim::{
    CrashPoints, CrashTest, Images, SimBackend, SimConfig,
};
use pmem_structures::raw::pmem_ordering::Pool;
use pmem_structures::raw::STORE_LAYOUT;
use pmem_structures::{Store, StoreOptions};

/// A store on a simulated pool.
pub type SimStore = Store<SimBackend>;

/// The pool's layout, size and root size for `CrashTest::pool`.
pub const LAYOUT: &str = STORE_LAYOUT;
pub const POOL_BYTES: u64 = 2 << 20;
pub const ROOT_BYTES: u64 = 64 + 6 * 128;

/// A simulated pool of the size above, for running a history without crashes.
pub fn simulated_pool() -> Arc<Pool<SimBackend>> {
    Pool::<SimBackend>::simulated(LAYOUT, POOL_BYTES, ROOT_BYTES, SimConfig::x86())
        .map(Arc::new)
        .expect("a simulated pool")
}

/// A crash test of a store on the pool above, failing on a store left unpersisted at the end.
pub fn crash_test(name: &str, points: CrashPoints, images: Images, seed: u64) -> CrashTest {
    CrashTest::new(name, SimConfig::x86())
        .pool(LAYOUT, POOL_BYTES, ROOT_BYTES)
        .points(points)
        .images(images)
        .fail_on_unpersisted(true)
        .seed(seed)
}

/// Small lanes and chunks: a few writes reach every path.
pub fn options() -> StoreOptions {
    pmem_test_kit::crash_store_options(6)
}

pub use pmem_test_kit::{reload_store as load, store_is_whole};

/// A log id of `term` (leader node 1) at `index`.
pub fn id(term: u64, index: u64) -> LogId {
    openraft::testing::log_id::<KvRaft>(term, 1, index)
}

/// An entry at `(term, index)` carrying `write`.
pub fn normal(term: u64, index: u64, write: Write) -> Entry {
    Entry {
        log_id: id(term, index),
        payload: EntryPayload::Normal(write),
    }
}

/// A `SET key value` entry.
pub fn set(term: u64, index: u64, key: &str, value: &str) -> Entry {
    normal(
        term,
        index,
        Write::Set {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            when: Condition::Always,
            get: false,
            integer_reply: false,
        },
    )
}

/// A blank entry (a new leader's first).
pub fn blank(term: u64, index: u64) -> Entry {
    openraft::testing::blank_ent::<KvRaft>(term, 1, index)
}

/// A membership entry of voters `nodes`.
pub fn membership(term: u64, index: u64, nodes: &[u64]) -> Entry {
    let voters: BTreeSet<u64> = nodes.iter().copied().collect();
    openraft::testing::membership_ent::<KvRaft>(term, 1, index, vec![voters])
}

pub mod kv_model;

/// `INCRBY key by`.
pub fn incr(term: u64, index: u64, key: &str, by: i64) -> Entry {
    normal(
        term,
        index,
        Write::IncrBy {
            key: key.as_bytes().to_vec(),
            by,
        },
    )
}

/// `DEL keys...`.
pub fn del(term: u64, index: u64, keys: &[&str]) -> Entry {
    normal(
        term,
        index,
        Write::Del {
            keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect(),
        },
    )
}

/// The state machine's whole state as the model holds it: last applied index, voters,
/// pairs.
pub fn observe_sm<B>(
    sm: &pmem_kv_cluster::state_machine::core::SmCore<B>,
) -> Result<kv_model::KvState, String>
where
    B: pmem_structures::raw::pmem_ordering::Backend,
{
    let (meta, pairs) = sm.maps().read_all().map_err(|e| e.to_string())?;
    Ok(kv_model::KvState {
        applied: meta.last_log_id.map(|l| l.index),
        voters: meta
            .last_membership
            .membership()
            .get_joint_config()
            .to_vec(),
        keys: pairs.into_iter().collect(),
    })
}
