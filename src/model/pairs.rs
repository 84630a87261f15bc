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

/// Most boxes the tables are used for: a sum keeps the boxes in pairs as bits
/// of a `u128`, one more for the box a successor moved. (The work limit
/// below allows about 100 at most.)
pub const MAX_BOXES: usize = 127;

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
    /// Per side, the pairs of `regional` as a sum reads them.
    by_player: [ByPlayer; 2],
    /// Whether any penalty is positive (else the tables add nothing).
    useful: bool,
    /// Per side, per square `x`: a bitset (`floor.div_ceil(64)` words) of the
    /// squares `y` whose pair with `x` may have a penalty (positive or dead,
    /// in some region), so a sum visits only those pairs.
    nonzero: [Vec<u64>; 2],
    /// Tells these tables apart from others in a thread's kept pair lists.
    id: u64,
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// One side's pairs whose penalty depends on the player's region, as a sum
/// reads them: numbered in the order of their squares (`x` then `y`), which
/// is the order the sum's insertion sort wants them in, with their penalty
/// by the player's square.
#[derive(Debug, Clone, Default)]
struct ByPlayer {
    /// Per unordered pair of squares: 0, or 1 + its number.
    at: Vec<u32>,
    /// The squares (`x < y`) of each.
    pairs: Vec<(u16, u16)>,
    /// `penalty[n * floor + s]`: the penalty of pair `n` with the player on
    /// `s` (0 on the pair's own squares), one load where the region label
    /// and the entry took two, far apart.
    penalty: Vec<u8>,
    /// `live[s * words()..][n]`: whether pair `n` has a penalty (or is dead)
    /// with the player on `s`. A sum tests its list's pairs here, in one
    /// short row, and loads `penalty` only for the few that count.
    live: Vec<u64>,
}

impl ByPlayer {
    /// Words in a bitset over the pairs.
    fn words(&self) -> usize {
        self.pairs.len().div_ceil(64)
    }

    /// From one side's parts and the board's `regions`.
    fn new(regions: &Regions, regional: &[[u8; MAX_REGIONS]], regional_at: &[u32]) -> ByPlayer {
        let floor = regions.floor;
        let mut at = vec![0u32; regional_at.len()];
        let mut pairs = Vec::with_capacity(regional.len());
        let mut penalty = vec![0u8; regional.len() * floor];
        for x in 0..floor {
            for y in x + 1..floor {
                let Some(i) = regional_at[pair(x, y)].checked_sub(1) else { continue };
                let row = &mut penalty[pairs.len() * floor..(pairs.len() + 1) * floor];
                for (s, v) in row.iter_mut().enumerate() {
                    let label = regions.label(x as u16, y as u16, s as u16);
                    *v = if label == NO_REGION { 0 } else { regional[i as usize][label as usize] };
                }
                pairs.push((x as u16, y as u16));
                at[pair(x, y)] = pairs.len() as u32;
            }
        }
        let words = pairs.len().div_ceil(64);
        let mut live = vec![0u64; floor * words];
        for (n, row) in penalty.chunks_exact(floor).enumerate() {
            for (s, _) in row.iter().enumerate().filter(|(_, &p)| p != 0) {
                live[s * words + n / 64] |= 1 << (n % 64);
            }
        }
        ByPlayer { at, pairs, penalty, live }
    }
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

/// Runs both tasks, in any order or at once: how a caller with threads
/// lends them to the pure code of the model.
pub type Join<'a> = &'a (dyn Fn(&mut (dyn FnMut() + Send), &mut (dyn FnMut() + Send)) + Sync);

/// The [`Join`] of a caller without threads: one task, then the other.
pub fn in_turn(a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
    a();
    b();
}

impl PairPenalties {
    /// The tables of `board` under the lone-box distances `dist`, or `None`
    /// when the board is too large for them (see [`MAX_FLOOR`], [`MAX_WORK`])
    /// or has fewer than two boxes.
    pub fn new(board: &Board, dist: &PushDistances) -> Option<PairPenalties> {
        Self::new_joined(board, dist, &in_turn)
    }

    /// [`PairPenalties::new`], its two sides' tables built by `join`, which
    /// runs both of its tasks (at once, where the caller has threads).
    pub fn new_joined(board: &Board, dist: &PushDistances, join: Join<'_>) -> Option<PairPenalties> {
        let floor = board.floor_count();
        let n = board.goals.len();
        if !(2..=MAX_BOXES).contains(&n) || floor > MAX_FLOOR || n * n * floor * floor / 2 > MAX_WORK {
            return None;
        }
        let regions = Regions::new(board);
        let (mut f, mut b) = (None, None);
        join(&mut || f = Some(side_table(board, &regions, dist, true, join)), &mut || {
            b = Some(side_table(board, &regions, dist, false, join))
        });
        let (Some((forward, at_f, regional_f)), Some((backward, at_b, regional_b))) = (f, b) else {
            unreachable!("a join runs both of its tasks")
        };
        let parts = PairParts { forward, backward, regional: [regional_f, regional_b], regional_at: [at_f, at_b] };
        Some(Self::derived(&regions, parts))
    }

    /// The tables from their parts, with what is derived from them: the
    /// bitsets of pairs with a penalty, the regional penalties by the
    /// player's square (from the board's `regions`), and whether any
    /// penalty is positive.
    fn derived(regions: &Regions, parts: PairParts) -> PairPenalties {
        let floor = regions.floor;
        let PairParts { forward, backward, regional, regional_at } = parts;
        PairPenalties {
            floor,
            nonzero: [nonzero_rows(floor, &forward, &regional_at[0]), nonzero_rows(floor, &backward, &regional_at[1])],
            by_player: [
                ByPlayer::new(regions, &regional[0], &regional_at[0]),
                ByPlayer::new(regions, &regional[1], &regional_at[1]),
            ],
            useful: any_penalty(&forward, &backward, [&regional[0], &regional[1]]),
            forward,
            backward,
            regional,
            regional_at,
            id: next_id(),
        }
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
        if board.goals.len() > MAX_BOXES {
            return Err(format!("pair tables for {} boxes, over the limit of {MAX_BOXES}", board.goals.len()));
        }
        let pairs = floor * floor.saturating_sub(1) / 2;
        for (name, t) in [("forward", &parts.forward), ("backward", &parts.backward)] {
            if t.len() != floor * floor {
                return Err(format!("{name} pair table of {} entries, the board needs {}", t.len(), floor * floor));
            }
            // a pair's two orders are one entry (a sum reads either)
            for x in 0..floor {
                if let Some(y) = (x + 1..floor).find(|&y| t[x * floor + y] != t[y * floor + x]) {
                    return Err(format!("{name} pair table differs between squares {x}, {y} and {y}, {x}"));
                }
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
        Ok(Self::derived(&Regions::new(board), parts))
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
        PICK.with(|pick| {
            let mut pick = pick.borrow_mut();
            let Pick { loose, scratch, .. } = &mut *pick;
            self.collect(boxes, forward, loose);
            self.pick(loose, None, player, forward, scratch)
        })
    }

    /// [`PairPenalties::sum`] of the successor of `parent` whose box moved
    /// from `from` to `to`, the same number, by less work: the pairs of
    /// the parent are found once per parent and thread (successors come one
    /// parent after another), and a successor only drops the pairs of `from`,
    /// adds those of `to` and looks up the pairs whose penalty depends on
    /// where the player stands.
    pub fn sum_child(&self, parent: &[u16], from: u16, to: u16, player: u16, forward: bool) -> u32 {
        if !self.useful {
            return 0;
        }
        debug_assert!(parent.binary_search(&from).is_ok() && parent.binary_search(&to).is_err());
        PICK.with(|pick| {
            let mut pick = pick.borrow_mut();
            let Pick { owner, parent: kept, list, scratch, .. } = &mut *pick;
            if *owner != (self.id, forward) || kept.as_slice() != parent {
                self.collect(parent, forward, list);
                kept.clear();
                kept.extend_from_slice(parent);
                *owner = (self.id, forward);
            }
            self.pick(list, Some((from, to)), player, forward, scratch)
        })
    }

    /// The pairs of `boxes` (sorted) that may have a penalty, into `out`.
    fn collect(&self, boxes: &[u16], forward: bool, out: &mut PairList) {
        debug_assert!(boxes.windows(2).all(|w| w[0] < w[1]), "boxes are sorted");
        let words = self.floor.div_ceil(64);
        out.fixed.clear();
        out.regional.clear();
        out.regional_bits.clear();
        let entry_words = self.by_player[!forward as usize].words();
        if entry_words <= MAX_ENTRY_WORDS {
            out.regional_bits.resize(entry_words, 0);
        }
        out.bits.clear();
        out.bits.resize(words, 0);
        out.rank.resize(self.floor, 0);
        // fewer than 128 boxes: MAX_WORK and MAX_BOXES see to it
        debug_assert!(boxes.len() < 128);
        out.boxes = boxes.len() as u8;
        for (i, &b) in boxes.iter().enumerate() {
            out.bits[b as usize / 64] |= 1 << (b % 64);
            out.rank[b as usize] = i as u8;
        }
        for &x in boxes {
            self.partners(x, &out.bits, forward, true, u16::MAX, |y| match self.entry(x, y, forward) {
                Entry::Fixed(p) => out.fixed.push(packed(p, x, y, out.rank[x as usize], out.rank[y as usize])),
                Entry::Regional(i) => {
                    out.regional.push((x, y, i));
                    if let Some(w) = out.regional_bits.get_mut(i as usize / 64) {
                        *w |= 1 << (i % 64);
                    }
                }
            });
        }
        out.fixed.sort_unstable_by(|a, b| b.cmp(a));
    }

    /// Calls `f` with every box `y` of `bits` but `except` whose pair with `x`
    /// may have a penalty (those in `x`'s bitset); with `above` only those
    /// above `x` (from `x`'s word on, the squares up to `x` masked), so that
    /// a walk over all boxes meets each pair once.
    fn partners(&self, x: u16, bits: &[u64], forward: bool, above: bool, except: u16, mut f: impl FnMut(u16)) {
        let words = bits.len();
        let nz = &self.nonzero[!forward as usize][x as usize * words..(x as usize + 1) * words];
        let (xw, xb) = (x as usize / 64, x as usize % 64);
        for w in if above { xw } else { 0 }..words {
            let mut m = nz[w] & bits[w];
            if above && w == xw {
                m &= !((2u64 << xb).wrapping_sub(1));
            }
            if w == except as usize / 64 {
                m &= !(1u64 << (except % 64));
            }
            while m != 0 {
                f((w * 64 + m.trailing_zeros() as usize) as u16);
                m &= m - 1;
            }
        }
    }

    /// Whether the penalty of the pair of squares `x != y` is one number, or
    /// depends on the player's region (its number in the side's [`ByPlayer`]).
    #[inline]
    fn entry(&self, x: u16, y: u16, forward: bool) -> Entry {
        let side = !forward as usize;
        let t = if forward { &self.forward } else { &self.backward };
        let p = t[x as usize * self.floor + y as usize];
        if p != DEAD && !self.by_player[side].pairs.is_empty() {
            let i = self.by_player[side].at[pair(x as usize, y as usize)];
            if i > 0 {
                return Entry::Regional(i - 1);
            }
        }
        Entry::Fixed(p)
    }

    /// The penalty of a pair that depends on the player's region, by its
    /// number in the side's [`ByPlayer`].
    #[inline]
    fn regional_penalty(&self, i: u32, player: u16, forward: bool) -> u8 {
        self.by_player[!forward as usize].penalty[i as usize * self.floor + player as usize]
    }

    /// Pushes to `extra` the regional pairs of `list` with a penalty with the
    /// player on `player`, but those of the box on `from`; true at a dead
    /// one. Most of a list's regional pairs have none with the player where
    /// it is: the list's entries are tested against the player's live bits,
    /// one by one, or `by_words`, a word of them at a time (the list's
    /// bitset must be there). Either way the pairs come descending by
    /// squares (the list's and the pairs' numbers ascend by squares), so
    /// that the insertion sort after moves only pairs with a larger penalty
    /// than those before.
    fn regional_extras(
        &self,
        list: &PairList,
        player: u16,
        forward: bool,
        from: u16,
        by_words: bool,
        extra: &mut Vec<u64>,
    ) -> bool {
        let side = &self.by_player[!forward as usize];
        let words = side.words();
        let live = &side.live[player as usize * words..(player as usize + 1) * words];
        if by_words {
            for w in (0..words).rev() {
                let mut m = list.regional_bits[w] & live[w];
                while m != 0 {
                    let b = 63 - m.leading_zeros() as usize;
                    m ^= 1 << b;
                    let i = w * 64 + b;
                    let (x, y) = side.pairs[i];
                    if self.offer_regional(list, (x, y, i as u32), player, forward, from, extra) {
                        return true;
                    }
                }
            }
        } else {
            for &(x, y, i) in list.regional.iter().rev() {
                if live[i as usize / 64] >> (i % 64) & 1 != 0
                    && self.offer_regional(list, (x, y, i), player, forward, from, extra)
                {
                    return true;
                }
            }
        }
        false
    }

    /// One regional pair `(x, y, entry)` of [`regional_extras`](Self::regional_extras):
    /// true when it is dead.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn offer_regional(
        &self,
        list: &PairList,
        (x, y, i): (u16, u16, u32),
        player: u16,
        forward: bool,
        from: u16,
        extra: &mut Vec<u64>,
    ) -> bool {
        if x == from || y == from {
            return false;
        }
        let p = self.regional_penalty(i, player, forward);
        if p != 0 && p != DEAD {
            extra.push(packed(p, x, y, list.rank[x as usize], list.rank[y as usize]));
        }
        p == DEAD
    }

    /// The greedy sum over the pairs of `list`, or, with `moved = (from, to)`,
    /// over those of the boxes of `list` with the one on `from` moved to `to`.
    fn pick(&self, list: &PairList, moved: Option<(u16, u16)>, player: u16, forward: bool, s: &mut Scratch) -> u32 {
        let from = moved.map_or(u16::MAX, |m| m.0);
        let keeps = |x: u16, y: u16| x != from && y != from;
        // dead pairs sort first
        let dead = list.fixed.iter().map(|&k| unpacked(k)).take_while(|k| k.0 == DEAD);
        if dead.into_iter().any(|(_, x, y)| keeps(x, y)) {
            return super::bounds::UNREACHABLE;
        }
        s.extra.clear();
        let by_words = !list.regional_bits.is_empty() && list.regional_bits.len() <= list.regional.len();
        if !list.regional.is_empty() && self.regional_extras(list, player, forward, from, by_words, &mut s.extra) {
            return super::bounds::UNREACHABLE;
        }
        // the box that left is in no pair: its pairs in `fixed` are passed
        // over; the one it came to is a new one (as many boxes as before)
        let taken = moved.map(|(from, _)| list.rank[from as usize] as u64);
        if let Some((from, to)) = moved {
            let rank = |y: u16| if y == to { list.boxes } else { list.rank[y as usize] };
            // the pairs of `to` with the other boxes: `to` is none of them
            // and `from` is no longer one
            let mut dead = false;
            self.partners(to, &list.bits, forward, false, from, |y| {
                let (x, y) = (to.min(y), to.max(y));
                let p = match self.entry(x, y, forward) {
                    Entry::Fixed(p) => p,
                    Entry::Regional(i) => self.regional_penalty(i, player, forward),
                };
                match p {
                    DEAD => dead = true,
                    0 => {}
                    p => s.extra.push(packed(p, x, y, rank(x), rank(y))),
                }
            });
            if dead {
                return super::bounds::UNREACHABLE;
            }
        }
        sort_descending(&mut s.extra);
        s.extra.push(0);
        // ranks 0 to `boxes`, the last for the box a successor moved
        if list.boxes < 64 {
            greedy::<u64>(&list.fixed, &s.extra, taken, list.boxes as u32)
        } else {
            greedy::<u128>(&list.fixed, &s.extra, taken, list.boxes as u32)
        }
    }
}

/// A pair's penalty is one number, or one per player region (its number
/// in the side's [`ByPlayer`]).
enum Entry {
    Fixed(u8),
    Regional(u32),
}

/// Pair `(p, x, y)` as one number ordered as the tuple, with the ranks of
/// its two boxes (their bits in a sum's set of boxes in pairs) below.
#[inline]
fn packed(p: u8, x: u16, y: u16, rx: u8, ry: u8) -> u64 {
    (p as u64) << 48 | (x as u64) << 32 | (y as u64) << 16 | (rx as u64) << 8 | ry as u64
}

#[inline]
fn unpacked(k: u64) -> (u8, u16, u16) {
    ((k >> 48) as u8, (k >> 32) as u16, (k >> 16) as u16)
}

/// A set of boxes by rank: a `u64` where ranks stay below 64 (the common
/// case, and a cheaper shift), else a `u128`.
trait Ranks: Copy + Default + PartialEq + std::ops::BitAnd<Output = Self> + std::ops::BitOrAssign {
    fn one(rank: u64) -> Self;

    /// The bits of a packed pair's two boxes.
    #[inline]
    fn pair(k: u64) -> Self {
        let mut m = Self::one((k >> 8) & 0x7f);
        m |= Self::one(k & 0x7f);
        m
    }
}

impl Ranks for u64 {
    #[inline]
    fn one(rank: u64) -> u64 {
        1 << rank
    }
}

impl Ranks for u128 {
    #[inline]
    fn one(rank: u64) -> u128 {
        1 << rank
    }
}

/// Sorts a short list descending (insertion sort: the lists are a box's pairs).
fn sort_descending(v: &mut [u64]) {
    for i in 1..v.len() {
        let k = v[i];
        let mut j = i;
        while j > 0 && v[j - 1] < k {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = k;
    }
}

/// The penalties of disjoint pairs from two lists of packed pairs, each
/// descending (`b` ending in a 0), the largest first and among equal
/// penalties the later pair first (the order of sorting all `(p, x, y)`
/// descending), each pair taken when neither box is in a pair yet (`taken`:
/// the rank of a box that is in none); it stops once fewer than two of the
/// `free` boxes are left.
fn greedy<M: Ranks>(a: &[u64], b: &[u64], taken: Option<u64>, mut free: u32) -> u32 {
    debug_assert!(b.last() == Some(&0));
    let mut set = taken.map_or(M::default(), M::one);
    let mut sum = 0;
    let mut j = 0;
    let mut offer = |k: u64| {
        let m = M::pair(k);
        if set & m == M::default() {
            set |= m;
            free -= 2;
            sum += (k >> 48) as u32;
        }
        free >= 2
    };
    for &k in a {
        while b[j] > k {
            if !offer(b[j]) {
                return sum;
            }
            j += 1;
        }
        if !offer(k) {
            return sum;
        }
    }
    for &k in &b[j..b.len() - 1] {
        if !offer(k) {
            break;
        }
    }
    sum
}

/// The pairs of one set of boxes that may have a penalty.
#[derive(Default)]
struct PairList {
    /// Those whose penalty is one number (positive, or [`DEAD`]), packed and
    /// descending: the greedy order.
    fixed: Vec<u64>,
    /// Those whose penalty depends on the player's region: `x < y` and the
    /// pair's number in the side's [`ByPlayer`].
    regional: Vec<(u16, u16, u32)>,
    /// The same as a bitset over those numbers, where it has at most
    /// [`MAX_ENTRY_WORDS`] words (else empty).
    regional_bits: Vec<u64>,
    /// The boxes as a bitset.
    bits: Vec<u64>,
    /// Per square of a box, its rank among the boxes (its bit in `ranks`).
    rank: Vec<u8>,
    /// How many boxes.
    boxes: u8,
}

/// A pair list keeps its regional pairs as a bitset too up to this many
/// words (4,096 regional pairs on its side), cleared for every list.
const MAX_ENTRY_WORDS: usize = 64;

#[derive(Default)]
struct Scratch {
    /// The pairs of one sum that are not in the list's `fixed`, packed.
    extra: Vec<u64>,
}

/// A thread's pair lists: the last parent's (for its successors) and one for
/// any other box set.
#[derive(Default)]
struct Pick {
    /// The tables' id and side that `list` was found with ((0, _): none).
    owner: (u64, bool),
    parent: Vec<u16>,
    list: PairList,
    loose: PairList,
    scratch: Scratch,
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
    join: Join<'_>,
) -> (Vec<u8>, Vec<u32>, Vec<[u8; MAX_REGIONS]>) {
    let floor = board.floor_count();
    let n = if forward { board.goals.len() } else { board.start_boxes.len() };
    // the target pairs' games in two halves, by `join`, their least
    // penalties merged
    let pairs: Vec<(usize, usize)> = (0..n).flat_map(|t1| (t1 + 1..n).map(move |t2| (t1, t2))).collect();
    let (low, high) = pairs.split_at(pairs.len() / 2);
    let (mut a, mut b) = (None, None);
    join(&mut || a = Some(side_games(board, regions, dist, forward, low)), &mut || {
        b = Some(side_games(board, regions, dist, forward, high))
    });
    let (Some(mut by_region), Some(other)) = (a, b) else { unreachable!("a join runs both of its tasks") };
    for (cell, o) in by_region.iter_mut().zip(&other) {
        for (v, &w) in cell.iter_mut().zip(o) {
            *v = (*v).min(w);
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

/// The games of [`side_table`] for the target pairs `pairs`: per unordered
/// square pair (x < y) and region, the least penalty over them.
fn side_games(
    board: &Board,
    regions: &Regions,
    dist: &PushDistances,
    forward: bool,
    pairs: &[(usize, usize)],
) -> Vec<[u8; MAX_REGIONS]> {
    let floor = board.floor_count();
    let targets: &[u16] = if forward { &board.goals } else { &board.start_boxes };
    let lone = |t: usize, x: u16| if forward { dist.to_goal(t, x) } else { dist.from_start(t, x) };
    let mut by_region = vec![[DEAD; MAX_REGIONS]; floor * floor.saturating_sub(1) / 2];
    let mut depth = vec![u16::MAX; floor * floor * MAX_REGIONS];
    let mut queue: Vec<(u16, u16, u8)> = Vec::new();
    let steps = game_steps(board, forward);
    for &(t1, t2) in pairs {
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
        game(board, regions, &steps, &mut depth, &mut queue);
        // the queue holds every state the game reached, once: their depths
        // are read, and set back for the next game
        for &(a, b, r) in queue.iter() {
            let at = (a as usize * floor + b as usize) * MAX_REGIONS + r as usize;
            let d = std::mem::replace(&mut depth[at], u16::MAX);
            // box 1 went to (came from) g1, box 2 to g2
            let lone_sum = lone(t1, a).saturating_add(lone(t2, b));
            let extra = (d as u32).saturating_sub(lone_sum).min(DEAD as u32 - 1) as u8;
            let cell = &mut by_region[pair(a as usize, b as usize)][r as usize];
            *cell = (*cell).min(extra);
        }
    }
    by_region
}

/// One move of a box on `z` in direction `dir` of a k-box game, walls
/// only (the caller checks the other boxes): by pull (`forward` tables,
/// played from the targets) or by push, as (where the player stands, where
/// the box goes, where the player ends). A pull moves the box from `z` to
/// `z + dir` and the player from `z + dir` to `z + 2 dir`; a push moves the
/// box to `z + dir` with the player coming from `z - dir` and ending on `z`.
fn game_step(board: &Board, z: u16, dir: usize, forward: bool) -> Option<(u16, u16, u16)> {
    let (player_at, box_to, player_to) = if forward {
        let n1 = board.neighbour(z, dir);
        (n1, n1, if n1 == NONE { NONE } else { board.neighbour(n1, dir) })
    } else {
        (board.neighbour(z, opposite(dir)), board.neighbour(z, dir), z)
    };
    (player_at != NONE && box_to != NONE && player_to != NONE).then_some((player_at, box_to, player_to))
}

/// Per square, the four [`game_step`]s of a box there (`NONE` squares
/// where there is none).
pub(super) type GameSteps = [(u16, u16, u16); DIRS];

/// The [`GameSteps`] of every square of `board`, by pull or by push.
pub(super) fn game_steps(board: &Board, forward: bool) -> Vec<GameSteps> {
    (0..board.floor_count() as u16)
        .map(|z| std::array::from_fn(|dir| game_step(board, z, dir, forward).unwrap_or((NONE, NONE, NONE))))
        .collect()
}

/// Breadth-first search of the labelled 2-box game from the queued states
/// (all of depth 0) with the moves `steps`: backward by pulls (`forward`
/// tables: distances to the seeds), forward by pushes (distances from
/// them). `depth[(a * floor + b) * MAX_REGIONS + r]`.
fn game(board: &Board, regions: &Regions, steps: &[GameSteps], depth: &mut [u16], queue: &mut Vec<(u16, u16, u8)>) {
    let floor = board.floor_count();
    let mut head = 0;
    // the queue holds the states of depth `d` up to `level_end`
    let (mut d, mut level_end) = (0u16, queue.len());
    while head < queue.len() {
        if head == level_end {
            (d, level_end) = (d + 1, queue.len());
        }
        let (a, b, r) = queue[head];
        head += 1;
        for which in 0..2 {
            let (z, other) = if which == 0 { (a, b) } else { (b, a) };
            for &(player_at, box_to, player_to) in &steps[z as usize] {
                if player_at == NONE || box_to == other || player_to == other {
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
        let mut sum = 0;
        for (p, x, y) in sorted {
            let (xm, ym) = (1u64 << (x % 64), 1u64 << (y % 64));
            if taken[x as usize / 64] & xm == 0 && taken[y as usize / 64] & ym == 0 {
                taken[x as usize / 64] |= xm;
                taken[y as usize / 64] |= ym;
                sum += p as u32;
            }
        }
        sum
    }

    /// Every regional entry's penalty by the player's square, as the table
    /// holds it, against the region labels it was made from, and its bit in
    /// the live bitsets against the penalty: for the tables as built and as
    /// loaded from their parts, on levels whose pair penalties depend on the
    /// player's region.
    #[test]
    fn penalties_and_live_bits_by_player_square_agree_with_the_region_labels() {
        let (mut entries, mut live_bits) = (0, 0);
        for index in [1, 2, 10] {
            let board = crate::model::tests::shipped("XSokoban_90.xsb", index);
            let dist = PushDistances::new(&board);
            let built = PairPenalties::new(&board, &dist).unwrap();
            let loaded = PairPenalties::from_parts(&board, built.parts()).unwrap();
            let regions = Regions::new(&board);
            let floor = board.floor_count();
            for tables in [&built, &loaded] {
                for (side, forward) in [(0, true), (1, false)] {
                    for y in 1..floor {
                        for x in 0..y {
                            let Some(i) = tables.regional_at[side][pair(x, y)].checked_sub(1) else { continue };
                            // the number a sum reads it by
                            let by = &tables.by_player[side];
                            let n = by.at[pair(x, y)].checked_sub(1).expect("a regional pair is numbered");
                            assert_eq!(by.pairs[n as usize], (x as u16, y as u16));
                            entries += 1;
                            for s in (0..floor).filter(|&s| s != x && s != y) {
                                let label = regions.label(x as u16, y as u16, s as u16) as usize;
                                assert_eq!(
                                    tables.regional_penalty(n, s as u16, forward),
                                    tables.regional[side][i as usize][label],
                                    "XSokoban #{index}, pair {x} {y}, player on {s}"
                                );
                            }
                            // a sum loads only the pairs whose bit is set
                            for s in 0..floor {
                                let live = by.live[s * by.words() + n as usize / 64] >> (n % 64) & 1;
                                assert_eq!(
                                    live == 1,
                                    tables.regional_penalty(n, s as u16, forward) != 0,
                                    "XSokoban #{index}, pair {x} {y}, player on {s}: live bit"
                                );
                                live_bits += live;
                            }
                        }
                    }
                    // numbered by squares, every one once
                    let by = &tables.by_player[side];
                    assert!(by.pairs.windows(2).all(|w| w[0] < w[1]));
                    assert_eq!(by.pairs.len(), tables.regional[side].len());
                }
            }
        }
        assert!(entries > 0, "no pair penalty depends on the player's region");
        assert!(live_bits > 0, "no live bit set");
    }

    /// A sum's regional pairs, found a word of pairs at a time and one by
    /// one, are those the region labels give: random box sets, player
    /// squares and moved boxes on levels whose pair penalties depend on the
    /// player's region.
    #[test]
    fn regional_pairs_by_words_and_one_by_one_agree_with_the_region_labels() {
        let mut below = crate::model::tests::below();
        let mut found = 0;
        for index in [2, 10] {
            let board = crate::model::tests::shipped("XSokoban_90.xsb", index);
            let dist = PushDistances::new(&board);
            let tables = PairPenalties::new(&board, &dist).unwrap();
            let regions = Regions::new(&board);
            let floor = board.floor_count();
            let mut list = PairList::default();
            for round in 0..2_000 {
                let forward = round % 2 == 0;
                let mut boxes: Vec<u16> = (0..floor as u16).collect();
                for i in 0..board.goals.len() {
                    let j = i + below(floor - i);
                    boxes.swap(i, j);
                }
                boxes.truncate(board.goals.len());
                boxes.sort_unstable();
                let player = below(floor) as u16;
                let from = if round % 3 == 0 { u16::MAX } else { boxes[below(boxes.len())] };
                tables.collect(&boxes, forward, &mut list);
                let side = !forward as usize;
                let mut want = Vec::new();
                let mut dead = false;
                for (a, &x) in boxes.iter().enumerate() {
                    for &y in &boxes[a + 1..] {
                        let Some(i) = tables.regional_at[side][pair(x as usize, y as usize)].checked_sub(1) else {
                            continue;
                        };
                        let label = regions.label(x, y, player);
                        let p = if label == NO_REGION { 0 } else { tables.regional[side][i as usize][label as usize] };
                        if x == from || y == from || p == 0 {
                            continue;
                        }
                        dead |= p == DEAD;
                        want.push(packed(p, x, y, list.rank[x as usize], list.rank[y as usize]));
                    }
                }
                want.sort_unstable();
                assert!(!list.regional_bits.is_empty(), "XSokoban #{index}: no bitset");
                for by_words in [false, true] {
                    let mut got = Vec::new();
                    let said_dead = tables.regional_extras(&list, player, forward, from, by_words, &mut got);
                    assert_eq!(said_dead, dead, "XSokoban #{index}, round {round}, by words {by_words}");
                    if !dead {
                        got.sort_unstable();
                        assert_eq!(got, want, "XSokoban #{index}, round {round}, by words {by_words}");
                    }
                }
                found += want.len();
            }
        }
        assert!(found > 1_000, "only {found} regional pairs with a penalty");
    }

    proptest! {
        /// Merging two descending lists takes the same pairs as sorting them
        /// all: random pairs of squares (`x < y`), penalties from 1 to 254
        /// (or few distinct ones), split at random between the two lists.
        #[test]
        fn greedy_agrees_with_sorting(
            pairs in proptest::collection::btree_set((0u16..200, 0u16..200), 0..60),
            penalties in proptest::collection::vec(1u8..=254, 60),
            split in proptest::collection::vec(any::<bool>(), 60),
            few in any::<bool>(),
        ) {
            let found: Vec<(u8, u16, u16)> = pairs
                .iter()
                .filter(|(x, y)| x < y)
                .zip(&penalties)
                .map(|(&(x, y), &p)| (if few { 1 + p % 3 } else { p }, x, y))
                .collect();
            let boxes: Vec<u16> = found.iter().flat_map(|&(_, x, y)| [x, y]).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
            let rank = |x: u16| boxes.binary_search(&x).unwrap() as u8;
            let mut lists = [Vec::new(), Vec::new()];
            for (&(p, x, y), &s) in found.iter().zip(&split) {
                lists[s as usize].push(packed(p, x, y, rank(x), rank(y)));
            }
            for l in &mut lists {
                sort_descending(l);
                prop_assert!(l.windows(2).all(|w| w[0] > w[1]));
            }
            let words = 200usize.div_ceil(64);
            lists[1].push(0);
            let merged = greedy::<u128>(&lists[0], &lists[1], None, boxes.len() as u32);
            if boxes.len() < 64 {
                prop_assert_eq!(merged, greedy::<u64>(&lists[0], &lists[1], None, boxes.len() as u32));
            }
            prop_assert_eq!(merged, greedy_by_sorting(&found, words));
        }
    }
}
