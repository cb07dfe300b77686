//! [`Catalog::verify`]: the catalog in the pool against the copy the store read at open,
//! read-only, every difference listed.

use std::collections::HashMap;

use pmem_ordering::{Backend, Pool};

use super::layout::{self, header, EntryImage, ENTRY_BYTES};
use super::Catalog;
use crate::store::findings::{StoreFinding, StoreProblem};

impl Catalog {
    /// The header (magic, version, capacity, write-batch area) and each entry as the pool holds them now,
    /// against the copy read at open: entries that do not decode or differ, and names twice.
    pub(crate) fn verify<B: Backend>(&self, pool: &Pool<B>) -> Vec<StoreFinding> {
        let mut findings = Vec::new();
        let mut report = |offset, problem| findings.push(StoreFinding { offset, problem });
        let capacity = self.capacity();
        for (word, expected, what) in [
            (header::MAGIC, layout::MAGIC, "magic"),
            (header::VERSION, self.version, "version"),
            (header::CAPACITY, capacity, "capacity"),
            (header::BATCH_AREA, self.batch_area, "write-batch area"),
        ] {
            let at = self.base + word;
            match pool.load_u64(at) {
                Ok(found) if found == expected => {}
                Ok(found) => {
                    let reason = format!("{what} {found:#x}, expected {expected:#x}");
                    report(at, StoreProblem::CatalogHeader { reason });
                }
                Err(e) => {
                    let reason = format!("{what} unreadable: {e}");
                    report(at, StoreProblem::CatalogHeader { reason });
                }
            }
        }
        let mut names: HashMap<String, u64> = HashMap::new();
        for slot in 0..capacity {
            let at = self.entry_offset(slot);
            let mut bytes = [0u8; ENTRY_BYTES as usize];
            if let Err(e) = pool.read_bytes(at, &mut bytes) {
                let reason = format!("unreadable: {e}");
                report(at, StoreProblem::BadCatalogEntry { slot, reason });
                continue;
            }
            let image = match EntryImage::decode(&bytes, self.version) {
                Ok(image) => image,
                Err(reason) => {
                    report(at, StoreProblem::BadCatalogEntry { slot, reason });
                    continue;
                }
            };
            // A map's reserved key is written to its entry without the copy: not compared.
            let known = &self.entries[slot as usize];
            let mut compared = image.clone();
            if let (Some(found), Some(known)) = (&mut compared, known) {
                found.side = known.side;
            }
            if compared != *known {
                report(at, StoreProblem::CatalogChanged { slot });
            }
            if let Some(image) = image {
                match names.get(&image.name) {
                    Some(&first_slot) => {
                        let name = image.name;
                        report(at, StoreProblem::DuplicateName { name, first_slot });
                    }
                    None => {
                        names.insert(image.name, slot);
                    }
                }
            }
        }
        findings
    }
}
