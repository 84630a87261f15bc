//! The probe: one bound iteration searched best state first, in memory and
//! within a budget, for the iteration whose bound is already known to be at
//! most the optimum. There a solution of at most `U` pushes is optimal
//! whatever order found it, and the layered search's completeness (every
//! layer whole before the next) buys nothing: it stores every state with
//! `d + h <= U`, nearly all of them with `d + h = U` exactly (on XSokoban #7,
//! 5.86 million of them at `U` = 88 against about 20 thousand below it),
//! while a search that follows the state nearest the goal first runs down
//! one line of states that keep `d + h <= U` and reaches the goal after a few
//! tens of thousands.
//!
//! # What it answers
//!
//! From the start it expands, in batches, the open states of the smallest
//! remaining bound `h` (the deepest first among equals; greedy best-first,
//! which on the XSokoban levels found solutions with fewer states than
//! deepest-first or A*'s order, measured in `docs/benchmarks.md`), pushing forward under the
//! problem's prunings and its bound `U` (a successor at depth `d` is kept only
//! if `d + h <= U`, as in the layered search). A state found again by a
//! shorter path gets the shorter depth and is expanded again (a
//! label-correcting search), so when nothing is left open every kept state
//! holds its least depth in the pruned graph. Then:
//!
//! - **found**: a successor with every box on a goal (`h = 0`) ends the probe
//!   with its path, a real solution of at most `U` pushes;
//! - **exhausted**: nothing is left open and no goal was reached, which proves
//!   that no solution has at most `U` pushes: the states of the optimal
//!   solution the prunings keep (see `search.rs`) all pass the bound at their
//!   true depths when `U` is at least the optimum, each is generated from the
//!   one before once that one holds its true depth, and a state's depth only
//!   ever falls to its least one, so the goal would have been reached;
//! - **budget** or **cancelled**: stopped, nothing proven.
//!
//! # The perimeter
//!
//! Between the layered search's steps the probe is given its layers, whose
//! backward layers `B_0..=B_J` are whole. The probe runs only where the
//! optimum `L` is at least `U`, so a solution through a successor `s` found
//! at depth `d` has exactly `U` pushes, and `s` is then `U - d` pulls from
//! the goal. So where `U - d <= J`, `s` is looked up in `B_{U-d}`: found, the
//! probe's path to it and the layers' path from it (rebuilt as after a
//! meeting) are a solution of `U` pushes, optimal; not found, `s` is
//! dropped. Exhaustion still proves that no solution has at most `U`
//! pushes: the kept optimal solution's state `s_i` lies in `B_{L-i}` (see
//! `search.rs`; here `L = U`), so the first of its states the probe reaches
//! at the perimeter, from its predecessor at its true depth, is found there.
//! The probe so never stores a state the backward layers already answer
//! for; it explores only the depths the forward layers have yet to reach.
//!
//! The driver asks it only for a bound that is at most the optimum, so that
//! a found solution is an optimal one; the answer does not depend on the
//! number of threads (the batches are fixed in size and their successors
//! merged in the order of the states that made them),
//! nor on how a run is cut into parts ([`Probe::run`] goes on where the last
//! part stopped).

use super::path::rebuild;
use super::search::{LayerBackend, NoProgress, ProbeEvent, Progress};
use super::{EngineError, Excess, Problem, Side, EXCESS_BINS};
use crate::model::key::StateKey;
use crate::model::rules::{BoxMove, Scratch};
use hashbrown::hash_table::{Entry, HashTable};
use rustc_hash::FxBuildHasher;
use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, RwLock};
use std::time::Instant;

/// States expanded together, on every thread; fixed, so that the order of
/// the search (and the solution found) does not depend on the thread count.
const BATCH: usize = 64;

/// No parent: a start state.
const ROOT: u32 = u32::MAX;

/// How a probe ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeEnd {
    /// A solution of at most the bound's pushes, as pushes from the start.
    Found(Vec<BoxMove>),
    /// Every state within the bound was searched: no solution within it.
    Exhausted,
    /// The budget of stored states ran out first.
    Budget,
    /// Stopped by the cancel flag.
    Cancelled,
}

/// How far one run of a probe may go: until it stores `stored` states in
/// all, or has generated `generated` successors in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeBudget {
    pub stored: u64,
    pub generated: u64,
}

impl ProbeBudget {
    /// Up to `stored` states, however many successors that takes.
    pub fn states(stored: u64) -> ProbeBudget {
        ProbeBudget { stored, generated: u64::MAX }
    }
}

/// Counters of a probe.
#[derive(Debug, Clone, Copy)]
pub struct ProbeStats {
    /// Distinct states stored.
    pub stored: u64,
    pub generated: u64,
    pub expanded: u64,
    /// Expansions of a state found again by a shorter path.
    pub reopened: u64,
    /// Successors at the perimeter (see [`Probe::run`]) not found in the
    /// backward layer they would have to lie in.
    pub perimeter: u64,
    /// The solution found runs through a backward layer (it met the layers
    /// at the perimeter).
    pub met_layers: bool,
    /// Successors the bound dropped, by how far over it they were.
    pub excess: Excess,
    /// Memory the probe's states and index held at the end (an estimate).
    pub memory_bytes: u64,
}

impl Default for ProbeStats {
    fn default() -> Self {
        ProbeStats {
            stored: 0,
            generated: 0,
            expanded: 0,
            reopened: 0,
            perimeter: 0,
            met_layers: false,
            excess: [0; EXCESS_BINS],
            memory_bytes: 0,
        }
    }
}

/// One stored state: its key, the state it was reached from and the push.
struct Node<K> {
    key: K,
    parent: u32,
    depth: u32,
    push: BoxMove,
}

/// A successor found by a batch: the state, its bound and where it came from.
#[derive(Clone, Copy)]
struct Found<K> {
    key: K,
    push: BoxMove,
    h: u32,
    parent: u32,
    /// The parent's order (its `d + h`, at least its own parent's).
    parent_f: u32,
    /// What the index held of it before the batch (see [`Known::seen`]).
    seen: u32,
}

/// [`Found::seen`]: not in the index.
const SEEN_NEW: u32 = u32::MAX;

/// [`Found::seen`]: in the index at no greater depth, so the merge has
/// nothing to do with it (a node's depth only falls).
const SEEN_HELD: u32 = u32::MAX - 1;

/// The probe's states and their index, read by every thread while a batch
/// expands (each successor looked up there, so that the merge, which runs
/// on one thread, is spared the lookups of the states it already holds:
/// half to two thirds of them) and written only between batches, by the
/// merge.
#[derive(Default)]
struct Known<K> {
    nodes: Vec<Node<K>>,
    index: Index,
}

/// The probe's index: each state's node number, found by its key, which
/// only the node holds. A slot is the number and 32 bits of the key's hash,
/// 8 bytes, where a map from keys held the key and the number, padded (16
/// bytes with `u64` keys, 32 with `u128`); the bits let the table grow
/// without reading a node, and a lookup reads a node only where they match.
#[derive(Default)]
struct Index(HashTable<(u32, u32)>);

/// 32 bits of `key`'s hash, from both halves of the 64.
fn hash_bits<K: StateKey>(key: &K) -> u32 {
    let h = FxBuildHasher.hash_one(key);
    (h ^ (h >> 32)) as u32
}

/// The table's hash of a slot's bits: multiplied out, so that both the low
/// bits (the bucket) and the top ones (the control tag) depend on them.
fn spread(bits: u32) -> u64 {
    (bits as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Whether a slot is `key`'s, whose hash's bits are `bits`: its bits first,
/// its node's key only where they match.
fn holds<'a, K: StateKey>(nodes: &'a [Node<K>], key: &'a K, bits: u32) -> impl Fn(&(u32, u32)) -> bool + 'a {
    move |&(id, b)| b == bits && nodes[id as usize].key == *key
}

impl Index {
    /// The node of `key`, if it has one.
    fn find<K: StateKey>(&self, nodes: &[Node<K>], key: &K) -> Option<u32> {
        let bits = hash_bits(key);
        self.0.find(spread(bits), holds(nodes, key, bits)).map(|&(id, _)| id)
    }

    /// Gives `key` the node `id` (the next one, pushed by the caller) if it
    /// has none: `Err` with the node it has.
    fn insert<K: StateKey>(&mut self, nodes: &[Node<K>], key: &K, id: u32) -> Result<(), u32> {
        let bits = hash_bits(key);
        match self.0.entry(spread(bits), holds(nodes, key, bits), |&(_, b)| spread(b)) {
            Entry::Occupied(o) => Err(o.get().0),
            Entry::Vacant(v) => {
                v.insert((id, bits));
                Ok(())
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }

    fn capacity(&self) -> usize {
        self.0.capacity()
    }
}

impl<K: StateKey> Known<K> {
    /// What the index says of `key` found at `depth`: [`SEEN_NEW`],
    /// [`SEEN_HELD`], or the node that holds it at a greater depth.
    fn seen(&self, key: &K, depth: u32) -> u32 {
        match self.index.find(&self.nodes, key) {
            None => SEEN_NEW,
            Some(id) if self.nodes[id as usize].depth <= depth => SEEN_HELD,
            Some(id) => id,
        }
    }

    /// Takes in `found`, a successor reached at `depth` (its parent's
    /// plus one), and opens it if it is new or found by a shorter path;
    /// true if it was found by a shorter path (reopened).
    fn store(&mut self, open: &mut Open, found: &Found<K>, depth: u32) -> bool {
        // a state's order is at least its parent's (the parent's bound less
        // one is a bound of the child too)
        let f = (depth + found.h).max(found.parent_f);
        // held before the batch: nothing to do, or a node whose depth may
        // fall; else looked up (the batch itself may have stored it)
        let id = match found.seen {
            SEEN_HELD => return false,
            SEEN_NEW => {
                let id = self.nodes.len() as u32;
                match self.index.insert(&self.nodes, &found.key, id) {
                    Ok(()) => {
                        self.nodes.push(Node { key: found.key, parent: found.parent, depth, push: found.push });
                        open.push(depth, f, id);
                        return false;
                    }
                    Err(held) => held,
                }
            }
            id => id,
        };
        let node = &mut self.nodes[id as usize];
        if depth >= node.depth {
            return false;
        }
        (node.depth, node.parent, node.push) = (depth, found.parent, found.push);
        open.push(depth, f, id);
        true
    }
}

/// The open states, taken in the order of their remaining bound `f - d`
/// (smallest first: the state that looks nearest the goal), the deepest
/// first among equals; an entry whose node has since got a smaller depth is
/// stale and skipped.
struct Open {
    /// (f - d, u32::MAX - d) -> a stack of nodes at that depth.
    queue: BTreeMap<(u32, u32), Vec<u32>>,
    /// The depth of the entries last taken.
    depth: usize,
}

impl Open {
    fn push(&mut self, depth: u32, f: u32, node: u32) {
        self.queue.entry((f - depth, u32::MAX - depth)).or_default().push(node);
    }

    /// Up to `n` entries of the first key, as (node, depth, f).
    fn take(&mut self, n: usize, out: &mut Vec<(u32, u32, u32)>) {
        out.clear();
        let Some(mut slot) = self.queue.first_entry() else { return };
        let (rest, depth) = *slot.key();
        let depth = u32::MAX - depth;
        self.depth = depth as usize;
        let stack = slot.get_mut();
        while out.len() < n {
            let Some(node) = stack.pop() else { break };
            out.push((node, depth, rest + depth));
        }
        if stack.is_empty() {
            slot.remove();
        }
    }
}

/// A probe in progress: its states, open lists and counters, so that the
/// driver can run it in parts between the layered search's steps and each
/// part goes on where the last stopped.
pub struct Probe<K> {
    /// Taken out while a run's threads share it, put back after.
    known: RwLock<Known<K>>,
    open: Open,
    scratch: Vec<(Scratch, Excess)>,
    /// Per thread, the successors of the batch's states it claimed, and
    /// where each claimed state's lie in them (see [`Spans`]).
    outs: Vec<(Vec<Found<K>>, Spans)>,
    /// The batch's successors in batch order, gathered from `outs`.
    found: Vec<Found<K>>,
    stats: ProbeStats,
    /// Set once found or exhausted: every later run answers the same.
    over: Option<ProbeEnd>,
    started: Instant,
}

/// Expansions between two progress reports.
const REPORT_EVERY: u64 = 1 << 16;

impl<K: StateKey> Probe<K> {
    /// A probe of the bounded `problem` from `starts`, nothing expanded yet.
    pub fn new(problem: &Problem<K>, starts: &[K]) -> Result<Probe<K>, EngineError> {
        let Some(bound) = &problem.bound else {
            return Err(EngineError::Internal("the probe needs a bounded problem".into()));
        };
        let board = &problem.board;
        let threads = rayon::current_num_threads().max(1);
        let mut p = Probe {
            known: RwLock::default(),
            open: Open { queue: BTreeMap::new(), depth: 0 },
            scratch: (0..threads).map(|_| (Scratch::new(board), [0; EXCESS_BINS])).collect(),
            outs: (0..threads).map(|_| Default::default()).collect(),
            found: Vec::new(),
            stats: ProbeStats::default(),
            over: None,
            started: Instant::now(),
        };
        let mut boxes = Vec::new();
        let known = p.known.get_mut().unwrap_or_else(|e| e.into_inner());
        for &key in starts {
            let player = problem.decode(&key, &mut boxes);
            if boxes.iter().all(|&b| board.is_goal[b as usize]) {
                p.over = Some(ProbeEnd::Found(Vec::new()));
                return Ok(p);
            }
            let h = bound.lower.estimate(Side::Forward, &boxes, player, bound.limit);
            let id = known.nodes.len() as u32;
            // a start given twice is taken once
            if h > bound.limit || known.index.insert(&known.nodes, &key, id).is_err() {
                continue;
            }
            p.open.push(0, h, id);
            known.nodes.push(Node { key, parent: ROOT, depth: 0, push: BoxMove { from: 0, dir: 0 } });
        }
        Ok(p)
    }

    /// Searches on until a goal, exhaustion, the `budget` (stored states or
    /// generated successors in all, so a later run with a larger budget goes
    /// on) or `cancel`.
    ///
    /// With `layers`, the layered search of the same iteration, whose
    /// backward layers `0..=J` are whole: a successor at a depth `d` with
    /// `U - d <= J` is looked up in backward layer `U - d` (see the module's
    /// "The perimeter") and either joins it to a solution or is dropped.
    ///
    /// With more than one thread, each batch's states are claimed one at a
    /// time by this thread and helper threads that live for this run (so no
    /// thread waits while another still has a half of the batch to do); the
    /// helpers spin between batches and sleep on a condition variable when
    /// none comes for about a millisecond. A batch
    /// is a few hundred microseconds of work, less than a sleeping rayon
    /// worker takes to wake, so on the pool the other threads joined too
    /// late to help (two threads expanded no faster than one; measured in
    /// `docs/benchmarks.md`). The pool is idle meanwhile: the probe runs
    /// between the layered steps, never beside them. A helper's spinning
    /// shrinks where its waits end in sleep (see `Share::wait`); a helper's
    /// panic is passed on as it was.
    pub fn run(
        &mut self,
        problem: &Problem<K>,
        budget: ProbeBudget,
        cancel: &AtomicBool,
        progress: &dyn Progress,
        layers: Option<&mut dyn LayerBackend<K>>,
    ) -> Result<ProbeEnd, EngineError> {
        if let Some(end) = &self.over {
            return Ok(end.clone());
        }
        let helpers: Vec<(Scratch, Excess)> = self.scratch.drain(1..).collect();
        let known = std::mem::take(&mut self.known);
        if helpers.is_empty() {
            let end = self.run_with(problem, budget, cancel, progress, layers, (&[], &AtomicUsize::new(0), &known));
            self.known = known;
            return end;
        }
        let shares: Vec<Share<K>> = helpers.iter().map(|_| Share::default()).collect();
        let claim = AtomicUsize::new(0);
        let (end, back) = std::thread::scope(|s| {
            // the helpers stop however the run ends, a panic included (one
            // of the spawns failing among them: those already started would
            // wait for a batch, and the scope for them, forever)
            let stop = Finish(&shares);
            let (claim, known) = (&claim, &known);
            let handles: Vec<_> = helpers
                .into_iter()
                .zip(&shares)
                .map(|(sc, share)| s.spawn(move || share.serve(problem, (claim, known), sc)))
                .collect();
            let end = self.run_with(problem, budget, cancel, progress, layers, (&shares, claim, known));
            drop(stop);
            // a helper's panic is passed on as it was (the run above then
            // ended with an error, not a panic of its own)
            let back: Vec<_> = handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
                .collect();
            (end, back)
        });
        self.scratch.extend(back);
        self.known = known;
        end
    }

    /// [`run`](Self::run) on this thread, with `shares` expanding their part
    /// of each batch: every thread claims the batch's states one at a time
    /// from `claim` (so none waits while another has states left), and
    /// their successors are put back in batch order.
    fn run_with(
        &mut self,
        problem: &Problem<K>,
        budget: ProbeBudget,
        cancel: &AtomicBool,
        progress: &dyn Progress,
        mut layers: Option<&mut dyn LayerBackend<K>>,
        (shares, claim, known): Helpers<'_, K>,
    ) -> Result<ProbeEnd, EngineError> {
        let limit = problem.bound.as_ref().map(|b| b.limit);
        let (mut taken, mut batch) = (Vec::new(), Vec::new());
        let mut next_report = self.stats.expanded + REPORT_EVERY;
        let end = loop {
            if cancel.load(Ordering::Relaxed) {
                return Ok(ProbeEnd::Cancelled);
            }
            let held = read(known);
            let stored = held.nodes.len() as u64;
            if stored >= budget.stored || self.stats.generated >= budget.generated {
                return Ok(ProbeEnd::Budget);
            }
            if self.stats.expanded >= next_report {
                next_report = self.stats.expanded + REPORT_EVERY;
                progress.probe_step(&ProbeEvent {
                    bound: limit,
                    stored,
                    generated: self.stats.generated,
                    depth: self.open.depth,
                    seconds: self.started.elapsed().as_secs_f64(),
                });
            }
            // the batch: the first open states that still hold their depth
            batch.clear();
            while batch.is_empty() {
                self.open.take(BATCH, &mut taken);
                if taken.is_empty() {
                    break;
                }
                let nodes = &held.nodes;
                batch.extend(
                    taken
                        .iter()
                        .filter(|&&(n, d, _)| nodes[n as usize].depth == d)
                        .map(|&(n, d, f)| (n, d, f, nodes[n as usize].key)),
                );
            }
            drop(held);
            if batch.is_empty() {
                break ProbeEnd::Exhausted;
            }
            self.stats.expanded += batch.len() as u64;
            // no helper claims now: the last batch's are all collected, and
            // the posts publish this store
            claim.store(0, Ordering::Relaxed);
            let posted: Vec<u64> = shares.iter().map(|share| share.post(&batch)).collect();
            let (sc, excess) = &mut self.scratch[0];
            let (out, spans) = &mut self.outs[0];
            expand_claimed(problem, &batch, (claim, &read(known)), sc, excess, out, spans);
            for (i, (share, seq)) in shares.iter().zip(posted).enumerate() {
                if !share.collect(seq, &mut self.outs[i + 1]) {
                    // it panicked: `run` passes its panic on
                    return Err(EngineError::Internal("a probe helper thread stopped".into()));
                }
            }
            in_batch_order(&self.outs, batch.len(), &mut self.found);
            // one open key's states: one depth
            let depth = batch[0].1;
            let perimeter = match (layers.as_deref_mut(), limit) {
                (Some(backend), Some(u)) => self.perimeter(backend, u, depth)?,
                _ => None,
            };
            // merged in batch order: the same order whatever the thread count
            match self.merge(&mut write(known), perimeter.as_ref()) {
                Some((pushes, None)) => break ProbeEnd::Found(pushes),
                Some((mut pushes, Some((key, j)))) => {
                    let Some(backend) = layers.as_deref_mut() else {
                        return Err(EngineError::Internal("the probe met layers it was not given".into()));
                    };
                    pushes.extend(rebuild(problem, backend, key, 0, j)?);
                    self.stats.met_layers = true;
                    break ProbeEnd::Found(pushes);
                }
                None => {}
            }
        };
        self.over = Some(end.clone());
        Ok(end)
    }

    /// What the backward layers say of each of the batch's successors, in
    /// batch order; `None` when they do not lie at the perimeter. A batch is
    /// one open key's states, all at `depth`, so its successors all lie at
    /// `depth + 1`: looked up in backward layer `U - depth - 1` if that
    /// layer is whole, in one query.
    fn perimeter(
        &self,
        backend: &mut dyn LayerBackend<K>,
        limit: u32,
        depth: u32,
    ) -> Result<Option<Vec<Gate>>, EngineError> {
        let built = backend.layers(Side::Backward);
        let Some(j) = (limit as usize).checked_sub(depth as usize + 1).filter(|&j| j < built) else {
            return Ok(None);
        };
        let keys: Vec<K> = self.found.iter().map(|f| f.key).collect();
        if keys.is_empty() {
            return Ok(None);
        }
        let hits = backend.in_layer(Side::Backward, j, &keys)?;
        Ok(Some(hits.into_iter().map(|hit| if hit { Gate::Meets(j) } else { Gate::Dropped }).collect()))
    }

    /// Takes the batch's successors into the index and the open lists; the
    /// path to a goal if one was among them, or the path to a successor
    /// found in the backward layer `perimeter` names, with that successor
    /// and layer (the successors beside it there are dropped).
    #[allow(clippy::type_complexity)]
    fn merge(
        &mut self,
        known: &mut Known<K>,
        perimeter: Option<&Vec<Gate>>,
    ) -> Option<(Vec<BoxMove>, Option<(K, usize)>)> {
        let (open, stats) = (&mut self.open, &mut self.stats);
        for (i, found) in self.found.drain(..).enumerate() {
            let nodes = &known.nodes;
            stats.generated += 1;
            let depth = nodes[found.parent as usize].depth + 1;
            if found.h == 0 {
                // every box on a goal (a box's matched distance is 0 only there)
                return Some((path_to(nodes, found.parent, found.push), None));
            }
            match perimeter.map_or(Gate::Inside, |gates| gates[i]) {
                Gate::Inside => {}
                Gate::Meets(j) => return Some((path_to(nodes, found.parent, found.push), Some((found.key, j)))),
                Gate::Dropped => {
                    stats.perimeter += 1;
                    continue;
                }
            }
            if known.store(open, &found, depth) {
                stats.reopened += 1;
            }
        }
        None
    }

    /// The counters so far, with the bound's drops summed and the memory
    /// estimated.
    pub fn stats(&self) -> ProbeStats {
        let mut stats = self.stats;
        let known = read(&self.known);
        stats.stored = known.nodes.len() as u64;
        for (_, excess) in &self.scratch {
            stats.excess.iter_mut().zip(excess).for_each(|(a, b)| *a += b);
        }
        let open: usize = self.open.queue.values().map(Vec::capacity).sum();
        // the index's capacity is 7/8 of its buckets, every one of them
        // written; the nodes' spare capacity is not (a large allocation grows
        // by remapping, and pages never written take no memory)
        let buckets = known.index.capacity() as u64 * 8 / 7;
        stats.memory_bytes = (known.nodes.len() * size_of::<Node<K>>()) as u64
            + buckets * INDEX_SLOT_BYTES
            + (open * size_of::<u32>()) as u64;
        stats
    }
}

/// One bucket of the probe's index ([`Index`]): the node number and the
/// hash's bits, and the hash table's control byte, whatever the key.
const INDEX_SLOT_BYTES: u64 = (size_of::<(u32, u32)>() + 1) as u64;

/// What one state of a probe takes in memory at most, about: its node, its
/// share of the index just after the index grew (a hash table is then 7/16
/// full: 16/7 buckets per state), and two entries of the open lists (a
/// state found again by a shorter path is queued again). A probe whose
/// states may take `bytes` stores at most `bytes / state_bytes::<K>()`.
/// 52 bytes for `u64` keys, 60 for `u128` (70 and 115 while the index held
/// the keys; measured then, a probe on XSokoban #4, `u128`, took about 108
/// bytes per state in RSS: `docs/benchmarks.md`).
pub const fn state_bytes<K>() -> u64 {
    size_of::<Node<K>>() as u64 + INDEX_SLOT_BYTES * 16 / 7 + 2 * size_of::<u32>() as u64
}

/// A batch's states, as (node, depth, parent's order, key).
type Taken<K> = (u32, u32, u32, K);

/// Per claimed state: its place in the batch and the range of its
/// successors in the claiming thread's output.
type Spans = Vec<(u32, u32, u32)>;

/// Expands the states of `states` this thread claims from `claim` into
/// `out`, recording each one's successors in `spans` (both cleared first).
fn expand_claimed<K: StateKey>(
    problem: &Problem<K>,
    states: &[Taken<K>],
    (claim, known): (&AtomicUsize, &Known<K>),
    sc: &mut Scratch,
    excess: &mut Excess,
    out: &mut Vec<Found<K>>,
    spans: &mut Spans,
) {
    out.clear();
    spans.clear();
    loop {
        let i = claim.fetch_add(1, Ordering::Relaxed);
        let Some(&(node, depth, parent_f, key)) = states.get(i) else { return };
        let from = out.len() as u32;
        problem.expand_scored(Side::Forward, &key, sc, depth + 1, excess, |key, push, h| {
            let seen = known.seen(&key, depth + 1);
            out.push(Found { key, push, h, parent: node, parent_f, seen })
        });
        spans.push((i as u32, from, out.len() as u32));
    }
}

/// The successors of a batch of `states` states, gathered from the threads'
/// outputs into `found` in the order of the states that made them: the
/// order a single thread makes them in, whichever thread claimed what.
fn in_batch_order<K: Copy>(outs: &[(Vec<Found<K>>, Spans)], states: usize, found: &mut Vec<Found<K>>) {
    let mut at = vec![(0u32, 0u32, 0u32); states];
    for (t, (_, spans)) in outs.iter().enumerate() {
        for &(i, from, to) in spans {
            at[i as usize] = (t as u32, from, to);
        }
    }
    found.clear();
    for (t, from, to) in at {
        found.extend_from_slice(&outs[t as usize].0[from as usize..to as usize]);
    }
}

/// The helper threads of a run, the counter every thread claims a batch's
/// states from, and the probe's states, which every thread reads while a
/// batch expands.
type Helpers<'a, K> = (&'a [Share<K>], &'a AtomicUsize, &'a RwLock<Known<K>>);

/// The probe's states to read (a panic on another thread poisons nothing
/// that matters: the run passes the panic on).
fn read<K>(known: &RwLock<Known<K>>) -> std::sync::RwLockReadGuard<'_, Known<K>> {
    known.read().unwrap_or_else(|e| e.into_inner())
}

/// The probe's states to write: only between batches, when no helper reads.
fn write<K>(known: &RwLock<Known<K>>) -> std::sync::RwLockWriteGuard<'_, Known<K>> {
    known.write().unwrap_or_else(|e| e.into_inner())
}

/// A helper's batch, and its successors with their spans.
type Job<K> = (Vec<Taken<K>>, (Vec<Found<K>>, Spans));

/// A helper thread's part of each batch (see [`Probe::run`]): the states
/// the probe's thread hands over, and their successors handed back.
struct Share<K> {
    /// Batches posted, batches done, and the end of the run: read without
    /// the lock while spinning, written under it.
    posted: AtomicU64,
    done: AtomicU64,
    stop: AtomicBool,
    job: Mutex<Job<K>>,
    changed: Condvar,
}

impl<K> Default for Share<K> {
    fn default() -> Self {
        Share {
            posted: AtomicU64::new(0),
            done: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            job: Mutex::new((Vec::new(), Default::default())),
            changed: Condvar::new(),
        }
    }
}

/// How long a wait spins before it sleeps on the condition variable
/// (`spin_loop` hints; about a millisecond): longer than the merge of a
/// batch, so a helper waiting for the next batch is awake when it comes.
const SPINS: u32 = 1 << 15;

/// The fewest spins a wait starts with, however often waits slept.
const SPINS_MIN: u32 = 1 << 6;

impl<K: StateKey> Share<K> {
    fn job(&self) -> MutexGuard<'_, Job<K>> {
        // a panic on the other side is passed on by the scope; the data is
        // a batch's, rebuilt every time
        self.job.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits, spinning up to `*spins` times first, until `ready` holds (it
    /// reads the atomics, which change only under the lock, so a sleep
    /// misses no change). A wait that had to sleep halves `*spins` for the
    /// next one, down to [`SPINS_MIN`]; one that spun less than half of it
    /// doubles it, up to [`SPINS`]. So a helper whose batches come far apart
    /// (a probe whose perimeter queries go over the network, on a cluster's
    /// coordinator) soon stops burning a core between them.
    fn wait(&self, spins: &mut u32, ready: impl Fn() -> bool) {
        for spun in 0..*spins {
            if ready() {
                if spun < *spins / 2 {
                    *spins = (*spins * 2).min(SPINS);
                }
                return;
            }
            std::hint::spin_loop();
        }
        *spins = (*spins / 2).max(SPINS_MIN);
        let mut job = self.job();
        while !ready() {
            job = self.changed.wait(job).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Hands `batch` to the helper, to claim states from: the number of
    /// the batch.
    fn post(&self, batch: &[Taken<K>]) -> u64 {
        let seq = {
            let mut job = self.job();
            job.0.clear();
            job.0.extend_from_slice(batch);
            self.posted.fetch_add(1, Ordering::AcqRel) + 1
        };
        self.changed.notify_all();
        seq
    }

    /// The successors of batch `seq` into `out` (whose old contents the
    /// helper gets back to fill next time); false when the helper stopped
    /// first, which only one that panicked does before the run ends.
    fn collect(&self, seq: u64, out: &mut (Vec<Found<K>>, Spans)) -> bool {
        // the probe's thread waits for a chunk like the one it has just
        // expanded, so always briefly: the full spin each time, not adapted
        let mut spins = SPINS;
        self.wait(&mut spins, || self.done.load(Ordering::Acquire) == seq || self.stop.load(Ordering::Acquire));
        if self.done.load(Ordering::Acquire) != seq {
            return false;
        }
        std::mem::swap(out, &mut self.job().1);
        true
    }

    fn finish(&self) {
        {
            let _job = self.job();
            self.stop.store(true, Ordering::Release);
        }
        self.changed.notify_all();
    }

    /// The helper: expands each batch posted until the run ends, then gives
    /// its buffers back.
    fn serve(
        &self,
        problem: &Problem<K>,
        (claim, known): (&AtomicUsize, &RwLock<Known<K>>),
        (mut sc, mut excess): (Scratch, Excess),
    ) -> (Scratch, Excess) {
        let _stop = Finish(std::slice::from_ref(self));
        let (mut seen, mut spins) = (0, SPINS);
        loop {
            self.wait(&mut spins, || self.posted.load(Ordering::Acquire) != seen || self.stop.load(Ordering::Acquire));
            let posted = self.posted.load(Ordering::Acquire);
            if posted == seen {
                return (sc, excess);
            }
            seen = posted;
            {
                let mut job = self.job();
                let (states, (out, spans)) = &mut *job;
                // the read ends before the batch is done: the merge writes
                expand_claimed(problem, states, (claim, &read(known)), &mut sc, &mut excess, out, spans);
                self.done.store(seen, Ordering::Release);
            }
            self.changed.notify_all();
        }
    }
}

/// Ends the run for these helpers when dropped.
struct Finish<'a, K: StateKey>(&'a [Share<K>]);

impl<K: StateKey> Drop for Finish<'_, K> {
    fn drop(&mut self) {
        self.0.iter().for_each(Share::finish);
    }
}

/// A successor seen from the backward layers.
#[derive(Clone, Copy)]
enum Gate {
    /// Not at the perimeter: stored as usual.
    Inside,
    /// In the backward layer it would have to lie in: a solution of `U`
    /// pushes through it.
    Meets(usize),
    /// Not there: on no solution of `U` pushes.
    Dropped,
}

/// The pushes from the start to the state reached from `parent` by `push`.
fn path_to<K>(nodes: &[Node<K>], parent: u32, push: BoxMove) -> Vec<BoxMove> {
    let mut pushes = vec![push];
    let mut at = parent;
    while nodes[at as usize].parent != ROOT {
        pushes.push(nodes[at as usize].push);
        at = nodes[at as usize].parent;
    }
    pushes.reverse();
    pushes
}

/// One probe run whole: from `starts` until a goal, exhaustion, `budget`
/// stored states or `cancel`.
pub fn probe<K: StateKey>(
    problem: &Problem<K>,
    starts: &[K],
    budget: u64,
    cancel: &AtomicBool,
) -> Result<(ProbeEnd, ProbeStats), EngineError> {
    let mut p = Probe::new(problem, starts)?;
    let end = p.run(problem, ProbeBudget::states(budget), cancel, &NoProgress, None)?;
    Ok((end, p.stats()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// However the threads claimed a batch's states (one at a time, in
        /// claim order on each), the successors come back in batch order.
        #[test]
        fn successors_come_back_in_batch_order(claims in proptest::collection::vec((0usize..3, 0u32..5), 0..40)) {
            let found = |state: u32, j: u32| Found { key: 0u64, push: BoxMove { from: 0, dir: 0 }, h: j, parent: state, parent_f: 0, seen: SEEN_NEW };
            let mut outs: Vec<(Vec<Found<u64>>, Spans)> = (0..3).map(|_| Default::default()).collect();
            for (state, &(thread, successors)) in claims.iter().enumerate() {
                let (out, spans) = &mut outs[thread];
                let from = out.len() as u32;
                out.extend((0..successors).map(|j| found(state as u32, j)));
                spans.push((state as u32, from, out.len() as u32));
            }
            let mut got = Vec::new();
            in_batch_order(&outs, claims.len(), &mut got);
            let want: Vec<(u32, u32)> = claims.iter().enumerate().flat_map(|(state, &(_, n))| (0..n).map(move |j| (state as u32, j))).collect();
            prop_assert_eq!(got.iter().map(|f| (f.parent, f.h)).collect::<Vec<_>>(), want);
        }

        /// The index finds every key under the node it was given, and gives
        /// a key held already its node back instead of taking a new one,
        /// as a map from keys to node numbers does; through the table's
        /// growth, with keys near each other (so sharing many bits) and far.
        #[test]
        fn the_index_finds_each_key_under_its_node_as_a_map_does(
            keys in proptest::collection::vec(prop_oneof![0u128..3000, any::<u128>()], 0..3000),
        ) {
            let mut known = Known::<u128>::default();
            let mut model = std::collections::HashMap::new();
            for key in keys {
                let id = known.nodes.len() as u32;
                let got = known.index.insert(&known.nodes, &key, id);
                match model.get(&key) {
                    Some(&held) => prop_assert_eq!(got, Err(held)),
                    None => {
                        prop_assert_eq!(got, Ok(()));
                        model.insert(key, id);
                        known.nodes.push(Node { key, parent: ROOT, depth: 0, push: BoxMove { from: 0, dir: 0 } });
                    }
                }
            }
            prop_assert_eq!(known.index.len(), model.len());
            for (key, id) in &model {
                prop_assert_eq!(known.index.find(&known.nodes, key), Some(*id));
            }
            prop_assert_eq!(known.index.find(&known.nodes, &u128::MAX.wrapping_sub(7)), model.get(&u128::MAX.wrapping_sub(7)).copied());
        }

        /// Successors looked up in the index while their batch expands
        /// (`seen`) are taken in exactly as if the merge looked each one up
        /// itself: the same nodes, depths, parents, index and open lists.
        /// Each batch's successors share a depth, as a batch's states do;
        /// the depths of batches go up and down as the probe's order does.
        #[test]
        fn successors_looked_up_while_expanding_are_stored_as_if_looked_up_in_the_merge(
            batches in proptest::collection::vec((1u32..12, proptest::collection::vec((0u64..40, 0u32..6), 0..20)), 1..30),
        ) {
            let start = || {
                let mut known = Known::<u64>::default();
                known.nodes.push(Node { key: 1000, parent: ROOT, depth: 0, push: BoxMove { from: 0, dir: 0 } });
                assert_eq!(known.index.insert(&known.nodes, &1000, 0), Ok(()));
                (known, Open { queue: BTreeMap::new(), depth: 0 }, 0u32)
            };
            let (mut a, mut b) = (start(), start());
            for (depth, successors) in &batches {
                let found: Vec<Found<u64>> = successors
                    .iter()
                    .enumerate()
                    .map(|(i, &(key, h))| Found { key, push: BoxMove { from: i as u16, dir: 0 }, h, parent: 0, parent_f: depth - 1, seen: SEEN_NEW })
                    .collect();
                // looked up before any of the batch is stored, as the threads do
                let seen: Vec<u32> = found.iter().map(|f| b.0.seen(&f.key, *depth)).collect();
                for (f, seen) in found.iter().zip(seen) {
                    a.2 += a.0.store(&mut a.1, f, *depth) as u32;
                    b.2 += b.0.store(&mut b.1, &Found { seen, ..*f }, *depth) as u32;
                }
            }
            let nodes = |k: &Known<u64>| k.nodes.iter().map(|n| (n.key, n.parent, n.depth, n.push.from)).collect::<Vec<_>>();
            prop_assert_eq!(nodes(&a.0), nodes(&b.0));
            // every node found under its key, and nothing else held
            for k in [&a.0, &b.0] {
                prop_assert_eq!(k.index.len(), k.nodes.len());
                for (id, n) in k.nodes.iter().enumerate() {
                    prop_assert_eq!(k.index.find(&k.nodes, &n.key), Some(id as u32));
                }
            }
            prop_assert_eq!(&a.1.queue, &b.1.queue);
            prop_assert_eq!(a.2, b.2);
        }
    }
}
