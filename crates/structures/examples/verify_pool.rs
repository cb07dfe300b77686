//! Verify the store in a pool file and print what is wrong: the catalog, every structure's own
//! walk, and the heap's allocated blocks against the blocks the structures reach.
//! `cargo run --release -p pmem-structures --example verify_pool -- PATH`
//!
//! Exits 0 if nothing is found, 1 if something is, 2 if the file cannot be opened as a store
//! (not a store, locked by another process, truncated, damaged past opening).
use std::process::ExitCode;

use pmem_structures::verify_pool;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(path), None) = (args.next(), args.next()) else {
        eprintln!("usage: verify_pool PATH");
        return ExitCode::from(2);
    };
    match verify_pool(&path) {
        Ok(report) => {
            println!("{}: {report}", path.to_string_lossy());
            ExitCode::from(if report.is_healthy() { 0 } else { 1 })
        }
        Err(e) => {
            eprintln!("{}: cannot open the store: {e}", path.to_string_lossy());
            ExitCode::from(2)
        }
    }
}
