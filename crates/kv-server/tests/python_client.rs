//! redis-py, the most used Python client, against the server: with its defaults (redis-py 8
//! sends `HELLO 3`), with RESP2 and with RESP3; its transactional pipelines and WATCH must
//! fail with nothing applied (tests/python/redis_py_client.py holds the checks). Needs
//! `python3` with the `redis` package (`.ci/run` installs it); elsewhere the test says it
//! skipped (and fails under `CI`, where a skip would hide a missing install).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::TestServer;

fn redis_py_or_skip() -> bool {
    let importable = Command::new("python3")
        .args(["-c", "import redis"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if importable {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "python3 with redis-py is not installed under CI (.ci/run installs it)"
    );
    println!("skipped: python3 with the redis package is not installed (pip install 'redis>=5')");
    false
}

#[test]
fn redis_py_with_its_defaults_resp2_and_resp3() {
    if !redis_py_or_skip() {
        return;
    }
    let server = TestServer::start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/redis_py_client.py");
    let output = Command::new("python3")
        .arg(&script)
        .arg(server.addr().port().to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.trim_end().ends_with("ok"), "{stdout}\n{stderr}");
}
