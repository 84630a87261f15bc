//! The bidirectional, level-synchronous search driver (Heiner's "mixed" method),
//! and the one-sided exhaustive exploration the k-PG tables use.
//!
//! # Why the first meeting is push-optimal
//!
//! Let `F_i` be the forward layers (states first reached after exactly `i` pushes,
//! in the pruned graph) and `B_j` the backward layers. Every layer holds only
//! states reached by real moves, so a state of `F_i` is `i` pushes from the start
//! and one of `B_j` is `j` pushes from the goal. Pruning keeps one optimal
//! solution `s_0..s_L` whole, each `s_i` in `F_i` and in `B_{L-i}`: the state
//! prunings (dead squares, freezes, k-PG tables, the matching) drop only states
//! that cannot reach the goal (forward) or that the start cannot reach
//! (backward), and the forward PI-corral restriction keeps, from every state, the
//! first push of some optimal solution from there. Take `s_0` the start and
//! `s_{i+1}` the state that push leads to from `s_i`: it is generated from
//! `s_i`, and no path reaches it in fewer than `i + 1` pushes.
//!
//! Invariant before each step: `F_0..=F_d` and `B_0..=B_m` are pairwise disjoint
//! across sides. Suppose `L <= d + m`. With `i = min(d, L)`, `s_i` lies in `F_i`
//! (`i <= d`) and in `B_{L-i}` (`L - i <= m`): contradiction. So `L >= d + m + 1`.
//! When the new layer `F_{d+1}` first meets some `B_j` (`j <= m`), the joined
//! path is a real solution of `d + 1 + j` pushes, so `d + 1 + j >= L >= d + m + 1`:
//! `j = m` and the length `d + 1 + m` is optimal. The same holds with the sides
//! swapped. Hence: check each new layer against every layer of the other side,
//! stop at the first hit; a hit below the other side's last layer would break the
//! proof and is reported as an internal error instead of a wrong answer.
//!
//! If either side runs dry without a meeting, the kept solution cannot exist
//! (each of its states would have been found by that side and checked against
//! the other): the level is unsolvable.
//!
//! # With a bound
//!
//! A bounded search keeps a state `s` first reached at depth `d` on a side only
//! if `d + h(s) <= U`, where `h` is a lower bound on the pushes from `s` to the
//! goal (forward) or from the start to `s` (backward). If `U >= L`, every state
//! `s_i` of the kept optimal solution passes on both sides: forward,
//! `h_f(s_i) <= L - i`, so `i + h_f(s_i) <= L <= U`; backward, `h_b(s_i) <= i`,
//! so `(L - i) + h_b(s_i) <= L <= U`. Dropping states never makes a kept state
//! reached earlier than its true depth (every layer still holds only real
//! moves), so the kept solution lies whole in the layers at its true depths and
//! the argument above holds word for word: the first meeting is optimal,
//! whatever `U >= L` was. Overshooting costs states, never optimality.
//!
//! And when it ends without a meeting: once `d + m >= U` with no meeting so
//! far, `L >= d + m + 1 > U`; and a side that runs dry proves `L > U` (were
//! `U >= L`, the kept solution would have been met). Either way the answer is
//! "no solution within `U`" ([`SearchEnd::Beyond`]); only when the bound
//! dropped nothing is a dry side a proof that there is no solution at all.

use super::layer::{common_keys, expand, merge};
use super::partition::{Exchange, PartitionStore, Partitioner};
use super::{EngineError, Excess, Problem, Side, EXCESS_BINS};
use crate::model::key::StateKey;
use crate::model::rules::BoxMove;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// A finished layer, reported to progress observers.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct LayerEvent {
    pub side: Side,
    /// Index of the new layer on its side.
    pub layer: usize,
    pub new_states: u64,
    pub generated: u64,
    /// Current frontier sizes, forward and backward.
    pub frontiers: [u64; 2],
    pub stored: u64,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    pub seconds: f64,
    /// The bounded search's `U` for this iteration, if bounded.
    pub bound: Option<u32>,
    /// Set on the layers of the moves pass's search: its budget of states
    /// (the driver sets it; the search itself leaves it `None`).
    pub moves_budget: Option<u64>,
}

/// Receives progress; must be cheap.
pub trait Progress: Sync {
    fn layer_done(&self, _event: &LayerEvent) {}
    /// A probe's progress (`probe.rs`), now and then.
    fn probe_step(&self, _event: &ProbeEvent) {}
}

/// A probe's progress.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ProbeEvent {
    /// The iteration's bound.
    pub bound: Option<u32>,
    /// States the probe stores.
    pub stored: u64,
    pub generated: u64,
    /// The depth of the states last expanded.
    pub depth: usize,
    /// Since the probe started.
    pub seconds: f64,
}

/// No progress output.
pub struct NoProgress;
impl Progress for NoProgress {}

/// The longest time limit taken, in seconds (about 31 years): a limit past
/// it is refused, and a deadline that far ahead could overflow a clock.
pub const MAX_SECONDS: f64 = 1e9;

/// The instant `seconds` from now (a negative number counts as 0); `None` when
/// no clock reaches that far (not a number, or past any clock's range): no
/// deadline at all.
pub fn deadline_in(seconds: f64) -> Option<std::time::Instant> {
    let d = std::time::Duration::try_from_secs_f64(seconds.max(0.0)).ok()?;
    std::time::Instant::now().checked_add(d)
}

/// Search limits and the stop signal.
pub struct Limits<'a> {
    /// Raised by a timeout, Ctrl-C or a cluster cancel.
    pub cancel: &'a AtomicBool,
    /// Stop (status `limit`) once this many states are stored.
    pub max_states: Option<u64>,
    /// The bounded search's limit `U`: the problem keeps only states with
    /// `depth + lower bound <= U`, and the search ends with
    /// [`SearchEnd::Beyond`] once no solution of at most `U` pushes can remain.
    pub bound: Option<u32>,
}

/// How a search ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchEnd<K> {
    /// Sides met: the meeting key, its forward depth and backward depth.
    Met { key: K, forward: usize, backward: usize },
    /// A side ran dry: no solution exists.
    Unsolvable { exhausted: Side },
    /// Stopped by the cancel flag.
    Cancelled,
    /// Stopped at the state limit.
    Limit,
    /// Bounded search: no solution has at most `bound` pushes.
    Beyond { bound: u32 },
    /// A solution found between two steps by another search (the
    /// probe), as pushes from the start; optimal, since it was asked for only
    /// where no solution can be shorter.
    Solved { pushes: Vec<BoxMove> },
}

/// Counters of a finished search.
#[derive(Debug, Clone, Copy)]
pub struct SearchStats {
    pub stored: u64,
    pub generated: u64,
    pub expanded: u64,
    pub layers: [usize; 2],
    pub peak_memory_bytes: u64,
    /// Bytes the visited sets hold in memory at the end.
    pub store_bytes: u64,
    pub disk_bytes: u64,
    /// Successors the bound dropped, by how far over it they were.
    pub excess: Excess,
}

impl Default for SearchStats {
    fn default() -> Self {
        SearchStats {
            stored: 0,
            generated: 0,
            expanded: 0,
            layers: [0, 0],
            peak_memory_bytes: 0,
            store_bytes: 0,
            disk_bytes: 0,
            excess: [0; EXCESS_BINS],
        }
    }
}

impl SearchStats {
    /// Successors the bound dropped.
    pub fn bound_pruned(&self) -> u64 {
        self.excess.iter().sum()
    }
}

/// One completed layer step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepOutcome<K> {
    pub new_states: u64,
    pub generated: u64,
    pub expanded: u64,
    /// The first meeting with the other side: key and its layer there.
    pub meeting: Option<(K, usize)>,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    /// Highest memory seen during the step (store plus buffered successors).
    pub peak_memory_bytes: u64,
    /// Successors the bound dropped, by how far over it they were.
    pub excess: Excess,
}

/// Where the layers live and how a layer step runs: in this process
/// ([`LocalBackend`]) or across a cluster (the coordinator). The search loops
/// below are written once against this trait.
pub trait LayerBackend<K: StateKey> {
    /// Stores `keys` as layer 0 of `side`; returns how many distinct keys.
    fn seed(&mut self, side: Side, keys: &[K]) -> Result<u64, EngineError>;
    /// Completed layers of `side`.
    fn layers(&self, side: Side) -> usize;
    /// Size of the last layer of `side`.
    fn frontier(&self, side: Side) -> Result<u64, EngineError>;
    /// Expands the last layer of `side`, merges the next one and seals it. With
    /// `check_other`, new states are checked against every layer of the other side.
    /// `Ok(None)` when cancelled; the partial layer is dropped.
    fn step(&mut self, side: Side, check_other: bool) -> Result<Option<StepOutcome<K>>, EngineError>;
    /// Index of the first of `keys` found in `layer` of `side`, if any (the
    /// path rebuild's question, answered wherever the layer lives).
    fn first_in_layer(&mut self, side: Side, layer: usize, keys: &[K]) -> Result<Option<usize>, EngineError>;
    /// For each of `keys`, whether it lies in `layer` of `side` (the moves
    /// pass's question, answered wherever the layer lives).
    fn in_layer(&mut self, side: Side, layer: usize, keys: &[K]) -> Result<Vec<bool>, EngineError>;
    /// Every key in both forward layer `forward` and backward layer
    /// `backward`: the whole meeting layer, in no particular order.
    /// `Err(count)` when the backend cannot gather that many in one place.
    fn common(&mut self, forward: usize, backward: usize) -> Result<Result<Vec<K>, u64>, EngineError>;
    /// A meeting already found before this backend was (re)opened, as a
    /// resumed cluster job knows from its log: the search is skipped and only
    /// the path is rebuilt.
    fn resumed_meeting(&self) -> Option<SearchEnd<K>> {
        None
    }
}

/// Layers in one [`PartitionStore`] holding every partition, successors through one
/// in-process [`Exchange`].
pub struct LocalBackend<'a, K: StateKey> {
    pub problem: &'a Problem<K>,
    pub partitioner: Partitioner,
    pub store: &'a dyn PartitionStore<K>,
    pub exchange: &'a dyn Exchange<K>,
    pub cancel: &'a AtomicBool,
}

impl<K: StateKey> LocalBackend<'_, K> {
    fn all_partitions(&self) -> Vec<usize> {
        (0..self.partitioner.count()).collect()
    }
}

impl<K: StateKey> LayerBackend<K> for LocalBackend<'_, K> {
    fn seed(&mut self, side: Side, keys: &[K]) -> Result<u64, EngineError> {
        let mut by_part: Vec<Vec<K>> = vec![Vec::new(); self.partitioner.count()];
        for k in keys {
            by_part[self.partitioner.of(k)].push(*k);
        }
        let mut n = 0;
        for (p, mut v) in by_part.into_iter().enumerate() {
            v.sort_unstable();
            v.dedup();
            n += v.len() as u64;
            self.store.push_layer(side, p, v)?;
        }
        self.store.seal_layer(side)?;
        Ok(n)
    }

    fn layers(&self, side: Side) -> usize {
        self.store.layers(side)
    }

    fn frontier(&self, side: Side) -> Result<u64, EngineError> {
        let layers = self.store.layers(side);
        if layers == 0 {
            return Ok(0);
        }
        Ok((0..self.partitioner.count()).map(|p| self.store.layer_len(side, layers - 1, p)).sum())
    }

    fn step(&mut self, side: Side, check_other: bool) -> Result<Option<StepOutcome<K>>, EngineError> {
        let parts = self.all_partitions();
        let layer = self.store.layers(side) - 1;
        let exp = expand(self.problem, side, layer, &parts, self.partitioner, self.store, self.exchange, self.cancel)?;
        let Some(exp) = exp else {
            self.exchange.clear();
            return Ok(None);
        };
        let peak = self.store.bytes().memory + self.exchange.buffered_bytes();
        let merged = merge(side, &parts, self.store, self.exchange, check_other)?;
        if self.cancel.load(Ordering::Relaxed) {
            self.store.abort_layer(side);
            return Ok(None);
        }
        self.store.seal_layer(side)?;
        let bytes = self.store.bytes();
        Ok(Some(StepOutcome {
            new_states: merged.new_states,
            generated: exp.generated,
            expanded: exp.expanded,
            meeting: merged.meeting,
            memory_bytes: bytes.memory,
            disk_bytes: bytes.disk,
            peak_memory_bytes: peak.max(bytes.memory),
            excess: exp.excess,
        }))
    }

    fn first_in_layer(&mut self, side: Side, layer: usize, keys: &[K]) -> Result<Option<usize>, EngineError> {
        for (i, k) in keys.iter().enumerate() {
            if self.store.contains(side, layer, self.partitioner.of(k), k)? {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    fn in_layer(&mut self, side: Side, layer: usize, keys: &[K]) -> Result<Vec<bool>, EngineError> {
        use rayon::prelude::*;
        let (store, partitioner) = (self.store, self.partitioner);
        let contains = |k: &K| Ok(store.contains(side, layer, partitioner.of(k), k)?);
        // a probe's batch is over in microseconds on one thread; waking the
        // pool for it would cost more
        if keys.len() < IN_LAYER_PARALLEL {
            return keys.iter().map(contains).collect();
        }
        keys.par_iter().map(contains).collect()
    }

    fn common(&mut self, forward: usize, backward: usize) -> Result<Result<Vec<K>, u64>, EngineError> {
        Ok(Ok(common_keys(self.store, &self.all_partitions(), forward, backward)?))
    }
}

/// Keys below which [`LocalBackend::in_layer`] looks them up on one thread.
const IN_LAYER_PARALLEL: usize = 1 << 12;

fn record<K: StateKey>(
    backend: &dyn LayerBackend<K>,
    side: Side,
    out: &StepOutcome<K>,
    stats: &mut SearchStats,
    progress: &dyn Progress,
    started: Instant,
    bound: Option<u32>,
) -> Result<(), EngineError> {
    stats.generated += out.generated;
    stats.expanded += out.expanded;
    stats.stored += out.new_states;
    stats.layers = [backend.layers(Side::Forward), backend.layers(Side::Backward)];
    stats.peak_memory_bytes = stats.peak_memory_bytes.max(out.peak_memory_bytes);
    stats.disk_bytes = out.disk_bytes;
    stats.store_bytes = out.memory_bytes;
    stats.excess.iter_mut().zip(out.excess).for_each(|(a, o)| *a += o);
    let event = LayerEvent {
        side,
        layer: backend.layers(side) - 1,
        new_states: out.new_states,
        generated: out.generated,
        frontiers: [backend.frontier(Side::Forward)?, backend.frontier(Side::Backward)?],
        stored: stats.stored,
        memory_bytes: out.memory_bytes,
        disk_bytes: out.disk_bytes,
        seconds: started.elapsed().as_secs_f64(),
        bound,
        moves_budget: None,
    };
    tracing::debug!(
        side = side.name(),
        layer = event.layer,
        new_states = event.new_states,
        generated = event.generated,
        stored = event.stored,
        bound,
        "layer sealed"
    );
    progress.layer_done(&event);
    Ok(())
}

/// Runs the bidirectional search from `starts` (forward layer 0) and `goals`
/// (backward layer 0) until the sides meet, one runs dry, or a limit stops it.
pub fn bidirectional<K: StateKey>(
    backend: &mut dyn LayerBackend<K>,
    starts: &[K],
    goals: &[K],
    limits: &Limits<'_>,
    progress: &dyn Progress,
) -> Result<(SearchEnd<K>, SearchStats), EngineError> {
    bidirectional_with(backend, starts, goals, limits, progress, &mut |_, _| Ok(None))
}

/// What runs between two steps of a search: given the layers and the
/// counters so far, it may end the search with its own answer (the driver's
/// probes).
pub type Between<'a, K> =
    dyn FnMut(&mut dyn LayerBackend<K>, &SearchStats) -> Result<Option<SearchEnd<K>>, EngineError> + 'a;

/// [`bidirectional`] that asks `between` before every step whether the
/// search is already decided.
pub fn bidirectional_with<K: StateKey>(
    backend: &mut dyn LayerBackend<K>,
    starts: &[K],
    goals: &[K],
    limits: &Limits<'_>,
    progress: &dyn Progress,
    between: &mut Between<'_, K>,
) -> Result<(SearchEnd<K>, SearchStats), EngineError> {
    let started = Instant::now();
    let mut stats = SearchStats::default();
    stats.stored += backend.seed(Side::Forward, starts)?;
    stats.stored += backend.seed(Side::Backward, goals)?;
    stats.layers = [1, 1];
    // layer-0 meeting: the start is already solved
    if let Some(k) = starts.iter().filter(|k| goals.contains(k)).min() {
        return Ok((SearchEnd::Met { key: *k, forward: 0, backward: 0 }, stats));
    }
    loop {
        let ff = backend.frontier(Side::Forward)?;
        let fb = backend.frontier(Side::Backward)?;
        // a side that runs dry proves no solution at all, unless the bound
        // dropped states: then none within the bound
        let dry = |exhausted: Side| match limits.bound {
            Some(bound) if stats.bound_pruned() > 0 => SearchEnd::Beyond { bound },
            _ => SearchEnd::Unsolvable { exhausted },
        };
        if ff == 0 {
            return Ok((dry(Side::Forward), stats));
        }
        if fb == 0 {
            return Ok((dry(Side::Backward), stats));
        }
        // no meeting yet: every solution is longer than the two depths together
        if let Some(bound) = limits.bound {
            let depths = (backend.layers(Side::Forward) - 1) + (backend.layers(Side::Backward) - 1);
            if depths as u64 >= bound as u64 {
                return Ok((SearchEnd::Beyond { bound }, stats));
            }
        }
        if limits.max_states.is_some_and(|max| stats.stored >= max) {
            return Ok((SearchEnd::Limit, stats));
        }
        if limits.cancel.load(Ordering::Relaxed) {
            return Ok((SearchEnd::Cancelled, stats));
        }
        if let Some(end) = between(&mut *backend, &stats)? {
            return Ok((end, stats));
        }
        // grow the side whose frontier is smaller (Heiner's estimate of the next)
        let side = if ff <= fb { Side::Forward } else { Side::Backward };
        let other_last = backend.layers(side.other()) - 1;
        let Some(out) = backend.step(side, true)? else {
            return Ok((SearchEnd::Cancelled, stats));
        };
        record(&*backend, side, &out, &mut stats, progress, started, limits.bound)?;
        if let Some((key, other_layer)) = out.meeting {
            if other_layer != other_last {
                return Err(EngineError::Internal(format!(
                    "meeting at {} layer {other_layer}, expected the last layer {other_last}",
                    side.other().name()
                )));
            }
            let this_layer = backend.layers(side) - 1;
            let (forward, backward) = match side {
                Side::Forward => (this_layer, other_layer),
                Side::Backward => (other_layer, this_layer),
            };
            return Ok((SearchEnd::Met { key, forward, backward }, stats));
        }
    }
}

/// Explores one side to exhaustion from `seeds` (the k-PG games).
pub fn exhaust<K: StateKey>(
    backend: &mut dyn LayerBackend<K>,
    side: Side,
    seeds: &[K],
    limits: &Limits<'_>,
    progress: &dyn Progress,
) -> Result<(SearchEnd<K>, SearchStats), EngineError> {
    let started = Instant::now();
    let mut stats = SearchStats { stored: backend.seed(side, seeds)?, ..Default::default() };
    loop {
        if backend.frontier(side)? == 0 {
            return Ok((SearchEnd::Unsolvable { exhausted: side }, stats));
        }
        if limits.max_states.is_some_and(|max| stats.stored >= max) {
            return Ok((SearchEnd::Limit, stats));
        }
        let Some(out) = backend.step(side, false)? else {
            return Ok((SearchEnd::Cancelled, stats));
        };
        record(&*backend, side, &out, &mut stats, progress, started, limits.bound)?;
    }
}
