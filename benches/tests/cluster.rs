//! Runs the cluster section of `pmem-bench` as CI does (`--quick`): three nodes (processes of
//! the pmem-bench binary itself) made a cluster, the throughput rows of the four servers when
//! Redis's tools are installed (under `CI=true` they must be), one leader killed while a
//! client writes, and no acknowledged write lost. Times are printed, never asserted.

use std::path::Path;
use std::process::{Command, Stdio};

use pmem_bench::cluster::{PIPELINES, SERVERS, TESTS};
use pmem_bench::poolfile::default_pool_dir;
use serde_json::Value;

fn arg(p: &Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}

fn installed(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn positive(row: &Value, key: &str) -> f64 {
    let x = row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {row}"));
    assert!(x.is_finite() && x > 0.0, "{key} = {x} in {row}");
    x
}

/// The throughput rows: every (test, depth) cell has each server once, sane numbers, and the
/// cluster's own ratio 1.
fn check_network(rows: &[Value]) {
    assert_eq!(rows.len(), TESTS.len() * PIPELINES.len() * SERVERS.len());
    for test in TESTS {
        for pipeline in PIPELINES {
            let mut positions = Vec::new();
            for server in SERVERS {
                let row = rows
                    .iter()
                    .find(|r| {
                        r["test"] == test.to_ascii_uppercase()
                            && r["pipeline"] == pipeline
                            && r["server"] == server
                    })
                    .unwrap_or_else(|| panic!("no {test} -P {pipeline} row of {server}"));
                positive(row, "ops_per_sec");
                let p50 = positive(row, "p50_ms");
                let p99 = positive(row, "p99_ms");
                assert!(p99 >= p50, "percentiles out of order in {row}");
                let ratio = positive(row, "replicated_over_this");
                if server == SERVERS[0] {
                    assert_eq!(ratio, 1.0, "{row}");
                } else {
                    assert_eq!(row["elections"], 0, "{row}");
                }
                positions.push(row["position"].as_u64().expect("position"));
            }
            positions.sort_unstable();
            assert_eq!(positions, [0, 1, 2, 3], "each server once per cell");
        }
    }
}

#[test]
fn the_cluster_section_runs_quick_and_loses_no_acknowledged_write() {
    let tools = ["redis-benchmark", "redis-server"]
        .into_iter()
        .all(installed);
    assert!(
        tools || std::env::var_os("CI").is_none(),
        "Redis's tools not installed under CI (.ci/run installs redis-tools and redis-server)"
    );
    let pools = tempfile::Builder::new()
        .prefix("pmem-bench-test")
        .tempdir_in(default_pool_dir())
        .expect("make a pool directory");
    let out_dir = tempfile::tempdir().expect("make an output directory");
    let json = out_dir.path().join("cluster.json");
    let markdown = out_dir.path().join("cluster.md");
    let out = Command::new(env!("CARGO_BIN_EXE_pmem-bench"))
        .args(["--quick", "--section", "cluster", "--pool-dir"])
        .arg(arg(pools.path()))
        .args(["--json", arg(&json), "--markdown", arg(&markdown)])
        .output()
        .expect("run the pmem-bench binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pmem-bench failed:\n{stdout}\n{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(pools.path())
        .expect("list the pool directory")
        .collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read the JSON"))
            .expect("the JSON output parses");
    let section = &report["cluster"];

    let failover = &section["failover"];
    let rounds = failover["rounds"].as_array().expect("failover rounds");
    assert_eq!(rounds.len(), 1, "{failover}");
    for round in rounds {
        positive(round, "failover_ms");
        positive(round, "catch_up_ms");
        assert_ne!(round["killed"], round["new_leader"], "{round}");
    }
    assert!(
        failover["acknowledged"].as_u64().is_some_and(|n| n > 0),
        "{failover}"
    );
    assert_eq!(failover["lost"], 0, "acknowledged writes lost: {failover}");
    assert!(stdout.contains("acknowledged writes lost: 0"), "{stdout}");

    let rows = section["network"].as_array().expect("network rows");
    if tools {
        assert!(section["network_skipped"].is_null(), "{section}");
        check_network(rows);
    } else {
        println!("skipped the throughput half: Redis's tools are not installed");
        assert!(rows.is_empty());
        let reason = section["network_skipped"].as_str().expect("a skip reason");
        assert!(stdout.contains(reason), "{stdout}");
    }
    let md = std::fs::read_to_string(&markdown).expect("read the markdown");
    let throughput = if rows.is_empty() { 0 } else { rows.len() + 2 };
    assert_eq!(
        md.lines().filter(|l| l.starts_with("| ")).count(),
        throughput + rounds.len() + 2,
        "{md}"
    );
}
