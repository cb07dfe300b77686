//! Data-cache geometry from sysfs (`/sys/devices/system/cpu/cpu0/cache/index*/`): per level,
//! the ways, sets and line size, and from them the set stride: addresses a multiple of
//! `sets x line` apart fall in the same set of that level.

use std::path::Path;

use serde::Serialize;

/// One data (or unified) cache level of CPU 0.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CacheLevel {
    /// 1, 2, 3...
    pub level: u32,
    /// `Data` or `Unified`.
    pub kind: String,
    /// Ways of associativity.
    pub ways: u64,
    /// Number of sets.
    pub sets: u64,
    /// Coherency line size in bytes.
    pub line_bytes: u64,
}

impl CacheLevel {
    /// Bytes between two addresses that map to the same set: sets x line size.
    pub fn set_stride(&self) -> u64 {
        self.sets * self.line_bytes
    }

    /// The capacity in bytes.
    pub fn bytes(&self) -> u64 {
        self.ways * self.set_stride()
    }

    /// A short label, e.g. `L1d` or `L2`.
    pub fn label(&self) -> String {
        if self.kind == "Data" {
            format!("L{}d", self.level)
        } else {
            format!("L{}", self.level)
        }
    }
}

/// Why one sysfs cache directory could not be read as a data cache level.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    /// A file is missing or unreadable.
    #[error("cannot read {file}: {reason}")]
    Unreadable {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
    /// A file does not hold a positive number.
    #[error("{file} holds {text:?}, not a positive number")]
    NotANumber {
        /// The file.
        file: String,
        /// Its text.
        text: String,
    },
}

/// Parse one sysfs number file's text (`"64\n"`), naming `file` in the error.
pub fn parse_count(file: &str, text: &str) -> Result<u64, GeometryError> {
    match text.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(GeometryError::NotANumber {
            file: file.to_string(),
            text: text.trim().to_string(),
        }),
    }
}

/// One `index*` directory as a cache level; `Ok(None)` for an instruction cache.
pub fn read_level(dir: &Path) -> Result<Option<CacheLevel>, GeometryError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).map_err(|e| GeometryError::Unreadable {
            file: path.display().to_string(),
            reason: e.to_string(),
        })
    };
    let number = |name: &str| {
        let text = read(name)?;
        parse_count(&dir.join(name).display().to_string(), &text)
    };
    let kind = read("type")?.trim().to_string();
    if kind == "Instruction" {
        return Ok(None);
    }
    Ok(Some(CacheLevel {
        level: u32::try_from(number("level")?).unwrap_or(u32::MAX),
        kind,
        ways: number("ways_of_associativity")?,
        sets: number("number_of_sets")?,
        line_bytes: number("coherency_line_size")?,
    }))
}

/// The data cache levels of CPU 0 under `root` (normally `/sys/devices/system/cpu/cpu0/cache`),
/// lowest level first.
pub fn read_levels(root: &Path) -> Result<Vec<CacheLevel>, GeometryError> {
    let entries = std::fs::read_dir(root).map_err(|e| GeometryError::Unreadable {
        file: root.display().to_string(),
        reason: e.to_string(),
    })?;
    let mut levels = Vec::new();
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with("index") {
            if let Some(level) = read_level(&entry.path())? {
                levels.push(level);
            }
        }
    }
    levels.sort_by_key(|l| l.level);
    Ok(levels)
}

/// Where the section reads the geometry.
pub const SYSFS_CACHE: &str = "/sys/devices/system/cpu/cpu0/cache";

#[cfg(test)]
mod tests {
    use super::*;

    fn write_index(root: &Path, name: &str, files: &[(&str, &str)]) {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for (file, text) in files {
            std::fs::write(dir.join(file), text).unwrap();
        }
    }

    #[test]
    fn levels_are_read_without_instruction_caches_and_sorted() {
        let root = tempfile::tempdir().unwrap();
        let level = |l: &str, kind: &str, ways: &str, sets: &str| {
            [
                ("level", l.to_string()),
                ("type", format!("{kind}\n")),
                ("ways_of_associativity", ways.to_string()),
                ("number_of_sets", sets.to_string()),
                ("coherency_line_size", "64\n".to_string()),
            ]
        };
        for (name, files) in [
            ("index2", level("2\n", "Unified", "16\n", "2048\n")),
            ("index0", level("1\n", "Data", "12\n", "64\n")),
            ("index1", level("1\n", "Instruction", "8\n", "64\n")),
        ] {
            let files: Vec<(&str, &str)> = files.iter().map(|(f, t)| (*f, t.as_str())).collect();
            write_index(root.path(), name, &files);
        }
        let levels = read_levels(root.path()).unwrap();
        assert_eq!(levels.len(), 2);
        assert_eq!(levels[0].label(), "L1d");
        assert_eq!(levels[0].set_stride(), 4096);
        assert_eq!(levels[0].bytes(), 48 * 1024);
        assert_eq!(levels[1].label(), "L2");
        assert_eq!(levels[1].set_stride(), 128 * 1024);
    }

    #[test]
    fn bad_numbers_and_missing_files_are_named() {
        assert_eq!(parse_count("f", " 12\n"), Ok(12));
        assert!(matches!(
            parse_count("f", "0"),
            Err(GeometryError::NotANumber { .. })
        ));
        let err = parse_count("ways", "twelve").unwrap_err();
        assert!(err.to_string().contains("ways"), "{err}");
        let root = tempfile::tempdir().unwrap();
        write_index(root.path(), "index0", &[("type", "Data\n")]);
        let err = read_levels(root.path()).unwrap_err();
        assert!(err.to_string().contains("level"), "{err}");
    }
}
