//! The player's reach: per-thread scratch buffers, the flood of the player's
//! region, and normalization (the smallest square of the region), from scratch
//! and incrementally after a move.

use super::*;
use crate::model::bitgrid::{rows3, word_bit_of, BitGrid};

/// Per-thread buffers for generation.
#[derive(Debug, Clone)]
pub struct Scratch {
    /// Box occupancy by floor index.
    pub occ: Vec<bool>,
    pub(super) mark: Vec<u32>,
    pub(super) stamp: u32,
    pub(super) queue: Vec<u16>,
    /// Squares reachable by the player in the current state (valid after `reach`).
    pub(super) reach_stamp: u32,
    pub(super) reach_mark: Vec<u32>,
    /// The two smallest squares of the reach region (`NONE` when absent).
    pub(super) reach_min: [u16; 2],
    pub(super) tmp_wall: Vec<bool>,
    pub(super) frozen: Vec<u16>,
    pub(super) budget: u32,
    pub(super) matching: Matching,
    pub(super) corral: Corrals,
    pub boxes: Vec<u16>,
    pub next: Vec<u16>,
    /// The last key decoded on this thread ([`StateKey::decode_near`](crate::model::key::StateKey::decode_near)).
    pub key_memo: crate::model::key::DecodeMemo,
    /// Bitboard rows (boards with a [`BitGrid`](crate::model::bitgrid::BitGrid);
    /// empty otherwise): the boxes, the player's region, a second region, and
    /// each floor square's bit.
    pub(super) occ_bits: Vec<u64>,
    pub(super) reach_bits: Vec<u64>,
    pub(super) tmp_bits: Vec<u64>,
    /// The boxes and the player's region together (the incremental
    /// normalization's flood of the regions a move joins).
    pub(super) blocked_bits: Vec<u64>,
    pub(super) pos: Vec<u16>,
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
            key_memo: Default::default(),
            occ_bits: board.bits.as_ref().map_or(Vec::new(), |g| vec![0; g.rows()]),
            reach_bits: board.bits.as_ref().map_or(Vec::new(), |g| vec![0; g.rows()]),
            tmp_bits: board.bits.as_ref().map_or(Vec::new(), |g| vec![0; g.rows()]),
            blocked_bits: board.bits.as_ref().map_or(Vec::new(), |g| vec![0; g.rows()]),
            pos: board.bits.as_ref().map_or(Vec::new(), |g| g.pos.clone()),
        }
    }

    pub(super) fn bump(stamp: &mut u32, mark: &mut [u32]) -> u32 {
        *stamp = stamp.wrapping_add(1);
        if *stamp == 0 {
            mark.iter_mut().for_each(|m| *m = 0);
            *stamp = 1;
        }
        *stamp
    }

    /// Floods the player's region from `from` over free squares, marking it in the
    /// reach buffer and keeping its two smallest squares.
    pub(super) fn flood_reach(&mut self, board: &Board, from: u16) {
        if let Some(g) = &board.bits {
            g.flood(&self.occ_bits, from, &mut self.reach_bits);
            self.reach_min = g.lowest_two(&self.reach_bits);
            return;
        }
        let s = Self::bump(&mut self.reach_stamp, &mut self.reach_mark);
        let mut min = [NONE; 2];
        flood_marked(board, &self.occ, &mut self.queue, &mut self.reach_mark, s, from, |g| {
            if g < min[0] {
                min = [g, min[0]];
            } else if g < min[1] {
                min[1] = g;
            }
        });
        self.reach_min = min;
    }

    /// The least square of `vacated` and the free squares outside the
    /// region `R` it joins (bitboard path; `tmp_bits` holds them after).
    fn flood_foreign(&mut self, g: &BitGrid, vacated: u16) -> u16 {
        for (b, (&o, &r)) in self.blocked_bits.iter_mut().zip(self.occ_bits.iter().zip(&self.reach_bits)) {
            *b = o | r;
        }
        g.flood(&self.blocked_bits, vacated, &mut self.tmp_bits);
        g.lowest(&self.tmp_bits)
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
    pub(super) fn normalize_after_move(&mut self, board: &Board, vacated: u16, filled: u16, player: u16) -> u16 {
        if let Some(g) = &board.bits {
            // as below, with bitboard floods: where `filled` may cut `R`, a
            // flood of the player's part, which stops once it takes in the
            // least square `A` can hold unless foreign regions join; where
            // only they join through `vacated`, a flood of those alone
            let filled_in_region = self.reachable(filled);
            let foreign = (0..DIRS).any(|d| {
                let x = board.neighbour(vacated, d);
                x != NONE && x != filled && !self.occ[x as usize] && !self.reachable(x)
            });
            let least = self.reach_min_without(filled_in_region, filled).min(vacated);
            let min = if !filled_in_region || ring_connected_bits(g, &self.occ_bits, filled) {
                if foreign {
                    least.min(self.flood_foreign(g, vacated))
                } else {
                    least
                }
            } else if !foreign && g.flood_until(&self.occ_bits, player, least, &mut self.tmp_bits) {
                // `A` lies in `R - filled + vacated`, whose least square it holds
                least
            } else {
                // the whole of `A` in `tmp_bits` (the flood above ran to its
                // end, or a new one)
                if foreign {
                    g.flood(&self.occ_bits, player, &mut self.tmp_bits);
                }
                g.lowest(&self.tmp_bits)
            };
            debug_assert_eq!(min, self.normalize(board, player), "incremental normalization disagrees with the flood");
            return min;
        }
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
            min = self.reach_min_without(filled_in_region, filled).min(vacated);
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

    /// The smallest square of the player's region once `filled` (in it when
    /// `filled_in_region`) is taken out.
    #[inline]
    fn reach_min_without(&self, filled_in_region: bool, filled: u16) -> u16 {
        if filled_in_region && filled == self.reach_min[0] {
            self.reach_min[1]
        } else {
            self.reach_min[0]
        }
    }

    #[inline]
    pub(super) fn reachable(&self, f: u16) -> bool {
        self.reach().has(f)
    }

    /// The player's region, borrowed apart from the other buffers.
    #[inline]
    pub(super) fn reach(&self) -> Reach<'_> {
        Reach { pos: &self.pos, bits: &self.reach_bits, mark: &self.reach_mark, stamp: self.reach_stamp }
    }

    /// How many squares the player's region holds (valid after `flood_reach`).
    pub(super) fn reach_size(&self) -> usize {
        if self.pos.is_empty() {
            self.queue.len()
        } else {
            self.reach_bits.iter().map(|w| w.count_ones() as usize).sum()
        }
    }

    /// Puts a box on `f` (`true`) or takes it off.
    #[inline]
    pub(super) fn set_occ(&mut self, f: u16, on: bool) {
        self.occ[f as usize] = on;
        if let Some(&p) = self.pos.get(f as usize) {
            let (w, b) = word_bit_of(p);
            if on {
                self.occ_bits[w] |= b;
            } else {
                self.occ_bits[w] &= !b;
            }
        }
    }

    /// The normalized square of the region containing `from` (a second flood that
    /// leaves the reach buffer intact).
    pub fn normalize(&mut self, board: &Board, from: u16) -> u16 {
        if let Some(g) = &board.bits {
            g.flood(&self.occ_bits, from, &mut self.tmp_bits);
            return g.lowest(&self.tmp_bits);
        }
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

    /// The least square of every region of the free floor (the boxes
    /// placed), in increasing order: each region flooded once.
    pub(super) fn region_mins(&mut self, board: &Board) -> Vec<u16> {
        let mut mins = Vec::new();
        if let Some(g) = &board.bits {
            // the free squares of the regions not yet found
            for ((left, &o), &f) in self.blocked_bits.iter_mut().zip(&self.occ_bits).zip(&g.floor) {
                *left = f & !o;
            }
            loop {
                let f = g.lowest(&self.blocked_bits);
                if f == NONE {
                    return mins;
                }
                g.flood(&self.occ_bits, f, &mut self.tmp_bits);
                mins.push(f);
                for (left, &t) in self.blocked_bits.iter_mut().zip(&self.tmp_bits) {
                    *left &= !t;
                }
            }
        }
        let s = Self::bump(&mut self.stamp, &mut self.mark);
        for f in 0..board.floor_count() as u16 {
            if self.occ[f as usize] || self.mark[f as usize] == s {
                continue;
            }
            // a region's squares are met smallest first
            mins.push(f);
            flood_marked(board, &self.occ, &mut self.queue, &mut self.mark, s, f, |_| {});
        }
        mins
    }

    pub(super) fn place(&mut self, boxes: &[u16]) {
        for &b in boxes {
            self.set_occ(b, true);
        }
    }

    pub(super) fn clear(&mut self, boxes: &[u16]) {
        for &b in boxes {
            self.set_occ(b, false);
        }
    }
}

/// The player's region as [`Scratch::flood_reach`] left it: bits on a board
/// with a bit grid, stamps otherwise.
#[derive(Clone, Copy)]
pub(super) struct Reach<'a> {
    pub(super) pos: &'a [u16],
    pub(super) bits: &'a [u64],
    pub(super) mark: &'a [u32],
    pub(super) stamp: u32,
}

impl Reach<'_> {
    #[inline]
    pub(super) fn has(self, f: u16) -> bool {
        match self.pos.get(f as usize) {
            Some(&p) => {
                let (w, b) = word_bit_of(p);
                self.bits[w] & b != 0
            }
            None => self.mark[f as usize] == self.stamp,
        }
    }
}

/// Are the free 4-neighbours of `f` all in one run of free squares around its
/// 8-neighbour ring? Then making `f` a wall cannot disconnect them.
pub(super) fn ring_connected(board: &Board, occ: &[bool], f: u16) -> bool {
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
    let open = ring.iter().enumerate().fold(0u8, |o, (i, &g)| o | (free(g) as u8) << i);
    RING_JOINS[open as usize]
}

/// Whether the open squares of an 8-neighbour ring, as bits clockwise from
/// the north (`n, ne, e, se, s, sw, w, nw`), hold the orthogonal ones (the
/// even bits) in at most one circular run: [`ring_connected`]'s test.
const fn ring_joins(open: u8) -> bool {
    if open == u8::MAX {
        return true;
    }
    let start = open.trailing_ones() as usize;
    let (mut runs, mut in_run, mut has_orth, mut k) = (0, false, false, 1);
    while k <= 8 {
        let i = (start + k) % 8;
        if open >> i & 1 == 1 {
            in_run = true;
            has_orth |= i & 1 == 0;
        } else {
            if in_run && has_orth {
                runs += 1;
            }
            in_run = false;
            has_orth = false;
        }
        k += 1;
    }
    runs <= 1
}

/// [`ring_joins`] of every ring (the scalar and the bitboard tests share it).
const RING_JOINS: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = ring_joins(i as u8);
        i += 1;
    }
    t
};

/// The square-by-square flood of the free squares connected to `from` (not
/// in `occ`), each marked `s` in `mark` and handed to `visit` as it is taken
/// in, `from` first.
fn flood_marked(
    board: &Board,
    occ: &[bool],
    queue: &mut Vec<u16>,
    mark: &mut [u32],
    s: u32,
    from: u16,
    mut visit: impl FnMut(u16),
) {
    queue.clear();
    queue.push(from);
    mark[from as usize] = s;
    visit(from);
    let mut i = 0;
    while i < queue.len() {
        let f = queue[i];
        i += 1;
        for d in 0..DIRS {
            let g = board.neighbour(f, d);
            if g != NONE && !occ[g as usize] && mark[g as usize] != s {
                mark[g as usize] = s;
                visit(g);
                queue.push(g);
            }
        }
    }
}

/// [`ring_connected`] on bitboard rows: the ring's eight squares read off
/// three rows (free: floor without a box), looked up in [`RING_JOINS`].
#[inline]
pub(super) fn ring_connected_bits(g: &BitGrid, occ: &[u64], f: u16) -> bool {
    let (r, bit) = g.word_bit(f);
    let c = bit.trailing_zeros();
    // columns c - 1, c and c + 1 of row `r` as bits 0, 1 and 2
    let (floor, boxes) = (rows3(&g.floor, r), rows3(occ, r));
    let three = |i: usize| ((((floor[i] & !boxes[i]) as u128) << 1) >> c) as u8 & 7;
    let (up, mid, down) = (three(0), three(1), three(2));
    // clockwise from the north: n, ne, e, se, s, sw, w, nw
    let ring = (up >> 1 & 1)
        | (up >> 2 & 1) << 1
        | (mid >> 2 & 1) << 2
        | (down >> 2 & 1) << 3
        | (down >> 1 & 1) << 4
        | (down & 1) << 5
        | (mid & 1) << 6
        | (up & 1) << 7;
    RING_JOINS[ring as usize]
}

/// The normalized player square for a box set and a player square.
pub fn normalize_player(board: &Board, sc: &mut Scratch, boxes: &[u16], player: u16) -> u16 {
    sc.place(boxes);
    let n = sc.normalize(board, player);
    sc.clear(boxes);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring's squares joined as a cycle (each is beside the next): the
    /// open orthogonal ones all in one connected part of the open squares.
    fn joined_on_the_cycle(open: u8) -> bool {
        let is_open = |i: usize| open >> (i % 8) & 1 == 1;
        let Some(first) = (0..8).step_by(2).find(|&i| is_open(i)) else { return true };
        let mut seen = [false; 8];
        let mut stack = vec![first];
        seen[first] = true;
        while let Some(i) = stack.pop() {
            for j in [(i + 1) % 8, (i + 7) % 8] {
                if is_open(j) && !seen[j] {
                    seen[j] = true;
                    stack.push(j);
                }
            }
        }
        (0..8).step_by(2).all(|i| !is_open(i) || seen[i])
    }

    #[test]
    fn the_ring_table_says_whether_the_open_neighbours_join() {
        for open in 0..=u8::MAX {
            assert_eq!(RING_JOINS[open as usize], joined_on_the_cycle(open), "ring {open:08b}");
        }
    }
}
