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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

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
    let depth = layer as u32 + 1;
    let parts = partitioner.count();
    let batch = exchange.route_batch().max(1);
    let threads = rayon::current_num_threads();
    // the unit of work is a chunk of a partition, not the partition: states
    // of one layer differ in cost (Microban I #153: 0.9 to 2 µs a state from
    // one partition to the next), and with whole partitions a thread sat idle
    // for up to a partition at the end of a layer
    let group = CHUNKS_PER_THREAD * threads;
    let lanes = Mutex::new(Vec::<Lane<K>>::new());
    let failed = Mutex::new(None::<EngineError>);
    let abort = AtomicBool::new(false);
    let stop = || cancel.load(Ordering::Relaxed) || abort.load(Ordering::Relaxed);
    let fail = |e: EngineError| {
        abort.store(true, Ordering::Relaxed);
        lock(&failed).get_or_insert(e);
    };
    let run = |keys: &[K]| {
        let mut lane = lock(&lanes).pop().unwrap_or_else(|| Lane::new(&problem.board, parts));
        let mut route_err = None;
        for key in keys {
            lane.expanded += 1;
            let Lane { sc, buckets, over, generated, .. } = &mut lane;
            problem.expand(side, key, sc, depth, over, |succ, _| {
                *generated += 1;
                let q = partitioner.of(&succ);
                let b = &mut buckets[q];
                b.push(succ);
                if b.len() >= batch && route_err.is_none() {
                    if let Err(e) = exchange.send(q, std::mem::take(b)) {
                        route_err = Some(e);
                    }
                }
            });
            if route_err.is_some() {
                break;
            }
        }
        lock(&lanes).push(lane);
        if let Some(e) = route_err {
            fail(e.into());
        }
    };
    partitions.par_iter().for_each(|&p| {
        // chunks are copied out a group at a time (the store hands out
        // borrowed chunks one by one) and spread over the threads
        let mut held: Vec<Vec<K>> = Vec::new();
        let result = store.for_each_chunk(side, layer, p, &mut |chunk| {
            if stop() {
                return Ok(());
            }
            held.push(chunk.to_vec());
            if held.len() >= group {
                held.par_iter().for_each(|c| run(c));
                held.clear();
            }
            Ok(())
        });
        match result {
            Ok(()) => held.par_iter().for_each(|c| run(c)),
            Err(e) => fail(e.into()),
        }
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    // every lane's partial batches, and the counts
    let (mut expanded, mut generated, mut excess) = (0, 0, [0u64; EXCESS_BINS]);
    for lane in lanes.into_inner().unwrap_or_else(|e| e.into_inner()) {
        for (q, b) in lane.buckets.into_iter().enumerate() {
            if !b.is_empty() {
                exchange.send(q, b)?;
            }
        }
        expanded += lane.expanded;
        generated += lane.generated;
        excess.iter_mut().zip(lane.over).for_each(|(a, o)| *a += o);
    }
    if cancel.load(Ordering::Relaxed) {
        return Ok(None);
    }
    Ok(Some(ExpandStats { expanded, generated, excess }))
}

/// Chunks of a partition handed to the threads at a time, per thread.
const CHUNKS_PER_THREAD: usize = 4;

/// What one thread expanding holds: its scratch, a batch per owner partition
/// and its counts. Lanes are pooled, not made per chunk, so that batches fill
/// across chunks and the exchange gets full batches however finely the work
/// is split (as many lanes as threads ever expand at once).
struct Lane<K> {
    sc: Scratch,
    buckets: Vec<Vec<K>>,
    expanded: u64,
    generated: u64,
    over: Excess,
}

impl<K> Lane<K> {
    fn new(board: &crate::model::board::Board, parts: usize) -> Self {
        Lane {
            sc: Scratch::new(board),
            buckets: (0..parts).map(|_| Vec::new()).collect(),
            expanded: 0,
            generated: 0,
            over: [0; EXCESS_BINS],
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
