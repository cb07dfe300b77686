//! What a crash test reports: the crash a check is looking at, a passing run's counts, and a
//! failing crash with everything needed to replay it.

use std::fmt;

use super::event::Event;
use super::state::LineChoice;
use super::{Finding, SimConfig};

/// How one crash image was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// No pending store persisted.
    Nothing,
    /// Every pending store persisted.
    Everything,
    /// Drawn at random (the index of the draw at this point).
    Random(usize),
    /// Taken from the full enumeration (its index in it).
    Enumerated(usize),
}

impl fmt::Display for ImageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageKind::Nothing => write!(f, "nothing pending persisted"),
            ImageKind::Everything => write!(f, "everything pending persisted"),
            ImageKind::Random(i) => write!(f, "random draw {i}"),
            ImageKind::Enumerated(i) => write!(f, "enumerated choice {i}"),
        }
    }
}

/// What the invariant check is told about the crash it is looking at.
#[derive(Clone, Debug)]
pub struct Crash {
    /// Events executed before the crash.
    pub event: u64,
    /// Events the whole workload made.
    pub total_events: u64,
    /// Index of this image among those checked at this point (for replay).
    pub image: u64,
    /// How the image was chosen.
    pub kind: ImageKind,
    /// Operations of the workload that had returned
    /// ([`Pool::operation_completed`](crate::Pool::operation_completed)) before the crash. For
    /// durable linearizability, operations `0..operations_completed` must be visible and
    /// operation `operations_completed` (if any) must be all-or-nothing.
    pub operations_completed: u64,
    /// The lines that had pending stores, and how many of them the image includes.
    pub lines: Vec<LineChoice>,
    /// Set when this image is a crash *of recovery*: recovery ran (traced) on the crash image
    /// above and was crashed in turn ([`CrashTest::recovery_crashes`]). The invariant is the
    /// same: recovery makes no operation of its own.
    ///
    /// [`CrashTest::recovery_crashes`]: super::CrashTest::recovery_crashes
    pub recovery: Option<RecoveryCrash>,
}

/// Where a recovery run was crashed: the second crash of a [`Crash`].
#[derive(Clone, Debug)]
pub struct RecoveryCrash {
    /// Events of the recovery run executed before its crash.
    pub event: u64,
    /// Events the whole recovery run made.
    pub total_events: u64,
    /// Index of this image among those checked at this point of the recovery run.
    pub image: u64,
    /// How the image was chosen.
    pub kind: ImageKind,
    /// The recovery run's lines that had pending stores, and how many the image includes.
    pub lines: Vec<LineChoice>,
}

/// The outcome of a passing crash test: at least one crash point and one image were checked
/// (a run that checks none fails instead).
#[derive(Clone, Debug)]
pub struct Report {
    /// Events the workload made.
    pub events: u64,
    /// Operations the workload completed.
    pub operations: u64,
    /// Crash points checked.
    pub points: u64,
    /// Crash images checked (after removing duplicates at each point).
    pub images: u64,
    /// Of those, images taken from a full enumeration ([`ImageKind::Enumerated`]), crashes of
    /// recovery included.
    pub enumerated: u64,
    /// Recovery runs traced and crashed ([`CrashTest::recovery_crashes`]): one per crash
    /// image checked when recovery crashes are on.
    ///
    /// [`CrashTest::recovery_crashes`]: super::CrashTest::recovery_crashes
    pub recovery_runs: u64,
    /// Of those, runs that wrote the pool (repaired something), so crashing them could differ
    /// from the image they started on.
    pub recovery_runs_writing: u64,
    /// Crash points checked inside recovery runs.
    pub recovery_points: u64,
    /// Crash images of recovery runs checked (after removing duplicates at each point).
    pub recovery_images: u64,
    /// What the simulator found while the workload ran.
    pub findings: Vec<Finding>,
}

impl Report {
    /// Findings of stores still unpersisted when their operation returned.
    pub fn unpersisted(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| matches!(f, Finding::Unpersisted { .. }))
    }
}

/// A failing crash: everything needed to understand and replay it. `Debug` prints the `Display`
/// report, so `.unwrap()` on a crash test shows it as written.
#[derive(Clone)]
pub struct CrashFailure {
    /// The workload's name.
    pub workload: String,
    /// The harness seed.
    pub seed: u64,
    /// The simulator configuration.
    pub config: SimConfig,
    /// The crash, as the check saw it (`None` if the failure is not about one image).
    pub crash: Option<Crash>,
    /// The last events before the crash.
    pub recent_events: Vec<Event>,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for CrashFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "crash test `{}` failed: {}", self.workload, self.message)?;
        writeln!(
            f,
            "  seed {:#x}, model {}, torn lines {}, flush {}",
            self.seed,
            self.config.model.name(),
            if self.config.torn_lines { "on" } else { "off" },
            self.config.flush.name()
        )?;
        if let Some(c) = &self.crash {
            writeln!(
                f,
                "  crash after event {} of {}, image {} ({}), {} operations completed",
                c.event, c.total_events, c.image, c.kind, c.operations_completed
            )?;
            if c.lines.is_empty() {
                writeln!(f, "  no store was pending")?;
            } else {
                writeln!(f, "  lines involved:")?;
                for l in &c.lines {
                    writeln!(f, "    {l}")?;
                }
            }
            let last = match &c.recovery {
                None => c.event,
                Some(r) => {
                    writeln!(
                        f,
                        "  then recovery, run on that image, crashed after its event {} of {}, \
                         image {} ({})",
                        r.event, r.total_events, r.image, r.kind
                    )?;
                    if r.lines.is_empty() {
                        writeln!(f, "  no store of recovery was pending")?;
                    } else {
                        writeln!(f, "  recovery's lines involved:")?;
                        for l in &r.lines {
                            writeln!(f, "    {l}")?;
                        }
                    }
                    r.event
                }
            };
            if !self.recent_events.is_empty() {
                let whose = if c.recovery.is_some() {
                    "recovery's "
                } else {
                    ""
                };
                writeln!(f, "  {whose}last events before the crash:")?;
                let first = last - self.recent_events.len() as u64;
                for (i, e) in self.recent_events.iter().enumerate() {
                    writeln!(f, "    #{}: {e:?}", first + i as u64)?;
                }
            }
            write!(
                f,
                "  replay: the same CrashTest with .seed({:#x}).replay({}, {})",
                self.seed, c.event, c.image
            )?;
            match &c.recovery {
                Some(r) => writeln!(f, ".replay_recovery({}, {})", r.event, r.image)?,
                None => writeln!(f)?,
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CrashFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for CrashFailure {}
