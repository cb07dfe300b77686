//! Money transfers with write batches: each transfer debits one account, credits another and
//! appends to a ledger, three writes over two maps that a crash leaves all or none of. Two
//! threads transfer at once (their batches take turns, so no update is lost), a transfer
//! that would overdraw fails and changes nothing, and an auditor reads every balance at once
//! with `read_consistent`, which never sees a transfer half done: the total never moves.
//! `cargo run --release -p pmem-structures --example transfers`
use pmem_structures::{Error, Granularity, Store, StoreOptions};

const ACCOUNTS: u64 = 16;
const OPENING: u64 = 1_000;

/// What a transfer can fail with: the store's error, or not enough money.
#[derive(Debug)]
enum TransferError {
    Store(Error),
    Overdraft {
        from: String,
        balance: u64,
        amount: u64,
    },
}

impl From<Error> for TransferError {
    fn from(e: Error) -> Self {
        TransferError::Store(e)
    }
}

fn account(i: u64) -> String {
    format!("account:{i:02}")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = "/dev/shm/pmem-example-transfers.pool";
    let _ = std::fs::remove_file(path);
    let options = StoreOptions::new().granularity(Granularity::Emulated); // tmpfs: StoreOptions
    let store = Store::create(path, 64 << 20, &options)?;
    let balances = store.hash_map::<String, u64>("balances")?;
    // Ledger: transfer number -> amount (a real one would keep the accounts too).
    let ledger = store.btree_map::<u64, u64>("ledger")?;
    store.write(|batch| {
        for i in 0..ACCOUNTS {
            balances.insert_in(batch, account(i), OPENING)?;
        }
        Ok::<_, Error>(())
    })?;

    let done = {
        let transfer = |n: u64, from: u64, to: u64, amount: u64| {
            store.write(|batch| {
                let (from, to) = (account(from), account(to));
                let balance = balances.get_in(batch, &from)?.unwrap_or(0);
                if balance < amount {
                    // Returning an error drops the batch: nothing it wrote happens.
                    return Err(TransferError::Overdraft {
                        from,
                        balance,
                        amount,
                    });
                }
                balances.upsert_in(batch, &from, balance - amount)?;
                let credit = balances.get_in(batch, &to)?.unwrap_or(0);
                balances.upsert_in(batch, &to, credit + amount)?;
                ledger.insert_in(batch, n, amount)?;
                Ok(())
            })
        };

        let audit = || {
            store.read_consistent(|| {
                (0..ACCOUNTS).try_fold(0, |sum, i| Ok(sum + balances.get(account(i))?.unwrap_or(0)))
            })
        };

        let refused = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let (transfer, refused) = (&transfer, &refused);
                s.spawn(move || {
                    for k in 0..2_000u64 {
                        let n = t * 1_000_000 + k;
                        let (from, to) = ((k * 7 + t) % ACCOUNTS, (k * 11 + 3) % ACCOUNTS);
                        match transfer(n, from, to, (k * 37) % 400) {
                            Ok(()) => {}
                            Err(TransferError::Overdraft {
                                from,
                                balance,
                                amount,
                            }) => refused
                                .lock()
                                .unwrap()
                                .push(format!("{from} holds {balance}, {amount} asked")),
                            Err(TransferError::Store(e)) => panic!("a transfer failed: {e}"),
                        }
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..200 {
                    let total = audit().expect("an audit");
                    assert_eq!(
                        total,
                        ACCOUNTS * OPENING,
                        "an audit saw a transfer half done"
                    );
                }
            });
        });
        let refused = refused.into_inner().unwrap();
        println!(
            "{} transfers, {} refused for overdraft (the first: {}), total {}",
            ledger.len(),
            refused.len(),
            refused.first().map_or("none", String::as_str),
            audit()?
        );
        ledger.len()
    };
    // Every transfer committed is in the file: reopen and check.
    drop((store, balances, ledger));
    let store = Store::open_with(path, &options)?;
    let balances = store.hash_map::<String, u64>("balances")?;
    let ledger = store.btree_map::<u64, u64>("ledger")?;
    let total: u64 = balances
        .iter()
        .map(|p| p.map(|(_, v)| v))
        .sum::<Result<_, _>>()?;
    assert_eq!((total, ledger.len()), (ACCOUNTS * OPENING, done));
    println!("reopened: {done} transfers, total {total}");
    std::fs::remove_file(path)?;
    Ok(())
}
