//! The workload of the DAX check's machine crashes (`.ci/dax/run`): run inside a guest whose
//! pool file is on a DAX mount, stopped abruptly by the host (QEMU killed) and booted again.
//!
//! * `machine_crash load POOL ACKS [--threads N] [--hold]` creates a store in a new file at
//!   POOL, appends `created <bytes> <threads>` to ACKS, then (unless `--hold`, which waits for
//!   the stop right there) runs N writer threads over four maps (`u64` hash and ordered maps,
//!   byte-string hash and ordered maps): upserts and removes of keys of their own, each
//!   appended to ACKS as `<thread> <op>` once it returned (durable), until the machine stops.
//! * `machine_crash check POOL ACKS` after the reboot: the file is there with its size, the
//!   store opens (recovery) with the granularity detected for it, `Store::verify` finds
//!   nothing, and every map holds exactly what the acknowledged operations left, except that
//!   each thread's first unacknowledged operation may or may not have happened. Exits 1 with
//!   the first difference otherwise.
//!
//! ACKS is on the host's 9p share (no client cache): a line is in the host's file once its
//! `write` returns, so the host never sees an acknowledgement of a write that was not durable.
//! Each thread writes its next operation only after its acknowledgement's `write` returned, so
//! at most one unacknowledged operation per thread can have taken effect.

use std::collections::BTreeMap as Model;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pmem_structures::{Store, StoreOptions};
use pmem_test_kit::SplitMix64;

const STORE_BYTES: u64 = 64 << 20;
/// The maps, by index in an operation's number (`op % MAPS`).
const MAPS: [&str; 4] = ["words", "ordered-words", "records", "ordered-records"];
const MAP_COUNT: u64 = MAPS.len() as u64;
/// Keys per thread and map: small enough that operations overwrite and remove earlier ones.
const KEYS: u64 = 400;
/// The longest byte-string value: several cache lines, sometimes more than one page.
const MAX_VALUE_BYTES: u64 = 5000;
/// How long `--hold` waits to be stopped before giving up.
const HOLD: Duration = Duration::from_secs(600);
const USAGE: &str = "usage: machine_crash load POOL ACKS [--threads N] [--hold]\n       \
                     machine_crash check POOL ACKS";

/// A key or value as the model holds it: `u64`s big-endian, byte strings as they are.
type Bytes = Vec<u8>;

/// Operation `op` of thread `thread`: its map, key, and the value it sets (`None`: removes).
struct Op {
    map: usize,
    key: Bytes,
    value: Option<Bytes>,
}

fn op(thread: u64, op: u64) -> Op {
    let map = (op % MAP_COUNT) as usize;
    let slot = (op / MAP_COUNT) % KEYS;
    let mut rng = SplitMix64::new(thread << 40 ^ op);
    let remove = (op / MAP_COUNT) % 7 == 6;
    let words = map < 2;
    let key = if words {
        (thread << 32 | slot).to_be_bytes().to_vec()
    } else {
        format!("thread-{thread}/key-{slot:04}").into_bytes()
    };
    let value = (!remove).then(|| {
        if words {
            rng.next_u64().to_be_bytes().to_vec()
        } else {
            let len = 1 + rng.next_u64() % MAX_VALUE_BYTES;
            (0..len).map(|_| rng.next_u64() as u8).collect()
        }
    });
    Op { map, key, value }
}

fn word(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes.try_into().expect("an 8-byte key or value"))
}

/// The store's four maps.
struct Maps {
    words: pmem_structures::HashMap<u64, u64>,
    ordered_words: pmem_structures::BTreeMap<u64, u64>,
    records: pmem_structures::HashMap<Bytes, Bytes>,
    ordered_records: pmem_structures::BTreeMap<Bytes, Bytes>,
}

impl Maps {
    fn open(store: &Store) -> Result<Maps, pmem_structures::Error> {
        Ok(Maps {
            words: store.hash_map(MAPS[0])?,
            ordered_words: store.btree_map(MAPS[1])?,
            records: store.hash_map(MAPS[2])?,
            ordered_records: store.btree_map(MAPS[3])?,
        })
    }

    fn apply(&self, op: &Op) -> Result<(), pmem_structures::Error> {
        match (op.map, &op.value) {
            (0, Some(v)) => self.words.upsert(word(&op.key), word(v)).map(drop),
            (0, None) => self.words.remove(word(&op.key)).map(drop),
            (1, Some(v)) => self.ordered_words.upsert(word(&op.key), word(v)).map(drop),
            (1, None) => self.ordered_words.remove(word(&op.key)).map(drop),
            (2, Some(v)) => self.records.upsert(&op.key[..], &v[..]).map(drop),
            (2, None) => self.records.remove(&op.key[..]).map(drop),
            (_, Some(v)) => self.ordered_records.upsert(&op.key[..], &v[..]).map(drop),
            (_, None) => self.ordered_records.remove(&op.key[..]).map(drop),
        }
    }

    /// Every pair of every map, as (map, key) -> value.
    fn contents(&self) -> Result<Model<(usize, Bytes), Bytes>, pmem_structures::Error> {
        let mut all = Model::new();
        for pair in self.words.iter() {
            let (k, v) = pair?;
            all.insert((0, k.to_be_bytes().to_vec()), v.to_be_bytes().to_vec());
        }
        for pair in self.ordered_words.iter() {
            let (k, v) = pair?;
            all.insert((1, k.to_be_bytes().to_vec()), v.to_be_bytes().to_vec());
        }
        for pair in self.records.iter() {
            let (k, v) = pair?;
            all.insert((2, k), v);
        }
        for pair in self.ordered_records.iter() {
            let (k, v) = pair?;
            all.insert((3, k), v);
        }
        Ok(all)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("load") if args.len() >= 3 => {
            let mut threads = 2;
            let mut hold = false;
            let mut rest = args[3..].iter();
            while let Some(arg) = rest.next() {
                match (arg.as_str(), rest.clone().next().map(|n| n.parse::<u64>())) {
                    ("--threads", Some(Ok(n))) if n > 0 => {
                        threads = n;
                        rest.next();
                    }
                    ("--hold", _) => hold = true,
                    _ => return usage(),
                }
            }
            load(Path::new(&args[1]), Path::new(&args[2]), threads, hold)
        }
        Some("check") if args.len() == 3 => check(Path::new(&args[1]), Path::new(&args[2])),
        _ => return usage(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("machine_crash: FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ExitCode {
    eprintln!("{USAGE}");
    ExitCode::from(2)
}

type Failure = Box<dyn std::error::Error>;

/// Appends one line to the acknowledgement file in a single `write`.
fn acknowledge(acks: &Mutex<File>, line: String) -> std::io::Result<()> {
    acks.lock()
        .expect("an acknowledgement writer panicked")
        .write_all(line.as_bytes())
}

fn load(pool: &Path, acks: &Path, threads: u64, hold: bool) -> Result<(), Failure> {
    let acks = Arc::new(Mutex::new(
        OpenOptions::new().create(true).append(true).open(acks)?,
    ));
    let store = Store::create(pool, STORE_BYTES, &StoreOptions::new())?;
    Maps::open(&store)?;
    acknowledge(&acks, format!("created {STORE_BYTES} {threads}\n"))?;
    println!(
        "machine_crash: created {} ({STORE_BYTES} bytes)",
        pool.display()
    );
    if hold {
        std::thread::sleep(HOLD);
        return Err(format!("not stopped within {HOLD:?} of the store's creation").into());
    }
    let workers: Vec<_> = (0..threads)
        .map(|thread| {
            let (store, acks) = (store.clone(), acks.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let maps = Maps::open(&store).map_err(|e| e.to_string())?;
                for n in 0.. {
                    maps.apply(&op(thread, n))
                        .map_err(|e| format!("thread {thread}, operation {n}: {e}"))?;
                    acknowledge(&acks, format!("{thread} {n}\n")).map_err(|e| e.to_string())?;
                }
                Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker.join().map_err(|_| "a writer panicked")??;
    }
    Err("the writers stopped before the machine did".into())
}

/// What the acknowledgement file says: the store's size, its writer threads and, per thread,
/// how many operations it acknowledged (in order, from 0).
struct Acknowledged {
    bytes: u64,
    per_thread: Vec<u64>,
}

fn read_acks(acks: &Path) -> Result<Acknowledged, Failure> {
    let text = std::fs::read_to_string(acks)?;
    let mut lines = text.lines();
    let created = lines
        .next()
        .ok_or("the store's creation was never acknowledged")?;
    let fields: Vec<&str> = created.split(' ').collect();
    let (bytes, threads) = match fields[..] {
        ["created", bytes, threads] => (bytes.parse::<u64>()?, threads.parse::<usize>()?),
        _ => return Err(format!("a first line that is not `created`: {created:?}").into()),
    };
    let mut per_thread = vec![0u64; threads];
    for line in lines {
        let (thread, n) = line
            .split_once(' ')
            .ok_or_else(|| format!("a malformed acknowledgement {line:?}"))?;
        let (thread, n) = (thread.parse::<usize>()?, n.parse::<u64>()?);
        let count = per_thread
            .get_mut(thread)
            .ok_or_else(|| format!("an acknowledgement of unknown thread {thread}"))?;
        if n != *count {
            return Err(
                format!("thread {thread} acknowledged {n} after {count} operations").into(),
            );
        }
        *count += 1;
    }
    // A line cut short at the stop is not in `lines` unless it ended in a newline: the host's
    // copy holds whole writes only, so a partial line would be a protocol error above.
    Ok(Acknowledged { bytes, per_thread })
}

fn check(pool: &Path, acks: &Path) -> Result<(), Failure> {
    let acked = read_acks(acks)?;
    let meta = std::fs::metadata(pool)
        .map_err(|e| format!("the pool file {} after the reboot: {e}", pool.display()))?;
    if meta.len() != acked.bytes {
        return Err(format!(
            "the pool file has {} bytes after the reboot, {} when created",
            meta.len(),
            acked.bytes
        )
        .into());
    }
    let store = Store::open(pool)?;
    let verification = store.verify();
    if !verification.is_healthy() {
        return Err(format!("Store::verify after the reboot: {verification}").into());
    }
    store.check_blocks()?;
    let maps = Maps::open(&store)?;
    let found = maps.contents()?;

    // The model after every acknowledged operation, and what each thread's next operation
    // (perhaps done, never acknowledged) would set its key to.
    let mut model: Model<(usize, Bytes), Bytes> = Model::new();
    let mut in_flight: Model<(usize, Bytes), Option<Bytes>> = Model::new();
    for (thread, &count) in acked.per_thread.iter().enumerate() {
        for n in 0..count {
            let op = op(thread as u64, n);
            match op.value {
                Some(v) => model.insert((op.map, op.key), v),
                None => model.remove(&(op.map, op.key)),
            };
        }
        let next = op(thread as u64, count);
        in_flight.insert((next.map, next.key), next.value);
    }
    let mut landed = 0;
    let keys: std::collections::BTreeSet<_> = model.keys().chain(found.keys()).collect();
    for key in keys {
        let (want, got) = (model.get(key), found.get(key));
        if want == got {
            continue;
        }
        match in_flight.get(key) {
            Some(next) if next.as_ref() == got => landed += 1,
            _ => {
                return Err(format!(
                    "map {} key {}: {} after the reboot, {} acknowledged",
                    MAPS[key.0],
                    describe_key(key.0, &key.1),
                    describe(got),
                    describe(want)
                )
                .into())
            }
        }
    }
    let total: u64 = acked.per_thread.iter().sum();
    println!(
        "machine_crash: {} intact after the reboot: {} bytes, store verified, {total} \
         acknowledged writes ({:?} per thread) all present, {} pairs; {landed} of {} \
         unacknowledged operations in flight had landed",
        pool.display(),
        meta.len(),
        acked.per_thread,
        found.len(),
        acked.per_thread.len()
    );
    Ok(())
}

fn describe_key(map: usize, key: &[u8]) -> String {
    if map < 2 {
        let k = word(key);
        format!("{:#x} (thread {}, slot {})", k, k >> 32, k & 0xffff_ffff)
    } else {
        format!("{:?}", String::from_utf8_lossy(key))
    }
}

fn describe(value: Option<&Bytes>) -> String {
    match value {
        Some(v) => format!("a {}-byte value", v.len()),
        None => "absent".into(),
    }
}
