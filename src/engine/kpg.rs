//! k-packet-game (k-PG) deadlock tables, after Heiner: play the level with only k
//! boxes, forward from every k-subset of the start boxes and backward from every
//! k-subset of the goals (player in every region), both to exhaustion, on the same
//! partitioned engine as the full search. A k-box configuration (boxes plus
//! normalized player) found forward but not backward is a *forward pattern*: every
//! full state containing it is dead. The reverse is a *backward pattern*: the start
//! can never lead to a full state containing it.
//!
//! # Why a check never prunes a solvable state
//!
//! Removing boxes never takes a legal push away from the others (a box only ever
//! blocks), so if a full state `(B, p)` can reach the goal, its projection
//! `(S, p)` on any k-subset `S` of `B` can reach a k-goal configuration, and its
//! normalized form `(S, norm_S(p))` (the player's region in the k-game contains
//! its region in the full game) is backward-reachable in the k-game. The pruned
//! k-games keep this: backward pruning only drops states the k-game start cannot
//! reach, forward pruning only states that cannot reach a goal, and neither ever
//! removes a state lying on a start-to-goal path. So a projection that is a forward
//! pattern proves the full state dead. Symmetrically for backward patterns: the
//! projection of a forward-reachable full state is forward-reachable in the k-game.
//! When a box set appears in no (forward and backward) reachable k-state at all,
//! the pattern holds for every player region ("any player"); otherwise the set
//! holds, per pattern, the union of its dead regions on the k-box board as a
//! square bitset, and `p` lies in that union exactly when `norm_S(p)` is one of
//! the dead normalized squares (regions are disjoint). One bit test, no flood.

use super::search::Progress;
use super::{EngineError, PatternCheck, PatternQuery, Problem, Side, QUERY_WORDS};
use crate::model::board::Board;
use crate::model::bounds::LowerBounds;
use crate::model::key::KeyWidth;
use crate::model::pairs::PairPenalties;
use crate::model::rules::{goal_states, normalize_player, Pruning, Scratch};
use rustc_hash::FxHashMap;
use std::sync::Arc;
use std::time::Instant;

/// Largest k supported: box sets are packed eight 16-bit squares to a [`Packed`].
pub const MAX_K: usize = 8;

/// Which k-games to play before a solve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KChoice {
    /// k = 1..=K (fewer if the level has fewer boxes).
    UpTo(usize),
    /// k = 1, 2, then each next k while its game is predicted to stay within
    /// [`AUTO_STATES`] states (see [`next_k_pays`]).
    Auto,
}

impl From<usize> for KChoice {
    fn from(k: usize) -> Self {
        KChoice::UpTo(k)
    }
}

/// The automatic choice's budget: k-game states (both sides) the next k may be
/// predicted to store: at most about half a second of table building on this
/// project's benchmark machine (a k-game state costs about 1 µs there, both
/// sides on two threads). A larger budget makes the tables slower than the
/// searches they speed up on most small levels (docs/benchmarks.md).
pub const AUTO_STATES: u64 = 500_000;

/// Whether the automatic choice plays the k-game after `done` (the stats of
/// k = 1..=K so far, in order). k = 1 and 2 always (their games hold at most a
/// few squares squared states); after that the next game's states are
/// predicted from the last two by their ratio (a k-game holds about as many
/// states as the (k-1)-game times the growth from k-2 to k-1: 10 to 40 on the
/// Microban and XSokoban levels measured in docs/benchmarks.md), and it is
/// played only within [`AUTO_STATES`]. Counts, not times, so the choice is the
/// same on every machine and every deployment.
pub fn next_k_pays(done: &[KStats]) -> bool {
    match done {
        [] | [_] => true,
        [.., prev, last] => next_game_states(game_states(prev), game_states(last)) <= AUTO_STATES,
    }
}

/// A played game's states, both sides (at least one, a ratio's divisor).
fn game_states(s: &KStats) -> u64 {
    (s.forward_states + s.backward_states).max(1)
}

/// The next game's predicted states after games of `prev` and `last`:
/// `last` times the growth from `prev` to `last`.
fn next_game_states(prev: u64, last: u64) -> u64 {
    (last as u128 * last as u128 / prev.max(1) as u128).min(u64::MAX as u128) as u64
}

/// The k-game states the automatic choice is predicted to play after `done`
/// (the games played so far, in order), on a level of `boxes` boxes: each
/// next game predicted as [`next_k_pays`] predicts it, while that is within
/// [`AUTO_STATES`] and k stays within [`MAX_K`] and the box count.
pub fn predicted_auto_states(done: &[KStats], boxes: usize) -> u64 {
    let mut counts: Vec<u64> = done.iter().map(game_states).collect();
    let mut total = 0u64;
    while counts.len() < MAX_K.min(boxes) {
        let [.., prev, last] = counts[..] else { break };
        let predicted = next_game_states(prev, last);
        if predicted > AUTO_STATES {
            break;
        }
        total += predicted;
        counts.push(predicted.max(1));
    }
    total
}

/// A sorted box set, its 16-bit squares packed high to low.
pub type Packed = u128;

/// Which player regions make a box set dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadPlayers {
    /// Every region.
    Any,
    /// These normalized player squares (sorted).
    Squares(Vec<u16>),
}

/// Patterns of one k and one side.
#[derive(Debug, Clone, Default)]
pub struct PatternSet {
    /// Packed sorted box squares -> dead player regions.
    pub map: FxHashMap<Packed, DeadPlayers>,
    /// What the check reads, derived from `map` and the board by
    /// [`PatternSet::index_players`]: packed box squares -> [`ANY_PLAYER`], or
    /// the offset in `dead_squares` of a bitset (`row` words) of every square
    /// whose region, with only the pattern's boxes placed, is dead. A check is
    /// then one bit test, not a flood of the k-box board.
    lookup: FxHashMap<Packed, u32>,
    dead_squares: Vec<u64>,
    row: usize,
}

impl PatternSet {
    pub fn new(floor: usize) -> Self {
        let row = floor.div_ceil(64);
        PatternSet { map: FxHashMap::default(), lookup: FxHashMap::default(), dead_squares: Vec::new(), row }
    }

    /// Derives the check's lookup from `map`: for a player-dependent pattern,
    /// the union of its dead regions as a square bitset. The player's region in
    /// the k-box game is dead exactly when its square is in that union, since
    /// regions are disjoint and each listed square names one.
    pub fn index_players(&mut self, board: &Board, k: usize) {
        let floor = board.floor_count();
        self.lookup.clear();
        self.dead_squares.clear();
        let mut walls = vec![false; floor];
        let mut queue = Vec::new();
        for (&key, dead) in &self.map {
            let list = match dead {
                DeadPlayers::Any => {
                    self.lookup.insert(key, ANY_PLAYER);
                    continue;
                }
                DeadPlayers::Squares(list) => list,
            };
            let at = self.dead_squares.len();
            self.dead_squares.resize(at + self.row, 0);
            let bits = &mut self.dead_squares[at..];
            let boxes = unpack(key, k);
            for &b in &boxes {
                walls[b as usize] = true;
            }
            for &start in list {
                if start as usize >= floor || walls[start as usize] || has_bit(bits, start) {
                    continue;
                }
                queue.clear();
                queue.push(start);
                bits[start as usize / 64] |= 1 << (start % 64);
                while let Some(f) = queue.pop() {
                    for d in 0..crate::model::board::DIRS {
                        let g = board.neighbour(f, d);
                        if g != crate::model::board::NONE && !walls[g as usize] && !has_bit(bits, g) {
                            bits[g as usize / 64] |= 1 << (g % 64);
                            queue.push(g);
                        }
                    }
                }
            }
            for &b in &boxes {
                walls[b as usize] = false;
            }
            self.lookup.insert(key, at as u32);
        }
    }

    /// Adds a pattern (sorted squares, all inside the floor).
    pub fn insert(&mut self, boxes: &[u16], dead: DeadPlayers) {
        self.map.insert(pack(boxes), dead);
    }

    /// What the check reads for one pattern: `None` when it is dead for any
    /// player, else whether `player`'s square is in its dead regions. For tests
    /// that compare the bitsets with flooding.
    #[doc(hidden)]
    pub fn dead_bit(&self, key: Packed, player: u16) -> Option<bool> {
        match self.lookup[&key] {
            ANY_PLAYER => None,
            at => Some(has_bit(&self.dead_squares[at as usize..], player)),
        }
    }

    /// Number of (box set, player) patterns, counting "any player" as one.
    pub fn patterns(&self) -> usize {
        self.map.values().map(|d| if let DeadPlayers::Squares(v) = d { v.len() } else { 1 }).sum()
    }
}

/// The lookup value of a pattern dead for every player region.
const ANY_PLAYER: u32 = u32::MAX;

/// Bit `i` of a square bitset.
#[inline]
fn has_bit(words: &[u64], i: u16) -> bool {
    words[i as usize / 64] >> (i % 64) & 1 != 0
}

/// Two sets are equal when their patterns are: the lookup is derived data.
impl PartialEq for PatternSet {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl Eq for PatternSet {}

/// Packs up to [`MAX_K`] sorted squares.
#[inline]
pub fn pack(boxes: &[u16]) -> Packed {
    boxes.iter().fold(0, |acc, &b| (acc << 16) | b as Packed)
}

/// Unpacks `k` squares.
pub fn unpack(mut key: Packed, k: usize) -> Vec<u16> {
    let mut v = vec![0u16; k];
    for i in (0..k).rev() {
        v[i] = key as u16;
        key >>= 16;
    }
    v
}

/// The patterns of one k, both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KTable {
    pub k: usize,
    pub forward: PatternSet,
    pub backward: PatternSet,
}

/// Deadlock tables for k = 1..=K of one level, with the index the check reads.
#[derive(Debug, Clone)]
pub struct DeadlockTables {
    pub board: Arc<Board>,
    pub tables: Vec<KTable>,
    /// The 2-box games' pair penalties of the bounded search, when kept with
    /// the tables (a database from `deadlocks build`): the search uses them
    /// instead of building its own.
    pub pairs: Option<Arc<PairPenalties>>,
    /// Derived from `tables`: forward and backward patterns of every k.
    index: [PatternTrie; 2],
}

/// What building one k cost and kept.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KStats {
    pub k: usize,
    pub forward_states: u64,
    pub backward_states: u64,
    pub forward_patterns: usize,
    pub backward_patterns: usize,
    pub seconds: f64,
}

impl DeadlockTables {
    /// Binds tables (built here or read from a file) to their board and
    /// derives each set's lookup and the check's index.
    pub fn new(board: Arc<Board>, mut tables: Vec<KTable>) -> Self {
        for t in &mut tables {
            t.forward.index_players(&board, t.k);
            t.backward.index_players(&board, t.k);
        }
        let floor = board.floor_count();
        let index = [
            PatternTrie::new(floor, tables.iter().map(|t| (t.k, &t.forward))),
            PatternTrie::new(floor, tables.iter().map(|t| (t.k, &t.backward))),
        ];
        DeadlockTables { board, tables, pairs: None, index }
    }

    /// The same tables with the level's pair penalties kept beside them.
    pub fn with_pairs(mut self, pairs: Option<Arc<PairPenalties>>) -> Self {
        self.pairs = pairs;
        self
    }

    /// The same tables with their level's pair penalties built and kept
    /// beside them (none where the board has none that add anything), as a
    /// database keeps them.
    pub fn with_level_pairs(self) -> Self {
        let pairs =
            LowerBounds::with_kept_pairs_joined(&self.board, true, None, &super::on_threads).pairs.map(Arc::new);
        self.with_pairs(pairs)
    }

    pub fn max_k(&self) -> usize {
        self.tables.last().map_or(0, |t| t.k)
    }

    /// Keeps only the tables up to `k`.
    pub fn truncated(&self, k: usize) -> DeadlockTables {
        DeadlockTables::new(self.board.clone(), self.tables.iter().filter(|t| t.k <= k).cloned().collect())
            .with_pairs(self.pairs.clone())
    }

    /// The check by brute force, for tests: any pattern of any k that holds the
    /// moved box, lies inside `boxes` and is dead for `player`.
    #[doc(hidden)]
    pub fn is_deadlock_by_scan(&self, side: Side, boxes: &[u16], moved: u16, player: u16) -> bool {
        self.tables.iter().any(|t| {
            let set = match side {
                Side::Forward => &t.forward,
                Side::Backward => &t.backward,
            };
            set.map.keys().any(|&key| {
                let pattern = unpack(key, t.k);
                pattern.contains(&moved)
                    && pattern.iter().all(|b| boxes.contains(b))
                    && match set.lookup[&key] {
                        ANY_PLAYER => true,
                        at => has_bit(&set.dead_squares[at as usize..], player),
                    }
            })
        })
    }
}

impl PatternCheck for DeadlockTables {
    #[inline]
    fn is_deadlock(&self, side: Side, boxes: &[u16], moved: u16, player: u16) -> bool {
        self.index[side.index()].any_subset(boxes, moved, player)
    }

    #[inline]
    fn prepare(&self, side: Side, boxes: &[u16], query: &mut PatternQuery) {
        self.index[side.index()].ranks_of(boxes, &mut query.words);
    }

    #[inline]
    fn is_deadlock_after(
        &self,
        side: Side,
        query: &PatternQuery,
        _boxes: &[u16],
        from: u16,
        moved: u16,
        player: u16,
    ) -> bool {
        self.index[side.index()].any_subset_after(&query.words, from, moved, player)
    }
}

/// Every pattern of one side (all k), indexed for the subset query "does a
/// pattern holding the moved box lie inside this box set?". Per moved square, a
/// trie over the pattern's other squares: the query walks only the paths whose
/// squares are all boxes, so its cost follows the patterns that nearly match,
/// not the C(n-1, k-1) subsets a lookup per subset pays (at k = 5 on Microban I
/// #153, with 10 boxes and about 10^5 patterns, that enumeration made the check
/// the larger part of the search).
///
/// Along a path, squares come in order of *rank*: the square in the most
/// patterns first. Large tables are mostly one hub square combined with any
/// others (on #153 at k = 5, a box in the bottom-left goal corner plus any four
/// boxes outside the goal column); with the hub first, a state without a box
/// there fails at the first step instead of after walking every subset of the
/// others.
#[derive(Debug, Clone, Default)]
struct PatternTrie {
    /// Per floor square: the root node of the patterns holding it, or `NO_NODE`.
    roots: Vec<u32>,
    /// Per floor square: its rank (0 for the square in the most patterns).
    rank: Vec<u16>,
    /// Words of a rank bitset.
    row: usize,
    nodes: Vec<TrieNode>,
    /// Per node, `row` words: the ranks of its children. A query intersects
    /// them with the boxes' ranks, so it touches only children that are boxes.
    child_ranks: Vec<u64>,
    /// Children of each node in increasing rank, from `TrieNode::first_child`.
    children: Vec<u32>,
    /// Player bitsets of player-dependent patterns, `row` words each.
    dead_squares: Vec<u64>,
}

#[derive(Debug, Clone, Copy)]
struct TrieNode {
    first_child: u32,
    /// `NO_PATTERN`, [`ANY_PLAYER`], or the offset of a player bitset.
    pattern: u32,
}

const NO_NODE: u32 = u32::MAX;
const NO_PATTERN: u32 = u32::MAX - 1;

impl PatternTrie {
    fn new<'a>(floor: usize, sets: impl Iterator<Item = (usize, &'a PatternSet)>) -> Self {
        // (moved square, the other squares, pattern value), then one trie per square
        let mut entries: Vec<(u16, Vec<u16>, u32)> = Vec::new();
        let mut dead_squares = Vec::new();
        for (k, set) in sets {
            for (&key, &at) in &set.lookup {
                let value = if at == ANY_PLAYER {
                    ANY_PLAYER
                } else {
                    let own = dead_squares.len() as u32;
                    dead_squares.extend_from_slice(&set.dead_squares[at as usize..at as usize + set.row]);
                    own
                };
                let boxes = unpack(key, k);
                for (i, &m) in boxes.iter().enumerate() {
                    let mut others = boxes.clone();
                    others.remove(i);
                    entries.push((m, others, value));
                }
            }
        }
        let mut count = vec![0u64; floor];
        for e in &entries {
            count[e.0 as usize] += 1;
        }
        let mut order: Vec<u16> = (0..floor as u16).collect();
        order.sort_by_key(|&sq| (std::cmp::Reverse(count[sq as usize]), sq));
        let mut rank = vec![0u16; floor];
        for (r, &sq) in order.iter().enumerate() {
            rank[sq as usize] = r as u16;
        }
        for e in &mut entries {
            for sq in &mut e.1 {
                *sq = rank[*sq as usize];
            }
            e.1.sort_unstable();
        }
        entries.sort_unstable();
        let mut trie = PatternTrie {
            roots: vec![NO_NODE; floor],
            rank,
            row: floor.div_ceil(64),
            nodes: Vec::new(),
            child_ranks: Vec::new(),
            children: Vec::new(),
            dead_squares,
        };
        let mut i = 0;
        while i < entries.len() {
            let m = entries[i].0;
            let end = i + entries[i..].partition_point(|e| e.0 == m);
            let group: Vec<(&[u16], u32)> = entries[i..end].iter().map(|e| (&e.1[..], e.2)).collect();
            trie.roots[m as usize] = trie.build(&group, 0);
            i = end;
        }
        trie
    }

    /// Builds the node for `group` (sorted, sharing their first `depth` ranks).
    fn build(&mut self, group: &[(&[u16], u32)], depth: usize) -> u32 {
        let id = self.nodes.len() as u32;
        // a pattern ending here comes first in sorted order
        let (pattern, rest) = match group.first() {
            Some(&(ranks, value)) if ranks.len() == depth => (value, &group[1..]),
            _ => (NO_PATTERN, group),
        };
        let mut subgroups: Vec<&[(&[u16], u32)]> = Vec::new();
        let first_child = self.children.len() as u32;
        self.nodes.push(TrieNode { first_child, pattern });
        self.child_ranks.resize(self.child_ranks.len() + self.row, 0);
        let mut i = 0;
        while i < rest.len() {
            let r = rest[i].0[depth];
            let end = i + rest[i..].partition_point(|e| e.0[depth] == r);
            subgroups.push(&rest[i..end]);
            self.child_ranks[id as usize * self.row + r as usize / 64] |= 1 << (r % 64);
            i = end;
        }
        self.children.resize(self.children.len() + subgroups.len(), NO_NODE);
        for (c, sub) in subgroups.into_iter().enumerate() {
            let child = self.build(sub, depth + 1);
            self.children[first_child as usize + c] = child;
        }
        id
    }

    #[inline]
    fn any_subset(&self, boxes: &[u16], moved: u16, player: u16) -> bool {
        // the boxes' ranks but the moved one's: as if it had moved onto itself
        let mut ranks = [0u64; QUERY_WORDS];
        self.ranks_of(boxes, &mut ranks);
        self.any_subset_after(&ranks, moved, moved, player)
    }

    /// The rank bits of `boxes`, for [`any_subset_after`](Self::any_subset_after).
    #[inline]
    fn ranks_of(&self, boxes: &[u16], ranks: &mut [u64; QUERY_WORDS]) {
        ranks[..self.row].fill(0);
        for &b in boxes {
            let r = self.rank[b as usize];
            ranks[r as usize / 64] |= 1 << (r % 64);
        }
    }

    /// [`any_subset`](Self::any_subset) of the box set that `parent` (the rank
    /// bits of [`ranks_of`](Self::ranks_of)) becomes when its box on `from`
    /// moves onto `moved`: the others are the parent's boxes but `from`.
    #[inline]
    fn any_subset_after(&self, parent: &[u64; QUERY_WORDS], from: u16, moved: u16, player: u16) -> bool {
        let root = match self.roots.get(moved as usize) {
            Some(&root) if root != NO_NODE => root,
            _ => return false,
        };
        let mut ranks = *parent;
        let r = self.rank[from as usize];
        ranks[r as usize / 64] &= !(1 << (r % 64));
        self.walk(root, &ranks[..self.row], player)
    }

    /// True when a pattern below `node` lies inside the boxes whose rank bits
    /// are set in `ranks`, and is dead for `player`.
    fn walk(&self, node: u32, ranks: &[u64], player: u16) -> bool {
        let n = self.nodes[node as usize];
        match n.pattern {
            NO_PATTERN => {}
            ANY_PLAYER => return true,
            at => {
                if has_bit(&self.dead_squares[at as usize..], player) {
                    return true;
                }
            }
        }
        let masks = &self.child_ranks[node as usize * self.row..(node as usize + 1) * self.row];
        // children before word w: their index offset
        let mut before = n.first_child as usize;
        for (&mask, &have) in masks.iter().zip(ranks) {
            let mut hit = mask & have;
            while hit != 0 {
                let bit = hit.trailing_zeros();
                hit &= hit - 1;
                let child = self.children[before + (mask & ((1u64 << bit) - 1)).count_ones() as usize];
                if self.walk(child, ranks, player) {
                    return true;
                }
            }
            before += mask.count_ones() as usize;
        }
        false
    }
}

/// Calls `f` with each `k`-combination of `0..n` (as sorted indices) until it
/// returns true.
pub fn for_each_combination(n: usize, k: usize, mut f: impl FnMut(&[usize]) -> bool) {
    if k > n {
        return;
    }
    let mut idx: Vec<usize> = (0..k).collect();
    loop {
        if f(&idx) {
            return;
        }
        // the rightmost index that can still move right moves, the rest follow it
        let mut i = k;
        while i > 0 && idx[i - 1] == i - 1 + n - k {
            i -= 1;
        }
        if i == 0 {
            return;
        }
        idx[i - 1] += 1;
        for j in i..k {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

/// Observes table building.
pub trait KpgProgress: Progress {
    fn k_started(&self, _k: usize) {}
    fn k_done(&self, _stats: &KStats) {}
}

impl KpgProgress for super::search::NoProgress {}

/// Explores one side of a k-game to exhaustion and returns every key found,
/// sorted (`None` when cancelled). Given the game, the tables built so far (which
/// the game's problem already checks), the side and the seeds. In this process
/// it is a [`LocalBackend`]; on a cluster the coordinator runs the same `exhaust`
/// over the workers.
pub type Explorer<'a> =
    dyn FnMut(&Problem<u64>, &DeadlockTables, Side, &[u64]) -> Result<Option<Vec<u64>>, EngineError> + 'a;

/// Explores both sides of a k-game, from the forward and from the backward seeds;
/// returns what each found (`None` when cancelled). Whoever holds the layers
/// (local mode, the cluster) supplies it.
pub type PairExplorer<'a> = dyn FnMut(&Problem<u64>, &DeadlockTables, &[u64], &[u64]) -> Result<(Option<Vec<u64>>, Option<Vec<u64>>), EngineError>
    + 'a;

/// [`build_tables`] with the exploration of each k-game left to `explore`.
pub fn build_tables_with(
    board: Arc<Board>,
    choice: KChoice,
    progress: &dyn KpgProgress,
    explore: &mut Explorer<'_>,
) -> Result<(DeadlockTables, Vec<KStats>), EngineError> {
    let mut one_side_then_the_other = |problem: &Problem<u64>, tables: &DeadlockTables, fwd: &[u64], bwd: &[u64]| {
        let forward = explore(problem, tables, Side::Forward, fwd)?;
        let backward = explore(problem, tables, Side::Backward, bwd)?;
        Ok((forward, backward))
    };
    build_tables_paired(board, choice, progress, &mut one_side_then_the_other)
}

/// Builds tables for k = 1, 2, ... as `choice` says on `board`, each k pruned
/// by the tables before it, with both sides of each k-game explored by
/// `explore`. Stops early (returning what is complete) when the explorer
/// reports a cancel.
pub fn build_tables_paired(
    board: Arc<Board>,
    choice: KChoice,
    progress: &dyn KpgProgress,
    explore: &mut PairExplorer<'_>,
) -> Result<(DeadlockTables, Vec<KStats>), EngineError> {
    let max_k = match choice {
        KChoice::UpTo(k) => k,
        KChoice::Auto => MAX_K,
    };
    let max_k = max_k.min(MAX_K).min(board.box_count());
    let mut tables = DeadlockTables::new(board.clone(), Vec::new());
    let mut all_stats = Vec::new();
    for k in 1..=max_k {
        if choice == KChoice::Auto && !next_k_pays(&all_stats) {
            break;
        }
        progress.k_started(k);
        let started = Instant::now();
        let patterns: Option<Arc<dyn PatternCheck>> =
            if tables.tables.is_empty() { None } else { Some(Arc::new(tables.clone())) };
        let problem = Problem::<u64>::with_boxes(board.clone(), k, Pruning::ALL, patterns)
            .ok_or_else(|| EngineError::Internal(format!("no key space for a {k}-box game")))?;
        if problem.space.width != KeyWidth::U64 {
            // k-games are played with 64-bit keys
            if choice == KChoice::Auto {
                break;
            }
            return Err(EngineError::Unsupported(format!(
                "the {k}-box game of this level needs keys wider than 64 bits; k-PG tables go up to k = {} here",
                k - 1
            )));
        }
        let (fwd_seeds, bwd_seeds) = k_seeds(&problem, k);
        let (forward, backward) = explore(&problem, &tables, &fwd_seeds, &bwd_seeds)?;
        let (Some(forward), Some(backward)) = (forward, backward) else {
            break; // cancelled: keep the complete tables
        };
        let table = KTable {
            k,
            forward: patterns_of(&problem, &forward, &backward),
            backward: patterns_of(&problem, &backward, &forward),
        };
        let stats = KStats {
            k,
            forward_states: forward.len() as u64,
            backward_states: backward.len() as u64,
            forward_patterns: table.forward.patterns(),
            backward_patterns: table.backward.patterns(),
            seconds: started.elapsed().as_secs_f64(),
        };
        progress.k_done(&stats);
        tracing::info!(
            k,
            forward_states = stats.forward_states,
            backward_states = stats.backward_states,
            forward_patterns = stats.forward_patterns,
            backward_patterns = stats.backward_patterns,
            "k-pg table built"
        );
        all_stats.push(stats);
        let mut built = std::mem::take(&mut tables.tables);
        built.push(table);
        tables = DeadlockTables::new(board.clone(), built);
    }
    Ok((tables, all_stats))
}

/// Seeds of the k-game: every k-subset of the start boxes with the start player,
/// and every k-subset of the goals with the player in each region.
pub fn k_seeds(problem: &Problem<u64>, k: usize) -> (Vec<u64>, Vec<u64>) {
    let board = &problem.board;
    let mut sc = Scratch::new(board);
    let mut fwd = Vec::new();
    let mut bwd = Vec::new();
    let mut subset = Vec::with_capacity(k);
    for_each_combination(board.start_boxes.len(), k, |idx| {
        subset.clear();
        subset.extend(idx.iter().map(|&i| board.start_boxes[i]));
        let p = normalize_player(board, &mut sc, &subset, board.start_player);
        fwd.push(problem.encode(&subset, p));
        false
    });
    for_each_combination(board.goals.len(), k, |idx| {
        subset.clear();
        subset.extend(idx.iter().map(|&i| board.goals[i]));
        for p in goal_states(board, &mut sc, &subset) {
            bwd.push(problem.encode(&subset, p));
        }
        false
    });
    (fwd, bwd)
}

/// Patterns: states of `found` missing from `other`, grouped by box set. A box
/// set none of whose states is in both is dead for any player. Both are sorted,
/// and a 64-bit key is its box set's rank times the floor size plus the
/// player, so a box set's states are one run of `found`, players ascending.
fn patterns_of(problem: &Problem<u64>, found: &[u64], other: &[u64]) -> PatternSet {
    let mut set = PatternSet::new(problem.board.floor_count());
    let floor = problem.space.floor as u64;
    let mut boxes = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < found.len() {
        let rank = found[i] / floor;
        let (mut dead, mut alive) = (Vec::new(), false);
        while let Some(&key) = found.get(i).filter(|&&k| k / floor == rank) {
            while j < other.len() && other[j] < key {
                j += 1;
            }
            if j < other.len() && other[j] == key {
                alive = true;
            } else {
                dead.push((key % floor) as u16);
            }
            i += 1;
        }
        if !dead.is_empty() {
            problem.decode(&found[i - 1], &mut boxes);
            debug_assert!(dead.iter().all(|&p| problem.encode(&boxes, p) / floor == rank));
            set.insert(&boxes, if alive { DeadPlayers::Squares(dead) } else { DeadPlayers::Any });
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_enumerate_all() {
        let mut seen = Vec::new();
        for_each_combination(5, 3, |c| {
            seen.push(c.to_vec());
            false
        });
        assert_eq!(seen.len(), 10);
        assert_eq!(seen[0], vec![0, 1, 2]);
        assert_eq!(seen[9], vec![2, 3, 4]);
        let mut n = 0;
        for_each_combination(4, 0, |_| {
            n += 1;
            false
        });
        assert_eq!(n, 1);
        for_each_combination(2, 3, |_| panic!("k > n has no combinations"));
    }

    #[test]
    fn the_automatic_choice_predicts_the_next_game_from_the_last_two() {
        let stats = |k, states: u64| KStats {
            k,
            forward_states: states / 2,
            backward_states: states - states / 2,
            forward_patterns: 0,
            backward_patterns: 0,
            seconds: 0.0,
        };
        // k = 1 and 2 always
        assert!(next_k_pays(&[]));
        assert!(next_k_pays(&[stats(1, 10_000_000)]));
        // Microban I #153 (docs/benchmarks.md): 2,970 then 47,069 states predict
        // 746,000 for k = 4: over the budget
        assert!(!next_k_pays(&[stats(1, 116), stats(2, 2_970), stats(3, 47_069)]));
        // growth 10 from 40,000: 400,000 predicted, within it
        assert!(next_k_pays(&[stats(2, 4_000), stats(3, 40_000)]));
        assert!(!next_k_pays(&[stats(2, 4_000), stats(3, 50_000)]));
        // exactly at the budget plays; a game that found nothing counts as one state
        assert!(next_k_pays(&[stats(2, 50), stats(3, 5_000)]));
        assert!(next_k_pays(&[stats(2, 0), stats(3, 0)]));
    }

    #[test]
    fn the_automatic_choice_predicts_what_it_will_play() {
        let stats = |k, states: u64| KStats {
            k,
            forward_states: states,
            backward_states: 0,
            forward_patterns: 0,
            backward_patterns: 0,
            seconds: 0.0,
        };
        // growth 10: 10,000 then 100,000 are within the budget, 10^6 is not
        assert_eq!(predicted_auto_states(&[stats(1, 100), stats(2, 1_000)], 20), 110_000);
        // the box count ends it first
        assert_eq!(predicted_auto_states(&[stats(1, 100), stats(2, 1_000)], 3), 10_000);
        assert_eq!(predicted_auto_states(&[stats(1, 100), stats(2, 1_000)], 2), 0);
        // and MAX_K: growth 1 plays every k up to it
        assert_eq!(predicted_auto_states(&[stats(1, 10), stats(2, 10)], 40), 10 * (MAX_K as u64 - 2));
        // nothing predicted from fewer than two games
        assert_eq!(predicted_auto_states(&[stats(1, 10)], 40), 0);
    }

    #[test]
    fn pack_roundtrip() {
        assert_eq!(unpack(pack(&[3, 70, 900]), 3), vec![3, 70, 900]);
        let eight = [1, 2, 300, 400, 500, 600, 700, 1013];
        assert_eq!(unpack(pack(&eight), MAX_K), eight.to_vec());
    }
}
