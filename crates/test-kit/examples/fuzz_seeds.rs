//! Writes the fuzz targets' committed seeds (see `pmem_test_kit::fuzz_seeds`): run
//! `cargo run -p pmem-test-kit --example fuzz_seeds` from the workspace root.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    for seed in pmem_test_kit::fuzz_seeds::seeds() {
        let dir = root.join(seed.target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(&seed.name), &seed.bytes)?;
        println!("{}/{}: {} bytes", seed.target, seed.name, seed.bytes.len());
    }
    Ok(())
}
