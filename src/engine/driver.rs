//! The one solve driver: the policy of a solve, written once for every
//! deployment. It keeps the deadline, gets the deadlock tables (built on the
//! deployment, or given), picks the key width, runs the bidirectional search on
//! the deployment's [`LayerBackend`], rebuilds the path and fills the
//! [`SolveReport`] with its counts and timings. Local mode (`crate::solve`) and
//! the cluster's coordinator differ only in the [`Deployment`] they hand it.

use super::kpg::{DeadlockTables, KStats, KpgProgress};
use super::path::rebuild;
use super::report::{SolveReport, Status};
use super::search::{bidirectional, LayerBackend, Limits, Progress, SearchEnd};
use super::{EngineError, PatternCheck, Problem};
use crate::model::board::Board;
use crate::model::key::{BitKey, KeyWidth, StateKey};
use crate::model::rules::{goal_states, normalize_player, Pruning, Scratch};
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
    /// Built before the search, on the same deployment, for k = 1..=K.
    Build(usize),
    /// Given (loaded from a `.kdb` database, or built by the caller).
    Given(Arc<DeadlockTables>),
}

/// The policy of one solve.
#[derive(Clone)]
pub struct SolveSpec {
    pub pruning: Pruning,
    pub tables: TableSource,
    /// Stop (status `limit`) once this many states are stored.
    pub max_states: Option<u64>,
    /// Stop (status `timeout`) at this instant; the table build counts.
    pub deadline: Option<Instant>,
}

impl Default for SolveSpec {
    fn default() -> Self {
        SolveSpec { pruning: Pruning::SOLVE, tables: TableSource::None, max_states: None, deadline: None }
    }
}

/// Where a solve runs: the layers' home and the k-games' explorer. Local mode
/// holds every partition in this process; the cluster spreads them over workers.
pub trait Deployment {
    /// Builds deadlock tables for k = 1..=`max_k` on this deployment. `None`
    /// when stopped by `cancel` before they were complete.
    fn build_tables(
        &mut self,
        board: &Arc<Board>,
        max_k: usize,
        cancel: &AtomicBool,
        progress: &dyn KpgProgress,
    ) -> Result<Option<(DeadlockTables, Vec<KStats>)>, EngineError>;

    /// Opens a layer backend for `problem` (whose pattern check is `tables`,
    /// if any) and runs `search` on it.
    fn search<K: StateKey>(
        &mut self,
        problem: &Problem<K>,
        tables: Option<&Arc<DeadlockTables>>,
        cancel: &AtomicBool,
        search: &mut dyn FnMut(&mut dyn LayerBackend<K>) -> Result<(), EngineError>,
    ) -> Result<(), EngineError>;

    /// Adds what only the deployment knows to a finished report (disk use of a
    /// budgeted store, counts kept across a cluster restart).
    fn finish_report(&mut self, _report: &mut SolveReport) {}
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
    let tables = match &spec.tables {
        TableSource::None | TableSource::Build(0) => None,
        TableSource::Given(t) => Some(t.clone()),
        TableSource::Build(k) => {
            let t0 = Instant::now();
            let built = deployment.build_tables(board, *k, cancel, observers.tables)?;
            report.kpg_seconds = t0.elapsed().as_secs_f64();
            match built {
                Some((t, _)) => Some(Arc::new(t)),
                None => return Err(EngineError::Cancelled),
            }
        }
    };
    match board.keyspace.width {
        KeyWidth::U64 => search::<u64, D>(deployment, board, spec, tables, cancel, observers.search, report),
        KeyWidth::U128 => search::<u128, D>(deployment, board, spec, tables, cancel, observers.search, report),
        KeyWidth::Bits256 => search::<BitKey<4>, D>(deployment, board, spec, tables, cancel, observers.search, report),
        KeyWidth::Bits1024 => {
            search::<BitKey<16>, D>(deployment, board, spec, tables, cancel, observers.search, report)
        }
    }
}

fn search<K: StateKey, D: Deployment>(
    deployment: &mut D,
    board: &Arc<Board>,
    spec: &SolveSpec,
    tables: Option<Arc<DeadlockTables>>,
    cancel: &AtomicBool,
    progress: &dyn Progress,
    report: &mut SolveReport,
) -> Result<(), EngineError> {
    let patterns = tables.clone().map(|t| t as Arc<dyn PatternCheck>);
    let problem = Problem::<K>::full(board.clone(), spec.pruning, patterns);
    let limits = Limits { cancel, max_states: spec.max_states };
    deployment.search(&problem, tables.as_ref(), cancel, &mut |backend| {
        let end = match backend.resumed_meeting() {
            Some(end) => end,
            None => {
                let (starts, goals) = seeds(&problem);
                let (end, stats) = bidirectional(backend, &starts, &goals, &limits, progress)?;
                report.record_stats(&stats);
                end
            }
        };
        match end {
            SearchEnd::Met { key, forward, backward } => {
                let pushes = rebuild(&problem, backend, key, forward, backward)?;
                if !report.record_solution(&problem.board, &pushes) {
                    return Err(EngineError::Internal("rebuilt pushes do not replay".into()));
                }
            }
            other => report.record_unmet(&other),
        }
        Ok(())
    })
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
