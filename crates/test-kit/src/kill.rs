//! Real process deaths: a test re-executes its own binary as a *child* that writes a store
//! file and acknowledges each step it finished on its stdout; the parent kills it with SIGKILL
//! at a chosen moment and checks what the reopened store holds against the steps acknowledged.
//!
//! The child is the same test run again ([`spawn`] passes `--exact` and the test's name) with
//! environment variables the test reads first thing to know it is the child (no `fork` inside
//! the multi-threaded libtest harness). It acknowledges step `i` with [`acknowledge`]; the
//! parent's reader thread checks the steps come in order from the first one.
//!
//! What this tests, and what not: SIGKILL ends the process but not the kernel, so every store
//! the child made reaches the file's page cache, flushed or not. This exercises a protocol
//! across a real process death (work cut short at any instruction, the pool lock of a dead
//! owner), not the loss of unflushed cache lines at a power failure: the crash simulator
//! covers that.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bounds each wait for the child's progress, so a stuck child fails the test instead of
/// hanging it.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// The two environment variables a store-writing child reads: the store file's path and the
/// first step it runs. Their names are the test's own, so two tests never take each other's.
#[derive(Clone, Copy, Debug)]
pub struct ChildVars {
    /// The variable holding the store file's path.
    pub path: &'static str,
    /// The variable holding the first step.
    pub start: &'static str,
}

impl ChildVars {
    /// In the child (its environment holds both), the store's path and the first step; `None`
    /// in the parent.
    pub fn of_child(self) -> Option<(PathBuf, u64)> {
        let path = std::env::var_os(self.path)?;
        let start = std::env::var(self.start)
            .unwrap_or_else(|_| panic!("the child's first step ({})", self.start))
            .parse()
            .expect("a step index");
        Some((PathBuf::from(path), start))
    }

    /// The environment of a child writing `path` from step `start`, for [`spawn`].
    pub fn env(self, path: &std::path::Path, start: u64) -> [(&'static str, OsString); 2] {
        [
            (self.path, path.as_os_str().to_owned()),
            (self.start, start.to_string().into()),
        ]
    }
}

/// A running child and the acknowledgements its reader thread passes on.
pub struct Running {
    child: Child,
    acks: mpsc::Receiver<u64>,
    reader: std::thread::JoinHandle<Option<u64>>,
    stderr: PathBuf,
}

/// Re-execute this test binary as the child: the test `test_name` alone, with `env` set, its
/// stderr to the file `stderr`; it must acknowledge steps from `start` on, in order.
pub fn spawn(test_name: &str, env: &[(&str, OsString)], start: u64, stderr: PathBuf) -> Running {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command
        .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).expect("the child's stderr file"));
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .spawn()
        .expect("re-execute the test binary as the child");
    let stdout = child.stdout.take().expect("the child's stdout");
    let (tx, acks) = mpsc::channel();
    // Reads the acknowledgements on another thread, so the wait for them can time out; returns
    // the last one.
    let reader = std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        let mut last = None;
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            // A line cut short by the kill was not acknowledged.
            let Some(text) = line.strip_suffix(b"\n") else {
                break;
            };
            // libtest's own output may precede an acknowledgement on its line.
            let text = String::from_utf8_lossy(text);
            if let Some((_, i)) = text.split_once("acknowledged ") {
                let i: u64 = i.trim().parse().expect("a step index");
                let expected = last.map_or(start, |l: u64| l + 1);
                assert_eq!(i, expected, "steps are acknowledged in order");
                last = Some(i);
                let _ = tx.send(i);
            }
        }
        last
    });
    Running {
        child,
        acks,
        reader,
        stderr,
    }
}

/// In the child: acknowledge step `i` (once it is done) to the parent.
pub fn acknowledge(out: &mut impl Write, i: u64) {
    writeln!(out, "acknowledged {i}").expect("child: acknowledge");
    out.flush().expect("child: acknowledge");
}

/// Waits for acknowledgement `target`, pauses `pause`, kills the child with SIGKILL, and
/// returns the number of steps done for sure (the last acknowledged index plus one; `start`
/// if none).
pub fn kill_after(mut running: Running, start: u64, target: u64, pause: Duration) -> u64 {
    let started = Instant::now();
    let mut seen = None;
    while seen.is_none_or(|s| s < target) {
        match running
            .acks
            .recv_timeout(DEADLINE.saturating_sub(started.elapsed()))
        {
            Ok(i) => seen = Some(i),
            Err(why) => {
                let _ = running.child.kill();
                let _ = running.child.wait();
                panic!(
                    "the child acknowledged up to {seen:?} of {start}..={target} ({why:?}); its \
                     stderr:\n{}",
                    std::fs::read_to_string(&running.stderr).unwrap_or_default()
                );
            }
        }
    }
    std::thread::sleep(pause);
    assert!(
        running
            .child
            .try_wait()
            .expect("the child's status")
            .is_none(),
        "the child stopped by itself; its stderr:\n{}",
        std::fs::read_to_string(&running.stderr).unwrap_or_default()
    );
    running.child.kill().expect("SIGKILL the child");
    let status = running.child.wait().expect("the child's status");
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the child was killed, not finished: {status:?}"
    );
    let last = running.reader.join().expect("the reader thread");
    last.map_or(start, |l| l + 1)
}

/// A directory for the store, named from `prefix`: the test kit's scratch directory
/// ([`crate::fixture::scratch_dir`]), so a kill test runs on the directory
/// `PMEM_TEST_POOL_DIR` names (a DAX mount) when it is set, else on tmpfs when there is one.
pub fn store_dir(prefix: &str) -> tempfile::TempDir {
    crate::fixture::scratch_dir(prefix)
}
