//! `bench`: reproducible measurements for docs/benchmarks.md. Each run is a child
//! `sokoshard solve --json` process, so peak resident memory (VmHWM) and CPU time
//! are that run's own; results print as markdown tables.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Engine throughput: generated states per second per thread, bytes per stored
    /// state, peak memory, and the speed-up from 1 to 2 threads.
    Engine(EngineArgs),
    /// k-PG tables: stored states and total time (tables included) for k = 0..=K,
    /// as ratios to k = 0.
    Kpg(KpgArgs),
    /// Solving under a memory budget: bytes per state on disk, slowdown against
    /// the in-memory run, peak RSS against the budget.
    Store(StoreArgs),
    /// The bounded search against the plain one (`--no-bound`), level by level
    /// in the same run: status, pushes, stored and generated states, time, and
    /// the ratios.
    Bound(BoundArgs),
}

#[derive(clap::Args)]
pub struct BoundArgs {
    /// Collection file.
    #[arg(long, default_value = "levels/Microban_155.xsb")]
    pub file: PathBuf,
    /// Comma-separated 1-based level indices.
    #[arg(long, default_value = "93,123,139,144,146,153")]
    pub levels: String,
    /// Seconds each solve may take.
    #[arg(long, default_value_t = 600.0, value_parser = super::positive_seconds)]
    pub timeout: f64,
}

#[derive(clap::Args)]
pub struct StoreArgs {
    /// Collection file.
    #[arg(long, default_value = "levels/Microban_155.xsb")]
    pub file: PathBuf,
    /// Comma-separated 1-based level indices.
    #[arg(long, default_value = "93,139,144")]
    pub levels: String,
    /// Budget as a fraction of what the in-memory store needs for the level: the
    /// budget is `store_bytes / ratio`.
    #[arg(long, default_value_t = 10.0)]
    pub ratio: f64,
    /// A fixed budget instead of the ratio (e.g. 8MiB).
    #[arg(long, value_name = "SIZE", value_parser = crate::cli::solve::parse_mem)]
    pub mem: Option<u64>,
    /// Comma-separated spill policies to measure (oldest, newest, none).
    #[arg(long, default_value = "oldest,none")]
    pub policies: String,
    /// Runs per configuration; times are the fastest, memory the largest.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Spill directory (default: the system temp dir).
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
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
pub struct EngineArgs {
    #[command(flatten)]
    pub common: BenchArgs,
    /// Rounds per level, each one thread then two, back to back: times are
    /// the rounds' medians and the speed-up the median of the rounds' own
    /// ratios, since a machine's speed can drift within minutes.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Measure the plain search (`solve --no-bound`) instead of the default
    /// bounded one.
    #[arg(long)]
    pub no_bound: bool,
}

#[derive(clap::Args)]
pub struct KpgArgs {
    #[command(flatten)]
    pub common: BenchArgs,
    /// Largest k.
    #[arg(long, default_value_t = 3)]
    pub max_k: usize,
    /// Instead of the per-level table: solve every level of the file with this
    /// timeout (seconds) at each k and count the levels solved.
    #[arg(long, value_name = "SECONDS", value_parser = super::seconds)]
    pub solved_within: Option<f64>,
    /// Turn off freeze-deadlock pruning (and the frozen-target matching) in every
    /// column, to measure what the tables prune on their own (freeze pruning
    /// catches many of the same deadlocks, so with it on the tables' share is
    /// smaller).
    #[arg(long)]
    pub no_freeze: bool,
    /// Turn off the PI-corral move restriction in every column, to measure what
    /// the tables prune without it.
    #[arg(long)]
    pub no_pi_corrals: bool,
}

pub fn run(cmd: BenchCommand) -> Result<ExitCode> {
    match cmd {
        BenchCommand::Engine(a) => engine(a),
        BenchCommand::Kpg(a) => kpg(a),
        BenchCommand::Store(a) => store(a),
        BenchCommand::Bound(a) => bound(a),
    }
}

fn levels(s: &str) -> Result<Vec<usize>> {
    s.split(',').map(|x| x.trim().parse::<usize>().with_context(|| format!("bad level index {x:?}"))).collect()
}

/// One solve's JSON line; an error unless the level was solved.
fn solve_json(file: &PathBuf, level: usize, extra: &[&str]) -> Result<serde_json::Value> {
    let v = solve_any(file, level, extra)?;
    if v["status"] != "solved" {
        bail!("level {level} {:?}: status {}", extra, v["status"]);
    }
    Ok(v)
}

/// One solve's JSON line, whatever its status. The benchmarks measure the
/// level's search, so they solve for the fewest pushes only (no moves pass).
fn solve_any(file: &PathBuf, level: usize, extra: &[&str]) -> Result<serde_json::Value> {
    let exe = std::env::current_exe().context("locating the sokoshard binary")?;
    let out = Command::new(exe)
        .arg("solve")
        .arg(file)
        .args(["--level", &level.to_string(), "--json", "--objective", "pushes"])
        .args(extra)
        .output()
        .context("running sokoshard solve")?;
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("level {level}: {}", String::from_utf8_lossy(&out.stderr)))
}

fn bound(args: BoundArgs) -> Result<ExitCode> {
    let timeout = args.timeout.to_string();
    outln!("| level | bounded | pushes | states | generated | seconds | iterations | plain | states | generated | seconds | states ratio | time ratio |")?;
    outln!("|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    for level in levels(&args.levels)? {
        let b = solve_any(&args.file, level, &["--timeout", &timeout])?;
        let p = solve_any(&args.file, level, &["--timeout", &timeout, "--no-bound"])?;
        if b["status"] == "solved" && p["status"] == "solved" && b["pushes"] != p["pushes"] {
            bail!("level {level}: the bounded search gave {} pushes, the plain one {}", b["pushes"], p["pushes"]);
        }
        let iterations = b["iterations"].as_array().map_or(0, |v| v.len());
        outln!(
            "| {level} | {} | {} | {} | {} | {:.2} | {iterations} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
            b["status"].as_str().unwrap_or("?"),
            b["pushes"],
            b["states"],
            b["generated"],
            f(&b, "seconds"),
            p["status"].as_str().unwrap_or("?"),
            p["states"],
            p["generated"],
            f(&p, "seconds"),
            f(&b, "states") / f(&p, "states").max(1.0),
            f(&b, "seconds") / f(&p, "seconds").max(1e-9),
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn f(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(0.0)
}

fn engine(args: EngineArgs) -> Result<ExitCode> {
    outln!("| level | pushes | stored states | generated | 1 thread (s) | 2 threads (s) | generated/s/thread (1 thr) | speed-up 1->2 | rounds' speed-ups | bytes/stored state | peak engine bytes/state | peak RSS (MiB) |")?;
    outln!("|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    let (mut sum1, mut sum2, mut gen, mut states, mut store) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let mut all_ratios = Vec::new();
    let plain: &[&str] = if args.no_bound { &["--no-bound"] } else { &[] };
    let threads = |t: &'static str| [&["--threads", t][..], plain].concat();
    for level in levels(&args.common.levels)? {
        let (mut t1, mut t2, mut ratios, mut first) = (Vec::new(), Vec::new(), Vec::new(), None);
        for round in 1..=args.rounds {
            let one = solve_json(&args.common.file, level, &threads("1"))?;
            let two = solve_json(&args.common.file, level, &threads("2"))?;
            // the thread count and the rounds must not change the search
            let first = first.get_or_insert_with(|| one.clone());
            for (run, v) in [("one thread", &one), ("two threads", &two)] {
                for k in ["pushes", "states", "generated"] {
                    if v[k] != first[k] {
                        bail!(
                            "level {level}: round {round} on {run} gave {k} {}, round 1 on one thread {}",
                            v[k],
                            first[k]
                        );
                    }
                }
            }
            t1.push(f(&one, "seconds"));
            t2.push(f(&two, "seconds"));
            ratios.push(f(&one, "seconds") / f(&two, "seconds").max(1e-9));
        }
        let one = first.expect("at least one round");
        let (m1, m2, speedup) = (median(&t1), median(&t2), median(&ratios));
        let bytes = f(&one, "store_bytes") / f(&one, "states");
        let peak = f(&one, "peak_memory_bytes") / f(&one, "states");
        let (lo, hi) = range(&ratios);
        outln!(
            "| {level} | {} | {} | {} | {m1:.2} | {m2:.2} | {:.0} | {speedup:.2}x | {lo:.2} to {hi:.2} | {bytes:.2} | {peak:.2} | {:.0} |",
            one["pushes"],
            one["states"],
            one["generated"],
            f(&one, "generated") / m1,
            f(&one, "peak_rss_bytes") / 1048576.0
        )?;
        sum1 += m1;
        sum2 += m2;
        gen += f(&one, "generated");
        states += f(&one, "states");
        store += f(&one, "store_bytes");
        all_ratios.extend(ratios);
    }
    let (lo, hi) = range(&all_ratios);
    outln!(
        "| all | | {states:.0} | {gen:.0} | {sum1:.2} | {sum2:.2} | {:.0} | {:.2}x | {lo:.2} to {hi:.2} | {:.2} | | |",
        gen / sum1,
        sum1 / sum2,
        store / states
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The smallest and the largest of `v` (not empty).
fn range(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}

/// The median of `v` (not empty): the middle value, or the mean of the two
/// middle ones.
fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The table configurations `bench kpg` compares: no table at all (`--kpg 0`),
/// dead squares only (the player-free 1-PG verdict, the solver's default), then
/// full k-PG tables for k = 1..max_k.
fn kpg_columns(max_k: usize, no_freeze: bool, no_pi_corrals: bool) -> Vec<(String, Vec<String>)> {
    let mut cols =
        vec![("k=0".to_string(), vec!["--kpg".to_string(), "0".to_string()]), ("dead squares".to_string(), vec![])];
    cols.extend((1..=max_k).map(|k| (format!("k={k}"), vec!["--kpg".to_string(), k.to_string()])));
    for (off, flag) in [(no_freeze, "--no-freeze"), (no_pi_corrals, "--no-pi-corrals")] {
        if off {
            for (_, c) in &mut cols {
                c.push(flag.to_string());
            }
        }
    }
    cols
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn kpg(args: KpgArgs) -> Result<ExitCode> {
    let cols = kpg_columns(args.max_k, args.no_freeze, args.no_pi_corrals);
    if let Some(secs) = args.solved_within {
        return kpg_solved_within(&args.common.file, &cols, secs);
    }
    out!("| level | pushes | k=0 states | k=0 s |")?;
    for (name, _) in &cols[1..] {
        out!(" {name} states (ratio) | {name} s (ratio) |")?;
    }
    outln!()?;
    outln!("|{}", "---|".repeat(4 + 2 * (cols.len() - 1)))?;
    for level in levels(&args.common.levels)? {
        let base = solve_json(&args.common.file, level, &as_strs(&cols[0].1))?;
        let (s0, t0) = (f(&base, "states"), f(&base, "seconds"));
        out!("| {level} | {} | {s0:.0} | {t0:.2} |", base["pushes"])?;
        for (name, c) in &cols[1..] {
            let v = solve_json(&args.common.file, level, &as_strs(c))?;
            if v["pushes"] != base["pushes"] {
                bail!("level {level}: {name} gave {} pushes, k=0 gave {}", v["pushes"], base["pushes"]);
            }
            let (s, t) = (f(&v, "states"), f(&v, "seconds"));
            out!(" {s:.0} ({:.2}) | {t:.2} ({:.2}) |", s / s0, t / t0)?;
        }
        outln!()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Solves the whole file once per table configuration with `secs` per level and
/// counts the levels solved; every push count must agree across configurations.
fn kpg_solved_within(file: &PathBuf, cols: &[(String, Vec<String>)], secs: f64) -> Result<ExitCode> {
    let exe = std::env::current_exe().context("locating the sokoshard binary")?;
    outln!("| tables | levels solved within {secs} s | of | seconds in all (table builds included) | unsolved |")?;
    outln!("|---|---|---|---|---|")?;
    let mut pushes_seen: std::collections::BTreeMap<u64, serde_json::Value> = Default::default();
    for (name, c) in cols {
        let out = Command::new(&exe)
            .arg("solve")
            .arg(file)
            .args(["--all", "--json", "--objective", "pushes", "--timeout", &secs.to_string()])
            .args(c)
            .output()
            .context("running sokoshard solve")?;
        let mut solved = 0;
        let mut total = 0;
        let mut seconds = 0.0;
        let mut unsolved = Vec::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).with_context(|| format!("{name}: bad JSON line {line:?}"))?;
            total += 1;
            seconds += f(&v, "seconds");
            let level = v["level"].as_u64().unwrap_or(0);
            if v["status"] == "solved" {
                solved += 1;
                let prev = pushes_seen.entry(level).or_insert_with(|| v["pushes"].clone());
                if *prev != v["pushes"] {
                    bail!("level {level}: {name} gave {} pushes, another configuration {}", v["pushes"], prev);
                }
            } else {
                unsolved.push(level.to_string());
            }
        }
        anyhow::ensure!(total > 0, "{name}: solve printed no levels: {}", String::from_utf8_lossy(&out.stderr));
        outln!("| {name} | {solved} | {total} | {seconds:.0} | {} |", unsolved.join(", "))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The fastest of `n` runs (time and CPU), with the largest peak RSS seen.
fn best_of(n: usize, file: &PathBuf, level: usize, extra: &[&str]) -> Result<serde_json::Value> {
    let mut best: Option<serde_json::Value> = None;
    let mut rss = 0.0f64;
    for _ in 0..n.max(1) {
        let v = solve_json(file, level, extra)?;
        rss = rss.max(f(&v, "peak_rss_bytes"));
        if !best.as_ref().is_some_and(|b| f(&v, "seconds") >= f(b, "seconds")) {
            best = Some(v);
        }
    }
    let mut v = best.context("no run")?;
    v["peak_rss_bytes"] = serde_json::json!(rss);
    Ok(v)
}

fn mib(b: f64) -> f64 {
    b / 1048576.0
}

fn store(args: StoreArgs) -> Result<ExitCode> {
    anyhow::ensure!(args.ratio > 0.0, "--ratio must be positive");
    let policies: Vec<&str> = args.policies.split(',').map(str::trim).collect();
    let spill_dir = args.spill_dir.as_ref().map(|d| d.to_string_lossy().into_owned());
    // the process itself, with nothing stored: the fixed overhead RSS is measured against
    // the in-memory store, as a solve with everything in RAM and no budget
    let base = best_of(args.repeat, &args.file, 1, &["--no-spill"])?;
    outln!(
        "Process baseline (level 1, in memory): peak RSS {:.1} MiB. Times: fastest of {}; CPU = user + system.",
        mib(f(&base, "peak_rss_bytes")),
        args.repeat.max(1)
    )?;
    outln!()?;
    outln!("| level | stored states | in-memory store (MiB) | budget (MiB) | store / budget | policy | in-memory s (CPU s) | spilled s (CPU s) | slowdown wall (CPU) | peak RSS in-memory (MiB) | peak RSS spilled (MiB) | spilled RSS - baseline - budget (MiB) | states on disk | shard bytes (MiB) | bytes/state on disk | peak disk (MiB) |")?;
    outln!("|{}", "---|".repeat(16))?;
    for level in levels(&args.levels)? {
        let mem = best_of(args.repeat, &args.file, level, &["--no-spill"])?;
        let budget = match args.mem {
            Some(b) => b,
            None => (f(&mem, "store_bytes") / args.ratio) as u64,
        };
        for policy in &policies {
            let budget_arg = budget.to_string();
            let mut extra = vec!["--mem", &budget_arg, "--spill-policy", policy];
            if let Some(d) = &spill_dir {
                extra.extend(["--spill-dir", d]);
            }
            let sp = best_of(args.repeat, &args.file, level, &extra)?;
            if sp["pushes"] != mem["pushes"] || sp["states"] != mem["states"] {
                bail!(
                    "level {level} ({policy}): spilled run gave {} pushes / {} states, in-memory {} / {}",
                    sp["pushes"],
                    sp["states"],
                    mem["pushes"],
                    mem["states"]
                );
            }
            let (tm, ts) = (f(&mem, "seconds"), f(&sp, "seconds"));
            let (cm, cs) = (f(&mem, "cpu_seconds"), f(&sp, "cpu_seconds"));
            let on_disk = f(&sp, "disk_states");
            let per = if on_disk > 0.0 { f(&sp, "disk_bytes") / on_disk } else { 0.0 };
            outln!(
                "| {level} | {} | {:.1} | {:.2} | {:.1} | {policy} | {tm:.2} ({cm:.2}) | {ts:.2} ({cs:.2}) | {:.2}x ({:.2}x) | {:.1} | {:.1} | {:+.1} | {on_disk:.0} | {:.1} | {per:.2} | {:.1} |",
                mem["states"],
                mib(f(&mem, "store_bytes")),
                mib(budget as f64),
                f(&mem, "store_bytes") / budget as f64,
                ts / tm,
                cs / cm.max(0.01),
                mib(f(&mem, "peak_rss_bytes")),
                mib(f(&sp, "peak_rss_bytes")),
                mib(f(&sp, "peak_rss_bytes") - f(&base, "peak_rss_bytes") - budget as f64),
                mib(f(&sp, "disk_bytes")),
                mib(f(&sp, "peak_disk_bytes")),
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
