//! Pair penalties from the 2-box game: for every two squares, how many pushes
//! two boxes standing there need beyond their lone-box distances, whatever two
//! targets they are sent to. Added over disjoint pairs of boxes to the
//! matching bound of [`super::bounds`], they keep it a lower bound.
//!
//! # Why the matching plus the penalties of disjoint pairs is a lower bound
//!
//! Take any solution from a state to the goal, and the goal it brings each box
//! to: an assignment `π`. The pushes it applies to boxes `a` and `b` together,
//! with every other box removed, are a solution of the 2-box game that brings
//! `a` to `π(a)` and `b` to `π(b)` (removing boxes never takes a push away), so
//! they number at least that game's distance `D2(a, b → π(a), π(b))`. The
//! penalty `P(a, b)` is the least, over every ordered pair of distinct targets
//! `(g, h)`, of `D2(a, b → g, h) - d(a, g) - d(b, h)`, where `d` is the lone-box
//! distance the matching uses; so those pushes number at least
//! `d(a, π(a)) + d(b, π(b)) + P(a, b)`. Each push moves one box, so over
//! disjoint pairs and the remaining boxes the solution has at least
//! `Σ d(x, π(x)) + Σ P`, and `Σ d(x, π(x))` is at least the cheapest matching.
//! Backward, the same holds for the pushes from the start, with start squares
//! as targets and the 2-box game played forward from them (player in the
//! start player's region). A pair with no target pair at all is dead.
//!
//! The player counts too: in the projection the player stands in the region of
//! the floor (with only `a` and `b` placed) that holds its square, so the
//! penalty is kept per region of that floor, and a pair that is dead for the
//! player's region makes the state dead. Regions are numbered per pair of
//! squares ([`Regions`]); where every region has the same penalty only the one
//! number is kept.

use super::board::{opposite, Board, DIRS, NONE};
use super::bounds::PushDistances;

/// A pair that can reach no two targets: every state holding it is dead.
pub const DEAD: u8 = u8::MAX;

/// Largest board (floor squares) the tables are built for: the region labels
/// take `floor^3 / 2` bytes, and the 2-box games `targets^2 * floor^2` steps.
pub const MAX_FLOOR: usize = 250;

/// Largest number of 2-box game states (target pairs times square pairs) the
/// tables are built for, about a second of work per side.
pub const MAX_WORK: usize = 60_000_000;

/// Pair penalties of one level, both directions.
#[derive(Debug, Clone)]
pub struct PairPenalties {
    floor: usize,
    /// `forward[x * floor + y]` (symmetric): pushes beyond the lone-box
    /// distances to the goals, the least over the player's regions; [`DEAD`]
    /// when no two goals can be reached.
    forward: Vec<u8>,
    /// The same from the start squares.
    backward: Vec<u8>,
    /// Per side, where the player's region matters: the penalty for each
    /// region of the floor with the two squares blocked (region numbers of
    /// [`Regions`]), reached through `regional_at`.
    regional: [Vec<[u8; MAX_REGIONS]>; 2],
    /// Per side and unordered pair of squares: 0, or 1 + its entry in `regional`.
    regional_at: [Vec<u32>; 2],
    regions: Regions,
    /// Whether any penalty is positive (else the tables add nothing).
    useful: bool,
    /// Per side, per square `x`: a bitset (`floor.div_ceil(64)` words) of the
    /// squares `y` whose pair with `x` may have a penalty (positive or dead,
    /// in some region), so a sum visits only those pairs.
    nonzero: [Vec<u64>; 2],
}

/// The [`PairPenalties::nonzero`] bitsets of one side.
fn nonzero_rows(floor: usize, table: &[u8], regional_at: &[u32]) -> Vec<u64> {
    let words = floor.div_ceil(64);
    let mut out = vec![0u64; floor * words];
    for x in 0..floor {
        for y in 0..floor {
            if x != y && (table[x * floor + y] != 0 || regional_at[pair(x, y)] > 0) {
                out[x * words + y / 64] |= 1 << (y % 64);
            }
        }
    }
    out
}

/// Whether the tables hold any penalty (or dead pair) at all.
fn any_penalty(forward: &[u8], backward: &[u8], regional: [&[[u8; MAX_REGIONS]]; 2]) -> bool {
    forward.iter().chain(backward).any(|&p| p > 0) || regional.iter().any(|r| r.iter().flatten().any(|&p| p > 0))
}

/// [`PairPenalties`] as plain data: the tables a file keeps (the region labels
/// are not kept: they follow from the board).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairParts {
    /// `floor * floor` penalties from the goals, then from the start squares.
    pub forward: Vec<u8>,
    pub backward: Vec<u8>,
    /// Per side (forward, backward): the per-region penalties of the pairs
    /// whose regions differ, and per unordered pair 0 or 1 + its entry.
    pub regional: [Vec<[u8; MAX_REGIONS]>; 2],
    pub regional_at: [Vec<u32>; 2],
}

/// Region labels of the floor with two squares blocked, for every pair.
#[derive(Debug, Clone)]
struct Regions {
    floor: usize,
    /// `labels[pair(x, y) * floor + s]`: the region of `s` (x, y themselves: NO_REGION).
    labels: Vec<u8>,
    /// Regions per pair.
    count: Vec<u8>,
}

const NO_REGION: u8 = u8::MAX;
/// At most this many regions are told apart; further ones share the last label
/// (merging regions only lowers a distance, so the tables stay lower bounds).
pub const MAX_REGIONS: usize = 8;

#[inline]
fn pair(x: usize, y: usize) -> usize {
    let (a, b) = if x < y { (x, y) } else { (y, x) };
    b * (b - 1) / 2 + a
}

impl Regions {
    fn new(board: &Board) -> Regions {
        let floor = board.floor_count();
        let pairs = floor * floor.saturating_sub(1) / 2;
        let mut labels = vec![NO_REGION; pairs * floor];
        let mut count = vec![0u8; pairs];
        let mut stack = Vec::new();
        for y in 1..floor {
            for x in 0..y {
                let p = pair(x, y);
                let lab = &mut labels[p * floor..(p + 1) * floor];
                let mut next = 0u8;
                for s in 0..floor {
                    if s == x || s == y || lab[s] != NO_REGION {
                        continue;
                    }
                    let id = next.min(MAX_REGIONS as u8 - 1);
                    next = next.saturating_add(1);
                    lab[s] = id;
                    stack.push(s as u16);
                    while let Some(f) = stack.pop() {
                        for d in 0..DIRS {
                            let g = board.neighbour(f, d);
                            if g != NONE && g as usize != x && g as usize != y && lab[g as usize] == NO_REGION {
                                lab[g as usize] = id;
                                stack.push(g);
                            }
                        }
                    }
                }
                count[p] = next.min(MAX_REGIONS as u8);
            }
        }
        Regions { floor, labels, count }
    }

    #[inline]
    fn label(&self, x: u16, y: u16, s: u16) -> u8 {
        self.labels[pair(x as usize, y as usize) * self.floor + s as usize]
    }
}

impl PairPenalties {
    /// The tables of `board` under the lone-box distances `dist`, or `None`
    /// when the board is too large for them (see [`MAX_FLOOR`], [`MAX_WORK`])
    /// or has fewer than two boxes.
    pub fn new(board: &Board, dist: &PushDistances) -> Option<PairPenalties> {
        let floor = board.floor_count();
        let n = board.goals.len();
        if n < 2 || floor > MAX_FLOOR || n * n * floor * floor / 2 > MAX_WORK {
            return None;
        }
        let regions = Regions::new(board);
        let (forward, at_f, regional_f) = side_table(board, &regions, dist, true);
        let (backward, at_b, regional_b) = side_table(board, &regions, dist, false);
        let useful = any_penalty(&forward, &backward, [&regional_f, &regional_b]);
        Some(PairPenalties {
            floor,
            nonzero: [nonzero_rows(floor, &forward, &at_f), nonzero_rows(floor, &backward, &at_b)],
            forward,
            backward,
            regional: [regional_f, regional_b],
            regional_at: [at_f, at_b],
            regions,
            useful,
        })
    }

    /// The tables as plain data, for a file to keep (`storage::kdb`).
    pub fn parts(&self) -> PairParts {
        PairParts {
            forward: self.forward.clone(),
            backward: self.backward.clone(),
            regional: self.regional.clone(),
            regional_at: self.regional_at.clone(),
        }
    }

    /// The tables of `board` from the parts [`PairPenalties::parts`] gave
    /// (the region labels are derived again from the board); an error names
    /// the first part whose size or index does not fit the board.
    pub fn from_parts(board: &Board, parts: PairParts) -> Result<PairPenalties, String> {
        let floor = board.floor_count();
        if floor > MAX_FLOOR {
            return Err(format!("pair tables for {floor} floor squares, over the limit of {MAX_FLOOR}"));
        }
        let pairs = floor * floor.saturating_sub(1) / 2;
        for (name, t) in [("forward", &parts.forward), ("backward", &parts.backward)] {
            if t.len() != floor * floor {
                return Err(format!("{name} pair table of {} entries, the board needs {}", t.len(), floor * floor));
            }
        }
        for side in 0..2 {
            if parts.regional_at[side].len() != pairs {
                return Err(format!(
                    "regional index of {} pairs, the board has {pairs}",
                    parts.regional_at[side].len()
                ));
            }
            if let Some(&i) = parts.regional_at[side].iter().find(|&&i| i as usize > parts.regional[side].len()) {
                return Err(format!("regional index entry {i} past the {} entries", parts.regional[side].len()));
            }
        }
        let useful = any_penalty(&parts.forward, &parts.backward, [&parts.regional[0], &parts.regional[1]]);
        Ok(PairPenalties {
            floor,
            nonzero: [
                nonzero_rows(floor, &parts.forward, &parts.regional_at[0]),
                nonzero_rows(floor, &parts.backward, &parts.regional_at[1]),
            ],
            forward: parts.forward,
            backward: parts.backward,
            regional: parts.regional,
            regional_at: parts.regional_at,
            regions: Regions::new(board),
            useful,
        })
    }

    /// Whether any pair has a penalty (or is dead); if not, the sum is always 0.
    pub fn useful(&self) -> bool {
        self.useful
    }

    /// The penalties of disjoint pairs of `boxes` (player on `player`), taken
    /// greedily from the largest: [`super::bounds::UNREACHABLE`] if some pair
    /// is dead. Any set of disjoint pairs gives a lower bound; the greedy one
    /// is a large one.
    pub fn sum(&self, boxes: &[u16], player: u16, forward: bool) -> u32 {
        if !self.useful {
            return 0;
        }
        let t = if forward { &self.forward } else { &self.backward };
        let (regional, at) = (&self.regional[!forward as usize], &self.regional_at[!forward as usize]);
        let (nonzero, words) = (&self.nonzero[!forward as usize], self.floor.div_ceil(64));
        debug_assert!(boxes.windows(2).all(|w| w[0] < w[1]), "boxes are sorted");
        PICK.with(|pick| {
            let mut pick = pick.borrow_mut();
            let Pick { found, taken, bits } = &mut *pick;
            bits.clear();
            bits.resize(words, 0);
            for &b in boxes {
                bits[b as usize / 64] |= 1 << (b % 64);
            }
            // the pairs `x < y` of boxes that may have a penalty: those in
            // `x`'s bitset, from `x`'s word on with the squares up to `x` masked
            found.clear();
            for &x in boxes {
                let (xw, xb) = (x as usize / 64, x as usize % 64);
                let row = &t[x as usize * self.floor..(x as usize + 1) * self.floor];
                let nz = &nonzero[x as usize * words..(x as usize + 1) * words];
                for w in xw..words {
                    let mut m = nz[w] & bits[w];
                    if w == xw {
                        m &= !((2u64 << xb).wrapping_sub(1));
                    }
                    while m != 0 {
                        let y = (w * 64 + m.trailing_zeros() as usize) as u16;
                        m &= m - 1;
                        let mut p = row[y as usize];
                        if p != DEAD && !regional.is_empty() {
                            let i = at[pair(x as usize, y as usize)];
                            if i > 0 {
                                p = regional[i as usize - 1][self.regions.label(x, y, player) as usize];
                            }
                        }
                        if p == DEAD {
                            return super::bounds::UNREACHABLE;
                        }
                        if p > 0 {
                            found.push((p, x, y));
                        }
                    }
                }
            }
            if found.is_empty() {
                return 0;
            }
            greedy(found, taken, words)
        })
    }
}

/// The penalties of disjoint pairs from `found` (ascending in `(x, y)`),
/// taken greedily: the largest first, and among equal penalties the later
/// pair first, the order of sorting `(p, x, y)` descending. One pass per
/// penalty present, which are few, instead of a sort.
fn greedy(found: &[(u8, u16, u16)], taken: &mut Vec<u64>, words: usize) -> u32 {
    taken.clear();
    taken.resize(words, 0);
    let mut present = [0u64; 4];
    for &(p, _, _) in found {
        present[p as usize / 64] |= 1 << (p % 64);
    }
    let mut sum = 0u32;
    for w in (0..4).rev() {
        let mut m = present[w];
        while m != 0 {
            let bit = 63 - m.leading_zeros() as usize;
            m &= !(1u64 << bit);
            let want = (w * 64 + bit) as u8;
            for &pair in found.iter().rev().filter(|f| f.0 == want) {
                sum += take(taken, pair);
            }
        }
    }
    sum
}

/// Takes pair `(p, x, y)` when neither box is in a pair yet: its penalty, or 0.
#[inline]
fn take(taken: &mut [u64], (p, x, y): (u8, u16, u16)) -> u32 {
    let (xm, ym) = (1u64 << (x % 64), 1u64 << (y % 64));
    if taken[x as usize / 64] & xm == 0 && taken[y as usize / 64] & ym == 0 {
        taken[x as usize / 64] |= xm;
        taken[y as usize / 64] |= ym;
        p as u32
    } else {
        0
    }
}

#[derive(Default)]
struct Pick {
    found: Vec<(u8, u16, u16)>,
    /// Squares of boxes already in a pair, and of all boxes, as bitsets.
    taken: Vec<u64>,
    bits: Vec<u64>,
}

thread_local! {
    static PICK: std::cell::RefCell<Pick> = std::cell::RefCell::new(Pick::default());
}

/// One direction's table: the least penalty of every square pair over every
/// ordered target pair, by one 2-box game per unordered target pair (boxes
/// labelled, so both orders are covered); per player region where the regions
/// differ, and the least over regions.
fn side_table(
    board: &Board,
    regions: &Regions,
    dist: &PushDistances,
    forward: bool,
) -> (Vec<u8>, Vec<u32>, Vec<[u8; MAX_REGIONS]>) {
    let floor = board.floor_count();
    let targets: &[u16] = if forward { &board.goals } else { &board.start_boxes };
    let lone = |t: usize, x: u16| if forward { dist.to_goal(t, x) } else { dist.from_start(t, x) };
    // per unordered pair (x < y) and region
    let mut by_region = vec![[DEAD; MAX_REGIONS]; floor * floor.saturating_sub(1) / 2];
    let mut depth = vec![u16::MAX; floor * floor * MAX_REGIONS];
    let mut queue: Vec<(u16, u16, u8)> = Vec::new();
    for t1 in 0..targets.len() {
        for t2 in t1 + 1..targets.len() {
            depth.fill(u16::MAX);
            queue.clear();
            let (g1, g2) = (targets[t1], targets[t2]);
            let seeds: Vec<u8> = if forward {
                // solved: the player anywhere
                (0..regions.count[pair(g1 as usize, g2 as usize)]).collect()
            } else {
                let at = regions.label(g1, g2, board.start_player);
                if at == NO_REGION {
                    continue; // the player stands on one of them: not the start
                }
                vec![at]
            };
            for r in seeds {
                depth[(g1 as usize * floor + g2 as usize) * MAX_REGIONS + r as usize] = 0;
                queue.push((g1, g2, r));
            }
            game(board, regions, forward, &mut depth, &mut queue);
            for a in 0..floor {
                for b in 0..floor {
                    if a == b {
                        continue;
                    }
                    // box 1 went to (came from) g1, box 2 to g2
                    let lone_sum = lone(t1, a as u16).saturating_add(lone(t2, b as u16));
                    let at = (a * floor + b) * MAX_REGIONS;
                    let cell = &mut by_region[pair(a, b)];
                    for (r, &d) in depth[at..at + MAX_REGIONS].iter().enumerate() {
                        if d != u16::MAX {
                            let extra = (d as u32).saturating_sub(lone_sum).min(DEAD as u32 - 1) as u8;
                            cell[r] = cell[r].min(extra);
                        }
                    }
                }
            }
        }
    }
    let mut least = vec![DEAD; floor * floor];
    let mut at = vec![0u32; by_region.len()];
    let mut regional = Vec::new();
    for y in 1..floor {
        for x in 0..y {
            let p = pair(x, y);
            let cell = &by_region[p][..regions.count[p] as usize];
            let low = cell.iter().copied().min().unwrap_or(DEAD);
            least[x * floor + y] = low;
            least[y * floor + x] = low;
            if cell.iter().any(|&v| v != low) {
                regional.push(by_region[p]);
                at[p] = regional.len() as u32;
            }
        }
    }
    (least, at, regional)
}

/// Breadth-first search of the labelled 2-box game from the queued states:
/// backward by pulls (`forward` tables: distances to the seeds), forward by
/// pushes (distances from them). `depth[(a * floor + b) * MAX_REGIONS + r]`.
fn game(board: &Board, regions: &Regions, forward: bool, depth: &mut [u16], queue: &mut Vec<(u16, u16, u8)>) {
    let floor = board.floor_count();
    let mut head = 0;
    while head < queue.len() {
        let (a, b, r) = queue[head];
        head += 1;
        let d = depth[(a as usize * floor + b as usize) * MAX_REGIONS + r as usize];
        for which in 0..2 {
            let (z, other) = if which == 0 { (a, b) } else { (b, a) };
            for dir in 0..DIRS {
                // a pull moves the box from z to z + dir, the player from
                // z + dir to z + 2 dir; a push moves the box to z + dir with
                // the player coming from z - dir and ending on z
                let (player_at, box_to, player_to) = if forward {
                    let n1 = board.neighbour(z, dir);
                    (n1, n1, if n1 == NONE { NONE } else { board.neighbour(n1, dir) })
                } else {
                    (board.neighbour(z, opposite(dir)), board.neighbour(z, dir), z)
                };
                if player_at == NONE || box_to == NONE || player_to == NONE || box_to == other || player_to == other {
                    continue;
                }
                if regions.label(a, b, player_at) != r {
                    continue;
                }
                let (na, nb) = if which == 0 { (box_to, b) } else { (a, box_to) };
                let nr = regions.label(na, nb, player_to);
                let at = (na as usize * floor + nb as usize) * MAX_REGIONS + nr as usize;
                if depth[at] == u16::MAX {
                    depth[at] = d + 1;
                    queue.push((na, nb, nr));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The greedy pick by sorting, as it was first written.
    fn greedy_by_sorting(found: &[(u8, u16, u16)], words: usize) -> u32 {
        let mut sorted = found.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let mut taken = vec![0u64; words];
        sorted.into_iter().map(|pair| take(&mut taken, pair)).sum()
    }

    proptest! {
        /// The pass per penalty takes the same pairs as sorting: random pairs
        /// of squares (`x < y`, ascending as `sum` finds them), penalties
        /// from 1 to 254.
        #[test]
        fn greedy_agrees_with_sorting(
            pairs in proptest::collection::btree_set((0u16..200, 0u16..200), 0..60),
            penalties in proptest::collection::vec(1u8..=254, 60),
            few in any::<bool>(),
        ) {
            let found: Vec<(u8, u16, u16)> = pairs
                .iter()
                .filter(|(x, y)| x < y)
                .zip(&penalties)
                .map(|(&(x, y), &p)| (if few { 1 + p % 3 } else { p }, x, y))
                .collect();
            let words = 200usize.div_ceil(64);
            let mut taken = Vec::new();
            prop_assert_eq!(greedy(&found, &mut taken, words), greedy_by_sorting(&found, words));
        }
    }
}
