//! The crash harness: run a workload once on a simulated pool, then crash it at chosen events,
//! run recovery on each crash image, and check an invariant.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};

use super::event::Event;
use super::rng::SplitMix64;
use super::state::{Choice, LineChoice, PersistState};
use super::{Finding, SimBackend, SimConfig};
use crate::isa::CACHE_LINE;
use crate::pool::{Pool, PoolError};

/// Where to crash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CrashPoints {
    /// After every event (and before the first): for small workloads.
    Every,
    /// A seeded sample of this many points, plus the end of the workload.
    Sample(usize),
    /// Exactly these points (number of events executed before the crash).
    At(Vec<u64>),
}

/// Which crash images to check at each point. The two extremes (no pending store persisted,
/// every pending store persisted) are always checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Images {
    /// Only the two extremes.
    Extremes,
    /// The extremes and this many random images.
    Random(usize),
    /// Every image when there are at most `limit` choices, else the extremes and `fallback`
    /// random images.
    Enumerate {
        /// Most choices to enumerate.
        limit: u64,
        /// Random images when there are more.
        fallback: usize,
    },
}

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
    /// Operations of the workload that had returned ([`Pool::operation_completed`]) before the
    /// crash. For durable linearizability, operations `0..operations_completed` must be visible
    /// and operation `operations_completed` (if any) must be all-or-nothing.
    pub operations_completed: u64,
    /// The lines that had pending stores, and how many of them the image includes.
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
            if !self.recent_events.is_empty() {
                writeln!(f, "  last events before the crash:")?;
                let first = c.event - self.recent_events.len() as u64;
                for (i, e) in self.recent_events.iter().enumerate() {
                    writeln!(f, "    #{}: {e:?}", first + i as u64)?;
                }
            }
            writeln!(
                f,
                "  replay: the same CrashTest with .seed({:#x}).replay({}, {})",
                self.seed, c.event, c.image
            )?;
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

/// A crash test: a workload on a simulated pool, crashed at chosen events, with recovery and
/// an invariant checked on every crash image.
///
/// ```
/// use pmem_ordering::sim::{CrashTest, CrashPoints, Images, SimConfig};
///
/// // Data persisted, then a valid flag: recovery must never see the flag without the data.
/// let report = CrashTest::new("data-then-flag", SimConfig::x86())
///     .points(CrashPoints::Every)
///     .images(Images::Enumerate { limit: 64, fallback: 16 })
///     .run(
///         |pool| {
///             let root = pool.root_offset();
///             let data = pool.write(root, &[7u8; 16]).unwrap();
///             let _ = pool.persist(data);
///             let flag = pool.store_u64(root + 64, 1).unwrap();
///             let _ = pool.persist(flag);
///             pool.operation_completed();
///         },
///         |pool, _crash| {
///             let root = pool.root_offset();
///             let flag = pool.load_u64(root + 64).map_err(|e| e.to_string())?;
///             let data: [u8; 16] = pool.read(root).map_err(|e| e.to_string())?;
///             if flag == 1 && data != [7u8; 16] {
///                 return Err("flag set but data missing".into());
///             }
///             Ok(())
///         },
///     )
///     .unwrap();
/// assert!(report.points > 0);
/// ```
#[derive(Clone, Debug)]
pub struct CrashTest {
    name: String,
    config: SimConfig,
    layout: String,
    pool_size: u64,
    root_size: u64,
    points: CrashPoints,
    images: Images,
    seed: u64,
    only_image: Option<u64>,
    fail_on_unpersisted: bool,
}

impl CrashTest {
    /// A crash test named `name` (printed in failures) under `config`. Defaults: a 64 KiB pool
    /// with layout `"crash-test"` and a 4032-byte root, every point, the extremes plus 8 random
    /// images, seed 0.
    pub fn new(name: &str, config: SimConfig) -> CrashTest {
        CrashTest {
            name: name.to_string(),
            config,
            layout: "crash-test".to_string(),
            pool_size: 64 << 10,
            root_size: 4096 - 64,
            points: CrashPoints::Every,
            images: Images::Random(8),
            seed: 0,
            only_image: None,
            fail_on_unpersisted: false,
        }
    }

    /// The pool's layout name, size and root size.
    pub fn pool(mut self, layout: &str, size: u64, root_size: u64) -> CrashTest {
        self.layout = layout.to_string();
        self.pool_size = size;
        self.root_size = root_size;
        self
    }

    /// Where to crash.
    pub fn points(mut self, points: CrashPoints) -> CrashTest {
        self.points = points;
        self
    }

    /// Which images to check at each point.
    pub fn images(mut self, images: Images) -> CrashTest {
        self.images = images;
        self
    }

    /// The seed for sampled points and random images.
    pub fn seed(mut self, seed: u64) -> CrashTest {
        self.seed = seed;
        self
    }

    /// Fail if any operation returns with stores not yet persistent.
    pub fn fail_on_unpersisted(mut self, yes: bool) -> CrashTest {
        self.fail_on_unpersisted = yes;
        self
    }

    /// Check only one crash: the image with index `image` after `event` events, as a failure
    /// report names it. The workload must be deterministic (single-threaded) to replay.
    pub fn replay(mut self, event: u64, image: u64) -> CrashTest {
        self.points = CrashPoints::At(vec![event]);
        self.only_image = Some(image);
        self
    }

    /// Run `workload` from a fresh pool, then check every crash.
    ///
    /// `check` gets a pool holding the crash image: it runs the structure's real recovery on it
    /// and returns `Err` with a message if the recovered state breaks the invariant (a panic
    /// counts as a failure too). That pool writes memory like any other but records no trace,
    /// since one is made per image; to crash-test recovery itself, run it as a workload.
    ///
    /// A run that checks no crash point or no image (points past the workload's end) fails.
    pub fn run(
        &self,
        workload: impl FnOnce(&Pool<SimBackend>),
        check: impl Fn(&Pool<SimBackend>, &Crash) -> Result<(), String>,
    ) -> Result<Report, Box<CrashFailure>> {
        self.run_with_setup(|_| {}, workload, check)
    }

    /// Like [`CrashTest::run`], with a `setup` whose effects are taken as persistent before
    /// tracing starts (its crashes are not under test).
    pub fn run_with_setup(
        &self,
        setup: impl FnOnce(&Pool<SimBackend>),
        workload: impl FnOnce(&Pool<SimBackend>),
        check: impl Fn(&Pool<SimBackend>, &Crash) -> Result<(), String>,
    ) -> Result<Report, Box<CrashFailure>> {
        let pool = Pool::simulated(&self.layout, self.pool_size, self.root_size, self.config)
            .map_err(|e| {
                self.failure(
                    None,
                    Vec::new(),
                    format!("cannot make the simulated pool: {e}"),
                )
            })?;
        setup(&pool);
        pool.sim().checkpoint();
        workload(&pool);
        let (initial, trace, findings) = pool.sim().recording();
        drop(pool);
        let total = trace.len() as u64;

        let operations = trace
            .iter()
            .filter(|e| matches!(e, Event::OperationEnd { .. }))
            .count() as u64;
        if self.fail_on_unpersisted {
            if let Some(f) = findings
                .iter()
                .find(|f| matches!(f, Finding::Unpersisted { .. }))
            {
                return Err(self.failure(None, Vec::new(), f.to_string()));
            }
        }

        let points = self.crash_points(total);
        let mut state = PersistState::new(initial, self.config.model, self.config.torn_lines);
        let mut report = Report {
            events: total,
            operations,
            points: 0,
            images: 0,
            findings,
        };
        for k in 0..=total {
            if points.contains(&k) {
                report.points += 1;
                report.images += self.check_point(&state, k, total, &trace, &check)?;
            }
            if let Some(e) = trace.get(k as usize) {
                state.apply(e);
            }
        }
        // A run that checked nothing proves nothing: say so rather than pass.
        if report.points == 0 || report.images == 0 {
            return Err(self.failure(
                None,
                Vec::new(),
                format!(
                    "checked {} crash points and {} images of a {total}-event workload: \
                     nothing was checked (crash points past the workload's end?)",
                    report.points, report.images
                ),
            ));
        }
        Ok(report)
    }

    fn crash_points(&self, total: u64) -> BTreeSet<u64> {
        match &self.points {
            CrashPoints::Every => (0..=total).collect(),
            CrashPoints::Sample(n) => {
                let mut rng = SplitMix64::new(self.seed ^ 0xC0FF_EE00);
                let mut set: BTreeSet<u64> = (0..*n).map(|_| rng.below(total + 1)).collect();
                set.insert(total);
                set
            }
            CrashPoints::At(at) => at.iter().copied().filter(|&k| k <= total).collect(),
        }
    }

    /// The choices to check after `k` events.
    fn choices(&self, state: &PersistState, k: u64) -> Vec<(ImageKind, Choice)> {
        let mut out = vec![(ImageKind::Nothing, state.nothing())];
        if state.pending_count() == 0 {
            return out;
        }
        out.push((ImageKind::Everything, state.everything()));
        let random = |n: usize, out: &mut Vec<(ImageKind, Choice)>| {
            for i in 0..n {
                let mut rng = SplitMix64::for_image(self.seed, k, i as u64);
                out.push((ImageKind::Random(i), state.random(&mut rng)));
            }
        };
        match self.images {
            Images::Extremes => {}
            Images::Random(n) => random(n, &mut out),
            Images::Enumerate { limit, fallback } => match state.choice_count(limit) {
                Some(_) => out.extend(
                    state
                        .all_choices()
                        .into_iter()
                        .enumerate()
                        .map(|(i, c)| (ImageKind::Enumerated(i), c)),
                ),
                None => random(fallback, &mut out),
            },
        }
        out
    }

    /// Check every image at one point; returns how many distinct images were checked.
    fn check_point(
        &self,
        state: &PersistState,
        k: u64,
        total: u64,
        trace: &[Event],
        check: &impl Fn(&Pool<SimBackend>, &Crash) -> Result<(), String>,
    ) -> Result<u64, Box<CrashFailure>> {
        let mut seen: HashSet<u64> = HashSet::new();
        let touched = state.pending_line_offsets();
        let mut checked = 0;
        for (index, (kind, choice)) in self.choices(state, k).into_iter().enumerate() {
            let index = index as u64;
            if self.only_image.is_some_and(|only| only != index) {
                continue;
            }
            // A choice the model forbids (Themis closure) is not a crash that can happen.
            let Some(image) = state.image(&choice) else {
                continue;
            };
            // Images at one point differ only in lines with pending stores: hash just those.
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for &line in &touched {
                image[line as usize..line as usize + CACHE_LINE].hash(&mut h);
            }
            if !seen.insert(h.finish()) {
                continue;
            }
            checked += 1;
            let crash = Crash {
                event: k,
                total_events: total,
                image: index,
                kind,
                operations_completed: state.operations,
                lines: state.describe(&choice),
            };
            let recent = trace[k.saturating_sub(6) as usize..k as usize].to_vec();
            let pool =
                Pool::for_recovery(&image, &self.layout, self.config).map_err(|e: PoolError| {
                    self.failure(
                        Some(crash.clone()),
                        recent.clone(),
                        format!("the crash image's header is broken: {e}"),
                    )
                })?;
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&pool, &crash)));
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(message)) => return Err(self.failure(Some(crash), recent, message)),
                Err(panic) => {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "a non-string panic".into());
                    return Err(self.failure(
                        Some(crash),
                        recent,
                        format!("recovery or check panicked: {message}"),
                    ));
                }
            }
        }
        Ok(checked)
    }

    fn failure(
        &self,
        crash: Option<Crash>,
        recent_events: Vec<Event>,
        message: String,
    ) -> Box<CrashFailure> {
        Box::new(CrashFailure {
            workload: self.name.clone(),
            seed: self.seed,
            config: self.config,
            crash,
            recent_events,
            message,
        })
    }
}
