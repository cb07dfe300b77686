//! The datalog measurements of `pmem-bench` and of the `datalog` criterion bench: random
//! overwrites under copy-on-write and under embedded writes (Optane guide (FAST'20), Sec. 5.1.2, Fig. 11), and
//! reads of the overwritten file (the read path's cost of merging embedded bytes).
//!
//! Every measurement runs on a fresh store: its own heap ([`HeapConfig::default`](pmem_undo_log::HeapConfig::default), batched
//! fences) in its own pool file in the run's pool directory ([`DatalogHeap`]), holding one
//! file of [`DatalogPlan::file_bytes`] (64 MiB, 4 MiB with `--quick`) written in 1 MiB
//! copy-on-write pieces before anything is timed ([`prepare`]); the pool file's pages are
//! touched before the heap is made, so no timed write pays for a first-touch page fault. Then,
//! timed:
//!
//! * [`DatalogPlan::writes`] overwrites of `size` bytes (64 B, 256 B, 1 KiB, 4 KiB) at
//!   uniformly random offsets aligned to `size` ([`random_offsets`]), all with one write mode,
//!   every [`LATENCY_EVERY`]th call timed on its own with [`Instant`](std::time::Instant);
//! * after the 64-byte overwrites, [`DatalogPlan::reads`] reads of a random 4 KiB page.
//!
//! The two modes of one size run back to back in each round (their order reversed on odd
//! rounds); a row's throughput is the median over the rounds. Per write, from [`thread_stats`](pmem_ordering::thread_stats)
//! deltas over the phase: fences, cache lines flushed, bytes stored (temporal + non-temporal:
//! what the CPU wrote) and bytes sent to memory (flushed lines + non-temporal bytes: what
//! reached the persistence domain, the write amplification of Optane guide (FAST'20), Sec. 5.1 up to the
//! DIMM's own).

use std::path::Path;

use pmem_ordering::{Granularity, Hardware};
use pmem_structures::raw::datalog::{
    Datalog, DatalogConfig, DatalogError, FileId, Policy, WriteMode, PAGE,
};
use pmem_undo_log::{FencePolicy, Heap};
use serde::Serialize;

use crate::keys::random_offsets;
use crate::phase::{percentile, sampled_call, timer_overhead_ns, Phase};
use crate::poolfile::{HeapFile, SetupError};

/// The file size of a default run (the 64 MB file of NOVA-datalog's random-overwrite test).
pub const FILE_BYTES: u64 = 64 << 20;
/// The file size of a `--quick` run.
pub const FILE_BYTES_QUICK: u64 = 4 << 20;
/// Write sizes compared.
pub const WRITE_SIZES: [u64; 4] = [64, 256, 1024, 4096];
/// The two write paths compared.
pub const MODES: [WriteMode; 2] = [WriteMode::CopyOnWrite, WriteMode::Embedded];
/// Every how many operations one is timed on its own, for the latency percentiles.
pub const LATENCY_EVERY: usize = 16;
/// Bytes of one read.
pub const READ_BYTES: u64 = PAGE;
/// The heaps' fence policy.
pub const DATALOG_POLICY: FencePolicy = FencePolicy::Batched;
/// The file's name in the store.
const FILE_NAME: &str = "data";

/// The paper's numbers, quoted: not measured by this run.
pub const REFERENCE: &str =
    "Optane guide (FAST'20), Sec. 5.1.2, Fig. 11 (NOVA on Optane DC persistent \
memory): NOVA-datalog's embedded writes have 7x lower latency than NOVA's copy-on-write for \
64-byte random overwrites and 6.5x lower for 256-byte ones";

/// The store type measured: on the hardware backend, its heap holding its pool in an `Arc`.
pub type Store = Datalog<Hardware>;

/// Size of the pool file for a file of `file_bytes`: room for the file, as much again for
/// copy-on-write churn (a block of 64 pages is freed only when all of them are dead) and for
/// the logs; a power of two, at least 64 MiB. The file is sparse.
pub fn pool_size(file_bytes: u64) -> u64 {
    (file_bytes.saturating_mul(4))
        .next_power_of_two()
        .max(64 << 20)
}

/// A fresh heap in its own pool file: the file is removed when this is dropped.
#[derive(Debug)]
pub struct DatalogHeap(HeapFile);

impl DatalogHeap {
    /// Create the pool file `file_name` in `dir` (a stale one is replaced), sized for a file
    /// of `file_bytes` ([`pool_size`]), with `granularity` forced (`None`: detected), and
    /// format a heap in it (see [`HeapFile::create`]: its pages are written once first, which
    /// matters most here, as copy-on-write allocates a fresh page per write).
    pub fn create(
        dir: &Path,
        file_name: &str,
        file_bytes: u64,
        granularity: Option<Granularity>,
    ) -> Result<DatalogHeap, SetupError> {
        DatalogHeap::create_sized(dir, file_name, pool_size(file_bytes), granularity)
    }

    /// [`DatalogHeap::create`] with a pool file of `pool_bytes`.
    pub fn create_sized(
        dir: &Path,
        file_name: &str,
        pool_bytes: u64,
        granularity: Option<Granularity>,
    ) -> Result<DatalogHeap, SetupError> {
        HeapFile::create(dir, file_name, pool_bytes, granularity, DATALOG_POLICY).map(DatalogHeap)
    }

    /// The heap.
    pub fn heap(&self) -> &Heap {
        self.0.heap()
    }

    /// An empty store with its root in the pool's root object, writing with `mode`.
    pub fn store(&self, mode: WriteMode) -> Result<Store, DatalogError> {
        Datalog::create(
            self.heap(),
            self.heap().pool().root_offset(),
            DatalogConfig {
                max_files: 4,
                policy: Policy::with_mode(mode),
            },
        )
    }
}

/// Create the measured file and fill it with `file_bytes` of data, in 1 MiB copy-on-write
/// writes.
pub fn prepare(store: &Store, file_bytes: u64) -> Result<FileId, DatalogError> {
    let id = store.create_file(FILE_NAME)?;
    let piece: Vec<u8> = (0..1u64 << 20).map(|i| (i * 13 % 251) as u8).collect();
    let mut at = 0;
    while at < file_bytes {
        let len = (file_bytes - at).min(piece.len() as u64) as usize;
        store.write_at_with(id, at, &piece[..len], WriteMode::CopyOnWrite)?;
        at += len as u64;
    }
    Ok(id)
}

/// The bytes every write of `size` bytes writes.
pub fn payload(size: u64) -> Vec<u8> {
    (0..size).map(|i| (i * 7 + 3) as u8).collect()
}

/// Overwrite `data.len()` bytes at each offset with `mode`; every [`LATENCY_EVERY`]th call
/// is timed on its own into `latencies` when given.
pub fn overwrite_all(
    store: &Store,
    id: FileId,
    offsets: &[u64],
    data: &[u8],
    mode: WriteMode,
    mut latencies: Option<&mut Vec<f64>>,
) -> Result<(), DatalogError> {
    for (i, &at) in offsets.iter().enumerate() {
        sampled_call(i, LATENCY_EVERY, latencies.as_deref_mut(), || {
            store.write_at_with(id, at, data, mode)
        })?;
    }
    Ok(())
}

/// Read [`READ_BYTES`] at each offset into `buf`; the sum of the bytes read (every read must
/// be whole). Every [`LATENCY_EVERY`]th call is timed into `latencies` when given.
pub fn read_all(
    store: &Store,
    id: FileId,
    offsets: &[u64],
    buf: &mut [u8],
    mut latencies: Option<&mut Vec<f64>>,
) -> Result<u64, DatalogError> {
    let mut total = 0u64;
    for (i, &at) in offsets.iter().enumerate() {
        let n = sampled_call(i, LATENCY_EVERY, latencies.as_deref_mut(), || {
            store.read_at(id, at, &mut *buf)
        })?;
        total += n as u64;
    }
    Ok(total)
}

/// How much `pmem-bench` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatalogPlan {
    /// Size of the file overwritten.
    pub file_bytes: u64,
    /// Overwrites timed per size, mode and round.
    pub writes: usize,
    /// Reads timed per mode and round.
    pub reads: usize,
    /// Rounds.
    pub rounds: usize,
}

impl DatalogPlan {
    /// The default run: a 64 MiB file, 40,000 overwrites and 20,000 reads per phase, 3 rounds.
    pub fn full() -> DatalogPlan {
        DatalogPlan {
            file_bytes: FILE_BYTES,
            writes: 40_000,
            reads: 20_000,
            rounds: 3,
        }
    }

    /// The `--quick` run: a 4 MiB file, 2,000 overwrites and 2,000 reads, 1 round.
    pub fn quick() -> DatalogPlan {
        DatalogPlan {
            file_bytes: FILE_BYTES_QUICK,
            writes: 2_000,
            reads: 2_000,
            rounds: 1,
        }
    }
}

/// One measured phase.
#[derive(Clone, Debug, Serialize)]
pub struct DatalogRow {
    /// `write` or `read`.
    pub operation: String,
    /// The write path (for reads: the path of the overwrites before them).
    pub mode: String,
    /// Bytes per call.
    pub size: u64,
    /// Calls per second: the median over the rounds.
    pub ops_per_sec: f64,
    /// Nanoseconds per call at that rate.
    pub ns_per_op: f64,
    /// Median latency of one call, in nanoseconds.
    pub p50_ns: f64,
    /// 99th percentile latency of one call, in nanoseconds.
    pub p99_ns: f64,
    /// Fences per call.
    pub fences_per_op: f64,
    /// Cache lines flushed per call.
    pub flushes_per_op: f64,
    /// Bytes stored per call (temporal + non-temporal).
    pub bytes_stored_per_op: f64,
    /// Bytes sent to memory per call (flushed lines + non-temporal bytes).
    pub bytes_to_media_per_op: f64,
    /// Bytes sent to memory over bytes the caller wrote (writes only).
    pub write_amplification: Option<f64>,
    /// Calls per second of each round.
    pub samples_ops_per_sec: Vec<f64>,
}

/// Copy-on-write against embedded writes of one size.
#[derive(Clone, Debug, Serialize)]
pub struct DatalogRatio {
    /// Bytes per write.
    pub size: u64,
    /// Copy-on-write ns/op over embedded ns/op (above 1: embedded is faster).
    pub throughput_ratio: f64,
    /// Copy-on-write p50 over embedded p50.
    pub p50_ratio: f64,
    /// Copy-on-write bytes to media over embedded bytes to media.
    pub bytes_ratio: f64,
}

/// The datalog section of a run.
#[derive(Clone, Debug, Serialize)]
pub struct DatalogResults {
    /// Size of the file overwritten.
    pub file_bytes: u64,
    /// Overwrites per phase.
    pub writes: usize,
    /// Reads per phase.
    pub reads: usize,
    /// Rounds.
    pub rounds: usize,
    /// Size of each store's pool file.
    pub pool_bytes: u64,
    /// Every how many calls one was timed on its own.
    pub latency_every: usize,
    /// The median time of timing nothing, in nanoseconds.
    pub timer_ns: f64,
    /// Writes of every size and mode, then the reads.
    pub rows: Vec<DatalogRow>,
    /// Copy-on-write over embedded, per size.
    pub ratios: Vec<DatalogRatio>,
    /// The paper's numbers, quoted, not measured by this run.
    pub reference: String,
}

/// Why the datalog measurements failed.
#[derive(Debug, thiserror::Error)]
pub enum DatalogBenchError {
    /// A pool or heap could not be set up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// A store operation failed.
    #[error("a datalog operation failed: {0}")]
    Store(#[from] DatalogError),
    /// A read came back short (a bug, not a measurement).
    #[error("datalog reads returned {got} of {expected} bytes")]
    ShortRead {
        /// Bytes expected.
        expected: u64,
        /// Bytes read.
        got: u64,
    },
}

/// A datalog row from the phase of `n`-operation runs of `size`-byte `operation`s under
/// `mode` (`write`: amplification computed over `size`).
fn row(phase: &Phase, operation: &str, mode: WriteMode, size: u64, write: bool) -> DatalogRow {
    let rate = crate::measure::median(&phase.rates);
    let media = phase.per_op(phase.stats.bytes_to_media());
    DatalogRow {
        operation: operation.to_string(),
        mode: mode.name().to_string(),
        size,
        ops_per_sec: rate,
        ns_per_op: 1e9 / rate,
        p50_ns: percentile(&phase.latencies, 0.5),
        p99_ns: percentile(&phase.latencies, 0.99),
        fences_per_op: phase.per_op(phase.stats.fences),
        flushes_per_op: phase.per_op(phase.stats.flushes),
        bytes_stored_per_op: phase.per_op(phase.stats.store_bytes + phase.stats.nt_bytes),
        bytes_to_media_per_op: media,
        write_amplification: write.then(|| media / size as f64),
        samples_ops_per_sec: phase.rates.clone(),
    }
}
/// Run the datalog measurements of `pmem-bench` (see the module's documentation) on pool
/// files named `{prefix}-datalog.pool` in `dir`, with `granularity` forced (`None`: detected).
/// `progress(round, rounds)` is called after each round.
pub fn measure(
    dir: &Path,
    prefix: &str,
    granularity: Option<Granularity>,
    plan: &DatalogPlan,
    mut progress: impl FnMut(usize, usize),
) -> Result<DatalogResults, DatalogBenchError> {
    let file_name = format!("{prefix}-datalog.pool");
    let timer_ns = timer_overhead_ns();
    let mut writes: Vec<Vec<Phase>> = vec![vec![Phase::default(); MODES.len()]; WRITE_SIZES.len()];
    let mut reads: Vec<Phase> = vec![Phase::default(); MODES.len()];
    let read_offsets = random_offsets(plan.reads, plan.file_bytes, READ_BYTES, 0x2EAD);
    let mut buf = vec![0u8; READ_BYTES as usize];
    for round in 0..plan.rounds {
        for (s, &size) in WRITE_SIZES.iter().enumerate() {
            let offsets = random_offsets(plan.writes, plan.file_bytes, size, 0xDA7A + round as u64);
            let data = payload(size);
            let mut order: Vec<usize> = (0..MODES.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for m in order {
                let mode = MODES[m];
                let fresh = DatalogHeap::create(dir, &file_name, plan.file_bytes, granularity)?;
                let store = fresh.store(mode)?;
                let id = prepare(&store, plan.file_bytes)?;
                writes[s][m].time(plan.writes as u64, |lat| {
                    overwrite_all(&store, id, &offsets, &data, mode, Some(lat))
                })?;
                if size == WRITE_SIZES[0] {
                    let got = reads[m].time(plan.reads as u64, |lat| {
                        read_all(&store, id, &read_offsets, &mut buf, Some(lat))
                    })?;
                    let expected = plan.reads as u64 * READ_BYTES;
                    if got != expected {
                        return Err(DatalogBenchError::ShortRead { expected, got });
                    }
                }
            }
        }
        progress(round + 1, plan.rounds);
    }
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for (s, &size) in WRITE_SIZES.iter().enumerate() {
        let pair: Vec<DatalogRow> = MODES
            .iter()
            .enumerate()
            .map(|(m, &mode)| row(&writes[s][m], "write", mode, size, true))
            .collect();
        ratios.push(DatalogRatio {
            size,
            throughput_ratio: pair[0].ns_per_op / pair[1].ns_per_op,
            p50_ratio: pair[0].p50_ns / pair[1].p50_ns,
            bytes_ratio: pair[0].bytes_to_media_per_op / pair[1].bytes_to_media_per_op,
        });
        rows.extend(pair);
    }
    for (m, &mode) in MODES.iter().enumerate() {
        rows.push(row(&reads[m], "read", mode, READ_BYTES, false));
    }
    Ok(DatalogResults {
        file_bytes: plan.file_bytes,
        writes: plan.writes,
        reads: plan.reads,
        rounds: plan.rounds,
        pool_bytes: pool_size(plan.file_bytes),
        latency_every: LATENCY_EVERY,
        timer_ns,
        rows,
        ratios,
        reference: REFERENCE.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_sizes_leave_room_for_churn() {
        assert_eq!(pool_size(64 << 20), 256 << 20);
        assert_eq!(pool_size(1 << 20), 64 << 20);
    }

    #[test]
    fn a_quick_run_measures_every_row_on_a_small_file() {
        let dir = tempfile::tempdir().unwrap();
        let plan = DatalogPlan {
            file_bytes: 1 << 20,
            writes: 200,
            reads: 100,
            rounds: 1,
        };
        let r = measure(
            dir.path(),
            "t",
            Some(Granularity::Emulated),
            &plan,
            |_, _| {},
        )
        .unwrap();
        assert_eq!(r.rows.len(), WRITE_SIZES.len() * 2 + 2);
        assert_eq!(r.ratios.len(), WRITE_SIZES.len());
        for row in &r.rows {
            assert!(row.ops_per_sec > 0.0 && row.fences_per_op >= 0.0, "{row:?}");
        }
        // A 64-byte copy-on-write write streams a whole page; an embedded one does not.
        let cow64 = &r.rows[0];
        let emb64 = &r.rows[1];
        assert!(cow64.bytes_to_media_per_op >= 4096.0, "{cow64:?}");
        assert!(emb64.bytes_to_media_per_op < 1024.0, "{emb64:?}");
    }
}
