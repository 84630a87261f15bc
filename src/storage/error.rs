//! Errors of the storage room. Every variant names the file it is about, because
//! a solver run touches thousands of shards and "checksum mismatch" alone would
//! leave the operator guessing which one to delete.

use std::io;
use std::path::{Path, PathBuf};

/// Linux and macOS both number "no space left on device" 28. Matching the raw
/// code rather than `ErrorKind::StorageFull` keeps the crate on its declared MSRV.
const ENOSPC: i32 = 28;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An operating-system call failed. `op` is a gerund ("writing", "opening"...).
    #[error("{}", io_message(op, path, source))]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: io::Error,
    },

    #[error("{path}: not a sokoshard shard (bad magic bytes)", path = .path.display())]
    BadMagic { path: PathBuf },

    #[error("{path}: shard format version {found} is not supported (this build reads version {expected})", path = .path.display())]
    UnsupportedVersion { path: PathBuf, found: u32, expected: u32 },

    #[error("{path}: shard holds {found}-limb keys but was opened as {expected}-limb keys", path = .path.display())]
    WrongKeyWidth { path: PathBuf, found: u32, expected: u32 },

    /// The key type has more limbs than the codec's fixed scratch space supports.
    #[error("{path}: key type with {limbs} limbs is wider than shards support", path = .path.display())]
    UnsupportedKeyType { path: PathBuf, limbs: usize },

    #[error("{path}: truncated: expected {expected} bytes, found {found}", path = .path.display())]
    Truncated { path: PathBuf, expected: u64, found: u64 },

    /// The whole-file checksum (header, body and index) does not match the footer.
    #[error("{path}: checksum mismatch: footer says {stored:#018x}, contents hash to {computed:#018x}", path = .path.display())]
    ChecksumMismatch { path: PathBuf, stored: u64, computed: u64 },

    /// The header, block index or footer is inconsistent or fails its checksum.
    #[error("{path}: corrupt header/index: {reason}", path = .path.display())]
    CorruptIndex { path: PathBuf, reason: String },

    /// One block failed its checksum or does not decode to what the index promises.
    #[error("{path}: corrupt block {block}: {reason}", path = .path.display())]
    CorruptBlock { path: PathBuf, block: u64, reason: String },

    /// A writer was handed a key not strictly greater than the previous one.
    #[error("{path}: key #{index} is not strictly greater than the previous key", path = .path.display())]
    NotSorted { path: PathBuf, index: u64 },

    /// A batch lookup was handed query keys that are not in ascending order.
    #[error("{path}: query key #{index} is smaller than the one before it", path = .path.display())]
    QueryNotSorted { path: PathBuf, index: usize },

    /// A disk store's manifest is missing fields, damaged or from another store.
    #[error("{path}: bad store manifest: {reason}", path = .path.display())]
    BadManifest { path: PathBuf, reason: String },

    /// A shard is intact but is not the one the store expected at this path
    /// (another side, partition or layer, or a different key count).
    #[error("{path}: shard does not belong here: {reason}", path = .path.display())]
    Misplaced { path: PathBuf, reason: String },

    /// A spill directory cannot be used (missing, not a directory, not writable).
    #[error("spill directory {path}: {reason}", path = .path.display())]
    SpillDir { path: PathBuf, reason: String },

    /// A whole-file record in the shared envelope is damaged, foreign or
    /// from another version.
    #[error("{path}: {source}", path = .path.display())]
    Envelope {
        path: PathBuf,
        #[source]
        source: crate::storage::envelope::EnvelopeError,
    },

    /// An earlier error left the writer in an unknown state; it refuses to
    /// produce a shard that might silently miss keys.
    #[error("{path}: writer is unusable after an earlier error", path = .path.display())]
    WriterFailed { path: PathBuf },
}

fn io_message(op: &str, path: &Path, source: &io::Error) -> String {
    if is_disk_full(source) {
        format!("disk full while {op} {}: {source}", path.display())
    } else {
        format!("error {op} {}: {source}", path.display())
    }
}

fn is_disk_full(e: &io::Error) -> bool {
    e.raw_os_error() == Some(ENOSPC)
}

impl StorageError {
    pub(crate) fn io(path: &Path, op: &'static str, source: io::Error) -> Self {
        StorageError::Io { path: path.to_path_buf(), op, source }
    }

    /// True when the error is the device running out of space, which a caller may
    /// want to handle (pause, free old layers) rather than abort on.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StorageError::Io { source, .. } if is_disk_full(source))
    }

    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            StorageError::Io { path, .. }
            | StorageError::BadMagic { path }
            | StorageError::UnsupportedVersion { path, .. }
            | StorageError::WrongKeyWidth { path, .. }
            | StorageError::UnsupportedKeyType { path, .. }
            | StorageError::Truncated { path, .. }
            | StorageError::ChecksumMismatch { path, .. }
            | StorageError::CorruptIndex { path, .. }
            | StorageError::CorruptBlock { path, .. }
            | StorageError::NotSorted { path, .. }
            | StorageError::QueryNotSorted { path, .. }
            | StorageError::BadManifest { path, .. }
            | StorageError::Misplaced { path, .. }
            | StorageError::SpillDir { path, .. }
            | StorageError::Envelope { path, .. }
            | StorageError::WriterFailed { path } => path,
        }
    }
}

impl StorageError {
    /// The storage error behind a seam error, for callers (and tests) that
    /// called a store or exchange through the engine's traits.
    pub fn from_seam(e: crate::engine::SeamError) -> Result<StorageError, crate::engine::SeamError> {
        e.downcast::<StorageError>()
    }
}

/// Storage errors cross the engine's seams boxed; the engine names no storage type.
impl From<StorageError> for crate::engine::SeamError {
    fn from(e: StorageError) -> Self {
        crate::engine::SeamError::new(e)
    }
}

impl From<StorageError> for crate::engine::EngineError {
    fn from(e: StorageError) -> Self {
        crate::engine::EngineError::seam(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_full_is_named_in_the_message() {
        let e = StorageError::io(Path::new("/data/f0/L12.shard.tmp"), "writing", io::Error::from_raw_os_error(ENOSPC));
        assert!(e.is_disk_full());
        let msg = e.to_string();
        assert!(msg.starts_with("disk full while writing /data/f0/L12.shard.tmp"), "{msg}");

        let e = StorageError::io(Path::new("/x"), "opening", io::Error::new(io::ErrorKind::NotFound, "gone"));
        assert!(!e.is_disk_full());
        assert_eq!(e.to_string(), "error opening /x: gone");
    }
}
