//! `pmem-bench`: the project's main command.
//!
//! It compares the persistence primitives of `pmem-ordering` (see [`pmem_bench::primitives`]),
//! then undo-log transactions of `pmem-undo-log` (see [`pmem_bench::txbench`]): K words per
//! transaction, the Themis workloads (Themis, Table II) and object updates, each under the
//! fence policies; then each structure of `pmem-structures` on its own benchmark (CCEH,
//! FAST&FAIR, datalog: [`pmem_bench::ccehbench`], [`pmem_bench::fastfairbench`],
//! [`pmem_bench::datalogbench`]); then byte keys through the store's typed maps beside the
//! `u64` path ([`pmem_bench::bytekeys`]); then YCSB-style workloads over every structure and variant
//! ([`pmem_bench::ycsb`]); and prints the tables, with charts on request
//! ([`pmem_bench::plot`]). Pools live in `/dev/shm` (else the temporary directory) with
//! emulated granularity. Built with the `pmdk` feature, it first measures PMDK's libpmem and
//! libpmemobj side by side with the same operations of ours (see `pmem_bench::pmdk`). The
//! options choose sections, structures, variants, workloads and sizes (`--help`).

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use pmem_bench::allocbench::AllocBenchError;
use pmem_bench::bytekeys::{self, ByteKeyError, MapKind};
use pmem_bench::ccehbench::{self, CcehBenchError, CcehPlan};
use pmem_bench::cluster::ClusterBenchError;
use pmem_bench::datalogbench::{self, DatalogBenchError, DatalogPlan};
use pmem_bench::fastfairbench::{self, FastFairBenchError, FastFairPlan};
use pmem_bench::machine::{granularity_note, Machine};
use pmem_bench::measure::{measure_group, time_side_by_side, Measurement, Plan};
use pmem_bench::pagesize::PageBenchError;
use pmem_bench::plot::{
    byte_key_chart, crossover_chart, crossover_points, throughput_chart, PlotError,
};
use pmem_bench::poolfile::{default_pool_dir, is_tmpfs, PoolFile, SetupError};
use pmem_bench::primitives::{variants, Group, Primitive, POOL_SIZE};
use pmem_bench::report::{PmdkResults, Report, Setup, TxMeasurement, PMDK_HINT};
use pmem_bench::service::ServiceError;
use pmem_bench::storebench::{self, StoreBenchError, StorePlan};
use pmem_bench::txbench::{self, TxRunner};
use pmem_bench::ycsb::{
    bar_callback, progress_bar, run_matrix, Setup as YcsbSetup, Structure, YcsbError,
};
use pmem_ordering::{Granularity, Isa, PoolError};
use pmem_undo_log::TxError;

mod cli;
mod standalone;

use cli::{Cli, SectionArg, Selection};
use standalone::StandalonePlan;

/// The benchmark pool's file name inside the pool directory.
const POOL_FILE: &str = "pmem-bench.pool";
/// The prefix of the transaction variants' pool files (`{prefix}-{variant}.pool`).
const TX_POOL_PREFIX: &str = "pmem-bench";

#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error("a benchmark operation failed: {0}")]
    Pool(#[from] PoolError),
    #[error("a benchmark transaction failed: {0}")]
    Tx(#[from] TxError),
    #[error(transparent)]
    ThemisThreads(#[from] txbench::threads::ThreadBenchError),
    #[error(transparent)]
    Cceh(#[from] CcehBenchError),
    #[error(transparent)]
    Datalog(#[from] DatalogBenchError),
    #[error(transparent)]
    FastFair(#[from] FastFairBenchError),
    #[error(transparent)]
    Store(#[from] StoreBenchError),
    #[error(transparent)]
    ByteKeys(#[from] ByteKeyError),
    #[error(transparent)]
    PageSize(#[from] PageBenchError),
    #[error(transparent)]
    Alloc(#[from] AllocBenchError),
    #[error(transparent)]
    Service(#[from] ServiceError),
    #[error(transparent)]
    Cluster(#[from] ClusterBenchError),
    #[error("cannot write {path}: {source}")]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot encode the results as JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Ycsb(#[from] YcsbError),
    #[error("cannot draw the charts: {0}")]
    Plot(#[from] PlotError),
    #[error("{0}")]
    Usage(String),
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
    progress.line(&format!(
        "pmdk: PMDK side by side: {} copy sizes and {} transaction sizes, 3 sides each x {} rounds",
        NT_SIZES.len(),
        PMDK_TX_WORDS.len(),
        plan.reps
    ));
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

/// Progress on stderr: one numbered line per step with the time so far, and a round counter
/// when stderr is a terminal.
struct Progress {
    tty: bool,
    start: Instant,
    step: usize,
    count: usize,
}

impl Progress {
    fn next(&mut self) {
        self.step += 1;
    }

    fn line(&self, what: &str) {
        eprintln!(
            "[{}/{}] {:6.1} s  {what}",
            self.step,
            self.count,
            self.start.elapsed().as_secs_f64()
        );
    }

    fn group(&self, name: &str, variants: usize, plan: &Plan) {
        self.line(&format!(
            "{name}: {variants} variants x {} rounds",
            plan.reps
        ));
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
    let selection = Selection::from_cli(cli).map_err(RunError::Usage)?;
    let (plan, mut cceh_plan, mut fastfair_plan, datalog_plan, store_plan) = if cli.quick {
        (
            Plan::quick(),
            CcehPlan::quick(),
            FastFairPlan::quick(),
            DatalogPlan::quick(),
            StorePlan::quick(),
        )
    } else {
        (
            Plan::full(),
            CcehPlan::full(),
            FastFairPlan::full(),
            DatalogPlan::full(),
            StorePlan::full(),
        )
    };
    let byte_key_plan = &selection.byte_keys;
    if let Some(keys) = cli.keys {
        cceh_plan = cceh_plan.with_keys(keys);
        fastfair_plan = fastfair_plan.with_keys(keys);
    }
    // Open the outputs first, so a bad path fails before the measurements rather than after.
    let json_out = cli.json.as_deref().map(create_output).transpose()?;
    let markdown_out = cli.markdown.as_deref().map(create_output).transpose()?;
    if let Some(dir) = &cli.plot {
        std::fs::create_dir_all(dir).map_err(|source| RunError::Output {
            path: dir.clone(),
            source,
        })?;
    }

    let dir = cli.pool_dir.clone().unwrap_or_else(default_pool_dir);
    let granularity = cli.granularity.forced();
    let file = PoolFile::create(&dir, POOL_FILE, POOL_SIZE, granularity)?;
    let isa = Isa::detected();
    let setup = Setup::new(
        Machine::detect(),
        isa.flush().name(),
        // Pools stream whole words with 8-byte movnti (`isa::nt_store_words`), whatever
        // the widest streaming store the CPU has.
        "movnti",
        &file.path().display().to_string(),
        file.granularity().name(),
        granularity_note(file.granularity(), is_tmpfs(&dir)),
        &plan,
        cli.quick,
    );

    let groups: Vec<(Group, Vec<_>)> = if selection.runs(SectionArg::Primitives) {
        Group::ALL
            .into_iter()
            .map(|g| (g, variants(g)))
            .filter(|(_, v)| !v.is_empty())
            .collect()
    } else {
        Vec::new()
    };
    let tx_groups = if selection.runs(SectionArg::Transactions) {
        txbench::groups()
    } else {
        Vec::new()
    };
    // The store path is paired with the raw path of the maps measured (CCEH, FAST&FAIR).
    let store_structures: Vec<Structure> = [Structure::Cceh, Structure::FastFair]
        .into_iter()
        .filter(|&s| selection.measures(s))
        .collect();
    let structure_steps = Structure::ALL
        .into_iter()
        .filter(|&s| selection.measures(s))
        .count()
        + usize::from(!store_structures.is_empty());
    let standalone_plan = StandalonePlan::new(cli, &selection);
    let count = usize::from(selection.runs(SectionArg::Pmdk))
        + groups.len()
        + tx_groups.len()
        + usize::from(selection.runs(SectionArg::Transactions))
        + structure_steps
        + usize::from(selection.runs(SectionArg::ByteKeys))
        + usize::from(selection.runs(SectionArg::Ycsb))
        + standalone_plan.steps();
    let mut progress = Progress {
        tty: std::io::stderr().is_terminal(),
        start: Instant::now(),
        step: 0,
        count,
    };
    let pmdk = if selection.runs(SectionArg::Pmdk) {
        progress.next();
        measure_pmdk(&dir, granularity, &plan, &progress)?
    } else {
        None
    };
    let mut measurements: Vec<Measurement> = Vec::new();
    for (group, group_variants) in &groups {
        progress.next();
        progress.group(group.name(), group_variants.len(), &plan);
        let mut prims = group_variants
            .iter()
            .map(|&v| Primitive::new(&file, v))
            .collect::<Result<Vec<_>, _>>()?;
        measurements.extend(measure_group(&mut prims, &plan, |r, n| {
            progress.round(r, n)
        })?);
    }
    let mut tx_measurements: Vec<TxMeasurement> = Vec::new();
    for (name, group_variants) in &tx_groups {
        progress.next();
        progress.group(name, group_variants.len(), &plan);
        // Fresh pool files for every group, removed when the runners drop at the loop's end.
        let mut runners = group_variants
            .iter()
            .map(|&v| TxRunner::new(&dir, TX_POOL_PREFIX, v, granularity))
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
    let mut report = Report::new(setup, &measurements, &tx_measurements);
    report.pmdk = pmdk;
    if selection.runs(SectionArg::Transactions) {
        progress.next();
        progress.line("themis workloads with 1 and 2 threads: 9 workloads x 2 policies");
        report.themis_threads = Some(txbench::threads::measure(
            &dir,
            TX_POOL_PREFIX,
            granularity,
            &plan,
            |r, n| progress.round(r, n),
        )?);
    }
    if selection.measures(Structure::Cceh) {
        progress.next();
        progress.line(&format!(
            "cceh: {} keys x 4 fresh tables x {} rounds",
            cceh_plan.keys, cceh_plan.rounds
        ));
        report.cceh = Some(ccehbench::measure(
            &dir,
            TX_POOL_PREFIX,
            granularity,
            &cceh_plan,
            |r, n| progress.round(r, n),
        )?);
    }
    if selection.measures(Structure::FastFair) {
        progress.next();
        progress.line(&format!(
            "fastfair: {} keys x 3 policies x {} rounds",
            fastfair_plan.keys, fastfair_plan.rounds
        ));
        report.fastfair = Some(fastfairbench::measure(
            &dir,
            TX_POOL_PREFIX,
            granularity,
            &fastfair_plan,
            |r, n| progress.round(r, n),
        )?);
    }
    if selection.measures(Structure::Datalog) {
        progress.next();
        progress.line(&format!(
            "datalog: {} MiB file, {} overwrites x {} sizes x 2 write paths x {} rounds",
            datalog_plan.file_bytes >> 20,
            datalog_plan.writes,
            datalogbench::WRITE_SIZES.len(),
            datalog_plan.rounds
        ));
        report.datalog = Some(datalogbench::measure(
            &dir,
            TX_POOL_PREFIX,
            granularity,
            &datalog_plan,
            |r, n| progress.round(r, n),
        )?);
    }
    if !store_structures.is_empty() {
        progress.next();
        progress.line(&format!(
            "store path vs raw: {} x (single calls + YCSB), each raw and through the store, x {} repetitions",
            store_structures
                .iter()
                .map(|s| s.name())
                .collect::<Vec<_>>()
                .join(", "),
            store_plan.repetitions
        ));
        report.store_path = Some(storebench::measure(
            &dir,
            TX_POOL_PREFIX,
            granularity,
            &store_plan,
            &store_structures,
            |r, n| progress.round(r, n),
        )?);
    }
    if selection.runs(SectionArg::ByteKeys) {
        progress.next();
        progress.line(&format!(
            "byte keys: {} maps x {} records (A, B, C {} ops, E {} scans), one thread",
            byte_key_plan.maps.len(),
            byte_key_plan.records,
            byte_key_plan.ops,
            byte_key_plan.scans
        ));
        report.byte_keys = Some(bytekeys::measure(
            &dir,
            TX_POOL_PREFIX,
            granularity,
            byte_key_plan,
            |r, n| progress.round(r, n),
        )?);
    }
    if selection.runs(SectionArg::Ycsb) {
        progress.next();
        let m = &selection.matrix;
        progress.line(&format!(
            "ycsb: {} variants x {} thread counts, {} records, {} ops per run, {} runs",
            m.variants.len(),
            m.threads.len(),
            m.scale.records,
            m.scale.ops,
            m.total_runs()
        ));
        let ycsb_setup = YcsbSetup {
            dir: dir.clone(),
            prefix: TX_POOL_PREFIX.to_string(),
            granularity,
        };
        let bar = progress_bar(m.total_runs());
        let results = run_matrix(m, &ycsb_setup, &bar_callback(&bar))?;
        bar.finish_and_clear();
        report.ycsb = Some(results);
    }
    let standalone = standalone_plan.measure(cli, &dir, &mut progress)?;
    progress.done();

    print!("{}", report.text());
    print!("{}", standalone.text());
    if report.pmdk.is_none() && cli.section.is_empty() {
        // A default run built without the feature says where the PMDK comparison would be.
        println!("{PMDK_HINT}");
    }
    if let Some(plot_dir) = &cli.plot {
        for path in plot(plot_dir, &report, &measurements)? {
            eprintln!("wrote {}", path.display());
        }
    }
    if let (Some(out), Some(path)) = (json_out, cli.json.as_deref()) {
        let mut json: serde_json::Value = serde_json::from_str(&report.to_json()?)?;
        standalone.add_to_json(&mut json)?;
        write_output(out, path, &serde_json::to_string_pretty(&json)?)?;
    }
    if let (Some(out), Some(path)) = (markdown_out, cli.markdown.as_deref()) {
        write_output(out, path, &(report.markdown() + &standalone.markdown()))?;
    }
    // `file` is dropped here, removing the pool.
    Ok(())
}

/// Write the charts of `--plot` into `dir`: one YCSB throughput chart per structure measured,
/// one byte-key chart per map kind, and the crossover chart when the primitives ran. Returns
/// the files written.
fn plot(
    dir: &Path,
    report: &Report,
    measurements: &[Measurement],
) -> Result<Vec<PathBuf>, RunError> {
    let mut written = Vec::new();
    if let Some(ycsb) = &report.ycsb {
        for structure in Structure::ALL {
            if !ycsb.rows.iter().any(|r| r.structure == structure.name()) {
                continue;
            }
            let slug: String = structure
                .name()
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .collect::<String>()
                .to_lowercase();
            let path = dir.join(format!("ycsb-{slug}.png"));
            throughput_chart(&path, structure.name(), &ycsb.rows)?;
            written.push(path);
        }
    }
    if let Some(byte_keys) = &report.byte_keys {
        for (map, slug) in [
            (MapKind::Hash, "bytekeys-hash"),
            (MapKind::Ordered, "bytekeys-ordered"),
        ] {
            if !byte_keys.rows.iter().any(|r| r.map == map.name()) {
                continue;
            }
            let path = dir.join(format!("{slug}.png"));
            byte_key_chart(&path, map.name(), &byte_keys.rows)?;
            written.push(path);
        }
    }
    let points = crossover_points(measurements);
    if !points.is_empty() {
        let path = dir.join("crossover.png");
        crossover_chart(&path, &points)?;
        written.push(path);
    }
    Ok(written)
}

fn main() -> ExitCode {
    // The cluster section starts its nodes as processes of this binary.
    if let Some(code) = pmem_bench::cluster::nodes::serve_if_asked() {
        return code;
    }
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmem-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}
