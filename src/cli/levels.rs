//! `levels` and `verify`: listing a collection and replaying a solution.

use super::{read_collection, OneLevel, EXIT_BAD_INPUT, EXIT_NOT_SOLVED, EXIT_OK};
use anyhow::Result;
use sokoshard::model::board::Board;
use sokoshard::model::solution::verify;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct LevelsArgs {
    /// Collection file (XSB/SOK), or - for standard input.
    pub file: PathBuf,
    /// One JSON object per level.
    #[arg(long)]
    pub json: bool,
}

/// A solution and the one level it is for (`verify`, `replay`).
#[derive(clap::Args)]
pub struct SolutionOf {
    /// Collection file (XSB/SOK), or - for standard input.
    pub file: PathBuf,
    #[command(flatten)]
    pub select: OneLevel,
    /// The solution in LURD (lowercase walks, uppercase pushes).
    #[arg(long)]
    pub solution: String,
}

impl SolutionOf {
    /// The one level picked, parsed.
    pub fn level(&self) -> Result<sokoshard::model::level::Level> {
        Ok(self.picked()?.parse()?)
    }

    /// The one level picked, unparsed (a file or selection that fails is an error).
    fn picked(&self) -> Result<sokoshard::model::level::LevelText> {
        let all = read_collection(&self.file)?;
        let source = self.file.display().to_string();
        Ok(self.select.pick(&all, &source)?.clone())
    }
}

#[derive(clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub of: SolutionOf,
    /// One JSON object: valid, pushes, moves; reason (and step) when invalid; warning for letters of the wrong case.
    #[arg(long)]
    pub json: bool,
}

pub fn run_levels(args: LevelsArgs) -> Result<ExitCode> {
    let all = read_collection(&args.file)?;
    let mut broken = 0;
    if !args.json {
        outln!("{:>5}  {:<24} {:>7} {:>5} {:>6}", "index", "title", "size", "boxes", "floor")?;
    }
    for t in &all {
        match t.parse().map_err(anyhow::Error::from).and_then(|l| Ok((Board::new(&l)?, l))) {
            Ok((b, l)) => {
                // every box of the level but the fixed ones, those the player
                // can never reach included (the board leaves them out: they
                // make the level unsolvable, which `solve` says)
                let boxes = l.box_count() - b.fixed_boxes.len();
                if args.json {
                    outln!(
                        "{}",
                        serde_json::json!({"index": t.index, "title": t.title, "width": l.width, "height": l.height,
                            "boxes": boxes, "floor": b.floor_count(), "fixed_boxes": b.fixed_boxes.len(),
                            "key": b.keyspace.width})
                    )?;
                } else {
                    outln!(
                        "{:>5}  {} {:>7} {:>5} {:>6}",
                        t.index,
                        super::columns(&t.title, 24, false),
                        format!("{}x{}", l.width, l.height),
                        boxes,
                        b.floor_count()
                    )?;
                }
            }
            Err(e) => {
                broken += 1;
                errln!("error: {e}");
            }
        }
    }
    Ok(ExitCode::from(if broken > 0 { EXIT_BAD_INPUT } else { EXIT_OK }))
}

pub fn run_verify(args: VerifyArgs) -> Result<ExitCode> {
    let level = args.of.picked().and_then(|t| Ok(t.parse()?));
    let level = match level {
        Ok(level) => level,
        // with --json a level that cannot be had (a broken one, a --level
        // past the file's end) is an answer too, as in `solve --json`
        Err(e) if args.json => {
            outln!("{}", serde_json::json!({ "valid": false, "error": format!("{e:#}") }))?;
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
        Err(e) => return Err(e),
    };
    let v = verify(&level, &args.of.solution);
    if args.json {
        outln!("{}", serde_json::to_string(&v)?)?;
    } else if v.valid {
        outln!("valid: {}", super::pushes_moves(v.pushes as u64, v.moves as u64))?;
        if let Some(w) = &v.warning {
            errln!("warning: {w}");
        }
    } else {
        outln!("{}", invalid(&v))?;
    }
    Ok(ExitCode::from(if v.valid { EXIT_OK } else { EXIT_NOT_SOLVED }))
}

/// Where and why a solution fails, as `verify` and `replay` say it.
pub fn invalid(v: &sokoshard::model::solution::Verdict) -> String {
    let at = v.step.map(|s| format!(" at step {s}")).unwrap_or_default();
    format!(
        "invalid{at}: {} (after {})",
        v.reason.as_deref().unwrap_or("?"),
        super::pushes_moves(v.pushes as u64, v.moves as u64)
    )
}
