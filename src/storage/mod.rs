//! The storage room owns in-memory sets and on-disk shards: everything that
//! holds visited states behind the engine's `PartitionStore` seam.

pub mod budget;
pub mod disk;
pub mod envelope;
pub mod error;
pub mod files;
pub mod kdb;
pub(crate) mod layered;
pub mod mem;
pub mod shard;
pub mod spill;
pub mod tape;

pub use error::StorageError;
pub use shard::{write_shard, ShardInfo, ShardMeta, ShardReader, ShardWriter};
