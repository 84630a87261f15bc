//! The `sokoshard` command line: argument parsing, progress and output. All
//! solving lives in the library; this file only wires commands to it.

#[macro_use]
mod cli;

use clap::{Parser, Subcommand};
use std::io::IsTerminal;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "sokoshard",
    version,
    about = "Push-optimal Sokoban solver: bidirectional partitioned BFS with k-packet-game deadlock tables"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the levels of a collection: index, title, size, boxes, floor squares.
    Levels(cli::levels::LevelsArgs),
    /// Replay a LURD solution on a level and report pushes and moves.
    Verify(cli::levels::VerifyArgs),
    /// Write a replay page (HTML) of a LURD solution, checked first.
    Replay(cli::replay::ReplayArgs),
    /// Solve levels push-optimally on this machine.
    Solve(cli::solve::SolveArgs),
    /// Run a cluster coordinator: the job table, the layer barrier, the job log.
    Coordinator(cli::cluster::CoordinatorArgs),
    /// Run a cluster worker: holds partitions of a job's states.
    Worker(cli::cluster::WorkerArgs),
    /// Solve levels on a cluster; prints results as `solve` does.
    Submit(cli::cluster::SubmitArgs),
    /// Show a cluster's workers and jobs.
    Status(cli::cluster::StatusArgs),
    /// Cancel a cluster job.
    Cancel(cli::cluster::CancelArgs),
    /// Check that a coordinator (or, with --worker, a worker) answers: for
    /// container health checks.
    Health(cli::health::HealthArgs),
    /// Benchmark: one level on 1, 2 and 4 local worker processes.
    BenchCluster(cli::bench_cluster::BenchArgs),
    /// Measurements for docs/benchmarks.md (each run a child process).
    #[command(subcommand)]
    Bench(cli::bench::BenchCommand),
    /// Build or inspect k-packet-game deadlock databases.
    #[command(subcommand)]
    Deadlocks(cli::deadlocks::DeadlocksCommand),
}

fn main() -> ExitCode {
    let args = Cli::parse();
    // a node runs for hours and is watched through its log: its start, joins,
    // losses and recoveries (info) show by default; a command's only warnings
    let quiet = if matches!(args.command, Command::Coordinator(_) | Command::Worker(_)) { "info" } else { "warn" };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SOKOSHARD_LOG").unwrap_or_else(|_| quiet.into()))
        .with_writer(std::io::stderr)
        // colour codes only for a person at a terminal, never in a log file
        .with_ansi(std::io::stderr().is_terminal())
        // a log line that cannot be written (stderr closed) is dropped; the
        // report of that would panic on the same stderr
        .log_internal_errors(false)
        .init();
    let result = match args.command {
        Command::Levels(a) => cli::levels::run_levels(a),
        Command::Verify(a) => cli::levels::run_verify(a),
        Command::Replay(a) => cli::replay::run_replay(a),
        Command::Solve(a) => cli::solve::run(a),
        Command::Coordinator(a) => cli::cluster::run_coordinator(a),
        Command::Worker(a) => cli::cluster::run_worker(a),
        Command::Submit(a) => cli::cluster::run_submit(a),
        Command::Status(a) => cli::cluster::run_status(a),
        Command::Cancel(a) => cli::cluster::run_cancel(a),
        Command::Health(a) => cli::health::run(a),
        Command::BenchCluster(a) => cli::bench_cluster::run(a),
        Command::Deadlocks(c) => cli::deadlocks::run(c),
        Command::Bench(c) => cli::bench::run(c),
    };
    match result {
        Ok(code) => code,
        // the reader of stdout went away (`| head`): done, as it asked
        Err(e) if cli::closed_stdout(&e) => ExitCode::from(cli::EXIT_OK),
        Err(e) => {
            errln!("error: {}", cli::error_message(&e));
            ExitCode::from(cli::EXIT_BAD_INPUT)
        }
    }
}
