//! Whole files written for the user (solutions, pages, databases): checked
//! writable before the work that fills them, then written to a temporary
//! file beside their target and renamed over it, the temporary file removed
//! if either step fails. A symbolic link is followed (its target is
//! replaced, the link kept); a device or a pipe (`/dev/null`, `/dev/stdout`)
//! is written in place, never replaced by a file.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// `<path>.tmp`, beside `path`: the program's own files in its own
/// directories (shards, job records), never a user's file.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// A temporary name beside `path` that no user file and no other writer has:
/// hidden, with the process id and a counter (`.out.sok.4711-0.tmp`).
fn unique_tmp(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}-{n}.tmp", std::process::id()))
}

/// An error for a path that names a directory, where a file is to go.
fn is_a_directory() -> io::Error {
    io::Error::other("it is a directory")
}

/// Where a write to `path` goes: the file its symbolic links lead to (as
/// the kernel resolves them; a dangling link: the file it names, created),
/// and how: in place for a device, a pipe or a socket (`Some(is a FIFO)`),
/// else through a temporary file and a rename (`None`).
fn target(path: &Path) -> io::Result<(PathBuf, Option<bool>)> {
    use std::os::unix::fs::FileTypeExt;
    match fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(is_a_directory()),
        Ok(m) if !m.is_file() => Ok((path.to_path_buf(), Some(m.file_type().is_fifo()))),
        Ok(_) => Ok((fs::canonicalize(path)?, None)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok((dangling(path)?, None)),
        Err(e) => Err(e),
    }
}

/// The file a path that does not exist will create: itself, or the end of
/// its chain of dangling symbolic links.
fn dangling(path: &Path) -> io::Result<PathBuf> {
    let mut at = path.to_path_buf();
    for _ in 0..40 {
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                let next = fs::read_link(&at)?;
                at = match at.parent() {
                    Some(dir) if next.is_relative() => dir.join(next),
                    _ => next,
                };
            }
            _ => return Ok(at),
        }
    }
    Err(io::Error::other("too many levels of symbolic links"))
}

/// Creates `tmp`, naming it in the error: the path the user gave may exist
/// and be fine while its directory takes no new file (`/proc`).
fn create(tmp: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot create a file beside it ({}): {e}", tmp.display())))
}

/// Whether `path` can be written by [`write_whole`], found out before the work
/// that fills it (a solve of hours): not a directory, and a file can be
/// created beside it (created and removed at once; `path` itself is untouched).
pub fn check_writable(path: &Path) -> io::Result<()> {
    let (at, in_place) = target(path)?;
    match in_place {
        // opening a pipe would wait for its reader, and closing it at once
        // would end the reader's input: it is written to at the end alone
        Some(true) => return Ok(()),
        Some(false) => return fs::OpenOptions::new().write(true).open(&at).map(drop),
        None => {}
    }
    let tmp = unique_tmp(&at);
    create(&tmp)?;
    fs::remove_file(&tmp)
}

/// Writes `contents` to `path` through a temporary file and a rename, so
/// that a reader never sees half a file and a failed write leaves the old
/// one, and no temporary file behind. A device or pipe is written in place.
pub fn write_whole(path: &Path, contents: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let (at, in_place) = target(path)?;
    if in_place.is_some() {
        return fs::OpenOptions::new().write(true).open(&at)?.write_all(contents);
    }
    let tmp = unique_tmp(&at);
    let written = create(&tmp)
        .and_then(|mut f| f.write_all(contents).and_then(|()| f.sync_all()))
        .and_then(|()| fs::rename(&tmp, &at));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Whether `a` and `b` name the same existing file (through links, `..` or
/// hard links): an output that would overwrite an input.
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files in `dir` other than `keep`.
    fn others(dir: &Path, keep: &[&str]) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !keep.contains(&n.as_str()))
            .collect()
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file_and_a_directory_is_refused_up_front() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out.sok");
        check_writable(&file).unwrap();
        assert!(!file.exists());
        assert!(others(dir.path(), &[]).is_empty());
        write_whole(&file, b"one").unwrap();
        write_whole(&file, b"two").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"two");
        assert_eq!(others(dir.path(), &["out.sok"]), Vec::<String>::new());
        // a directory where the file should go: refused, nothing made beside it
        let sub = dir.path().join("sub");
        fs::create_dir(&sub).unwrap();
        assert!(check_writable(&sub).unwrap_err().to_string().contains("directory"));
        assert!(write_whole(&sub, b"x").is_err());
        assert_eq!(others(dir.path(), &["out.sok", "sub"]), Vec::<String>::new());
        // a missing parent directory
        let missing = dir.path().join("no/such/out.sok");
        assert_eq!(check_writable(&missing).unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_users_file_named_like_the_old_temporary_one_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let plan = dir.path().join("plan");
        fs::write(dir.path().join("plan.tmp"), b"mine").unwrap();
        check_writable(&plan).unwrap();
        write_whole(&plan, b"written").unwrap();
        assert_eq!(fs::read(dir.path().join("plan.tmp")).unwrap(), b"mine");
        assert_eq!(fs::read(&plan).unwrap(), b"written");
    }

    #[test]
    fn a_symbolic_link_is_followed_and_kept_and_a_device_is_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.kdb");
        fs::write(&real, b"old").unwrap();
        let link = dir.path().join("link.kdb");
        std::os::unix::fs::symlink("real.kdb", &link).unwrap();
        check_writable(&link).unwrap();
        write_whole(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"new");
        // a dangling link: the file it names is created, the link kept
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink("made.sok", &dangling).unwrap();
        write_whole(&dangling, b"made").unwrap();
        assert!(fs::symlink_metadata(&dangling).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(dir.path().join("made.sok")).unwrap(), b"made");
        // /dev/null stays the device it is
        check_writable(Path::new("/dev/null")).unwrap();
        write_whole(Path::new("/dev/null"), b"gone").unwrap();
        assert!(!fs::metadata("/dev/null").unwrap().is_file());
    }

    #[test]
    fn the_same_file_is_found_through_links_and_other_spellings() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.xsb");
        fs::write(&a, b"x").unwrap();
        let link = dir.path().join("l.xsb");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        assert!(same_file(&a, &link));
        assert!(same_file(&a, &dir.path().join(".").join("a.xsb")));
        assert!(!same_file(&a, &dir.path().join("b.xsb")));
    }
}
