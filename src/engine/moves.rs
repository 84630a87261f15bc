//! The moves pass: among all push-optimal solutions, one with the fewest
//! player moves (steps plus pushes), proven so.
//!
//! # Why the minimum it finds is the true one
//!
//! Let `L` be the optimum and `g(s)` (`h(s)`) the fewest pushes from the start
//! to `s` (from `s` to the goal). The states on push-optimal solutions are
//! `OPT = { s : g(s) + h(s) = L }`; a solution is push-optimal exactly when
//! its `i`-th state lies in `OPT_i = { s in OPT : g(s) = i }`.
//!
//! The pass runs on the layers of a search that prunes *states* only (dead
//! squares, freezes, k-PG patterns, the matching and a bound `U >= L`), never
//! moves: the PI-corral restriction keeps only some optimal solutions, so a
//! search that used it is searched again without it (the driver does that).
//! In such a search every state of `OPT` is kept on both sides at its true
//! depth (see `search.rs`: each pruning keeps every state of every optimal
//! solution, not just one solution), and every stored state lies at the end
//! of a real path as long as its layer index. Let the sides meet at forward
//! layer `a` and backward layer `b`, `a + b = L`. Then:
//!
//! - `OPT_a = F_a ∩ B_b`: a state in both is `a` pushes from the start and `b`
//!   from the goal, so on a solution of `L` pushes; a state of `OPT_a` is kept
//!   in `F_a` and in `B_b`.
//! - For `d < a`, `OPT_d` is the set of states of `F_d` with a push into
//!   `OPT_{d+1}`: such a state starts a path of `d + 1 + (L - d - 1) = L`
//!   pushes; and each state of `OPT_d` is in `F_d` and its optimal solution's
//!   next push leads into `OPT_{d+1}`. The pass finds them as the pull
//!   predecessors of `OPT_{d+1}` that lie in `F_d`, generated under the
//!   search's state prunings: a state of `OPT` is reachable from the start
//!   and reaches the goal, so no pruning of either side drops it.
//! - For `d > a`, symmetrically, `OPT_d` is the set of push successors of
//!   `OPT_{d-1}` that lie in `B_{L-d}`.
//!
//! Every push-optimal solution is then a path `OPT_0 -> ... -> OPT_L`, and
//! every such path is one. The moves of a solution are the sum over its pushes
//! of one plus the player's walk to the square behind the box, and a walk can
//! always be a shortest one (boxes stand still while the player walks). That
//! walk depends on the player's exact square, which a normalized state does not
//! record; but after a push the player stands where the pushed box stood. So
//! the pass labels each pair (state of `OPT_d`, the player's exact square) with
//! the fewest moves that reach it, layer by layer from (start, start square):
//! a shortest path over a layered graph, exact, with ties broken by the lowest
//! predecessor so the answer does not depend on threads.
//!
//! # Streaming
//!
//! The pass works on one depth at a time and keeps the others on a [`Tape`]
//! (memory first; the storage room's tape writes to disk past a share): the
//! `OPT` layers grow outward from the meeting, each written as soon as the
//! next one is found; the labelling reads one depth's states and pushes and
//! writes its labels; the path back reads one depth's labels, pushes and
//! states at a time. What must fit in memory at once is one depth's states,
//! pushes, candidates and labels, whatever the optimum's length.

use super::search::LayerBackend;
use super::{EngineError, Problem, SeamError, Side, EXCESS_BINS};
use crate::model::key::StateKey;
use crate::model::rules::{BoxMove, Scratch};
use crate::model::solution::walk_distances;
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// The most states of push-optimal solutions one depth may hold: the pass
/// holds one depth at a time in memory (its keys, its pushes at 11 bytes
/// each, its candidates and a label of 10 bytes per player square it is
/// reached with; about 150 bytes per state at its peak). Beyond it the pass
/// gives up and the solve keeps its push-optimal solution. The depths it is
/// not working on are on the [`Tape`], whose size only the disk limits.
pub const MAX_DEPTH_OPTIMAL_STATES: u64 = 1 << 24;

/// Where the moves pass keeps the depths it is not working on: each depth's
/// push-optimal states, the pushes out of them and their labels, as byte
/// records written once and read back later, in any order. The engine's
/// [`MemTape`] keeps them in memory; the storage room's tape keeps them in
/// memory up to a share and on disk beyond it.
pub trait Tape: Send {
    /// Keeps `bytes` as record `id` (each id is written once).
    fn put(&mut self, id: u64, bytes: Vec<u8>) -> Result<(), SeamError>;
    /// Record `id` as it was written; it stays on the tape.
    fn get(&mut self, id: u64) -> Result<Vec<u8>, SeamError>;
    /// Bytes written to disk so far (0 for a tape in memory).
    fn disk_bytes(&self) -> u64 {
        0
    }
}

/// A [`Tape`] in memory.
#[derive(Default)]
pub struct MemTape {
    records: HashMap<u64, Vec<u8>>,
}

/// A record asked of a tape that never had it.
#[derive(Debug, thiserror::Error)]
#[error("the moves pass's tape has no record {0}")]
pub struct NoRecord(pub u64);

impl Tape for MemTape {
    fn put(&mut self, id: u64, bytes: Vec<u8>) -> Result<(), SeamError> {
        self.records.insert(id, bytes);
        Ok(())
    }

    fn get(&mut self, id: u64) -> Result<Vec<u8>, SeamError> {
        self.records.get(&id).cloned().ok_or_else(|| SeamError::new(NoRecord(id)))
    }
}

/// The records of one depth on the tape.
#[derive(Clone, Copy)]
enum Rec {
    /// `OPT_d`, sorted.
    States = 0,
    /// The pushes from `OPT_d` into `OPT_{d+1}`, sorted by `from`.
    Edges = 1,
    /// The labels of `OPT_d`, sorted by state.
    Labels = 2,
}

fn rec_id(rec: Rec, depth: usize) -> u64 {
    depth as u64 * 4 + rec as u64
}

/// A fixed-size record, written little-endian.
trait Record: Sized {
    const BYTES: usize;
    fn write(&self, out: &mut Vec<u8>);
    fn read(b: &[u8]) -> Self;
}

/// A state key as its limbs.
impl<K: StateKey> Record for K {
    const BYTES: usize = 8 * K::LIMBS;
    fn write(&self, out: &mut Vec<u8>) {
        for i in 0..K::LIMBS {
            out.extend_from_slice(&self.limb(i).to_le_bytes());
        }
    }
    fn read(b: &[u8]) -> Self {
        // keys have at most 16 limbs (the widest bitset key)
        let mut limbs = [0u64; 16];
        for (l, c) in limbs.iter_mut().zip(b.chunks_exact(8)) {
            *l = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
        K::from_limbs(&limbs[..K::LIMBS])
    }
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b[..4].try_into().expect("4 bytes"))
}

fn le_u16(b: &[u8]) -> u16 {
    u16::from_le_bytes(b[..2].try_into().expect("2 bytes"))
}

impl Record for Edge {
    const BYTES: usize = 11;
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.from.to_le_bytes());
        out.extend_from_slice(&self.to.to_le_bytes());
        out.extend_from_slice(&self.push.from.to_le_bytes());
        out.push(self.push.dir);
    }
    fn read(b: &[u8]) -> Self {
        Edge { from: le_u32(b), to: le_u32(&b[4..]), push: BoxMove { from: le_u16(&b[8..]), dir: b[10] } }
    }
}

impl Record for Label {
    const BYTES: usize = 10;
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.state.to_le_bytes());
        out.extend_from_slice(&self.moves.to_le_bytes());
        out.extend_from_slice(&self.player.to_le_bytes());
    }
    fn read(b: &[u8]) -> Self {
        Label { state: le_u32(b), moves: le_u32(&b[4..]), player: le_u16(&b[8..]) }
    }
}

/// Writes `records` as record `(rec, depth)` of `tape`.
fn put_records<R: Record + Sync>(
    tape: &mut dyn Tape,
    rec: Rec,
    depth: usize,
    records: &[R],
) -> Result<(), EngineError> {
    let mut bytes = Vec::with_capacity(records.len() * R::BYTES);
    for r in records {
        r.write(&mut bytes);
    }
    Ok(tape.put(rec_id(rec, depth), bytes)?)
}

/// Reads record `(rec, depth)` of `tape` back.
fn get_records<R: Record + Send>(tape: &mut dyn Tape, rec: Rec, depth: usize) -> Result<Vec<R>, EngineError> {
    let bytes = tape.get(rec_id(rec, depth))?;
    if bytes.len() % R::BYTES != 0 {
        return Err(EngineError::Internal(format!(
            "moves pass: record {} of {} bytes is not a whole number of {}-byte entries",
            rec_id(rec, depth),
            bytes.len(),
            R::BYTES
        )));
    }
    Ok(bytes.par_chunks_exact(R::BYTES).map(R::read).collect())
}

/// Keys per lookup batch sent to the backend (a cluster message stays small).
const LOOKUP_BATCH: usize = 1 << 16;

/// States of a push-optimal layer whose moves are generated and looked up at
/// once.
const EXPAND_CHUNK: usize = 1 << 17;

/// How the moves pass ended.
pub enum MovesOutcome {
    /// The pushes of a push-optimal solution with the fewest moves, its
    /// moves, and the number of states on push-optimal solutions.
    Found { pushes: Vec<BoxMove>, moves: u64, optimal_states: u64 },
    /// More states of one depth lie on push-optimal solutions than the pass
    /// may hold at once: that depth's count, once it passed the cap.
    TooMany { depth_states: u64 },
    /// The backend could not gather the meeting layer in one place (a
    /// cluster worker holds more of it than one message carries): its count.
    MeetingTooLarge { states: u64 },
}

/// Runs the pass on `backend`, whose layers come from a search without move
/// pruning that met at forward layer `forward` and backward layer `backward`,
/// keeping the depths it is not working on on `tape`. One depth may hold at
/// most `max_depth_states` push-optimal states.
pub fn fewest_moves<K: StateKey>(
    problem: &Problem<K>,
    backend: &mut dyn LayerBackend<K>,
    tape: &mut dyn Tape,
    (forward, backward): (usize, usize),
    max_depth_states: u64,
    cancel: &AtomicBool,
) -> Result<MovesOutcome, EngineError> {
    if problem.pruning.pi_corrals {
        return Err(EngineError::Internal("the moves pass needs layers searched without PI-corrals".into()));
    }
    let t0 = std::time::Instant::now();
    // the search's state prunings without its bound: a push-optimal state is
    // reachable from the start and reaches the goal, so neither side's
    // prunings drop it; the moves they drop lead to no state the pass wants
    // (and a pruned move skips normalizing the player)
    let problem = &Problem::<K>::full(problem.board.clone(), problem.pruning, problem.patterns.clone());
    let optimal_states = match optimal_layers(problem, backend, tape, (forward, backward), max_depth_states, cancel)? {
        Ok(count) => count,
        Err(outcome) => return Ok(outcome),
    };
    let disk_bytes = tape.disk_bytes();
    tracing::info!(optimal_states, disk_bytes, seconds = t0.elapsed().as_secs_f64(), "push-optimal states found");
    let (pushes, moves) = cheapest_path(problem, tape, forward + backward, cancel)?;
    tracing::info!(moves, disk_bytes = tape.disk_bytes(), seconds = t0.elapsed().as_secs_f64(), "fewest moves found");
    Ok(MovesOutcome::Found { pushes, moves, optimal_states })
}

/// A push from state `from` of `OPT_d` to state `to` of `OPT_{d+1}` (indices
/// into those layers).
#[derive(Clone, Copy)]
struct Edge {
    from: u32,
    to: u32,
    push: BoxMove,
}

/// Finds `OPT_0..=OPT_L` from the layers `(forward, backward)` where the
/// sides met and writes each to `tape` (sorted), with the pushes between
/// consecutive ones (those of depth `d` leave `OPT_d`, sorted by `from`);
/// returns how many states they hold, or why the pass gives up (a depth past
/// `max_states`, a meeting layer the backend cannot gather). Only the depth
/// grown from and the one growing are in memory.
fn optimal_layers<K: StateKey>(
    problem: &Problem<K>,
    backend: &mut dyn LayerBackend<K>,
    tape: &mut dyn Tape,
    (forward, backward): (usize, usize),
    max_states: u64,
    cancel: &AtomicBool,
) -> Result<Result<u64, MovesOutcome>, EngineError> {
    let total = forward + backward;
    let too_many = |n: usize| Ok(Err(MovesOutcome::TooMany { depth_states: n as u64 }));
    let mut meet = match backend.common(forward, backward)? {
        Ok(keys) => keys,
        Err(states) => return Ok(Err(MovesOutcome::MeetingTooLarge { states })),
    };
    meet.sort_unstable();
    if meet.is_empty() {
        return Err(EngineError::Internal(format!(
            "moves pass: forward layer {forward} and backward layer {backward} share no state"
        )));
    }
    if meet.len() as u64 > max_states {
        return too_many(meet.len());
    }
    let mut count = meet.len() as u64;
    put_records(tape, Rec::States, forward, &meet)?;
    let mut prev = meet;
    // towards the start, pull predecessors found in the forward layers; then
    // towards the goal, push successors found in the backward layers:
    // (depth, the depth it grows from, the moves, the side looked up, its layer)
    let towards_start = (0..forward).rev().map(|d| (d, d + 1, Side::Backward, Side::Forward, d));
    let towards_goal = (forward + 1..=total).map(|d| (d, d - 1, Side::Forward, Side::Backward, total - d));
    for (d, from, moves, side, layer) in towards_start.chain(towards_goal) {
        if d == forward + 1 {
            // the sweep towards the goal starts again from the meeting
            prev = get_records(tape, Rec::States, forward)?;
        }
        // the moves from a slice of the layer at a time, so that memory holds
        // the slice's candidates (not the whole layer's) and the kept ones
        let mut kept: Vec<(K, u32, BoxMove)> = Vec::new();
        for (c, chunk) in prev.chunks(EXPAND_CHUNK).enumerate() {
            let mut cands = neighbours(problem, moves, chunk, (c * EXPAND_CHUNK) as u32);
            let mut keys: Vec<K> = cands.iter().map(|c| c.0).collect();
            keys.dedup();
            let found = keep_in_layer(backend, side, layer, keys)?;
            cands.retain(|c| found.binary_search(&c.0).is_ok());
            kept.append(&mut cands);
            if cancel.load(Ordering::Relaxed) {
                return Err(EngineError::Cancelled);
            }
        }
        let mut found: Vec<K> = kept.iter().map(|c| c.0).collect();
        found.par_sort_unstable();
        found.dedup();
        if found.is_empty() {
            return Err(EngineError::Internal(format!("moves pass: no push-optimal state at depth {d}")));
        }
        if found.len() as u64 > max_states {
            return too_many(found.len());
        }
        // every kept candidate is an edge, its push forward
        let mut es: Vec<Edge> = kept
            .into_iter()
            .filter_map(|(key, i, m)| {
                let j = found.binary_search(&key).ok()? as u32;
                Some(match moves {
                    Side::Forward => Edge { from: i, to: j, push: m },
                    Side::Backward => Edge { from: j, to: i, push: m.undoing_pull(&problem.board) },
                })
            })
            .collect();
        es.par_sort_unstable_by_key(|e| (e.from, e.to));
        put_records(tape, Rec::Edges, d.min(from), &es)?;
        put_records(tape, Rec::States, d, &found)?;
        count += found.len() as u64;
        prev = found;
        if cancel.load(Ordering::Relaxed) {
            return Err(EngineError::Cancelled);
        }
    }
    Ok(Ok(count))
}

/// Every move of `side` from `keys` (the layer's from index `first` on)
/// that the search's state prunings keep: the key it leads to, the index of
/// the key it leaves, the move; sorted.
fn neighbours<K: StateKey>(problem: &Problem<K>, side: Side, keys: &[K], first: u32) -> Vec<(K, u32, BoxMove)> {
    let mut out: Vec<(K, u32, BoxMove)> = keys
        .par_iter()
        .enumerate()
        .map_init(
            || (Scratch::new(&problem.board), [0; EXCESS_BINS]),
            |(sc, excess), (i, k)| {
                let mut v = Vec::new();
                problem.expand(side, k, sc, 0, excess, |n, m| v.push((n, first + i as u32, m)));
                v
            },
        )
        .flatten_iter()
        .collect();
    out.par_sort_unstable_by_key(|c| (c.0, c.1));
    out
}

/// The keys of sorted `keys` that lie in `layer` of `side`.
fn keep_in_layer<K: StateKey>(
    backend: &mut dyn LayerBackend<K>,
    side: Side,
    layer: usize,
    keys: Vec<K>,
) -> Result<Vec<K>, EngineError> {
    let mut kept = Vec::new();
    for batch in keys.chunks(LOOKUP_BATCH) {
        let found = backend.in_layer(side, layer, batch)?;
        if found.len() != batch.len() {
            return Err(EngineError::Internal(format!("{} answers for {} lookups", found.len(), batch.len())));
        }
        kept.extend(batch.iter().zip(found).filter(|(_, f)| *f).map(|(k, _)| *k));
    }
    Ok(kept)
}

/// A (state, player square) pair of one depth and the fewest moves that
/// reach it. Twelve bytes: the pass keeps every depth's labels, and finds
/// the path back along the recorded pushes rather than storing parents.
#[derive(Clone, Copy)]
struct Label {
    /// Index of the state in its `OPT` layer.
    state: u32,
    moves: u32,
    /// The player's exact square.
    player: u16,
}

/// `(first, end)` of each run of labels of one state in `labels` (sorted by state).
fn group_bounds(labels: &[Label]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut lo = 0;
    for i in 1..=labels.len() {
        if i == labels.len() || labels[i].state != labels[lo].state {
            out.push((lo, i));
            lo = i;
        }
    }
    out
}

/// Per-thread buffers of the labelling.
#[derive(Default)]
struct Work {
    boxes: Vec<u16>,
    queue: Vec<u16>,
    /// Walk distances from each label of the current state.
    dists: Vec<Vec<u32>>,
}

/// The fewest-moves path through the `OPT` layers `0..=total` on `tape`
/// from the start (player on its square) to any state of the last layer:
/// its pushes and moves. Labels go to the tape depth by depth and come back
/// one depth at a time for the path back.
fn cheapest_path<K: StateKey>(
    problem: &Problem<K>,
    tape: &mut dyn Tape,
    total: usize,
    cancel: &AtomicBool,
) -> Result<(Vec<BoxMove>, u64), EngineError> {
    let board = &problem.board;
    let mut cur: Vec<Label> = vec![Label { state: 0, moves: 0, player: board.start_player }];
    for d in 0..total {
        if cancel.load(Ordering::Relaxed) {
            return Err(EngineError::Cancelled);
        }
        let here: Vec<K> = get_records(tape, Rec::States, d)?;
        if d == 0 && here.len() != 1 {
            return Err(EngineError::Internal("moves pass: the first layer is not the start alone".into()));
        }
        let out_edges: Vec<Edge> = get_records(tape, Rec::Edges, d)?;
        // the labels of one state are adjacent: its pushes are looked up
        // once, its walks found once per label
        let groups: Vec<(usize, usize)> = group_bounds(&cur);
        let mut cands: Vec<Label> = groups
            .par_iter()
            .map_init(Work::default, |w, &(lo, hi)| {
                let state = cur[lo].state;
                problem.decode(&here[state as usize], &mut w.boxes);
                let first = out_edges.partition_point(|e| e.from < state);
                let end = out_edges.partition_point(|e| e.from <= state);
                let pushes = &out_edges[first..end];
                let group = &cur[lo..hi];
                w.dists.resize_with(group.len(), Vec::new);
                for (l, dist) in group.iter().zip(w.dists.iter_mut()) {
                    walk_distances(board, &w.boxes, l.player, dist, &mut w.queue);
                }
                let mut out = Vec::new();
                for (i, l) in group.iter().enumerate() {
                    // a label another one reaches by walking, no dearer, adds nothing
                    let dominated = group.iter().enumerate().any(|(j, o)| {
                        let via = o.moves as u64 + w.dists[j][l.player as usize] as u64;
                        j != i && (via < l.moves as u64 || (via == l.moves as u64 && j < i))
                    });
                    if dominated {
                        continue;
                    }
                    for e in pushes {
                        let walk = w.dists[i][e.push.behind(board) as usize];
                        if walk < u32::MAX - 1 {
                            out.push(Label { state: e.to, moves: l.moves + walk + 1, player: e.push.from });
                        }
                    }
                }
                out
            })
            .flatten_iter()
            .collect();
        // the cheapest label per (state, square)
        cands.par_sort_unstable_by_key(|l| (l.state, l.player, l.moves));
        cands.dedup_by_key(|l| (l.state, l.player));
        if cands.is_empty() {
            return Err(EngineError::Internal(format!("moves pass: no push leads to depth {}", d + 1)));
        }
        put_records(tape, Rec::Labels, d, &cur)?;
        cur = cands;
    }
    let (mut at, best) = cur
        .iter()
        .enumerate()
        .min_by_key(|(i, l)| (l.moves, *i))
        .map(|(i, l)| (i, l.moves))
        .ok_or_else(|| EngineError::Internal("moves pass: no label at the last depth".into()))?;
    // back to the start along the recorded pushes: the label of the
    // previous depth whose moves plus the walk and the push give this
    // label's moves (the player ends a push where the box stood)
    let mut w = Work::default();
    let mut dist = Vec::new();
    let mut pushes = Vec::with_capacity(total);
    for d in (1..=total).rev() {
        if cancel.load(Ordering::Relaxed) {
            return Err(EngineError::Cancelled);
        }
        let l = cur[at];
        let prev: Vec<Label> = get_records(tape, Rec::Labels, d - 1)?;
        let edges: Vec<Edge> = get_records(tape, Rec::Edges, d - 1)?;
        let layer: Vec<K> = get_records(tape, Rec::States, d - 1)?;
        let mut found = None;
        for e in edges.iter().filter(|e| e.to == l.state && e.push.from == l.player) {
            let lo = prev.partition_point(|p| p.state < e.from);
            let hi = prev.partition_point(|p| p.state <= e.from);
            problem.decode(&layer[e.from as usize], &mut w.boxes);
            let behind = e.push.behind(board);
            for (j, p) in prev.iter().enumerate().take(hi).skip(lo) {
                walk_distances(board, &w.boxes, p.player, &mut dist, &mut w.queue);
                let walk = dist[behind as usize];
                if walk < u32::MAX - 1 && p.moves + walk + 1 == l.moves && found.is_none_or(|(f, _)| j < f) {
                    found = Some((j, e.push));
                }
            }
        }
        let (j, push) = found.ok_or_else(|| {
            EngineError::Internal(format!("moves pass: no label at depth {} leads to the one at {d}", d - 1))
        })?;
        pushes.push(push);
        at = j;
        cur = prev;
    }
    pushes.reverse();
    Ok((pushes, best as u64))
}
