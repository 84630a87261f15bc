//! The moves pass's tape on disk: records kept in memory up to a share of
//! bytes and, past it, each written as its own LZ4-compressed file in the
//! shared envelope, under a directory made on the first such record and
//! removed (with its files) when the tape is dropped.
//!
//! The records are a depth's push-optimal states, pushes or labels, written
//! once and read back later (one depth at a time), so whole-record files
//! suffice: no index, no partial reads. They are scratch: nothing is synced,
//! and a tape does not outlive its pass.

use crate::engine::moves::{NoRecord, Tape};
use crate::engine::SeamError;
use crate::storage::envelope::{self, Kind};
use crate::storage::spill::SpillDir;
use crate::storage::StorageError;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::PathBuf;

/// Tape files.
pub const TAPE: Kind = Kind { magic: *b"SKTAPE\0\0", version: 1, what: "moves pass tape file" };

/// A [`Tape`] in memory up to `share` bytes, on disk beyond.
pub struct DiskTape {
    base: PathBuf,
    dir: Option<SpillDir>,
    share: u64,
    held: u64,
    memory: HashMap<u64, Vec<u8>>,
    /// Records on disk (each in [`DiskTape::path`]).
    files: HashSet<u64>,
    written: u64,
}

impl DiskTape {
    /// A tape that keeps `share` bytes of records in memory and writes the
    /// rest under a fresh directory in `base` (an existing directory; it is
    /// checked when the first record goes to disk).
    pub fn new(base: PathBuf, share: u64) -> Self {
        DiskTape { base, dir: None, share, held: 0, memory: HashMap::new(), files: HashSet::new(), written: 0 }
    }

    /// Records on disk.
    pub fn records_on_disk(&self) -> usize {
        self.files.len()
    }

    /// The directory the tape writes into, once it has written.
    pub fn dir(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.path().to_path_buf())
    }

    /// The file of record `id`, once the tape's directory is made.
    fn path(&self, id: u64) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.path().join(format!("{id}.tape")))
    }

    fn write(&mut self, id: u64, bytes: &[u8]) -> Result<(), StorageError> {
        if self.dir.is_none() {
            self.dir = Some(SpillDir::create(&self.base, false)?);
        }
        let path = self.path(id).expect("made above");
        let body = lz4_flex::block::compress_prepend_size(bytes);
        let mut f = fs::File::create(&path).map_err(|e| StorageError::io(&path, "creating", e))?;
        f.write_all(&envelope::header(&TAPE, &body))
            .and_then(|()| f.write_all(&body))
            .map_err(|e| StorageError::io(&path, "writing", e))?;
        self.written += (envelope::HEADER + body.len()) as u64;
        self.files.insert(id);
        Ok(())
    }
}

/// Reads a tape file back: its record's bytes.
pub fn read_tape_file(path: &std::path::Path) -> Result<Vec<u8>, StorageError> {
    let bytes = fs::read(path).map_err(|e| StorageError::io(path, "reading", e))?;
    let body =
        envelope::open(&TAPE, &bytes).map_err(|source| StorageError::Envelope { path: path.to_path_buf(), source })?;
    lz4_flex::block::decompress_size_prepended(body).map_err(|e| StorageError::CorruptBlock {
        path: path.to_path_buf(),
        block: 0,
        reason: format!("does not decompress: {e}"),
    })
}

impl Tape for DiskTape {
    fn put(&mut self, id: u64, bytes: Vec<u8>) -> Result<(), SeamError> {
        let len = bytes.len() as u64;
        if self.held + len <= self.share {
            self.held += len;
            self.memory.insert(id, bytes);
            return Ok(());
        }
        Ok(self.write(id, &bytes)?)
    }

    fn get(&mut self, id: u64) -> Result<Vec<u8>, SeamError> {
        if let Some(b) = self.memory.get(&id) {
            return Ok(b.clone());
        }
        match self.path(id).filter(|_| self.files.contains(&id)) {
            Some(path) => Ok(read_tape_file(&path)?),
            None => Err(SeamError::new(NoRecord(id))),
        }
    }

    fn disk_bytes(&self) -> u64 {
        self.written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(seed)).collect()
    }

    #[test]
    fn records_come_back_from_memory_and_from_disk() {
        let base = tempfile::tempdir().unwrap();
        let mut tape = DiskTape::new(base.path().to_path_buf(), 1000);
        for id in 0..10 {
            tape.put(id, record(300, id as u8 + 1)).unwrap();
        }
        // three fit the share, the rest went to disk
        assert_eq!(tape.records_on_disk(), 7);
        assert!(tape.disk_bytes() > 0);
        for id in (0..10).rev() {
            assert_eq!(tape.get(id).unwrap(), record(300, id as u8 + 1));
            assert_eq!(tape.get(id).unwrap(), record(300, id as u8 + 1), "a record stays");
        }
        assert!(tape.get(10).is_err());
        let dir = tape.dir().unwrap();
        assert!(dir.exists());
        drop(tape);
        assert!(!dir.exists(), "the tape's directory goes with it");
    }

    #[test]
    fn a_tape_within_its_share_makes_no_directory() {
        let base = tempfile::tempdir().unwrap();
        let mut tape = DiskTape::new(base.path().join("not made"), 1 << 20);
        tape.put(0, record(1000, 3)).unwrap();
        assert_eq!(tape.get(0).unwrap(), record(1000, 3));
        assert_eq!(tape.disk_bytes(), 0);
        assert!(tape.dir().is_none());
    }

    #[test]
    fn a_missing_base_is_named_when_the_first_record_spills() {
        let base = tempfile::tempdir().unwrap();
        let gone = base.path().join("gone");
        let mut tape = DiskTape::new(gone.clone(), 0);
        let e = StorageError::from_seam(tape.put(0, record(10, 1)).unwrap_err()).unwrap();
        assert!(e.to_string().contains("does not exist") && e.path() == gone, "{e}");
    }

    #[test]
    fn a_corrupted_tape_file_is_an_error_naming_it() {
        let base = tempfile::tempdir().unwrap();
        let mut tape = DiskTape::new(base.path().to_path_buf(), 0);
        tape.put(5, record(5000, 7)).unwrap();
        let path = tape.path(5).unwrap();
        let good = fs::read(&path).unwrap();
        let check = |tape: &mut DiskTape, bytes: &[u8], expect: &str| {
            fs::write(&path, bytes).unwrap();
            let e = StorageError::from_seam(tape.get(5).unwrap_err()).unwrap();
            assert!(e.to_string().contains(expect), "{e}");
            assert_eq!(e.path(), path);
        };
        // cut short, a flipped body byte, another file, a newer version
        check(&mut tape, &good[..10], "truncated");
        check(&mut tape, &good[..good.len() - 1], "header says");
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        check(&mut tape, &flipped, "checksum mismatch");
        let mut foreign = good.clone();
        foreign[0] = b'X';
        check(&mut tape, &foreign, "bad magic");
        let mut newer = good.clone();
        newer[8] = 9;
        check(&mut tape, &newer, "version 9");
        // an envelope that checks out around a body that does not decompress
        check(&mut tape, &envelope::seal(&TAPE, &[0xff; 16]), "does not decompress");
        fs::remove_file(&path).unwrap();
        let e = StorageError::from_seam(tape.get(5).unwrap_err()).unwrap();
        assert!(e.to_string().contains("reading"), "{e}");
        fs::write(&path, &good).unwrap();
        assert_eq!(tape.get(5).unwrap(), record(5000, 7));
    }
}
