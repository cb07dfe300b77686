//! Every structure under every policy as one crash case: a workload of a chosen length, run
//! through the one crash driver under whatever mode its [`CrashTest`] asks for. The deeper
//! crash tests (crashes of recovery, enumerated images, torn lines, the long sweep) iterate
//! over [`all`], so a structure or policy added here is covered by each of them.

use pmem_ordering::sim::{CrashFailure, CrashTest, Report, SimConfig};
use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::datalog::{Policy, WriteMode};
use pmem_structures::raw::fastfair::{FastFairConfig, ShiftPolicy};
use pmem_structures::raw::STORE_LAYOUT;
use pmem_structures::StructureKind;
use pmem_undo_log::FencePolicy;

use crate::cceh::CcehOp;
use crate::datalog::DatalogOp;
use crate::fastfair::FastFairOp;
use crate::records::{KeyShape, RecordKey, RecordOp, RecordSetup, RecordValue, TAIL_ALPHABET};
use crate::store::{NameId, StoreOp, StoreSetup};
use crate::undo::{crash_allocations, crash_transfers};
use crate::SplitMix64;

/// Runs a case's workload of `ops` operations from `seed` under a crash test.
type RunCase = Box<dyn Fn(&CrashTest, usize, u64) -> Result<Report, Box<CrashFailure>>>;

/// One structure under one policy.
pub struct CrashCase {
    /// The structure: `cceh`, `fastfair`, `datalog`, `records`, `store`, `undo-tx`,
    /// `undo-alloc`.
    pub structure: &'static str,
    /// The policy, as the structure names it.
    pub policy: String,
    /// The simulator model the policy is meant to be correct under.
    pub sim: SimConfig,
    layout: &'static str,
    pool_bytes: u64,
    root_size: u64,
    run: RunCase,
}

impl CrashCase {
    /// `structure-policy`.
    pub fn name(&self) -> String {
        format!("{}-{}", self.structure, self.policy)
    }

    /// A crash test of this case's pool under `sim` (its own [`CrashCase::sim`], or that in
    /// torn-line mode); points, images and seed are the caller's.
    pub fn test(&self, sim: SimConfig) -> CrashTest {
        CrashTest::new(&self.name(), sim).pool(self.layout, self.pool_bytes, self.root_size)
    }

    /// Runs the case's workload of `ops` operations drawn from `seed` under `test`, every
    /// recovered image checked against the structure's model.
    pub fn run(
        &self,
        test: &CrashTest,
        ops: usize,
        seed: u64,
    ) -> Result<Report, Box<CrashFailure>> {
        (self.run)(test, ops, seed)
    }
}

/// The fence policies and the model each is correct under.
fn fence_policies() -> [(FencePolicy, SimConfig); 3] {
    [
        (FencePolicy::Strict, SimConfig::x86()),
        (FencePolicy::Batched, SimConfig::x86()),
        (FencePolicy::Themis, SimConfig::themis()),
    ]
}

/// Every structure under every policy.
pub fn all() -> Vec<CrashCase> {
    let mut cases = Vec::new();
    for (policy, sim) in fence_policies() {
        cases.push(CrashCase {
            structure: "cceh",
            policy: policy.name().to_string(),
            sim,
            layout: "cceh",
            pool_bytes: 256 << 10,
            root_size: 1024,
            run: Box::new(move |test, n, seed| {
                let config = CcehConfig {
                    buckets_per_segment: 4,
                };
                let ops = CcehOp::mixed(n, n as u64 + 1, seed);
                crate::cceh::crash_ops_outcome(test, config, policy, &ops).map(|o| o.report)
            }),
        });
    }
    for shift in [ShiftPolicy::PerShift, ShiftPolicy::Fast, ShiftPolicy::Redo] {
        cases.push(CrashCase {
            structure: "fastfair",
            policy: shift.name().to_string(),
            sim: SimConfig::x86(),
            layout: "fastfair",
            pool_bytes: 512 << 10,
            root_size: 1024,
            run: Box::new(move |test, n, seed| {
                let config = FastFairConfig {
                    node_size: 128,
                    policy: shift,
                };
                let ops = FastFairOp::grow_then_shrink(n, (n as u64 / 3).max(4), seed);
                crate::fastfair::crash_ops_outcome(test, config, &ops)
            }),
        });
    }
    for mode in [WriteMode::CopyOnWrite, WriteMode::Embedded, WriteMode::Auto] {
        cases.push(CrashCase {
            structure: "datalog",
            policy: format!("{mode:?}").to_lowercase(),
            sim: SimConfig::x86(),
            layout: "datalog",
            pool_bytes: 512 << 10,
            root_size: 1024,
            run: Box::new(move |test, n, seed| {
                let policy = Policy {
                    fold_after_entries: 6,
                    ..Policy::with_mode(mode)
                };
                let ops = DatalogOp::small_writes(n, mode, seed);
                crate::datalog::crash_ops_outcome(test, policy, &ops)
            }),
        });
    }
    for shift in [ShiftPolicy::PerShift, ShiftPolicy::Fast, ShiftPolicy::Redo] {
        let setup = RecordSetup {
            shift,
            ..RecordSetup::default()
        };
        cases.push(CrashCase {
            structure: "records",
            policy: shift.name().to_string(),
            sim: SimConfig::x86(),
            layout: STORE_LAYOUT,
            pool_bytes: 2 << 20,
            root_size: setup.root_size().expect("the record maps' catalog root"),
            run: Box::new(move |test, n, seed| {
                crate::records::crash_record_ops_outcome(test, setup, &record_ops(n, seed))
            }),
        });
    }
    for (policy, sim) in fence_policies() {
        let setup = StoreSetup {
            policy,
            ..StoreSetup::default()
        };
        cases.push(CrashCase {
            structure: "store",
            policy: policy.name().to_string(),
            sim,
            layout: STORE_LAYOUT,
            pool_bytes: 512 << 10,
            root_size: setup.root_size().expect("the store's catalog root"),
            run: Box::new(move |test, n, seed| {
                crate::store::crash_ops_outcome(test, setup, &store_ops(n, seed))
            }),
        });
    }
    for (policy, sim) in fence_policies() {
        cases.push(CrashCase {
            structure: "undo-tx",
            policy: policy.name().to_string(),
            sim,
            layout: crate::undo::LAYOUT,
            pool_bytes: crate::undo::POOL_BYTES,
            root_size: crate::undo::ROOT_BYTES,
            run: Box::new(move |test, n, seed| crash_transfers(test, policy, n, seed)),
        });
        cases.push(CrashCase {
            structure: "undo-alloc",
            policy: policy.name().to_string(),
            sim,
            layout: crate::undo::LAYOUT,
            pool_bytes: crate::undo::POOL_BYTES,
            root_size: crate::undo::ROOT_BYTES,
            run: Box::new(move |test, n, seed| crash_allocations(test, policy, n, seed)),
        });
    }
    cases
}

/// `n` writes to both byte-key maps over eight short keys (shared 7-byte prefixes, so the
/// ordered map makes a layer): inserts, upserts to values of up to two chunks, removes.
fn record_ops(n: usize, seed: u64) -> Vec<RecordOp> {
    let mut rng = SplitMix64::new(seed);
    let keys: Vec<RecordKey> = [KeyShape::Bare, KeyShape::Shares7]
        .into_iter()
        .flat_map(|shape| {
            TAIL_ALPHABET
                .iter()
                .map(move |&t| RecordKey::new(shape, &[t]))
        })
        .collect();
    (0..n)
        .map(|i| {
            let key = keys[rng.below(keys.len() as u64) as usize].clone();
            let value = RecordValue::new([0, 9, 100, 4000][rng.below(4) as usize], i as u8);
            match i % 4 {
                0 | 1 => RecordOp::Insert(key, value),
                2 => RecordOp::Upsert(key, value),
                _ => RecordOp::Remove(key),
            }
        })
        .collect()
}

/// A hash map and an ordered map of each layout opened, `n` writes spread over them, then the
/// hash map's handle dropped and the structure removed, then the map of leaves'.
fn store_ops(n: usize, seed: u64) -> Vec<StoreOp> {
    let mut rng = SplitMix64::new(seed);
    let (hash, tree, leaves) = (NameId::new(0), NameId::new(1), NameId::new(2));
    let mut ops = vec![
        StoreOp::Open(hash, StructureKind::HashMap),
        StoreOp::Open(tree, StructureKind::BTreeMap),
        StoreOp::Open(leaves, StructureKind::LeafMap),
    ];
    ops.extend((0..n).map(|i| {
        let name = [hash, tree, leaves][i % 3];
        let key = rng.below(24) + 1;
        match i % 5 {
            0..=2 => StoreOp::Insert(name, key, i as u64),
            3 => StoreOp::Upsert(name, key, i as u64 + 100),
            _ => StoreOp::Remove(name, key),
        }
    }));
    ops.push(StoreOp::DropHandles(hash));
    ops.push(StoreOp::RemoveStructure(hash));
    ops.push(StoreOp::DropHandles(leaves));
    ops.push(StoreOp::RemoveStructure(leaves));
    ops
}
