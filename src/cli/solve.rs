//! `solve`: solve levels in this process and print text, JSON or SOK output.

use super::output::{print_level, print_summary_of};
use super::progress::{KProgress, LayerProgress};
use super::{read_collection, Selection, EXIT_BAD_INPUT, EXIT_NOT_SOLVED, EXIT_OK};
use anyhow::{Context, Result};
use sokoshard::engine::driver::Observers;
use sokoshard::engine::kpg::{KChoice, MAX_K};
use sokoshard::model::board::Board;
use sokoshard::model::level::{Level, LevelText};
use sokoshard::model::rules::Pruning;
use sokoshard::solve::{solve_local_observed, BoundSpec, SolveOptions, SolveReport, Status, TableSource};
use sokoshard::storage::budget::{default_budget, parse_size};
use sokoshard::storage::disk::SpillPolicy;
use sokoshard::storage::kdb;
use sokoshard::storage::spill::check_spill_base;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Raised by Ctrl-C: the current level stops and no further level starts.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The running level's stop flag, which Ctrl-C raises too.
static CURRENT: Mutex<Option<Arc<AtomicBool>>> = Mutex::new(None);

#[derive(clap::Args)]
pub struct SolveArgs {
    /// Collection file (XSB/SOK), or - for standard input.
    pub file: PathBuf,
    #[command(flatten)]
    pub select: Selection,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Per-level time limit in seconds; the level reports `timeout`.
    #[arg(long, value_parser = super::positive_seconds)]
    pub timeout: Option<f64>,
    /// Stop a level (status `limit`) once this many states are stored (a
    /// failed plain try's states, dropped between bound iterations, do not count).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_states: Option<u64>,
    /// Number of state partitions (a power of two; default 4 per thread). Fewer
    /// partitions keep spilled shards denser and fewer; more balance threads.
    #[arg(long)]
    pub partitions: Option<usize>,
    /// Memory budget for states and successors, e.g. 512MiB, 8GiB, 1.5GB or a
    /// byte count: states stay in RAM while they fit and what does not fit
    /// spills to disk. Default: half of the memory this process may use (the
    /// machine's, or its container's limit).
    #[arg(long, value_name = "SIZE", value_parser = parse_mem)]
    pub mem: Option<u64>,
    /// Existing directory to spill under (a fresh subdirectory is created in it
    /// per level, and removed after it). Default: the system temporary
    /// directory ($TMPDIR, else /tmp).
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Keep every state in RAM with no budget and never write to disk: a
    /// search that outgrows memory ends when the system runs out (for
    /// comparisons: a search that fits runs 2 to 7% faster, using more
    /// memory).
    #[arg(long, conflicts_with_all = ["mem", "spill_dir", "keep_spill"])]
    pub no_spill: bool,
    /// Keep the spill files after each level instead of removing them (a
    /// level that spilled nothing leaves an empty directory).
    #[arg(long)]
    pub keep_spill: bool,
    /// Which layers stay in RAM when they do not all fit (oldest, newest, none).
    #[arg(long, value_name = "POLICY", default_value = "oldest", value_parser = parse_policy)]
    pub spill_policy: SpillPolicy,
    /// Turn off freeze-deadlock pruning and the frozen-target matching built on
    /// it (dead squares stay on).
    #[arg(long)]
    pub no_freeze: bool,
    /// Turn off the PI-corral move restriction of the forward search (when the
    /// player can reach every push into a fenced-off area, only those pushes).
    /// By default it is on where a sample of the level's states shows that it
    /// drops pushes (at least 0.1% of them), and off where it would cost its
    /// search for nothing; `--json` says which (`pi_corrals`).
    #[arg(long)]
    pub no_pi_corrals: bool,
    /// Keep the PI-corral restriction also on a level where the sample shows
    /// it drops almost no push.
    #[arg(long, conflicts_with = "no_pi_corrals")]
    pub keep_pi_corrals: bool,
    /// The plain search: no push-distance bound (by default the search keeps
    /// only states that can still lie on a solution within a bound, raised
    /// until the sides meet; the answer is push-optimal either way).
    #[arg(long)]
    pub no_bound: bool,
    /// One bounded iteration at this many pushes (say, a known solution's):
    /// the optimum if some solution is that short, else "no solution within N".
    #[arg(long, value_name = "N", conflicts_with = "no_bound")]
    pub upper_bound: Option<u32>,
    /// Bound by the box-to-goal matching alone, without the pair penalties
    /// of the 2-box games (for comparisons; the answer is the same).
    #[arg(long, conflicts_with = "no_bound")]
    pub no_pair_penalties: bool,
    /// Also bound by the penalties of 3-box games over disjoint triples of
    /// boxes (with the pairs of the others), where their tables fit a work
    /// limit of two or three seconds. Off by default: on levels with goal rooms
    /// (XSokoban) the search stores several times fewer states, on small
    /// levels each state costs more than the bound saves. The answer is the
    /// same.
    #[arg(long, conflicts_with_all = ["no_bound", "no_pair_penalties"])]
    pub triples: bool,
    /// Search every bound iteration in whole layers alone, without the probe
    /// that runs beside them where the bound is already known to be at most
    /// the optimum (for comparisons; the answer is the same).
    #[arg(long, conflicts_with = "no_bound")]
    pub no_probe: bool,
    /// Build k-PG deadlock tables for k = 1 to this k before each solve (1 to 8).
    /// Without it the solve builds k = 1, 2 and each next k whose k-game is
    /// predicted to stay within 500,000 states (half a second), the larger k
    /// only once the search has stored about what they cost; `--kpg 0` uses
    /// no table at all, not even dead squares.
    #[arg(long, conflicts_with = "deadlocks")]
    pub kpg: Option<usize>,
    /// Load k-PG deadlock tables from a database built by `deadlocks build`:
    /// a file, or a directory of them (`deadlocks build --all -o DIR`), where
    /// each level finds its own. A level without one builds its own tables.
    #[arg(long)]
    pub deadlocks: Option<PathBuf>,
    /// What the solution must be optimal for: `pushes,moves` (the default)
    /// gives the fewest pushes and, among all such solutions, the fewest
    /// moves, at the cost of one more search without PI-corrals; `pushes`
    /// stops at the first push-optimal solution.
    #[arg(long, value_enum, default_value = "pushes,moves")]
    pub objective: ObjectiveArg,
    /// The most states the moves pass's search may store before the pass
    /// gives up and the push-optimal solution stands (the output says so).
    /// Without it: 32 times the states of the level's own search, and at
    /// least 16,777,216.
    #[arg(long, value_name = "N", value_parser = parse_states)]
    pub moves_states: Option<u64>,
    /// One JSON object per level on stdout.
    #[arg(long)]
    pub json: bool,
    /// Write the levels with their solutions in SOK form to this file.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Write a replay page (HTML: the board, play, steps, a slider over the
    /// pushes) of the solved levels to this file.
    #[arg(long)]
    pub html: Option<PathBuf>,
}

pub fn parse_mem(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// A count of states, at least one.
pub fn parse_states(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("expected a number of states of at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{s:?}: expected a number of states ({e})")),
    }
}

fn parse_policy(s: &str) -> Result<SpillPolicy, String> {
    match s {
        "oldest" => Ok(SpillPolicy::KeepOldest),
        "newest" => Ok(SpillPolicy::KeepNewest),
        "none" => Ok(SpillPolicy::AllToDisk),
        _ => Err(format!("{s:?}: expected oldest, newest or none")),
    }
}

struct Outcome {
    text: LevelText,
    level: Option<Level>,
    report: Option<SolveReport>,
    error: Option<String>,
}

/// Whether the solve runs under a memory budget, spilling what does not fit:
/// unless `--no-spill`, or where no spill directory is given and the system
/// temporary directory cannot take files (a warning says so, and the states
/// stay in RAM: a solve that fits needs no disk).
fn spills(args: &SolveArgs) -> bool {
    if args.no_spill {
        return false;
    }
    if args.mem.is_some() || args.spill_dir.is_some() {
        return true;
    }
    let tmp = std::env::temp_dir();
    match check_spill_base(&tmp) {
        Ok(()) => true,
        Err(e) => {
            errln!("warning: {e}: states stay in RAM with no budget; give --spill-dir DIR to spill to disk");
            false
        }
    }
}

pub fn run(args: SolveArgs) -> Result<ExitCode> {
    if let Some(p) = args.partitions {
        anyhow::ensure!(p.is_power_of_two() && p <= 1 << 16, "--partitions {p} must be a power of two up to 65536");
    }
    check_kpg(args.kpg)?;
    check_moves_states(args.objective, args.moves_states)?;
    if let Some(dir) = &args.spill_dir {
        check_spill_base(dir)?;
    }
    let threads = super::threads(args.threads, false)?;
    if let Some(m) = args.mem {
        super::check_mem(m, false);
    }
    let spill = spills(&args);
    if spill {
        sokoshard::sys::release_large_frees(threads);
    }
    let all = read_collection(&args.file)?;
    let source = args.file.display().to_string();
    let picked = args.select.pick(&all, &source)?;
    // a database is read and matched once, before any file is written: a
    // bad one is one error, not one per level
    let database = args.deadlocks.as_deref().map(|p| read_database(p, &picked)).transpose()?;
    // the files asked for must be writable before the solve, not after it
    let mut inputs = vec![("the level file", args.file.as_path())];
    if let Some(db) = &args.deadlocks {
        inputs.push(("the --deadlocks database", db.as_path()));
    }
    if let Some(out) = &args.output {
        super::check_output("--output", out, &inputs)?;
    }
    if let Some(path) = &args.html {
        let mut others = inputs.clone();
        if let Some(out) = &args.output {
            others.push(("the --output file", out.as_path()));
        }
        // the two not written yet: the same path spelt the same way
        anyhow::ensure!(
            args.output.as_deref() != Some(path.as_path()),
            "--html {}: that is the --output file too; give each its own path",
            path.display()
        );
        super::check_output("--html", path, &others)?;
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().context("starting worker threads")?;
    super::on_stop_signals(super::StopOn::InterruptTermAndHangUp, || {
        INTERRUPTED.store(true, Ordering::SeqCst);
        if let Some(c) = CURRENT.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            c.store(true, Ordering::SeqCst);
        }
    });
    let opts = SolveOptions {
        partitions: args.partitions.unwrap_or_else(|| sokoshard::solve::default_partitions(threads)),
        // dead squares are the 1-PG's verdict on lone boxes (Heiner's "dead
        // locations"), so `--kpg 0`, no table at all, does without them
        pruning: Pruning {
            dead_squares: args.kpg != Some(0),
            freeze: !args.no_freeze,
            pi_corrals: !args.no_pi_corrals,
        },
        max_states: args.max_states,
        tables: TableSource::None,
        deadline: None,
        bound: match (args.no_bound, args.upper_bound) {
            (true, _) => BoundSpec::Off,
            (false, Some(u)) => BoundSpec::Upper(u),
            (false, None) => BoundSpec::Iterate,
        },
        pair_penalties: !args.no_pair_penalties,
        triple_penalties: args.triples,
        memory_budget: spill.then(|| args.mem.unwrap_or_else(default_budget)),
        spill_dir: args.spill_dir.clone(),
        keep_spill: args.keep_spill,
        spill_policy: args.spill_policy,
        objective: args.objective.into(),
        probe_states: if args.no_probe { 0 } else { sokoshard::engine::driver::PROBE_MAX },
        probe_memory: None,
        probe_after: sokoshard::engine::driver::PROBE_AFTER,
        moves_states: args.moves_states,
        // without a budget the moves pass keeps its depths in RAM too
        moves_memory: (!spill).then_some(u64::MAX),
        sample_corrals: !args.keep_pi_corrals,
    };
    let started = Instant::now();
    let mut outcomes = Vec::new();
    // a failed write to stdout (its reader gone, a full disk) ends the solve
    // after the files asked for are written with what was solved
    let mut unprinted = None;
    for text in picked {
        if INTERRUPTED.load(Ordering::SeqCst) {
            break;
        }
        let tables = Tables { kpg: args.kpg, database: database.as_ref() };
        let outcome = solve_one(text, &opts, &pool, args.timeout, &tables);
        let printed = print_outcome(&outcome, args.json);
        outcomes.push(outcome);
        if let Err(e) = printed {
            unprinted = Some(e);
            break;
        }
    }
    if unprinted.is_none() && !args.json && outcomes.len() > 1 {
        unprinted = print_summary(&outcomes, started.elapsed()).err();
    }
    if let Some(out) = &args.output {
        write_sok(out, &outcomes).with_context(|| format!("writing {}", out.display()))?;
    }
    if let Some(path) = &args.html {
        let replays: Vec<_> =
            outcomes.iter().filter_map(|o| super::replay::replay_of(o.level.as_ref()?, o.report.as_ref()?)).collect();
        super::replay::write_replay(path, &replays)?;
    }
    if let Some(e) = unprinted {
        return Err(e.into());
    }
    let code = if outcomes.iter().any(|o| o.error.is_some()) {
        EXIT_BAD_INPUT
    } else if outcomes.iter().all(|o| o.report.as_ref().is_some_and(|r| r.status == Status::Solved))
        && !INTERRUPTED.load(Ordering::SeqCst)
    {
        EXIT_OK
    } else {
        EXIT_NOT_SOLVED
    };
    Ok(ExitCode::from(code))
}

/// Where a solve's deadlock tables come from: a database for the levels it
/// was built for, else built as `kpg` says.
struct Tables<'a> {
    kpg: Option<usize>,
    database: Option<&'a Database>,
}

/// `--deadlocks`: one database file, read once, or a directory of them,
/// each read when its level comes.
enum Database {
    File(PathBuf, Box<kdb::KdbFile>),
    Dir(PathBuf),
}

impl Database {
    /// The database of `board`'s level, if there is one: its path and
    /// contents, read and matched (a damaged one is an error naming it).
    fn for_level(&self, board: &Board) -> Result<Option<(PathBuf, kdb::KdbFile)>, kdb::KdbError> {
        match self {
            Database::File(path, file) => {
                // another level's database: said once before the first level
                // (`read_database`), and matched before the tables are copied
                Ok(kdb::check_level(path, file, board).is_ok().then(|| (path.clone(), (**file).clone())))
            }
            Database::Dir(dir) => {
                let path = kdb::level_file(dir, board);
                if !path.exists() {
                    return Ok(None);
                }
                let file = kdb::read(&path)?;
                // a file renamed into the directory under another level's name
                kdb::check_level(&path, &file, board)?;
                Ok(Some((path, file)))
            }
        }
    }
}

/// Reads `--deadlocks` once and matches it with the levels picked: an error
/// if it fits none of them (for a file, the first one's mismatch, naming how
/// it differs), and a warning if it fits only some, which build their own. A
/// directory's files are read only when their levels come.
fn read_database(path: &std::path::Path, picked: &[&LevelText]) -> Result<Database> {
    // the levels that fail to parse say so when their turn comes
    let boards = picked.iter().filter_map(|t| Some((t.index, Board::new(&t.parse().ok()?).ok()?)));
    let (fits, misfits, database) = if path.is_dir() {
        let (have, lack): (Vec<_>, Vec<_>) = boards.partition(|(_, b)| kdb::level_file(path, b).exists());
        if let (true, Some((index, board))) = (have.is_empty(), lack.first()) {
            anyhow::bail!(
                "{}: no database in it is of the levels picked (a level's is named by its fingerprint, as `deadlocks build --all -o {}` writes them; level {index}'s would be {})",
                path.display(),
                path.display(),
                kdb::level_file(path, board).display()
            );
        }
        (have.len(), lack.len(), Database::Dir(path.to_path_buf()))
    } else {
        let file = kdb::read(path)?;
        let (mut fits, mut first_misfit, mut misfits) = (0, None, 0);
        for (_, board) in boards {
            match kdb::check_level(path, &file, &board) {
                Ok(()) => fits += 1,
                Err(e) => {
                    misfits += 1;
                    first_misfit.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_misfit.filter(|_| fits == 0) {
            return Err(e.into());
        }
        (fits, misfits, Database::File(path.to_path_buf(), Box::new(file)))
    };
    if misfits > 0 {
        errln!(
            "warning: {} holds the tables of {fits} of the levels picked; the other {misfits} build their own",
            path.display()
        );
    }
    Ok(database)
}

fn solve_one(
    text: &LevelText,
    opts: &SolveOptions,
    pool: &rayon::ThreadPool,
    timeout: Option<f64>,
    tables: &Tables<'_>,
) -> Outcome {
    let mut outcome = Outcome { text: text.clone(), level: None, report: None, error: None };
    let level = match text.parse() {
        Ok(l) => l,
        Err(e) => {
            outcome.error = Some(e.to_string());
            return outcome;
        }
    };
    let board = match Board::new(&level) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            outcome.error = Some(e.to_string());
            return outcome;
        }
    };
    outcome.level = Some(level);
    let mut opts = opts.clone();
    opts.deadline = timeout.and_then(sokoshard::engine::search::deadline_in);
    let found = match tables.database.map(|d| d.for_level(&board)).transpose() {
        Ok(found) => found.flatten(),
        Err(e) => {
            outcome.error = Some(e.to_string());
            return outcome;
        }
    };
    let mut read_from = None;
    opts.tables = match (found, tables.kpg) {
        (Some((path, file)), _) => match kdb::bind(&path, file, board.clone()) {
            Ok(t) => {
                read_from = Some(path.display().to_string());
                TableSource::Given(Arc::new(t))
            }
            Err(e) => {
                outcome.error = Some(e.to_string());
                return outcome;
            }
        },
        (None, kpg) => TableSource::Build(kpg.map_or(KChoice::Auto, KChoice::UpTo)),
    };
    // Ctrl-C raises this level's flag (and stops the levels after it)
    let cancel = Arc::new(AtomicBool::new(INTERRUPTED.load(Ordering::SeqCst)));
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some(cancel.clone());
    let label = format!("level {} ({})", text.index, text.title);
    let table_progress = KProgress::new(label.clone());
    let progress = LayerProgress::new(label);
    let observers = Observers { tables: &table_progress, search: &progress };
    let result = pool.install(|| solve_local_observed(board, &opts, &cancel, &observers));
    table_progress.finish();
    progress.finish();
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = None;
    match result {
        Ok(mut r) => {
            if r.status == Status::Timeout && INTERRUPTED.load(Ordering::SeqCst) {
                r.reason = Some("interrupted".into());
            }
            r.tables_file = read_from;
            outcome.report = Some(r)
        }
        Err(e) => outcome.error = Some(e.to_string()),
    }
    outcome
}

fn print_summary(outcomes: &[Outcome], total: Duration) -> std::io::Result<()> {
    let statuses: Vec<Option<Status>> = outcomes.iter().map(|o| o.report.as_ref().map(|r| r.status)).collect();
    print_summary_of(&statuses, total)
}

fn print_outcome(o: &Outcome, json: bool) -> std::io::Result<()> {
    print_level(o.text.index, &o.text.title, o.report.as_ref(), o.error.as_deref(), json)
}

/// Writes levels with a `Solution` section each, the form Sokoban programs load.
fn write_sok(path: &std::path::Path, outcomes: &[Outcome]) -> Result<()> {
    let mut s = String::new();
    for o in outcomes {
        let Some(level) = &o.level else { continue };
        // an untitled level's "#N" is its place in the file read, no title
        // to write (read back it would become one)
        let titled = o.text.has_title();
        if titled {
            s.push_str(&format!("; {}\n\n", o.text.title));
        }
        s.push_str(&level.to_xsb());
        if titled {
            s.push_str(&format!("Title: {}\n", o.text.title));
        }
        // the level's other fields as read (Author:, a Comment: block)
        for line in &o.text.fields {
            s.push_str(line);
            s.push('\n');
        }
        if let Some(r) = &o.report {
            if let (Some(sol), Some(p), Some(m)) = (&r.solution, r.pushes, r.moves) {
                s.push_str(&format!("Solution (moves {m}, pushes {p})\n{sol}\n"));
            } else {
                s.push_str(&format!("Comment: {}\n", r.status.name()));
            }
        }
        s.push('\n');
    }
    super::write_whole(path, s)
}

/// `--kpg` of `solve` and `submit`: 0 (no tables) to [`MAX_K`].
pub fn check_kpg(kpg: Option<usize>) -> Result<()> {
    if let Some(k) = kpg {
        anyhow::ensure!(k <= MAX_K, "--kpg must be between 0 and {MAX_K}");
    }
    Ok(())
}

/// `--moves-states` with `--objective pushes` would be ignored: say so.
pub fn check_moves_states(objective: ObjectiveArg, moves_states: Option<u64>) -> Result<()> {
    anyhow::ensure!(
        !(objective == ObjectiveArg::Pushes && moves_states.is_some()),
        "--moves-states is the moves pass's budget, and --objective pushes runs no moves pass"
    );
    Ok(())
}

/// `--objective`: what a solution is optimal for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ObjectiveArg {
    /// The fewest pushes.
    #[value(name = "pushes")]
    Pushes,
    /// The fewest pushes, then the fewest moves among those.
    #[value(name = "pushes,moves")]
    PushesMoves,
}

impl From<ObjectiveArg> for sokoshard::solve::Objective {
    fn from(o: ObjectiveArg) -> Self {
        match o {
            ObjectiveArg::Pushes => sokoshard::solve::Objective::Pushes,
            ObjectiveArg::PushesMoves => sokoshard::solve::Objective::PushesMoves,
        }
    }
}
