//! The coordinator's HTTP listener (`--http`): the status page, its data as
//! `status.json`, the replay page of each solved job and the Prometheus
//! `metrics`, all behind the cluster token (an `Authorization: Bearer` or
//! `x-sokoshard-token` header, or `?token=` in the address, which is how a
//! browser opens the page).

use super::{JobEntry, Shared, State, WorkerEntry};
use crate::cluster::http::{self as web, Exposition, Reply};
use crate::cluster::ClusterError;
use crate::page::replay::{replay_html, ReplayLevel};
use crate::page::STATUS_HTML;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use std::net::SocketAddr;
use std::sync::Arc;

/// Binds `addr` now (so that a bad address fails the start) and serves the
/// pages and the metrics from a task of their own.
pub async fn spawn(addr: SocketAddr, sh: Arc<Shared>) -> Result<SocketAddr, ClusterError> {
    let token = sh.cfg.net.token.clone();
    web::spawn(addr, "status page", token, Arc::new(move |req: &Request<Incoming>| answer(&sh, req))).await
}

fn answer(sh: &Shared, req: &Request<Incoming>) -> Reply {
    let path = req.uri().path();
    match path {
        "/" | "/index.html" => web::reply(StatusCode::OK, "text/html; charset=utf-8", STATUS_HTML),
        "/status.json" => web::reply(StatusCode::OK, "application/json", status_json(sh).to_string()),
        "/metrics" => web::metrics(metrics(sh)),
        _ => match path.strip_prefix("/jobs/").and_then(|r| r.strip_suffix("/replay")).map(str::parse::<u64>) {
            Some(Ok(id)) => replay(sh, id),
            _ => web::text(
                StatusCode::NOT_FOUND,
                format!("{path}: no such page (try /, /status.json, /metrics, /jobs/<id>/replay)"),
            ),
        },
    }
}

fn replay(sh: &Shared, id: u64) -> Reply {
    let Some(rec) = sh.record(id) else { return web::text(StatusCode::NOT_FOUND, format!("no job {id}")) };
    let solved = rec.result.as_ref().and_then(|r| Some((r.solution.clone()?, r.pushes?, r.moves?)));
    let Some((solution, pushes, moves)) = solved else {
        return web::text(StatusCode::NOT_FOUND, format!("job {id} has no solution to replay"));
    };
    match crate::model::level::parse_one(&rec.level_text, &rec.title) {
        Ok(mut level) => {
            level.index = rec.index as usize;
            level.title = rec.title.clone();
            let page = replay_html(&[ReplayLevel::new(&level, &solution, pushes, moves)]);
            web::reply(StatusCode::OK, "text/html; charset=utf-8", page)
        }
        Err(e) => web::text(StatusCode::INTERNAL_SERVER_ERROR, format!("job {id}'s level does not parse: {e}")),
    }
}

/// A rough duration for people: seconds, minutes or hours.
fn duration(secs: f64) -> String {
    if secs < 90.0 {
        format!("{secs:.0} s")
    } else if secs < 5400.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{:.1} h", secs / 3600.0)
    }
}

/// What the page draws: the workers, and the jobs with their layer sizes.
fn status_json(sh: &Shared) -> serde_json::Value {
    let timeout = sh.cfg.heartbeat_timeout;
    let workers: Vec<serde_json::Value> = sh
        .lock_workers()
        .iter()
        .map(|(id, w)| {
            serde_json::json!({
                "node_id": id,
                "address": w.address,
                "alive": w.alive(timeout),
                "partitions": w.stats.partitions,
                "memory_bytes": w.memory,
                "rss_bytes": w.stats.rss_bytes,
                "peak_rss_bytes": w.stats.peak_rss_bytes,
                "store_memory_bytes": w.stats.store_memory_bytes,
                "disk_bytes": w.stats.store_disk_bytes,
                "spilled_keys": w.stats.spilled_keys,
            })
        })
        .collect();
    let jobs: Vec<serde_json::Value> = sh
        .lock_jobs()
        .values()
        .map(|e| {
            let s = Shared::status_of(e);
            let r = &e.rec;
            let depth = r.layers[0].len().saturating_sub(1) + r.layers[1].len().saturating_sub(1);
            let expected = match (r.state, r.bound, r.plain_try) {
                (State::Running | State::Paused, None, Some(t)) => {
                    format!("a plain try: it finishes or stops within {} states, then bound {}", t.budget, t.back_to)
                }
                (State::Running | State::Paused, Some(u), _) => {
                    let left = (u as usize).saturating_sub(depth);
                    // the iteration's seconds per layer so far; the layers
                    // grow, so the time left is likely more
                    let spent = e.iteration_started.map_or(0.0, |t| t.elapsed().as_secs_f64());
                    let pace = spent / depth.max(1) as f64;
                    format!(
                        "at most {left} more layers at bound {u}, {} at the pace so far",
                        duration(left as f64 * pace)
                    )
                }
                (State::Running | State::Paused, None, None) => "unknown (the plain search has no bound)".into(),
                _ => "-".into(),
            };
            serde_json::json!({
                "id": r.id,
                "title": r.title,
                "index": r.index,
                "kind": r.kind,
                "state": r.state,
                "message": r.message,
                "bound": r.bound,
                "plain_try": r.plain_try,
                "stored": s.stored,
                "rate": s.rate,
                "seconds": s.seconds,
                "expected": expected,
                "forward": r.layers[0],
                "backward": r.layers[1],
                "pushes": r.result.as_ref().and_then(|x| x.pushes),
            })
        })
        .collect();
    serde_json::json!({ "coordinator": sh.cfg.listen.to_string(), "workers": workers, "jobs": jobs })
}

/// A figure of each worker or job: metric name, type, help, and its value.
type Figure<T> = (&'static str, &'static str, &'static str, fn(&T) -> f64);

const WORKER_FIGURES: &[Figure<WorkerEntry>] = &[
    ("sokoshard_worker_memory_budget_bytes", "gauge", "A worker's --mem.", |w| w.memory as f64),
    ("sokoshard_worker_rss_bytes", "gauge", "A worker's resident memory.", |w| w.stats.rss_bytes as f64),
    ("sokoshard_worker_store_memory_bytes", "gauge", "Bytes of a worker's state store in memory.", |w| {
        w.stats.store_memory_bytes as f64
    }),
    ("sokoshard_worker_disk_bytes", "gauge", "Bytes of a worker's state store on disk.", |w| {
        w.stats.store_disk_bytes as f64
    }),
    ("sokoshard_worker_spilled_keys_total", "counter", "Successor keys a worker spilled to disk.", |w| {
        w.stats.spilled_keys as f64
    }),
    ("sokoshard_worker_bytes_sent_total", "counter", "Successor bytes a worker sent to other workers.", |w| {
        w.stats.bytes_sent as f64
    }),
];

const JOB_FIGURES: &[Figure<JobEntry>] = &[
    ("sokoshard_job_states_stored", "gauge", "States a job stored.", |e| e.rec.stored as f64),
    ("sokoshard_job_states_generated", "gauge", "Successors a job generated.", |e| e.rec.generated as f64),
    ("sokoshard_job_states_per_second", "gauge", "States a job stored per second of its running time.", |e| {
        Shared::status_of(e).rate
    }),
    ("sokoshard_job_bytes_exchanged", "gauge", "Successor bytes a job sent between workers.", |e| {
        e.rec.bytes_exchanged as f64
    }),
    ("sokoshard_job_memory_bytes", "gauge", "The workers' store memory for a job.", |e| e.rec.memory_bytes as f64),
    ("sokoshard_job_disk_bytes", "gauge", "The workers' store disk bytes for a job.", |e| e.rec.disk_bytes as f64),
    ("sokoshard_job_bound", "gauge", "The bound of a job's running iteration.", |e| {
        e.rec.bound.map_or(f64::NAN, f64::from)
    }),
];

/// The coordinator's Prometheus metrics: workers (as their heartbeats last
/// said), jobs by state, and each unfinished job's progress.
fn metrics(sh: &Shared) -> String {
    let mut m = Exposition::default();
    let timeout = sh.cfg.heartbeat_timeout;
    {
        let workers = sh.lock_workers();
        let alive = workers.values().filter(|w| w.alive(timeout)).count();
        let lost = workers.values().filter(|w| w.lost(timeout)).count();
        m.family(
            "sokoshard_workers",
            "gauge",
            "Workers known to the coordinator, by state (lost: no heartbeat within the timeout).",
            &[(vec![("state", "alive".into())], alive as f64), (vec![("state", "lost".into())], lost as f64)],
        );
        for (name, kind, help, f) in WORKER_FIGURES {
            let samples: Vec<_> = workers.iter().map(|(id, w)| (vec![("node", id.clone())], f(w))).collect();
            m.family(name, kind, help, &samples);
        }
    }
    let jobs = sh.lock_jobs();
    let states = [State::Queued, State::Running, State::Paused, State::Finished, State::Failed, State::Cancelled];
    let by_state: Vec<(Vec<(&str, String)>, f64)> = states
        .iter()
        .map(|&st| {
            let name = serde_json::to_value(st).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
            (vec![("state", name)], jobs.values().filter(|e| e.rec.state == st).count() as f64)
        })
        .collect();
    m.family("sokoshard_jobs", "gauge", "Jobs by state.", &by_state);
    let live: Vec<&JobEntry> = jobs.values().filter(|e| !super::terminal(e.rec.state)).collect();
    let sides: [Figure<[u64]>; 2] = [
        ("sokoshard_job_layers_done", "gauge", "Completed layers of a job's side (this bound iteration).", |l| {
            l.len() as f64
        }),
        ("sokoshard_job_frontier_states", "gauge", "States in a job's side's last layer.", |l| {
            l.last().copied().unwrap_or(0) as f64
        }),
    ];
    for (name, kind, help, f) in sides {
        let samples: Vec<_> = live
            .iter()
            .flat_map(|e| {
                [("forward", 0), ("backward", 1)].map(|(side, i)| {
                    (vec![("job", e.rec.id.to_string()), ("side", side.to_string())], f(&e.rec.layers[i]))
                })
            })
            .collect();
        m.family(name, kind, help, &samples);
    }
    for (name, kind, help, f) in JOB_FIGURES {
        let samples: Vec<_> = live.iter().map(|e| (vec![("job", e.rec.id.to_string())], f(e))).collect();
        m.family(name, kind, help, &samples);
    }
    m.finish()
}
