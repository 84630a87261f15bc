//! The worker node: its gRPC service (one job at a time, driven step by step by
//! the coordinator), its identity (a node id kept in the data dir, so a restarted
//! or replacement worker with the same data takes back its partitions), and the
//! join/heartbeat loop towards the coordinator.
//!
//! Threads: handlers are async and never compute; expand, merge, seal (checkpoint
//! writes), load (checkpoint reads) and seed run on rayon through [`run_cpu`].
//! Incoming successor batches are decoded inline in the `Deliver` handler on
//! purpose: a worker's rayon threads may be blocked sending to this very peer
//! (backpressure), so a receive path that waited for rayon could deadlock two
//! workers sending to each other. A batch is at most 64Ki keys, microseconds of work.

pub mod job;

use super::net::{rpc_err, CheckToken, NetConfig, Retry, WorkerClients};
use super::proto::worker_server::{Worker, WorkerServer};
use super::proto::*;
use super::{run_cpu, side_of, ClusterError, MAX_MESSAGE_BYTES, PROTOCOL_VERSION};
use crate::sys::{peak_rss_bytes, rss_bytes};
use job::{open_job, JobSpec, PeerSink, Table, WorkerJob};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Batches queued per peer stream before the expansion waits (backpressure).
const SEND_QUEUE: usize = 16;

/// How a worker is started.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub join: String,
    pub listen: SocketAddr,
    /// The address the others dial (default: `listen`).
    pub advertise: Option<String>,
    pub data_dir: PathBuf,
    pub mem: u64,
    pub net: NetConfig,
    /// Where Prometheus metrics are served (`--metrics`), if anywhere.
    pub metrics: Option<SocketAddr>,
}

struct State {
    node_id: String,
    incarnation: u64,
    data_dir: PathBuf,
    mem: u64,
    clients: WorkerClients,
    job: Mutex<Option<Arc<dyn WorkerJob>>>,
    keys_sent: AtomicU64,
    bytes_sent: AtomicU64,
    keys_local: AtomicU64,
    /// Successor keys spilled by the jobs this worker held before its current one.
    spilled_before: AtomicU64,
    /// The peak RSS last logged (see [`WorkerService::peak_after`]).
    peak_logged: AtomicU64,
}

/// The worker's gRPC service.
#[derive(Clone)]
pub struct WorkerService {
    st: Arc<State>,
}

fn check_version(v: u32, who: &str) -> Result<(), ClusterError> {
    if v != PROTOCOL_VERSION {
        return Err(ClusterError::FailedPrecondition(format!(
            "protocol version mismatch: the {who} speaks version {v}, this worker speaks version {PROTOCOL_VERSION}; run the same sokoshard release on every node"
        )));
    }
    Ok(())
}

/// A random-enough 64-bit value (process start identity, fresh node ids).
pub fn random_u64() -> u64 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    let bytes = [t.to_le_bytes().as_slice(), &std::process::id().to_le_bytes(), &n.to_le_bytes()].concat();
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// The node id kept in `data_dir/node-id`, created on first use.
pub fn node_id(data_dir: &std::path::Path) -> Result<String, ClusterError> {
    let p = data_dir.join("node-id");
    match std::fs::read_to_string(&p) {
        Ok(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        _ => {
            std::fs::create_dir_all(data_dir)
                .map_err(|e| ClusterError::io(format!("creating the data directory {}", data_dir.display()), e))?;
            let id = format!("w-{:016x}", random_u64());
            let tmp = data_dir.join("node-id.tmp");
            std::fs::write(&tmp, format!("{id}\n"))
                .map_err(|e| ClusterError::io(format!("writing {}", tmp.display()), e))?;
            std::fs::rename(&tmp, &p).map_err(|e| ClusterError::io(format!("writing {}", p.display()), e))?;
            Ok(id)
        }
    }
}

impl WorkerService {
    /// Logs the process's peak RSS after `phase` when it has risen by a MiB
    /// or more since it was last logged, so that an operator (or a test)
    /// whose worker outgrew `--mem` sees which phase took it there.
    fn peak_after(&self, phase: &'static str) {
        let peak = peak_rss_bytes();
        let last = self.st.peak_logged.load(Ordering::Relaxed);
        if peak >= last + (1 << 20)
            && self.st.peak_logged.compare_exchange(last, peak, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            tracing::info!(phase, peak_rss_kib = peak >> 10, rss_kib = rss_bytes() >> 10, "peak rss rose");
        }
    }

    pub fn new(node_id: String, data_dir: PathBuf, mem: u64, net: NetConfig) -> Self {
        WorkerService {
            st: Arc::new(State {
                node_id,
                incarnation: random_u64(),
                data_dir,
                mem,
                clients: WorkerClients::new(net),
                job: Mutex::new(None),
                keys_sent: AtomicU64::new(0),
                bytes_sent: AtomicU64::new(0),
                keys_local: AtomicU64::new(0),
                spilled_before: AtomicU64::new(0),
                peak_logged: AtomicU64::new(0),
            }),
        }
    }

    pub fn incarnation(&self) -> u64 {
        self.st.incarnation
    }

    /// Puts `new` in place of the held job (if `id` is given, only if the held
    /// job is that one), keeping the old job's spill count.
    fn replace_job(&self, new: Option<Arc<dyn WorkerJob>>, id: Option<u64>) {
        let mut g = self.st.job.lock().unwrap_or_else(|e| e.into_inner());
        if id.is_some_and(|id| g.as_ref().is_some_and(|j| j.id() != id)) {
            return;
        }
        if let Some(old) = std::mem::replace(&mut *g, new) {
            self.st.spilled_before.fetch_add(old.spilled_keys(), Ordering::Relaxed);
        }
    }

    fn job(&self, id: u64) -> Result<Arc<dyn WorkerJob>, ClusterError> {
        match &*self.st.job.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(j) if j.id() == id => Ok(j.clone()),
            // a worker that does not hold the job has restarted or was never told:
            // the coordinator pauses and reloads, as for a lost worker
            Some(j) => Err(ClusterError::Unavailable(format!(
                "worker {} does not hold job {id} (it holds job {})",
                self.st.node_id,
                j.id()
            ))),
            None => Err(ClusterError::Unavailable(format!("worker {} does not hold job {id}", self.st.node_id))),
        }
    }

    /// This worker's numbers, for heartbeats.
    pub fn stats(&self) -> WorkerStats {
        let job = self.st.job.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let (b, parts, spilled) =
            job.map_or((Default::default(), 0, 0), |j| (j.bytes(), j.owned() as u32, j.spilled_keys()));
        let spilled = spilled + self.st.spilled_before.load(Ordering::Relaxed);
        WorkerStats {
            rss_bytes: rss_bytes(),
            peak_rss_bytes: peak_rss_bytes(),
            store_memory_bytes: b.memory,
            store_disk_bytes: b.disk,
            partitions: parts,
            keys_sent: self.st.keys_sent.load(Ordering::Relaxed),
            bytes_sent: self.st.bytes_sent.load(Ordering::Relaxed),
            keys_local: self.st.keys_local.load(Ordering::Relaxed),
            spilled_keys: spilled,
        }
    }

    /// The worker's Prometheus metrics.
    pub fn metrics(&self) -> String {
        let s = self.stats();
        let job = self.st.job.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut m = crate::cluster::http::Exposition::default();
        m.one("sokoshard_worker_memory_budget_bytes", "gauge", "This worker's --mem.", self.st.mem as f64);
        m.one("sokoshard_worker_rss_bytes", "gauge", "Resident memory of this process.", s.rss_bytes as f64);
        m.one(
            "sokoshard_worker_peak_rss_bytes",
            "gauge",
            "Peak resident memory of this process.",
            s.peak_rss_bytes as f64,
        );
        m.one(
            "sokoshard_worker_store_memory_bytes",
            "gauge",
            "Bytes of the job's state store in memory.",
            s.store_memory_bytes as f64,
        );
        m.one(
            "sokoshard_worker_disk_bytes",
            "gauge",
            "Bytes of the job's state store on disk (spilled and checkpointed).",
            s.store_disk_bytes as f64,
        );
        m.one(
            "sokoshard_worker_spilled_keys_total",
            "counter",
            "Successor keys written to disk to wait for their merge (over the budget's share).",
            s.spilled_keys as f64,
        );
        m.one("sokoshard_worker_partitions", "gauge", "Partitions of the job this worker owns.", s.partitions as f64);
        m.one(
            "sokoshard_worker_job",
            "gauge",
            "The id of the job this worker holds (0: none).",
            job.map_or(0.0, |j| j.id() as f64),
        );
        m.one(
            "sokoshard_worker_keys_sent_total",
            "counter",
            "Successor keys sent to other workers.",
            s.keys_sent as f64,
        );
        m.one(
            "sokoshard_worker_bytes_sent_total",
            "counter",
            "Successor bytes sent to other workers.",
            s.bytes_sent as f64,
        );
        m.one(
            "sokoshard_worker_keys_local_total",
            "counter",
            "Successor keys routed to this worker's own partitions.",
            s.keys_local as f64,
        );
        m.finish()
    }

    /// The service wrapped with the token check and size limits.
    pub fn server(
        self,
        token: &str,
    ) -> tonic::service::interceptor::InterceptedService<WorkerServer<Self>, CheckToken> {
        tonic::service::interceptor::InterceptedService::new(
            WorkerServer::new(self)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            CheckToken::new(token),
        )
    }
}

fn table_of(t: Option<PartitionTable>) -> Result<Table, ClusterError> {
    let t = t.ok_or_else(|| ClusterError::InvalidArgument("no partition table".into()))?;
    let n = t.owners.len();
    if n == 0 || !n.is_power_of_two() || n > 1 << 16 {
        return Err(ClusterError::InvalidArgument(format!("{n} partitions: need a power of two up to 65536")));
    }
    if t.nodes.len() != t.addresses.len() || t.nodes.is_empty() {
        return Err(ClusterError::InvalidArgument("partition table: nodes and addresses differ in number".into()));
    }
    if let Some(o) = t.owners.iter().find(|&&o| o as usize >= t.nodes.len()) {
        return Err(ClusterError::InvalidArgument(format!("partition table: owner #{o} does not exist")));
    }
    Ok(Table { nodes: t.nodes, addresses: t.addresses, owners: t.owners })
}

type R<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl Worker for WorkerService {
    async fn hello(&self, req: Request<HelloRequest>) -> R<HelloReply> {
        check_version(req.get_ref().protocol_version, "coordinator")?;
        Ok(Response::new(HelloReply {
            protocol_version: PROTOCOL_VERSION,
            node_id: self.st.node_id.clone(),
            incarnation: self.st.incarnation,
        }))
    }

    async fn load(&self, req: Request<LoadRequest>) -> R<LoadReply> {
        let r = req.into_inner();
        check_version(r.protocol_version, "coordinator")?;
        if r.level_text.len() > super::MAX_LEVEL_TEXT {
            return Err(ClusterError::TooLarge(format!("level text of {} bytes", r.level_text.len())).into());
        }
        let table = table_of(r.table)?;
        let me = table.nodes.iter().position(|n| *n == self.st.node_id).ok_or_else(|| {
            ClusterError::FailedPrecondition(format!(
                "worker {} is not in job {}'s partition table",
                self.st.node_id, r.job_id
            ))
        })? as u32;
        let want = [r.forward_layers as usize, r.backward_layers as usize];
        let phase = if r.phase.is_empty() { super::MAIN_PHASE.to_string() } else { r.phase.clone() };
        if !phase.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') || phase.len() > 64 {
            return Err(ClusterError::InvalidArgument(format!("phase {phase:?}")).into());
        }
        let current = self.st.job.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(j) = current {
            let t = j.table();
            if j.id() == r.job_id
                && j.phase() == phase
                && j.layers() == want
                && t.nodes == table.nodes
                && t.owners == table.owners
                && j.me() == me
            {
                // the job is here as asked: drop any partial step, start the
                // step fence again, take new addresses
                j.reload();
                j.set_addresses(table.addresses);
                tracing::info!(job = r.job_id, forward = want[0], backward = want[1], "job kept");
                return Ok(Response::new(LoadReply {
                    limbs: j.limbs(),
                    forward_layers: want[0] as u32,
                    backward_layers: want[1] as u32,
                }));
            }
            j.abort(None);
        }
        self.replace_job(None, None);
        let spec = JobSpec {
            job_id: r.job_id,
            level_text: r.level_text,
            no_freeze: r.options.as_ref().is_some_and(|o| o.no_freeze),
            pi_corrals: r.pi_corrals,
            table,
            me,
            node_id: self.st.node_id.clone(),
            want,
            dir: self.st.data_dir.join("jobs").join(r.job_id.to_string()).join(&phase),
            phase: phase.clone(),
            boxes: r.boxes as usize,
            kpg: r.kpg_tables,
            bound: (r.bound_limit > 0).then(|| (r.bound_limit - 1, r.pair_penalties)),
            triples: r.options.as_ref().is_some_and(|o| o.triples),
            mem: self.st.mem,
            threads: rayon::current_num_threads(),
        };
        let j = run_cpu(move || open_job(spec)).await??;
        self.peak_after("load");
        tracing::info!(job = r.job_id, phase = %phase, forward = want[0], backward = want[1], partitions = j.owned(), "job loaded");
        let reply = LoadReply { limbs: j.limbs(), forward_layers: want[0] as u32, backward_layers: want[1] as u32 };
        self.replace_job(Some(j), None);
        Ok(Response::new(reply))
    }

    async fn seed(&self, req: Request<SeedRequest>) -> R<SeedReply> {
        let r = req.into_inner();
        let side = side_of(r.side)?;
        let j = self.job(r.job_id)?;
        let states = run_cpu(move || j.seed(side, &r.keys)).await??;
        self.peak_after("seed");
        Ok(Response::new(SeedReply { states }))
    }

    async fn expand(&self, req: Request<ExpandRequest>) -> R<ExpandReply> {
        let r = req.into_inner();
        let side = side_of(r.side)?;
        let j = self.job(r.job_id)?;
        j.can_expand(side, r.layer as usize, !r.only.is_empty())?;
        let cancel = j.enter(r.step)?;
        let table = j.table();
        let me = j.me() as usize;
        let mut sinks: Vec<Option<PeerSink>> = Vec::new();
        let mut tasks = Vec::new();
        for (i, addr) in table.addresses.iter().enumerate() {
            if i == me || !table.owners.contains(&(i as u32)) {
                sinks.push(None);
                continue;
            }
            let (tx, rx) = mpsc::channel::<KeyBatch>(SEND_QUEUE);
            let failed = Arc::new(AtomicBool::new(false));
            let failed_event = Arc::new(tokio::sync::Notify::new());
            let mut client = self.st.clients.get(addr)?;
            let (f, fe, a) = (failed.clone(), failed_event.clone(), addr.clone());
            tasks.push((
                addr.clone(),
                tokio::spawn(async move {
                    let res = client.deliver(ReceiverStream::new(rx)).await;
                    if let Err(e) = &res {
                        f.store(true, Ordering::SeqCst);
                        fe.notify_waiters();
                        tracing::warn!(peer = %a, error = %e, "successor stream failed");
                    }
                    res
                }),
            ));
            sinks.push(Some(PeerSink {
                tx,
                failed,
                failed_event,
                runtime: tokio::runtime::Handle::current(),
                addr: addr.clone(),
            }));
        }
        let jj = j.clone();
        let layer = r.layer as usize;
        let (only, step) = (r.only, r.step);
        let res = run_cpu(move || jj.expand(side, layer, step, &cancel, sinks, &only)).await;
        for (addr, t) in tasks {
            match t.await {
                Ok(Ok(_)) => {}
                Ok(Err(status)) => {
                    // this step's, if it is still the current one
                    j.abort(Some(step));
                    return Err(rpc_err("delivering successors", &addr, status).into());
                }
                Err(e) => return Err(ClusterError::Internal(format!("delivery task: {e}")).into()),
            }
        }
        let reply = res??;
        self.peak_after("expand");
        self.st.keys_sent.fetch_add(reply.keys_sent, Ordering::Relaxed);
        self.st.bytes_sent.fetch_add(reply.bytes_sent, Ordering::Relaxed);
        self.st.keys_local.fetch_add(reply.keys_local, Ordering::Relaxed);
        tracing::debug!(
            job = r.job_id,
            side = side.name(),
            layer,
            expanded = reply.expanded,
            keys_sent = reply.keys_sent,
            bytes_sent = reply.bytes_sent,
            "layer expanded"
        );
        Ok(Response::new(reply))
    }

    async fn deliver(&self, req: Request<Streaming<KeyBatch>>) -> R<DeliverReply> {
        let mut stream = req.into_inner();
        let (mut batches, mut keys) = (0u64, 0u64);
        while let Some(b) = stream.message().await? {
            let j = self.job(b.job_id)?;
            // off the async threads: a batch over the exchange's share writes a
            // run file; not on rayon, whose threads may be waiting to send to
            // this very worker
            keys += tokio::task::spawn_blocking(move || j.deliver(&b))
                .await
                .map_err(|e| ClusterError::Internal(format!("delivery: {e}")))??;
            batches += 1;
        }
        self.peak_after("deliver");
        Ok(Response::new(DeliverReply { batches, keys }))
    }

    async fn merge(&self, req: Request<MergeRequest>) -> R<MergeReply> {
        let r = req.into_inner();
        let side = side_of(r.side)?;
        let j = self.job(r.job_id)?;
        let reply = run_cpu(move || j.merge(side, r.step, r.check_other)).await??;
        self.peak_after("merge");
        Ok(Response::new(reply))
    }

    async fn seal(&self, req: Request<SealRequest>) -> R<SealReply> {
        let r = req.into_inner();
        let side = side_of(r.side)?;
        let j = self.job(r.job_id)?;
        let reply = run_cpu(move || j.seal(side, r.step, r.layer as usize)).await??;
        self.peak_after("seal");
        Ok(Response::new(reply))
    }

    async fn abort(&self, req: Request<AbortRequest>) -> R<AbortReply> {
        let r = req.get_ref();
        if let Ok(j) = self.job(r.job_id) {
            j.abort((r.step != 0).then_some(r.step));
        }
        Ok(Response::new(AbortReply {}))
    }

    async fn lookup(&self, req: Request<LookupRequest>) -> R<LookupReply> {
        let r = req.into_inner();
        let side = side_of(r.side)?;
        let j = self.job(r.job_id)?;
        // a batch of lookups is store reads: on rayon, not in the async task
        let found = run_cpu(move || j.lookup(side, r.layer as usize, &r.keys)).await??;
        self.peak_after("lookup");
        Ok(Response::new(LookupReply { found }))
    }

    async fn common(&self, req: Request<CommonRequest>) -> R<CommonReply> {
        let r = req.into_inner();
        let j = self.job(r.job_id)?;
        let max = MAX_MESSAGE_BYTES / 2 / (j.limbs() as usize * 8).max(1);
        let (keys, count) =
            run_cpu(move || j.common(r.forward_layer as usize, r.backward_layer as usize, max)).await??;
        self.peak_after("common");
        Ok(Response::new(CommonReply { keys, count }))
    }

    async fn unload(&self, req: Request<UnloadRequest>) -> R<UnloadReply> {
        let id = req.get_ref().job_id;
        self.replace_job(None, Some(id));
        let dir = self.st.data_dir.join("jobs").join(id.to_string());
        if dir.exists() {
            run_cpu(move || std::fs::remove_dir_all(&dir))
                .await?
                .map_err(|e| ClusterError::io("removing a job's checkpoint", e))?;
        }
        tracing::info!(job = id, "job unloaded");
        Ok(Response::new(UnloadReply {}))
    }

    type KpgCollectStream = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<KpgCollectReply, Status>> + Send>>;

    async fn kpg_collect(&self, req: Request<KpgCollectRequest>) -> R<Self::KpgCollectStream> {
        let r = req.into_inner();
        let side = side_of(r.side)?;
        let j = self.job(r.job_id)?;
        // chunks of 256 Ki keys stay far below the message limit for any width
        let chunks = run_cpu(move || j.collect(side, 1 << 18)).await??;
        self.peak_after("kpg collect");
        let items: Vec<Result<KpgCollectReply, Status>> =
            chunks.into_iter().map(|keys| Ok(KpgCollectReply { keys })).collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(items))))
    }
}

/// Runs a worker: serves the worker API on `listen` and keeps itself joined
/// to the coordinator, until `shutdown` completes (then it tells the
/// coordinator it leaves, so that it is not taken for lost) or the
/// coordinator refuses it for good.
pub async fn serve(cfg: WorkerConfig, shutdown: impl std::future::Future<Output = ()>) -> Result<(), ClusterError> {
    // held until the worker ends: one process per checkpoint and node id
    let _lock = crate::cluster::persist::lock_data_dir(&cfg.data_dir, "worker")?;
    let node = node_id(&cfg.data_dir)?;
    let svc = WorkerService::new(node.clone(), cfg.data_dir.clone(), cfg.mem, cfg.net.clone());
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| ClusterError::io(format!("listening on {}", cfg.listen), e))?;
    let local = listener.local_addr().map_err(|e| ClusterError::io("reading the listen address", e))?;
    let advertise = cfg.advertise.clone().unwrap_or_else(|| local.to_string());
    if cfg.advertise.is_none() && local.ip().is_unspecified() {
        tracing::warn!(
            advertise = %advertise,
            "listening on every address without --advertise: the address given to the coordinator and peers \
             reaches this worker from this host only; pass --advertise HOST:PORT"
        );
    }
    tracing::info!(node = %node, listen = %local, advertise = %advertise, data_dir = %cfg.data_dir.display(), "worker listening");
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = cfg.net.server_tls()? {
        builder = builder.tls_config(tls)?;
    }
    if let Some(addr) = cfg.metrics {
        let s = svc.clone();
        let handler = Arc::new(move |req: &hyper::Request<hyper::body::Incoming>| match req.uri().path() {
            "/metrics" => crate::cluster::http::metrics(s.metrics()),
            p => crate::cluster::http::text(hyper::StatusCode::NOT_FOUND, format!("{p}: only /metrics is served here")),
        });
        crate::cluster::http::spawn(addr, "metrics", cfg.net.token.clone(), handler).await?;
    }
    // one service per node: served directly, no router
    let server =
        builder.serve_with_incoming(svc.clone().server(&cfg.net.token), crate::cluster::net::incoming(listener));
    // the heartbeat ends only when the coordinator refuses this worker for good
    let incarnation = svc.incarnation();
    tokio::select! {
        r = server => r.map_err(ClusterError::from),
        refused = heartbeat_loop(svc, cfg.clone(), node.clone(), advertise) => Err(refused),
        () = shutdown => {
            leave(&cfg, node, incarnation).await;
            Ok(())
        }
    }
}

/// Tells the coordinator this worker leaves (within a few seconds; a
/// coordinator that cannot be told counts the worker lost, as before).
async fn leave(cfg: &WorkerConfig, node_id: String, incarnation: u64) {
    let said = async {
        let mut client = cfg.net.coordinator_client(&cfg.join)?;
        client.leave(LeaveRequest { node_id, incarnation }).await.map_err(|s| rpc_err("leaving", &cfg.join, s))?;
        Ok::<(), ClusterError>(())
    };
    match tokio::time::timeout(Duration::from_secs(3), said).await {
        Ok(Ok(())) => tracing::info!(coordinator = %cfg.join, "stopping: left the cluster"),
        Ok(Err(e)) => tracing::warn!(error = %e, "stopping: the coordinator was not told"),
        Err(_) => tracing::warn!(coordinator = %cfg.join, "stopping: the coordinator did not answer within 3 s"),
    }
}

/// Joins the coordinator and heartbeats forever; returns only the error that
/// makes going on pointless (no client, a wrong token or protocol).
async fn heartbeat_loop(svc: WorkerService, cfg: WorkerConfig, node: String, advertise: String) -> ClusterError {
    let mut client = match cfg.net.coordinator_client(&cfg.join) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let join = JoinRequest {
        protocol_version: PROTOCOL_VERSION,
        node_id: node.clone(),
        incarnation: svc.incarnation(),
        address: advertise,
        memory_bytes: cfg.mem,
        cores,
        data_dir: cfg.data_dir.display().to_string(),
    };
    let mut period = Duration::from_millis(1000);
    let mut joined = false;
    // a coordinator that is not up yet or gone for a while: tries further
    // apart (up to a few seconds) and a log line a minute, not one per try
    let mut joining = Retry::new(Duration::from_millis(500), Duration::from_secs(4));
    // heartbeats keep their period: only this one's log gate is used
    let mut beating = Retry::new(period, period);
    loop {
        if !joined {
            match client.join(join.clone()).await {
                Ok(r) => {
                    joined = true;
                    period = Duration::from_millis(r.get_ref().heartbeat_millis.clamp(100, 60_000) as u64);
                    let failed = joining.succeeded(Instant::now()).map_or(0, |f| f.failures);
                    tracing::info!(coordinator = %cfg.join, failed_tries = failed, "joined the cluster");
                }
                Err(s) if matches!(s.code(), tonic::Code::Unauthenticated | tonic::Code::FailedPrecondition) => {
                    // a wrong token or protocol never fixes itself: say so and stop
                    return ClusterError::FailedPrecondition(format!(
                        "the coordinator at {} refused this worker: {}",
                        cfg.join,
                        s.message()
                    ));
                }
                Err(s) => joining.failed_at_coordinator("join failed, retrying", &cfg.join, s.message()),
            }
        } else {
            let hb =
                HeartbeatRequest { node_id: node.clone(), incarnation: svc.incarnation(), stats: Some(svc.stats()) };
            match client.heartbeat(hb).await {
                Ok(r) => {
                    if let Some(f) = beating.succeeded(Instant::now()) {
                        tracing::info!(
                            failed = f.failures,
                            seconds = f.seconds,
                            "heartbeats reach the coordinator again"
                        );
                    }
                    if !r.get_ref().known {
                        tracing::info!("the coordinator does not know this worker, joining again");
                        joined = false;
                        continue;
                    }
                }
                Err(s) => beating.failed_at_coordinator("heartbeat failed", &cfg.join, s.message()),
            }
        }
        tokio::time::sleep(if joined { period } else { joining.wait() }).await;
    }
}
