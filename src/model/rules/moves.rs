//! Push and pull generation: every legal move of a state, the prunings run on
//! each (one shared step, `apply_pruned`), successors emitted with their player
//! normalized.

use super::*;

/// Writes `boxes` with `from` replaced by `to` into `out`, keeping it sorted.
#[inline]
pub fn moved_boxes(boxes: &[u16], from: u16, to: u16, out: &mut Vec<u16>) {
    out.clear();
    out.extend_from_slice(boxes);
    let mut i = out.iter().position(|&b| b == from).expect("moved box is in the set");
    out[i] = to;
    while i > 0 && out[i - 1] > out[i] {
        out.swap(i - 1, i);
        i -= 1;
    }
    while i + 1 < out.len() && out[i + 1] < out[i] {
        out.swap(i + 1, i);
        i += 1;
    }
}

/// Calls `emit(new_boxes, new_player_normalized, push)` for every legal push from
/// the state (`boxes` sorted, `player` any square of the player's region).
pub fn for_each_push(
    board: &Board,
    sc: &mut Scratch,
    boxes: &[u16],
    player: u16,
    pruning: Pruning,
    emit: impl FnMut(&[u16], u16, BoxMove),
) {
    for_each_push_kept(board, sc, boxes, player, pruning, |_, _, _, _| true, emit)
}

/// [`for_each_push`] that first asks `keep(new_boxes, moved_from, moved_to,
/// player_square)` (the player square is one of its region, not the normalized one) and drops
/// the push when it answers false. The question comes before the player is
/// normalized, the dearest step of a move, so a pattern check that prunes
/// saves it.
pub fn for_each_push_kept(
    board: &Board,
    sc: &mut Scratch,
    boxes: &[u16],
    player: u16,
    pruning: Pruning,
    mut keep: impl FnMut(&[u16], u16, u16, u16) -> bool,
    mut emit: impl FnMut(&[u16], u16, BoxMove),
) {
    sc.place(boxes);
    sc.flood_reach(board, player);
    let mut next = std::mem::take(&mut sc.next);
    let mut push = |sc: &mut Scratch, b: u16, d: usize| {
        let behind = board.neighbour(b, opposite(d));
        let to = board.neighbour(b, d);
        if behind == NONE || to == NONE || sc.occ[to as usize] || !sc.reachable(behind) {
            return;
        }
        if pruning.dead_squares && board.dead_forward[to as usize] {
            return;
        }
        let m = Move { from: b, to, player: b, dir: d, kind: MoveKind::Push };
        apply_pruned(board, sc, boxes, &mut next, m, pruning, &mut keep, &mut emit);
    };
    if pruning.pi_corrals && pi_corral_pushes(board, sc, boxes) {
        let pushes = std::mem::take(&mut sc.corral.best);
        for &(b, d) in &pushes {
            push(sc, b, d as usize);
        }
        sc.corral.best = pushes;
    } else {
        for &b in boxes {
            for d in 0..DIRS {
                push(sc, b, d);
            }
        }
    }
    sc.next = next;
    sc.clear(boxes);
}

/// Calls `emit(new_boxes, new_player_normalized, pull)` for every legal pull from
/// the state: the player stands next to a box, steps away from it into a free
/// square and drags the box onto the square it left.
pub fn for_each_pull(
    board: &Board,
    sc: &mut Scratch,
    boxes: &[u16],
    player: u16,
    pruning: Pruning,
    emit: impl FnMut(&[u16], u16, BoxMove),
) {
    for_each_pull_kept(board, sc, boxes, player, pruning, |_, _, _, _| true, emit)
}

/// [`for_each_pull`] with a `keep` question before normalization, as in
/// [`for_each_push_kept`].
pub fn for_each_pull_kept(
    board: &Board,
    sc: &mut Scratch,
    boxes: &[u16],
    player: u16,
    pruning: Pruning,
    mut keep: impl FnMut(&[u16], u16, u16, u16) -> bool,
    mut emit: impl FnMut(&[u16], u16, BoxMove),
) {
    sc.place(boxes);
    sc.flood_reach(board, player);
    let mut next = std::mem::take(&mut sc.next);
    for &b in boxes {
        for d in 0..DIRS {
            let to = board.neighbour(b, d); // where the player stands, and the box goes
            if to == NONE || !sc.reachable(to) {
                continue;
            }
            let step = board.neighbour(to, d); // where the player steps back to
            if step == NONE || sc.occ[step as usize] {
                continue;
            }
            if pruning.dead_squares && board.dead_backward[to as usize] {
                continue;
            }
            let m = Move { from: b, to, player: step, dir: d, kind: MoveKind::Pull };
            apply_pruned(board, sc, boxes, &mut next, m, pruning, &mut keep, &mut emit);
        }
    }
    sc.next = next;
    sc.clear(boxes);
}

/// A legal push or pull: the box goes from `from` to `to` (one step in `dir`)
/// and the player ends on `player`.
#[derive(Clone, Copy)]
pub(super) struct Move {
    pub(super) from: u16,
    pub(super) to: u16,
    pub(super) player: u16,
    pub(super) dir: usize,
    pub(super) kind: MoveKind,
}

/// Makes the move on the occupancy, runs the state prunings and the caller's
/// `keep` on the new box set, emits the successor with its normalized player
/// unless pruned, and takes the move back. Push and pull generation share it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn apply_pruned(
    board: &Board,
    sc: &mut Scratch,
    boxes: &[u16],
    next: &mut Vec<u16>,
    m: Move,
    pruning: Pruning,
    keep: &mut impl FnMut(&[u16], u16, u16, u16) -> bool,
    emit: &mut impl FnMut(&[u16], u16, BoxMove),
) {
    sc.set_occ(m.from, false);
    sc.set_occ(m.to, true);
    moved_boxes(boxes, m.from, m.to, next);
    let dead = pruning.freeze && frozen_dead(board, sc, next, m.to, m.kind);
    if !dead && keep(next, m.from, m.to, m.player) {
        let p = sc.normalize_after_move(board, m.from, m.to, m.player);
        emit(next, p, BoxMove { from: m.from, dir: m.dir as u8 });
    }
    sc.set_occ(m.to, false);
    sc.set_occ(m.from, true);
}
