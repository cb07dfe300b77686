//! The crash harness: run a workload once on a simulated pool, then crash it at chosen events,
//! run recovery on each crash image, and check an invariant.

use std::collections::{BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::event::Event;
use super::report::{Crash, CrashFailure, ImageKind, RecoveryCrash, Report};
use super::rng::SplitMix64;
use super::state::{Choice, PersistState};
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
///             pool.persist(data);
///             let flag = pool.store_u64(root + 64, 1).unwrap();
///             pool.persist(flag);
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
    recovery: Option<RecoveryCrashes>,
}

/// Where and how to crash recovery runs ([`CrashTest::recovery_crashes`]).
#[derive(Clone, Debug)]
struct RecoveryCrashes {
    points: CrashPoints,
    images: Images,
    only_image: Option<u64>,
}

/// The invariant check: runs recovery on a crash image and judges the state it reaches.
type Check<'a> = dyn Fn(&Arc<Pool<SimBackend>>, &Crash) -> Result<(), String> + 'a;
/// Recovery alone (what a restart does before serving), run traced to be crashed in turn.
type Recover<'a> = dyn Fn(&Arc<Pool<SimBackend>>) -> Result<(), String> + 'a;
/// What [`explore`] hands each distinct image: the state, the point, the image's index and
/// kind, its choice and its bytes.
type Visit<'a> = dyn FnMut(&PersistState, u64, u64, ImageKind, &Choice, &[u8]) -> Result<(), Box<CrashFailure>>
    + 'a;

impl CrashTest {
    /// A crash test named `name` (printed in failures) under `config`. Defaults: a 64 KiB pool
    /// with layout `"crash-test"` and a 4032-byte root, every point, the extremes plus 8 random
    /// images, seed 0, recovery not crashed.
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
            recovery: None,
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

    /// Crash recovery too: after checking a crash image, run recovery on it as a traced
    /// workload (on a pool made with [`Pool::from_image`]), crash that run at `points` with
    /// `images` (sampled from the seed and the first crash), and check every image of it with
    /// the same check as the first crash (the operations completed are the first crash's:
    /// recovery completes none). Needs [`CrashTest::run_with_recovery`].
    pub fn recovery_crashes(mut self, points: CrashPoints, images: Images) -> CrashTest {
        self.recovery = Some(RecoveryCrashes {
            points,
            images,
            only_image: None,
        });
        self
    }

    /// Whether recovery runs are crashed too ([`CrashTest::recovery_crashes`]).
    pub fn crashes_recovery(&self) -> bool {
        self.recovery.is_some()
    }

    /// Check only one crash: the image with index `image` after `event` events, as a failure
    /// report names it. The workload must be deterministic (single-threaded) to replay.
    pub fn replay(mut self, event: u64, image: u64) -> CrashTest {
        self.points = CrashPoints::At(vec![event]);
        self.only_image = Some(image);
        self
    }

    /// With [`CrashTest::replay`], check only one crash of the recovery run: its image with
    /// index `image` after `event` of its events, as a failure report names it.
    pub fn replay_recovery(mut self, event: u64, image: u64) -> CrashTest {
        let images = self.recovery.take().map_or(Images::Extremes, |r| r.images);
        self.recovery = Some(RecoveryCrashes {
            points: CrashPoints::At(vec![event]),
            images,
            only_image: Some(image),
        });
        self
    }

    /// Run `workload` from a fresh pool, then check every crash.
    ///
    /// Each closure gets the pool as an `Arc`: a clone of it is an owned handle to give a heap
    /// or a structure, as a program gives the pool it opened.
    ///
    /// `check` gets a pool holding the crash image: it runs the structure's real recovery on it
    /// and returns `Err` with a message if the recovered state breaks the invariant (a panic
    /// counts as a failure too). That pool writes memory like any other but records no trace,
    /// since one is made per image; to crash-test recovery itself, see
    /// [`CrashTest::recovery_crashes`].
    ///
    /// A run that checks no crash point or no image (points past the workload's end) fails.
    pub fn run(
        &self,
        workload: impl FnOnce(&Arc<Pool<SimBackend>>),
        check: impl Fn(&Arc<Pool<SimBackend>>, &Crash) -> Result<(), String>,
    ) -> Result<Report, Box<CrashFailure>> {
        self.run_with_setup(|_| {}, workload, check)
    }

    /// Like [`CrashTest::run`], with a `setup` whose effects are taken as persistent before
    /// tracing starts (its crashes are not under test).
    pub fn run_with_setup(
        &self,
        setup: impl FnOnce(&Arc<Pool<SimBackend>>),
        workload: impl FnOnce(&Arc<Pool<SimBackend>>),
        check: impl Fn(&Arc<Pool<SimBackend>>, &Crash) -> Result<(), String>,
    ) -> Result<Report, Box<CrashFailure>> {
        self.run_inner(setup, workload, None, &check)
    }

    /// Like [`CrashTest::run_with_setup`], with the structure's `recover` (what a restart runs
    /// before serving: opening the heap and the structure), which
    /// [`CrashTest::recovery_crashes`] runs traced on each crash image and crashes. `check`
    /// must recover on its own as before; `recover` is run only for crashes of recovery.
    pub fn run_with_recovery(
        &self,
        setup: impl FnOnce(&Arc<Pool<SimBackend>>),
        workload: impl FnOnce(&Arc<Pool<SimBackend>>),
        recover: impl Fn(&Arc<Pool<SimBackend>>) -> Result<(), String>,
        check: impl Fn(&Arc<Pool<SimBackend>>, &Crash) -> Result<(), String>,
    ) -> Result<Report, Box<CrashFailure>> {
        self.run_inner(setup, workload, Some(&recover), &check)
    }

    fn run_inner(
        &self,
        setup: impl FnOnce(&Arc<Pool<SimBackend>>),
        workload: impl FnOnce(&Arc<Pool<SimBackend>>),
        recover: Option<&Recover<'_>>,
        check: &Check<'_>,
    ) -> Result<Report, Box<CrashFailure>> {
        if self.recovery.is_some() && recover.is_none() {
            return Err(self.failure(
                None,
                Vec::new(),
                "recovery crashes are asked for but no recovery was given \
                 (use run_with_recovery)"
                    .into(),
            ));
        }
        let pool = Pool::simulated(&self.layout, self.pool_size, self.root_size, self.config)
            .map(Arc::new)
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

        let mut report = Report {
            events: total,
            operations,
            points: 0,
            images: 0,
            enumerated: 0,
            recovery_runs: 0,
            recovery_runs_writing: 0,
            recovery_points: 0,
            recovery_images: 0,
            findings,
        };
        let points = crash_points(&self.points, self.seed, total);
        let mut images = 0;
        let mut enumerated = 0;
        let mut visit = |state: &PersistState,
                         k: u64,
                         index: u64,
                         kind: ImageKind,
                         choice: &Choice,
                         image: &[u8]| {
            images += 1;
            enumerated += u64::from(matches!(kind, ImageKind::Enumerated(_)));
            let crash = Crash {
                event: k,
                total_events: total,
                image: index,
                kind,
                operations_completed: state.operations,
                lines: state.describe(choice),
                recovery: None,
            };
            let recent = trace[k.saturating_sub(6) as usize..k as usize].to_vec();
            self.check_image(image, &crash, recent, check)?;
            match (&self.recovery, recover) {
                (Some(crashes), Some(recover)) => {
                    self.crash_recovery(crashes, image, &crash, recover, check, &mut report)
                }
                _ => Ok(()),
            }
        };
        let visited = explore(
            initial,
            &trace,
            self.config,
            &points,
            (&self.images, self.seed),
            self.only_image,
            &mut visit,
        )?;
        report.points = visited;
        report.images = images;
        report.enumerated += enumerated;
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

    /// Run `recover` traced on `image` (the first crash, `first`), then check every crash of
    /// that run the test asks for.
    fn crash_recovery(
        &self,
        crashes: &RecoveryCrashes,
        image: &[u8],
        first: &Crash,
        recover: &Recover<'_>,
        check: &Check<'_>,
        report: &mut Report,
    ) -> Result<(), Box<CrashFailure>> {
        let pool = Pool::from_image(image, Some(&self.layout), self.config)
            .map(Arc::new)
            .map_err(|e| {
                self.failure(
                    Some(first.clone()),
                    Vec::new(),
                    format!("cannot load the crash image to run recovery on: {e}"),
                )
            })?;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| recover(&pool)));
        let message = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(message)) => Some(message),
            Err(panic) => Some(format!("panicked: {}", panic_message(&*panic))),
        };
        if let Some(message) = message {
            return Err(self.failure(
                Some(first.clone()),
                Vec::new(),
                format!("recovery, run traced on this image to be crashed, failed: {message}"),
            ));
        }
        let (initial, trace, _) = pool.sim().recording();
        drop(pool);
        report.recovery_runs += 1;
        if trace
            .iter()
            .any(|e| matches!(e, Event::Store { .. } | Event::NtStore { .. }))
        {
            report.recovery_runs_writing += 1;
        }
        let total = trace.len() as u64;
        // Each recovery run gets its own sample, drawn from the seed and the first crash.
        let seed =
            SplitMix64::for_image(self.seed ^ 0x2EC0_7E27, first.event, first.image).next_u64();
        let points = crash_points(&crashes.points, seed, total);
        let mut images = 0;
        let mut enumerated = 0;
        let mut visit = |state: &PersistState,
                         k: u64,
                         index: u64,
                         kind: ImageKind,
                         choice: &Choice,
                         image: &[u8]| {
            images += 1;
            enumerated += u64::from(matches!(kind, ImageKind::Enumerated(_)));
            let crash = Crash {
                recovery: Some(RecoveryCrash {
                    event: k,
                    total_events: total,
                    image: index,
                    kind,
                    lines: state.describe(choice),
                }),
                ..first.clone()
            };
            let recent = trace[k.saturating_sub(6) as usize..k as usize].to_vec();
            self.check_image(image, &crash, recent, check)
        };
        let visited = explore(
            initial,
            &trace,
            self.config,
            &points,
            (&crashes.images, seed),
            crashes.only_image,
            &mut visit,
        )?;
        report.recovery_points += visited;
        report.recovery_images += images;
        report.enumerated += enumerated;
        Ok(())
    }

    /// Run `check` on a pool holding `image`, turning an error or a panic into a failure.
    fn check_image(
        &self,
        image: &[u8],
        crash: &Crash,
        recent: Vec<Event>,
        check: &Check<'_>,
    ) -> Result<(), Box<CrashFailure>> {
        let pool = Pool::for_recovery(image, &self.layout, self.config)
            .map(Arc::new)
            .map_err(|e: PoolError| {
                self.failure(
                    Some(crash.clone()),
                    recent.clone(),
                    format!("the crash image's header is broken: {e}"),
                )
            })?;
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&pool, crash)));
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(self.failure(Some(crash.clone()), recent, message)),
            Err(panic) => Err(self.failure(
                Some(crash.clone()),
                recent,
                format!("recovery or check panicked: {}", panic_message(&*panic)),
            )),
        }
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

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a non-string panic".into())
}

/// The crash points of a `total`-event trace.
fn crash_points(points: &CrashPoints, seed: u64, total: u64) -> BTreeSet<u64> {
    match points {
        CrashPoints::Every => (0..=total).collect(),
        CrashPoints::Sample(n) => {
            let mut rng = SplitMix64::new(seed ^ 0xC0FF_EE00);
            let mut set: BTreeSet<u64> = (0..*n).map(|_| rng.below(total + 1)).collect();
            set.insert(total);
            set
        }
        CrashPoints::At(at) => at.iter().copied().filter(|&k| k <= total).collect(),
    }
}

/// The choices to check after `k` events, with `images` drawn from `seed`.
fn choices(state: &PersistState, k: u64, images: &Images, seed: u64) -> Vec<(ImageKind, Choice)> {
    let mut out = vec![(ImageKind::Nothing, state.nothing())];
    if state.pending_count() == 0 {
        return out;
    }
    out.push((ImageKind::Everything, state.everything()));
    let random = |n: usize, out: &mut Vec<(ImageKind, Choice)>| {
        for i in 0..n {
            let mut rng = SplitMix64::for_image(seed, k, i as u64);
            out.push((ImageKind::Random(i), state.random(&mut rng)));
        }
    };
    match *images {
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

/// Replay `trace` from `initial` and, at each of `points`, hand every distinct image the
/// `(images, seed)` selection allows (only the one with index `only_image`, if given) to
/// `visit`. Returns the points visited.
fn explore(
    initial: Vec<u8>,
    trace: &[Event],
    config: SimConfig,
    points: &BTreeSet<u64>,
    (images, seed): (&Images, u64),
    only_image: Option<u64>,
    visit: &mut Visit<'_>,
) -> Result<u64, Box<CrashFailure>> {
    let mut state = PersistState::new(initial, config.model, config.torn_lines);
    let mut visited = 0;
    for k in 0..=trace.len() as u64 {
        if points.contains(&k) {
            visited += 1;
            let mut seen: HashSet<u64> = HashSet::new();
            let touched = state.pending_line_offsets();
            for (index, (kind, choice)) in choices(&state, k, images, seed).into_iter().enumerate()
            {
                let index = index as u64;
                if only_image.is_some_and(|only| only != index) {
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
                visit(&state, k, index, kind, &choice, &image)?;
            }
        }
        if let Some(e) = trace.get(k as usize) {
            state.apply(e);
        }
    }
    Ok(visited)
}
