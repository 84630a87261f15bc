//! Local mode: solve one level in this process, an in-process cluster of one. Picks
//! the key width, builds the store and exchange, runs the engine, rebuilds the path
//! and renders the LURD solution.
//!
//! Two storage set-ups: everything in RAM ([`MemStore`] and [`LocalExchange`], the
//! fast path, used when neither a memory budget nor a spill directory is asked
//! for), or the disk-backed pair ([`DiskStore`] and [`SpillExchange`]) under a
//! [`MemoryBudget`], writing into a fresh [`SpillDir`] that is removed when the
//! solve ends, however it ends, unless kept.

use crate::engine::partition::{Exchange, LocalExchange, PartitionStore, Partitioner};
use crate::engine::path::{rebuild, StoreLookup};
use crate::engine::search::{bidirectional, Limits, LocalBackend, Progress, SearchEnd, SearchStats};
use crate::engine::{EngineError, PatternCheck, Problem};
use crate::model::board::Board;
use crate::model::key::{BitKey, KeyWidth, StateKey};
use crate::model::rules::{goal_states, normalize_player, BoxMove, Pruning, Scratch};
use crate::model::solution::pushes_to_lurd;
use crate::storage::budget::{default_budget, MemoryBudget};
use crate::storage::disk::{DiskOptions, DiskStore, DiskUsage, SpillPolicy};
use crate::storage::mem::MemStore;
use crate::storage::spill::{SpillDir, SpillExchange};
use serde::Serialize;
use std::path::PathBuf;
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
    /// Memory budget in bytes for states and successors. With a budget or a
    /// spill directory the solve keeps what fits in RAM and spills the rest;
    /// with neither, everything stays in RAM.
    pub memory_budget: Option<u64>,
    /// Existing directory to spill under (a fresh subdirectory is made in it);
    /// the system temporary directory when `None`.
    pub spill_dir: Option<PathBuf>,
    /// Leave the spill files in place after the solve.
    pub keep_spill: bool,
    /// Which layers stay in RAM when they do not all fit.
    pub spill_policy: SpillPolicy,
}

/// Partitions for `threads` worker threads when none are asked for: 4 per
/// thread balances the threads (a partition is the unit of work; the largest
/// partition of a layer is about 1.2 times the mean) while keeping each
/// partition's keys dense on disk and its files few (see [`Partitioner`]).
/// Measured on two cores: 8 partitions rather than 16 made no in-memory run
/// slower and spilled Microban #139 at 0.82 MiB 15% faster.
pub fn default_partitions(threads: usize) -> usize {
    (4 * threads.max(1)).next_power_of_two().min(1 << 16)
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            partitions: default_partitions(2),
            pruning: Pruning::SOLVE,
            max_states: None,
            patterns: None,
            memory_budget: None,
            spill_dir: None,
            keep_spill: false,
            spill_policy: SpillPolicy::KeepOldest,
        }
    }
}

impl SolveOptions {
    /// True when the solve runs on the disk-backed store.
    pub fn spills(&self) -> bool {
        self.memory_budget.is_some() || self.spill_dir.is_some()
    }
}

/// What a budgeted (disk-backed) solve used.
#[derive(Debug, Clone, Serialize)]
pub struct StorageReport {
    pub memory_budget_bytes: u64,
    /// Partitions used (the budget may raise the requested count).
    pub partitions: usize,
    /// States held in layer shard files at the end (their bytes are the
    /// report's `disk_bytes`).
    pub disk_states: u64,
    /// Most bytes on disk at once: layer shards plus successor runs.
    pub peak_disk_bytes: u64,
    /// Successor keys written to runs by the exchange.
    pub spilled_candidates: u64,
    /// Most candidates (duplicates included) one partition had in one layer,
    /// and the keys per chunk the merge streamed them in.
    pub largest_partition_candidates: u64,
    pub merge_chunk_keys: u64,
    /// The spill directory, when kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill_dir: Option<PathBuf>,
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
    /// Disk use of a budgeted solve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageReport>,
}

impl SolveReport {
    /// A report with nothing searched yet: unsolvable with the board's reason if
    /// the board alone proves it, zero counters otherwise.
    pub fn empty(board: &Board) -> SolveReport {
        SolveReport {
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
            storage: None,
        }
    }

    /// Records a rebuilt push path as the solution. `false` if the pushes do not
    /// replay on the board (an engine bug the caller reports as internal).
    pub fn record_solution(&mut self, board: &Board, pushes: &[BoxMove]) -> bool {
        let Some(lurd) = pushes_to_lurd(board, pushes) else { return false };
        self.status = Status::Solved;
        self.pushes = Some(pushes.len());
        self.moves = Some(lurd.len());
        self.solution = Some(lurd);
        true
    }

    /// Records how a search ended when the sides did not meet; a meeting is
    /// recorded with [`SolveReport::record_solution`] once the path is rebuilt.
    pub fn record_unmet<K>(&mut self, end: &SearchEnd<K>) {
        match end {
            SearchEnd::Met { .. } => {}
            SearchEnd::Unsolvable { exhausted } => {
                self.status = Status::Unsolvable;
                self.reason = Some(format!("the {} search ran dry", exhausted.name()));
            }
            SearchEnd::Cancelled => self.status = Status::Timeout,
            SearchEnd::Limit => self.status = Status::Limit,
        }
    }
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
    let goals =
        goal_states(board, &mut sc, &board.goals).into_iter().map(|p| problem.encode(&board.goals, p)).collect();
    (starts, goals)
}

fn solve_typed<K: StateKey>(
    board: Arc<Board>,
    opts: &SolveOptions,
    cancel: &AtomicBool,
    progress: &dyn Progress,
) -> Result<SolveReport, EngineError> {
    let started = Instant::now();
    let mut report = SolveReport::empty(&board);
    if report.reason.is_some() {
        return Ok(report);
    }
    let problem = Problem::<K>::full(board.clone(), opts.pruning, opts.patterns.clone());
    if !opts.spills() {
        let partitioner = Partitioner::for_space(opts.partitions, &problem.space);
        let store = MemStore::<K>::new(partitioner.count());
        let exchange = LocalExchange::<K>::new(partitioner.count());
        search(&problem, partitioner, &store, &exchange, opts, cancel, progress, &mut report)?;
    } else {
        let budget = MemoryBudget::new(
            opts.memory_budget.unwrap_or_else(default_budget),
            rayon::current_num_threads(),
            std::mem::size_of::<K>(),
        );
        let partitioner = Partitioner::for_space(budget.partitions(opts.partitions), &problem.space);
        let parts = partitioner.count();
        let base = opts.spill_dir.clone().unwrap_or_else(std::env::temp_dir);
        // declared first so that it is dropped (and the files removed) last
        let spill = SpillDir::create(&base, opts.keep_spill)?;
        let usage = Arc::new(DiskUsage::default());
        let store = DiskStore::<K>::create(
            spill.path(),
            parts,
            DiskOptions {
                memory_bytes: budget.store_bytes(),
                policy: opts.spill_policy,
                usage: Some(usage.clone()),
                ..DiskOptions::default()
            },
        )?;
        let exchange = SpillExchange::<K>::create(
            &spill.path().join("x"),
            parts,
            budget.exchange_bytes(),
            budget.route_batch(parts),
            budget.merge_chunk_keys(),
            usage.clone(),
        )?;
        let result = search(&problem, partitioner, &store, &exchange, opts, cancel, progress, &mut report);
        report.storage = Some(StorageReport {
            memory_budget_bytes: budget.total,
            partitions: parts,
            disk_states: store.disk_keys(),
            peak_disk_bytes: usage.peak(),
            spilled_candidates: exchange.spilled_keys(),
            largest_partition_candidates: exchange.largest_take(),
            merge_chunk_keys: budget.merge_chunk_keys(),
            spill_dir: spill.kept().then(|| spill.path().to_path_buf()),
        });
        result?;
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Runs the search on `store` and `exchange` and fills `report`, rebuilding the
/// path when the sides meet.
#[allow(clippy::too_many_arguments)]
fn search<K: StateKey>(
    problem: &Problem<K>,
    partitioner: Partitioner,
    store: &dyn PartitionStore<K>,
    exchange: &dyn Exchange<K>,
    opts: &SolveOptions,
    cancel: &AtomicBool,
    progress: &dyn Progress,
    report: &mut SolveReport,
) -> Result<(), EngineError> {
    let mut backend = LocalBackend { problem, partitioner, store, exchange, cancel };
    let (starts, goals) = seeds(problem);
    let limits = Limits { cancel, max_states: opts.max_states };
    let (end, stats) = bidirectional(&mut backend, &starts, &goals, &limits, progress)?;
    fill_stats(report, &stats);
    match end {
        SearchEnd::Met { key, forward, backward } => {
            let lookup = StoreLookup { store, partitioner };
            let pushes = rebuild(problem, &lookup, key, forward, backward)?;
            if !report.record_solution(&problem.board, &pushes) {
                return Err(EngineError::Internal("rebuilt pushes do not replay".into()));
            }
        }
        other => report.record_unmet(&other),
    }
    Ok(())
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
