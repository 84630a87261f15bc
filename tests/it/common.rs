//! Shared helpers: random small levels, the truth table, states as the tests hold them.

use proptest::prelude::*;
use sokoshard::model::board::Board;
use sokoshard::model::level::{parse_one, split_collection, Level};
use sokoshard::model::rules::{goal_states, normalize_player, Scratch};
use std::collections::HashSet;
use std::path::PathBuf;

pub fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Level `index` (1-based) of the collection `levels/<file>`, and its board.
pub fn shipped(file: &str, index: usize) -> (Level, Board) {
    let text = std::fs::read_to_string(repo(&format!("levels/{file}"))).unwrap();
    let level: Level = split_collection(&text, file)[index - 1].parse().unwrap();
    let board = Board::new(&level).unwrap();
    (level, board)
}

/// Microban I level `index` (1-based) from `levels/`, and its board.
pub fn microban(index: usize) -> (Level, Board) {
    shipped("Microban_155.xsb", index)
}

/// (level, pushes, moves, solution) from tests/data/microban1-push-optimal.tsv.
pub fn truth() -> Vec<(usize, usize, usize, String)> {
    let text = std::fs::read_to_string(repo("tests/data/microban1-push-optimal.tsv")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].parse().unwrap(), f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].to_string())
        })
        .collect()
}

/// A random closed level of at most 7x6 interior with 1 to 3 boxes, as XSB text.
pub fn small_level() -> impl Strategy<Value = String> {
    level_with_boxes(1, 3)
}

/// A random closed level of at most 7x6 interior with `min` to `max` boxes;
/// about a quarter of the boxes start on a goal, and in about a fifth of the
/// levels the player starts on one.
pub fn level_with_boxes(min: usize, max: usize) -> impl Strategy<Value = String> {
    level_with_boxes_on_goals(min, max, 25)
}

/// [`level_with_boxes`] with `percent` of the boxes starting on a goal: crowded
/// levels (many boxes on a small board) are nearly all unsolvable unless many
/// of their boxes start home.
pub fn level_with_boxes_on_goals(min: usize, max: usize, percent: u8) -> impl Strategy<Value = String> {
    (draws(min, max), proptest::collection::vec(0u8..100, max + 1)).prop_map(
        move |((w, h, nboxes, noise, picks), on_goal)| draw(w, h, nboxes, &noise, &picks, Some((&on_goal, percent))),
    )
}

/// [`level_with_boxes`] as it was before boxes and the player could start on
/// goals: the same stream of levels for a given seed, for the one test whose
/// assertion counts what a fixed seed's levels give.
pub fn level_with_boxes_apart(min: usize, max: usize) -> impl Strategy<Value = String> {
    draws(min, max).prop_map(|(w, h, nboxes, noise, picks)| draw(w, h, nboxes, &noise, &picks, None))
}

/// Width, height, box count, wall noise and the picks of free squares.
#[allow(clippy::type_complexity)]
fn draws(min: usize, max: usize) -> impl Strategy<Value = (usize, usize, usize, Vec<u8>, Vec<usize>)> {
    (
        3usize..=7,
        3usize..=6,
        min..=max,
        proptest::collection::vec(0u8..100, 42),
        proptest::collection::vec(0usize..1000, 1 + 2 * max),
    )
}

/// The level of one draw: walls from `noise`, then the player, the boxes and
/// the goals on free squares chosen by `picks`; `on_goal` (a draw per box, then
/// the player, and the percentage of boxes to put home) puts some of them on goals.
fn draw(w: usize, h: usize, nboxes: usize, noise: &[u8], picks: &[usize], on_goal: Option<(&[u8], u8)>) -> String {
    let mut grid = vec![vec!['#'; w + 2]; h + 2];
    for y in 0..h {
        for x in 0..w {
            grid[y + 1][x + 1] = if noise[y * 7 + x] < 18 { '#' } else { ' ' };
        }
    }
    let mut free: Vec<(usize, usize)> =
        (0..h).flat_map(|y| (0..w).map(move |x| (x + 1, y + 1))).filter(|&(x, y)| grid[y][x] == ' ').collect();
    let mut placed = Vec::new();
    for &pick in picks.iter().take(1 + 2 * nboxes) {
        if !free.is_empty() {
            let j = pick % free.len();
            placed.push(free.swap_remove(j));
        }
    }
    if placed.len() == 1 + 2 * nboxes {
        let (px, py) = placed[0];
        grid[py][px] = '@';
        let mut open_goal = None;
        for k in 0..nboxes {
            let (bx, by) = placed[1 + k];
            let (gx, gy) = placed[1 + nboxes + k];
            if on_goal.is_some_and(|(o, percent)| o[k] < percent) {
                // a box that starts on its goal (its own goal square stays floor)
                grid[by][bx] = '*';
            } else {
                grid[by][bx] = '$';
                grid[gy][gx] = '.';
                open_goal = Some((gx, gy));
            }
        }
        if let (Some((gx, gy)), Some((o, _))) = (open_goal, on_goal) {
            if o[o.len() - 1] < 20 {
                // the player starts on a goal
                grid[py][px] = ' ';
                grid[gy][gx] = '+';
            }
        }
    }
    grid.into_iter().map(|r| r.into_iter().collect::<String>()).collect::<Vec<_>>().join("\n") + "\n"
}

/// [`level_with_boxes`] with a room of `n` x `m` blocks of 2 x 2 boxes on goals
/// below it, so that the level needs wide keys ([`in_block_room`]).
pub fn level_in_block_room(min: usize, max: usize, n: usize, m: usize) -> impl Strategy<Value = String> {
    level_with_boxes(min, max).prop_map(move |text| in_block_room(&text, n, m))
}

/// `text` (a generated level) one column to the right, above a room of `n` x `m`
/// blocks of 2 x 2 boxes on goals, between one-square lanes the player walks.
/// The room adds many floor squares and boxes, so the key width grows, but not
/// the states: a box in a 2 x 2 block can never be pushed (the square behind it
/// holds a box), and the only door, under the level's bottom-left interior
/// square, leads into a bend where a box pushed in can never move again.
pub fn in_block_room(text: &str, n: usize, m: usize) -> String {
    let mut rows: Vec<Vec<char>> = text.lines().map(|l| std::iter::once('#').chain(l.chars()).collect()).collect();
    let h = rows.len() - 2; // interior rows 1..=h, the bottom wall at h + 1
    let (rw, rh) = (3 * n + 1, 3 * m + 1);
    let width = rows.iter().map(Vec::len).max().unwrap().max(rw + 2);
    for r in rows.iter_mut() {
        r.resize(width, '#');
    }
    if rows[h][2] == '#' {
        rows[h][2] = ' ';
    }
    // the door under the bottom-left interior square, and the bend to its left
    rows[h + 1][2] = ' ';
    rows[h + 1][1] = ' ';
    let mut bend = vec!['#'; width];
    bend[1] = ' ';
    rows.push(bend);
    for y in 0..rh {
        let mut r = vec!['#'; width];
        for x in 0..rw {
            r[x + 1] = if x % 3 != 0 && y % 3 != 0 { '*' } else { ' ' };
        }
        rows.push(r);
    }
    rows.push(vec!['#'; width]);
    rows.into_iter().map(|r| r.into_iter().collect::<String>()).collect::<Vec<_>>().join("\n") + "\n"
}

/// A board for generated text, or None when the generator produced no valid level.
pub fn board_of(text: &str) -> Option<Board> {
    let level = parse_one(text, "gen").ok()?;
    Board::new(&level).ok()
}

/// A state as the tests hold it: sorted box squares and the normalized player.
pub type State = (Vec<u16>, u16);

/// The start state, its player normalized by a full flood.
pub fn start_state(board: &Board, sc: &mut Scratch) -> State {
    (board.start_boxes.clone(), normalize_player(board, sc, &board.start_boxes, board.start_player))
}

/// The solved position with the player in each of its regions.
pub fn goal_seeds(board: &Board, sc: &mut Scratch) -> Vec<State> {
    goal_states(board, sc, &board.goals).into_iter().map(|p| (board.goals.clone(), p)).collect()
}

/// The states a breadth-first walk reaches from `seeds`, in the order first
/// reached, with `step` listing a state's successors; no state is expanded
/// once `limit` are known.
pub fn reach_states(seeds: Vec<State>, limit: usize, mut step: impl FnMut(&State, &mut Vec<State>)) -> Vec<State> {
    let mut seen: HashSet<State> = seeds.iter().cloned().collect();
    let mut order = seeds;
    let mut next = Vec::new();
    let mut i = 0;
    while i < order.len() && seen.len() < limit {
        next.clear();
        step(&order[i], &mut next);
        i += 1;
        for t in next.drain(..) {
            if seen.insert(t.clone()) {
                order.push(t);
            }
        }
    }
    order
}

/// What a property test over random levels really checked: the cases that ran
/// the check (levels that make no board are rejected and generated again,
/// never counted as passes), and of those the solvable, the unsolvable and
/// those with two or more boxes.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub ran: usize,
    pub solvable: usize,
    pub unsolvable: usize,
    pub several_boxes: usize,
}

impl Tally {
    /// Fails unless each kind of case is at least `share` of the cases run
    /// (`unsolvable` too when `solvability` is true): a generator that drifts
    /// into trivial levels fails the test instead of passing it.
    pub fn assert_covers(&self, cases: u32, share: f64, solvability: bool) {
        let least = (cases as f64 * share).ceil() as usize;
        assert_eq!(self.ran, cases as usize, "{self:?}");
        assert!(self.several_boxes >= least, "too few levels with several boxes: {self:?}");
        if solvability {
            assert!(self.solvable >= least && self.unsolvable >= least, "too few of one kind: {self:?}");
        }
    }
}

/// Runs `check` on `cases` generated levels that make a board and tallies
/// them; `check` returns whether the level is solvable where it knows.
pub fn for_levels(
    cases: u32,
    levels: impl Strategy<Value = String>,
    check: impl Fn(&str, Board) -> Result<Option<bool>, TestCaseError>,
) -> Tally {
    use proptest::test_runner::{Config, TestRunner};
    let runner = TestRunner::new(Config { cases, max_global_rejects: cases * 50, ..Config::default() });
    run_levels(runner, levels, check)
}

/// [`for_levels`] on the same levels every run (a fixed seed), for a test
/// that also counts what those levels give.
pub fn for_fixed_levels(
    cases: u32,
    levels: impl Strategy<Value = String>,
    check: impl Fn(&str, Board) -> Result<Option<bool>, TestCaseError>,
) -> Tally {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let config = Config { cases, max_global_rejects: cases * 50, ..Config::default() };
    let runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    run_levels(runner, levels, check)
}

fn run_levels(
    mut runner: proptest::test_runner::TestRunner,
    levels: impl Strategy<Value = String>,
    check: impl Fn(&str, Board) -> Result<Option<bool>, TestCaseError>,
) -> Tally {
    let tally = std::cell::Cell::new(Tally::default());
    let result = runner.run(&levels, |text| {
        let board = board_of(&text);
        prop_assume!(board.is_some());
        let board = board.unwrap();
        let several = board.box_count() >= 2;
        let solvable = check(&text, board)?;
        let mut t = tally.get();
        t.ran += 1;
        t.several_boxes += several as usize;
        t.solvable += (solvable == Some(true)) as usize;
        t.unsolvable += (solvable == Some(false)) as usize;
        tally.set(t);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    tally.get()
}

/// Runs the `sokoshard` binary with `args`: its exit code and the first line
/// of its standard output as JSON (`null` when there is none).
pub fn cli(args: &[&str]) -> (i32, serde_json::Value) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sokoshard")).args(args).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let v = serde_json::from_str(stdout.lines().next().unwrap_or("null")).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v)
}

/// A bounded solve's iterations from its `--json` report, as (bound, search);
/// `None` is the plain search.
pub fn iterations(v: &serde_json::Value) -> Vec<(Option<u64>, String)> {
    let all = v["iterations"].as_array().unwrap();
    all.iter().map(|i| (i["bound"].as_u64(), i["search"].as_str().unwrap().to_string())).collect()
}

/// The [`iterations`] that decided their bound: an iteration cut where the
/// search outgrew its small k-PG tables (`"outgrown"`) is left out, its bound
/// being searched again right after it, and so is a plain try that ran out
/// of its budget (a `"plain_try"` before the last iteration), the bounded
/// search going on after it (both checked here).
pub fn decided_iterations(v: &serde_json::Value) -> Vec<(Option<u64>, String)> {
    let all = iterations(v);
    for (i, (bound, search)) in all.iter().enumerate() {
        if search == "outgrown" {
            assert!(all.get(i + 1).is_some_and(|next| next.0 == *bound && next.1 != "outgrown"), "{v}");
        }
        if search == "plain_try" {
            assert!(bound.is_none(), "{v}");
            assert!(all.get(i + 1).is_none_or(|next| next.0.is_some()), "{v}");
        }
    }
    let last = all.len().saturating_sub(1);
    (all.into_iter().enumerate())
        .filter(|(i, (_, s))| s != "outgrown" && (s != "plain_try" || *i == last))
        .map(|(_, it)| it)
        .collect()
}

/// Runs `f` with a fresh in-memory layered backend of `problem` (8
/// partitions, never cancelled), as a local solve has one.
pub fn with_local_backend<R>(
    problem: &sokoshard::engine::Problem<u64>,
    f: impl FnOnce(&mut sokoshard::engine::search::LocalBackend<'_, u64>, &std::sync::atomic::AtomicBool) -> R,
) -> R {
    use sokoshard::engine::partition::{LocalExchange, Partitioner};
    let partitioner = Partitioner::for_space(8, &problem.space);
    let count = partitioner.count();
    let (store, exchange) = (sokoshard::storage::mem::MemStore::<u64>::new(count), LocalExchange::<u64>::new(count));
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let mut backend = sokoshard::engine::search::LocalBackend {
        problem,
        partitioner,
        store: &store,
        exchange: &exchange,
        cancel: &cancel,
    };
    f(&mut backend, &cancel)
}
