//! The cluster as a [`LayerBackend`]: each `step` is a barrier the coordinator
//! drives (every worker expands, streaming successors to their owners → every
//! worker merges and reports its new layer's size and meeting → every worker seals
//! and checkpoints), so the engine's own `bidirectional` loop runs unchanged over
//! the cluster. A worker lost mid-step pauses the job: the step is dropped
//! everywhere, and once the worker (or one with its data dir) is back, every worker
//! reloads the last completed layer and the step runs again. The job log records a
//! layer only after every worker has checkpointed it.
//!
//! The search loop is synchronous; this runs on a blocking thread and calls the
//! workers through the runtime [`Handle`].

use super::super::codec::keys_from_bytes;
use super::super::codec::keys_to_bytes;
use super::super::net::{rpc_err, WorkerRpc};
use super::super::proto::*;
use super::super::{side_to, ClusterError, PROTOCOL_VERSION};
use super::{JobRecord, Kind, Shared, State};
use crate::engine::driver::{solve, Deployment, Observers, SolveSpec, TableSource};
use crate::engine::kpg::{build_tables_with, DeadlockTables, KStats, KpgProgress, MAX_K};
use crate::engine::partition::Partitioner;
use crate::engine::report::SolveReport;
use crate::engine::search::{exhaust, LayerBackend, LayerEvent, Limits, NoProgress, Progress, SearchEnd, StepOutcome};
use crate::engine::{EngineError, Problem, Side};
use crate::model::board::Board;
use crate::model::key::{KeyWidth, StateKey};
use crate::model::level::parse_one;
use crate::model::rules::Pruning;
use crate::storage::kdb;
use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

/// Converts a report to its protocol form.
pub fn report_to_proto(r: &SolveReport) -> SolveResult {
    SolveResult {
        status: r.status.name().into(),
        pushes: r.pushes.map(|v| v as u64),
        moves: r.moves.map(|v| v as u64),
        solution: r.solution.clone(),
        states: r.states,
        generated: r.generated,
        seconds: r.seconds,
        forward_layers: r.forward_layers as u32,
        backward_layers: r.backward_layers as u32,
        peak_memory_bytes: r.peak_memory_bytes,
        key_width: match r.key_width {
            KeyWidth::U64 => "u64",
            KeyWidth::U128 => "u128",
            KeyWidth::Bits256 => "bits256",
            KeyWidth::Bits1024 => "bits1024",
        }
        .into(),
        reason: r.reason.clone(),
        kpg_seconds: r.kpg_seconds,
        store_bytes: r.store_bytes,
        disk_bytes: r.disk_bytes,
    }
}

/// Runs job `id` to its end (or until the coordinator stops), recording the
/// outcome in the job table and log. The solve itself is the one driver's
/// ([`crate::engine::driver::solve`]) on a [`ClusterDeployment`].
pub fn run_job(sh: &Arc<Shared>, id: u64, rt: &Handle) {
    let Some(rec) = sh.record(id) else { return };
    let Some((stop, cancelled)) = sh.stop_flags(id) else { return };
    let fail = |msg: String| {
        tracing::warn!(job = id, error = %msg, "job failed");
        let _ = sh.update(id, true, |r| {
            r.state = State::Failed;
            r.message = msg;
        });
    };
    let board = match parse_one(&rec.level_text, "job").and_then(|l| Board::new(&l)) {
        Ok(b) => Arc::new(b),
        Err(e) => return fail(format!("bad level: {e}")),
    };
    sh.set_running(id, true);
    let mut deployment = ClusterDeployment { sh: sh.clone(), id, rt: rt.clone(), stop: &stop, tables_reused: None };
    if rec.kind == Kind::Deadlocks {
        let max_k = (rec.options.kpg as usize).min(MAX_K);
        let built = deployment.build_tables(&board, max_k, &stop, &NoProgress);
        sh.set_running(id, false);
        let (state, msg) = match (cancelled.load(Ordering::SeqCst), built) {
            (true, _) => (State::Cancelled, "cancelled".to_string()),
            (false, Err(e)) => return (fail(cluster_error(e).to_string()), unload_all(sh, id, rt)).1,
            (false, Ok(None)) => (State::Failed, "stopped by its timeout before the tables were complete".to_string()),
            (false, Ok(Some(_))) => (State::Finished, format!("k-PG tables built for k = 1..{}", rec.options.kpg)),
        };
        let _ = sh.update(id, true, |r| {
            r.state = state;
            r.message = msg;
        });
        return unload_all(sh, id, rt);
    }
    let spec = SolveSpec {
        pruning: Pruning { dead_squares: true, freeze: !rec.options.no_freeze, pi_corrals: !rec.options.no_pi_corrals },
        tables: TableSource::Build(rec.options.kpg as usize),
        max_states: (rec.options.max_states > 0).then_some(rec.options.max_states),
        // the deadline counts the time already run before a coordinator restart
        deadline: (rec.options.timeout > 0.0)
            .then(|| Instant::now() + Duration::from_secs_f64((rec.options.timeout - rec.seconds).max(0.0))),
    };
    let progress = JobProgress { id };
    let out = solve(&mut deployment, board, &spec, &stop, &Observers { tables: &NoProgress, search: &progress });
    sh.set_running(id, false);
    let user_cancel = cancelled.load(Ordering::SeqCst);
    match out {
        Ok(report) => {
            let state = if user_cancel { State::Cancelled } else { State::Finished };
            tracing::info!(
                job = id,
                status = report.status.name(),
                pushes = report.pushes,
                states = report.states,
                "job done"
            );
            let _ = sh.update(id, true, |r| {
                r.state = state;
                r.message = if user_cancel { "cancelled".into() } else { String::new() };
                r.result = Some(report.clone());
            });
        }
        Err(_) if user_cancel => {
            let _ = sh.update(id, true, |r| {
                r.state = State::Cancelled;
                r.message = "cancelled".into();
            });
        }
        Err(e) => fail(cluster_error(e).to_string()),
    }
    unload_all(sh, id, rt);
}

/// The cluster error behind an engine error: a backend's own error comes back
/// out of the box it crossed the engine in.
pub fn cluster_error(e: EngineError) -> ClusterError {
    ClusterError::from(e)
}

/// A cluster error handed to the engine: a cancel is the engine's own kind,
/// anything else travels boxed.
fn engine_error(e: ClusterError) -> EngineError {
    match e {
        ClusterError::Cancelled => EngineError::Cancelled,
        other => EngineError::seam(other),
    }
}

/// The cluster as a [`Deployment`] of the one solve driver: k-games and the
/// level's search run over the job's workers.
struct ClusterDeployment<'a> {
    sh: Arc<Shared>,
    id: u64,
    rt: Handle,
    stop: &'a AtomicBool,
    /// Set when the tables came from the data dir (a coordinator restart):
    /// their build time as first recorded.
    tables_reused: Option<f64>,
}

impl Deployment for ClusterDeployment<'_> {
    fn build_tables(
        &mut self,
        board: &Arc<Board>,
        max_k: usize,
        _cancel: &AtomicBool,
        _progress: &dyn KpgProgress,
    ) -> Result<Option<(DeadlockTables, Vec<KStats>)>, EngineError> {
        let Some((bytes, secs, reused)) =
            tables_for(&self.sh, self.id, &self.rt, board, max_k, self.stop).map_err(engine_error)?
        else {
            return Ok(None);
        };
        if reused {
            self.tables_reused = Some(secs);
        }
        let file = kdb::decode(&tables_path(&self.sh, self.id), &bytes)?;
        Ok(Some((DeadlockTables::new(board.clone(), file.tables), Vec::new())))
    }

    fn search<K: StateKey>(
        &mut self,
        problem: &Problem<K>,
        tables: Option<&Arc<DeadlockTables>>,
        _cancel: &AtomicBool,
        search: &mut dyn FnMut(&mut dyn LayerBackend<K>) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        let rec =
            self.sh.record(self.id).ok_or_else(|| engine_error(ClusterError::NotFound(format!("job {}", self.id))))?;
        let bytes = tables.map(|t| kdb::encode(t, &rec.level_text)).unwrap_or_default();
        let phase = Phase::main(Arc::new(bytes));
        let mut backend =
            ClusterBackend::<K>::new(self.sh.clone(), self.id, self.rt.clone(), self.stop, phase, &problem.space)
                .map_err(engine_error)?;
        search(&mut backend)
    }

    fn finish_report(&mut self, report: &mut SolveReport) {
        // the job log's counts span coordinator restarts
        let Some(rec) = self.sh.record(self.id) else { return };
        report.states = rec.stored;
        report.generated = rec.generated;
        report.forward_layers = rec.layers[0].len();
        report.backward_layers = rec.layers[1].len();
        report.peak_memory_bytes = rec.peak_memory_bytes;
        report.store_bytes = rec.memory_bytes;
        report.disk_bytes = rec.disk_bytes;
        report.seconds = report.seconds.max(rec.seconds);
        if let Some(secs) = self.tables_reused {
            report.kpg_seconds = secs;
        }
    }
}

/// Tells every worker of a finished job to drop it and its checkpoint.
fn unload_all(sh: &Arc<Shared>, id: u64, rt: &Handle) {
    let Some(rec) = sh.record(id) else { return };
    for node in &rec.nodes {
        if let Some(addr) = sh.address_of(node) {
            if let Ok(mut c) = sh.clients.get(&addr) {
                let _ = rt.block_on(async {
                    tokio::time::timeout(Duration::from_secs(10), c.unload(UnloadRequest { job_id: id })).await
                });
            }
        }
    }
}

/// Where a job's k-PG database lives in the coordinator's data dir.
pub fn tables_path(sh: &Shared, id: u64) -> std::path::PathBuf {
    sh.cfg.data_dir.join("tables").join(format!("{id}.kdb"))
}

/// What building each k cost, kept next to the database.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct KStatRecord {
    pub k: usize,
    pub forward_states: u64,
    pub backward_states: u64,
    pub forward_patterns: usize,
    pub backward_patterns: usize,
    pub seconds: f64,
}

const STATS_MAGIC: &[u8; 8] = b"SKKSTATS";

/// Reads the k-PG statistics of job `id`, if its tables were built.
pub fn read_kpg_stats(sh: &Shared, id: u64) -> Result<Option<Vec<KStatRecord>>, ClusterError> {
    super::super::persist::read(&tables_path(sh, id).with_extension("stats"), STATS_MAGIC, 1)
}

/// The job's k-PG tables as a .kdb database: the saved one after a coordinator
/// restart, or built now by playing every k-game on the cluster (the same
/// `exhaust` loop, over the workers). `None` when stopped part way.
fn tables_for(
    sh: &Arc<Shared>,
    id: u64,
    rt: &Handle,
    board: &Arc<Board>,
    max_k: usize,
    stop: &AtomicBool,
) -> Result<Option<(Vec<u8>, f64, bool)>, ClusterError> {
    let rec = sh.record(id).ok_or_else(|| ClusterError::NotFound(format!("job {id}")))?;
    let path = tables_path(sh, id);
    if let Ok(bytes) = std::fs::read(&path) {
        if let Ok(f) = kdb::decode(&path, &bytes) {
            if f.fingerprint == board.fingerprint() {
                tracing::info!(job = id, "k-pg tables reused from the data dir");
                return Ok(Some((bytes, rec.kpg_seconds, true)));
            }
        }
    }
    let started = Instant::now();
    let max_k = max_k.min(MAX_K);
    let mut explore = |problem: &Problem<u64>, tables: &DeadlockTables, side: Side, seeds: &[u64]| {
        let k = problem.space.boxes;
        let bytes = if tables.tables.is_empty() { Vec::new() } else { kdb::encode(tables, &rec.level_text) };
        let phase = Phase { name: format!("k{k}-{}", side.name()), boxes: k as u32, tables: Arc::new(bytes) };
        tracing::info!(job = id, k, side = side.name(), "k-game on the cluster");
        let mut b = ClusterBackend::<u64>::new(sh.clone(), id, rt.clone(), stop, phase, &problem.space)
            .map_err(engine_error)?;
        let limits = Limits { cancel: stop, max_states: None };
        let end = exhaust(&mut b, side, seeds, &limits, &NoProgress)?.0;
        if matches!(end, SearchEnd::Cancelled) {
            return Ok(None);
        }
        b.collect(side).map_err(engine_error)
    };
    let (tables, stats) = build_tables_with(board.clone(), max_k, &NoProgress, &mut explore).map_err(cluster_error)?;
    if stop.load(Ordering::SeqCst) {
        return Ok(None);
    }
    let secs = started.elapsed().as_secs_f64();
    let bytes = kdb::encode(&tables, &rec.level_text);
    let dir = path.parent().expect("tables dir");
    std::fs::create_dir_all(dir).map_err(|e| ClusterError::io(format!("creating {}", dir.display()), e))?;
    let records: Vec<KStatRecord> = stats
        .iter()
        .map(|s| KStatRecord {
            k: s.k,
            forward_states: s.forward_states,
            backward_states: s.backward_states,
            forward_patterns: s.forward_patterns,
            backward_patterns: s.backward_patterns,
            seconds: s.seconds,
        })
        .collect();
    super::super::persist::write(&path.with_extension("stats"), STATS_MAGIC, 1, &records)?;
    let tmp = path.with_extension("kdb.tmp");
    std::fs::write(&tmp, &bytes).map_err(|e| ClusterError::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, &path).map_err(|e| ClusterError::io(format!("writing {}", path.display()), e))?;
    sh.update(id, true, |r| r.kpg_seconds = secs)?;
    tracing::info!(job = id, k = max_k, bytes = bytes.len(), seconds = secs, "k-pg tables built on the cluster");
    Ok(Some((bytes, secs, false)))
}

/// Progress of the search loop: structured logs (watchers read the job record,
/// which the backend updates at every layer).
struct JobProgress {
    id: u64,
}

impl Progress for JobProgress {
    fn layer_done(&self, e: &LayerEvent) {
        tracing::info!(
            job = self.id,
            side = e.side.name(),
            layer = e.layer,
            new = e.new_states,
            stored = e.stored,
            seconds = e.seconds,
            "layer done"
        );
    }
}

/// Which search of a job a backend runs: the level itself ("main", its layers
/// recorded in the job log) or one side of a k-game of the k-PG tables.
#[derive(Clone)]
pub struct Phase {
    pub name: String,
    /// Boxes of a k-game; 0 for the level.
    pub boxes: u32,
    /// The k-PG tables the search checks, as a .kdb database (empty: none).
    pub tables: Arc<Vec<u8>>,
}

impl Phase {
    pub fn main(tables: Arc<Vec<u8>>) -> Phase {
        Phase { name: "main".into(), boxes: 0, tables }
    }
    fn is_main(&self) -> bool {
        self.name == "main"
    }
}

/// The cluster behind the engine's [`LayerBackend`] seam.
pub struct ClusterBackend<'a, K: StateKey> {
    sh: Arc<Shared>,
    phase: Phase,
    id: u64,
    rt: Handle,
    stop: &'a AtomicBool,
    partitioner: Partitioner,
    nodes: Vec<String>,
    owners: Vec<u32>,
    /// Current address of each node.
    addresses: Vec<String>,
    /// The incarnation each node holds the job in (0: must be loaded).
    loaded: Vec<u64>,
    /// Sizes of the completed layers.
    layers: [Vec<u64>; 2],
    step_id: u64,
    /// A worker failed or is missing: the next load is a resume.
    paused: bool,
    _key: PhantomData<K>,
}

impl<'a, K: StateKey> ClusterBackend<'a, K> {
    fn new(
        sh: Arc<Shared>,
        id: u64,
        rt: Handle,
        stop: &'a AtomicBool,
        phase: Phase,
        space: &crate::model::key::KeySpace,
    ) -> Result<Self, ClusterError> {
        let rec = sh.record(id).ok_or_else(|| ClusterError::NotFound(format!("job {id}")))?;
        // the workers derive the same partitioner from the same key space
        let partitioner = Partitioner::for_space(rec.options.partitions as usize, space);
        let layers = if phase.is_main() { rec.layers.clone() } else { [Vec::new(), Vec::new()] };
        let mut b = ClusterBackend {
            sh,
            phase,
            id,
            rt,
            stop,
            partitioner,
            nodes: rec.nodes.clone(),
            owners: rec.owners.clone(),
            addresses: Vec::new(),
            loaded: Vec::new(),
            layers,
            step_id: 0,
            paused: false,
            _key: PhantomData,
        };
        if b.nodes.is_empty() {
            b.assign(&rec)?;
        }
        b.addresses = vec![String::new(); b.nodes.len()];
        b.loaded = vec![0; b.nodes.len()];
        Ok(b)
    }

    /// Spreads the partitions over the live workers (round robin by node id)
    /// once enough of them are there.
    fn assign(&mut self, rec: &JobRecord) -> Result<(), ClusterError> {
        let min = self.sh.cfg.min_workers.max(1);
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Err(ClusterError::Cancelled);
            }
            let alive = self.sh.alive();
            if alive.len() >= min {
                self.nodes = alive.keys().cloned().collect();
                let n = self.nodes.len() as u32;
                self.owners = (0..rec.options.partitions).map(|p| p % n).collect();
                let (nodes, owners) = (self.nodes.clone(), self.owners.clone());
                self.sh.update(self.id, true, |r| {
                    r.nodes = nodes;
                    r.owners = owners;
                    r.state = State::Running;
                    r.message.clear();
                })?;
                tracing::info!(job = self.id, workers = n, partitions = rec.options.partitions, "partitions assigned");
                return Ok(());
            }
            self.set_message(State::Queued, format!("waiting for workers: {} of {min} alive", alive.len()));
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn set_message(&self, state: State, msg: String) {
        let _ = self.sh.update(self.id, false, |r| {
            if r.state != state || r.message != msg {
                r.state = state;
                r.message = msg;
            }
        });
    }

    fn table(&self) -> PartitionTable {
        PartitionTable { nodes: self.nodes.clone(), addresses: self.addresses.clone(), owners: self.owners.clone() }
    }

    /// Waits until every node of the table is alive and holds the job at the
    /// last completed layer, (re)loading it where needed.
    fn ensure_ready(&mut self) -> Result<(), ClusterError> {
        let since = Instant::now();
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Err(ClusterError::Cancelled);
            }
            let alive = self.sh.alive();
            let missing: Vec<usize> = (0..self.nodes.len()).filter(|&i| !alive.contains_key(&self.nodes[i])).collect();
            if !missing.is_empty() {
                let who: Vec<String> = missing
                    .iter()
                    .map(|&i| format!("{} ({})", self.nodes[i], self.sh.address_of(&self.nodes[i]).unwrap_or_default()))
                    .collect();
                if since.elapsed() > self.sh.cfg.resume_timeout {
                    return Err(ClusterError::Unavailable(format!(
                        "worker {} did not come back with its data within {} s; the job cannot resume",
                        who.join(", "),
                        self.sh.cfg.resume_timeout.as_secs()
                    )));
                }
                if !self.paused {
                    tracing::warn!(job = self.id, missing = %who.join(", "), "job paused: waiting for workers");
                    self.paused = true;
                }
                self.set_message(State::Paused, format!("waiting for lost worker {} to come back", who.join(", ")));
                self.loaded.iter_mut().for_each(|l| *l = 0);
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            let mut changed = false;
            for (i, node) in self.nodes.iter().enumerate() {
                let (addr, inc) = &alive[node];
                if self.loaded[i] != *inc || self.addresses[i] != *addr {
                    changed = true;
                    self.loaded[i] = 0;
                    self.addresses[i] = addr.clone();
                }
            }
            if !changed && self.loaded.iter().all(|&l| l != 0) {
                if self.sh.record(self.id).is_some_and(|r| r.state != State::Running) {
                    self.set_message(State::Running, String::new());
                }
                return Ok(());
            }
            // (re)load everywhere: the nodes that kept the job drop any partial step
            // and learn the new addresses; restarted ones restore their checkpoint
            let rec = self.sh.record(self.id).ok_or_else(|| ClusterError::NotFound(format!("job {}", self.id)))?;
            let want = [self.layers[0].len() as u32, self.layers[1].len() as u32];
            let table = self.table();
            let incs: Vec<u64> = self.nodes.iter().map(|n| alive[n].1).collect();
            let r = self.all("loading the job", |_, c| {
                let req = LoadRequest {
                    protocol_version: PROTOCOL_VERSION,
                    job_id: rec.id,
                    level_text: rec.level_text.clone(),
                    options: Some(JobOptions::from(&rec.options)),
                    table: Some(table.clone()),
                    forward_layers: want[0],
                    backward_layers: want[1],
                    boxes: self.phase.boxes,
                    kpg_tables: self.phase.tables.to_vec(),
                    phase: self.phase.name.clone(),
                };
                let mut c = c;
                async move { c.load(req).await }
            });
            match r {
                Ok(replies) => {
                    if let Some(bad) = replies.iter().find(|r| r.limbs != K::LIMBS as u32) {
                        return Err(ClusterError::Internal(format!(
                            "a worker uses {}-limb keys, the coordinator {}",
                            bad.limbs,
                            K::LIMBS
                        )));
                    }
                    self.loaded = incs;
                    if std::mem::take(&mut self.paused) {
                        tracing::info!(
                            job = self.id,
                            forward = want[0],
                            backward = want[1],
                            "job resumes from the last completed layer"
                        );
                    }
                }
                Err(e) if e.is_node_fault() => {
                    tracing::warn!(job = self.id, error = %e, "loading the job failed, retrying");
                    self.loaded.iter_mut().for_each(|l| *l = 0);
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Calls every node of the table at once and collects the replies in node
    /// order. Gives up early when a node of the table is lost (heartbeats) or
    /// the job is stopped.
    fn all<T, F, Fut>(&self, what: &str, f: F) -> Result<Vec<T>, ClusterError>
    where
        T: Send + 'static,
        F: Fn(usize, WorkerRpc) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>> + Send + 'static,
    {
        let mut calls = Vec::new();
        for (i, addr) in self.addresses.iter().enumerate() {
            let c = self.sh.clients.get(addr)?;
            calls.push((addr.clone(), f(i, c)));
        }
        let sh = self.sh.clone();
        let nodes = self.nodes.clone();
        let incs = self.loaded.clone();
        let stop = self.stop;
        let what = what.to_string();
        self.rt.block_on(async move {
            let handles: Vec<_> = calls.into_iter().map(|(a, fut)| (a, tokio::spawn(fut))).collect();
            let collect = async {
                let mut out = Vec::new();
                for (addr, h) in handles {
                    match h.await {
                        Ok(Ok(r)) => out.push(r.into_inner()),
                        Ok(Err(s)) => return Err(rpc_err(&what, &addr, s)),
                        Err(e) => return Err(ClusterError::Internal(format!("{what}: {e}"))),
                    }
                }
                Ok(out)
            };
            let guard = async {
                loop {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    if stop.load(Ordering::SeqCst) {
                        return ClusterError::Cancelled;
                    }
                    let alive = sh.alive();
                    for (i, n) in nodes.iter().enumerate() {
                        match alive.get(n) {
                            None => return ClusterError::Unavailable(format!("worker {n} lost (no heartbeat)")),
                            Some((_, inc)) if incs[i] != 0 && *inc != incs[i] => {
                                return ClusterError::Unavailable(format!("worker {n} restarted"))
                            }
                            _ => {}
                        }
                    }
                }
            };
            tokio::select! {
                r = collect => r,
                e = guard => Err(e),
            }
        })
    }

    /// Every key the workers stored on `side` in this phase, sorted (k-PG).
    fn collect(&mut self, side: Side) -> Result<Option<Vec<u64>>, ClusterError> {
        let job_id = self.id;
        let s = side_to(side);
        self.retrying("collecting k-game states", |b| {
            let mut all: Vec<u64> = Vec::new();
            for addr in b.addresses.clone() {
                let mut c = b.sh.clients.get(&addr)?;
                let part = b.rt.block_on(async {
                    let mut stream = c
                        .kpg_collect(KpgCollectRequest { job_id, side: s })
                        .await
                        .map_err(|st| rpc_err("collecting k-game states", &addr, st))?
                        .into_inner();
                    let mut keys = Vec::new();
                    while let Some(m) =
                        stream.message().await.map_err(|st| rpc_err("collecting k-game states", &addr, st))?
                    {
                        keys.extend(keys_from_bytes::<u64>(&m.keys)?);
                    }
                    Ok::<_, ClusterError>(keys)
                })?;
                all.extend(part);
            }
            all.sort_unstable();
            Ok(all)
        })
    }

    fn next_step(&mut self) -> u64 {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        self.step_id = (self.step_id + 1).max(now);
        self.step_id
    }

    /// Drops a failed step on every node that answers.
    fn abort_all(&self) {
        let id = self.id;
        self.rt.block_on(async {
            let mut hs = Vec::new();
            for addr in &self.addresses {
                if let Ok(mut c) = self.sh.clients.get(addr) {
                    hs.push(tokio::spawn(async move {
                        tokio::time::timeout(Duration::from_secs(5), c.abort(AbortRequest { job_id: id })).await
                    }));
                }
            }
            for h in hs {
                let _ = h.await;
            }
        });
    }

    /// Runs `attempt` until it succeeds, pausing through node faults.
    fn retrying<T>(
        &mut self,
        what: &str,
        mut attempt: impl FnMut(&mut Self) -> Result<T, ClusterError>,
    ) -> Result<Option<T>, ClusterError> {
        loop {
            match self.ensure_ready() {
                Ok(()) => {}
                Err(ClusterError::Cancelled) => return Ok(None),
                Err(e) => return Err(e),
            }
            match attempt(self) {
                Ok(v) => return Ok(Some(v)),
                Err(ClusterError::Cancelled) => {
                    self.abort_all();
                    return Ok(None);
                }
                Err(e) if e.is_node_fault() => {
                    self.paused = true;
                    tracing::warn!(job = self.id, error = %e, "{what} failed on a worker; the job pauses and retries from the last completed layer");
                    self.set_message(
                        State::Paused,
                        format!(
                            "a worker failed ({e}); resuming from the last completed layer once every worker is back"
                        ),
                    );
                    self.abort_all();
                    self.loaded.iter_mut().for_each(|l| *l = 0);
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => {
                    self.abort_all();
                    return Err(e);
                }
            }
        }
    }

    fn try_step(&mut self, side: Side, check_other: bool) -> Result<(StepOutcome<K>, u64, u64), ClusterError> {
        let step = self.next_step();
        let layer = self.layers[side.index()].len() - 1;
        let job_id = self.id;
        let s = side_to(side);
        let exp = self.all("expanding", |_, mut c| async move {
            c.expand(ExpandRequest { job_id, side: s, layer: layer as u32, step }).await
        })?;
        if exp.iter().any(|e| e.cancelled) {
            if self.stop.load(Ordering::SeqCst) {
                return Err(ClusterError::Cancelled);
            }
            return Err(ClusterError::Stale("a worker dropped the expansion".into()));
        }
        let merged = self.all("merging", |_, mut c| async move {
            c.merge(MergeRequest { job_id, side: s, step, check_other }).await
        })?;
        if self.stop.load(Ordering::SeqCst) {
            return Err(ClusterError::Cancelled);
        }
        let mut meeting: Option<(K, usize)> = None;
        for m in merged.iter().filter(|m| m.met) {
            let k = keys_from_bytes::<K>(&m.meeting_key)?;
            let &[k] = k.as_slice() else {
                return Err(ClusterError::Internal("a worker reported a meeting without exactly one key".into()));
            };
            if meeting.is_none_or(|(cur, _)| k < cur) {
                meeting = Some((k, m.meeting_layer as usize));
            }
        }
        let sealed = self.all("sealing", |_, mut c| async move {
            c.seal(SealRequest { job_id, side: s, step, layer: (layer + 1) as u32 }).await
        })?;
        let new_states: u64 = merged.iter().map(|m| m.new_states).sum();
        let out = StepOutcome {
            new_states,
            generated: exp.iter().map(|e| e.generated).sum(),
            expanded: exp.iter().map(|e| e.expanded).sum(),
            meeting,
            memory_bytes: sealed.iter().map(|s| s.memory_bytes).sum(),
            disk_bytes: sealed.iter().map(|s| s.disk_bytes).sum(),
            peak_memory_bytes: merged.iter().map(|m| m.peak_memory_bytes).sum(),
        };
        Ok((out, exp.iter().map(|e| e.keys_sent).sum(), exp.iter().map(|e| e.bytes_sent).sum()))
    }
}

impl<K: StateKey> LayerBackend<K> for ClusterBackend<'_, K> {
    fn seed(&mut self, side: Side, keys: &[K]) -> Result<u64, EngineError> {
        if !self.layers[side.index()].is_empty() {
            // resumed from the job log: the side's layers are on the workers
            return Ok(self.layers[side.index()].iter().sum());
        }
        if !self.phase.is_main() {
            self.set_message(State::Running, format!("building k-PG tables: {} layer 0", self.phase.name));
        }
        let mut per_node: Vec<Vec<K>> = vec![Vec::new(); self.nodes.len()];
        for k in keys {
            per_node[self.owners[self.partitioner.of(k)] as usize].push(*k);
        }
        let bytes: Vec<Vec<u8>> = per_node.iter().map(|v| keys_to_bytes(v)).collect();
        let job_id = self.id;
        let s = side_to(side);
        let r = self.retrying("seeding", |b| {
            let replies = b.all("seeding", |i, mut c| {
                let keys = bytes[i].clone();
                async move { c.seed(SeedRequest { job_id, side: s, keys }).await }
            })?;
            Ok(replies.iter().map(|r| r.states).sum::<u64>())
        });
        let n = match r {
            Ok(Some(n)) => n,
            Ok(None) => return Err(EngineError::Cancelled),
            Err(e) => return Err(engine_error(e)),
        };
        self.layers[side.index()].push(n);
        if !self.phase.is_main() {
            return Ok(n);
        }
        let layers = self.layers.clone();
        let r = self.sh.update(self.id, true, |r| {
            r.layers = layers;
            r.stored += n;
            r.last_side = side;
        });
        r.map_err(|e| engine_error(e))?;
        Ok(n)
    }

    fn layers(&self, side: Side) -> usize {
        self.layers[side.index()].len()
    }

    fn frontier(&self, side: Side) -> Result<u64, EngineError> {
        Ok(self.layers[side.index()].last().copied().unwrap_or(0))
    }

    fn step(&mut self, side: Side, check_other: bool) -> Result<Option<StepOutcome<K>>, EngineError> {
        let r = self.retrying("a layer step", |b| b.try_step(side, check_other));
        let (out, keys, bytes) = match r {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(None),
            Err(e) => return Err(engine_error(e)),
        };
        self.layers[side.index()].push(out.new_states);
        if !self.phase.is_main() {
            let msg =
                format!("building k-PG tables: {} layer {}", self.phase.name, self.layers[side.index()].len() - 1);
            self.set_message(State::Running, msg);
            let _ = self.sh.update(self.id, false, |r| {
                r.keys_exchanged += keys;
                r.bytes_exchanged += bytes;
            });
            return Ok(Some(out));
        }
        let layers = self.layers.clone();
        let (layer, other) = (self.layers[side.index()].len() - 1, self.layers[side.other().index()].len() - 1);
        let meeting = out.meeting.map(|(k, l)| {
            let (f, b) = if side == Side::Forward { (layer, l) } else { (l, layer) };
            let _ = other;
            (keys_to_bytes(&[k]), f, b)
        });
        // the commit point: every worker has checkpointed the layer
        let r = self.sh.update(self.id, true, |r| {
            r.layers = layers;
            r.stored += out.new_states;
            r.generated += out.generated;
            r.expanded += out.expanded;
            r.keys_exchanged += keys;
            r.bytes_exchanged += bytes;
            r.memory_bytes = out.memory_bytes;
            r.disk_bytes = out.disk_bytes;
            r.peak_memory_bytes = r.peak_memory_bytes.max(out.peak_memory_bytes);
            r.last_side = side;
            if meeting.is_some() {
                r.meeting = meeting;
            }
        });
        r.map_err(|e| engine_error(e))?;
        if !self.sh.cfg.layer_delay.is_zero() {
            std::thread::sleep(self.sh.cfg.layer_delay);
        }
        Ok(Some(out))
    }

    fn first_in_layer(&mut self, side: Side, layer: usize, keys: &[K]) -> Result<Option<usize>, EngineError> {
        let b = self;
        // the candidates of each owner, in order
        let mut per_node: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            per_node.entry(b.owners[b.partitioner.of(k)] as usize).or_default().push(i);
        }
        let job_id = b.id;
        let s = side_to(side);
        let r = b.retrying("a path lookup", |b| {
            let mut found: Option<usize> = None;
            for (&node, idx) in &per_node {
                let addr = b.addresses[node].clone();
                let mut c = b.sh.clients.get(&addr)?;
                let ks: Vec<K> = idx.iter().map(|&i| keys[i]).collect();
                let req = LookupRequest { job_id, side: s, layer: layer as u32, keys: keys_to_bytes(&ks) };
                let reply = b.rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), c.lookup(req)).await });
                let reply = match reply {
                    Ok(Ok(r)) => r.into_inner(),
                    Ok(Err(st)) => return Err(rpc_err("looking up keys", &addr, st)),
                    Err(_) => return Err(ClusterError::Unavailable(format!("looking up keys ({addr}): timed out"))),
                };
                if reply.found.len() != idx.len() {
                    return Err(ClusterError::Internal(format!(
                        "{addr} answered {} lookups for {}",
                        reply.found.len(),
                        idx.len()
                    )));
                }
                if let Some(j) = reply.found.iter().position(|&f| f) {
                    found = Some(found.map_or(idx[j], |cur: usize| cur.min(idx[j])));
                }
            }
            Ok(found)
        });
        match r {
            Ok(Some(f)) => Ok(f),
            Ok(None) => Err(EngineError::Cancelled),
            Err(e) => Err(engine_error(e)),
        }
    }

    fn resumed_meeting(&self) -> Option<SearchEnd<K>> {
        // the sides met before a coordinator restart: only the path is left to do
        if !self.phase.is_main() {
            return None;
        }
        let (key, forward, backward) = self.sh.record(self.id)?.meeting?;
        let key = *keys_from_bytes::<K>(&key).ok()?.first()?;
        Some(SearchEnd::Met { key, forward, backward })
    }
}
