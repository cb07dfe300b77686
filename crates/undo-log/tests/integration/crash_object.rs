//! Object updates under crashes, in place and out of place: after recovery the slot points to
//! a block holding exactly the old or the new version of the object (the model after the
//! updates that completed, or after the interrupted one), and the heap walk shows that block
//! and nothing else, so neither the old nor the new copy leaks.

use std::cell::RefCell;
use std::sync::Arc;

use pmem_ordering::sim::{Crash, CrashFailure, CrashPoints, CrashTest, Images, Report, SimConfig};
use pmem_ordering::{Backend, Pool};
use pmem_test_kit::crash_test_outcome;
use pmem_test_kit::fixture::{
    check_chunks, heap_config, recover_and_walk_heap, simulated_heap_with,
};
use pmem_undo_log::{object, FencePolicy, Heap, HeapConfig};

const POOL_SIZE: u64 = 128 << 10;
const ROOT_SIZE: u64 = 256;
/// One lane: an in-place update of a 4 KiB object snapshots it whole.
const OBJECT_HEAP: HeapConfig = heap_config(1, 8192, 4096);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Update {
    InPlace,
    OutOfPlace,
}

/// The updates applied, in order: both kinds, each after each.
const UPDATES: [Update; 6] = [
    Update::InPlace,
    Update::OutOfPlace,
    Update::InPlace,
    Update::OutOfPlace,
    Update::OutOfPlace,
    Update::InPlace,
];

/// Version `v` of an object of `size` bytes.
fn version(v: u64, size: u64) -> Vec<u8> {
    (0..size)
        .map(|i| ((v * 97 + i * 13 + i / 251) % 255) as u8 + 1)
        .collect()
}

fn slot<B: Backend>(pool: &Pool<B>) -> u64 {
    pool.root_offset()
}

fn run(
    policy: FencePolicy,
    sim: SimConfig,
    size: u64,
    points: CrashPoints,
    images: Images,
) -> Result<Report, Box<CrashFailure>> {
    // pointers[k]: where the object is after k updates.
    let pointers: RefCell<Vec<u64>> = RefCell::new(Vec::new());
    let test = CrashTest::new(&format!("object-{size}-{}", policy.name()), sim)
        .pool("crash-object", POOL_SIZE, ROOT_SIZE)
        .points(points)
        .images(images)
        .seed(size)
        .fail_on_unpersisted(true);
    crash_test_outcome(
        &test,
        |pool| {
            let heap = simulated_heap_with(pool, OBJECT_HEAP, policy);
            let p = object::create(&heap, slot(pool), &version(0, size)).unwrap();
            pointers.borrow_mut().push(p.offset());
        },
        |pool| {
            let heap = Heap::open(pool.clone()).unwrap();
            for (i, update) in UPDATES.iter().enumerate() {
                let new = version(i as u64 + 1, size);
                let at = match update {
                    Update::InPlace => {
                        object::update_in_place(&heap, slot(pool), &new).unwrap();
                        *pointers.borrow().last().unwrap()
                    }
                    Update::OutOfPlace => object::update_out_of_place(&heap, slot(pool), &new)
                        .unwrap()
                        .offset(),
                };
                pool.operation_completed();
                pointers.borrow_mut().push(at);
            }
        },
        |pool, crash| check(pool, crash, policy, size, &pointers.borrow()),
    )
}

fn check<B: Backend>(
    pool: &Arc<Pool<B>>,
    crash: &Crash,
    policy: FencePolicy,
    size: u64,
    pointers: &[u64],
) -> Result<(), String> {
    let (heap, blocks) = recover_and_walk_heap(pool)?;
    if heap.policy() != policy {
        return Err(format!(
            "recovered under the {} policy, created under {}",
            heap.policy().name(),
            policy.name()
        ));
    }
    let at: u64 = pool.read(slot(pool)).unwrap();
    let mut bytes = vec![0u8; size as usize];
    pool.read_bytes(at, &mut bytes)
        .map_err(|e| format!("the slot points to {at:#x}: {e}"))?;
    let done = crash.operations_completed as usize;
    let matched = [done, done + 1]
        .into_iter()
        .filter(|&k| k < pointers.len())
        .find(|&k| pointers[k] == at && bytes == version(k as u64, size));
    if matched.is_none() {
        let which = (0..pointers.len() as u64).find(|&v| bytes == version(v, size));
        return Err(format!(
            "after {done} updates the slot points to {at:#x} holding {}; the model allows \
             version {done} at {:#x}{}",
            which.map_or("no version at all".into(), |v| format!("version {v}")),
            pointers[done],
            pointers
                .get(done + 1)
                .map(|p| format!(" or version {} at {p:#x}", done + 1))
                .unwrap_or_default()
        ));
    }
    match blocks.as_slice() {
        [(offset, block)] if *offset == at && *block >= size => {}
        _ => {
            return Err(format!(
                "the heap walk finds {blocks:x?}, but only the object at {at:#x} is live"
            ))
        }
    }
    check_chunks(&heap, &blocks)
}

fn pass(policy: FencePolicy, sim: SimConfig, size: u64, points: CrashPoints, images: Images) {
    let report = run(policy, sim, size, points, images).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.operations, UPDATES.len() as u64);
}

fn caught(size: u64, points: CrashPoints, images: Images) {
    let failure = run(FencePolicy::Themis, SimConfig::x86(), size, points, images)
        .expect_err("the themis policy must fail under the x86 model");
    assert!(
        failure.crash.is_some(),
        "caught by a crash image: {failure}"
    );
}

/// Small objects: every event.
const SMALL: [u64; 3] = [64, 256, 1000];
/// Large objects (an in-place update is over a thousand events): a sample.
const LARGE: [u64; 2] = [2048, 4096];

fn sample() -> CrashPoints {
    CrashPoints::Sample(700)
}

#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn small_objects_every_event_strict_and_batched_x86() {
    for size in SMALL {
        for policy in [FencePolicy::Strict, FencePolicy::Batched] {
            pass(
                policy,
                SimConfig::x86(),
                size,
                CrashPoints::Every,
                Images::Random(4),
            );
        }
    }
}

#[test]
fn large_objects_sampled_strict_and_batched_x86() {
    for size in LARGE {
        for policy in [FencePolicy::Strict, FencePolicy::Batched] {
            pass(policy, SimConfig::x86(), size, sample(), Images::Random(3));
        }
    }
}

#[test]
fn themis_policy_is_caught_under_x86() {
    for size in SMALL {
        caught(size, CrashPoints::Every, Images::Random(4));
    }
    for size in LARGE {
        caught(size, sample(), Images::Random(3));
    }
}

#[test]
fn themis_policy_survives_under_themis() {
    for size in SMALL {
        pass(
            FencePolicy::Themis,
            SimConfig::themis(),
            size,
            CrashPoints::Every,
            Images::Random(4),
        );
    }
    for size in LARGE {
        pass(
            FencePolicy::Themis,
            SimConfig::themis(),
            size,
            sample(),
            Images::Random(3),
        );
    }
}
