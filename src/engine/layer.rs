//! One BFS layer in two phases, the unit both local mode and the cluster run:
//! *expand* (every partition's frontier generates successors, routed to their owner
//! partition through the [`Exchange`]) and *merge* (each owner sorts and dedups its
//! candidates, drops those already visited, checks the rest against the other side,
//! and stores them as its part of the new layer).

use super::partition::{gallop, Exchange, PartitionStore, Partitioner};
use super::{EngineError, Excess, Problem, Side, EXCESS_BINS};
use crate::model::key::StateKey;
use crate::model::rules::Scratch;
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What the expand phase did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpandStats {
    /// States expanded.
    pub expanded: u64,
    /// Successors generated (before duplicate removal).
    pub generated: u64,
    /// Successors the bound dropped, by how far over it they were.
    pub excess: Excess,
}

/// What the merge phase did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeStats<K> {
    /// New states stored.
    pub new_states: u64,
    /// A meeting with the other side: the key and its layer there.
    pub meeting: Option<(K, usize)>,
}

/// Expands layer `layer` of `side` for `partitions`, sending successors to their
/// owners. Returns `Ok(None)` if `cancel` was raised part way.
#[allow(clippy::too_many_arguments)]
pub fn expand<K: StateKey>(
    problem: &Problem<K>,
    side: Side,
    layer: usize,
    partitions: &[usize],
    partitioner: Partitioner,
    store: &dyn PartitionStore<K>,
    exchange: &dyn Exchange<K>,
    cancel: &AtomicBool,
) -> Result<Option<ExpandStats>, EngineError> {
    let expanded = AtomicU64::new(0);
    let generated = AtomicU64::new(0);
    let excess = std::sync::Mutex::new([0u64; EXCESS_BINS]);
    let depth = layer as u32 + 1;
    let parts = partitioner.count();
    let batch = exchange.route_batch().max(1);
    partitions.par_iter().try_for_each_init(
        || Scratch::new(&problem.board),
        |sc, &p| -> Result<(), EngineError> {
            if cancel.load(Ordering::Relaxed) {
                return Ok(());
            }
            let mut buckets: Vec<Vec<K>> = (0..parts).map(|_| Vec::new()).collect();
            let (mut n_exp, mut n_gen) = (0u64, 0u64);
            let mut over = [0u64; EXCESS_BINS];
            let mut route_err = None;
            store.for_each_chunk(side, layer, p, &mut |chunk| {
                if cancel.load(Ordering::Relaxed) {
                    return Ok(());
                }
                for key in chunk {
                    n_exp += 1;
                    problem.expand(side, key, sc, depth, &mut over, |succ, _| {
                        n_gen += 1;
                        let q = partitioner.of(&succ);
                        let b = &mut buckets[q];
                        b.push(succ);
                        if b.len() >= batch && route_err.is_none() {
                            if let Err(e) = exchange.send(q, std::mem::take(b)) {
                                route_err = Some(e);
                            }
                        }
                    });
                }
                match route_err.take() {
                    Some(e) => Err(e),
                    None => Ok(()),
                }
            })?;
            for (q, b) in buckets.into_iter().enumerate() {
                if !b.is_empty() {
                    exchange.send(q, b)?;
                }
            }
            expanded.fetch_add(n_exp, Ordering::Relaxed);
            generated.fetch_add(n_gen, Ordering::Relaxed);
            if over.iter().any(|&n| n > 0) {
                let mut all = excess.lock().unwrap_or_else(|e| e.into_inner());
                all.iter_mut().zip(over).for_each(|(a, o)| *a += o);
            }
            Ok(())
        },
    )?;
    if cancel.load(Ordering::Relaxed) {
        return Ok(None);
    }
    Ok(Some(ExpandStats {
        expanded: expanded.into_inner(),
        generated: generated.into_inner(),
        excess: excess.into_inner().unwrap_or_else(|e| e.into_inner()),
    }))
}

/// Merges the candidates delivered to `partitions` into the next layer of `side`
/// and checks them against every layer of the other side. The caller seals the
/// layer once every partition (on every node) has merged.
///
/// A partition's candidates stream from the exchange in sorted, unique chunks
/// (delayed duplicate detection, Korf), each checked against the stored layers and
/// appended to the new layer, so memory holds a chunk, not the partition.
pub fn merge<K: StateKey>(
    side: Side,
    partitions: &[usize],
    store: &dyn PartitionStore<K>,
    exchange: &dyn Exchange<K>,
    check_other: bool,
) -> Result<MergeStats<K>, EngineError> {
    let chunk_keys = exchange.merge_chunk_keys().max(1);
    let results: Vec<(u64, Option<(K, usize)>)> = partitions
        .par_iter()
        .map(|&p| -> Result<(u64, Option<(K, usize)>), EngineError> {
            let mut n = 0u64;
            let mut meeting = None;
            store.push_layer(side, p, Vec::new())?;
            exchange.take_sorted(p, chunk_keys, &mut |mut cands| {
                store.retain_unseen(side, p, &mut cands)?;
                // chunks come in increasing order: the first meeting is the smallest
                if check_other && meeting.is_none() {
                    meeting = store.find_any(side.other(), p, &cands)?;
                }
                n += cands.len() as u64;
                store.append_layer(side, p, cands)
            })?;
            store.end_layer(side, p)?;
            Ok((n, meeting))
        })
        .collect::<Result<_, _>>()?;
    let mut stats = MergeStats { new_states: 0, meeting: None };
    for (n, m) in results {
        stats.new_states += n;
        // all meetings of a layer are at the same depth (see search.rs); keep the
        // smallest key so the answer does not depend on scheduling
        if let Some(m) = m {
            if stats.meeting.as_ref().is_none_or(|cur| m.0 < cur.0) {
                stats.meeting = Some(m);
            }
        }
    }
    Ok(stats)
}

/// The keys of `partitions` that lie in both forward layer `forward` and
/// backward layer `backward` (the whole meeting layer, which the moves pass
/// starts from), sorted within each partition. The smaller of the two layers
/// is read, the larger streamed against it (both are sorted: a merge that
/// gallops over the gaps, no lookup per key).
pub fn common_keys<K: StateKey>(
    store: &dyn PartitionStore<K>,
    partitions: &[usize],
    forward: usize,
    backward: usize,
) -> Result<Vec<K>, EngineError> {
    let parts: Vec<Vec<K>> = partitions
        .par_iter()
        .map(|&p| -> Result<Vec<K>, EngineError> {
            let (f, b) = (store.layer_len(Side::Forward, forward, p), store.layer_len(Side::Backward, backward, p));
            let ((small, s_layer), (large, l_layer)) = if f <= b {
                ((Side::Forward, forward), (Side::Backward, backward))
            } else {
                ((Side::Backward, backward), (Side::Forward, forward))
            };
            let mut held = Vec::new();
            store.for_each_chunk(small, s_layer, p, &mut |chunk| {
                held.extend_from_slice(chunk);
                Ok(())
            })?;
            let (mut out, mut j) = (Vec::new(), 0);
            if !held.is_empty() {
                store.for_each_chunk(large, l_layer, p, &mut |chunk| {
                    for k in chunk {
                        j = gallop(&held, j, k);
                        if held.get(j) == Some(k) {
                            out.push(*k);
                        }
                    }
                    Ok(())
                })?;
            }
            Ok(out)
        })
        .collect::<Result<_, _>>()?;
    Ok(parts.concat())
}
