//! Local mode: solve one level in this process, an in-process cluster of one. Picks
//! the key width, builds the store and exchange, runs the engine, rebuilds the path
//! and renders the LURD solution.

use crate::engine::partition::{LocalExchange, PartitionStore, Partitioner};
use crate::engine::path::{rebuild, StoreLookup};
use crate::engine::search::{bidirectional, Limits, LocalBackend, Progress, SearchEnd, SearchStats};
use crate::engine::{EngineError, PatternCheck, Problem};
use crate::model::board::Board;
use crate::model::key::{BitKey, KeyWidth, StateKey};
use crate::model::rules::{goal_states, normalize_player, Pruning, Scratch};
use crate::model::solution::pushes_to_lurd;
use crate::storage::mem::MemStore;
use serde::Serialize;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// How a solve ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Solved,
    Unsolvable,
    Timeout,
    Limit,
    Error,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Solved => "solved",
            Status::Unsolvable => "unsolvable",
            Status::Timeout => "timeout",
            Status::Limit => "limit",
            Status::Error => "error",
        }
    }
}

/// Options for a local solve.
#[derive(Clone)]
pub struct SolveOptions {
    /// Number of partitions (a power of two), independent of the thread count.
    pub partitions: usize,
    pub pruning: Pruning,
    pub max_states: Option<u64>,
    /// Pattern deadlock tables (k-PG), if any.
    pub patterns: Option<Arc<dyn PatternCheck>>,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions { partitions: 64, pruning: Pruning::ALL, max_states: None, patterns: None }
    }
}

/// The result of solving one level.
#[derive(Debug, Clone, Serialize)]
pub struct SolveReport {
    pub status: Status,
    pub pushes: Option<usize>,
    pub moves: Option<usize>,
    pub solution: Option<String>,
    /// States stored (both sides).
    pub states: u64,
    pub generated: u64,
    pub seconds: f64,
    /// Of `seconds`, the time spent building k-PG tables.
    pub kpg_seconds: f64,
    pub forward_layers: usize,
    pub backward_layers: usize,
    pub peak_memory_bytes: u64,
    /// Bytes the visited sets hold in memory at the end (divide by `states` for
    /// bytes per stored state).
    pub store_bytes: u64,
    pub disk_bytes: u64,
    pub key_width: KeyWidth,
    /// Why the level is unsolvable, when known without searching.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Solves `board` in this process.
pub fn solve_local(
    board: Arc<Board>,
    opts: &SolveOptions,
    cancel: &AtomicBool,
    progress: &dyn Progress,
) -> Result<SolveReport, EngineError> {
    match board.keyspace.width {
        KeyWidth::U64 => solve_typed::<u64>(board, opts, cancel, progress),
        KeyWidth::U128 => solve_typed::<u128>(board, opts, cancel, progress),
        KeyWidth::Bits256 => solve_typed::<BitKey<4>>(board, opts, cancel, progress),
        KeyWidth::Bits1024 => solve_typed::<BitKey<16>>(board, opts, cancel, progress),
    }
}

/// The forward seeds (the start) and backward seeds (solved, player in each region).
pub fn seeds<K: StateKey>(problem: &Problem<K>) -> (Vec<K>, Vec<K>) {
    let board = &problem.board;
    let mut sc = Scratch::new(board);
    let start_player = normalize_player(board, &mut sc, &board.start_boxes, board.start_player);
    let starts = vec![problem.encode(&board.start_boxes, start_player)];
    let goals = goal_states(board, &mut sc, &board.goals)
        .into_iter()
        .map(|p| problem.encode(&board.goals, p))
        .collect();
    (starts, goals)
}

fn solve_typed<K: StateKey>(
    board: Arc<Board>,
    opts: &SolveOptions,
    cancel: &AtomicBool,
    progress: &dyn Progress,
) -> Result<SolveReport, EngineError> {
    let started = Instant::now();
    let mut report = SolveReport {
        status: Status::Unsolvable,
        pushes: None,
        moves: None,
        solution: None,
        states: 0,
        generated: 0,
        seconds: 0.0,
        kpg_seconds: 0.0,
        forward_layers: 0,
        backward_layers: 0,
        peak_memory_bytes: 0,
        store_bytes: 0,
        disk_bytes: 0,
        key_width: board.keyspace.width,
        reason: board.unsolvable.clone(),
    };
    if report.reason.is_some() {
        return Ok(report);
    }
    let problem = Problem::<K>::full(board.clone(), opts.pruning, opts.patterns.clone());
    let partitioner = Partitioner::new(opts.partitions);
    let store = MemStore::<K>::new(partitioner.count());
    let exchange = LocalExchange::<K>::new(partitioner.count());
    let mut backend = LocalBackend { problem: &problem, partitioner, store: &store, exchange: &exchange, cancel };
    let (starts, goals) = seeds(&problem);
    let limits = Limits { cancel, max_states: opts.max_states };
    let (end, stats) = bidirectional(&mut backend, &starts, &goals, &limits, progress)?;
    fill_stats(&mut report, &stats);
    match end {
        SearchEnd::Met { key, forward, backward } => {
            let lookup = StoreLookup { store: &store as &dyn PartitionStore<K>, partitioner };
            let pushes = rebuild(&problem, &lookup, key, forward, backward)?;
            let lurd = pushes_to_lurd(&board, &pushes)
                .ok_or_else(|| EngineError::Internal("rebuilt pushes do not replay".into()))?;
            report.status = Status::Solved;
            report.pushes = Some(pushes.len());
            report.moves = Some(lurd.len());
            report.solution = Some(lurd);
        }
        SearchEnd::Unsolvable { exhausted } => {
            report.status = Status::Unsolvable;
            report.reason = Some(format!("the {} search ran dry", exhausted.name()));
        }
        SearchEnd::Cancelled => report.status = Status::Timeout,
        SearchEnd::Limit => report.status = Status::Limit,
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

fn fill_stats(report: &mut SolveReport, stats: &SearchStats) {
    report.states = stats.stored;
    report.generated = stats.generated;
    report.forward_layers = stats.layers[0];
    report.backward_layers = stats.layers[1];
    report.peak_memory_bytes = stats.peak_memory_bytes;
    report.store_bytes = stats.store_bytes;
    report.disk_bytes = stats.disk_bytes;
}
