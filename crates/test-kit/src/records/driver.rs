//! Running [`RecordOp`]s on both byte-key maps of a store: [`RecordDriver`] checks each result
//! against the model, and [`run_record_ops`] runs a whole sequence on a fresh anonymous store,
//! reopening it midway.

use std::collections::HashMap as Unordered;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use pmem_ordering::{Backend, Pool, PoolOptions};
use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::fastfair::{FastFairConfig, ShiftPolicy};
use pmem_structures::raw::records::MAX_KEY_BYTES;
use pmem_structures::raw::STORE_LAYOUT;
use pmem_structures::{BTreeMap, Error, HashMap, Store, StoreOptions};
use pmem_undo_log::{Heap, HeapConfig};

use super::{model_range, RecordModel, RecordOp};
use crate::model::{agree, failed};
use crate::ModelOp;

type Bytes = Vec<u8>;

/// The hash map's name in the store.
pub const HASH_NAME: &str = "hash";
/// The ordered map's name in the store.
pub const TREE_NAME: &str = "tree";

/// The anonymous pool a run's store lives on: room for every operation of a long input to
/// write a 64 KiB key with a 48 KiB value to both maps (anonymous memory is touched only where
/// written).
pub const RECORD_POOL_BYTES: u64 = 64 << 20;

/// How a run's maps are shaped: small segments and nodes, so a few keys split them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordSetup {
    /// The ordered map's shift policy.
    pub shift: ShiftPolicy,
    /// Hash segments of 8 buckets rather than 4.
    pub wide_segments: bool,
    /// Tree nodes of 256 bytes rather than 128.
    pub large_nodes: bool,
}

impl Default for RecordSetup {
    fn default() -> Self {
        RecordSetup {
            shift: ShiftPolicy::Fast,
            wide_segments: false,
            large_nodes: false,
        }
    }
}

impl RecordSetup {
    /// The store's options: 16 KiB chunks, so long records take runs of chunks.
    pub fn options(&self) -> StoreOptions {
        StoreOptions::new().max_structures(4).heap(HeapConfig {
            lanes: 2,
            lane_log_bytes: 16 << 10,
            chunk_size: 16 << 10,
        })
    }

    /// The hash map's shape.
    pub fn table(&self) -> CcehConfig {
        CcehConfig {
            buckets_per_segment: if self.wide_segments { 8 } else { 4 },
        }
    }

    /// The ordered map's shape (each of its layers').
    pub fn tree(&self) -> FastFairConfig {
        FastFairConfig {
            node_size: if self.large_nodes { 256 } else { 128 },
            policy: self.shift,
        }
    }

    /// The root object size that holds exactly the options' catalog (the store computes it;
    /// the kit does not copy the catalog's layout).
    pub fn root_size(&self) -> Result<u64, Error> {
        self.options().root_size()
    }

    /// A fresh store on an anonymous pool of `size` bytes the caller keeps (to reopen it).
    pub fn anonymous_store(&self, size: u64) -> Result<(Arc<Pool>, Store), Error> {
        let options = PoolOptions::new().root_size(self.root_size()?);
        let pool = Arc::new(Pool::anonymous(STORE_LAYOUT, size, &options)?);
        let store = Store::format(pool.clone(), &self.options())?;
        Ok((pool, store))
    }
}

/// Both maps of a store.
struct Maps<B: Backend> {
    hash: HashMap<Bytes, Bytes, B>,
    tree: BTreeMap<Bytes, Bytes, B>,
}

/// Runs [`RecordOp`]s on the two byte-key maps of a store, checking each against a model.
pub struct RecordDriver<'a, B: Backend> {
    store: Option<Store<B>>,
    maps: Option<Maps<B>>,
    setup: RecordSetup,
    reopen: Box<dyn FnMut() -> Result<Store<B>, Error> + 'a>,
}

impl<'a, B: Backend> RecordDriver<'a, B> {
    /// A driver of `store`, whose maps it opens (or creates with `setup`'s shapes), and which
    /// `reopen` opens again after the store and the maps are dropped.
    pub fn new(
        store: Store<B>,
        setup: RecordSetup,
        reopen: impl FnMut() -> Result<Store<B>, Error> + 'a,
    ) -> Result<Self, String> {
        let mut driver = RecordDriver {
            store: Some(store),
            maps: None,
            setup,
            reopen: Box::new(reopen),
        };
        driver.open_maps()?;
        Ok(driver)
    }

    /// The store driven.
    pub fn store(&self) -> &Store<B> {
        self.store
            .as_ref()
            .expect("the store is dropped only inside reopen")
    }

    fn maps(&self) -> &Maps<B> {
        self.maps
            .as_ref()
            .expect("the maps are dropped only inside reopen")
    }

    fn open_maps(&mut self) -> Result<(), String> {
        let store = self.store();
        let hash = store
            .hash_map_with::<Bytes, Bytes>(HASH_NAME, self.setup.table())
            .map_err(|e| failed("opening the hash map", e))?;
        let tree = store
            .btree_map_with::<Bytes, Bytes>(TREE_NAME, self.setup.tree())
            .map_err(|e| failed("opening the ordered map", e))?;
        agree(
            "the ordered map's config".into(),
            tree.layout(),
            self.setup.tree().into(),
        )?;
        self.maps = Some(Maps { hash, tree });
        Ok(())
    }

    /// Runs `op` on both maps, checks the results against `model`, then applies it to `model`.
    pub fn run_checked(&mut self, op: &RecordOp, model: &mut RecordModel) -> Result<(), String> {
        let Maps { hash, tree } = self.maps();
        match op {
            RecordOp::Insert(k, v) => {
                let (key, value) = (k.bytes(), v.bytes());
                let want = if k.fits() {
                    Ok(!model.contains_key(&key))
                } else {
                    Err(too_large(&key))
                };
                same_outcome("hash insert", hash.insert(&key, &value), &want)?;
                same_outcome("tree insert", tree.insert(&key, &value), &want)?;
            }
            RecordOp::Upsert(k, v) => {
                let (key, value) = (k.bytes(), v.bytes());
                let want = if k.fits() {
                    Ok(model.get(&key).cloned())
                } else {
                    Err(too_large(&key))
                };
                same_outcome("hash upsert", hash.upsert(&key, &value), &want)?;
                same_outcome("tree upsert", tree.upsert(&key, &value), &want)?;
            }
            RecordOp::Remove(k) => {
                let key = k.bytes();
                let want = Ok(model.get(&key).cloned());
                same_outcome("hash remove", hash.remove(&key), &want)?;
                same_outcome("tree remove", tree.remove(&key), &want)?;
            }
            RecordOp::Get(k) => {
                let key = k.bytes();
                let want = Ok(model.get(&key).cloned());
                same_outcome("hash get", hash.get(&key), &want)?;
                same_outcome("tree get", tree.get(&key), &want)?;
                // The read into a reused buffer: the same value, the buffer empty when absent.
                let value = model.get(&key).cloned().unwrap_or_default();
                let found = Ok(model.contains_key(&key));
                let mut out = vec![0xAB; 3];
                same_outcome("hash get_into", hash.get_into(&key, &mut out), &found)?;
                if out != value {
                    return Err(format!(
                        "hash get_into of {key:?} wrote {out:?}, not {value:?}"
                    ));
                }
                same_outcome("tree get_into", tree.get_into(&key, &mut out), &found)?;
                if out != value {
                    return Err(format!(
                        "tree get_into of {key:?} wrote {out:?}, not {value:?}"
                    ));
                }
                let present = Ok(model.contains_key(&key));
                same_outcome("hash contains_key", hash.contains_key(&key), &present)?;
                same_outcome("tree contains_key", tree.contains_key(&key), &present)?;
            }
            RecordOp::Range {
                start,
                start_bound,
                end,
                end_bound,
            } => {
                let (a, b) = (start.bytes(), end.bytes());
                let (lo, hi) = (start_bound.on(&a), end_bound.on(&b));
                let got: Vec<(Bytes, Bytes)> = tree
                    .range::<&[u8], _>((lo, hi))
                    .collect::<Result<_, _>>()
                    .map_err(|e| failed("the range scan", e))?;
                let want = model_range(model, lo, hi);
                let lent = lent_pairs(tree, (lo, hi))?;
                for (what, got) in [("the range scan", got), ("the borrowed range scan", lent)] {
                    if got != want {
                        return Err(format!(
                            "{what} gave {} pairs (keys {:?}), the model {} (keys {:?})",
                            got.len(),
                            short_keys(got.iter().map(|(k, v)| (k, v))),
                            want.len(),
                            short_keys(want.iter().map(|(k, v)| (k, v)))
                        ));
                    }
                }
            }
            RecordOp::Reopen => {
                self.maps = None;
                self.store = None;
                self.store = Some((self.reopen)().map_err(|e| failed("reopening the store", e))?);
                self.open_maps()?;
            }
            RecordOp::Check => self.check(model)?,
        }
        op.apply(0, model);
        let Maps { hash, tree } = self.maps();
        let len = model.len() as u64;
        agree("the hash map's len".into(), hash.len(), len)?;
        agree("the ordered map's len".into(), tree.len(), len)
    }

    /// Checks both maps against `model`: `check()` and `len()` count its pairs, the hash map's
    /// walk holds them, the ordered map's walks them in key order, and the store's heap holds
    /// exactly the structures' blocks (`check_blocks`).
    pub fn check(&self, model: &RecordModel) -> Result<(), String> {
        let (hashed, walked) = contents(self.store(), &self.setup)?;
        if hashed != *model {
            return Err(format!(
                "the hash map holds keys {:?}, the model {:?}",
                short_keys(hashed.iter()),
                short_keys(model.iter())
            ));
        }
        if walked != *model {
            return Err(format!(
                "the ordered map holds keys {:?}, the model {:?}",
                short_keys(walked.iter()),
                short_keys(model.iter())
            ));
        }
        self.store()
            .check_blocks()
            .map_err(|e| failed("check_blocks", e))?;
        Ok(())
    }
}

/// What both maps of `store` hold (the hash map's pairs, then the ordered map's), each
/// checked: its `check()` and `len()` count the pairs its walk gives, and the ordered map walks
/// in strictly increasing key order.
pub fn contents<B: Backend>(
    store: &Store<B>,
    setup: &RecordSetup,
) -> Result<(RecordModel, RecordModel), String> {
    let hash = store
        .hash_map_with::<Bytes, Bytes>(HASH_NAME, setup.table())
        .map_err(|e| failed("opening the hash map", e))?;
    let tree = store
        .btree_map_with::<Bytes, Bytes>(TREE_NAME, setup.tree())
        .map_err(|e| failed("opening the ordered map", e))?;
    let hashed: Unordered<Bytes, Bytes> = hash
        .iter()
        .collect::<Result<_, _>>()
        .map_err(|e| failed("the hash map's walk", e))?;
    let walk: Vec<(Bytes, Bytes)> = tree
        .iter()
        .collect::<Result<_, _>>()
        .map_err(|e| failed("the ordered map's walk", e))?;
    let unbounded = (Bound::Unbounded, Bound::Unbounded);
    if lent_pairs(&tree, unbounded)? != walk {
        return Err("the ordered map's borrowed walk differs from its walk".to_string());
    }
    if let Some(pair) = walk.windows(2).find(|w| w[0].0 >= w[1].0) {
        return Err(format!(
            "the ordered map walks {:?} before {:?}",
            short_keys(std::iter::once((&pair[0].0, &pair[0].1))),
            short_keys(std::iter::once((&pair[1].0, &pair[1].1)))
        ));
    }
    for (what, counted, len, walked) in [
        (
            "the hash map",
            hash.check()
                .map_err(|e| failed("the hash map's check", e))?,
            hash.len(),
            hashed.len(),
        ),
        (
            "the ordered map",
            tree.check()
                .map_err(|e| failed("the ordered map's check", e))?,
            tree.len(),
            walk.len(),
        ),
    ] {
        if counted != walked as u64 || len != walked as u64 {
            return Err(format!(
                "{what}'s check counts {counted} pairs, its len is {len}, its walk gives {walked}"
            ));
        }
    }
    Ok((hashed.into_iter().collect(), walk.into_iter().collect()))
}

/// The pairs of `tree` in `bounds` as its borrowed scan lends them, copied.
fn lent_pairs<B: Backend>(
    tree: &BTreeMap<Bytes, Bytes, B>,
    bounds: (Bound<&[u8]>, Bound<&[u8]>),
) -> Result<Vec<(Bytes, Bytes)>, String> {
    let mut lent = Vec::new();
    tree.range_with::<&[u8], _, ()>(bounds, |k, v| {
        lent.push((k.to_vec(), v.to_vec()));
        ControlFlow::Continue(())
    })
    .map_err(|e| failed("the borrowed range scan", e))?;
    Ok(lent)
}

/// The error a write of `key` (longer than the maps take) must give.
fn too_large(key: &[u8]) -> Error {
    Error::KeyTooLarge {
        len: key.len(),
        max: MAX_KEY_BYTES,
    }
}

/// `Ok` if a map's result is the model's (the same value, or the same error).
fn same_outcome<T: PartialEq + std::fmt::Debug>(
    what: &str,
    got: Result<T, Error>,
    want: &Result<T, Error>,
) -> Result<(), String> {
    let same = match (&got, want) {
        (Ok(g), Ok(w)) => g == w,
        (Err(g), Err(w)) => g.to_string() == w.to_string(),
        _ => false,
    };
    if same {
        return Ok(());
    }
    let show = |r: &Result<T, Error>| match r {
        Ok(v) => short(&format!("{v:?}")),
        Err(e) => format!("Err({e})"),
    };
    Err(format!(
        "{what} gave {}, the model {}",
        show(&got),
        show(want)
    ))
}

/// A debug rendering cut to 200 characters (values run to tens of KiB).
fn short(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}... ({} chars)", &text[..cut], text.len()),
        None => text.to_string(),
    }
}

/// Pairs' keys, each cut to 40 bytes (keys run to 64 KiB).
fn short_keys<'k>(pairs: impl Iterator<Item = (&'k Bytes, &'k Bytes)>) -> Vec<String> {
    pairs
        .map(|(k, _)| {
            let head = &k[..k.len().min(40)];
            if head.len() < k.len() {
                format!("{head:?}+{} bytes", k.len() - head.len())
            } else {
                format!("{head:?}")
            }
        })
        .collect()
}

/// Runs `ops` on a fresh anonymous store made with `setup`, every result checked against the
/// model, reopening the store (`Heap::open`, `Store::load` on the same pool) after the first
/// half; then a full [`RecordDriver::check`], and the same after a last reopen. The first
/// disagreement names its operation.
pub fn run_record_ops(setup: RecordSetup, ops: &[RecordOp]) -> Result<(), String> {
    let (pool, store) = setup
        .anonymous_store(RECORD_POOL_BYTES)
        .map_err(|e| failed("making the store", e))?;
    let reopen = || Store::load(Heap::open(pool.clone())?);
    let mut driver = RecordDriver::new(store, setup, reopen)?;
    let mut model = RecordModel::new();
    let midway = ops.len() / 2;
    for (index, op) in ops.iter().enumerate() {
        if index == midway {
            driver
                .run_checked(&RecordOp::Reopen, &mut model)
                .map_err(|e| format!("the reopen before operation {index}: {e}"))?;
        }
        driver
            .run_checked(op, &mut model)
            .map_err(|e| format!("operation {index} {op:?}: {e}"))?;
    }
    driver
        .check(&model)
        .map_err(|e| format!("after the sequence: {e}"))?;
    driver
        .run_checked(&RecordOp::Reopen, &mut model)
        .and_then(|()| driver.check(&model))
        .map_err(|e| format!("after the sequence and a reopen: {e}"))
}
