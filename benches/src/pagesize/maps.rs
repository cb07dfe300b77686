//! The page-size section's structures: each on its own pool of the side measured (anonymous
//! memory on 4 KiB or transparent 2 MiB pages, or a file on hugetlbfs), loaded with the YCSB
//! records and driven through the YCSB [`Target`] interface.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use pmem_ordering::pool::pages::HUGE_PAGE_BYTES;
use pmem_ordering::pool::{ObtainedPages, PageSize};
use pmem_ordering::{Granularity, Pool, PoolOptions};
use pmem_structures::raw::cceh::{Cceh, CcehConfig};
use pmem_structures::raw::fastfair::{FastFair, FastFairConfig, ShiftPolicy};
use pmem_structures::raw::U64Map;
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

use super::{PageBenchError, PoolPages, SEED};
use crate::ycsb::{
    plan, run_plan, KeyDistribution, KeySpace, Structure, Target, TargetError, Variant, Workload,
};

/// The pool's layout name.
const LAYOUT: &str = "pmem-bench-pages";
/// Pool bytes per record (as the structure sections size their pools), before rounding.
const POOL_BYTES_PER_RECORD: u64 = 128;

/// A structure's map, driven through the YCSB [`Target`] interface.
struct MapTarget<M>(M);

impl<M> Target for MapTarget<M>
where
    M: U64Map + Sync,
    TargetError: From<M::Error>,
{
    fn insert(&self, key: u64, value: u64) -> Result<bool, TargetError> {
        Ok(self.0.insert(key, value)?)
    }

    fn read(&self, key: u64) -> Result<Option<u64>, TargetError> {
        Ok(self.0.get(key)?)
    }

    fn update(&self, key: u64, value: u64) -> Result<bool, TargetError> {
        Ok(self.0.upsert(key, value)?.is_some())
    }

    fn scan(&self, _start: u64, _len: usize) -> Result<usize, TargetError> {
        Err(TargetError::ScanUnsupported {
            structure: "the page-size section's maps",
        })
    }
}

/// The structures of the section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagedMap {
    /// CCEH, default shape.
    Cceh,
    /// FAST&FAIR with FAST shifts.
    FastFair,
}

impl PagedMap {
    /// Both, in report order.
    pub const ALL: [PagedMap; 2] = [PagedMap::Cceh, PagedMap::FastFair];

    /// The structure, as the YCSB driver names it.
    pub fn structure(self) -> Structure {
        match self {
            PagedMap::Cceh => Structure::Cceh,
            PagedMap::FastFair => Structure::FastFair,
        }
    }

    /// The variant the YCSB driver names its rows by.
    pub fn variant(self) -> Variant {
        match self {
            PagedMap::Cceh => Variant::CcehHelperOff,
            PagedMap::FastFair => Variant::FastFair(ShiftPolicy::Fast),
        }
    }

    /// The name in reports.
    pub fn name(self) -> &'static str {
        self.structure().name()
    }
}

/// How one side of the comparison maps its pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Anonymous memory on 4 KiB pages.
    Base4K,
    /// Anonymous memory, 2 MiB-aligned and advised `MADV_HUGEPAGE` (transparent huge pages).
    Transparent2M,
    /// A pool file on a hugetlbfs mount (2 MiB pages or none).
    Hugetlbfs2M,
}

impl Side {
    /// Every side, in column order.
    pub const ALL: [Side; 3] = [Side::Base4K, Side::Transparent2M, Side::Hugetlbfs2M];

    /// The sides that map pools with `size` pages.
    pub fn of(size: PageSize) -> &'static [Side] {
        match size {
            PageSize::Base4K => &[Side::Base4K],
            PageSize::Huge2M => &[Side::Transparent2M, Side::Hugetlbfs2M],
        }
    }

    /// The page size it asks for.
    pub fn page_size(self) -> PageSize {
        match self {
            Side::Base4K => PageSize::Base4K,
            Side::Transparent2M | Side::Hugetlbfs2M => PageSize::Huge2M,
        }
    }

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Side::Base4K => "4k",
            Side::Transparent2M => "2m",
            Side::Hugetlbfs2M => "2m hugetlbfs file",
        }
    }

    /// Its index in [`Side::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A heap on one side's pool, and its pool file (hugetlbfs), removed after the heap drops.
pub(super) struct SideHeap {
    pub(super) heap: Heap,
    _file: RemovedOnDrop,
}

/// A pool file this section made, removed when it drops, whatever failed in between.
struct RemovedOnDrop(Option<PathBuf>);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        if let Some(path) = &self.0 {
            // Unlinking a mapped file is fine: its pages go when the last mapping does.
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A pool of `bytes` for `side` (a file in `hugetlbfs` for [`Side::Hugetlbfs2M`]), every
/// page written once, with a heap.
pub(super) fn side_heap(
    bytes: u64,
    side: Side,
    hugetlbfs: Option<&Path>,
) -> Result<SideHeap, PageBenchError> {
    let options = PoolOptions::new()
        .granularity(Granularity::Emulated)
        .page_size(side.page_size());
    let pool_error = |source| PageBenchError::Pool {
        page_size: side.name(),
        source,
    };
    let (pool, file) = match (side, hugetlbfs) {
        (Side::Hugetlbfs2M, Some(mount)) => {
            // One file per pool of this process.
            static FILES: AtomicUsize = AtomicUsize::new(0);
            let path = mount.join(format!(
                "pmem-bench-pages-{}-{}.pool",
                std::process::id(),
                FILES.fetch_add(1, Ordering::Relaxed)
            ));
            let pool = Pool::create(&path, LAYOUT, bytes, &options).map_err(pool_error)?;
            (pool, RemovedOnDrop(Some(path)))
        }
        (Side::Hugetlbfs2M, None) => return Err(PageBenchError::NoHugetlbfs),
        _ => (
            Pool::anonymous(LAYOUT, bytes, &options).map_err(pool_error)?,
            RemovedOnDrop(None),
        ),
    };
    let zeros = vec![0u8; 1 << 20];
    let mut offset = pool.heap_offset();
    while offset < bytes {
        let n = zeros.len().min((bytes - offset) as usize);
        let _ = pool.write(offset, &zeros[..n]).map_err(pool_error)?;
        offset += n as u64;
    }
    let heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
    Ok(SideHeap { heap, _file: file })
}

/// Pool size for `records` records: a power of two of at least 16 MiB (so a whole number of
/// 2 MiB pages).
pub fn pool_bytes(records: u64) -> u64 {
    records
        .saturating_mul(POOL_BYTES_PER_RECORD)
        .next_power_of_two()
        .max(16 << 20)
}

/// A loaded structure on one page size, borrowing its heap.
pub(super) struct Loaded<'h> {
    pub(super) structure: PagedMap,
    pub(super) side: Side,
    pub(super) target: Box<dyn Target + 'h>,
}

/// Make `structure` in `heap` (on `side`'s pool) and load it with `records` YCSB records; what
/// the kernel gave the pool.
pub(super) fn load<'h>(
    heap: &'h Heap,
    structure: PagedMap,
    side: Side,
    records: u64,
) -> Result<(Loaded<'h>, PoolPages), PageBenchError> {
    let root = heap.pool().root_offset();
    let target: Box<dyn Target + 'h> = match structure {
        PagedMap::FastFair => {
            let config = FastFairConfig {
                policy: ShiftPolicy::Fast,
                ..FastFairConfig::default()
            };
            Box::new(MapTarget(
                FastFair::create(heap, root, config).map_err(TargetError::from)?,
            ))
        }
        PagedMap::Cceh => Box::new(MapTarget(
            Cceh::create(heap, root, CcehConfig::default()).map_err(TargetError::from)?,
        )),
    };
    let load_plan = plan(
        Workload::Load,
        KeyDistribution::Uniform,
        KeySpace {
            loaded: records,
            next_insert: 0,
        },
        0,
        1,
        SEED,
    )?;
    run_plan(
        &*target,
        structure.variant(),
        Workload::Load,
        None,
        &load_plan,
        false,
    )?;
    let pool = heap.pool();
    let (pages, obtained) = match pool.pages() {
        Ok(p) => (p, p.describe()),
        Err(e) => (ObtainedPages::default(), format!("not read back: {e}")),
    };
    Ok((
        Loaded {
            structure,
            side,
            target,
        },
        PoolPages {
            structure: structure.name().to_string(),
            requested: side.name().to_string(),
            pool_bytes: pool.size(),
            huge_bytes: pages.huge_bytes,
            resident_bytes: pages.resident_bytes,
            obtained,
            aligned_2m: pool.base_address().is_multiple_of(HUGE_PAGE_BYTES as usize),
        },
    ))
}
