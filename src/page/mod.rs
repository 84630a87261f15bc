//! Pages: the self-contained HTML the binary writes (solution replays) and
//! serves (the coordinator's status page). Pure string building, no I/O: the
//! CLI writes the replays, the cluster serves both.
pub mod replay;

/// The coordinator's status page: plain HTML, CSS and a small script that
/// reads `status.json` from the same server (the token from the page's own
/// address) and draws the workers, the jobs and the running job's frontiers.
pub const STATUS_HTML: &str = include_str!("status.html");
