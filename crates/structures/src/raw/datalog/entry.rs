//! Log entries: the three kinds, their encoding, their checksums and the checks that find a
//! torn or corrupted entry.
//!
//! An entry's CRC-32C covers its header and body and is seeded with the file's generation, so
//! an entry left in a reused log page by an earlier file never checks out for a later one.
//! An extent's body carries, besides its data block, the CRC-32C of each copy-on-write page it
//! points to ([`page_checksum`]), computed from the bytes written to the page; reads check it.

use pmem_ordering::isa;

use super::layout::{
    embed_entry_bytes, extent_entry_bytes, EntryImage, EntryImageMut, HeaderFields, ENTRY_HEADER,
    MAX_EMBED, PAGE,
};
use super::{MAX_EXTENT_PAGES, MAX_FILE_SIZE};

const KIND_EXTENT: u8 = 1;
const KIND_EMBED: u8 = 2;
const KIND_SET_SIZE: u8 = 3;

/// A decoded entry (the payload of an embed stays in the log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Entry {
    /// File pages `[file_page, file_page + pages)` now live in pages `[block_page, block_page
    /// + pages)` of the data block at `block` (NOVA's write entry).
    Extent {
        file_page: u64,
        pages: u64,
        block: u64,
        block_page: u64,
        size_after: u64,
    },
    /// `len` bytes at `page_off` of `file_page`, carried inline after the header.
    Embed {
        file_page: u64,
        page_off: u64,
        len: u64,
        size_after: u64,
    },
    /// The file's size changes; pages past it are dropped.
    SetSize { size_after: u64 },
}

impl Entry {
    /// Bytes the entry takes in the log.
    pub(super) fn bytes(&self) -> u64 {
        match self {
            Entry::Extent { pages, .. } => extent_entry_bytes(*pages),
            Entry::Embed { len, .. } => embed_entry_bytes(*len),
            Entry::SetSize { .. } => ENTRY_HEADER,
        }
    }

    /// Encode into `out` (cleared first), with the checksum seeded by `generation`: an embed
    /// carries `payload`, an extent `page_crcs` (one per page); other kinds take both empty.
    pub(super) fn encode(
        &self,
        generation: u64,
        payload: &[u8],
        page_crcs: &[u32],
        out: &mut Vec<u8>,
    ) {
        out.clear();
        out.resize(self.bytes() as usize, 0);
        let mut image = EntryImageMut::new(out);
        let (kind, count, size_after, file_page, word) = match *self {
            Entry::Extent {
                file_page,
                pages,
                block,
                block_page,
                size_after,
            } => {
                debug_assert_eq!(page_crcs.len() as u64, pages, "one CRC per page");
                image.set_extent_block(block);
                image.set_extent_page_crcs(page_crcs);
                (KIND_EXTENT, pages, size_after, file_page, block_page)
            }
            Entry::Embed {
                file_page,
                page_off,
                len,
                size_after,
            } => {
                debug_assert_eq!(
                    payload.len() as u64,
                    len,
                    "one payload of the entry's length"
                );
                image.set_embed_payload(payload);
                (KIND_EMBED, len, size_after, file_page, page_off)
            }
            Entry::SetSize { size_after } => (KIND_SET_SIZE, 0, size_after, 0, 0),
        };
        image.set_header(HeaderFields {
            kind,
            count,
            size_after,
            file_page,
            word,
        });
        let crc = checksum(generation, image.checksummed());
        image.set_checksum(crc);
    }

    /// Decode a 32-byte header (an extent's block is read separately), refusing fields no
    /// entry the store writes could hold.
    pub(super) fn decode_header(h: &[u8]) -> Result<Entry, String> {
        let HeaderFields {
            kind,
            count,
            size_after,
            file_page,
            word,
        } = EntryImage::new(h).header();
        if size_after > MAX_FILE_SIZE || file_page > MAX_FILE_SIZE / PAGE {
            return Err(format!(
                "file size {size_after} or page {file_page} out of range"
            ));
        }
        match kind {
            KIND_EXTENT => {
                if count == 0 || word + count > MAX_EXTENT_PAGES {
                    return Err(format!("extent of {count} pages from block page {word}"));
                }
                if (file_page + count - 1) * PAGE >= size_after {
                    return Err(format!(
                        "extent of pages {file_page}.. reaches past size {size_after}"
                    ));
                }
                Ok(Entry::Extent {
                    file_page,
                    pages: count,
                    block: 0,
                    block_page: word,
                    size_after,
                })
            }
            KIND_EMBED => {
                if count == 0 || count > MAX_EMBED || word + count > PAGE {
                    return Err(format!("embed of {count} bytes at page offset {word}"));
                }
                if file_page * PAGE + word + count > size_after {
                    return Err("embed past the file size".into());
                }
                Ok(Entry::Embed {
                    file_page,
                    page_off: word,
                    len: count,
                    size_after,
                })
            }
            KIND_SET_SIZE => Ok(Entry::SetSize { size_after }),
            kind => Err(format!("unknown entry kind {kind}")),
        }
    }
}

/// The CRC-32C of a copy-on-write data page's bytes, as its extent records it.
#[inline]
pub(super) fn page_checksum(page: &[u8]) -> u32 {
    isa::crc32c(page)
}

/// The CRC-32C of `bytes` seeded with the file's generation.
fn checksum(generation: u64, bytes: &[u8]) -> u32 {
    isa::crc32c_append(isa::crc32c(&generation.to_le_bytes()), bytes)
}

/// Whether the whole encoded entry in `bytes` holds the checksum of its contents for a file of
/// `generation`: false for a torn, corrupted or foreign entry.
#[inline]
pub(super) fn checksum_holds(generation: u64, bytes: &[u8]) -> bool {
    let image = EntryImage::new(bytes);
    image.stored_checksum() == checksum(generation, image.checksummed())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(entry: Entry, payload: &[u8]) -> Vec<u8> {
        let pages = match entry {
            Entry::Extent { pages, .. } => pages,
            _ => 0,
        };
        let crcs: Vec<u32> = (0..pages as u32).map(|i| 0xc0de_0000 + i).collect();
        let mut out = Vec::new();
        entry.encode(5, payload, &crcs, &mut out);
        out
    }

    #[test]
    fn every_kind_decodes_to_what_was_encoded() {
        let extent = Entry::Extent {
            file_page: 3,
            pages: 2,
            block: 0x40_0000,
            block_page: 5,
            size_after: 5 * PAGE,
        };
        let bytes = encoded(extent, &[]);
        assert_eq!(bytes.len() as u64, extent_entry_bytes(2));
        assert!(checksum_holds(5, &bytes));
        // The header alone decodes with the block left to be read from the body.
        let header = Entry::decode_header(&bytes[..ENTRY_HEADER as usize]).unwrap();
        assert_eq!(
            header,
            Entry::Extent {
                file_page: 3,
                pages: 2,
                block: 0,
                block_page: 5,
                size_after: 5 * PAGE,
            }
        );
        assert_eq!(EntryImage::new(&bytes).extent_block(), 0x40_0000);
        assert_eq!(
            EntryImage::new(&bytes)
                .extent_page_crcs(2)
                .collect::<Vec<_>>(),
            [0xc0de_0000, 0xc0de_0001]
        );
        let mut flipped = bytes.clone();
        flipped[41] ^= 1;
        assert!(
            !checksum_holds(5, &flipped),
            "the page CRCs are covered by the entry's checksum"
        );

        let embed = Entry::Embed {
            file_page: 1,
            page_off: 10,
            len: 5,
            size_after: PAGE + 15,
        };
        let bytes = encoded(embed, b"hello");
        assert_eq!(bytes.len(), 40);
        assert!(checksum_holds(5, &bytes));
        assert_eq!(Entry::decode_header(&bytes).unwrap(), embed);
        assert_eq!(EntryImage::new(&bytes).embed_payload(5), b"hello");

        let set_size = Entry::SetSize { size_after: 77 };
        let bytes = encoded(set_size, &[]);
        assert_eq!(bytes.len() as u64, ENTRY_HEADER);
        assert!(checksum_holds(5, &bytes));
        assert_eq!(Entry::decode_header(&bytes).unwrap(), set_size);
    }

    #[test]
    fn a_flipped_bit_or_another_generation_fails_the_checksum() {
        let embed = Entry::Embed {
            file_page: 0,
            page_off: 0,
            len: 3,
            size_after: 3,
        };
        let bytes = encoded(embed, b"abc");
        assert!(!checksum_holds(6, &bytes), "seeded by the generation");
        for bit in [0, 4 * 8, 33 * 8 + 1, bytes.len() * 8 - 1] {
            let mut torn = bytes.clone();
            torn[bit / 8] ^= 1 << (bit % 8);
            assert!(!checksum_holds(5, &torn), "bit {bit} flipped went unseen");
        }
    }

    #[test]
    fn headers_no_store_writes_are_refused() {
        let header = |fields: HeaderFields| {
            let mut buf = vec![0u8; ENTRY_HEADER as usize];
            EntryImageMut::new(&mut buf).set_header(fields);
            Entry::decode_header(&buf)
        };
        let base = HeaderFields {
            kind: KIND_EXTENT,
            count: 1,
            size_after: PAGE,
            file_page: 0,
            word: 0,
        };
        assert!(header(base).is_ok());
        assert!(header(HeaderFields { kind: 9, ..base }).is_err());
        assert!(header(HeaderFields { count: 0, ..base }).is_err());
        assert!(header(HeaderFields {
            word: MAX_EXTENT_PAGES,
            ..base
        })
        .is_err());
        assert!(header(HeaderFields {
            size_after: MAX_FILE_SIZE + 1,
            ..base
        })
        .is_err());
        assert!(header(HeaderFields {
            file_page: 1,
            ..base
        })
        .is_err());
        let embed = HeaderFields {
            kind: KIND_EMBED,
            count: 8,
            size_after: 8,
            file_page: 0,
            word: 0,
        };
        assert!(header(embed).is_ok());
        assert!(header(HeaderFields {
            size_after: 7,
            ..embed
        })
        .is_err());
        assert!(header(HeaderFields {
            count: MAX_EMBED + 1,
            size_after: PAGE,
            ..embed
        })
        .is_err());
        assert!(header(HeaderFields {
            word: PAGE - 4,
            size_after: PAGE,
            ..embed
        })
        .is_err());
    }
}
