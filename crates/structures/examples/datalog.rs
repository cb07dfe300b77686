//! Files in a store: a NOVA-style datalog with atomic writes of any size, reopened with
//! nothing but its path.
//! `cargo run --release -p pmem-structures --example datalog`
use pmem_structures::{DatalogConfig, Granularity, Store, StoreOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join("pmem-example-datalog.pool");
    let _ = std::fs::remove_file(&path);
    let options = StoreOptions::new().granularity(Granularity::Emulated);
    {
        let store = Store::create(&path, 32 << 20, &options)?;
        let files = store.datalog("files", DatalogConfig::default())?;
        let log = files.create_file("journal")?;
        files.write_at(log, 0, b"first line\n")?;
        // An overwrite in the middle of the file: copy-on-write or embedded in the log, as the
        // store's policy decides; atomic and durable when it returns either way.
        files.write_at(log, 0, b"FIRST")?;
        files.write_at(log, 11, &[b'x'; 10_000])?;
        files.truncate(log, 20)?;
    }
    let store = Store::open_with(&path, &options)?;
    let files = store.datalog("files", DatalogConfig::default())?;
    let log = files.open_file("journal")?;
    let mut contents = vec![0u8; files.len(log)? as usize];
    files.read_at(log, 0, &mut contents)?;
    assert_eq!(contents, b"FIRST line\nxxxxxxxxx");
    println!(
        "{:?} holds {:?}",
        files.list(),
        String::from_utf8_lossy(&contents)
    );
    std::fs::remove_file(&path)?;
    Ok(())
}
