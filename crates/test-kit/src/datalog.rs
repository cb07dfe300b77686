//! Datalog operations against a model of `Vec<u8>` files.

use std::collections::BTreeMap;
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use pmem_ordering::sim::{CrashFailure, CrashTest, Report};
use pmem_ordering::{Backend, Pool};
use pmem_structures::raw::datalog::{
    Datalog, DatalogConfig, DatalogError, FileId, Policy, WriteMode, PAGE,
};
use pmem_undo_log::{FencePolicy, Heap};

use crate::fixture::{heap_holds_exactly, simulated_heap};
use crate::model::{agree, failed, run_each};
use crate::{crash_test_outcome_with_recovery, structure_verifies, History, ModelOp, SplitMix64};

/// What a datalog store must hold: each file's name and bytes.
pub type DatalogModel = BTreeMap<String, Vec<u8>>;

/// Files of fuzz inputs: `f0`..`f3`, as many as the fuzz target's store has slots.
pub const FUZZ_FILES: u8 = 4;

/// Offsets and sizes of fuzz inputs are below this: three pages.
pub const FUZZ_SPAN: u64 = 3 * PAGE;

/// One operation on a datalog store; files are named by number ([`file_name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub enum DatalogOp {
    /// `create_file`.
    Create(#[arbitrary(with = fuzz_file)] u8),
    /// `len` bytes ([`written_bytes`]) at `offset`, with `mode`, or the store's own mode.
    Write {
        #[arbitrary(with = fuzz_file)]
        file: u8,
        #[arbitrary(with = fuzz_offset)]
        offset: u64,
        #[arbitrary(with = fuzz_len)]
        len: u64,
        #[arbitrary(with = fuzz_mode)]
        mode: Option<WriteMode>,
    },
    /// `truncate` to a size.
    Truncate(
        #[arbitrary(with = fuzz_file)] u8,
        #[arbitrary(with = fuzz_offset)] u64,
    ),
    /// `rename(from, to)`.
    Rename(
        #[arbitrary(with = fuzz_file)] u8,
        #[arbitrary(with = fuzz_file)] u8,
    ),
    /// `remove`.
    Remove(#[arbitrary(with = fuzz_file)] u8),
}

fn fuzz_file(u: &mut Unstructured) -> arbitrary::Result<u8> {
    u.int_in_range(0..=FUZZ_FILES - 1)
}

fn fuzz_offset(u: &mut Unstructured) -> arbitrary::Result<u64> {
    u.int_in_range(0..=FUZZ_SPAN - 1)
}

/// Lengths in four classes, one byte each: 1-16 bytes (embedded pieces), 64-byte steps, 64-byte
/// steps plus 13 (unaligned ends), quarter-page steps plus one (whole pages and across them).
pub(crate) const LEN_CLASSES: u8 = 4;

pub(crate) fn length_of(class: u8, step: u8) -> u64 {
    let step = u64::from(step) + 1;
    match class {
        0 => step,
        1 => step * 64,
        2 => step * 64 + 13,
        _ => step * PAGE / 4 + 1,
    }
}

fn fuzz_len(u: &mut Unstructured) -> arbitrary::Result<u64> {
    let class = u.int_in_range(0..=LEN_CLASSES - 1)?;
    let step = u.int_in_range(0..=15)?;
    Ok(length_of(class, step))
}

/// The write modes a fuzz input picks from; `None` is the store's own.
pub(crate) const MODES: [Option<WriteMode>; 4] = [
    None,
    Some(WriteMode::CopyOnWrite),
    Some(WriteMode::Embedded),
    Some(WriteMode::Auto),
];

fn fuzz_mode(u: &mut Unstructured) -> arbitrary::Result<Option<WriteMode>> {
    Ok(*u.choose(&MODES)?)
}

/// The name of file number `f`.
pub fn file_name(f: u8) -> String {
    format!("f{f}")
}

/// The bytes the `index`-th operation of a sequence writes: different for every operation, so
/// a recovered file shows which writes it holds.
pub fn written_bytes(index: usize, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31) as u8) ^ (index as u8).wrapping_mul(17) ^ 0x5A)
        .collect()
}

impl DatalogOp {
    /// A write of `len` bytes at `offset` of file `file` with `mode`.
    pub fn write(file: u8, offset: u64, len: u64, mode: WriteMode) -> DatalogOp {
        DatalogOp::Write {
            file,
            offset,
            len,
            mode: Some(mode),
        }
    }

    /// Whether the operation succeeds on a store holding `model`: the named file exists, and a
    /// new name does not (renaming a file to itself works).
    pub fn succeeds_on(&self, model: &DatalogModel) -> bool {
        let exists = |f: u8| model.contains_key(&file_name(f));
        match *self {
            DatalogOp::Create(f) => !exists(f),
            DatalogOp::Write { file, .. } => exists(file),
            DatalogOp::Truncate(f, _) | DatalogOp::Remove(f) => exists(f),
            DatalogOp::Rename(from, to) => exists(from) && (from == to || !exists(to)),
        }
    }

    /// Runs the operation, the `index`-th of its sequence, on `store`, and checks it worked
    /// exactly when the model says it should, a refusal being `NotFound` or `Exists`; then
    /// applies it to `model`.
    pub fn run_checked<B: Backend>(
        &self,
        store: &Datalog<B>,
        index: usize,
        model: &mut DatalogModel,
    ) -> Result<(), String> {
        let expected = self.succeeds_on(model);
        match (self.run(store, index), expected) {
            (Ok(()), true) => {}
            (Err(DatalogError::NotFound { .. } | DatalogError::Exists { .. }), false) => {}
            (got, _) => {
                return Err(format!(
                    "{self:?} gave {got:?}, the model expects success {expected}"
                ))
            }
        }
        self.apply(index, model);
        Ok(())
    }

    fn run<B: Backend>(&self, store: &Datalog<B>, index: usize) -> Result<(), DatalogError> {
        match *self {
            DatalogOp::Create(f) => store.create_file(&file_name(f)).map(|_| ()),
            DatalogOp::Write {
                file,
                offset,
                len,
                mode,
            } => {
                let id = store.open_file(&file_name(file))?;
                let data = written_bytes(index, len);
                match mode {
                    Some(mode) => store.write_at_with(id, offset, &data, mode),
                    None => store.write_at(id, offset, &data),
                }
            }
            DatalogOp::Truncate(f, size) => {
                let id = store.open_file(&file_name(f))?;
                store.truncate(id, size)
            }
            DatalogOp::Rename(from, to) => store.rename(&file_name(from), &file_name(to)),
            DatalogOp::Remove(f) => store.remove(&file_name(f)),
        }
    }

    /// File 0 created, then `n` small writes to it (1, 7, 64 or 300 bytes) at unaligned
    /// offsets over two pages, from `seed`.
    pub fn small_writes(n: usize, mode: WriteMode, seed: u64) -> Vec<DatalogOp> {
        let mut rng = SplitMix64::new(seed);
        let mut ops = vec![DatalogOp::Create(0)];
        for _ in 0..n {
            let len = [1, 7, 64, 300][rng.below(4) as usize];
            ops.push(DatalogOp::write(0, rng.below(2 * PAGE), len, mode));
        }
        ops
    }

    /// Operations on files `0..files`, offsets and sizes below `span`, writes of `1..max_len`
    /// bytes in any mode; writes the most, creates next.
    #[cfg(feature = "proptest")]
    pub fn strategy(
        files: u8,
        span: u64,
        max_len: u64,
    ) -> impl proptest::strategy::Strategy<Value = DatalogOp> {
        use proptest::prelude::*;
        let file = 0..files;
        let mode = proptest::sample::select(MODES.to_vec());
        prop_oneof![
            6 => (file.clone(), 0..span, 1..max_len, mode).prop_map(|(file, offset, len, mode)| {
                DatalogOp::Write { file, offset, len, mode }
            }),
            1 => (file.clone(), 0..span).prop_map(|(f, size)| DatalogOp::Truncate(f, size)),
            1 => (file.clone(), file.clone()).prop_map(|(a, b)| DatalogOp::Rename(a, b)),
            1 => file.clone().prop_map(DatalogOp::Remove),
            2 => file.prop_map(DatalogOp::Create),
        ]
    }
}

impl ModelOp for DatalogOp {
    type Model = DatalogModel;

    fn apply(&self, index: usize, model: &mut DatalogModel) {
        if !self.succeeds_on(model) {
            return;
        }
        match *self {
            DatalogOp::Create(f) => {
                model.insert(file_name(f), Vec::new());
            }
            DatalogOp::Write {
                file, offset, len, ..
            } => {
                let bytes = model.get_mut(&file_name(file)).expect("the file exists");
                write_into(bytes, offset, &written_bytes(index, len));
            }
            DatalogOp::Truncate(f, size) => {
                let bytes = model.get_mut(&file_name(f)).expect("the file exists");
                bytes.resize(size as usize, 0);
            }
            DatalogOp::Rename(from, to) => {
                let bytes = model.remove(&file_name(from)).expect("the file exists");
                model.insert(file_name(to), bytes);
            }
            DatalogOp::Remove(f) => {
                model.remove(&file_name(f));
            }
        }
    }
}

/// `data` written into the model of a file at `offset`, growing it with zeros as needed.
pub fn write_into(file: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if file.len() < end {
        file.resize(end, 0);
    }
    file[offset as usize..end].copy_from_slice(data);
}

/// Runs `ops` in order on `store`, each checked against `model` ([`DatalogOp::run_checked`]),
/// telling the pool after each that an operation returned.
pub fn run_all<B: Backend>(
    store: &Datalog<B>,
    pool: &Pool<B>,
    ops: &[DatalogOp],
    model: &mut DatalogModel,
) -> Result<(), String> {
    run_each(pool, ops, model, |index, op, model| {
        op.run_checked(store, index, model)
    })
}

/// The bytes of file `id`, read with a buffer longer than the file: the read must stop at the
/// file's length.
pub fn file_contents<B: Backend>(store: &Datalog<B>, id: FileId) -> Result<Vec<u8>, String> {
    let len = store.len(id).map_err(|e| failed("len", e))?;
    let mut buf = vec![0xAA; len as usize + 7];
    let got = store
        .read_at(id, 0, &mut buf)
        .map_err(|e| failed("read_at", e))?;
    if got as u64 != len {
        return Err(format!("read {got} bytes of a {len}-byte file"));
    }
    buf.truncate(got);
    Ok(buf)
}

/// Every file of `store`, read in full ([`file_contents`]).
pub fn contents<B: Backend>(store: &Datalog<B>) -> Result<DatalogModel, String> {
    let mut out = DatalogModel::new();
    for name in store.list() {
        let id = store.open_file(&name).map_err(|e| failed("open_file", e))?;
        let bytes = file_contents(store, id).map_err(|e| format!("{name}: {e}"))?;
        out.insert(name, bytes);
    }
    Ok(out)
}

/// Checks a (recovered) store reads back in full, its heap holds exactly its blocks and
/// `verify()` finds nothing. Returns its contents.
pub fn check_store<B: Backend>(heap: &Heap<B>, store: &Datalog<B>) -> Result<DatalogModel, String> {
    let now = contents(store)?;
    heap_holds_exactly(heap, &store.blocks(), "store")?;
    structure_verifies(store.verify())?;
    Ok(now)
}

/// The model in brief: each file's name and length.
pub fn describe(model: &DatalogModel) -> String {
    model
        .iter()
        .map(|(name, bytes)| format!("{name}: {} bytes", bytes.len()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Crash-tests `ops` on a fresh store with `policy` and four file slots (batched fences). The
/// workload checks every result against the model and reads every file back after every
/// operation; every crash image must recover (`Heap::open`, `Datalog::open`) to a store that
/// has the policy it was created with, reads back in full with exactly its blocks in the heap
/// ([`check_store`]), holds the model after the operations that returned, or after the
/// interrupted one too, and takes one more write. Panics with the harness's report on a failure.
pub fn crash_ops(test: &CrashTest, policy: Policy, ops: &[DatalogOp]) -> Report {
    crash_ops_outcome(test, policy, ops).unwrap_or_else(|failure| panic!("{failure}"))
}

/// [`crash_ops`] for a test that expects a failure: returns it instead of panicking.
pub fn crash_ops_outcome(
    test: &CrashTest,
    policy: Policy,
    ops: &[DatalogOp],
) -> Result<Report, Box<CrashFailure>> {
    let history = History::of(ops);
    crash_test_outcome_with_recovery(
        test,
        |pool| {
            let heap = simulated_heap(pool, FencePolicy::Batched);
            Datalog::create(
                &heap,
                pool.root_offset(),
                DatalogConfig {
                    max_files: 4,
                    policy,
                },
            )
            .expect("create the store");
        },
        |pool| {
            let heap = Heap::open(pool.clone()).expect("open the heap");
            let store = Datalog::open(&heap, pool.root_offset()).expect("open the store");
            run_each(pool, ops, &mut DatalogModel::new(), |index, op, model| {
                op.run_checked(&store, index, model)?;
                agree("the files read back".to_string(), &contents(&store)?, model)
            })
            .unwrap_or_else(|e| panic!("{e}"));
        },
        recover,
        |pool, crash| {
            let heap = Heap::open(pool.clone()).map_err(|e| failed("Heap::open", e))?;
            let store =
                Datalog::open(&heap, pool.root_offset()).map_err(|e| failed("Datalog::open", e))?;
            if store.policy() != policy {
                return Err(format!(
                    "the store recovered with policy {:?}, created with {policy:?}",
                    store.policy()
                ));
            }
            let now = check_store(&heap, &store)?;
            let done = crash.operations_completed as usize;
            if !history.admits(&now, done) {
                return Err(format!(
                    "after {done} operations the store holds [{}], the model [{}] (next op {:?})",
                    describe(&now),
                    describe(history.after(done)),
                    ops.get(done)
                ));
            }
            // The recovered store keeps working: one more write lands.
            if let Some(name) = now.keys().next() {
                let id = store.open_file(name).map_err(|e| failed("open_file", e))?;
                store
                    .write_at(id, 3, b"again")
                    .map_err(|e| failed("a write after recovery", e))?;
            }
            Ok(())
        },
    )
}

/// The datalog's recovery, as a restart runs it: open the heap (rolling back an interrupted
/// transaction), then the store (scanning the logs, dropping uncommitted entries).
pub fn recover<B: Backend>(pool: &Arc<Pool<B>>) -> Result<(), String> {
    let heap = Heap::open(pool.clone()).map_err(|e| failed("Heap::open", e))?;
    Datalog::open(&heap, pool.root_offset()).map_err(|e| failed("Datalog::open", e))?;
    Ok(())
}
