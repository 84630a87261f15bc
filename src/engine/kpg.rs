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

use super::partition::{LocalExchange, PartitionStore, Partitioner};
use super::search::{exhaust, Limits, LocalBackend, Progress, SearchEnd};
use super::{EngineError, PatternCheck, Problem, Side};
use crate::model::board::Board;
use crate::model::rules::{goal_states, normalize_player, Pruning, Scratch};
use crate::storage::mem::MemStore;
use rustc_hash::FxHashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// Largest k supported: box sets are packed four 16-bit squares to a `u64`.
pub const MAX_K: usize = 4;

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
    pub map: FxHashMap<u64, DeadPlayers>,
    /// What the check reads, derived from `map` and the board by
    /// [`PatternSet::index_players`]: packed box squares -> [`ANY_PLAYER`], or
    /// the offset in `dead_squares` of a bitset (`row` words) of every square
    /// whose region, with only the pattern's boxes placed, is dead. A check is
    /// then one bit test, not a flood of the k-box board.
    lookup: FxHashMap<u64, u32>,
    dead_squares: Vec<u64>,
    /// Squares that appear in any pattern (the cheap first filter).
    pub squares: Vec<bool>,
    /// `pairs[a * row + b / 64]` bit `b % 64`: squares `a` and `b` appear together
    /// in some pattern. Subsets with a pair that never co-occurs are never looked up.
    pairs: Vec<u64>,
    row: usize,
}

impl PatternSet {
    pub fn new(floor: usize) -> Self {
        let row = floor.div_ceil(64);
        PatternSet {
            map: FxHashMap::default(),
            lookup: FxHashMap::default(),
            dead_squares: Vec::new(),
            squares: vec![false; floor],
            pairs: vec![0; row * floor],
            row,
        }
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
                if start as usize >= floor || walls[start as usize] || bits[start as usize / 64] >> (start % 64) & 1 != 0 {
                    continue;
                }
                queue.clear();
                queue.push(start);
                bits[start as usize / 64] |= 1 << (start % 64);
                while let Some(f) = queue.pop() {
                    for d in 0..crate::model::board::DIRS {
                        let g = board.neighbour(f, d);
                        if g != crate::model::board::NONE && !walls[g as usize] && bits[g as usize / 64] >> (g % 64) & 1 == 0 {
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
        for &a in boxes {
            self.squares[a as usize] = true;
            for &b in boxes {
                self.pairs[a as usize * self.row + b as usize / 64] |= 1 << (b % 64);
            }
        }
        self.map.insert(pack(boxes), dead);
    }

    #[inline]
    fn together(&self, a: u16, b: u16) -> bool {
        self.pairs[a as usize * self.row + b as usize / 64] & (1 << (b % 64)) != 0
    }

    /// Number of (box set, player) patterns, counting "any player" as one.
    pub fn patterns(&self) -> usize {
        self.map.values().map(|d| if let DeadPlayers::Squares(v) = d { v.len() } else { 1 }).sum()
    }
}

/// The lookup value of a pattern dead for every player region.
const ANY_PLAYER: u32 = u32::MAX;

/// Two sets are equal when their patterns are: the lookup is derived data.
impl PartialEq for PatternSet {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl Eq for PatternSet {}

/// Packs up to four sorted squares into a u64.
#[inline]
pub fn pack(boxes: &[u16]) -> u64 {
    boxes.iter().fold(0u64, |acc, &b| (acc << 16) | b as u64)
}

/// Unpacks `k` squares.
pub fn unpack(mut key: u64, k: usize) -> Vec<u16> {
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

/// Deadlock tables for k = 1..=K of one level.
#[derive(Debug, Clone)]
pub struct DeadlockTables {
    pub board: Arc<Board>,
    pub tables: Vec<KTable>,
}

/// What building one k cost and kept.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
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
    /// derives each set's lookup.
    pub fn new(board: Arc<Board>, mut tables: Vec<KTable>) -> Self {
        for t in &mut tables {
            t.forward.index_players(&board, t.k);
            t.backward.index_players(&board, t.k);
        }
        DeadlockTables { board, tables }
    }

    pub fn max_k(&self) -> usize {
        self.tables.last().map_or(0, |t| t.k)
    }

    /// Keeps only the tables up to `k`.
    pub fn truncated(&self, k: usize) -> DeadlockTables {
        DeadlockTables { board: self.board.clone(), tables: self.tables.iter().filter(|t| t.k <= k).cloned().collect() }
    }
}

impl PatternCheck for DeadlockTables {
    fn is_deadlock(&self, side: Side, boxes: &[u16], moved: u16, player: u16) -> bool {
        let mut subset = [0u16; MAX_K];
        let mut others = [0u16; 64];
        for t in &self.tables {
            let set = match side {
                Side::Forward => &t.forward,
                Side::Backward => &t.backward,
            };
            if boxes.len() < t.k || !set.squares[moved as usize] || set.map.is_empty() {
                continue;
            }
            // the other boxes that can be in a pattern with the moved one
            let mut n = 0;
            for &b in boxes {
                if b != moved && set.together(moved, b) {
                    if n == others.len() {
                        break;
                    }
                    others[n] = b;
                    n += 1;
                }
            }
            if n + 1 < t.k {
                continue;
            }
            let mut found = false;
            for_each_combination(n, t.k - 1, |idx| {
                for (i, &x) in idx.iter().enumerate() {
                    for &y in &idx[i + 1..] {
                        if !set.together(others[x], others[y]) {
                            return false;
                        }
                    }
                }
                let s = &mut subset[..t.k];
                s[0] = moved;
                for (i, &j) in idx.iter().enumerate() {
                    s[i + 1] = others[j];
                }
                s.sort_unstable();
                found = match set.lookup.get(&pack(s)) {
                    None => false,
                    Some(&ANY_PLAYER) => true,
                    Some(&at) => set.dead_squares[at as usize + player as usize / 64] >> (player % 64) & 1 != 0,
                };
                found
            });
            if found {
                return true;
            }
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
    // subsets are small (k <= MAX_K in the checks): no allocation per call
    let mut stack = [0usize; 8];
    let mut heap = Vec::new();
    let idx: &mut [usize] = if k <= stack.len() {
        &mut stack[..k]
    } else {
        heap.resize(k, 0);
        &mut heap
    };
    for (i, x) in idx.iter_mut().enumerate() {
        *x = i;
    }
    loop {
        if f(idx) {
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

/// Builds tables for k = 1..=`max_k` on `board`, each k pruned by the tables
/// before it. Stops early (returning what is complete) if `cancel` is raised.
pub fn build_tables(
    board: Arc<Board>,
    max_k: usize,
    partitions: usize,
    cancel: &AtomicBool,
    progress: &dyn KpgProgress,
) -> Result<(DeadlockTables, Vec<KStats>), EngineError> {
    let mut local = |problem: &Problem<u64>, _: &DeadlockTables, side: Side, seeds: &[u64]| {
        explore(problem, side, seeds, partitions, cancel, progress)
    };
    build_tables_with(board, max_k, progress, &mut local)
}

/// [`build_tables`] with the exploration of each k-game left to `explore`.
pub fn build_tables_with(
    board: Arc<Board>,
    max_k: usize,
    progress: &dyn KpgProgress,
    explore: &mut Explorer<'_>,
) -> Result<(DeadlockTables, Vec<KStats>), EngineError> {
    let max_k = max_k.min(MAX_K).min(board.box_count());
    let mut tables = DeadlockTables { board: board.clone(), tables: Vec::new() };
    let mut all_stats = Vec::new();
    for k in 1..=max_k {
        progress.k_started(k);
        let started = Instant::now();
        let patterns: Option<Arc<dyn PatternCheck>> =
            if tables.tables.is_empty() { None } else { Some(Arc::new(tables.clone())) };
        let problem = Problem::<u64>::with_boxes(board.clone(), k, Pruning::ALL, patterns)
            .ok_or_else(|| EngineError::Internal(format!("no key space for a {k}-box game")))?;
        let (fwd_seeds, bwd_seeds) = k_seeds(&problem, k);
        let forward = explore(&problem, &tables, Side::Forward, &fwd_seeds)?;
        let backward = explore(&problem, &tables, Side::Backward, &bwd_seeds)?;
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
        tracing::info!(k, forward_states = stats.forward_states, backward_states = stats.backward_states,
            forward_patterns = stats.forward_patterns, backward_patterns = stats.backward_patterns, "k-pg table built");
        all_stats.push(stats);
        tables.tables.push(table);
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

/// Explores one side of the k-game to exhaustion; returns every key found, sorted.
fn explore(
    problem: &Problem<u64>,
    side: Side,
    seeds: &[u64],
    partitions: usize,
    cancel: &AtomicBool,
    progress: &dyn Progress,
) -> Result<Option<Vec<u64>>, EngineError> {
    let partitioner = Partitioner::for_space(partitions, &problem.space);
    let store = MemStore::<u64>::new(partitions);
    let exchange = LocalExchange::<u64>::new(partitions);
    let mut backend = LocalBackend { problem, partitioner, store: &store, exchange: &exchange, cancel };
    let limits = Limits { cancel, max_states: None };
    let (end, _) = exhaust(&mut backend, side, seeds, &limits, progress)?;
    if matches!(end, SearchEnd::Cancelled) {
        return Ok(None);
    }
    let mut all = Vec::new();
    for layer in 0..store.layers(side) {
        for p in 0..partitions {
            store.for_each_chunk(side, layer, p, &mut |c| {
                all.extend_from_slice(c);
                Ok(())
            })?;
        }
    }
    all.sort_unstable();
    Ok(Some(all))
}

/// Patterns: states of `found` missing from `other`, grouped by box set. A box
/// set none of whose states is in both is dead for any player.
fn patterns_of(problem: &Problem<u64>, found: &[u64], other: &[u64]) -> PatternSet {
    let mut set = PatternSet::new(problem.board.floor_count());
    let mut dead: FxHashMap<u64, Vec<u16>> = FxHashMap::default();
    let mut alive: rustc_hash::FxHashSet<u64> = Default::default();
    let mut boxes = Vec::new();
    let mut j = 0;
    for key in found {
        while j < other.len() && other[j] < *key {
            j += 1;
        }
        let both = j < other.len() && other[j] == *key;
        let player = problem.decode(key, &mut boxes);
        let packed = pack(&boxes);
        if both {
            alive.insert(packed);
        } else {
            dead.entry(packed).or_default().push(player);
        }
    }
    let k = problem.space.boxes;
    for (packed, mut players) in dead {
        let boxes = unpack(packed, k);
        if alive.contains(&packed) {
            players.sort_unstable();
            players.dedup();
            set.insert(&boxes, DeadPlayers::Squares(players));
        } else {
            set.insert(&boxes, DeadPlayers::Any);
        }
    }
    set.index_players(&problem.board, k);
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

    /// The bitset lookup must answer exactly what flooding the k-box board and
    /// looking the normalized player up in the pattern's list answers.
    #[test]
    fn player_bitsets_agree_with_flooding() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/levels/Microban_155.xsb");
        let text = std::fs::read_to_string(path).unwrap();
        let mut checked = 0;
        for (i, lt) in crate::model::level::split_collection(&text, path).iter().take(12).enumerate() {
            let level = lt.parse().unwrap();
            let board = Arc::new(Board::new(&level).unwrap());
            let (tables, _) =
                build_tables(board.clone(), 2, 4, &AtomicBool::new(false), &super::super::search::NoProgress).unwrap();
            let mut sc = Scratch::new(&board);
            for t in &tables.tables {
                for set in [&t.forward, &t.backward] {
                    for (&key, dead) in &set.map {
                        let DeadPlayers::Squares(list) = dead else { continue };
                        let boxes = unpack(key, t.k);
                        let at = set.lookup[&key] as usize;
                        for p in 0..board.floor_count() as u16 {
                            if boxes.contains(&p) {
                                continue;
                            }
                            let flooded = list.binary_search(&normalize_player(&board, &mut sc, &boxes, p)).is_ok();
                            let bit = set.dead_squares[at + p as usize / 64] >> (p % 64) & 1 != 0;
                            assert_eq!(bit, flooded, "level {}, boxes {boxes:?}, player {p}", i + 1);
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 1000, "too few player-dependent patterns to test ({checked} checks)");
    }

    #[test]
    fn pack_roundtrip() {
        assert_eq!(unpack(pack(&[3, 70, 900]), 3), vec![3, 70, 900]);
    }
}
