//! The layout's views checked against the documented offsets: pure arithmetic on byte
//! buffers, no pool (so Miri runs them).

use super::*;

#[test]
fn root_words_follow_the_documented_order() {
    let table = InodeTable::at(0x4000);
    let r = Root::image(table, 16, 7, [11, 12, 13, 14]);
    assert_eq!(get_u64(&r, 0), ROOT_MAGIC);
    assert_eq!(&r[0..8], b"DATALOG2");
    assert_ne!(ROOT_MAGIC, FORMAT_1_MAGIC);
    assert_eq!(get_u64(&r, 8), 0x4000);
    assert_eq!(get_u64(&r, 16), 16);
    assert_eq!(get_u64(&r, 24), 7);
    for (i, word) in [11, 12, 13, 14].into_iter().enumerate() {
        assert_eq!(get_u64(&r, 32 + 8 * i as u64), word);
    }
    assert_eq!(Root::at(0x100).next_generation_word(), 0x118);
}

#[test]
fn inodes_are_128_bytes_apart_with_their_words_in_order() {
    let table = InodeTable::at(0x1000);
    assert_eq!(InodeTable::bytes(16), 16 * 128);
    let inode = table.inode(3);
    assert_eq!(inode.tail_word(), 0x1000 + 3 * 128);
    assert_eq!(inode.head_word(), inode.tail_word() + 8);
    assert_eq!(inode.generation_word(), inode.tail_word() + 16);
    assert_eq!(inode.name_field(), inode.tail_word() + 24);
    assert_eq!(table.inode(4).tail_word() - inode.tail_word(), 128);
    assert_eq!(MAX_NAME, 96);
}

#[test]
fn an_inode_image_reads_back_as_written() {
    let raw = Inode::image(0x2040, 0x2000, 9, "notes");
    let record = InodeRecord { raw };
    assert_eq!(record.tail(), 0x2040);
    assert_eq!(record.head(), 0x2000);
    assert_eq!(record.generation(), 9);
    assert_eq!(record.name(), Some("notes"));
    assert!(raw[32 + 5..].iter().all(|&b| b == 0));
}

#[test]
fn a_name_image_matches_the_inode_name_field() {
    let name = "a".repeat(MAX_NAME);
    let image = NameImage::new(&name);
    assert_eq!(image.as_bytes().len(), 8 + MAX_NAME);
    let raw = Inode::image(0, 0, 1, &name);
    let at = InodeTable::at(0).inode(0).name_field() as usize;
    assert_eq!(&raw[at..], image.as_bytes());
    assert_eq!(NameImage::new("xy").as_bytes(), b"\x02\0\0\0\0\0\0\0xy");
}

#[test]
fn inode_names_that_cannot_be_stored_read_as_none() {
    let mut raw = Inode::image(0, 0, 1, "ok");
    put_u64(&mut raw, Inode::NAME_LEN, MAX_NAME as u64 + 1);
    assert_eq!(InodeRecord { raw }.name(), None);
    let mut raw = Inode::image(0, 0, 1, "ok");
    raw[INODE_NAME as usize] = 0xff;
    assert_eq!(InodeRecord { raw }.name(), None);
}

#[test]
fn log_page_bounds() {
    let page = LogPage::at(0x8000);
    assert_eq!(page.next_word(), 0x8000);
    assert_eq!(page.first_entry(), 0x8040);
    assert_eq!(page.offset_of(100), 0x8064);
    assert_eq!(page.room(0x8000 + PAGE - 8), 8);
    assert!(page.fits(0x8000 + PAGE - 40, 40));
    assert!(!page.fits(0x8000 + PAGE - 40, 41));
    assert!(page.holds_tail(0x8040) && page.holds_tail(0x8000 + PAGE));
    assert!(!page.holds_tail(0x8000) && !page.holds_tail(0x8000 + PAGE + 8));
    // A tail filling the page before it exactly is that page's, not this one's.
    assert!(!page.holds_tail(0x8000) && LogPage::at(0x8000 - PAGE).holds_tail(0x8000));
    assert!(LogPage::takes_end_mark(ENTRY_HEADER));
    assert!(!LogPage::takes_end_mark(ENTRY_HEADER - 8));
    assert_eq!(LOG_PAGE_CAPACITY, 4032);
    assert_eq!(MAX_EMBED, 4000);
    assert_eq!(ENTRY_HEADER + MAX_EMBED, LOG_PAGE_CAPACITY);
}

#[test]
fn a_log_page_image_marks_its_end_only_with_room_for_a_header() {
    let mut image = LogPageImage::new();
    assert_eq!(image.fill(), LOG_HEADER);
    image.push(&[0xaa; 40]);
    image.set_next(0x9000);
    assert!(image.fits(PAGE - LOG_HEADER - 40));
    assert!(!image.fits(PAGE - LOG_HEADER - 39));
    image.close();
    let bytes = image.as_bytes();
    assert_eq!(get_u64(bytes, 0), 0x9000);
    assert!(bytes[8..64].iter().all(|&b| b == 0));
    assert!(bytes[64..104].iter().all(|&b| b == 0xaa));
    assert_eq!(get_u64(bytes, 104), END_MARK);

    let mut full = LogPageImage::new();
    full.push(&vec![0xbb; (LOG_PAGE_CAPACITY - 24) as usize]);
    full.close();
    assert!(full.as_bytes()[(PAGE - 24) as usize..]
        .iter()
        .all(|&b| b == 0));
}

#[test]
fn data_pages_and_embed_sizes() {
    assert_eq!(data_page(0x10000, 0), 0x10000);
    assert_eq!(data_page(0x10000, 3), 0x10000 + 3 * PAGE);
    assert_eq!(data_block_bytes(64), 64 * PAGE);
    assert_eq!(embed_entry_bytes(1), 40);
    assert_eq!(embed_entry_bytes(8), 40);
    assert_eq!(embed_entry_bytes(9), 48);
    assert_eq!(embed_entry_bytes(MAX_EMBED), LOG_PAGE_CAPACITY);
}

#[test]
fn entry_fields_round_trip_at_their_offsets() {
    let fields = HeaderFields {
        kind: 2,
        count: 0x1234,
        size_after: 0x0102_0304_0506_0708,
        file_page: 0x1122_3344,
        word: 0xdead_beef,
    };
    let mut buf = vec![0u8; (ENTRY_HEADER + 16) as usize];
    let mut image = EntryImageMut::new(&mut buf);
    image.set_header(fields);
    image.set_embed_payload(b"payload!");
    image.set_checksum(0xcafe_f00d);
    assert_eq!(image.checksummed().len(), buf.len() - 4);
    assert_eq!(&buf[0..4], &0xcafe_f00du32.to_le_bytes());
    assert_eq!(buf[4], 2);
    assert_eq!(buf[5], 0);
    assert_eq!(&buf[6..8], &0x1234u16.to_le_bytes());
    assert_eq!(get_u64(&buf, 8), 0x0102_0304_0506_0708);
    assert_eq!(get_u64(&buf, 16), 0x1122_3344);
    assert_eq!(&buf[24..28], &0xdead_beefu32.to_le_bytes());
    assert!(buf[28..32].iter().all(|&b| b == 0));
    let view = EntryImage::new(&buf);
    assert_eq!(view.header(), fields);
    assert_eq!(view.stored_checksum(), 0xcafe_f00d);
    assert_eq!(view.embed_payload(8), b"payload!");
    assert_eq!(view.checksummed(), &buf[4..]);
}

#[test]
fn an_extent_block_and_page_crcs_follow_the_header_and_wide_fields_truncate() {
    assert_eq!(extent_entry_bytes(1), 48);
    assert_eq!(extent_entry_bytes(2), 48);
    assert_eq!(extent_entry_bytes(3), 56);
    let mut buf = vec![0u8; extent_entry_bytes(3) as usize];
    let mut image = EntryImageMut::new(&mut buf);
    image.set_header(HeaderFields {
        kind: 1,
        count: 0x1_0003,
        size_after: 0,
        file_page: 0,
        word: 0x1_0000_0005,
    });
    image.set_extent_block(0xabc000);
    image.set_extent_page_crcs(&[0x1111_1111, 0x2222_2222, 0x3333_3333]);
    let view = EntryImage::new(&buf);
    assert_eq!(view.extent_block(), 0xabc000);
    assert_eq!(get_u64(&buf, 32), 0xabc000);
    assert_eq!(
        view.extent_page_crcs(3).collect::<Vec<_>>(),
        [0x1111_1111, 0x2222_2222, 0x3333_3333]
    );
    assert_eq!(&buf[44..48], &0x2222_2222u32.to_le_bytes());
    assert!(buf[52..56].iter().all(|&b| b == 0), "padding stays zero");
    assert_eq!(view.header().count, 3);
    assert_eq!(view.header().word, 5);
}

/// The accessors that read through the pool find what the images put there. A simulated pool
/// (anonymous memory, no flush instructions) so that Miri can run this one too.
#[test]
fn the_pool_accessors_read_what_the_images_hold() {
    use pmem_ordering::sim::SimConfig;

    let pool = Pool::simulated("layout", 1 << 16, 64, SimConfig::x86()).unwrap();
    let root = pool.root_offset();
    let table = InodeTable::at(0x4000);
    drop(
        pool.write(root, &Root::image(table, 16, 7, [1, 2, 3, 4]))
            .unwrap(),
    );
    let root_view = Root::at(root);
    assert_eq!(root_view.read_magic(&pool).unwrap(), ROOT_MAGIC);
    assert_eq!(root_view.read_table(&pool).unwrap(), table);
    assert_eq!(root_view.read_max_files(&pool).unwrap(), 16);
    assert_eq!(root_view.read_next_generation(&pool).unwrap(), 7);

    let inode = table.inode(2);
    let image = Inode::image(0x8040, 0x8000, 3, "journal");
    drop(pool.write(inode.offset(), &image).unwrap());
    drop(
        pool.write(inode.name_field(), NameImage::new("log").as_bytes())
            .unwrap(),
    );
    let record = inode.read(&pool).unwrap();
    assert_eq!(record.tail(), 0x8040);
    assert_eq!(record.head(), 0x8000);
    assert_eq!(record.generation(), 3);
    assert_eq!(
        record.name(),
        Some("log"),
        "a rename writes the length and the bytes"
    );
}
