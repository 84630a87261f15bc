//! Triple penalties from the 3-box game: for three squares and the player's
//! region among them, how many pushes three boxes standing there need beyond
//! the largest sum of their lone-box distances to any three targets. Added
//! over disjoint triples (and pairs of [`super::pairs`] among the other
//! boxes) to the matching of [`super::bounds`], they keep it a lower bound.
//!
//! # Why the matching plus the penalties of disjoint groups is a lower bound
//!
//! Take any solution from a state to the goal and the goal `π(x)` it brings
//! each box `x` to. The pushes it applies to the boxes `a`, `b`, `c` of a
//! triple, every other box removed, solve the 3-box game from `a, b, c` (the
//! player in its region of the floor with those three squares blocked) to the
//! goals `π(a), π(b), π(c)`, so they number at least that game's distance
//! `D3` to the set `{π(a), π(b), π(c)}` (the game's boxes are not labelled:
//! any box may end on any of the three). The penalty `T(a, b, c, r)` is the
//! least, over every set `S` of three targets, of `D3(a, b, c, r → S)` less
//! the largest sum `d(a, s_a) + d(b, s_b) + d(c, s_c)` over the orders of
//! `S`; with `S = {π(a), π(b), π(c)}` that largest sum is at least the one of
//! the solution's order, so those pushes number at least
//! `d(a, π(a)) + d(b, π(b)) + d(c, π(c)) + T`. The pairs' argument
//! (`pairs.rs`) is the same with two boxes, and each push moves one box, so
//! over disjoint triples, disjoint pairs and the remaining boxes the solution
//! has at least `Σ d(x, π(x)) + Σ T + Σ P`, and `Σ d(x, π(x))` is at least the
//! cheapest matching. Backward, the same holds from the start squares (the
//! 3-box game played by pushes from them, the player in the start player's
//! region). A triple and region that reach no target set are dead.
//!
//! The player's region counts: without it (the player behind any box at
//! will) the 3-box games add nothing measurable over the pairs
//! (`docs/benchmarks.md`, "Which stronger bound would pay").
//!
//! # Cost
//!
//! One game per set of three targets, over (three squares, region) states,
//! each new set of squares flooded once for its regions. The games stop, and
//! the level gets no triple tables, past [`MAX_WORK`] states in all or
//! [`MAX_LABEL_BYTES`] of region labels: a partial table could claim a
//! penalty that a target set it did not play would undercut.

use super::board::{Board, DIRS, NONE};
use super::bounds::{PushDistances, UNREACHABLE};
use super::pairs::{game_steps, GameSteps, PairPenalties};

/// Largest board (floor squares) the tables are built for: the games index
/// their states by three squares and a region.
pub const MAX_FLOOR: usize = 200;

/// Most 3-box game states visited, summed over every target set and both
/// directions (up to two or three seconds on this project's machine).
pub const MAX_WORK: u64 = 12_000_000;

/// Most bytes of region labels (one per floor square per set of three
/// squares the games visit) held while building.
pub const MAX_LABEL_BYTES: usize = 256 << 20;

/// Regions of the floor with three squares blocked: each blocked square
/// splits one region into at most four, so at most ten.
const REGIONS: usize = 10;

/// A triple and region that reach no target set.
const DEAD: u8 = u8::MAX;

/// No region (a blocked square's label).
const NO_REGION: u8 = u8::MAX;

/// The index of the sorted squares `a < b < c` among all sets of three.
#[inline]
fn index(a: u16, b: u16, c: u16) -> usize {
    let (a, b, c) = (a as usize, b as usize, c as usize);
    c * (c - 1) * (c - 2) / 6 + b * (b - 1) / 2 + a
}

/// The positive (or dead) penalties of one direction.
#[derive(Debug, Clone, Default)]
struct Side {
    /// Per kept triple, sorted by its squares: its largest square and its
    /// penalties per region (its labels are the entry's block of `labels`).
    entries: Vec<Entry>,
    /// `floor` labels per entry.
    labels: Vec<u8>,
    /// Per square `a`: a bitset (`floor.div_ceil(64)` words) of the squares
    /// `b > a` that some entry `(a, b, c)` has, so that a sum visits only
    /// the pairs of boxes that start a kept triple.
    nonzero: Vec<u64>,
    /// Per pair of squares `a * floor + b`: its entries, `start..end` (the
    /// entries are sorted by their squares).
    spans: Vec<(u32, u32)>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    c: u16,
    penalty: [u8; REGIONS],
}

/// Triple penalties of one level, both directions.
#[derive(Debug, Clone)]
pub struct TriplePenalties {
    floor: usize,
    sides: [Side; 2],
}

/// Why the tables were not built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    /// Fewer than three boxes, or a board over [`MAX_FLOOR`].
    Size,
    /// The games passed [`MAX_WORK`] states or [`MAX_LABEL_BYTES`].
    Work,
    /// No triple has a penalty beyond what the tables could add.
    Useless,
}

impl TriplePenalties {
    /// The tables of `board` under the lone-box distances `dist`, or why not.
    pub fn new(board: &Board, dist: &PushDistances) -> Result<TriplePenalties, Skipped> {
        let floor = board.floor_count();
        if board.goals.len() < 3 || floor > MAX_FLOOR {
            return Err(Skipped::Size);
        }
        let mut games = Games::new(board);
        let forward = games.side(dist, true)?;
        let backward = games.side(dist, false)?;
        if forward.entries.is_empty() && backward.entries.is_empty() {
            return Err(Skipped::Useless);
        }
        Ok(TriplePenalties { floor, sides: [forward, backward] })
    }

    /// Triples kept (with a positive or dead penalty in some region), forward
    /// and backward.
    pub fn counts(&self) -> [usize; 2] {
        [self.sides[0].entries.len(), self.sides[1].entries.len()]
    }

    /// The penalties of disjoint triples of `boxes` (sorted; player on
    /// `player`), taken greedily from the largest, plus the pair penalties of
    /// `pairs` among the boxes left over: a lower bound on the pushes beyond
    /// the matching, as the pairs' sum is; [`UNREACHABLE`] if some triple is
    /// dead. 0 when no triple of the boxes has a penalty.
    pub fn sum(&self, boxes: &[u16], player: u16, forward: bool, pairs: Option<&PairPenalties>) -> u32 {
        let side = &self.sides[!forward as usize];
        if side.entries.is_empty() {
            return 0;
        }
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let Scratch { bits, found, taken, rest } = &mut *s;
            let words = self.floor.div_ceil(64);
            bits.clear();
            bits.resize(words, 0);
            for &b in boxes {
                bits[b as usize / 64] |= 1 << (b % 64);
            }
            let has = |bits: &[u64], x: u16| bits[x as usize / 64] >> (x % 64) & 1 == 1;
            found.clear();
            for &a in boxes {
                let nz = &side.nonzero[a as usize * words..(a as usize + 1) * words];
                for (w, (&z, &bw)) in nz.iter().zip(bits.iter()).enumerate() {
                    let mut m = z & bw;
                    while m != 0 {
                        let b = (w * 64) as u16 + m.trailing_zeros() as u16;
                        m &= m - 1;
                        let (start, end) = side.spans[a as usize * self.floor + b as usize];
                        for e in start as usize..end as usize {
                            let entry = &side.entries[e];
                            if !has(bits, entry.c) {
                                continue;
                            }
                            let region = side.labels[e * self.floor + player as usize];
                            match entry.penalty.get(region as usize).copied().unwrap_or(0) {
                                DEAD => return UNREACHABLE,
                                0 => {}
                                p => found.push((p, a, b, entry.c)),
                            }
                        }
                    }
                }
            }
            if found.is_empty() {
                return 0;
            }
            found.sort_unstable_by(|x, y| y.cmp(x));
            taken.clear();
            taken.resize(words, 0);
            let mut sum = 0u32;
            for &(p, a, b, c) in found.iter() {
                if [a, b, c].iter().any(|&x| has(taken, x)) {
                    continue;
                }
                for x in [a, b, c] {
                    taken[x as usize / 64] |= 1 << (x % 64);
                }
                sum += p as u32;
            }
            rest.clear();
            rest.extend(boxes.iter().copied().filter(|&x| !has(taken, x)));
            match pairs.map_or(0, |p| if rest.len() >= 2 { p.sum(rest, player, forward) } else { 0 }) {
                UNREACHABLE => UNREACHABLE,
                p => sum + p,
            }
        })
    }
}

#[derive(Default)]
struct Scratch {
    bits: Vec<u64>,
    found: Vec<(u8, u16, u16, u16)>,
    taken: Vec<u64>,
    rest: Vec<u16>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// The 3-box games of one board: region labels of the sets of squares seen
/// so far, and the work done.
struct Games<'a> {
    board: &'a Board,
    floor: usize,
    /// Per set of three squares (its [`index`]): where its labels start, or
    /// `u32::MAX` before it is flooded.
    at: Vec<u32>,
    labels: Vec<u8>,
    /// Per label block: how many regions.
    counts: Vec<u8>,
    work: u64,
    /// Games played so far, and to play in all (both directions).
    played: u64,
    games: u64,
    /// Per state (index * REGIONS + region): its depth in the current game.
    depth: Vec<u16>,
    queue: Vec<(u16, u16, u16, u8)>,
}

impl<'a> Games<'a> {
    fn new(board: &'a Board) -> Games<'a> {
        let floor = board.floor_count();
        let sets = if floor < 3 { 0 } else { index(floor as u16 - 3, floor as u16 - 2, floor as u16 - 1) + 1 };
        Games {
            board,
            floor,
            at: vec![u32::MAX; sets],
            labels: Vec::new(),
            counts: Vec::new(),
            work: 0,
            played: 0,
            games: 2 * (1..=3).fold(1, |acc, i| acc * (board.goals.len() + 1 - i) as u64 / i as u64),
            depth: vec![u16::MAX; sets * REGIONS],
            queue: Vec::new(),
        }
    }

    /// Where the labels of the sorted squares start, flooding them first if
    /// new; `None` past the label budget.
    fn labels_of(&mut self, a: u16, b: u16, c: u16) -> Option<usize> {
        let key = index(a, b, c);
        if self.at[key] != u32::MAX {
            return Some(self.at[key] as usize);
        }
        if self.labels.len() + self.floor > MAX_LABEL_BYTES {
            return None;
        }
        let start = self.labels.len();
        self.labels.resize(start + self.floor, NO_REGION);
        let lab = &mut self.labels[start..];
        let blocked = |s: u16| s == a || s == b || s == c;
        let mut next = 0u8;
        let mut stack = Vec::new();
        for s in 0..self.floor as u16 {
            if blocked(s) || lab[s as usize] != NO_REGION {
                continue;
            }
            let id = next.min(REGIONS as u8 - 1);
            next = next.saturating_add(1);
            lab[s as usize] = id;
            stack.push(s);
            while let Some(f) = stack.pop() {
                for d in 0..DIRS {
                    let g = self.board.neighbour(f, d);
                    if g != NONE && !blocked(g) && lab[g as usize] == NO_REGION {
                        lab[g as usize] = id;
                        stack.push(g);
                    }
                }
            }
        }
        // a connected floor less three squares has at most ten regions
        debug_assert!(next as usize <= REGIONS);
        self.counts.push(next.min(REGIONS as u8));
        self.at[key] = start as u32;
        Some(start)
    }

    /// One direction's kept triples: to the goals (`forward`, games by pulls
    /// from every set of three goals, the player anywhere) or from the start
    /// squares (by pushes from every set of three, the player in the start
    /// player's region).
    fn side(&mut self, dist: &PushDistances, forward: bool) -> Result<Side, Skipped> {
        let board = self.board;
        let targets: &[u16] = if forward { &board.goals } else { &board.start_boxes };
        let lone = |t: usize, x: u16| if forward { dist.to_goal(t, x) } else { dist.from_start(t, x) };
        let n = targets.len();
        // per set of squares (its index): the least penalty per region. Kept
        // for every set flooded so far, by this side's games or the other's:
        // the games are complete, so a set and region this side never reaches
        // is dead for it (on no solution forward, never reached from the
        // start backward)
        let mut least = vec![[DEAD; REGIONS]; self.at.len()];
        let steps = game_steps(board, forward);
        for t1 in 0..n {
            for t2 in t1 + 1..n {
                for t3 in t2 + 1..n {
                    // past the work limit at the pace of the games so far:
                    // stop now rather than after the limit's worth of work
                    if self.played >= 3 && self.work * self.games > MAX_WORK * self.played {
                        return Err(Skipped::Work);
                    }
                    self.played += 1;
                    let mut set = [targets[t1], targets[t2], targets[t3]];
                    set.sort_unstable();
                    let [a, b, c] = set;
                    let lab = self.labels_of(a, b, c).ok_or(Skipped::Work)?;
                    let seeds: Vec<u8> = if forward {
                        (0..self.counts[lab / self.floor]).collect()
                    } else {
                        match self.labels[lab + board.start_player as usize] {
                            NO_REGION => continue, // the player stands on one of them: not the start
                            r => vec![r],
                        }
                    };
                    for r in seeds {
                        self.depth[index(a, b, c) * REGIONS + r as usize] = 0;
                        self.queue.push((a, b, c, r));
                    }
                    self.game(&steps)?;
                    let ts = [t1, t2, t3];
                    for &(a, b, c, r) in &self.queue {
                        let d = self.depth[index(a, b, c) * REGIONS + r as usize] as u32;
                        let most = ORDERS
                            .iter()
                            .map(|o| {
                                lone(ts[o[0]], a).saturating_add(lone(ts[o[1]], b)).saturating_add(lone(ts[o[2]], c))
                            })
                            .max()
                            .unwrap_or(0);
                        let extra = d.saturating_sub(most).min(DEAD as u32 - 1) as u8;
                        let cell = &mut least[index(a, b, c)][r as usize];
                        *cell = (*cell).min(extra);
                    }
                    for &(a, b, c, r) in &self.queue {
                        self.depth[index(a, b, c) * REGIONS + r as usize] = u16::MAX;
                    }
                    self.queue.clear();
                }
            }
        }
        // keep the triples with a positive or dead penalty in a region they have
        let mut kept: Vec<(u16, u16, u16, [u8; REGIONS], usize)> = Vec::new();
        // in index order, which is not the squares' order: sorted below
        for (key, penalty) in least.iter().enumerate() {
            if self.at[key] == u32::MAX {
                continue;
            }
            let at = self.at[key] as usize;
            let regions = self.counts[at / self.floor] as usize;
            if penalty[..regions].iter().any(|&p| p > 0) {
                let (a, b, c) = unindex(key);
                kept.push((a, b, c, *penalty, at));
            }
        }
        kept.sort_unstable_by_key(|k| (k.0, k.1, k.2));
        let words = self.floor.div_ceil(64);
        let mut side = Side {
            nonzero: vec![0; self.floor * words],
            spans: vec![(0, 0); self.floor * self.floor],
            ..Side::default()
        };
        for (e, &(a, b, c, penalty, at)) in kept.iter().enumerate() {
            side.entries.push(Entry { c, penalty });
            side.labels.extend_from_slice(&self.labels[at..at + self.floor]);
            side.nonzero[a as usize * words + b as usize / 64] |= 1 << (b % 64);
            let span = &mut side.spans[a as usize * self.floor + b as usize];
            if span.1 == 0 {
                span.0 = e as u32;
            }
            span.1 = e as u32 + 1;
        }
        Ok(side)
    }

    /// Breadth-first search of the 3-box game from the queued states with
    /// the moves `steps`: by pulls (`forward` tables: distances to the
    /// seeds) or by pushes (distances from them).
    fn game(&mut self, steps: &[GameSteps]) -> Result<(), Skipped> {
        let mut head = 0;
        while head < self.queue.len() {
            let (a, b, c, r) = self.queue[head];
            head += 1;
            self.work += 1;
            if self.work > MAX_WORK {
                return Err(Skipped::Work);
            }
            let d = self.depth[index(a, b, c) * REGIONS + r as usize];
            let lab = self.labels_of(a, b, c).ok_or(Skipped::Work)?;
            let boxes = [a, b, c];
            for which in 0..3 {
                let z = boxes[which];
                for &(player_at, box_to, player_to) in &steps[z as usize] {
                    if player_at == NONE {
                        continue;
                    }
                    if boxes.contains(&box_to) || (player_to != z && boxes.contains(&player_to)) {
                        continue;
                    }
                    if self.labels[lab + player_at as usize] != r {
                        continue;
                    }
                    let mut next = boxes;
                    next[which] = box_to;
                    next.sort_unstable();
                    let [na, nb, nc] = next;
                    let nl = self.labels_of(na, nb, nc).ok_or(Skipped::Work)?;
                    let nr = self.labels[nl + player_to as usize];
                    let at = index(na, nb, nc) * REGIONS + nr as usize;
                    if self.depth[at] == u16::MAX {
                        self.depth[at] = d + 1;
                        self.queue.push((na, nb, nc, nr));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The orders of three targets.
const ORDERS: [[usize; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];

/// The sorted squares of an [`index`].
fn unindex(i: usize) -> (u16, u16, u16) {
    let mut c = 2;
    while (c + 1) * c * (c - 1) / 6 <= i {
        c += 1;
    }
    let i = i - c * (c - 1) * (c - 2) / 6;
    let mut b = 1;
    while (b + 1) * b / 2 <= i {
        b += 1;
    }
    ((i - b * (b - 1) / 2) as u16, b as u16, c as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unindex_inverts_index() {
        for c in 2..40u16 {
            for b in 1..c {
                for a in 0..b {
                    assert_eq!(unindex(index(a, b, c)), (a, b, c));
                }
            }
        }
    }
}
