//! `deadlocks build` and `deadlocks show`: precomputing k-PG deadlock databases
//! and looking inside them.

use super::progress::KProgress;
use super::{read_collection, OneLevel, Selection, EXIT_BAD_INPUT, EXIT_NOT_SOLVED, EXIT_OK};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sokoshard::cluster::client::TableOptions;
use sokoshard::engine::kpg::{unpack, DeadPlayers, KChoice, KStats, KTable, Packed, MAX_K};
use sokoshard::model::board::Board;
use sokoshard::model::level::{parse_one, Level};
use sokoshard::model::pairs::DEAD;
use sokoshard::solve::build_tables;
use sokoshard::storage::kdb;
use sokoshard::sys::human_bytes;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Subcommand)]
pub enum DeadlocksCommand {
    /// Build k-PG deadlock tables for one level, or for each level of a
    /// collection, and save them.
    Build(Box<BuildArgs>),
    /// Counts per k and a few patterns drawn as boards.
    Show(ShowArgs),
}

#[derive(clap::Args)]
pub struct BuildArgs {
    /// Collection file (XSB/SOK), or - for standard input.
    pub file: PathBuf,
    #[command(flatten)]
    pub select: OneLevel,
    /// Range of 1-based indices, e.g. 3-17: a database per level, in the
    /// `-o` directory.
    #[arg(long, conflicts_with_all = ["level", "title", "all"])]
    pub levels: Option<String>,
    /// Every level of the collection: a database per level, in the `-o`
    /// directory.
    #[arg(long, conflicts_with_all = ["level", "title"])]
    pub all: bool,
    /// Largest k (boxes per sub-game), 1 to 8 [default: the k a solve of the
    /// level would choose].
    #[arg(long)]
    pub k: Option<usize>,
    /// Output database file; with `--levels` or `--all`, or when it is an
    /// existing directory, the directory that gets one database per level,
    /// named by the level's fingerprint, where `solve --deadlocks DIR` finds
    /// each level's own.
    #[arg(short = 'o', long)]
    pub output: PathBuf,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// One JSON object per k on stdout.
    #[arg(long)]
    pub json: bool,
    /// Time limit in seconds, per level: the tables of every k finished by
    /// then are written, and the command exits 1 (as on Ctrl-C, which also
    /// stops the levels after the one being built).
    #[arg(long, value_parser = super::positive_seconds)]
    pub timeout: Option<f64>,
    /// Build on a cluster: this coordinator's workers play the k-games.
    #[arg(long)]
    pub coordinator: Option<String>,
    #[command(flatten)]
    pub net: super::cluster::NetArgs,
}

#[derive(clap::Args)]
pub struct ShowArgs {
    /// A database written by `deadlocks build`, or a directory of them (a
    /// line per database: its level, tables and size).
    pub file: PathBuf,
    /// Patterns to draw per k and side.
    #[arg(long, default_value_t = 3)]
    pub samples: usize,
}

pub fn run(cmd: DeadlocksCommand) -> Result<ExitCode> {
    match cmd {
        DeadlocksCommand::Build(a) => build(*a),
        DeadlocksCommand::Show(a) => show(a),
    }
}

/// Prints one k's figures as a line of the build report; `bytes` is what its
/// table takes in the file.
pub fn describe(s: &KStats, bytes: u64) -> String {
    format!(
        "k={}: explored {} forward + {} backward configurations, kept {} forward + {} backward patterns, {}, {} in the file",
        s.k,
        s.forward_states,
        s.backward_states,
        s.forward_patterns,
        s.backward_patterns,
        super::secs(s.seconds),
        human_bytes(bytes)
    )
}

fn build(args: BuildArgs) -> Result<ExitCode> {
    if let Some(k) = args.k {
        anyhow::ensure!((1..=MAX_K).contains(&k), "--k must be between 1 and {MAX_K}");
    }
    // the flags first, then the files
    let threads = super::threads(args.threads, false)?;
    let all = read_collection(&args.file)?;
    let source = args.file.display().to_string();
    let many = args.levels.is_some() || args.all;
    let picked = if many {
        Selection { levels: args.levels.clone(), all: args.all, ..Default::default() }.pick(&all, &source)?
    } else {
        if args.select.level.is_none() && args.select.title.is_none() && all.len() > 1 {
            anyhow::bail!(
                "{source} has {} levels: pick one with --level N or --title T, or build a database for each with --levels A-B or --all",
                all.len()
            );
        }
        vec![args.select.pick(&all, &source)?]
    };
    // one level's database is the file named, a collection's a directory
    // of them (and so is any database written into an existing directory,
    // or into a path written as a directory's)
    let as_dir = args.output.is_dir() || args.output.as_os_str().to_string_lossy().ends_with('/');
    let dir = (many || as_dir).then(|| args.output.clone());
    if let Some(d) = &dir {
        anyhow::ensure!(
            !d.exists() || d.is_dir(),
            "-o {}: that is a file; with --levels or --all, -o names the directory that gets a database per level",
            d.display()
        );
        std::fs::create_dir_all(d).with_context(|| format!("-o {}: cannot make the directory", d.display()))?;
    }
    match &args.coordinator {
        // Ctrl-C cancels the job, which keeps the k finished, as it cancels
        // `submit`'s (a hang-up or SIGTERM ends the client alone: the job
        // goes on); a second Ctrl-C ends the client while it waits
        Some(_) => super::on_stop_signals(super::StopOn::Interrupt, || {
            if CLUSTER_STOPPING.swap(true, Ordering::SeqCst) {
                errln!("interrupted again: the job may still be cancelling on the cluster");
                std::process::exit(130);
            }
            CLUSTER_STOP.notify_one();
        }),
        None => super::on_stop_signals(super::StopOn::InterruptTermAndHangUp, || {
            INTERRUPTED.store(true, Ordering::SeqCst);
            STOP.store(true, Ordering::SeqCst);
        }),
    }
    let interrupted = || INTERRUPTED.load(Ordering::SeqCst) || CLUSTER_STOPPING.load(Ordering::SeqCst);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
    let Some(dir) = &dir else {
        let [text] = picked[..] else { anyhow::bail!("one level was to be picked, {} were", picked.len()) };
        let level = text.parse()?;
        let board = Arc::new(Board::new(&level)?);
        super::check_output("-o", &args.output, &[("the level file", args.file.as_path())])?;
        let done = build_level(&args, &pool, &level, board, &args.output, "")?;
        return Ok(ExitCode::from(if matches!(done, Built::Whole) { EXIT_OK } else { EXIT_NOT_SOLVED }));
    };
    let (mut whole, mut part, mut nothing, mut failed) = (0, 0, 0, 0);
    // the first level a run after Ctrl-C has to build
    let mut resume = None;
    for text in &picked {
        // a time limit raised the flag for the level before, Ctrl-C for all
        STOP.store(false, Ordering::SeqCst);
        if interrupted() {
            resume = Some(text.index);
            break;
        }
        // in a collection a level that fails is that level's error; the
        // others are built
        let who = format!("level {} ({})", text.index, text.title);
        if !args.json {
            outln!("{who}:")?;
        }
        let done = text.parse().map_err(anyhow::Error::from).and_then(|level| {
            let board = Arc::new(Board::new(&level).with_context(|| who.clone())?);
            let output = kdb::level_file(dir, &board);
            super::check_output("-o", &output, &[("the level file", args.file.as_path())])?;
            build_level(&args, &pool, &level, board, &output, &format!("{who}: "))
        });
        let complete = matches!(done, Ok(Built::Whole));
        match done {
            Ok(Built::Whole) => whole += 1,
            Ok(Built::Part) => part += 1,
            Ok(Built::Nothing) => nothing += 1,
            Err(e) => {
                errln!("error: {e:#}");
                if args.json {
                    outln!("{}", serde_json::json!({ "level": text.index, "error": format!("{e:#}") }))?;
                }
                failed += 1;
            }
        }
        if interrupted() && !complete {
            resume = Some(text.index);
            break;
        }
    }
    let plural = |n: usize| if n == 1 { "1 level".to_string() } else { format!("{n} levels") };
    let mut line = format!("databases complete for {whole} of {} in {}", plural(picked.len()), dir.display());
    for (n, what) in [(part, "stopped short"), (nothing, "with nothing written"), (failed, "failed")] {
        if n > 0 {
            line += &format!("; {} {what}", plural(n));
        }
    }
    errln!("{line}");
    if let Some(i) = resume {
        let last = picked.last().map_or(i, |t| t.index);
        errln!("interrupted: `--levels {i}-{last}` goes on from level {i}");
    }
    Ok(ExitCode::from(if failed > 0 {
        EXIT_BAD_INPUT
    } else if whole == picked.len() {
        EXIT_OK
    } else {
        EXIT_NOT_SOLVED
    }))
}

/// Builds one level's tables, here or on the cluster, into `output`;
/// `prefix` names the level in the lines on standard error (in a
/// collection).
fn build_level(
    args: &BuildArgs,
    pool: &rayon::ThreadPool,
    level: &Level,
    board: Arc<Board>,
    output: &Path,
    prefix: &str,
) -> Result<Built> {
    match &args.coordinator {
        Some(addr) => build_on_cluster(args, addr, level, &board, output, prefix),
        None => build_here(args, pool, level, board, output, prefix),
    }
}

/// What a level's build left: a database of every k asked for, one cut short
/// by a time limit or Ctrl-C, or nothing.
enum Built {
    Whole,
    Part,
    Nothing,
}

/// Builds one level's tables on this machine and writes them to `output`.
fn build_here(
    args: &BuildArgs,
    pool: &rayon::ThreadPool,
    level: &Level,
    board: Arc<Board>,
    output: &Path,
    prefix: &str,
) -> Result<Built> {
    let timer = args.timeout.map(|s| super::StopTimer::start(Duration::from_secs_f64(s), &STOP)).transpose()?;
    let progress = KProgress::with_k_lines(format!("level {} ({})", level.index, level.title));
    let (tables, stats) =
        pool.install(|| build_tables(board, args.k.map_or(KChoice::Auto, KChoice::UpTo), 16, &STOP, &progress))?;
    progress.finish();
    let stopped = match (timer.is_some_and(|t| t.fired()), STOP.load(Ordering::SeqCst)) {
        (true, _) => Some("stopped by the time limit"),
        (false, true) => Some("interrupted"),
        (false, false) => None,
    };
    if let (Some(why), true) = (stopped, tables.tables.is_empty()) {
        errln!("error: {prefix}{why} before the 1-box game was finished; nothing written");
        if args.json {
            outln!("{}", serde_json::json!({ "level": level.index, "wrote": null, "bytes": 0, "stopped": why }))?;
        }
        return Ok(Built::Nothing);
    }
    // the bounded search's pair penalties go into the file beside the patterns
    let tables = tables.with_level_pairs();
    let bytes = kdb::save(output, &tables, &stored_text(level))?;
    report_build(args, level, output, &stats, &tables.tables, bytes, stopped)?;
    Ok(match stopped {
        Some(why) => {
            let done = stats.last().map_or(0, |s| s.k);
            errln!("{prefix}{why} in the {}-box game: the file holds the tables of k = 1..{done}", done + 1);
            Built::Part
        }
        None => Built::Whole,
    })
}

/// The level as a database keeps it: its rows, and its title where it has
/// one (named when the file is used for another level).
fn stored_text(level: &sokoshard::model::level::Level) -> String {
    if level.has_title() {
        format!("{}Title: {}\n", level.to_xsb(), level.title)
    } else {
        level.to_xsb()
    }
}

/// Woken by Ctrl-C during a build on a cluster (a stored
/// permit, so a signal before the wait starts still counts).
static CLUSTER_STOP: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Set by the first Ctrl-C of a build on a cluster.
static CLUSTER_STOPPING: AtomicBool = AtomicBool::new(false);

/// Raised by Ctrl-C, SIGTERM, SIGHUP or `--timeout` during a local build.
static STOP: AtomicBool = AtomicBool::new(false);

/// Raised by Ctrl-C, SIGTERM or SIGHUP during a local build: no level after
/// the one being built is started.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// `deadlocks build --coordinator`: the cluster plays the k-games; the database
/// comes back checked against this level and is written like a local build's.
fn build_on_cluster(
    args: &BuildArgs,
    addr: &str,
    level: &Level,
    board: &Arc<Board>,
    output: &Path,
    prefix: &str,
) -> Result<Built> {
    let net = args.net.config()?;
    // as a local build keeps it, so that both write the same file
    let text = stored_text(level);
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = ProgressBar::new_spinner();
        b.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("static template"));
        b.enable_steady_tick(std::time::Duration::from_millis(200));
        b
    });
    let how = TableOptions { k: args.k.map(|k| k as u32), partitions: 0, timeout: args.timeout.unwrap_or(0.0) };
    let built = super::cluster::runtime()?.block_on(async {
        let mut c = sokoshard::cluster::client::Client::new(&net, addr)?;
        let on_update = |v: &sokoshard::cluster::client::JobView| {
            if let Some(b) = &bar {
                b.set_message(format!("{}: {}", v.state, v.message));
            }
        };
        c.build_tables(&text, &level.title, level.index as u32, how, on_update, CLUSTER_STOP.notified()).await
    })?;
    let (bytes, stats) = (built.kdb, built.stats);
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let file = kdb::decode(output, &bytes)?;
    anyhow::ensure!(
        file.fingerprint == board.fingerprint() && file.floor == board.floor_count(),
        "the cluster returned tables of another level"
    );
    super::write_whole(output, &bytes)?;
    report_build(args, level, output, &stats, &file.tables, bytes.len() as u64, built.cut_short.as_deref())?;
    Ok(match built.cut_short {
        Some(note) => {
            errln!("{prefix}{note}: the file holds what was finished");
            Built::Part
        }
        None => Built::Whole,
    })
}

/// The build report, the same for a local and a cluster build: a line (or JSON
/// object, with the level's index) per k, then the file written (with
/// `--json`, an object with the level, the file, its size and why the build
/// stopped short, if it did).
fn report_build(
    args: &BuildArgs,
    level: &Level,
    output: &Path,
    stats: &[KStats],
    tables: &[KTable],
    bytes: u64,
    stopped: Option<&str>,
) -> Result<()> {
    for s in stats {
        let table_bytes = tables.iter().find(|t| t.k == s.k).map_or(0, kdb::table_bytes);
        if args.json {
            let mut v = serde_json::to_value(s)?;
            v["level"] = level.index.into();
            v["file_bytes"] = table_bytes.into();
            outln!("{v}")?;
        } else {
            outln!("{}", describe(s, table_bytes))?;
        }
    }
    if args.json {
        let v = serde_json::json!({ "level": level.index, "wrote": output.display().to_string(), "bytes": bytes, "stopped": stopped });
        outln!("{v}")?;
    } else {
        outln!("wrote {} ({})", output.display(), human_bytes(bytes))?;
    }
    Ok(())
}

/// `deadlocks show DIR`: a line per database in a collection's directory,
/// in the order of the files' names; a damaged one is named with what is
/// wrong, and the command then exits 2.
fn show_dir(dir: &Path) -> Result<ExitCode> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("listing {}", dir.display()))?;
    files.retain(|p| p.extension().is_some_and(|e| e == "kdb"));
    files.sort();
    let mut bad = 0;
    for path in &files {
        let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        match kdb::read(path) {
            Ok(f) => {
                let title = f.level_text.lines().find_map(|l| l.strip_prefix("Title: ")).unwrap_or("untitled");
                let ks = f.tables.iter().map(|t| t.k).max().map_or("none".to_string(), |k| format!("k = 1..{k}"));
                let size = std::fs::metadata(path).map_or(0, |m| m.len());
                outln!("{name}  {title}: {} floor squares, tables {ks}, {}", f.floor, human_bytes(size))?;
            }
            Err(e) => {
                bad += 1;
                outln!("{name}  error: {e}")?;
            }
        }
    }
    errln!(
        "{} databases in {}{}",
        files.len(),
        dir.display(),
        if bad > 0 { format!(", {bad} damaged") } else { String::new() }
    );
    Ok(ExitCode::from(if bad > 0 { EXIT_BAD_INPUT } else { EXIT_OK }))
}

fn show(args: ShowArgs) -> Result<ExitCode> {
    if args.file.is_dir() {
        return show_dir(&args.file);
    }
    let file = kdb::read(&args.file)?;
    let level =
        parse_one(&file.level_text, &args.file.display().to_string()).context("the level stored in the database")?;
    let board = Board::new(&level)?;
    outln!("{}: level fingerprint {:#018x}, {} floor squares", args.file.display(), file.fingerprint, file.floor)?;
    out!("{}", board.draw(&board.start_boxes, Some(board.start_player)))?;
    match &file.pairs {
        None => outln!("pair penalties: none kept (no pair of squares has one, or the board is too large)")?,
        Some(p) => {
            let positive = |t: &[u8]| t.iter().filter(|&&v| v > 0 && v != DEAD).count() / 2;
            let dead = |t: &[u8]| t.iter().filter(|&&v| v == DEAD).count() / 2;
            outln!(
                "pair penalties: forward {} square pairs with a penalty, {} dead; backward {} and {}; {} pairs depend on the player's region",
                positive(&p.forward),
                dead(&p.forward),
                positive(&p.backward),
                dead(&p.backward),
                p.regional_at.iter().flatten().filter(|&&i| i != 0).count()
            )?;
        }
    }
    for t in &file.tables {
        for (name, set) in [("forward", &t.forward), ("backward", &t.backward)] {
            outln!("k={} {name}: {} box sets, {} patterns", t.k, set.map.len(), set.patterns())?;
            let mut keys: Vec<&Packed> = set.map.keys().collect();
            keys.sort_unstable();
            for key in keys.into_iter().take(args.samples) {
                let boxes = unpack(*key, t.k);
                let (player, note) = match &set.map[key] {
                    DeadPlayers::Any => (None, "any player position".to_string()),
                    DeadPlayers::Squares(v) => {
                        (v.first().copied(), format!("player in {} region(s), one shown", v.len()))
                    }
                };
                outln!("  {note}:")?;
                for row in board.draw(&boxes, player).lines() {
                    outln!("    {row}")?;
                }
            }
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}
