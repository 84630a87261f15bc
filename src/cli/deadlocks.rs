//! `deadlocks build` and `deadlocks show`: precomputing k-PG deadlock databases
//! and looking inside them.

use super::progress::KProgress;
use super::{read_collection, OneLevel, EXIT_NOT_SOLVED, EXIT_OK};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sokoshard::cluster::client::TableOptions;
use sokoshard::engine::kpg::{unpack, DeadPlayers, KChoice, KStats, KTable, Packed, MAX_K};
use sokoshard::model::board::Board;
use sokoshard::model::level::parse_one;
use sokoshard::model::pairs::DEAD;
use sokoshard::solve::build_tables;
use sokoshard::storage::kdb;
use sokoshard::sys::human_bytes;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Subcommand)]
pub enum DeadlocksCommand {
    /// Build k-PG deadlock tables for one level and save them.
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
    /// Largest k (boxes per sub-game), 1 to 8 [default: the k a solve of the
    /// level would choose].
    #[arg(long)]
    pub k: Option<usize>,
    /// Output database file.
    #[arg(short = 'o', long)]
    pub output: PathBuf,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// One JSON object per k on stdout.
    #[arg(long)]
    pub json: bool,
    /// Time limit in seconds: the tables of every k finished by then are
    /// written, and the command exits 1 (as on Ctrl-C).
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
    /// A database written by `deadlocks build`.
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
    let level = args.select.pick(&all, &source)?.parse()?;
    let board = Arc::new(Board::new(&level)?);
    super::check_output("-o", &args.output, &[("the level file", args.file.as_path())])?;
    if let Some(addr) = &args.coordinator {
        return build_on_cluster(&args, addr, &level, &board);
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
    super::on_stop_signals(super::StopOn::InterruptTermAndHangUp, || STOP.store(true, Ordering::SeqCst));
    let timer = args.timeout.map(|s| super::StopTimer::start(Duration::from_secs_f64(s), &STOP)).transpose()?;
    let progress = KProgress::with_k_lines(format!("level {} ({})", level.index, level.title));
    let (tables, stats) = pool
        .install(|| build_tables(board.clone(), args.k.map_or(KChoice::Auto, KChoice::UpTo), 16, &STOP, &progress))?;
    progress.finish();
    let stopped = match (timer.is_some_and(|t| t.fired()), STOP.load(Ordering::SeqCst)) {
        (true, _) => Some("stopped by the time limit"),
        (false, true) => Some("interrupted"),
        (false, false) => None,
    };
    if let (Some(why), true) = (stopped, tables.tables.is_empty()) {
        errln!("error: {why} before the 1-box game was finished; nothing written");
        return Ok(ExitCode::from(EXIT_NOT_SOLVED));
    }
    // the bounded search's pair penalties go into the file beside the patterns
    let tables = tables.with_level_pairs();
    let bytes = kdb::save(&args.output, &tables, &stored_text(&level))?;
    report_build(&args, &stats, &tables.tables, bytes, stopped)?;
    Ok(match stopped {
        Some(why) => {
            let done = stats.last().map_or(0, |s| s.k);
            errln!("{why} in the {}-box game: the file holds the tables of k = 1..{done}", done + 1);
            ExitCode::from(EXIT_NOT_SOLVED)
        }
        None => ExitCode::from(EXIT_OK),
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

/// `deadlocks build --coordinator`: the cluster plays the k-games; the database
/// comes back checked against this level and is written like a local build's.
fn build_on_cluster(
    args: &BuildArgs,
    addr: &str,
    level: &sokoshard::model::level::Level,
    board: &Arc<Board>,
) -> Result<ExitCode> {
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
        // Ctrl-C cancels the job, which keeps the k finished, as it cancels
        // `submit`'s (a hang-up or SIGTERM ends the client alone: the job
        // goes on); a second Ctrl-C ends the client while it waits
        super::on_stop_signals(super::StopOn::Interrupt, || {
            if CLUSTER_STOPPING.swap(true, Ordering::SeqCst) {
                errln!("interrupted again: the job may still be cancelling on the cluster");
                std::process::exit(130);
            }
            CLUSTER_STOP.notify_one();
        });
        c.build_tables(&text, &level.title, level.index as u32, how, on_update, CLUSTER_STOP.notified()).await
    })?;
    let (bytes, stats) = (built.kdb, built.stats);
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let file = kdb::decode(&args.output, &bytes)?;
    anyhow::ensure!(
        file.fingerprint == board.fingerprint() && file.floor == board.floor_count(),
        "the cluster returned tables of another level"
    );
    super::write_whole(&args.output, &bytes)?;
    report_build(args, &stats, &file.tables, bytes.len() as u64, built.cut_short.as_deref())?;
    Ok(match built.cut_short {
        Some(note) => {
            errln!("{note}: the file holds what was finished");
            ExitCode::from(EXIT_NOT_SOLVED)
        }
        None => ExitCode::from(EXIT_OK),
    })
}

/// The build report, the same for a local and a cluster build: a line (or JSON
/// object) per k, then the file written (with `--json`, an object with the
/// file, its size and why the build stopped short, if it did).
fn report_build(
    args: &BuildArgs,
    stats: &[KStats],
    tables: &[KTable],
    bytes: u64,
    stopped: Option<&str>,
) -> Result<()> {
    for s in stats {
        let table_bytes = tables.iter().find(|t| t.k == s.k).map_or(0, kdb::table_bytes);
        if args.json {
            let mut v = serde_json::to_value(s)?;
            v["file_bytes"] = table_bytes.into();
            outln!("{v}")?;
        } else {
            outln!("{}", describe(s, table_bytes))?;
        }
    }
    if args.json {
        let v = serde_json::json!({ "wrote": args.output.display().to_string(), "bytes": bytes, "stopped": stopped });
        outln!("{v}")?;
    } else {
        outln!("wrote {} ({})", args.output.display(), human_bytes(bytes))?;
    }
    Ok(())
}

fn show(args: ShowArgs) -> Result<ExitCode> {
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
