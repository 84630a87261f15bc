//! The client side of the coordinator API for the CLI (`submit`, `status`,
//! `cancel`, the benchmark): plain serializable views instead of prost types, and
//! a watch that outlives a coordinator restart by reconnecting.

use super::coordinator::job::{TABLES_CANCELLED, TABLES_TIME_LIMIT};
use super::net::{CoordinatorRpc, NetConfig, Retry};
use super::proto::*;
use super::{ClusterError, PROTOCOL_VERSION};
use crate::engine::driver::PlainTry as EnginePlainTry;
use crate::engine::kpg::KStats;
use crate::engine::report::{BoundIteration, IterationSearch, Objective, SolveReport, Status};
use crate::model::key::KeyWidth;
use serde::Serialize;
use std::time::{Duration, Instant};

/// A job as a client sees it.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    pub id: u64,
    pub kind: String,
    pub state: String,
    pub title: String,
    pub index: u32,
    pub side: String,
    pub layer: u32,
    pub forward_layers: u32,
    pub backward_layers: u32,
    pub frontier_forward: u64,
    pub frontier_backward: u64,
    pub stored: u64,
    pub generated: u64,
    pub seconds: f64,
    pub rate: f64,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    pub message: String,
    pub keys_exchanged: u64,
    pub bytes_exchanged: u64,
    /// The bounded search's running iteration `U` (none: the plain search).
    pub bound: Option<u32>,
    /// Set while the running iteration is a plain try between bound
    /// iterations: its state budget, and the bound searched next if it runs out.
    pub plain_try: Option<EnginePlainTry>,
    pub result: Option<SolveReport>,
    /// A queued job's place in the queue (1: runs next); the coordinator runs
    /// one job at a time, the oldest unfinished first.
    pub queue_position: Option<u32>,
}

impl JobView {
    /// Finished, failed or cancelled.
    pub fn is_terminal(&self) -> bool {
        matches!(self.state.as_str(), "finished" | "failed" | "cancelled")
    }
}

/// A worker as a client sees it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerView {
    pub node_id: String,
    pub address: String,
    pub alive: bool,
    pub memory_bytes: u64,
    pub cores: u32,
    pub data_dir: String,
    pub partitions: u32,
    pub rss_bytes: u64,
    pub peak_rss_bytes: u64,
    pub store_memory_bytes: u64,
    pub store_disk_bytes: u64,
    pub keys_sent: u64,
    pub bytes_sent: u64,
    pub keys_local: u64,
    pub spilled_keys: u64,
    pub seconds_since_heartbeat: f64,
}

/// What to solve and how.
#[derive(Debug, Clone, Default)]
pub struct SubmitOptions {
    pub partitions: u32,
    pub no_freeze: bool,
    pub no_pi_corrals: bool,
    pub max_states: Option<u64>,
    pub timeout: Option<f64>,
    pub kpg: Option<u32>,
    /// The plain search (no push-distance bound).
    pub no_bound: bool,
    /// One bounded iteration at this many pushes.
    pub upper_bound: Option<u32>,
    /// Bound by the matching alone.
    pub no_pair_penalties: bool,
    /// The fewest pushes only, without the moves pass.
    pub pushes_only: bool,
    /// No probes.
    pub no_probe: bool,
    /// The most states of the moves pass's search (`None`: automatic).
    pub moves_states: Option<u64>,
    /// Also the triple penalties.
    pub triples: bool,
    /// The PI-corral restriction on every level, sampled or not.
    pub keep_pi_corrals: bool,
}

fn state_name(s: i32) -> &'static str {
    match JobState::try_from(s) {
        Ok(JobState::Queued) => "queued",
        Ok(JobState::Running) => "running",
        Ok(JobState::Paused) => "paused",
        Ok(JobState::Finished) => "finished",
        Ok(JobState::Failed) => "failed",
        Ok(JobState::Cancelled) => "cancelled",
        Err(_) => "unknown",
    }
}

/// The report a finished job carries, in the form `solve` prints.
fn report_of(r: &SolveResult) -> SolveReport {
    let status = match r.status.as_str() {
        "solved" => Status::Solved,
        "unsolvable" => Status::Unsolvable,
        "timeout" => Status::Timeout,
        "limit" => Status::Limit,
        "bounded" => Status::Bounded,
        _ => Status::Error,
    };
    SolveReport {
        storage: None,
        tables_file: None,
        iterations: r
            .iterations
            .iter()
            .map(|i| BoundIteration {
                bound: i.bound,
                states: i.states,
                generated: i.generated,
                pruned: i.pruned,
                seconds: i.seconds,
                search: match (i.outgrown, i.probe, i.plain_try) {
                    (true, _, _) => IterationSearch::Outgrown,
                    (_, true, _) => IterationSearch::Probe,
                    (_, _, true) => IterationSearch::PlainTry,
                    _ => IterationSearch::Layers,
                },
                probe_states: i.probe_states,
                probe_generated: i.probe_generated,
            })
            .collect(),
        status,
        pushes: r.pushes.map(|v| v as usize),
        moves: r.moves.map(|v| v as usize),
        solution: r.solution.clone(),
        states: r.states,
        generated: r.generated,
        seconds: r.seconds,
        kpg_seconds: r.kpg_seconds,
        kpg: r.kpg as usize,
        small_tables_states: r.small_tables_states,
        pi_corrals: r.pi_corrals,
        triples: r.triples,
        store_bytes: r.store_bytes,
        disk_bytes: r.disk_bytes,
        forward_layers: r.forward_layers as usize,
        backward_layers: r.backward_layers as usize,
        peak_memory_bytes: r.peak_memory_bytes,
        key_width: match r.key_width.as_str() {
            "u128" => KeyWidth::U128,
            "bits256" => KeyWidth::Bits256,
            "bits1024" => KeyWidth::Bits1024,
            _ => KeyWidth::U64,
        },
        reason: r.reason.clone(),
        objective: match r.objective.as_str() {
            "pushes" => Some(Objective::Pushes),
            "pushes,moves" => Some(Objective::PushesMoves),
            _ => None,
        },
        moves_seconds: r.moves_seconds,
        moves_states: r.moves_states,
        optimal_states: r.optimal_states,
        moves_disk_bytes: r.moves_disk_bytes,
        moves_note: r.moves_note.clone(),
    }
}

fn job_view(s: &JobStatus) -> JobView {
    JobView {
        id: s.job_id,
        kind: if s.kind == JobKind::Deadlocks as i32 { "deadlocks" } else { "solve" }.into(),
        state: state_name(s.state).into(),
        title: s.title.clone(),
        index: s.index,
        side: if s.side == Side::Backward as i32 { "backward" } else { "forward" }.into(),
        layer: s.layer,
        forward_layers: s.forward_layers,
        backward_layers: s.backward_layers,
        frontier_forward: s.frontier_forward,
        frontier_backward: s.frontier_backward,
        stored: s.stored,
        generated: s.generated,
        seconds: s.seconds,
        rate: s.rate,
        memory_bytes: s.memory_bytes,
        disk_bytes: s.disk_bytes,
        message: s.message.clone(),
        keys_exchanged: s.keys_exchanged,
        bytes_exchanged: s.bytes_exchanged,
        bound: s.bound,
        plain_try: s.plain_try.as_ref().map(|t| EnginePlainTry { budget: t.budget, back_to: t.back_to }),
        result: s.result.as_ref().map(report_of),
        queue_position: None,
    }
}

/// How the cluster builds a database.
#[derive(Debug, Clone, Copy, Default)]
pub struct TableOptions {
    /// The largest k, or `None` for the k a solve of the level would choose.
    pub k: Option<u32>,
    /// Partitions (0: the coordinator's default).
    pub partitions: u32,
    /// Time limit in seconds (0: none).
    pub timeout: f64,
}

/// A database the cluster built (`deadlocks build --coordinator`).
pub struct BuiltTables {
    /// The .kdb file's bytes.
    pub kdb: Vec<u8>,
    /// Per k finished, the figures of its game.
    pub stats: Vec<KStats>,
    /// The job's note when its time limit or `interrupt` stopped the build:
    /// the file holds the k finished before it.
    pub cut_short: Option<String>,
}

/// A level's title as a job carries it: cut at [`MAX_TITLE`](super::MAX_TITLE)
/// bytes (on a character boundary), which the coordinator refuses past.
fn job_title(title: &str) -> String {
    let mut end = title.len().min(super::MAX_TITLE);
    while !title.is_char_boundary(end) {
        end -= 1;
    }
    title[..end].to_string()
}

/// A connection to a coordinator.
pub struct Client {
    rpc: CoordinatorRpc,
    addr: String,
}

/// How long a client waits for a coordinator's answer to a short call (not
/// a watch): a peer that accepted the connection and says nothing (no
/// sokoshard node, or a hung one) is an error then, not a wait.
pub const ANSWER_LIMIT: Duration = Duration::from_secs(10);

/// A short call's request, with its answer limit.
fn brief<T>(message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.set_timeout(ANSWER_LIMIT);
    r
}

fn status_err(what: &str, addr: &str, s: tonic::Status) -> ClusterError {
    super::net::first_contact_err(what, addr, s)
}

impl Client {
    pub fn new(net: &NetConfig, addr: &str) -> Result<Self, ClusterError> {
        Ok(Client { rpc: net.coordinator_client(addr)?, addr: addr.to_string() })
    }

    /// Submits one level (its XSB text); returns the job id.
    pub async fn submit(
        &mut self,
        level_text: &str,
        title: &str,
        index: u32,
        o: &SubmitOptions,
    ) -> Result<u64, ClusterError> {
        let req = SubmitRequest {
            protocol_version: PROTOCOL_VERSION,
            kind: JobKind::Solve as i32,
            level_text: level_text.to_string(),
            title: job_title(title),
            index,
            options: Some(JobOptions {
                partitions: o.partitions,
                no_freeze: o.no_freeze,
                no_pi_corrals: o.no_pi_corrals,
                max_states: o.max_states.unwrap_or(0),
                timeout: o.timeout.unwrap_or(0.0),
                kpg: o.kpg,
                no_bound: o.no_bound,
                upper_bound: o.upper_bound.unwrap_or(0),
                no_pair_penalties: o.no_pair_penalties,
                pushes_only: o.pushes_only,
                no_probe: o.no_probe,
                moves_states: o.moves_states.unwrap_or(0),
                triples: o.triples,
                keep_pi_corrals: o.keep_pi_corrals,
            }),
        };
        let r = self.rpc.submit(brief(req)).await.map_err(|s| status_err("submitting", &self.addr, s))?;
        Ok(r.into_inner().job_id)
    }

    /// Follows a job until it ends, calling `on_update` on every status; rides
    /// out a coordinator restart for up to `reconnect` by watching again.
    pub async fn watch(
        &mut self,
        id: u64,
        reconnect: Duration,
        mut on_update: impl FnMut(&JobView),
    ) -> Result<JobView, ClusterError> {
        let mut lost_since: Option<Instant> = None;
        let mut retry = Retry::new(Duration::from_millis(300), Duration::from_secs(2));
        loop {
            let r = self.rpc.watch(WatchRequest { job_id: id }).await;
            let err = match r {
                Ok(resp) => {
                    lost_since = None;
                    retry.succeeded(Instant::now());
                    let mut stream = resp.into_inner();
                    loop {
                        match stream.message().await {
                            Ok(Some(s)) => {
                                let v = job_view(&s);
                                on_update(&v);
                                if v.is_terminal() {
                                    return Ok(v);
                                }
                            }
                            Ok(None) => break tonic::Status::unavailable("the watch stream ended"),
                            Err(s) => break s,
                        }
                    }
                }
                Err(s) => s,
            };
            if !matches!(err.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled) {
                return Err(status_err("watching the job", &self.addr, err));
            }
            let since = *lost_since.get_or_insert_with(Instant::now);
            if since.elapsed() > reconnect {
                return Err(status_err("watching the job", &self.addr, err));
            }
            retry.failed_at_coordinator("coordinator unreachable, watching again", &self.addr, err.message());
            tokio::time::sleep(retry.wait()).await;
        }
    }

    /// Builds k-PG tables for k = 1..=`k` on the cluster (no `k`: the k a solve
    /// of the level would choose): submits a DEADLOCKS job, follows it, and
    /// returns the .kdb database with what each k cost.
    pub async fn build_tables(
        &mut self,
        level_text: &str,
        title: &str,
        index: u32,
        how: TableOptions,
        mut on_update: impl FnMut(&JobView),
        interrupt: impl std::future::Future<Output = ()>,
    ) -> Result<BuiltTables, ClusterError> {
        let req = SubmitRequest {
            protocol_version: PROTOCOL_VERSION,
            kind: JobKind::Deadlocks as i32,
            level_text: level_text.to_string(),
            title: job_title(title),
            index,
            options: Some(JobOptions {
                partitions: how.partitions,
                kpg: how.k,
                timeout: how.timeout,
                ..Default::default()
            }),
        };
        let id =
            self.rpc.submit(brief(req)).await.map_err(|s| status_err("submitting", &self.addr, s))?.into_inner().job_id;
        // an interrupt (Ctrl-C) cancels the job, which keeps the k finished,
        // and the watch goes on to its end
        let watched = {
            let watch = self.watch(id, Duration::from_secs(300), &mut on_update);
            tokio::pin!(watch);
            tokio::pin!(interrupt);
            tokio::select! {
                v = &mut watch => Some(v?),
                () = &mut interrupt => None,
            }
        };
        let v = match watched {
            Some(v) => v,
            None => {
                self.cancel(id).await?;
                self.watch(id, Duration::from_secs(300), &mut on_update).await?
            }
        };
        let kept = v.state == "cancelled" && v.message.starts_with(&format!("{TABLES_CANCELLED}: "));
        if v.state != "finished" && !kept {
            return Err(ClusterError::FailedPrecondition(format!("job {id} {}: {}", v.state, v.message)));
        }
        let r = self
            .rpc
            .fetch_tables(brief(FetchTablesRequest { job_id: id }))
            .await
            .map_err(|s| status_err("fetching the tables", &self.addr, s))?
            .into_inner();
        let stats = r
            .stats
            .iter()
            .map(|s| KStats {
                k: s.k as usize,
                forward_states: s.forward_states,
                backward_states: s.backward_states,
                forward_patterns: s.forward_patterns as usize,
                backward_patterns: s.backward_patterns as usize,
                seconds: s.seconds,
            })
            .collect();
        let cut_short = (kept || v.message.starts_with(TABLES_TIME_LIMIT)).then(|| v.message.clone());
        Ok(BuiltTables { kdb: r.kdb, stats, cut_short })
    }

    pub async fn cancel(&mut self, id: u64) -> Result<String, ClusterError> {
        let r = self
            .rpc
            .cancel(brief(CancelRequest { job_id: id }))
            .await
            .map_err(|s| status_err("cancelling", &self.addr, s))?;
        Ok(state_name(r.into_inner().state).into())
    }

    pub async fn jobs(&mut self) -> Result<Vec<JobView>, ClusterError> {
        let r = self
            .rpc
            .list_jobs(brief(ListJobsRequest {}))
            .await
            .map_err(|s| status_err("listing jobs", &self.addr, s))?;
        let mut jobs: Vec<JobView> = r.into_inner().jobs.iter().map(job_view).collect();
        jobs.sort_by_key(|j| j.id);
        let mut place = 0;
        for j in jobs.iter_mut().filter(|j| j.state == "queued") {
            place += 1;
            j.queue_position = Some(place);
        }
        Ok(jobs)
    }

    pub async fn workers(&mut self) -> Result<Vec<WorkerView>, ClusterError> {
        let r = self
            .rpc
            .list_workers(brief(ListWorkersRequest {}))
            .await
            .map_err(|s| status_err("listing workers", &self.addr, s))?;
        Ok(r.into_inner()
            .workers
            .into_iter()
            .map(|w| {
                let s = w.stats.unwrap_or_default();
                WorkerView {
                    node_id: w.node_id,
                    address: w.address,
                    alive: w.alive,
                    memory_bytes: w.memory_bytes,
                    cores: w.cores,
                    data_dir: w.data_dir,
                    partitions: s.partitions,
                    rss_bytes: s.rss_bytes,
                    peak_rss_bytes: s.peak_rss_bytes,
                    store_memory_bytes: s.store_memory_bytes,
                    store_disk_bytes: s.store_disk_bytes,
                    keys_sent: s.keys_sent,
                    bytes_sent: s.bytes_sent,
                    keys_local: s.keys_local,
                    spilled_keys: s.spilled_keys,
                    seconds_since_heartbeat: w.seconds_since_heartbeat,
                }
            })
            .collect())
    }
}

/// Asks a node one cheap, authenticated question: a coordinator for its
/// workers, a worker (`worker`) for its identity. The answer in words, or why
/// there was none within `limit`.
pub async fn health(net: &NetConfig, addr: &str, worker: bool, limit: Duration) -> Result<String, String> {
    let late = || format!("no answer within {} s", limit.as_secs_f64());
    let refused = |s: tonic::Status| match s.code() {
        // the other kind of node answered: it has no such call
        tonic::Code::Unimplemented if worker => "this is not a worker (a coordinator? leave out --worker)".to_string(),
        tonic::Code::Unimplemented => "this is not a coordinator (a worker? add --worker)".to_string(),
        _ => format!("{}: {}", s.code(), s.message()),
    };
    if worker {
        let mut c = net.worker_client(addr).map_err(|e| e.to_string())?;
        let r = tokio::time::timeout(limit, c.hello(HelloRequest { protocol_version: PROTOCOL_VERSION }))
            .await
            .map_err(|_| late())?
            .map_err(refused)?
            .into_inner();
        Ok(format!("worker {} (protocol {})", r.node_id, r.protocol_version))
    } else {
        let mut c = net.coordinator_client(addr).map_err(|e| e.to_string())?;
        let r = tokio::time::timeout(limit, c.list_workers(brief(ListWorkersRequest {})))
            .await
            .map_err(|_| late())?
            .map_err(refused)?
            .into_inner();
        let alive = r.workers.iter().filter(|w| w.alive).count();
        Ok(format!("coordinator with {alive} of {} workers alive", r.workers.len()))
    }
}
