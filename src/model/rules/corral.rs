//! PI-corrals (Meger's pruning, as in YASS): the areas the player cannot enter,
//! their fences, and the restriction of the forward moves to the pushes into one.

use super::*;
use crate::model::bitgrid::{beside, rows3, BitGrid};

/// Buffers of the PI-corral search.
#[derive(Debug, Clone, Default)]
pub(super) struct Corrals {
    /// Per square: the stamp of the area that holds it; the current state's areas
    /// have stamps `first..`, area `i` has `first + i`.
    pub(super) mark: Vec<u32>,
    /// Per square: `fence_stamp` when the box on it fences the corral under test.
    pub(super) fence_mark: Vec<u32>,
    pub(super) stamp: u32,
    pub(super) first: u32,
    pub(super) fence_stamp: u32,
    /// Per area: whether it holds a goal, and its fence as a range of `fences`
    /// (the bitboard path keeps its fences in `fence_bits`; the range is empty).
    pub(super) areas: Vec<(bool, u32, u32)>,
    pub(super) fences: Vec<u16>,
    /// The areas of the corral under test, and a flag per area.
    pub(super) union: Vec<usize>,
    pub(super) in_union: Vec<bool>,
    pub(super) fence: Vec<u16>,
    pub(super) queue: Vec<u16>,
    /// Bitboard rows (boards with a bit grid): each area and its fence, one
    /// block of rows per area; the corral under test and its fence.
    pub(super) area_bits: Vec<u64>,
    pub(super) fence_bits: Vec<u64>,
    pub(super) corral_bits: Vec<u64>,
    pub(super) corral_fence: Vec<u64>,
    /// Bitboard path: per area, the first box beside it and that box's first
    /// direction into it (the order the square-by-square labelling meets the
    /// areas in), with the area's index; sorted before the corrals are grown.
    pub(super) order: Vec<(u16, u8, usize)>,
    pub(super) pushes: Vec<(u16, u8)>,
    /// The pushes of the chosen corral (valid after `pi_corral_pushes` says true).
    pub(super) best: Vec<(u16, u8)>,
    /// Bitboard path: per floor square, `(map_stamp, area)` for the squares
    /// of the current state's areas, filled the first time a square's area
    /// is asked for (most states never ask).
    pub(super) area_at: Vec<(u32, u16)>,
    pub(super) map_stamp: u32,
    pub(super) map_built: bool,
    /// Bitboard path: per area, the first and last row of its squares and
    /// whether a box of its fence stands off goal.
    pub(super) span: Vec<(u16, u16, bool)>,
    /// Bitboard path: per row, the test of the corral under test's fence
    /// boxes on it, kept while the corral grows.
    pub(super) row_test: Vec<RowTest>,
    /// Per row, whether its `row_test` holds for the corral under test.
    pub(super) row_fresh: Vec<bool>,
    /// The last search's steps: the corrals started and the areas taken in
    /// (past [`CORRAL_WORK`] it stopped).
    pub(super) work: u32,
}

/// The pushes of a corral's fence boxes on one bitboard row, per direction:
/// the legal ones into the corral, and the broken ones (those that break
/// condition (2) or (3) of [`pi_corral_pushes`]).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RowTest {
    legal: [u64; DIRS],
    bad: [u64; DIRS],
}

/// [`RowTest`] of row `r` of the corral `u` with fence `fence` (player's
/// region `reach`).
fn test_row(g: &BitGrid, reach: &[u64], u: &[u64], fence: &[u64], r: usize) -> RowTest {
    let mut t = RowTest::default();
    if fence[r] == 0 {
        return t;
    }
    let (floor, fenced, dead) = (rows3(&g.floor, r), rows3(fence, r), rows3(&g.dead, r));
    let (corral, reached) = (rows3(u, r), rows3(reach, r));
    // never now: a wall, a fence box or the corral
    let never: [u64; 3] = std::array::from_fn(|i| !floor[i] | fenced[i] | corral[i]);
    let closed: [u64; 3] = std::array::from_fn(|i| !floor[i] | fenced[i] | dead[i]);
    // the squares of row `r` whose neighbour in direction `d` is set in `x`
    let toward = |x: &[u64; 3], d: usize| match d {
        0 => x[0],
        1 => x[1] >> 1,
        2 => x[2],
        _ => x[1] << 1,
    };
    for d in 0..DIRS {
        let behind_never = toward(&never, opposite(d));
        let into = fenced[1] & toward(&corral, d);
        t.legal[d] = into & !behind_never & toward(&reached, opposite(d));
        let bad_in = into & !behind_never & !t.legal[d];
        let out_ok = toward(&closed, d) | behind_never;
        t.bad[d] = bad_in | (fenced[1] & !into & !out_ok);
    }
    t
}

/// The most areas the PI-corral search starts a corral from or takes into one,
/// all corrals of a state together; past it the search stops with the best
/// corral found so far, or none. Any corral that qualifies restricts soundly
/// (the one with the fewest pushes only branches least), and no corral
/// restricts nothing, so this bounds the cost of a state and keeps every
/// optimum (the states stored may change where a corral is dropped). The
/// search is quadratic in the areas: on Microban II #131 (44 boxes packed
/// along a diagonal, about 25 areas) it took 257 steps a state and found a
/// corral in 7% of the states, in 35% of the solver's time. On Microban I
/// #153, Microban II #126 and XSokoban #43 and #60, where corrals are found
/// in a third to four fifths of the states, it takes 2 to 6 steps a state
/// on average and never 64; on XSokoban #4 about one state in a thousand
/// took 64 to 127 (`docs/benchmarks.md`).
pub(super) const CORRAL_WORK: u32 = 64;

/// Up to this many areas, a square's area is found by looking through them
/// (cheaper than building the map of [`Corrals::area_at`]).
const FEW_AREAS: usize = 8;

impl Corrals {
    /// The area (bitboard path) holding square `x`, if any: with many areas
    /// one lookup, the map of the state's areas built on the first call.
    fn area_at(&mut self, g: &BitGrid, x: u16) -> Option<usize> {
        if x == NONE {
            return None;
        }
        let rows = g.rows();
        if self.areas.len() <= FEW_AREAS {
            let (w, bit) = g.word_bit(x);
            return (0..self.areas.len()).find(|&a| self.area_bits[a * rows + w] & bit != 0);
        }
        if !self.map_built {
            self.map_built = true;
            if self.map_stamp == u32::MAX {
                self.area_at.iter_mut().for_each(|e| *e = (0, 0));
                self.map_stamp = 0;
            }
            self.map_stamp += 1;
            self.area_at.resize(g.pos.len(), (0, 0));
            let (area_at, stamp) = (&mut self.area_at, self.map_stamp);
            for (a, area) in self.area_bits.chunks(rows).take(self.areas.len()).enumerate() {
                g.for_each(area, |f| area_at[f as usize] = (stamp, a as u16));
            }
        }
        match self.area_at[x as usize] {
            (s, a) if s == self.map_stamp => Some(a as usize),
            _ => None,
        }
    }

    /// Counts one step of the search (a corral started or an area taken
    /// in); true when it goes past [`CORRAL_WORK`] and the search must stop.
    fn spent(&mut self) -> bool {
        self.work += 1;
        self.work > CORRAL_WORK
    }

    /// Keeps the corral just tested (its pushes in `pushes`) when it qualifies
    /// and has fewer pushes than the best so far; true when the search can
    /// stop (a qualifying corral without pushes: the state is dead).
    fn offer(&mut self, qualifies: bool, found: &mut bool) -> bool {
        if qualifies && (!*found || self.pushes.len() < self.best.len()) {
            std::mem::swap(&mut self.pushes, &mut self.best);
            *found = true;
            return self.best.is_empty();
        }
        false
    }
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
///
/// The search stops after [`CORRAL_WORK`] corrals started and areas taken in,
/// with the best corral found by then, if any: the argument above holds for
/// every qualifying corral, so the restriction stays sound.
pub(super) fn pi_corral_pushes(board: &Board, sc: &mut Scratch, boxes: &[u16]) -> bool {
    let n = board.floor_count();
    sc.corral.work = 0;
    if let Some(g) = &board.bits {
        // (it finds no free square outside the player's region as soon as
        // counting the region would, which costs more than that)
        return pi_corral_pushes_bits(board, g, sc);
    }
    if sc.reach_size() + boxes.len() == n {
        // the flood of the player's region (still in `queue`) took every free square
        return false;
    }
    let reach = Reach { pos: &sc.pos, bits: &sc.reach_bits, mark: &sc.reach_mark, stamp: sc.reach_stamp };
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
        if f == NONE || sc.occ[f as usize] || reach.has(f) || c.mark[f as usize] >= c.first {
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
        if c.spent() {
            return found;
        }
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
            // ascending: the first broken push, which picks the area taken in
            // next, is then the same however the areas were found
            c.fence.sort_unstable();
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
                        if !sc.occ[behind as usize] && reach.has(behind) {
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
                Some(false) => {
                    if c.spent() {
                        return found;
                    }
                    c.in_union[*c.union.last().expect("just pushed")] = true
                }
                None => break false,
            }
        };
        if c.offer(qualifies, &mut found) {
            break;
        }
    }
    found
}

/// [`pi_corral_pushes`] on bitboard rows: the same areas in the same order, the
/// same corrals grown in the same order, the same answer. Each area is one
/// flood; a corral's test takes a row of fence boxes and a direction at a time
/// (the fence's squares ascend with the bits, so the first broken push found is
/// the one the square-by-square test meets first).
fn pi_corral_pushes_bits(board: &Board, g: &BitGrid, sc: &mut Scratch) -> bool {
    let rows = g.rows();
    let (occ, reach) = (&sc.occ_bits, &sc.reach_bits);
    let c = &mut sc.corral;
    // every buffer below is written before it is read (the edge rows of the
    // fences only ever hold zeros), so they keep their length from state to
    // state instead of being zeroed again: `area_bits` and `fence_bits` hold
    // `areas.len()` blocks of rows in front, stale ones after
    for v in [&mut c.corral_bits, &mut c.corral_fence] {
        v.resize(rows, 0);
    }
    c.areas.clear();
    c.span.clear();
    c.order.clear();
    // label the areas: every area touches a box (the floor is connected), so
    // each is flooded from a free unreached square beside a box
    // (the corral's fence rows hold the squares not yet in an area meanwhile)
    let left = &mut c.corral_fence;
    let mut any = 0;
    for r in 1..rows - 1 {
        left[r] = beside(occ, r) & g.floor[r] & !occ[r] & !reach[r];
        any |= left[r];
    }
    if any == 0 {
        return false;
    }
    for r in 1..rows - 1 {
        while left[r] != 0 {
            let at = c.areas.len() * rows;
            if c.area_bits.len() < at + rows {
                c.area_bits.resize(at + rows, 0);
                c.fence_bits.resize(at + rows, 0);
            }
            let area = &mut c.area_bits[at..at + rows];
            g.flood_from(occ, r, left[r] & left[r].wrapping_neg(), area);
            let mut goal_inside = false;
            let fence = &mut c.fence_bits[at..at + rows];
            let mut first_box = None;
            let (mut top, mut bottom, mut off_goal) = (rows, 0, false);
            // every buffer cut to `rows` so the loop's indices need no checks
            let (left, area, fence) = (&mut left[..rows], &area[..rows], &mut fence[..rows]);
            let (occ, goal) = (&occ[..rows], &g.goal[..rows]);
            for rr in 1..rows - 1 {
                left[rr] &= !area[rr];
                goal_inside |= area[rr] & goal[rr] != 0;
                if area[rr] != 0 {
                    (top, bottom) = (top.min(rr), rr);
                }
                fence[rr] = beside(area, rr) & occ[rr];
                off_goal |= fence[rr] & !goal[rr] != 0;
                if first_box.is_none() && fence[rr] != 0 {
                    first_box = Some(g.at[rr * 64 + fence[rr].trailing_zeros() as usize]);
                }
            }
            // the square-by-square test meets the areas in the order of the
            // first box beside them and its first direction into them
            let b = first_box.expect("an area touches a box");
            let d = (0..DIRS)
                .find(|&d| {
                    let x = board.neighbour(b, d);
                    x != NONE && {
                        let (w, bit) = g.word_bit(x);
                        area[w] & bit != 0
                    }
                })
                .expect("the box is beside the area");
            c.order.push((b, d as u8, c.areas.len()));
            c.areas.push((goal_inside, 0, 0));
            c.span.push((top as u16, bottom as u16, off_goal));
        }
    }
    c.order.sort_unstable();
    c.map_built = false;
    c.row_test.resize(rows, RowTest::default());
    c.row_fresh.resize(rows, false);
    let mut found = false;
    for i in 0..c.order.len() {
        if c.spent() {
            return found;
        }
        let start = c.order[i].2;
        c.in_union.clear();
        c.in_union.resize(c.areas.len(), false);
        c.in_union[start] = true;
        c.corral_bits.copy_from_slice(&c.area_bits[start * rows..(start + 1) * rows]);
        c.corral_fence.copy_from_slice(&c.fence_bits[start * rows..(start + 1) * rows]);
        let (mut goal_inside, mut off_goal) = (c.areas[start].0, c.span[start].2);
        // the rows tested since the corral last changed beside them (a row's
        // test reads the corral and its fence on the rows next to it); those
        // above `good` among them have no broken push
        c.row_fresh.fill(false);
        let mut good = 1;
        let qualifies = loop {
            // (1) it must be opened: a goal inside or a fence box off goal
            if !goal_inside && !off_goal {
                break false;
            }
            // the first broken push, in ascending squares and directions
            let mut broken = None;
            for r in good..rows - 1 {
                if !c.row_fresh[r] {
                    c.row_test[r] = test_row(g, reach, &c.corral_bits, &c.corral_fence, r);
                    c.row_fresh[r] = true;
                }
                let bad = &c.row_test[r].bad;
                let any = bad.iter().fold(0, |a, &x| a | x);
                if any != 0 {
                    let low = any & any.wrapping_neg();
                    let d = (0..DIRS).find(|&d| bad[d] & low != 0).expect("a direction is broken");
                    broken = Some((g.at[r * 64 + low.trailing_zeros() as usize], d));
                    good = r;
                    break;
                }
            }
            let Some((b, d)) = broken else {
                c.pushes.clear();
                for r in 1..rows - 1 {
                    let legal = &c.row_test[r].legal;
                    let mut take = legal.iter().fold(0, |a, &x| a | x);
                    while take != 0 {
                        let low = take & take.wrapping_neg();
                        let b = g.at[r * 64 + low.trailing_zeros() as usize];
                        for (d, l) in legal.iter().enumerate() {
                            if l & low != 0 {
                                c.pushes.push((b, d as u8));
                            }
                        }
                        take &= take - 1;
                    }
                }
                break true;
            };
            // broken: mended by taking in the area of `behind` or `to`, if one
            // lies outside the corral
            let mut outside = None;
            for x in [board.neighbour(b, opposite(d)), board.neighbour(b, d)] {
                if let Some(a) = c.area_at(g, x).filter(|&a| !c.in_union[a]) {
                    outside = Some(a);
                    break;
                }
            }
            let Some(a) = outside else { break false };
            if c.spent() {
                return found;
            }
            c.in_union[a] = true;
            goal_inside |= c.areas[a].0;
            let (top, bottom, off) = c.span[a];
            off_goal |= off;
            // the area's squares lie on rows `top..=bottom`, its fence one further
            for r in top as usize - 1..=bottom as usize + 1 {
                c.corral_bits[r] |= c.area_bits[a * rows + r];
                c.corral_fence[r] |= c.fence_bits[a * rows + r];
            }
            let (lo, hi) = ((top as usize).saturating_sub(2).max(1), (bottom as usize + 2).min(rows - 2));
            c.row_fresh[lo..=hi].fill(false);
            good = good.min(lo);
        };
        if c.offer(qualifies, &mut found) {
            break;
        }
    }
    found
}
