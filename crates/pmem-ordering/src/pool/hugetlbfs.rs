//! Finding a hugetlbfs mount that can hold a pool file on 2 MiB pages.
//!
//! A pool file gets 2 MiB pages only on hugetlbfs (see [`super::pages`]), and hugetlbfs hands
//! out only the huge pages the host has reserved (`vm.nr_hugepages`). This module reads what
//! the host offers, from `/proc/mounts` and the 2 MiB pool's counters in sysfs, and never
//! changes either: a host without a mount or without free pages gets the reason why.

use std::path::{Path, PathBuf};

use super::pages::HUGE_PAGE_BYTES;

/// Where the kernel lists mounted file systems.
const MOUNTS: &str = "/proc/mounts";
/// The free 2 MiB pages the host has reserved.
const FREE_2M_PAGES: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages";
/// The default huge page size, for mounts that do not name theirs.
const MEMINFO: &str = "/proc/meminfo";

/// Why no hugetlbfs mount can hold a pool here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HugetlbfsUnavailable {
    /// No hugetlbfs of 2 MiB pages is mounted.
    #[error(
        "no hugetlbfs of 2 MiB pages is mounted ({MOUNTS}); mount one (mount -t hugetlbfs \
         -o pagesize=2M none DIR) and reserve pages (vm.nr_hugepages) to use it"
    )]
    NoMount,
    /// A mount exists, but the host has too few free 2 MiB pages.
    #[error(
        "hugetlbfs is mounted at {mount}, but the host has {free} free 2 MiB pages and the \
         pool needs {needed} (vm.nr_hugepages reserves them; this library does not change \
         the host's settings)"
    )]
    TooFewPages {
        /// The mount found.
        mount: PathBuf,
        /// Free 2 MiB pages.
        free: u64,
        /// Pages the pool needs.
        needed: u64,
    },
    /// The host's counters could not be read.
    #[error("cannot read {path}: {reason}")]
    Unreadable {
        /// The file.
        path: &'static str,
        /// Why.
        reason: String,
    },
}

/// A writable hugetlbfs mount of 2 MiB pages with room for a pool of `bytes` bytes.
pub fn mount_for(bytes: u64) -> Result<PathBuf, HugetlbfsUnavailable> {
    let read = |path: &'static str| {
        std::fs::read_to_string(path).map_err(|e| HugetlbfsUnavailable::Unreadable {
            path,
            reason: e.to_string(),
        })
    };
    let default_page = std::fs::read_to_string(MEMINFO)
        .ok()
        .and_then(|text| default_huge_page_bytes(&text));
    let mounts = mounts_of_2m_pages(&read(MOUNTS)?, default_page);
    let mount = mounts
        .into_iter()
        .find(|m| is_writable_dir(m))
        .ok_or(HugetlbfsUnavailable::NoMount)?;
    // A kernel without 2 MiB huge pages has no such directory: no pages to use.
    let free = std::fs::read_to_string(FREE_2M_PAGES)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let needed = bytes.div_ceil(HUGE_PAGE_BYTES);
    if free < needed {
        return Err(HugetlbfsUnavailable::TooFewPages {
            mount,
            free,
            needed,
        });
    }
    Ok(mount)
}

fn is_writable_dir(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_dir() && !m.permissions().readonly())
}

/// The mount points of hugetlbfs file systems of 2 MiB pages in `mounts` (the text of
/// `/proc/mounts`). A mount without a `pagesize=` option uses the default huge page size,
/// `default_page` bytes (from `/proc/meminfo`; `None`: unknown, so such a mount is left out).
fn mounts_of_2m_pages(mounts: &str, default_page: Option<u64>) -> Vec<PathBuf> {
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_source, target, kind, options) = (
                fields.next()?,
                fields.next()?,
                fields.next()?,
                fields.next()?,
            );
            if kind != "hugetlbfs" {
                return None;
            }
            let page = options
                .split(',')
                .find_map(|o| o.strip_prefix("pagesize="))
                .map_or(default_page, parse_size)?;
            (page == HUGE_PAGE_BYTES).then(|| PathBuf::from(unescape_mount_path(target)))
        })
        .collect()
}

/// A size as mount options write it: `2M`, `2048k`, `1G` or bytes.
fn parse_size(text: &str) -> Option<u64> {
    let (digits, shift) = match text.as_bytes().last()? {
        b'k' | b'K' => (&text[..text.len() - 1], 10),
        b'm' | b'M' => (&text[..text.len() - 1], 20),
        b'g' | b'G' => (&text[..text.len() - 1], 30),
        _ => (text, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// `Hugepagesize:  2048 kB` of `/proc/meminfo`, in bytes.
fn default_huge_page_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("Hugepagesize:"))?;
    let kib = line.split_whitespace().nth(1)?.parse::<u64>().ok()?;
    kib.checked_mul(1024)
}

/// `/proc/mounts` writes a space, tab, newline and backslash in a path as octal escapes.
fn unescape_mount_path(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS_TEXT: &str = "\
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0
hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0
none /mnt/huge\\0401g hugetlbfs rw,relatime,pagesize=1024M 0 0
none /mnt/default hugetlbfs rw,relatime 0 0
";

    #[test]
    fn only_hugetlbfs_mounts_of_2_mib_pages_are_found() {
        assert_eq!(
            mounts_of_2m_pages(MOUNTS_TEXT, Some(2 << 20)),
            vec![
                PathBuf::from("/dev/hugepages"),
                PathBuf::from("/mnt/default")
            ]
        );
        // A default of 1 GiB pages, or an unknown default, leaves the unnamed mount out.
        assert_eq!(
            mounts_of_2m_pages(MOUNTS_TEXT, Some(1 << 30)),
            vec![PathBuf::from("/dev/hugepages")]
        );
        assert_eq!(
            mounts_of_2m_pages(MOUNTS_TEXT, None),
            vec![PathBuf::from("/dev/hugepages")]
        );
        assert!(mounts_of_2m_pages("tmpfs /tmp tmpfs rw 0 0\n", Some(2 << 20)).is_empty());
    }

    #[test]
    fn sizes_and_escaped_paths_read_as_the_kernel_writes_them() {
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("2048k"), Some(2 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(unescape_mount_path("/mnt/huge\\0401g"), "/mnt/huge 1g");
        assert_eq!(unescape_mount_path("/a\\134b"), "/a\\b");
        assert_eq!(unescape_mount_path("/trailing\\"), "/trailing\\");
        assert_eq!(
            default_huge_page_bytes("MemTotal: 1 kB\nHugepagesize:       2048 kB\n"),
            Some(2 << 20)
        );
        assert_eq!(default_huge_page_bytes("MemTotal: 1 kB\n"), None);
    }
}
