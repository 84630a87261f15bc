//! The in-memory partition store. Each side of each partition is a list of sorted
//! runs, LSM-style: the newest layer (the frontier) is a run of its own, and older
//! layers are merged into runs of geometrically growing size whose keys carry a
//! one-byte layer offset. Duplicate and meeting checks then look at O(log layers)
//! runs instead of every layer, which matters in deep, narrow searches (hundreds
//! of layers), at a cost of one byte per state beyond the key (9 bytes per state
//! with `u64` keys).

use crate::engine::partition::{subtract_sorted, PartitionStore, StoreBytes};
use crate::engine::{SeamError, Side};
use crate::model::key::StateKey;
use crate::storage::layered::LayeredKeys;
use rayon::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Sorted unique keys of the layers `first..=last`.
struct Run<K> {
    first: usize,
    last: usize,
    keys: LayeredKeys<K>,
    /// Keys per layer, `lens[l - first]`.
    lens: Vec<u64>,
}

impl<K: StateKey> Run<K> {
    fn bytes(&self) -> u64 {
        self.keys.bytes() + self.lens.capacity() as u64 * 8
    }

    /// Merges two runs of adjacent layer ranges (`a` older).
    fn merge(a: Run<K>, b: Run<K>) -> Run<K> {
        let keys = LayeredKeys::merge(a.keys, b.keys, b.first - a.first);
        let mut lens = a.lens;
        lens.extend(b.lens);
        Run { first: a.first, last: b.last, keys, lens }
    }
}

struct SideRuns<K> {
    runs: Vec<Run<K>>,
    pending: Option<Vec<K>>,
}

impl<K: StateKey> SideRuns<K> {
    fn run_of(&self, layer: usize) -> Option<&Run<K>> {
        self.runs.iter().find(|r| r.first <= layer && layer <= r.last)
    }

    /// Keeps the frontier alone and merges older runs while the older of two
    /// neighbours is not more than twice the newer (a binary counter: O(log)
    /// runs, each key merged O(log) times) and the span fits a byte offset.
    fn compact(&mut self) {
        loop {
            let n = self.runs.len();
            if n < 3 {
                return;
            }
            let (a, b) = (&self.runs[n - 3], &self.runs[n - 2]);
            if a.keys.len() > 2 * b.keys.len().max(1) || b.last - a.first > u8::MAX as usize {
                return;
            }
            let frontier = self.runs.pop().expect("n >= 3");
            let b = self.runs.pop().expect("n >= 3");
            let a = self.runs.pop().expect("n >= 3");
            self.runs.push(Run::merge(a, b));
            self.runs.push(frontier);
        }
    }
}

struct Part<K> {
    sides: [SideRuns<K>; 2],
}

/// Layers of every partition kept in RAM.
pub struct MemStore<K> {
    parts: Vec<Mutex<Part<K>>>,
    sealed: [AtomicUsize; 2],
}

impl<K: StateKey> MemStore<K> {
    pub fn new(partitions: usize) -> Self {
        let side = || SideRuns { runs: Vec::new(), pending: None };
        MemStore {
            parts: (0..partitions).map(|_| Mutex::new(Part { sides: [side(), side()] })).collect(),
            sealed: [AtomicUsize::new(0), AtomicUsize::new(0)],
        }
    }

    fn part(&self, p: usize) -> std::sync::MutexGuard<'_, Part<K>> {
        self.parts[p].lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<K: StateKey> PartitionStore<K> for MemStore<K> {
    fn partitions(&self) -> usize {
        self.parts.len()
    }
    fn layers(&self, side: Side) -> usize {
        self.sealed[side.index()].load(Ordering::Acquire)
    }
    fn layer_len(&self, side: Side, layer: usize, partition: usize) -> u64 {
        let part = self.part(partition);
        part.sides[side.index()].run_of(layer).map_or(0, |r| r.lens[layer - r.first])
    }
    fn for_each_chunk(
        &self,
        side: Side,
        layer: usize,
        partition: usize,
        f: &mut dyn FnMut(&[K]) -> Result<(), SeamError>,
    ) -> Result<(), SeamError> {
        let part = self.part(partition);
        let Some(run) = part.sides[side.index()].run_of(layer) else { return Ok(()) };
        run.keys.for_each_chunk(layer - run.first, 4096, f)
    }
    fn retain_unseen(&self, side: Side, partition: usize, candidates: &mut Vec<K>) -> Result<(), SeamError> {
        let part = self.part(partition);
        // newest first: in BFS most duplicates are recent
        for run in part.sides[side.index()].runs.iter().rev() {
            if candidates.is_empty() {
                break;
            }
            subtract_sorted(candidates, run.keys.keys());
        }
        Ok(())
    }
    fn find_any(&self, side: Side, partition: usize, keys: &[K]) -> Result<Option<(K, usize)>, SeamError> {
        let part = self.part(partition);
        // the lowest layer holding any of `keys`, as a scan layer by layer would
        // find; within a merged run every common key is looked at
        let mut best: Option<(K, usize)> = None;
        for run in &part.sides[side.index()].runs {
            if best.is_some_and(|(_, l)| l < run.first) {
                continue;
            }
            if let Some((k, off)) = run.keys.lowest_common(keys) {
                if best.is_none_or(|(_, l)| run.first + off < l) {
                    best = Some((k, run.first + off));
                }
            }
        }
        Ok(best)
    }
    fn contains(&self, side: Side, layer: usize, partition: usize, key: &K) -> Result<bool, SeamError> {
        let part = self.part(partition);
        let Some(run) = part.sides[side.index()].run_of(layer) else { return Ok(false) };
        Ok(run.keys.contains(key, layer - run.first))
    }
    fn push_layer(&self, side: Side, partition: usize, mut keys: Vec<K>) -> Result<(), SeamError> {
        keys.shrink_to_fit();
        self.part(partition).sides[side.index()].pending = Some(keys);
        Ok(())
    }
    fn append_layer(&self, side: Side, partition: usize, keys: Vec<K>) -> Result<(), SeamError> {
        let mut part = self.part(partition);
        match &mut part.sides[side.index()].pending {
            // a layer's first chunk moves in: copying it would hold the
            // partition's layer twice
            Some(layer) if layer.is_empty() => *layer = keys,
            Some(layer) => {
                debug_assert!(layer.last().is_none_or(|l| keys.first().is_none_or(|f| l < f)));
                layer.extend_from_slice(&keys);
            }
            none => *none = Some(keys),
        }
        Ok(())
    }
    fn end_layer(&self, side: Side, partition: usize) -> Result<(), SeamError> {
        if let Some(layer) = &mut self.part(partition).sides[side.index()].pending {
            layer.shrink_to_fit();
        }
        Ok(())
    }
    fn seal_layer(&self, side: Side) -> Result<(), SeamError> {
        let layer = self.sealed[side.index()].load(Ordering::Acquire);
        // merging older runs is most of a deep search's sealing (Microban I
        // #153: 1.3 of 46 s on one thread): on every thread, not on the one
        // that seals
        (0..self.parts.len()).into_par_iter().for_each(|p| {
            let mut part = self.part(p);
            let s = &mut part.sides[side.index()];
            let keys = s.pending.take().unwrap_or_default();
            let len = keys.len() as u64;
            s.runs.push(Run { first: layer, last: layer, keys: LayeredKeys::single(keys), lens: vec![len] });
            s.compact();
        });
        self.sealed[side.index()].fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
    fn abort_layer(&self, side: Side) {
        for p in 0..self.parts.len() {
            self.part(p).sides[side.index()].pending = None;
        }
    }
    fn bytes(&self) -> StoreBytes {
        let mut memory = 0u64;
        for p in 0..self.parts.len() {
            let part = self.part(p);
            for side in &part.sides {
                memory += side.runs.iter().map(Run::bytes).sum::<u64>();
            }
        }
        StoreBytes { memory, disk: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Runs merged LSM-style answer every query exactly as per-layer sets do.
        #[test]
        fn merged_runs_answer_like_plain_layers(layers in proptest::collection::vec(proptest::collection::btree_set(0u64..5000, 0..60), 1..40),
                                              probes in proptest::collection::vec(0u64..5000, 50)) {
            // keys unique across layers, as BFS guarantees
            let mut seen = std::collections::BTreeSet::new();
            let layers: Vec<Vec<u64>> = layers.into_iter().map(|l| l.into_iter().filter(|k| seen.insert(*k)).collect()).collect();
            let store = MemStore::<u64>::new(1);
            for l in &layers {
                store.push_layer(Side::Forward, 0, l.clone()).unwrap();
                store.seal_layer(Side::Forward).unwrap();
            }
            prop_assert_eq!(store.layers(Side::Forward), layers.len());
            for (i, l) in layers.iter().enumerate() {
                prop_assert_eq!(store.layer_len(Side::Forward, i, 0), l.len() as u64);
                let mut got = Vec::new();
                store.for_each_chunk(Side::Forward, i, 0, &mut |c| { got.extend_from_slice(c); Ok(()) }).unwrap();
                prop_assert_eq!(&got, l);
                for p in &probes {
                    prop_assert_eq!(store.contains(Side::Forward, i, 0, p).unwrap(), l.contains(p));
                }
            }
            let mut probes_sorted = probes.clone();
            probes_sorted.sort_unstable();
            probes_sorted.dedup();
            let mut c = probes_sorted.clone();
            store.retain_unseen(Side::Forward, 0, &mut c).unwrap();
            let expect: Vec<u64> = probes_sorted.iter().copied().filter(|k| !seen.contains(k)).collect();
            prop_assert_eq!(c, expect);
            let hit = store.find_any(Side::Forward, 0, &probes_sorted).unwrap();
            let expect_layer = layers.iter().position(|l| probes_sorted.iter().any(|k| l.contains(k)));
            prop_assert_eq!(hit.map(|h| h.1), expect_layer);
            if let Some((k, layer)) = hit {
                prop_assert!(layers[layer].contains(&k));
            }
        }
    }
}
