//! What the YCSB runner reports: a row per run, the section of a run, and why a run failed.

use serde::Serialize;

use super::targets::{MakeError, TargetError};
use super::{PlanError, Scale, Skipped};

/// One run's results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct YcsbRow {
    /// The structure's name.
    pub structure: String,
    /// The variant's name.
    pub variant: String,
    /// The workload's name (`load` for the load phase).
    pub workload: String,
    /// The key distribution (`None` for the load and insert-only, which choose no keys).
    pub distribution: Option<String>,
    /// Threads.
    pub threads: usize,
    /// Operations run.
    pub ops: u64,
    /// The run's time: the slowest thread's, from the common start.
    pub seconds: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// Median latency of one operation, in nanoseconds (`None`: operations not timed one by
    /// one, the batched CCEH load).
    pub p50_ns: Option<f64>,
    /// 99th percentile latency.
    pub p99_ns: Option<f64>,
    /// 99.9th percentile latency.
    pub p999_ns: Option<f64>,
    /// Fences per operation.
    pub fences_per_op: f64,
    /// Cache lines flushed per operation.
    pub flushes_per_op: f64,
    /// Bytes stored non-temporally per operation.
    pub nt_bytes_per_op: f64,
    /// Bytes sent to persistent memory per operation: flushed lines plus non-temporal bytes
    /// ([`pmem_ordering::Stats::bytes_to_media`]).
    pub media_bytes_per_op: f64,
    /// Bytes an Optane DIMM would write to its media per operation, at 256-byte XPLine
    /// granularity through the XPBuffer model of [`pmem_ordering::XPBUFFER_XPLINES`].
    pub xpline_bytes_per_op: f64,
    /// Write amplification at XPLine granularity: [`YcsbRow::xpline_bytes_per_op`] over
    /// [`YcsbRow::media_bytes_per_op`] (`None` if nothing was sent).
    pub write_amplification: Option<f64>,
    /// The effective write ratio of Optane guide (FAST'20), Sec. 5.1, the inverse: bytes sent over bytes the
    /// media writes ([`pmem_ordering::Stats::effective_write_ratio`]; `None` if nothing was written).
    pub ewr: Option<f64>,
}

/// The YCSB section of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct YcsbResults {
    /// Records and operations.
    pub scale: Scale,
    /// The median cost of one latency sample's two `Instant` reads, in nanoseconds: included
    /// in every latency and in the runs' times.
    pub timer_ns: f64,
    /// One row per run, in run order.
    pub rows: Vec<YcsbRow>,
    /// The workloads skipped, once per variant.
    pub skipped: Vec<Skipped>,
    /// Wall time of the whole matrix, set-up and plans included.
    pub total_seconds: f64,
}

/// Why the YCSB runs failed.
#[derive(Debug, thiserror::Error)]
pub enum YcsbError {
    /// A structure could not be set up.
    #[error("cannot set up the structure: {0}")]
    Make(Box<MakeError>),
    /// A plan could not be made.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// An operation failed.
    #[error("{structure} {variant}, {workload}: {source}")]
    Target {
        /// The structure's name.
        structure: &'static str,
        /// The variant's name.
        variant: &'static str,
        /// The workload's name.
        workload: &'static str,
        /// What failed (boxed: the structures' errors are large).
        source: Box<TargetError>,
    },
    /// Operations did not return what they should have (a bug, not a measurement).
    #[error("{structure} {variant}, {workload}: {count} operations returned wrong results; the first: {first}")]
    Mismatch {
        /// The structure's name.
        structure: &'static str,
        /// The variant's name.
        variant: &'static str,
        /// The workload's name.
        workload: &'static str,
        /// How many.
        count: u64,
        /// What the first one did.
        first: String,
    },
    /// A histogram could not be made.
    #[error("cannot make a latency histogram: {0}")]
    Histogram(#[from] hdrhistogram::CreationError),
    /// A thread count of zero.
    #[error("a run needs at least one thread")]
    NoThreads,
}

impl From<MakeError> for YcsbError {
    fn from(e: MakeError) -> Self {
        // Boxed: a pool set-up error is large, and every result carries the error type.
        YcsbError::Make(Box::new(e))
    }
}
