//! An ordered map as a secondary index: keys `customer << 32 | order`, so one customer's
//! orders are one contiguous range, scanned in key order.
//! `cargo run --release -p pmem-structures --example range_scan`
use pmem_structures::{Granularity, Store, StoreOptions};

fn key(customer: u64, order: u64) -> u64 {
    customer << 32 | order
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = Store::anonymous(
        32 << 20,
        &StoreOptions::new().granularity(Granularity::Emulated),
    )?;
    let orders = store.btree_map::<u64, u64>("orders-by-customer")?;
    for customer in 0..1_000u64 {
        for order in 0..20u64 {
            orders.insert(key(customer, order), customer * 1_000 + order)?;
        }
    }
    // Every order of customer 42, in order number order.
    let of_42 = orders
        .range(key(42, 0)..key(43, 0))
        .collect::<Result<Vec<_>, _>>()?;
    assert_eq!(of_42.len(), 20);
    assert!(of_42.windows(2).all(|w| w[0].0 < w[1].0));
    println!(
        "customer 42 has {} orders, from {:#x} to {:#x}",
        of_42.len(),
        of_42[0].0,
        of_42[19].0
    );
    // The last 5 orders of the largest customer ids: a bounded scan from a key to the end.
    let tail = orders.range(key(999, 15)..).count();
    assert_eq!(tail, 5);
    println!(
        "{} keys in all; the tree checks out with {} keys",
        orders.len(),
        orders.check()?
    );
    Ok(())
}
