//! An independent reference for push-optimal lengths: a plain breadth-first
//! search over the level's XSB text, written here from the rules of the game
//! alone. It shares nothing with the crate (no parser, no board analysis, no
//! move generator, no dead squares, no pruning), so a bug in any of those shows
//! up as a disagreement instead of being copied into the expected answer.
//!
//! A state is the set of box squares plus the player's square. The player's
//! walk costs no pushes, so states whose player squares lie in one walkable
//! region are the same state for push counting; the search names that region by
//! its lowest square, found by its own flood.

use std::collections::HashSet;

/// The grid of one level: walls, goals, the start's boxes and player.
struct Grid {
    width: usize,
    wall: Vec<bool>,
    goal: Vec<u64>,
    boxes: Vec<u64>,
    player: usize,
}

fn bit(set: &[u64], c: usize) -> bool {
    set[c / 64] >> (c % 64) & 1 == 1
}

fn flip(set: &mut [u64], c: usize) {
    set[c / 64] ^= 1 << (c % 64);
}

/// Reads one level. Squares outside the text count as walls, so an open level
/// keeps the player inside the grid.
fn grid(text: &str) -> Grid {
    let rows: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let width = rows.iter().map(|r| r.chars().count()).max().unwrap_or(0) + 2;
    let height = rows.len() + 2;
    let words = (width * height).div_ceil(64);
    let mut g =
        Grid { width, wall: vec![true; width * height], goal: vec![0; words], boxes: vec![0; words], player: 0 };
    for (y, row) in rows.iter().enumerate() {
        for (x, ch) in row.chars().enumerate() {
            let c = (y + 1) * width + x + 1;
            g.wall[c] = ch == '#';
            if matches!(ch, '.' | '*' | '+') {
                flip(&mut g.goal, c);
            }
            if matches!(ch, '$' | '*') {
                flip(&mut g.boxes, c);
            }
            if matches!(ch, '@' | '+') {
                g.player = c;
            }
        }
    }
    g
}

/// The squares the player reaches from `from` without pushing, marked in `seen`
/// with `mark`; returns them.
fn walk(g: &Grid, boxes: &[u64], from: usize, seen: &mut [u32], mark: u32, out: &mut Vec<usize>) {
    out.clear();
    seen[from] = mark;
    out.push(from);
    let mut i = 0;
    while i < out.len() {
        let c = out[i];
        i += 1;
        for n in [c - 1, c + 1, c - g.width, c + g.width] {
            if !g.wall[n] && !bit(boxes, n) && seen[n] != mark {
                seen[n] = mark;
                out.push(n);
            }
        }
    }
}

/// The fewest pushes that put every box on a goal, or `None` when no sequence
/// of pushes does (every state reachable from the start was visited).
pub fn reference_pushes(text: &str) -> Option<usize> {
    let g = grid(text);
    let solved = |boxes: &[u64]| boxes == g.goal.as_slice();
    let mut seen = vec![0u32; g.wall.len()];
    let mut mark = 0u32;
    let mut reach = Vec::new();
    let mut region = Vec::new();
    let mut lowest = |boxes: &[u64], from: usize, mark: &mut u32, seen: &mut [u32]| {
        *mark += 1;
        walk(&g, boxes, from, seen, *mark, &mut region);
        *region.iter().min().unwrap()
    };
    let start = (g.boxes.clone(), lowest(&g.boxes, g.player, &mut mark, &mut seen));
    if solved(&start.0) {
        return Some(0);
    }
    let mut known: HashSet<(Vec<u64>, usize)> = HashSet::from([start.clone()]);
    let mut layer = vec![start];
    let dirs = [1isize, -1, g.width as isize, -(g.width as isize)];
    for depth in 1.. {
        let mut next = Vec::new();
        for (boxes, player) in &layer {
            mark += 1;
            walk(&g, boxes, *player, &mut seen, mark, &mut reach);
            for &c in &reach {
                for d in dirs {
                    let b = (c as isize + d) as usize;
                    let to = (b as isize + d) as usize;
                    if !bit(boxes, b) || g.wall[to] || bit(boxes, to) {
                        continue;
                    }
                    let mut moved = boxes.clone();
                    flip(&mut moved, b);
                    flip(&mut moved, to);
                    if solved(&moved) {
                        return Some(depth);
                    }
                    let p = lowest(&moved, b, &mut mark, &mut seen);
                    let s = (moved, p);
                    if !known.contains(&s) {
                        known.insert(s.clone());
                        next.push(s);
                    }
                }
            }
        }
        if next.is_empty() {
            return None;
        }
        layer = next;
    }
    unreachable!("the loop returns")
}

/// The fewest pushes and, among the solutions with that many, the fewest
/// moves (steps of the player, pushes included), or `None` when nothing
/// solves the level: Dijkstra over the box squares plus the player's exact
/// square, a step costing (0, 1) and a push (1, 1), compared in that order.
pub fn reference_pushes_moves(text: &str) -> Option<(usize, usize)> {
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, HashMap};
    let g = grid(text);
    let solved = |boxes: &[u64]| boxes == g.goal.as_slice();
    let mut best: HashMap<(Vec<u64>, usize), (usize, usize)> = HashMap::new();
    let mut heap = BinaryHeap::new();
    best.insert((g.boxes.clone(), g.player), (0, 0));
    heap.push(Reverse(((0usize, 0usize), g.boxes.clone(), g.player)));
    let dirs = [1isize, -1, g.width as isize, -(g.width as isize)];
    while let Some(Reverse((cost, boxes, player))) = heap.pop() {
        if best.get(&(boxes.clone(), player)).is_some_and(|&c| c < cost) {
            continue;
        }
        if solved(&boxes) {
            return Some(cost);
        }
        for d in dirs {
            let to = (player as isize + d) as usize;
            if g.wall[to] {
                continue;
            }
            let (next, pushes) = if bit(&boxes, to) {
                let beyond = (to as isize + d) as usize;
                if g.wall[beyond] || bit(&boxes, beyond) {
                    continue;
                }
                let mut moved = boxes.clone();
                flip(&mut moved, to);
                flip(&mut moved, beyond);
                (moved, cost.0 + 1)
            } else {
                (boxes.clone(), cost.0)
            };
            let c = (pushes, cost.1 + 1);
            let key = (next, to);
            if best.get(&key).is_none_or(|&old| c < old) {
                best.insert(key.clone(), c);
                heap.push(Reverse((c, key.0, to)));
            }
        }
    }
    None
}

#[test]
fn the_reference_solves_hand_checked_levels() {
    // one push
    assert_eq!(reference_pushes("#####\n#@$.#\n#####\n"), Some(1));
    // already solved
    assert_eq!(reference_pushes("#####\n#@* #\n#####\n"), Some(0));
    // a box in a corner off its goal
    assert_eq!(reference_pushes("#####\n#$ @#\n#  .#\n#####\n"), None);
    // a push to the left, then the player walks around to push it back three
    assert_eq!(reference_pushes("#######\n#     #\n# .$@ #\n#     #\n#######\n"), Some(1));
    assert_eq!(reference_pushes("#######\n#     #\n#.@ $ #\n#     #\n#######\n"), Some(3));
    // two boxes in a corridor: the player reaches only the near one, which the far one stops
    assert_eq!(reference_pushes("########\n#@$ $..#\n########\n"), None);
    // two boxes side by side in a room: each pushed up once
    assert_eq!(reference_pushes("######\n#    #\n# .. #\n# $$ #\n#  @ #\n######\n"), Some(2));
    // the player walled off from the box
    assert_eq!(reference_pushes("#######\n#@#$ .#\n#######\n"), None);
}

#[test]
fn the_lexicographic_reference_counts_pushes_then_moves() {
    // one push, one step each
    assert_eq!(reference_pushes_moves("#####\n#@$.#\n#####\n"), Some((1, 1)));
    assert_eq!(reference_pushes_moves("#####\n#@* #\n#####\n"), Some((0, 0)));
    assert_eq!(reference_pushes_moves("#####\n#$ @#\n#  .#\n#####\n"), None);
    // two boxes: a push, one step back, a push
    assert_eq!(reference_pushes_moves("#######\n#.$@$.#\n#######\n"), Some((2, 3)));
    // the near box first: a push, two steps back, a push (the far one first
    // walks a step more)
    assert_eq!(reference_pushes_moves("########\n#.$ @$.#\n########\n"), Some((2, 4)));
}
