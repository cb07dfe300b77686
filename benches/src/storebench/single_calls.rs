//! The single-call phases: CCEH insert, get and remove, FAST&FAIR insert, get and scan, one
//! call per key on a fresh raw structure and a fresh store each repetition.

use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::fastfair::FastFairConfig;

use super::paired::{get_each, insert_each, remove_each, scan_each, timed, Pair, PairedMap};
use super::{Files, StoreBenchError};
use crate::ccehbench::{self, CcehHeap};
use crate::fastfairbench::{self, FastFairHeap, SCAN_KEYS};
use crate::keys::{random_keys_except_max, shuffled};
use crate::phase::check_count;
use crate::poolfile::StoreFile;

/// The CCEH keys and their lookup and removal orders (the CCEH section's seeds).
pub(super) struct CcehInputs {
    pub(super) keys: Vec<u64>,
    pub(super) get_order: Vec<u64>,
    pub(super) remove_order: Vec<u64>,
}

/// One repetition of the CCEH single-call phases into `pairs` (insert, get, remove).
pub(super) fn cceh_repetition(
    files: &Files<'_>,
    inputs: &CcehInputs,
    rep: usize,
    pairs: &mut [Pair; 3],
) -> Result<(), StoreBenchError> {
    let n = inputs.keys.len() as u64;
    let raw_heap = CcehHeap::create(files.dir, &files.name("cceh"), n, files.granularity)?;
    let raw = raw_heap.table()?;
    let store_file = StoreFile::create(
        files.dir,
        &files.name("cceh-store"),
        ccehbench::pool_size(n),
        files.granularity,
    )?;
    let store = store_file
        .store()
        .hash_map_with::<u64, u64>("cceh", CcehConfig::default())?;
    let [insert, get, remove] = pairs;
    insert_then_get(
        rep,
        &inputs.keys,
        &inputs.get_order,
        [insert, get],
        &raw,
        &store,
    )?;
    remove.measure(
        rep,
        &inputs.remove_order,
        n,
        "removed",
        |c| timed(|| remove_each(&raw, c)),
        |c| timed(|| remove_each(&store, c)),
    )?;
    check_count(|| remove.label("raw"), 0, raw.len(), "keys left")?;
    check_count(|| remove.label("store"), 0, store.len(), "keys left")?;
    Ok(())
}

/// The FAST&FAIR keys, lookup order and scan starts (the FAST&FAIR section's seeds), and the
/// pairs the scans must read.
pub(super) struct FastFairInputs {
    keys: Vec<u64>,
    get_order: Vec<u64>,
    scan_starts: Vec<u64>,
    expected_scanned: u64,
}

impl FastFairInputs {
    pub(super) fn new(n: u64, scans: usize) -> FastFairInputs {
        let keys = random_keys_except_max(n, 0xFA57);
        let get_order = shuffled(&keys, 0x6E7);
        let scan_starts: Vec<u64> = shuffled(&keys, 0x5CA).into_iter().take(scans).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        let expected_scanned = scan_starts
            .iter()
            .map(|s| {
                let at = sorted.partition_point(|k| k < s);
                (sorted.len() - at).min(SCAN_KEYS) as u64
            })
            .sum();
        FastFairInputs {
            keys,
            get_order,
            scan_starts,
            expected_scanned,
        }
    }
}

/// One repetition of the FAST&FAIR phases into `pairs` (insert, get, scan).
pub(super) fn fastfair_repetition(
    files: &Files<'_>,
    inputs: &FastFairInputs,
    rep: usize,
    pairs: &mut [Pair; 3],
) -> Result<(), StoreBenchError> {
    let n = inputs.keys.len() as u64;
    let config = FastFairConfig::default();
    let raw_heap = FastFairHeap::create(files.dir, &files.name("fastfair"), n, files.granularity)?;
    let raw = raw_heap.tree(config.policy)?;
    let store_file = StoreFile::create(
        files.dir,
        &files.name("fastfair-store"),
        fastfairbench::pool_size(n),
        files.granularity,
    )?;
    let store = store_file
        .store()
        .btree_map_with::<u64, u64>("fastfair", config)?;
    let [insert, get, scan] = pairs;
    insert_then_get(
        rep,
        &inputs.keys,
        &inputs.get_order,
        [insert, get],
        &raw,
        &store,
    )?;
    scan.measure(
        rep,
        &inputs.scan_starts,
        inputs.expected_scanned,
        "pairs scanned",
        |c| timed(|| scan_each(&raw, c)),
        |c| timed(|| scan_each(&store, c)),
    )?;
    Ok(())
}

/// The phases both maps share, on both sides: every key inserted (each new), then every key
/// looked up in `get_order` (each found).
fn insert_then_get<R: PairedMap, S: PairedMap>(
    rep: usize,
    keys: &[u64],
    get_order: &[u64],
    [insert, get]: [&mut Pair; 2],
    raw: &R,
    store: &S,
) -> Result<(), StoreBenchError>
where
    StoreBenchError: From<R::Error> + From<S::Error>,
{
    let n = keys.len() as u64;
    insert.measure(
        rep,
        keys,
        n,
        "inserted",
        |c| timed(|| insert_each(raw, c)),
        |c| timed(|| insert_each(store, c)),
    )?;
    get.measure(
        rep,
        get_order,
        n,
        "found",
        |c| timed(|| get_each(raw, c)),
        |c| timed(|| get_each(store, c)),
    )
}
