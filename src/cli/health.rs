//! `health`: one cheap, authenticated RPC to a node, for container health checks
//! and readiness probes (the image has no shell or curl, only this binary). A
//! coordinator is asked for its worker list, a worker for its identity.

use super::cluster::NetArgs;
use super::{EXIT_NOT_SOLVED, EXIT_OK};
use anyhow::{Context, Result};
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct HealthArgs {
    /// The node's address, e.g. 127.0.0.1:7400.
    pub addr: String,
    /// The node is a worker (default: a coordinator).
    #[arg(long)]
    pub worker: bool,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 3.0, value_parser = super::positive_seconds)]
    pub timeout: f64,
    #[command(flatten)]
    pub net: NetArgs,
}

/// Exit 0 and one line on stdout when the node answers; exit 1 and the reason on
/// stderr when it does not (or refuses the token); 2 for bad usage.
pub fn run(a: HealthArgs) -> Result<ExitCode> {
    let net = a.net.config()?;
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the async runtime")?;
    let limit = Duration::from_secs_f64(a.timeout);
    let answer = rt.block_on(sokoshard::cluster::client::health(&net, &a.addr, a.worker, limit));
    match answer {
        Ok(line) => {
            outln!("ok: {} {line}", a.addr)?;
            Ok(ExitCode::from(EXIT_OK))
        }
        Err(e) => {
            errln!("unhealthy: {}: {e}", a.addr);
            Ok(ExitCode::from(EXIT_NOT_SOLVED))
        }
    }
}
