//! The golden pool files' shared parts: what they hold (`contents.rs`), and a reader of the
//! format versions a store file holds, at the offsets docs/design.md documents. Used by
//! `tests/integration/golden.rs` and by their generator, `examples/golden_pools.rs`.

pub mod contents;

use std::collections::BTreeMap;

/// The version of each on-media format one store file holds. CCEH and the datalog carry
/// theirs in their magic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Formats {
    pub pool: u64,
    pub heap: u64,
    pub catalog: u64,
    pub cceh: String,
    pub fastfair: u64,
    /// The hash map of records ("users").
    pub records: u64,
    /// The ordered map of records ("sessions"), whose layers have a format of their own.
    pub record_tree: u64,
    pub datalog: String,
    /// The ordered map of the leaf layout ("events"), in files made since stores serve it.
    pub leaf_map: Option<u64>,
}

impl Formats {
    /// The name of the golden file of these versions.
    pub fn file_name(&self) -> String {
        let leaf_map = match self.leaf_map {
            Some(version) => format!("-leafmap{version}"),
            None => String::new(),
        };
        format!(
            "pool{}-heap{}-catalog{}-cceh{}-fastfair{}-records{}-recordtree{}-datalog{}{leaf_map}.pool",
            self.pool,
            self.heap,
            self.catalog,
            self.cceh,
            self.fastfair,
            self.records,
            self.record_tree,
            self.datalog
        )
    }
}

/// Where the parts of a store file are, read from its bytes.
pub struct StoreFile {
    /// The heap's superblock (the pool header's heap offset).
    pub superblock: u64,
    /// The catalog (the pool header's root offset).
    pub catalog: u64,
    /// Each listed structure's root block, by name.
    pub roots: BTreeMap<String, u64>,
}

pub fn u32_at(bytes: &[u8], at: u64) -> u64 {
    let at = at as usize;
    u64::from(u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()))
}

pub fn u64_at(bytes: &[u8], at: u64) -> u64 {
    let at = at as usize;
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

fn text_at(bytes: &[u8], at: u64) -> String {
    let at = at as usize;
    String::from_utf8_lossy(&bytes[at..at + 8]).replace('\0', "\\0")
}

impl StoreFile {
    /// Find the superblock, the catalog and every listed structure's root in `bytes`.
    pub fn read(bytes: &[u8]) -> StoreFile {
        assert_eq!(&bytes[0..8], b"PMORDPL\0", "pool magic");
        assert_eq!(&bytes[16..27], b"pmem-store\0", "layout name");
        let catalog = u64_at(bytes, 56);
        let superblock = u64_at(bytes, 72);
        assert_eq!(
            &bytes[superblock as usize..][..8],
            b"PMUNDO01",
            "heap magic"
        );
        assert_eq!(
            &bytes[catalog as usize..][..8],
            b"PMCATLG1",
            "catalog magic"
        );
        let capacity = u64_at(bytes, catalog + 16);
        let mut roots = BTreeMap::new();
        for slot in 0..capacity {
            let entry = catalog + 64 + 128 * slot;
            if u64_at(bytes, entry) == 0 {
                continue;
            }
            let name_len = u64_at(bytes, entry + 40) & 0xff;
            let name = &bytes[(entry + 64) as usize..][..name_len as usize];
            let name = String::from_utf8(name.to_vec()).expect("a UTF-8 name");
            roots.insert(name, u64_at(bytes, entry + 16));
        }
        StoreFile {
            superblock,
            catalog,
            roots,
        }
    }

    /// The root block of the structure named `name`.
    pub fn root(&self, name: &str) -> u64 {
        self.roots[name]
    }

    /// The versions of the golden contents' structures in `bytes`: "counters" (CCEH),
    /// "orders" (FAST&FAIR), "users" (records), "files" (datalog) and, if listed, "events"
    /// (the leaf map).
    pub fn formats(&self, bytes: &[u8]) -> Formats {
        let cceh = text_at(bytes, self.root("counters"));
        let datalog = text_at(bytes, self.root("files"));
        Formats {
            pool: u32_at(bytes, 8),
            heap: u32_at(bytes, self.superblock + 8),
            catalog: u64_at(bytes, self.catalog + 8),
            cceh: cceh.strip_prefix("CCEH\\0v0").unwrap_or(&cceh).to_string(),
            fastfair: u64_at(bytes, self.root("orders") + 8),
            records: u64_at(bytes, self.root("users") + 8),
            record_tree: u64_at(bytes, self.root("sessions") + 8),
            datalog: datalog
                .strip_prefix("DATALOG")
                .unwrap_or(&datalog)
                .to_string(),
            leaf_map: self
                .roots
                .get("events")
                .map(|&root| u64_at(bytes, root + 8)),
        }
    }
}
