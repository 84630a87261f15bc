//! The in-memory partition store: each layer of each partition is a sorted,
//! shrunk-to-fit vector of keys, so a stored state costs exactly its key width
//! (8 bytes for `u64` keys) plus a few bytes of vector header per layer.

use crate::engine::partition::{first_common, subtract_sorted, PartitionStore, StoreBytes};
use crate::engine::Side;
use crate::model::key::StateKey;
use crate::storage::StorageError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

struct Part<K> {
    layers: [Vec<Vec<K>>; 2],
    pending: [Option<Vec<K>>; 2],
}

/// Layers of every partition kept in RAM.
pub struct MemStore<K> {
    parts: Vec<Mutex<Part<K>>>,
    sealed: [AtomicUsize; 2],
}

impl<K: StateKey> MemStore<K> {
    pub fn new(partitions: usize) -> Self {
        MemStore {
            parts: (0..partitions)
                .map(|_| Mutex::new(Part { layers: [Vec::new(), Vec::new()], pending: [None, None] }))
                .collect(),
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
        self.part(partition).layers[side.index()].get(layer).map_or(0, |l| l.len() as u64)
    }
    fn for_each_chunk(
        &self,
        side: Side,
        layer: usize,
        partition: usize,
        f: &mut dyn FnMut(&[K]) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let part = self.part(partition);
        if let Some(l) = part.layers[side.index()].get(layer) {
            for chunk in l.chunks(4096) {
                f(chunk)?;
            }
        }
        Ok(())
    }
    fn retain_unseen(&self, side: Side, partition: usize, candidates: &mut Vec<K>) -> Result<(), StorageError> {
        let part = self.part(partition);
        // newest layers first: in BFS most duplicates are recent
        for l in part.layers[side.index()].iter().rev() {
            if candidates.is_empty() {
                break;
            }
            subtract_sorted(candidates, l);
        }
        Ok(())
    }
    fn find_any(&self, side: Side, partition: usize, keys: &[K]) -> Result<Option<(K, usize)>, StorageError> {
        let part = self.part(partition);
        for (i, l) in part.layers[side.index()].iter().enumerate() {
            if let Some(k) = first_common(keys, l) {
                return Ok(Some((k, i)));
            }
        }
        Ok(None)
    }
    fn contains(&self, side: Side, layer: usize, partition: usize, key: &K) -> Result<bool, StorageError> {
        Ok(self.part(partition).layers[side.index()].get(layer).is_some_and(|l| l.binary_search(key).is_ok()))
    }
    fn push_layer(&self, side: Side, partition: usize, mut keys: Vec<K>) -> Result<(), StorageError> {
        keys.shrink_to_fit();
        self.part(partition).pending[side.index()] = Some(keys);
        Ok(())
    }
    fn seal_layer(&self, side: Side) -> Result<(), StorageError> {
        for p in 0..self.parts.len() {
            let mut part = self.part(p);
            let layer = part.pending[side.index()].take().unwrap_or_default();
            part.layers[side.index()].push(layer);
        }
        self.sealed[side.index()].fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
    fn abort_layer(&self, side: Side) {
        for p in 0..self.parts.len() {
            self.part(p).pending[side.index()] = None;
        }
    }
    fn bytes(&self) -> StoreBytes {
        let mut memory = 0u64;
        for p in 0..self.parts.len() {
            let part = self.part(p);
            for side in &part.layers {
                memory += (side.capacity() * std::mem::size_of::<Vec<K>>()) as u64;
                for l in side {
                    memory += (l.capacity() * std::mem::size_of::<K>()) as u64;
                }
            }
        }
        StoreBytes { memory, disk: 0 }
    }
}
