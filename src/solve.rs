//! Local mode: solve one level in this process, an in-process cluster of one.
//! This is the local [`Deployment`] the one solve driver
//! ([`crate::engine::driver::solve`]) runs on: every partition in one store,
//! successors through one in-process exchange, k-games on the same engine.
//!
//! Two storage set-ups: everything in RAM ([`MemStore`] and [`LocalExchange`], the
//! fast path, used when neither a memory budget nor a spill directory is asked
//! for), or the disk-backed pair ([`DiskStore`] and [`SpillExchange`]) under a
//! [`MemoryBudget`], writing into a fresh [`SpillDir`] that is removed when the
//! solve ends, however it ends, unless kept.

use crate::engine::driver::{
    probe_cap, probe_share, solve, Deployment, Observers, Pass, SolveSpec, PROBE_AFTER, PROBE_MAX,
};
use crate::engine::kpg::{build_tables_paired, DeadlockTables, KChoice, KStats, KpgProgress};
use crate::engine::moves::Tape;
use crate::engine::partition::{LocalExchange, PartitionStore, Partitioner};
use crate::engine::probe;
use crate::engine::search::{exhaust, LayerBackend, Limits, LocalBackend, NoProgress, Progress, SearchEnd};
use crate::engine::{EngineError, Problem, Side};
use crate::model::board::Board;
use crate::model::key::StateKey;
use crate::model::rules::Pruning;
use crate::storage::budget::{default_budget, tape_share, MemoryBudget};
use crate::storage::disk::{DiskOptions, DiskStore, DiskUsage, SpillPolicy};
use crate::storage::mem::MemStore;
use crate::storage::spill::{SpillDir, SpillExchange};
use crate::storage::tape::DiskTape;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub use crate::engine::driver::{seeds, BoundSpec, Objective, TableSource};
pub use crate::engine::report::{SolveReport, Status, StorageReport};

/// Options for a local solve.
#[derive(Clone)]
pub struct SolveOptions {
    /// Number of partitions (a power of two), independent of the thread count.
    pub partitions: usize,
    pub pruning: Pruning,
    pub max_states: Option<u64>,
    /// Where the k-PG deadlock tables come from, if any.
    pub tables: TableSource,
    /// Stop (status `timeout`) at this instant; a table build counts.
    pub deadline: Option<Instant>,
    /// The bounded search (on by default).
    pub bound: BoundSpec,
    /// Whether the bound adds the 2-box games' pair penalties (on by default).
    pub pair_penalties: bool,
    /// Whether the bound also tries the 3-box games' triple penalties (off by
    /// default: see `--triples`).
    pub triple_penalties: bool,
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
    /// The fewest pushes, or the fewest pushes and then moves (the default).
    pub objective: Objective,
    /// The most states a probe may store (0: no probes).
    pub probe_states: u64,
    /// Bytes the probe's states may take (it keeps them in memory); fewer
    /// states than `probe_states` where they do not fit. `None`: a quarter of
    /// the memory budget (of the default budget with a spill directory
    /// alone) where the solve spills, no limit but `probe_states` in RAM.
    pub probe_memory: Option<u64>,
    /// Layered states an iteration stores before its probe starts.
    pub probe_after: u64,
    /// The most states the moves pass's search may store; `None`: the
    /// driver's [`moves_budget`](crate::engine::driver::moves_budget).
    pub moves_states: Option<u64>,
    /// Bytes the moves pass keeps in memory of the depths it is not working
    /// on; the rest goes to disk (under the spill directory, else the system
    /// temporary directory). `None`: a quarter of the memory budget, or of
    /// the default budget.
    pub moves_memory: Option<u64>,
    /// Keep the PI-corral restriction (where `pruning` asks for it) only on a
    /// level where a sample of its states shows it pays; false: everywhere.
    pub sample_corrals: bool,
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
            tables: TableSource::None,
            deadline: None,
            bound: BoundSpec::Iterate,
            pair_penalties: true,
            triple_penalties: false,
            memory_budget: None,
            spill_dir: None,
            keep_spill: false,
            spill_policy: SpillPolicy::KeepOldest,
            objective: Objective::PushesMoves,
            probe_states: PROBE_MAX,
            probe_memory: None,
            probe_after: PROBE_AFTER,
            moves_states: None,
            moves_memory: None,
            sample_corrals: true,
        }
    }
}

impl SolveOptions {
    /// True when the solve runs on the disk-backed store.
    pub fn spills(&self) -> bool {
        self.memory_budget.is_some() || self.spill_dir.is_some()
    }

    /// The bytes the probe's states may take: as asked, else its share of the
    /// budget where the solve spills.
    fn probe_memory(&self) -> Option<u64> {
        self.probe_memory
            .or_else(|| self.spills().then(|| probe_share(self.memory_budget.unwrap_or_else(default_budget))))
    }
}

/// Solves `board` in this process, reporting the search's layers to `progress`.
pub fn solve_local(
    board: Arc<Board>,
    opts: &SolveOptions,
    cancel: &AtomicBool,
    progress: &dyn Progress,
) -> Result<SolveReport, EngineError> {
    solve_local_observed(board, opts, cancel, &Observers { tables: &NoProgress, search: progress })
}

/// [`solve_local`] with an observer of the table build too.
pub fn solve_local_observed(
    board: Arc<Board>,
    opts: &SolveOptions,
    cancel: &AtomicBool,
    observers: &Observers<'_>,
) -> Result<SolveReport, EngineError> {
    let spec = SolveSpec {
        pruning: opts.pruning,
        tables: opts.tables.clone(),
        bound: opts.bound,
        pair_penalties: opts.pair_penalties,
        triple_penalties: opts.triple_penalties,
        max_states: opts.max_states,
        deadline: opts.deadline,
        objective: opts.objective,
        probe_states: opts.probe_states,
        probe_memory: opts.probe_memory(),
        probe_after: opts.probe_after,
        moves_states: opts.moves_states,
        sample_corrals: opts.sample_corrals,
    };
    let mut local = Local { opts, storage: None, spill: None };
    solve(&mut local, board, &spec, cancel, observers)
}

/// Partitions of a k-game's layers in this process.
const TABLE_PARTITIONS: usize = 16;

/// The local deployment: layers in this process.
struct Local<'a> {
    opts: &'a SolveOptions,
    /// What the disk-backed store used, once a budgeted search ran.
    storage: Option<StorageReport>,
    /// The level's spill directory, made by its first budgeted search: each
    /// search (a bound iteration, the moves pass) spills into a directory of
    /// its own inside it, so that `--keep-spill` keeps them all in the one
    /// directory the report names. Dropped (removed unless kept) with the
    /// deployment, after every search's.
    spill: Option<SpillDir>,
}

impl Deployment for Local<'_> {
    fn build_tables(
        &mut self,
        board: &Arc<Board>,
        choice: KChoice,
        cancel: &AtomicBool,
        progress: &dyn KpgProgress,
    ) -> Result<Option<(DeadlockTables, Vec<KStats>)>, EngineError> {
        let built = build_tables(board.clone(), choice, TABLE_PARTITIONS, cancel, progress)?;
        Ok((!cancel.load(Ordering::SeqCst)).then_some(built))
    }

    fn search<K: StateKey>(
        &mut self,
        pass: Pass,
        problem: &Problem<K>,
        _tables: Option<&Arc<DeadlockTables>>,
        cancel: &AtomicBool,
        search: &mut dyn FnMut(&mut dyn LayerBackend<K>) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        let opts = self.opts;
        if !opts.spills() {
            let partitioner = Partitioner::for_space(opts.partitions, &problem.space);
            let store = MemStore::<K>::new(partitioner.count());
            let exchange = LocalExchange::<K>::new(partitioner.count());
            return search(&mut LocalBackend { problem, partitioner, store: &store, exchange: &exchange, cancel });
        }
        // the probe's share is set aside: it holds its states beside the layers
        let total = opts.memory_budget.unwrap_or_else(default_budget);
        let probe = probe_cap::<K>(opts.probe_states, opts.probe_memory()).saturating_mul(probe::state_bytes::<K>());
        let budget = MemoryBudget::new(
            total.saturating_sub(probe.min(probe_share(total))),
            rayon::current_num_threads(),
            std::mem::size_of::<K>(),
        );
        let partitioner = Partitioner::for_space(budget.partitions(opts.partitions), &problem.space);
        let parts = partitioner.count();
        let level_dir = match &mut self.spill {
            Some(dir) => dir,
            none => {
                let base = opts.spill_dir.clone().unwrap_or_else(std::env::temp_dir);
                none.insert(SpillDir::create(&base, opts.keep_spill)?)
            }
        };
        // declared first so that it is dropped (and the files removed) last
        let spill = level_dir.inside();
        let level_dir = level_dir.path().to_path_buf();
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
        let result = search(&mut LocalBackend { problem, partitioner, store: &store, exchange: &exchange, cancel });
        if let (Pass::Moves, Some(main)) = (pass, self.storage.as_mut()) {
            // the report describes the level's search; the moves pass's may
            // still have used more disk at its peak
            main.peak_disk_bytes = main.peak_disk_bytes.max(usage.peak());
            return result;
        }
        self.storage = Some(StorageReport {
            memory_budget_bytes: total,
            partitions: parts,
            disk_states: store.disk_keys(),
            peak_disk_bytes: usage.peak(),
            spilled_candidates: exchange.spilled_keys(),
            largest_partition_candidates: exchange.largest_take(),
            merge_chunk_keys: budget.merge_chunk_keys(),
            spill_dir: spill.kept().then_some(level_dir),
        });
        result
    }

    fn tape(&mut self) -> Box<dyn Tape> {
        let base = self.opts.spill_dir.clone().unwrap_or_else(std::env::temp_dir);
        let share = self.opts.moves_memory.unwrap_or_else(|| tape_share(self.opts.memory_budget));
        Box::new(DiskTape::new(base, share))
    }

    fn finish_report(&mut self, report: &mut SolveReport) {
        report.storage = self.storage.take();
    }
}

/// Builds k-PG tables for the k of `choice` (a number: k = 1..=K) in this
/// process, each k-game on `partitions` in-memory partitions. Stops early
/// (returning what is complete) if `cancel` is raised.
pub fn build_tables(
    board: Arc<Board>,
    choice: impl Into<KChoice>,
    partitions: usize,
    cancel: &AtomicBool,
    progress: &dyn KpgProgress,
) -> Result<(DeadlockTables, Vec<KStats>), EngineError> {
    // in this process the two sides of a k-game run at once: each is a run of
    // small layers that alone keeps the threads about two thirds busy
    let mut local = |problem: &Problem<u64>, _: &DeadlockTables, fwd: &[u64], bwd: &[u64]| {
        let (f, b) = rayon::join(
            || explore(problem, Side::Forward, fwd, partitions, cancel, progress),
            || explore(problem, Side::Backward, bwd, partitions, cancel, progress),
        );
        Ok((f?, b?))
    };
    build_tables_paired(board, choice.into(), progress, &mut local)
}

/// Explores one side of the k-game to exhaustion; returns every key found, sorted.
fn explore(
    problem: &Problem<u64>,
    side: Side,
    seeds: &[u64],
    partitions: usize,
    cancel: &AtomicBool,
    progress: &dyn Progress,
) -> Result<Option<Vec<u64>>, EngineError> {
    let partitioner = Partitioner::for_space(partitions, &problem.space);
    let store = MemStore::<u64>::new(partitions);
    let exchange = LocalExchange::<u64>::new(partitions);
    let mut backend = LocalBackend { problem, partitioner, store: &store, exchange: &exchange, cancel };
    let limits = Limits { cancel, max_states: None, bound: None };
    let (end, _) = exhaust(&mut backend, side, seeds, &limits, progress)?;
    if matches!(end, SearchEnd::Cancelled) {
        return Ok(None);
    }
    let mut all = Vec::new();
    for layer in 0..store.layers(side) {
        for p in 0..partitions {
            store.for_each_chunk(side, layer, p, &mut |c| {
                all.extend_from_slice(c);
                Ok(())
            })?;
        }
    }
    all.sort_unstable();
    Ok(Some(all))
}
