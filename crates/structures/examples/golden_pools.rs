//! Writes a golden pool file for `tests/integration/golden.rs`: a store holding what
//! `tests/golden/contents.rs` defines, named after the format versions it holds.
//!
//! `cargo run --release -p pmem-structures --example golden_pools [-- DIR]`
//!
//! DIR defaults to `crates/structures/tests/golden`. A golden file is never replaced: if the
//! file of these versions exists, nothing is written (see `tests/golden/README.md`).

#[path = "../tests/golden/mod.rs"]
mod golden;

use std::path::PathBuf;

use golden::{contents, StoreFile};
use pmem_structures::Store;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden"));
    let draft = dir.join(format!("draft-{}.pool.tmp", std::process::id()));
    {
        let store = Store::create(&draft, contents::POOL_BYTES, &contents::options())?;
        contents::write(&store)?;
    }
    let store = Store::open_with(&draft, &contents::options())?;
    contents::check(&store)?;
    drop(store);
    let bytes = std::fs::read(&draft)?;
    let name = StoreFile::read(&bytes).formats(&bytes).file_name();
    let target = dir.join(&name);
    if target.exists() {
        std::fs::remove_file(&draft)?;
        println!(
            "{} exists: a golden file is never replaced",
            target.display()
        );
        return Ok(());
    }
    std::fs::rename(&draft, &target)?;
    println!("wrote {}", target.display());
    Ok(())
}
