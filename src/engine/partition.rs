//! The two seams the search is written against: where a partition's layers live
//! ([`PartitionStore`]) and how successor batches reach their owner partition
//! ([`Exchange`]). Local mode, the disk store and the cluster differ only in the
//! implementations plugged in here.

use super::SeamError;
use super::Side;
use crate::model::key::StateKey;
use std::sync::Mutex;

/// Maps keys to one of `2^bits` partitions by the top bits of the xxh3 hash of the
/// key shifted right by `shift` bits.
///
/// Why the shift: a rank key's low bits are the player and the lowest boxes, so
/// `key >> shift` is a cluster of neighbouring states, and hashing the cluster
/// keeps it in one partition. Shard files delta-code sorted keys, and a
/// partition that holds whole clusters has small gaps: on Microban #144 the
/// layers take 3.59 bytes per state at 16 partitions hashing the whole key, 2.05
/// hashing `key >> 20` (`examples/shard_density.rs`). The price is less even
/// partitions, so the shift grows with the key width ([`Partitioner::for_space`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partitioner {
    bits: u32,
    shift: u32,
}

impl Partitioner {
    /// `count` must be a power of two between 1 and 2^16. Hashes the whole key.
    pub fn new(count: usize) -> Partitioner {
        assert!(count.is_power_of_two() && count <= 1 << 16, "partition count must be a power of two <= 65536");
        Partitioner { bits: count.trailing_zeros(), shift: 0 }
    }
    /// `count` partitions for the keys of `space`, hashing clusters of
    /// neighbouring keys: `2/5` of the key's bits are dropped (measured on
    /// Microban #93, #139 and #144 at 16 partitions: 1.5 to 2.3 bytes per state on
    /// disk, largest partition of a layer at most 1.3 times the mean). Bitset
    /// keys (levels too big for a rank) hash whole.
    pub fn for_space(count: usize, space: &crate::model::key::KeySpace) -> Partitioner {
        Partitioner { shift: space.key_bits().map_or(0, |b| 2 * b / 5), ..Partitioner::new(count) }
    }
    #[inline]
    pub fn count(&self) -> usize {
        1 << self.bits
    }
    /// Bits of the key dropped before hashing.
    pub fn shift(&self) -> u32 {
        self.shift
    }
    #[inline]
    pub fn of<K: StateKey>(&self, key: &K) -> usize {
        if self.bits == 0 {
            0
        } else {
            (key.partition_hash(self.shift) >> (64 - self.bits)) as usize
        }
    }
}

/// Per-partition, per-side BFS layers. Each partition is touched by one thread at a
/// time during a phase, so implementations may lock per partition.
///
/// Invariants: a layer, once pushed, is immutable; keys inside a layer are sorted and
/// unique; a key lives only in the partition the [`Partitioner`] assigns it.
pub trait PartitionStore<K: StateKey>: Send + Sync {
    /// Number of partitions this store holds (all of them, even if some are empty).
    fn partitions(&self) -> usize;
    /// Number of completed layers of `side` (same for every partition).
    fn layers(&self, side: Side) -> usize;
    /// Size of one partition's layer.
    fn layer_len(&self, side: Side, layer: usize, partition: usize) -> u64;
    /// Streams one partition's layer in sorted chunks.
    fn for_each_chunk(
        &self,
        side: Side,
        layer: usize,
        partition: usize,
        f: &mut dyn FnMut(&[K]) -> Result<(), SeamError>,
    ) -> Result<(), SeamError>;
    /// Removes from `candidates` (sorted, unique, all of `partition`) every key
    /// already stored in any layer of `side`.
    fn retain_unseen(&self, side: Side, partition: usize, candidates: &mut Vec<K>) -> Result<(), SeamError>;
    /// For sorted, unique `keys` of `partition`: the first key found in any layer of
    /// `side`, with that layer.
    fn find_any(&self, side: Side, partition: usize, keys: &[K]) -> Result<Option<(K, usize)>, SeamError>;
    /// Is `key` in this layer?
    fn contains(&self, side: Side, layer: usize, partition: usize, key: &K) -> Result<bool, SeamError>;
    /// Appends the next layer of `side` for `partition` (sorted, unique). Every
    /// partition's next layer must be pushed before the layer counts as complete;
    /// [`PartitionStore::seal_layer`] marks that. Replaces anything pushed for it
    /// before in this layer.
    fn push_layer(&self, side: Side, partition: usize, keys: Vec<K>) -> Result<(), SeamError>;
    /// Extends the next layer of `partition` started by
    /// [`PartitionStore::push_layer`] with `keys` (sorted, unique, all above the
    /// keys already in it), so a merge can stream a layer in chunks.
    fn append_layer(&self, side: Side, partition: usize, keys: Vec<K>) -> Result<(), SeamError>;
    /// Says that `partition`'s next layer is complete (no more appends), so the
    /// store can finish what it writes for it before the whole layer is sealed.
    fn end_layer(&self, _side: Side, _partition: usize) -> Result<(), SeamError> {
        Ok(())
    }
    /// Declares the layer whose partitions were just pushed complete.
    fn seal_layer(&self, side: Side) -> Result<(), SeamError>;
    /// Drops the partial layer being built (after a cancelled phase).
    fn abort_layer(&self, side: Side);
    /// Bytes the store holds in memory and on disk.
    fn bytes(&self) -> StoreBytes;
}

/// Memory and disk held by a store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreBytes {
    pub memory: u64,
    pub disk: u64,
}

/// Routes successor batches to their owner partition between the expand phase and
/// the merge phase of a layer.
pub trait Exchange<K: StateKey>: Send + Sync {
    /// Delivers a batch of keys that all belong to `partition`. Called from many
    /// threads during expansion.
    fn send(&self, partition: usize, batch: Vec<K>) -> Result<(), SeamError>;
    /// After every sender is done: all keys delivered to `partition` (unsorted,
    /// possibly with duplicates), leaving it empty.
    fn take(&self, partition: usize) -> Result<Vec<K>, SeamError>;
    /// Like [`Exchange::take`], but sorted and unique and handed to `f` in
    /// increasing chunks of about `chunk_keys`, so that a merge need not hold a
    /// partition's candidates at once. The default holds them (one chunk).
    fn take_sorted(
        &self,
        partition: usize,
        _chunk_keys: usize,
        f: &mut dyn FnMut(Vec<K>) -> Result<(), SeamError>,
    ) -> Result<(), SeamError> {
        let mut keys = self.take(partition)?;
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return Ok(());
        }
        f(keys)
    }
    /// Candidates per chunk a merge should ask [`Exchange::take_sorted`] for.
    fn merge_chunk_keys(&self) -> usize {
        usize::MAX
    }
    /// Drops everything held (after a cancelled phase).
    fn clear(&self);
    /// Bytes currently buffered in memory.
    fn buffered_bytes(&self) -> u64;
    /// Keys per batch the expand phase should route to one partition at a time.
    /// Every expanding thread holds up to one batch per partition, so a memory
    /// budget caps this.
    fn route_batch(&self) -> usize {
        DEFAULT_ROUTE_BATCH
    }
}

/// Routing batch when no budget asks for less.
pub const DEFAULT_ROUTE_BATCH: usize = 2048;

/// A partition's candidates: keys, and how many of them at the front are already
/// sorted and unique.
#[derive(Default)]
struct Buffer<K> {
    keys: Vec<K>,
    compacted: usize,
}

/// Buffers shorter than this are never compacted.
const COMPACT_MIN: usize = 1 << 15;

/// The in-process exchange: one locked buffer per partition. A buffer that has
/// doubled since it was last compacted is sorted and deduplicated in place: a
/// layer's successors repeat a lot (generated is often 3 times the new states),
/// and holding the repeats would dominate peak memory.
pub struct LocalExchange<K> {
    buffers: Vec<Mutex<Buffer<K>>>,
}

impl<K: StateKey> LocalExchange<K> {
    pub fn new(partitions: usize) -> Self {
        LocalExchange {
            buffers: (0..partitions).map(|_| Mutex::new(Buffer { keys: Vec::new(), compacted: 0 })).collect(),
        }
    }

    fn lock(&self, partition: usize) -> std::sync::MutexGuard<'_, Buffer<K>> {
        self.buffers[partition].lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<K: StateKey> Exchange<K> for LocalExchange<K> {
    fn send(&self, partition: usize, mut batch: Vec<K>) -> Result<(), SeamError> {
        let mut buf = self.lock(partition);
        if buf.keys.is_empty() {
            std::mem::swap(&mut buf.keys, &mut batch);
        } else {
            buf.keys.append(&mut batch);
        }
        if buf.keys.len() >= COMPACT_MIN && buf.keys.len() >= 2 * buf.compacted {
            buf.keys.sort_unstable();
            buf.keys.dedup();
            buf.compacted = buf.keys.len();
            let len = buf.keys.len();
            if buf.keys.capacity() > 2 * len {
                buf.keys.shrink_to(len * 3 / 2);
            }
        }
        Ok(())
    }
    fn take(&self, partition: usize) -> Result<Vec<K>, SeamError> {
        Ok(std::mem::take(&mut *self.lock(partition)).keys)
    }
    fn clear(&self) {
        for p in 0..self.buffers.len() {
            *self.lock(p) = Buffer { keys: Vec::new(), compacted: 0 };
        }
    }
    fn buffered_bytes(&self) -> u64 {
        (0..self.buffers.len()).map(|p| (self.lock(p).keys.capacity() * std::mem::size_of::<K>()) as u64).sum()
    }
}

/// Removes from sorted, unique `cands` every key present in sorted `layer`
/// (a chunk of candidates is deduplicated before it is checked). A layer
/// smaller than the candidates is walked instead of them, galloping through
/// the candidates, and they are moved only where one is dropped: a deep,
/// narrow search checks each chunk of candidates against every stored layer
/// that is not merged with others, most of them far smaller than the chunk
/// or holding none of its keys.
pub fn subtract_sorted<K: Ord + Copy>(cands: &mut Vec<K>, layer: &[K]) {
    if layer.len() >= cands.len() {
        let mut j = 0;
        cands.retain(|k| {
            j = gallop(layer, j, k);
            !(j < layer.len() && layer[j] == *k)
        });
        return;
    }
    let mut hits = Vec::new();
    let mut i = 0;
    for k in layer {
        i = gallop(cands, i, k);
        if i == cands.len() {
            break;
        }
        if cands[i] == *k {
            hits.push(i);
            i += 1;
        }
    }
    remove_indices(cands, &hits);
}

/// Removes the entries at `hits` (ascending indices) from `v`, moving only
/// what lies after the first of them.
pub fn remove_indices<K: Copy>(v: &mut Vec<K>, hits: &[usize]) {
    let Some(&first) = hits.first() else { return };
    let mut w = first;
    for (h, &at) in hits.iter().enumerate() {
        let end = hits.get(h + 1).copied().unwrap_or(v.len());
        v.copy_within(at + 1..end, w);
        w += end - at - 1;
    }
    v.truncate(w);
}

/// The first key of sorted `keys` that is in sorted `layer` (the smallest
/// they share), walking the smaller of the two and galloping through the
/// other.
pub fn first_common<K: Ord + Copy>(keys: &[K], layer: &[K]) -> Option<K> {
    let (small, large) = if layer.len() < keys.len() { (layer, keys) } else { (keys, layer) };
    let mut j = 0;
    small.iter().copied().find(|k| {
        j = gallop(large, j, k);
        j < large.len() && large[j] == *k
    })
}

/// The first index `i >= from` of sorted `keys` with `keys[i] >= target`
/// (`keys.len()` if none), found by galloping from `from`: O(log gap) probes,
/// so a run of ascending queries costs about what a merge costs when they are
/// dense and what binary searches cost when they are sparse (within twice the
/// cheaper of the two), without having to guess which case it is.
#[inline]
pub fn gallop<K: Ord>(keys: &[K], from: usize, target: &K) -> usize {
    let n = keys.len();
    if from >= n || keys[from] >= *target {
        return from;
    }
    // keys[lo] < target throughout
    let (mut lo, mut step) = (from, 1);
    while lo + step < n && keys[lo + step] < *target {
        lo += step;
        step *= 2;
    }
    let hi = (lo + step).min(n);
    lo + 1 + keys[lo + 1..hi].partition_point(|k| k < target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn gallop_finds_the_lower_bound(mut keys in proptest::collection::vec(0u64..300, 0..200), from in 0usize..220, target in 0u64..310) {
            keys.sort_unstable();
            let from = from.min(keys.len());
            let want = from + keys[from..].partition_point(|k| *k < target);
            prop_assert_eq!(gallop(&keys, from, &target), want);
        }

        #[test]
        fn subtract_and_common_agree_with_sets(mut a in proptest::collection::vec(0u64..500, 0..200), mut b in proptest::collection::vec(0u64..500, 0..400)) {
            a.sort_unstable(); a.dedup(); b.sort_unstable(); b.dedup();
            let set: std::collections::BTreeSet<u64> = b.iter().copied().collect();
            let mut c = a.clone();
            subtract_sorted(&mut c, &b);
            let expect: Vec<u64> = a.iter().copied().filter(|k| !set.contains(k)).collect();
            prop_assert_eq!(&c, &expect);
            let first = a.iter().copied().find(|k| set.contains(k));
            prop_assert_eq!(first_common(&a, &b), first);
        }
    }

    const PINNED: [usize; 5] = [12, 2, 2, 2, 5];

    #[test]
    fn partitioner_is_stable_and_in_range() {
        // stable: another partitioner (another process, another machine: a
        // worker, a restarted coordinator, a resumed shard) puts every key in
        // the same partition, and the hash itself does not change between
        // builds (pinned values; a change would strand the keys of saved layers)
        let p = Partitioner::new(16);
        let again = Partitioner::new(16);
        let mut per = [0usize; 16];
        for k in 0u64..1000 {
            assert!(p.of(&k) < 16);
            assert_eq!(p.of(&k), again.of(&k));
            per[p.of(&k)] += 1;
        }
        let pinned: Vec<usize> = [0u64, 1, 2, 999, u64::MAX].iter().map(|k| p.of(k)).collect();
        assert_eq!(pinned, PINNED);
        // and even: 1000 keys give each of 16 partitions 62.5 on average
        assert!(per.iter().all(|&n| (35..=95).contains(&n)), "{per:?}");
        // a shift keeps runs of 2^shift neighbouring keys together
        let space = crate::model::key::KeySpace::new(60, 6).unwrap();
        let q = Partitioner::for_space(16, &space);
        assert!(q.shift() > 0);
        let run = 1u64 << q.shift();
        for k in (0..100u64).map(|i| i * run) {
            assert!((k..k + run).step_by((run / 7).max(1) as usize).all(|x| q.of(&x) == q.of(&k)));
        }
        let used: std::collections::HashSet<usize> = (0..1000u64).map(|i| q.of(&(i * run))).collect();
        assert_eq!(used.len(), 16);
        assert_eq!(Partitioner::new(1).of(&12345u64), 0);
    }
}
