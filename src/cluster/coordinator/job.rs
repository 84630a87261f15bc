//! A job's life on the coordinator: run it to its end through the one solve
//! driver on a [`ClusterDeployment`] (tables and search over the workers),
//! record the outcome in the job log, and tell the workers to let it go.

use super::super::proto::*;
use super::super::ClusterError;
use super::backend::{ClusterBackend, Phase};
use super::tables::{tables_for, tables_path, JobTables};
use super::{Kind, Shared, State};
use crate::engine::driver::{
    probe_share, solve, BoundSpec, Deployment, Objective, Observers, Pass, Resumed, SolveSpec, TableSource,
    PROBE_AFTER, PROBE_MAX,
};
use crate::engine::kpg::{DeadlockTables, KChoice, KStats, KpgProgress, MAX_K};
use crate::engine::moves::Tape;
use crate::engine::report::{BoundIteration, SolveReport, Status};
use crate::engine::search::{LayerBackend, LayerEvent, NoProgress, ProbeEvent, Progress};
use crate::engine::{EngineError, Problem};
use crate::model::board::Board;
use crate::model::key::StateKey;
use crate::model::level::parse_one;
use crate::model::rules::Pruning;
use crate::storage::budget::{default_budget, tape_share};
use crate::storage::kdb;
use crate::storage::tape::DiskTape;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;

/// How a database job's note begins when its time limit cut the build short
/// (the client reads it to say so and exit 1).
pub const TABLES_TIME_LIMIT: &str = "stopped by the time limit";

/// How the note of a database job cancelled after its first k starts: its
/// tables of the k finished can still be fetched.
pub const TABLES_CANCELLED: &str = "cancelled";

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
    if rec.nodes.is_empty() {
        // a new job waits for its workers here, queued, so that neither its
        // clock nor its time limit counts the wait (a stop while it waits is
        // the solve's to report: the backend sees the flag)
        let _ = super::backend::wait_for_workers(sh, id, &stop, rt);
    }
    sh.set_running(id, true);
    let mut deployment = ClusterDeployment { sh: sh.clone(), id, rt: rt.clone(), stop: &stop, tables_reused: None };
    if rec.kind == Kind::Deadlocks {
        // no k: the tables a solve of this level would build for itself
        let choice = rec.options.kpg.map_or(KChoice::Auto, |k| KChoice::UpTo((k as usize).min(MAX_K)));
        // the time limit raises the stop flag, as a cancel does, and says so
        let timed_out = Arc::new(AtomicBool::new(false));
        let timer = (rec.options.timeout > 0.0).then(|| {
            let (stop, timed_out) = (stop.clone(), timed_out.clone());
            let left = Duration::from_secs_f64((rec.options.timeout - rec.seconds).max(0.0));
            rt.spawn(async move {
                tokio::time::sleep(left).await;
                timed_out.store(true, Ordering::SeqCst);
                stop.store(true, Ordering::SeqCst);
            })
        });
        let built = deployment.build_tables(&board, choice, &stop, &NoProgress);
        if let Some(t) = timer {
            t.abort();
        }
        sh.set_running(id, false);
        let built_to = |stats: &[KStats]| format!("k-PG tables built for k = 1..{}", stats.last().map_or(0, |s| s.k));
        let (state, msg) = match (cancelled.load(Ordering::SeqCst), built) {
            // the k finished are kept (`tables_for`), for the client to fetch
            (true, Ok(Some((_, stats)))) => (State::Cancelled, format!("{TABLES_CANCELLED}: {}", built_to(&stats))),
            (true, _) => (State::Cancelled, "cancelled".to_string()),
            (false, Err(e)) => return (fail(cluster_error(e).to_string()), unload_all(sh, id, rt)).1,
            (false, Ok(None)) => (State::Failed, format!("{TABLES_TIME_LIMIT} before the 1-box game was finished")),
            (false, Ok(Some((_, stats)))) if timed_out.load(Ordering::SeqCst) => {
                (State::Finished, format!("{TABLES_TIME_LIMIT}: {}", built_to(&stats)))
            }
            (false, Ok(Some((_, stats)))) => (State::Finished, built_to(&stats)),
        };
        let _ = sh.update(id, true, |r| {
            r.state = state;
            r.message = msg;
        });
        return unload_all(sh, id, rt);
    }
    let spec = SolveSpec {
        pruning: Pruning { dead_squares: true, freeze: !rec.options.no_freeze, pi_corrals: !rec.options.no_pi_corrals },
        tables: TableSource::Build(rec.options.kpg.map_or(KChoice::Auto, |k| KChoice::UpTo(k as usize))),
        bound: match (rec.options.no_bound, rec.options.upper_bound) {
            (true, _) => BoundSpec::Off,
            (false, 0) => BoundSpec::Iterate,
            (false, u) => BoundSpec::Upper(u),
        },
        pair_penalties: !rec.options.no_pair_penalties,
        // each worker builds them too (`worker::job::lower_bounds`)
        triple_penalties: rec.options.triples,
        objective: if rec.options.pushes_only { Objective::Pushes } else { Objective::PushesMoves },
        probe_states: if rec.options.no_probe { 0 } else { PROBE_MAX },
        // the probe runs here, in the coordinator's memory
        probe_memory: Some(probe_share(sh.cfg.mem.unwrap_or_else(default_budget))),
        probe_after: PROBE_AFTER,
        moves_states: (rec.options.moves_states > 0).then_some(rec.options.moves_states),
        // decided here, from the level; the workers are told (`Phase`)
        sample_corrals: !rec.options.keep_pi_corrals,
        max_states: (rec.options.max_states > 0).then_some(rec.options.max_states),
        // the deadline counts the time already run before a coordinator
        // restart, and not the time queued for workers
        deadline: (rec.options.timeout > 0.0)
            .then(|| crate::engine::search::deadline_in(rec.options.timeout - rec.seconds))
            .flatten(),
    };
    let progress = JobProgress { id };
    let out = solve(&mut deployment, board, &spec, &stop, &Observers { tables: &NoProgress, search: &progress });
    sh.set_running(id, false);
    let user_cancel = cancelled.load(Ordering::SeqCst);
    match out {
        Ok(mut report) => {
            let state = if user_cancel { State::Cancelled } else { State::Finished };
            if user_cancel && report.status == Status::Timeout {
                report.reason = Some("cancelled".into()); // not the time limit
            }
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
pub(super) fn engine_error(e: ClusterError) -> EngineError {
    match e {
        ClusterError::Cancelled => EngineError::Cancelled,
        other => EngineError::seam(other),
    }
}

/// The cluster as a [`Deployment`] of the one solve driver: k-games and the
/// level's search run over the job's workers.
pub(super) struct ClusterDeployment<'a> {
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
        choice: KChoice,
        _cancel: &AtomicBool,
        _progress: &dyn KpgProgress,
    ) -> Result<Option<(DeadlockTables, Vec<KStats>)>, EngineError> {
        // a database keeps the pair penalties; a job's tables carry them to
        // the workers when its bounded search adds them
        let pairs = self
            .sh
            .record(self.id)
            .is_some_and(|r| r.kind == Kind::Deadlocks || (!r.options.no_bound && !r.options.no_pair_penalties));
        // a database's build stopped by its time limit keeps the k finished
        let database = self.sh.record(self.id).is_some_and(|r| r.kind == Kind::Deadlocks);
        let Some(JobTables { bytes, stats, seconds: secs, reused }) =
            tables_for(&self.sh, self.id, &self.rt, board, choice, pairs, self.stop, database).map_err(engine_error)?
        else {
            return Ok(None);
        };
        if reused {
            self.tables_reused = Some(secs);
        }
        let path = tables_path(&self.sh, self.id);
        let file = kdb::decode(&path, &bytes)?;
        Ok(Some((kdb::bind(&path, file, board.clone())?, stats)))
    }

    fn tape(&mut self) -> Box<dyn Tape> {
        // the moves pass runs here, in the coordinator: its depths go to the
        // data dir (made at start) past the coordinator's share of memory
        Box::new(DiskTape::new(self.sh.cfg.data_dir.join(super::MOVES_DIR), tape_share(self.sh.cfg.mem)))
    }

    fn search<K: StateKey>(
        &mut self,
        pass: Pass,
        problem: &Problem<K>,
        tables: Option<&Arc<DeadlockTables>>,
        _cancel: &AtomicBool,
        search: &mut dyn FnMut(&mut dyn LayerBackend<K>) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        let rec =
            self.sh.record(self.id).ok_or_else(|| engine_error(ClusterError::NotFound(format!("job {}", self.id))))?;
        let bytes = tables.map(|t| kdb::encode(t, &rec.level_text)).unwrap_or_default();
        let limit = problem.bound.as_ref().map(|b| b.limit);
        let pairs = !rec.options.no_pair_penalties;
        if pass == Pass::Moves {
            // the moves pass's own search: its layers are not the job log's
            // (a restarted coordinator redoes the pass from the logged meeting)
            let phase = Phase::moves(Arc::new(bytes), limit.map(|u| (u, pairs)), problem.pruning.pi_corrals);
            let mut backend =
                ClusterBackend::<K>::new(self.sh.clone(), self.id, self.rt.clone(), self.stop, phase, &problem.space)
                    .map_err(engine_error)?;
            return search(&mut backend);
        }
        let (at_floor, plain_try) = match pass {
            Pass::Main { at_floor, plain_try } => (at_floor, plain_try),
            Pass::Moves => (false, None),
        };
        let pi_corrals = Some(problem.pruning.pi_corrals);
        if rec.bound != limit || rec.at_floor != at_floor || rec.plain_try != plain_try || rec.pi_corrals != pi_corrals
        {
            // a new iteration of the bounded search: its layers start afresh
            // (the workers keep none of the last one's: they are told 0
            // layers); the same one resumed keeps them
            let fresh = rec.bound != limit || rec.plain_try != plain_try;
            self.sh
                .update(self.id, true, |r| {
                    r.at_floor = at_floor;
                    r.pi_corrals = pi_corrals;
                    if fresh {
                        r.bound = limit;
                        r.plain_try = plain_try;
                        r.layers = [Vec::new(), Vec::new()];
                        r.meeting = None;
                    }
                })
                .map_err(engine_error)?;
        }
        let phase = Phase::main(Arc::new(bytes), limit.map(|u| (u, pairs)), problem.pruning.pi_corrals);
        let mut backend =
            ClusterBackend::<K>::new(self.sh.clone(), self.id, self.rt.clone(), self.stop, phase, &problem.space)
                .map_err(engine_error)?;
        search(&mut backend)
    }

    fn restart_iteration(&mut self) -> Result<(), EngineError> {
        // the workers keep none of its layers: the next search of the same
        // bound starts afresh, as a new iteration does
        self.sh
            .update(self.id, true, |r| {
                r.layers = [Vec::new(), Vec::new()];
                r.meeting = None;
            })
            .map_err(engine_error)
    }

    fn resumed(&self) -> Option<Resumed> {
        // the iteration the log names: one with layers, or a bounded one
        // or a try begun (bounds below it are proven too small); a plain
        // search with no layers yet is searched again from the start bound
        let rec = self.sh.record(self.id)?;
        let layers = !rec.layers[0].is_empty() || !rec.layers[1].is_empty();
        match rec.plain_try {
            // a try that ran out, its layers dropped: the bound after it
            Some(t) if !layers => Some(Resumed {
                bound: Some(t.back_to),
                at_floor: rec.at_floor,
                plain_try: None,
                pi_corrals: rec.searched_pi_corrals(),
            }),
            _ => (layers || rec.bound.is_some()).then_some(Resumed {
                bound: rec.bound,
                at_floor: rec.at_floor,
                plain_try: rec.plain_try,
                pi_corrals: rec.searched_pi_corrals(),
            }),
        }
    }

    fn finish_report(&mut self, report: &mut SolveReport) {
        // the job log's counts span coordinator restarts; the probes' states
        // live here, beside the workers' layers, and count as a local
        // solve's do (a resumed iteration's probe runs again)
        let Some(rec) = self.sh.record(self.id) else { return };
        let probes = |f: fn(&BoundIteration) -> u64| report.iterations.iter().map(f).sum::<u64>();
        report.states = rec.stored + probes(|i| i.probe_states);
        report.generated = rec.generated + probes(|i| i.probe_generated);
        report.forward_layers = rec.layers[0].len();
        report.backward_layers = rec.layers[1].len();
        report.peak_memory_bytes = rec.peak_memory_bytes;
        report.store_bytes = rec.memory_bytes;
        report.disk_bytes = rec.disk_bytes;
        // the job's clock: every run's time on it, not the time queued for workers
        report.seconds = self.sh.job_seconds(self.id);
        if let Some(secs) = self.tables_reused {
            report.kpg_seconds = secs;
        }
    }
}

/// Tells every worker of a finished job to drop it and its checkpoint.
pub(super) fn unload_all(sh: &Arc<Shared>, id: u64, rt: &Handle) {
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

/// Progress of the search loop: structured logs (watchers read the job record,
/// which the backend updates at every layer).
pub(super) struct JobProgress {
    id: u64,
}

impl Progress for JobProgress {
    fn layer_done(&self, e: &LayerEvent) {
        tracing::info!(
            job = self.id,
            bound = e.bound,
            side = e.side.name(),
            layer = e.layer,
            new = e.new_states,
            stored = e.stored,
            seconds = e.seconds,
            moves_budget = e.moves_budget,
            "layer done"
        );
    }
    fn probe_step(&self, e: &ProbeEvent) {
        tracing::debug!(job = self.id, bound = e.bound, depth = e.depth, stored = e.stored, "probe step");
    }
}
