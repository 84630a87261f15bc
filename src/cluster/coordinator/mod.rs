//! The coordinator node: the worker registry (joins, heartbeats, lost workers),
//! the job table and its persisted job log, the client API (submit, watch,
//! cancel, list), and the scheduler that runs one job at a time through the
//! [`backend`] (the cluster's `LayerBackend`).

pub mod backend;
mod http;
pub mod job;
mod lookup;
mod rebuild;
pub mod record;
pub mod tables;

pub use record::{JobRecord, Kind, Settings, State};

use super::net::{CheckToken, NetConfig, WorkerClients};
use super::proto::coordinator_server::{Coordinator, CoordinatorServer};
use super::proto::*;
use super::{persist, ClusterError, MAX_LEVEL_TEXT, MAX_MESSAGE_BYTES, MAX_QUEUED_JOBS, MAX_TITLE, PROTOCOL_VERSION};
use crate::model::board::Board;
use crate::model::level::{parse_one, split_collection};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Notify};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// The job log before version 3: one file of every job (read once, to move its
/// jobs to their own files).
const LOG_MAGIC: &[u8; 8] = b"SKJOBLOG";
/// Version 2: the log keeps the project's own types, no protocol messages.
const LOG_VERSION: u32 = 2;
/// The job log: one file per job, `jobs/<id>.job`, so that a damaged file costs
/// its own job and never the others.
const RECORD_MAGIC: &[u8; 8] = b"SKJOBREC";
const RECORD_VERSION: u32 = 1;

/// Where the moves pass's tape writes, under the data dir.
pub(super) const MOVES_DIR: &str = "moves";

fn job_path(data_dir: &Path, id: u64) -> PathBuf {
    data_dir.join("jobs").join(format!("{id}.job"))
}
/// Partitions of a job that does not ask for a number.
pub const DEFAULT_PARTITIONS: u32 = 64;

/// How a coordinator is started.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    pub listen: SocketAddr,
    /// Where the status page is served (`--http`), if anywhere.
    pub http: Option<SocketAddr>,
    pub data_dir: PathBuf,
    pub net: NetConfig,
    /// Interval workers heartbeat at.
    pub heartbeat: Duration,
    /// A worker silent this long is lost.
    pub heartbeat_timeout: Duration,
    /// A job whose lost worker stays away this long fails.
    pub resume_timeout: Duration,
    /// A spare worker takes over a worker lost this long.
    pub replace_after: Duration,
    /// Workers a new job waits for before it starts.
    pub min_workers: usize,
    /// Test knob: sleep this long after each layer (makes small levels long
    /// enough to interrupt on purpose).
    pub layer_delay: Duration,
    /// Test knob: the same after each layer of the moves pass's search.
    pub moves_delay: Duration,
    /// Memory budget for what runs in the coordinator itself (`--mem`): the
    /// probe holds at most a quarter of it, the moves pass's tape keeps a
    /// quarter in memory and writes the rest under the data dir. `None`:
    /// the default budget (half the memory the process may use).
    pub mem: Option<u64>,
}

#[derive(serde::Serialize, serde::Deserialize, Default)]
struct LogBody {
    next_id: u64,
    jobs: Vec<JobRecord>,
}

struct WorkerEntry {
    address: String,
    incarnation: u64,
    last_seen: Instant,
    memory: u64,
    cores: u32,
    data_dir: String,
    stats: WorkerStats,
}

impl WorkerEntry {
    /// Heard from within `timeout`.
    fn alive(&self, timeout: Duration) -> bool {
        self.last_seen.elapsed() < timeout
    }

    /// Not heard from within `timeout` (a worker that left is no longer
    /// listed at all).
    fn lost(&self, timeout: Duration) -> bool {
        self.last_seen.elapsed() >= timeout
    }
}

struct JobEntry {
    rec: JobRecord,
    /// Stops the engine (cancel or timeout).
    stop: Arc<AtomicBool>,
    /// Raised by a client's cancel.
    cancelled: Arc<AtomicBool>,
    tx: watch::Sender<JobStatus>,
    /// The job's thread is running it (from its start to its end, whatever
    /// the state says meanwhile).
    running: bool,
    /// Since when the job's clock runs: while its thread runs it and it is
    /// not queued (waiting for workers), so `seconds` is time spent on it.
    run_started: Option<Instant>,
    /// When the running bound iteration started (this run), for the status
    /// page's pace.
    iteration_started: Option<Instant>,
}

impl JobEntry {
    /// Starts or stops the job's clock as its thread and state say: queued
    /// time (waiting for enough workers) is not the job's.
    /// Its seconds over every run, with the running clock read now.
    fn seconds(&self) -> f64 {
        self.rec.seconds + self.run_started.map_or(0.0, |s| s.elapsed().as_secs_f64())
    }

    fn tick(&mut self) {
        let counts = self.running && self.rec.state != State::Queued;
        match (counts, self.run_started) {
            (true, None) => self.run_started = Some(Instant::now()),
            (false, Some(s)) => {
                self.rec.seconds += s.elapsed().as_secs_f64();
                self.run_started = None;
            }
            _ => {}
        }
    }
}

/// The coordinator's state, shared by the service and the job runner.
pub struct Shared {
    cfg: CoordinatorConfig,
    workers: Mutex<BTreeMap<String, WorkerEntry>>,
    jobs: Mutex<BTreeMap<u64, JobEntry>>,
    next_id: Mutex<u64>,
    wake: Notify,
    /// Counts changes that a waiting job must look at: a worker joined, left,
    /// was lost or came back, or a job was asked to stop. Waiters wait for
    /// the count to move (no polling).
    changes: watch::Sender<u64>,
    clients: WorkerClients,
    log_lock: Mutex<()>,
}

fn terminal(state: State) -> bool {
    matches!(state, State::Finished | State::Failed | State::Cancelled)
}

/// The same question of a status already in its protocol form.
fn terminal_status(s: &JobStatus) -> bool {
    [State::Finished, State::Failed, State::Cancelled].iter().any(|t| t.to_proto() == s.state)
}

impl Shared {
    fn lock_jobs(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, JobEntry>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn lock_workers(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, WorkerEntry>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells the waiters that the cluster changed (see `changes`).
    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The change count now: take it before looking, then wait for it to move.
    pub(super) fn changes_seen(&self) -> u64 {
        *self.changes.borrow()
    }

    /// Waits (async) until the change count differs from `seen`.
    pub(super) async fn changed_since(&self, seen: u64) {
        let mut rx = self.changes.subscribe();
        // the sender lives as long as `self`, so this ends only with a change
        let _ = rx.wait_for(|&n| n != seen).await;
    }

    /// Node id -> (address, incarnation) of every live worker.
    pub fn alive(&self) -> BTreeMap<String, (String, u64)> {
        let t = self.cfg.heartbeat_timeout;
        self.lock_workers()
            .iter()
            .filter(|(_, w)| w.alive(t))
            .map(|(id, w)| (id.clone(), (w.address.clone(), w.incarnation)))
            .collect()
    }

    /// Last known address of a node, alive or not.
    pub fn address_of(&self, node: &str) -> Option<String> {
        self.lock_workers().get(node).map(|w| w.address.clone())
    }

    fn status_of(e: &JobEntry) -> JobStatus {
        let r = &e.rec;
        let seconds = e.seconds();
        let front = |i: usize| r.layers[i].last().copied().unwrap_or(0);
        JobStatus {
            job_id: r.id,
            kind: r.kind.to_proto(),
            state: r.state.to_proto(),
            title: r.title.clone(),
            index: r.index,
            side: super::side_to(r.last_side),
            layer: r.layers[r.last_side.index()].len().saturating_sub(1) as u32,
            frontier_forward: front(0),
            frontier_backward: front(1),
            stored: r.stored,
            generated: r.generated,
            seconds,
            rate: if seconds > 0.0 { r.stored as f64 / seconds } else { 0.0 },
            memory_bytes: r.memory_bytes,
            disk_bytes: r.disk_bytes,
            message: r.message.clone(),
            result: r.result.as_ref().map(record::report_to_proto),
            keys_exchanged: r.keys_exchanged,
            bytes_exchanged: r.bytes_exchanged,
            forward_layers: r.layers[0].len() as u32,
            backward_layers: r.layers[1].len() as u32,
            bound: r.bound,
            plain_try: r.plain_try.map(|t| PlainTry { budget: t.budget, back_to: t.back_to }),
        }
    }

    /// Changes a job's record, tells its watchers, and persists the record
    /// when `durable`.
    pub fn update(&self, id: u64, durable: bool, f: impl FnOnce(&mut JobRecord)) -> Result<(), ClusterError> {
        {
            let mut jobs = self.lock_jobs();
            let e = jobs.get_mut(&id).ok_or_else(|| ClusterError::NotFound(format!("job {id}")))?;
            let bound = e.rec.bound;
            f(&mut e.rec);
            e.tick();
            if e.rec.bound != bound || e.iteration_started.is_none() {
                e.iteration_started = Some(Instant::now());
            }
            e.tx.send_replace(Self::status_of(e));
        }
        if durable {
            self.persist(id)?;
        }
        Ok(())
    }

    pub fn record(&self, id: u64) -> Option<JobRecord> {
        self.lock_jobs().get(&id).map(|e| e.rec.clone())
    }

    /// The seconds job `id` has run, over every run, its clock read now.
    pub fn job_seconds(&self, id: u64) -> f64 {
        self.lock_jobs().get(&id).map_or(0.0, JobEntry::seconds)
    }

    fn set_running(&self, id: u64, running: bool) {
        let mut jobs = self.lock_jobs();
        if let Some(e) = jobs.get_mut(&id) {
            e.running = running;
            e.tick();
            e.tx.send_replace(Self::status_of(e));
        }
    }

    /// Writes job `id`'s record to the job log (its own file, tmp + rename).
    pub fn persist(&self, id: u64) -> Result<(), ClusterError> {
        let _g = self.log_lock.lock().unwrap_or_else(|e| e.into_inner());
        let rec = {
            let jobs = self.lock_jobs();
            let Some(e) = jobs.get(&id) else { return Ok(()) };
            let mut r = e.rec.clone();
            r.seconds = e.seconds();
            r
        };
        persist::write(&job_path(&self.cfg.data_dir, id), RECORD_MAGIC, RECORD_VERSION, &rec)
    }

    fn stop_flags(&self, id: u64) -> Option<(Arc<AtomicBool>, Arc<AtomicBool>)> {
        self.lock_jobs().get(&id).map(|e| (e.stop.clone(), e.cancelled.clone()))
    }

    /// The next job to run: the oldest one not finished.
    fn next_job(&self) -> Option<u64> {
        self.lock_jobs().values().find(|e| !terminal(e.rec.state)).map(|e| e.rec.id)
    }
}

/// Reads the job log: every `jobs/<id>.job`, after moving the jobs of a log in
/// the earlier one-file format there. A record that cannot be read (torn,
/// corrupted, of another version) is kept as `<id>.job.corrupt` and its job is
/// listed as failed with the reason; the other jobs load as they were. Returns
/// the jobs by id and the next free id.
fn load_jobs(data_dir: &Path) -> Result<(Vec<JobRecord>, u64), ClusterError> {
    let dir = data_dir.join("jobs");
    std::fs::create_dir_all(&dir).map_err(|e| ClusterError::io(format!("creating {}", dir.display()), e))?;
    let mut next_id = 1;
    let legacy = data_dir.join("jobs.log");
    if let Some(body) = persist::read::<LogBody>(&legacy, LOG_MAGIC, LOG_VERSION)? {
        for rec in &body.jobs {
            persist::write(&job_path(data_dir, rec.id), RECORD_MAGIC, RECORD_VERSION, rec)?;
        }
        next_id = body.next_id;
        let moved = data_dir.join("jobs.log.moved");
        std::fs::rename(&legacy, &moved).map_err(|e| ClusterError::io(format!("renaming {}", legacy.display()), e))?;
        tracing::info!(jobs = body.jobs.len(), "job log moved to one file per job");
    }
    // the earlier log's next id, in case it ran ahead of its jobs
    if let Ok(Some(body)) = persist::read::<LogBody>(&data_dir.join("jobs.log.moved"), LOG_MAGIC, LOG_VERSION) {
        next_id = next_id.max(body.next_id);
    }
    let listing = std::fs::read_dir(&dir).map_err(|e| ClusterError::io(format!("listing {}", dir.display()), e))?;
    // id -> whether its record file is there (false: only damaged copies are)
    let mut ids = BTreeMap::new();
    for entry in listing {
        let entry = entry.map_err(|e| ClusterError::io(format!("listing {}", dir.display()), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let (stem, live) = match (name.strip_suffix(".job"), name.split_once(".job.corrupt")) {
            (Some(stem), _) => (stem, true),
            (None, Some((stem, _))) => (stem, false),
            _ => continue,
        };
        let Ok(id) = stem.parse::<u64>() else { continue };
        next_id = next_id.max(id + 1);
        *ids.entry(id).or_insert(false) |= live;
    }
    let mut records = Vec::with_capacity(ids.len());
    for (id, live) in ids {
        let path = job_path(data_dir, id);
        let why = if !live {
            // stopped between keeping a damaged record aside and writing its stub
            format!("{}: found damaged on an earlier start", path.display())
        } else {
            match persist::read::<JobRecord>(&path, RECORD_MAGIC, RECORD_VERSION) {
                Ok(Some(rec)) if rec.id == id => {
                    records.push(rec);
                    continue;
                }
                Ok(Some(rec)) => format!("{}: holds job {}", path.display(), rec.id),
                Ok(None) => continue,
                Err(ClusterError::DataLoss(why)) => why,
                // a directory under a job's name fails that job alone, as
                // damage does; any other error (no permission, the disk)
                // stops the start, naming the record, and loses no job
                Err(ClusterError::Io { what, source }) if source.kind() == std::io::ErrorKind::IsADirectory => {
                    format!("{what}: {source}")
                }
                Err(e) => return Err(e),
            }
        };
        let kept = if live {
            // a name not taken yet: an earlier damaged copy is never overwritten
            let kept = (1..)
                .map(|n| {
                    let mut k = path.clone().into_os_string();
                    k.push(if n == 1 { ".corrupt".to_string() } else { format!(".corrupt.{n}") });
                    PathBuf::from(k)
                })
                .find(|k| !k.exists())
                .expect("some name is free");
            std::fs::rename(&path, &kept).map_err(|e| ClusterError::io(format!("renaming {}", path.display()), e))?;
            kept
        } else {
            let mut k = path.clone().into_os_string();
            k.push(".corrupt");
            PathBuf::from(k)
        };
        tracing::error!(job = id, reason = %why, kept = %kept.display(), "job record unreadable; the job is marked failed");
        let mut rec = JobRecord::new(id, Kind::Solve, String::new(), format!("job {id}"), 0, Settings::default());
        rec.state = State::Failed;
        rec.message = format!(
            "the job's record is unreadable ({why}); it is kept as {}, and the job cannot resume: submit its level again",
            kept.display()
        );
        persist::write(&path, RECORD_MAGIC, RECORD_VERSION, &rec)?;
        records.push(rec);
    }
    Ok((records, next_id))
}

/// The coordinator's gRPC service.
#[derive(Clone)]
pub struct CoordinatorService {
    sh: Arc<Shared>,
}

type R<T> = Result<Response<T>, Status>;

fn check_version(v: u32, who: &str) -> Result<(), ClusterError> {
    if v != PROTOCOL_VERSION {
        return Err(ClusterError::FailedPrecondition(format!(
            "protocol version mismatch: the {who} speaks version {v}, this coordinator speaks version {PROTOCOL_VERSION}; run the same sokoshard release on every node"
        )));
    }
    Ok(())
}

impl CoordinatorService {
    /// Opens the coordinator's state, resuming the jobs of its log.
    pub fn open(cfg: CoordinatorConfig) -> Result<Self, ClusterError> {
        std::fs::create_dir_all(&cfg.data_dir)
            .map_err(|e| ClusterError::io(format!("creating the data directory {}", cfg.data_dir.display()), e))?;
        let (records, next_id) = load_jobs(&cfg.data_dir)?;
        // the moves pass's scratch files of an earlier process go (a pass is
        // redone from the logged meeting, never resumed from them); its
        // tapes write under a fresh directory
        let moves = cfg.data_dir.join(MOVES_DIR);
        if moves.exists() {
            match std::fs::remove_dir_all(&moves) {
                Ok(()) => tracing::info!(dir = %moves.display(), "an earlier moves pass's files removed"),
                Err(e) => {
                    tracing::warn!(dir = %moves.display(), error = %e, "cannot remove an earlier moves pass's files")
                }
            }
        }
        std::fs::create_dir_all(&moves).map_err(|e| ClusterError::io(format!("creating {}", moves.display()), e))?;
        let mut jobs = BTreeMap::new();
        for mut rec in records {
            if !terminal(rec.state) && rec.state != State::Queued {
                rec.state = State::Paused;
                rec.message = "coordinator restarted; resuming from the last completed layer".into();
                tracing::info!(
                    job = rec.id,
                    forward = rec.layers[0].len(),
                    backward = rec.layers[1].len(),
                    "job resumes from the log"
                );
            }
            let entry = JobEntry {
                stop: Arc::new(AtomicBool::new(false)),
                cancelled: Arc::new(AtomicBool::new(false)),
                tx: watch::channel(JobStatus::default()).0,
                running: false,
                run_started: None,
                iteration_started: None,
                rec,
            };
            entry.tx.send_replace(Shared::status_of(&entry));
            jobs.insert(entry.rec.id, entry);
        }
        let clients = WorkerClients::new(cfg.net.clone());
        Ok(CoordinatorService {
            sh: Arc::new(Shared {
                cfg,
                workers: Mutex::new(BTreeMap::new()),
                jobs: Mutex::new(jobs),
                next_id: Mutex::new(next_id),
                wake: Notify::new(),
                changes: watch::channel(0).0,
                clients,
                log_lock: Mutex::new(()),
            }),
        })
    }

    pub fn shared(&self) -> Arc<Shared> {
        self.sh.clone()
    }

    /// The service wrapped with the token check and size limits.
    pub fn server(
        self,
        token: &str,
    ) -> tonic::service::interceptor::InterceptedService<CoordinatorServer<Self>, CheckToken> {
        tonic::service::interceptor::InterceptedService::new(
            CoordinatorServer::new(self)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            CheckToken::new(token),
        )
    }
}

#[tonic::async_trait]
impl Coordinator for CoordinatorService {
    async fn join(&self, req: Request<JoinRequest>) -> R<JoinReply> {
        let r = req.into_inner();
        check_version(r.protocol_version, "worker")?;
        if r.node_id.is_empty() || r.address.is_empty() {
            return Err(ClusterError::InvalidArgument("a worker joins with a node id and an address".into()).into());
        }
        // the worker may be a new process behind an old address: dial afresh
        self.sh.clients.forget(&r.address);
        let mut c = self.sh.clients.get(&r.address)?;
        let hello =
            tokio::time::timeout(Duration::from_secs(10), c.hello(HelloRequest { protocol_version: PROTOCOL_VERSION }))
                .await
                .map_err(|_| {
                    ClusterError::Unavailable(format!("the coordinator cannot reach the worker at {}", r.address))
                })?
                .map_err(|s| {
                    ClusterError::Unavailable(format!(
                        "the coordinator cannot reach the worker at {}: {}",
                        r.address,
                        s.message()
                    ))
                })?
                .into_inner();
        if hello.node_id != r.node_id || hello.incarnation != r.incarnation {
            return Err(ClusterError::FailedPrecondition(format!(
                "the worker at {} is {} (incarnation {:x}), not the joining {}",
                r.address, hello.node_id, hello.incarnation, r.node_id
            ))
            .into());
        }
        tracing::info!(node = %r.node_id, address = %r.address, memory = r.memory_bytes, cores = r.cores, "worker joined");
        self.sh.lock_workers().insert(
            r.node_id.clone(),
            WorkerEntry {
                address: r.address,
                incarnation: r.incarnation,
                last_seen: Instant::now(),
                memory: r.memory_bytes,
                cores: r.cores,
                data_dir: r.data_dir,
                stats: WorkerStats::default(),
            },
        );
        self.sh.changed();
        self.sh.wake.notify_one();
        Ok(Response::new(JoinReply {
            protocol_version: PROTOCOL_VERSION,
            heartbeat_millis: self.sh.cfg.heartbeat.as_millis() as u32,
        }))
    }

    async fn heartbeat(&self, req: Request<HeartbeatRequest>) -> R<HeartbeatReply> {
        let r = req.into_inner();
        let mut ws = self.sh.lock_workers();
        let mut back = false;
        let known = match ws.get_mut(&r.node_id) {
            Some(w) if w.incarnation == r.incarnation => {
                // a worker counted as lost that heartbeats again is back
                back = w.lost(self.sh.cfg.heartbeat_timeout);
                w.last_seen = Instant::now();
                if let Some(s) = r.stats {
                    w.stats = s;
                }
                true
            }
            _ => false,
        };
        drop(ws);
        if back {
            tracing::info!(node = %r.node_id, "lost worker heartbeats again");
            self.sh.changed();
        }
        Ok(Response::new(HeartbeatReply { known }))
    }

    async fn leave(&self, req: Request<LeaveRequest>) -> R<LeaveReply> {
        let r = req.into_inner();
        {
            // a worker that stopped cleanly is forgotten, not counted as lost;
            // a job that had partitions on it waits for it as for a lost one
            let mut ws = self.sh.lock_workers();
            if ws.get(&r.node_id).is_some_and(|w| w.incarnation == r.incarnation) {
                ws.remove(&r.node_id);
                tracing::info!(node = %r.node_id, "worker left the cluster");
            }
        }
        self.sh.changed();
        Ok(Response::new(LeaveReply {}))
    }

    async fn submit(&self, req: Request<SubmitRequest>) -> R<SubmitReply> {
        let r = req.into_inner();
        check_version(r.protocol_version, "client")?;
        if r.level_text.len() > MAX_LEVEL_TEXT {
            return Err(ClusterError::TooLarge(format!(
                "a level text of {} bytes (limit {MAX_LEVEL_TEXT})",
                r.level_text.len()
            ))
            .into());
        }
        if r.title.len() > MAX_TITLE {
            return Err(
                ClusterError::TooLarge(format!("a title of {} bytes (limit {MAX_TITLE})", r.title.len())).into()
            );
        }
        let kind = Kind::from_proto(r.kind)?;
        // one level per job: a text of several was solved as its first alone
        let found = split_collection(&r.level_text, "submitted level").len();
        if found > 1 {
            return Err(ClusterError::InvalidArgument(format!(
                "the level text holds {found} levels; a job takes one (submit each as its own job)"
            ))
            .into());
        }
        let level =
            parse_one(&r.level_text, "submitted level").map_err(|e| ClusterError::InvalidArgument(e.to_string()))?;
        Board::new(&level).map_err(|e| ClusterError::InvalidArgument(e.to_string()))?;
        let mut options = Settings::from(r.options.unwrap_or_default());
        if options.partitions == 0 {
            options.partitions = DEFAULT_PARTITIONS;
        }
        if !options.partitions.is_power_of_two() || options.partitions > 1 << 16 {
            return Err(ClusterError::InvalidArgument(format!(
                "{} partitions: need a power of two up to 65536",
                options.partitions
            ))
            .into());
        }
        if !(options.timeout >= 0.0 && options.timeout <= crate::engine::search::MAX_SECONDS) {
            return Err(ClusterError::InvalidArgument(format!(
                "the timeout must be between 0 and {:e} seconds",
                crate::engine::search::MAX_SECONDS
            ))
            .into());
        }
        let k = options.kpg.map(|k| k as usize);
        if k.is_some_and(|k| k > crate::engine::kpg::MAX_K) || (kind == Kind::Deadlocks && k == Some(0)) {
            return Err(ClusterError::InvalidArgument(format!(
                "k-PG tables are built for k = 1 to {}",
                crate::engine::kpg::MAX_K
            ))
            .into());
        }
        let queued = self.sh.lock_jobs().values().filter(|e| !terminal(e.rec.state)).count();
        if queued >= MAX_QUEUED_JOBS {
            return Err(ClusterError::TooLarge(format!(
                "{queued} jobs are queued or running (limit {MAX_QUEUED_JOBS}); wait for some to finish"
            ))
            .into());
        }
        let id = {
            let mut n = self.sh.next_id.lock().unwrap_or_else(|e| e.into_inner());
            let id = *n;
            *n += 1;
            id
        };
        let rec = JobRecord::new(id, kind, r.level_text, r.title, r.index, options);
        let entry = JobEntry {
            stop: Arc::new(AtomicBool::new(false)),
            cancelled: Arc::new(AtomicBool::new(false)),
            tx: watch::channel(JobStatus::default()).0,
            running: false,
            run_started: None,
            iteration_started: None,
            rec,
        };
        entry.tx.send_replace(Shared::status_of(&entry));
        self.sh.lock_jobs().insert(id, entry);
        if let Err(e) = self.sh.persist(id) {
            // a job the client is told failed must not run later (a full disk
            // freed): it would be a duplicate of the one submitted again
            self.sh.lock_jobs().remove(&id);
            tracing::warn!(job = id, error = %e, "a submitted job could not be logged; it is dropped");
            return Err(e.into());
        }
        tracing::info!(job = id, "job submitted");
        self.sh.wake.notify_one();
        Ok(Response::new(SubmitReply { job_id: id }))
    }

    type WatchStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<JobStatus, Status>> + Send>>;

    async fn watch(&self, req: Request<WatchRequest>) -> R<Self::WatchStream> {
        let id = req.get_ref().job_id;
        let mut rx = self
            .sh
            .lock_jobs()
            .get(&id)
            .map(|e| e.tx.subscribe())
            .ok_or_else(|| ClusterError::NotFound(format!("job {id}")))?;
        let (tx, out) = mpsc::channel(4);
        let sh = self.sh.clone();
        tokio::spawn(async move {
            loop {
                let mut s = rx.borrow_and_update().clone();
                if !terminal_status(&s) {
                    // refresh the running time
                    if let Some(e) = sh.lock_jobs().get(&id) {
                        s = Shared::status_of(e);
                    }
                }
                let done = terminal_status(&s);
                if tx.send(Ok(s)).await.is_err() || done {
                    return;
                }
                // a change, or a tick so that the client sees time pass
                let _ = tokio::time::timeout(Duration::from_secs(1), rx.changed()).await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(out))))
    }

    async fn cancel(&self, req: Request<CancelRequest>) -> R<CancelReply> {
        let id = req.get_ref().job_id;
        let (stop, cancelled) = self.sh.stop_flags(id).ok_or_else(|| ClusterError::NotFound(format!("job {id}")))?;
        cancelled.store(true, Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
        self.sh.changed();
        let queued = self.sh.record(id).is_some_and(|r| r.state == State::Queued);
        if queued {
            self.sh.update(id, true, |r| {
                r.state = State::Cancelled;
                r.message = "cancelled before it started".into();
            })?;
        }
        tracing::info!(job = id, "job cancel requested");
        let state = self.sh.record(id).map_or(State::Queued, |r| r.state);
        Ok(Response::new(CancelReply { state: state.to_proto() }))
    }

    async fn list_jobs(&self, _req: Request<ListJobsRequest>) -> R<ListJobsReply> {
        let jobs = self.sh.lock_jobs().values().map(Shared::status_of).collect();
        Ok(Response::new(ListJobsReply { jobs }))
    }

    async fn fetch_tables(&self, req: Request<FetchTablesRequest>) -> R<FetchTablesReply> {
        let id = req.get_ref().job_id;
        let path = tables::tables_path(&self.sh, id);
        let p = path.clone();
        let kdb = match super::run_cpu(move || std::fs::read(&p)).await? {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ClusterError::NotFound(format!("job {id} has no k-PG tables (yet)")).into())
            }
            Err(e) => return Err(ClusterError::io(format!("reading {}", path.display()), e).into()),
        };
        let stats = tables::read_kpg_stats(&self.sh, id)?
            .unwrap_or_default()
            .into_iter()
            .map(|s| KpgStat {
                k: s.k as u32,
                forward_states: s.forward_states,
                backward_states: s.backward_states,
                forward_patterns: s.forward_patterns as u64,
                backward_patterns: s.backward_patterns as u64,
                seconds: s.seconds,
            })
            .collect();
        Ok(Response::new(FetchTablesReply { kdb, stats }))
    }

    async fn list_workers(&self, _req: Request<ListWorkersRequest>) -> R<ListWorkersReply> {
        let t = self.sh.cfg.heartbeat_timeout;
        let workers = self
            .sh
            .lock_workers()
            .iter()
            .map(|(id, w)| WorkerInfo {
                node_id: id.clone(),
                address: w.address.clone(),
                alive: w.alive(t),
                memory_bytes: w.memory,
                cores: w.cores,
                data_dir: w.data_dir.clone(),
                stats: Some(w.stats),
                seconds_since_heartbeat: w.last_seen.elapsed().as_secs_f64(),
            })
            .collect();
        Ok(Response::new(ListWorkersReply { workers }))
    }
}

/// Runs the coordinator until the process ends.
pub async fn serve(cfg: CoordinatorConfig) -> Result<(), ClusterError> {
    // held until the coordinator ends: one coordinator per job log
    let _lock = crate::cluster::persist::lock_data_dir(&cfg.data_dir, "coordinator")?;
    let svc = CoordinatorService::open(cfg.clone())?;
    let sh = svc.shared();
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| ClusterError::io(format!("listening on {}", cfg.listen), e))?;
    tracing::info!(listen = %cfg.listen, data_dir = %cfg.data_dir.display(), "coordinator listening");
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = cfg.net.server_tls()? {
        builder = builder.tls_config(tls)?;
    }
    // one service per node: served directly, no router
    let server = builder.serve_with_incoming(svc.server(&cfg.net.token), crate::cluster::net::incoming(listener));
    if let Some(addr) = cfg.http {
        http::spawn(addr, sh.clone()).await?;
    }
    let reaper = tokio::spawn(watch_heartbeats(sh.clone()));
    let runner = tokio::spawn(run_jobs(sh));
    let r = server.await;
    runner.abort();
    reaper.abort();
    r.map_err(ClusterError::from)
}

/// Counts a worker as lost the moment its heartbeat is overdue, and tells the
/// waiters; forgets a worker lost for longer than the resume timeout (no job
/// waits for it any more: `status` stops listing it, and it joins anew if it
/// comes back). It sleeps until the earliest time a worker can become overdue
/// or forgotten, or until the cluster changes, whichever comes first.
async fn watch_heartbeats(sh: Arc<Shared>) {
    let mut lost: std::collections::BTreeSet<String> = Default::default();
    loop {
        let seen = sh.changes_seen();
        let timeout = sh.cfg.heartbeat_timeout;
        let forget_after = timeout + sh.cfg.resume_timeout;
        let (now_lost, next) = {
            let mut ws = sh.lock_workers();
            ws.retain(|id, w| {
                let keep = w.last_seen.elapsed() < forget_after;
                if !keep {
                    tracing::info!(node = %id, address = %w.address, "lost worker forgotten: gone past the resume timeout");
                }
                keep
            });
            let now_lost: std::collections::BTreeSet<String> =
                ws.iter().filter(|(_, w)| w.lost(timeout)).map(|(id, _)| id.clone()).collect();
            let next = ws
                .values()
                .map(|w| if w.alive(timeout) { w.last_seen + timeout } else { w.last_seen + forget_after })
                .min();
            (now_lost, next)
        };
        if now_lost != lost {
            for node in now_lost.difference(&lost) {
                tracing::warn!(node = %node, "worker lost: no heartbeat within the timeout");
            }
            lost = now_lost;
            sh.changed();
            continue;
        }
        let until = next.unwrap_or_else(|| Instant::now() + timeout);
        tokio::select! {
            _ = tokio::time::sleep_until(until.into()) => {}
            _ = sh.changed_since(seen) => {}
        }
    }
}

/// The scheduler: runs the oldest unfinished job, one at a time, on a blocking
/// thread (the search loop is synchronous and calls the workers through the
/// runtime handle).
async fn run_jobs(sh: Arc<Shared>) {
    loop {
        let Some(id) = sh.next_job() else {
            // a submit notifies (and a notify with no waiter is kept for the next wait)
            sh.wake.notified().await;
            continue;
        };
        let handle = tokio::runtime::Handle::current();
        let s = sh.clone();
        let r = tokio::task::spawn_blocking(move || job::run_job(&s, id, &handle)).await;
        if let Err(e) = r {
            tracing::error!(job = id, error = %e, "job runner crashed");
            let _ = sh.update(id, true, |r| {
                r.state = State::Failed;
                r.message = format!("internal error: job runner crashed: {e}");
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: u64) -> JobRecord {
        JobRecord::new(id, Kind::Solve, "#####\n#@$.#\n#####\n".into(), format!("level {id}"), 1, Settings::default())
    }

    #[test]
    fn a_job_log_of_the_one_file_format_moves_to_one_file_per_job() {
        let dir = tempfile::tempdir().unwrap();
        let body = LogBody { next_id: 9, jobs: vec![record(3), record(7)] };
        persist::write(&dir.path().join("jobs.log"), LOG_MAGIC, LOG_VERSION, &body).unwrap();
        let (jobs, next) = load_jobs(dir.path()).unwrap();
        assert_eq!(jobs.iter().map(|r| (r.id, r.title.as_str())).collect::<Vec<_>>(), [(3, "level 3"), (7, "level 7")]);
        assert_eq!(next, 9);
        assert!(!dir.path().join("jobs.log").exists() && dir.path().join("jobs.log.moved").exists());
        // read again from the files it wrote
        let (again, next) = load_jobs(dir.path()).unwrap();
        assert_eq!((again.len(), next), (2, 9));
    }

    /// Whether a resumed iteration's bound is at the floor (so its probe may
    /// answer it) is kept with its layers, as is a plain try's budget and
    /// bound to go back to; a record written before they were kept reads as
    /// not at the floor (the probe waits for a proven bound) and no try.
    #[test]
    fn a_record_keeps_whether_its_iteration_is_at_the_floor_or_a_plain_try() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("jobs")).unwrap();
        let mut at = record(1);
        (at.bound, at.at_floor) = (Some(13), true);
        persist::write(&job_path(dir.path(), 1), RECORD_MAGIC, RECORD_VERSION, &at).unwrap();
        let mut old = serde_json::to_value(record(2)).unwrap();
        for field in ["at_floor", "plain_try"] {
            old.as_object_mut().unwrap().remove(field).expect("the field is written");
        }
        old["bound"] = serde_json::json!(13);
        persist::write(&job_path(dir.path(), 2), RECORD_MAGIC, RECORD_VERSION, &old).unwrap();
        let mut trying = record(3);
        let plain_try = Some(crate::engine::driver::PlainTry { budget: 8_000, back_to: 15 });
        (trying.at_floor, trying.plain_try) = (true, plain_try);
        persist::write(&job_path(dir.path(), 3), RECORD_MAGIC, RECORD_VERSION, &trying).unwrap();
        let (jobs, _) = load_jobs(dir.path()).unwrap();
        let kept: Vec<_> = jobs.iter().map(|r| (r.bound, r.at_floor, r.plain_try)).collect();
        assert_eq!(kept, [(Some(13), true, None), (Some(13), false, None), (None, true, plain_try)]);
    }

    #[test]
    fn a_record_of_another_job_or_version_fails_that_job_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("jobs")).unwrap();
        persist::write(&job_path(dir.path(), 1), RECORD_MAGIC, RECORD_VERSION, &record(1)).unwrap();
        // a record under another job's name, and one of a later format version
        persist::write(&job_path(dir.path(), 2), RECORD_MAGIC, RECORD_VERSION, &record(5)).unwrap();
        persist::write(&job_path(dir.path(), 4), RECORD_MAGIC, RECORD_VERSION + 1, &record(4)).unwrap();
        let (jobs, next) = load_jobs(dir.path()).unwrap();
        let states: Vec<(u64, State)> = jobs.iter().map(|r| (r.id, r.state)).collect();
        assert_eq!(states, [(1, State::Queued), (2, State::Failed), (4, State::Failed)]);
        assert!(jobs[1].message.contains("holds job 5"), "{}", jobs[1].message);
        assert!(jobs[2].message.contains("format version 2 is not supported"), "{}", jobs[2].message);
        assert_eq!(next, 5);
        assert!(dir.path().join("jobs/4.job.corrupt").exists());
        // damaged again: the first damaged copy stays, the second gets its own name
        std::fs::write(job_path(dir.path(), 4), b"torn").unwrap();
        let (jobs, _) = load_jobs(dir.path()).unwrap();
        assert_eq!(jobs[2].state, State::Failed);
        assert!(dir.path().join("jobs/4.job.corrupt").exists() && dir.path().join("jobs/4.job.corrupt.2").exists());
        // a damaged copy whose stub was never written is a failed job, not a lost one
        std::fs::write(dir.path().join("jobs/6.job.corrupt"), b"torn").unwrap();
        let (jobs, next) = load_jobs(dir.path()).unwrap();
        assert_eq!((jobs.last().unwrap().id, jobs.last().unwrap().state, next), (6, State::Failed, 7));
    }

    #[test]
    fn a_directory_under_a_jobs_name_fails_that_job_alone_and_the_coordinator_starts() {
        // it stopped the coordinator's start: "reading jobs/11.job: Is a directory"
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("jobs/11.job")).unwrap();
        persist::write(&job_path(dir.path(), 1), RECORD_MAGIC, RECORD_VERSION, &record(1)).unwrap();
        let (jobs, next) = load_jobs(dir.path()).unwrap();
        let states: Vec<(u64, State)> = jobs.iter().map(|r| (r.id, r.state)).collect();
        assert_eq!((states, next), (vec![(1, State::Queued), (11, State::Failed)], 12));
        assert!(jobs[1].message.contains("11.job"), "{}", jobs[1].message);
        assert!(dir.path().join("jobs/11.job.corrupt").is_dir());
    }
}
