//! Small durable files of the cluster (a worker's checkpoint manifest, the
//! coordinator's job records): a JSON body in the shared envelope
//! ([`crate::storage::envelope`]: magic, version, length, xxh3 checksum),
//! written to `<path>.tmp`, fsynced and renamed over `<path>`, so a crash
//! leaves the old file or the new one, and a torn or corrupted file is
//! reported, never half-read.

use super::ClusterError;
use crate::storage::envelope::{self, Kind};
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

/// A node's hold on its data directory for as long as the process lives: an
/// exclusive lock on `<dir>/lock`, which the system drops when the process
/// ends, however it ends (no stale lock after a crash or a kill).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

/// Creates `dir` if needed and takes it for this `node` ("coordinator",
/// "worker"). A second node started on the same directory is refused: two
/// coordinators would write one job log, two workers one checkpoint.
pub fn lock_data_dir(dir: &Path, node: &str) -> Result<DataDirLock, ClusterError> {
    if dir.exists() && !dir.is_dir() {
        return Err(ClusterError::InvalidArgument(format!(
            "the data directory {} is a file, not a directory",
            dir.display()
        )));
    }
    fs::create_dir_all(dir)
        .map_err(|e| ClusterError::io(format!("creating the data directory {}", dir.display()), e))?;
    let path = dir.join("lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| ClusterError::io(format!("opening {}", path.display()), e))?;
    let held = crate::sys::try_lock_exclusive(&file)
        .map_err(|e| ClusterError::io(format!("locking {}", path.display()), e))?;
    if !held {
        return Err(ClusterError::FailedPrecondition(format!(
            "the data directory {} is in use by another running process (it holds {}); \
             each {node} needs a data directory of its own",
            dir.display(),
            path.display()
        )));
    }
    Ok(DataDirLock { _file: file })
}

fn kind(magic: &[u8; 8], version: u32) -> Kind {
    Kind { magic: *magic, version, what: "cluster file" }
}

/// Writes `value` durably at `path`.
pub fn write<T: serde::Serialize>(path: &Path, magic: &[u8; 8], version: u32, value: &T) -> Result<(), ClusterError> {
    let body =
        serde_json::to_vec(value).map_err(|e| ClusterError::Internal(format!("encoding {}: {e}", path.display())))?;
    let buf = envelope::seal(&kind(magic, version), &body);
    let tmp = crate::storage::files::tmp_path(path);
    let io = |what: &str, e| ClusterError::io(format!("{what} {}", tmp.display()), e);
    let mut f = File::create(&tmp).map_err(|e| io("creating", e))?;
    f.write_all(&buf).map_err(|e| io("writing", e))?;
    f.sync_all().map_err(|e| io("syncing", e))?;
    drop(f);
    fs::rename(&tmp, path)
        .map_err(|e| ClusterError::io(format!("renaming {} to {}", tmp.display(), path.display()), e))?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Reads a file written by [`write`]; `Ok(None)` when it does not exist. A bad
/// magic, version, length or checksum is [`ClusterError::DataLoss`].
pub fn read<T: serde::de::DeserializeOwned>(
    path: &Path,
    magic: &[u8; 8],
    version: u32,
) -> Result<Option<T>, ClusterError> {
    let buf = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ClusterError::io(format!("reading {}", path.display()), e)),
    };
    let bad = |why: String| ClusterError::DataLoss(format!("{}: {why}", path.display()));
    let body = envelope::open(&kind(magic, version), &buf).map_err(|e| bad(e.to_string()))?;
    serde_json::from_slice(body).map(Some).map_err(|e| bad(format!("undecodable: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        assert!(read::<Vec<u32>>(&p, b"TESTTEST", 1).unwrap().is_none());
        write(&p, b"TESTTEST", 1, &vec![1u32, 2, 3]).unwrap();
        assert_eq!(read::<Vec<u32>>(&p, b"TESTTEST", 1).unwrap(), Some(vec![1, 2, 3]));
        assert!(read::<Vec<u32>>(&p, b"TESTTEST", 2).is_err());
        assert!(read::<Vec<u32>>(&p, b"OTHERMAG", 1).is_err());
        let mut b = std::fs::read(&p).unwrap();
        let n = b.len();
        b[n - 2] ^= 1;
        std::fs::write(&p, &b).unwrap();
        assert!(matches!(read::<Vec<u32>>(&p, b"TESTTEST", 1), Err(ClusterError::DataLoss(_))));
    }

    /// A job's seconds came back from the job log one unit in the last place
    /// off (serde_json's default float parsing is not exact), so a restarted
    /// coordinator showed a job's rate differing in its last digit. Every
    /// float must come back bit for bit.
    #[test]
    fn floats_in_a_durable_file_come_back_bit_for_bit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        // seconds as a solve measures them: many digits, all sizes
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let values: Vec<f64> = (0..20_000)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi(i % 12 - 3)
            })
            .collect();
        write(&p, b"TESTTEST", 1, &values).unwrap();
        let back = read::<Vec<f64>>(&p, b"TESTTEST", 1).unwrap().unwrap();
        let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&values));
    }
}
