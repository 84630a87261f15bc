//! Solutions: turning a push sequence into LURD (shortest player walks), and
//! replaying a LURD string on a level to verify it.

use super::board::{Board, DIRS, NONE, PUSH_LETTERS, WALK_LETTERS};
use super::level::Level;
use super::rules::BoxMove;
use serde::Serialize;

/// Builds the LURD string for a sequence of pushes from the start position:
/// before each push the player takes a shortest walk to the square behind the box.
/// Returns `None` if a push is not possible (the pushes do not form a solution path).
pub fn pushes_to_lurd(board: &Board, pushes: &[BoxMove]) -> Option<String> {
    let n = board.floor_count();
    let mut occ = vec![false; n];
    for &b in &board.start_boxes {
        occ[b as usize] = true;
    }
    let mut player = board.start_player;
    let mut out = String::new();
    let mut prev = vec![(NONE, 0u8); n];
    let mut queue = Vec::with_capacity(n);
    for m in pushes {
        let d = m.dir as usize;
        let to = board.neighbour(m.from, d);
        let behind = m.behind(board);
        if !occ[m.from as usize] || to == NONE || behind == NONE || occ[to as usize] {
            return None;
        }
        // BFS from the player to `behind`, recording how each square was entered
        prev.iter_mut().for_each(|p| *p = (NONE, 0));
        queue.clear();
        queue.push(player);
        prev[player as usize] = (player, 0);
        let mut i = 0;
        while i < queue.len() && prev[behind as usize].0 == NONE {
            let f = queue[i];
            i += 1;
            for dd in 0..DIRS {
                let g = board.neighbour(f, dd);
                if g != NONE && !occ[g as usize] && prev[g as usize].0 == NONE {
                    prev[g as usize] = (f, dd as u8);
                    queue.push(g);
                }
            }
        }
        if prev[behind as usize].0 == NONE {
            return None;
        }
        let mut walk = Vec::new();
        let mut f = behind;
        while f != player {
            let (p, dd) = prev[f as usize];
            walk.push(WALK_LETTERS[dd as usize]);
            f = p;
        }
        out.extend(walk.iter().rev());
        out.push(PUSH_LETTERS[d]);
        occ[m.from as usize] = false;
        occ[to as usize] = true;
        player = m.from;
    }
    Some(out)
}

/// Fewest steps the player needs from `from` to every floor square with the
/// boxes on `boxes` standing still (`u32::MAX`: out of reach), into `dist`;
/// `queue` is scratch. The moves pass prices each push with it.
pub fn walk_distances(board: &Board, boxes: &[u16], from: u16, dist: &mut Vec<u32>, queue: &mut Vec<u16>) {
    dist.clear();
    dist.resize(board.floor_count(), u32::MAX);
    for &b in boxes {
        dist[b as usize] = u32::MAX - 1; // a wall for the walk
    }
    queue.clear();
    queue.push(from);
    dist[from as usize] = 0;
    let mut i = 0;
    while i < queue.len() {
        let f = queue[i];
        i += 1;
        for d in 0..DIRS {
            let g = board.neighbour(f, d);
            if g != NONE && dist[g as usize] == u32::MAX {
                dist[g as usize] = dist[f as usize] + 1;
                queue.push(g);
            }
        }
    }
    for &b in boxes {
        dist[b as usize] = u32::MAX;
    }
}

/// The outcome of replaying a solution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub valid: bool,
    pub pushes: usize,
    pub moves: usize,
    /// The failing step: 1-based, counting the letters (not whitespace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Letters whose case says the wrong thing (a push written lowercase, a
    /// walk uppercase): the replay goes by the board, so they do not make the
    /// solution invalid, but other programs may read it differently.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// Replays `lurd` on the level's grid (whitespace, such as the line breaks of
/// a solution copied from a file, is skipped: step N is the N-th letter). Every move into a box pushes it, whatever the letter's case; a
/// letter of the wrong case is named in the verdict's warning.
pub fn verify(level: &Level, lurd: &str) -> Verdict {
    let w = level.width;
    let mut boxes = level.boxes.clone();
    let mut player = level.player;
    let (mut pushes, mut moves) = (0, 0);
    // (count, first step and letter) of letters whose case disagrees with the board
    let mut miscased: (usize, Option<(usize, char, bool)>) = (0, None);
    let fail = |step: usize, pushes, moves, reason: String| Verdict {
        valid: false,
        pushes,
        moves,
        step: Some(step),
        reason: Some(reason),
        warning: None,
    };
    let at = |c: usize| format!("column {}, row {}", c % w + 1, c / w + 1);
    let mut step = 0;
    for ch in lurd.chars() {
        if ch.is_whitespace() {
            continue;
        }
        step += 1;
        let d = match ch.to_ascii_lowercase() {
            'u' => 0,
            'r' => 1,
            'd' => 2,
            'l' => 3,
            _ => return fail(step, pushes, moves, format!("unknown move character {ch:?}")),
        };
        let Some(next) = step_cell(level, player, d) else {
            return fail(step, pushes, moves, format!("the player walks off the map at {}", at(player)));
        };
        if level.walls[next] {
            return fail(step, pushes, moves, format!("the player walks into the wall at {}", at(next)));
        }
        let pushed = boxes[next];
        if pushed {
            let Some(beyond) = step_cell(level, next, d) else {
                return fail(step, pushes, moves, format!("the box at {} is pushed off the map", at(next)));
            };
            if level.walls[beyond] {
                return fail(step, pushes, moves, format!("the box at {} is pushed into a wall", at(next)));
            }
            if boxes[beyond] {
                return fail(step, pushes, moves, format!("the box at {} is pushed into another box", at(next)));
            }
            boxes[next] = false;
            boxes[beyond] = true;
            pushes += 1;
        }
        if ch.is_ascii_uppercase() != pushed {
            miscased.0 += 1;
            miscased.1.get_or_insert((step, ch, pushed));
        }
        player = next;
        moves += 1;
    }
    let off = (0..boxes.len()).filter(|&c| boxes[c] && !level.goals[c]).count();
    if off > 0 {
        let empty = moves == 0;
        return Verdict {
            valid: false,
            pushes,
            moves,
            step: (!empty).then_some(step),
            reason: Some(if empty {
                format!("the solution has no moves and {off} box(es) stand off goals")
            } else {
                format!("the final position is not solved: {off} box(es) off goals")
            }),
            warning: None,
        };
    }
    Verdict { valid: true, pushes, moves, step: None, reason: None, warning: miscase_warning(miscased) }
}

/// The warning for letters of the wrong case: how many, and the first.
fn miscase_warning((count, first): (usize, Option<(usize, char, bool)>)) -> Option<String> {
    let (step, ch, pushed) = first?;
    let what = if pushed { "pushes a box but is lowercase (a walk)" } else { "walks but is uppercase (a push)" };
    let more = if count > 1 { format!("; {count} letters in all have the wrong case") } else { String::new() };
    Some(format!("step {step}: {ch:?} {what}{more}"))
}

fn step_cell(level: &Level, c: usize, d: usize) -> Option<usize> {
    let (x, y) = (c % level.width, c / level.width);
    let (nx, ny) = match d {
        0 => (x, y.checked_sub(1)?),
        1 => (x + 1, y),
        2 => (x, y + 1),
        _ => (x.checked_sub(1)?, y),
    };
    (nx < level.width && ny < level.height).then(|| ny * level.width + nx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::level::parse_one;

    #[test]
    fn verify_counts_and_failures() {
        let l = parse_one("######\n#@$ .#\n######\n", "t").unwrap();
        let v = verify(&l, "RR");
        assert!(v.valid);
        assert_eq!((v.pushes, v.moves), (2, 2));
        let v = verify(&l, "R");
        assert!(!v.valid);
        assert!(v.reason.unwrap().contains("not solved"));
        let v = verify(&l, "RRR");
        assert_eq!(v.step, Some(3));
        assert!(v.reason.unwrap().contains("wall"));
        let v = verify(&l, "Rx");
        assert_eq!(v.step, Some(2));
        let v = verify(&l, "u");
        assert_eq!(v.step, Some(1));
    }

    #[test]
    fn steps_count_letters_not_the_whitespace_between_them() {
        // "r R R U" failed at "step 7", its 4th move
        let l = parse_one("#######\n#@ $ .#\n#######\n", "t").unwrap();
        let v = verify(&l, "r R\nR U");
        assert_eq!((v.step, v.moves), (Some(4), 3));
        assert!(v.reason.unwrap().contains("wall"));
        assert_eq!(verify(&l, "r\nR").step, Some(2), "not solved after the last letter");
    }

    #[test]
    fn an_empty_solution_is_not_step_0() {
        let l = parse_one("######\n#@$ .#\n######\n", "t").unwrap();
        for empty in ["", "  \n"] {
            let v = verify(&l, empty);
            assert!(!v.valid);
            assert_eq!(v.step, None, "no step to point at");
            assert!(v.reason.unwrap().contains("no moves"));
        }
    }

    #[test]
    fn letters_of_the_wrong_case_are_warned_about_not_refused() {
        let l = parse_one("#######\n#@ $ .#\n#######\n", "t").unwrap();
        assert_eq!(verify(&l, "rRR").warning, None);
        let v = verify(&l, "rrR");
        assert!(v.valid);
        assert_eq!((v.pushes, v.moves), (2, 3));
        assert_eq!(v.warning.as_deref(), Some("step 2: 'r' pushes a box but is lowercase (a walk)"));
        let v = verify(&l, "RRr");
        assert!(v.valid);
        let w = v.warning.unwrap();
        assert!(w.starts_with("step 1: 'R' walks but is uppercase (a push)"), "{w}");
        assert!(w.ends_with("2 letters in all have the wrong case"), "{w}");
    }

    #[test]
    fn lurd_from_pushes_replays() {
        let l = parse_one("#######\n#@ $ .#\n#     #\n#######\n", "t").unwrap();
        let b = Board::new(&l).unwrap();
        let from = b.start_boxes[0];
        let m1 = BoxMove { from, dir: 1 };
        let m2 = BoxMove { from: b.neighbour(from, 1), dir: 1 };
        let lurd = pushes_to_lurd(&b, &[m1, m2]).unwrap();
        assert_eq!(lurd, "rRR");
        assert!(verify(&l, &lurd).valid);
    }
}
