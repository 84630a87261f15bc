//! The storage room owns in-memory sets and on-disk shards: everything that
//! holds visited states once they no longer fit, or no longer belong, in a
//! search thread's hands.

pub mod error;
pub mod shard;

pub use error::StorageError;
pub use shard::{write_shard, ShardInfo, ShardMeta, ShardReader, ShardWriter};
