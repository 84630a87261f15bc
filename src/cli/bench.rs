//! `bench`: reproducible measurements for the README. Each run is a child
//! `sokoshard solve --json` process, so peak resident memory (VmHWM) is that run's
//! own; results print as markdown tables.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Engine throughput: generated states per second per thread, bytes per stored
    /// state, peak memory, and the speed-up from 1 to 2 threads.
    Engine(BenchArgs),
    /// k-PG tables: stored states and total time (tables included) for k = 0..=K,
    /// as ratios to k = 0.
    Kpg(KpgArgs),
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Collection file.
    #[arg(long, default_value = "levels/Microban_155.xsb")]
    pub file: PathBuf,
    /// Comma-separated 1-based level indices.
    #[arg(long, default_value = "93,123,139,144,146")]
    pub levels: String,
}

#[derive(clap::Args)]
pub struct KpgArgs {
    #[command(flatten)]
    pub common: BenchArgs,
    /// Largest k.
    #[arg(long, default_value_t = 3)]
    pub max_k: usize,
}

pub fn run(cmd: BenchCommand) -> Result<ExitCode> {
    match cmd {
        BenchCommand::Engine(a) => engine(a),
        BenchCommand::Kpg(a) => kpg(a),
    }
}

fn levels(s: &str) -> Result<Vec<usize>> {
    s.split(',').map(|x| x.trim().parse::<usize>().with_context(|| format!("bad level index {x:?}"))).collect()
}

fn solve_json(file: &PathBuf, level: usize, extra: &[&str]) -> Result<serde_json::Value> {
    let exe = std::env::current_exe().context("locating the sokoshard binary")?;
    let out = Command::new(exe)
        .arg("solve")
        .arg(file)
        .args(["--level", &level.to_string(), "--json"])
        .args(extra)
        .output()
        .context("running sokoshard solve")?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("level {level}: {}", String::from_utf8_lossy(&out.stderr)))?;
    if v["status"] != "solved" {
        bail!("level {level} {:?}: status {}", extra, v["status"]);
    }
    Ok(v)
}

fn f(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(0.0)
}

fn engine(args: BenchArgs) -> Result<ExitCode> {
    println!("| level | pushes | stored states | generated | 1 thread (s) | 2 threads (s) | generated/s/thread (1 thr) | speed-up 1->2 | bytes/stored state | peak engine bytes/state | peak RSS (MiB) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let (mut sum1, mut sum2, mut gen, mut states, mut store) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for level in levels(&args.levels)? {
        let one = solve_json(&args.file, level, &["--threads", "1"])?;
        let two = solve_json(&args.file, level, &["--threads", "2"])?;
        let (t1, t2) = (f(&one, "seconds"), f(&two, "seconds"));
        let bytes = f(&one, "store_bytes") / f(&one, "states");
        let peak = f(&one, "peak_memory_bytes") / f(&one, "states");
        println!(
            "| {level} | {} | {} | {} | {t1:.2} | {t2:.2} | {:.0} | {:.2}x | {bytes:.2} | {peak:.2} | {:.0} |",
            one["pushes"],
            one["states"],
            one["generated"],
            f(&one, "generated") / t1,
            t1 / t2,
            f(&one, "peak_rss_bytes") / 1048576.0
        );
        sum1 += t1;
        sum2 += t2;
        gen += f(&one, "generated");
        states += f(&one, "states");
        store += f(&one, "store_bytes");
    }
    println!(
        "| all | | {states:.0} | {gen:.0} | {sum1:.2} | {sum2:.2} | {:.0} | {:.2}x | {:.2} | | |",
        gen / sum1,
        sum1 / sum2,
        store / states
    );
    Ok(ExitCode::SUCCESS)
}

fn kpg(args: KpgArgs) -> Result<ExitCode> {
    print!("| level | pushes | k=0 states | k=0 s |");
    for k in 1..=args.max_k {
        print!(" k={k} states (ratio) | k={k} s (ratio) |");
    }
    println!();
    println!("|{}", "---|".repeat(4 + 2 * args.max_k));
    for level in levels(&args.common.levels)? {
        let base = solve_json(&args.common.file, level, &[])?;
        let (s0, t0) = (f(&base, "states"), f(&base, "seconds"));
        print!("| {level} | {} | {s0:.0} | {t0:.2} |", base["pushes"]);
        for k in 1..=args.max_k {
            let v = solve_json(&args.common.file, level, &["--kpg", &k.to_string()])?;
            if v["pushes"] != base["pushes"] {
                bail!("level {level}: k={k} gave {} pushes, k=0 gave {}", v["pushes"], base["pushes"]);
            }
            let (s, t) = (f(&v, "states"), f(&v, "seconds"));
            print!(" {s:.0} ({:.2}) | {t:.2} ({:.2}) |", s / s0, t / t0);
        }
        println!();
    }
    Ok(ExitCode::SUCCESS)
}
