//! The cluster commands: `coordinator`, `worker`, `submit`, `status`, `cancel`
//! and `bench-cluster`. Each builds a tokio runtime and calls the library's
//! cluster room; results print exactly as `solve` prints them.

use super::output::{print_level, print_summary_of};
use super::replay::{replay_of, write_replay};
use super::{read_collection, Selection, EXIT_BAD_INPUT, EXIT_NOT_SOLVED, EXIT_OK};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sokoshard::cluster::client::{Client, JobView, SubmitOptions};
use sokoshard::cluster::coordinator::CoordinatorConfig;
use sokoshard::cluster::net::{NetConfig, TlsFiles};
use sokoshard::cluster::worker::WorkerConfig;
use sokoshard::solve::Status;
use sokoshard::storage::budget::{default_budget, parse_size};
use sokoshard::sys::human_bytes;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The cluster token and TLS files every cluster command takes.
#[derive(clap::Args, Debug, Clone)]
pub struct NetArgs {
    /// Cluster token carried by every RPC (all nodes and clients share it).
    #[arg(long, env = "SOKOSHARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// TLS certificate (PEM) this node serves; with --tls-key turns TLS on.
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for --tls-cert.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// CA certificate (PEM) to check the servers this node dials; turns TLS on
    /// for outgoing connections.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// Name to check server certificates against (default: the dialled host).
    #[arg(long)]
    pub tls_domain: Option<String>,
}

impl NetArgs {
    pub fn config(&self) -> Result<NetConfig> {
        let token = self.token.clone().unwrap_or_default();
        anyhow::ensure!(!token.is_empty(), "a cluster command needs the cluster token: --token or SOKOSHARD_TOKEN");
        // what a client can send in a header: a server that took any other
        // token (a trailing newline from a secret file) could never be reached
        sokoshard::cluster::net::AttachToken::new(&token)
            .context("--token or SOKOSHARD_TOKEN: only printable ASCII (a trailing newline from a file?)")?;
        anyhow::ensure!(self.tls_cert.is_some() == self.tls_key.is_some(), "--tls-cert and --tls-key go together");
        let mut net = NetConfig::new(token);
        if self.tls_cert.is_some() || self.tls_ca.is_some() {
            net.tls = Some(TlsFiles {
                cert: self.tls_cert.clone(),
                key: self.tls_key.clone(),
                ca: self.tls_ca.clone(),
                domain: self.tls_domain.clone(),
            });
        }
        Ok(net)
    }
}

#[derive(clap::Args)]
pub struct CoordinatorArgs {
    /// Address to serve on, e.g. 0.0.0.0:7400.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Where the job log lives.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Serve the status page (HTML, plain HTTP) on this address, e.g.
    /// 0.0.0.0:7480; open it as http://HOST:PORT/?token=TOKEN.
    #[arg(long)]
    pub http: Option<SocketAddr>,
    #[command(flatten)]
    pub net: NetArgs,
    /// Milliseconds between worker heartbeats.
    #[arg(long, default_value_t = 1000)]
    pub heartbeat_ms: u64,
    /// Seconds without a heartbeat after which a worker is lost.
    #[arg(long, default_value_t = 5.0, value_parser = super::positive_seconds)]
    pub heartbeat_timeout: f64,
    /// Seconds a job waits for a lost worker to come back before it fails.
    #[arg(long, default_value_t = 600.0, value_parser = super::positive_seconds)]
    pub resume_timeout: f64,
    /// Seconds after which a spare worker (alive, outside the job) takes over a
    /// lost worker's partitions, rebuilding their layers from the others'.
    #[arg(long, default_value_t = 120.0, value_parser = super::seconds)]
    pub replace_after: f64,
    /// Memory budget for what runs in the coordinator, e.g. 2G or 512M
    /// (default: half the memory this process may use: the machine's, or its container's limit): the probe holds at most a
    /// quarter of it, and the moves pass keeps a quarter of it in memory and
    /// the rest of the push-optimal states under the data dir.
    #[arg(long)]
    pub mem: Option<String>,
    /// Workers a new job waits for before its partitions are assigned.
    #[arg(long, default_value_t = 1)]
    pub min_workers: usize,
    /// Test knob: pause this many milliseconds after every layer.
    #[arg(long, default_value_t = 0, hide = true)]
    pub layer_delay_ms: u64,
    /// Test knob: pause this many milliseconds after every layer of the moves pass.
    #[arg(long, default_value_t = 0, hide = true)]
    pub moves_delay_ms: u64,
}

#[derive(clap::Args)]
pub struct WorkerArgs {
    /// The coordinator's address.
    #[arg(long)]
    pub join: String,
    /// Address to serve on, e.g. 0.0.0.0:7401.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Address the coordinator and other workers dial (default: --listen).
    #[arg(long)]
    pub advertise: Option<String>,
    /// Where this worker keeps its identity and its checkpoints.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Serve Prometheus metrics (plain HTTP, behind the cluster token) on this
    /// address, e.g. 0.0.0.0:7490; the path is /metrics.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Memory budget, e.g. 4G or 512M (default: half the memory this process may use: the machine's, or its container's limit):
    /// half of it holds layers in RAM, the rest spills to the data dir.
    #[arg(long)]
    pub mem: Option<String>,
    /// Threads for expanding and merging (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub net: NetArgs,
}

#[derive(clap::Args)]
pub struct SubmitArgs {
    /// The coordinator's address.
    #[arg(long)]
    pub coordinator: String,
    /// Collection file (XSB/SOK), or - for standard input.
    pub file: PathBuf,
    #[command(flatten)]
    pub select: Selection,
    /// Use k-packet-game deadlock tables for k = 1 to this k (0: none; default:
    /// as many k as pay, as `solve`).
    #[arg(long)]
    pub kpg: Option<u32>,
    /// Number of state partitions (a power of two; default: the coordinator's).
    #[arg(long)]
    pub partitions: Option<u32>,
    /// Per-level time limit in seconds; the level reports `timeout`.
    #[arg(long, value_parser = super::positive_seconds)]
    pub timeout: Option<f64>,
    /// Stop a level (status `limit`) once this many states are stored (a
    /// failed plain try's states, dropped between bound iterations, do not count).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_states: Option<u64>,
    /// Turn off freeze-deadlock pruning and the frozen-target matching built on it.
    #[arg(long)]
    pub no_freeze: bool,
    /// Turn off the PI-corral move restriction of the forward search.
    #[arg(long)]
    pub no_pi_corrals: bool,
    /// Keep the PI-corral restriction also on a level where a sample of its
    /// states shows it drops almost no push (as `solve --keep-pi-corrals`).
    #[arg(long, conflicts_with = "no_pi_corrals")]
    pub keep_pi_corrals: bool,
    /// The plain search: no push-distance bound (as `solve --no-bound`).
    #[arg(long)]
    pub no_bound: bool,
    /// One bounded iteration at this many pushes (as `solve --upper-bound`).
    #[arg(long, value_name = "N", conflicts_with = "no_bound", value_parser = clap::value_parser!(u32).range(1..))]
    pub upper_bound: Option<u32>,
    /// Bound by the matching alone, without the pair penalties.
    #[arg(long, conflicts_with = "no_bound")]
    pub no_pair_penalties: bool,
    /// No probes (as `solve --no-probe`).
    #[arg(long, conflicts_with = "no_bound")]
    pub no_probe: bool,
    /// Also bound by the 3-box games' triple penalties (as `solve --triples`).
    #[arg(long, conflicts_with_all = ["no_bound", "no_pair_penalties"])]
    pub triples: bool,
    /// What the solution must be optimal for (as `solve --objective`).
    #[arg(long, value_enum, default_value = "pushes,moves")]
    pub objective: super::solve::ObjectiveArg,
    /// The most states the moves pass's search may store (as `solve --moves-states`).
    #[arg(long, value_name = "N", value_parser = super::solve::parse_states)]
    pub moves_states: Option<u64>,
    /// One JSON object per level on stdout.
    #[arg(long)]
    pub json: bool,
    /// Write a replay page (HTML) of the solved levels to this file.
    #[arg(long, conflicts_with = "detach")]
    pub html: Option<PathBuf>,
    /// Print the job ids and return at once.
    #[arg(long)]
    pub detach: bool,
    /// Seconds to keep trying when the coordinator is unreachable mid-job.
    #[arg(long, default_value_t = 300.0, value_parser = super::seconds)]
    pub reconnect_timeout: f64,
    #[command(flatten)]
    pub net: NetArgs,
}

#[derive(clap::Args)]
pub struct StatusArgs {
    /// The coordinator's address.
    #[arg(long)]
    pub coordinator: String,
    /// One JSON object {"workers": [...], "jobs": [...]}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub net: NetArgs,
}

#[derive(clap::Args)]
pub struct CancelArgs {
    /// The coordinator's address.
    #[arg(long)]
    pub coordinator: String,
    /// The job id (as `submit --detach` and `status` print it).
    pub job: u64,
    #[command(flatten)]
    pub net: NetArgs,
}

pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")
}

pub fn run_coordinator(a: CoordinatorArgs) -> Result<ExitCode> {
    anyhow::ensure!(a.min_workers >= 1, "--min-workers must be at least 1: a job runs on workers");
    let cfg = CoordinatorConfig {
        listen: a.listen,
        http: a.http,
        data_dir: a.data_dir,
        net: a.net.config()?,
        heartbeat: Duration::from_millis(a.heartbeat_ms.max(50)),
        heartbeat_timeout: Duration::from_secs_f64(a.heartbeat_timeout),
        resume_timeout: Duration::from_secs_f64(a.resume_timeout),
        replace_after: Duration::from_secs_f64(a.replace_after),
        min_workers: a.min_workers,
        layer_delay: Duration::from_millis(a.layer_delay_ms),
        moves_delay: Duration::from_millis(a.moves_delay_ms),
        mem: a.mem.as_deref().map(parse_size).transpose().map_err(|e| anyhow::anyhow!("--mem: {e}"))?,
    };
    if let Some(m) = cfg.mem {
        super::check_mem(m, true);
    }
    runtime()?.block_on(sokoshard::cluster::coordinator::serve(cfg))?;
    Ok(ExitCode::from(EXIT_OK))
}

pub fn run_worker(a: WorkerArgs) -> Result<ExitCode> {
    let mem = match &a.mem {
        Some(s) => parse_size(s).map_err(|e| anyhow::anyhow!("--mem: {e}"))?,
        None => default_budget(),
    };
    super::check_mem(mem, true);
    let threads = super::threads(a.threads, true)?;
    // a worker always runs under its memory budget
    sokoshard::sys::release_large_frees(threads);
    rayon::ThreadPoolBuilder::new().num_threads(threads).build_global().context("starting worker threads")?;
    let cfg = WorkerConfig {
        join: a.join,
        listen: a.listen,
        advertise: a.advertise,
        data_dir: a.data_dir,
        mem,
        net: a.net.config()?,
        metrics: a.metrics,
    };
    // Ctrl-C, SIGTERM (a container stopped) or SIGHUP: leave the cluster
    // cleanly instead of being taken for lost
    super::on_stop_signals(super::StopOn::InterruptTermAndHangUp, || WORKER_STOP.notify_one());
    runtime()?.block_on(sokoshard::cluster::worker::serve(cfg, WORKER_STOP.notified()))?;
    Ok(ExitCode::from(EXIT_OK))
}

/// Woken by a stop signal to a worker.
static WORKER_STOP: tokio::sync::Notify = tokio::sync::Notify::const_new();

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// Woken by the Ctrl-C handler after it sets [`INTERRUPTED`].
static INTERRUPT: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Returns once Ctrl-C was pressed (at once if it already was).
async fn interrupted() {
    loop {
        // registered before the flag is read, so a press in between still wakes it
        let woken = INTERRUPT.notified();
        if INTERRUPTED.load(Ordering::SeqCst) {
            return;
        }
        woken.await;
    }
}

fn spinner(label: String) -> Option<ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let b = ProgressBar::new_spinner();
        b.set_style(ProgressStyle::with_template("{spinner} {prefix} {wide_msg}").expect("static template"));
        b.set_prefix(label);
        b.enable_steady_tick(Duration::from_millis(200));
        b
    })
}

fn progress_line(v: &JobView) -> String {
    let bound = match (v.bound, v.plain_try) {
        (Some(u), _) => format!(" | bound {u}"),
        (None, Some(t)) => format!(" | plain try within {} states, then bound {}", t.budget, t.back_to),
        (None, None) => String::new(),
    };
    let mut s = format!(
        "{}{bound} | {} layer {} | frontier fwd {} bwd {} | stored {} | {:.0} states/s | workers' store {}",
        v.state,
        v.side,
        v.layer,
        v.frontier_forward,
        v.frontier_backward,
        v.stored,
        v.rate,
        human_bytes(v.memory_bytes)
    );
    if !v.message.is_empty() {
        s.push_str(&format!(" | {}", v.message));
    }
    s
}

pub fn run_submit(a: SubmitArgs) -> Result<ExitCode> {
    super::solve::check_moves_states(a.objective, a.moves_states)?;
    super::solve::check_kpg(a.kpg.map(|k| k as usize))?;
    let net = a.net.config()?;
    let all = read_collection(&a.file)?;
    let source = a.file.display().to_string();
    let picked = a.select.pick(&all, &source)?;
    if let Some(path) = &a.html {
        super::check_output("--html", path, &[("the level file", a.file.as_path())])?;
    }
    if let Some(p) = a.partitions {
        anyhow::ensure!(p.is_power_of_two() && p <= 1 << 16, "--partitions {p} must be a power of two up to 65536");
    }
    let opts = SubmitOptions {
        partitions: a.partitions.unwrap_or(0),
        no_freeze: a.no_freeze,
        no_pi_corrals: a.no_pi_corrals,
        max_states: a.max_states,
        timeout: a.timeout,
        kpg: a.kpg,
        no_bound: a.no_bound,
        upper_bound: a.upper_bound,
        no_pair_penalties: a.no_pair_penalties,
        no_probe: a.no_probe,
        pushes_only: a.objective == super::solve::ObjectiveArg::Pushes,
        moves_states: a.moves_states,
        triples: a.triples,
        keep_pi_corrals: a.keep_pi_corrals,
    };
    super::on_stop_signals(super::StopOn::Interrupt, || {
        INTERRUPTED.store(true, Ordering::SeqCst);
        INTERRUPT.notify_waiters();
    });
    let rt = runtime()?;
    rt.block_on(async move {
        let mut client = Client::new(&net, &a.coordinator)?;
        let mut ids = Vec::new();
        // per level picked, in order: its job (an index into `ids`), or why
        // it was not submitted (printed in its place among the results)
        let mut order: Vec<Result<usize, (&sokoshard::model::level::LevelText, String)>> = Vec::new();
        for t in &picked {
            match t.parse() {
                Ok(level) => {
                    let id = client.submit(&level.to_xsb(), &t.title, t.index as u32, &opts).await?;
                    order.push(Ok(ids.len()));
                    ids.push((id, *t, level));
                }
                Err(e) => order.push(Err((*t, e.to_string()))),
            }
        }
        if a.detach {
            for entry in &order {
                match entry {
                    Ok(i) => {
                        let (id, t, _) = &ids[*i];
                        if a.json {
                            outln!("{}", serde_json::json!({ "job": id, "level": t.index, "title": t.title }))?;
                        } else {
                            outln!("job {id}: level {} ({})", t.index, t.title)?;
                        }
                    }
                    Err((t, e)) => print_level(t.index, &t.title, None, Some(e), a.json)?,
                }
            }
            // a broken level was not submitted: the run is not a clean one
            let bad = order.iter().any(|e| e.is_err());
            return Ok(ExitCode::from(if bad { EXIT_BAD_INPUT } else { EXIT_OK }));
        }
        let started = Instant::now();
        let mut statuses: Vec<Option<Status>> = Vec::new();
        let cancel_sent = Arc::new(AtomicBool::new(false));
        let mut replays = Vec::new();
        // a failed write to stdout (its reader gone, a full disk) stops the
        // watching, not the jobs, after the page asked for is written
        let mut unprinted = None;
        for entry in &order {
            if unprinted.is_some() {
                break;
            }
            let (id, t, level) = match entry {
                Ok(i) => &ids[*i],
                Err((t, e)) => {
                    // a level that does not parse is reported in its place, as `solve` does
                    unprinted = print_level(t.index, &t.title, None, Some(e), a.json).err();
                    statuses.push(None);
                    continue;
                }
            };
            let bar = spinner(format!("level {} ({})", t.index, t.title));
            let mut canceller = Client::new(&net, &a.coordinator)?;
            let sent = cancel_sent.clone();
            let (id, bar_ref) = (*id, &bar);
            let watch = client.watch(id, Duration::from_secs_f64(a.reconnect_timeout.max(0.0)), |v| {
                if let Some(b) = bar_ref {
                    b.set_message(progress_line(v));
                }
            });
            // Ctrl-C cancels the jobs on the cluster and still prints what they found
            let interrupt = interrupted();
            tokio::pin!(watch);
            let view = tokio::select! {
                v = &mut watch => v,
                _ = interrupt => {
                    if !sent.swap(true, Ordering::SeqCst) {
                        for (other, _, _) in &ids {
                            let _ = canceller.cancel(*other).await;
                        }
                    }
                    watch.await
                }
            };
            if let Some(b) = &bar {
                b.finish_and_clear();
            }
            match view {
                Ok(v) => match &v.result {
                    Some(r) => {
                        let r = r.clone();
                        unprinted = print_level(t.index, &t.title, Some(&r), None, a.json).err();
                        statuses.push(Some(r.status));
                        replays.extend(replay_of(level, &r));
                    }
                    None => {
                        let msg = format!("job {} {}: {}", v.id, v.state, v.message);
                        unprinted = print_level(t.index, &t.title, None, Some(&msg), a.json).err();
                        statuses.push(if v.state == "cancelled" { Some(Status::Timeout) } else { None });
                    }
                },
                Err(e) => {
                    // following it failed, not the job: say which job to look up
                    let msg = format!("job {id}: {e}; the job itself may still run (`sokoshard status` shows it)");
                    unprinted = print_level(t.index, &t.title, None, Some(&msg), a.json).err();
                    statuses.push(None);
                }
            }
        }
        if unprinted.is_none() && !a.json && statuses.len() > 1 {
            unprinted = print_summary_of(&statuses, started.elapsed()).err();
        }
        if let Some(path) = &a.html {
            write_replay(path, &replays)?;
        }
        if let Some(e) = unprinted {
            return Err(e.into());
        }
        let code = if statuses.iter().any(|s| s.is_none()) {
            EXIT_BAD_INPUT
        } else if statuses.iter().all(|s| *s == Some(Status::Solved)) && !INTERRUPTED.load(Ordering::SeqCst) {
            EXIT_OK
        } else {
            EXIT_NOT_SOLVED
        };
        Ok(ExitCode::from(code))
    })
}

pub fn run_status(a: StatusArgs) -> Result<ExitCode> {
    let net = a.net.config()?;
    runtime()?.block_on(async move {
        let mut c = Client::new(&net, &a.coordinator)?;
        let workers = c.workers().await?;
        let jobs = c.jobs().await?;
        if a.json {
            outln!("{}", serde_json::json!({ "workers": workers, "jobs": jobs }))?;
            return Ok(ExitCode::from(EXIT_OK));
        }
        outln!("workers ({}):", workers.len())?;
        outln!(
            "  {:<20} {:<22} {:>5} {:>5} {:>10} {:>10} {:>10} {:>10}",
            "node",
            "address",
            "alive",
            "parts",
            "budget",
            "rss",
            "peak rss",
            "disk"
        )?;
        for w in &workers {
            outln!(
                "  {:<20} {:<22} {:>5} {:>5} {:>10} {:>10} {:>10} {:>10}",
                w.node_id,
                w.address,
                if w.alive { "yes" } else { "no" },
                w.partitions,
                human_bytes(w.memory_bytes),
                human_bytes(w.rss_bytes),
                human_bytes(w.peak_rss_bytes),
                human_bytes(w.store_disk_bytes)
            )?;
        }
        outln!("jobs ({}):", jobs.len())?;
        outln!(
            "  {:>4} {:<10} {:<24} {:>14} {:>12} {:>12} {:>10}  note",
            "id",
            "state",
            "level",
            "layer",
            "states",
            "states/s",
            "time"
        )?;
        for j in &jobs {
            let note = match (&j.result, j.queue_position) {
                (Some(r), _) if r.status == Status::Solved => {
                    super::count(r.pushes.unwrap_or(0) as u64, "push", "pushes")
                }
                (Some(_), _) if j.state == "cancelled" => "cancelled".to_string(),
                (Some(r), _) => r.status.name().to_string(),
                (None, Some(n)) if j.message.is_empty() => format!("queue #{n}"),
                (None, Some(n)) => format!("queue #{n}: {}", j.message),
                (None, None) => j.message.clone(),
            };
            outln!(
                "  {:>4} {:<10} {} {:>14} {:>12} {:>12.0} {:>10}  {}",
                j.id,
                j.state,
                super::columns(&format!("{} ({})", j.index, j.title), 24, true),
                format!("{} {}", j.side, j.layer),
                j.stored,
                j.rate,
                super::secs(j.seconds),
                note
            )?;
        }
        Ok(ExitCode::from(EXIT_OK))
    })
}

pub fn run_cancel(a: CancelArgs) -> Result<ExitCode> {
    let net = a.net.config()?;
    runtime()?.block_on(async move {
        let mut c = Client::new(&net, &a.coordinator)?;
        let state = c.cancel(a.job).await?;
        // a running job stops at its next check, after this answer
        let said = match state.as_str() {
            "cancelled" => "cancelled".to_string(),
            "finished" | "failed" => format!("already {state}, nothing to cancel"),
            other => format!("cancelling (it was {other}; `status` shows when it has stopped)"),
        };
        outln!("job {}: {said}", a.job)?;
        Ok(ExitCode::from(EXIT_OK))
    })
}
