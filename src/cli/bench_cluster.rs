//! `bench-cluster`: solves one level on local clusters of 1, 2 and 4 worker
//! processes (plus a plain `solve` for reference) and prints, per cluster size,
//! the total time, each worker's peak RSS (VmHWM, reported in heartbeats), and
//! the bytes sent over the network per successor state exchanged.

use super::{read_collection, OneLevel, EXIT_OK};
use anyhow::{bail, Context, Result};
use sokoshard::cluster::client::{Client, SubmitOptions};
use sokoshard::cluster::net::NetConfig;
use sokoshard::sys::human_bytes;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Collection file (XSB/SOK).
    pub file: PathBuf,
    #[command(flatten)]
    pub select: OneLevel,
    /// Cluster sizes to run, comma separated.
    #[arg(long, default_value = "1,2,4")]
    pub workers: String,
    /// Number of state partitions.
    #[arg(long, default_value_t = 64)]
    pub partitions: u32,
    /// Threads per worker (default: all cores; the workers share the machine).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Where the processes keep their data (default: a fresh temporary folder).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// One JSON object per row.
    #[arg(long)]
    pub json: bool,
}

/// Kills the processes it holds when dropped.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

fn spawn(exe: &Path, args: &[String], log: &Path) -> Result<Child> {
    let f = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    Command::new(exe)
        .args(args)
        .stdout(Stdio::null())
        .stderr(f)
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))
}

struct Row {
    workers: usize,
    seconds: f64,
    pushes: Option<usize>,
    states: u64,
    peak_rss: Vec<u64>,
    keys_exchanged: u64,
    bytes_exchanged: u64,
}

pub fn run(a: BenchArgs) -> Result<ExitCode> {
    let all = read_collection(&a.file)?;
    let text = a.select.pick(&all, &a.file.display().to_string())?;
    let level = text.parse()?;
    let sizes: Vec<usize> = a
        .workers
        .split(',')
        .map(|s| s.trim().parse::<usize>().with_context(|| format!("--workers {:?}", a.workers)))
        .collect::<Result<_>>()?;
    anyhow::ensure!(sizes.iter().all(|&n| n >= 1), "cluster sizes must be at least 1");
    let exe = std::env::current_exe().context("locating the sokoshard binary")?;
    let tmp;
    let base = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempdir()?;
            tmp.clone()
        }
    };
    // reference: the same level solved in one process
    let t0 = Instant::now();
    let out = Command::new(&exe)
        .args(["solve", &a.file.display().to_string(), "--level", &text.index.to_string(), "--json"])
        // the search alone, on both sides of the comparison
        .args(["--objective", "pushes"])
        .args(["--partitions", &a.partitions.to_string()])
        .output()
        .context("running solve")?;
    let local_secs = t0.elapsed().as_secs_f64();
    let local: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let token = format!("bench-{}", std::process::id());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut rows = Vec::new();
    for &n in &sizes {
        let dir = base.join(format!("w{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let caddr = format!("127.0.0.1:{}", free_port()?);
        let mut procs = Procs(Vec::new());
        let targs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        procs.0.push(spawn(
            &exe,
            &[
                targs(&["coordinator", "--listen", &caddr, "--token", &token, "--min-workers", &n.to_string()]),
                targs(&["--data-dir", &dir.join("coordinator").display().to_string()]),
            ]
            .concat(),
            &dir.join("coordinator.log"),
        )?);
        for i in 0..n {
            let waddr = format!("127.0.0.1:{}", free_port()?);
            let mut args = targs(&["worker", "--join", &caddr, "--listen", &waddr, "--token", &token, "--mem", "8G"]);
            args.extend(targs(&["--data-dir", &dir.join(format!("worker{i}")).display().to_string()]));
            if let Some(t) = a.threads {
                args.extend(targs(&["--threads", &t.to_string()]));
            }
            procs.0.push(spawn(&exe, &args, &dir.join(format!("worker{i}.log")))?);
        }
        let net = NetConfig::new(token.clone());
        let row = rt.block_on(async {
            let mut c = Client::new(&net, &caddr)?;
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if let Ok(ws) = c.workers().await {
                    if ws.iter().filter(|w| w.alive).count() >= n {
                        break;
                    }
                }
                if Instant::now() > deadline {
                    bail!("the workers did not join within a minute (logs in {})", dir.display());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let started = Instant::now();
            let opts = SubmitOptions { partitions: a.partitions, pushes_only: true, ..Default::default() };
            let id = c.submit(&level.to_xsb(), &text.title, text.index as u32, &opts).await?;
            let v = c.watch(id, Duration::from_secs(10), |_| {}).await?;
            let seconds = started.elapsed().as_secs_f64();
            let Some(r) = v.result.clone() else { bail!("job {} {}: {}", v.id, v.state, v.message) };
            // one more heartbeat carries the workers' final peak RSS
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let ws = c.workers().await?;
            Ok(Row {
                workers: n,
                seconds,
                pushes: r.pushes,
                states: r.states,
                peak_rss: ws.iter().map(|w| w.peak_rss_bytes).collect(),
                keys_exchanged: v.keys_exchanged,
                bytes_exchanged: v.bytes_exchanged,
            })
        })?;
        drop(procs);
        rows.push(row);
    }
    if a.json {
        outln!(
            "{}",
            serde_json::json!({"workers": 0, "seconds": local_secs, "pushes": local["pushes"], "states": local["states"]})
        )?;
        for r in &rows {
            outln!(
                "{}",
                serde_json::json!({
                    "workers": r.workers, "seconds": r.seconds, "pushes": r.pushes, "states": r.states,
                    "peak_rss_bytes": r.peak_rss, "keys_exchanged": r.keys_exchanged,
                    "bytes_exchanged": r.bytes_exchanged,
                    "bytes_per_state": if r.keys_exchanged > 0 { r.bytes_exchanged as f64 / r.keys_exchanged as f64 } else { 0.0 },
                })
            )?;
        }
        return Ok(ExitCode::from(EXIT_OK));
    }
    outln!("level {} ({}), {} partitions", text.index, text.title, a.partitions)?;
    outln!()?;
    outln!("| workers | total time | pushes | states | peak RSS per worker | states exchanged | bytes per state exchanged |")?;
    outln!("|---|---|---|---|---|---|---|")?;
    outln!("| local `solve` | {:.2} s | {} | {} | - | - | - |", local_secs, local["pushes"], local["states"])?;
    for r in &rows {
        let rss: Vec<String> = r.peak_rss.iter().map(|&b| human_bytes(b)).collect();
        let per = if r.keys_exchanged > 0 { r.bytes_exchanged as f64 / r.keys_exchanged as f64 } else { 0.0 };
        outln!(
            "| {} | {:.2} s | {} | {} | {} | {} | {:.2} |",
            r.workers,
            r.seconds,
            r.pushes.map_or("-".to_string(), |p| p.to_string()),
            r.states,
            rss.join(", "),
            r.keys_exchanged,
            per
        )?;
    }
    Ok(ExitCode::from(EXIT_OK))
}

fn tempdir() -> Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("sokoshard-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}
