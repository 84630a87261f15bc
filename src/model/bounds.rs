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
use super::pairs::{in_turn, Join, PairPenalties};
use super::triples::{Skipped, TriplePenalties};
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
    /// stop early): the matching's dual objective, which starts at the sum of
    /// each box's nearest target and only grows ([`Matching::solve`]).
    pub fn estimate_capped(&self, boxes: &[u16], forward: bool, cap: u32) -> u32 {
        MATCHING.with(|m| {
            let mut m = m.borrow_mut();
            m.load(self.table(forward), self.floor, boxes);
            m.solve(cap)
        })
    }

    fn table(&self, forward: bool) -> &[u16] {
        if forward {
            &self.to_goal
        } else {
            &self.from_start
        }
    }
}

/// A successor asked about: `boxes` (sorted) and `player` (a square of its
/// player region), reached from `parent` by the box that moved from `from`
/// to `to`.
#[derive(Debug, Clone, Copy)]
pub struct Child<'a> {
    pub parent: &'a [u16],
    pub from: u16,
    pub to: u16,
    pub boxes: &'a [u16],
    pub player: u16,
}

/// The bounded search's lower bound: the matching of [`PushDistances`] plus,
/// where the board is small enough for them, the larger of two sums of
/// penalties over disjoint groups of boxes: the [`PairPenalties`] of pairs,
/// and the [`TriplePenalties`] of triples with the pairs of the boxes left
/// over (why each sum is still a lower bound is in `pairs.rs` and
/// `triples.rs`).
#[derive(Debug, Clone)]
pub struct LowerBounds {
    pub distances: PushDistances,
    pub pairs: Option<PairPenalties>,
    pub triples: Option<TriplePenalties>,
}

impl LowerBounds {
    /// The matching alone (`pairs` false), or with the pair penalties.
    pub fn new(board: &Board, pairs: bool) -> LowerBounds {
        Self::with_kept_pairs(board, pairs, None)
    }

    /// [`LowerBounds::new`] with the pair penalties taken from `kept` (a
    /// deadlock database's) when given, instead of built here.
    pub fn with_kept_pairs(board: &Board, pairs: bool, kept: Option<&PairPenalties>) -> LowerBounds {
        Self::with_kept_pairs_joined(board, pairs, kept, &in_turn)
    }

    /// [`LowerBounds::with_kept_pairs`], the pair tables' two sides built
    /// by `join` (see [`PairPenalties::new_joined`]).
    pub fn with_kept_pairs_joined(
        board: &Board,
        pairs: bool,
        kept: Option<&PairPenalties>,
        join: Join<'_>,
    ) -> LowerBounds {
        let distances = PushDistances::new(board);
        let pairs = match (pairs, kept) {
            (false, _) => None,
            (true, Some(p)) => Some(p.clone()),
            (true, None) => PairPenalties::new_joined(board, &distances, join),
        };
        LowerBounds { distances, pairs: pairs.filter(|p| p.useful()), triples: None }
    }

    /// The same bound with the triple penalties of `board` added where they
    /// can be built (see [`TriplePenalties::new`]); unchanged, with the reason,
    /// where they cannot.
    pub fn with_triples(mut self, board: &Board) -> (LowerBounds, Option<Skipped>) {
        match TriplePenalties::new(board, &self.distances) {
            Ok(t) => {
                self.triples = Some(t);
                (self, None)
            }
            Err(why) => (self, Some(why)),
        }
    }

    /// The parity (0 or 1) of the push count of every solution of the level.
    pub fn parity(&self) -> u32 {
        self.distances.parity()
    }

    /// A lower bound on the pushes from the state with `boxes` and the player
    /// on `player` (any square of its region) to the goal (`forward`), or
    /// from the start to it; [`UNREACHABLE`] for a dead state.
    pub fn estimate(&self, boxes: &[u16], player: u16, forward: bool) -> u32 {
        self.estimate_capped(boxes, player, forward, u32::MAX - 1)
    }

    /// [`LowerBounds::estimate`] when it is at most `cap`; otherwise some
    /// lower bound above `cap`.
    pub fn estimate_capped(&self, boxes: &[u16], player: u16, forward: bool, cap: u32) -> u32 {
        let extra = self.pairs.as_ref().map_or(0, |p| p.sum(boxes, player, forward));
        let matching = |cap| self.distances.estimate_capped(boxes, forward, cap);
        let h = with_pairs(extra, cap, matching);
        self.raised_by_triples(h, extra, cap, boxes, player, forward, matching)
    }

    /// [`PushDistances::child_bound`] with the child's pair penalties added.
    pub fn estimate_child(&self, c: &Child<'_>, forward: bool, cap: u32, exact: bool) -> u32 {
        let extra = self.pairs.as_ref().map_or(0, |p| p.sum_child(c.parent, c.from, c.to, c.player, forward));
        let matching = |cap| self.distances.child_bound(c.parent, c.from, c.to, c.boxes, forward, cap, exact);
        let h = with_pairs(extra, cap, matching);
        self.raised_by_triples(h, extra, cap, c.boxes, c.player, forward, matching)
    }

    /// `h`, the matching plus the pairs' `extra`, raised to the matching plus
    /// the triples' sum where that is larger. Only a state the pairs keep
    /// (`h <= cap`) is asked, so the triples cost nothing where the pairs
    /// already drop it; the matching is asked again under the new sum, so a
    /// value at most the cap stays exactly as good as `matching` makes it.
    #[allow(clippy::too_many_arguments)]
    fn raised_by_triples(
        &self,
        h: u32,
        extra: u32,
        cap: u32,
        boxes: &[u16],
        player: u16,
        forward: bool,
        matching: impl FnOnce(u32) -> u32,
    ) -> u32 {
        let Some(triples) = &self.triples else { return h };
        if h > cap {
            return h;
        }
        match triples.sum(boxes, player, forward, self.pairs.as_ref()) {
            grouped if grouped <= extra => h,
            grouped => with_pairs(grouped, cap, matching),
        }
    }
}

/// The pair penalties `extra` plus `matching(cap less them)`: at most `cap`
/// exactly when the matching fits what the penalties leave of it.
fn with_pairs(extra: u32, cap: u32, matching: impl FnOnce(u32) -> u32) -> u32 {
    if extra == UNREACHABLE {
        return UNREACHABLE;
    }
    if extra > cap {
        return extra;
    }
    match matching(cap - extra) {
        UNREACHABLE => UNREACHABLE,
        m => m.saturating_add(extra).min(UNREACHABLE - 1),
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
    /// most one), so when that exceeds the cap neither is. Otherwise only the
    /// moved box's row changed: it is taken out of the parent's optimal
    /// matching and put back with its new costs by one shortest augmenting
    /// path over the parent's dual potentials, which stay feasible for every
    /// other row (O(n^2) instead of a whole matching).
    pub fn estimate_child(&self, parent: &[u16], from: u16, to: u16, child: &[u16], forward: bool, cap: u32) -> u32 {
        self.child_bound(parent, from, to, child, forward, cap, false)
    }

    /// [`PushDistances::estimate_child`], and with `exact` a value that, when
    /// at most `cap`, is the child's bound exactly (what an order of states
    /// needs, not only a filter): the parent's matching moved along with its
    /// box is then taken as the answer only when the box came one step nearer
    /// its target, where it is the parent's optimum less one, which the
    /// child's optimum cannot be below; otherwise the moved row is matched
    /// again.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn child_bound(
        &self,
        parent: &[u16],
        from: u16,
        to: u16,
        child: &[u16],
        forward: bool,
        cap: u32,
        exact: bool,
    ) -> u32 {
        let table = self.table(forward);
        let answer = PARENT.with(|c| {
            let mut c = c.borrow_mut();
            if c.forward != forward || c.boxes != parent || c.owner != self.id {
                c.refresh(self, table, parent, forward);
            }
            if c.value == UNREACHABLE {
                return None;
            }
            let row = c.rows.iter().position(|&s| s == from)?;
            let col = c.solved.col_of(row);
            let (old, new) = (table[col * self.floor + from as usize], table[col * self.floor + to as usize]);
            // the parent's matching moved along with the box: a child's matching
            let moved = (new != FAR).then(|| c.value - old as u32 + new as u32);
            if let Some(moved) = moved.filter(|&m| m <= cap && (!exact || new as u32 + 1 == old as u32)) {
                return Some(moved);
            }
            if c.value.saturating_sub(1) > cap {
                return Some(c.value - 1);
            }
            // above the cap only a bound is owed: of the child's parity (one
            // push changes every finite matching's by one)
            let of_parity = |v: u32| if v == UNREACHABLE { v } else { v + ((v ^ c.value ^ 1) & 1) };
            // the parent's potentials with the moved row's lowered to its least
            // reduced cost are feasible for the child: their sum bounds it
            // below, and every complete matching of the child has the moved
            // one's parity; often that decides without a new matching
            let lower = c.solved.dual_with_row(row, table, self.floor, to);
            if let Some(moved) = moved.filter(|&m| lower + 1 >= m as i64) {
                return Some(moved);
            }
            if lower > cap as i64 {
                return Some(of_parity(dual_bound(lower)));
            }
            Some(MATCHING.with(|m| {
                let mut m = m.borrow_mut();
                m.clone_from(&c.solved);
                match m.replace_row_capped(row, table, self.floor, to, cap) {
                    v if v <= cap => v,
                    v => of_parity(v),
                }
            }))
        });
        match answer {
            Some(v) => v,
            None => self.estimate_capped(child, forward, cap),
        }
    }
}

/// The last parent whose matching [`PushDistances::estimate_child`] computed,
/// on this thread.
#[derive(Default)]
struct ParentMatch {
    /// The [`PushDistances::id`] it was computed with (0: none).
    owner: u64,
    forward: bool,
    /// The parent's boxes, sorted.
    boxes: Vec<u16>,
    /// The square of each row of `solved` (rows need not be sorted).
    rows: Vec<u16>,
    value: u32,
    /// The parent's optimal matching with its dual potentials.
    solved: Matching,
    /// Parents reached from the last full solve by replacing rows.
    chain: u32,
    /// Scratch: squares that left and came, from one parent to the next.
    gone: Vec<u16>,
    came: Vec<u16>,
    /// Scratch: the rows of the boxes that came.
    freed: Vec<usize>,
}

/// Parents matched by row replacements before a full solve starts afresh, so
/// that the potentials (which only drift one way) stay far from overflow.
const CHAIN: u32 = 1024;

impl ParentMatch {
    /// Makes this the matching of `parent`. Parents come in key order, so the
    /// next one often shares most boxes with the last: then only the rows of
    /// the boxes that differ are replaced, one augmenting path each, instead
    /// of solving the whole matching again.
    fn refresh(&mut self, dist: &PushDistances, table: &[u16], parent: &[u16], forward: bool) {
        let warm = self.owner == dist.id
            && self.forward == forward
            && self.value != UNREACHABLE
            && self.chain < CHAIN
            && self.boxes.len() == parent.len()
            && {
                self.gone.clear();
                self.came.clear();
                let (mut i, mut j) = (0, 0);
                while i < self.boxes.len() || j < parent.len() {
                    match (self.boxes.get(i), parent.get(j)) {
                        (Some(a), Some(b)) if a == b => (i, j) = (i + 1, j + 1),
                        (Some(&a), Some(&b)) if a < b => (self.gone.push(a), i += 1).1,
                        (Some(&a), None) => (self.gone.push(a), i += 1).1,
                        (_, Some(&b)) => (self.came.push(b), j += 1).1,
                        (None, None) => break,
                    }
                }
                2 * self.gone.len() <= parent.len()
            };
        let mut replaced = warm;
        if warm {
            // every row that changed is freed before any is matched again, so
            // that each augmenting path may end at any of the freed targets
            self.freed.clear();
            for k in 0..self.gone.len() {
                let (gone, came) = (self.gone[k], self.came[k]);
                // rows hold the last parent's boxes, so every box that left has one
                let Some(row) = self.rows.iter().position(|&s| s == gone) else {
                    replaced = false;
                    break;
                };
                self.solved.free_row(row, table, dist.floor, came);
                self.rows[row] = came;
                self.freed.push(row);
            }
            if replaced {
                for &row in &self.freed {
                    self.solved.add_row(row + 1);
                }
                self.value = self.solved.total();
            }
            self.chain += 1;
        }
        if !replaced {
            self.value = MATCHING.with(|m| {
                let mut m = m.borrow_mut();
                m.load(table, dist.floor, parent);
                let value = m.solve(u32::MAX - 1);
                self.solved.clone_from(&*m);
                value
            });
            self.rows.clear();
            self.rows.extend_from_slice(parent);
            self.chain = 0;
        }
        self.boxes.clear();
        self.boxes.extend_from_slice(parent);
        self.forward = forward;
        self.owner = dist.id;
    }
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

/// The Hungarian method (shortest augmenting paths with dual potentials), one
/// row at a time. Rows are boxes and columns targets, both 1-based in the
/// potentials (column 0 is the free start of each augmenting path).
#[derive(Default)]
struct Matching {
    n: usize,
    /// `cost[b * n + t]`: box `b`, target `t`.
    cost: Vec<u16>,
    u: Vec<i64>,
    v: Vec<i64>,
    way: Vec<usize>,
    /// `owner[col]`: the row (1-based) matched to column `col`, 0 if none.
    owner: Vec<usize>,
    /// Scratch of [`Matching::add_row_capped`]: per column its path length
    /// so far, what a scan adds to its path (0, or `BLOCKED` once scanned),
    /// and its final length once scanned.
    minv: Vec<i64>,
    blocked: Vec<i64>,
    reached: Vec<i64>,
    /// Scratch of [`Matching::solve`]: the rows left for augmenting paths.
    unmatched: Vec<usize>,
}

/// Field by field, so that `clone_from` (once per child whose row is matched
/// again) reuses the buffers instead of allocating new ones.
impl Clone for Matching {
    fn clone(&self) -> Self {
        let mut m = Matching::default();
        m.clone_from(self);
        m
    }

    fn clone_from(&mut self, src: &Self) {
        self.n = src.n;
        self.cost.clone_from(&src.cost);
        self.u.clone_from(&src.u);
        self.v.clone_from(&src.v);
        self.way.clone_from(&src.way);
        self.owner.clone_from(&src.owner);
        // scratch: add_row sets them up before reading them
        self.minv.clear();
        self.blocked.clear();
        self.reached.clear();
        self.unmatched.clear();
    }
}

/// A stand-in cost for an impossible pair, large enough that any matching using
/// one costs more than every possible one without.
const BIG: i64 = 1 << 40;

/// A dual objective above the cap as a bound: [`UNREACHABLE`] when no
/// matching of finite pairs is that dear (every one costs less than
/// `u32::MAX`: fewer than 65,536 boxes at under 65,535 pushes each).
fn dual_bound(lower: i64) -> u32 {
    if lower >= UNREACHABLE as i64 {
        UNREACHABLE
    } else {
        lower as u32
    }
}

#[inline]
fn cost_of(c: u16) -> i64 {
    if c == FAR {
        BIG
    } else {
        c as i64
    }
}

impl Matching {
    /// Loads the costs of `boxes` against every target of `table` (a target's
    /// distances are one row of `floor` entries).
    fn load(&mut self, table: &[u16], floor: usize, boxes: &[u16]) {
        let n = boxes.len();
        self.n = n;
        self.cost.clear();
        self.cost.resize(n * n, FAR);
        for t in 0..n {
            let row = &table[t * floor..(t + 1) * floor];
            for (b, &x) in boxes.iter().enumerate() {
                self.cost[b * n + t] = row[x as usize];
            }
        }
    }

    /// The target (0-based) of box `row` (0-based) in the last solution.
    fn col_of(&self, row: usize) -> usize {
        (1..=self.n).find(|&c| self.owner[c] == row + 1).map_or(0, |c| c - 1)
    }

    /// The cheapest perfect matching of the loaded costs, or [`UNREACHABLE`];
    /// stops as soon as the dual objective (a lower bound on the optimum that
    /// only grows) exceeds `cap`, and returns it.
    fn solve(&mut self, cap: u32) -> u32 {
        let n = self.n;
        if n == 0 {
            return 0;
        }
        for buf in [&mut self.u, &mut self.v] {
            buf.clear();
            buf.resize(n + 1, 0);
        }
        for buf in [&mut self.way, &mut self.owner] {
            buf.clear();
            buf.resize(n + 1, 0);
        }
        // each box's potential starts at its nearest target, and a box whose
        // nearest target is still free takes it: most boxes in a level have a
        // nearest target of their own, so few rows need an augmenting path
        let mut unmatched = std::mem::take(&mut self.unmatched);
        unmatched.clear();
        for row in 1..=n {
            let costs = &self.cost[(row - 1) * n..row * n];
            let (col, &c) = costs.iter().enumerate().min_by_key(|&(_, &c)| c).unwrap_or((0, &FAR));
            self.u[row] = cost_of(c);
            if self.owner[col + 1] == 0 && c != FAR {
                self.owner[col + 1] = row;
            } else {
                unmatched.push(row);
            }
        }
        let mut capped = None;
        for &row in &unmatched {
            // the potentials are feasible for every row at all times, so their
            // sum is a lower bound on the optimum (weak duality), and it grows
            let lower = self.dual();
            if lower > cap as i64 {
                capped = Some(dual_bound(lower));
                break;
            }
            self.add_row(row);
        }
        self.unmatched = unmatched;
        capped.unwrap_or_else(|| self.total())
    }

    /// Gives box `row` (0-based) of a solved matching the costs of square `to`
    /// and matches it again; returns the new optimum. The other rows' potentials
    /// stay feasible (their costs did not change) and the freed column keeps
    /// its potential, so one augmenting path restores optimality.
    #[cfg(test)]
    fn replace_row(&mut self, row: usize, table: &[u16], floor: usize, to: u16) -> u32 {
        self.free_row(row, table, floor, to);
        self.add_row(row + 1);
        self.total()
    }

    /// [`Matching::replace_row`] that stops as soon as the dual objective
    /// exceeds `cap` and returns it (a lower bound above `cap`, the matching
    /// left half done, to be thrown away): each step of the augmenting path
    /// raises the dual by its `delta`, and the dual of feasible potentials
    /// never exceeds the optimum.
    fn replace_row_capped(&mut self, row: usize, table: &[u16], floor: usize, to: u16, cap: u32) -> u32 {
        self.free_row(row, table, floor, to);
        let start = self.dual();
        match self.add_row_capped(row + 1, cap as i64 - start) {
            Ok(()) => self.total(),
            Err(risen) => dual_bound(start + risen),
        }
    }

    /// Gives box `row` the costs of square `to` and unmatches it.
    fn free_row(&mut self, row: usize, table: &[u16], floor: usize, to: u16) {
        let n = self.n;
        for t in 0..n {
            self.cost[row * n + t] = table[t * floor + to as usize];
        }
        if let Some(col) = (1..=n).find(|&c| self.owner[c] == row + 1) {
            self.owner[col] = 0;
        }
        self.u[row + 1] = 0;
    }

    /// The dual objective of a solved matching after box `row` (0-based) got
    /// the costs of square `to` and the least potential they allow (the
    /// others unchanged, so still feasible): a lower bound on the new optimum.
    fn dual_with_row(&self, row: usize, table: &[u16], floor: usize, to: u16) -> i64 {
        let least = (0..self.n).map(|t| cost_of(table[t * floor + to as usize]) - self.v[t + 1]).min().unwrap_or(0);
        self.dual() - self.u[row + 1] + least
    }

    /// The dual objective: the sum of the potentials.
    fn dual(&self) -> i64 {
        self.u[1..=self.n].iter().sum::<i64>() + self.v[1..=self.n].iter().sum::<i64>()
    }

    /// The cost of the current (complete) matching, or [`UNREACHABLE`].
    fn total(&self) -> u32 {
        let n = self.n;
        let mut sum = 0i64;
        for col in 1..=n {
            sum += cost_of(self.cost[(self.owner[col] - 1) * n + col - 1]);
        }
        if sum >= BIG {
            UNREACHABLE
        } else {
            sum as u32
        }
    }

    /// One phase of the method: matches the unmatched `row` (1-based) by the
    /// shortest augmenting path under reduced costs, keeping every potential
    /// feasible and every matched pair tight.
    fn add_row(&mut self, row: usize) {
        let done = self.add_row_capped(row, i64::MAX);
        debug_assert!(done.is_ok(), "a rise of i64::MAX is never passed");
    }

    /// [`Matching::add_row`] that gives up, with how far the dual objective
    /// would have risen (`Err`), once that is more than `rise`.
    ///
    /// Dijkstra over the columns with the potentials updated once at the end
    /// (each scanned column by how much shorter its path was than the
    /// augmenting one) rather than after every step: the same columns in the
    /// same order, so the same matching, with one pass over the columns per
    /// step instead of two. After the step that reaches a column at distance
    /// `d`, updating them would have raised the dual by exactly `d`.
    fn add_row_capped(&mut self, row: usize, rise: i64) -> Result<(), i64> {
        let n = self.n;
        let Matching { cost, u, v, way, owner, minv, blocked, reached, .. } = self;
        owner[0] = row;
        // minv: each unscanned column's shortest path length so far, SCANNED
        // once scanned; `blocked`: 0 until scanned, then BLOCKED, which a scan
        // adds to the column's path so that it is never shorter again;
        // `reached`: a scanned column's final length
        minv.clear();
        minv.resize(n + 1, UNSEEN);
        blocked.clear();
        blocked.resize(n + 1, 0);
        reached.clear();
        reached.resize(n + 1, 0);
        let (mut col0, mut at) = (0, 0i64);
        loop {
            blocked[col0] = BLOCKED;
            minv[col0] = SCANNED;
            reached[col0] = at;
            let r = owner[col0];
            let base = at - u[r];
            let (mut best, mut col1) = (i64::MAX, 0);
            // columns 1..=n, all slices of one length so the loop runs
            // unchecked, and without branches
            let costs = &cost[(r - 1) * n..r * n];
            let (vs, ms, ws, bs) = (&v[1..=n], &mut minv[1..=n], &mut way[1..=n], &blocked[1..=n]);
            for i in 0..n {
                let cur = base + cost_of(costs[i]) + bs[i] - vs[i];
                let m = ms[i];
                let better = cur < m;
                let m = if better { cur } else { m };
                ms[i] = m;
                ws[i] = if better { col0 } else { ws[i] };
                let least = m < best;
                best = if least { m } else { best };
                col1 = if least { i + 1 } else { col1 };
            }
            (col0, at) = (col1, best);
            if owner[col0] == 0 {
                break;
            }
            if at > rise {
                return Err(at);
            }
        }
        // the potentials: a column scanned at distance m (and its row) moved
        // by the `at - m` of the steps after it; the new row by all of `at`
        for col in 0..=n {
            if blocked[col] != 0 {
                let by = at - reached[col];
                u[owner[col]] += by;
                v[col] -= by;
            }
        }
        loop {
            let prev = way[col0];
            owner[col0] = owner[prev];
            col0 = prev;
            if col0 == 0 {
                break;
            }
        }
        Ok(())
    }
}

/// [`Matching::add_row_capped`]'s lengths. A path is at most the columns
/// times [`BIG`] from zero either way (below 2^47), so an unscanned column
/// starts at `UNSEEN` (longer than every path: the first scan, whose row
/// reaches every column, sets them all), a scanned one sits at `SCANNED`
/// (longer than every unscanned one, so never the least), and a scan adds
/// `BLOCKED` to a scanned column's path, which then never beats `SCANNED`;
/// all far from overflow.
const UNSEEN: i64 = 1 << 60;
const SCANNED: i64 = 1 << 61;
const BLOCKED: i64 = 1 << 62;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::level::parse_one;

    fn board(t: &str) -> Board {
        Board::new(&parse_one(t, "t").unwrap()).unwrap()
    }

    /// The cheapest assignment of an `n` x `n` matrix by trying every permutation.
    fn brute_force(costs: &[u16], n: usize) -> u32 {
        fn go(costs: &[u16], n: usize, row: usize, used: &mut Vec<bool>) -> u64 {
            if row == n {
                return 0;
            }
            let mut best = u64::MAX;
            for col in 0..n {
                if used[col] || costs[row * n + col] == FAR {
                    continue;
                }
                used[col] = true;
                let rest = go(costs, n, row + 1, used);
                used[col] = false;
                if rest != u64::MAX {
                    best = best.min(costs[row * n + col] as u64 + rest);
                }
            }
            best
        }
        let best = go(costs, n, 0, &mut vec![false; n]);
        if best == u64::MAX {
            UNREACHABLE
        } else {
            best as u32
        }
    }

    fn matching(costs: &[u16], n: usize) -> Matching {
        Matching { n, cost: costs.to_vec(), ..Matching::default() }
    }

    #[test]
    fn matching_finds_the_cheapest_assignment() {
        let costs = [4u16, 1, 3, 2, 0, 5, 3, 2, 2];
        assert_eq!(matching(&costs, 3).solve(u32::MAX), brute_force(&costs, 3));
        // an impossible pair that must be used
        assert_eq!(matching(&[FAR, 1, FAR, FAR], 2).solve(u32::MAX), UNREACHABLE);
        assert_eq!(matching(&[FAR, 1, 2, FAR], 2).solve(u32::MAX), 3);
        // capped: an answer above the cap, never above the true optimum
        let capped = matching(&costs, 3).solve(1);
        assert!(capped > 1 && capped <= brute_force(&costs, 3), "{capped}");
    }

    proptest::proptest! {
        /// On random matrices (some pairs impossible), the method's optimum is
        /// the brute-force one, and so is the optimum after one row is replaced
        /// and matched again from the solved potentials (with a cap: exact at or
        /// below it, a lower bound above it).
        #[test]
        fn matching_and_row_replacement_agree_with_brute_force(
            n in 1usize..7,
            seed in proptest::collection::vec(0u16..12, 49),
            row in 0usize..7,
            fresh in proptest::collection::vec(0u16..12, 7),
            cap in 0u32..40,
        ) {
            let far = |c: u16| if c >= 10 { FAR } else { c };
            let costs: Vec<u16> = seed[..n * n].iter().map(|&c| far(c)).collect();
            let mut m = matching(&costs, n);
            let best = m.solve(u32::MAX);
            proptest::prop_assert_eq!(best, brute_force(&costs, n));
            if best == UNREACHABLE {
                return Ok(());
            }
            // one target row per column: the new square's costs are `fresh`
            let row = row % n;
            let floor = 1;
            let table: Vec<u16> = fresh[..n].iter().map(|&c| far(c)).collect();
            let mut replaced = costs.clone();
            replaced[row * n..(row + 1) * n].copy_from_slice(&table);
            let want = brute_force(&replaced, n);
            // capped: exact at or below the cap, a lower bound above it
            let mut capped = m.clone();
            let got = capped.replace_row_capped(row, &table, floor, 0, cap);
            if want <= cap {
                proptest::prop_assert_eq!(got, want);
            } else {
                proptest::prop_assert!(got > cap && got <= want, "cap {} got {} want {}", cap, got, want);
            }
            proptest::prop_assert_eq!(m.replace_row(row, &table, floor, 0), want);
        }
    }

    proptest::proptest! {
        /// A parent's matching brought to the next parent: the rows of every
        /// box that changed are freed first, then matched again one by one
        /// from the kept potentials; the optimum is the brute-force one.
        #[test]
        fn rows_freed_together_then_matched_agree_with_brute_force(
            n in 1usize..7,
            seed in proptest::collection::vec(0u16..12, 49),
            rows in proptest::collection::vec(0usize..7, 1..4),
            fresh in proptest::collection::vec(0u16..12, 21),
        ) {
            let far = |c: u16| if c >= 10 { FAR } else { c };
            let costs: Vec<u16> = seed[..n * n].iter().map(|&c| far(c)).collect();
            let mut m = matching(&costs, n);
            if m.solve(u32::MAX) == UNREACHABLE {
                return Ok(());
            }
            let mut rows: Vec<usize> = rows.iter().map(|r| r % n).collect();
            rows.sort_unstable();
            rows.dedup();
            // square k of the table stands for the new costs of the k-th changed row
            let floor = rows.len();
            let mut table = vec![FAR; n * floor];
            let mut replaced = costs.clone();
            for (k, &row) in rows.iter().enumerate() {
                for t in 0..n {
                    table[t * floor + k] = far(fresh[k * 7 + t]);
                    replaced[row * n + t] = table[t * floor + k];
                }
            }
            for (k, &row) in rows.iter().enumerate() {
                m.free_row(row, &table, floor, k as u16);
            }
            for &row in &rows {
                m.add_row(row + 1);
            }
            proptest::prop_assert_eq!(m.total(), brute_force(&replaced, n));
        }
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
