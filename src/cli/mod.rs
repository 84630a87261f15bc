//! The CLI room: commands, level selection, progress display and output formats.

/// `println!` that returns the write's error instead of panicking: a reader
/// that goes away (`sokoshard levels ... | head`) closes the pipe, and the
/// command then ends quietly (see [`closed_stdout`]); a full disk is an
/// error naming standard output.
macro_rules! outln {
    () => {
        $crate::cli::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` that never panics: with stderr closed (`2>&1 | head`) the
/// message has nowhere to go, and the exit code still says what happened.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `print!` as [`outln!`] is `println!`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*))
    };
}

pub mod bench;
pub mod bench_cluster;
pub mod cluster;
pub mod deadlocks;
pub mod health;
pub mod levels;
pub mod output;
pub mod progress;
pub mod replay;
pub mod solve;

use anyhow::{bail, Context, Result};
use sokoshard::model::level::{split_collection, LevelText};
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Exit code: solved / verified / listed.
pub const EXIT_OK: u8 = 0;
/// Exit code: unsolvable, not solved within limits, or a solution that does not verify.
pub const EXIT_NOT_SOLVED: u8 = 1;
/// Exit code: bad input or usage.
pub const EXIT_BAD_INPUT: u8 = 2;

/// Writes to standard output; an error keeps its kind (for
/// [`closed_stdout`]) and names where it happened.
pub fn write_stdout(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    use std::io::Write;
    std::io::stdout()
        .lock()
        .write_fmt(args)
        .map_err(|e| std::io::Error::new(e.kind(), format!("writing to standard output: {e}")))
}

/// Whether `e` is standard output's reader gone away (a closed pipe): the
/// command stops there and exits as if done, as `head` expects of what it
/// reads from, instead of computing what nobody will read.
pub fn closed_stdout(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// An error and its causes on one line, as `{:#}` prints them, but a cause
/// that its error's message already ends with is not said twice (the
/// library's I/O errors name their cause in the message and keep it as the
/// source: "error reading /tmp: Is a directory (os error 21)" came out with
/// the cause again).
pub fn error_message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain().map(|c| c.to_string()) {
        if out.ends_with(&cause) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&cause);
    }
    out
}

/// The most worker threads a command takes: far past any core count, where a
/// typo (`--threads 100000`) would spend minutes starting threads that only
/// wait (1,000 of them made Microban I #1, a hundredth of a second, take four
/// seconds on two cores).
pub const MAX_THREADS: usize = 1024;

/// `n` and its noun, singular for one: "1 push", "3 pushes".
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Pushes and moves as every printer says them: "1 push, 3 moves".
pub fn pushes_moves(pushes: u64, moves: u64) -> String {
    format!("{}, {}", count(pushes, "push", "pushes"), count(moves, "move", "moves"))
}

/// A time as every printer says it: "0.42 s", "61.50 s".
pub fn secs(seconds: f64) -> String {
    format!("{seconds:.2} s")
}

/// Parses a time flag in seconds: a number from 0 to
/// [`MAX_SECONDS`](sokoshard::engine::search::MAX_SECONDS) (a larger one is
/// no limit a clock can keep, and used to panic).
pub fn seconds(s: &str) -> std::result::Result<f64, String> {
    use sokoshard::engine::search::MAX_SECONDS;
    let v: f64 = s.trim().parse().map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !(0.0..=MAX_SECONDS).contains(&v) {
        return Err(format!("{s} seconds: a time must be between 0 and {MAX_SECONDS:e} seconds"));
    }
    Ok(v)
}

/// [`seconds`] for a time that must pass at all (a time limit, a timeout): more than 0.
pub fn positive_seconds(s: &str) -> std::result::Result<f64, String> {
    match seconds(s)? {
        v if v > 0.0 => Ok(v),
        _ => Err(format!("{s} seconds: must be more than 0")),
    }
}

/// Which signals stop a command the way Ctrl-C does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOn {
    /// Ctrl-C only: a hang-up or a SIGTERM ends the process as by default
    /// (`submit`: its job goes on on the cluster).
    Interrupt,
    /// Ctrl-C, and on unix SIGTERM (`kill`, `timeout`, a container stopped)
    /// and SIGHUP (its terminal gone): the work stops cleanly, says what it
    /// found, writes the files asked for and removes its spill files.
    InterruptTermAndHangUp,
}

/// Calls `stop` on each signal of `on`, from a thread of its own (never
/// inside a signal handler). A signal that cannot be caught keeps its default
/// action, with a warning.
pub fn on_stop_signals(on: StopOn, stop: fn()) {
    if let Err(e) = ctrlc::set_handler(stop) {
        tracing::warn!(error = %e, "cannot catch ctrl-c: it ends the process at once");
    }
    #[cfg(unix)]
    if on == StopOn::InterruptTermAndHangUp {
        use signal_hook::consts::{SIGHUP, SIGTERM};
        let caught = signal_hook::iterator::Signals::new([SIGTERM, SIGHUP]).and_then(|mut signals| {
            std::thread::Builder::new().name("signals".into()).spawn(move || {
                for _ in signals.forever() {
                    stop();
                }
            })
        });
        if let Err(e) = caught {
            tracing::warn!(error = %e, "cannot catch sigterm and sighup: they end the process at once");
        }
    }
}

/// Raises `flag` once `after` has passed, from a thread that waits on a
/// channel; dropping the timer first ends the thread and leaves the flag be.
/// The drop waits for the thread, so a timer that fired as it was dropped
/// has raised the flag by then, never after (a flag shared by the levels of
/// a collection is lowered for the next level after the drop).
pub struct StopTimer {
    tx: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    fired: Arc<AtomicBool>,
}

impl StopTimer {
    pub fn start(after: std::time::Duration, flag: &'static AtomicBool) -> Result<StopTimer> {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let f = fired.clone();
        let thread = std::thread::Builder::new()
            .name("time-limit".into())
            .spawn(move || {
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(after) {
                    f.store(true, Ordering::SeqCst);
                    flag.store(true, Ordering::SeqCst);
                }
            })
            .context("starting the time limit's thread")?;
        Ok(StopTimer { tx: Some(tx), thread: Some(thread), fired })
    }

    /// The time ran out (and the flag was raised by this timer).
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Drop for StopTimer {
    fn drop(&mut self) {
        self.tx.take(); // the channel closes: the thread ends without raising the flag
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The worker threads for `--threads`: all cores when not given; zero or more
/// than [`MAX_THREADS`] is an error, more than the cores a warning (a line of
/// the log for a node, `warning: ...` on stderr for a command).
pub fn threads(asked: Option<usize>, node: bool) -> Result<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let Some(n) = asked else { return Ok(cores) };
    anyhow::ensure!(
        (1..=MAX_THREADS).contains(&n),
        "--threads {n}: must be between 1 and {MAX_THREADS} (this machine has {cores} cores)"
    );
    if n > cores && node {
        tracing::warn!(threads = n, cores, "more threads than cores: the extra ones only take turns");
    } else if n > cores {
        errln!("warning: --threads {n} is more than this machine's {cores} cores: the extra threads only take turns");
    }
    Ok(n)
}

/// `s` in `width` terminal columns: cut to them when `cut` (a character
/// that would cross the edge is left out), then padded with spaces. Wide
/// characters (CJK, most emoji) take two columns, so a table of titles in
/// any script stays aligned, where `{:<24}` counts characters.
pub fn columns(s: &str, width: usize, cut: bool) -> String {
    use unicode_width::UnicodeWidthChar;
    let mut out = String::with_capacity(s.len() + width);
    let mut used = 0;
    for c in s.chars() {
        let w = c.width().unwrap_or(0);
        if cut && used + w > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out.extend(std::iter::repeat_n(' ', width.saturating_sub(used)));
    out
}

/// Warns of a `--mem` budget above the memory this process may use (the
/// machine's, or its container's limit): the store would not spill before
/// the system ran out (a line of the log for a node, `warning:
/// ...` on stderr for a command).
pub fn check_mem(budget: u64, node: bool) {
    let Some(total) = sokoshard::sys::total_memory_bytes().filter(|&t| budget > t) else { return };
    let (mem, machine) = (sokoshard::sys::human_bytes(budget), sokoshard::sys::human_bytes(total));
    if node {
        tracing::warn!(
            mem,
            machine,
            "--mem is more than the memory this node may use (the machine's, or its container's limit): the store may run out before it spills"
        );
    } else {
        errln!("warning: --mem {mem} is more than the {machine} of memory this process may use (the machine's, or its container's limit): the search may run out of memory before it spills to disk");
    }
}

/// Writes a file the user asked for, whole or not at all
/// ([`files::write_whole`](sokoshard::storage::files::write_whole)).
pub fn write_whole(path: &Path, contents: impl AsRef<[u8]>) -> Result<()> {
    sokoshard::storage::files::write_whole(path, contents.as_ref())
        .with_context(|| format!("writing {}", path.display()))
}

/// Checks, before the work that fills it, that a file the user asked for can
/// be written (`flag` names the option in the error), and that it is none of
/// the files the command reads or writes besides (`others`, each with what
/// to call it): writing it would destroy them.
pub fn check_output(flag: &str, path: &Path, others: &[(&str, &Path)]) -> Result<()> {
    // standard output carries the command's report: a file goes to a path
    let stdout = sokoshard::storage::files::same_file(path, Path::new("/dev/stdout"));
    anyhow::ensure!(
        path.as_os_str() != "-" && !stdout,
        "{flag} {}: this file cannot go to standard output, which carries the report; give it a path",
        path.display()
    );
    if let Some((what, _)) = others.iter().find(|(_, p)| sokoshard::storage::files::same_file(path, p)) {
        bail!("{flag} {}: that is {what}; writing there would destroy it", path.display());
    }
    sokoshard::storage::files::check_writable(path)
        .with_context(|| format!("{flag} {}: cannot write there", path.display()))
}

/// Reads a collection from a file, or from standard input for `-`.
pub fn read_collection(path: &Path) -> Result<Vec<LevelText>> {
    let (bytes, name) = if path.as_os_str() == "-" {
        let name = "<stdin>".to_string();
        (read_capped(std::io::stdin().lock()).context("reading levels from standard input")?, name)
    } else {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).with_context(|| format!("reading {name}"))?;
        (read_capped(file).with_context(|| format!("reading {name}"))?, name)
    };
    // a text file holds no NUL byte: a binary one (a program, an image) would
    // otherwise give an error per line that happens to hold a '#'
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        bail!("{name}: not a text file of levels (a NUL byte at offset {at})");
    }
    // titles in other encodings (Latin-1 and the like) keep their level
    let text = String::from_utf8_lossy(&bytes);
    let levels = split_collection(&text, &name);
    if levels.is_empty() {
        bail!("{name}: no levels found");
    }
    Ok(levels)
}

/// The largest collection read: far past any published one (a few MiB),
/// so that a wrong file (a disk image, `/dev/urandom`) is an error instead of
/// all the memory.
pub const MAX_COLLECTION_BYTES: u64 = 256 << 20;

/// All of `r`, or an error once it passes [`MAX_COLLECTION_BYTES`] (the
/// caller names the source).
fn read_capped(r: impl Read) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    r.take(MAX_COLLECTION_BYTES + 1).read_to_end(&mut bytes)?;
    anyhow::ensure!(
        bytes.len() as u64 <= MAX_COLLECTION_BYTES,
        "more than {} MiB, larger than any level collection",
        MAX_COLLECTION_BYTES >> 20
    );
    Ok(bytes)
}

/// Which one level of a collection a command works on (`verify`, `replay`,
/// `deadlocks build`, `bench-cluster`): by index or title; neither picks the
/// level of a one-level file.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OneLevel {
    /// 1-based level index.
    #[arg(long, conflicts_with = "title")]
    pub level: Option<usize>,
    /// Level title (exact, case-insensitive).
    #[arg(long)]
    pub title: Option<String>,
}

impl OneLevel {
    pub fn pick<'a>(&self, all: &'a [LevelText], source: &str) -> Result<&'a LevelText> {
        let n = all.len();
        if self.level.is_none() && self.title.is_none() {
            let [one] = all else {
                bail!("{source} has {n} levels: pick one with --level N or --title T");
            };
            return Ok(one);
        }
        let picked =
            Selection { level: self.level, title: self.title.clone(), ..Default::default() }.pick(all, source)?;
        match picked[..] {
            [one] => Ok(one),
            _ => bail!(
                "{source}: {} levels are titled {:?}; pick one with --level N",
                picked.len(),
                self.title.as_deref().unwrap_or_default()
            ),
        }
    }
}

/// Which levels of a collection to work on.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Selection {
    /// 1-based level index.
    #[arg(long, conflicts_with_all = ["levels", "title", "all"])]
    pub level: Option<usize>,
    /// Range of 1-based indices, e.g. 3-17.
    #[arg(long, conflicts_with_all = ["title", "all"])]
    pub levels: Option<String>,
    /// Level title (exact, case-insensitive).
    #[arg(long, conflicts_with = "all")]
    pub title: Option<String>,
    /// Every level (the default when nothing else is given).
    #[arg(long)]
    pub all: bool,
}

impl Selection {
    pub fn pick<'a>(&self, all: &'a [LevelText], source: &str) -> Result<Vec<&'a LevelText>> {
        let n = all.len();
        if let Some(i) = self.level {
            if i == 0 || i > n {
                bail!("{source}: level {i} does not exist; the collection has levels 1 to {n}");
            }
            return Ok(vec![&all[i - 1]]);
        }
        if let Some(r) = &self.levels {
            let (a, b) = r
                .split_once('-')
                .and_then(|(a, b)| Some((a.trim().parse::<usize>().ok()?, b.trim().parse::<usize>().ok()?)))
                .with_context(|| format!("--levels {r:?}: expected a range like 3-17"))?;
            if a == 0 || a > b || b > n {
                bail!("{source}: levels {a}-{b} are not a range within 1 to {n}");
            }
            return Ok(all[a - 1..b].iter().collect());
        }
        if let Some(t) = &self.title {
            let found: Vec<&LevelText> = all.iter().filter(|l| l.title.to_lowercase() == t.to_lowercase()).collect();
            if found.is_empty() {
                bail!("{source}: no level titled {t:?}");
            }
            return Ok(found);
        }
        Ok(all.iter().collect())
    }
}
