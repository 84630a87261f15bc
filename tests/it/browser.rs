//! The pages in a real browser: headless Chromium from the system's packages
//! (`.ci/run` installs it when missing; a machine without it fails these tests
//! with the command that installs it, it never skips them). Chromium runs the
//! page's own script with virtual time, so a replay plays to its end in a
//! moment; the tests read the page's DOM afterwards and take screenshots.

use crate::common::repo;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Chromium binary: `$CHROMIUM`, else `chromium` or `chromium-browser` on the path.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(p);
    }
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(o) = Command::new("which").arg(name).output() {
            if o.status.success() {
                return PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
            }
        }
    }
    panic!(
        "the browser tests need Chromium and none was found: install it (Debian: apt-get install chromium; .ci/run \
         does this) or set CHROMIUM to its binary"
    );
}

fn headless(profile: &Path) -> Command {
    let mut c = Command::new(chromium());
    c.args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"])
        .arg("--disable-dev-shm-usage")
        .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// The page at `url` after `budget_ms` of virtual time, as its DOM.
pub fn dom(url: &str, budget_ms: u32) -> String {
    let profile = tempfile::tempdir().unwrap();
    let o = headless(profile.path())
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(o.status.success(), "chromium failed on {url}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A screenshot of the page at `url` after `budget_ms` of virtual time, checked
/// not to be blank (many colours, none covering nearly everything); written
/// to `docs/<name>` too when `SOKOSHARD_DOCS_SCREENSHOTS` is set.
pub fn screenshot(url: &str, budget_ms: u32, size: (u32, u32), name: &str) -> Vec<u8> {
    let profile = tempfile::tempdir().unwrap();
    let png = profile.path().join(name);
    let o = headless(profile.path())
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .arg(format!("--window-size={},{}", size.0, size.1))
        .arg(format!("--screenshot={}", png.display()))
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(o.status.success(), "chromium failed on {url}: {}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("no screenshot of {url}: {e}"));
    let decoder = png::Decoder::new(std::io::Cursor::new(&bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), size);
    let px = info.color_type.samples();
    let mut counts = std::collections::HashMap::new();
    for p in buf[..info.buffer_size()].chunks(px) {
        *counts.entry(p[..3].to_vec()).or_insert(0usize) += 1;
    }
    let pixels = (info.width * info.height) as usize;
    let most = counts.values().max().copied().unwrap_or(0);
    assert!(counts.len() >= 8 && most < pixels * 97 / 100, "{name} looks blank: {} colours", counts.len());
    if std::env::var_os("SOKOSHARD_DOCS_SCREENSHOTS").is_some() {
        std::fs::write(repo("docs").join(name), &bytes).unwrap();
    }
    bytes
}

fn sokoshard(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sokoshard")).args(args).output().unwrap()
}

/// The text of the element with `id` in a dumped DOM.
pub fn element_text<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id} in the page:\n{dom}"));
    let start = at + dom[at..].find('>').unwrap() + 1;
    &dom[start..start + dom[start..].find('<').unwrap()]
}

#[test]
fn the_replay_of_microban_1_plays_to_every_box_on_a_goal() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("replay.html");
    let file = repo("levels/Microban_155.xsb");
    let o = sokoshard(&["solve", file.to_str().unwrap(), "--level", "1", "--html", page.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (pushes, moves) = (report["pushes"].as_u64().unwrap(), report["moves"].as_u64().unwrap());
    let url = format!("file://{}", page.display());
    // before play: the start, boxes off their goals
    let before = dom(&url, 1000);
    assert!(element_text(&before, "state-0").ends_with("off goals"), "{}", element_text(&before, "state-0"));
    assert_eq!(element_text(&before, "counters-0"), format!("moves 0/{moves}, pushes 0/{pushes}"));
    // #play presses the play button; virtual time runs the timer to the end
    let after = dom(&format!("{url}#play"), 120_000);
    assert_eq!(element_text(&after, "state-0"), "solved: every box on a goal");
    assert_eq!(element_text(&after, "counters-0"), format!("moves {moves}/{moves}, pushes {pushes}/{pushes}"));
    assert!(after.contains("data-off=\"0\""));
    // the board itself: no box off a goal, every goal under a box
    let cells: Vec<&str> = after
        .match_indices("class=\"cell ")
        .map(|(i, _)| &after[i + 12..i + 12 + after[i + 12..].find('"').unwrap()])
        .collect();
    assert!(!cells.is_empty());
    let box_off = cells.iter().filter(|c| c.contains("box") && !c.contains("goal")).count();
    let goal_open = cells.iter().filter(|c| c.contains("goal") && !c.contains("box")).count();
    assert_eq!((box_off, goal_open), (0, 0), "{cells:?}");
    screenshot(&format!("{url}#play"), 120_000, (900, 520), "replay.png");
}

#[test]
fn a_replay_page_is_the_same_bytes_for_the_same_input_and_refuses_a_bad_solution() {
    let dir = tempfile::tempdir().unwrap();
    let file = repo("levels/Microban_155.xsb");
    let file = file.to_str().unwrap();
    let (a, b, c) = (dir.path().join("a.html"), dir.path().join("b.html"), dir.path().join("c.html"));
    for p in [&a, &b] {
        let o = sokoshard(&["solve", file, "--level", "2", "--html", p.to_str().unwrap(), "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let page = std::fs::read(&a).unwrap();
    assert_eq!(page, std::fs::read(&b).unwrap(), "two runs wrote different pages");
    // `replay` of the same solution writes the very same page
    let o = sokoshard(&["solve", file, "--level", "2", "--json"]);
    let sol = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["solution"].as_str().unwrap().to_string();
    let o = sokoshard(&["replay", file, "--level", "2", "--solution", &sol, "--html", c.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&c).unwrap(), page);
    // a solution that walks into a wall: refused with its step, no page
    let bad = dir.path().join("bad.html");
    let o = sokoshard(&["replay", file, "--level", "2", "--solution", "uuuuuuuuuu", "--html", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("invalid at step") && err.contains("no page written"), "{err}");
    assert!(!bad.exists());
}
