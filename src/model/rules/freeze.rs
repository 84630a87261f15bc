//! Freeze deadlocks: a box that can never move again off its target, for pushes
//! (blocked on both axes) and for pulls (never pullable again).

use super::*;

/// Recursion budget for the freeze tests: past it we answer "not frozen", which
/// only weakens pruning, never makes it unsound.
pub(super) const FREEZE_BUDGET: u32 = 4096;

/// Forward freeze test after a push onto `moved` (occupancy in `sc.occ`): true when
/// the moved box can never be pushed again and it or a box freezing it is off goal.
pub fn push_freeze_deadlock(board: &Board, sc: &mut Scratch, moved: u16) -> bool {
    sc.frozen.clear();
    sc.budget = FREEZE_BUDGET;
    if !push_frozen(board, sc, moved) {
        return false;
    }
    sc.frozen.iter().any(|&b| !board.is_goal[b as usize])
}

pub(super) fn push_frozen(board: &Board, sc: &mut Scratch, b: u16) -> bool {
    // a box is frozen when it is blocked on both axes
    frozen_with(sc, b, |sc| push_axis_blocked(board, sc, b, 0) && push_axis_blocked(board, sc, b, 1))
}

/// The frame of both freeze tests for the box on `b`: not frozen once the
/// budget is spent; else `b` is held as a wall while `blocked` decides, and
/// when it answers frozen `b` joins `sc.frozen` after the boxes found frozen
/// on the way, which are dropped again when it does not.
pub(super) fn frozen_with(sc: &mut Scratch, b: u16, blocked: impl FnOnce(&mut Scratch) -> bool) -> bool {
    if sc.budget == 0 {
        return false;
    }
    sc.budget -= 1;
    sc.tmp_wall[b as usize] = true;
    let mark = sc.frozen.len();
    let frozen = blocked(sc);
    sc.tmp_wall[b as usize] = false;
    if frozen {
        sc.frozen.push(b);
    } else {
        sc.frozen.truncate(mark);
    }
    frozen
}

/// Axis 0 is vertical (up/down), 1 horizontal (right/left).
pub(super) fn push_axis_blocked(board: &Board, sc: &mut Scratch, b: u16, axis: usize) -> bool {
    let a = board.neighbour(b, axis);
    let c = board.neighbour(b, axis + 2);
    if a == NONE || c == NONE || sc.tmp_wall[a as usize] || sc.tmp_wall[c as usize] {
        return true;
    }
    if board.dead_forward[a as usize] && board.dead_forward[c as usize] {
        return true;
    }
    (sc.occ[a as usize] && push_frozen(board, sc, a)) || (sc.occ[c as usize] && push_frozen(board, sc, c))
}

/// Backward freeze test after a pull onto `moved`: true when the moved box can never
/// be pulled again and it or a box holding it is off a start square, so the state
/// can never be reached from the start.
pub fn pull_freeze_deadlock(board: &Board, sc: &mut Scratch, moved: u16) -> bool {
    sc.frozen.clear();
    sc.budget = FREEZE_BUDGET;
    if !pull_frozen(board, sc, moved) {
        return false;
    }
    sc.frozen.iter().any(|&b| !board.is_start_box[b as usize])
}

pub(super) fn pull_frozen(board: &Board, sc: &mut Scratch, b: u16) -> bool {
    frozen_with(sc, b, |sc| {
        // a pull onto two empty squares settles it without a call deeper: in
        // a crowd the test otherwise goes down through the boxes of the first
        // directions before it looks at a free one (the answer is the same;
        // the budget is spent no faster, so it runs out nowhere it did not
        // before)
        let empty = |(to, step): (u16, u16)| !sc.occ[to as usize] && !sc.occ[step as usize];
        if (0..DIRS).any(|d| pull_squares(board, sc, b, d).is_some_and(empty)) {
            return false;
        }
        !(0..DIRS).any(|d| pullable(board, sc, b, d))
    })
}

/// The squares a pull of the box on `b` in direction `d` needs (where the
/// player stands, then where the player steps back to), unless one is a wall
/// or a square the test holds as one, or the box's new square is dead;
/// whether boxes on them can move is left to the caller.
pub(super) fn pull_squares(board: &Board, sc: &Scratch, b: u16, d: usize) -> Option<(u16, u16)> {
    let to = board.neighbour(b, d);
    if to == NONE || sc.tmp_wall[to as usize] || board.dead_backward[to as usize] {
        return None;
    }
    let step = board.neighbour(to, d);
    if step == NONE || sc.tmp_wall[step as usize] {
        return None;
    }
    Some((to, step))
}

fn pullable(board: &Board, sc: &mut Scratch, b: u16, d: usize) -> bool {
    let Some((to, step)) = pull_squares(board, sc, b, d) else {
        return false;
    };
    let blocked_at = |sc: &mut Scratch, sq: u16| sc.occ[sq as usize] && pull_frozen(board, sc, sq);
    !blocked_at(sc, to) && !blocked_at(sc, step)
}
