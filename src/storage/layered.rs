//! Sorted keys of one or more consecutive layers of a partition held in RAM,
//! each tagged with its layer's one-byte offset: the runs both partition stores
//! merge, LSM-style, so that duplicate and meeting checks visit O(log layers)
//! runs instead of every layer.

use crate::engine::partition::{first_common, gallop};

/// Sorted unique keys of layers `first..=first + 255` of a run whose first
/// layer the owner records; `offset[i]` is the layer of `keys[i]` minus that
/// first layer, and `offset` is empty when the keys are of one layer.
pub(crate) struct LayeredKeys<K> {
    keys: Vec<K>,
    offset: Vec<u8>,
}

impl<K: Ord + Copy> LayeredKeys<K> {
    /// One layer's sorted unique keys.
    pub(crate) fn single(keys: Vec<K>) -> Self {
        LayeredKeys { keys, offset: Vec::new() }
    }

    pub(crate) fn keys(&self) -> &[K] {
        &self.keys
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the keys are of more than one layer.
    pub(crate) fn merged(&self) -> bool {
        !self.offset.is_empty()
    }

    /// The layer offset of `keys()[i]`.
    pub(crate) fn offset_of(&self, i: usize) -> usize {
        self.offset.get(i).map_or(0, |&o| o as usize)
    }

    /// RAM held, by capacity.
    pub(crate) fn bytes(&self) -> u64 {
        (self.keys.capacity() * std::mem::size_of::<K>() + self.offset.capacity()) as u64
    }

    /// Appends keys, all larger than the last, to a layer being written (a
    /// run not yet merged: a store merges only sealed layers).
    pub(crate) fn extend_single(&mut self, keys: &[K]) {
        debug_assert!(!self.merged() && self.keys.last().is_none_or(|l| keys.first().is_none_or(|f| l < f)));
        self.keys.extend_from_slice(keys);
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.keys.shrink_to_fit();
        self.offset.shrink_to_fit();
    }

    /// RAM that merging runs holding `keys` keys in all would hold once done.
    pub(crate) fn merged_bytes(keys: usize) -> u64 {
        (keys * (std::mem::size_of::<K>() + 1)) as u64
    }

    /// Merges `a` and the newer `b`, whose first layer is `shift` layers after
    /// `a`'s. The layers of one side are disjoint, so no key is in both; the
    /// caller keeps the span within a byte (`shift` plus `b`'s offsets).
    pub(crate) fn merge(a: Self, b: Self, shift: usize) -> Self {
        debug_assert!(shift + b.offset.iter().copied().max().unwrap_or(0) as usize <= u8::MAX as usize);
        let n = a.keys.len() + b.keys.len();
        let mut keys = Vec::with_capacity(n);
        let mut offset = Vec::with_capacity(n);
        let (mut i, mut j) = (0, 0);
        while i < a.keys.len() || j < b.keys.len() {
            let take_a = j == b.keys.len() || (i < a.keys.len() && a.keys[i] < b.keys[j]);
            if take_a {
                keys.push(a.keys[i]);
                offset.push(a.offset_of(i) as u8);
                i += 1;
            } else {
                keys.push(b.keys[j]);
                offset.push((shift + b.offset_of(j)) as u8);
                j += 1;
            }
        }
        LayeredKeys { keys, offset }
    }

    /// Calls `f` with the keys of the layer at offset `off`, in order, at most
    /// `chunk` at a time.
    pub(crate) fn for_each_chunk<E>(
        &self,
        off: usize,
        chunk: usize,
        f: &mut dyn FnMut(&[K]) -> Result<(), E>,
    ) -> Result<(), E> {
        if !self.merged() {
            if off == 0 {
                for c in self.keys.chunks(chunk) {
                    f(c)?;
                }
            }
            return Ok(());
        }
        // an old layer inside a merged run: filtered out, a chunk at a time
        let mut buf = Vec::with_capacity(chunk.min(self.keys.len()));
        for (k, &o) in self.keys.iter().zip(&self.offset) {
            if o as usize == off {
                buf.push(*k);
                if buf.len() == chunk {
                    f(&buf)?;
                    buf.clear();
                }
            }
        }
        if !buf.is_empty() {
            f(&buf)?;
        }
        Ok(())
    }

    /// The key of sorted `keys` held here in the lowest layer (the smallest
    /// such key), with its layer offset, as a scan layer by layer would find.
    pub(crate) fn lowest_common(&self, keys: &[K]) -> Option<(K, usize)> {
        if !self.merged() {
            return first_common(keys, &self.keys).map(|k| (k, 0));
        }
        let mut best: Option<(K, usize)> = None;
        let mut j = 0;
        for k in keys {
            j = gallop(&self.keys, j, k);
            if self.keys.get(j) == Some(k) {
                let off = self.offset[j] as usize;
                if best.is_none_or(|(_, b)| off < b) {
                    best = Some((*k, off));
                }
            }
        }
        best
    }

    /// Whether `key` is in the layer at offset `off`.
    pub(crate) fn contains(&self, key: &K, off: usize) -> bool {
        self.keys.binary_search(key).is_ok_and(|i| self.offset_of(i) == off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Keys of layers merged in any grouping answer per layer as the
        /// layers themselves do.
        #[test]
        fn merged_keys_answer_like_their_layers(
            layers in proptest::collection::vec(proptest::collection::btree_set(0u32..3000, 0..50), 1..12),
            probes in proptest::collection::btree_set(0u32..3000, 0..80),
        ) {
            let mut seen = std::collections::BTreeSet::new();
            let layers: Vec<Vec<u32>> =
                layers.into_iter().map(|l| l.into_iter().filter(|k| seen.insert(*k)).collect()).collect();
            let merged = layers
                .iter()
                .enumerate()
                .map(|(i, l)| (i, LayeredKeys::single(l.clone())))
                .reduce(|(a0, a), (b0, b)| (a0, LayeredKeys::merge(a, b, b0 - a0)))
                .map(|(_, m)| m)
                .unwrap();
            prop_assert_eq!(merged.len(), seen.len());
            prop_assert!(merged.keys().windows(2).all(|w| w[0] < w[1]));
            let probes: Vec<u32> = probes.into_iter().collect();
            for (off, l) in layers.iter().enumerate() {
                let mut got = Vec::new();
                merged.for_each_chunk::<()>(off, 7, &mut |c| { got.extend_from_slice(c); Ok(()) }).unwrap();
                prop_assert_eq!(&got, l);
                for p in &probes {
                    prop_assert_eq!(merged.contains(p, off), l.contains(p));
                }
            }
            let want = layers.iter().enumerate().find_map(|(off, l)| probes.iter().find(|k| l.contains(k)).map(|k| (*k, off)));
            prop_assert_eq!(merged.lowest_common(&probes), want);
        }
    }
}
