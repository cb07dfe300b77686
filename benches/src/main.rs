//! `pmem-bench`: the project's main command.
//!
//! It compares the persistence primitives of `pmem-ordering` (see [`pmem_bench::primitives`]),
//! then undo-log transactions of `pmem-undo-log` (see [`pmem_bench::txbench`]): K words per
//! transaction, the Themis workloads of seed 004 Table II and object updates, each under the
//! fence policies, on pools in `/dev/shm` (else the temporary directory) with emulated
//! granularity, then the CCEH hash table of `pmem-structures` (see [`pmem_bench::ccehbench`]),
//! then the FAST&FAIR B+-tree under its three shift policies (see
//! [`pmem_bench::fastfairbench`]), then the datalog store (see [`pmem_bench::datalogbench`]:
//! copy-on-write against embedded writes), and prints the tables. Built with the `pmdk` feature,
//! it first measures PMDK's libpmem and libpmemobj side by side with the same operations of
//! ours (see `pmem_bench::pmdk`).

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use pmem_bench::ccehbench::{self, CcehBenchError, CcehPlan};
use pmem_bench::datalogbench::{self, DatalogBenchError, DatalogPlan};
use pmem_bench::fastfairbench::{self, FastFairBenchError, FastFairPlan};
use pmem_bench::machine::{granularity_note, Machine};
use pmem_bench::measure::{measure_group, time_side_by_side, Measurement, Plan};
use pmem_bench::poolfile::{default_pool_dir, is_tmpfs, PoolFile, SetupError};
use pmem_bench::primitives::{variants, Group, Primitive, POOL_SIZE};
use pmem_bench::report::{PmdkResults, Report, Setup, TxMeasurement};
use pmem_bench::txbench::{self, TxRunner};
use pmem_ordering::{Granularity, Isa, PoolError};
use pmem_undo_log::TxError;

/// The benchmark pool's file name inside the pool directory.
const POOL_FILE: &str = "pmem-bench.pool";
/// The prefix of the transaction variants' pool files (`{prefix}-{variant}.pool`).
const TX_POOL_PREFIX: &str = "pmem-bench";

/// Compare the persistence primitives of pmem-ordering, undo-log transactions and the CCEH hash
/// table, and print the tables.
///
/// Measures, side by side: one cache line written + flushed + fenced with each flush instruction
/// the CPU has; non-temporal writes + fence against temporal writes + flush + fence from 64 B to
/// 64 KiB; a non-temporal write followed by an ordered temporal write with and without the fence;
/// and the pool's persist against the raw instructions. Then undo-log transactions under the
/// strict, batched and ideal fence policies: K = 1..128 words per transaction, and the Themis
/// workloads (SPS, LL, Hashmap, CQ, TATP, TPCC), with fences per transaction and the share of
/// them that Themis removes; and in-place vs out-of-place object updates. Last, the CCEH hash
/// table: 1M random keys (100k with --quick) loaded into fresh tables one insert at a time and
/// with insert_batch, its speculative helper thread off and on, and with inline prefetching;
/// lookups one at a time and in batches; removals; p50/p99 latencies; fences and flushes per
/// insert; table bytes per key.
/// Then the FAST&FAIR B+-tree: 1M random keys (100k with --quick) inserted into fresh trees
/// under the per-shift, FAST and redo-logged shift policies, lookups and 100-key range scans,
/// with p50/p99 latencies and fences, flushes and bytes to the media per operation. Then the
/// datalog store: random 64 B to 4 KiB overwrites of a 64 MiB file (4 MiB with --quick)
/// under copy-on-write and under embedded writes, and 4 KiB reads after them, with the bytes sent
/// to memory per write. Per operation it reports the median time and the fences, flushes and
/// bytes counted. Built with the pmdk feature, it first compares PMDK's pmem_memcpy_persist and
/// libpmemobj transactions with the same operations of ours.
#[derive(Debug, Parser)]
#[command(name = "pmem-bench", version)]
struct Cli {
    /// Short run (a few seconds in all) for CI and smoke tests: fewer and shorter batches, so
    /// the numbers are noisier.
    #[arg(long)]
    quick: bool,

    /// Directory for the benchmark pool file (pmem-bench.pool, created fresh and removed at
    /// exit). Default: /dev/shm if it exists, else the system temporary directory.
    #[arg(long, value_name = "DIR")]
    pool_dir: Option<PathBuf>,

    /// How persistence works for the pool: `emulated` issues flush instructions and fences as
    /// on persistent memory without msync (the default; on tmpfs this is DRAM, not persistent
    /// memory); `page` ends every persist in msync; `detect` tries MAP_SYNC (persistent memory
    /// behind a DAX file system) and falls back to page.
    #[arg(long, value_enum, value_name = "KIND", default_value_t = GranularityArg::Emulated)]
    granularity: GranularityArg,

    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// Also write the results as a markdown table to FILE.
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum GranularityArg {
    /// Flushes and fences issued, no msync (not persistent unless the file is on a DAX device).
    Emulated,
    /// Every persist ends in msync.
    Page,
    /// MAP_SYNC if the file system allows it (cache-line granularity), else page.
    Detect,
}

impl GranularityArg {
    fn forced(self) -> Option<Granularity> {
        match self {
            GranularityArg::Emulated => Some(Granularity::Emulated),
            GranularityArg::Page => Some(Granularity::Page),
            GranularityArg::Detect => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error("a benchmark operation failed: {0}")]
    Pool(#[from] PoolError),
    #[error("a benchmark transaction failed: {0}")]
    Tx(#[from] TxError),
    #[error(transparent)]
    Cceh(#[from] CcehBenchError),
    #[error(transparent)]
    Datalog(#[from] DatalogBenchError),
    #[error(transparent)]
    FastFair(#[from] FastFairBenchError),
    #[error("cannot write {path}: {source}")]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot encode the results as JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[cfg(feature = "pmdk")]
    #[error(transparent)]
    Pmdk(#[from] pmem_bench::pmdk::PmdkBenchError),
}

/// The PMDK comparison. It runs before the other sections, while the process has one thread,
/// because it may set PMEM_IS_PMEM_FORCE in the environment (see `pmem_bench::pmdk`).
#[cfg(feature = "pmdk")]
fn measure_pmdk(
    dir: &Path,
    granularity: Option<Granularity>,
    plan: &Plan,
    progress: &Progress,
) -> Result<Option<PmdkResults>, RunError> {
    use pmem_bench::pmdk::{measure, PMDK_TX_WORDS};
    use pmem_bench::primitives::NT_SIZES;
    eprintln!(
        "[pmdk] PMDK side by side: {} copy sizes and {} transaction sizes, 3 sides each x {} rounds",
        NT_SIZES.len(),
        PMDK_TX_WORDS.len(),
        plan.reps
    );
    let results = measure(dir, TX_POOL_PREFIX, granularity, plan, |r, n| {
        progress.round(r, n)
    })?;
    Ok(Some(results))
}

/// Without the `pmdk` feature there is nothing to measure; the report says how to enable it.
#[cfg(not(feature = "pmdk"))]
fn measure_pmdk(
    _dir: &Path,
    _granularity: Option<Granularity>,
    _plan: &Plan,
    _progress: &Progress,
) -> Result<Option<PmdkResults>, RunError> {
    Ok(None)
}

fn create_output(path: &Path) -> Result<File, RunError> {
    File::create(path).map_err(|source| RunError::Output {
        path: path.to_path_buf(),
        source,
    })
}

fn write_output(mut file: File, path: &Path, text: &str) -> Result<(), RunError> {
    file.write_all(text.as_bytes())
        .and_then(|()| file.flush())
        .map_err(|source| RunError::Output {
            path: path.to_path_buf(),
            source,
        })
}

/// Progress on stderr: one line per group, and a round counter when stderr is a terminal.
struct Progress {
    tty: bool,
    start: Instant,
}

impl Progress {
    fn group(&self, index: usize, count: usize, name: &str, variants: usize, plan: &Plan) {
        eprintln!(
            "[{index}/{count}] {name}: {variants} variants x {} rounds",
            plan.reps
        );
    }

    fn section(&self, index: usize, count: usize, name: &str, plan: &CcehPlan) {
        eprintln!(
            "[{index}/{count}] {name}: {} keys x 4 fresh tables x {} rounds",
            plan.keys, plan.rounds
        );
    }

    fn tree_section(&self, index: usize, count: usize, name: &str, plan: &FastFairPlan) {
        eprintln!(
            "[{index}/{count}] {name}: {} keys x 3 policies x {} rounds",
            plan.keys, plan.rounds
        );
    }

    fn round(&self, round: usize, rounds: usize) {
        if self.tty {
            eprint!("\r      round {round}/{rounds}");
            if round == rounds {
                eprint!("\r\x1b[K");
            }
        }
    }

    fn done(&self) {
        eprintln!("measured in {:.1} s", self.start.elapsed().as_secs_f64());
    }
}

fn run(cli: &Cli) -> Result<(), RunError> {
    let (plan, cceh_plan, fastfair_plan, datalog_plan) = if cli.quick {
        (
            Plan::quick(),
            CcehPlan::quick(),
            FastFairPlan::quick(),
            DatalogPlan::quick(),
        )
    } else {
        (
            Plan::full(),
            CcehPlan::full(),
            FastFairPlan::full(),
            DatalogPlan::full(),
        )
    };
    // Open the outputs first, so a bad path fails before the measurements rather than after.
    let json_out = cli.json.as_deref().map(create_output).transpose()?;
    let markdown_out = cli.markdown.as_deref().map(create_output).transpose()?;

    let dir = cli.pool_dir.clone().unwrap_or_else(default_pool_dir);
    let file = PoolFile::create(&dir, POOL_FILE, POOL_SIZE, cli.granularity.forced())?;
    let isa = Isa::detected();
    let setup = Setup::new(
        Machine::detect(),
        isa.flush().name(),
        isa.copy().name(),
        &file.path().display().to_string(),
        file.granularity().name(),
        granularity_note(file.granularity(), is_tmpfs(&dir)),
        &plan,
        cli.quick,
    );

    let progress = Progress {
        tty: std::io::stderr().is_terminal(),
        start: Instant::now(),
    };
    let groups: Vec<(Group, Vec<_>)> = Group::ALL
        .into_iter()
        .map(|g| (g, variants(g)))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    let pmdk = measure_pmdk(&dir, cli.granularity.forced(), &plan, &progress)?;
    let tx_groups = txbench::groups();
    // The CCEH, FAST&FAIR and datalog sections count as one group each.
    let count = groups.len() + tx_groups.len() + 3;
    let mut measurements: Vec<Measurement> = Vec::new();
    for (i, (group, group_variants)) in groups.iter().enumerate() {
        progress.group(i + 1, count, group.name(), group_variants.len(), &plan);
        let mut prims = group_variants
            .iter()
            .map(|&v| Primitive::new(&file, v))
            .collect::<Result<Vec<_>, _>>()?;
        measurements.extend(measure_group(&mut prims, &plan, |r, n| {
            progress.round(r, n)
        })?);
    }
    let mut tx_measurements: Vec<TxMeasurement> = Vec::new();
    for (i, (name, group_variants)) in tx_groups.iter().enumerate() {
        progress.group(
            groups.len() + i + 1,
            count,
            name,
            group_variants.len(),
            &plan,
        );
        // Fresh pool files for every group, removed when the runners drop at the loop's end.
        let mut runners = group_variants
            .iter()
            .map(|&v| TxRunner::new(&dir, TX_POOL_PREFIX, v, cli.granularity.forced()))
            .collect::<Result<Vec<_>, _>>()?;
        let timings = time_side_by_side(&mut runners, &plan, |r, n| progress.round(r, n))?;
        tx_measurements.extend(
            runners
                .iter()
                .zip(timings)
                .map(|(r, timing)| TxMeasurement {
                    variant: r.variant(),
                    timing,
                }),
        );
    }
    progress.section(count - 2, count, "cceh", &cceh_plan);
    let cceh = ccehbench::measure(
        &dir,
        TX_POOL_PREFIX,
        cli.granularity.forced(),
        &cceh_plan,
        |r, n| progress.round(r, n),
    )?;
    progress.tree_section(count - 1, count, "fastfair", &fastfair_plan);
    let fastfair = fastfairbench::measure(
        &dir,
        TX_POOL_PREFIX,
        cli.granularity.forced(),
        &fastfair_plan,
        |r, n| progress.round(r, n),
    )?;
    eprintln!(
        "[{count}/{count}] datalog: {} MiB file, {} overwrites x {} sizes x 2 write paths x {} rounds",
        datalog_plan.file_bytes >> 20,
        datalog_plan.writes,
        datalogbench::WRITE_SIZES.len(),
        datalog_plan.rounds
    );
    let datalog = datalogbench::measure(
        &dir,
        TX_POOL_PREFIX,
        cli.granularity.forced(),
        &datalog_plan,
        |r, n| progress.round(r, n),
    )?;
    progress.done();

    let report = Report::new(setup, &measurements, &tx_measurements)
        .with_cceh(cceh)
        .with_fastfair(fastfair)
        .with_datalog(datalog)
        .with_pmdk(pmdk);
    println!("{}", report.header());
    println!("{}", report.method());
    println!();
    print!("{}", report.table());
    println!();
    print!("{}", report.legend());
    println!();
    println!("{}", report.tx_method());
    println!();
    print!("{}", report.tx_tables());
    print!("{}", report.cceh_table());
    println!();
    print!("{}", report.fastfair_table());
    println!();
    print!("{}", report.datalog_table());
    println!();
    print!("{}", report.pmdk_tables());
    if let (Some(out), Some(path)) = (json_out, cli.json.as_deref()) {
        write_output(out, path, &report.to_json()?)?;
    }
    if let (Some(out), Some(path)) = (markdown_out, cli.markdown.as_deref()) {
        write_output(out, path, &report.markdown())?;
    }
    // `file` is dropped here, removing the pool.
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmem-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}
