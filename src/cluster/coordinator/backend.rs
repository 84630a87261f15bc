//! The cluster as a [`LayerBackend`] (the barrier): each `step` is a barrier the coordinator
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
use super::super::net::{rpc_err, Retry, WorkerRpc};
use super::super::proto::*;
use super::super::{side_to, ClusterError, PROTOCOL_VERSION};
use super::job::engine_error;
use super::{JobRecord, Shared, State};
use crate::engine::partition::Partitioner;
use crate::engine::search::{LayerBackend, SearchEnd, StepOutcome};
use crate::engine::{EngineError, Side};
use crate::model::key::StateKey;
use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

use super::super::{MAIN_PHASE, MOVES_PHASE};

/// Which search of a job a backend runs: the level itself ("main", its layers
/// recorded in the job log), the moves pass's search of the level
/// ([`MOVES_PHASE`], not logged) or one side of a k-game of the k-PG tables.
#[derive(Clone)]
pub struct Phase {
    pub name: String,
    /// Boxes of a k-game; 0 for the level.
    pub boxes: u32,
    /// The k-PG tables the search checks, as a .kdb database (empty: none).
    pub tables: Arc<Vec<u8>>,
    /// The bounded search's limit `U` and whether its bound adds the pair
    /// penalties; `None`: unbounded.
    pub bound: Option<(u32, bool)>,
    /// Whether the forward search uses the PI-corral restriction, as the
    /// driver's problem does (never in a k-game).
    pub pi_corrals: bool,
}

impl Phase {
    pub fn main(tables: Arc<Vec<u8>>, bound: Option<(u32, bool)>, pi_corrals: bool) -> Phase {
        Phase { name: MAIN_PHASE.into(), boxes: 0, tables, bound, pi_corrals }
    }
    /// The moves pass's search of the level (the driver's problem has no
    /// PI-corrals there).
    pub fn moves(tables: Arc<Vec<u8>>, bound: Option<(u32, bool)>, pi_corrals: bool) -> Phase {
        Phase { name: MOVES_PHASE.into(), boxes: 0, tables, bound, pi_corrals }
    }
    pub(super) fn is_main(&self) -> bool {
        self.name == MAIN_PHASE
    }
}

/// The wait after a worker fault before the job tries again, doubling with
/// each fault in a row up to [`FAULT_BACKOFF_MAX`]; a change (a worker lost,
/// joined or back) ends the wait at once.
const FAULT_BACKOFF: Duration = Duration::from_millis(200);
const FAULT_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The cluster behind the engine's [`LayerBackend`] seam.
pub struct ClusterBackend<'a, K: StateKey> {
    pub(super) sh: Arc<Shared>,
    pub(super) phase: Phase,
    pub(super) id: u64,
    pub(super) rt: Handle,
    pub(super) stop: &'a AtomicBool,
    pub(super) partitioner: Partitioner,
    pub(super) nodes: Vec<String>,
    pub(super) owners: Vec<u32>,
    /// Current address of each node.
    pub(super) addresses: Vec<String>,
    /// The incarnation each node holds the job in (0: must be loaded).
    pub(super) loaded: Vec<u64>,
    /// Sizes of the completed layers.
    pub(super) layers: [Vec<u64>; 2],
    pub(super) step_id: u64,
    /// A worker failed or is missing: the next load is a resume.
    pub(super) paused: bool,
    /// Worker faults in a row: how long to back off (a change cuts it short)
    /// and which are worth a log line.
    pub(super) faults: Retry,
    /// Nodes whose partitions must be rebuilt (they came back without their
    /// data, or a spare took a lost node's place): loaded empty, then filled
    /// from the others' layers ([`ClusterBackend::rebuild_lost`]).
    pub(super) rebuild: Vec<bool>,
    /// Each side's seed keys, as the search handed them over (a rebuild
    /// starts from them).
    pub(super) seeds: [Option<Vec<K>>; 2],
    pub(super) _key: PhantomData<K>,
}

/// Blocks job `id`'s thread, the job queued and saying so, until at least
/// `--min-workers` workers are alive (their ids and addresses), or the job is
/// asked to stop.
pub(super) fn wait_for_workers(
    sh: &Arc<Shared>,
    id: u64,
    stop: &AtomicBool,
    rt: &Handle,
) -> Result<BTreeMap<String, (String, u64)>, ClusterError> {
    let min = sh.cfg.min_workers.max(1);
    loop {
        let seen = sh.changes_seen();
        if stop.load(Ordering::SeqCst) {
            return Err(ClusterError::Cancelled);
        }
        let alive = sh.alive();
        if alive.len() >= min {
            return Ok(alive);
        }
        let msg = format!("waiting for workers: {} of {min} alive", alive.len());
        let _ = sh.update(id, false, |r| {
            r.state = State::Queued;
            r.message = msg;
        });
        let sh = sh.clone();
        rt.block_on(async move {
            let _ = tokio::time::timeout(Duration::from_secs(60), sh.changed_since(seen)).await;
        });
    }
}

impl<'a, K: StateKey> ClusterBackend<'a, K> {
    pub(super) fn new(
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
            faults: Retry::new(FAULT_BACKOFF, FAULT_BACKOFF_MAX),
            rebuild: Vec::new(),
            seeds: [None, None],
            _key: PhantomData,
        };
        if b.nodes.is_empty() {
            b.assign(&rec)?;
        }
        b.addresses = vec![String::new(); b.nodes.len()];
        b.loaded = vec![0; b.nodes.len()];
        b.rebuild = vec![false; b.nodes.len()];
        Ok(b)
    }

    /// Spreads the partitions over the live workers (round robin by node id)
    /// once enough of them are there.
    pub(super) fn assign(&mut self, rec: &JobRecord) -> Result<(), ClusterError> {
        let alive = wait_for_workers(&self.sh, self.id, self.stop, &self.rt)?;
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
        Ok(())
    }

    pub(super) fn set_message(&self, state: State, msg: String) {
        let _ = self.sh.update(self.id, false, |r| {
            if r.state != state || r.message != msg {
                r.state = state;
                r.message = msg;
            }
        });
    }

    pub(super) fn table(&self) -> PartitionTable {
        PartitionTable { nodes: self.nodes.clone(), addresses: self.addresses.clone(), owners: self.owners.clone() }
    }

    /// Waits until every node of the table is alive and holds the job at the
    /// last completed layer, (re)loading it where needed.
    pub(super) fn ensure_ready(&mut self) -> Result<(), ClusterError> {
        let since = Instant::now();
        loop {
            let seen = self.sh.changes_seen();
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
                if since.elapsed() >= self.sh.cfg.replace_after && self.take_spares(&missing, &alive)? {
                    continue;
                }
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
                // until a worker comes back (or another change), at most until
                // a spare may take over or the resume timeout
                let (replace, resume) = (self.sh.cfg.replace_after, self.sh.cfg.resume_timeout);
                let next = if since.elapsed() < replace { replace.min(resume) } else { resume };
                self.wait_change(seen, next.saturating_sub(since.elapsed()) + Duration::from_millis(1));
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
                if self.rebuild.iter().any(|&r| r) {
                    match self.rebuild_lost() {
                        Ok(()) => self.rebuild.iter_mut().for_each(|r| *r = false),
                        Err(e) if e.is_node_fault() => {
                            self.fault(&e, "rebuilding lost partitions failed, retrying");
                            self.abort_all();
                            self.loaded.iter_mut().for_each(|l| *l = 0);
                            self.wait_change(seen, self.faults.wait());
                        }
                        Err(e) => return Err(e),
                    }
                    continue;
                }
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
            let rebuild = self.rebuild.clone();
            let r = self.all("loading the job", |i, c| {
                // a node to rebuild starts empty
                let want = if rebuild[i] { [0, 0] } else { want };
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
                    bound_limit: self.phase.bound.map_or(0, |(u, _)| u.saturating_add(1)),
                    pair_penalties: self.phase.bound.is_some_and(|(_, pairs)| pairs),
                    pi_corrals: self.phase.pi_corrals,
                };
                let mut c = c;
                // the reply or the node's refusal, so that a node without its
                // data is told apart from the others
                async move { Ok(tonic::Response::new(c.load(req).await.map(|r| r.into_inner()))) }
            });
            let r = r.and_then(|replies| self.lost_data(replies));
            match r {
                Ok(None) => continue, // nodes without their data: load them empty
                Ok(Some(replies)) => {
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
                    self.fault(&e, "loading the job failed, retrying");
                    self.loaded.iter_mut().for_each(|l| *l = 0);
                    // a backoff that a change (the worker lost, or back) cuts short
                    self.wait_change(seen, self.faults.wait());
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Calls every node of the table at once and collects the replies in node
    /// order. Gives up early when a node of the table is lost (heartbeats) or
    /// the job is stopped.
    pub(super) fn all<T, F, Fut>(&self, what: &str, f: F) -> Result<Vec<T>, ClusterError>
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
                    // checked now, and again whenever a worker is lost, leaves
                    // or joins anew, or the job is asked to stop
                    let seen = sh.changes_seen();
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
                    sh.changed_since(seen).await;
                }
            };
            tokio::select! {
                r = collect => r,
                e = guard => Err(e),
            }
        })
    }

    /// Calls the nodes `pick` names as [`ClusterBackend::all`] does (the
    /// others are left alone, but their loss still stops the wait).
    pub(super) fn some<T, F, Fut>(&self, what: &str, pick: &[bool], f: F) -> Result<(), ClusterError>
    where
        T: Default + Send + 'static,
        F: Fn(usize, WorkerRpc) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>> + Send + 'static,
    {
        self.all(what, |i, c| {
            let call = pick[i].then(|| f(i, c));
            async move {
                match call {
                    Some(call) => call.await,
                    None => Ok(tonic::Response::new(T::default())),
                }
            }
        })?;
        Ok(())
    }

    /// Every key the workers stored on `side` in this phase, sorted (k-PG).
    pub(super) fn collect(&mut self, side: Side) -> Result<Option<Vec<u64>>, ClusterError> {
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

    pub(super) fn next_step(&mut self) -> u64 {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        self.step_id = (self.step_id + 1).max(now);
        self.step_id
    }

    /// Drops a failed step on every node that answers.
    pub(super) fn abort_all(&self) {
        // the step that failed: an abort that arrives after the job moved on
        // (past its 5 s) leaves the newer step alone
        let (id, step) = (self.id, self.step_id);
        self.rt.block_on(async {
            let mut hs = Vec::new();
            for addr in &self.addresses {
                if let Ok(mut c) = self.sh.clients.get(addr) {
                    hs.push(tokio::spawn(async move {
                        tokio::time::timeout(Duration::from_secs(5), c.abort(AbortRequest { job_id: id, step })).await
                    }));
                }
            }
            for h in hs {
                let _ = h.await;
            }
        });
    }

    /// Blocks this job's thread until the cluster changes after `seen` (a
    /// worker joins, leaves, is lost or comes back, or the job is asked to
    /// stop) or `limit` passes.
    fn wait_change(&self, seen: u64, limit: Duration) {
        let sh = self.sh.clone();
        self.rt.block_on(async move {
            let _ = tokio::time::timeout(limit, sh.changed_since(seen)).await;
        });
    }

    /// Counts a worker fault; logs it as `what` when it is news (the first
    /// in a row, another error, or a minute since the last line).
    fn fault(&mut self, e: &ClusterError, what: &str) {
        let error = e.to_string();
        if let Some(f) = self.faults.failed(&error, Instant::now()) {
            tracing::warn!(job = self.id, error, faults = f.failures, seconds = f.seconds, "{what}");
        }
    }

    /// Runs `attempt` until it succeeds, pausing through node faults.
    pub(super) fn retrying<T>(
        &mut self,
        what: &str,
        mut attempt: impl FnMut(&mut Self) -> Result<T, ClusterError>,
    ) -> Result<Option<T>, ClusterError> {
        loop {
            let seen = self.sh.changes_seen();
            match self.ensure_ready() {
                Ok(()) => {}
                Err(ClusterError::Cancelled) => return Ok(None),
                Err(e) => return Err(e),
            }
            match attempt(self) {
                Ok(v) => {
                    self.faults.succeeded(Instant::now());
                    return Ok(Some(v));
                }
                Err(ClusterError::Cancelled) => {
                    self.abort_all();
                    return Ok(None);
                }
                Err(e) if e.is_node_fault() => {
                    self.paused = true;
                    self.fault(
                        &e,
                        &format!("{what} failed on a worker; the job pauses and retries from the last completed layer"),
                    );
                    self.set_message(
                        State::Paused,
                        format!(
                            "a worker failed ({e}); resuming from the last completed layer once every worker is back"
                        ),
                    );
                    self.abort_all();
                    self.loaded.iter_mut().for_each(|l| *l = 0);
                    // a backoff that a change (the worker lost, or back) cuts short
                    self.wait_change(seen, self.faults.wait());
                }
                Err(e) => {
                    self.abort_all();
                    return Err(e);
                }
            }
        }
    }

    /// Every node expands `layer` of `side` in step `step`, routing only the
    /// `only` partitions' successors when it is not empty (a rebuild).
    pub(super) fn expand_all(
        &self,
        what: &str,
        side: Side,
        layer: usize,
        step: u64,
        only: &[u32],
    ) -> Result<Vec<ExpandReply>, ClusterError> {
        let (job_id, s) = (self.id, side_to(side));
        let exp = self.all(what, |_, mut c| {
            let only = only.to_vec();
            async move { c.expand(ExpandRequest { job_id, side: s, layer: layer as u32, step, only }).await }
        })?;
        if exp.iter().any(|e| e.cancelled) {
            if self.stop.load(Ordering::SeqCst) {
                return Err(ClusterError::Cancelled);
            }
            return Err(ClusterError::Stale("a worker dropped the expansion".into()));
        }
        Ok(exp)
    }

    /// `keys` as key bytes per node of the table, for the nodes `pick` names
    /// (the others get none).
    pub(super) fn keys_by_node(&self, keys: &[K], pick: impl Fn(usize) -> bool) -> Vec<Vec<u8>> {
        let mut per_node: Vec<Vec<K>> = vec![Vec::new(); self.nodes.len()];
        for k in keys {
            let owner = self.owners[self.partitioner.of(k)] as usize;
            if pick(owner) {
                per_node[owner].push(*k);
            }
        }
        per_node.iter().map(|v| keys_to_bytes(v)).collect()
    }

    pub(super) fn try_step(
        &mut self,
        side: Side,
        check_other: bool,
    ) -> Result<(StepOutcome<K>, u64, u64), ClusterError> {
        let step = self.next_step();
        let layer = self.layers[side.index()].len() - 1;
        let job_id = self.id;
        let s = side_to(side);
        let exp = self.expand_all("expanding", side, layer, step, &[])?;
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
            // what each worker's bound dropped, bin by bin
            excess: {
                let mut sum = [0; crate::engine::EXCESS_BINS];
                for e in &exp {
                    sum.iter_mut().zip(&e.excess).for_each(|(a, b)| *a += b);
                }
                sum
            },
        };
        Ok((out, exp.iter().map(|e| e.keys_sent).sum(), exp.iter().map(|e| e.bytes_sent).sum()))
    }
}

impl<K: StateKey> LayerBackend<K> for ClusterBackend<'_, K> {
    fn seed(&mut self, side: Side, keys: &[K]) -> Result<u64, EngineError> {
        self.seeds[side.index()] = Some(keys.to_vec());
        if !self.layers[side.index()].is_empty() {
            // resumed from the job log: the side's layers are on the workers
            return Ok(self.layers[side.index()].iter().sum());
        }
        if !self.phase.is_main() {
            self.set_message(State::Running, format!("building k-PG tables: {} layer 0", self.phase.name));
        }
        let bytes = self.keys_by_node(keys, |_| true);
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
        r.map_err(engine_error)?;
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
            let layer = self.layers[side.index()].len() - 1;
            let msg = if self.phase.name == MOVES_PHASE {
                format!("the moves pass's search: {} layer {layer}", side.name())
            } else {
                format!("building k-PG tables: {} layer {layer}", self.phase.name)
            };
            self.set_message(State::Running, msg);
            let _ = self.sh.update(self.id, false, |r| {
                r.keys_exchanged += keys;
                r.bytes_exchanged += bytes;
            });
            if self.phase.name == MOVES_PHASE && !self.sh.cfg.moves_delay.is_zero() {
                std::thread::sleep(self.sh.cfg.moves_delay);
            }
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
            if r.state == State::Running {
                // the k-games' progress note is over once the level's search runs
                r.message.clear();
            }
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
        r.map_err(engine_error)?;
        if !self.sh.cfg.layer_delay.is_zero() {
            std::thread::sleep(self.sh.cfg.layer_delay);
        }
        Ok(Some(out))
    }

    fn first_in_layer(&mut self, side: Side, layer: usize, keys: &[K]) -> Result<Option<usize>, EngineError> {
        Ok(self.lookup(side, layer, keys)?.iter().position(|&f| f))
    }

    fn in_layer(&mut self, side: Side, layer: usize, keys: &[K]) -> Result<Vec<bool>, EngineError> {
        self.lookup(side, layer, keys)
    }

    fn common(&mut self, forward: usize, backward: usize) -> Result<Result<Vec<K>, u64>, EngineError> {
        self.common_keys(forward, backward)
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
