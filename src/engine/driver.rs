//! The one solve driver: the policy of a solve, written once for every
//! deployment. It keeps the deadline, gets the deadlock tables (built on the
//! deployment, or given), picks the key width, runs the bidirectional search on
//! the deployment's [`LayerBackend`], rebuilds the path and fills the
//! [`SolveReport`] with its counts and timings. Local mode (`crate::solve`) and
//! the cluster's coordinator differ only in the [`Deployment`] they hand it.

use super::kpg::{predicted_auto_states, DeadlockTables, KChoice, KStats, KpgProgress};
use super::moves::{fewest_moves, MemTape, MovesOutcome, Tape, MAX_DEPTH_OPTIMAL_STATES};
use super::path::rebuild;
use super::probe::{self, Probe, ProbeBudget, ProbeEnd, ProbeStats};
use super::report::{BoundIteration, IterationSearch, SolveReport, Status};
use super::search::{
    bidirectional, bidirectional_with, LayerBackend, LayerEvent, Limits, ProbeEvent, Progress, SearchEnd, SearchStats,
};
use super::{on_threads, Bound, EngineError, LowerBound, PatternCheck, Problem, Side};
use crate::model::board::Board;
use crate::model::bounds::{LowerBounds, UNREACHABLE};
use crate::model::key::{BitKey, KeyWidth, StateKey};
use crate::model::rules::{goal_states, normalize_player, CorralShare, Pruning, Scratch};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

/// Where a solve's deadlock tables come from.
#[derive(Clone, Default)]
pub enum TableSource {
    /// No tables (dead squares and the other prunings still apply).
    #[default]
    None,
    /// Built before the search, on the same deployment: k = 1..=K, or as
    /// many k as pay ([`KChoice::Auto`], the default of `solve` and `submit`).
    Build(KChoice),
    /// Given (loaded from a `.kdb` database, or built by the caller).
    Given(Arc<DeadlockTables>),
}

/// Whether and how the search is bounded (the push-distance lower bound of
/// [`LowerBounds`], iterated over bounds `U`; see `search.rs` for the proof).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundSpec {
    /// The plain search: no bound.
    Off,
    /// Iterate `U` upward from the start's lower bound until the sides meet.
    Iterate,
    /// One iteration at this `U` (a known solution's length, say): the answer
    /// is the optimum, or "no solution within `U`".
    Upper(u32),
}

pub use super::report::Objective;

/// Which search of a solve a deployment runs: the level's own (its bound
/// iterations, resumable from a cluster job's log), or the moves pass's
/// search without PI-corrals (see `moves.rs`), run once the optimum is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// An iteration of the level's search; `at_floor`: no solution is
    /// shorter than its bound (so its probe may answer it), or for a plain
    /// try than the bound it goes back to, which a deployment that resumes
    /// keeps with its layers, as it keeps `plain_try`.
    Main {
        at_floor: bool,
        plain_try: Option<PlainTry>,
    },
    Moves,
}

/// A plain try between bound iterations (see `PlainTries`): the states it
/// may store, and the bound the bounded search searches after it if it
/// runs out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlainTry {
    pub budget: u64,
    pub back_to: u32,
}

/// The iteration a deployment resumes (a cluster job from its log): its
/// bound (`None` for the plain search), whether no solution is shorter than
/// it (for a try, than the bound it goes back to), and whether it is a plain
/// try. The deployment may hold none of its layers yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resumed {
    pub bound: Option<u32>,
    pub at_floor: bool,
    pub plain_try: Option<PlainTry>,
    /// Whether the job's layers were searched with the PI-corral
    /// restriction: the resumed solve goes on as they were made, whatever
    /// the level's sample says now.
    pub pi_corrals: bool,
}

/// The policy of one solve.
#[derive(Clone)]
pub struct SolveSpec {
    pub pruning: Pruning,
    pub tables: TableSource,
    pub bound: BoundSpec,
    /// Whether the bound adds the 2-box games' pair penalties to the matching.
    pub pair_penalties: bool,
    /// Whether the bound also tries the 3-box games' triple penalties (with
    /// the pairs of the boxes left over), where their tables can be built.
    pub triple_penalties: bool,
    /// Stop (status `limit`) once this many states are stored.
    pub max_states: Option<u64>,
    /// Stop (status `timeout`) at this instant; the table build counts.
    pub deadline: Option<Instant>,
    /// The fewest pushes, or the fewest pushes and then moves (the default).
    pub objective: Objective,
    /// The most states a probe may store (0: no probes); see
    /// `Probes` below.
    pub probe_states: u64,
    /// The most bytes a probe's states may take, where the memory is
    /// budgeted (a share of the budget): with [`probe::state_bytes`] for the
    /// level's key width, a tighter cap than `probe_states`. `None`: no cap
    /// but `probe_states`.
    pub probe_memory: Option<u64>,
    /// Layered states an iteration stores before its probe starts
    /// ([`PROBE_AFTER`] by default).
    pub probe_after: u64,
    /// The most states the moves pass's search may store before the pass
    /// gives up and the push-optimal solution stands; `None`: [`moves_budget`]
    /// of the level's search.
    pub moves_states: Option<u64>,
    /// Whether the PI-corral restriction, where `pruning` asks for it, is
    /// kept only on a level where a sample of its states shows it pays
    /// ([`CorralShare`]); false: kept wherever asked for.
    pub sample_corrals: bool,
}

impl Default for SolveSpec {
    fn default() -> Self {
        SolveSpec {
            pruning: Pruning::SOLVE,
            tables: TableSource::None,
            bound: BoundSpec::Iterate,
            pair_penalties: true,
            triple_penalties: false,
            max_states: None,
            deadline: None,
            objective: Objective::PushesMoves,
            probe_states: PROBE_MAX,
            probe_memory: None,
            probe_after: PROBE_AFTER,
            moves_states: None,
            sample_corrals: true,
        }
    }
}

/// Where a solve runs: the layers' home and the k-games' explorer. Local mode
/// holds every partition in this process; the cluster spreads them over workers.
pub trait Deployment {
    /// Builds deadlock tables for the k of `choice` on this deployment. `None`
    /// when stopped by `cancel` before they were complete.
    fn build_tables(
        &mut self,
        board: &Arc<Board>,
        choice: KChoice,
        cancel: &AtomicBool,
        progress: &dyn KpgProgress,
    ) -> Result<Option<(DeadlockTables, Vec<KStats>)>, EngineError>;

    /// Opens a layer backend for `problem` (whose pattern check is `tables`,
    /// if any) and runs `search` on it; `pass` says which search of the solve
    /// it is.
    fn search<K: StateKey>(
        &mut self,
        pass: Pass,
        problem: &Problem<K>,
        tables: Option<&Arc<DeadlockTables>>,
        cancel: &AtomicBool,
        search: &mut dyn FnMut(&mut dyn LayerBackend<K>) -> Result<(), EngineError>,
    ) -> Result<(), EngineError>;

    /// The bounded search's iteration whose layers this deployment already
    /// holds (a cluster job resumed from its log), `None` when it holds none.
    /// The driver starts there.
    fn resumed(&self) -> Option<Resumed> {
        None
    }

    /// Where the moves pass keeps the depths it is not working on. In memory
    /// unless the deployment has a disk to spill them to.
    fn tape(&mut self) -> Box<dyn Tape> {
        Box::new(MemTape::default())
    }

    /// Adds what only the deployment knows to a finished report (disk use of a
    /// budgeted store, counts kept across a cluster restart).
    fn finish_report(&mut self, _report: &mut SolveReport) {}

    /// Drops the layers of the iteration just searched, so that the next
    /// search of the same bound starts afresh (after the tables grew) rather
    /// than resuming them. Local layers live only as long as their search.
    fn restart_iteration(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}

/// The k of the small tables the automatic choice starts with: the 1- and
/// 2-box games, whose tables cost at most a few squares squared states (and
/// hold the pair penalties of the bound).
pub const SMALL_K: usize = 2;

/// How many k-game states cost as much as one state of the search: about
/// three (a k-game state about 1 µs, a searched one about 3 µs on the
/// benchmark machine, both on two threads; docs/benchmarks.md).
pub const GAME_STATES_PER_SEARCHED: u64 = 3;

/// The states a search may store with the small tables before the automatic
/// choice builds the larger ones (k = 3 and up, while they pay) and searches
/// on with them: as many as cost what the larger tables are predicted to
/// (`predicted`: their k-games' states). A search that fits is done before
/// the tables would be (most small levels then take milliseconds instead of
/// up to a second of tables); one that outgrows it has lost at most about
/// the tables' cost, and keeps what it proved (the bound iterations it
/// exhausted) but the iteration it was in.
pub fn small_tables_trial(predicted: u64) -> u64 {
    predicted / GAME_STATES_PER_SEARCHED
}

/// The larger tables a solve started without, to build once its search
/// stores `trial` states.
struct Grow<'a> {
    choice: KChoice,
    progress: &'a dyn KpgProgress,
    trial: u64,
}

/// Observers of a solve: the table build, then the search's layers.
pub struct Observers<'a> {
    pub tables: &'a dyn KpgProgress,
    pub search: &'a dyn Progress,
}

/// Solves `board` on `deployment` under `spec`. `cancel` stops it (Ctrl-C, a
/// cluster cancel); the deadline raises it too. A stopped solve reports
/// `timeout` with what it found so far, never an error.
pub fn solve<D: Deployment>(
    deployment: &mut D,
    board: Arc<Board>,
    spec: &SolveSpec,
    cancel: &AtomicBool,
    observers: &Observers<'_>,
) -> Result<SolveReport, EngineError> {
    let started = Instant::now();
    std::thread::scope(|scope| {
        // the deadline: a thread that sleeps until then or until the solve ends
        // (the sender is dropped), whichever comes first; no polling
        let (done, wait) = mpsc::channel::<()>();
        if let Some(deadline) = spec.deadline {
            scope.spawn(move || {
                let left = deadline.saturating_duration_since(Instant::now());
                if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(left) {
                    cancel.store(true, Ordering::SeqCst);
                }
            });
        }
        let mut report = SolveReport::empty(&board);
        let result = if report.reason.is_some() {
            Ok(()) // the board alone proves it unsolvable
        } else {
            run(deployment, &board, spec, cancel, observers, &mut report)
        };
        drop(done);
        match result {
            Ok(()) => {}
            Err(EngineError::Cancelled) => report.status = Status::Timeout,
            Err(e) => return Err(e),
        }
        if report.status == Status::Timeout && report.reason.is_none() {
            // a caller that knows better (an interrupt, a job's cancel) says so instead
            let timed_out = spec.deadline.is_some_and(|d| Instant::now() >= d);
            report.reason = Some(if timed_out { "stopped by the time limit" } else { "cancelled" }.into());
        }
        report.seconds = started.elapsed().as_secs_f64();
        deployment.finish_report(&mut report);
        Ok(report)
    })
}

fn run<D: Deployment>(
    deployment: &mut D,
    board: &Arc<Board>,
    spec: &SolveSpec,
    cancel: &AtomicBool,
    observers: &Observers<'_>,
    report: &mut SolveReport,
) -> Result<(), EngineError> {
    let mut grow = None;
    let tables = match &spec.tables {
        TableSource::None | TableSource::Build(KChoice::UpTo(0)) => None,
        TableSource::Given(t) => Some(t.clone()),
        TableSource::Build(k) => {
            // the automatic choice starts small where the deployment lets it
            // (a resumed job goes on with the larger tables: they prune only
            // dead states, so its layers stay valid)
            let small = *k == KChoice::Auto && deployment.resumed().is_none();
            let first = if small { KChoice::UpTo(SMALL_K) } else { *k };
            let t0 = Instant::now();
            let built = deployment.build_tables(board, first, cancel, observers.tables)?;
            report.kpg_seconds = t0.elapsed().as_secs_f64();
            match built {
                Some((t, stats)) => {
                    // grown only if the automatic choice would go on past them
                    let predicted = predicted_auto_states(&stats, board.box_count());
                    if small && stats.len() == SMALL_K && predicted > 0 {
                        let trial = small_tables_trial(predicted);
                        grow = Some(Grow { choice: *k, progress: observers.tables, trial });
                    }
                    Some(Arc::new(t))
                }
                None => return Err(EngineError::Cancelled),
            }
        }
    };
    report.kpg = tables.as_ref().map_or(0, |t| t.max_k());
    let given = Given { tables, grow };
    // the PI-corral restriction where it pays: decided here, from the level
    // alone (the deployment carries the choice to where the layers live), or
    // as a resumed job's layers were searched
    let pi_corrals = match deployment.resumed() {
        Some(resumed) => resumed.pi_corrals,
        None if spec.pruning.pi_corrals && spec.sample_corrals => {
            let s = CorralShare::sample(board);
            tracing::debug!(states = s.states, dropped = s.dropped(), pays = s.pays(), "pi-corrals sampled");
            s.pays()
        }
        None => spec.pruning.pi_corrals,
    };
    let pruning = Pruning { pi_corrals, ..spec.pruning };
    report.pi_corrals = pruning.pi_corrals;
    let spec = &SolveSpec { pruning, ..spec.clone() };
    match board.keyspace.width {
        KeyWidth::U64 => search::<u64, D>(deployment, board, spec, given, cancel, observers.search, report),
        KeyWidth::U128 => search::<u128, D>(deployment, board, spec, given, cancel, observers.search, report),
        KeyWidth::Bits256 => search::<BitKey<4>, D>(deployment, board, spec, given, cancel, observers.search, report),
        KeyWidth::Bits1024 => search::<BitKey<16>, D>(deployment, board, spec, given, cancel, observers.search, report),
    }
}

/// The tables a search starts with, and the larger ones it may grow into.
struct Given<'a> {
    tables: Option<Arc<DeadlockTables>>,
    grow: Option<Grow<'a>>,
}

impl Given<'_> {
    /// The states the search may still store before it grows its tables.
    fn trial_left(&self, stored: u64) -> Option<u64> {
        self.grow.as_ref().map(|g| g.trial.saturating_sub(stored))
    }

    /// Builds the larger tables in place of the small ones.
    fn grow<D: Deployment>(
        &mut self,
        deployment: &mut D,
        board: &Arc<Board>,
        pass: Pass,
        cancel: &AtomicBool,
        report: &mut SolveReport,
    ) -> Result<(), EngineError> {
        let Some(grow) = self.grow.take() else { return Ok(()) };
        let search = if pass == Pass::Moves { "moves pass" } else { "level" };
        tracing::info!(states = grow.trial, search, "the search outgrew the small tables: building the larger ones");
        let t0 = Instant::now();
        let built = deployment.build_tables(board, grow.choice, cancel, grow.progress)?;
        report.kpg_seconds += t0.elapsed().as_secs_f64();
        let Some((t, _)) = built else { return Err(EngineError::Cancelled) };
        report.kpg = t.max_k();
        self.tables = Some(Arc::new(t));
        Ok(())
    }

    fn patterns(&self) -> Option<Arc<dyn PatternCheck>> {
        self.tables.clone().map(|t| t as Arc<dyn PatternCheck>)
    }
}

/// The smaller of two optional limits.
fn tighter(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn search<K: StateKey, D: Deployment>(
    deployment: &mut D,
    board: &Arc<Board>,
    spec: &SolveSpec,
    mut given: Given<'_>,
    cancel: &AtomicBool,
    progress: &dyn Progress,
    report: &mut SolveReport,
) -> Result<(), EngineError> {
    // the pair penalties are the 2-box games', the same in the small tables
    // and the larger ones
    let kept = given.tables.as_ref().and_then(|t| t.pairs.as_deref());
    let lower = (spec.bound != BoundSpec::Off).then(|| {
        let t0 = Instant::now();
        let lower = LowerBounds::with_kept_pairs_joined(board, spec.pair_penalties, kept, &on_threads);
        let (lower, skipped) = if spec.triple_penalties { lower.with_triples(board) } else { (lower, None) };
        tracing::debug!(
            seconds = t0.elapsed().as_secs_f64(),
            pairs = lower.pairs.is_some(),
            triples = ?lower.triples.as_ref().map(|t| t.counts()),
            skipped = ?skipped,
            "bound tables built"
        );
        report.triples = lower.triples.is_some();
        Arc::new(lower)
    });
    // no solution has fewer pushes than the floor: the start's bound, then
    // one step of the parity past each bound proven too small; a solution of
    // that many pushes, however found, is optimal
    let mut floor = None;
    // the plain search tried between bounded iterations
    let mut tries = PlainTries::default();
    let mut limit = match (&lower, spec.bound) {
        (None, _) => None,
        (Some(lower), bound) => {
            let start = lower.estimate(&board.start_boxes, board.start_player, true);
            // an upper bound above it starts no higher
            floor = Some(start);
            if start == UNREACHABLE {
                report.status = Status::Unsolvable;
                report.reason = Some("the boxes cannot each reach a different goal".into());
                return Ok(());
            }
            match bound {
                // the largest U of the solutions' parity not above the given one
                BoundSpec::Upper(u) => match u.checked_sub((u + lower.parity()) % 2) {
                    Some(u) => Some(u),
                    None => {
                        report.status = Status::Bounded;
                        report.reason = Some(format!("no solution within {u} pushes"));
                        return Ok(());
                    }
                },
                // a resumed job goes on with the iteration it was in
                _ => match deployment.resumed() {
                    // a try goes on with its budget, and the bound after it
                    Some(Resumed { plain_try: Some(t), at_floor, .. }) => {
                        let back_to = t.back_to.max(start);
                        if at_floor {
                            floor = Some(back_to);
                        }
                        tries.running = Some(PlainTry { back_to, ..t });
                        None
                    }
                    Some(resumed) => {
                        let bound = resumed.bound.map(|u| u.max(start));
                        if resumed.at_floor {
                            floor = bound;
                        }
                        bound
                    }
                    None => Some(start),
                },
            }
        }
    };
    let mut totals = SearchStats::default();
    // states the previous iteration stored (the first one counts as growing)
    let mut last_stored = 0u64;
    // the one iteration at the floor after a weak bound has been given
    let mut tried = false;
    // the probe's share of the next iteration at the floor: it may store
    // 1/divisor as many states as the layers (see `Probes`)
    let mut divisor = 1u64;
    loop {
        let t0 = Instant::now();
        let (tried_before, last_before, stored_before) = (tried, last_stored, totals.stored);
        // Some while this pass is a plain try, with its budget
        let trying = tries.running;
        let bound = limit.zip(lower.clone()).map(|(limit, l)| Bound { lower: l as Arc<dyn LowerBound>, limit });
        let problem = Problem::<K>::full(board.clone(), spec.pruning, given.patterns()).with_bound(bound);
        // the user's cap counts the states the solve keeps: a failed try's
        // are a hedge the user did not ask for (a try's own cap is below it)
        let asked = spec.max_states.map(|m| m.saturating_sub(tries.kept(&totals)));
        // the larger tables pay once a search stores about what they cost:
        // the bounded search counts its iterations together, a try (which is
        // the plain search) its own states, so it grows them as the plain
        // search would
        let trial = given.trial_left(if trying.is_some() { 0 } else { tries.kept(&totals) });
        // a try whose budget ends before the small tables' trial goes on to
        // it (see `PlainTries`): the plain search needs the larger tables;
        // not past the user's cap, which a try must not reach (it would end
        // the solve)
        let stretch = trial.filter(|&t| asked.is_none_or(|a| t < a)).unwrap_or(0);
        let budget = trying.map(|t| t.budget.max(stretch));
        let cap = tighter(asked, budget);
        let max_states = tighter(cap, trial);
        let limits = Limits { cancel, max_states, bound: limit };
        let mut end = None;
        let mut next_limit = None;
        let mut met = 0;
        // probes only where no solution can be shorter than the bound
        let probing = limit.is_some() && limit == floor;
        // after a weak bound, the one iteration at the floor: its probe's
        // share counts successors too (see `Probes::between`)
        let mut probes = Probes::new(spec, probing, max_states, divisor, tried);
        // layers without move pruning serve the moves pass as they are
        let reuse = spec.objective == Objective::PushesMoves && !problem.pruning.pi_corrals;
        let mut tape = reuse.then(|| deployment.tape());
        let tables = given.tables.clone();
        // a try's depths and states before each step, for its growth
        let mut steps = Vec::new();
        // the try stopped itself: it could not finish (see `hopeless`)
        let mut gave_up = false;
        // a try records whether the bound it goes back to is the floor
        let at_floor = match trying {
            Some(t) => floor == Some(t.back_to),
            None => probing,
        };
        let pass = Pass::Main { at_floor, plain_try: trying };
        deployment.search(pass, &problem, tables.as_ref(), cancel, &mut |backend| {
            let found = match backend.resumed_meeting() {
                Some(end) => end,
                None => {
                    let (starts, goals) = seeds(&problem);
                    let depths = |b: &dyn LayerBackend<K>| b.layers(Side::Forward) + b.layers(Side::Backward) - 2;
                    let mut between = |backend: &mut dyn LayerBackend<K>, layers: &SearchStats| {
                        if let Some(t) = trying {
                            steps.push((depths(backend), layers.stored));
                            if hopeless(&steps, t.budget, t.back_to) {
                                gave_up = true;
                                return Ok(Some(SearchEnd::Limit));
                            }
                        }
                        probes.between(&problem, &starts, backend, layers, cancel, progress)
                    };
                    let (found, stats) = bidirectional_with(backend, &starts, &goals, &limits, progress, &mut between)?;
                    if trying.is_some() {
                        steps.push((depths(backend), stats.stored));
                    }
                    add(&mut totals, &stats);
                    add_probe(&mut totals, &probes.stats, stats.peak_memory_bytes);
                    // the search that decided the iteration says how the next one steps
                    let decider = if probes.decided { &probes.stats } else { &stats };
                    if lower.is_some() {
                        report.iterations.push(BoundIteration {
                            bound: limit,
                            states: stats.stored + probes.stats.stored,
                            generated: stats.generated + probes.stats.generated,
                            pruned: decider.bound_pruned(),
                            seconds: t0.elapsed().as_secs_f64(),
                            search: match (trying, probes.decided) {
                                (Some(_), _) => IterationSearch::PlainTry,
                                (None, true) => IterationSearch::Probe,
                                (None, false) => IterationSearch::Layers,
                            },
                            probe_states: probes.stats.stored,
                            probe_generated: probes.stats.generated,
                        });
                        tracing::info!(
                            bound = limit,
                            states = stats.stored,
                            probe_states = probes.stats.stored,
                            pruned = decider.bound_pruned(),
                            "bound iteration done"
                        );
                    }
                    next_limit = match limit {
                        // a bound that drops little costs its matchings and saves
                        // few states: the rest is the plain search, after one
                        // iteration at the floor, where the probe runs (see `weak`)
                        Some(_) if tried => None,
                        Some(l) if weak(decider, totals.stored) => {
                            tried = true;
                            Some(l + 2)
                        }
                        Some(l) => Some(next_bound(l, decider, last_stored)),
                        None => None,
                    };
                    last_stored = decider.stored;
                    found
                }
            };
            // the solution and, when the layers met, their depths
            let solved = match &found {
                SearchEnd::Met { key, forward, backward } => {
                    Some((rebuild(&problem, backend, *key, *forward, *backward)?, Some((*forward, *backward))))
                }
                // the probe's layers are partial: the moves pass searches its own
                SearchEnd::Solved { pushes } => Some((pushes.clone(), None)),
                _ => None,
            };
            if let Some((pushes, met_at)) = solved {
                if !report.record_solution(&problem.board, &pushes) {
                    return Err(EngineError::Internal("the solution found does not replay".into()));
                }
                // no push, no step: a solved start is optimal for both
                report.objective = Some(if pushes.is_empty() { spec.objective } else { Objective::Pushes });
                met = pushes.len();
                if let (Some(depths), Some(tape)) = (met_at.filter(|_| met > 0), tape.as_mut()) {
                    let t0 = Instant::now();
                    let result = moves_pass(&problem, backend, tape.as_mut(), depths, cancel, report);
                    report.moves_seconds = t0.elapsed().as_secs_f64();
                    moves_pass_end(report, result, spec.deadline);
                    met = 0; // done
                }
            }
            end = Some(found);
            Ok(())
        })?;
        report.record_stats(&totals);
        if matches!(end, Some(SearchEnd::Limit)) && !gave_up && trial.is_some_and(|t| asked.is_none_or(|a| t < a)) {
            // the search outgrew the small tables: the same iteration again
            // with the larger ones (those before it stay proven)
            (tried, last_stored) = (tried_before, last_before);
            if let Some(cut) = report.iterations.last_mut().filter(|_| lower.is_some()) {
                cut.search = IterationSearch::Outgrown;
            }
            report.small_tables_states = totals.stored;
            if trying.is_some() {
                // a try's states are dropped, not the solve's: the try is
                // searched again with the larger tables
                tries.stored += totals.stored - stored_before;
            }
            deployment.restart_iteration()?;
            given.grow(deployment, board, Pass::Main { at_floor: false, plain_try: None }, cancel, report)?;
            continue;
        }
        if let (Some(SearchEnd::Limit), Some(budget)) = (&end, budget) {
            if gave_up || asked.is_none_or(|a| budget < a) {
                // the plain search needs more than its budget: the bounded
                // search goes on with the bound it was to search next
                (tried, last_stored) = (tried_before, last_before);
                limit = tries.failed(&steps, totals.stored - stored_before);
                tracing::info!(budget, gave_up, bound = limit, "plain try ran out of its budget");
                deployment.restart_iteration()?;
                continue;
            }
        }
        match end {
            Some(SearchEnd::Met { .. } | SearchEnd::Solved { .. }) => {
                if spec.objective == Objective::PushesMoves && met > 0 {
                    let (t0, tables_before) = (Instant::now(), report.kpg_seconds);
                    let kept = tries.kept(&totals);
                    let moves = MovesSearch { board, spec, lower: &lower, pushes: met, kept };
                    // the moves pass's search may outgrow the small tables too
                    let trial = given.grow.as_ref().map(|g| g.trial);
                    if moves_search::<K, D>(deployment, &moves, &given, trial, cancel, progress, report) {
                        // a build stopped or failed here ends the pass, not the
                        // solve: the push-optimal solution stands
                        match given.grow(deployment, board, Pass::Moves, cancel, report) {
                            Ok(()) => {
                                moves_search::<K, D>(deployment, &moves, &given, None, cancel, progress, report);
                            }
                            Err(e) => moves_pass_end(report, Err(e), spec.deadline),
                        }
                    }
                    // a table build between its two tries is the tables' time
                    report.moves_seconds = t0.elapsed().as_secs_f64() - (report.kpg_seconds - tables_before);
                }
                return Ok(());
            }
            Some(SearchEnd::Beyond { .. }) if spec.bound == BoundSpec::Iterate => {
                floor = limit.map(|l| l + 2);
                limit = next_limit;
                if probes.ran() {
                    divisor = next_divisor(divisor, probes.decided);
                }
                if let Some(next) = limit {
                    let room = spec.max_states.map(|m| m.saturating_sub(tries.kept(&totals)));
                    if let Some(budget) = tries.start(tries.kept(&totals), next, room) {
                        tracing::info!(budget, next, "trying the plain search");
                        limit = None;
                    }
                }
            }
            Some(other) => {
                report.record_unmet(&other);
                if let (SearchEnd::Beyond { .. }, BoundSpec::Upper(u)) = (other, spec.bound) {
                    // the parity makes the rounded-down bound's answer the asked one's
                    report.reason = Some(format!("no solution within {u} pushes"));
                }
                return Ok(());
            }
            None => return Err(EngineError::Internal("the search reported no end".into())),
        }
    }
}

/// The probe of one bound iteration (`probe.rs`), run in parts
/// between the layered search's steps: once the layers hold
/// [`PROBE_AFTER`] states (an iteration smaller than that is over before a
/// probe could pay), and then after every step, each part going on until
/// the probe stores as many states as the layers do (over `divisor`, see
/// [`next_divisor`]), up to the spec's cap.
/// The two searches so share the work about evenly whichever decides: the
/// probe usually decides an iteration at the optimum (where the layers store
/// every state with `d + h` equal to it, the probe a line of them), the
/// layers often one whose bound is too small (two frontiers exhaust it
/// sooner than one), but on some levels the probe exhausts those first too.
struct Probes<K> {
    allowed: bool,
    /// The probe stores at most the layers' states over this.
    divisor: u64,
    /// Layered states before the first part.
    after: u64,
    /// The probe, once started.
    probe: Option<Probe<K>>,
    /// The probe may also generate no more successors than the layers
    /// (over `divisor`), besides storing no more states.
    by_work: bool,
    /// The most states the probe may store.
    cap: u64,
    /// What the probe has done.
    stats: SearchStats,
    /// The probe decided the iteration.
    decided: bool,
}

impl<K: StateKey> Probes<K> {
    fn new(spec: &SolveSpec, allowed: bool, max_states: Option<u64>, divisor: u64, by_work: bool) -> Probes<K> {
        let cap = probe_cap::<K>(spec.probe_states, spec.probe_memory).min(max_states.unwrap_or(u64::MAX));
        let after = spec.probe_after;
        let stats = SearchStats::default();
        Probes { allowed: allowed && cap > 0, divisor, by_work, after, probe: None, cap, stats, decided: false }
    }

    /// Whether the probe ran in this iteration.
    fn ran(&self) -> bool {
        self.stats.expanded > 0
    }

    /// Runs the probe on while it stores fewer states than the layers: `Some`
    /// when it decided the iteration.
    fn between(
        &mut self,
        problem: &Problem<K>,
        starts: &[K],
        backend: &mut dyn LayerBackend<K>,
        layers: &SearchStats,
        cancel: &AtomicBool,
        progress: &dyn Progress,
    ) -> Result<Option<SearchEnd<K>>, EngineError> {
        if !self.allowed || layers.stored < self.after {
            return Ok(None);
        }
        let probe = match &mut self.probe {
            Some(p) => p,
            None => self.probe.insert(Probe::new(problem, starts)?),
        };
        // as many states as the layers (over the divisor), and in the
        // iteration at the floor after a weak bound as many successors: a
        // probe state found again by a shorter path is expanded again, so
        // where the probe reopens much its states cost several times a
        // layered one, and below the optimum the layers, which exhaust such
        // an iteration sooner, got a fraction of its time (Microban II
        // #126's 100, below its 104: 5.9 successors a probe state against
        // 2.6, the layers a fifth of the time, 4% from done)
        let budget = ProbeBudget {
            stored: (layers.stored / self.divisor).min(self.cap),
            generated: if self.by_work { layers.generated / self.divisor } else { u64::MAX },
        };
        let end = probe.run(problem, budget, cancel, progress, Some(backend))?;
        let probed = probe.stats();
        let (perimeter, stats) = (probed.perimeter, probe_as_search(&probed));
        self.stats = stats;
        if matches!(end, ProbeEnd::Found(_) | ProbeEnd::Exhausted) {
            let found = matches!(end, ProbeEnd::Found(_));
            let bound = problem.bound.as_ref().map(|b| b.limit);
            tracing::info!(bound, states = stats.stored, expanded = stats.expanded, perimeter, found, "probe done");
        }
        let decided = match end {
            ProbeEnd::Found(pushes) => SearchEnd::Solved { pushes },
            // nothing dropped and nothing left: no solution at all
            ProbeEnd::Exhausted if stats.bound_pruned() == 0 && perimeter == 0 => {
                SearchEnd::Unsolvable { exhausted: Side::Forward }
            }
            ProbeEnd::Exhausted => SearchEnd::Beyond { bound: problem.bound.as_ref().map_or(0, |b| b.limit) },
            ProbeEnd::Cancelled => return Ok(Some(SearchEnd::Cancelled)),
            ProbeEnd::Budget => {
                if layers.stored >= self.cap {
                    // at its cap: the memory goes back to the layers
                    tracing::info!(states = stats.stored, "probe stopped at its cap");
                    self.allowed = false;
                    self.probe = None;
                }
                return Ok(None);
            }
        };
        self.decided = true;
        Ok(Some(decided))
    }
}

/// What the moves pass's search starts from: the level, the solve's policy
/// and tables, and the optimum the level's own search proved.
struct MovesSearch<'a> {
    board: &'a Arc<Board>,
    spec: &'a SolveSpec,
    lower: &'a Option<Arc<LowerBounds>>,
    pushes: usize,
    /// The states the level's search kept (not its failed plain tries').
    kept: u64,
}

/// The moves pass after a search that used the PI-corral restriction, which
/// keeps only some push-optimal solutions: one more search of the level
/// without it, bounded by the proven optimum (one iteration), whose layers
/// hold every push-optimal solution, then the pass over them (`moves.rs`).
/// The level's search ran first because it is the fast one: a solve stopped
/// during this pass keeps its push-optimal solution and says why its moves
/// are not minimal.
///
/// With `trial`, the search stops there, leaves the report's outcome alone
/// and returns `true` when it stored that many states first (the caller
/// grows the tables and runs it again).
fn moves_search<K: StateKey, D: Deployment>(
    deployment: &mut D,
    given: &MovesSearch<'_>,
    tables: &Given<'_>,
    trial: Option<u64>,
    cancel: &AtomicBool,
    progress: &dyn Progress,
    report: &mut SolveReport,
) -> bool {
    let (board, pushes) = (given.board, given.pushes);
    let limit = pushes as u32;
    let bound = given.lower.clone().map(|l| Bound { lower: l as Arc<dyn LowerBound>, limit });
    let pruning = Pruning { pi_corrals: false, ..given.spec.pruning };
    let problem = Problem::<K>::full(board.clone(), pruning, tables.patterns()).with_bound(bound);
    // the level's own states: a grown search's trial and failed plain tries
    // do not count
    let level_states = given.kept;
    let left = given.spec.max_states.map(|m| m.saturating_sub(level_states + report.moves_states));
    let budget = given.spec.moves_states.unwrap_or_else(|| moves_budget(level_states));
    let max_states = Some(left.map_or(budget, |l| l.min(budget)));
    let outgrown = trial.filter(|&t| max_states.is_none_or(|m| t < m));
    let limits = Limits { cancel, max_states: tighter(max_states, outgrown), bound: Some(limit) };
    let mut grow = false;
    let progress = &MovesProgress { inner: progress, budget };
    let mut stats = SearchStats::default();
    let mut tape = deployment.tape();
    let result = deployment.search(Pass::Moves, &problem, tables.tables.as_ref(), cancel, &mut |backend| {
        let (starts, goals) = seeds(&problem);
        let (found, s) = bidirectional(backend, &starts, &goals, &limits, progress)?;
        stats = s;
        match found {
            SearchEnd::Met { forward, backward, .. } if forward + backward == pushes => {
                moves_pass(&problem, backend, tape.as_mut(), (forward, backward), cancel, report)
            }
            SearchEnd::Cancelled => Err(EngineError::Cancelled),
            SearchEnd::Limit if outgrown.is_some() => {
                grow = true;
                Ok(())
            }
            SearchEnd::Limit if left.is_some_and(|l| l <= budget) => {
                report.moves_note = Some("the moves pass reached the state limit".into());
                Ok(())
            }
            SearchEnd::Limit => {
                let why = match given.spec.moves_states {
                    Some(_) => "as asked".to_string(),
                    None => format!("{MOVES_PER_STATE} times the level's search, at least {MOVES_MIN_STATES}"),
                };
                report.moves_note = Some(format!(
                    "the moves pass gave up: its search reached its budget of {budget} states ({why}; \
                     --moves-states sets it)"
                ));
                Ok(())
            }
            other => Err(EngineError::Internal(format!(
                "the moves pass's search ended with {other:?} where a solution of {pushes} pushes is known"
            ))),
        }
    });
    report.moves_states += stats.stored;
    report.peak_memory_bytes = report.peak_memory_bytes.max(stats.peak_memory_bytes);
    if grow && result.is_ok() {
        return true;
    }
    moves_pass_end(report, result, given.spec.deadline);
    false
}

/// The moves pass's search's progress: its layers marked with its budget, so
/// that a watcher tells them from the level's search.
struct MovesProgress<'a> {
    inner: &'a dyn Progress,
    budget: u64,
}

impl Progress for MovesProgress<'_> {
    fn layer_done(&self, e: &LayerEvent) {
        self.inner.layer_done(&LayerEvent { moves_budget: Some(self.budget), ..*e });
    }

    fn probe_step(&self, e: &ProbeEvent) {
        self.inner.probe_step(e);
    }
}

/// The moves pass's search may store this many times the states of the
/// level's search (all its iterations and probes) ...
pub const MOVES_PER_STATE: u64 = 32;

/// ... and at least this many.
pub const MOVES_MIN_STATES: u64 = 1 << 24;

/// The most states the moves pass's search stores by default after a level's
/// search that stored `level_states`: beyond it the pass gives up and the
/// push-optimal solution stands, so that a solve whose pushes are proven in
/// seconds does not spend its whole time limit on the moves (the pass's
/// search, without PI-corrals, can store hundreds of times more: XSokoban
/// #78's pushes take 455,691 states, its pass more than 156 million in five
/// minutes). Measured in `docs/benchmarks.md` (the pass's search against
/// the level's: Microban I #153 22 times, XSokoban #7 77 times but 7.5
/// million states, #49 6 times).
pub fn moves_budget(level_states: u64) -> u64 {
    level_states.saturating_mul(MOVES_PER_STATE).max(MOVES_MIN_STATES)
}

/// Runs the moves pass on layers searched without move pruning that met at
/// `(forward, backward)`, and records its outcome: the better solution, or
/// why there is none.
fn moves_pass<K: StateKey>(
    problem: &Problem<K>,
    backend: &mut dyn LayerBackend<K>,
    tape: &mut dyn Tape,
    depths: (usize, usize),
    cancel: &AtomicBool,
    report: &mut SolveReport,
) -> Result<(), EngineError> {
    let board = &problem.board;
    let outcome = fewest_moves(problem, backend, tape, depths, MAX_DEPTH_OPTIMAL_STATES, cancel);
    report.moves_disk_bytes = report.moves_disk_bytes.max(tape.disk_bytes());
    match outcome {
        Ok(MovesOutcome::Found { pushes, moves, optimal_states }) => {
            report.optimal_states = optimal_states;
            let before = (report.pushes, report.moves, report.solution.clone());
            if !report.record_solution(board, &pushes)
                || report.pushes != before.0
                || report.moves != Some(moves as usize)
            {
                // the push-optimal solution stays
                (report.pushes, report.moves, report.solution) = before;
                return Err(EngineError::Internal(format!(
                    "the moves pass's solution does not replay as {} pushes and {moves} moves",
                    report.pushes.unwrap_or(0)
                )));
            }
            report.objective = Some(Objective::PushesMoves);
            Ok(())
        }
        Ok(MovesOutcome::TooMany { depth_states }) => {
            report.moves_note = Some(format!(
                "the moves pass gave up: {depth_states} states of one depth lie on push-optimal solutions, \
                 more than the {MAX_DEPTH_OPTIMAL_STATES} it holds at once"
            ));
            Ok(())
        }
        Ok(MovesOutcome::MeetingTooLarge { states }) => {
            report.moves_note = Some(format!(
                "the moves pass gave up: the meeting layer's {states} push-optimal states are more than \
                 a worker sends in one message"
            ));
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The end of a moves pass: whatever stopped it (the deadline, a full disk, a
/// failed worker, an internal check), the push-optimal solution found before
/// it stands, with the reason its moves are not minimal. A stop is the
/// solve's `deadline` once it has passed, a cancel (Ctrl-C, a job cancelled)
/// before.
fn moves_pass_end(report: &mut SolveReport, result: Result<(), EngineError>, deadline: Option<Instant>) {
    match result {
        Ok(()) => {}
        Err(EngineError::Cancelled) => {
            let timed_out = deadline.is_some_and(|d| Instant::now() >= d);
            let by = if timed_out { "stopped by the time limit" } else { "cancelled" };
            report.moves_note = Some(format!("the moves pass was {by} before it was done"));
        }
        Err(e) => {
            tracing::warn!(error = %e, "the moves pass failed; the push-optimal solution stands");
            report.moves_note = Some(format!("the moves pass failed: {e}"));
        }
    }
}

/// Iterations this small (about a second of work) are followed by the
/// smallest step (see [`next_bound`]).
const SMALL_ITERATION: u64 = 1 << 20;

/// Did the bound drop too little of an iteration to pay for itself? Under
/// 15% of the successors of an iteration of 10^4 states or more, or under 5%
/// of a smaller one's once the iterations so far (`stored`, all of them with
/// their probes) add up to 10^4 states.
///
/// A small iteration's share is noisy (XSokoban #43, 146 pushes, drops 12%
/// at 142 in 9,552 states, then 28% at 144 in 2.9 million, where the plain
/// search stores over 100 million), so alone it never decides; but a bound
/// that keeps dropping almost nothing costs an iteration per step for
/// nothing: on Microban II #135 (591 pushes, start bound 1) the iterations
/// of up to 600 states drop one successor each, and the smallest steps took
/// 264 of them and 70,679 states where the plain search stores 593.
///
/// A weak iteration is followed by one more, at the floor (two above it),
/// and then by the plain search. At the floor the probe runs beside the
/// layers, and a bound that drops little of the states below the optimum
/// may still be tight along the solutions: on Microban I #153 (336 pushes)
/// the iteration at 334 drops 12% of its successors, and the plain search
/// after it stores 29.9 million states, where at 336 the probe finds a
/// solution after 1.6 million. The try costs at most one iteration whose
/// sides meet below the optimum, so its layers hold a part of what the plain
/// search stores (at up to twice the cost per state, with the probe's
/// share): on Microban II #126 (104 pushes) the plain search takes 10.5 s
/// after the failed try at 100 took 14.8 s. Measured over both Microban
/// collections in `docs/benchmarks.md`.
fn weak(stats: &SearchStats, stored: u64) -> bool {
    let pruned = stats.bound_pruned();
    let share_under = |percent: u64| pruned * 100 < percent * (pruned + stats.generated);
    (stats.stored >= WEAK_SIZE && share_under(15)) || (stored >= WEAK_SIZE && share_under(5))
}

/// The states an iteration, or the iterations so far, must store before
/// [`weak`] judges them.
const WEAK_SIZE: u64 = 10_000;

/// Sums a finished iteration's counters into the solve's.
fn add(totals: &mut SearchStats, s: &SearchStats) {
    totals.stored += s.stored;
    totals.generated += s.generated;
    totals.expanded += s.expanded;
    totals.layers = s.layers;
    totals.peak_memory_bytes = totals.peak_memory_bytes.max(s.peak_memory_bytes);
    totals.store_bytes = s.store_bytes;
    totals.disk_bytes = s.disk_bytes;
    totals.excess.iter_mut().zip(s.excess).for_each(|(a, b)| *a += b);
}

/// Adds a probe's counters to the totals: its states, work and memory (held
/// beside the layers' peak, `layers_peak`), not the layers' and the store's
/// counts, which it has none of.
fn add_probe(totals: &mut SearchStats, p: &SearchStats, layers_peak: u64) {
    totals.stored += p.stored;
    totals.generated += p.generated;
    totals.expanded += p.expanded;
    totals.peak_memory_bytes = totals.peak_memory_bytes.max(layers_peak + p.peak_memory_bytes);
    totals.excess.iter_mut().zip(p.excess).for_each(|(a, b)| *a += b);
}

/// The next iteration's bound after one that ended below the optimum (in
/// steps of two, the solutions' parity). While iterations at least double
/// (`stats.stored` against the one before, `last`), the next one is the
/// smallest bound that readmits some dropped successor, as iterative
/// deepening does: a larger step would overshoot the optimum, and with a
/// strong bound the states within a bound grow many times over per step (on
/// XSokoban #7, 88 pushes, the bound 86 keeps 30 thousand states and 92 more
/// than 21 million). When an iteration grew less than that, the bound is
/// raised until it readmits at least as many dropped successors as the
/// iteration stored, so that the iterations' costs still grow geometrically
/// and their sum stays a small multiple of the last one's. A bound that drops
/// little hands over to the plain search instead, after one iteration at the
/// floor (see [`weak`]).
///
/// An iteration of fewer than [`SMALL_ITERATION`] states also takes the
/// smallest step: the iteration that reaches the optimum is usually far
/// larger than the ones below it (the bound stops pruning the states of every
/// optimal solution at once), so the dropped successors of a small iteration
/// say little about the next, and a large step risks the overshoot, which
/// costs more than a few more small iterations. On XSokoban #17 (213 pushes)
/// the bounds 205 to 211 keep 480 to 1,217 states, 213 keeps 349,590 and the
/// bound the rule above picked after 207, 225, 3.4 million.
fn next_bound(limit: u32, stats: &SearchStats, last: u64) -> u32 {
    let growing = stats.stored >= last.saturating_mul(2) || stats.stored < SMALL_ITERATION;
    // bin i counts successors i + 1 over the bound; no step goes past the last
    let furthest = stats.excess.iter().rposition(|&n| n > 0).map_or(0, |i| i + 1);
    let (mut readmitted, mut step) = (0u64, 2usize);
    loop {
        readmitted += stats.excess[step - 2] + stats.excess[step - 1];
        if (readmitted > 0 && (growing || readmitted >= stats.stored)) || step >= furthest {
            break;
        }
        step += 2;
    }
    limit.saturating_add(step as u32)
}

/// The plain search, tried with a budget between bounded iterations: a
/// hedge for levels where the bound costs more than it saves. A bounded
/// state costs two to six times a plain one (the bound's matching, the
/// probe's reopenings), and the iterations below the optimum search their
/// states again; where the bound drops little of a small state space, the
/// plain search is done long before the iterations reach the optimum
/// (Microban I #139, 106 pushes: 443 thousand plain states, 0.4 s, where the
/// iterations from 74 to 100 stored 1.3 million in 5.4 s). Which is cheaper
/// is not known in advance, so the driver tries: once the bounded search
/// (its layers and probes) has stored [`TRY_FIRST`] states, and again each
/// time it has stored [`TRY_EVERY`] times as many as at the last try, the
/// plain search runs with a budget of [`TRY_SHARE`] times what the bounded
/// one stored. Its answer, if it finds one, is the optimum (the plain search
/// is the unbounded one); if it runs out, its states are dropped and the
/// bounded search goes on with the bound it was to search next, its proofs
/// below it kept.
///
/// A try is the plain search, so it grows the small k-PG tables where the
/// plain search would (once it has stored their trial, counting its own
/// states), and a budget that ends before that point is stretched to it: a
/// try cut off with the small tables says nothing of the plain search,
/// which would have gone on with the larger ones (Microban II #124, 30
/// pushes: the second try ran out at 121 thousand states, 20 thousand short
/// of the trial, where the larger tables finish in 60 thousand more). A try
/// cut to grow the tables and searched again counts as a failed one: the
/// solve does not keep its states, and the next try is due by the bounded
/// search's own.
///
/// The budgets grow geometrically with the bounded search's own states, so
/// the failed tries together cost a bounded multiple of it; a try that
/// the last one's growth says cannot finish (see [`Growth`]) is skipped, so
/// that on levels where the plain search is hopeless (XSokoban, where it
/// grows many times over per push) the tries cost only the first few small
/// ones. A deployment records a try with its pass ([`Pass::Main`]'s
/// `plain_try`), so a cluster job resumed in the middle of one goes on with
/// it, its budget and the bound after it ([`Resumed`]).
#[derive(Default)]
struct PlainTries {
    /// The try about to run, or running: its budget, and the bound the
    /// bounded search searches after it.
    running: Option<PlainTry>,
    /// States the failed tries stored, and those cut to grow the tables
    /// (the solve keeps the rest).
    stored: u64,
    /// Bounded states after which the next try is due (0: [`TRY_FIRST`]).
    due: u64,
    /// How the last failed try grew.
    seen: Option<Growth>,
}

/// Bounded states before the first plain try.
const TRY_FIRST: u64 = 1_000;

/// A try's budget over the bounded states so far.
const TRY_SHARE: u64 = 8;

/// How many times over the bounded states grow from one try to the next.
const TRY_EVERY: u64 = 4;

/// A try is skipped when the last one's growth says the plain search needs
/// more than this many times its budget.
const TRY_GATE: f64 = 16.0;

impl PlainTries {
    /// The states of the solve's searches so far that it keeps: all but the
    /// failed tries'.
    fn kept(&self, totals: &SearchStats) -> u64 {
        totals.stored - self.stored
    }

    /// Whether to try the plain search now, after a bounded iteration, with
    /// `spent` bounded states so far, `next` the next bound and `room` the
    /// states the solve may still store: the try's budget if so.
    fn start(&mut self, spent: u64, next: u32, room: Option<u64>) -> Option<u64> {
        if spent < self.due.max(TRY_FIRST) {
            return None;
        }
        let budget = spent.saturating_mul(TRY_SHARE);
        self.due = spent.saturating_mul(TRY_EVERY);
        // a state cap of the user's ends the solve, not a try
        if room.is_some_and(|r| budget >= r) {
            return None;
        }
        if self.seen.is_some_and(|g| g.predict(next) > TRY_GATE * budget as f64) {
            tracing::debug!(budget, next, "plain try skipped: it would not finish");
            return None;
        }
        self.running = Some(PlainTry { budget, back_to: next });
        Some(budget)
    }

    /// A try ran out of its budget after storing `stored` states, with
    /// `steps` its depths and states before each step and at the end: the
    /// bound to go back to.
    fn failed(&mut self, steps: &[(usize, u64)], stored: u64) -> Option<u32> {
        self.stored += stored;
        self.seen = Growth::of(steps).or(self.seen);
        self.running.take().map(|t| t.back_to)
    }
}

/// Whether a plain try whose depths and states before each step were
/// `steps` so far cannot finish: once it has stored an eighth of its
/// `budget`, its growth says that its sides' depths would add up to `next`
/// (no solution is shorter) only after [`TRY_GATE`] times the budget. It
/// stops there, so a hopeless try costs an eighth of its budget.
fn hopeless(steps: &[(usize, u64)], budget: u64, next: u32) -> bool {
    let Some(&(_, stored)) = steps.last() else { return false };
    stored >= budget / 8 && Growth::of(steps).is_some_and(|g| g.predict(next) > TRY_GATE * budget as f64)
}

/// How a plain search grew at its last steps: `stored` states at `depths`
/// (its two sides' depths together), times `ratio` per further step.
#[derive(Clone, Copy, Debug)]
struct Growth {
    depths: usize,
    stored: u64,
    ratio: f64,
}

impl Growth {
    /// The growth over the last two steps of `steps` (depths and states),
    /// if there were two.
    fn of(steps: &[(usize, u64)]) -> Option<Growth> {
        let (&(depths, stored), &(d0, s0)) = (steps.last()?, steps.iter().rev().nth(2)?);
        if depths <= d0 || s0 == 0 {
            return None;
        }
        let ratio = (stored as f64 / s0 as f64).powf(1.0 / (depths - d0) as f64);
        Some(Growth { depths, stored, ratio })
    }

    /// The states a plain search growing so would store before its two
    /// sides' depths add up to `bound` (a lower bound on the optimum): an
    /// estimate, high where the growth slows with depth, as it does on
    /// narrow levels, so the gate is generous.
    fn predict(&self, bound: u32) -> f64 {
        let more = (bound as usize).saturating_sub(self.depths);
        self.stored as f64 * self.ratio.powi(more.min(i32::MAX as usize) as i32)
    }
}

/// The smallest share of the probe: a quarter of the layers' states.
const PROBE_DIVISOR_MAX: u64 = 4;

/// The probe's share in the next iteration at the floor, after one where
/// it ran: where the layers decided (the probe's states were work for
/// nothing) it halves, down to a quarter; where the probe decided, it is
/// whole again. A probe state costs two to three times a layered one (its
/// expansions are exact and scale poorly to two threads, its merge runs on
/// one), and a level tends to keep the winner from one iteration to the
/// next: on Microban II #104 the layers decide 74 to 80, on #130 and on
/// XSokoban #34 the probe decides every iteration, exhausting the ones below
/// the optimum before the layers do (`docs/benchmarks.md`, eleventh session).
/// Counts decide it, so every deployment and thread count shares alike.
fn next_divisor(divisor: u64, probe_decided: bool) -> u64 {
    if probe_decided {
        1
    } else {
        (divisor * 2).min(PROBE_DIVISOR_MAX)
    }
}

/// Layered states an iteration stores before its probe starts: an
/// iteration smaller than that is over before a probe could pay.
pub const PROBE_AFTER: u64 = 1 << 16;

/// The largest budget of a probe by default, in states: up to 1.7 GiB with
/// `u64` keys and 1.9 GiB with `u128` ones ([`probe::state_bytes`] each).
pub const PROBE_MAX: u64 = 1 << 25;

/// The share of a memory budget a probe's states may take (the layers get
/// the rest): a quarter.
pub fn probe_share(memory_budget: u64) -> u64 {
    memory_budget / 4
}

/// The most states a probe may store: `asked`, and no more than fit in
/// `memory` (bytes) with keys `K`.
pub fn probe_cap<K: StateKey>(asked: u64, memory: Option<u64>) -> u64 {
    memory.map_or(asked, |m| asked.min(m / probe::state_bytes::<K>()))
}

/// A probe's counters as a search's, for the totals and the next bound.
fn probe_as_search(p: &ProbeStats) -> SearchStats {
    SearchStats {
        stored: p.stored,
        generated: p.generated,
        expanded: p.expanded,
        peak_memory_bytes: p.memory_bytes,
        excess: p.excess,
        ..SearchStats::default()
    }
}

/// The forward seeds (the start) and backward seeds (solved, player in each region).
pub fn seeds<K: StateKey>(problem: &Problem<K>) -> (Vec<K>, Vec<K>) {
    let board = &problem.board;
    let mut sc = Scratch::new(board);
    let start_player = normalize_player(board, &mut sc, &board.start_boxes, board.start_player);
    let starts = vec![problem.encode(&board.start_boxes, start_player)];
    let goals =
        goal_states(board, &mut sc, &board.goals).into_iter().map(|p| problem.encode(&board.goals, p)).collect();
    (starts, goals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_share_halves_after_the_layers_win_and_is_whole_after_the_probe_wins() {
        let mut d = 1;
        let mut seen = Vec::new();
        for probe_decided in [false, false, false, true, false] {
            d = next_divisor(d, probe_decided);
            seen.push(d);
        }
        assert_eq!(seen, [2, 4, PROBE_DIVISOR_MAX, 1, 2]);
    }

    /// An iteration's counts: stored states, kept and dropped successors.
    fn iteration(stored: u64, generated: u64, pruned: u64) -> SearchStats {
        let mut s = SearchStats { stored, generated, ..SearchStats::default() };
        s.excess[0] = pruned;
        s
    }

    #[test]
    fn a_small_iteration_is_weak_only_when_it_drops_almost_nothing_after_enough_states() {
        // large: under 15% is weak, whatever came before
        assert!(weak(&iteration(20_000, 90_000, 10_000), 20_000));
        assert!(!weak(&iteration(20_000, 80_000, 20_000), 20_000));
        // small (XSokoban #43 at 142): 12% is noise, even after enough states
        assert!(!weak(&iteration(9_552, 25_839, 3_474), 18_952));
        // small (Microban II #135): almost nothing dropped, enough states so far
        assert!(weak(&iteration(190, 190, 1), WEAK_SIZE));
        assert!(!weak(&iteration(190, 190, 1), WEAK_SIZE - 1));
    }

    #[test]
    fn plain_tries_come_once_the_bounded_states_grow_fourfold_with_eight_times_their_budget() {
        let mut t = PlainTries::default();
        assert_eq!(t.start(TRY_FIRST - 1, 10, None), None);
        assert_eq!(t.start(TRY_FIRST, 10, None), Some(8 * TRY_FIRST));
        assert_eq!(t.failed(&[], 8 * TRY_FIRST), Some(10));
        // not again before the bounded search has four times the states
        assert_eq!(t.start(4 * TRY_FIRST - 1, 12, None), None);
        assert_eq!(t.start(4 * TRY_FIRST, 12, None), Some(32 * TRY_FIRST));
        assert_eq!(t.running, Some(PlainTry { budget: 32 * TRY_FIRST, back_to: 12 }));
        assert_eq!(t.failed(&[], 30 * TRY_FIRST), Some(12));
        // the failed tries' states, which the user's cap does not count
        assert_eq!(t.stored, 38 * TRY_FIRST);
        // a try as large as the states the user allows is no try: it would end the solve
        assert_eq!(t.start(16 * TRY_FIRST, 14, Some(128 * TRY_FIRST)), None);
        assert_eq!(t.start(64 * TRY_FIRST, 14, Some(1024 * TRY_FIRST)), Some(512 * TRY_FIRST));
    }

    #[test]
    fn a_plain_try_whose_growth_cannot_reach_the_bound_in_its_budget_gives_up_and_the_next_is_skipped() {
        // doubling per depth from 1,000 states at depth 10
        let steps: Vec<(usize, u64)> = (10..=13).map(|d| (d, 1_000 << (d - 10))).collect();
        let g = Growth::of(&steps).unwrap();
        assert!((g.ratio - 2.0).abs() < 1e-9 && g.depths == 13 && g.stored == 8_000, "{g:?}");
        assert_eq!(g.predict(13), 8_000.0);
        assert_eq!(g.predict(16), 64_000.0);
        // 8,000 states is an eighth of 64,000: judged; depth 21 needs two
        // million, more than 16 times the budget, depth 20 exactly 16 times
        assert!(hopeless(&steps, 64_000, 21));
        assert!(!hopeless(&steps, 64_000, 20));
        assert!(!hopeless(&steps, 64_000, 17));
        // not judged before an eighth of the budget
        assert!(!hopeless(&steps, 64_001 * 2, 40));
        // and under three steps, no growth to judge by
        assert!(!hopeless(&steps[..2], 16_000, 40));
        // the next try is skipped where the failed one's growth says so
        let mut t = PlainTries::default();
        t.start(TRY_FIRST, 20, None);
        t.failed(&steps, 8_000);
        assert_eq!(t.start(4 * TRY_FIRST, 30, None), None, "2^17 times 8,000 states");
        assert_eq!(t.start(16 * TRY_FIRST, 14, None), Some(128 * TRY_FIRST));
    }
}
