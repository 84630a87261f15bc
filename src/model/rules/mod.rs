//! Push and pull generation with player normalization, the freeze-deadlock tests
//! and the frozen-target matching.
//!
//! A state is a sorted box list plus the normalized player square: the smallest floor
//! index the player can reach. A forward move is a walk plus one push; a backward
//! move is a walk plus one pull. Every function here works on caller-owned scratch
//! buffers so the engine can run them on many threads without allocating.
//!
//! Files: `reach` (scratch buffers, the player's region, normalization), `moves`
//! (push and pull generation and the step every move shares), `corral`
//! (PI-corrals), `corral_share` (whether they pay on a level), `freeze`
//! (freeze deadlocks), `matching` (the frozen-target matching).

use super::board::{opposite, Board, DIRS, NONE};

mod corral;
mod corral_share;
mod freeze;
mod matching;
mod moves;
mod reach;

use corral::*;
pub use corral_share::CorralShare;
#[allow(unused_imports)]
use freeze::*;
pub use freeze::{pull_freeze_deadlock, push_freeze_deadlock};
use matching::*;
#[allow(unused_imports)]
use moves::*;
pub use moves::{for_each_pull, for_each_pull_kept, for_each_push, for_each_push_kept, moved_boxes};
use reach::Reach;
pub use reach::{normalize_player, Scratch};

/// One push (forward) or pull (backward): the box moved from `from` one step in `dir`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoxMove {
    pub from: u16,
    pub dir: u8,
}

impl BoxMove {
    /// The square the player stands on to make this push.
    pub fn behind(self, board: &Board) -> u16 {
        board.neighbour(self.from, opposite(self.dir as usize))
    }

    /// The push that undoes this pull: the pull dragged the box from `from`
    /// one step in `dir`, the push starts there and goes back.
    pub fn undoing_pull(self, board: &Board) -> BoxMove {
        BoxMove { from: board.neighbour(self.from, self.dir as usize), dir: opposite(self.dir as usize) as u8 }
    }
}

/// Which cheap, rule-level prunings to apply while generating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pruning {
    /// Drop moves onto dead squares (forward: no goal reachable; backward: no start
    /// box can get there).
    pub dead_squares: bool,
    /// Drop moves that freeze a box off its target (forward: off a goal; backward: a
    /// box that can never be pulled again, off a start square).
    pub freeze: bool,
    /// Forward only: when the state has a PI-corral, generate only the pushes into
    /// it (see [`pi_corral_pushes`]). Unlike the others this drops moves,
    /// not states: some optimal solution survives, but states the restricted moves
    /// skip are never reached. It suits the bidirectional search, never an
    /// exhaustive exploration such as a k-PG game, whose reached set must be whole.
    pub pi_corrals: bool,
}

impl Pruning {
    pub const NONE: Pruning = Pruning { dead_squares: false, freeze: false, pi_corrals: false };
    /// Every state pruning; no move restriction (what exhaustive explorations use).
    pub const ALL: Pruning = Pruning { dead_squares: true, freeze: true, pi_corrals: false };
    /// What a solve asks for: every state pruning plus the PI-corral
    /// restriction (which the solve driver keeps where a sample shows it pays).
    pub const SOLVE: Pruning = Pruning { pi_corrals: true, ..Pruning::ALL };
}

/// The backward start states: all boxes on goals, the player in each region of the
/// solved position (normalized).
pub fn goal_states(board: &Board, sc: &mut Scratch, goals: &[u16]) -> Vec<u16> {
    sc.place(goals);
    let players = sc.region_mins(board);
    sc.clear(goals);
    players
}

/// Are all boxes on goals?
pub fn is_solved(board: &Board, boxes: &[u16]) -> bool {
    boxes.iter().all(|&b| board.is_goal[b as usize])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::level::parse_one;
    use crate::model::tests::{below, shipped};

    fn board(t: &str) -> Board {
        Board::new(&parse_one(t, "t").unwrap()).unwrap()
    }

    #[test]
    fn simple_push_and_pull_mirror() {
        let b = board("######\n#@$ .#\n######\n");
        let mut sc = Scratch::new(&b);
        let mut succ = Vec::new();
        for_each_push(&b, &mut sc, &b.start_boxes, b.start_player, Pruning::ALL, |bx, p, m| {
            succ.push((bx.to_vec(), p, m))
        });
        assert_eq!(succ.len(), 1);
        let (bx, p, _) = &succ[0];
        let mut pred = Vec::new();
        for_each_pull(&b, &mut sc, bx, *p, Pruning::NONE, |bx2, p2, _| pred.push((bx2.to_vec(), p2)));
        let start = normalize_player(&b, &mut sc, &b.start_boxes, b.start_player);
        assert!(pred.contains(&(b.start_boxes.clone(), start)));
    }

    #[test]
    fn freeze_of_two_boxes_on_a_wall_off_goal_is_deadlock() {
        // pushing the upper box down sets it beside the lower one on the bottom wall:
        // two boxes off goals freezing each other. Pushing it up freezes it in a
        // dead top row.
        let b = board("######\n#@   #\n# $  #\n#. $.#\n######\n");
        let mut sc = Scratch::new(&b);
        let count = |sc: &mut Scratch, pruning| {
            let mut n = 0;
            for_each_push(&b, sc, &b.start_boxes, b.start_player, pruning, |_, _, _| n += 1);
            n
        };
        assert_eq!(count(&mut sc, Pruning::NONE), 6);
        assert_eq!(count(&mut sc, Pruning { freeze: true, ..Pruning::NONE }), 4);
    }

    /// The backward freeze test as first written: each direction in turn,
    /// down through the boxes in it, before the next.
    fn pull_frozen_in_turn(board: &Board, sc: &mut Scratch, b: u16) -> bool {
        freeze::frozen_with(sc, b, |sc| {
            (0..crate::model::board::DIRS).all(|d| {
                let Some((to, step)) = freeze::pull_squares(board, sc, b, d) else {
                    return true;
                };
                let mut blocked_at = |sq: u16| sc.occ[sq as usize] && pull_frozen_in_turn(board, sc, sq);
                blocked_at(to) || blocked_at(step)
            })
        })
    }

    /// The backward freeze test looks for a pull onto two empty squares
    /// before it goes down through the boxes in the way: the same answers
    /// and frozen boxes as the test that takes each direction in turn,
    /// wherever that one stays within its budget, on random crowds of boxes
    /// (half on goals) in the goal rooms of XSokoban #10, where the
    /// recursion went down through hundreds of boxes, and of Microban II
    /// #131 and #126.
    #[test]
    fn pull_freeze_test_looks_for_an_empty_pull_first_with_the_same_answers() {
        let mut next = below();
        let (mut tests, mut deep, mut frozen) = (0, 0, 0);
        for b in [shipped("XSokoban_90.xsb", 10), microban_ii(131), microban_ii(126)] {
            let mut sc = Scratch::new(&b);
            let live: Vec<u16> = (0..b.floor_count() as u16).filter(|&s| !b.dead_backward[s as usize]).collect();
            for _ in 0..2000 {
                let mut boxes = std::collections::BTreeSet::new();
                while boxes.len() < b.goals.len() {
                    boxes.insert(if next(2) == 0 { b.goals[next(b.goals.len())] } else { live[next(live.len())] });
                }
                let boxes: Vec<u16> = boxes.into_iter().collect();
                sc.place(&boxes);
                for &x in &boxes {
                    sc.frozen.clear();
                    sc.budget = freeze::FREEZE_BUDGET;
                    let plain = pull_frozen_in_turn(&b, &mut sc, x);
                    let (plain_frozen, spent) = (sc.frozen.clone(), freeze::FREEZE_BUDGET - sc.budget);
                    let off_start = plain && plain_frozen.iter().any(|&f| !b.is_start_box[f as usize]);
                    let fast = pull_freeze_deadlock(&b, &mut sc, x);
                    if sc.budget > 0 && spent < freeze::FREEZE_BUDGET {
                        assert_eq!(fast, off_start, "{}box {x}", b.draw(&boxes, None));
                        assert_eq!(
                            sc.frozen,
                            if plain { plain_frozen } else { Vec::new() },
                            "{}box {x}",
                            b.draw(&boxes, None)
                        );
                    }
                    tests += 1;
                    deep += (spent > 64) as usize;
                    frozen += plain as usize;
                }
                sc.clear(&boxes);
            }
        }
        assert!(deep > 100 && frozen > 100, "{tests} tests: {deep} went deeper than 64 boxes, {frozen} frozen");
    }

    /// Microban II level `index` (1-based), shipped in `levels/`.
    fn microban_ii(index: usize) -> Board {
        shipped("Microban_II_135.xsb", index)
    }

    fn pushes_from_start(b: &Board, pruning: Pruning) -> Vec<((usize, usize), u8)> {
        let mut sc = Scratch::new(b);
        let mut got = Vec::new();
        for_each_push(b, &mut sc, &b.start_boxes, b.start_player, pruning, |_, _, m| {
            got.push((b.coords(m.from), m.dir))
        });
        got.sort();
        got
    }

    /// The box in the gap fences off the area holding the goal at the right; the
    /// player reaches its only push inward, and it can never leave the gap in any
    /// other way. So pushing the boxed goal around first is never needed.
    #[test]
    fn pi_corral_leaves_only_the_pushes_into_it() {
        let b = board("########\n#    # #\n# @* $.#\n#    # #\n########\n");
        let all = pushes_from_start(&b, Pruning::ALL);
        let corral = pushes_from_start(&b, Pruning::SOLVE);
        // grid column 6, row 3 (1-based), pushed right (direction 1)
        assert_eq!(corral, vec![((6, 3), 1)], "only the fence box, to the right");
        assert!(all.len() > corral.len() && all.contains(&corral[0]), "{all:?}");
    }

    /// Microban II #131 (44 boxes packed along a diagonal) fences about 25
    /// areas at the start, and the corrals grown from them take in area after
    /// area: the search stops at its work limit (before the limit, a state of
    /// its solve took 257 steps on average, a third of the solve's time). What
    /// it leaves is still a corral that qualifies, or none.
    #[test]
    fn crowded_state_stops_the_corral_search_at_its_work_limit() {
        let b = microban_ii(131);
        assert_eq!(b.box_count(), 44);
        let mut sc = Scratch::new(&b);
        let boxes = b.start_boxes.clone();
        sc.place(&boxes);
        sc.flood_reach(&b, b.start_player);
        let found = pi_corral_pushes(&b, &mut sc, &boxes);
        assert_eq!(sc.corral.work, corral::CORRAL_WORK + 1);
        // with or without a corral, the restricted pushes are legal ones
        let all = pushes_from_start(&b, Pruning::ALL);
        let kept = pushes_from_start(&b, Pruning::SOLVE);
        assert!(kept.iter().all(|m| all.contains(m)) && !kept.is_empty(), "{found} {kept:?}");
        sc.clear(&boxes);
    }

    /// The integration test `a_corral_search_stopped_at_its_work_limit_keeps_the_optimum`
    /// solves Microban II #68 with the restriction: among the first 20,000
    /// states a breadth-first search of its pushes reaches, some stop the
    /// corral search at its work limit.
    #[test]
    fn microban_ii_68_has_states_that_stop_the_corral_search() {
        let b = microban_ii(68);
        let mut sc = Scratch::new(&b);
        let mut stopped = 0;
        let searched = breadth_first(&b, &mut sc, 20_000, |sc, boxes, player| {
            sc.place(boxes);
            sc.flood_reach(&b, player);
            pi_corral_pushes(&b, sc, boxes);
            stopped += (sc.corral.work > corral::CORRAL_WORK) as usize;
            sc.clear(boxes);
            successors(&b, sc, boxes, player, Pruning::SOLVE)
        });
        assert!(stopped > 0, "{searched} states searched, none stopped");
    }

    /// The pushes from a state: the successors and their normalized players.
    fn successors(b: &Board, sc: &mut Scratch, boxes: &[u16], player: u16, pruning: Pruning) -> Vec<(Vec<u16>, u16)> {
        let mut got = Vec::new();
        for_each_push(b, sc, boxes, player, pruning, |next, p, _| got.push((next.to_vec(), p)));
        got
    }

    /// Up to `limit` states of `b` in breadth-first order from its start, each
    /// handed to `visit`, which returns its successors; how many it visited.
    fn breadth_first(
        b: &Board,
        sc: &mut Scratch,
        limit: usize,
        mut visit: impl FnMut(&mut Scratch, &[u16], u16) -> Vec<(Vec<u16>, u16)>,
    ) -> usize {
        let start = (b.start_boxes.clone(), normalize_player(b, sc, &b.start_boxes, b.start_player));
        let mut seen = std::collections::HashSet::from([start.clone()]);
        let (mut queue, mut at) = (vec![start], 0);
        while at < queue.len() && at < limit {
            let (boxes, player) = queue[at].clone();
            at += 1;
            for s in visit(sc, &boxes, player) {
                if seen.insert(s.clone()) {
                    queue.push(s);
                }
            }
        }
        at
    }

    /// The frozen-target matching starts from the pairs of the last matching
    /// under the same frozen set, which a long-lived scratch remembers: its
    /// answers must be those of a fresh scratch. Microban II #131 freezes
    /// boxes on goals in nearly every state; its first 5,000 states by
    /// breadth-first search, each expanded with both.
    #[test]
    fn frozen_matching_answers_alike_from_the_last_pairs_or_afresh() {
        let b = microban_ii(131);
        let mut warm = Scratch::new(&b);
        let mut pruned = 0;
        let searched = breadth_first(&b, &mut warm, 5_000, |warm, boxes, player| {
            let got = successors(&b, warm, boxes, player, Pruning::ALL);
            assert_eq!(got, successors(&b, &mut Scratch::new(&b), boxes, player, Pruning::ALL), "{boxes:?} {player}");
            pruned += successors(&b, warm, boxes, player, Pruning::NONE).len() - got.len();
            got
        });
        let hinted = warm.matching.cache.values().filter(|(_, _, hint)| hint.iter().any(|&h| h != NONE)).count();
        assert!(
            searched == 5_000 && pruned > 1_000 && hinted > 10,
            "{searched} states, {pruned} pruned, {hinted} hinted"
        );
    }

    /// Neither fenced area qualifies on its own: the right box can be pushed into
    /// the middle area only from the goal area, and into the goal area only from
    /// the middle one. Together they form one PI-corral, whose only push is the
    /// left fence box, to the right; the boxed goal in the player's room waits.
    #[test]
    fn two_areas_that_fence_each_other_are_one_pi_corral() {
        let b = board("##########\n#   #. # #\n#   #  # #\n#@* $  $.#\n#   #  # #\n#   #  # #\n##########\n");
        let all = pushes_from_start(&b, Pruning::ALL);
        // the boxed goal up, right or down, the left fence box right
        assert_eq!(all, vec![((3, 4), 0), ((3, 4), 1), ((3, 4), 2), ((5, 4), 1)]);
        assert_eq!(pushes_from_start(&b, Pruning::SOLVE), vec![((5, 4), 1)]);
    }

    /// An area whose fence box the player could push out of the fence (up, to a
    /// square from which it can still come back) is no PI-corral: every push stays.
    #[test]
    fn fence_box_that_can_leave_the_fence_is_no_pi_corral() {
        let b = board("########\n#     ##\n#     ##\n# @* $.#\n#     ##\n#     ##\n########\n");
        assert_eq!(pushes_from_start(&b, Pruning::SOLVE), pushes_from_start(&b, Pruning::ALL));
    }

    /// A fenced area that holds no goal behind boxes all on goals need never be
    /// opened, so it restricts nothing.
    #[test]
    fn settled_corral_restricts_nothing() {
        let b = board("########\n#    # #\n# @$.* #\n#    # #\n########\n");
        assert_eq!(pushes_from_start(&b, Pruning::SOLVE), pushes_from_start(&b, Pruning::ALL));
    }

    /// Regression: the incremental normalization once started from the vacated
    /// square for pulls, where the player ends on the square it steps back to; in a
    /// corridor the vacated square is cut off from the player.
    #[test]
    fn pull_normalization_starts_from_the_player_in_a_corridor() {
        let b = board("######\n#@ $.#\n######\n");
        let mut sc = Scratch::new(&b);
        // box at the third square, player region {0, 1}; pulling left leaves the
        // player on square 0 and the box on 1, square 2 is behind the box
        let boxes = [2u16];
        let mut got = Vec::new();
        for_each_pull(&b, &mut sc, &boxes, 0, Pruning::NONE, |bx, p, _| got.push((bx.to_vec(), p)));
        assert_eq!(got, vec![(vec![1u16], 0u16)]);
    }

    /// Microban I #153 with one start box moved to `at` (1-based grid column,
    /// row) and the player on `player`: the pushes of the box on `at` that
    /// `pruning` keeps, as target squares.
    fn pushes_in_153(at: (usize, usize), player: (usize, usize), pruning: Pruning) -> Vec<(usize, usize)> {
        let b = shipped("Microban_155.xsb", 153);
        let square = |c: (usize, usize)| (0..b.floor_count() as u16).find(|&f| b.coords(f) == c).unwrap();
        let mut boxes = b.start_boxes[1..].to_vec();
        boxes.push(square(at));
        boxes.sort_unstable();
        let mut sc = Scratch::new(&b);
        let mut to = Vec::new();
        for_each_push(&b, &mut sc, &boxes, square(player), pruning, |_, _, m| {
            if m.from == square(at) {
                to.push(b.coords(b.neighbour(m.from, m.dir as usize)));
            }
        });
        to
    }

    /// Regression for what the k-PG tables caught only at k = 5, as 10^5
    /// patterns: on #153 a box pushed into the goal corner below the goal column
    /// freezes there on a goal, and the column can never be filled (boxes go up
    /// it only pushed from that corner). The frozen-target matching drops it.
    #[test]
    fn box_frozen_below_the_goal_column_is_a_deadlock() {
        // the box beside the corner, the player right of it
        assert!(pushes_in_153((3, 9), (4, 9), Pruning::NONE).contains(&(2, 9)));
        assert!(!pushes_in_153((3, 9), (4, 9), Pruning::ALL).contains(&(2, 9)));
        // a box pushed to the top of the column freezes on a goal too, but every
        // other box can still reach a free goal: kept
        assert_eq!(pushes_in_153((2, 3), (2, 4), Pruning::ALL), vec![(2, 2)]);
    }

    /// Random levels and random states on them: the bitboard PI-corral test
    /// and the square-by-square one (the same board without its bit grid)
    /// find the same corral and the same pushes, and both floods the same
    /// normalized player. Every other level is crowded (a quarter to a half of
    /// the free squares hold boxes), where corrals grow over many areas and
    /// the bitboard test keeps its rows' tests from one area to the next; the
    /// other 400 have up to five boxes.
    #[test]
    fn bitboard_rules_agree_with_the_square_by_square_ones() {
        let mut next = below();
        let (mut states, mut with_corral, mut restricted, mut crowded_corrals, mut stopped) = (0, 0, 0, 0, 0);
        let mut moved = 0;
        for level in 0..800 {
            let crowded = level % 2 == 1;
            let (w, h) = (5 + next(10), 5 + next(8));
            let mut grid = vec![vec![' '; w]; h];
            for (r, row) in grid.iter_mut().enumerate() {
                for (c, sq) in row.iter_mut().enumerate() {
                    if r == 0 || c == 0 || r + 1 == h || c + 1 == w || next(100) < 15 {
                        *sq = '#';
                    }
                }
            }
            let free: Vec<(usize, usize)> =
                (0..h).flat_map(|r| (0..w).map(move |c| (r, c))).filter(|&(r, c)| grid[r][c] == ' ').collect();
            if free.len() < 6 {
                continue;
            }
            let boxes = if crowded {
                (free.len() / 4 + 1 + next(free.len() / 4)).min((free.len() - 1) / 2)
            } else {
                1 + next(5.min(free.len() / 2))
            };
            let mut cells: Vec<(usize, usize)> = free.clone();
            for i in 0..cells.len() {
                let j = i + next(cells.len() - i);
                cells.swap(i, j);
            }
            for &(r, c) in &cells[..boxes] {
                grid[r][c] = '$';
            }
            for &(r, c) in &cells[boxes..2 * boxes] {
                grid[r][c] = '.';
            }
            let (pr, pc) = cells[2 * boxes];
            grid[pr][pc] = '@';
            let text: String = grid.iter().map(|row| row.iter().collect::<String>() + "\n").collect();
            let Ok(level) = parse_one(&text, "t") else { continue };
            let Ok(bits) = Board::new(&level) else { continue };
            let mut plain = bits.clone();
            plain.bits = None;
            assert!(bits.bits.is_some());
            let (mut sb, mut sp) = (Scratch::new(&bits), Scratch::new(&plain));
            let n = bits.floor_count();
            for _ in 0..30 {
                if n < boxes + 1 {
                    break;
                }
                let mut squares: Vec<u16> = (0..n as u16).collect();
                for i in 0..squares.len() {
                    let j = i + next(squares.len() - i);
                    squares.swap(i, j);
                }
                let mut set = squares[..boxes].to_vec();
                set.sort_unstable();
                let player = squares[boxes];
                states += 1;
                // the ring test read off bitboard rows, for every square
                sb.place(&set);
                let g = bits.bits.as_ref().expect("a bit grid");
                for f in 0..n as u16 {
                    assert_eq!(
                        reach::ring_connected_bits(g, &sb.occ_bits, f),
                        reach::ring_connected(&bits, &sb.occ, f),
                        "{}ring of {f}",
                        bits.draw(&set, None)
                    );
                }
                sb.clear(&set);
                // the regions' least squares (the backward seeds), each
                // region flooded once, against every square normalized
                let mut least: Vec<u16> = (0..n as u16)
                    .filter(|f| !set.contains(f))
                    .map(|f| normalize_player(&plain, &mut sp, &set, f))
                    .collect();
                least.sort_unstable();
                least.dedup();
                assert_eq!(goal_states(&bits, &mut sb, &set), least, "{}regions", bits.draw(&set, None));
                assert_eq!(goal_states(&plain, &mut sp, &set), least, "{}regions", bits.draw(&set, None));
                // every push and pull with its normalized player (the
                // incremental normalization: ring test, early-stopped flood)
                let moves = |board: &Board, sc: &mut Scratch| {
                    let mut got = Vec::new();
                    for_each_push(board, sc, &set, player, Pruning::NONE, |b, p, m| {
                        got.push((b.to_vec(), p, m.from, m.dir))
                    });
                    for_each_pull(board, sc, &set, player, Pruning::NONE, |b, p, m| {
                        got.push((b.to_vec(), p, m.from, m.dir))
                    });
                    got
                };
                let got = moves(&bits, &mut sb);
                assert_eq!(got, moves(&plain, &mut sp), "{}moves, player {player}", bits.draw(&set, Some(player)));
                for (b, p, _, _) in &got {
                    assert_eq!(*p, normalize_player(&plain, &mut sp, b, *p), "{}after a move", bits.draw(b, Some(*p)));
                }
                moved += got.len();
                let run = |board: &Board, sc: &mut Scratch| {
                    sc.place(&set);
                    sc.flood_reach(board, player);
                    let normal = sc.normalize(board, player);
                    let found = pi_corral_pushes(board, sc, &set);
                    let best = if found { sc.corral.best.clone() } else { Vec::new() };
                    sc.clear(&set);
                    (normal, found, best, sc.corral.work)
                };
                let got = run(&bits, &mut sb);
                assert_eq!(
                    got,
                    run(&plain, &mut sp),
                    "{}boxes {set:?}, player {player}",
                    bits.draw(&set, Some(player))
                );
                with_corral += got.1 as usize;
                restricted += (got.1 && !got.2.is_empty()) as usize;
                crowded_corrals += (crowded && got.1) as usize;
                stopped += (got.3 > corral::CORRAL_WORK) as usize;
            }
        }
        eprintln!(
            "corral agreement: {states} states, {with_corral} with a corral ({crowded_corrals} crowded), {restricted} restricted, {stopped} stopped at the work limit, {moved} moves"
        );
        assert!(moved > 20_000, "{moved} moves");
        assert!(
            states > 5_000 && with_corral > 200 && restricted > 100 && crowded_corrals > 200 && stopped > 0,
            "{states} {with_corral} {restricted} {crowded_corrals} {stopped}"
        );
    }

    #[test]
    fn goal_states_one_per_region() {
        let b = board("#######\n#@ *  #\n#######\n");
        let mut sc = Scratch::new(&b);
        let players = goal_states(&b, &mut sc, &b.goals.clone());
        assert_eq!(players.len(), 2);
    }
}
