//! The engine room: level-synchronous, partitioned BFS (one side or both), meeting
//! detection, path rebuild and the k-packet-game deadlock tables. CPU work runs on
//! rayon; nothing here knows about tokio, tonic or the terminal.

pub mod driver;
pub mod kpg;
pub mod layer;
pub mod moves;
pub mod partition;
pub mod path;
pub mod probe;
pub mod report;
pub mod search;

use crate::model::board::Board;
use crate::model::bounds::Child;
use crate::model::key::{KeySpace, StateKey};
use crate::model::rules::{
    for_each_pull, for_each_pull_kept, for_each_push, for_each_push_kept, BoxMove, Pruning, Scratch,
};
use std::marker::PhantomData;
use std::sync::Arc;

/// The two search directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// From the start, by pushes.
    Forward,
    /// From the solved position, by pulls.
    Backward,
}

impl Side {
    #[inline]
    pub fn index(self) -> usize {
        match self {
            Side::Forward => 0,
            Side::Backward => 1,
        }
    }
    pub fn other(self) -> Side {
        match self {
            Side::Forward => Side::Backward,
            Side::Backward => Side::Forward,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Side::Forward => "forward",
            Side::Backward => "backward",
        }
    }
    pub fn from_index(i: usize) -> Side {
        if i == 0 {
            Side::Forward
        } else {
            Side::Backward
        }
    }
}

/// An error raised behind one of the engine's seams (a store, an exchange, a
/// layer backend), boxed so that the engine names no room that implements them.
/// Whoever implements a seam converts its own error into this one, and whoever
/// called the engine can get it back with [`SeamError::downcast`].
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct SeamError(pub Box<dyn std::error::Error + Send + Sync + 'static>);

impl SeamError {
    /// Wraps an implementer's error.
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        SeamError(Box::new(e))
    }

    /// The implementer's error, if it is an `E`.
    pub fn downcast<E: std::error::Error + 'static>(self) -> Result<E, SeamError> {
        self.0.downcast::<E>().map(|b| *b).map_err(SeamError)
    }

    /// A reference to the implementer's error, if it is an `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref::<E>()
    }
}

/// Engine failures.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A store, exchange or layer backend failed; the source is its own error.
    #[error(transparent)]
    Seam(#[from] SeamError),
    /// Stopped by the cancel flag (a deadline, Ctrl-C, a cluster cancel) where a
    /// step could not simply report `None`.
    #[error("cancelled")]
    Cancelled,
    /// The request is beyond what the engine does (say, a k-game too large
    /// for its keys).
    #[error("{0}")]
    Unsupported(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl EngineError {
    /// A seam implementer's error.
    pub fn seam(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        EngineError::Seam(SeamError::new(e))
    }

    /// The seam implementer's error behind this one, if it is an `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            EngineError::Seam(s) => s.downcast_ref(),
            _ => None,
        }
    }
}

/// A lower bound on push distances, for the bounded search: from a state to the
/// goal (`Side::Forward`) or from the start to it (`Side::Backward`). It must
/// never exceed the true distance; `u32::MAX` says the state is dead.
pub trait LowerBound: Send + Sync {
    /// The bound when it is at most `cap`; above `cap`, any lower bound that
    /// is above it (so that an implementation may stop early). `player` is
    /// any square of the player's region.
    fn estimate(&self, side: Side, boxes: &[u16], player: u16, cap: u32) -> u32;

    /// The same question of a successor (`child`, whose box moved from
    /// `child.from` to `child.to`): a value at most `cap` exactly when the
    /// bound is, and above `cap` a lower bound; an implementation may reuse
    /// the parent's work. With `exact`, a value at most `cap` is the bound
    /// itself (the probe orders states by it), not only on the right side of
    /// the cap.
    fn estimate_child(&self, side: Side, child: &Child<'_>, cap: u32, exact: bool) -> u32 {
        let _ = exact;
        self.estimate(side, child.boxes, child.player, cap)
    }
}

impl LowerBound for crate::model::bounds::LowerBounds {
    fn estimate(&self, side: Side, boxes: &[u16], player: u16, cap: u32) -> u32 {
        self.estimate_capped(boxes, player, side == Side::Forward, cap)
    }

    fn estimate_child(&self, side: Side, child: &Child<'_>, cap: u32, exact: bool) -> u32 {
        crate::model::bounds::LowerBounds::estimate_child(self, child, side == Side::Forward, cap, exact)
    }
}

/// The bound of one iteration of the bounded search: a state at depth `d` on
/// a side is kept only if `d + lower(side, state) <= limit`.
#[derive(Clone)]
pub struct Bound {
    pub lower: Arc<dyn LowerBound>,
    pub limit: u32,
}

/// Bins of the histogram of what the bound dropped: bin `i` counts successors
/// whose `d + h` was `limit + i + 1`, the last bin those further over.
pub const EXCESS_BINS: usize = 64;

/// Successors the bound dropped, by how far over the limit they were.
pub type Excess = [u64; EXCESS_BINS];

/// A pattern-based deadlock check (the k-PG tables), consulted after every move.
pub trait PatternCheck: Send + Sync {
    /// True when the state reached by moving a box onto `moved` (boxes sorted,
    /// `player` any square of the player's region) can be dropped by the search
    /// on `side`.
    fn is_deadlock(&self, side: Side, boxes: &[u16], moved: u16, player: u16) -> bool;

    /// Readies `query` for the successors of one state on `side` (`boxes`, its
    /// sorted box set): what [`is_deadlock_after`](Self::is_deadlock_after)
    /// would otherwise redo for every successor.
    fn prepare(&self, _side: Side, _boxes: &[u16], _query: &mut PatternQuery) {}

    /// [`is_deadlock`](Self::is_deadlock) of the successor that moved a box of
    /// the state `query` was prepared for from `from` onto `moved` (`boxes`,
    /// the successor's box set).
    fn is_deadlock_after(
        &self,
        side: Side,
        _query: &PatternQuery,
        boxes: &[u16],
        _from: u16,
        moved: u16,
        player: u16,
    ) -> bool {
        self.is_deadlock(side, boxes, moved, player)
    }
}

/// Words of a [`PatternQuery`]: one bit per floor square up to the key
/// spaces' limit ([`crate::model::key::MAX_FLOOR_SQUARES`]).
pub const QUERY_WORDS: usize = crate::model::key::MAX_FLOOR_SQUARES.div_ceil(64);

/// What a [`PatternCheck`] keeps of one state between its successors' checks:
/// a bitset of its boxes, in whatever order of squares the check reads.
#[derive(Clone, Copy)]
pub struct PatternQuery {
    pub words: [u64; QUERY_WORDS],
}

impl Default for PatternQuery {
    fn default() -> Self {
        PatternQuery { words: [0; QUERY_WORDS] }
    }
}

/// The model's [`Join`](crate::model::pairs::Join) on rayon's threads: both
/// tasks at once where a thread is free.
pub fn on_threads(a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
    rayon::join(a, b);
}

/// What is searched: a board, a box count (k-PG games use fewer boxes than the
/// level), the prunings, and how keys are encoded.
pub struct Problem<K> {
    pub board: Arc<Board>,
    pub space: KeySpace,
    pub pruning: Pruning,
    pub patterns: Option<Arc<dyn PatternCheck>>,
    /// The bounded search's filter, if this search is bounded.
    pub bound: Option<Bound>,
    _key: PhantomData<K>,
}

impl<K: StateKey> Problem<K> {
    /// The full level.
    pub fn full(board: Arc<Board>, pruning: Pruning, patterns: Option<Arc<dyn PatternCheck>>) -> Self {
        let space = board.keyspace.clone();
        Problem { board, space, pruning, patterns, bound: None, _key: PhantomData }
    }

    /// The same problem under `bound`.
    pub fn with_bound(mut self, bound: Option<Bound>) -> Self {
        self.bound = bound;
        self
    }

    /// A sub-game with `boxes` boxes on the same board.
    pub fn with_boxes(
        board: Arc<Board>,
        boxes: usize,
        pruning: Pruning,
        patterns: Option<Arc<dyn PatternCheck>>,
    ) -> Option<Self> {
        let space = KeySpace::new(board.floor_count(), boxes)?;
        Some(Problem { board, space, pruning, patterns, bound: None, _key: PhantomData })
    }

    #[inline]
    pub fn encode(&self, boxes: &[u16], player: u16) -> K {
        K::encode(&self.space, boxes, player)
    }

    #[inline]
    pub fn decode(&self, key: &K, boxes: &mut Vec<u16>) -> u16 {
        key.decode(&self.space, boxes)
    }

    /// Calls `emit` for every (pruned) move of `side` from `key`: pushes forward,
    /// pulls backward. `depth` is the successors' depth on `side`, for the
    /// bound; what the bound drops is counted in `excess`.
    pub fn expand(
        &self,
        side: Side,
        key: &K,
        sc: &mut Scratch,
        depth: u32,
        excess: &mut Excess,
        mut emit: impl FnMut(K, BoxMove),
    ) {
        self.expand_with(side, key, sc, depth, excess, false, |k, m, _| emit(k, m))
    }

    /// [`Problem::expand`] that also hands `emit` each successor's lower
    /// bound `h`: exact ([`LowerBound::estimate_child`] with `exact`; 0 only with
    /// every box on a goal forward, on a start square backward), or 0 when
    /// the search is not bounded.
    pub fn expand_scored(
        &self,
        side: Side,
        key: &K,
        sc: &mut Scratch,
        depth: u32,
        excess: &mut Excess,
        emit: impl FnMut(K, BoxMove, u32),
    ) {
        self.expand_with(side, key, sc, depth, excess, true, emit)
    }

    /// The expansion, with `h` exact (`exact`) or only as good as the filter
    /// needs (at most the cap exactly when the bound is).
    #[allow(clippy::too_many_arguments)]
    fn expand_with(
        &self,
        side: Side,
        key: &K,
        sc: &mut Scratch,
        depth: u32,
        excess: &mut Excess,
        exact: bool,
        mut emit: impl FnMut(K, BoxMove, u32),
    ) {
        let mut boxes = std::mem::take(&mut sc.boxes);
        let player = key.decode_near(&self.space, &mut boxes, &mut sc.key_memo);
        let patterns = self.patterns.as_deref();
        let bound = self.bound.as_ref();
        // the kept move's bound, from `keep` to `on_move` (called right after it)
        let last_h = std::cell::Cell::new(0u32);
        let mut query = PatternQuery::default();
        if let Some(pc) = patterns {
            pc.prepare(side, &boxes, &mut query);
        }
        let keep = |next: &[u16], from: u16, moved: u16, p: u16| {
            if patterns.is_some_and(|pc| pc.is_deadlock_after(side, &query, next, from, moved, p)) {
                return false;
            }
            let Some(b) = bound else { return true };
            let cap = b.limit.saturating_sub(depth);
            let child = Child { parent: &boxes, from, to: moved, boxes: next, player: p };
            let h = b.lower.estimate_child(side, &child, cap, exact);
            if h == u32::MAX {
                return false; // dead: no goal (start) for every box
            }
            let f = depth.saturating_add(h);
            if f > b.limit {
                excess[((f - b.limit) as usize).min(EXCESS_BINS) - 1] += 1;
                return false;
            }
            last_h.set(h);
            true
        };
        let on_move = |next: &[u16], p: u16, m: BoxMove| emit(K::encode(&self.space, next, p), m, last_h.get());
        match side {
            Side::Forward => for_each_push_kept(&self.board, sc, &boxes, player, self.pruning, keep, on_move),
            Side::Backward => for_each_pull_kept(&self.board, sc, &boxes, player, self.pruning, keep, on_move),
        }
        sc.boxes = boxes;
    }

    /// Every move of `side` from `key` with no pruning at all (path rebuild).
    pub fn expand_unpruned(&self, side: Side, key: &K, sc: &mut Scratch, mut emit: impl FnMut(K, BoxMove)) {
        let mut boxes = std::mem::take(&mut sc.boxes);
        let player = self.decode(key, &mut boxes);
        let on_move = |next: &[u16], p: u16, m: BoxMove| emit(K::encode(&self.space, next, p), m);
        match side {
            Side::Forward => for_each_push(&self.board, sc, &boxes, player, Pruning::NONE, on_move),
            Side::Backward => for_each_pull(&self.board, sc, &boxes, player, Pruning::NONE, on_move),
        }
        sc.boxes = boxes;
    }
}
