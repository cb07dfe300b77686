//! The datalog store against a model of its files, through reopening: random operation
//! sequences, and the sequences they found wrong once.

use pmem_structures::raw::datalog::{Datalog, DatalogConfig, WriteMode, PAGE};
use pmem_test_kit::datalog::{self as kit, DatalogModel, DatalogOp};
use pmem_test_kit::fixture::{anonymous_heap, heap_holds_exactly, reopen};
use proptest::prelude::*;

/// An entry that fills its log page to the last byte leaves the tail at the page's end, which
/// is also where the next page of the pool starts. Here that next page is the file's head page
/// (the second page, linked later, is one a removed file gave back, lying just below the
/// head), and reopening must not read the tail as a place in the head page.
#[test]
fn a_tail_at_the_end_of_a_page_below_the_head_page_survives_reopening() {
    use DatalogOp::{Create, Remove, Truncate, Write};
    let embedded = Some(WriteMode::Embedded);
    let ops = [
        Create(0),
        Create(1),
        Write {
            file: 1,
            offset: 14336,
            len: 2049,
            mode: embedded,
        },
        Truncate(1, 12289),
        Remove(0),
        Write {
            file: 1,
            offset: 5639,
            len: 2743,
            mode: embedded,
        },
        Truncate(1, 20419),
        // Its 1,136-byte embed entry ends exactly at its log page's end.
        Write {
            file: 1,
            offset: 6933,
            len: 1099,
            mode: None,
        },
    ];
    ops_match_a_model_and_survive_reopening(&ops).unwrap();
}

/// The store's names and files equal the model's, and its blocks are the heap's; `when` names
/// the moment in the error.
fn same_as_model(
    store: &Datalog<pmem_ordering::Hardware>,
    model: &DatalogModel,
    when: &str,
) -> Result<(), String> {
    let names: Vec<String> = model.keys().cloned().collect();
    if store.list() != names {
        return Err(format!("{when}: names {:?}, model {names:?}", store.list()));
    }
    let contents = kit::contents(store).map_err(|e| format!("{when}: {e}"))?;
    if &contents != model {
        return Err(format!("{when}: the files' contents differ from the model"));
    }
    heap_holds_exactly(store.heap(), &store.blocks(), "store")?;
    Ok(())
}

/// Run `ops` on a new store of 4 files, each checked against the model (refused exactly when
/// the model refuses it), then check every file read back, the names, the heap's blocks and,
/// after reopening, all of them again and the verifier's report; the first mismatch is the
/// error.
fn ops_match_a_model_and_survive_reopening(ops: &[DatalogOp]) -> Result<(), String> {
    let mut heap = anonymous_heap("datalog", 16 << 20);
    let root = heap.pool().root_offset();
    let mut model = DatalogModel::new();
    {
        let config = DatalogConfig {
            max_files: 4,
            ..DatalogConfig::default()
        };
        let store = Datalog::create(&heap, root, config).unwrap();
        for (index, op) in ops.iter().enumerate() {
            op.run_checked(&store, index, &mut model)?;
        }
        same_as_model(&store, &model, "before reopening")?;
    }
    heap = reopen(heap);
    let store = Datalog::open(&heap, root).map_err(|e| format!("open: {e}"))?;
    same_as_model(&store, &model, "after reopening")?;
    let report = store.verify();
    if !report.is_healthy() {
        return Err(format!("after reopening: {report}"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Operations on three files, each checked against the model (refused exactly when the
    /// model refuses it), then every file read back, before and after reopening.
    #[test]
    fn operation_sequences_match_a_model_and_survive_reopening(
        ops in proptest::collection::vec(DatalogOp::strategy(3, 5 * PAGE, 9000), 1..60),
    ) {
        let checked = ops_match_a_model_and_survive_reopening(&ops);
        prop_assert!(checked.is_ok(), "{}", checked.unwrap_err());
    }
}
