//! The paired measurement of one operation: the same chunks of work run on the raw structure
//! and through the store, back to back in alternating order ([`Pair::measure`]), and the
//! per-operation calls both sides run ([`PairedMap`], [`PairedScan`]).

use std::time::Instant;

use pmem_structures::raw::cceh::CcehError;
use pmem_structures::raw::fastfair::FastFairError;
use pmem_structures::{BTreeMap, HashMap};

use super::{StoreBenchError, StorePathRow, CHUNKS, TARGET_RATIO};
use crate::ccehbench;
use crate::fastfairbench::{self, SCAN_KEYS};
use crate::phase::check_count;
use crate::ycsb::Structure;

/// A map measured both ways: the raw structure, or the store's handle over it.
pub(super) trait PairedMap {
    /// What its operations fail with.
    type Error;
    fn insert(&self, key: u64, value: u64) -> Result<bool, Self::Error>;
    fn get(&self, key: u64) -> Result<Option<u64>, Self::Error>;
    fn remove(&self, key: u64) -> Result<Option<u64>, Self::Error>;
}

/// An ordered map measured both ways: one scan of up to [`SCAN_KEYS`] pairs from `start`,
/// the number of pairs read holding their key's value.
pub(super) trait PairedScan: PairedMap {
    fn scan(&self, start: u64) -> Result<u64, Self::Error>;
}

/// [`PairedMap`] by the type's own methods of the same names.
macro_rules! paired_map {
    ($ty:ty, $error:ty) => {
        // Inlined into the measured loops on both sides alike: an adapter frame on one side
        // only (the store's handle bodies are larger, so the compiler kept its adapter out
        // of line) would be measured as the store's cost.
        impl PairedMap for $ty {
            type Error = $error;
            #[inline]
            fn insert(&self, key: u64, value: u64) -> Result<bool, $error> {
                <$ty>::insert(self, key, value)
            }
            #[inline]
            fn get(&self, key: u64) -> Result<Option<u64>, $error> {
                <$ty>::get(self, key)
            }
            #[inline]
            fn remove(&self, key: u64) -> Result<Option<u64>, $error> {
                <$ty>::remove(self, key)
            }
        }
    };
}

paired_map!(ccehbench::Table, CcehError);
paired_map!(fastfairbench::Tree, FastFairError);
paired_map!(HashMap, pmem_structures::Error);
paired_map!(BTreeMap, pmem_structures::Error);

impl PairedScan for fastfairbench::Tree {
    fn scan(&self, start: u64) -> Result<u64, FastFairError> {
        fastfairbench::scan_from(self, start)
    }
}

impl PairedScan for BTreeMap {
    fn scan(&self, start: u64) -> Result<u64, pmem_structures::Error> {
        let mut n = 0;
        for pair in self.range(start..).take(SCAN_KEYS) {
            let (k, v) = pair?;
            n += u64::from(v == ccehbench::value_of(k));
        }
        Ok(n)
    }
}

/// Insert every key with its value; how many were new.
pub(super) fn insert_each<M: PairedMap>(map: &M, keys: &[u64]) -> Result<u64, M::Error> {
    let mut inserted = 0;
    for &k in keys {
        inserted += u64::from(map.insert(k, ccehbench::value_of(k))?);
    }
    Ok(inserted)
}

/// Look every key up; how many were found with their value.
pub(super) fn get_each<M: PairedMap>(map: &M, keys: &[u64]) -> Result<u64, M::Error> {
    let mut hits = 0;
    for &k in keys {
        hits += u64::from(map.get(k)? == Some(ccehbench::value_of(k)));
    }
    Ok(hits)
}

/// Remove every key; how many were there.
pub(super) fn remove_each<M: PairedMap>(map: &M, keys: &[u64]) -> Result<u64, M::Error> {
    let mut removed = 0;
    for &k in keys {
        removed += u64::from(map.remove(k)?.is_some());
    }
    Ok(removed)
}

/// Scan from every start; the pairs read in all.
pub(super) fn scan_each<M: PairedScan>(map: &M, starts: &[u64]) -> Result<u64, M::Error> {
    let mut read = 0;
    for &s in starts {
        read += map.scan(s)?;
    }
    Ok(read)
}

/// What one side did on one chunk of a phase: its time, and how many of its operations did
/// what the phase counts.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timed {
    pub(super) secs: f64,
    pub(super) done: u64,
}

/// `f`, timed; `f` returns how many of its operations did what the phase counts.
pub(super) fn timed<E>(f: impl FnOnce() -> Result<u64, E>) -> Result<Timed, StoreBenchError>
where
    StoreBenchError: From<E>,
{
    let start = Instant::now();
    let done = f()?;
    Ok(Timed {
        secs: start.elapsed().as_secs_f64(),
        done,
    })
}

/// Whether chunk `chunk` of repetition `rep` runs on the raw side first: the order alternates
/// from chunk to chunk, and each repetition starts where the last one did not.
fn raw_first(rep: usize, chunk: usize) -> bool {
    (rep + chunk).is_multiple_of(2)
}

/// One operation's rates on both sides, over the repetitions.
#[derive(Clone, Debug)]
pub(super) struct Pair {
    structure: &'static str,
    operation: String,
    ops: u64,
    raw: Vec<f64>,
    store: Vec<f64>,
    /// Store/raw of each repetition: the median of its chunks' ratios.
    ratios: Vec<f64>,
}

impl Pair {
    pub(super) fn new(structure: Structure, operation: String, ops: u64) -> Pair {
        Pair {
            structure: structure.name(),
            operation,
            ops,
            raw: Vec::new(),
            store: Vec::new(),
            ratios: Vec::new(),
        }
    }

    /// The name of the operation on one side, for error messages.
    pub(super) fn label(&self, side: &str) -> String {
        format!("{} {} ({side})", self.structure, self.operation)
    }

    /// Repetition `rep` of the phase: `items` cut into [`CHUNKS`] chunks, each chunk run on
    /// both sides back to back, in an order alternating from chunk to chunk. Each side must do
    /// `what` `expected` times in all; its rate is the items over its summed time. The
    /// repetition's store/raw ratio is the median of its chunks' ratios (raw time over store
    /// time, the same operations on both): a burst of noise on the machine that hits one
    /// side of one chunk moves a sum, not a median.
    pub(super) fn measure<T>(
        &mut self,
        rep: usize,
        items: &[T],
        expected: u64,
        what: &'static str,
        mut raw: impl FnMut(&[T]) -> Result<Timed, StoreBenchError>,
        mut store: impl FnMut(&[T]) -> Result<Timed, StoreBenchError>,
    ) -> Result<(), StoreBenchError> {
        // Time and count of the raw side, then of the store side.
        let mut sides = [(0f64, 0u64); 2];
        let mut chunk_ratios = Vec::with_capacity(CHUNKS);
        let per_chunk = items.len().div_ceil(CHUNKS).max(1);
        for (c, chunk) in items.chunks(per_chunk).enumerate() {
            let order = if raw_first(rep, c) {
                [false, true]
            } else {
                [true, false]
            };
            let mut secs = [0f64; 2];
            for on_store in order {
                let t = if on_store { store(chunk)? } else { raw(chunk)? };
                let side = &mut sides[usize::from(on_store)];
                side.0 += t.secs;
                side.1 += t.done;
                secs[usize::from(on_store)] = t.secs;
            }
            chunk_ratios.push(secs[0] / secs[1]);
        }
        for (name, (_, done)) in ["raw", "store"].into_iter().zip(sides) {
            check_count(|| self.label(name), expected, done, what)?;
        }
        let n = items.len() as f64;
        self.raw.push(n / sides[0].0);
        self.store.push(n / sides[1].0);
        self.ratios.push(crate::measure::median(&chunk_ratios));
        Ok(())
    }

    pub(super) fn row(&self) -> StorePathRow {
        let ratio_samples = self.ratios.clone();
        let ratio = crate::measure::median(&ratio_samples);
        StorePathRow {
            structure: self.structure.to_string(),
            operation: self.operation.clone(),
            ops: self.ops,
            raw_ops_per_sec: crate::measure::median(&self.raw),
            store_ops_per_sec: crate::measure::median(&self.store),
            ratio,
            within_target: ratio >= TARGET_RATIO,
            raw_samples: self.raw.clone(),
            store_samples: self.store.clone(),
            ratio_samples,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_is_the_median_of_the_repetitions_ratios() {
        let mut pair = Pair::new(Structure::Cceh, "x".into(), 1);
        let items = [0u8; 32];
        // Seconds per chunk on each side, by repetition: the raw side 1/16 s per chunk.
        for (rep, store_secs) in [0.9, 1.1, 1.0].into_iter().enumerate() {
            let secs = |s: f64| {
                move |c: &[u8]| -> Result<Timed, StoreBenchError> {
                    Ok(Timed {
                        secs: s / CHUNKS as f64,
                        done: c.len() as u64,
                    })
                }
            };
            pair.measure(rep, &items, 32, "done", secs(1.0), secs(store_secs))
                .unwrap();
        }
        let row = pair.row();
        let rounded: Vec<f64> = row
            .ratio_samples
            .iter()
            .map(|r| (r * 1e6).round() / 1e6)
            .collect();
        assert_eq!(
            rounded,
            [1.0f64 / 0.9, 1.0 / 1.1, 1.0].map(|r| (r * 1e6).round() / 1e6)
        );
        assert!((row.ratio - 1.0).abs() < 1e-9, "{row:?}");
        assert!(row.within_target);
        assert!((row.raw_ops_per_sec - 32.0).abs() < 1e-9, "{row:?}");
    }

    #[test]
    fn one_slow_chunk_moves_the_rates_but_not_the_ratio() {
        let mut pair = Pair::new(Structure::Cceh, "x".into(), 1);
        let items: Vec<u32> = (0..CHUNKS as u32).collect();
        let raw =
            |_: &[u32]| -> Result<Timed, StoreBenchError> { Ok(Timed { secs: 1.0, done: 1 }) };
        // Chunk 0 of the store side is preempted: ten times slower.
        let store = |c: &[u32]| -> Result<Timed, StoreBenchError> {
            Ok(Timed {
                secs: if c[0] == 0 { 10.0 } else { 1.0 },
                done: 1,
            })
        };
        pair.measure(0, &items, CHUNKS as u64, "done", raw, store)
            .unwrap();
        let row = pair.row();
        assert_eq!(row.ratio, 1.0, "{row:?}");
        assert!(row.store_ops_per_sec < 0.7 * row.raw_ops_per_sec, "{row:?}");
    }

    #[test]
    fn a_side_that_miscounts_fails_the_phase() {
        let mut pair = Pair::new(Structure::FastFair, "get".into(), 4);
        let ok = |c: &[u64]| -> Result<Timed, StoreBenchError> {
            Ok(Timed {
                secs: 1.0,
                done: c.len() as u64,
            })
        };
        let short = |c: &[u64]| -> Result<Timed, StoreBenchError> {
            Ok(Timed {
                secs: 1.0,
                done: c.len() as u64 - 1,
            })
        };
        let e = pair
            .measure(0, &[1, 2, 3, 4], 4, "found", ok, short)
            .unwrap_err();
        assert_eq!(e.to_string(), "FAST&FAIR get (store): 0 of 4 found");
        assert!(pair.raw.is_empty() && pair.store.is_empty());
    }
}
