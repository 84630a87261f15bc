//! The `sokoshard` command line: argument parsing, progress and output. All
//! solving lives in the library; this file only wires commands to it.

mod cli;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "sokoshard", version, about = "Push-optimal Sokoban solver: bidirectional partitioned BFS with k-packet-game deadlock tables")]
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
    /// Solve levels push-optimally on this machine.
    Solve(cli::solve::SolveArgs),
    /// Measurements for the README (each run a child process).
    #[command(subcommand)]
    Bench(cli::bench::BenchCommand),
    /// Build or inspect k-packet-game deadlock databases.
    #[command(subcommand)]
    Deadlocks(cli::deadlocks::DeadlocksCommand),
}

fn main() -> ExitCode {
    let args = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SOKOSHARD_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match args.command {
        Command::Levels(a) => cli::levels::run_levels(a),
        Command::Verify(a) => cli::levels::run_verify(a),
        Command::Solve(a) => cli::solve::run(a),
        Command::Deadlocks(c) => cli::deadlocks::run(c),
        Command::Bench(c) => cli::bench::run(c),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(cli::EXIT_BAD_INPUT)
        }
    }
}
