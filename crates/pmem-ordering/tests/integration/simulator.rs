//! Tests that prove the simulator is real: small protocols with known verdicts, each run through
//! the public harness.

use pmem_ordering::sim::{
    CrashFailure, CrashPoints, CrashTest, Finding, ImageKind, Images, SimBackend, SimConfig,
};
use pmem_ordering::{FlushKind, NtPending, Pool, PoolError};
use proptest::prelude::*;

/// The pool as the crash harness hands it to a workload or a check.
type SimPool = std::sync::Arc<Pool<SimBackend>>;

/// [`Pool::nt_write`] for this file's tests.
fn nt_write(pool: &SimPool, offset: u64, bytes: &[u8]) -> Result<NtPending, PoolError> {
    pool.nt_write(offset, bytes)
}

/// A crash test with the harness's defaults, but under Miri on a 16 KiB pool instead of 64 KiB:
/// Miri interprets every copy of every crash image, and the protocols here use only the root.
fn crash_test(name: &str, config: SimConfig) -> CrashTest {
    let test = CrashTest::new(name, config);
    if cfg!(miri) {
        test.pool("crash-test", 16 << 10, 4096 - 64)
    } else {
        test
    }
}

const ENUMERATE: Images = Images::Enumerate {
    limit: 1 << 12,
    fallback: 64,
};

/// Offsets used by the small protocols: data in one line, the flag in another.
fn data_at(pool: &SimPool) -> u64 {
    pool.root_offset()
}
fn flag_at(pool: &SimPool) -> u64 {
    pool.root_offset() + 256
}

const DATA: [u8; 24] = *b"twenty-four bytes of log";

/// Recovery's invariant for data + flag protocols: a set flag means the data is whole.
fn flag_implies_data(pool: &SimPool) -> Result<(), String> {
    let flag = pool.load_u64(flag_at(pool)).map_err(|e| e.to_string())?;
    let data: [u8; 24] = pool.read(data_at(pool)).map_err(|e| e.to_string())?;
    if flag == 1 && data != DATA {
        return Err(format!("flag is set but the data is {data:?}"));
    }
    Ok(())
}

fn expect_caught(result: Result<impl std::fmt::Debug, Box<CrashFailure>>) -> Box<CrashFailure> {
    match result {
        Ok(report) => panic!("the bug was not caught: {report:?}"),
        Err(failure) => failure,
    }
}

#[test]
fn data_persisted_then_flag_persisted_passes_at_every_event() {
    let report = crash_test("data-then-flag", SimConfig::x86())
        .points(CrashPoints::Every)
        .images(ENUMERATE)
        .fail_on_unpersisted(true)
        .run(
            |pool| {
                let w = pool.write(data_at(pool), &DATA).unwrap();
                pool.persist(w);
                let f = pool.store_u64(flag_at(pool), 1).unwrap();
                pool.persist(f);
                pool.operation_completed();
            },
            |pool, _| flag_implies_data(pool),
        )
        .unwrap();
    // 3 data chunks + 1 flush + 1 fence + 1 flag + 1 flush + 1 fence + the operation's end.
    assert_eq!(report.events, 9);
    assert_eq!(report.points, 10);
    assert!(
        report.images > report.points,
        "pending stores must have produced several images"
    );
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

#[test]
fn flag_persisted_but_data_never_flushed_is_caught() {
    let failure = expect_caught(
        crash_test("flag-without-data-flush", SimConfig::x86())
            .images(ENUMERATE)
            .run(
                |pool| {
                    let _ = pool.write(data_at(pool), &DATA).unwrap();
                    let f = pool.store_u64(flag_at(pool), 1).unwrap();
                    pool.persist(f);
                    pool.operation_completed();
                },
                |pool, _| flag_implies_data(pool),
            ),
    );
    let crash = failure.crash.as_ref().expect("a crash image failed");
    assert!(crash
        .lines
        .iter()
        .any(|l| l.offset == 4096 && l.included < l.pending));
    // The report names the seed, the event and the lines, and says how to replay.
    let text = failure.to_string();
    for needle in [
        "flag-without-data-flush",
        "seed 0x0",
        "crash after event",
        "line 0x1000",
        "replay",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}

#[test]
fn flag_persisted_but_data_never_flushed_is_reported_as_unpersisted() {
    let failure = expect_caught(
        crash_test("unpersisted-finding", SimConfig::x86())
            .fail_on_unpersisted(true)
            .run(
                |pool| {
                    let _ = pool.write(data_at(pool), &DATA).unwrap();
                    let f = pool.store_u64(flag_at(pool), 1).unwrap();
                    pool.persist(f);
                    pool.operation_completed();
                },
                |_, _| Ok(()),
            ),
    );
    assert!(
        failure.message.contains("line 0x1000"),
        "{}",
        failure.message
    );
}

#[test]
fn data_flushed_without_fence_before_flag_is_caught() {
    let failure = expect_caught(
        crash_test("flush-no-fence", SimConfig::x86())
            .images(ENUMERATE)
            .run(
                |pool| {
                    let w = pool.write(data_at(pool), &DATA).unwrap();
                    let _unfenced = pool.flush(w);
                    let f = pool.store_u64(flag_at(pool), 1).unwrap();
                    pool.persist(f);
                    pool.operation_completed();
                },
                |pool, _| flag_implies_data(pool),
            ),
    );
    let crash = failure.crash.unwrap();
    // The bad image exists only between the flag store and the fence.
    assert!(
        crash.event >= 5 && crash.event <= 7,
        "crash at {}",
        crash.event
    );
}

#[test]
fn clflush_needs_no_fence() {
    let config = SimConfig {
        flush: FlushKind::Clflush,
        ..SimConfig::x86()
    };
    crash_test("clflush-then-flag", config)
        .images(ENUMERATE)
        .run(
            |pool| {
                let w = pool.write(data_at(pool), &DATA).unwrap();
                let _ordered_by_itself = pool.flush(w);
                let f = pool.store_u64(flag_at(pool), 1).unwrap();
                pool.persist(f);
                pool.operation_completed();
            },
            |pool, _| flag_implies_data(pool),
        )
        .unwrap();
}

#[test]
fn a_run_that_checks_no_crash_point_fails() {
    let outcome = crash_test("points-past-the-end", SimConfig::x86())
        .points(CrashPoints::At(vec![1_000_000]))
        .run(
            |pool| {
                let w = pool.store_u64(flag_at(pool), 1).unwrap();
                pool.persist(w);
                pool.operation_completed();
            },
            |_, _| Ok(()),
        );
    let failure = expect_caught(outcome);
    assert!(
        failure.message.contains("nothing was checked"),
        "{}",
        failure.message
    );
}

/// An undo-log entry written with nt-stores, then the data it protects with a temporal store and
/// no fence between: recovery trusts the data only if the log entry is there.
fn log_then_data(pool: &SimPool) {
    let log = pool.root_offset();
    let data = pool.root_offset() + 512;
    let _unordered = nt_write(pool, log, &DATA).unwrap();
    let w = pool.write(data, &[0xAB; 8]).unwrap();
    pool.persist(w);
    pool.operation_completed();
}

fn data_implies_log(pool: &SimPool) -> Result<(), String> {
    let log: [u8; 24] = pool.read(pool.root_offset()).map_err(|e| e.to_string())?;
    let data: [u8; 8] = pool
        .read(pool.root_offset() + 512)
        .map_err(|e| e.to_string())?;
    if data == [0xAB; 8] && log != DATA {
        return Err(format!("data written but log entry is {log:?}"));
    }
    Ok(())
}

#[test]
fn nt_log_then_data_without_fence_is_caught_under_x86() {
    let failure = expect_caught(
        crash_test("nt-then-t-x86", SimConfig::x86())
            .images(ENUMERATE)
            .run(log_then_data, |pool, _| data_implies_log(pool)),
    );
    assert!(failure.crash.unwrap().lines.iter().any(|l| l.non_temporal));
}

#[test]
fn nt_log_then_data_without_fence_passes_under_themis() {
    let report = crash_test("nt-then-t-themis", SimConfig::themis())
        .images(ENUMERATE)
        .run(log_then_data, |pool, _| data_implies_log(pool))
        .unwrap();
    assert!(report.images > 0);
}

#[test]
fn write_after_orders_nt_before_t_under_x86() {
    crash_test("write-after-x86", SimConfig::x86())
        .images(ENUMERATE)
        .run(
            |pool| {
                let token = nt_write(pool, pool.root_offset(), &DATA).unwrap();
                let w = pool
                    .write_after(token, pool.root_offset() + 512, &[0xAB; 8])
                    .unwrap();
                pool.persist(w);
                pool.operation_completed();
            },
            |pool, _| data_implies_log(pool),
        )
        .unwrap();
}

/// Data at the start of a line, then a flag later in the same line, one flush for both:
/// correct only because one line's stores persist in order.
fn same_line_data_then_flag(pool: &SimPool) {
    let line = pool.root_offset() + 64;
    let _ = pool.write(line, &[5u8; 8]).unwrap();
    let w = pool.store_u64(line + 56, 1).unwrap();
    pool.persist(w);
    pool.operation_completed();
}

fn same_line_check(pool: &SimPool) -> Result<(), String> {
    let line = pool.root_offset() + 64;
    let data: [u8; 8] = pool.read(line).map_err(|e| e.to_string())?;
    let flag = pool.load_u64(line + 56).map_err(|e| e.to_string())?;
    if flag == 1 && data != [5u8; 8] {
        return Err("flag persisted before the earlier store of its line".into());
    }
    Ok(())
}

#[test]
fn same_line_order_passes_under_the_prefix_rule() {
    crash_test("same-line-prefix", SimConfig::x86())
        .images(ENUMERATE)
        .run(same_line_data_then_flag, |pool, _| same_line_check(pool))
        .unwrap();
}

#[test]
fn same_line_order_is_caught_in_torn_line_mode() {
    expect_caught(
        crash_test("same-line-torn", SimConfig::x86().torn())
            .images(ENUMERATE)
            .run(same_line_data_then_flag, |pool, _| same_line_check(pool)),
    );
}

/// The number of distinct crash images the end of a workload allows.
fn count_images(config: SimConfig, workload: impl FnOnce(&SimPool)) -> u64 {
    let at_end = std::cell::Cell::new(0u64);
    crash_test("count", config)
        .images(ENUMERATE)
        .run(workload, |_, crash| {
            if crash.event == crash.total_events {
                at_end.set(at_end.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    at_end.get()
}

#[test]
fn enumeration_counts_three_stores_to_three_lines() {
    let n = count_images(SimConfig::x86(), |pool| {
        for i in 0..3u64 {
            let _ = pool.store_u64(pool.root_offset() + 64 * i, i + 1).unwrap();
        }
    });
    assert_eq!(n, 8);
}

#[test]
fn enumeration_counts_three_stores_to_one_line() {
    let n = count_images(SimConfig::x86(), |pool| {
        for i in 0..3u64 {
            let _ = pool.store_u64(pool.root_offset() + 8 * i, i + 1).unwrap();
        }
    });
    assert_eq!(n, 4);
}

#[test]
fn enumeration_counts_three_stores_to_one_torn_line() {
    let n = count_images(SimConfig::x86().torn(), |pool| {
        for i in 0..3u64 {
            let _ = pool.store_u64(pool.root_offset() + 8 * i, i + 1).unwrap();
        }
    });
    assert_eq!(n, 8);
}

#[test]
fn enumeration_counts_nt_stores_as_any_subset() {
    let n = count_images(SimConfig::x86(), |pool| {
        for i in 0..3u64 {
            let _ = nt_write(pool, pool.root_offset() + 8 * i, &(i + 1).to_ne_bytes()).unwrap();
        }
    });
    assert_eq!(n, 8);
}

#[test]
fn themis_forbids_a_temporal_store_without_its_earlier_nt_store() {
    let workload = |pool: &SimPool| {
        let _ = nt_write(pool, pool.root_offset(), &1u64.to_ne_bytes()).unwrap();
        let _ = pool.store_u64(pool.root_offset() + 512, 2).unwrap();
    };
    assert_eq!(count_images(SimConfig::x86(), workload), 4);
    // (nt, t) in {00, 10, 11}: the temporal store alone cannot persist.
    assert_eq!(count_images(SimConfig::themis(), workload), 3);
}

#[test]
fn findings_report_clean_flushes_and_empty_fences() {
    // One crash point, the start: this test is about the findings of the run itself.
    let report = crash_test("findings", SimConfig::x86())
        .points(CrashPoints::At(vec![0]))
        .run(
            |pool| {
                let _ = pool.flush_range(pool.root_offset(), 8).unwrap();
                pool.sfence();
                let w = pool.write(pool.root_offset(), &[1; 8]).unwrap();
                pool.persist(w);
                pool.operation_completed();
            },
            |_, _| Ok(()),
        )
        .unwrap();
    assert_eq!(
        report.findings,
        vec![
            Finding::FlushOfCleanLine {
                event: 0,
                line: 4096
            },
            Finding::FenceWithNothingPending { event: 1 },
        ]
    );
    assert_eq!(report.unpersisted().count(), 0);
}

#[test]
fn a_replayed_failure_fails_the_same_way() {
    let test = crash_test("replay", SimConfig::x86())
        .images(Images::Random(4))
        .seed(99);
    let workload = |pool: &SimPool| {
        let _ = pool.write(data_at(pool), &DATA).unwrap();
        let f = pool.store_u64(flag_at(pool), 1).unwrap();
        pool.persist(f);
        pool.operation_completed();
    };
    let first = expect_caught(test.run(workload, |pool, _| flag_implies_data(pool)));
    let crash = first.crash.clone().unwrap();
    let again = expect_caught(
        test.clone()
            .replay(crash.event, crash.image)
            .run(workload, |pool, _| flag_implies_data(pool)),
    );
    let again_crash = again.crash.unwrap();
    assert_eq!(
        (again_crash.event, again_crash.image),
        (crash.event, crash.image)
    );
    assert_eq!(again_crash.lines, crash.lines);
    assert_eq!(again.message, first.message);
}

#[test]
fn sampled_points_are_bounded_and_include_the_end() {
    let mut seen = std::collections::BTreeSet::new();
    let seen_cell = std::cell::RefCell::new(&mut seen);
    let report = crash_test("sample", SimConfig::x86())
        .points(CrashPoints::Sample(5))
        .images(Images::Extremes)
        .run(
            |pool| {
                for i in 0..50u64 {
                    let w = pool
                        .store_u64(pool.root_offset() + 8 * (i % 32), i)
                        .unwrap();
                    pool.persist(w);
                    pool.operation_completed();
                }
            },
            |_, c| {
                seen_cell.borrow_mut().insert(c.event);
                Ok(())
            },
        )
        .unwrap();
    assert!(report.points <= 6 && report.points >= 1);
    assert!(
        seen.contains(&report.events),
        "the end of the workload is always checked"
    );
}

#[test]
fn two_threads_record_into_one_trace() {
    // Counter slots per thread; fewer under Miri, which replays every crash image slowly.
    const SLOTS: u64 = if cfg!(miri) { 5 } else { 20 };
    let report = crash_test("two-threads", SimConfig::x86())
        .images(Images::Random(4))
        .fail_on_unpersisted(true)
        .run(
            |pool| {
                std::thread::scope(|s| {
                    for t in 0..2u64 {
                        s.spawn(move || {
                            for i in 0..SLOTS {
                                let at = pool.root_offset() + 512 * t + 8 * i;
                                let w = pool.store_u64(at, i + 1).unwrap();
                                pool.persist(w);
                                pool.operation_completed();
                            }
                        });
                    }
                });
            },
            |pool, crash| {
                // Each thread's counter slots fill in order: slot i set implies slot i-1 set.
                for t in 0..2u64 {
                    let mut seen_gap = false;
                    for i in 0..SLOTS {
                        let v = pool.load_u64(pool.root_offset() + 512 * t + 8 * i).unwrap();
                        if v == 0 {
                            seen_gap = true;
                        } else if seen_gap {
                            return Err(format!(
                                "thread {t} slot {i} persisted after a gap ({crash:?})"
                            ));
                        }
                    }
                }
                Ok(())
            },
        )
        .unwrap();
    assert_eq!(report.operations, 2 * SLOTS);
}

#[derive(Clone, Debug)]
enum Op {
    Write { at: u64, bytes: Vec<u8> },
    NtWrite { at: u64, bytes: Vec<u8> },
    Flush { at: u64, len: u64 },
    Fence,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..1024, proptest::collection::vec(any::<u8>(), 1..80))
            .prop_map(|(at, bytes)| Op::Write { at, bytes }),
        (0u64..1024, proptest::collection::vec(any::<u8>(), 1..80))
            .prop_map(|(at, bytes)| Op::NtWrite { at, bytes }),
        (0u64..1024, 1u64..200).prop_map(|(at, len)| Op::Flush { at, len }),
        Just(Op::Fence),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// At an operation boundary, the image with everything pending persisted is exactly the
    /// memory the workload saw; in every image each byte holds a value it held at some time up to
    /// the end of the interrupted operation (no value out of thin air); and once everything is flushed and
    /// fenced, the only image is the final memory.
    #[test]
    #[cfg_attr(miri, ignore = "hundreds of crash images per case, with the regression seeds: minutes under Miri")]
    fn images_are_bounded_by_what_was_written(ops in proptest::collection::vec(op(), 1..24), torn in any::<bool>()) {
        let config = if torn { SimConfig::x86().torn() } else { SimConfig::x86() };
        let snapshots = std::cell::RefCell::new(Vec::<(u64, Vec<u8>)>::new());
        let region = 2048usize;
        let report = crash_test("bounded", config)
            .images(Images::Random(3))
            .run(
                |pool| {
                    let base = pool.root_offset();
                    let snap = |pool: &SimPool| {
                        let mut m = vec![0u8; region];
                        pool.read_bytes(base, &mut m).unwrap();
                        snapshots.borrow_mut().push((pool.sim().event_count(), m));
                    };
                    snap(pool);
                    for op in &ops {
                        match op {
                            Op::Write { at, bytes } => { let _ = pool.write(base + at, bytes).unwrap(); }
                            Op::NtWrite { at, bytes } => { let _ = nt_write(pool, base + at, bytes).unwrap(); }
                            Op::Flush { at, len } => { let _ = pool.flush_range(base + at, *len).unwrap(); }
                            Op::Fence => { pool.sfence(); }
                        }
                        snap(pool);
                    }
                    let _ = pool.persist_range(base, region as u64).unwrap();
                    snap(pool);
                },
                |pool, crash| {
                    let mut image = vec![0u8; region];
                    pool.read_bytes(pool.root_offset(), &mut image).unwrap();
                    let snaps = snapshots.borrow();
                    // Snapshots up to the crash, and the one after the interrupted operation.
                    let next = snaps.iter().position(|(e, _)| *e > crash.event).unwrap_or(snaps.len() - 1);
                    let upto: Vec<&Vec<u8>> = snaps[..=next].iter().map(|(_, m)| m).collect();
                    if let Some((_, exact)) = snaps.iter().find(|(e, _)| *e == crash.event) {
                        if crash.kind == ImageKind::Everything && &image != exact {
                            return Err("everything-persisted image differs from memory".into());
                        }
                        if crash.lines.is_empty() && &image != exact {
                            return Err("nothing pending, yet the image differs from memory".into());
                        }
                    }
                    for w in (0..region).step_by(8) {
                        let word = &image[w..w + 8];
                        // Each byte of the word held its value at some time up to the crash.
                        for b in 0..8 {
                            if !upto.iter().any(|m| m[w + b] == word[b]) {
                                return Err(format!("byte {} holds a value never written", w + b));
                            }
                        }
                    }
                    Ok(())
                },
            );
        prop_assert!(report.is_ok(), "{}", report.unwrap_err());
    }
}
