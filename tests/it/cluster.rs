//! The cluster end to end: a coordinator and workers as separate processes on
//! 127.0.0.1 ports chosen at run time, solving levels like local mode does,
//! surviving a SIGKILLed worker and a restarted coordinator, refusing wrong
//! tokens, other protocol versions and malformed requests, and speaking TLS.
//! Every wait is bounded and every child is killed by a guard.

use crate::common::{repo, truth};
use crate::wire::coordinator_client::CoordinatorClient;
use crate::wire::worker_client::WorkerClient;
use crate::wire::*;
use sokoshard::cluster::net::{AttachToken, NetConfig, TlsFiles};
use sokoshard::cluster::PROTOCOL_VERSION;
use sokoshard::model::level::split_collection;
use sokoshard::model::solution::verify;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sokoshard");

type Intercepted = tonic::service::interceptor::InterceptedService<tonic::transport::Channel, AttachToken>;

/// A raw protocol client of a coordinator, as any foreign client would build
/// one from `proto/sokoshard.proto`.
fn coordinator(net: &NetConfig, addr: &str) -> CoordinatorClient<Intercepted> {
    let token = AttachToken::new(&net.token).unwrap();
    CoordinatorClient::with_interceptor(net.channel(addr).unwrap(), token).max_decoding_message_size(16 << 20)
}

/// A raw protocol client of a worker.
fn worker(net: &NetConfig, addr: &str) -> WorkerClient<Intercepted> {
    let token = AttachToken::new(&net.token).unwrap();
    WorkerClient::with_interceptor(net.channel(addr).unwrap(), token).max_decoding_message_size(16 << 20)
}
const MICROBAN: &str = "levels/Microban_155.xsb";
const TOKEN: &str = "test-token";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A child process killed (SIGKILL) and reaped when dropped.
struct Proc {
    child: Option<Child>,
    log: PathBuf,
}

impl Proc {
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL on unix
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A coordinator and its workers in a temporary folder.
struct Cluster {
    dir: tempfile::TempDir,
    addr: String,
    coordinator: Proc,
    coordinator_args: Vec<String>,
    workers: Vec<Proc>,
    tls: Vec<String>,
    /// Arguments every worker started from now on gets.
    worker_extra: Vec<String>,
}

fn spawn(args: &[String], log: &Path) -> Proc {
    let f = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    let child = Command::new(BIN)
        .args(args)
        .env("SOKOSHARD_LOG", "info")
        .env_remove("SOKOSHARD_TOKEN")
        .stdout(Stdio::null())
        .stderr(f)
        .spawn()
        .expect("start sokoshard");
    Proc { child: Some(child), log: log.to_path_buf() }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

impl Cluster {
    /// A coordinator with `extra` arguments and no workers yet.
    fn start(extra: &[&str], tls: &[String]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let mut args = s(&["coordinator", "--listen", &addr, "--token", TOKEN, "--heartbeat-ms", "200"]);
        args.extend(s(&["--data-dir", dir.path().join("coordinator").to_str().unwrap()]));
        args.extend(s(extra));
        args.extend(tls.iter().cloned());
        let coordinator = spawn(&args, &dir.path().join("coordinator.log"));
        let mut c = Cluster {
            dir,
            addr,
            coordinator,
            coordinator_args: args,
            workers: Vec::new(),
            tls: tls.to_vec(),
            worker_extra: Vec::new(),
        };
        c.wait_listening();
        c
    }

    fn wait_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&self.addr).is_err() {
            assert!(Instant::now() < deadline, "coordinator did not listen:\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn worker_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("worker{i}"))
    }

    /// Starts worker `i` (its data dir is fixed by `i`) on a fresh port.
    fn start_worker(&mut self, i: usize) -> usize {
        self.start_worker_with(i, "256M")
    }

    fn start_worker_with(&mut self, i: usize, mem: &str) -> usize {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut args = s(&["worker", "--join", &self.addr, "--listen", &addr, "--token", TOKEN]);
        args.extend(s(&["--mem", mem, "--threads", "1", "--data-dir", self.worker_dir(i).to_str().unwrap()]));
        args.extend(self.tls.iter().cloned());
        args.extend(self.worker_extra.iter().cloned());
        let p = spawn(&args, &self.dir.path().join(format!("worker{i}.log")));
        if i < self.workers.len() {
            self.workers[i] = p;
        } else {
            self.workers.push(p);
        }
        i
    }

    fn restart_coordinator(&mut self) {
        self.restart_coordinator_after(|_| {});
    }

    /// Kills the coordinator, runs `meanwhile` on its data dir, and starts it again.
    fn restart_coordinator_after(&mut self, meanwhile: impl FnOnce(&Path)) {
        self.coordinator.kill();
        meanwhile(&self.dir.path().join("coordinator"));
        self.coordinator = spawn(&self.coordinator_args, &self.dir.path().join("coordinator.log"));
        self.wait_listening();
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .args(["--coordinator", &self.addr, "--token", TOKEN])
            .args(&self.tls)
            .env_remove("SOKOSHARD_TOKEN")
            .output()
            .unwrap()
    }

    fn status(&self) -> serde_json::Value {
        let o = self.cli(&["status", "--json"]);
        assert_eq!(o.status.code(), Some(0), "status failed: {}\n{}", String::from_utf8_lossy(&o.stderr), self.logs());
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// Waits (bounded) until `pred` holds for the status.
    fn wait_for(&self, what: &str, secs: u64, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let st = self.status();
            if pred(&st) {
                return st;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; last status {st}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_workers(&self, n: usize) {
        self.wait_for(&format!("{n} live workers"), 30, |st| {
            st["workers"].as_array().unwrap().iter().filter(|w| w["alive"] == true).count() >= n
        });
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for p in std::iter::once(&self.coordinator).chain(&self.workers) {
            let text = std::fs::read_to_string(&p.log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            out += &format!("--- {}\n", p.log.display());
            for l in tail.into_iter().rev() {
                out += l;
                out.push('\n');
            }
        }
        out
    }
}

fn job(st: &serde_json::Value, id: u64) -> serde_json::Value {
    st["jobs"].as_array().unwrap().iter().find(|j| j["id"] == id).cloned().unwrap_or_default()
}

fn layers_done(j: &serde_json::Value) -> u64 {
    j["forward_layers"].as_u64().unwrap_or(0) + j["backward_layers"].as_u64().unwrap_or(0)
}

/// Local mode's answers with the same search settings as a cluster job (the
/// bounded search by default, or as `extra` says), so that states compare.
fn local_solve(file: &Path, levels: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let args = ["solve", file.to_str().unwrap(), "--levels", levels, "--json"];
    let o = Command::new(BIN).args(args).args(extra).output().unwrap();
    String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn submit_detached(c: &Cluster, level: &str) -> u64 {
    let o = c.cli(&["submit", repo(MICROBAN).to_str().unwrap(), "--level", level, "--detach"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    out.trim().strip_prefix("job ").and_then(|r| r.split(':').next()).unwrap().parse().unwrap()
}

/// Submits `args` on `file` and waits: the job's JSON report, which must
/// have ended with exit 0.
fn submit_ok(c: &Cluster, file: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let o = c.cli(&[&["submit", file.to_str().unwrap()][..], args].concat());
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    serde_json::from_slice(&o.stdout).unwrap()
}

fn check_solution(level: usize, solution: &str, pushes: u64) {
    let text = std::fs::read_to_string(repo(MICROBAN)).unwrap();
    let all = split_collection(&text, MICROBAN);
    let v = verify(&all[level - 1].parse().unwrap(), solution);
    assert!(v.valid, "level {level}: the cluster's solution does not verify: {v:?}");
    assert_eq!(v.pushes as u64, pushes, "level {level}");
}

#[test]
fn cluster_of_three_solves_like_local_mode() {
    let mut c = Cluster::start(&["--min-workers", "3"], &[]);
    for i in 0..3 {
        c.start_worker(i);
    }
    c.wait_workers(3);
    let file = repo(MICROBAN);
    let o = c.cli(&["submit", file.to_str().unwrap(), "--levels", "1-12", "--json", "--partitions", "16"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let got: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let local = local_solve(&file, "1-12", &[]);
    let truth = truth();
    assert_eq!(got.len(), 12);
    for (g, l) in got.iter().zip(&local) {
        let level = g["level"].as_u64().unwrap() as usize;
        assert_eq!(g["status"], "solved", "level {level}: {g}");
        assert_eq!(g["pushes"], l["pushes"], "level {level}: cluster vs local");
        assert_eq!(g["pushes"].as_u64().unwrap() as usize, truth[level - 1].1, "level {level}: known optimum");
        // same engine, same deterministic meeting and rebuild: the same solution
        assert_eq!(g["solution"], l["solution"], "level {level}");
        assert_eq!(g["states"], l["states"], "level {level}");
        // the moves pass ran on the workers too, with the local answer
        assert_eq!(g["objective"], "pushes,moves", "level {level}: {g}");
        assert_eq!((&g["moves"], &g["moves_states"]), (&l["moves"], &l["moves_states"]), "level {level}");
        // the bounded search iterates over the same bounds on the workers
        let bounds = |v: &serde_json::Value| {
            v["iterations"]
                .as_array()
                .map(|a| a.iter().map(|i| (i["bound"].clone(), i["states"].clone())).collect::<Vec<_>>())
        };
        assert!(bounds(l).is_some_and(|b| !b.is_empty()), "level {level}: local ran no bounded iteration: {l}");
        assert_eq!(bounds(g), bounds(l), "level {level}: iterations");
        // the driver decides on PI-corrals for the workers, as locally
        assert_eq!(g["pi_corrals"], l["pi_corrals"], "level {level}");
        check_solution(level, g["solution"].as_str().unwrap(), g["pushes"].as_u64().unwrap());
    }
    // on Microban II #73 the level's sample turns PI-corrals off, where they
    // drop a few pushes: the workers search as the coordinator decided, and
    // `--keep-pi-corrals` reaches them too
    let m2 = repo("levels/Microban_II_135.xsb");
    let mut generated = Vec::new();
    for (extra, on) in [(&[][..], false), (&["--keep-pi-corrals"][..], true)] {
        let g = submit_ok(&c, &m2, &[&["--level", "73", "--json"][..], extra].concat());
        let l = &local_solve(&m2, "73-73", extra)[0];
        assert_eq!((&g["pi_corrals"], &l["pi_corrals"]), (&serde_json::json!(on), &serde_json::json!(on)), "{g}");
        assert_eq!((&g["states"], &g["generated"], &g["solution"]), (&l["states"], &l["generated"], &l["solution"]));
        generated.push(g["generated"].as_u64().unwrap());
    }
    assert!(generated[0] > generated[1], "the restriction drops pushes on #73: {generated:?}");
    // iterations that end below the optimum start the next one afresh on the
    // workers: under the matching alone, Microban I #1 fails at 4 and 6
    let args = ["--level", "1", "--json", "--no-pair-penalties"];
    let o = c.cli(&[&["submit", file.to_str().unwrap()][..], &args].concat());
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let g: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let l = &local_solve(&file, "1-1", &args[3..])[0];
    let bounds: Vec<u64> = g["iterations"].as_array().unwrap().iter().map(|i| i["bound"].as_u64().unwrap()).collect();
    assert_eq!(bounds, [4, 6, 8], "{g}");
    let counts = |v: &serde_json::Value| {
        let its = v["iterations"].as_array().unwrap().iter();
        its.map(|i| [&i["bound"], &i["states"], &i["generated"], &i["pruned"]].map(|x| x.as_u64())).collect::<Vec<_>>()
    };
    assert_eq!(counts(&g), counts(l), "iterations: cluster vs local");
    assert_eq!((&g["states"], &g["solution"]), (&l["states"], &l["solution"]));
    // a plain try between iterations runs on the workers as it does locally,
    // and one that runs out is dropped there too: Microban I #98 tries after
    // 88, goes on at 90, then the plain search follows the weak bound
    let by = |v: &serde_json::Value| {
        let its = v["iterations"].as_array().unwrap().iter();
        its.map(|i| (i["bound"].as_u64(), i["search"].as_str().map(String::from), i["states"].as_u64()))
            .collect::<Vec<_>>()
    };
    let args = ["--level", "98", "--json", "--objective", "pushes"];
    let g = submit_ok(&c, &file, &args);
    let l = &local_solve(&file, "98-98", &args[3..])[0];
    assert!(by(&g).iter().any(|i| i.1.as_deref() == Some("plain_try")), "{g}");
    assert_eq!(by(&g), by(l), "Microban I #98: cluster vs local");
    assert_eq!((&g["pushes"], &g["states"], &g["solution"]), (&l["pushes"], &l["states"], &l["solution"]));
    // the probe runs in the coordinator beside the workers' layers, with the
    // local answer: XSokoban #17, where it decides the last iteration
    let xsokoban = repo("levels/XSokoban_90.xsb");
    for extra in [&[][..], &["--no-probe"][..]] {
        let args = [&["--level", "17", "--json", "--objective", "pushes"][..], extra].concat();
        let g = submit_ok(&c, &xsokoban, &args);
        let l = &local_solve(&xsokoban, "17-17", &args[3..])[0];
        assert_eq!(by(&g), by(l), "XSokoban #17 {extra:?}: cluster vs local");
        assert_eq!((&g["pushes"], &g["solution"]), (&l["pushes"], &l["solution"]), "XSokoban #17 {extra:?}");
        let last = by(&g).last().unwrap().1.clone().unwrap();
        assert_eq!(last, if extra.is_empty() { "probe" } else { "layers" }, "{g}");
    }
    // the triple penalties travel with the job: each worker builds them, and
    // the iterations store what a local solve with them stores (XSokoban #2,
    // whose goal room they bound several times tighter than the pairs)
    let args = ["--level", "2", "--json", "--objective", "pushes", "--triples"];
    let o = c.cli(&[&["submit", xsokoban.to_str().unwrap()][..], &args].concat());
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let g: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let l = &local_solve(&xsokoban, "2-2", &args[3..])[0];
    let pairs_only = &local_solve(&xsokoban, "2-2", &args[3..5])[0];
    assert_eq!((&g["triples"], &l["triples"], &pairs_only["triples"]), (&true.into(), &true.into(), &false.into()));
    assert_eq!(counts(&g), counts(l), "XSokoban #2 --triples: cluster vs local");
    // the probe that decides it runs in the coordinator: its states count in
    // the job's totals as in a local solve's (they were left out before)
    assert_eq!(
        (&g["pushes"], &g["states"], &g["generated"]),
        (&l["pushes"], &l["states"], &l["generated"]),
        "{g}\n{l}"
    );
    assert!(g["states"].as_u64() < pairs_only["states"].as_u64(), "{g}\n{pairs_only}");
    // the moves pass's budget travels with the job: over it, the pass gives
    // up on the workers as it does locally (Microban I #3: 16 states)
    let o = c.cli(&["submit", file.to_str().unwrap(), "--level", "3", "--json", "--moves-states", "10"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let g: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let l = &local_solve(&file, "3-3", &["--moves-states", "10"])[0];
    assert_eq!((&g["objective"], &g["pushes"], &g["moves_note"]), (&l["objective"], &l["pushes"], &l["moves_note"]));
    assert_eq!(g["objective"], "pushes", "{g}");
    // one iteration below the optimum: no solution within it, exit 1
    let o = c.cli(&["submit", file.to_str().unwrap(), "--level", "1", "--json", "--upper-bound", "7"]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let g: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&g["status"], &g["reason"]),
        (&serde_json::json!("bounded"), &serde_json::json!("no solution within 7 pushes"))
    );
    // the work was spread: every worker held partitions and sent successors
    let st = c.status();
    for w in st["workers"].as_array().unwrap() {
        assert!(w["keys_sent"].as_u64().unwrap() > 0, "worker sent nothing: {w}");
        // successors of its own partitions never left the process
        assert!(w["keys_local"].as_u64().unwrap() > 0, "worker kept nothing local: {w}");
    }
}

#[test]
fn workers_over_their_memory_budget_spill_to_disk_and_agree_with_local_mode() {
    let mut c = Cluster::start(&["--min-workers", "2"], &[]);
    c.start_worker_with(0, "64K");
    c.start_worker_with(1, "64K");
    c.wait_workers(2);
    let file = repo(MICROBAN);
    // the plain search: the most layers and states to spill
    let o =
        c.cli(&["submit", file.to_str().unwrap(), "--levels", "35-36", "--json", "--partitions", "16", "--no-bound"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let got: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let local = local_solve(&file, "35-36", &["--no-bound"]);
    assert_eq!(got.len(), 2);
    for (g, l) in got.iter().zip(&local) {
        let level = g["level"].as_u64().unwrap() as usize;
        assert_eq!(g["pushes"], l["pushes"], "level {level}");
        assert_eq!(g["states"], l["states"], "level {level}");
        assert_eq!(g["solution"], l["solution"], "level {level}");
        assert!(g["disk_bytes"].as_u64().unwrap() > 0, "level {level}: nothing spilled under a 64 KiB budget: {g}");
    }
}

/// Peak resident memory (VmHWM) of a running child, in bytes.
fn peak_rss(p: &Proc) -> u64 {
    let pid = p.child.as_ref().expect("the worker runs").id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// Before: successors from other workers waited for the merge in RAM, so a
/// worker's `--mem` bounded its stored layers but not its incoming batches;
/// under 1 MiB this job's workers peaked 25 to 29 MiB above their idle size.
#[test]
fn incoming_successors_many_times_a_workers_budget_spill_and_peak_rss_stays_bounded() {
    let http = format!("127.0.0.1:{}", free_port());
    let mut c = Cluster::start(&["--min-workers", "2", "--http", &http], &[]);
    const MEM: u64 = 1 << 20;
    c.start_worker_with(0, "1MiB");
    c.start_worker_with(1, "1MiB");
    c.wait_workers(2);
    let idle: Vec<u64> = c.workers.iter().map(peak_rss).collect();
    let file = repo(MICROBAN);
    // the plain search of #144: 5.4 M states, its largest layer 1.4 M
    let args = ["--no-bound", "--objective", "pushes"];
    let mut submit = vec!["submit", file.to_str().unwrap(), "--level", "144", "--json"];
    submit.extend_from_slice(&args);
    let o = c.cli(&submit);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let got: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let local = &local_solve(&file, "144-144", &args)[0];
    for field in ["pushes", "states", "solution"] {
        assert_eq!(got[field], local[field], "{field}");
    }
    // the largest layer's new states alone, spread over the two workers, are
    // several times a worker's budget (its candidates are more still)
    let (_, body) = http_get(&http, &format!("/status.json?token={TOKEN}"));
    let st: serde_json::Value = serde_json::from_str(&body).unwrap();
    let j = &st["jobs"][0];
    let sizes = j["forward"].as_array().unwrap().iter().chain(j["backward"].as_array().unwrap());
    let largest = sizes.map(|v| v.as_u64().unwrap()).max().unwrap();
    assert!(largest * 8 / 2 >= 5 * MEM, "largest layer {largest} states");
    for w in c.status()["workers"].as_array().unwrap() {
        assert!(w["spilled_keys"].as_u64().unwrap() > 0, "no successors spilled under 1 MiB: {w}");
    }
    // peak RSS within the budget plus the worker's fixed overhead (about 10
    // MiB measured: HTTP/2 windows, send queues, shard write buffers, allocator
    // slack; docs/cluster.md)
    for (i, w) in c.workers.iter().enumerate() {
        let (before, peak) = (idle[i], peak_rss(w));
        // the worker logs the phase after which its peak rose
        let log = std::fs::read_to_string(&w.log).unwrap_or_default();
        let rises: Vec<&str> = log.lines().filter(|l| l.contains("peak rss rose")).collect();
        assert!(rises.iter().any(|l| l.contains("phase")), "worker {i} logged no peak:\n{log}");
        assert!(
            peak <= before + MEM + (16 << 20),
            "worker {i}: peak RSS {} MiB, idle {} MiB, budget 1 MiB; its rises:\n{}\n{}",
            peak >> 20,
            before >> 20,
            rises.join("\n"),
            c.logs()
        );
    }
}

/// Before: a worker's heartbeat counted its store's bytes under each
/// partition's lock, which a merge holds while it works on the partition, so a
/// large partition's merge silenced the heartbeat, the worker was declared
/// lost and the layer step started over (17 times on this job, which a longer
/// level turned into a job that never got past one layer).
#[test]
fn a_worker_started_before_its_coordinator_logs_the_wait_once_and_joins_when_it_is_up() {
    // the worker's join retry once logged a warning every 500 ms for as long
    // as the coordinator was away: thousands of lines an hour
    let mut c = Cluster::start(&[], &[]);
    c.coordinator.kill();
    c.start_worker(0);
    std::thread::sleep(Duration::from_millis(3500));
    let log = std::fs::read_to_string(&c.workers[0].log).unwrap();
    let waits = log.lines().filter(|l| l.contains("join failed")).count();
    assert!((1..=2).contains(&waits), "{waits} lines about the same failure:\n{log}");
    c.restart_coordinator();
    c.wait_workers(1);
    let log = std::fs::read_to_string(&c.workers[0].log).unwrap();
    let joined = log.lines().find(|l| l.contains("joined the cluster")).unwrap_or_else(|| panic!("{log}"));
    // tries at 0, 0.5 and 1.5 s after the worker started (and at 3.5 s, if it
    // started at once) failed before the coordinator came back: more than
    // the lines that said so
    let failed: u64 =
        joined.split("failed_tries=").nth(1).and_then(|t| t.split_whitespace().next()).unwrap().parse().unwrap();
    assert!(failed >= 3 && failed as usize > waits, "{joined}");
}

#[test]
fn a_submit_that_fails_to_log_its_job_leaves_no_job_behind() {
    // a full disk failed the submit, yet the job stayed queued and ran once
    // space was freed: a duplicate of the one submitted again
    let c = Cluster::start(&["--min-workers", "1"], &[]);
    // job 1's record cannot be written: a directory sits where its temporary file goes
    let jobs = c.dir.path().join("coordinator").join("jobs");
    std::fs::create_dir_all(jobs.join("1.job.tmp")).unwrap();
    let file = repo(MICROBAN);
    let o = c.cli(&["submit", file.to_str().unwrap(), "--level", "1", "--detach"]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stderr).contains("1.job.tmp"), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(c.status()["jobs"].as_array().unwrap().len(), 0, "{}", c.status());
}

#[test]
fn submit_detach_answers_in_json_when_asked_and_a_broken_level_fails_the_run() {
    // --detach printed text under --json, and exited 0 with a level refused
    let c = Cluster::start(&[], &[]);
    let file = c.dir.path().join("mixed.xsb");
    std::fs::write(&file, "; good\n#####\n#@$.#\n#####\n; bad\n######\n#@$$.#\n######\n").unwrap();
    let o = c.cli(&["submit", file.to_str().unwrap(), "--all", "--detach", "--json"]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let job = lines.iter().find(|l| l.get("job").is_some()).unwrap();
    assert_eq!((&job["level"], &job["title"]), (&1.into(), &"good".into()), "{job}");
    let bad = lines.iter().find(|l| l["status"] == "error").unwrap();
    assert!(bad["reason"].as_str().unwrap().contains("2 boxes but 1 goal"), "{bad}");
    assert_eq!(c.status()["jobs"].as_array().unwrap().len(), 1);
}

#[test]
fn time_queued_for_workers_is_neither_a_jobs_seconds_nor_spent_of_its_limit() {
    // `status` counted a job's wait for --min-workers in its seconds, and the
    // time limit ran from the submit, so a job queued long enough timed out
    // before a worker came
    let mut c = Cluster::start(&["--min-workers", "1"], &[]);
    let file = repo(MICROBAN);
    let o = c.cli(&["submit", file.to_str().unwrap(), "--level", "1", "--detach", "--json", "--timeout", "2"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let id = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["job"].as_u64().unwrap();
    std::thread::sleep(Duration::from_millis(3000));
    let j = job(&c.status(), id);
    assert_eq!((&j["state"], j["seconds"].as_f64()), (&"queued".into(), Some(0.0)), "{j}");
    c.start_worker(0);
    let st = c.wait_for("the job's end", 60, |st| matches!(job(st, id)["state"].as_str(), Some("finished" | "failed")));
    let j = job(&st, id);
    assert_eq!(j["result"]["status"], "solved", "{j}\n{}", c.logs());
    for seconds in [&j["seconds"], &j["result"]["seconds"]] {
        assert!(seconds.as_f64().is_some_and(|s| s < 2.0), "{j}");
    }
}

#[test]
fn a_worker_stopped_cleanly_leaves_and_a_lost_one_is_forgotten_after_the_resume_timeout() {
    // a worker stopped with SIGTERM was logged as lost, and every worker ever
    // seen stayed in `status` for as long as the coordinator ran
    let mut c = Cluster::start(&["--heartbeat-timeout", "0.6", "--resume-timeout", "1"], &[]);
    c.start_worker(0);
    c.start_worker(1);
    c.wait_workers(2);
    let pid = c.workers[0].child.as_ref().unwrap().id();
    assert!(Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success());
    let status = c.workers[0].child.as_mut().unwrap().wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", c.logs());
    let st = c.wait_for("one worker listed", 10, |st| st["workers"].as_array().unwrap().len() == 1);
    assert_eq!(st["workers"][0]["alive"], true, "{st}");
    let worker_log = std::fs::read_to_string(&c.workers[0].log).unwrap();
    assert!(worker_log.contains("left the cluster"), "{worker_log}");
    // worker 1 killed outright: lost, then forgotten
    c.workers[1].kill();
    c.wait_for("no worker listed", 20, |st| st["workers"].as_array().unwrap().is_empty());
    let log = std::fs::read_to_string(&c.coordinator.log).unwrap();
    let lost: Vec<&str> = log.lines().filter(|l| l.contains("worker lost")).collect();
    assert_eq!(lost.len(), 1, "only the killed worker was lost:\n{log}");
    assert!(log.contains("worker left the cluster") && log.contains("lost worker forgotten"), "{log}");
}

#[test]
fn submit_reports_a_broken_level_in_its_place_among_the_results() {
    // the broken level's error came first, before the results of the levels
    // listed ahead of it
    let mut c = Cluster::start(&["--min-workers", "1"], &[]);
    c.start_worker(0);
    c.wait_workers(1);
    let file = c.dir.path().join("mixed.xsb");
    let text = "; one\n#####\n#@$.#\n#####\n; two\n######\n#@$$.#\n######\n; three\n######\n#@$ .#\n######\n";
    std::fs::write(&file, text).unwrap();
    let o = c.cli(&["submit", file.to_str().unwrap(), "--all", "--json"]);
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let got: Vec<(u64, &str)> =
        lines.iter().map(|l| (l["level"].as_u64().unwrap(), l["status"].as_str().unwrap())).collect();
    assert_eq!(got, [(1, "solved"), (2, "error"), (3, "solved")], "{}", String::from_utf8_lossy(&o.stderr));
    assert_ne!(o.status.code(), Some(0));
}

#[test]
fn a_peer_that_is_no_sokoshard_node_is_named_as_such_and_a_silent_one_times_out() {
    // a peer that accepted the connection and said nothing held `status` for
    // 15 s and then said "http2 error"; one that closed at once said
    // "transport error"
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closing = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addrs = [silent.local_addr().unwrap().to_string(), closing.local_addr().unwrap().to_string()];
    std::thread::spawn(move || {
        let held: Vec<_> = silent.incoming().collect();
        drop(held);
    });
    std::thread::spawn(move || {
        for c in closing.incoming() {
            drop(c);
        }
    });
    let runs: Vec<_> = addrs
        .iter()
        .map(|a| {
            let a = a.clone();
            std::thread::spawn(move || {
                let t0 = Instant::now();
                let o = Command::new(BIN).args(["status", "--coordinator", &a, "--token", TOKEN]).output().unwrap();
                (o, t0.elapsed())
            })
        })
        .collect();
    let [(silent, waited), (closing, _)] =
        runs.into_iter().map(|r| r.join().unwrap()).collect::<Vec<_>>().try_into().unwrap();
    let err = String::from_utf8_lossy(&silent.stderr);
    assert_eq!(silent.status.code(), Some(2), "{err}");
    assert!(err.contains("no answer in time") && waited < Duration::from_secs(14), "{waited:?}: {err}");
    let err = String::from_utf8_lossy(&closing.stderr);
    assert_eq!(closing.status.code(), Some(2), "{err}");
    assert!(err.contains("does not answer as a sokoshard node"), "{err}");
}

#[test]
fn a_second_node_on_a_data_dir_in_use_is_refused() {
    // a second worker on one data dir joined with the same node id and both
    // wrote the same checkpoint; a second coordinator shared one job log
    let mut c = Cluster::start(&["--min-workers", "1"], &[]);
    c.start_worker(0);
    c.wait_workers(1);
    let coordinator_dir = c.dir.path().join("coordinator");
    let worker_dir = c.worker_dir(0);
    let listen = format!("127.0.0.1:{}", free_port());
    let second: [Vec<&str>; 2] = [
        vec!["coordinator", "--listen", &listen, "--data-dir", coordinator_dir.to_str().unwrap()],
        vec!["worker", "--join", &c.addr, "--listen", &listen, "--data-dir", worker_dir.to_str().unwrap()],
    ];
    for args in second {
        let o = Command::new(BIN).args(&args).args(["--token", TOKEN]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("is in use by another running process") && err.contains("/lock"), "{err}");
    }
    // the first ones go on; a worker killed leaves no stale lock behind
    c.workers[0].kill();
    c.start_worker(0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let joins = || std::fs::read_to_string(&c.workers[0].log).unwrap().matches("joined the cluster").count();
    while joins() < 2 {
        assert!(Instant::now() < deadline, "the restarted worker did not join:\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_long_merge_does_not_silence_the_heartbeat() {
    let mut c = Cluster::start(&["--min-workers", "2", "--heartbeat-timeout", "0.8"], &[]);
    c.start_worker(0);
    c.start_worker(1);
    c.wait_workers(2);
    let file = repo(MICROBAN);
    // one partition a worker: each merge of #144's large layers takes a while
    let args = ["--no-bound", "--objective", "pushes"];
    let mut submit = vec!["submit", file.to_str().unwrap(), "--level", "144", "--json", "--partitions", "2"];
    submit.extend_from_slice(&args);
    let o = c.cli(&submit);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let got: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(got["pushes"], 36);
    let log = std::fs::read_to_string(&c.coordinator.log).unwrap();
    assert!(!log.contains("worker lost"), "a worker went silent:\n{}", c.logs());
}

#[test]
fn cluster_handles_wide_keys() {
    // 20 boxes on a 10x10 floor: the rank needs a u128 key; one push solves it
    let mut rows = vec!["############".to_string()];
    for y in 0..10 {
        let mut r = String::from("#");
        for x in 0..10 {
            r.push(match (x, y) {
                (0, 0) => '@',
                (1, 9) => '$',
                (2, 9) => '.',
                (x, y) if (2..=5).contains(&y) && (2..7).contains(&x) => '*',
                (x, y) if y == 7 && x >= 8 => '*',
                _ => ' ',
            });
        }
        r.push('#');
        rows.push(r);
    }
    rows.push("############".to_string());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("wide.xsb");
    std::fs::write(&file, rows.join("\n") + "\n").unwrap();
    let local = local_solve(&file, "1-1", &[]);
    assert_eq!(local[0]["key"], "U128", "the test level must need wide keys: {}", local[0]);
    let mut c = Cluster::start(&["--min-workers", "2"], &[]);
    c.start_worker(0);
    c.start_worker(1);
    c.wait_workers(2);
    let o = c.cli(&["submit", file.to_str().unwrap(), "--level", "1", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let g: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(g["pushes"], local[0]["pushes"]);
    assert_eq!(g["solution"], local[0]["solution"]);
    assert_eq!(g["key"], "U128");
}

#[test]
fn a_killed_worker_comes_back_and_the_job_finishes_with_the_same_answer() {
    let mut c = Cluster::start(&["--min-workers", "3", "--layer-delay-ms", "250", "--heartbeat-timeout", "1.5"], &[]);
    for i in 0..3 {
        c.start_worker(i);
    }
    c.wait_workers(3);
    let id = submit_detached(&c, "3"); // 13 pushes, 23 layers
    c.wait_for("a few layers", 60, |st| layers_done(&job(st, id)) >= 4 && job(st, id)["state"] == "running");
    c.workers[1].kill(); // SIGKILL mid-job
    let st = c.wait_for("the job to pause", 30, |st| job(st, id)["state"] == "paused");
    let message = job(&st, id)["message"].as_str().unwrap().to_string();
    assert!(message.contains("worker"), "{st}");
    // the pause message once asked whether the dead worker's address was wrong
    assert!(!message.contains("wrong address"), "{message}");
    // same data dir, another port: the node id in the data dir brings its partitions back
    c.start_worker(1);
    let st = c.wait_for("the job to finish", 90, |st| {
        let j = job(st, id);
        j["state"] == "finished" || j["state"] == "failed"
    });
    let j = job(&st, id);
    assert_eq!(j["state"], "finished", "{j}\n{}", c.logs());
    assert_eq!(j["result"]["status"], "solved");
    assert_eq!(j["result"]["pushes"], 13);
    check_solution(3, j["result"]["solution"].as_str().unwrap(), 13);
    let local = local_solve(&repo(MICROBAN), "3-3", &[]);
    assert_eq!(j["result"]["solution"], local[0]["solution"]);
    assert_eq!(j["result"]["states"], local[0]["states"]);
    let log = std::fs::read_to_string(&c.coordinator.log).unwrap();
    assert!(log.contains("job resumes from the last completed layer"), "{}", c.logs());
}

/// A client that submits Microban I level `level` and follows it to the end (`--json`).
fn follow_level(c: &Cluster, level: usize, extra: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .args(["submit", repo(MICROBAN).to_str().unwrap(), "--level", &level.to_string(), "--json"])
        .args(extra)
        .args(["--coordinator", &c.addr, "--token", TOKEN])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Ctrl-C on a following `submit` cancels its job on the cluster at once (the
/// client waits on the signal, not on a timer) and still prints what the job
/// found, with exit 1. A hang-up (the terminal closed, an ssh session lost)
/// ends only the client: the job goes on.
#[test]
fn ctrl_c_on_submit_cancels_the_job_and_prints_it() {
    let mut c = Cluster::start(&["--min-workers", "1", "--layer-delay-ms", "250"], &[]);
    c.start_worker(0);
    c.wait_workers(1);
    let client = follow_level(&c, 3, &[]);
    c.wait_for("a few layers", 60, |st| layers_done(&job(st, 1)) >= 3 && job(st, 1)["state"] == "running");
    let killed = Command::new("kill").args(["-HUP", &client.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let out = client.wait_with_output().unwrap();
    assert_eq!(out.status.code(), None, "ended by the hang-up: {}", String::from_utf8_lossy(&out.stderr));
    let st = c.status();
    let at = layers_done(&job(&st, 1));
    c.wait_for("the job to go on", 60, |st| layers_done(&job(st, 1)) >= at + 2 && job(st, 1)["state"] == "running");
    let o = c.cli(&["cancel", "1"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));

    let client = follow_level(&c, 3, &[]);
    let id = 2;
    c.wait_for("a few layers", 60, |st| layers_done(&job(st, id)) >= 3 && job(st, id)["state"] == "running");
    let killed = Command::new("kill").args(["-INT", &client.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let out = client.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}\n{}", String::from_utf8_lossy(&out.stderr), c.logs());
    let g: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(g["status"], "timeout", "{g}");
    assert_eq!(g["reason"], "cancelled", "{g}");
    assert!(g["states"].as_u64().unwrap() > 0 && g["pushes"].is_null(), "{g}");
    let st = c.wait_for("the job to be cancelled", 30, |st| job(st, id)["state"] == "cancelled");
    assert!(layers_done(&job(&st, id)) < 23, "cancelled before its 23 layers: {st}");
}

#[test]
fn a_submit_that_loses_its_coordinator_names_the_job_to_look_up() {
    // past --reconnect-timeout the level's error gave the connection's
    // failure alone, not the job that may still be running
    let mut c = Cluster::start(&["--min-workers", "1", "--layer-delay-ms", "250"], &[]);
    c.start_worker(0);
    c.wait_workers(1);
    let client = follow_level(&c, 3, &["--reconnect-timeout", "1"]);
    c.wait_for("a few layers", 60, |st| layers_done(&job(st, 1)) >= 3 && job(st, 1)["state"] == "running");
    c.coordinator.kill();
    let out = client.wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    let g: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reason = g["reason"].as_str().unwrap_or_default();
    assert!(g["status"] == "error" && reason.starts_with("job 1: ") && reason.contains("sokoshard status"), "{g}");
}

/// Runs Microban I #3 (23 layers) on three workers, kills worker 1 a third of
/// the way, lets `replace` delete its data and start a worker in its place,
/// and checks that the job finishes with local mode's answer after rebuilding
/// the lost partitions.
fn lost_disk(replace: impl FnOnce(&mut Cluster)) -> Cluster {
    let mut c = Cluster::start(
        &["--min-workers", "3", "--layer-delay-ms", "250", "--heartbeat-timeout", "1.5", "--replace-after", "1"],
        &[],
    );
    for i in 0..3 {
        c.start_worker(i);
    }
    c.wait_workers(3);
    let id = submit_detached(&c, "3");
    c.wait_for("some layers", 60, |st| layers_done(&job(st, id)) >= 8 && job(st, id)["state"] == "running");
    c.workers[1].kill();
    replace(&mut c);
    let j = rebuilt_like_local(&c, id, &["pushes", "moves", "states", "solution"]);
    check_solution(3, j["result"]["solution"].as_str().unwrap(), 13);
    c
}

/// Waits for job `id` (Microban I #3) to end; checks that it finished after
/// rebuilding lost partitions with local mode's `fields`, and returns it.
fn rebuilt_like_local(c: &Cluster, id: u64, fields: &[&str]) -> serde_json::Value {
    let st = c.wait_for("the job to finish", 120, |st| {
        let j = job(st, id);
        j["state"] == "finished" || j["state"] == "failed"
    });
    let j = job(&st, id);
    assert_eq!(j["state"], "finished", "{j}\n{}", c.logs());
    let local = local_solve(&repo(MICROBAN), "3-3", &[]);
    for field in fields {
        assert_eq!(j["result"][field], local[0][field], "{field}: {j}");
    }
    let log = std::fs::read_to_string(&c.coordinator.log).unwrap();
    assert!(log.contains("lost partitions rebuilt"), "{}", c.logs());
    j
}

/// Before: a worker back without its checkpoints failed the job (`data
/// lost`), however long it had run.
#[test]
fn a_worker_back_without_its_data_gets_its_partitions_rebuilt_and_the_job_finishes() {
    lost_disk(|c| {
        // the same node (its node-id file stays) but its checkpoints are gone
        std::fs::remove_dir_all(c.worker_dir(1).join("jobs")).unwrap();
        c.start_worker(1);
    });
}

#[test]
fn a_fresh_worker_takes_over_a_lost_disk_and_the_job_finishes() {
    let c = lost_disk(|c| {
        // the machine is gone with its disk; a new worker (a new node id) joins
        std::fs::remove_dir_all(c.worker_dir(1)).unwrap();
        c.start_worker(3);
    });
    let log = std::fs::read_to_string(&c.coordinator.log).unwrap();
    assert!(log.contains("a spare worker takes over"), "{}", c.logs());
}

/// The k-games and the moves pass keep no checkpoint (the job log redoes them
/// after a coordinator restart), so a worker restarted during the moves pass
/// comes back without that search's layers: they are rebuilt from the others'.
#[test]
fn a_worker_restarted_in_the_moves_pass_gets_its_partitions_rebuilt() {
    let mut c = Cluster::start(&["--min-workers", "3", "--moves-delay-ms", "300", "--heartbeat-timeout", "1.5"], &[]);
    for i in 0..3 {
        c.start_worker(i);
    }
    c.wait_workers(3);
    let id = submit_detached(&c, "3");
    c.wait_for("the moves pass's search", 60, |st| {
        let j = job(st, id);
        j["message"].as_str().is_some_and(|m| m.contains("moves pass's search: backward layer 2"))
    });
    c.workers[1].kill();
    c.start_worker(1); // same data dir: the level's checkpoint is there, the moves pass's is not
    let fields = ["pushes", "moves", "states", "solution", "objective", "moves_states", "optimal_states"];
    rebuilt_like_local(&c, id, &fields);
}

/// Submits Microban I #3 with `extra` flags, restarts the coordinator once
/// the job's status passes `ready`, and checks that the client rides it out
/// and gets local mode's answer, resumed from the log.
fn restart_mid_job(extra: &[&str], ready: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    restart_mid_level(3, 13, extra, ready)
}

/// [`restart_mid_job`] on level `level`, of `pushes` pushes.
fn restart_mid_level(
    level: usize,
    pushes: u64,
    extra: &[&str],
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut c = Cluster::start(&["--min-workers", "3", "--layer-delay-ms", "250"], &[]);
    for i in 0..3 {
        c.start_worker(i);
    }
    c.wait_workers(3);
    // a client follows the job across the restart
    let mut client = follow_level(&c, level, extra);
    let id = 1;
    c.wait_for("the job to be where the restart should hit it", 60, |st| ready(&job(st, id)));
    c.restart_coordinator();
    c.wait_workers(3);
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(s) = client.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = client.kill();
            panic!("the client did not finish\n{}", c.logs());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = client.wait_with_output().unwrap();
    assert!(status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), c.logs());
    let g: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(g["pushes"], pushes);
    check_solution(level, g["solution"].as_str().unwrap(), pushes);
    let log = std::fs::read_to_string(&c.coordinator.log).unwrap();
    assert!(log.contains("job resumes from the log"), "{}", c.logs());
    let local = local_solve(&repo(MICROBAN), &format!("{level}-{level}"), extra);
    assert_eq!(g["solution"], local[0]["solution"]);
    // counted across the restart: every iteration's states once
    assert_eq!(g["states"], local[0]["states"]);
    g
}

#[test]
fn a_restarted_coordinator_resumes_its_job_from_the_log() {
    restart_mid_job(&[], |j| layers_done(j) >= 5);
}

/// Under the matching alone #3 iterates at 11, then 13: a restart in the
/// second iteration resumes that one (the log names it), not the first.
#[test]
fn a_restarted_coordinator_resumes_the_bound_iteration_it_was_in() {
    let g = restart_mid_job(&["--no-pair-penalties"], |j| j["bound"] == 13 && layers_done(j) >= 4);
    // the restarted driver ran only what was left: the rest of iteration 13
    let bounds: Vec<u64> = g["iterations"].as_array().unwrap().iter().map(|i| i["bound"].as_u64().unwrap()).collect();
    assert_eq!(bounds, [13], "{g}");
}

/// Regression: a coordinator restarted during a plain try resumed it as the
/// plain search with no budget (the log said only "no bound"). The log now
/// keeps the try's budget and the bound after it: Microban I #150 (43
/// pushes) searches 39 and 41, tries the plain search, which runs out, and
/// solves at 43; restarted in the try, the job goes on with the try, which
/// runs out as before, then 43, with every state counted once as in local
/// mode (with the tables fixed at k = 2: a resumed job builds the larger
/// tables at once, which the automatic choice builds only if the search
/// outgrows the small ones).
#[test]
fn a_coordinator_restarted_in_a_plain_try_resumes_the_try_with_its_budget() {
    let ready = |j: &serde_json::Value| j["plain_try"]["back_to"] == 43 && layers_done(j) >= 4;
    let g = restart_mid_level(150, 43, &["--kpg", "2"], ready);
    let after: Vec<(Option<u64>, &str)> = g["iterations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["bound"].as_u64(), i["search"].as_str().unwrap()))
        .collect();
    assert_eq!(after, [(None, "plain_try"), (Some(43), "layers")], "{g}");
}

/// The job log keeps each job in its own file: a record damaged while the
/// coordinator was down (a flipped byte, a file cut short) fails its own job
/// with a message naming the file and what is wrong, keeps the damaged bytes
/// aside, and the other jobs come back as they were.
#[test]
fn a_damaged_job_record_fails_its_own_job_and_the_others_survive() {
    let mut c = Cluster::start(&[], &[]);
    c.start_worker(0);
    c.wait_workers(1);
    let file = repo(MICROBAN);
    for level in ["1", "2", "3"] {
        let o = c.cli(&["submit", file.to_str().unwrap(), "--level", level, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    }
    let before = job(&c.status(), 3);
    assert_eq!(before["state"], "finished", "{before}");
    let mut flipped = Vec::new();
    c.restart_coordinator_after(|dir| {
        let jobs = dir.join("jobs");
        flipped = std::fs::read(jobs.join("1.job")).unwrap();
        let at = flipped.len() - 10;
        flipped[at] ^= 0x20;
        std::fs::write(jobs.join("1.job"), &flipped).unwrap();
        let whole = std::fs::read(jobs.join("2.job")).unwrap();
        std::fs::write(jobs.join("2.job"), &whole[..whole.len() / 2]).unwrap();
    });
    let st = c.status();
    let (one, two) = (job(&st, 1), job(&st, 2));
    assert_eq!((&one["state"], &two["state"]), (&serde_json::json!("failed"), &serde_json::json!("failed")), "{st}");
    let m1 = one["message"].as_str().unwrap();
    assert!(m1.contains("1.job") && m1.contains("checksum mismatch") && m1.contains("1.job.corrupt"), "{m1}");
    let m2 = two["message"].as_str().unwrap();
    assert!(m2.contains("2.job") && m2.contains("header says"), "{m2}");
    // the damaged bytes are kept, not overwritten
    let jobs = c.dir.path().join("coordinator").join("jobs");
    assert_eq!(std::fs::read(jobs.join("1.job.corrupt")).unwrap(), flipped);
    // the intact job is as it was, result and all
    assert_eq!(job(&st, 3), before);
    // a new job gets a fresh id and runs
    let o = c.cli(&["submit", file.to_str().unwrap(), "--level", "4", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let st = c.status();
    assert_eq!(job(&st, 4)["state"], "finished", "{st}");
    assert_eq!(st["jobs"].as_array().unwrap().len(), 4, "{st}");
    // and on the next restart the failed jobs stay failed, quietly
    c.restart_coordinator();
    let again = c.status();
    assert_eq!(job(&again, 1)["message"], one["message"]);
    assert_eq!(job(&again, 3), before);
}

#[test]
fn wrong_or_missing_tokens_and_other_protocol_versions_are_refused() {
    let mut c = Cluster::start(&[], &[]);
    // a client with a wrong token
    let o = Command::new(BIN)
        .args(["status", "--coordinator", &c.addr, "--token", "not-the-token"])
        .env_remove("SOKOSHARD_TOKEN")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unauthenticated") || err.contains("Unauthenticated"), "{err}");
    assert!(err.contains("wrong cluster token"), "{err}");
    // a worker with a wrong token stops with a clear message
    let waddr = format!("127.0.0.1:{}", free_port());
    let o = Command::new(BIN)
        .args(["worker", "--join", &c.addr, "--listen", &waddr, "--token", "nope", "--threads", "1"])
        .args(["--data-dir", c.dir.path().join("intruder").to_str().unwrap()])
        .env_remove("SOKOSHARD_TOKEN")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refused") && err.contains("wrong cluster token"), "{err}");
    c.start_worker(0);
    c.wait_workers(1);
    let st = c.status();
    assert_eq!(st["workers"].as_array().unwrap().len(), 1, "the intruder must not be listed: {st}");

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let addr = c.addr.clone();
    rt.block_on(async move {
        // no token at all
        let mut raw = CoordinatorClient::connect(format!("http://{addr}")).await.unwrap();
        let e = raw.list_jobs(ListJobsRequest {}).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
        // the right token, another protocol version
        let mut ok = coordinator(&NetConfig::new(TOKEN), &addr);
        let e = ok
            .join(JoinRequest {
                protocol_version: PROTOCOL_VERSION + 1,
                node_id: "w-x".into(),
                address: "127.0.0.1:1".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        assert!(e.message().contains("protocol version"), "{}", e.message());
        let e = ok
            .submit(SubmitRequest {
                protocol_version: 0,
                level_text: "#####\n#@$.#\n#####\n".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    });
}

#[test]
fn malformed_and_oversized_requests_get_error_statuses() {
    let mut c = Cluster::start(&[], &[]);
    c.start_worker(0);
    c.wait_workers(1);
    let st = c.status();
    let waddr = st["workers"][0]["address"].as_str().unwrap().to_string();
    let addr = c.addr.clone();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let net = NetConfig::new(TOKEN);
        let mut co = coordinator(&net, &addr);
        let submit =
            |text: String| SubmitRequest { protocol_version: PROTOCOL_VERSION, level_text: text, ..Default::default() };
        // bad level text
        let e = co.submit(submit("#####\n#@$ #\n#####\n".into())).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        let e = co.submit(submit("hello".into())).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        // over the level limit, and over the message limit
        let e = co.submit(submit("#".repeat(2 << 20))).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        // a client that lets itself send 64 MiB: the server refuses past its 16 MiB
        let mut big =
            CoordinatorClient::with_interceptor(net.channel(&addr).unwrap(), AttachToken::new(TOKEN).unwrap())
                .max_encoding_message_size(64 << 20);
        let e = big.submit(submit("#".repeat(20 << 20))).await.unwrap_err();
        assert!(matches!(e.code(), tonic::Code::ResourceExhausted | tonic::Code::OutOfRange), "{e:?}");
        // a title of megabytes once made every later `status` fail; two
        // levels in one text were solved as the first alone
        let mut r = submit("#####\n#@$.#\n#####\n".into());
        r.title = "t".repeat(1 << 20);
        let e = co.submit(r).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        let e = co.submit(submit("#####\n#@$.#\n#####\n\n#####\n#.$@#\n#####\n".into())).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("holds 2 levels"), "{e:?}");
        // bad partitions
        let mut r = submit("#####\n#@$.#\n#####\n".into());
        r.options = Some(JobOptions { partitions: 3, ..Default::default() });
        assert_eq!(co.submit(r).await.unwrap_err().code(), tonic::Code::InvalidArgument);
        // a timeout past any clock, which once made the job's deadline panic
        for timeout in [1e30, f64::INFINITY, f64::NAN, -1.0] {
            let mut r = submit("#####\n#@$.#\n#####\n".into());
            r.options = Some(JobOptions { timeout, ..Default::default() });
            let e = co.submit(r).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{timeout}: {e:?}");
            assert!(e.message().contains("timeout"), "{e:?}");
        }
        // a worker, called directly: a job with this worker owning half the partitions
        let mut w = worker(&net, &waddr);
        let hello = w.hello(HelloRequest { protocol_version: PROTOCOL_VERSION }).await.unwrap().into_inner();
        let table = PartitionTable {
            nodes: vec![hello.node_id.clone(), "w-other".into()],
            addresses: vec![waddr.clone(), "127.0.0.1:1".into()],
            owners: vec![0, 1, 0, 1],
        };
        let load = LoadRequest {
            protocol_version: PROTOCOL_VERSION,
            job_id: 4242,
            level_text: "#######\n#@ $ .#\n#######\n".into(),
            options: Some(JobOptions::default()),
            table: Some(table.clone()),
            ..Default::default()
        };
        w.load(load.clone()).await.unwrap();
        let e = w.lookup(LookupRequest { job_id: 4242, side: 0, layer: 0, keys: vec![1, 2, 3] }).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        let e = w.seed(SeedRequest { job_id: 4242, side: 7, keys: vec![] }).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        // keys of partitions this worker does not own
        let keys: Vec<u8> = (0u64..64).flat_map(|k| k.to_le_bytes()).collect();
        let e = w.seed(SeedRequest { job_id: 4242, side: 0, keys }).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        // garbage successor batches
        let batches = vec![KeyBatch { job_id: 4242, step: 1, partition: 0, count: 10, data: vec![9; 40] }];
        let e = w.deliver(tokio_stream::iter(batches)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        let batches = vec![KeyBatch { job_id: 4242, step: 1, partition: 99, count: 1, data: vec![] }];
        assert_eq!(w.deliver(tokio_stream::iter(batches)).await.unwrap_err().code(), tonic::Code::InvalidArgument);
        let batches = vec![KeyBatch { job_id: 4242, step: 1, partition: 0, count: 1 << 30, data: vec![] }];
        assert_eq!(w.deliver(tokio_stream::iter(batches)).await.unwrap_err().code(), tonic::Code::ResourceExhausted);
        // a refused request leaves the step fence where it was: a garbage
        // batch or an expand of a layer the worker lacks, claiming the
        // largest step, once wedged every later step of the job
        let batches = vec![KeyBatch { job_id: 4242, step: u64::MAX, partition: 0, count: 1, data: vec![0; 8] }];
        assert_eq!(w.deliver(tokio_stream::iter(batches)).await.unwrap_err().code(), tonic::Code::InvalidArgument);
        let far = ExpandRequest { job_id: 4242, side: 0, layer: 7, step: u64::MAX, ..Default::default() };
        assert_eq!(w.expand(far).await.unwrap_err().code(), tonic::Code::FailedPrecondition);
        let good = |step| vec![KeyBatch { job_id: 4242, step, partition: 0, count: 0, data: vec![] }];
        w.deliver(tokio_stream::iter(good(5))).await.unwrap();
        // a fence set far ahead by a good one (a coordinator whose clock ran
        // ahead, then was set back) starts again when the job is loaded again
        w.deliver(tokio_stream::iter(good(u64::MAX - 1))).await.unwrap();
        let e = w.deliver(tokio_stream::iter(good(6))).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Aborted, "{e:?}");
        w.load(load.clone()).await.unwrap();
        w.deliver(tokio_stream::iter(good(6))).await.unwrap();
        // an abort names its step: a late one for an older step leaves the
        // current one be; an aborted step refuses its late batches
        w.deliver(tokio_stream::iter(good(7))).await.unwrap();
        w.abort(AbortRequest { job_id: 4242, step: 6 }).await.unwrap();
        w.deliver(tokio_stream::iter(good(7))).await.unwrap();
        w.abort(AbortRequest { job_id: 4242, step: 7 }).await.unwrap();
        let e = w.deliver(tokio_stream::iter(good(7))).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Aborted, "{e:?}");
        assert!(e.message().contains("step 7 was aborted"), "{e:?}");
        w.deliver(tokio_stream::iter(good(8))).await.unwrap();
        // a malformed table
        let mut bad = load.clone();
        bad.table = Some(PartitionTable { owners: vec![0, 5, 0, 1], ..table.clone() });
        assert_eq!(w.load(bad).await.unwrap_err().code(), tonic::Code::InvalidArgument);
        // resuming from a checkpoint that is not there: data loss, said plainly
        let mut gone = load.clone();
        gone.job_id = 4343;
        gone.forward_layers = 3;
        let e = w.load(gone).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::DataLoss, "{e:?}");
        assert!(e.message().contains("the data is gone"), "{}", e.message());
        // and the worker is still there
        w.hello(HelloRequest { protocol_version: PROTOCOL_VERSION }).await.unwrap();
    });
    assert!(c.workers[0].child.as_mut().unwrap().try_wait().unwrap().is_none(), "the worker died\n{}", c.logs());
}

/// A worker's own port checks the token as the coordinator's does, and refuses
/// loads over its limits; `health --worker` with a wrong token says so.
#[test]
fn a_worker_port_refuses_wrong_tokens_and_oversized_loads() {
    let mut c = Cluster::start(&[], &[]);
    c.start_worker(0);
    c.wait_workers(1);
    let waddr = c.status()["workers"][0]["address"].as_str().unwrap().to_string();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let addr = waddr.clone();
    rt.block_on(async move {
        let hello = || HelloRequest { protocol_version: PROTOCOL_VERSION };
        // no token at all
        let mut raw = WorkerClient::connect(format!("http://{addr}")).await.unwrap();
        let e = raw.hello(hello()).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
        let e = raw.load(LoadRequest::default()).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
        // a wrong token
        let mut wrong = worker(&NetConfig::new("not-the-token"), &addr);
        let e = wrong.hello(hello()).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
        assert!(e.message().contains("wrong cluster token"), "{}", e.message());
        let e = wrong.abort(AbortRequest { job_id: 1, step: 0 }).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
        // the right token, a load over the level limit, and one over the message limit
        let net = NetConfig::new(TOKEN);
        let mut w = worker(&net, &addr);
        let load = |text: String| LoadRequest {
            protocol_version: PROTOCOL_VERSION,
            job_id: 77,
            level_text: text,
            options: Some(JobOptions::default()),
            ..Default::default()
        };
        let e = w.load(load("#".repeat(2 << 20))).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        let mut big = WorkerClient::with_interceptor(net.channel(&addr).unwrap(), AttachToken::new(TOKEN).unwrap())
            .max_encoding_message_size(64 << 20);
        let mut huge = load("#####\n#@$.#\n#####\n".into());
        huge.kpg_tables = vec![0; 20 << 20];
        let e = big.load(huge).await.unwrap_err();
        assert!(matches!(e.code(), tonic::Code::ResourceExhausted | tonic::Code::OutOfRange), "{e:?}");
        // and it still answers
        w.hello(hello()).await.unwrap();
    });
    // health of the worker: the right token is healthy, a wrong one is named
    let health = |token: &str| {
        Command::new(BIN)
            .args(["health", &waddr, "--worker", "--token", token])
            .env_remove("SOKOSHARD_TOKEN")
            .output()
            .unwrap()
    };
    let o = health(TOKEN);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let o = health("nope");
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stdout));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unhealthy") && err.contains("wrong cluster token"), "{err}");
    // the other kind of node: said so, where the reason was empty
    for (addr, worker) in [(waddr.as_str(), false), (c.addr.as_str(), true)] {
        let mut cmd = Command::new(BIN);
        cmd.args(["health", addr, "--token", TOKEN]).env_remove("SOKOSHARD_TOKEN");
        if worker {
            cmd.arg("--worker");
        }
        let o = cmd.output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stdout));
        let err = String::from_utf8_lossy(&o.stderr);
        let want = if worker { "this is not a worker" } else { "this is not a coordinator" };
        assert!(err.contains(want), "{err}");
    }
    assert!(c.workers[0].child.as_mut().unwrap().try_wait().unwrap().is_none(), "the worker died\n{}", c.logs());
}

/// A self-signed certificate and key for `names`, written under `dir` as
/// `<stem>.pem` and `<stem>-key.pem`.
fn self_signed(dir: &Path, stem: &str, names: &[&str]) -> (PathBuf, PathBuf) {
    let ck = rcgen::generate_simple_self_signed(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let (cert, key) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}-key.pem")));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

/// TLS that cannot be trusted fails with an error that says why: a client
/// trusting another CA, and a certificate issued for another name (and the fix
/// for the latter, `--tls-domain`, works).
#[test]
fn tls_failures_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path(), "served", &["elsewhere.example"]);
    let (other, _) = self_signed(dir.path(), "other", &["127.0.0.1"]);
    let tls = s(&["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()]);
    let c = Cluster::start(&[], &tls);
    let status = |extra: &[&str]| {
        Command::new(BIN)
            .args(["status", "--coordinator", &c.addr, "--token", TOKEN])
            .args(extra)
            .env_remove("SOKOSHARD_TOKEN")
            .output()
            .unwrap()
    };
    // a client that trusts another CA
    let o = status(&["--tls-ca", other.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stdout));
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("wrong CA: {err}");
    assert!(err.contains("not signed by the CA this client trusts") && err.contains("--tls-ca"), "{err}");
    // the right CA, but the certificate names another host
    let o = status(&["--tls-ca", cert.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stdout));
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("name mismatch: {err}");
    assert!(err.contains("not issued for the address dialled") && err.contains("--tls-domain"), "{err}");
    // the name the certificate was issued for
    let o = status(&["--tls-ca", cert.to_str().unwrap(), "--tls-domain", "elsewhere.example"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
}

#[test]
fn tls_cluster_solves_and_plain_clients_are_turned_away() {
    let dir = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let tls = s(&["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()]);
    let mut c = Cluster::start(&[], &tls);
    c.start_worker(0);
    c.wait_workers(1);
    // a client that trusts the CA
    let o = Command::new(BIN)
        .args(["submit", repo(MICROBAN).to_str().unwrap(), "--level", "2", "--json"])
        .args(["--coordinator", &c.addr, "--token", TOKEN, "--tls-ca", cert.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let g: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(g["pushes"], 3);
    // a plain-text client gets nowhere
    let o = Command::new(BIN).args(["status", "--coordinator", &c.addr, "--token", TOKEN]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stdout));
    // the library's client with the CA
    let addr = c.addr.clone();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let mut net = NetConfig::new(TOKEN);
        net.tls = Some(TlsFiles { ca: Some(cert.clone()), ..Default::default() });
        let mut co = coordinator(&net, &addr);
        co.list_workers(ListWorkersRequest {}).await.unwrap();
    });
}

#[test]
fn k_pg_tables_built_on_the_cluster_match_local_ones_and_jobs_use_them() {
    let mut c = Cluster::start(&["--min-workers", "2"], &[]);
    c.start_worker(0);
    c.start_worker(1);
    c.wait_workers(2);
    let file = repo(MICROBAN);
    // the same k-games played by the same engine: the same database, byte for byte
    let (local, cluster) = build_locally_and_on_the_cluster(&c, "10", Some("2"));
    assert_eq!(local, cluster);
    // without --k both choose k as a solve would: #10's three boxes, all of them
    let (local, cluster) = build_locally_and_on_the_cluster(&c, "10", None);
    assert_eq!(local, cluster);
    let show = Command::new(BIN).args(["deadlocks", "show"]).arg(c.dir.path().join("local.kdb")).output().unwrap();
    assert!(String::from_utf8_lossy(&show.stdout).contains("k=3"), "{}", String::from_utf8_lossy(&show.stdout));
    // a job that uses k-PG tables finds what local mode finds with them
    let o = c.cli(&["submit", file.to_str().unwrap(), "--levels", "10-12", "--kpg", "2", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let got: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let o = Command::new(BIN)
        .args(["solve", file.to_str().unwrap(), "--levels", "10-12", "--kpg", "2", "--json"])
        .output()
        .unwrap();
    let local: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(got.len(), 3);
    for (g, l) in got.iter().zip(&local) {
        let level = g["level"].as_u64().unwrap() as usize;
        assert_eq!(g["pushes"], l["pushes"], "level {level}");
        assert_eq!(g["states"], l["states"], "level {level}: the tables prune the same states");
        assert_eq!(g["solution"], l["solution"], "level {level}");
        assert_eq!(g["kpg"], l["kpg"], "level {level}");
        let (kpg_seconds, seconds) = (g["kpg_seconds"].as_f64().unwrap(), g["seconds"].as_f64().unwrap());
        assert!(kpg_seconds > 0.0 && kpg_seconds < seconds, "the tables are part of the job's time: {g}");
        check_solution(level, g["solution"].as_str().unwrap(), g["pushes"].as_u64().unwrap());
    }
}

#[test]
fn a_cluster_database_build_stopped_by_its_time_limit_keeps_the_k_it_finished() {
    let mut c = Cluster::start(&["--min-workers", "1"], &[]);
    c.start_worker(0);
    c.wait_workers(1);
    let db = c.dir.path().join("x24.kdb");
    let args = crate::kpg::cut_build(&db);
    let o = c.cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    crate::kpg::check_cut_build(&o, &db);
    let st = c.status();
    let j = st["jobs"].as_array().unwrap().last().unwrap();
    assert_eq!(j["state"], "finished", "{j}");
    assert!(j["message"].as_str().unwrap().starts_with("stopped by the time limit"), "{j}");
    // a collection's databases, a job per level, into a directory
    let dir = c.dir.path().join("mb");
    let file = repo(MICROBAN);
    let o = c.cli(&[
        "deadlocks",
        "build",
        file.to_str().unwrap(),
        "--levels",
        "1-2",
        "--k",
        "2",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    let o = Command::new(BIN)
        .args(["solve", file.to_str().unwrap(), "--levels", "1-2", "--json", "--deadlocks"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let read = String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.contains(dir.to_str().unwrap())).count();
    assert_eq!(read, 2);
}

#[test]
fn a_cluster_database_build_interrupted_cancels_its_job_and_keeps_the_k_it_finished() {
    // Ctrl-C or SIGTERM on `deadlocks build --coordinator` ended the client
    // with nothing written, while the job went on running on the cluster
    let mut c = Cluster::start(&["--min-workers", "1"], &[]);
    c.start_worker(0);
    c.wait_workers(1);
    let db = c.dir.path().join("x24.kdb");
    let file = repo("levels/XSokoban_90.xsb");
    let child = Command::new(BIN)
        .args(["deadlocks", "build", file.to_str().unwrap(), "--level", "24", "--k", "4", "-o"])
        .arg(&db)
        .args(["--coordinator", &c.addr, "--token", TOKEN])
        .args(&c.tls)
        .env_remove("SOKOSHARD_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // k = 1 to 3 take well under a second, the 4-box game many seconds
    let in_k4 = |st: &serde_json::Value| {
        st["jobs"].as_array().is_some_and(|j| j.iter().any(|j| j["message"].as_str().is_some_and(|m| m.contains("k4"))))
    };
    c.wait_for("the 4-box game", 60, in_k4);
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}\n{}", c.logs());
    assert!(err.contains("cancelled") && err.contains("k = 1..3"), "{err}");
    let show = Command::new(BIN).args(["deadlocks", "show"]).arg(&db).output().unwrap();
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(show.contains("k=3 forward") && !show.contains("k=4"), "{show}");
    let st = c.status();
    let j = st["jobs"].as_array().unwrap().last().unwrap();
    assert_eq!(j["state"], "cancelled", "{j}");
}

#[test]
fn a_k_game_at_the_box_count_on_the_cluster_is_played_without_move_pruning() {
    // Microban I #10 has three boxes, so its 3-game is the whole level. Workers
    // once took a k-game with k at the box count for the level's own search and
    // played it forward under the PI-corral restriction: it missed states that
    // the tables then called backward deadlocks (8 backward patterns where the
    // k-game has 2), and a job's solution differed from local mode's.
    let mut c = Cluster::start(&["--min-workers", "1"], &[]);
    c.start_worker(0);
    c.wait_workers(1);
    let (local, cluster) = build_locally_and_on_the_cluster(&c, "10", Some("3"));
    let show = Command::new(BIN).args(["deadlocks", "show"]).arg(c.dir.path().join("local.kdb")).output().unwrap();
    assert!(String::from_utf8_lossy(&show.stdout).contains("k=3"), "{}", String::from_utf8_lossy(&show.stdout));
    assert_eq!(local, cluster);
}

/// `deadlocks build` of a Microban I level (with `--k` when `k` is given), the
/// same command line run locally (to `local.kdb`) and through the coordinator
/// (`cluster.kdb`): both files.
fn build_locally_and_on_the_cluster(c: &Cluster, level: &str, k: Option<&str>) -> (Vec<u8>, Vec<u8>) {
    let file = repo(MICROBAN);
    let local_db = c.dir.path().join("local.kdb");
    let cluster_db = c.dir.path().join("cluster.kdb");
    let k = k.map_or(vec![], |k| vec!["--k", k]);
    let build = [&["deadlocks", "build", file.to_str().unwrap(), "--level", level][..], &k, &["-o"]].concat();
    let o = Command::new(BIN).args(&build).arg(&local_db).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let o = c.cli(&[&build[..], &[cluster_db.to_str().unwrap()]].concat());
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    (std::fs::read(&local_db).unwrap(), std::fs::read(&cluster_db).unwrap())
}

#[test]
fn cancel_timeout_and_max_states_stop_cluster_jobs() {
    // each layer takes at least 250 ms, so Microban I #3 (23 layers) runs for
    // seconds: long enough to cancel, longer than a one-second timeout
    let mut c = Cluster::start(&["--min-workers", "1", "--layer-delay-ms", "250"], &[]);
    c.start_worker(0);
    c.wait_workers(1);
    let id = submit_detached(&c, "3");
    c.wait_for("a few layers", 60, |st| layers_done(&job(st, id)) >= 2 && job(st, id)["state"] == "running");
    let o = c.cli(&["cancel", &id.to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    // the job stops after the answer: it says so, not "running" as if nothing happened
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.starts_with(&format!("job {id}: cancelling (it was running")), "{said}");
    let st = c.wait_for("the job to be cancelled", 30, |st| job(st, id)["state"] == "cancelled");
    assert!(job(&st, id)["result"]["status"] != "solved", "{st}");
    // a cancel, not a time limit: the result and the status table say which
    assert_eq!(job(&st, id)["result"]["reason"], "cancelled", "{st}");
    let o = c.cli(&["status"]);
    let table = String::from_utf8_lossy(&o.stdout);
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{id} cancelled")))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.trim_end().ends_with("cancelled") && !row.contains("timeout"), "{row}");
    // a job that is not there: a plain error, not a panic or a hang
    let o = c.cli(&["cancel", "999999"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("999999"), "{}", String::from_utf8_lossy(&o.stderr));

    let file = repo(MICROBAN);
    let file = file.to_str().unwrap();
    let o = c.cli(&["submit", file, "--level", "3", "--timeout", "1", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((&v["status"], &v["reason"]), (&"timeout".into(), &"stopped by the time limit".into()), "{v}");
    assert!(v["seconds"].as_f64().unwrap() >= 1.0 && v["seconds"].as_f64().unwrap() < 10.0, "{v}");

    // the bounded search stores 16 states on #3: a limit of 10 stops it
    let o = c.cli(&["submit", file, "--level", "3", "--max-states", "10", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["status"], "limit", "{v}");
    assert!(v["states"].as_u64().unwrap() >= 10 && v["states"].as_u64().unwrap() < 16, "{v}");
}

#[test]
fn a_lost_worker_that_never_returns_fails_the_job_after_the_resume_timeout() {
    let mut c = Cluster::start(
        &["--min-workers", "2", "--layer-delay-ms", "250", "--heartbeat-timeout", "1.5", "--resume-timeout", "3"],
        &[],
    );
    c.start_worker(0);
    c.start_worker(1);
    c.wait_workers(2);
    let id = submit_detached(&c, "3");
    c.wait_for("a few layers", 60, |st| layers_done(&job(st, id)) >= 2 && job(st, id)["state"] == "running");
    c.workers[1].kill(); // and never started again
    let st = c.wait_for("the job to fail", 60, |st| job(st, id)["state"] == "failed");
    let msg = job(&st, id)["message"].as_str().unwrap().to_string();
    // the message docs/cluster.md promises: the job fails saying the worker stayed away
    assert!(msg.contains("did not come back with its data within 3 s"), "{msg}\n{}", c.logs());
    assert!(job(&st, id)["result"].is_null(), "a failed job has no answer: {st}");
}

/// A plain HTTP/1.1 GET: the status line and headers, and the body.
fn http_get(addr: &str, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (head.to_string(), body.to_string())
}

/// The coordinator's status page (`--http`): behind the cluster token; in a
/// real browser it lists the workers and draws both sides' frontiers per
/// layer; a solved job links to its replay.
#[test]
fn the_status_page_shows_the_workers_the_jobs_and_the_frontier_chart() {
    let http = format!("127.0.0.1:{}", free_port());
    let mut c = Cluster::start(&["--http", &http], &[]);
    c.start_worker(0);
    c.start_worker(1);
    c.wait_workers(2);
    let file = repo(MICROBAN);
    // a level of some 40 layers, so that the chart has lines to draw
    let replay = c.dir.path().join("replay.html");
    let o = c.cli(&["submit", file.to_str().unwrap(), "--level", "16", "--json", "--html", replay.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let solved: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // submit --html: the same replay page as a local solve of the same solution
    let o = Command::new(BIN)
        .args(["replay", file.to_str().unwrap(), "--level", "16", "--solution", solved["solution"].as_str().unwrap()])
        .args(["--html", c.dir.path().join("local.html").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&replay).unwrap(), std::fs::read(c.dir.path().join("local.html")).unwrap());
    // the token rule: none, a wrong one, the right one in the address or a header
    let (head, body) = http_get(&http, "/status.json");
    assert!(head.starts_with("HTTP/1.1 401") && body.contains("no cluster token"), "{head}\n{body}");
    let (head, body) = http_get(&http, "/?token=nope");
    assert!(head.starts_with("HTTP/1.1 401") && body.contains("wrong cluster token"), "{head}\n{body}");
    let (head, body) = http_get(&http, &format!("/status.json?token={TOKEN}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    let st: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(st["workers"].as_array().unwrap().len(), 2, "{st}");
    let job = &st["jobs"][0];
    assert_eq!((&job["state"], &job["pushes"]), (&serde_json::json!("finished"), &solved["pushes"]), "{st}");
    assert!(!job["forward"].as_array().unwrap().is_empty() && !job["backward"].as_array().unwrap().is_empty());
    // the solved job's replay
    let (head, body) = http_get(&http, &format!("/jobs/1/replay?token={TOKEN}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body.as_bytes(), std::fs::read(&replay).unwrap(), "the served replay differs from submit --html's");
    let (head, _) = http_get(&http, &format!("/jobs/9/replay?token={TOKEN}"));
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    // in a browser
    let url = format!("http://{http}/?token={TOKEN}");
    let page = crate::browser::dom(&url, 5_000);
    assert_eq!(page.matches("class=\"worker\"").count(), 2, "{page}");
    assert_eq!(page.matches("class=\"job\"").count(), 1, "{page}");
    assert!(page.contains("class=\"forward\"") && page.contains("class=\"backward\""), "no chart: {page}");
    assert!(page.contains(&format!("jobs/1/replay?token={TOKEN}")), "{page}");
    crate::browser::screenshot(&url, 5_000, (1000, 720), "status.png");
}

/// The value of the one sample of `name` with `labels` in a parsed scrape.
fn sample(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<&prometheus_parse::Sample> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?}: {:?}", scrape.samples);
    match found[0].value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        ref v => panic!("{name}: not a plain value: {v:?}"),
    }
}

fn scrape(addr: &str, path: &str) -> prometheus_parse::Scrape {
    let (head, body) = http_get(addr, path);
    assert!(head.starts_with("HTTP/1.1 200") && head.contains("text/plain; version=0.0.4"), "{head}\n{body}");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap()
}

/// Prometheus metrics: the coordinator's on its `--http` listener, each
/// worker's on its `--metrics` listener, behind the token, scraped during a
/// job and read by a real exposition-format parser.
#[test]
fn metrics_of_the_coordinator_and_every_worker_parse_during_a_job() {
    let http = format!("127.0.0.1:{}", free_port());
    // slow layers, so that the job is still running when it is scraped
    let mut c = Cluster::start(&["--http", &http, "--layer-delay-ms", "150"], &[]);
    let metrics: Vec<String> = (0..2).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    for (i, m) in metrics.iter().enumerate() {
        c.worker_extra = s(&["--metrics", m]);
        c.start_worker(i);
    }
    c.wait_workers(2);
    let id = submit_detached(&c, "16");
    c.wait_for("a few layers", 90, |st| layers_done(&job(st, id)) >= 3 && job(st, id)["state"] == "running");
    let (head, _) = http_get(&http, "/metrics");
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    let co = scrape(&http, &format!("/metrics?token={TOKEN}"));
    assert_eq!(sample(&co, "sokoshard_workers", &[("state", "alive")]), 2.0);
    assert_eq!(sample(&co, "sokoshard_workers", &[("state", "lost")]), 0.0);
    assert_eq!(sample(&co, "sokoshard_jobs", &[("state", "running")]), 1.0);
    let job_id = id.to_string();
    let layers = sample(&co, "sokoshard_job_layers_done", &[("job", &job_id), ("side", "forward")])
        + sample(&co, "sokoshard_job_layers_done", &[("job", &job_id), ("side", "backward")]);
    assert!(layers >= 3.0, "{layers}");
    assert!(sample(&co, "sokoshard_job_states_stored", &[("job", &job_id)]) >= layers);
    assert!(co.docs.contains_key("sokoshard_job_frontier_states"), "{:?}", co.docs);
    for m in &metrics {
        let (head, _) = http_get(m, "/metrics");
        assert!(head.starts_with("HTTP/1.1 401"), "{head}");
        let w = scrape(m, &format!("/metrics?token={TOKEN}"));
        assert_eq!(sample(&w, "sokoshard_worker_memory_budget_bytes", &[]), (256u64 << 20) as f64);
        assert_eq!(sample(&w, "sokoshard_worker_job", &[]), id as f64);
        assert!(sample(&w, "sokoshard_worker_partitions", &[]) >= 1.0);
        assert!(sample(&w, "sokoshard_worker_rss_bytes", &[]) > (1u64 << 20) as f64);
        assert_eq!(
            sample(&co, "sokoshard_worker_memory_budget_bytes", &[("node", &node_of(&c, m))]),
            (256u64 << 20) as f64
        );
    }
    let o = c.cli(&["cancel", &id.to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The node id of the worker whose metrics are served at `metrics` (the
/// worker started with that `--metrics`, found by its log's listen line).
fn node_of(c: &Cluster, metrics: &str) -> String {
    let st = c.status();
    let workers = st["workers"].as_array().unwrap();
    let i = c.workers.iter().position(|p| std::fs::read_to_string(&p.log).unwrap_or_default().contains(metrics));
    let log = std::fs::read_to_string(&c.workers[i.expect("a worker log names the metrics address")].log).unwrap();
    workers
        .iter()
        .map(|w| w["node_id"].as_str().unwrap().to_string())
        .find(|n| log.contains(n.as_str()))
        .unwrap_or_else(|| panic!("no node of {workers:?} in the log:\n{log}"))
}

/// One job runs at a time: jobs submitted meanwhile wait in a queue that
/// `status` shows in order, and a queued job can be cancelled before it starts
/// while the others run to their answers.
#[test]
fn jobs_submitted_while_one_runs_queue_and_a_queued_one_can_be_cancelled() {
    let mut c = Cluster::start(&["--layer-delay-ms", "100"], &[]);
    c.start_worker(0);
    c.wait_workers(1);
    let first = submit_detached(&c, "3");
    c.wait_for("the first job to run", 60, |st| job(st, first)["state"] == "running");
    let second = submit_detached(&c, "2");
    let third = submit_detached(&c, "1");
    let st = c.status();
    assert_eq!(job(&st, first)["queue_position"], serde_json::Value::Null, "{st}");
    assert_eq!(
        (&job(&st, second)["state"], &job(&st, second)["queue_position"]),
        (&"queued".into(), &1.into()),
        "{st}"
    );
    assert_eq!((&job(&st, third)["state"], &job(&st, third)["queue_position"]), (&"queued".into(), &2.into()), "{st}");
    let text = c.cli(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("queue #1") && text.contains("queue #2"), "{text}");
    // cancel the last in the queue: it never starts
    let o = c.cli(&["cancel", &third.to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let st = c.status();
    assert_eq!(job(&st, third)["state"], "cancelled", "{st}");
    assert_eq!(job(&st, third)["message"], "cancelled before it started", "{st}");
    // the others run in order, to their answers
    let st = c.wait_for("the queue to drain", 120, |st| job(st, second)["state"] == "finished");
    assert_eq!(job(&st, first)["state"], "finished", "{st}");
    assert_eq!(job(&st, first)["result"]["pushes"], 13);
    assert_eq!(job(&st, second)["result"]["pushes"], truth()[1].1 as u64);
    assert_eq!(job(&st, third)["layer"], 0, "a cancelled queued job did no work: {st}");
}

/// A coordinator over its memory budget (`coordinator --mem`) streams the
/// moves pass's push-optimal states to its data dir and gets the local
/// answer (Microban I #144, whose pass reuses nothing of the level's search);
/// the files go when the pass ends, and a restarted coordinator clears what a
/// killed one left there.
#[test]
fn a_coordinator_over_its_memory_streams_the_moves_pass_to_its_data_dir() {
    let mut c = Cluster::start(&["--mem", "64KiB"], &[]);
    c.start_worker(0);
    c.wait_workers(1);
    let file = repo(MICROBAN);
    let o = c.cli(&["submit", file.to_str().unwrap(), "--level", "144", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
    let g: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let l = &local_solve(&file, "144-144", &[])[0];
    for field in ["status", "pushes", "moves", "objective", "optimal_states"] {
        assert_eq!(g[field], l[field], "{field}: cluster {g}\nlocal {l}");
    }
    assert_eq!(g["objective"], "pushes,moves");
    assert!(g["moves_disk_bytes"].as_u64().unwrap() > 100_000, "{g}");
    assert_eq!(l["moves_disk_bytes"], 0, "{l}");
    let moves = c.dir.path().join("coordinator").join("moves");
    assert_eq!(std::fs::read_dir(&moves).unwrap().count(), 0, "the pass's files stay behind");
    c.restart_coordinator_after(|data| {
        let stale = data.join("moves").join("sokoshard-1-0");
        std::fs::create_dir_all(&stale).unwrap();
        std::fs::write(stale.join("7.tape"), b"left by a killed pass").unwrap();
    });
    assert_eq!(std::fs::read_dir(&moves).unwrap().count(), 0, "a starting coordinator clears the pass's old files");
}
