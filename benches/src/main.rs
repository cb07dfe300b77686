//! `pmem-bench`: the project's main command.
//!
//! For now it compares the persistence primitives of `pmem-ordering` (see
//! [`pmem_bench::primitives`]) on a pool in `/dev/shm` (else the temporary directory) with
//! emulated granularity, and prints one table. The structures join the comparison as they land.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use pmem_bench::machine::{granularity_note, Machine};
use pmem_bench::measure::{measure_group, Measurement, Plan};
use pmem_bench::poolfile::{default_pool_dir, is_tmpfs, PoolFile, SetupError};
use pmem_bench::primitives::{variants, Group, Primitive, POOL_SIZE};
use pmem_bench::report::{Report, Setup};
use pmem_ordering::{Granularity, Isa, PoolError};

/// The benchmark pool's file name inside the pool directory.
const POOL_FILE: &str = "pmem-bench.pool";

/// Compare the persistence primitives of pmem-ordering and print one table.
///
/// Measures, side by side: one cache line written + flushed + fenced with each flush instruction
/// the CPU has; non-temporal writes + fence against temporal writes + flush + fence from 64 B to
/// 64 KiB; a non-temporal write followed by an ordered temporal write with and without the fence;
/// and the pool's persist against the raw instructions. Per operation it reports the median time
/// and the fences, flushes and bytes counted by the pool.
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
    #[error("cannot write {path}: {source}")]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot encode the results as JSON: {0}")]
    Json(#[from] serde_json::Error),
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
    fn group(&self, index: usize, count: usize, group: Group, variants: usize, plan: &Plan) {
        eprintln!(
            "[{index}/{count}] {}: {variants} variants x {} rounds",
            group.name(),
            plan.reps
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
    let plan = if cli.quick {
        Plan::quick()
    } else {
        Plan::full()
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
    let mut measurements: Vec<Measurement> = Vec::new();
    for (i, (group, group_variants)) in groups.iter().enumerate() {
        progress.group(i + 1, groups.len(), *group, group_variants.len(), &plan);
        let mut prims = group_variants
            .iter()
            .map(|&v| Primitive::new(&file, v))
            .collect::<Result<Vec<_>, _>>()?;
        measurements.extend(measure_group(&mut prims, &plan, |r, n| {
            progress.round(r, n)
        })?);
    }
    progress.done();

    let report = Report::new(setup, &measurements);
    println!("{}", report.header());
    println!("{}", report.method());
    println!();
    print!("{}", report.table());
    println!();
    print!("{}", report.legend());
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
