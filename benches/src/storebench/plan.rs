//! What [`measure`](super::measure) measures ([`StorePlan`]), what it reports
//! ([`StorePathResults`], one [`StorePathRow`] per operation) and why it fails
//! ([`StoreBenchError`]).

use serde::Serialize;

use crate::ccehbench;
use crate::fastfairbench;
use crate::phase::CountError;
use crate::poolfile::SetupError;
use crate::ycsb::targets::MakeError;
use crate::ycsb::{Scale, YcsbError};
use pmem_structures::raw::cceh::CcehError;
use pmem_structures::raw::fastfair::FastFairError;

/// The target: store ops/s at least this fraction of raw ops/s ("within 3%").
pub const TARGET_RATIO: f64 = 0.97;

/// Chunks each phase is cut into, each run on both sides back to back.
pub const CHUNKS: usize = 16;

/// How much [`measure`](super::measure) measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorePlan {
    /// Keys of the CCEH rows.
    pub cceh_keys: u64,
    /// Keys of the FAST&FAIR rows.
    pub fastfair_keys: u64,
    /// Scans of the FAST&FAIR scan row, per side and repetition.
    pub scans: usize,
    /// Records and operations of the YCSB rows.
    pub ycsb: Scale,
    /// Repetitions; each runs every phase on both sides, in alternating order.
    pub repetitions: usize,
    /// Seed of the YCSB plans.
    pub seed: u64,
}

impl StorePlan {
    /// The default run: 1M keys and 20 000 scans, as the structures' sections; YCSB at its
    /// default scale; 3 repetitions.
    pub fn full() -> StorePlan {
        StorePlan {
            cceh_keys: ccehbench::CCEH_KEYS,
            fastfair_keys: fastfairbench::FASTFAIR_KEYS,
            scans: 20_000,
            ycsb: Scale::default(),
            repetitions: 3,
            seed: 0x5C5B,
        }
    }

    /// The `--quick` run: 20 000 keys, 2 000 scans, 5 000 YCSB records and operations, 2
    /// repetitions (each chunk run once in each order).
    pub fn quick() -> StorePlan {
        StorePlan {
            cceh_keys: 20_000,
            fastfair_keys: 20_000,
            scans: 2_000,
            ycsb: Scale {
                records: 5_000,
                ops: 5_000,
            },
            repetitions: 2,
            seed: 0x5C5B,
        }
    }
}

/// One operation measured both ways.
#[derive(Clone, Debug, Serialize)]
pub struct StorePathRow {
    /// The structure's name.
    pub structure: String,
    /// What was measured.
    pub operation: String,
    /// Operations of each timed run.
    pub ops: u64,
    /// Raw structure, operations per second: the median over the repetitions.
    pub raw_ops_per_sec: f64,
    /// Through the store's handle, operations per second: the median over the repetitions.
    pub store_ops_per_sec: f64,
    /// Store over raw ops/s: the median of the repetitions' ratios.
    pub ratio: f64,
    /// Whether the ratio is at least [`TARGET_RATIO`].
    pub within_target: bool,
    /// Raw ops/s of each repetition.
    pub raw_samples: Vec<f64>,
    /// Store ops/s of each repetition.
    pub store_samples: Vec<f64>,
    /// Store over raw of each repetition: the median of its chunks' ratios.
    pub ratio_samples: Vec<f64>,
}

/// The store-path section of a run.
#[derive(Clone, Debug, Serialize)]
pub struct StorePathResults {
    /// Repetitions measured.
    pub repetitions: usize,
    /// Keys of the CCEH rows (`None`: CCEH not measured).
    pub cceh_keys: Option<u64>,
    /// Keys of the FAST&FAIR rows (`None`: FAST&FAIR not measured).
    pub fastfair_keys: Option<u64>,
    /// Scans per side and repetition.
    pub scans: usize,
    /// YCSB records and operations.
    pub ycsb: Scale,
    /// The target ratio ([`TARGET_RATIO`]).
    pub target_ratio: f64,
    /// One row per operation, CCEH's then FAST&FAIR's single calls, then the YCSB rows.
    pub rows: Vec<StorePathRow>,
}

/// Why the store-path measurements failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreBenchError {
    /// A pool, heap or store could not be set up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// A raw CCEH operation failed.
    #[error("a CCEH operation failed: {0}")]
    Cceh(#[from] CcehError),
    /// A raw FAST&FAIR operation failed.
    #[error("a FAST&FAIR operation failed: {0}")]
    FastFair(#[from] FastFairError),
    /// An operation through the store failed.
    #[error("an operation through the store failed: {0}")]
    Store(#[from] pmem_structures::Error),
    /// An operation did not do what it should have (a bug, not a measurement).
    #[error(transparent)]
    Count(#[from] CountError),
    /// A YCSB run failed.
    #[error(transparent)]
    Ycsb(#[from] YcsbError),
}

impl From<MakeError> for StoreBenchError {
    fn from(e: MakeError) -> Self {
        StoreBenchError::Ycsb(e.into())
    }
}
