//! The long crash sweep: at least 10^6 crash images per structure and policy, printing
//! images per second for each. Ignored (hours, not CI); run it with
//! `cargo test --release -p pmem-test-kit --test long_sweep -- --ignored --nocapture`,
//! optionally with `CRASH_SWEEP=<structure-policy substring>` and `CRASH_SWEEP_IMAGES=<n>`.

use std::time::Instant;

use pmem_ordering::sim::{CrashPoints, Images};
use pmem_test_kit::cases;

// `.ci/run` runs every other ignored test of the workspace and skips this one by its name.
#[test]
#[ignore = "the long sweep: hours; run by hand (docs/crash-testing.md)"]
fn a_million_crash_images_per_structure_and_policy() {
    let only = std::env::var("CRASH_SWEEP").unwrap_or_default();
    let target: u64 = std::env::var("CRASH_SWEEP_IMAGES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let mut swept = 0;
    for case in cases::all()
        .into_iter()
        .filter(|c| c.name().contains(&only))
    {
        let start = Instant::now();
        let (mut images, mut seed) = (0u64, 0u64);
        // Fresh seeds draw new workloads, crash points and images until the target is met.
        while images < target {
            seed += 1;
            let test = case
                .test(case.sim)
                .points(CrashPoints::Sample(200))
                .images(Images::Enumerate {
                    limit: 256,
                    fallback: 16,
                })
                .seed(seed)
                .recovery_crashes(CrashPoints::Sample(4), Images::Random(1));
            let report = case.run(&test, 40, seed).unwrap_or_else(|f| panic!("{f}"));
            images += report.images + report.recovery_images;
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{:24} {images:>9} images in {secs:>8.1} s: {:>8.0} images/s ({seed} workloads)",
            case.name(),
            images as f64 / secs
        );
        swept += 1;
    }
    assert!(swept > 0, "no crash case matches CRASH_SWEEP={only:?}");
}
