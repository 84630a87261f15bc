//! The `sokoshard` binary end to end: exit codes, messages and output formats.

use crate::common::{repo, truth};
use std::process::{Command, Output};

fn sokoshard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sokoshard")).args(args).output().expect("run sokoshard")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const MICROBAN: &str = "levels/Microban_155.xsb";

#[test]
fn verify_accepts_every_known_solution_with_its_counts() {
    let file = repo(MICROBAN);
    for (index, pushes, moves, solution) in truth() {
        let o = sokoshard(&[
            "verify",
            file.to_str().unwrap(),
            "--level",
            &index.to_string(),
            "--solution",
            &solution,
            "--json",
        ]);
        assert_eq!(o.status.code(), Some(0), "level {index}: {}", stdout(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        assert_eq!(v["valid"], true);
        assert_eq!(v["pushes"], pushes, "level {index}");
        assert_eq!(v["moves"], moves, "level {index}");
    }
}

#[test]
fn verify_json_of_a_broken_level_is_json_too() {
    // it printed nothing on stdout, where `solve --json` prints an error object
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.xsb");
    std::fs::write(&bad, "#####\n#@$x.#\n#####\n").unwrap();
    let o = sokoshard(&["verify", bad.to_str().unwrap(), "--solution", "R", "--json"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["valid"], false);
    assert!(v["error"].as_str().unwrap().contains("bad.xsb:2: level 1: unknown character 'x'"), "{v}");
    let o = sokoshard(&["verify", bad.to_str().unwrap(), "--solution", "R"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).is_empty() && stderr(&o).contains("unknown character 'x'"), "{}", stderr(&o));
}

#[test]
fn verify_rejects_altered_solutions_naming_the_step() {
    let file = repo(MICROBAN);
    let file = file.to_str().unwrap();
    let (_, _, _, solution) = &truth()[0]; // level 1: dlUrrrdLullddrUluRuulDrddrruLdlUU
                                           // cut short: final position not solved
    let short = &solution[..solution.len() - 1];
    let o = sokoshard(&["verify", file, "--level", "1", "--solution", short, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["valid"], false);
    assert!(v["reason"].as_str().unwrap().contains("not solved"));
    // first step 'd' changed to 'l': pushes the box on the left into the wall
    let bad = format!("l{}", &solution[1..]);
    let o = sokoshard(&["verify", file, "--level", "1", "--solution", &bad, "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["step"], 1);
    assert!(v["reason"].as_str().unwrap().contains("wall"));
    // a stray character
    let bad = format!("{}x{}", &solution[..5], &solution[5..]);
    let o = sokoshard(&["verify", file, "--level", "1", "--solution", &bad, "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["step"], 6);
    // text output names the step too
    let o = sokoshard(&["verify", file, "--level", "1", "--solution", &bad]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("invalid at step 6"));
}

#[test]
fn levels_lists_all_microban_levels_with_box_counts() {
    let file = repo(MICROBAN);
    let o = sokoshard(&["levels", file.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 155);
    // independent count: '$' and '*' characters of each level's rows in the file
    let text = std::fs::read_to_string(&file).unwrap();
    let mut counts = Vec::new();
    let mut cur: Option<usize> = None;
    for line in text.lines() {
        let is_row = line.trim_start().starts_with('#');
        match (is_row, cur) {
            (true, None) => cur = Some(line.chars().filter(|&c| c == '$' || c == '*').count()),
            (true, Some(n)) => cur = Some(n + line.chars().filter(|&c| c == '$' || c == '*').count()),
            (false, Some(n)) => {
                counts.push(n);
                cur = None;
            }
            _ => {}
        }
    }
    if let Some(n) = cur {
        counts.push(n);
    }
    assert_eq!(counts.len(), 155);
    for (row, n) in rows.iter().zip(counts) {
        let listed = row["boxes"].as_u64().unwrap() + row["fixed_boxes"].as_u64().unwrap();
        assert_eq!(listed as usize, n, "level {}", row["index"]);
    }
    // 'The Dungeon' (#155) has boxes on goals that the player can never reach:
    // fixed. Counted by hand in the level's text: ten '*' squares, each walled in
    // (one at the top, three down the left side, one pair of pairs in the middle,
    // two at the bottom right), and one box that moves
    assert_eq!((rows[154]["fixed_boxes"].as_u64(), rows[154]["boxes"].as_u64()), (Some(10), Some(1)));
    let o = sokoshard(&["levels", file.to_str().unwrap()]);
    assert_eq!(stdout(&o).lines().count(), 156);
}

#[test]
fn broken_levels_exit_2_naming_file_and_line() {
    let cases = [
        ("no_player.xsb", 2, "no player"),
        ("several_players.xsb", 4, "players"),
        ("box_goal_mismatch.xsb", 2, "2 boxes but 1 goal;"),
        ("no_boxes.xsb", 2, "no boxes"),
        ("open_level.xsb", 3, "open"),
        ("unknown_character.xsb", 3, "unknown character 'x'"),
        ("too_large.xsb", 2, "too large"),
        ("too_many_floor_squares.xsb", 2, "floor squares"),
    ];
    for (file, line, what) in cases {
        let path = repo(&format!("tests/broken/{file}"));
        for cmd in [&["solve", path.to_str().unwrap()][..], &["levels", path.to_str().unwrap()][..]] {
            let o = sokoshard(cmd);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{file} {cmd:?}: {err}");
            assert!(err.contains(&format!("{file}:{line}:")), "{file}: {err}");
            assert!(err.contains(what), "{file}: {err}");
            assert!(!err.contains("panicked"), "{file}: {err}");
        }
    }
}

#[test]
fn solve_json_has_the_promised_fields_and_solutions_verify() {
    let file = repo(MICROBAN);
    let file = file.to_str().unwrap();
    let o = sokoshard(&["solve", file, "--levels", "1-5", "--json", "--threads", "2"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let truth = truth();
    for line in stdout(&o).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for field in ["level", "title", "status", "pushes", "moves", "solution", "states", "seconds"] {
            assert!(v.get(field).is_some(), "missing {field}: {line}");
        }
        let i = v["level"].as_u64().unwrap() as usize;
        assert_eq!(v["status"], "solved");
        assert_eq!(v["pushes"].as_u64().unwrap() as usize, truth[i - 1].1);
        let sol = v["solution"].as_str().unwrap();
        let check = sokoshard(&["verify", file, "--level", &i.to_string(), "--solution", sol]);
        assert_eq!(check.status.code(), Some(0));
    }
}

/// The default objective is the fewest pushes, then the fewest moves, and
/// says so; `--objective pushes` keeps the first push-optimal solution
/// (Microban I #10: 21 pushes either way, 89 moves against 121).
#[test]
fn objective_flag_picks_fewest_moves_or_pushes_only() {
    let file = repo(MICROBAN);
    let file = file.to_str().unwrap();
    let run = |extra: &[&str]| {
        let o = sokoshard(&[&["solve", file, "--level", "10", "--json"][..], extra].concat());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_str::<serde_json::Value>(stdout(&o).trim()).unwrap()
    };
    let best = run(&[]);
    let first = run(&["--objective", "pushes"]);
    assert_eq!(
        (&best["objective"], &first["objective"]),
        (&serde_json::json!("pushes,moves"), &serde_json::json!("pushes"))
    );
    assert_eq!((&best["pushes"], &first["pushes"]), (&serde_json::json!(21), &serde_json::json!(21)));
    assert_eq!((&best["moves"], &first["moves"]), (&serde_json::json!(89), &serde_json::json!(121)));
    assert!(best["moves_seconds"].as_f64().unwrap() > 0.0 && best["optimal_states"].as_u64().unwrap() > 0, "{best}");
    let check =
        sokoshard(&["verify", file, "--level", "10", "--solution", best["solution"].as_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&check).trim()).unwrap();
    assert_eq!((&v["valid"], &v["moves"]), (&serde_json::json!(true), &serde_json::json!(89)));
    let o = sokoshard(&["solve", file, "--level", "10"]);
    assert!(stdout(&o).contains("solved in 21 pushes, 89 moves (fewest pushes, then fewest moves)"), "{}", stdout(&o));
    let o = sokoshard(&["solve", file, "--level", "10", "--objective", "moves"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn solve_text_output_summary_and_sok_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("solved.sok");
    let file = repo(MICROBAN);
    let o = sokoshard(&["solve", file.to_str().unwrap(), "--levels", "2-3", "--output", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let s = stdout(&o);
    assert!(s.contains("level 2 (2): solved in 3 pushes"), "{s}");
    assert!(s.contains("solved") && s.contains("total time"), "{s}");
    let sok = std::fs::read_to_string(&out).unwrap();
    assert_eq!(sok.matches("Solution (moves").count(), 2);
    // the written file loads again, and its solutions verify
    let o = sokoshard(&["levels", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 3);
}

#[test]
fn one_push_and_one_move_are_said_in_the_singular() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.xsb");
    std::fs::write(&path, "#####\n#@$.#\n#####\n").unwrap();
    let path = path.to_str().unwrap();
    let o = sokoshard(&["solve", path]);
    assert!(stdout(&o).contains("solved in 1 push, 1 move ("), "{}", stdout(&o));
    let o = sokoshard(&["verify", path, "--solution", "R"]);
    assert_eq!(stdout(&o).trim(), "valid: 1 push, 1 move");
    let o = sokoshard(&["verify", path, "--solution", "RR"]);
    assert!(stdout(&o).contains("(after 1 push, 1 move)"), "{}", stdout(&o));
}

#[test]
fn own_level_files_from_a_review_read_as_their_author_meant() {
    // found by a review with hand-made files: a binary file gave an error per
    // line; --title matched case only in ASCII; `levels` left out boxes the
    // player cannot reach (0 boxes for a level that has one); `verify --json`
    // with a --level past the file's end printed no JSON
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin.xsb");
    std::fs::write(&bin, b"#####\0\n#@$.#\n#####\n; x\n#####\n#@$.#\n#####\n").unwrap();
    let o = sokoshard(&["levels", bin.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("not a text file of levels"), "{}", stderr(&o));
    let uni = dir.path().join("uni.xsb");
    std::fs::write(&uni, "Title: Ünïcödé 日本\n#####\n#@$.#\n#####\n\nTitle: other\n#####\n#.$@#\n#####\n").unwrap();
    let o = sokoshard(&["verify", uni.to_str().unwrap(), "--title", "üNÏCÖDÉ 日本", "--solution", "R"]);
    assert_eq!(stdout(&o).trim(), "valid: 1 push, 1 move", "{}", stderr(&o));
    let o = sokoshard(&["verify", uni.to_str().unwrap(), "--level", "3", "--solution", "R", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert!(v["valid"] == false && v["error"].as_str().unwrap().contains("level 3 does not exist"), "{v}");
    let walled = dir.path().join("walled.xsb");
    std::fs::write(&walled, "#########\n#@$.#$ .#\n#########\n").unwrap();
    let o = sokoshard(&["levels", walled.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!((v["boxes"].as_u64(), v["fixed_boxes"].as_u64()), (Some(2), Some(0)), "{v}");
}

#[test]
fn the_output_file_of_untitled_levels_reads_back() {
    // untitled levels are written `Title: #1`, which the reader once took for
    // a broken board row
    let dir = tempfile::tempdir().unwrap();
    let (level, out) = (dir.path().join("untitled.xsb"), dir.path().join("solved.sok"));
    std::fs::write(&level, "#####\n#@$.#\n#####\n\n######\n#@$ .#\n######\n").unwrap();
    let o = sokoshard(&["solve", level.to_str().unwrap(), "--output", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = sokoshard(&["levels", out.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let titles: Vec<String> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["title"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(titles, ["#1", "#2"]);
    // "#2" is a place in the file read, not a title to carry into another file
    let o = sokoshard(&["solve", level.to_str().unwrap(), "--level", "2", "--output", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let written = std::fs::read_to_string(&out).unwrap();
    assert!(!written.contains("Title:") && !written.contains("#2"), "{written}");
}

#[test]
fn the_output_file_keeps_each_levels_author_and_comments() {
    // `--output` dropped every field but the title
    let dir = tempfile::tempdir().unwrap();
    let (level, out) = (dir.path().join("fields.xsb"), dir.path().join("solved.sok"));
    let text = "#####\n#@$.#\n#####\nTitle: Tiny\nAuthor: me\nComment:\nvery easy\nComment-End:\n\n######\n#@$ .#\n######\nAuthor: you\n";
    std::fs::write(&level, text).unwrap();
    let o = sokoshard(&["solve", level.to_str().unwrap(), "--output", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let written = std::fs::read_to_string(&out).unwrap();
    assert!(written.contains("Title: Tiny\nAuthor: me\nComment:\nvery easy\nComment-End:\nSolution"), "{written}");
    assert!(written.contains("Author: you\nSolution"), "{written}");
    // and reads back with the same levels, titles and fields
    let back = sokoshard::model::level::split_collection(&written, "back");
    assert_eq!(back.len(), 2);
    assert_eq!((back[0].title.as_str(), back[0].fields.len(), back[1].fields.len()), ("Tiny", 4, 1));
}

#[test]
fn output_files_that_cannot_be_written_are_refused_before_the_work_and_leave_nothing_behind() {
    // the paths were once tried only after the solve, and a directory given
    // as the file left `<dir>.tmp` behind
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("d");
    std::fs::create_dir(&sub).unwrap();
    let (sub, missing) = (sub.to_str().unwrap(), dir.path().join("no/such/x.sok"));
    let file = repo(MICROBAN);
    let file = file.to_str().unwrap();
    let cases: [&[&str]; 4] = [
        &["solve", file, "--level", "1", "--output", missing.to_str().unwrap()],
        &["solve", file, "--level", "1", "--html", sub],
        &["solve", file, "--level", "1", "--output", sub],
        &["deadlocks", "build", file, "--level", "1", "-o", missing.to_str().unwrap()],
    ];
    for args in cases {
        let o = sokoshard(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).is_empty(), "{args:?}: nothing solved or built first: {}", stdout(&o));
        assert!(stderr(&o).contains("cannot write there"), "{args:?}: {}", stderr(&o));
    }
    // (a directory given to `deadlocks build -o` is where a collection's
    // databases go, one file per level.) One that cannot be made is refused
    // before any level is built
    let under_a_file = dir.path().join("d").join("f");
    std::fs::write(&under_a_file, "").unwrap();
    let db = under_a_file.join("db");
    let o = sokoshard(&["deadlocks", "build", file, "--levels", "1-2", "-o", db.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "nothing built first: {}", stdout(&o));
    assert!(stderr(&o).contains("cannot make the directory"), "{}", stderr(&o));
    std::fs::remove_file(&under_a_file).unwrap();
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["d"], "nothing but the directory");
}

#[test]
fn commands_on_one_level_take_only_level_or_title_and_say_which_is_missing() {
    // verify, replay and deadlocks build once listed --levels and --all
    // ("the default when nothing else is given") and then refused both
    let file = repo(MICROBAN);
    let file = file.to_str().unwrap();
    let cmd = ["verify", file, "--solution", "R"];
    let o = sokoshard(&[&cmd[..2], &["--help"]].concat());
    assert!(!stdout(&o).contains("--levels") && !stdout(&o).contains("--all"), "{}", stdout(&o));
    let o = sokoshard(&[&cmd[..], &["--levels", "1-2"]].concat());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // `deadlocks build` takes --levels and --all (a database per level), but
    // builds every level only when asked to
    for cmd in [&cmd[..], &["deadlocks", "build", file, "-o", "x.kdb"]] {
        let o = sokoshard(cmd);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("has 155 levels: pick one with --level N or --title T"), "{}", stderr(&o));
    }
    assert!(!std::path::Path::new("x.kdb").exists());
    let dir = tempfile::tempdir().unwrap();
    let dup = dir.path().join("dup.xsb");
    std::fs::write(&dup, "; same\n#####\n#@$.#\n#####\n; same\n#####\n#.$@#\n#####\n").unwrap();
    let o = sokoshard(&["verify", dup.to_str().unwrap(), "--title", "same", "--solution", "R"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("2 levels are titled \"same\"; pick one with --level N"), "{}", stderr(&o));
    let o = sokoshard(&["verify", dup.to_str().unwrap(), "--level", "1", "--solution", "R"]);
    assert_eq!(stdout(&o).trim(), "valid: 1 push, 1 move");
    // a file of one level needs no selection
    let one = dir.path().join("one.xsb");
    std::fs::write(&one, "#####\n#@$.#\n#####\n").unwrap();
    let o = sokoshard(&["verify", one.to_str().unwrap(), "--solution", "R"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn unsolvable_level_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stuck.xsb");
    // the box is in a corner off its goal
    std::fs::write(&path, "#####\n#$ .#\n# @ #\n#####\n").unwrap();
    let o = sokoshard(&["solve", path.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["status"], "unsolvable");
    // a box walled off from the player and not on a goal: unsolvable without search
    std::fs::write(&path, "#######\n#@$ .##\n#######\n##$.###\n#######\n").unwrap();
    let o = sokoshard(&["solve", path.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["status"], "unsolvable");
    assert!(v["reason"].as_str().unwrap().contains("never be reached"), "{v}");
    assert_eq!(v["states"], 0);
}

#[test]
fn timeout_stops_cleanly_and_reports() {
    let file = repo("levels/XSokoban_90.xsb");
    let o = sokoshard(&["solve", file.to_str().unwrap(), "--level", "4", "--timeout", "0.5", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["status"], "timeout");
    // the reason was null, where a stop at the state limit gave one
    assert_eq!(v["reason"], "stopped by the time limit", "{v}");
}

#[test]
fn state_limit_reports_limit() {
    let file = repo("levels/XSokoban_90.xsb");
    let o = sokoshard(&["solve", file.to_str().unwrap(), "--level", "1", "--max-states", "1000", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["status"], "limit");
    // it says why, as the other stops do (the reason was null)
    assert_eq!(v["reason"], "the stored states reached the state limit");
}

#[test]
fn usage_errors_exit_2() {
    let file = repo(MICROBAN);
    assert_eq!(sokoshard(&["solve", file.to_str().unwrap(), "--level", "999"]).status.code(), Some(2));
    assert_eq!(sokoshard(&["solve", file.to_str().unwrap(), "--partitions", "3"]).status.code(), Some(2));
    assert_eq!(sokoshard(&["solve", "/no/such/file.xsb"]).status.code(), Some(2));
    assert_eq!(sokoshard(&["frobnicate"]).status.code(), Some(2));
    // a limit of no states, and a moves budget where no moves pass runs,
    // were taken and quietly meant nothing
    let f = file.to_str().unwrap();
    assert_eq!(sokoshard(&["solve", f, "--level", "1", "--max-states", "0"]).status.code(), Some(2));
    let o = sokoshard(&["solve", f, "--level", "1", "--objective", "pushes", "--moves-states", "99999999"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("runs no moves pass"), "{}", stderr(&o));
}

/// Runs `sokoshard args` with `input` on its standard input.
fn with_stdin(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sokoshard"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn reads_levels_from_stdin() {
    let o = with_stdin(&["solve", "-", "--json"], b"######\n#@$ .#\n######\n");
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["pushes"], 2);
}

#[test]
fn ctrl_c_stops_cleanly_and_still_prints() {
    let file = repo("levels/XSokoban_90.xsb");
    let child = Command::new(env!("CARGO_BIN_EXE_sokoshard"))
        // k = 1 tables only, so that the signal finds the search itself running
        // (the automatic choice builds k = 3 here first, for seconds in a
        // debug build)
        .args(["solve", file.to_str().unwrap(), "--levels", "4-5", "--json", "--kpg", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    // the level in progress reports, and no further level starts
    let lines: Vec<serde_json::Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "{}", stdout(&o));
    assert_eq!(lines[0]["status"], "timeout");
    assert_eq!(lines[0]["reason"], "interrupted");
    assert_eq!(lines[0]["kpg"], 1, "{}", lines[0]);
    // how far the search got depends on when the signal came: some states, no answer
    assert!(lines[0]["states"].as_u64().unwrap() > 0 && lines[0]["pushes"].is_null());
}

/// `timeout 600 sokoshard solve ...`, a stopped container or a closed terminal
/// once killed a solve outright: no line for the level it was in, no
/// `--output` file for the levels it had solved, and its spill files left
/// on disk.
#[test]
fn sigterm_and_sighup_stop_a_solve_like_ctrl_c_keeping_what_it_found_and_removing_its_spill_files() {
    use std::io::BufRead;
    let file = repo(MICROBAN);
    for signal in ["-TERM", "-HUP"] {
        let dir = tempfile::tempdir().unwrap();
        let (spill, out) = (dir.path().join("spill"), dir.path().join("solved.sok"));
        std::fs::create_dir(&spill).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_sokoshard"))
            .args(["solve", file.to_str().unwrap(), "--levels", "152-153", "--json", "--mem", "64M"])
            .args(["--spill-dir", spill.to_str().unwrap(), "--output", out.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // #152 is solved in a moment; #153 takes many seconds, in a spill
        // directory of its own
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!((&first["level"], &first["status"]), (&152.into(), &"solved".into()), "{first}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::fs::read_dir(&spill).unwrap().next().is_none() {
            assert!(std::time::Instant::now() < deadline, "#153's spill directory never appeared");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let killed = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
        assert!(killed.success());
        let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{signal}: {}", stderr(&o));
        assert_eq!(rest.len(), 1, "{signal}: {rest:?}");
        let second: serde_json::Value = serde_json::from_str(&rest[0]).unwrap();
        assert_eq!(second["level"], 153, "{second}");
        assert_eq!((&second["status"], &second["reason"]), (&"timeout".into(), &"interrupted".into()), "{second}");
        let sok = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{signal}: no {}: {e}", out.display()));
        assert_eq!(sok.matches("Solution (moves").count(), 1, "{signal}: {sok}");
        let left: Vec<_> = std::fs::read_dir(&spill).unwrap().map(|e| e.unwrap().path()).collect();
        assert!(left.is_empty(), "{signal}: spill files left behind: {left:?}");
    }
}

#[test]
fn logs_carry_no_colour_codes_when_stderr_is_not_a_terminal() {
    // a coordinator's log file was full of escape codes
    let file = repo("levels/Microban_155.xsb");
    let o = Command::new(env!("CARGO_BIN_EXE_sokoshard"))
        .args(["solve", file.to_str().unwrap(), "--level", "1"])
        .env("SOKOSHARD_LOG", "info")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let log = stderr(&o);
    assert!(log.contains("k-pg table built"), "{log}");
    assert!(!log.contains('\u{1b}'), "{log:?}");
}

/// `bench engine --rounds N` runs each level N times on one thread and on
/// two, checks every run searched the same states, and reports the medians
/// with the range of the rounds' speed-ups; `--no-bound` measures the plain
/// search. No rounds at all is refused.
#[test]
fn bench_engine_alternates_rounds_and_reports_the_range_of_speed_ups() {
    let file = repo(MICROBAN);
    let o = sokoshard(&[
        "bench",
        "engine",
        "--file",
        file.to_str().unwrap(),
        "--levels",
        "1,2",
        "--rounds",
        "3",
        "--no-bound",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let rows: Vec<Vec<&str>> = out.lines().skip(2).map(|l| l.split('|').map(str::trim).collect()).collect();
    assert_eq!(rows.len(), 3, "{out}");
    // level 1: 8 pushes, the same 14 states on every run
    assert_eq!((rows[0][1], rows[0][2], rows[0][3]), ("1", "8", "14"), "{out}");
    assert_eq!(rows[1][1], "2", "{out}");
    assert_eq!(rows[2][1], "all", "{out}");
    for row in &rows {
        let (lo, hi) = row[9].split_once(" to ").unwrap_or_else(|| panic!("no range in {row:?}"));
        let (lo, hi): (f64, f64) = (lo.parse().unwrap(), hi.parse().unwrap());
        assert!(lo > 0.0 && lo <= hi, "{row:?}");
    }
    let o = sokoshard(&["bench", "engine", "--file", file.to_str().unwrap(), "--levels", "1", "--rounds", "0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--rounds"), "{}", stderr(&o));
}

/// Runs `sokoshard args` (with `SOKOSHARD_LOG=debug`) with its stdout or,
/// with `stderr`, its stderr a pipe whose reading end is closed before the
/// command writes anything (as `sokoshard ... | head -0` would).
fn with_closed(args: &[&str], stderr: bool) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sokoshard"))
        .args(args)
        .env("SOKOSHARD_LOG", if stderr { "debug" } else { "warn" })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if stderr {
        drop(child.stderr.take());
    } else {
        drop(child.stdout.take());
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_closed_stdout_pipe_ends_the_command_quietly_instead_of_panicking() {
    // `sokoshard levels FILE | head` panicked at its next line ("failed
    // printing to stdout"), exit 101, and `solve --all | head` went on
    // solving every level for nobody
    let file = repo(MICROBAN);
    let file = file.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kdb = dir.path().join("t.kdb");
    let built = sokoshard(&["deadlocks", "build", file, "--level", "3", "-o", kdb.to_str().unwrap()]);
    assert!(built.status.success(), "{}", stderr(&built));
    let sok = dir.path().join("solved.sok");
    for args in [
        vec!["levels", file],
        vec!["deadlocks", "show", kdb.to_str().unwrap()],
        vec!["solve", file, "--levels", "1-155", "--objective", "pushes", "--output", sok.to_str().unwrap()],
        vec!["solve", file, "--levels", "1-2", "--json"],
    ] {
        let o = with_closed(&args, false);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).is_empty(), "{args:?}: {}", stderr(&o));
    }
    // the solve stopped after the level it could not print, and still wrote
    // the file it was asked for with that level
    let written = std::fs::read_to_string(&sok).unwrap();
    assert_eq!(written.matches("Solution (moves").count(), 1, "{written}");
}

#[test]
fn a_full_stdout_is_an_error_naming_it_and_the_solve_stops() {
    let file = repo(MICROBAN);
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        // no /dev/full on this system: nothing to write to that fails
        return;
    };
    let o = Command::new(env!("CARGO_BIN_EXE_sokoshard"))
        .args(["solve", file.to_str().unwrap(), "--levels", "1-155", "--objective", "pushes"])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("writing to standard output"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

#[test]
fn a_closed_stderr_loses_the_logs_and_messages_but_not_the_result_or_the_exit_code() {
    // with stderr gone, a debug log line (through the log's own error report)
    // and the final `error:` line panicked, exit 101
    let file = repo(MICROBAN);
    let run = |args: &[&str]| with_closed(args, true);
    let o = run(&["solve", file.to_str().unwrap(), "--level", "2", "--objective", "pushes", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["status"], "solved");
    assert_eq!(run(&["solve", "/no/such/collection.xsb"]).status.code(), Some(2));
}

#[test]
fn time_limits_past_any_clock_are_refused_instead_of_panicking() {
    let file = repo(MICROBAN);
    let file = file.to_str().unwrap();
    for t in ["1e19", "1e30", "inf", "nan", "--timeout=-1", "ten"] {
        let flag = if t.starts_with("--") { vec![t] } else { vec!["--timeout", t] };
        let o = sokoshard(&[&["solve", file, "--level", "1"][..], &flag].concat());
        assert_eq!(o.status.code(), Some(2), "{t}: {}", stderr(&o));
        assert!(stderr(&o).contains("--timeout") && stderr(&o).contains("seconds"), "{t}: {}", stderr(&o));
    }
    // the other time flags read the same way
    let o = sokoshard(&["health", "127.0.0.1:1", "--timeout", "1e20"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("between 0 and 1e9 seconds"), "{}", stderr(&o));
    // the largest limit taken runs
    let o = sokoshard(&["solve", file, "--level", "1", "--timeout", "1e9"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn thread_counts_past_any_machine_are_refused_before_starting_them() {
    // `solve --threads 100000` spent minutes starting threads that only waited
    let file = repo(MICROBAN);
    let file = file.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    for args in [
        vec!["solve", file, "--level", "1", "--threads", "0"],
        vec!["solve", file, "--level", "1", "--threads", "100000"],
        vec!["deadlocks", "build", file, "--level", "1", "--threads", "0", "-o", "/nonexistent/t.kdb"],
        vec!["worker", "--join", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--data-dir", data, "--threads", "5000"],
    ] {
        let o = sokoshard(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&o).contains("--threads") && stderr(&o).contains("between 1 and 1024"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn more_threads_than_cores_or_memory_than_the_machine_are_warned_of_in_a_line() {
    // the threads' warning came as a timestamped tracing record among a
    // command's output, and a --mem past the machine's memory said nothing
    // (the store would never spill before the system ran out)
    let file = repo(MICROBAN);
    let n = (std::thread::available_parallelism().map_or(1, |n| n.get()) + 1).to_string();
    let o = sokoshard(&["solve", file.to_str().unwrap(), "--level", "1", "--threads", &n]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.lines().any(|l| l.starts_with(&format!("warning: --threads {n} is more than"))), "{err}");
    assert!(!err.contains("WARN"), "{err}");
    let o = sokoshard(&["solve", file.to_str().unwrap(), "--level", "1", "--mem", "900T"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("warning: --mem 900.0 TiB is more than the "), "{}", stderr(&o));
}

#[test]
fn a_token_no_client_could_send_is_refused_when_a_node_starts() {
    // a token read from a file with its newline: the coordinator ran, and no
    // worker or client could ever reach it
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    for node in [
        &["coordinator", "--listen", "127.0.0.1:0", "--data-dir", data][..],
        &["worker", "--join", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--data-dir", data],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_sokoshard"))
            .args(node)
            .env("SOKOSHARD_TOKEN", "secret\n")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{node:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("printable ASCII"), "{node:?}: {}", stderr(&o));
    }
    assert!(!std::path::Path::new(data).exists(), "refused before anything was made");
}

#[test]
fn a_worker_on_every_address_without_advertise_is_warned() {
    // it advertised 0.0.0.0:PORT silently, which other hosts cannot dial
    let dir = tempfile::tempdir().unwrap();
    let (data, log) = (dir.path().join("w"), dir.path().join("w.log"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_sokoshard"))
        .args(["worker", "--join", "127.0.0.1:1", "--listen", "0.0.0.0:0", "--token", "t"])
        .args(["--threads", "1", "--data-dir", data.to_str().unwrap()])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains("join failed") || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(text.contains("without --advertise") && text.contains("advertise=0.0.0.0:"), "{text}");
}

#[test]
fn cluster_flags_that_cannot_work_are_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let afile = dir.path().join("afile");
    std::fs::write(&afile, "").unwrap();
    let (data, afile) = (dir.path().join("d"), afile.to_str().unwrap());
    let data = data.to_str().unwrap();
    let file = repo(MICROBAN);
    let file = file.to_str().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (
            &["coordinator", "--listen", "127.0.0.1:0", "--data-dir", data, "--heartbeat-timeout", "0"],
            "--heartbeat-timeout",
        ),
        (&["coordinator", "--listen", "127.0.0.1:0", "--data-dir", data, "--min-workers", "0"], "--min-workers"),
        (&["coordinator", "--listen", "127.0.0.1:0", "--data-dir", afile], "is a file, not a directory"),
        (
            &["worker", "--join", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--data-dir", afile],
            "is a file, not a directory",
        ),
        // refused here, as solve refuses it, not by the coordinator
        (
            &["submit", file, "--level", "1", "--kpg", "9", "--coordinator", "127.0.0.1:1"],
            "--kpg must be between 0 and 8",
        ),
    ];
    for (args, want) in cases {
        let o = Command::new(env!("CARGO_BIN_EXE_sokoshard")).args(args).args(["--token", "t"]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn an_error_names_its_cause_once() {
    // "error reading DIR: Is a directory (os error 21): Is a directory (os error 21)"
    // (`deadlocks show DIR` lists a directory of databases now: a database
    // that is a directory is its line's error, and a level file that is a
    // directory the command's)
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.kdb");
    std::fs::create_dir(&db).unwrap();
    let o = sokoshard(&["deadlocks", "show", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stdout(&o).matches("os error").count(), 1, "{}", stdout(&o));
    assert!(stdout(&o).contains(db.to_str().unwrap()), "{}", stdout(&o));
    let o = sokoshard(&["levels", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).matches("os error").count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains(dir.path().to_str().unwrap()), "{}", stderr(&o));
}

#[test]
fn a_collection_past_any_real_size_is_refused_and_other_encodings_read_from_stdin() {
    use std::io::Write;
    // `solve -` read standard input to its end, however long (`< /dev/urandom`
    // took all the memory), and refused bytes that are not UTF-8, which a file
    // of the same bytes read
    let mut child = Command::new(env!("CARGO_BIN_EXE_sokoshard"))
        .args(["levels", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let block = vec![b'\n'; 1 << 20];
    // the reader stops past its limit and closes the pipe: writing then fails
    let written = (0..1024).take_while(|_| stdin.write_all(&block).is_ok()).count();
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert!(written < 1024, "the whole GiB went in");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("standard input: more than 256 MiB"), "{}", stderr(&o));
    let o = with_stdin(&["solve", "-", "--json", "--objective", "pushes"], b"; caf\xe9\n\n######\n#@$ .#\n######\n");
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["pushes"], 2);
}

#[test]
fn titles_in_wide_characters_keep_the_levels_table_aligned() {
    // "{:<24}" padded by characters: a title of CJK characters, two columns
    // each, pushed the rest of its row to the right
    use unicode_width::UnicodeWidthStr;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("wide.xsb");
    std::fs::write(&file, "; 倉庫番の面\n#####\n#@$.#\n#####\n\n; plain\n#####\n#@$.#\n#####\n").unwrap();
    let o = sokoshard(&["levels", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let size_at = |line: &str| line.find("5x3").map(|i| line[..i].width());
    let rows: Vec<&str> = out.lines().filter(|l| l.contains("5x3")).collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert_eq!(size_at(rows[0]), size_at(rows[1]), "{out}");
}

/// PI-corrals are turned off where a sample of the level's states shows they
/// drop almost nothing (Microban II #131: each bound iteration 1.7 times as
/// long with them for 0.4% fewer states), kept where they pay (XSokoban #83,
/// where they halve the states), and `--json` says which was used.
#[test]
fn pi_corrals_are_sampled_per_level_and_the_report_says_which() {
    let corrals = |file: &str, level: &str, extra: &[&str]| {
        let file = repo(file);
        let args = ["solve", file.to_str().unwrap(), "--level", level, "--max-states", "2000", "--json"];
        let o = sokoshard(&[&args[..], extra].concat());
        let v: serde_json::Value =
            serde_json::from_str(stdout(&o).trim()).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
        assert_eq!(v["status"], "limit", "{v}");
        v["pi_corrals"].as_bool().unwrap()
    };
    assert!(!corrals("levels/Microban_II_135.xsb", "131", &[]));
    assert!(corrals("levels/Microban_II_135.xsb", "131", &["--keep-pi-corrals"]));
    assert!(corrals("levels/XSokoban_90.xsb", "83", &[]));
    assert!(!corrals("levels/XSokoban_90.xsb", "83", &["--no-pi-corrals"]));
    let file = repo("levels/XSokoban_90.xsb");
    let both = sokoshard(&["solve", file.to_str().unwrap(), "--level", "83", "--no-pi-corrals", "--keep-pi-corrals"]);
    assert_eq!(both.status.code(), Some(2), "{}", stderr(&both));
}
