//! Both byte-key maps under sampled simulated crashes, through the kit's crash driver: keys of
//! every short shape (the empty key, prefixes of 7, 14, 21 and 221 shared bytes, so the
//! ordered map makes and walks layers), values from empty to 20 KiB (runs of chunks),
//! overwrites, removes and a reopen; every recovered image must hold the model after the
//! operations that returned or the interrupted one too, with no leaked block.

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimConfig};
use pmem_structures::raw::fastfair::ShiftPolicy;
use pmem_structures::raw::STORE_LAYOUT;
use pmem_test_kit::records::{
    crash_record_ops, KeyShape, RecordKey, RecordOp, RecordSetup, RecordValue, TAIL_ALPHABET,
};

/// Inserts of every short-shape key with a one-byte tail or none, overwrites of every third
/// with a growing value, a reopen, then removes of every other.
fn layered_ops() -> Vec<RecordOp> {
    let tails: Vec<Vec<u8>> = std::iter::once(Vec::new())
        .chain(TAIL_ALPHABET.iter().map(|&b| vec![b]))
        .collect();
    let keys: Vec<RecordKey> = [
        KeyShape::Long,
        KeyShape::Shares21,
        KeyShape::Bare,
        KeyShape::Shares7,
        KeyShape::Shares14,
    ]
    .into_iter()
    .flat_map(|shape| tails.iter().map(move |t| RecordKey::new(shape, t)))
    .collect();
    let mut ops: Vec<RecordOp> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| RecordOp::Insert(k.clone(), RecordValue::new((i * 7 % 60) as u32, i as u8)))
        .collect();
    for (i, k) in keys.iter().enumerate().step_by(3) {
        ops.push(RecordOp::Upsert(
            k.clone(),
            RecordValue::new([100, 4000, 20 << 10][i % 3], 9),
        ));
    }
    ops.push(RecordOp::Reopen);
    ops.extend(keys.iter().step_by(2).map(|k| RecordOp::Remove(k.clone())));
    ops
}

#[test]
fn sampled_crashes_of_layered_byte_key_writes_recover() {
    for (seed, shift) in [(1, ShiftPolicy::Fast), (2, ShiftPolicy::Redo)] {
        let setup = RecordSetup {
            shift,
            ..RecordSetup::default()
        };
        let test = CrashTest::new("record-kit-layers", SimConfig::x86())
            .pool(STORE_LAYOUT, 4 << 20, setup.root_size().unwrap())
            .points(CrashPoints::Sample(150))
            .images(Images::Random(2))
            .seed(seed)
            .fail_on_unpersisted(true);
        let report = crash_record_ops(&test, setup, &layered_ops());
        assert!(report.points >= 100, "{shift:?}: {report:?}");
    }
}
