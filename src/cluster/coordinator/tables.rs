//! A job's k-PG tables on the cluster: played k-game by k-game over the workers
//! (the engine's `exhaust` loop on a [`ClusterBackend`]), kept as a `.kdb`
//! database and its build statistics in the coordinator's data dir.

use super::super::ClusterError;
use super::backend::{ClusterBackend, Phase};
use super::job::{cluster_error, engine_error};
use super::Shared;
use crate::engine::kpg::{build_tables_with, predicted_auto_states, DeadlockTables, KChoice, KStats, MAX_K};
use crate::engine::search::{exhaust, Limits, NoProgress, SearchEnd};
use crate::engine::{Problem, Side};
use crate::model::board::Board;
use crate::storage::kdb;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::runtime::Handle;

/// Where a job's k-PG database lives in the coordinator's data dir.
pub fn tables_path(sh: &Shared, id: u64) -> std::path::PathBuf {
    sh.cfg.data_dir.join("tables").join(format!("{id}.kdb"))
}

pub(super) const STATS_MAGIC: &[u8; 8] = b"SKKSTATS";

/// Reads the k-PG statistics of job `id` (what building each k cost, kept
/// next to the database), if its tables were built.
pub fn read_kpg_stats(sh: &Shared, id: u64) -> Result<Option<Vec<KStats>>, ClusterError> {
    super::super::persist::read(&tables_path(sh, id).with_extension("stats"), STATS_MAGIC, 1)
}

/// Whether tables whose build made `stats` are what `choice` builds on a
/// level of `boxes` boxes: as many k as asked, or as many as the automatic
/// choice plays (it would predict no further game). A job's small tables
/// (k = 1 and 2, `engine::driver::SMALL_K`) are so never taken for the
/// larger ones it grows into.
fn built_as(choice: KChoice, stats: &[KStats], boxes: usize) -> bool {
    match choice {
        KChoice::UpTo(k) => stats.len() == k.min(boxes).min(MAX_K),
        KChoice::Auto => predicted_auto_states(stats, boxes) == 0,
    }
}

/// A job's k-PG tables: the .kdb database, the statistics of its build, the
/// seconds the job's builds took and whether these were read back.
pub(super) struct JobTables {
    pub bytes: Vec<u8>,
    pub stats: Vec<KStats>,
    pub seconds: f64,
    pub reused: bool,
}

/// The job's k-PG tables as a .kdb database and the statistics of their
/// build: the saved ones after a coordinator restart if they are what
/// `choice` builds, or built now by playing every k-game on the cluster (the
/// same `exhaust` loop, over the workers). `None` when stopped part way,
/// unless `keep_finished`: then the tables of every k finished by then (none
/// finished is still `None`).
#[allow(clippy::too_many_arguments)]
pub(super) fn tables_for(
    sh: &Arc<Shared>,
    id: u64,
    rt: &Handle,
    board: &Arc<Board>,
    choice: KChoice,
    pairs: bool,
    stop: &AtomicBool,
    keep_finished: bool,
) -> Result<Option<JobTables>, ClusterError> {
    let rec = sh.record(id).ok_or_else(|| ClusterError::NotFound(format!("job {id}")))?;
    let path = tables_path(sh, id);
    if let Ok(bytes) = std::fs::read(&path) {
        if let Ok(f) = kdb::decode(&path, &bytes) {
            let stats = read_kpg_stats(sh, id).ok().flatten();
            let same = |s: &Vec<KStats>| f.fingerprint == board.fingerprint() && built_as(choice, s, board.box_count());
            if let Some(stats) = stats.filter(same) {
                tracing::info!(job = id, "k-pg tables reused from the data dir");
                return Ok(Some(JobTables { bytes, stats, seconds: rec.kpg_seconds, reused: true }));
            }
        }
    }
    let started = Instant::now();
    let play = |problem: &Problem<u64>, tables: &DeadlockTables, side: Side, seeds: &[u64]| {
        let k = problem.space.boxes;
        let bytes = if tables.tables.is_empty() { Vec::new() } else { kdb::encode(tables, &rec.level_text) };
        let phase = Phase {
            name: format!("k{k}-{}", side.name()),
            boxes: k as u32,
            tables: Arc::new(bytes),
            bound: None,
            pi_corrals: false,
        };
        tracing::info!(job = id, k, side = side.name(), "k-game on the cluster");
        let mut b = ClusterBackend::<u64>::new(sh.clone(), id, rt.clone(), stop, phase, &problem.space)
            .map_err(engine_error)?;
        let limits = Limits { cancel: stop, max_states: None, bound: None };
        let end = exhaust(&mut b, side, seeds, &limits, &NoProgress)?.0;
        if matches!(end, SearchEnd::Cancelled) {
            return Ok(None);
        }
        b.collect(side).map_err(engine_error)
    };
    // a stop reaches the workers' calls as an error: the game was cut short
    let mut explore = |problem: &Problem<u64>, tables: &DeadlockTables, side: Side, seeds: &[u64]| match play(
        problem, tables, side, seeds,
    ) {
        Err(_) if stop.load(Ordering::SeqCst) => Ok(None),
        other => other,
    };
    let (tables, stats) = build_tables_with(board.clone(), choice, &NoProgress, &mut explore).map_err(cluster_error)?;
    if stop.load(Ordering::SeqCst) && (!keep_finished || tables.tables.is_empty()) {
        return Ok(None);
    }
    // the bounded search's pair penalties travel with the patterns, so that
    // every worker (and a restarted coordinator) reads them instead of
    // playing the 2-box games again
    let tables = if pairs { tables.with_level_pairs() } else { tables };
    let secs = started.elapsed().as_secs_f64();
    let bytes = kdb::encode(&tables, &rec.level_text);
    let dir = path.parent().expect("tables dir");
    std::fs::create_dir_all(dir).map_err(|e| ClusterError::io(format!("creating {}", dir.display()), e))?;
    super::super::persist::write(&path.with_extension("stats"), STATS_MAGIC, 1, &stats)?;
    let tmp = path.with_extension("kdb.tmp");
    std::fs::write(&tmp, &bytes).map_err(|e| ClusterError::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, &path).map_err(|e| ClusterError::io(format!("writing {}", path.display()), e))?;
    // a job that grows its tables builds twice: both count
    sh.update(id, true, |r| r.kpg_seconds += secs)?;
    tracing::info!(
        job = id,
        k = tables.max_k(),
        bytes = bytes.len(),
        seconds = secs,
        "k-pg tables built on the cluster"
    );
    Ok(Some(JobTables { bytes, stats, seconds: secs, reused: false }))
}
