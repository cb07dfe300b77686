//! The persistence domain of the memory behind a DAX file, read from sysfs.
//!
//! A file that accepts `MAP_SYNC` lives on an NVDIMM region, and the kernel says in
//! `<region>/persistence_domain` how far a store must travel to survive power loss:
//! `cpu_cache` (eADR: the CPU caches are flushed on power failure, so flushes can be skipped;
//! fences stay, to order stores) or `memory_controller` (ADR: lines must be written back).
//! libpmem2 reads the same files to choose between its byte and cache-line granularities.
//!
//! The region is found from the file's device: `<sysfs>/dev/block/<major>:<minor>` links to the
//! block device's directory, which sits under its namespace and region
//! (`.../ndbus0/region0/namespace0.0/block/pmem0`, a partition one level deeper). A device
//! that does not lead to a region (device-mapper, a file system without one backing device)
//! falls back to libpmem2's platform-wide rule: byte only if every region reads `cpu_cache`.
//! Anything unexpected gives cache-line granularity, which is correct on every platform that
//! accepts `MAP_SYNC`, only slower on eADR: detection never makes opening a pool fail.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::backend::{Granularity, GranularityChoice};

/// Where the kernel exposes sysfs.
const SYSFS: &str = "/sys";

/// The file in a region's sysfs directory naming its persistence domain.
const DOMAIN_FILE: &str = "persistence_domain";

/// The domain under which the CPU caches survive power loss (eADR).
const CPU_CACHE: &str = "cpu_cache";

/// More than any domain name the kernel writes; a longer file is not one of them.
const DOMAIN_READ_LIMIT: u64 = 64;

/// The granularity for `file`, which has just been mapped with `MAP_SYNC`: byte if its region's
/// persistence domain is the CPU cache, cache line otherwise.
pub(crate) fn granularity_of_dax_file(file: &File) -> GranularityChoice {
    let sysfs = Path::new(SYSFS);
    match file.metadata() {
        Ok(meta) => {
            let dev = meta.dev();
            granularity_of_device(sysfs, libc::major(dev), libc::minor(dev))
        }
        Err(e) => all_regions_rule(sysfs, &format!("the file's device is unknown ({e})")),
    }
}

/// The granularity for a file on block device `major:minor`, reading the sysfs tree at `sysfs`.
pub(crate) fn granularity_of_device(sysfs: &Path, major: u32, minor: u32) -> GranularityChoice {
    match region_of_device(sysfs, major, minor) {
        Some(region) => {
            let domain = read_domain(&region.join(DOMAIN_FILE));
            let granularity = match &domain {
                Ok(name) if name == CPU_CACHE => Granularity::Byte,
                _ => Granularity::CacheLine,
            };
            GranularityChoice {
                granularity,
                basis: format!(
                    "device {major}:{minor} is on NVDIMM region {}, whose {}",
                    region.display(),
                    describe_domain(&domain)
                ),
            }
        }
        None => all_regions_rule(
            sysfs,
            &format!("device {major}:{minor} leads to no NVDIMM region in sysfs"),
        ),
    }
}

/// The region directory above the device's sysfs directory: the nearest ancestor holding a
/// `persistence_domain` file, not above the sysfs root. `None` if the device is not in sysfs
/// or no ancestor has one.
fn region_of_device(sysfs: &Path, major: u32, minor: u32) -> Option<PathBuf> {
    // Canonical forms on both sides, so the walk can tell when it leaves the tree.
    let root = sysfs.canonicalize().ok()?;
    let device = root
        .join("dev/block")
        .join(format!("{major}:{minor}"))
        .canonicalize()
        .ok()?;
    device
        .ancestors()
        .take_while(|dir| dir.starts_with(&root) && *dir != root)
        .find(|dir| dir.join(DOMAIN_FILE).is_file())
        .map(Path::to_path_buf)
}

/// libpmem2's rule for a device without a region of its own: byte if there is at least one
/// region in `<sysfs>/bus/nd/devices` and every region's `persistence_domain` reads
/// `cpu_cache`; a region without the file (an older kernel) counts against.
fn all_regions_rule(sysfs: &Path, why: &str) -> GranularityChoice {
    let cache_line = |reason: String| GranularityChoice {
        granularity: Granularity::CacheLine,
        basis: format!("{why}; {reason}"),
    };
    let bus = sysfs.join("bus/nd/devices");
    let entries = match std::fs::read_dir(&bus) {
        Ok(entries) => entries,
        Err(e) => return cache_line(format!("no NVDIMM regions listed ({}: {e})", bus.display())),
    };
    let mut regions = 0usize;
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => return cache_line(format!("listing {} failed: {e}", bus.display())),
        };
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("region") {
            continue;
        }
        regions += 1;
        let domain = read_domain(&entry.path().join(DOMAIN_FILE));
        if !matches!(&domain, Ok(d) if d == CPU_CACHE) {
            return cache_line(format!(
                "region {}'s {}, so not every region is eADR",
                name.to_string_lossy(),
                describe_domain(&domain)
            ));
        }
    }
    if regions == 0 {
        return cache_line(format!("no NVDIMM regions in {}", bus.display()));
    }
    GranularityChoice {
        granularity: Granularity::Byte,
        basis: format!(
            "{why}; every region in {} ({regions} of them) has {DOMAIN_FILE} {CPU_CACHE} \
             (eADR), as libpmem2 requires",
            bus.display()
        ),
    }
}

/// Why a domain file could not be taken at its word.
#[derive(Debug)]
enum DomainUnreadable {
    Io(std::io::Error),
    /// Longer than any domain name: not one the kernel wrote.
    TooLong,
}

/// The contents of a `persistence_domain` file, without the trailing newline sysfs adds.
fn read_domain(path: &Path) -> Result<String, DomainUnreadable> {
    let file = File::open(path).map_err(DomainUnreadable::Io)?;
    let mut text = String::new();
    file.take(DOMAIN_READ_LIMIT + 1)
        .read_to_string(&mut text)
        .map_err(DomainUnreadable::Io)?;
    if text.len() as u64 > DOMAIN_READ_LIMIT {
        return Err(DomainUnreadable::TooLong);
    }
    Ok(text.trim_end().to_owned())
}

/// The end of a sentence saying what a domain file held.
fn describe_domain(domain: &Result<String, DomainUnreadable>) -> String {
    match domain {
        Ok(name) if name == CPU_CACHE => format!("{DOMAIN_FILE} is {CPU_CACHE} (eADR)"),
        Ok(name) if name.is_empty() => format!("{DOMAIN_FILE} is empty"),
        Ok(name) => format!("{DOMAIN_FILE} is {name:?}, not {CPU_CACHE}"),
        Err(DomainUnreadable::Io(e)) => format!("{DOMAIN_FILE} cannot be read ({e})"),
        Err(DomainUnreadable::TooLong) => {
            format!("{DOMAIN_FILE} is longer than any domain name")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A sysfs tree in a temporary directory, laid out like the kernel's, with relative links.
    struct FakeSysfs {
        dir: tempfile::TempDir,
    }

    impl FakeSysfs {
        fn new() -> FakeSysfs {
            let dir = tempfile::tempdir().unwrap();
            let sys = dir.path().join("sys");
            for sub in ["dev/block", "bus/nd/devices", "devices/platform"] {
                std::fs::create_dir_all(sys.join(sub)).unwrap();
            }
            FakeSysfs { dir }
        }

        fn root(&self) -> PathBuf {
            self.dir.path().join("sys")
        }

        /// Region `name` on `ndbus0`, listed on the nd bus, with `domain` as its
        /// `persistence_domain` contents (`None`: no such file). Returns its path below the root.
        fn region(&self, name: &str, domain: Option<&str>) -> String {
            let relative = format!("devices/platform/e820_pmem/ndbus0/{name}");
            let dir = self.root().join(&relative);
            std::fs::create_dir_all(&dir).unwrap();
            if let Some(domain) = domain {
                std::fs::write(dir.join(DOMAIN_FILE), domain).unwrap();
            }
            symlink(
                format!("../../../{relative}"),
                self.root().join("bus/nd/devices").join(name),
            )
            .unwrap();
            relative
        }

        /// A block device directory at `relative` (below the root), named by
        /// `dev/block/<major>:<minor>`.
        fn block_device(&self, relative: &str, major: u32, minor: u32) {
            std::fs::create_dir_all(self.root().join(relative)).unwrap();
            symlink(
                format!("../../{relative}"),
                self.root().join(format!("dev/block/{major}:{minor}")),
            )
            .unwrap();
        }

        /// `pmem<n>` in namespace `<n>.0` of `region`, as device 259:`n`.
        fn pmem_in(&self, region: &str, n: u32) {
            self.block_device(&format!("{region}/namespace{n}.0/block/pmem{n}"), 259, n);
        }

        fn verdict(&self, major: u32, minor: u32) -> GranularityChoice {
            granularity_of_device(&self.root(), major, minor)
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "builds a directory tree, which Miri cannot")]
    fn a_region_in_the_cpu_cache_domain_gives_byte_granularity() {
        let sys = FakeSysfs::new();
        let region = sys.region("region0", Some("cpu_cache\n"));
        sys.pmem_in(&region, 0);
        let choice = sys.verdict(259, 0);
        assert_eq!(choice.granularity, Granularity::Byte, "{}", choice.basis);
        for part in ["259:0", "region0", "cpu_cache"] {
            assert!(
                choice.basis.contains(part),
                "{part} missing: {}",
                choice.basis
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "builds a directory tree, which Miri cannot")]
    fn the_domain_is_read_with_or_without_its_newline_and_nothing_else_matches() {
        for (contents, expected) in [
            ("cpu_cache", Granularity::Byte),
            ("cpu_cache\n", Granularity::Byte),
            ("memory_controller\n", Granularity::CacheLine),
            ("cpu_cache_and_more\n", Granularity::CacheLine),
            (" cpu_cache\n", Granularity::CacheLine),
            ("", Granularity::CacheLine),
            ("\n", Granularity::CacheLine),
        ] {
            let sys = FakeSysfs::new();
            let region = sys.region("region0", Some(contents));
            sys.pmem_in(&region, 0);
            let choice = sys.verdict(259, 0);
            assert_eq!(
                choice.granularity, expected,
                "{contents:?}: {}",
                choice.basis
            );
            assert!(choice.basis.contains("region0"), "{}", choice.basis);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "builds a directory tree, which Miri cannot")]
    fn a_domain_file_too_long_or_not_text_gives_cache_line() {
        let long = format!("{}\n", CPU_CACHE.repeat(10));
        for contents in [long.as_bytes(), b"cpu_\xffcache\n".as_slice()] {
            let sys = FakeSysfs::new();
            let region = sys.region("region0", None);
            std::fs::write(sys.root().join(&region).join(DOMAIN_FILE), contents).unwrap();
            sys.pmem_in(&region, 0);
            let choice = sys.verdict(259, 0);
            assert_eq!(
                choice.granularity,
                Granularity::CacheLine,
                "{}",
                choice.basis
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "builds a directory tree, which Miri cannot")]
    fn each_device_takes_its_own_regions_domain() {
        let sys = FakeSysfs::new();
        let adr = sys.region("region0", Some("memory_controller\n"));
        let eadr = sys.region("region1", Some("cpu_cache\n"));
        sys.pmem_in(&adr, 0);
        sys.pmem_in(&eadr, 1);
        let on_adr = sys.verdict(259, 0);
        assert_eq!(on_adr.granularity, Granularity::CacheLine);
        assert!(
            on_adr.basis.contains("memory_controller"),
            "{}",
            on_adr.basis
        );
        assert_eq!(sys.verdict(259, 1).granularity, Granularity::Byte);
    }

    #[test]
    #[cfg_attr(miri, ignore = "builds a directory tree, which Miri cannot")]
    fn a_partition_finds_the_region_of_its_disk() {
        let sys = FakeSysfs::new();
        let region = sys.region("region0", Some("cpu_cache\n"));
        sys.pmem_in(&region, 0);
        sys.block_device(
            &format!("{region}/namespace0.0/block/pmem0/pmem0p1"),
            259,
            7,
        );
        let choice = sys.verdict(259, 7);
        assert_eq!(choice.granularity, Granularity::Byte, "{}", choice.basis);
        assert!(choice.basis.contains("region0"), "{}", choice.basis);
    }

    #[test]
    #[cfg_attr(miri, ignore = "builds a directory tree, which Miri cannot")]
    fn a_region_without_a_domain_file_gives_cache_line() {
        // The device's region cannot be told apart from its namespace, so the platform-wide
        // rule decides, and this region's missing file counts against it.
        let sys = FakeSysfs::new();
        let region = sys.region("region0", None);
        sys.region("region1", Some("cpu_cache\n"));
        sys.pmem_in(&region, 0);
        let choice = sys.verdict(259, 0);
        assert_eq!(
            choice.granularity,
            Granularity::CacheLine,
            "{}",
            choice.basis
        );
        assert!(choice.basis.contains("region0"), "{}", choice.basis);
    }

    #[test]
    #[cfg_attr(miri, ignore = "builds a directory tree, which Miri cannot")]
    fn a_device_without_a_region_follows_the_all_regions_rule() {
        // A device-mapper device: a virtual block device, no region above it.
        let device_mapper = "devices/virtual/block/dm-0";
        let build = |domains: &[&str]| {
            let sys = FakeSysfs::new();
            for (i, domain) in domains.iter().enumerate() {
                sys.region(&format!("region{i}"), Some(domain));
            }
            sys.block_device(device_mapper, 253, 0);
            sys
        };
        let all_eadr = build(&["cpu_cache\n", "cpu_cache\n"]);
        let choice = all_eadr.verdict(253, 0);
        assert_eq!(choice.granularity, Granularity::Byte, "{}", choice.basis);
        assert!(choice.basis.contains("253:0"), "{}", choice.basis);
        assert!(choice.basis.contains("(2 of them)"), "{}", choice.basis);

        let mixed = build(&["cpu_cache\n", "memory_controller\n"]);
        let choice = mixed.verdict(253, 0);
        assert_eq!(
            choice.granularity,
            Granularity::CacheLine,
            "{}",
            choice.basis
        );
        assert!(choice.basis.contains("region1"), "{}", choice.basis);

        let none = build(&[]);
        let choice = none.verdict(253, 0);
        assert_eq!(
            choice.granularity,
            Granularity::CacheLine,
            "{}",
            choice.basis
        );
        assert!(
            choice.basis.contains("no NVDIMM regions"),
            "{}",
            choice.basis
        );

        // A device sysfs does not list at all (a file system with no backing block device).
        let choice = all_eadr.verdict(0, 45);
        assert_eq!(choice.granularity, Granularity::Byte, "{}", choice.basis);
    }

    #[test]
    #[cfg_attr(miri, ignore = "builds a directory tree, which Miri cannot")]
    fn nothing_outside_the_sysfs_root_is_taken_for_a_region() {
        let sys = FakeSysfs::new();
        // A domain file just above the root, and a device link leading out of the tree into a
        // directory that has one: neither is a region of this sysfs.
        let outside = sys.dir.path().join("outside/region9");
        std::fs::create_dir_all(outside.join("pmem9")).unwrap();
        std::fs::write(outside.join(DOMAIN_FILE), "cpu_cache\n").unwrap();
        std::fs::write(sys.dir.path().join(DOMAIN_FILE), "cpu_cache\n").unwrap();
        symlink(
            "../../../outside/region9/pmem9",
            sys.root().join("dev/block/259:9"),
        )
        .unwrap();
        sys.block_device("devices/virtual/block/loop0", 7, 0);
        for (major, minor) in [(259, 9), (7, 0)] {
            let choice = sys.verdict(major, minor);
            assert_eq!(
                choice.granularity,
                Granularity::CacheLine,
                "{}",
                choice.basis
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads the file system, which Miri cannot")]
    fn a_missing_sysfs_gives_cache_line() {
        let dir = tempfile::tempdir().unwrap();
        let choice = granularity_of_device(&dir.path().join("no-sys"), 259, 0);
        assert_eq!(
            choice.granularity,
            Granularity::CacheLine,
            "{}",
            choice.basis
        );
        assert!(
            choice.basis.contains("no NVDIMM regions"),
            "{}",
            choice.basis
        );
    }
}
