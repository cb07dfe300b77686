//! Bugs the byte-key maps' fuzzing found, each reduced to its smallest case, kept as tests
//! once fixed.

use std::ops::Bound;

use pmem_structures::{Store, StoreOptions};

/// The ordered map's scan (`records::tree::Scan::advance`) cut a layer at the start key's next
/// slice when the start key's slice at that depth equalled the entry's word, without asking
/// whether the path above was the start key's. Here the keys `c x{13} a` and `c x{13} b`
/// share 14 bytes (a layer below `cxxxxxx`, a layer below `xxxxxxx`); the start key
/// `b x{27}` differs at the first byte, yet its slice at depth 1, `xxxxxxx` and more, equals
/// the keys', so layer 2 was entered from `xxxxxxx` (the start key's third slice) and both keys
/// (`a`, `b` < `x`) were skipped, though both are above the start key. The fix: a scan level
/// remembers whether it lies on the start key's path (the top one does; a layer does when its
/// parent does and the parent's word is the start key's slice), and only such a level cuts.
#[test]
fn a_scan_from_a_key_that_shares_a_slice_off_its_path_skips_no_key() {
    let store = Store::anonymous(4 << 20, &StoreOptions::new()).unwrap();
    let tree = store.btree_map::<Vec<u8>, Vec<u8>>("tree").unwrap();
    let key = |last: u8| [&b"c"[..], &[b'x'; 13], &[last]].concat();
    tree.insert(key(b'a'), b"1").unwrap();
    tree.insert(key(b'b'), b"2").unwrap();
    let start = [&b"b"[..], &[b'x'; 27]].concat();
    let got: Vec<(Vec<u8>, Vec<u8>)> = tree
        .range::<&[u8], _>((Bound::Included(&start[..]), Bound::Unbounded))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        got,
        vec![(key(b'a'), b"1".to_vec()), (key(b'b'), b"2".to_vec())]
    );
}
