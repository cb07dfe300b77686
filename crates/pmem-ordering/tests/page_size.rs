//! Pools mapped with 4 KiB or 2 MiB pages: the options are checked, a 2 MiB pool is mapped
//! 2 MiB-aligned, and the pages the kernel gives are read back.

mod common;

use common::scratch_dir;
use pmem_ordering::pool::pages::{thp_unavailable_reason, HUGE_PAGE_BYTES};
use pmem_ordering::pool::PageSize;
use pmem_ordering::{Pool, PoolError, PoolOptions};

const POOL_BYTES: u64 = 8 << 20;

fn huge() -> PoolOptions {
    PoolOptions::new().page_size(PageSize::Huge2M)
}

#[test]
fn a_huge_page_pool_whose_size_is_not_whole_huge_pages_is_refused() {
    let err = Pool::anonymous("pages", (2 << 20) + 4096, &huge()).unwrap_err();
    assert!(
        matches!(
            err,
            PoolError::PageSizeUnavailable {
                requested: "2m",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn a_huge_page_pool_file_off_hugetlbfs_is_refused_and_left_behind_by_no_file() {
    let dir = scratch_dir();
    let path = dir.path().join("huge.pool");
    let err = Pool::create(&path, "pages", POOL_BYTES, &huge()).unwrap_err();
    match err {
        PoolError::PageSizeUnavailable { requested, reason } => {
            assert_eq!(requested, "2m");
            assert!(reason.contains("hugetlbfs"), "{reason}");
        }
        other => panic!("expected PageSizeUnavailable, got {other}"),
    }
    assert!(!path.exists(), "the refused pool file was not removed");
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn a_base_page_pool_file_reads_back_four_kib_pages() {
    let dir = scratch_dir();
    let path = dir.path().join("base.pool");
    let pool = Pool::create(&path, "pages", POOL_BYTES, &PoolOptions::new()).unwrap();
    let pages = pool.pages().unwrap();
    assert_eq!(pages.kernel_page_size, 4096);
    assert_eq!(pages.dominant(), PageSize::Base4K);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "trims a mapping, advises it and reads /proc/self/smaps, which Miri cannot"
)]
fn an_anonymous_huge_page_pool_is_mapped_two_mib_aligned_and_reads_back_what_it_got() {
    if let Some(reason) = thp_unavailable_reason() {
        let err = Pool::anonymous("pages", POOL_BYTES, &huge()).unwrap_err();
        assert!(
            matches!(err, PoolError::PageSizeUnavailable { .. }),
            "{err}"
        );
        println!("skipped the live huge-page check: {reason}");
        return;
    }
    let pool = Pool::anonymous("pages", POOL_BYTES, &huge()).unwrap();
    assert_eq!(pool.base_address() % HUGE_PAGE_BYTES as usize, 0);
    // Touch every page so that the kernel backs the whole pool.
    for offset in (pool.heap_offset()..POOL_BYTES).step_by(4096) {
        let _ = pool.write(offset, &[1]).unwrap();
    }
    let pages = pool.pages().unwrap();
    assert!(pages.covered_bytes >= POOL_BYTES, "{pages:?}");
    assert!(pages.resident_bytes >= POOL_BYTES, "{pages:?}");
    // The kernel may have no free 2 MiB frame (fragmented memory): then it falls back to 4 KiB
    // pages, which is what the read-back must then say. What it must never report is more huge
    // bytes than are resident, or a kernel page size other than 4 KiB for anonymous memory.
    assert_eq!(pages.kernel_page_size, 4096);
    assert!(pages.huge_bytes <= pages.resident_bytes);
    if pages.huge_bytes == 0 {
        println!(
            "THP is on, but the kernel gave no huge page: {}",
            pages.describe()
        );
    } else {
        assert_eq!(pages.huge_bytes % HUGE_PAGE_BYTES, 0, "{pages:?}");
        println!("obtained: {}", pages.describe());
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "reads /proc/self/smaps, which knows nothing of Miri's memory"
)]
fn an_anonymous_base_page_pool_gets_no_huge_pages() {
    let pool = Pool::anonymous("pages", POOL_BYTES, &PoolOptions::new()).unwrap();
    for offset in (pool.heap_offset()..POOL_BYTES).step_by(4096) {
        let _ = pool.write(offset, &[1]).unwrap();
    }
    let pages = pool.pages().unwrap();
    // THP in `madvise` mode gives huge pages only where asked; in `always` mode it may give
    // them anyway, so this holds only in `madvise` mode.
    let mode =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if mode.contains("[madvise]") || mode.contains("[never]") {
        assert_eq!(pages.huge_bytes, 0, "{pages:?}");
    } else {
        println!("THP mode {mode:?}: base pages may be merged into huge ones");
    }
    assert!(pages.resident_bytes > 0);
}
