//! Page size of a pool's mapping: 4 KiB or 2 MiB pages, and reading back what the kernel gave.
//!
//! Page size dominates the performance of Optane DC memory (Optane page size, Sec. 3): with 4 KiB
//! pages a random access over a large pool misses the TLB; with 2 MiB pages it rarely does.
//!
//! * An anonymous pool asked for [`PageSize::Huge2M`] is mapped 2 MiB-aligned and advised
//!   `MADV_HUGEPAGE`, so that transparent huge pages (in `madvise` mode on most hosts) back it.
//!   The kernel may still hand out 4 KiB pages (no free 2 MiB frame): [`Pool::pages`] says what
//!   it gave.
//! * A pool file asked for 2 MiB pages must be on hugetlbfs, which maps it with 2 MiB pages or
//!   not at all; anywhere else it is refused with [`PoolError::PageSizeUnavailable`], since a
//!   page-cache file mapped shared gets 4 KiB pages whatever it is advised. This module never
//!   changes the host's settings.
//!
//! [`parse_smaps`] reads `/proc/self/smaps` for a mapping's range: `KernelPageSize` (2048 kB
//! for hugetlbfs), `AnonHugePages` (transparent huge pages) and the resident bytes.

use std::fs::File;
use std::path::Path;

use super::{Pool, PoolError};
use crate::backend::Backend;

/// A huge page's size on x86-64.
pub const HUGE_PAGE_BYTES: u64 = 2 << 20;
/// A base page's size on x86-64.
pub const BASE_PAGE_BYTES: u64 = 4 << 10;

/// hugetlbfs's `f_type` in `statfs`.
const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
/// Where the host says whether transparent huge pages are on.
const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// The pages a pool asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PageSize {
    /// 4 KiB base pages (what an ordinary mapping gets).
    #[default]
    Base4K,
    /// 2 MiB huge pages: transparent huge pages for anonymous pools, hugetlbfs for files.
    Huge2M,
}

impl PageSize {
    /// Both sizes, smallest first.
    pub const ALL: [PageSize; 2] = [PageSize::Base4K, PageSize::Huge2M];

    /// Bytes per page.
    pub fn bytes(self) -> u64 {
        match self {
            PageSize::Base4K => BASE_PAGE_BYTES,
            PageSize::Huge2M => HUGE_PAGE_BYTES,
        }
    }

    /// The name on command lines and in reports: `4k` or `2m`.
    pub fn name(self) -> &'static str {
        match self {
            PageSize::Base4K => "4k",
            PageSize::Huge2M => "2m",
        }
    }
}

impl std::str::FromStr for PageSize {
    type Err = PageSizeParseError;

    fn from_str(s: &str) -> Result<PageSize, PageSizeParseError> {
        match s.to_ascii_lowercase().as_str() {
            "4k" | "4kib" | "4096" => Ok(PageSize::Base4K),
            "2m" | "2mib" | "2097152" => Ok(PageSize::Huge2M),
            _ => Err(PageSizeParseError {
                given: s.to_string(),
            }),
        }
    }
}

/// A page size that is neither 4 KiB nor 2 MiB.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("page size {given:?} is not one of 4k, 2m")]
pub struct PageSizeParseError {
    /// What was given.
    pub given: String,
}

/// What the kernel backs a mapping with, from `/proc/self/smaps`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObtainedPages {
    /// `KernelPageSize` of the mapping in bytes: 2 MiB on hugetlbfs, 4 KiB otherwise (also
    /// under transparent huge pages, which `huge_bytes` counts).
    pub kernel_page_size: u64,
    /// Bytes resident in memory (`Rss`, plus the hugetlbfs pages, which `Rss` leaves out).
    pub resident_bytes: u64,
    /// Bytes of those backed by 2 MiB pages (`AnonHugePages`, `ShmemPmdMapped`,
    /// `FilePmdMapped`, or every hugetlbfs page).
    pub huge_bytes: u64,
    /// Bytes of the smaps entries that cover the mapping. The kernel may merge a mapping with
    /// an adjacent one of the same kind, and smaps then counts both: this is larger than
    /// `mapping_bytes` in that case, and the other fields count the neighbour's pages too.
    pub covered_bytes: u64,
    /// Bytes of the range asked about.
    pub mapping_bytes: u64,
}

impl ObtainedPages {
    /// The share of the resident bytes on 2 MiB pages (0 when nothing is resident).
    pub fn huge_share(&self) -> f64 {
        if self.resident_bytes == 0 {
            0.0
        } else {
            self.huge_bytes as f64 / self.resident_bytes as f64
        }
    }

    /// The page size that backs most of the resident bytes.
    pub fn dominant(&self) -> PageSize {
        if self.kernel_page_size >= HUGE_PAGE_BYTES || self.huge_share() > 0.5 {
            PageSize::Huge2M
        } else {
            PageSize::Base4K
        }
    }

    /// One line for reports, e.g. `2 MiB pages for 100% of 64 MiB resident (transparent huge
    /// pages)`, saying so when smaps counted an adjacent mapping too.
    pub fn describe(&self) -> String {
        let pages = self.describe_pages();
        if self.covered_bytes > self.mapping_bytes {
            format!(
                "{pages}, counted over {} MiB: smaps merged the pool with an adjacent mapping",
                self.covered_bytes >> 20
            )
        } else {
            pages
        }
    }

    fn describe_pages(&self) -> String {
        let mib = self.resident_bytes as f64 / f64::from(1u32 << 20);
        if self.kernel_page_size >= HUGE_PAGE_BYTES {
            format!("2 MiB hugetlbfs pages, {mib:.0} MiB resident")
        } else if self.huge_bytes > 0 {
            format!(
                "2 MiB pages for {:.0}% of {mib:.0} MiB resident (transparent huge pages)",
                100.0 * self.huge_share()
            )
        } else {
            format!("4 KiB pages, {mib:.0} MiB resident")
        }
    }
}

/// Why the pages of a mapping could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum SmapsError {
    /// `/proc/self/smaps` could not be read.
    #[error("cannot read /proc/self/smaps: {0}")]
    Read(#[from] std::io::Error),
    /// No entry of smaps covers the mapping.
    #[error("no entry of smaps covers {start:#x}..{end:#x}")]
    NotMapped {
        /// The mapping's first byte.
        start: usize,
        /// One past its last byte.
        end: usize,
    },
    /// A line smaps should not have.
    #[error("malformed smaps line {line}: {text:?}")]
    Malformed {
        /// Its number, from 1.
        line: usize,
        /// The line.
        text: String,
    },
}

/// The pages backing `[start, start + len)`, summed over the smaps entries (in `text`, the
/// contents of `/proc/<pid>/smaps`) that overlap it.
pub fn parse_smaps(text: &str, start: usize, len: usize) -> Result<ObtainedPages, SmapsError> {
    let end = start.saturating_add(len);
    let mut pages = ObtainedPages {
        mapping_bytes: len as u64,
        ..ObtainedPages::default()
    };
    let mut inside = false;
    let mut found = false;
    let mut entry_page = 0u64;
    let mut entry_hugetlb = 0u64;
    for (i, line) in text.lines().enumerate() {
        let malformed = || SmapsError::Malformed {
            line: i + 1,
            text: line.to_string(),
        };
        if let Some((lo, hi)) = entry_range(line) {
            if inside {
                close_entry(&mut pages, entry_page, entry_hugetlb);
            }
            inside = lo < end && start < hi;
            if inside {
                found = true;
                pages.covered_bytes += (hi - lo) as u64;
            }
            (entry_page, entry_hugetlb) = (0, 0);
            continue;
        }
        if !inside {
            continue;
        }
        let Some((key, rest)) = line.split_once(':') else {
            return Err(malformed());
        };
        let mut words = rest.split_whitespace();
        let (Some(number), Some("kB"), None) = (words.next(), words.next(), words.next()) else {
            // Fields that are not sizes (VmFlags, THPeligible, ProtectionKey) are skipped.
            continue;
        };
        let bytes = number.parse::<u64>().map_err(|_| malformed())? << 10;
        match key {
            "KernelPageSize" => entry_page = bytes,
            "Rss" => pages.resident_bytes += bytes,
            "AnonHugePages" | "ShmemPmdMapped" | "FilePmdMapped" => pages.huge_bytes += bytes,
            "Shared_Hugetlb" | "Private_Hugetlb" => entry_hugetlb += bytes,
            _ => {}
        }
    }
    if inside {
        close_entry(&mut pages, entry_page, entry_hugetlb);
    }
    if !found {
        return Err(SmapsError::NotMapped { start, end });
    }
    Ok(pages)
}

/// Fold the per-entry fields of one smaps entry into `pages`.
fn close_entry(pages: &mut ObtainedPages, kernel_page_size: u64, hugetlb_bytes: u64) {
    pages.kernel_page_size = pages.kernel_page_size.max(kernel_page_size);
    // hugetlbfs pages are not in Rss; they are all huge.
    pages.resident_bytes += hugetlb_bytes;
    pages.huge_bytes += hugetlb_bytes;
}

/// The address range of an smaps entry's header line (`7f..-7f.. rw-p ...`), or `None` for a
/// field line.
fn entry_range(line: &str) -> Option<(usize, usize)> {
    let first = line.split_whitespace().next()?;
    let (lo, hi) = first.split_once('-')?;
    let lo = usize::from_str_radix(lo, 16).ok()?;
    let hi = usize::from_str_radix(hi, 16).ok()?;
    (lo <= hi).then_some((lo, hi))
}

/// The pages backing `[start, start + len)` of this process, read from `/proc/self/smaps`.
pub fn pages_of_range(start: usize, len: usize) -> Result<ObtainedPages, SmapsError> {
    let text = std::fs::read_to_string("/proc/self/smaps")?;
    parse_smaps(&text, start, len)
}

impl<B: Backend> Pool<B> {
    /// The pages the kernel backs this pool's mapping with now (see [`ObtainedPages`]). Pages
    /// not yet touched are not resident, so read this after the pool has been written.
    pub fn pages(&self) -> Result<ObtainedPages, SmapsError> {
        pages_of_range(self.map.base() as usize, self.map.len())
    }

    /// The address the pool is mapped at (for checking its alignment).
    pub fn base_address(&self) -> usize {
        self.map.base() as usize
    }
}

/// The reason 2 MiB pages cannot back anonymous memory on this host, or `None` if they can
/// (transparent huge pages in `always` or `madvise` mode, or a kernel that does not say).
pub fn thp_unavailable_reason() -> Option<String> {
    let text = std::fs::read_to_string(THP_ENABLED).ok()?;
    thp_mode_reason(&text)
}

/// [`thp_unavailable_reason`] for the contents of the `enabled` file (`always [madvise] never`).
fn thp_mode_reason(text: &str) -> Option<String> {
    let mode = text
        .split_whitespace()
        .find(|w| w.starts_with('['))
        .map(|w| w.trim_matches(['[', ']']))?;
    match mode {
        "always" | "madvise" => None,
        other => Some(format!(
            "transparent huge pages are {other:?} on this host ({THP_ENABLED}); \
             this library does not change the host's settings"
        )),
    }
}

/// Check that a pool of `size` bytes may be asked for `page_size` pages (anywhere).
pub(crate) fn check_size(size: u64, page_size: PageSize) -> Result<(), PoolError> {
    if !size.is_multiple_of(page_size.bytes()) {
        return Err(PoolError::PageSizeUnavailable {
            requested: page_size.name(),
            reason: format!(
                "the pool's size {size} is not a multiple of the page size {}",
                page_size.bytes()
            ),
        });
    }
    Ok(())
}

/// Check that the pool file `file` at `path`, of `size` bytes, can be mapped with `page_size`
/// pages: 2 MiB pages need hugetlbfs.
pub(crate) fn check_file(
    file: &File,
    path: &Path,
    size: u64,
    page_size: PageSize,
) -> Result<(), PoolError> {
    if page_size == PageSize::Base4K {
        return Ok(());
    }
    check_size(size, page_size)?;
    if is_hugetlbfs(file)? {
        return Ok(());
    }
    Err(PoolError::PageSizeUnavailable {
        requested: page_size.name(),
        reason: format!(
            "{} is not on hugetlbfs, and a shared file mapping elsewhere gets 4 KiB pages; \
             put the pool on a hugetlbfs mount whose host has reserved huge pages",
            path.display()
        ),
    })
}

fn is_hugetlbfs(file: &File) -> Result<bool, PoolError> {
    use std::os::fd::AsRawFd;
    let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: the descriptor is open (borrowed from `file`) and buf has room for one record.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), buf.as_mut_ptr()) };
    if rc != 0 {
        return Err(PoolError::PageSizeUnavailable {
            requested: PageSize::Huge2M.name(),
            reason: format!(
                "cannot tell the pool file's file system: {}",
                std::io::Error::last_os_error()
            ),
        });
    }
    // SAFETY: fstatfs returned 0, so it filled the record.
    let fs = unsafe { buf.assume_init() };
    // The field's type differs between targets (i64 on x86-64, narrower elsewhere).
    #[allow(clippy::unnecessary_cast)]
    let f_type = fs.f_type as i64;
    Ok(f_type == HUGETLBFS_MAGIC)
}

/// Anonymous memory of `len` bytes (a multiple of 2 MiB) at a 2 MiB-aligned address, advised
/// `MADV_HUGEPAGE`. Returns the base; the caller unmaps `[base, base + len)`.
pub(crate) fn map_anonymous_huge(len: usize) -> Result<*mut u8, PoolError> {
    if let Some(reason) = thp_unavailable_reason() {
        return Err(PoolError::PageSizeUnavailable {
            requested: PageSize::Huge2M.name(),
            reason,
        });
    }
    let align = HUGE_PAGE_BYTES as usize;
    let failed = |what: &str| PoolError::PageSizeUnavailable {
        requested: PageSize::Huge2M.name(),
        reason: format!("{what} failed: {}", std::io::Error::last_os_error()),
    };
    let reserve = len.checked_add(align).ok_or(PoolError::InvalidSize {
        size: len as u64,
        reason: "it does not fit this machine's address space".into(),
    })?;
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            reserve,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(failed("mmap"));
    }
    let raw = raw as usize;
    let base = raw.next_multiple_of(align);
    let head = base - raw;
    let tail = reserve - head - len;
    // Trim the over-reservation so that the mapping is exactly [base, base + len).
    // SAFETY: both ranges lie in the reservation just made and are not used by anything.
    unsafe {
        if head > 0 {
            libc::munmap(raw as *mut libc::c_void, head);
        }
        if tail > 0 {
            libc::munmap((base + len) as *mut libc::c_void, tail);
        }
    }
    // SAFETY: [base, base + len) is the mapping made above.
    if unsafe { libc::madvise(base as *mut libc::c_void, len, libc::MADV_HUGEPAGE) } != 0 {
        let error = failed("madvise(MADV_HUGEPAGE)");
        // SAFETY: the mapping is ours and nothing refers to it yet.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
        return Err(error);
    }
    Ok(base as *mut u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two entries as the kernel writes them: a THP-backed anonymous mapping and a hugetlbfs one.
    const FIXTURE: &str = "\
7f0000000000-7f0000800000 rw-p 00000000 00:00 0 
Size:               8192 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                8192 kB
Pss:                8192 kB
Anonymous:          8192 kB
AnonHugePages:      6144 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
THPeligible:    1
VmFlags: rd wr mr mw me ac hg
7f0000800000-7f0000801000 r--p 00000000 08:01 1234                       /usr/lib/libc.so.6
Size:                  4 kB
KernelPageSize:        4 kB
Rss:                   4 kB
AnonHugePages:         0 kB
7f4000000000-7f4000400000 rw-s 00000000 00:2f 77                         /mnt/huge/pool (deleted)
Size:               4096 kB
KernelPageSize:     2048 kB
MMUPageSize:        2048 kB
Rss:                   0 kB
AnonHugePages:         0 kB
Shared_Hugetlb:     4096 kB
Private_Hugetlb:       0 kB
VmFlags: rd wr sh mr mw me ms de ht
";

    #[test]
    fn the_parser_reads_transparent_huge_pages_of_an_anonymous_range() {
        let pages = parse_smaps(FIXTURE, 0x7f00_0000_0000, 8 << 20).unwrap();
        assert_eq!(pages.kernel_page_size, 4096);
        assert_eq!(pages.resident_bytes, 8 << 20);
        assert_eq!(pages.huge_bytes, 6 << 20);
        assert_eq!(pages.covered_bytes, 8 << 20);
        assert_eq!(pages.huge_share(), 0.75);
        assert_eq!(pages.dominant(), PageSize::Huge2M);
    }

    #[test]
    fn the_parser_reads_hugetlbfs_pages_outside_rss() {
        let pages = parse_smaps(FIXTURE, 0x7f40_0000_0000, 4 << 20).unwrap();
        assert_eq!(pages.kernel_page_size, 2 << 20);
        assert_eq!(pages.resident_bytes, 4 << 20);
        assert_eq!(pages.huge_bytes, 4 << 20);
        assert!(pages.describe().contains("hugetlbfs"));
    }

    #[test]
    fn the_parser_sums_only_the_entries_a_range_overlaps() {
        // The last page of the anonymous entry and the libc page.
        let pages = parse_smaps(FIXTURE, 0x7f00_007f_f000, 8192).unwrap();
        assert_eq!(pages.covered_bytes, (8 << 20) + 4096);
        assert_eq!(pages.mapping_bytes, 8192);
        assert!(
            pages.describe().contains("adjacent mapping"),
            "{}",
            pages.describe()
        );
        assert_eq!(pages.resident_bytes, (8 << 20) + 4096);
        let libc_only = parse_smaps(FIXTURE, 0x7f00_0080_0000, 4096).unwrap();
        assert_eq!(libc_only.dominant(), PageSize::Base4K);
        assert_eq!(libc_only.huge_bytes, 0);
    }

    #[test]
    fn the_parser_reports_an_unmapped_range_and_a_malformed_line() {
        assert!(matches!(
            parse_smaps(FIXTURE, 0x1000, 4096),
            Err(SmapsError::NotMapped { start: 0x1000, .. })
        ));
        let bad = "7f0000000000-7f0000001000 rw-p 00000000 00:00 0\nRss: many kB\n";
        assert!(matches!(
            parse_smaps(bad, 0x7f00_0000_0000, 4096),
            Err(SmapsError::Malformed { line: 2, .. })
        ));
        let no_colon = "7f0000000000-7f0000001000 rw-p 00000000 00:00 0\ngarbage\n";
        assert!(matches!(
            parse_smaps(no_colon, 0x7f00_0000_0000, 4096),
            Err(SmapsError::Malformed { line: 2, .. })
        ));
    }

    #[test]
    fn page_sizes_parse_from_their_names_and_refuse_others() {
        for size in PageSize::ALL {
            assert_eq!(size.name().parse::<PageSize>().unwrap(), size);
        }
        assert_eq!("2MiB".parse::<PageSize>().unwrap(), PageSize::Huge2M);
        let err = "1g".parse::<PageSize>().unwrap_err();
        assert_eq!(err.given, "1g");
    }

    #[test]
    fn the_thp_mode_is_read_from_the_bracketed_word() {
        assert_eq!(thp_mode_reason("always [madvise] never\n"), None);
        assert_eq!(thp_mode_reason("[always] madvise never\n"), None);
        let never = thp_mode_reason("always madvise [never]\n").unwrap();
        assert!(never.contains("\"never\""), "{never}");
    }

    #[test]
    fn sizes_that_are_not_whole_pages_are_refused() {
        assert!(check_size(3 << 20, PageSize::Huge2M).is_err());
        assert!(check_size(4 << 20, PageSize::Huge2M).is_ok());
        assert!(check_size(12 << 10, PageSize::Base4K).is_ok());
    }
}
