//! How results are printed: one level's outcome as text or as one JSON line
//! (the same for `solve` and `submit`), and the summary table after several.

use serde::Serialize;
use sokoshard::engine::report::IterationSearch;
use sokoshard::solve::{Objective, SolveReport, Status};
use sokoshard::sys::{human_bytes, peak_rss_bytes};
use std::io::IsTerminal;
use std::time::Duration;

/// One level's JSON line: where it is, its report, and this process's figures.
#[derive(Serialize)]
struct Line<'a> {
    level: usize,
    title: &'a str,
    #[serde(flatten)]
    report: &'a SolveReport,
    peak_rss_bytes: u64,
    cpu_seconds: f64,
}

/// The JSON line of a level that could not be solved at all (bad input).
#[derive(Serialize)]
struct ErrorLine<'a> {
    level: usize,
    title: &'a str,
    status: &'static str,
    pushes: Option<usize>,
    moves: Option<usize>,
    solution: Option<&'a str>,
    states: u64,
    seconds: f64,
    reason: Option<&'a str>,
}

/// Prints one level's result the way `solve` does (text or one JSON line); also
/// used by `submit` for results that come back from a cluster.
pub fn print_level(
    index: usize,
    title: &str,
    report: Option<&SolveReport>,
    error: Option<&str>,
    json: bool,
) -> std::io::Result<()> {
    if json {
        let line = match report {
            Some(report) => serde_json::to_string(&Line {
                level: index,
                title,
                report,
                peak_rss_bytes: peak_rss_bytes(),
                cpu_seconds: sokoshard::sys::cpu_seconds(),
            }),
            None => serde_json::to_string(&ErrorLine {
                level: index,
                title,
                status: "error",
                pushes: None,
                moves: None,
                solution: None,
                states: 0,
                seconds: 0.0,
                reason: error,
            }),
        };
        if let Ok(line) = line {
            outln!("{line}")?;
        }
        return Ok(());
    }
    match (report, error) {
        (Some(r), _) => {
            let head = format!("level {index} ({title})");
            match r.status {
                Status::Solved => {
                    // what the counts are proven optimal for
                    let proven = match r.objective {
                        Some(Objective::PushesMoves) => " (fewest pushes, then fewest moves)",
                        _ => " (fewest pushes)",
                    };
                    let counts = super::pushes_moves(r.pushes.unwrap_or(0) as u64, r.moves.unwrap_or(0) as u64);
                    outln!("{head}: solved in {counts}{proven}")?;
                    if let Some(note) = &r.moves_note {
                        outln!("  moves not minimized: {note}")?;
                    }
                    outln!("  solution: {}", r.solution.as_deref().unwrap_or(""))?;
                }
                other => {
                    let why = r.reason.as_deref().map(|s| format!(" ({s})")).unwrap_or_default();
                    outln!("{head}: {}{why}", other.name())?;
                }
            }
            if !r.iterations.is_empty() {
                let steps: Vec<String> = r
                    .iterations
                    .iter()
                    .map(|it| {
                        let u = it.bound.map_or("none".to_string(), |u| u.to_string());
                        let cut = match it.search {
                            IterationSearch::Outgrown => ", small tables outgrown",
                            IterationSearch::PlainTry => ", plain search tried",
                            _ => "",
                        };
                        format!("{u} ({} states, {}{cut})", it.states, super::secs(it.seconds))
                    })
                    .collect();
                outln!("  bounds: {}", steps.join(", "))?;
            }
            outln!("  states: {} stored, {} generated; {}", r.states, r.generated, super::secs(r.seconds))?;
            if let Some(db) = &r.tables_file {
                outln!("  tables: k = 1..{} read from {db}", r.kpg)?;
            }
            if r.moves_seconds > 0.0 {
                // a pass stopped before it counted them has no count to give
                let optimal = if r.moves_note.is_some() && r.optimal_states == 0 {
                    String::new()
                } else {
                    format!(", {} on push-optimal solutions", r.optimal_states)
                };
                outln!(
                    "  moves pass: {} states searched{optimal}{}; {}",
                    r.moves_states,
                    if r.moves_disk_bytes > 0 {
                        format!(" ({} of them on disk)", human_bytes(r.moves_disk_bytes))
                    } else {
                        String::new()
                    },
                    super::secs(r.moves_seconds)
                )?;
            }
            // every solve has a budget; the line is for one that used the disk
            if let Some(st) = r.storage.as_ref().filter(|st| st.peak_disk_bytes > 0 || st.spill_dir.is_some()) {
                let per = if st.disk_states > 0 { r.disk_bytes as f64 / st.disk_states as f64 } else { 0.0 };
                outln!(
                    "  disk: {} for {} states on disk ({per:.2} B/state), peak {}; budget {}, peak RSS {}",
                    human_bytes(r.disk_bytes),
                    st.disk_states,
                    human_bytes(st.peak_disk_bytes),
                    human_bytes(st.memory_budget_bytes),
                    human_bytes(peak_rss_bytes())
                )?;
                if let Some(dir) = &st.spill_dir {
                    outln!("  spill files kept in {}", dir.display())?;
                }
            }
        }
        (None, Some(e)) => {
            outln!("level {index} ({title}): error: {e}")?;
            if error_also_on_stderr(std::io::stdout().is_terminal(), std::io::stderr().is_terminal()) {
                errln!("error: {e}");
            }
        }
        (None, None) => {}
    }
    Ok(())
}

/// The summary table after several levels: `None` counts as an error.
pub fn print_summary_of(statuses: &[Option<Status>], total: Duration) -> std::io::Result<()> {
    let count = |s: Status| statuses.iter().filter(|o| **o == Some(s)).count();
    let errors = statuses.iter().filter(|o| o.is_none()).count();
    outln!()?;
    outln!(
        "{:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "solved",
        "unsolvable",
        "timeout",
        "limit",
        "bounded",
        "error",
        "total time"
    )?;
    outln!(
        "{:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}",
        count(Status::Solved),
        count(Status::Unsolvable),
        count(Status::Timeout),
        count(Status::Limit),
        count(Status::Bounded),
        errors,
        super::secs(total.as_secs_f64())
    )
}

/// Whether a level's error, printed with the results on stdout, is printed on
/// stderr too: only when the two do not end on the same terminal, where a
/// person would read the same line twice. With stdout redirected (to a file,
/// a pipe) the error still reaches the person at stderr.
fn error_also_on_stderr(stdout_terminal: bool, stderr_terminal: bool) -> bool {
    !(stdout_terminal && stderr_terminal)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_level_error_prints_once_on_a_terminal_and_reaches_stderr_otherwise() {
        assert!(!super::error_also_on_stderr(true, true));
        assert!(super::error_also_on_stderr(false, true));
        assert!(super::error_also_on_stderr(false, false));
        assert!(super::error_also_on_stderr(true, false));
    }
}
