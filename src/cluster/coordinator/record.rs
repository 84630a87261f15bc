//! The job log's own types: what the coordinator keeps of a job across
//! restarts. Protocol messages never enter the log; they are converted at the
//! service's edge.

use super::super::proto::{BoundIteration, JobKind, JobOptions, JobState, SolveResult};
use super::super::ClusterError;
use crate::engine::driver::PlainTry;
use crate::engine::report::{IterationSearch, SolveReport};
use crate::engine::Side;
use crate::model::key::KeyWidth;
use serde::{Deserialize, Serialize};

/// What a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Solve one level push-optimally.
    Solve,
    /// Build k-PG deadlock tables.
    Deadlocks,
}

impl Kind {
    pub fn from_proto(v: i32) -> Result<Kind, ClusterError> {
        match JobKind::try_from(v) {
            Ok(JobKind::Solve) => Ok(Kind::Solve),
            Ok(JobKind::Deadlocks) => Ok(Kind::Deadlocks),
            Err(_) => Err(ClusterError::InvalidArgument(format!("unknown job kind {v}"))),
        }
    }

    pub fn to_proto(self) -> i32 {
        match self {
            Kind::Solve => JobKind::Solve as i32,
            Kind::Deadlocks => JobKind::Deadlocks as i32,
        }
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Queued,
    Running,
    /// A worker holding partitions of the job is lost; the job resumes from
    /// its last completed layer when the worker (or one with its data dir) is back.
    Paused,
    Finished,
    Failed,
    Cancelled,
}

impl State {
    pub fn to_proto(self) -> i32 {
        (match self {
            State::Queued => JobState::Queued,
            State::Running => JobState::Running,
            State::Paused => JobState::Paused,
            State::Finished => JobState::Finished,
            State::Failed => JobState::Failed,
            State::Cancelled => JobState::Cancelled,
        }) as i32
    }
}

/// How a job was asked to run (the submit request's options, defaults filled).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Power of two.
    pub partitions: u32,
    pub no_freeze: bool,
    /// 0: no limit.
    pub max_states: u64,
    /// Seconds; 0: no limit.
    pub timeout: f64,
    /// k of the k-PG tables to use (solve) or build (deadlocks); 0: none;
    /// `None`: as many k as pay (a log written before the automatic choice
    /// holds a number, read as that number).
    pub kpg: Option<u32>,
    pub no_pi_corrals: bool,
    /// The plain search (logs written before the cluster ran the bounded
    /// search read as bounded: a resumed job restarts its search bounded).
    #[serde(default)]
    pub no_bound: bool,
    /// One bounded iteration at this many pushes; 0: iterate.
    #[serde(default)]
    pub upper_bound: u32,
    #[serde(default)]
    pub no_pair_penalties: bool,
    /// The fewest pushes only, without the moves pass.
    #[serde(default)]
    pub pushes_only: bool,
    /// No probes.
    #[serde(default)]
    pub no_probe: bool,
    /// The most states of the moves pass's search; 0: automatic.
    #[serde(default)]
    pub moves_states: u64,
    /// Also the triple penalties.
    #[serde(default)]
    pub triples: bool,
    /// The PI-corral restriction on every level, sampled or not.
    #[serde(default)]
    pub keep_pi_corrals: bool,
}

impl From<&Settings> for JobOptions {
    fn from(s: &Settings) -> Self {
        JobOptions {
            partitions: s.partitions,
            no_freeze: s.no_freeze,
            max_states: s.max_states,
            timeout: s.timeout,
            kpg: s.kpg,
            no_pi_corrals: s.no_pi_corrals,
            no_bound: s.no_bound,
            upper_bound: s.upper_bound,
            no_pair_penalties: s.no_pair_penalties,
            pushes_only: s.pushes_only,
            no_probe: s.no_probe,
            moves_states: s.moves_states,
            triples: s.triples,
            keep_pi_corrals: s.keep_pi_corrals,
        }
    }
}

impl From<JobOptions> for Settings {
    fn from(o: JobOptions) -> Self {
        Settings {
            partitions: o.partitions,
            no_freeze: o.no_freeze,
            max_states: o.max_states,
            timeout: o.timeout,
            kpg: o.kpg,
            no_pi_corrals: o.no_pi_corrals,
            no_bound: o.no_bound,
            upper_bound: o.upper_bound,
            no_pair_penalties: o.no_pair_penalties,
            pushes_only: o.pushes_only,
            no_probe: o.no_probe,
            moves_states: o.moves_states,
            triples: o.triples,
            keep_pi_corrals: o.keep_pi_corrals,
        }
    }
}

/// A job as the log keeps it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct JobRecord {
    pub id: u64,
    pub kind: Kind,
    pub level_text: String,
    pub title: String,
    pub index: u32,
    pub options: Settings,
    pub state: State,
    pub message: String,
    /// The partition table: `owners[p]` indexes `nodes` (node ids).
    pub nodes: Vec<String>,
    pub owners: Vec<u32>,
    /// Sizes of the completed layers of each side.
    pub layers: [Vec<u64>; 2],
    pub stored: u64,
    pub generated: u64,
    pub expanded: u64,
    pub keys_exchanged: u64,
    pub bytes_exchanged: u64,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    pub peak_memory_bytes: u64,
    /// The side of the last completed layer.
    pub last_side: Side,
    /// Sides met: the key (limbs), its forward and backward depth.
    pub meeting: Option<(Vec<u8>, usize, usize)>,
    pub result: Option<SolveReport>,
    /// Running time before the current run (across coordinator restarts).
    pub seconds: f64,
    /// Time spent building k-PG tables.
    #[serde(default)]
    pub kpg_seconds: f64,
    /// The bound `U` of the iteration whose layers `layers` counts (`None`:
    /// the plain search).
    #[serde(default)]
    pub bound: Option<u32>,
    /// Whether no solution is shorter than `bound` (the iteration's probe
    /// may answer it); false in a log written before it was kept, so such a
    /// job resumes without a probe until an iteration proves its bound.
    #[serde(default)]
    pub at_floor: bool,
    /// The running iteration is a plain try (`bound` is `None`): its budget
    /// and the bound the bounded search goes back to if it runs out, which
    /// `at_floor` then speaks of.
    #[serde(default)]
    pub plain_try: Option<PlainTry>,
    /// Whether the level's search uses the PI-corral restriction, as the
    /// driver decided when it began; `None` until then, and in a log written
    /// before the decision was kept (see [`JobRecord::searched_pi_corrals`]).
    #[serde(default)]
    pub pi_corrals: Option<bool>,
}

impl JobRecord {
    /// Whether the layers this record counts were searched with the
    /// PI-corral restriction: as recorded, else as a solve used it before it
    /// was sampled per level (on unless `no_pi_corrals`). A resumed job must
    /// go on as its layers were made: the moves pass reuses only layers
    /// searched without the restriction.
    pub fn searched_pi_corrals(&self) -> bool {
        self.pi_corrals.unwrap_or(!self.options.no_pi_corrals)
    }

    /// A queued job that has not run yet.
    pub fn new(id: u64, kind: Kind, level_text: String, title: String, index: u32, options: Settings) -> JobRecord {
        JobRecord {
            id,
            kind,
            level_text,
            title,
            index,
            options,
            state: State::Queued,
            message: String::new(),
            nodes: Vec::new(),
            owners: Vec::new(),
            layers: [Vec::new(), Vec::new()],
            stored: 0,
            generated: 0,
            expanded: 0,
            keys_exchanged: 0,
            bytes_exchanged: 0,
            memory_bytes: 0,
            disk_bytes: 0,
            peak_memory_bytes: 0,
            last_side: crate::engine::Side::Forward,
            meeting: None,
            result: None,
            seconds: 0.0,
            kpg_seconds: 0.0,
            bound: None,
            at_floor: false,
            plain_try: None,
            pi_corrals: None,
        }
    }
}

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
        kpg: r.kpg as u32,
        small_tables_states: r.small_tables_states,
        pi_corrals: r.pi_corrals,
        objective: r.objective.map(|o| o.name().to_string()).unwrap_or_default(),
        moves_seconds: r.moves_seconds,
        moves_states: r.moves_states,
        optimal_states: r.optimal_states,
        moves_disk_bytes: r.moves_disk_bytes,
        triples: r.triples,
        moves_note: r.moves_note.clone(),
        store_bytes: r.store_bytes,
        disk_bytes: r.disk_bytes,
        iterations: r
            .iterations
            .iter()
            .map(|i| BoundIteration {
                bound: i.bound,
                states: i.states,
                generated: i.generated,
                pruned: i.pruned,
                seconds: i.seconds,
                probe: i.search == IterationSearch::Probe,
                outgrown: i.search == IterationSearch::Outgrown,
                plain_try: i.search == IterationSearch::PlainTry,
                probe_states: i.probe_states,
                probe_generated: i.probe_generated,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job begun before PI-corrals were sampled per level searched with
    /// them (unless `no_pi_corrals`); resumed on a level whose sample now
    /// turns them off, it must go on with them: the moves pass would
    /// otherwise take its move-pruned layers for whole ones.
    #[test]
    fn a_job_resumed_from_an_older_log_keeps_the_pi_corrals_its_layers_had() {
        let mut rec = JobRecord::new(1, Kind::Solve, "#".into(), String::new(), 1, Settings::default());
        let mut json = serde_json::to_value(&rec).unwrap();
        json.as_object_mut().unwrap().remove("pi_corrals");
        let old: JobRecord = serde_json::from_value(json).unwrap();
        assert_eq!(old.pi_corrals, None);
        assert!(old.searched_pi_corrals());
        rec.options.no_pi_corrals = true;
        assert!(!rec.searched_pi_corrals());
        // once recorded, the driver's choice stands
        rec.options.no_pi_corrals = false;
        rec.pi_corrals = Some(false);
        assert!(!rec.searched_pi_corrals());
    }
}
