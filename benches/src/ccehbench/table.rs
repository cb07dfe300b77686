//! The CCEH table as both benchmarks drive it: a fresh heap per table ([`CcehHeap`]), the
//! values stored, and the one- or multi-thread drivers of whole key sets.

use std::path::Path;

use pmem_ordering::{Granularity, Hardware};
use pmem_structures::raw::cceh::{BatchOptions, Cceh, CcehConfig, CcehError};
use pmem_undo_log::Heap;

use super::{CCEH_POLICY, HELPER_DEPTH, POOL_BYTES_PER_KEY, TOUCH_BYTES_PER_KEY};
use crate::poolfile::{HeapFile, PoolFile, SetupError};

/// The table type measured: on the hardware backend, its heap holding its pool in an `Arc`.
pub type Table = Cceh<Hardware>;

/// Size of the pool file for a table of `keys` keys: [`POOL_BYTES_PER_KEY`] per key, rounded
/// up to a power of two, at least 16 MiB (128 MiB for 1M keys, 2 GiB for 16M).
pub fn pool_size(keys: u64) -> u64 {
    (keys.saturating_mul(POOL_BYTES_PER_KEY))
        .next_power_of_two()
        .max(16 << 20)
}

/// The value stored with `key`.
pub fn value_of(key: u64) -> u64 {
    key.rotate_left(32) ^ 0x5A5A_5A5A_5A5A_5A5A
}

/// `(key, value_of(key))` for every key.
pub fn items(keys: &[u64]) -> Vec<(u64, u64)> {
    keys.iter().map(|&k| (k, value_of(k))).collect()
}

/// A fresh heap in its own pool file, for one table: the file is removed when this is dropped.
#[derive(Debug)]
pub struct CcehHeap(HeapFile);

impl CcehHeap {
    /// Create the pool file `file_name` in `dir` (a stale one is replaced), sized for `keys`
    /// keys ([`pool_size`]), with `granularity` forced (`None`: detected), and format a heap in
    /// it; [`TOUCH_BYTES_PER_KEY`] per key of it are written first (see
    /// [`HeapFile::create_touching`]).
    pub fn create(
        dir: &Path,
        file_name: &str,
        keys: u64,
        granularity: Option<Granularity>,
    ) -> Result<CcehHeap, SetupError> {
        HeapFile::create_touching(
            dir,
            file_name,
            pool_size(keys),
            keys.saturating_mul(TOUCH_BYTES_PER_KEY),
            granularity,
            CCEH_POLICY,
        )
        .map(CcehHeap)
    }

    /// The heap.
    pub fn heap(&self) -> &Heap {
        self.0.heap()
    }

    /// The pool file.
    pub fn file(&self) -> &PoolFile {
        self.0.file()
    }

    /// Make an empty table (default shape) with its root in the pool's root object.
    pub fn table(&self) -> Result<Table, CcehError> {
        Cceh::create(
            self.heap(),
            self.heap().pool().root_offset(),
            CcehConfig::default(),
        )
    }

    /// Bytes the heap has allocated (the table's directory and segments).
    pub fn bytes_allocated(&self) -> u64 {
        self.0.bytes_allocated()
    }
}

/// How a batched load looks ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookAhead {
    /// Neither helper thread nor prefetch.
    Off,
    /// The speculative helper thread, [`HELPER_DEPTH`] keys ahead.
    Helper,
    /// The inserting thread prefetches the path of the key [`HELPER_DEPTH`] ahead itself.
    Inline,
}

impl LookAhead {
    /// Every variant, in report order.
    pub const ALL: [LookAhead; 3] = [LookAhead::Off, LookAhead::Helper, LookAhead::Inline];

    /// The batch options of this variant.
    pub fn options(self) -> BatchOptions {
        BatchOptions {
            helper: self == LookAhead::Helper,
            inline_prefetch: self == LookAhead::Inline,
            depth: HELPER_DEPTH,
        }
    }

    /// A short name for benchmark ids.
    pub fn name(self) -> &'static str {
        match self {
            LookAhead::Off => "helper off",
            LookAhead::Helper => "helper on",
            LookAhead::Inline => "inline prefetch",
        }
    }
}

/// The batch options of the helper thread off (`false`) or on (`true`, [`HELPER_DEPTH`]).
pub fn batch_options(helper: bool) -> BatchOptions {
    if helper {
        LookAhead::Helper.options()
    } else {
        LookAhead::Off.options()
    }
}

/// `items` split into `threads` nearly equal consecutive parts.
fn parts<T>(items: &[T], threads: usize) -> impl Iterator<Item = &[T]> {
    let per = items.len().div_ceil(threads.max(1)).max(1);
    items.chunks(per)
}

/// Run `f` on each of `threads` parts of `items` (on this thread if `threads` is 1, else on
/// as many scoped threads); the sum of what the calls return.
fn split<T: Sync, E: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&[T]) -> Result<u64, E> + Sync,
) -> Result<u64, E> {
    if threads <= 1 {
        return f(items);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = parts(items, threads)
            .map(|part| s.spawn(|| f(part)))
            .collect();
        let mut total = 0;
        for h in handles {
            total += h
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        }
        Ok(total)
    })
}

/// Insert `items` with [`Cceh::insert_batch`] (`options`), split among `threads` threads that
/// share the table; how many keys were new.
pub fn insert_all(
    table: &Table,
    items: &[(u64, u64)],
    options: BatchOptions,
    threads: usize,
) -> Result<u64, CcehError> {
    split(items, threads, |part| table.insert_batch(part, options))
}

/// Look every key of `keys` up, split among `threads` threads; how many were found with their
/// [`value_of`].
pub fn get_all(table: &Table, keys: &[u64], threads: usize) -> Result<u64, CcehError> {
    split(keys, threads, |part| {
        let mut hits = 0;
        for &k in part {
            if table.get(k)? == Some(value_of(k)) {
                hits += 1;
            }
        }
        Ok(hits)
    })
}

/// Remove every key of `keys`, split among `threads` threads; how many were there.
pub fn remove_all(table: &Table, keys: &[u64], threads: usize) -> Result<u64, CcehError> {
    split(keys, threads, |part| {
        let mut removed = 0;
        for &k in part {
            if table.remove(k)?.is_some() {
                removed += 1;
            }
        }
        Ok(removed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_everything_once() {
        let xs: Vec<u32> = (0..11).collect();
        let p: Vec<&[u32]> = parts(&xs, 2).collect();
        assert_eq!(p.len(), 2);
        assert_eq!(p.concat(), xs);
        assert_eq!(parts(&xs, 1).count(), 1);
    }

    #[test]
    fn pool_sizes_are_powers_of_two_with_room() {
        assert_eq!(pool_size(1_000_000), 128 << 20);
        assert_eq!(pool_size(100), 16 << 20);
        assert!(pool_size(16_000_000) >= 16_000_000 * 64);
    }
}
