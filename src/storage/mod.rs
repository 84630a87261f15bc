//! The storage room: in-memory layer sets and on-disk shards behind the engine's
//! `PartitionStore` seam.
pub mod mem;

/// Storage failures, each naming the file and what happened.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{op} {path}: {source}")]
    Io { path: std::path::PathBuf, op: &'static str, source: std::io::Error },
}
