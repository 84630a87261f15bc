//! Whole files written for the user (solutions, pages, databases): checked
//! writable before the work that fills them, then written to `<path>.tmp`
//! and renamed over `<path>`, the temporary file removed if either step fails.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// `<path>.tmp`, beside `path`.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// An error for a path that names a directory, where a file is to go.
fn is_a_directory() -> io::Error {
    io::Error::other("it is a directory")
}

/// Whether `path` can be written by [`write_whole`], found out before the work
/// that fills it (a solve of hours): not a directory, and a file can be
/// created beside it (created and removed at once; `path` itself is untouched).
pub fn check_writable(path: &Path) -> io::Result<()> {
    if path.is_dir() {
        return Err(is_a_directory());
    }
    let tmp = tmp_path(path);
    fs::File::create(&tmp)?;
    fs::remove_file(&tmp)
}

/// Writes `contents` to `path` through `<path>.tmp` and a rename, so that a
/// reader never sees half a file and a failed write leaves the old one, and
/// no temporary file behind.
pub fn write_whole(path: &Path, contents: &[u8]) -> io::Result<()> {
    if path.is_dir() {
        return Err(is_a_directory());
    }
    let tmp = tmp_path(path);
    let written = fs::write(&tmp, contents).and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_no_temporary_file_and_a_directory_is_refused_up_front() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out.sok");
        check_writable(&file).unwrap();
        assert!(!file.exists() && !tmp_path(&file).exists());
        write_whole(&file, b"one").unwrap();
        write_whole(&file, b"two").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"two");
        assert!(!tmp_path(&file).exists());
        // a directory where the file should go: refused, nothing made beside it
        let sub = dir.path().join("sub");
        fs::create_dir(&sub).unwrap();
        assert!(check_writable(&sub).unwrap_err().to_string().contains("directory"));
        assert!(write_whole(&sub, b"x").is_err());
        assert!(!tmp_path(&sub).exists());
        // a missing parent directory
        let missing = dir.path().join("no/such/out.sok");
        assert_eq!(check_writable(&missing).unwrap_err().kind(), io::ErrorKind::NotFound);
    }
}
