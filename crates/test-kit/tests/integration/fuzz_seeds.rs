//! The fuzz inputs' encoder against `arbitrary`'s decoder, and the committed seeds against
//! what the kit makes.

use std::collections::HashSet;
use std::path::Path;

use pmem_test_kit::cceh::CcehOp;
use pmem_test_kit::datalog::DatalogOp;
use pmem_test_kit::fastfair::FastFairOp;
use pmem_test_kit::fuzz_input::{
    decode, CcehInput, CcehSetup, DatalogInput, DatalogSetup, FastFairInput, FastFairSetup,
    FuzzEncode, FuzzInput, RecordFuzzSetup, RecordInput, StoreFuzzSetup, StoreInput,
};
use pmem_test_kit::fuzz_seeds::{seeds, Seed};
use pmem_test_kit::leafmap::{LeafFuzzSetup, LeafMapInput, LeafOp};
use pmem_test_kit::records::RecordOp;
use pmem_test_kit::store::StoreOp;
use proptest::prelude::*;

/// Decodes `bytes` as a `T`, encodes that, and checks the encoding decodes to the same value.
fn round_trips<T>(bytes: &[u8]) -> Result<(), TestCaseError>
where
    T: for<'a> arbitrary::Arbitrary<'a> + FuzzEncode + PartialEq + std::fmt::Debug,
{
    let value: T = decode(bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let encoded = value.to_fuzz_bytes();
    let again: T = decode(&encoded).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(again, value);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_decoded_input_encodes_back_to_itself(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        round_trips::<CcehInput>(&bytes)?;
        round_trips::<FastFairInput>(&bytes)?;
        round_trips::<DatalogInput>(&bytes)?;
        round_trips::<StoreInput>(&bytes)?;
        round_trips::<RecordInput>(&bytes)?;
        round_trips::<LeafMapInput>(&bytes)?;
    }
}

/// How many operations `seed` decodes to and how many kinds of operation among them; checks
/// the decoded input encodes back to the seed's bytes.
fn shape<S, O>(seed: &Seed) -> (usize, usize)
where
    FuzzInput<S, O>: for<'a> arbitrary::Arbitrary<'a> + FuzzEncode,
{
    let input: FuzzInput<S, O> = decode(&seed.bytes).unwrap();
    assert_eq!(input.to_fuzz_bytes(), seed.bytes, "{}", seed.name);
    let kinds: HashSet<_> = input.ops.iter().map(std::mem::discriminant).collect();
    (input.ops.len(), kinds.len())
}

#[test]
fn every_seed_decodes_to_a_long_sequence_of_several_kinds_of_operation() {
    let all = seeds();
    assert_eq!(all.len(), 4 + 6 + 4 + 3 + 4 + 2);
    for seed in &all {
        let (ops, kinds) = match seed.target {
            "cceh_ops" => shape::<CcehSetup, CcehOp>(seed),
            "fastfair_ops" => shape::<FastFairSetup, FastFairOp>(seed),
            "datalog_ops" => shape::<DatalogSetup, DatalogOp>(seed),
            "store_ops" => shape::<StoreFuzzSetup, StoreOp>(seed),
            "record_maps" => shape::<RecordFuzzSetup, RecordOp>(seed),
            "leaf_map" => shape::<LeafFuzzSetup, LeafOp>(seed),
            other => panic!("a seed for an unknown target {other}"),
        };
        assert!(
            ops >= 47,
            "{}/{}: only {ops} operations",
            seed.target,
            seed.name
        );
        assert!(
            kinds >= 2,
            "{}/{}: {kinds} kinds of operation",
            seed.target,
            seed.name
        );
    }
}

#[test]
fn the_committed_seeds_are_the_ones_the_kit_makes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    for seed in seeds() {
        let path = root.join(seed.target).join(&seed.name);
        let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            committed == seed.bytes,
            "{} is stale: run `cargo run -p pmem-test-kit --example fuzz_seeds`",
            path.display()
        );
    }
}
