//! The allocator section: alloc/free throughput of ours against libpmemobj, the system
//! allocator and jemalloc, in one run (PERC, Sec. 4.7: the allocator study, Fig. 4.30-4.31).
//!
//! For each size of [`ALLOC_SIZES`] and each thread count of [`THREADS`], every allocator
//! ([`sides`]) runs in turn, [`AllocPlan::rounds`] times, the order rotating by round. In a
//! run every thread repeats, until [`AllocPlan::run`] has passed: allocate [`BATCH`] blocks,
//! then free them in the order they came. A run's throughput is its allocations and frees
//! together over its wall time (the threads start together at a barrier); a row gives the
//! median over the rounds, and the ratio to ours (transactions) of the same round.
//!
//! Ours runs on an anonymous pool at emulated granularity (DRAM, flushes and fences issued as
//! on persistent memory), with the run's `--page-size`; libpmemobj on a pool file in the run's
//! pool directory (tmpfs by default: libpmem is told to treat it as persistent memory, as the
//! PMDK section does, so it flushes instead of calling `msync`). The volatile allocators are
//! called through their `GlobalAlloc` interface, 16-byte aligned; neither is the process's
//! global allocator. No allocator writes its blocks here: this is the allocator's own cost.

pub mod report;
pub mod sides;

use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use pmem_ordering::pool::PageSize;
use pmem_ordering::PoolError;
use pmem_undo_log::TxError;
use serde::Serialize;

use sides::{Allocator, Block, OursRecord, OursTx};

/// The block sizes measured, in bytes.
pub const ALLOC_SIZES: [usize; 4] = [64, 256, 1024, 4096];
/// The thread counts measured.
pub const THREADS: [usize; 2] = [1, 2];
/// Blocks a thread holds at once before freeing them.
pub const BATCH: usize = 256;
/// Size of our heap's pool: room for every thread's batch of the largest size many times over.
const HEAP_BYTES: u64 = 64 << 20;
/// Size of libpmemobj's pool.
#[cfg(feature = "pmdk")]
const OBJ_POOL_BYTES: usize = 64 << 20;

/// How long the section runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocPlan {
    /// Rounds over every allocator.
    pub rounds: usize,
    /// The length of one run of one allocator.
    pub run: Duration,
}

impl AllocPlan {
    /// The default run: 3 rounds of 100 ms runs (about 15 s with 5 allocators).
    pub fn full() -> AllocPlan {
        AllocPlan {
            rounds: 3,
            run: Duration::from_millis(100),
        }
    }

    /// `--quick`: 3 rounds of 15 ms runs (about 2.5 s).
    pub fn quick() -> AllocPlan {
        AllocPlan {
            rounds: 3,
            run: Duration::from_millis(15),
        }
    }
}

/// Why the section failed.
#[derive(Debug, thiserror::Error)]
pub enum AllocBenchError {
    /// Our heap's pool.
    #[error("alloc section: our heap's pool: {0}")]
    Pool(#[from] PoolError),
    /// Our heap.
    #[error("alloc section: our heap: {0}")]
    Heap(#[from] TxError),
    /// A volatile allocator returned null.
    #[error("alloc section: {0} could not allocate {1} bytes")]
    OutOfMemory(&'static str, usize),
    /// A size no layout can have.
    #[error("alloc section: {0} bytes is not a valid allocation size")]
    BadSize(usize),
    /// A block given to an allocator that did not make it (a bug of the section).
    #[error("alloc section: {0} was given a block another allocator made")]
    ForeignBlock(&'static str),
    /// libpmemobj.
    #[cfg(feature = "pmdk")]
    #[error("alloc section: {0}")]
    Pmdk(#[from] crate::pmdk::PmdkError),
}

/// One allocator at one size and thread count.
#[derive(Clone, Debug, Serialize)]
pub struct AllocRow {
    /// The allocator.
    pub allocator: String,
    /// What its allocations cost it.
    pub durability: String,
    /// Block size in bytes.
    pub size: usize,
    /// Threads.
    pub threads: usize,
    /// Allocations and frees per second (median over the rounds).
    pub ops_per_sec: f64,
    /// This allocator's ops/s over ours (transactions) in the same round (median).
    pub over_ours: f64,
}

/// The section's results.
#[derive(Clone, Debug, Serialize)]
pub struct AllocResults {
    /// Rounds.
    pub rounds: usize,
    /// Milliseconds per run.
    pub run_ms: f64,
    /// Blocks held per thread before freeing.
    pub batch: usize,
    /// The page size of our heap's pool, and what the kernel gave it.
    pub our_pages: String,
    /// What libpmemobj's pool is, or why it was not measured.
    pub pmemobj: String,
    /// One row per allocator, size and thread count.
    pub rows: Vec<AllocRow>,
}

/// One thread's run: batches of allocations then frees until `deadline`; operations made.
fn thread_run(
    allocator: &dyn Allocator,
    size: usize,
    run: Duration,
    barrier: &Barrier,
) -> Result<u64, AllocBenchError> {
    let mut blocks: Vec<Block> = Vec::with_capacity(BATCH);
    let mut ops = 0u64;
    barrier.wait();
    let start = Instant::now();
    while start.elapsed() < run {
        for _ in 0..BATCH {
            blocks.push(allocator.alloc(size)?);
        }
        for block in blocks.drain(..) {
            allocator.free(block, size)?;
        }
        ops += 2 * BATCH as u64;
    }
    Ok(ops)
}

/// One run of `allocator` with `threads` threads: allocations and frees per second.
fn run_once(
    allocator: &dyn Allocator,
    size: usize,
    threads: usize,
    run: Duration,
) -> Result<f64, AllocBenchError> {
    let barrier = Barrier::new(threads + 1);
    let (ops, secs) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| s.spawn(|| thread_run(allocator, size, run, &barrier)))
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<Result<u64, AllocBenchError>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        let secs = start.elapsed().as_secs_f64();
        (results, secs)
    });
    let mut total = 0;
    for r in ops {
        total += r?;
    }
    Ok(total as f64 / secs)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// libpmemobj's side, or why there is none: a pool file in `dir`.
#[cfg(feature = "pmdk")]
fn pmemobj(dir: &Path, prefix: &str) -> Result<(Option<sides::PmemObj>, String), AllocBenchError> {
    crate::pmdk::check_versions()?;
    // As the PMDK section: libpmem reads this on its first pmem_is_pmem; the section's threads
    // are not started yet, and the variable is set only when the environment leaves it unset.
    let note = match std::env::var("PMEM_IS_PMEM_FORCE") {
        Ok(v) => format!("PMEM_IS_PMEM_FORCE={v} from the environment"),
        Err(_) => {
            std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
            "PMEM_IS_PMEM_FORCE=1 set by pmem-bench (flushes, no msync)".to_string()
        }
    };
    let path = dir.join(format!("{prefix}-alloc.obj"));
    let pool = crate::pmdk::ObjAllocPool::create(&path, OBJ_POOL_BYTES)?;
    Ok((
        Some(sides::PmemObj(pool)),
        format!("pool file {}, {note}", path.display()),
    ))
}

/// Without the `pmdk` feature libpmemobj is not measured.
#[cfg(not(feature = "pmdk"))]
fn pmemobj(
    _dir: &Path,
    _prefix: &str,
) -> Result<(Option<sides::Volatile<std::alloc::System>>, String), AllocBenchError> {
    Ok((
        None,
        "not measured: pmem-bench was built without the pmdk feature \
         (cargo build --release -p pmem-bench --features pmdk)"
            .to_string(),
    ))
}

/// Run the section (see the module's documentation): our pools on `page_size` pages,
/// libpmemobj's in `dir` named `{prefix}-alloc.obj`. `progress(step, steps)` after each
/// (size, threads) cell.
pub fn measure(
    plan: &AllocPlan,
    page_size: PageSize,
    dir: &Path,
    prefix: &str,
    mut progress: impl FnMut(usize, usize),
) -> Result<AllocResults, AllocBenchError> {
    let ours_tx = OursTx(sides::heap(HEAP_BYTES, page_size)?);
    // Read before the second heap is mapped: the kernel may merge two adjacent anonymous
    // mappings into one smaps entry, which would count both.
    let our_pages = match ours_tx.0.pool().pages() {
        Ok(p) => format!("asked {}, obtained {}", page_size.name(), p.describe()),
        Err(e) => format!("asked {}, not read back: {e}", page_size.name()),
    };
    let ours_record = OursRecord(sides::heap(HEAP_BYTES, page_size)?);
    let system = sides::system();
    let jemalloc = sides::jemalloc();
    let (obj, pmemobj_note) = pmemobj(dir, prefix)?;
    let mut allocators: Vec<&dyn Allocator> = vec![&ours_tx, &ours_record, &system, &jemalloc];
    if let Some(obj) = &obj {
        allocators.push(obj);
    }
    let steps = ALLOC_SIZES.len() * THREADS.len();
    let mut rows = Vec::new();
    for (cell, (size, threads)) in ALLOC_SIZES
        .into_iter()
        .flat_map(|s| THREADS.into_iter().map(move |t| (s, t)))
        .enumerate()
    {
        // rates[a][round]
        let mut rates = vec![Vec::with_capacity(plan.rounds); allocators.len()];
        for round in 0..plan.rounds {
            for i in 0..allocators.len() {
                let a = (i + round) % allocators.len();
                rates[a].push(run_once(allocators[a], size, threads, plan.run)?);
            }
        }
        for (a, allocator) in allocators.iter().enumerate() {
            let over_ours: Vec<f64> = rates[a].iter().zip(&rates[0]).map(|(x, o)| x / o).collect();
            rows.push(AllocRow {
                allocator: allocator.name().to_string(),
                durability: allocator.durability().to_string(),
                size,
                threads,
                ops_per_sec: median(rates[a].clone()),
                over_ours: median(over_ours),
            });
        }
        progress(cell + 1, steps);
    }
    Ok(AllocResults {
        rounds: plan.rounds,
        run_ms: plan.run.as_secs_f64() * 1e3,
        batch: BATCH,
        our_pages,
        pmemobj: pmemobj_note,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_allocator_gives_distinct_blocks_and_takes_them_back() {
        let ours_tx = OursTx(sides::heap(16 << 20, PageSize::Base4K).unwrap());
        let ours_record = OursRecord(sides::heap(16 << 20, PageSize::Base4K).unwrap());
        let allocators: [&dyn Allocator; 4] =
            [&ours_tx, &ours_record, &sides::system(), &sides::jemalloc()];
        for allocator in allocators {
            for size in ALLOC_SIZES {
                let blocks: Vec<Block> = (0..8).map(|_| allocator.alloc(size).unwrap()).collect();
                let mut starts: Vec<u64> = blocks
                    .iter()
                    .map(|b| match b {
                        Block::Offset(o) => *o,
                        Block::Record(r) => r.offset,
                        Block::Address(p) => p.as_ptr() as u64,
                        #[cfg(feature = "pmdk")]
                        Block::Obj(_) => unreachable!("no libpmemobj side here"),
                    })
                    .collect();
                starts.sort_unstable();
                assert!(
                    starts.windows(2).all(|w| w[1] - w[0] >= size as u64),
                    "{} handed out overlapping {size}-byte blocks: {starts:?}",
                    allocator.name()
                );
                for block in blocks {
                    allocator.free(block, size).unwrap();
                }
            }
        }
        // Everything given back: our heaps hold no block of the run.
        assert_eq!(ours_tx.0.alloc_stats().bytes_allocated, 0);
    }

    #[test]
    fn a_block_of_another_allocator_is_refused() {
        let system = sides::system();
        let ours = OursTx(sides::heap(16 << 20, PageSize::Base4K).unwrap());
        let block = system.alloc(64).unwrap();
        let Block::Address(p) = block else {
            panic!("the system allocator gives addresses")
        };
        let err = ours.free(Block::Address(p), 64).unwrap_err();
        assert!(matches!(err, AllocBenchError::ForeignBlock(_)), "{err}");
        system.free(Block::Address(p), 64).unwrap();
    }

    #[test]
    fn a_short_run_measures_every_cell() {
        let plan = AllocPlan {
            rounds: 1,
            run: Duration::from_millis(1),
        };
        let dir = crate::poolfile::default_pool_dir();
        let prefix = format!("pmem-bench-alloc-unit-{}", std::process::id());
        let results = measure(&plan, PageSize::Base4K, &dir, &prefix, |_, _| {}).unwrap();
        let allocators = if cfg!(feature = "pmdk") { 5 } else { 4 };
        assert_eq!(
            results.rows.len(),
            ALLOC_SIZES.len() * THREADS.len() * allocators
        );
        assert!(results.rows.iter().all(|r| r.ops_per_sec > 0.0));
        assert!(results
            .rows
            .iter()
            .filter(|r| r.allocator == "ours (transaction)")
            .all(|r| r.over_ours == 1.0));
    }
}
