//! One job on one worker: the problem, the partitions this worker owns (their
//! layers in a [`PartitionStore`], delivered successors in a [`LocalExchange`]),
//! the step fence, and the checkpoint of every sealed layer in the data dir
//! (shard files plus a manifest). Generic over the key type; [`WorkerJob`] is the
//! key-free face the gRPC service talks to. Every method here may compute: the
//! service calls the heavy ones through `run_cpu`.

use super::super::codec::{decode_batch, encode_batch, keys_from_bytes, keys_to_bytes};
use super::super::proto::{ExpandReply, KeyBatch, MergeReply, SealReply};
use super::super::{persist, ClusterError};
use crate::engine::kpg::DeadlockTables;
use crate::engine::layer::{expand, merge};
use crate::engine::partition::{Exchange, LocalExchange, PartitionStore, Partitioner, StoreBytes};
use crate::engine::{PatternCheck, Problem, SeamError, Side};
use crate::model::board::Board;
use crate::model::key::{BitKey, KeyWidth, StateKey};
use crate::model::level::parse_one;
use crate::model::rules::Pruning;
use crate::storage::budget::MemoryBudget;
use crate::storage::disk::{DiskOptions, DiskStore};
use crate::storage::{kdb, ShardMeta, ShardReader, ShardWriter};
use prost::Message;
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

const MANIFEST_MAGIC: &[u8; 8] = b"SKCKPT\0\0";
const MANIFEST_VERSION: u32 = 1;

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
    pub no_pi_corrals: bool,
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
    /// The worker's memory budget (`--mem`) and its expand/merge threads.
    pub mem: u64,
    pub threads: usize,
}

/// The durable record of which layers a worker holds for a job.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Manifest {
    job_id: u64,
    limbs: u32,
    partitions: u32,
    owned: Vec<u32>,
    /// `layers[side][layer]`: (partition, key count) of every owned partition.
    layers: [Vec<Vec<(u32, u64)>>; 2],
}

/// A bounded, failure-aware queue of batches to one peer's `Deliver` stream.
pub struct PeerSink {
    pub tx: mpsc::Sender<KeyBatch>,
    /// Raised by the stream's task when the RPC failed.
    pub failed: Arc<AtomicBool>,
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
    fn bytes(&self) -> StoreBytes;
    /// Enters step `step` (fencing); returns the step's cancel flag.
    fn enter(&self, step: u64) -> Result<Arc<AtomicBool>, ClusterError>;
    fn seed(&self, side: Side, keys: &[u8]) -> Result<u64, ClusterError>;
    fn expand(
        &self,
        side: Side,
        layer: usize,
        step: u64,
        cancel: &AtomicBool,
        sinks: Vec<Option<PeerSink>>,
    ) -> Result<ExpandReply, ClusterError>;
    /// Takes one delivered batch; returns its key count.
    fn deliver(&self, batch: &KeyBatch) -> Result<u64, ClusterError>;
    fn merge(&self, side: Side, step: u64, check_other: bool) -> Result<MergeReply, ClusterError>;
    fn seal(&self, side: Side, step: u64, layer: usize) -> Result<SealReply, ClusterError>;
    /// Drops the partial layer and buffered successors; stops a running expand.
    fn abort(&self);
    fn lookup(&self, side: Side, layer: usize, keys: &[u8]) -> Result<Vec<bool>, ClusterError>;
    /// Every stored key of `side` this worker holds (k-PG table work), as
    /// chunks of key bytes of at most `chunk` keys.
    fn collect(&self, side: Side, chunk: usize) -> Result<Vec<Vec<u8>>, ClusterError>;
}

/// Opens (or creates) the job described by `spec`, restoring `spec.want` layers
/// from the checkpoint.
pub fn open_job(spec: JobSpec) -> Result<Arc<dyn WorkerJob>, ClusterError> {
    let level = parse_one(&spec.level_text, "job").map_err(|e| ClusterError::InvalidArgument(e.to_string()))?;
    let board = Arc::new(Board::new(&level).map_err(|e| ClusterError::InvalidArgument(e.to_string()))?);
    let patterns: Option<Arc<dyn PatternCheck>> = if spec.kpg.is_empty() {
        None
    } else {
        let file = kdb::decode(Path::new("<job tables>"), &spec.kpg)
            .map_err(|e| ClusterError::InvalidArgument(e.to_string()))?;
        if file.fingerprint != board.fingerprint() || file.floor != board.floor_count() {
            return Err(ClusterError::InvalidArgument("the job's k-PG tables belong to another level".into()));
        }
        Some(Arc::new(DeadlockTables::new(board.clone(), file.tables)))
    };
    let pruning = Pruning { dead_squares: true, freeze: !spec.no_freeze, pi_corrals: !spec.no_pi_corrals };
    if spec.boxes != 0 && spec.boxes != board.box_count() {
        // a k-game of the k-PG tables: all prunings, u64 keys (as engine::kpg plays it)
        let problem = Problem::<u64>::with_boxes(board.clone(), spec.boxes, Pruning::ALL, patterns)
            .filter(|p| p.space.width == KeyWidth::U64 && spec.boxes < board.box_count())
            .ok_or_else(|| ClusterError::InvalidArgument(format!("no {}-box game on this level", spec.boxes)))?;
        return Ok(Arc::new(TypedJob::<u64>::open(spec, problem)?));
    }
    Ok(match board.keyspace.width {
        KeyWidth::U64 => Arc::new(TypedJob::<u64>::open(spec, Problem::full(board, pruning, patterns))?),
        KeyWidth::U128 => Arc::new(TypedJob::<u128>::open(spec, Problem::full(board, pruning, patterns))?),
        KeyWidth::Bits256 => Arc::new(TypedJob::<BitKey<4>>::open(spec, Problem::full(board, pruning, patterns))?),
        KeyWidth::Bits1024 => Arc::new(TypedJob::<BitKey<16>>::open(spec, Problem::full(board, pruning, patterns))?),
    })
}

struct StepState {
    id: u64,
    cancel: Arc<AtomicBool>,
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
    /// Where this worker's layers live: a [`DiskStore`] that keeps them in RAM
    /// within the worker's budget and spills the rest to `dir/store`. Durability
    /// is the checkpoint's job (shard files + manifest per sealed layer), so the
    /// store itself is not durable and is rebuilt from the checkpoint on resume.
    store: Box<dyn PartitionStore<K>>,
    exchange: LocalExchange<K>,
    step: Mutex<StepState>,
    dir: PathBuf,
    manifest: Mutex<Manifest>,
}

fn shard_path(dir: &Path, side: Side, layer: usize, partition: usize) -> PathBuf {
    let s = if side == Side::Forward { 'f' } else { 'b' };
    dir.join(format!("{s}-{layer:05}-p{partition:05}.shard"))
}

fn manifest_path(dir: &Path) -> PathBuf {
    dir.join("manifest")
}

impl<K: StateKey> TypedJob<K> {
    fn open(spec: JobSpec, problem: Problem<K>) -> Result<Self, ClusterError> {
        let parts = spec.table.owners.len();
        let partitioner = Partitioner::for_space(parts, &problem.space);
        let mine: Vec<usize> = (0..parts).filter(|&p| spec.table.owners[p] == spec.me).collect();
        let dir = spec.dir.clone();
        if spec.want == [0, 0] && dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| ClusterError::io(format!("clearing {}", dir.display()), e))?;
        }
        let store_dir = dir.join("store");
        if store_dir.exists() {
            std::fs::remove_dir_all(&store_dir)
                .map_err(|e| ClusterError::io(format!("clearing {}", store_dir.display()), e))?;
        }
        // the store's share of the budget, spread over the partitions held here
        // (the store divides its budget by the partition count of the whole job)
        let budget = MemoryBudget::new(spec.mem, spec.threads, K::LIMBS * 8);
        let share = match mine.len() {
            0 => 0,
            n => budget.store_bytes().saturating_mul(parts as u64) / n as u64,
        };
        let store: Box<dyn PartitionStore<K>> = Box::new(DiskStore::<K>::create(
            &store_dir,
            parts,
            DiskOptions { memory_bytes: share, ..DiskOptions::default() },
        )?);
        let manifest = if spec.want == [0, 0] {
            std::fs::create_dir_all(&dir).map_err(|e| ClusterError::io(format!("creating {}", dir.display()), e))?;
            Manifest {
                job_id: spec.job_id,
                limbs: K::LIMBS as u32,
                partitions: parts as u32,
                owned: mine.iter().map(|&p| p as u32).collect(),
                layers: [Vec::new(), Vec::new()],
            }
        } else {
            restore::<K>(&spec, &mine, &*store)?
        };
        persist::write(&manifest_path(&dir), MANIFEST_MAGIC, MANIFEST_VERSION, &manifest)?;
        // drop shards of layers past the ones kept (an interrupted step's)
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let keep = parse_shard_name(&name).is_some_and(|(side, layer, p)| {
                    layer < manifest.layers[side.index()].len() && manifest.owned.contains(&(p as u32))
                });
                if name.ends_with(".shard") && !keep || name.ends_with(".tmp") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
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
            exchange: LocalExchange::new(parts),
            step: Mutex::new(StepState { id: 0, cancel: Arc::new(AtomicBool::new(false)) }),
            dir,
            manifest: Mutex::new(manifest),
        })
    }

    fn owners(&self) -> Vec<u32> {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).owners.clone()
    }

    fn check_step(&self, step: u64) -> Result<(), ClusterError> {
        let cur = self.step.lock().unwrap_or_else(|e| e.into_inner()).id;
        if cur != step {
            return Err(ClusterError::Stale(format!("step {step} is not the current step {cur}")));
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

    /// Writes the sealed `layer` of `side` for every owned partition, then the
    /// manifest that makes it count.
    fn checkpoint(&self, side: Side, layer: usize) -> Result<(), ClusterError> {
        let counts: Vec<(u32, u64)> = self
            .mine
            .par_iter()
            .map(|&p| -> Result<(u32, u64), ClusterError> {
                if self.store.layer_len(side, layer, p) == 0 {
                    return Ok((p as u32, 0)); // an empty partition needs no file (and no fsync)
                }
                let path = shard_path(&self.dir, side, layer, p);
                let meta = ShardMeta { side: side.index() as u8, partition: p as u32, layer: layer as u32 };
                let mut w = ShardWriter::<K>::create(&path, meta)?;
                self.store.for_each_chunk(side, layer, p, &mut |chunk| {
                    for &k in chunk {
                        w.push(k)?;
                    }
                    Ok(())
                })?;
                let info = w.finish()?;
                Ok((p as u32, info.keys))
            })
            .collect::<Result<_, _>>()?;
        let mut m = self.manifest.lock().unwrap_or_else(|e| e.into_inner());
        let layers = &mut m.layers[side.index()];
        if layers.len() != layer {
            return Err(ClusterError::Internal(format!(
                "checkpoint of {} layer {layer} but the manifest holds {} layers",
                side.name(),
                layers.len()
            )));
        }
        layers.push(counts);
        persist::write(&manifest_path(&self.dir), MANIFEST_MAGIC, MANIFEST_VERSION, &*m)
    }
}

fn parse_shard_name(name: &str) -> Option<(Side, usize, usize)> {
    let stem = name.strip_suffix(".shard")?;
    let mut it = stem.split('-');
    let side = match it.next()? {
        "f" => Side::Forward,
        "b" => Side::Backward,
        _ => return None,
    };
    let layer = it.next()?.parse().ok()?;
    let p = it.next()?.strip_prefix('p')?.parse().ok()?;
    Some((side, layer, p))
}

/// Loads `spec.want` layers of the owned partitions from the checkpoint.
fn restore<K: StateKey>(
    spec: &JobSpec,
    mine: &[usize],
    store: &dyn PartitionStore<K>,
) -> Result<Manifest, ClusterError> {
    let gone = |why: String| {
        ClusterError::DataLoss(format!(
            "worker {} cannot resume job {} from {}: {why}; the data is gone",
            spec.node_id,
            spec.job_id,
            spec.dir.display()
        ))
    };
    let mut m: Manifest = persist::read(&manifest_path(&spec.dir), MANIFEST_MAGIC, MANIFEST_VERSION)?
        .ok_or_else(|| gone("no checkpoint".into()))?;
    if m.job_id != spec.job_id || m.limbs != K::LIMBS as u32 || m.partitions as usize != spec.table.owners.len() {
        return Err(gone(format!(
            "the checkpoint is of job {} ({} partitions, {}-limb keys)",
            m.job_id, m.partitions, m.limbs
        )));
    }
    for &p in mine {
        if !m.owned.contains(&(p as u32)) {
            return Err(gone(format!("partition {p} was never held here")));
        }
    }
    for side in [Side::Forward, Side::Backward] {
        let want = spec.want[side.index()];
        let have = m.layers[side.index()].len();
        if have < want {
            return Err(gone(format!("{have} {} layers are checkpointed, the job needs {want}", side.name())));
        }
        for layer in 0..want {
            let counts = &m.layers[side.index()][layer];
            let loaded: Vec<(usize, Vec<K>)> = mine
                .par_iter()
                .map(|&p| -> Result<(usize, Vec<K>), ClusterError> {
                    let expect = counts
                        .iter()
                        .find(|c| c.0 as usize == p)
                        .map(|c| c.1)
                        .ok_or_else(|| gone(format!("{} layer {layer} lacks partition {p}", side.name())))?;
                    if expect == 0 {
                        return Ok((p, Vec::new()));
                    }
                    let path = shard_path(&spec.dir, side, layer, p);
                    let r = ShardReader::<K>::open(&path).map_err(|e| gone(e.to_string()))?;
                    let meta = r.meta();
                    if meta.side as usize != side.index()
                        || meta.layer as usize != layer
                        || meta.partition as usize != p
                    {
                        return Err(gone(format!("{} is not the shard it is named after", path.display())));
                    }
                    let keys = r.read_all().map_err(|e| gone(e.to_string()))?;
                    if keys.len() as u64 != expect {
                        return Err(gone(format!(
                            "{} holds {} keys, the manifest {expect}",
                            path.display(),
                            keys.len()
                        )));
                    }
                    Ok((p, keys))
                })
                .collect::<Result<_, _>>()?;
            for (p, keys) in loaded {
                store.push_layer(side, p, keys)?;
            }
            store.seal_layer(side)?;
        }
        m.layers[side.index()].truncate(want);
    }
    m.owned = mine.iter().map(|&p| p as u32).collect();
    Ok(m)
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
        let mut b = self.store.bytes();
        b.memory += self.exchange.buffered_bytes();
        b
    }

    fn enter(&self, step: u64) -> Result<Arc<AtomicBool>, ClusterError> {
        let mut s = self.step.lock().unwrap_or_else(|e| e.into_inner());
        if step < s.id {
            return Err(ClusterError::Stale(format!("step {step} is older than the current step {}", s.id)));
        }
        if step > s.id {
            // a new step: whatever an older one left behind is void
            s.cancel.store(true, Ordering::SeqCst);
            s.id = step;
            s.cancel = Arc::new(AtomicBool::new(false));
            self.exchange.clear();
            self.store.abort_layer(Side::Forward);
            self.store.abort_layer(Side::Backward);
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
        self.store.seal_layer(side)?;
        self.checkpoint(side, 0)?;
        Ok(n)
    }

    fn expand(
        &self,
        side: Side,
        layer: usize,
        step: u64,
        cancel: &AtomicBool,
        sinks: Vec<Option<PeerSink>>,
    ) -> Result<ExpandReply, ClusterError> {
        let have = self.store.layers(side);
        if have == 0 || layer != have - 1 {
            return Err(ClusterError::FailedPrecondition(format!(
                "expand of {} layer {layer}, but this worker holds {have} layers",
                side.name()
            )));
        }
        let counters = SendCounters::default();
        let ex = RemoteExchange { job: self, owners: self.owners(), step, sinks, cancel, counters: &counters };
        let stats = expand(&self.problem, side, layer, &self.mine, self.partitioner, &*self.store, &ex, cancel)?;
        drop(ex); // closes the streams to the peers
        Ok(ExpandReply {
            expanded: stats.map_or(0, |s| s.expanded),
            generated: stats.map_or(0, |s| s.generated),
            keys_sent: counters.keys_sent.into_inner(),
            bytes_sent: counters.bytes_sent.into_inner(),
            keys_local: counters.keys_local.into_inner(),
            cancelled: stats.is_none(),
        })
    }

    fn deliver(&self, batch: &KeyBatch) -> Result<u64, ClusterError> {
        self.enter(batch.step)?;
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
        let n = keys.len() as u64;
        self.exchange.send(p, keys)?;
        Ok(n)
    }

    fn merge(&self, side: Side, step: u64, check_other: bool) -> Result<MergeReply, ClusterError> {
        self.check_step(step)?;
        let before = self.bytes().memory;
        let m = merge(side, &self.mine, &*self.store, &self.exchange, check_other)?;
        let after = self.bytes();
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
        self.store.seal_layer(side)?;
        self.checkpoint(side, layer)?;
        let b = self.bytes();
        Ok(SealReply { memory_bytes: b.memory, disk_bytes: b.disk })
    }

    fn abort(&self) {
        let s = self.step.lock().unwrap_or_else(|e| e.into_inner());
        s.cancel.store(true, Ordering::SeqCst);
        self.exchange.clear();
        self.store.abort_layer(Side::Forward);
        self.store.abort_layer(Side::Backward);
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
    cancel: &'a AtomicBool,
    counters: &'a SendCounters,
}

fn peer_gone(addr: &str, why: &str) -> SeamError {
    SeamError::new(ClusterError::Unavailable(format!("sending successors to {addr}: {why}")))
}

impl<K: StateKey> Exchange<K> for RemoteExchange<'_, K> {
    fn send(&self, partition: usize, mut batch: Vec<K>) -> Result<(), SeamError> {
        let owner = self.owners[partition];
        if owner == self.job.me {
            self.counters.keys_local.fetch_add(batch.len() as u64, Ordering::Relaxed);
            return self.job.exchange.send(partition, batch);
        }
        let Some(sink) = self.sinks.get(owner as usize).and_then(|s| s.as_ref()) else {
            return Err(peer_gone(&format!("node #{owner}"), "no stream to the partition's owner"));
        };
        let (count, data) = encode_batch(&mut batch);
        let mut msg = KeyBatch { job_id: self.job.id, step: self.step, partition: partition as u32, count, data };
        self.counters.keys_sent.fetch_add(count as u64, Ordering::Relaxed);
        self.counters.bytes_sent.fetch_add(msg.encoded_len() as u64, Ordering::Relaxed);
        let mut wait = Duration::from_micros(50);
        loop {
            match sink.tx.try_send(msg) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Closed(_)) => return Err(peer_gone(&sink.addr, "the stream closed")),
                Err(mpsc::error::TrySendError::Full(m)) => {
                    if sink.failed.load(Ordering::SeqCst) {
                        return Err(peer_gone(&sink.addr, "the stream failed"));
                    }
                    if self.cancel.load(Ordering::Relaxed) {
                        return Ok(()); // the phase is being dropped anyway
                    }
                    msg = m;
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_millis(5));
                }
            }
        }
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
}
