//! The bidirectional, level-synchronous search driver (Heiner's "mixed" method),
//! and the one-sided exhaustive exploration the k-PG tables use.
//!
//! # Why the first meeting is push-optimal
//!
//! Let `F_i` be the forward layers (states first reached after exactly `i` pushes,
//! in the pruned graph) and `B_j` the backward layers. Pruning is sound: the forward
//! search only drops states that cannot reach the goal and the backward search only
//! drops states the start cannot reach, so every state of every optimal solution
//! survives on both sides. Invariant before each step: `F_0..=F_d` and `B_0..=B_m`
//! are pairwise disjoint across sides. Suppose a solution `s_0..s_L` had
//! `L <= d + m`. With `i = min(d, L)`, `s_i` has forward distance `<= i <= d` and
//! backward distance `<= L - i <= m`, so it lies in both collections: contradiction.
//! So every solution has `L >= d + m + 1`. When the new layer `F_{d+1}` first meets
//! some `B_j` (`j <= m`), the joined path has `d + 1 + j` pushes, which is
//! `>= d + m + 1`, so `j = m` and the length `d + 1 + m` is optimal. The same holds
//! with the sides swapped. Hence: check each new layer against every layer of the
//! other side, stop at the first hit; a hit below the other side's last layer would
//! break the proof and is reported as an internal error instead of a wrong answer.
//!
//! If either side runs dry without a meeting, every state on any solution would
//! have been found by that side and checked against the other: the level is
//! unsolvable.

use super::layer::{expand, merge};
use super::partition::{Exchange, PartitionStore, Partitioner};
use super::{EngineError, Problem, Side};
use crate::model::key::StateKey;
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
}

/// Receives progress; must be cheap.
pub trait Progress: Sync {
    fn layer_done(&self, _event: &LayerEvent) {}
}

/// No progress output.
pub struct NoProgress;
impl Progress for NoProgress {}

/// Search limits and the stop signal.
pub struct Limits<'a> {
    /// Raised by a timeout, Ctrl-C or a cluster cancel.
    pub cancel: &'a AtomicBool,
    /// Stop (status `limit`) once this many states are stored.
    pub max_states: Option<u64>,
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
}

/// Counters of a finished search.
#[derive(Debug, Clone, Copy, Default)]
pub struct SearchStats {
    pub stored: u64,
    pub generated: u64,
    pub expanded: u64,
    pub layers: [usize; 2],
    pub peak_memory_bytes: u64,
    pub disk_bytes: u64,
}

/// Everything the driver needs; local mode builds this over one store and one
/// exchange holding every partition.
pub struct Engine<'a, K: StateKey> {
    pub problem: &'a Problem<K>,
    pub partitioner: Partitioner,
    pub store: &'a dyn PartitionStore<K>,
    pub exchange: &'a dyn Exchange<K>,
    pub progress: &'a dyn Progress,
}

impl<'a, K: StateKey> Engine<'a, K> {
    fn all_partitions(&self) -> Vec<usize> {
        (0..self.partitioner.count()).collect()
    }

    fn frontier(&self, side: Side) -> u64 {
        let layers = self.store.layers(side);
        if layers == 0 {
            return 0;
        }
        (0..self.partitioner.count()).map(|p| self.store.layer_len(side, layers - 1, p)).sum()
    }

    /// Stores `keys` as layer 0 of `side`.
    pub fn seed(&self, side: Side, keys: &[K]) -> Result<u64, EngineError> {
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

    /// One layer of `side`: expand, merge, seal. Returns the merge result, or
    /// `None` if cancelled (the partial layer is dropped).
    fn step(
        &self,
        side: Side,
        check_other: bool,
        limits: &Limits<'_>,
        stats: &mut SearchStats,
        started: Instant,
    ) -> Result<Option<Option<(K, usize)>>, EngineError> {
        let parts = self.all_partitions();
        let layer = self.store.layers(side) - 1;
        let exp = expand(self.problem, side, layer, &parts, self.partitioner, self.store, self.exchange, limits.cancel)?;
        let Some(exp) = exp else {
            self.exchange.clear();
            return Ok(None);
        };
        let peak_during = self.store.bytes().memory + self.exchange.buffered_bytes();
        let merged = merge(side, &parts, self.store, self.exchange, check_other)?;
        if limits.cancel.load(Ordering::Relaxed) {
            self.store.abort_layer(side);
            return Ok(None);
        }
        self.store.seal_layer(side)?;
        stats.generated += exp.generated;
        stats.expanded += exp.expanded;
        stats.stored += merged.new_states;
        stats.layers[side.index()] = self.store.layers(side);
        let bytes = self.store.bytes();
        stats.peak_memory_bytes = stats.peak_memory_bytes.max(peak_during).max(bytes.memory);
        stats.disk_bytes = bytes.disk;
        self.progress.layer_done(&LayerEvent {
            side,
            layer: layer + 1,
            new_states: merged.new_states,
            generated: exp.generated,
            frontiers: [self.frontier(Side::Forward), self.frontier(Side::Backward)],
            stored: stats.stored,
            memory_bytes: bytes.memory,
            disk_bytes: bytes.disk,
            seconds: started.elapsed().as_secs_f64(),
        });
        Ok(Some(merged.meeting))
    }

    /// Runs the bidirectional search from `starts` (forward layer 0) and `goals`
    /// (backward layer 0) until the sides meet, one runs dry, or a limit stops it.
    pub fn bidirectional(
        &self,
        starts: &[K],
        goals: &[K],
        limits: &Limits<'_>,
    ) -> Result<(SearchEnd<K>, SearchStats), EngineError> {
        let started = Instant::now();
        let mut stats = SearchStats::default();
        stats.stored += self.seed(Side::Forward, starts)?;
        stats.stored += self.seed(Side::Backward, goals)?;
        stats.layers = [1, 1];
        // layer-0 meeting: the start is already solved
        let mut sorted_starts = starts.to_vec();
        sorted_starts.sort_unstable();
        for k in &sorted_starts {
            let p = self.partitioner.of(k);
            if self.store.contains(Side::Backward, 0, p, k)? {
                return Ok((SearchEnd::Met { key: *k, forward: 0, backward: 0 }, stats));
            }
        }
        loop {
            let ff = self.frontier(Side::Forward);
            let fb = self.frontier(Side::Backward);
            if ff == 0 {
                return Ok((SearchEnd::Unsolvable { exhausted: Side::Forward }, stats));
            }
            if fb == 0 {
                return Ok((SearchEnd::Unsolvable { exhausted: Side::Backward }, stats));
            }
            if let Some(max) = limits.max_states {
                if stats.stored >= max {
                    return Ok((SearchEnd::Limit, stats));
                }
            }
            // grow the side whose frontier is smaller (Heiner's estimate of the next)
            let side = if ff <= fb { Side::Forward } else { Side::Backward };
            let other_last = self.store.layers(side.other()) - 1;
            match self.step(side, true, limits, &mut stats, started)? {
                None => return Ok((SearchEnd::Cancelled, stats)),
                Some(None) => continue,
                Some(Some((key, other_layer))) => {
                    if other_layer != other_last {
                        return Err(EngineError::Internal(format!(
                            "meeting at {} layer {other_layer}, expected the last layer {other_last}",
                            side.other().name()
                        )));
                    }
                    let this_layer = self.store.layers(side) - 1;
                    let (forward, backward) = match side {
                        Side::Forward => (this_layer, other_layer),
                        Side::Backward => (other_layer, this_layer),
                    };
                    return Ok((SearchEnd::Met { key, forward, backward }, stats));
                }
            }
        }
    }

    /// Explores one side to exhaustion from `seeds` (the k-PG games).
    pub fn exhaust(&self, side: Side, seeds: &[K], limits: &Limits<'_>) -> Result<(SearchEnd<K>, SearchStats), EngineError> {
        let started = Instant::now();
        let mut stats = SearchStats { stored: self.seed(side, seeds)?, ..Default::default() };
        loop {
            if self.frontier(side) == 0 {
                return Ok((SearchEnd::Unsolvable { exhausted: side }, stats));
            }
            if let Some(max) = limits.max_states {
                if stats.stored >= max {
                    return Ok((SearchEnd::Limit, stats));
                }
            }
            if self.step(side, false, limits, &mut stats, started)?.is_none() {
                return Ok((SearchEnd::Cancelled, stats));
            }
        }
    }
}
