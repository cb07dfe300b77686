//! Which granularity a pool file at PATH gets, and why: creates a small pool there with the
//! granularity left to detection, prints the choice and its basis (`Pool::granularity_basis`),
//! persists a word, reopens the file and reads it back, then removes the file.
//! `--expect byte|cache-line|page` makes it exit 1 when the choice differs (the DAX check
//! asserts each persistence mode's granularity with it).
//! `cargo run --release -p pmem-ordering --example granularity -- /mnt/pmem/probe.pool`
use std::path::PathBuf;
use std::process::ExitCode;

use pmem_ordering::{Granularity, Pool, PoolOptions};

const LAYOUT: &str = "granularity-probe";
const SIZE: u64 = 4 << 20;
const USAGE: &str = "usage: granularity PATH [--expect byte|cache-line|page]";

fn parse_granularity(name: &str) -> Option<Granularity> {
    match name {
        "byte" => Some(Granularity::Byte),
        "cache-line" => Some(Granularity::CacheLine),
        "page" => Some(Granularity::Page),
        _ => None,
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut path = None;
    let mut expect = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--expect" => match args.next().as_deref().map(parse_granularity) {
                Some(Some(g)) => expect = Some(g),
                _ => {
                    eprintln!("{USAGE}");
                    return ExitCode::from(2);
                }
            },
            _ if path.is_none() && !arg.starts_with("--") => path = Some(PathBuf::from(arg)),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(path) = path else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match probe(&path) {
        Ok(granularity) => match expect {
            Some(expected) if expected != granularity => {
                println!("FAIL: expected {}", expected.name());
                ExitCode::FAILURE
            }
            Some(_) => {
                println!("as expected");
                ExitCode::SUCCESS
            }
            None => ExitCode::SUCCESS,
        },
        Err(e) => {
            println!("FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}

fn probe(path: &std::path::Path) -> Result<Granularity, Box<dyn std::error::Error>> {
    let pool = Pool::create(path, LAYOUT, SIZE, &PoolOptions::new())?;
    let granularity = pool.granularity();
    println!("pool file:   {}", path.display());
    println!("granularity: {}", granularity.name());
    println!(
        "basis:       {}",
        pool.granularity_basis().unwrap_or("(not given)")
    );
    println!("isa:         {}", pool.isa());
    let root = pool.root::<u64>()?;
    pool.persist(pool.set(root, &0x5eed)?);
    drop(pool);
    let reopened = Pool::open(path, LAYOUT, &PoolOptions::new())?;
    let back = reopened.get(reopened.root::<u64>()?)?;
    let again = reopened.granularity();
    drop(reopened);
    std::fs::remove_file(path)?;
    if back != 0x5eed {
        return Err(format!("the persisted word read back as {back:#x}").into());
    }
    if again != granularity {
        return Err(format!("reopened with {} granularity", again.name()).into());
    }
    Ok(granularity)
}
