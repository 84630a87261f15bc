//! The cluster room: the gRPC protocol (`proto/sokoshard.proto`, compiled by
//! tonic/prost), the coordinator (job table, job log, the layer barrier as a
//! [`LayerBackend`](crate::engine::search::LayerBackend)) and the workers (their
//! partitions, successor exchange and checkpoints). Prost types stay inside this
//! module; everything async lives here, while CPU work (expand, merge, rebuild,
//! checkpoint writes) runs on rayon, bridged with a oneshot ([`run_cpu`]).

pub mod client;
pub mod codec;
pub mod coordinator;
pub mod error;
pub mod http;
pub mod net;
pub mod persist;
pub mod worker;

/// The generated protocol types and service stubs. Private to the cluster room:
/// everything outside it speaks the project's own types (the client's views,
/// the job log's records, the engine's reports).
#[allow(clippy::all)]
pub(crate) mod proto {
    tonic::include_proto!("sokoshard.v1");
}

pub use error::ClusterError;

/// Bumped on any incompatible change of `proto/sokoshard.proto` or its meaning.
/// 4: `.kdb` bytes (a job's tables) in the shared envelope; `AbortRequest.step`.
/// 5: `LoadRequest.pi_corrals` (the driver's choice, no longer the worker's).
pub const PROTOCOL_VERSION: u32 = 5;

/// Largest gRPC message any node encodes or accepts. A successor batch is at most
/// 65536 keys (8 MiB of raw 1024-bit keys, far less once delta coded); a level
/// text is at most [`MAX_LEVEL_TEXT`].
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// The phase name of the level's own search, the one the job log checkpoints.
pub const MAIN_PHASE: &str = "main";

/// The phase name of the moves pass's search of a level; workers search it
/// without the PI-corral restriction (which keeps only some push-optimal
/// solutions).
pub const MOVES_PHASE: &str = "moves";

/// Largest level text a job may carry.
pub const MAX_LEVEL_TEXT: usize = 1 << 20;

/// The longest job title a coordinator takes, in bytes: far past any level's
/// title, and small enough that a status listing of many jobs stays within
/// a message (a title of megabytes once made every `status` fail).
pub const MAX_TITLE: usize = 4096;

/// The most jobs a coordinator keeps queued at once: a client that submits
/// without end is refused rather than growing the job log without bound.
pub const MAX_QUEUED_JOBS: usize = 10_000;

/// Runs CPU-heavy work on the rayon pool and awaits its result, so that async
/// tasks never compute. A panic in `f` becomes an internal error, not a crash.
pub async fn run_cpu<T, F>(f: F) -> Result<T, ClusterError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    rayon::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    match rx.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(p)) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(ClusterError::Internal(format!("cpu task panicked: {msg}")))
        }
        Err(_) => Err(ClusterError::Internal("cpu task vanished".into())),
    }
}

/// Side from its protocol value.
pub(crate) fn side_of(v: i32) -> Result<crate::engine::Side, ClusterError> {
    match v {
        0 => Ok(crate::engine::Side::Forward),
        1 => Ok(crate::engine::Side::Backward),
        _ => Err(ClusterError::InvalidArgument(format!("unknown side {v}"))),
    }
}

/// Protocol value of a side.
pub(crate) fn side_to(s: crate::engine::Side) -> i32 {
    match s {
        crate::engine::Side::Forward => proto::Side::Forward as i32,
        crate::engine::Side::Backward => proto::Side::Backward as i32,
    }
}
