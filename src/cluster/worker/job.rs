//! One job on one worker: the problem, the partitions this worker owns (their
//! layers in a durable [`DiskStore`], which is also the checkpoint: every sealed
//! layer's shard files plus a manifest in the data dir, written once), delivered
//! successors in a [`SpillExchange`] within the worker's budget, and the step fence. Generic over the key type; [`WorkerJob`] is the
//! key-free face the gRPC service talks to. Every method here may compute: the
//! service calls the heavy ones through `run_cpu`.

use super::super::codec::{decode_batch, encode_batch, keys_from_bytes, keys_to_bytes};
use super::super::proto::{ExpandReply, KeyBatch, MergeReply, SealReply};
use super::super::{ClusterError, MAIN_PHASE};
use crate::engine::kpg::DeadlockTables;
use crate::engine::layer::{common_keys, expand, merge};
use crate::engine::partition::{Exchange, PartitionStore, Partitioner, StoreBytes};
use crate::engine::{on_threads, Bound, PatternCheck, Problem, SeamError, Side};
use crate::model::board::Board;
use crate::model::bounds::LowerBounds;
use crate::model::key::{BitKey, KeyWidth, StateKey};
use crate::model::level::parse_one;
use crate::model::pairs::PairPenalties;
use crate::model::rules::Pruning;
use crate::storage::budget::MemoryBudget;
use crate::storage::disk::{DiskOptions, DiskStore, DiskUsage};
use crate::storage::spill::SpillExchange;
use crate::storage::{kdb, StorageError};
use prost::Message;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Who owns which partition: `owners[p]` indexes `nodes` and `addresses`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub nodes: Vec<String>,
    pub addresses: Vec<String>,
    pub owners: Vec<u32>,
}

/// What a worker needs to open a job.
pub struct JobSpec {
    pub job_id: u64,
    pub level_text: String,
    pub no_freeze: bool,
    /// Whether the forward search uses the PI-corral restriction (the
    /// coordinator's driver decides, from the level and the options).
    pub pi_corrals: bool,
    pub table: Table,
    /// This worker's index in `table.nodes`.
    pub me: u32,
    pub node_id: String,
    /// Completed layers to keep (restored from the checkpoint).
    pub want: [usize; 2],
    /// The data dir's folder for this job and phase.
    pub dir: PathBuf,
    /// Which search of the job ("main" or a k-game).
    pub phase: String,
    /// Boxes of a k-game; 0 for the level itself.
    pub boxes: usize,
    /// k-PG tables the search checks (a .kdb database), if any.
    pub kpg: Vec<u8>,
    /// The bounded search's limit `U` and whether its bound adds the pair
    /// penalties (the level's search only); `None`: unbounded.
    pub bound: Option<(u32, bool)>,
    /// Whether that bound also adds the triple penalties (built here, where
    /// the level's tables fit, as the coordinator's driver builds them).
    pub triples: bool,
    /// The worker's memory budget (`--mem`) and its expand/merge threads.
    pub mem: u64,
    pub threads: usize,
}

/// A bounded, failure-aware queue of batches to one peer's `Deliver` stream.
pub struct PeerSink {
    pub tx: mpsc::Sender<KeyBatch>,
    /// Raised by the stream's task when the RPC failed, and its event.
    pub failed: Arc<AtomicBool>,
    pub failed_event: Arc<tokio::sync::Notify>,
    /// The runtime the stream's task runs on (a full queue is waited for on it).
    pub runtime: tokio::runtime::Handle,
    pub addr: String,
}

/// Counters of one expand phase.
#[derive(Default)]
struct SendCounters {
    keys_sent: AtomicU64,
    bytes_sent: AtomicU64,
    keys_local: AtomicU64,
}

/// The key-free face of a job.
pub trait WorkerJob: Send + Sync {
    fn id(&self) -> u64;
    fn phase(&self) -> &str;
    fn limbs(&self) -> u32;
    fn layers(&self) -> [usize; 2];
    fn table(&self) -> Table;
    fn me(&self) -> u32;
    /// Takes the new addresses of the same nodes.
    fn set_addresses(&self, addresses: Vec<String>);
    fn owned(&self) -> usize;
    /// Bytes held in memory and on disk, as of the last seed, merge or seal
    /// for the store (the heartbeat reads this while a merge may hold the
    /// store's partitions for seconds) and as of now for waiting successors.
    fn bytes(&self) -> StoreBytes;
    /// Successor keys this job's exchange has written to disk so far.
    fn spilled_keys(&self) -> u64;
    /// Enters step `step` (fencing); returns the step's cancel flag.
    fn enter(&self, step: u64) -> Result<Arc<AtomicBool>, ClusterError>;
    fn seed(&self, side: Side, keys: &[u8]) -> Result<u64, ClusterError>;
    /// Expands `layer` (the last one; with `only`, any completed one, routing
    /// only successors of the partitions `only` lists: a rebuild of lost ones).
    fn expand(
        &self,
        side: Side,
        layer: usize,
        step: u64,
        cancel: &AtomicBool,
        sinks: Vec<Option<PeerSink>>,
        only: &[u32],
    ) -> Result<ExpandReply, ClusterError>;
    /// Whether `layer` of `side` may be expanded now (see [`WorkerJob::expand`]):
    /// checked before the request's step is entered, so that a refused
    /// request leaves the step fence where it was.
    fn can_expand(&self, side: Side, layer: usize, rebuild: bool) -> Result<(), ClusterError>;
    /// Takes one delivered batch; returns its key count.
    fn deliver(&self, batch: &KeyBatch) -> Result<u64, ClusterError>;
    fn merge(&self, side: Side, step: u64, check_other: bool) -> Result<MergeReply, ClusterError>;
    fn seal(&self, side: Side, step: u64, layer: usize) -> Result<SealReply, ClusterError>;
    /// Drops the partial layer and buffered successors; stops a running expand.
    /// Aborts `step` (`None`: the current one) if it is still the current
    /// one: stops its work, drops its partial layer and successors, and
    /// refuses its late batches and its merge.
    fn abort(&self, step: Option<u64>);
    /// Aborts the current step and starts the step fence again: the
    /// coordinator loads the job afresh.
    fn reload(&self);
    fn lookup(&self, side: Side, layer: usize, keys: &[u8]) -> Result<Vec<bool>, ClusterError>;
    /// The keys of this worker's partitions in both forward layer `forward`
    /// and backward layer `backward`, as key bytes (empty when more than
    /// `max` of them), and their count.
    fn common(&self, forward: usize, backward: usize, max: usize) -> Result<(Vec<u8>, u64), ClusterError>;
    /// Every stored key of `side` this worker holds (k-PG table work), as
    /// chunks of key bytes of at most `chunk` keys.
    fn collect(&self, side: Side, chunk: usize) -> Result<Vec<Vec<u8>>, ClusterError>;
}

/// The lower bounds of the last bounded job opened in this process: a job
/// opens once per bound iteration and phase, and the triple penalties take
/// seconds to build. Keyed by what they are built from (the level's
/// fingerprint, pairs, triples); kept pairs from a database equal the ones
/// the level gives.
static LOWER: Mutex<Option<(LowerKey, Arc<LowerBounds>)>> = Mutex::new(None);

/// What lower bounds are built from: the level's fingerprint, pairs, triples.
type LowerKey = (u64, bool, bool);

/// A bounded job's lower bounds: the cached ones if they were built from the
/// same level and choices, else built here.
///
/// The build runs with the cache unlocked: its pair tables' two sides are
/// built at once on rayon's threads (`engine::on_threads`), and a thread
/// waiting in that join may take another queued `open_job`, which would then
/// wait for the lock its own thread holds. Two opens of the same level at
/// once (the coordinator opens a job's phases one after the other) would
/// each build the same tables, and the last one stays cached.
fn lower_bounds(board: &Board, pairs: bool, triples: bool, kept: Option<&PairPenalties>) -> Arc<LowerBounds> {
    let key = (board.fingerprint(), pairs, triples);
    let cached = |cache: &Option<(LowerKey, Arc<LowerBounds>)>| {
        cache.as_ref().filter(|(k, _)| *k == key).map(|(_, lower)| lower.clone())
    };
    if let Some(lower) = cached(&LOWER.lock().unwrap_or_else(|e| e.into_inner())) {
        return lower;
    }
    let lower = LowerBounds::with_kept_pairs_joined(board, pairs, kept, &on_threads);
    let lower = Arc::new(if triples { lower.with_triples(board).0 } else { lower });
    *LOWER.lock().unwrap_or_else(|e| e.into_inner()) = Some((key, lower.clone()));
    lower
}

/// Opens (or creates) the job described by `spec`, restoring `spec.want` layers
/// from the checkpoint.
pub fn open_job(spec: JobSpec) -> Result<Arc<dyn WorkerJob>, ClusterError> {
    let level = parse_one(&spec.level_text, "job").map_err(|e| ClusterError::InvalidArgument(e.to_string()))?;
    let board = Arc::new(Board::new(&level).map_err(|e| ClusterError::InvalidArgument(e.to_string()))?);
    let tables: Option<Arc<DeadlockTables>> = if spec.kpg.is_empty() {
        None
    } else {
        let path = Path::new("<job tables>");
        let bound = kdb::decode(path, &spec.kpg).and_then(|file| kdb::bind(path, file, board.clone()));
        Some(Arc::new(bound.map_err(|e| ClusterError::InvalidArgument(e.to_string()))?))
    };
    let kept_pairs = tables.as_ref().and_then(|t| t.pairs.clone());
    let patterns = tables.map(|t| t as Arc<dyn PatternCheck>);
    // as the driver's problem has it: never in the moves pass, whose search
    // must keep every push-optimal solution, nor where the level's sample
    // shows the restriction does not pay
    let pruning = Pruning { dead_squares: true, freeze: !spec.no_freeze, pi_corrals: spec.pi_corrals };
    if spec.boxes != 0 {
        // a k-game of the k-PG tables: all state prunings and no move pruning,
        // u64 keys (as engine::kpg plays it), also when k is the box count: a
        // forward game under the PI-corral restriction would miss states and
        // call them dead
        let problem = Problem::<u64>::with_boxes(board.clone(), spec.boxes, Pruning::ALL, patterns)
            .filter(|p| p.space.width == KeyWidth::U64 && spec.boxes <= board.box_count())
            .ok_or_else(|| ClusterError::InvalidArgument(format!("no {}-box game on this level", spec.boxes)))?;
        return Ok(Arc::new(TypedJob::<u64>::open(spec, problem)?));
    }
    // the bounded search's filter, built here from the level as the
    // coordinator's driver built it
    let triples = spec.triples;
    let bound = spec
        .bound
        .map(|(limit, pairs)| Bound { lower: lower_bounds(&board, pairs, triples, kept_pairs.as_deref()), limit });
    fn full<K: StateKey>(
        spec: JobSpec,
        board: Arc<Board>,
        pruning: Pruning,
        patterns: Option<Arc<dyn PatternCheck>>,
        bound: Option<Bound>,
    ) -> Result<Arc<dyn WorkerJob>, ClusterError> {
        Ok(Arc::new(TypedJob::<K>::open(spec, Problem::full(board, pruning, patterns).with_bound(bound))?))
    }
    match board.keyspace.width {
        KeyWidth::U64 => full::<u64>(spec, board, pruning, patterns, bound),
        KeyWidth::U128 => full::<u128>(spec, board, pruning, patterns, bound),
        KeyWidth::Bits256 => full::<BitKey<4>>(spec, board, pruning, patterns, bound),
        KeyWidth::Bits1024 => full::<BitKey<16>>(spec, board, pruning, patterns, bound),
    }
}

struct StepState {
    id: u64,
    cancel: Arc<AtomicBool>,
    /// The step `id` was aborted: its batches and its merge are refused
    /// until a newer step (or a reload of the job) starts.
    dead: bool,
}

struct TypedJob<K: StateKey> {
    id: u64,
    phase: String,
    problem: Problem<K>,
    partitioner: Partitioner,
    table: Mutex<Table>,
    me: u32,
    node_id: String,
    mine: Vec<usize>,
    /// Where this worker's layers live, and its checkpoint: a durable
    /// [`DiskStore`] in `dir/store` holding the owned partitions, tagged with
    /// the job. It writes every layer (and keeps it in RAM while the worker's
    /// budget lasts) and a manifest at every seal, so a restarted worker
    /// reopens it at the coordinator's last complete layer.
    store: Box<dyn PartitionStore<K>>,
    /// Successors for the owned partitions, from this worker's expansion and
    /// from its peers, until the merge: within a quarter of the budget in RAM,
    /// the rest as sorted runs in `dir/x` (scratch, not part of the checkpoint).
    exchange: SpillExchange<K>,
    step: Mutex<StepState>,
    /// The store's bytes in memory and on disk at its last count (counting
    /// takes every partition's lock, which a merge holds while it works).
    store_memory: AtomicU64,
    store_disk: AtomicU64,
}

impl<K: StateKey> TypedJob<K> {
    fn open(spec: JobSpec, problem: Problem<K>) -> Result<Self, ClusterError> {
        let parts = spec.table.owners.len();
        let partitioner = Partitioner::for_space(parts, &problem.space);
        let mine: Vec<usize> = (0..parts).filter(|&p| spec.table.owners[p] == spec.me).collect();
        let dir = spec.dir.clone();
        // only the level's search is checkpointed: the coordinator logs its
        // layers alone (k-games and the moves pass are redone after its
        // restart), so their layers need not reach disk at every seal; a
        // worker restarted in one of them has its partitions rebuilt
        let durable = spec.phase == MAIN_PHASE;
        if !durable && spec.want != [0, 0] {
            return Err(ClusterError::DataLoss(format!(
                "worker {} holds no checkpoint of job {}'s {} search (only the level's search is checkpointed)",
                spec.node_id, spec.job_id, spec.phase
            )));
        }
        if spec.want == [0, 0] && dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| ClusterError::io(format!("clearing {}", dir.display()), e))?;
        }
        // the store's share of the budget, spread over the partitions held here
        // (the store divides its budget by the partition count of the whole job)
        let budget = MemoryBudget::new(spec.mem, spec.threads, K::LIMBS * 8);
        let share = match mine.len() {
            0 => 0,
            n => budget.store_bytes().saturating_mul(parts as u64) / n as u64,
        };
        let opts = DiskOptions {
            memory_bytes: share,
            durable,
            held: Some(mine.clone()),
            tag: spec.job_id,
            ..DiskOptions::default()
        };
        let store_dir = dir.join("store");
        let store = if spec.want == [0, 0] {
            DiskStore::<K>::create(&store_dir, parts, opts)?
        } else {
            DiskStore::<K>::open(&store_dir, opts, Some(spec.want)).map_err(|e| {
                ClusterError::DataLoss(format!(
                    "worker {} cannot resume job {} from {}: {}; the data is gone",
                    spec.node_id,
                    spec.job_id,
                    dir.display(),
                    checkpoint_trouble(&e)
                ))
            })?
        };
        let store: Box<dyn PartitionStore<K>> = Box::new(store);
        // successors waiting for a merge are never checkpointed: runs an
        // earlier process left behind are void
        let runs = dir.join("x");
        if runs.exists() {
            std::fs::remove_dir_all(&runs).map_err(|e| ClusterError::io(format!("clearing {}", runs.display()), e))?;
        }
        let exchange = SpillExchange::create(
            &runs,
            parts,
            budget.exchange_bytes(),
            budget.route_batch(parts),
            budget.merge_chunk_keys(),
            Arc::new(DiskUsage::default()),
        )?;
        Ok(TypedJob {
            id: spec.job_id,
            phase: spec.phase,
            problem,
            partitioner,
            table: Mutex::new(spec.table),
            me: spec.me,
            node_id: spec.node_id,
            mine,
            store,
            exchange,
            step: Mutex::new(StepState { id: 0, cancel: Arc::new(AtomicBool::new(false)), dead: false }),
            store_memory: AtomicU64::new(0),
            store_disk: AtomicU64::new(0),
        }
        .counted())
    }

    fn counted(self) -> Self {
        self.fresh_bytes();
        self
    }

    /// Counts the store's bytes now (taking each partition's lock in turn),
    /// keeps the count for [`WorkerJob::bytes`] and returns it with the
    /// waiting successors' bytes.
    fn fresh_bytes(&self) -> StoreBytes {
        let s = self.store.bytes();
        self.store_memory.store(s.memory, Ordering::Release);
        self.store_disk.store(s.disk, Ordering::Release);
        self.bytes()
    }

    fn owners(&self) -> Vec<u32> {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).owners.clone()
    }

    /// Stops the current step's work and drops its partial layers and
    /// buffered successors; the step fence then stands at `id`, `dead` if
    /// that step's late batches and merge are to be refused. Called with
    /// the step lock held, so no request slips in between.
    fn void_step(&self, s: &mut StepState, id: u64, dead: bool) {
        s.cancel.store(true, Ordering::SeqCst);
        s.cancel = Arc::new(AtomicBool::new(false));
        (s.id, s.dead) = (id, dead);
        self.exchange.clear();
        self.store.abort_layer(Side::Forward);
        self.store.abort_layer(Side::Backward);
    }

    fn check_step(&self, step: u64) -> Result<(), ClusterError> {
        let s = self.step.lock().unwrap_or_else(|e| e.into_inner());
        if s.id != step {
            return Err(ClusterError::Stale(format!("step {step} is not the current step {}", s.id)));
        }
        if s.dead {
            return Err(ClusterError::Stale(format!("step {step} was aborted")));
        }
        Ok(())
    }

    fn check_mine(&self, p: usize, owners: &[u32]) -> Result<(), ClusterError> {
        if owners[p] != self.me {
            return Err(ClusterError::InvalidArgument(format!(
                "partition {p} is not held by worker {} (job {})",
                self.node_id, self.id
            )));
        }
        Ok(())
    }
}

/// Why a checkpoint cannot be reopened, in words for the data-loss message.
fn checkpoint_trouble(e: &StorageError) -> String {
    match e {
        StorageError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            format!("no checkpoint ({e})")
        }
        other => other.to_string(),
    }
}

impl<K: StateKey> WorkerJob for TypedJob<K> {
    fn id(&self) -> u64 {
        self.id
    }
    fn phase(&self) -> &str {
        &self.phase
    }
    fn limbs(&self) -> u32 {
        K::LIMBS as u32
    }
    fn layers(&self) -> [usize; 2] {
        [self.store.layers(Side::Forward), self.store.layers(Side::Backward)]
    }
    fn table(&self) -> Table {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    fn me(&self) -> u32 {
        self.me
    }
    fn set_addresses(&self, addresses: Vec<String>) {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).addresses = addresses;
    }
    fn owned(&self) -> usize {
        self.mine.len()
    }
    fn bytes(&self) -> StoreBytes {
        StoreBytes {
            memory: self.store_memory.load(Ordering::Acquire) + self.exchange.buffered_bytes(),
            disk: self.store_disk.load(Ordering::Acquire) + self.exchange.run_bytes(),
        }
    }
    fn spilled_keys(&self) -> u64 {
        self.exchange.spilled_keys()
    }

    fn enter(&self, step: u64) -> Result<Arc<AtomicBool>, ClusterError> {
        let mut s = self.step.lock().unwrap_or_else(|e| e.into_inner());
        if step < s.id {
            return Err(ClusterError::Stale(format!("step {step} is older than the current step {}", s.id)));
        }
        if step == s.id && s.dead {
            return Err(ClusterError::Stale(format!("step {step} was aborted")));
        }
        if step > s.id {
            // a new step: whatever an older one left behind is void
            self.void_step(&mut s, step, false);
        }
        Ok(s.cancel.clone())
    }

    fn seed(&self, side: Side, keys: &[u8]) -> Result<u64, ClusterError> {
        if self.store.layers(side) != 0 {
            return Err(ClusterError::FailedPrecondition(format!("the {} side is already seeded", side.name())));
        }
        let keys = keys_from_bytes::<K>(keys)?;
        let owners = self.owners();
        let mut by_part: Vec<Vec<K>> = vec![Vec::new(); owners.len()];
        for k in keys {
            let p = self.partitioner.of(&k);
            self.check_mine(p, &owners)?;
            by_part[p].push(k);
        }
        let mut n = 0;
        for &p in &self.mine {
            let mut v = std::mem::take(&mut by_part[p]);
            v.sort_unstable();
            v.dedup();
            n += v.len() as u64;
            self.store.push_layer(side, p, v)?;
        }
        // sealing a durable store is the checkpoint
        self.store.seal_layer(side)?;
        self.fresh_bytes();
        Ok(n)
    }

    fn expand(
        &self,
        side: Side,
        layer: usize,
        step: u64,
        cancel: &AtomicBool,
        sinks: Vec<Option<PeerSink>>,
        only: &[u32],
    ) -> Result<ExpandReply, ClusterError> {
        let rebuild = !only.is_empty();
        self.can_expand(side, layer, rebuild)?;
        let counters = SendCounters::default();
        let owners = self.owners();
        let routed = if rebuild {
            let mut routed = vec![false; owners.len()];
            for &p in only {
                *routed
                    .get_mut(p as usize)
                    .ok_or_else(|| ClusterError::InvalidArgument(format!("partition {p} does not exist")))? = true;
            }
            Some(routed)
        } else {
            None
        };
        let ex = RemoteExchange { job: self, owners, step, sinks, counters: &counters, routed };
        let stats = expand(&self.problem, side, layer, &self.mine, self.partitioner, &*self.store, &ex, cancel)?;
        drop(ex); // closes the streams to the peers
        Ok(ExpandReply {
            expanded: stats.map_or(0, |s| s.expanded),
            generated: stats.map_or(0, |s| s.generated),
            keys_sent: counters.keys_sent.into_inner(),
            bytes_sent: counters.bytes_sent.into_inner(),
            keys_local: counters.keys_local.into_inner(),
            cancelled: stats.is_none(),
            excess: stats.map_or_else(Vec::new, |s| s.excess.to_vec()),
        })
    }

    fn can_expand(&self, side: Side, layer: usize, rebuild: bool) -> Result<(), ClusterError> {
        let have = self.store.layers(side);
        if layer >= have || (!rebuild && layer + 1 != have) {
            return Err(ClusterError::FailedPrecondition(format!(
                "expand of {} layer {layer}, but this worker holds {have} layers",
                side.name()
            )));
        }
        Ok(())
    }

    fn deliver(&self, batch: &KeyBatch) -> Result<u64, ClusterError> {
        let owners = self.owners();
        let p = batch.partition as usize;
        if p >= owners.len() {
            return Err(ClusterError::InvalidArgument(format!("partition {p} does not exist")));
        }
        self.check_mine(p, &owners)?;
        let keys = decode_batch::<K>(batch.count, &batch.data)?;
        if let Some(k) = keys.iter().find(|k| self.partitioner.of(*k) != p) {
            return Err(ClusterError::InvalidArgument(format!("key {k:?} does not belong to partition {p}")));
        }
        // only a batch found good moves the step fence: a refused one (a
        // peer's bug, a hostile request) once set it past every step the
        // coordinator would send, and the job stalled for good
        self.enter(batch.step)?;
        let n = keys.len() as u64;
        self.exchange.send(p, keys)?;
        Ok(n)
    }

    fn merge(&self, side: Side, step: u64, check_other: bool) -> Result<MergeReply, ClusterError> {
        self.check_step(step)?;
        let before = self.fresh_bytes().memory;
        let m = merge(side, &self.mine, &*self.store, &self.exchange, check_other)?;
        let after = self.fresh_bytes();
        Ok(MergeReply {
            new_states: m.new_states,
            meeting_key: m.meeting.map(|(k, _)| keys_to_bytes(&[k])).unwrap_or_default(),
            meeting_layer: m.meeting.map_or(0, |(_, l)| l as u32),
            met: m.meeting.is_some(),
            memory_bytes: after.memory,
            disk_bytes: after.disk,
            peak_memory_bytes: before.max(after.memory),
        })
    }

    fn seal(&self, side: Side, step: u64, layer: usize) -> Result<SealReply, ClusterError> {
        self.check_step(step)?;
        if self.store.layers(side) != layer {
            return Err(ClusterError::FailedPrecondition(format!(
                "seal of {} layer {layer}, but this worker holds {} layers",
                side.name(),
                self.store.layers(side)
            )));
        }
        // sealing a durable store is the checkpoint
        self.store.seal_layer(side)?;
        let b = self.fresh_bytes();
        Ok(SealReply { memory_bytes: b.memory, disk_bytes: b.disk })
    }

    fn abort(&self, step: Option<u64>) {
        let mut s = self.step.lock().unwrap_or_else(|e| e.into_inner());
        if step.is_some_and(|st| st != s.id) {
            // an older step's failure or abort: the current one goes on
            return;
        }
        // late batches of the step cannot fill it again, nor its merge seal a part
        let id = s.id;
        self.void_step(&mut s, id, true);
    }

    fn reload(&self) {
        // the coordinator that loads the job again numbers the steps from
        // here: one restarted with its clock behind, or a request that set
        // the fence far ahead, never wedges the job
        let mut s = self.step.lock().unwrap_or_else(|e| e.into_inner());
        self.void_step(&mut s, 0, false);
    }

    fn lookup(&self, side: Side, layer: usize, keys: &[u8]) -> Result<Vec<bool>, ClusterError> {
        let keys = keys_from_bytes::<K>(keys)?;
        let owners = self.owners();
        if layer >= self.store.layers(side) {
            return Err(ClusterError::InvalidArgument(format!("{} layer {layer} does not exist", side.name())));
        }
        keys.iter()
            .map(|k| {
                let p = self.partitioner.of(k);
                self.check_mine(p, &owners)?;
                Ok(self.store.contains(side, layer, p, k)?)
            })
            .collect()
    }

    fn common(&self, forward: usize, backward: usize, max: usize) -> Result<(Vec<u8>, u64), ClusterError> {
        if forward >= self.store.layers(Side::Forward) || backward >= self.store.layers(Side::Backward) {
            return Err(ClusterError::InvalidArgument(format!(
                "forward layer {forward} or backward layer {backward} does not exist"
            )));
        }
        let keys = common_keys(&*self.store, &self.mine, forward, backward).map_err(ClusterError::from)?;
        let bytes = if keys.len() <= max { keys_to_bytes(&keys) } else { Vec::new() };
        Ok((bytes, keys.len() as u64))
    }

    fn collect(&self, side: Side, chunk: usize) -> Result<Vec<Vec<u8>>, ClusterError> {
        let mut out = Vec::new();
        let mut cur: Vec<K> = Vec::with_capacity(chunk);
        for layer in 0..self.store.layers(side) {
            for &p in &self.mine {
                self.store.for_each_chunk(side, layer, p, &mut |c| {
                    for &k in c {
                        cur.push(k);
                        if cur.len() == chunk {
                            out.push(keys_to_bytes(&cur));
                            cur.clear();
                        }
                    }
                    Ok(())
                })?;
            }
        }
        if !cur.is_empty() {
            out.push(keys_to_bytes(&cur));
        }
        Ok(out)
    }
}

/// The exchange a worker's expand phase writes to: successors of owned partitions
/// stay in the worker's own buffers (no network); the others are sorted, coded,
/// compressed and queued to the owner's stream, waiting while the bounded queue is
/// full (backpressure reaches back into the expansion).
struct RemoteExchange<'a, K: StateKey> {
    job: &'a TypedJob<K>,
    owners: Vec<u32>,
    step: u64,
    sinks: Vec<Option<PeerSink>>,
    counters: &'a SendCounters,
    /// While rebuilding lost partitions: which partitions' successors to route
    /// (the others are already stored by their owners and are dropped).
    routed: Option<Vec<bool>>,
}

fn peer_gone(addr: &str, why: &str) -> SeamError {
    SeamError::new(ClusterError::Unavailable(format!("sending successors to {addr}: {why}")))
}

impl<K: StateKey> Exchange<K> for RemoteExchange<'_, K> {
    fn send(&self, partition: usize, mut batch: Vec<K>) -> Result<(), SeamError> {
        if self.routed.as_ref().is_some_and(|r| !r[partition]) {
            return Ok(());
        }
        let owner = self.owners[partition];
        if owner == self.job.me {
            self.counters.keys_local.fetch_add(batch.len() as u64, Ordering::Relaxed);
            return self.job.exchange.send(partition, batch);
        }
        let Some(sink) = self.sinks.get(owner as usize).and_then(|s| s.as_ref()) else {
            return Err(peer_gone(&format!("node #{owner}"), "no stream to the partition's owner"));
        };
        let (count, data) = encode_batch(&mut batch);
        let msg = KeyBatch { job_id: self.job.id, step: self.step, partition: partition as u32, count, data };
        self.counters.keys_sent.fetch_add(count as u64, Ordering::Relaxed);
        self.counters.bytes_sent.fetch_add(msg.encoded_len() as u64, Ordering::Relaxed);
        // waits while the peer's queue is full (backpressure), woken by room in
        // the queue or by the stream's task failing, whichever comes first
        sink.runtime.block_on(async {
            let failed = sink.failed_event.notified();
            tokio::pin!(failed);
            failed.as_mut().enable();
            if sink.failed.load(Ordering::SeqCst) {
                return Err(peer_gone(&sink.addr, "the stream failed"));
            }
            tokio::select! {
                sent = sink.tx.send(msg) => sent.map_err(|_| peer_gone(&sink.addr, "the stream closed")),
                _ = failed => Err(peer_gone(&sink.addr, "the stream failed")),
            }
        })
    }
    fn take(&self, partition: usize) -> Result<Vec<K>, SeamError> {
        self.job.exchange.take(partition)
    }
    fn clear(&self) {
        self.job.exchange.clear()
    }
    fn buffered_bytes(&self) -> u64 {
        self.job.exchange.buffered_bytes()
    }
    fn route_batch(&self) -> usize {
        self.job.exchange.route_batch()
    }
}
