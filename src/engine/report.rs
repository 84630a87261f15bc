//! What a solve reports, in local mode and on the cluster alike: how it ended
//! ([`Status`]), its counts and timings ([`SolveReport`]), and what a
//! disk-backed store used ([`StorageReport`]). Plain data, serialized as the
//! `--json` output.

use super::search::{SearchEnd, SearchStats};
use crate::model::board::Board;
use crate::model::key::KeyWidth;
use crate::model::rules::BoxMove;
use crate::model::solution::pushes_to_lurd;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How a solve ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Solved,
    Unsolvable,
    Timeout,
    Limit,
    /// The bounded search proved that no solution has at most the given number
    /// of pushes (`--upper-bound`); there may be longer ones.
    Bounded,
    Error,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Solved => "solved",
            Status::Unsolvable => "unsolvable",
            Status::Timeout => "timeout",
            Status::Limit => "limit",
            Status::Bounded => "bounded",
            Status::Error => "error",
        }
    }
}

/// What a budgeted (disk-backed) solve used.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

/// One iteration of the bounded search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BoundIteration {
    /// `U`: states with `depth + lower bound > U` were dropped; `None` for
    /// the plain search that ends an iteration whose bound dropped little.
    pub bound: Option<u32>,
    /// States stored and generated in this iteration.
    pub states: u64,
    pub generated: u64,
    /// Successors the bound dropped.
    pub pruned: u64,
    pub seconds: f64,
    /// Which search decided the iteration (found its solution or proved
    /// there is none within the bound).
    #[serde(default)]
    pub search: IterationSearch,
    /// States the iteration's probes stored (part of `states`).
    #[serde(default)]
    pub probe_states: u64,
    /// States the iteration's probes generated (part of `generated`).
    #[serde(default)]
    pub probe_generated: u64,
}

/// What decided a bound iteration: the layered search from both sides, or a
/// probe (`probe.rs`); or nothing, the search having outgrown the small k-PG
/// tables in it (the same bound follows, searched with the larger ones); or
/// the plain search tried with a budget between two bounded iterations
/// (`bound` is `None`): it either found the optimum or ran out of its budget,
/// and the bounded search went on where it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum IterationSearch {
    #[default]
    Layers,
    Probe,
    Outgrown,
    #[serde(rename = "plain_try")]
    PlainTry,
}

/// What a solution is optimal for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Objective {
    /// The fewest pushes; moves are whatever the solution found takes.
    #[serde(rename = "pushes")]
    Pushes,
    /// The fewest pushes, then the fewest moves among all such solutions.
    #[default]
    #[serde(rename = "pushes,moves")]
    PushesMoves,
}

impl Objective {
    pub fn name(self) -> &'static str {
        match self {
            Objective::Pushes => "pushes",
            Objective::PushesMoves => "pushes,moves",
        }
    }
}

/// The result of solving one level.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// The largest k of the k-PG tables the search used (0: none).
    #[serde(default)]
    pub kpg: usize,
    /// States the level's search stored with the small tables (k = 1 and 2)
    /// before it outgrew them and the automatic choice built the larger ones
    /// (part of `states`; 0 when the small tables sufficed or were not
    /// tried). A moves pass's search that outgrows them counts its states
    /// with them in `moves_states`.
    #[serde(default)]
    pub small_tables_states: u64,
    /// Whether the bound used triple penalties (asked for with `--triples`
    /// and built within their work limit).
    #[serde(default)]
    pub triples: bool,
    /// Whether the forward search used the PI-corral restriction: asked for
    /// and, unless kept by `--keep-pi-corrals`, shown to pay by a sample of
    /// the level's states (`model::rules::CorralShare`).
    #[serde(default)]
    pub pi_corrals: bool,
    pub forward_layers: usize,
    pub backward_layers: usize,
    pub peak_memory_bytes: u64,
    /// Bytes the visited sets hold in memory at the end (divide by `states` for
    /// bytes per stored state).
    pub store_bytes: u64,
    pub disk_bytes: u64,
    #[serde(rename = "key")]
    pub key_width: KeyWidth,
    /// Why the level is unsolvable (or was stopped), when known.
    pub reason: Option<String>,
    /// What the solution is proven optimal for (solved levels only): with
    /// `pushes,moves` both counts are the least possible in that order.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub objective: Option<Objective>,
    /// The moves pass (part of `seconds`): its time, the states its search
    /// stored (0 when it reused the main search's layers), and the states that
    /// lie on push-optimal solutions.
    #[serde(default)]
    pub moves_seconds: f64,
    #[serde(default)]
    pub moves_states: u64,
    #[serde(default)]
    pub optimal_states: u64,
    /// Bytes the moves pass wrote to disk: the depths it was not working on
    /// that did not fit its memory share (0: all in memory).
    #[serde(default)]
    pub moves_disk_bytes: u64,
    /// Why a solve asked for the fewest moves returned only a push-optimal
    /// solution (the moves pass stopped or gave up).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub moves_note: Option<String>,
    /// The bounded search: each iteration's bound and cost, when it ran.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub iterations: Vec<BoundIteration>,
    /// The database the k-PG tables were read from (`solve --deadlocks`), as
    /// the user named it; none when the solve built its own.
    #[serde(rename = "deadlocks", skip_serializing_if = "Option::is_none", default)]
    pub tables_file: Option<String>,
    /// Disk use of a budgeted solve, as fields of the report's own.
    #[serde(flatten)]
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
            triples: false,
            pi_corrals: false,
            kpg: 0,
            small_tables_states: 0,
            forward_layers: 0,
            backward_layers: 0,
            peak_memory_bytes: 0,
            store_bytes: 0,
            disk_bytes: 0,
            key_width: board.keyspace.width,
            reason: board.unsolvable.clone(),
            objective: None,
            moves_seconds: 0.0,
            moves_states: 0,
            optimal_states: 0,
            moves_disk_bytes: 0,
            moves_note: None,
            iterations: Vec::new(),
            tables_file: None,
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
            SearchEnd::Met { .. } | SearchEnd::Solved { .. } => {}
            SearchEnd::Unsolvable { exhausted } => {
                self.status = Status::Unsolvable;
                self.reason = Some(format!("the {} search ran dry", exhausted.name()));
            }
            SearchEnd::Cancelled => self.status = Status::Timeout,
            SearchEnd::Limit => {
                self.status = Status::Limit;
                self.reason = Some("the stored states reached the state limit".into());
            }
            SearchEnd::Beyond { bound } => {
                self.status = Status::Bounded;
                self.reason = Some(format!("no solution within {bound} pushes"));
            }
        }
    }

    /// Copies a finished search's counters.
    pub fn record_stats(&mut self, stats: &SearchStats) {
        self.states = stats.stored;
        self.generated = stats.generated;
        self.forward_layers = stats.layers[0];
        self.backward_layers = stats.layers[1];
        self.peak_memory_bytes = stats.peak_memory_bytes;
        self.store_bytes = stats.store_bytes;
        self.disk_bytes = stats.disk_bytes;
    }
}
