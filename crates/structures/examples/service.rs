//! A service's life with a store: open or create it, fill two named maps from two worker
//! threads, drop everything (the file closes and unlocks), reopen and read it all back.
//! `cargo run --release -p pmem-structures --example service`
use pmem_structures::{Error, FastFairConfig, Granularity, Store, StoreOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join("pmem-example-service.pool");
    // tmpfs or an ordinary disk is not persistent memory: see StoreOptions for granularities.
    let options = StoreOptions::new().granularity(Granularity::Emulated);
    {
        let store = Store::open_or_create(&path, 64 << 20, &options)?;
        let users = store.hash_map("users")?;
        let orders = store.btree_map("orders", FastFairConfig::default())?;
        let workers: Vec<_> = (0..2u64)
            .map(|t| {
                let (users, orders) = (users.clone(), orders.clone());
                std::thread::spawn(move || -> Result<(), Error> {
                    for k in (t..100_000).step_by(2) {
                        users.upsert(k, k * 10)?;
                        orders.upsert(k, k + 1)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("a worker panicked")?;
        }
    }
    let store = Store::open_with(&path, &options)?;
    let (users, orders) = (
        store.hash_map("users")?,
        store.btree_map("orders", FastFairConfig::default())?,
    );
    for k in 0..100_000 {
        assert_eq!((users.get(k)?, orders.get(k)?), (Some(k * 10), Some(k + 1)));
    }
    println!(
        "read back {} users and {} orders from {}",
        users.len(),
        orders.len(),
        path.display()
    );
    Ok(())
}
