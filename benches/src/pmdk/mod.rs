//! PMDK side by side (feature `pmdk`): libpmem's `pmem_memcpy_persist` against the pool's
//! durable copies, and libpmemobj transactions against undo-log transactions, measured in one
//! run, interleaved by [`time_side_by_side`], on pool files in the run's pool directory.
//!
//! * copy: for each size of [`NT_SIZES`], `pmem_memcpy_persist` into a `pmem_map_file` mapping
//!   against the pool's `nt_write` + fence (what the undo log uses for its entries) and its
//!   `write` + `persist` (temporal stores, then the detected flush and a fence), each writing the
//!   next slot of a ring of [`RING_LEN`] bytes, as [`crate::primitives`] does;
//! * transactions: for each K of [`PMDK_TX_WORDS`], the K-words transaction of
//!   [`crate::txbench`] (one random word from each of K equal slices of a 64 Ki-word array,
//!   all snapshot, then all written), in libpmemobj (`pmemobj_tx_add_range_direct` of each word,
//!   then the stores) and on an undo-log [`pmem_undo_log::Heap`] under the strict and batched
//!   (default) fence policies, with the same random words.
//!
//! libpmem treats a mapping as persistent memory only if `pmem_is_pmem` says so; on tmpfs it
//! does not, and libpmemobj would then end every persist in `msync` while our pools issue flush
//! instructions. libpmem reads `PMEM_IS_PMEM_FORCE` on the first call to `pmem_is_pmem`, not at
//! load time (libpmem(7), ENVIRONMENT), so [`measure`] sets it to 1 before the first mapping
//! when the environment does not set it, and reports what libpmem decided.

mod bindings;

use std::path::Path;

use pmem_ordering::{FlushKind, Granularity, Isa, PoolError};
use pmem_undo_log::{FencePolicy, TxError, TxStats};

use crate::keys::{below, SplitMix64};
use crate::measure::{time_side_by_side, Plan, Runner};
use crate::poolfile::{PoolFile, SetupError};
use crate::primitives::{Primitive, Variant, NT_SIZES, POOL_SIZE, RING_LEN};
use crate::report::{PmdkCopyRow, PmdkResults, PmdkTxRow, SideTiming, TxMeasurement};
use crate::txbench::{TxRunner, TxVariant, TX_POOL_SIZE, WORDS};

pub use bindings::{
    check_versions, has_auto_flush, ObjAllocPool, ObjBlock, ObjPool, PmdkError, PmemMap,
};

/// The K (words per transaction) compared with libpmemobj.
pub const PMDK_TX_WORDS: [u64; 3] = [1, 8, 32];
/// Our fence policies compared with libpmemobj: the baseline and the default, in the order of
/// [`PmdkTxRow`]'s `strict` and `batched`.
pub const PMDK_POLICIES: [FencePolicy; 2] = [FencePolicy::Strict, FencePolicy::Batched];
/// The PMDK version the binary was built against (from pkg-config, see `build.rs`).
pub const PMDK_VERSION: &str = env!("PMEM_BENCH_PMDK_VERSION");
/// libpmem's default `PMEM_MOVNT_THRESHOLD` (libpmem(7)): copies from this many bytes use
/// non-temporal stores.
const DEFAULT_MOVNT_THRESHOLD: usize = 256;
/// Why the PMDK section could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum PmdkBenchError {
    /// A PMDK call failed.
    #[error("PMDK: {0}")]
    Pmdk(#[from] PmdkError),
    /// Our side's pool could not be set up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// Our side's copy failed.
    #[error("a benchmark operation failed: {0}")]
    Pool(#[from] PoolError),
    /// Our side's transaction failed.
    #[error("a benchmark transaction failed: {0}")]
    Tx(#[from] TxError),
}

/// `pmem_memcpy_persist` of one size into the next slot of a ring.
struct PmdkCopy {
    map: PmemMap,
    bytes: usize,
    slot: usize,
    cursor: usize,
    data: Vec<u8>,
}

impl PmdkCopy {
    fn step(&mut self) -> Result<(), PmdkError> {
        let offset = self.cursor;
        self.cursor += self.slot;
        if self.cursor + self.slot > self.map.len() {
            self.cursor = 0;
        }
        self.map.memcpy_persist(offset, &self.data[..self.bytes])
    }
}

/// The K-words transaction on a libpmemobj pool, with the same random words as
/// [`TxRunner`]'s.
struct PmdkTx {
    pool: ObjPool,
    k: u64,
    rng: SplitMix64,
    picks: Vec<u64>,
    value: u64,
}

impl PmdkTx {
    fn step(&mut self) -> Result<(), PmdkError> {
        // One word from each of K equal slices, drawn as TxRunner draws them.
        let slice = WORDS / self.k;
        let rng = &mut self.rng;
        self.picks.clear();
        self.picks
            .extend((0..self.k).map(|i| i * slice + below(rng, slice)));
        self.value += 1;
        self.pool.tx_set_words(&self.picks, self.value)
    }
}

/// One side of a comparison, so both run in one [`time_side_by_side`] group.
enum Side {
    PmdkCopy(PmdkCopy),
    OursCopy(Primitive),
    PmdkTx(PmdkTx),
    // Boxed: a runner is far larger than the other sides, and there are only three per group.
    OursTx(Box<TxRunner>),
}

impl Runner for Side {
    type Error = PmdkBenchError;

    fn run(&mut self, n: u64) -> Result<(), PmdkBenchError> {
        match self {
            Side::PmdkCopy(c) => (0..n).try_for_each(|_| c.step())?,
            Side::OursCopy(p) => p.run(n)?,
            Side::PmdkTx(t) => (0..n).try_for_each(|_| t.step())?,
            Side::OursTx(r) => r.run(n)?,
        }
        Ok(())
    }

    fn tx_stats(&self) -> Option<TxStats> {
        match self {
            Side::OursTx(r) => r.tx_stats(),
            _ => None,
        }
    }
}

/// The flush instruction libpmem uses here, by its documented rules (libpmem(7)): none if the
/// platform flushes caches on power loss (`pmem_has_auto_flush`) or `PMEM_NO_FLUSH=1`, else
/// clwb, clflushopt, clflush, the first the CPU has and `PMEM_NO_CLWB` / `PMEM_NO_CLFLUSHOPT`
/// do not rule out.
fn libpmem_flush(auto_flush: bool) -> String {
    let env_is = |name: &str, value: &str| std::env::var(name).is_ok_and(|v| v == value);
    if env_is("PMEM_NO_FLUSH", "1") {
        return "none (PMEM_NO_FLUSH=1)".to_string();
    }
    if auto_flush && !env_is("PMEM_NO_FLUSH", "0") {
        return "none (pmem_has_auto_flush: eADR)".to_string();
    }
    let usable = |kind: FlushKind, off: &str| Isa::cpu_has_flush(kind) && !env_is(off, "1");
    let kind = if usable(FlushKind::Clwb, "PMEM_NO_CLWB") {
        FlushKind::Clwb
    } else if usable(FlushKind::ClflushOpt, "PMEM_NO_CLFLUSHOPT") {
        FlushKind::ClflushOpt
    } else {
        FlushKind::Clflush
    };
    kind.name().to_string()
}

/// From how many bytes libpmem copies with non-temporal stores.
fn libpmem_movnt() -> String {
    if std::env::var("PMEM_NO_MOVNT").is_ok_and(|v| v == "1") {
        return "never (PMEM_NO_MOVNT=1)".to_string();
    }
    match std::env::var("PMEM_MOVNT_THRESHOLD")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(t) => format!("from {t} B (PMEM_MOVNT_THRESHOLD)"),
        None => format!("from {DEFAULT_MOVNT_THRESHOLD} B (default threshold)"),
    }
}

/// Measure the PMDK section: the copies, then the transactions, each size and each K a group
/// of its sides interleaved. Pool files go to `dir` (named `{prefix}-...`, removed at the end);
/// our pools get `granularity` (`None`: detected). `progress(round, rounds)` is called after
/// each round of each group.
///
/// Sets `PMEM_IS_PMEM_FORCE=1` in the process environment when it is unset (see the module's
/// documentation): call it before the process starts other threads.
pub fn measure(
    dir: &Path,
    prefix: &str,
    granularity: Option<Granularity>,
    plan: &Plan,
    mut progress: impl FnMut(usize, usize),
) -> Result<PmdkResults, PmdkBenchError> {
    let env_force = std::env::var("PMEM_IS_PMEM_FORCE").ok();
    if env_force.is_none() {
        // libpmem reads it on its first pmem_is_pmem call, which the mapping below makes.
        std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
    }
    check_versions()?;

    let ours_file = PoolFile::create(
        dir,
        &format!("{prefix}-pmdk-ours.pool"),
        POOL_SIZE,
        granularity,
    )?;
    {
        // Every page of our ring written once, as PmemMap::create does for libpmem's.
        let mut raw = ours_file.map_raw()?;
        raw[ours_file.heap_offset() as usize..].fill(0);
    }
    let ring_path = dir.join(format!("{prefix}-pmdk-copy.pmem"));
    let mut copy = Vec::new();
    let mut copy_is_pmem = false;
    for bytes in NT_SIZES {
        let map = PmemMap::create(&ring_path, RING_LEN as usize)?;
        copy_is_pmem = map.is_pmem();
        let mut sides = vec![
            Side::PmdkCopy(PmdkCopy {
                map,
                bytes,
                slot: bytes.next_multiple_of(64),
                cursor: 0,
                // The same pattern as the primitives' source data.
                data: (0..bytes).map(|i| (i % 251) as u8 + 1).collect(),
            }),
            Side::OursCopy(Primitive::new(&ours_file, Variant::NtWrite(bytes))?),
            Side::OursCopy(Primitive::new(&ours_file, Variant::WritePersist(bytes))?),
        ];
        let t = time_side_by_side(&mut sides, plan, &mut progress)?;
        let (pmdk, nt, persist) = (
            SideTiming::new(&t[0]),
            SideTiming::new(&t[1]),
            SideTiming::new(&t[2]),
        );
        copy.push(PmdkCopyRow {
            bytes: bytes as u64,
            nt_over_pmdk: nt.ns_per_op / pmdk.ns_per_op,
            persist_over_pmdk: persist.ns_per_op / pmdk.ns_per_op,
            pmdk,
            ours_nt: nt,
            ours_persist: persist,
        });
    }
    drop(ours_file);

    let mut tx = Vec::new();
    let mut obj_is_pmem = false;
    for k in PMDK_TX_WORDS {
        let pool = ObjPool::create(
            &dir.join(format!("{prefix}-pmdk-k{k}.obj")),
            TX_POOL_SIZE as usize,
            WORDS as usize,
        )?;
        obj_is_pmem = pool.is_pmem();
        let mut sides = vec![Side::PmdkTx(PmdkTx {
            pool,
            k,
            // The seed TxRunner uses: both sides write the same words.
            rng: SplitMix64::new(0x5EED),
            picks: Vec::with_capacity(k as usize),
            value: 0,
        })];
        for policy in PMDK_POLICIES {
            let variant = TxVariant::Words { k, policy };
            sides.push(Side::OursTx(Box::new(TxRunner::new(
                dir,
                &format!("{prefix}-pmdk"),
                variant,
                granularity,
            )?)));
        }
        let t = time_side_by_side(&mut sides, plan, &mut progress)?;
        let cell = |i: usize, policy| {
            TxMeasurement {
                variant: TxVariant::Words { k, policy },
                timing: t[i].clone(),
            }
            .cell()
        };
        let pmdk = SideTiming::new(&t[0]);
        let [strict, batched] = PMDK_POLICIES;
        let (strict, batched) = (cell(1, strict), cell(2, batched));
        tx.push(PmdkTxRow {
            words: k,
            strict_over_pmdk: strict.ns_per_op / pmdk.ns_per_op,
            batched_over_pmdk: batched.ns_per_op / pmdk.ns_per_op,
            pmdk,
            strict,
            batched,
        });
    }

    let auto_flush = has_auto_flush();
    let isa = Isa::detected();
    let our_granularity = granularity.map_or_else(
        || "detected".to_string(),
        |g: Granularity| g.name().to_string(),
    );
    Ok(PmdkResults {
        pmdk_version: PMDK_VERSION.to_string(),
        pmem_is_pmem_force_env: env_force,
        copy_is_pmem,
        obj_is_pmem,
        auto_flush,
        libpmem_flush: libpmem_flush(auto_flush),
        libpmem_movnt: libpmem_movnt(),
        our_flush: isa.flush().name().to_string(),
        // Pools stream whole words with 8-byte movnti (`isa::nt_store_words`).
        our_copy: "movnti".to_string(),
        our_granularity,
        reps: plan.reps,
        batch_ms: plan.batch.as_secs_f64() * 1e3,
        copy,
        tx,
    })
}
