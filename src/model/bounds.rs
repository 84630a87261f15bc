//! Lower bounds on push distances, the inputs of the bounded search: lone-box
//! push distances between every square and every goal (and start square), the
//! minimum-cost perfect matching of boxes to targets under them, and the parity
//! every solution's push count has.
//!
//! # Why the matching is a lower bound
//!
//! Take any solution from a state to the goal. Each box ends on its own goal, so
//! the solution assigns boxes to goals one to one. The pushes the solution applies
//! to one box move that box alone from its square to its goal, with the player
//! behind it before each push: a push path of the lone-box game, whose length is
//! at least the lone-box push distance (other boxes only hinder). Each push moves
//! exactly one box, so the solution has at least the sum over boxes of those
//! distances, which is at least the cheapest perfect matching. Backward, the same
//! holds for the pushes from the start: each box came from its own start square.
//! The distances here relax the lone-box game further (the player is assumed to
//! reach any side of the box), which only lowers them.

use super::board::{opposite, Board, DIRS, NONE};
use std::cell::RefCell;

/// No push path: the target cannot be reached from the square.
pub const UNREACHABLE: u32 = u32::MAX;

/// Lone-box push distances of one board.
#[derive(Debug, Clone)]
pub struct PushDistances {
    floor: usize,
    /// `to_goal[g * floor + x]`: pushes to bring a lone box from `x` to goal `g`
    /// (goals in `board.goals` order); `u16::MAX` when impossible.
    to_goal: Vec<u16>,
    /// `from_start[s * floor + x]`: pushes to bring a lone box from start square
    /// `s` to `x` (start squares in `board.start_boxes` order).
    from_start: Vec<u16>,
    /// The parity every solution's push count has.
    parity: u32,
    /// Unique among the tables of this process: the key of the per-thread
    /// parent cache (an address could be reused by the next table).
    id: u64,
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

const FAR: u16 = u16::MAX;

impl PushDistances {
    pub fn new(board: &Board) -> PushDistances {
        let floor = board.floor_count();
        let mut to_goal = vec![FAR; board.goals.len() * floor];
        for (i, &g) in board.goals.iter().enumerate() {
            push_bfs(board, g, false, &mut to_goal[i * floor..(i + 1) * floor]);
        }
        let mut from_start = vec![FAR; board.start_boxes.len() * floor];
        for (i, &s) in board.start_boxes.iter().enumerate() {
            push_bfs(board, s, true, &mut from_start[i * floor..(i + 1) * floor]);
        }
        let coord = |f: u16| {
            let (x, y) = board.coords(f);
            (x + y) as u32
        };
        let sum = |v: &[u16]| v.iter().map(|&f| coord(f)).sum::<u32>();
        // a push changes the sum of the boxes' x + y by exactly one
        let parity = (sum(&board.goals) + sum(&board.start_boxes)) % 2;
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        PushDistances { floor, to_goal, from_start, parity, id }
    }

    /// The parity (0 or 1) of the push count of every solution of the level.
    pub fn parity(&self) -> u32 {
        self.parity
    }

    /// Lone-box pushes from `x` to goal number `g`.
    pub fn to_goal(&self, g: usize, x: u16) -> u32 {
        widen(self.to_goal[g * self.floor + x as usize])
    }

    /// Lone-box pushes from start square number `s` to `x`.
    pub fn from_start(&self, s: usize, x: u16) -> u32 {
        widen(self.from_start[s * self.floor + x as usize])
    }

    /// A lower bound on the pushes from the state with `boxes` to the goal
    /// (`forward`), or from the start to it (`!forward`): the cheapest perfect
    /// matching of boxes to goals (start squares) under lone-box push distances.
    /// [`UNREACHABLE`] when no perfect matching exists (the state is dead).
    pub fn estimate(&self, boxes: &[u16], forward: bool) -> u32 {
        self.estimate_capped(boxes, forward, u32::MAX - 1)
    }

    /// [`PushDistances::estimate`] when it is at most `cap`; otherwise some
    /// lower bound above `cap` (so a search that only asks "over the cap?" may
    /// stop early): first the sum of each box's nearest target, then the
    /// matching, whose partial optimum after each target only grows.
    pub fn estimate_capped(&self, boxes: &[u16], forward: bool, cap: u32) -> u32 {
        let n = boxes.len();
        let table = if forward { &self.to_goal } else { &self.from_start };
        MATCHING.with(|m| {
            let mut m = m.borrow_mut();
            m.cost.clear();
            for t in 0..n {
                let row = &table[t * self.floor..(t + 1) * self.floor];
                m.cost.extend(boxes.iter().map(|&b| row[b as usize]));
            }
            // each box pays at least its nearest target: a cheap first answer
            let mut nearest = 0u32;
            for b in 0..n {
                let d = (0..n).map(|t| m.cost[t * n + b]).min().unwrap_or(FAR);
                if d == FAR {
                    return UNREACHABLE;
                }
                nearest += d as u32;
            }
            if nearest > cap {
                return nearest;
            }
            m.solve(n, cap)
        })
    }
}

impl PushDistances {
    /// For a successor of `parent` whose box moved from `from` to `to` (giving
    /// `child`): a value at most `cap` exactly when the child's bound is at
    /// most `cap`, and when above `cap` a lower bound on it. It reuses the
    /// parent's matching (computed once per parent and thread): moved along
    /// with its box, that matching costs at least the child's optimum, so when
    /// it fits the cap no new matching is needed; and the child's optimum is at
    /// least the parent's less one (a push shortens a lone-box distance by at
    /// most one), so when that exceeds the cap neither is.
    pub fn estimate_child(&self, parent: &[u16], from: u16, to: u16, child: &[u16], forward: bool, cap: u32) -> u32 {
        let table = if forward { &self.to_goal } else { &self.from_start };
        let cached = PARENT.with(|c| {
            let mut c = c.borrow_mut();
            if c.forward != forward || c.boxes != parent || c.owner != self.id {
                let value = self.estimate(parent, forward);
                c.boxes.clear();
                c.boxes.extend_from_slice(parent);
                c.forward = forward;
                c.owner = self.id;
                c.value = value;
                c.target.clear();
                if value != UNREACHABLE {
                    MATCHING.with(|m| {
                        let m = m.borrow();
                        // owner[col] is the target row (1-based) of box col
                        c.target.extend((1..=parent.len()).map(|col| m.owner[col] - 1));
                    });
                }
            }
            let i = parent.binary_search(&from).ok()?;
            let t = *c.target.get(i)?;
            Some((c.value, t))
        });
        if let Some((value, t)) = cached {
            let (old, new) = (table[t * self.floor + from as usize], table[t * self.floor + to as usize]);
            if new != FAR {
                let moved = value - old as u32 + new as u32;
                if moved <= cap {
                    return moved;
                }
            }
            if value.saturating_sub(1) > cap {
                return value - 1;
            }
        }
        self.estimate_capped(child, forward, cap)
    }
}

/// The last parent whose matching [`PushDistances::estimate_child`] computed,
/// on this thread.
#[derive(Default)]
struct ParentMatch {
    /// The [`PushDistances::id`] it was computed with (0: none).
    owner: u64,
    forward: bool,
    boxes: Vec<u16>,
    value: u32,
    /// Per box of `boxes`: its target in the optimal matching.
    target: Vec<usize>,
}

thread_local! {
    static PARENT: RefCell<ParentMatch> = RefCell::new(ParentMatch::default());
}

fn widen(d: u16) -> u32 {
    if d == FAR {
        UNREACHABLE
    } else {
        d as u32
    }
}

/// Lone-box push distances from (`forward`) or to (`!forward`) `source`, the
/// player assumed able to reach any side of the box.
fn push_bfs(board: &Board, source: u16, forward: bool, dist: &mut [u16]) {
    dist[source as usize] = 0;
    let mut queue = std::collections::VecDeque::from([source]);
    while let Some(y) = queue.pop_front() {
        for d in 0..DIRS {
            // forward: a push from y to z = y + d needs the player on y - d;
            // backward: y was reached by a push from x = y - d, player on x - d
            let (next, player) = if forward {
                (board.neighbour(y, d), board.neighbour(y, opposite(d)))
            } else {
                let x = board.neighbour(y, opposite(d));
                (x, if x == NONE { NONE } else { board.neighbour(x, opposite(d)) })
            };
            if next == NONE || player == NONE || dist[next as usize] != FAR {
                continue;
            }
            dist[next as usize] = dist[y as usize] + 1;
            queue.push_back(next);
        }
    }
}

thread_local! {
    static MATCHING: RefCell<Matching> = RefCell::new(Matching::default());
}

/// Buffers of the Hungarian method (shortest augmenting paths with potentials).
#[derive(Default)]
struct Matching {
    /// `cost[t * n + b]`: target `t`, box `b`.
    cost: Vec<u16>,
    u: Vec<i64>,
    v: Vec<i64>,
    way: Vec<usize>,
    owner: Vec<usize>,
    minv: Vec<i64>,
    used: Vec<bool>,
}

/// A stand-in cost for an impossible pair, large enough that any matching using
/// one costs more than every possible one without.
const BIG: i64 = 1 << 40;

impl Matching {
    /// The cheapest perfect matching of the `n` x `n` costs, or [`UNREACHABLE`];
    /// stops as soon as the matching of the targets so far costs more than
    /// `cap` (it only grows as targets are added) and returns that cost.
    fn solve(&mut self, n: usize, cap: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        // rows are targets (1-based), columns boxes (1-based); column 0 is free
        self.u.clear();
        self.u.resize(n + 1, 0);
        self.v.clear();
        self.v.resize(n + 1, 0);
        self.way.clear();
        self.way.resize(n + 1, 0);
        self.owner.clear();
        self.owner.resize(n + 1, 0);
        let cost = |c: u16| if c == FAR { BIG } else { c as i64 };
        for row in 1..=n {
            self.owner[0] = row;
            let mut col0 = 0;
            self.minv.clear();
            self.minv.resize(n + 1, i64::MAX);
            self.used.clear();
            self.used.resize(n + 1, false);
            loop {
                self.used[col0] = true;
                let r = self.owner[col0];
                let (mut delta, mut col1) = (i64::MAX, 0);
                for col in 1..=n {
                    if self.used[col] {
                        continue;
                    }
                    let cur = cost(self.cost[(r - 1) * n + col - 1]) - self.u[r] - self.v[col];
                    if cur < self.minv[col] {
                        self.minv[col] = cur;
                        self.way[col] = col0;
                    }
                    if self.minv[col] < delta {
                        delta = self.minv[col];
                        col1 = col;
                    }
                }
                for col in 0..=n {
                    if self.used[col] {
                        self.u[self.owner[col]] += delta;
                        self.v[col] -= delta;
                    } else {
                        self.minv[col] -= delta;
                    }
                }
                col0 = col1;
                if self.owner[col0] == 0 {
                    break;
                }
            }
            loop {
                let prev = self.way[col0];
                self.owner[col0] = self.owner[prev];
                col0 = prev;
                if col0 == 0 {
                    break;
                }
            }
            // the optimum over the targets so far, a lower bound on the whole
            let partial = -self.v[0];
            if partial >= BIG {
                return UNREACHABLE;
            }
            if partial > cap as i64 {
                return partial as u32;
            }
        }
        let total = -self.v[0];
        if total >= BIG {
            UNREACHABLE
        } else {
            total as u32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::level::parse_one;

    fn board(t: &str) -> Board {
        Board::new(&parse_one(t, "t").unwrap()).unwrap()
    }

    #[test]
    fn matching_finds_the_cheapest_assignment() {
        let mut m = Matching::default();
        // targets x boxes: the diagonal costs 1 + 5 + 9, the best is 2 + 4 + 3... by brute force
        let costs = [[4u16, 1, 3], [2, 0, 5], [3, 2, 2]];
        m.cost = costs.iter().flatten().copied().collect();
        let mut best = u32::MAX;
        for p in [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
            best = best.min((0..3).map(|t| costs[t][p[t]] as u32).sum());
        }
        assert_eq!(m.solve(3, u32::MAX), best);
        // an impossible pair that must be used
        m.cost = vec![FAR, 1, FAR, FAR];
        assert_eq!(m.solve(2, u32::MAX), UNREACHABLE);
        m.cost = vec![FAR, 1, 2, FAR];
        assert_eq!(m.solve(2, u32::MAX), 3);
        // capped: an answer above the cap, never above the true optimum
        m.cost = costs.iter().flatten().copied().collect();
        let capped = m.solve(3, 1);
        assert!(capped > 1 && capped <= best, "{capped}");
    }

    #[test]
    fn one_box_in_a_corridor_is_its_distance() {
        let b = board("#######\n#@$  .#\n#######\n");
        let d = PushDistances::new(&b);
        assert_eq!(d.estimate(&b.start_boxes, true), 3);
        assert_eq!(d.estimate(&b.goals, false), 3);
        assert_eq!(d.parity(), 1);
    }
}
