//! Solving under a memory budget: spilled runs give the in-memory answers, spill
//! files go away, and damaged, truncated or deleted shard files stop the solve
//! with an error naming the file.

use crate::common::{self, repo, truth};
use sokoshard::engine::search::{LayerEvent, NoProgress, Progress};
use sokoshard::engine::EngineError;
use sokoshard::model::board::Board;
use sokoshard::model::level::Level;
use sokoshard::model::solution::verify;
use sokoshard::solve::{solve_local, Objective, SolveOptions, SolveReport, Status};
use sokoshard::storage::disk::SpillPolicy;
use sokoshard::storage::StorageError;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

fn microban(index: usize) -> (Level, Arc<Board>) {
    let (level, board) = common::microban(index);
    (level, Arc::new(board))
}

fn budgeted(budget: u64, dir: &Path, policy: SpillPolicy) -> SolveOptions {
    SolveOptions {
        memory_budget: Some(budget),
        spill_dir: Some(dir.to_path_buf()),
        spill_policy: policy,
        ..SolveOptions::default()
    }
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect()
}

/// Shard files (not runs) anywhere below `dir`.
fn shards(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "shard") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Levels from 20 to 45 thousand states plus small ones: under a 64 KiB budget
/// every one spills, and the answers must be the in-memory ones.
#[test]
fn spilled_runs_match_the_known_push_counts() {
    let truth = truth();
    let base = tempfile::tempdir().unwrap();
    let cancel = AtomicBool::new(false);
    let policies = [SpillPolicy::KeepOldest, SpillPolicy::KeepNewest, SpillPolicy::AllToDisk];
    for (i, index) in [1usize, 6, 16, 60, 114, 126, 138, 150].into_iter().enumerate() {
        let (level, board) = microban(index);
        let pushes = truth.iter().find(|t| t.0 == index).unwrap().1;
        let policy = policies[i % policies.len()];
        let opts = budgeted(64 * 1024, base.path(), policy);
        let r = solve_local(board.clone(), &opts, &cancel, &NoProgress).unwrap();
        assert_eq!(r.status, Status::Solved, "level {index}");
        assert_eq!(r.pushes, Some(pushes), "level {index} ({policy:?})");
        let v = verify(&level, r.solution.as_deref().unwrap());
        assert!(v.valid && v.pushes == pushes, "level {index}: {v:?}");
        let st = r.storage.as_ref().unwrap();
        assert_eq!(st.memory_budget_bytes, 64 * 1024);
        if r.states > 20_000 {
            assert!(r.disk_bytes > 0 && st.disk_states > 0, "level {index} did not spill: {st:?}");
            assert!(st.spilled_candidates > 0, "level {index}: no successor runs: {st:?}");
        }
        // the in-memory fast path agrees state for state (with the probe the
        // budget allows, a quarter of it: the same search)
        let probe_memory = Some(sokoshard::engine::driver::probe_share(64 * 1024));
        let same = SolveOptions { probe_memory, ..SolveOptions::default() };
        let mem = solve_local(board, &same, &cancel, &NoProgress).unwrap();
        assert_eq!((mem.pushes, mem.states), (r.pushes, r.states), "level {index}");
        // and so does the moves pass, reading its search's spilled layers
        assert_eq!(r.objective, Some(Objective::PushesMoves), "level {index}");
        assert_eq!((mem.moves, mem.moves_states), (r.moves, r.moves_states), "level {index}");
        assert!(mem.storage.is_none());
    }
    assert!(entries(base.path()).is_empty(), "spill directories left behind: {:?}", entries(base.path()));
}

/// Runs `action` on the spill directory's shard files after `after` layers,
/// once, and records what it touched.
struct Saboteur<F: Fn(&[PathBuf]) + Sync> {
    dir: PathBuf,
    after: usize,
    action: F,
    done: AtomicBool,
    touched: Mutex<Vec<PathBuf>>,
}

impl<F: Fn(&[PathBuf]) + Sync> Progress for Saboteur<F> {
    fn layer_done(&self, e: &LayerEvent) {
        let layers = e.layer; // index of the new layer on its side
        if layers + 1 >= self.after && !self.done.swap(true, Ordering::SeqCst) {
            let files = shards(&self.dir);
            assert!(!files.is_empty(), "nothing spilled yet");
            (self.action)(&files);
            *self.touched.lock().unwrap() = files;
        }
    }
}

fn sabotaged(
    action: impl Fn(&[PathBuf]) + Sync,
) -> (Result<SolveReport, EngineError>, Vec<PathBuf>, tempfile::TempDir) {
    let base = tempfile::tempdir().unwrap();
    let (_, board) = microban(114);
    let opts = budgeted(32 * 1024, base.path(), SpillPolicy::AllToDisk);
    let s = Saboteur {
        dir: base.path().to_path_buf(),
        after: 6,
        action,
        done: AtomicBool::new(false),
        touched: Mutex::new(Vec::new()),
    };
    let r = solve_local(board, &opts, &AtomicBool::new(false), &s);
    assert!(s.done.load(Ordering::SeqCst));
    let touched = s.touched.into_inner().unwrap();
    (r, touched, base)
}

fn storage_error(r: Result<SolveReport, EngineError>) -> StorageError {
    match r {
        Err(EngineError::Seam(e)) => match StorageError::from_seam(e) {
            Ok(e) => e,
            Err(other) => panic!("expected a storage error, got {other}"),
        },
        Err(other) => panic!("expected a storage error, got {other}"),
        Ok(rep) => panic!("expected a storage error, got {:?} with {:?} pushes", rep.status, rep.pushes),
    }
}

#[test]
fn corrupt_shard_during_a_solve_is_an_error_naming_it() {
    let (r, touched, base) = sabotaged(|files| {
        for f in files {
            let mut b = fs::read(f).unwrap();
            b[64] ^= 0x5a; // the first byte of the first block
            fs::write(f, b).unwrap();
        }
    });
    let e = storage_error(r);
    assert!(matches!(e, StorageError::CorruptBlock { .. } | StorageError::ChecksumMismatch { .. }), "{e}");
    assert!(touched.iter().any(|t| t == e.path()), "{} is not one of the damaged files", e.path().display());
    assert!(e.to_string().starts_with(&*e.path().to_string_lossy()), "{e}");
    assert!(entries(base.path()).is_empty(), "spill files left after the error");
}

#[test]
fn truncated_shard_during_a_solve_is_an_error_naming_it() {
    let (r, touched, base) = sabotaged(|files| {
        for f in files {
            let len = fs::metadata(f).unwrap().len();
            fs::OpenOptions::new().write(true).open(f).unwrap().set_len(len - 41).unwrap();
        }
    });
    let e = storage_error(r);
    assert!(matches!(e, StorageError::Truncated { .. } | StorageError::CorruptIndex { .. }), "{e}");
    assert!(touched.iter().any(|t| t == e.path()), "{}", e.path().display());
    assert!(entries(base.path()).is_empty());
}

#[test]
fn deleted_shard_during_a_solve_is_an_error_naming_it() {
    let (r, touched, base) = sabotaged(|files| {
        for f in files {
            fs::remove_file(f).unwrap();
        }
    });
    let e = storage_error(r);
    assert!(matches!(e, StorageError::Io { op: "opening", .. }), "{e}");
    assert!(touched.iter().any(|t| t == e.path()), "{}", e.path().display());
    assert!(e.to_string().contains("No such file"), "{e}");
    assert!(entries(base.path()).is_empty());
}

/// A timeout (the cancel flag) part way through also removes the spill files.
#[test]
fn cancelled_spilled_solve_cleans_up() {
    struct CancelAfter<'a>(&'a AtomicBool);
    impl Progress for CancelAfter<'_> {
        fn layer_done(&self, e: &LayerEvent) {
            if e.layer >= 5 {
                self.0.store(true, Ordering::SeqCst);
            }
        }
    }
    let base = tempfile::tempdir().unwrap();
    let (_, board) = microban(114);
    let cancel = AtomicBool::new(false);
    let r =
        solve_local(board, &budgeted(32 * 1024, base.path(), SpillPolicy::KeepOldest), &cancel, &CancelAfter(&cancel))
            .unwrap();
    assert_eq!(r.status, Status::Timeout);
    assert!(entries(base.path()).is_empty());
}

// ---- the CLI ----

fn sokoshard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sokoshard")).args(args).output().expect("run sokoshard")
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap()
}

#[test]
fn cli_mem_spills_and_removes_its_files() {
    let file = repo("levels/Microban_155.xsb");
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().to_str().unwrap();
    // level 138 under a 100 KiB budget, spilling below `dir`, plus `extra`
    let spilling = |extra: &[&str]| {
        let mut args = vec!["solve", file.to_str().unwrap(), "--level", "138", "--mem", "100KiB", "--spill-dir", dir];
        args.extend_from_slice(extra);
        sokoshard(&args)
    };
    let o = spilling(&["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&o);
    let pushes = truth().iter().find(|t| t.0 == 138).unwrap().1;
    assert_eq!(v["pushes"], pushes);
    assert_eq!(v["memory_budget_bytes"], 100 * 1024);
    // the stored layers stay within the budget; the rest is on disk, as LZ4
    // shards of delta-coded keys, which take less than a raw 8-byte key each
    assert!(v["peak_memory_bytes"].as_u64().unwrap() <= 100 * 1024, "{v}");
    let last = v["iterations"].as_array().unwrap().last().unwrap()["states"].as_u64().unwrap();
    let (disk_states, disk_bytes) = (v["disk_states"].as_u64().unwrap(), v["disk_bytes"].as_u64().unwrap());
    assert!(disk_states > 0 && disk_states <= last, "{v}");
    assert!(disk_bytes >= disk_states && disk_bytes < 8 * disk_states, "{v}");
    // the process: more than its binary, far less than an unbudgeted search's
    let rss = v["peak_rss_bytes"].as_u64().unwrap();
    assert!(rss > 1 << 20 && rss < 256 << 20, "{v}");
    assert!(v.get("spill_dir").is_none());
    assert!(entries(base.path()).is_empty());

    // --keep-spill leaves the shards and says where
    let o = spilling(&["--keep-spill", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v = json(&o);
    let kept = PathBuf::from(v["spill_dir"].as_str().unwrap());
    assert!(kept.starts_with(base.path()));
    assert!(!shards(&kept).is_empty());
    // every bound iteration's files are in the one directory named (each
    // iteration once kept a directory of its own beside it, unnamed); a
    // search makes its directory with its first file, so each one there
    // holds files, and the iterations that spilled nothing made none
    let iterations = v["iterations"].as_array().unwrap().len();
    assert!(iterations > 1, "{v}");
    assert_eq!(entries(base.path()), std::slice::from_ref(&kept), "{v}");
    let searches: Vec<PathBuf> = entries(&kept).into_iter().filter(|p| p.is_dir()).collect();
    // the iterations and the moves pass
    assert!(!searches.is_empty() && searches.len() <= iterations + 1, "{searches:?}: {v}");
    for s in &searches {
        assert!(!entries(s).is_empty(), "{} is empty", s.display());
    }
    fs::remove_dir_all(&kept).unwrap();

    // the text report shows the disk use
    let o = spilling(&[]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("states on disk") && out.contains("budget 100.0 KiB"), "{out}");
}

/// The default solve has a budget (half the memory the process may use) and
/// spills to the system temporary directory only what does not fit: a
/// search that fits writes nothing there, and where it cannot take files
/// the solve warns and keeps its states in RAM, as `--no-spill` does.
#[test]
fn a_solve_without_flags_has_a_budget_and_a_search_that_fits_writes_nothing() {
    let file = repo("levels/Microban_155.xsb");
    let file = file.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let run = |tmpdir: &Path, extra: &[&str]| {
        let mut args = vec!["solve", file, "--level", "93", "--json"];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_sokoshard")).args(&args).env("TMPDIR", tmpdir).output().unwrap()
    };
    let o = run(tmp.path(), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&o);
    let half = sokoshard::storage::budget::default_budget();
    assert_eq!(v["memory_budget_bytes"], half, "{v}");
    assert_eq!((v["disk_bytes"].as_u64(), v["peak_disk_bytes"].as_u64()), (Some(0), Some(0)), "{v}");
    assert!(entries(tmp.path()).is_empty(), "{:?}", entries(tmp.path()));
    // the searches of a level that fits make no directories, even kept
    // (--keep-spill alone keeps the level's directory in the temporary one)
    let o = run(tmp.path(), &["--keep-spill"]);
    let v = json(&o);
    let kept = PathBuf::from(v["spill_dir"].as_str().unwrap());
    assert!(kept.starts_with(tmp.path()), "{v}");
    assert!(entries(&kept).is_empty(), "{:?}", entries(&kept));
    fs::remove_dir_all(&kept).unwrap();
    // no temporary directory: a warning, and the same answer from RAM
    let o = run(&tmp.path().join("missing"), &[]);
    assert_eq!(o.status.code(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("warning: spill directory ") && err.contains("states stay in RAM"), "{err}");
    let in_ram = json(&o);
    assert!(in_ram.get("memory_budget_bytes").is_none(), "{in_ram}");
    assert_eq!((&in_ram["pushes"], &in_ram["moves"], &in_ram["states"]), (&v["pushes"], &v["moves"], &v["states"]));
    let o = run(tmp.path(), &["--no-spill"]);
    assert_eq!((o.status.code(), json(&o).get("memory_budget_bytes")), (Some(0), None));
    // --no-spill with a budget or a place to spill is a usage error
    assert_eq!(run(tmp.path(), &["--no-spill", "--mem", "1G"]).status.code(), Some(2));
}

#[test]
fn cli_rejects_bad_sizes_and_spill_dirs() {
    let file = repo("levels/Microban_155.xsb");
    let file = file.to_str().unwrap();
    for bad in ["lots", "12XB", "0", "-1G"] {
        let o = sokoshard(&["solve", file, "--level", "1", &format!("--mem={bad}")]);
        assert_eq!(o.status.code(), Some(2), "--mem {bad}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("--mem") && err.contains("512MiB"), "{err}");
    }
    let base = tempfile::tempdir().unwrap();
    let missing = base.path().join("missing");
    let o = sokoshard(&["solve", file, "--level", "1", "--spill-dir", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&*missing.to_string_lossy()) && err.contains("does not exist"), "{err}");

    // root may write anywhere, but nobody can create below a regular file
    let plain = base.path().join("plain");
    fs::write(&plain, b"").unwrap();
    let below = plain.join("spill");
    let o = sokoshard(&["solve", file, "--level", "1", "--mem", "1MiB", "--spill-dir", below.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("error: spill directory ") && err.contains(&*below.to_string_lossy()), "{err}");

    let o = sokoshard(&["solve", file, "--level", "1", "--keep-spill", "--no-spill"]);
    assert_eq!(o.status.code(), Some(2), "--keep-spill with --no-spill asks for nothing to keep");
}
