//! `replay` and `--html`: solution replay pages written to a file, for any
//! solution (checked by `verify` first) or for what `solve` and `submit` found.

use super::levels::{invalid, SolutionOf};
use super::{EXIT_NOT_SOLVED, EXIT_OK};
use anyhow::Result;
use sokoshard::model::level::Level;
use sokoshard::model::solution::verify;
use sokoshard::page::replay::{replay_html, ReplayLevel};
use sokoshard::solve::SolveReport;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub of: SolutionOf,
    /// The HTML file to write.
    #[arg(long)]
    pub html: PathBuf,
}

/// Writes the replay of a solution that verifies; refuses one that does not,
/// naming the step where it fails, and writes nothing.
pub fn run_replay(args: ReplayArgs) -> Result<ExitCode> {
    let level = args.of.level()?;
    super::check_output("--html", &args.html, &[("the level file", args.of.file.as_path())])?;
    let v = verify(&level, &args.of.solution);
    if !v.valid {
        errln!("error: the solution is {}; no page written", invalid(&v));
        return Ok(ExitCode::from(EXIT_NOT_SOLVED));
    }
    if let Some(w) = &v.warning {
        errln!("warning: {w}");
    }
    write_replay(&args.html, &[ReplayLevel::new(&level, &args.of.solution, v.pushes, v.moves)])?;
    outln!(
        "wrote {}: level {} ({}), {}",
        args.html.display(),
        level.index,
        level.title,
        super::pushes_moves(v.pushes as u64, v.moves as u64)
    )?;
    Ok(ExitCode::from(EXIT_OK))
}

/// The replay of a report's solution on `level`, when it has one that verifies.
pub fn replay_of(level: &Level, report: &SolveReport) -> Option<ReplayLevel> {
    let solution = report.solution.as_deref()?;
    let v = verify(level, solution);
    v.valid.then(|| ReplayLevel::new(level, solution, v.pushes, v.moves))
}

/// Writes the page of `levels` to `path` (tmp + rename).
pub fn write_replay(path: &Path, levels: &[ReplayLevel]) -> Result<()> {
    super::write_whole(path, replay_html(levels))
}
