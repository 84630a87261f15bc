//! Push and pull generation with player normalization, the freeze-deadlock tests
//! and the frozen-target matching.
//!
//! A state is a sorted box list plus the normalized player square: the smallest floor
//! index the player can reach. A forward move is a walk plus one push; a backward
//! move is a walk plus one pull. Every function here works on caller-owned scratch
//! buffers so the engine can run them on many threads without allocating.

use super::board::{opposite, Board, DIRS, NONE};

/// One push (forward) or pull (backward): the box moved from `from` one step in `dir`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoxMove {
    pub from: u16,
    pub dir: u8,
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
    /// What a solve uses: every state pruning plus the PI-corral restriction.
    pub const SOLVE: Pruning = Pruning { pi_corrals: true, ..Pruning::ALL };
}

/// Per-thread buffers for generation.
#[derive(Debug, Clone)]
pub struct Scratch {
    /// Box occupancy by floor index.
    pub occ: Vec<bool>,
    mark: Vec<u32>,
    stamp: u32,
    queue: Vec<u16>,
    /// Squares reachable by the player in the current state (valid after `reach`).
    reach_stamp: u32,
    reach_mark: Vec<u32>,
    /// The two smallest squares of the reach region (`NONE` when absent).
    reach_min: [u16; 2],
    tmp_wall: Vec<bool>,
    frozen: Vec<u16>,
    budget: u32,
    matching: Matching,
    corral: Corrals,
    pub boxes: Vec<u16>,
    pub next: Vec<u16>,
}

impl Scratch {
    pub fn new(board: &Board) -> Scratch {
        let n = board.floor_count();
        Scratch {
            occ: vec![false; n],
            mark: vec![0; n],
            stamp: 0,
            queue: Vec::with_capacity(n),
            reach_stamp: 0,
            reach_mark: vec![0; n],
            reach_min: [NONE; 2],
            tmp_wall: vec![false; n],
            frozen: Vec::new(),
            budget: 0,
            matching: Matching::default(),
            corral: Corrals { mark: vec![0; n], fence_mark: vec![0; n], ..Corrals::default() },
            boxes: Vec::with_capacity(board.box_count()),
            next: Vec::with_capacity(board.box_count()),
        }
    }

    fn bump(stamp: &mut u32, mark: &mut [u32]) -> u32 {
        *stamp = stamp.wrapping_add(1);
        if *stamp == 0 {
            mark.iter_mut().for_each(|m| *m = 0);
            *stamp = 1;
        }
        *stamp
    }

    /// Floods the player's region from `from` over free squares, marking it in the
    /// reach buffer and keeping its two smallest squares.
    fn flood_reach(&mut self, board: &Board, from: u16) {
        let s = Self::bump(&mut self.reach_stamp, &mut self.reach_mark);
        self.queue.clear();
        self.queue.push(from);
        self.reach_mark[from as usize] = s;
        let mut min = [from, NONE];
        let mut i = 0;
        while i < self.queue.len() {
            let f = self.queue[i];
            i += 1;
            for d in 0..DIRS {
                let g = board.neighbour(f, d);
                if g != NONE && !self.occ[g as usize] && self.reach_mark[g as usize] != s {
                    self.reach_mark[g as usize] = s;
                    if g < min[0] {
                        min = [g, min[0]];
                    } else if g < min[1] {
                        min[1] = g;
                    }
                    self.queue.push(g);
                }
            }
        }
        self.reach_min = min;
    }

    /// The normalized player after a move that freed `vacated` and filled `filled`,
    /// leaving the player on `player` (occupancy already updated; the reach buffer
    /// still holds the region `R` before the move, which contains `player` unless
    /// `player == vacated`, and contains `filled` for every pull).
    ///
    /// Let `A` be the squares of `R - filled + vacated` connected to `player`. If
    /// `filled` was outside `R`, or its free neighbours (including `vacated`) stay
    /// connected around its 8-neighbour ring, `A` is all of `R - filled + vacated`
    /// and its minimum follows from the two smallest squares of `R`, no flood.
    /// Otherwise a search from `player` inside `R + vacated` stops as soon as it has
    /// met every free neighbour of `filled` (nothing was cut off), or ends having
    /// found `A` exactly. If `A` holds `vacated`, the regions on its other sides that
    /// were foreign to `R` join; they are flooded on their own.
    fn normalize_after_move(&mut self, board: &Board, vacated: u16, filled: u16, player: u16) -> u16 {
        let s = Self::bump(&mut self.stamp, &mut self.mark);
        let filled_in_region = self.reachable(filled);
        let mut min = NONE;
        let mut has_vacated = true;
        let whole = !filled_in_region || ring_connected(board, &self.occ, filled) || {
            let mut targets = [NONE; 4];
            let mut left = 0;
            for d in 0..DIRS {
                let g = board.neighbour(filled, d);
                if g != NONE && !self.occ[g as usize] && (g == vacated || self.reachable(g)) && g != player {
                    targets[left] = g;
                    left += 1;
                }
            }
            self.queue.clear();
            self.queue.push(player);
            self.mark[player as usize] = s;
            let mut part_min = player;
            let mut i = 0;
            while i < self.queue.len() && left > 0 {
                let f = self.queue[i];
                i += 1;
                for dd in 0..DIRS {
                    let h = board.neighbour(f, dd);
                    if h != NONE
                        && !self.occ[h as usize]
                        && (h == vacated || self.reachable(h))
                        && self.mark[h as usize] != s
                    {
                        self.mark[h as usize] = s;
                        part_min = part_min.min(h);
                        if targets[..4].contains(&h) {
                            left -= 1;
                        }
                        self.queue.push(h);
                    }
                }
            }
            if left > 0 {
                // the search ran out: `A` is exactly what it visited
                min = part_min;
                has_vacated = self.mark[vacated as usize] == s;
            }
            left == 0
        };
        if whole {
            let rest =
                if filled_in_region && filled == self.reach_min[0] { self.reach_min[1] } else { self.reach_min[0] };
            min = rest.min(vacated);
        }
        if has_vacated {
            // foreign regions joined through `vacated`: disjoint from R before the move
            for d in 0..DIRS {
                let g = board.neighbour(vacated, d);
                if g == NONE || g == filled || self.occ[g as usize] || self.reachable(g) || self.mark[g as usize] == s {
                    continue;
                }
                self.queue.clear();
                self.queue.push(g);
                self.mark[g as usize] = s;
                let mut i = 0;
                while i < self.queue.len() {
                    let f = self.queue[i];
                    i += 1;
                    min = min.min(f);
                    for dd in 0..DIRS {
                        let h = board.neighbour(f, dd);
                        if h != NONE && h != vacated && !self.occ[h as usize] && self.mark[h as usize] != s {
                            self.mark[h as usize] = s;
                            self.queue.push(h);
                        }
                    }
                }
            }
        }
        debug_assert_eq!(min, self.normalize(board, player), "incremental normalization disagrees with the flood");
        min
    }

    #[inline]
    fn reachable(&self, f: u16) -> bool {
        self.reach_mark[f as usize] == self.reach_stamp
    }

    /// The normalized square of the region containing `from` (a second flood that
    /// leaves the reach buffer intact).
    pub fn normalize(&mut self, board: &Board, from: u16) -> u16 {
        let s = Self::bump(&mut self.stamp, &mut self.mark);
        self.queue.clear();
        self.queue.push(from);
        self.mark[from as usize] = s;
        let mut min = from;
        let mut i = 0;
        while i < self.queue.len() {
            let f = self.queue[i];
            i += 1;
            for d in 0..DIRS {
                let g = board.neighbour(f, d);
                if g != NONE && !self.occ[g as usize] && self.mark[g as usize] != s {
                    if g < min {
                        min = g;
                        if min == 0 {
                            return 0;
                        }
                    }
                    self.mark[g as usize] = s;
                    self.queue.push(g);
                }
            }
        }
        min
    }

    fn place(&mut self, boxes: &[u16]) {
        for &b in boxes {
            self.occ[b as usize] = true;
        }
    }

    fn clear(&mut self, boxes: &[u16]) {
        for &b in boxes {
            self.occ[b as usize] = false;
        }
    }
}

/// Are the free 4-neighbours of `f` all in one run of free squares around its
/// 8-neighbour ring? Then making `f` a wall cannot disconnect them.
fn ring_connected(board: &Board, occ: &[bool], f: u16) -> bool {
    let free = |g: u16| g != NONE && !occ[g as usize];
    let [n, e, s, w] = [0, 1, 2, 3].map(|d| board.neighbour(f, d));
    // a diagonal square, reached through whichever orthogonal neighbour is floor
    let diag = |a: u16, da: usize, b: u16, db: usize| {
        if a != NONE {
            board.neighbour(a, da)
        } else if b != NONE {
            board.neighbour(b, db)
        } else {
            NONE
        }
    };
    let ring = [n, diag(n, 1, e, 0), e, diag(e, 2, s, 1), s, diag(s, 3, w, 2), w, diag(w, 0, n, 3)];
    let open: [bool; 8] = ring.map(free);
    // count runs of open squares (circularly) that hold an orthogonal neighbour
    let mut runs = 0;
    let start = match (0..8).find(|&i| !open[i]) {
        Some(i) => i,
        None => return true,
    };
    let mut in_run = false;
    let mut run_has_orth = false;
    for k in 1..=8 {
        let i = (start + k) % 8;
        if open[i] {
            in_run = true;
            run_has_orth |= i % 2 == 0;
        } else {
            if in_run && run_has_orth {
                runs += 1;
            }
            in_run = false;
            run_has_orth = false;
        }
    }
    runs <= 1
}

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

/// The normalized player square for a box set and a player square.
pub fn normalize_player(board: &Board, sc: &mut Scratch, boxes: &[u16], player: u16) -> u16 {
    sc.place(boxes);
    let n = sc.normalize(board, player);
    sc.clear(boxes);
    n
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
    for_each_push_kept(board, sc, boxes, player, pruning, |_, _, _| true, emit)
}

/// [`for_each_push`] that first asks `keep(new_boxes, moved_to, player_square)`
/// (the player square is one of its region, not the normalized one) and drops
/// the push when it answers false. The question comes before the player is
/// normalized, the dearest step of a move, so a pattern check that prunes
/// saves it.
pub fn for_each_push_kept(
    board: &Board,
    sc: &mut Scratch,
    boxes: &[u16],
    player: u16,
    pruning: Pruning,
    mut keep: impl FnMut(&[u16], u16, u16) -> bool,
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
    for_each_pull_kept(board, sc, boxes, player, pruning, |_, _, _| true, emit)
}

/// [`for_each_pull`] with a `keep` question before normalization, as in
/// [`for_each_push_kept`].
pub fn for_each_pull_kept(
    board: &Board,
    sc: &mut Scratch,
    boxes: &[u16],
    player: u16,
    pruning: Pruning,
    mut keep: impl FnMut(&[u16], u16, u16) -> bool,
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

/// Buffers of the PI-corral search.
#[derive(Debug, Clone, Default)]
struct Corrals {
    /// Per square: the stamp of the area that holds it; the current state's areas
    /// have stamps `first..`, area `i` has `first + i`.
    mark: Vec<u32>,
    /// Per square: `fence_stamp` when the box on it fences the corral under test.
    fence_mark: Vec<u32>,
    stamp: u32,
    first: u32,
    fence_stamp: u32,
    /// Per area: whether it holds a goal, and its fence as a range of `fences`.
    areas: Vec<(bool, u32, u32)>,
    fences: Vec<u16>,
    /// The areas of the corral under test, and a flag per area.
    union: Vec<usize>,
    in_union: Vec<bool>,
    fence: Vec<u16>,
    queue: Vec<u16>,
    pushes: Vec<(u16, u8)>,
    /// The pushes of the chosen corral (valid after `pi_corral_pushes` says true).
    best: Vec<(u16, u8)>,
}

/// Looks for a PI-corral (Meger's pruning, in YASS) in the current state
/// (occupancy placed, player region flooded) and leaves the legal pushes into the
/// corral with the fewest of them in `sc.corral.best`. False when there is none.
///
/// A corral here is a set `A` of free squares the player cannot reach, made of whole
/// areas (connected sets of such squares). Its fence `F` is the boxes next to `A`;
/// walls and `F` enclose `A`. The search starts from each area and, when a push of
/// its fence breaks (2) or (3) only because a square of the push lies in another
/// area, takes that area in too, as YASS combines corrals. `A` qualifies
/// when (1) it must be opened: a box of `F` is off goal or `A` holds a
/// goal; (2) every push of a box of `F` that does not go into `A` is impossible
/// until a box of `F` moves: its target is a wall, a box of `F` or a dead square,
/// or its player square is a wall, a box of `F` or in `A`; (3) every push into `A`
/// is either legal now (player square reachable) or impossible until a box of `F`
/// moves (player square a wall, a box of `F` or in `A`).
///
/// Why the restriction keeps a push-optimal solution. Take any optimal solution
/// and its first push `t` of a box of `F` (by (1) there is one). Before `t` no box
/// of `F` moves, so the fence stands: no other box can enter `A` (it would have
/// to stand next to `A`, where only walls and `F` are) and the player never walks
/// in `A`. So by (2) `t` goes into `A` and by (3) it is legal already now. Doing
/// `t` first and then the earlier pushes in order is legal too: they move boxes
/// outside `A` whose targets are not in `A`, and every walk avoided `A`, where `t`
/// put its box, while `t` only freed a square. After them the boxes are where the
/// solution had them, and the player, where the last earlier push left him, still
/// walks to the square `t` vacated (his walk to `t`'s player square avoided `A`).
/// So from here an optimal solution starts with a push into the corral, and every
/// state on it is solvable, so no sound state pruning drops it. If a qualifying
/// corral has no legal push inward the state is unsolvable, and it gets no
/// successors. Nothing above needs `A` connected.
fn pi_corral_pushes(board: &Board, sc: &mut Scratch, boxes: &[u16]) -> bool {
    let n = board.floor_count();
    if sc.queue.len() + boxes.len() == n {
        // the flood of the player's region (still in `queue`) took every free square
        return false;
    }
    let c = &mut sc.corral;
    // one stamp per area and per corral tested; start over before they overflow
    if c.stamp > u32::MAX - 2 * n as u32 || c.fence_stamp > u32::MAX - 4 * n as u32 * n as u32 {
        c.mark.iter_mut().for_each(|m| *m = 0);
        c.fence_mark.iter_mut().for_each(|m| *m = 0);
        c.stamp = 0;
        c.fence_stamp = 0;
    }
    // label the areas: every area touches a box (the floor is connected)
    c.first = c.stamp + 1;
    c.areas.clear();
    c.fences.clear();
    for f in boxes.iter().flat_map(|&b| (0..DIRS).map(move |d| board.neighbour(b, d))) {
        if f == NONE
            || sc.occ[f as usize]
            || sc.reach_mark[f as usize] == sc.reach_stamp
            || c.mark[f as usize] >= c.first
        {
            continue;
        }
        c.stamp += 1;
        let s = c.stamp;
        c.queue.clear();
        c.queue.push(f);
        c.mark[f as usize] = s;
        c.fence_stamp += 1;
        let fs = c.fence_stamp;
        let fence_start = c.fences.len() as u32;
        let mut goal_inside = false;
        let mut i = 0;
        while i < c.queue.len() {
            let a = c.queue[i];
            i += 1;
            goal_inside |= board.is_goal[a as usize];
            for d in 0..DIRS {
                let g = board.neighbour(a, d);
                if g == NONE {
                    continue;
                }
                if sc.occ[g as usize] {
                    if c.fence_mark[g as usize] != fs {
                        c.fence_mark[g as usize] = fs;
                        c.fences.push(g);
                    }
                } else if c.mark[g as usize] != s {
                    c.mark[g as usize] = s;
                    c.queue.push(g);
                }
            }
        }
        c.areas.push((goal_inside, fence_start, c.fences.len() as u32));
    }
    let mut found = false;
    for start in 0..c.areas.len() {
        c.in_union.clear();
        c.in_union.resize(c.areas.len(), false);
        c.union.clear();
        c.union.push(start);
        c.in_union[start] = true;
        // grow the corral until it qualifies or fails for a reason no area mends
        let qualifies = loop {
            c.fence_stamp += 1;
            let fs = c.fence_stamp;
            c.fence.clear();
            let mut must_open = false;
            for &u in &c.union {
                let (goal_inside, from, to) = c.areas[u];
                must_open |= goal_inside;
                for &b in &c.fences[from as usize..to as usize] {
                    if c.fence_mark[b as usize] != fs {
                        c.fence_mark[b as usize] = fs;
                        c.fence.push(b);
                        must_open |= !board.is_goal[b as usize];
                    }
                }
            }
            if !must_open {
                break false;
            }
            let (first, mark, in_union, fence_mark) = (c.first, &c.mark, &c.in_union, &c.fence_mark);
            // the area of a free square the player cannot reach: exactly the
            // squares labelled above carry a stamp from `first` on
            let area_of = |x: u16| -> Option<usize> {
                let m = if x == NONE { 0 } else { mark[x as usize] };
                (m >= first).then(|| (m - first) as usize)
            };
            let in_corral = |x: u16| area_of(x).is_some_and(|a| in_union[a]);
            // only boxes ever carry a fence stamp
            let fence_box = |x: u16| x != NONE && fence_mark[x as usize] == fs;
            let never_now = |x: u16| x == NONE || fence_box(x) || in_corral(x);
            c.pushes.clear();
            let mut verdict = Some(true);
            'fence: for &b in &c.fence {
                for d in 0..DIRS {
                    let to = board.neighbour(b, d);
                    let behind = board.neighbour(b, opposite(d));
                    if in_corral(to) {
                        if never_now(behind) {
                            continue;
                        }
                        if !sc.occ[behind as usize] && sc.reach_mark[behind as usize] == sc.reach_stamp {
                            c.pushes.push((b, d as u8));
                            continue;
                        }
                    } else if to == NONE || fence_box(to) || board.dead_forward[to as usize] || never_now(behind) {
                        continue;
                    }
                    // broken: mended by taking in the area of `behind` or `to`, if
                    // one lies outside the corral
                    let outside = |x: u16| area_of(x).filter(|&a| !in_union[a]);
                    verdict = outside(behind).or_else(|| outside(to)).map(|a| {
                        c.union.push(a);
                        false
                    });
                    break 'fence;
                }
            }
            match verdict {
                Some(true) => break true,
                Some(false) => c.in_union[*c.union.last().expect("just pushed")] = true,
                None => break false,
            }
        };
        if qualifies && (!found || c.pushes.len() < c.best.len()) {
            std::mem::swap(&mut c.pushes, &mut c.best);
            found = true;
            if c.best.is_empty() {
                break;
            }
        }
    }
    found
}

/// A legal push or pull: the box goes from `from` to `to` (one step in `dir`)
/// and the player ends on `player`.
#[derive(Clone, Copy)]
struct Move {
    from: u16,
    to: u16,
    player: u16,
    dir: usize,
    kind: MoveKind,
}

/// Makes the move on the occupancy, runs the state prunings and the caller's
/// `keep` on the new box set, emits the successor with its normalized player
/// unless pruned, and takes the move back. Push and pull generation share it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn apply_pruned(
    board: &Board,
    sc: &mut Scratch,
    boxes: &[u16],
    next: &mut Vec<u16>,
    m: Move,
    pruning: Pruning,
    keep: &mut impl FnMut(&[u16], u16, u16) -> bool,
    emit: &mut impl FnMut(&[u16], u16, BoxMove),
) {
    sc.occ[m.from as usize] = false;
    sc.occ[m.to as usize] = true;
    moved_boxes(boxes, m.from, m.to, next);
    let dead = pruning.freeze && frozen_dead(board, sc, next, m.to, m.kind);
    if !dead && keep(next, m.to, m.player) {
        let p = sc.normalize_after_move(board, m.from, m.to, m.player);
        emit(next, p, BoxMove { from: m.from, dir: m.dir as u8 });
    }
    sc.occ[m.to as usize] = false;
    sc.occ[m.from as usize] = true;
}

/// Recursion budget for the freeze tests: past it we answer "not frozen", which
/// only weakens pruning, never makes it unsound.
const FREEZE_BUDGET: u32 = 4096;

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

fn push_frozen(board: &Board, sc: &mut Scratch, b: u16) -> bool {
    if sc.budget == 0 {
        return false;
    }
    sc.budget -= 1;
    sc.tmp_wall[b as usize] = true;
    let mark = sc.frozen.len();
    // a box is frozen when it is blocked on both axes
    let frozen = push_axis_blocked(board, sc, b, 0) && push_axis_blocked(board, sc, b, 1);
    sc.tmp_wall[b as usize] = false;
    if frozen {
        sc.frozen.push(b);
    } else {
        sc.frozen.truncate(mark);
    }
    frozen
}

/// Axis 0 is vertical (up/down), 1 horizontal (right/left).
fn push_axis_blocked(board: &Board, sc: &mut Scratch, b: u16, axis: usize) -> bool {
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

/// The freeze prunings after a move onto `moved` (occupancy updated, `boxes`
/// the new set): a box frozen off its targets, or frozen boxes all on targets
/// that leave the others no matching.
fn frozen_dead(board: &Board, sc: &mut Scratch, boxes: &[u16], moved: u16, kind: MoveKind) -> bool {
    let (off_target, targets) = match kind {
        MoveKind::Push => (push_freeze_deadlock(board, sc, moved), &board.goals),
        MoveKind::Pull => (pull_freeze_deadlock(board, sc, moved), &board.start_boxes),
    };
    // the freeze tests leave the frozen set in `sc.frozen`, empty when `moved` is not frozen
    off_target || (!sc.frozen.is_empty() && frozen_targets_unmatched(board, sc, boxes, targets, kind))
}

/// Which moves a box makes in [`frozen_targets_unmatched`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MoveKind {
    Push,
    Pull,
}

/// Buffers of the frozen-target matching.
#[derive(Debug, Clone, Default)]
struct Matching {
    boxes: Vec<u16>,
    targets: Vec<u16>,
    /// Per free target, `row` words: the squares a box can get to it from.
    reach: Vec<u64>,
    queue: Vec<u16>,
    /// Per target: the box index matched to it, or `u32::MAX`.
    owner: Vec<u32>,
    /// Per target: the augmenting round that last visited it.
    seen: Vec<u32>,
}

/// After a move froze boxes that all sit on targets (`sc.frozen`; goals forward,
/// start squares backward), true when the boxes that can still move cannot each
/// be brought to a different free target. Why that is sound: frozen boxes never
/// move again on any path to the targets (each is blocked on both axes by walls,
/// dead squares or other frozen boxes, forever), so they are walls; boxes that
/// can move only ever hinder each other, and the player can only be more
/// restricted than anywhere at all. So the test drops every other box, lets the
/// player stand on any free square, and asks for a perfect matching of movable
/// boxes to free targets over "this box can reach that target": if even that
/// fails, no continuation places the boxes. Heiner lists this matching over the
/// 1-PG reachability as an extension of his tables; here it runs only when a box
/// freezes on a target, so its cost is rare. On Microban I #153 it catches a box
/// pushed into the corner below the goal column before the column is full, a
/// deadlock the k-PG tables only see at k = 5 and up (10^5 patterns before this
/// matching ran inside the k-games).
fn frozen_targets_unmatched(board: &Board, sc: &mut Scratch, boxes: &[u16], targets: &[u16], kind: MoveKind) -> bool {
    for &f in &sc.frozen {
        sc.tmp_wall[f as usize] = true;
    }
    let m = &mut sc.matching;
    let walls = &sc.tmp_wall;
    m.boxes.clear();
    m.boxes.extend(boxes.iter().copied().filter(|&b| !walls[b as usize]));
    m.targets.clear();
    m.targets.extend(targets.iter().copied().filter(|&t| !walls[t as usize]));
    let dead = if m.boxes.len() > m.targets.len() {
        true
    } else {
        let row = board.floor_count().div_ceil(64);
        m.reach.clear();
        m.reach.resize(m.targets.len() * row, 0);
        for (j, &t) in m.targets.iter().enumerate() {
            let bits = &mut m.reach[j * row..(j + 1) * row];
            bits[t as usize / 64] |= 1 << (t % 64);
            m.queue.clear();
            m.queue.push(t);
            while let Some(u) = m.queue.pop() {
                for d in 0..DIRS {
                    // forward: a push in `d` that ends on `u` came from `s`, the
                    // player behind it on `p`; backward: a pull that ends on `u`
                    // is the reverse of a push from `u`, player on the far side
                    let (s, p) = match kind {
                        MoveKind::Push => {
                            let s = board.neighbour(u, opposite(d));
                            (s, if s == NONE { NONE } else { board.neighbour(s, opposite(d)) })
                        }
                        MoveKind::Pull => (board.neighbour(u, d), board.neighbour(u, opposite(d))),
                    };
                    if s == NONE || p == NONE || walls[s as usize] || walls[p as usize] {
                        continue;
                    }
                    if bits[s as usize / 64] >> (s % 64) & 1 == 0 {
                        bits[s as usize / 64] |= 1 << (s % 64);
                        m.queue.push(s);
                    }
                }
            }
        }
        m.owner.clear();
        m.owner.resize(m.targets.len(), u32::MAX);
        m.seen.clear();
        m.seen.resize(m.targets.len(), 0);
        let mut matched = true;
        for i in 0..m.boxes.len() {
            if !augment(m, row, i, i as u32 + 1) {
                matched = false;
                break;
            }
        }
        !matched
    };
    for &f in &sc.frozen {
        sc.tmp_wall[f as usize] = false;
    }
    dead
}

/// Kuhn's augmenting path from box `i`, in round `round`.
fn augment(m: &mut Matching, row: usize, i: usize, round: u32) -> bool {
    let b = m.boxes[i];
    for j in 0..m.targets.len() {
        if m.seen[j] == round || m.reach[j * row + b as usize / 64] >> (b % 64) & 1 == 0 {
            continue;
        }
        m.seen[j] = round;
        let owner = m.owner[j];
        if owner == u32::MAX || augment(m, row, owner as usize, round) {
            m.owner[j] = i as u32;
            return true;
        }
    }
    false
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

fn pull_frozen(board: &Board, sc: &mut Scratch, b: u16) -> bool {
    if sc.budget == 0 {
        return false;
    }
    sc.budget -= 1;
    sc.tmp_wall[b as usize] = true;
    let mark = sc.frozen.len();
    let mut frozen = true;
    for d in 0..DIRS {
        if pullable(board, sc, b, d) {
            frozen = false;
            break;
        }
    }
    sc.tmp_wall[b as usize] = false;
    if frozen {
        sc.frozen.push(b);
    } else {
        sc.frozen.truncate(mark);
    }
    frozen
}

fn pullable(board: &Board, sc: &mut Scratch, b: u16, d: usize) -> bool {
    let to = board.neighbour(b, d);
    if to == NONE || sc.tmp_wall[to as usize] || board.dead_backward[to as usize] {
        return false;
    }
    let step = board.neighbour(to, d);
    if step == NONE || sc.tmp_wall[step as usize] {
        return false;
    }
    let blocked_at = |sc: &mut Scratch, sq: u16| sc.occ[sq as usize] && pull_frozen(board, sc, sq);
    !blocked_at(sc, to) && !blocked_at(sc, step)
}

/// The backward start states: all boxes on goals, the player in each region of the
/// solved position (normalized).
pub fn goal_states(board: &Board, sc: &mut Scratch, goals: &[u16]) -> Vec<u16> {
    sc.place(goals);
    let mut seen = vec![false; board.floor_count()];
    let mut players = Vec::new();
    for f in 0..board.floor_count() as u16 {
        if sc.occ[f as usize] || seen[f as usize] {
            continue;
        }
        let n = sc.normalize(board, f);
        for &q in &sc.queue {
            seen[q as usize] = true;
        }
        players.push(n);
    }
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
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/levels/Microban_155.xsb");
        let text = std::fs::read_to_string(path).unwrap();
        let level = crate::model::level::split_collection(&text, path)[152].parse().unwrap();
        let b = Board::new(&level).unwrap();
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

    #[test]
    fn goal_states_one_per_region() {
        let b = board("#######\n#@ *  #\n#######\n");
        let mut sc = Scratch::new(&b);
        let players = goal_states(&b, &mut sc, &b.goals.clone());
        assert_eq!(players.len(), 2);
    }
}
