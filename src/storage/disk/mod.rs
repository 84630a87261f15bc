//! The disk-backed partition store: every layer of every partition is a sorted
//! run of keys that lives in RAM while the partition's share of the memory budget
//! lasts and as a shard file (`DIR/{f|b}/p{partition}/L{layer}.shard`, the format
//! of [`crate::storage::shard`]) beyond it.
//!
//! Why per partition: the engine touches a partition from one thread at a time
//! (expand reads it, merge dedups against it), so each partition owns an equal
//! slice of the store's budget and decides alone, under its own lock, what to
//! keep in RAM. No global rebalancing, no cross-partition locking, and the sum of
//! the slices is the store's budget.
//!
//! Deep searches have hundreds of layers, and every step checks its candidates
//! against every layer of both sides; one file per layer would make that a
//! block read per layer and partition per step. So older disk layers are merged,
//! LSM-style, eight at a time into runs `L{first}-{last}/p{partition}.shard`
//! whose keys carry their layer as a one-byte offset ([`TagKey`]: one byte per
//! state more, and the run still answers "is it in layer L" and "which layer").
//! Under [`SpillPolicy::KeepOldest`] (the default), older RAM layers are
//! merged in RAM the way the in-memory store merges its layers
//! ([`crate::storage::layered`]), so that a search that fits its budget checks
//! as few runs as it would without one; a durable store merges the RAM copies
//! of its checkpointed layers the same way, and their files stay as written.
//! The frontier is never merged.
//!
//! Lookups work the same on both media: RAM layers by merge or binary search,
//! disk runs through [`ShardReader::find_in_ranges`] (each block read at most
//! once, only blocks a query falls into) and [`ShardReader::contains`] (one
//! block). Open readers (one file descriptor and a block index each) are cached
//! while their index fits the partition's share and the descriptor cap allows;
//! beyond that a shard is reopened per access. An open reader keeps reading an
//! unlinked file (POSIX), so deleting a shard mid-run is noticed at its next
//! reopen, while truncation and corruption are noticed at the next read.
//!
//! *Durable* mode writes every non-empty partition layer once: one of more
//! than 64 KiB (`pack::PACK_MAX`) to its own shard file as its keys come, the smaller
//! ones (kept in RAM anyway) together into the layer's one pack at its seal
//! (`pack.rs`), and an empty one nowhere. A bound iteration's layers are
//! mostly thin, and a file per partition and layer was most of a cluster
//! layer's cost on disk. It makes all of a layer's files
//! durable at its seal (one `syncfs` of the store's filesystem on Linux, an
//! fsync per file and directory elsewhere), and then rewrites a small manifest recording how many layers of each side are
//! complete; [`DiskStore::open`] resumes from it (or from fewer layers, when
//! asked), ignoring any layer written after the last seal. This is the cluster
//! workers' checkpoint: a worker's store holds only its own partitions
//! ([`DiskOptions::held`]) and is tagged with its job, so a layer is written
//! once, in its final place, and a restarted worker reopens it as it was.
//! Durable stores do not compact their files (a checkpoint keeps what it wrote).
//!
//! Files: this one holds the store (its parts, runs and the `PartitionStore`
//! seam); `pack` the durable layer packs, `readers` the shard-reader cache,
//! `compact` the merging of old layers (on disk and in RAM), `manifest` the durable manifest,
//! `tests` the tests.
//!
//! Manifest (`DIR/manifest`, little-endian, written to `manifest.tmp`, fsynced
//! and renamed):
//!
//! ```text
//! 0      8  magic b"SKMANIF\0"
//! 8      4  manifest version (u32, = 3)
//! 12     4  key limbs (u32)
//! 16     4  partitions (u32, power of two)
//! 20     4  sealed forward layers (u32)
//! 24     4  sealed backward layers (u32)
//! 28     4  held partitions H (u32)
//! 32     8  tag (u64: the owner's name for the store, a cluster job id)
//! 40    4H  the held partitions (u32 each, increasing)
//! 40+4H  F  which forward layers have files: bit l*H+i (least significant
//!           first) for layer l of the i-th held partition, F = ceil(Lf*H/8)
//!           bytes for Lf sealed forward layers; unused bits zero
//! ..     B  the same for the backward layers, B = ceil(Lb*H/8)
//! ..  Pf+Pb which layers have a pack: bit l of ceil(Lf/8) bytes for the
//!           forward layers, then of ceil(Lb/8) for the backward ones
//! ..     8  xxh3-64 of every byte before it
//! ```

use crate::engine::partition::{remove_indices, subtract_sorted, PartitionStore, StoreBytes};
use crate::engine::{SeamError, Side};
use crate::model::key::StateKey;
use crate::storage::layered::LayeredKeys;
use crate::storage::shard::{sync_parent_dir, ShardMeta, ShardReader, ShardWriter};
use crate::storage::StorageError;
use rayon::prelude::*;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use xxhash_rust::xxh3::xxh3_64;

mod compact;
mod manifest;
mod pack;
mod readers;

use compact::*;
#[allow(unused_imports)]
use manifest::*;
pub use pack::pack_path;
use pack::*;
use readers::*;

/// Keys per chunk when streaming a RAM layer to the engine.
const CHUNK: usize = 4096;

/// Bytes on disk now and at most, shared by a store and an exchange writing
/// under one directory so that a run reports its peak disk use.
#[derive(Debug, Default)]
pub struct DiskUsage {
    current: AtomicU64,
    peak: AtomicU64,
}

impl DiskUsage {
    pub fn add(&self, bytes: u64) {
        let now = self.current.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(now, Ordering::AcqRel);
    }
    pub fn sub(&self, bytes: u64) {
        // saturating: a miscount must not wrap into an absurd figure
        let _ = self.current.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| Some(c.saturating_sub(bytes)));
    }
    pub fn current(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }
}

/// Which layers a partition keeps in RAM when they do not all fit its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpillPolicy {
    /// A layer stays where it was first put: RAM while the share lasts, disk
    /// after. Every layer is written at most once.
    KeepOldest,
    /// Each new layer evicts the oldest RAM layers (written out then) until it
    /// fits: the frontier stays in RAM, at the cost of writing more.
    KeepNewest,
    /// Every layer goes to disk; RAM holds only shard indexes.
    AllToDisk,
}

/// How a [`DiskStore`] uses memory and disk.
#[derive(Debug, Clone)]
pub struct DiskOptions {
    /// RAM for layers, pending layers and cached shard indexes, all partitions
    /// together.
    pub memory_bytes: u64,
    pub policy: SpillPolicy,
    /// Write and fsync every layer and keep a manifest, so that
    /// [`DiskStore::open`] can resume after the last sealed layer.
    pub durable: bool,
    /// The partitions this store holds keys of (a cluster worker's own); all
    /// when `None`. A durable store writes files for these only.
    pub held: Option<Vec<usize>>,
    /// What the manifest names the store after; [`DiskStore::open`] refuses
    /// a store with another tag.
    pub tag: u64,
    /// Most shard readers (file descriptors) kept open at once.
    pub max_open_shards: usize,
    /// Shared disk accounting (e.g. with the exchange); a private one if `None`.
    pub usage: Option<Arc<DiskUsage>>,
}

impl Default for DiskOptions {
    fn default() -> Self {
        DiskOptions {
            memory_bytes: 0,
            policy: SpillPolicy::KeepOldest,
            durable: false,
            held: None,
            tag: 0,
            max_open_shards: default_max_open_shards(),
            usage: None,
        }
    }
}

/// Half the soft descriptor limit (the rest is the process's), at most 8192.
pub fn default_max_open_shards() -> usize {
    crate::sys::open_files_limit().map_or(256, |n| (n / 2).clamp(16, 8192) as usize)
}

/// Where a run's file is: `L{first}` for one layer (plain keys), `L{first}-{last}`
/// for a merged run ([`TagKey`]s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileName {
    first: usize,
    last: usize,
}

impl FileName {
    fn tagged(self) -> bool {
        self.last > self.first
    }
    fn path(self, dir: &Path, side: Side, p: usize) -> PathBuf {
        let layer = if self.tagged() { format!("L{}-{}", self.first, self.last) } else { format!("L{}", self.first) };
        // one directory per partition: threads merge different partitions, and
        // creating files in one shared directory serialises them on its lock
        dir.join(side_dir(side)).join(format!("p{p}")).join(format!("{layer}.shard"))
    }
}

/// A run's shard file.
struct Shard<K: StateKey> {
    file: FileName,
    bytes: u64,
    reader: Option<Box<Reader<K>>>,
    /// RAM charged to the partition for the cached reader.
    reader_mem: u64,
    /// The cached reader is in the small-reader pool (charged to no partition).
    pooled: bool,
}

/// One partition's layers `first..first + lens.len()` of one side: in RAM (one
/// layer, or older RAM layers merged), on disk, or both (durable mode keeps a
/// RAM copy of a written layer while it fits). Layers no run covers are empty.
struct Run<K: StateKey> {
    first: usize,
    /// Keys per layer.
    lens: Vec<u64>,
    keys: Option<LayeredKeys<K>>,
    shard: Option<Shard<K>>,
    /// Order of arrival across both sides, for [`SpillPolicy::KeepNewest`].
    seq: u64,
    /// Merges this run's keys went through (0: a single layer).
    tier: u8,
}

impl<K: StateKey> Run<K> {
    fn last(&self) -> usize {
        self.first + self.lens.len().max(1) - 1
    }
    fn len(&self) -> u64 {
        self.lens.iter().sum()
    }
    fn ram_bytes(&self) -> u64 {
        self.keys.as_ref().map_or(0, LayeredKeys::bytes)
    }
    fn on_disk_only(&self) -> bool {
        self.keys.is_none() && self.shard.is_some()
    }
}

struct Part<K: StateKey> {
    /// Sorted by `first`, disjoint.
    runs: [Vec<Run<K>>; 2],
    pending: [Option<Run<K>>; 2],
    /// The shard being written for the pending layer when it did not fit in RAM
    /// (or the store is durable); finished by `end_layer` or `seal_layer`.
    writer: [Option<ShardWriter<K>>; 2],
    /// RAM charged to this partition: keys, cached readers, run records.
    mem: u64,
}

impl<K: StateKey> Part<K> {
    /// The run holding `layer`, and the layer's offset in it.
    fn run_of(&mut self, side: Side, layer: usize) -> Option<(&mut Run<K>, usize)> {
        let runs = &mut self.runs[side.index()];
        let i = runs.partition_point(|r| r.first <= layer).checked_sub(1)?;
        let r = &mut runs[i];
        let off = layer.checked_sub(r.first)?;
        (layer <= r.last()).then_some((r, off))
    }
}

/// The per-run record cost, charged so that thousands of layers of many
/// partitions cannot quietly outgrow the budget.
const RUN_RECORD: u64 = (std::mem::size_of::<Run<u64>>() + 16) as u64;

/// A [`PartitionStore`] whose layers spill to shard files beyond a memory share.
pub struct DiskStore<K: StateKey> {
    dir: PathBuf,
    opts: DiskOptions,
    part_share: u64,
    parts: Vec<Mutex<Part<K>>>,
    sealed: [AtomicUsize; 2],
    open_readers: AtomicUsize,
    /// Readers in the small-reader pool ([`SMALL_READERS`]).
    small_readers: AtomicUsize,
    usage: Arc<DiskUsage>,
    disk_bytes: AtomicU64,
    disk_keys: AtomicU64,
    merges: AtomicU64,
    seq: AtomicU64,
    /// Durable mode: per side, which sealed layers of the held partitions
    /// have a file of their own (see [`Manifest::files`]), and which layers
    /// have a pack ([`Manifest::packs`]), for the manifest.
    files: Mutex<([Bits; 2], [Bits; 2])>,
}

fn side_dir(side: Side) -> &'static str {
    match side {
        Side::Forward => "f",
        Side::Backward => "b",
    }
}

/// The path of one single-layer shard of a store rooted at `dir`.
pub fn shard_path(dir: &Path, side: Side, layer: usize, partition: usize) -> PathBuf {
    FileName { first: layer, last: layer }.path(dir, side, partition)
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> StorageError + 'a {
    move |e| StorageError::io(path, op, e)
}

impl<K: StateKey> PartitionStore<K> for DiskStore<K> {
    fn partitions(&self) -> usize {
        self.parts.len()
    }

    fn layers(&self, side: Side) -> usize {
        self.sealed[side.index()].load(Ordering::Acquire)
    }

    fn layer_len(&self, side: Side, layer: usize, partition: usize) -> u64 {
        let mut g = self.part(partition);
        g.run_of(side, layer).map_or(0, |(r, off)| r.lens.get(off).copied().unwrap_or(0))
    }

    fn for_each_chunk(
        &self,
        side: Side,
        layer: usize,
        partition: usize,
        f: &mut dyn FnMut(&[K]) -> Result<(), SeamError>,
    ) -> Result<(), SeamError> {
        let mut g = self.part(partition);
        let Part { runs, mem, .. } = &mut *g;
        let i = runs[side.index()].partition_point(|r| r.first <= layer);
        let Some(run) = i.checked_sub(1).map(|i| &mut runs[side.index()][i]).filter(|r| layer <= r.last()) else {
            return Ok(());
        };
        let off = layer - run.first;
        if run.lens.get(off).copied().unwrap_or(0) == 0 {
            return Ok(());
        }
        if let Some(keys) = &run.keys {
            return keys.for_each_chunk(off, CHUNK, f);
        }
        self.with_reader(run, mem, side, partition, |r| match r {
            Reader::Plain(x) => x.for_each_block(|b| f(b)),
            Reader::Tagged(x) => {
                // one layer of a merged run: the others are skipped
                let mut chunk = Vec::new();
                x.for_each_block(|b| {
                    chunk.clear();
                    chunk.extend(b.iter().filter(|t| t.offset as usize == off).map(|t| t.key));
                    if chunk.is_empty() {
                        Ok(())
                    } else {
                        f(&chunk)
                    }
                })
            }
        })
    }

    fn retain_unseen(&self, side: Side, partition: usize, candidates: &mut Vec<K>) -> Result<(), SeamError> {
        let mut g = self.part(partition);
        let Part { runs, mem, .. } = &mut *g;
        let mut hits = Vec::new();
        // newest runs first: in BFS most duplicates are recent
        for run in runs[side.index()].iter_mut().rev() {
            if candidates.is_empty() {
                break;
            }
            if run.len() == 0 {
                continue;
            }
            if let Some(keys) = &run.keys {
                subtract_sorted(candidates, keys.keys());
                continue;
            }
            hits.clear();
            self.with_reader(run, mem, side, partition, |r| probe(r, candidates, |i, _| hits.push(i)))?;
            remove_indices(candidates, &hits);
        }
        Ok(())
    }

    fn find_any(&self, side: Side, partition: usize, keys: &[K]) -> Result<Option<(K, usize)>, SeamError> {
        if keys.is_empty() {
            return Ok(None);
        }
        let mut g = self.part(partition);
        let Part { runs, mem, .. } = &mut *g;
        // oldest runs first; within a merged run, the lowest layer, then the
        // smallest key, as a scan layer by layer would find
        for run in runs[side.index()].iter_mut() {
            if run.len() == 0 {
                continue;
            }
            if let Some(ram) = &run.keys {
                if let Some((k, off)) = ram.lowest_common(keys) {
                    return Ok(Some((k, run.first + off)));
                }
                continue;
            }
            let mut best: Option<(u8, usize)> = None;
            self.with_reader(run, mem, side, partition, |r| {
                probe(r, keys, |i, off| match best {
                    Some(b) if b <= (off, i) => {}
                    _ => best = Some((off, i)),
                })
            })?;
            if let Some((off, i)) = best {
                let (first, span) = (run.first, run.lens.len());
                if off as usize >= span {
                    return Err(StorageError::Misplaced {
                        path: run.shard.as_ref().map_or_else(PathBuf::new, |s| s.file.path(&self.dir, side, partition)),
                        reason: format!("a key carries layer offset {off} in a run of {span} layers"),
                    }
                    .into());
                }
                return Ok(keys.get(i).map(|k| (*k, first + off as usize)));
            }
        }
        Ok(None)
    }

    fn contains(&self, side: Side, layer: usize, partition: usize, key: &K) -> Result<bool, SeamError> {
        let mut g = self.part(partition);
        let Part { runs, mem, .. } = &mut *g;
        let i = runs[side.index()].partition_point(|r| r.first <= layer);
        let Some(run) = i.checked_sub(1).map(|i| &mut runs[side.index()][i]).filter(|r| layer <= r.last()) else {
            return Ok(false);
        };
        let off = layer - run.first;
        if run.lens.get(off).copied().unwrap_or(0) == 0 {
            return Ok(false);
        }
        if let Some(keys) = &run.keys {
            return Ok(keys.contains(key, off));
        }
        Ok(self.with_reader(run, mem, side, partition, |r| match r {
            Reader::Plain(x) => x.contains(key),
            Reader::Tagged(x) => x.contains(&TagKey { key: *key, offset: off as u8 }),
        })?)
    }

    fn push_layer(&self, side: Side, partition: usize, mut keys: Vec<K>) -> Result<(), SeamError> {
        if !self.holds(partition) {
            return self.refuse_unheld(side, partition, keys.len());
        }
        keys.shrink_to_fit();
        let s = side.index();
        let layer = self.layers(side);
        let len = keys.len() as u64;
        let bytes = (keys.capacity() * std::mem::size_of::<K>()) as u64;
        let mut g = self.part(partition);
        let part = &mut *g;
        part.writer[s] = None; // an unfinished writer removes its temporary file
        if let Some(old) = part.pending[s].take() {
            self.discard(side, partition, old, &mut part.mem);
        }
        // an empty start costs no file: a layer that stays empty has no run
        // (durable or not: a durable store writes a small layer into its
        // layer's pack at the seal, a large one to its own file as it comes,
        // and its manifest records which layers have which)
        let fits = len == 0 || self.layer_fits(part, partition, RUN_RECORD + bytes)?;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut run = Run { first: layer, lens: vec![len], keys: None, shard: None, seq, tier: 0 };
        if !fits || (self.opts.durable && len * size_of::<K>() as u64 > PACK_MAX) {
            // kept open: a streaming merge may append more of this layer
            part.writer[s] = Some(self.start_layer(side, layer, partition, &keys)?);
        }
        if fits {
            part.mem += bytes;
            run.keys = Some(LayeredKeys::single(keys));
        }
        part.mem += RUN_RECORD;
        part.pending[s] = Some(run);
        Ok(())
    }

    fn append_layer(&self, side: Side, partition: usize, keys: Vec<K>) -> Result<(), SeamError> {
        if !self.holds(partition) {
            return self.refuse_unheld(side, partition, keys.len());
        }
        let s = side.index();
        let mut g = self.part(partition);
        let part = &mut *g;
        if part.pending[s].is_none() {
            drop(g);
            return self.push_layer(side, partition, keys);
        }
        let extra = (keys.len() * std::mem::size_of::<K>()) as u64;
        let in_ram = part.pending[s].as_ref().is_some_and(|r| r.keys.is_some());
        let fits = in_ram && self.layer_fits(part, partition, extra)?;
        let layer = self.layers(side);
        let Some(run) = part.pending[s].as_mut() else { return Ok(()) };
        run.lens[0] += keys.len() as u64;
        if !fits {
            if let Some(ram) = run.keys.take() {
                // the RAM copy goes; what the writer lacks of it is written first
                if part.writer[s].is_none() {
                    part.writer[s] = Some(self.start_layer(side, layer, partition, ram.keys())?);
                }
                part.mem = part.mem.saturating_sub(ram.bytes());
            }
        }
        if self.opts.durable && part.writer[s].is_none() && run.lens[0] * size_of::<K>() as u64 > PACK_MAX {
            // too large for the layer's pack now: its own file starts, with
            // what the RAM copy holds so far
            let so_far = run.keys.as_ref().map_or(&[][..], LayeredKeys::keys);
            part.writer[s] = Some(self.start_layer(side, layer, partition, so_far)?);
        }
        match part.writer[s].as_mut() {
            Some(w) => {
                for &k in &keys {
                    w.push(k)?;
                }
            }
            None if !fits => {
                return Err(StorageError::Misplaced {
                    path: FileName { first: layer, last: layer }.path(&self.dir, side, partition),
                    reason: "keys appended to a layer that was already ended".into(),
                }
                .into())
            }
            None => {}
        }
        if fits {
            if let Some(ram) = run.keys.as_mut() {
                let before = ram.bytes();
                ram.extend_single(&keys);
                part.mem += ram.bytes() - before;
            }
        }
        Ok(())
    }

    fn end_layer(&self, side: Side, partition: usize) -> Result<(), SeamError> {
        let mut g = self.part(partition);
        let part = &mut *g;
        if let Some(ram) = part.pending[side.index()].as_mut().and_then(|r| r.keys.as_mut()) {
            let before = ram.bytes();
            ram.shrink_to_fit();
            part.mem = part.mem.saturating_sub(before - ram.bytes());
        }
        Ok(self.end_pending(part, side.index())?)
    }

    fn seal_layer(&self, side: Side) -> Result<(), SeamError> {
        let s = side.index();
        let layer = self.layers(side);
        for p in 0..self.parts.len() {
            let mut g = self.part(p);
            self.end_pending(&mut g, s)?;
            let part = &mut *g;
            if part.pending[s].as_ref().is_some_and(|r| r.len() == 0) {
                // an empty layer is the absence of a run (and of a file)
                if let Some(run) = part.pending[s].take() {
                    self.discard(side, p, run, &mut part.mem);
                }
            }
            if let Some(run) = g.pending[s].take() {
                g.runs[s].push(run);
            }
        }
        if self.opts.durable {
            self.checkpoint_layer(side, layer)?;
            // every file of the layer and every directory entry must reach
            // disk before the manifest names them: one syncfs of the store's
            // filesystem (instead of two fsyncs per partition, which were
            // most of a cluster layer's fixed cost); elsewhere the writers
            // synced their files and entries, and the partitions' parent here
            if !crate::sys::sync_filesystem(&self.dir).map_err(|e| StorageError::io(&self.dir, "syncing", e))? {
                sync_parent_dir(&self.dir.join(side_dir(side)).join("p0"))?;
            }
            self.sealed[s].fetch_add(1, Ordering::AcqRel);
            self.write_manifest()?;
            // the checkpoint is on disk: the RAM copies of older layers merge
            (0..self.parts.len()).into_par_iter().for_each(|p| self.merge_ram(&mut self.part(p), s));
            return Ok(());
        }
        self.sealed[s].fetch_add(1, Ordering::AcqRel);
        Ok((0..self.parts.len()).into_par_iter().try_for_each(|p| self.compact(side, p))?)
    }

    fn abort_layer(&self, side: Side) {
        for p in 0..self.parts.len() {
            let mut g = self.part(p);
            let part = &mut *g;
            part.writer[side.index()] = None;
            if let Some(run) = part.pending[side.index()].take() {
                self.discard(side, p, run, &mut part.mem);
            }
        }
    }

    fn bytes(&self) -> StoreBytes {
        let memory = (0..self.parts.len()).map(|p| self.part(p).mem).sum();
        StoreBytes { memory, disk: self.disk_bytes() }
    }
}

impl<K: StateKey> DiskStore<K> {
    /// A new, empty store in `dir` with `partitions` partitions. Refuses a
    /// directory that already holds a durable store. A durable store creates
    /// its directories at once; any other creates them with its first file,
    /// so a search whose layers all fit in RAM never touches the disk (a
    /// solve runs one store per bound iteration, most of them small).
    pub fn create(dir: &Path, partitions: usize, opts: DiskOptions) -> Result<Self, StorageError> {
        let manifest = dir.join(MANIFEST_NAME);
        if manifest.exists() {
            return Err(StorageError::BadManifest {
                path: manifest,
                reason: "the directory already holds a store; open it to resume or remove it".into(),
            });
        }
        let store = Self::empty(dir, partitions, opts);
        if store.opts.durable {
            for side in [Side::Forward, Side::Backward] {
                let d = dir.join(side_dir(side));
                fs::create_dir_all(&d).map_err(io(&d, "creating directory"))?;
            }
            store.write_manifest()?;
        }
        Ok(store)
    }

    fn empty(dir: &Path, partitions: usize, opts: DiskOptions) -> Self {
        let partitions = partitions.max(1);
        let usage = opts.usage.clone().unwrap_or_default();
        DiskStore {
            dir: dir.to_path_buf(),
            part_share: opts.memory_bytes / partitions as u64,
            opts,
            parts: (0..partitions)
                .map(|_| {
                    Mutex::new(Part {
                        runs: [Vec::new(), Vec::new()],
                        pending: [None, None],
                        writer: [None, None],
                        mem: 0,
                    })
                })
                .collect(),
            sealed: [AtomicUsize::new(0), AtomicUsize::new(0)],
            open_readers: AtomicUsize::new(0),
            small_readers: AtomicUsize::new(0),
            usage,
            disk_bytes: AtomicU64::new(0),
            disk_keys: AtomicU64::new(0),
            merges: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            files: Mutex::default(),
        }
    }

    /// Reopens a durable store from its manifest: the sealed layers of both
    /// sides (or the first `keep[side]` of them), each shard checked (header,
    /// index, and that it is the shard of that side, layer and partition). Files
    /// of layers past those (an interrupted step) are removed. `opts.tag` and
    /// `opts.held` (when given) must be the manifest's.
    pub fn open(dir: &Path, mut opts: DiskOptions, keep: Option<[usize; 2]>) -> Result<Self, StorageError> {
        opts.durable = true;
        let path = dir.join(MANIFEST_NAME);
        let m = read_manifest(&path, K::LIMBS)?;
        let bad = |reason: String| StorageError::BadManifest { path: path.clone(), reason };
        if m.tag != opts.tag {
            return Err(bad(format!("the store is tagged {}, opened as {}", m.tag, opts.tag)));
        }
        if opts.held.as_ref().is_some_and(|h| *h != m.held) {
            return Err(bad(format!("the store holds partitions {:?}, opened for {:?}", m.held, opts.held)));
        }
        opts.held = Some(m.held.clone());
        let mut sealed = m.sealed;
        if let Some(keep) = keep {
            for side in [Side::Forward, Side::Backward] {
                let (have, want) = (m.sealed[side.index()], keep[side.index()]);
                if want > have {
                    return Err(bad(format!("{have} {} layers are sealed, {want} are needed", side.name())));
                }
                sealed[side.index()] = want;
            }
        }
        let store = Self::empty(dir, m.partitions, opts);
        let (mut files, mut packs) = (m.files.clone(), m.packs.clone());
        for side in [Side::Forward, Side::Backward] {
            let sealed = sealed[side.index()];
            files[side.index()].truncate(sealed * m.held.len());
            packs[side.index()].truncate(sealed);
            for layer in 0..sealed {
                if packs[side.index()].get(layer) {
                    store.reopen_pack(side, layer, &m.held, &files[side.index()])?;
                }
                for (i, &p) in m.held.iter().enumerate() {
                    if !files[side.index()].get(layer * m.held.len() + i) {
                        // an empty layer, or one in the pack: no file of its own
                        continue;
                    }
                    let file = FileName { first: layer, last: layer };
                    let r = ShardReader::<K>::open(&file.path(dir, side, p))?;
                    store.check_meta(r.path(), r.meta(), side, layer, p)?;
                    let mut g = store.part(p);
                    let seq = store.seq.fetch_add(1, Ordering::Relaxed);
                    let mut shard = Shard { file, bytes: r.bytes(), reader: None, reader_mem: 0, pooled: false };
                    store.disk_bytes.fetch_add(r.bytes(), Ordering::Relaxed);
                    store.disk_keys.fetch_add(r.len(), Ordering::Relaxed);
                    store.usage.add(r.bytes());
                    let run = Run { first: layer, lens: vec![r.len()], keys: None, shard: None, seq, tier: 0 };
                    g.mem += RUN_RECORD;
                    store.cache_reader(&mut shard, &mut g.mem, Reader::Plain(r));
                    g.runs[side.index()].push(Run { shard: Some(shard), ..run });
                }
            }
            store.sealed[side.index()].store(sealed, Ordering::Release);
            store.remove_stale_layers(side, sealed)?;
        }
        *store.files.lock().unwrap_or_else(|e| e.into_inner()) = (files, packs);
        if sealed != m.sealed {
            store.write_manifest()?;
        }
        Ok(store)
    }

    /// An empty layer of a partition this store does not hold is nothing; keys
    /// there would be lost at the next reopen, so they are refused.
    fn refuse_unheld(&self, side: Side, p: usize, keys: usize) -> Result<(), SeamError> {
        if keys == 0 {
            return Ok(());
        }
        Err(StorageError::Misplaced {
            path: shard_path(&self.dir, side, self.layers(side), p),
            reason: format!("{keys} keys for partition {p}, which this store does not hold"),
        }
        .into())
    }

    /// Does this store hold keys of partition `p`?
    fn holds(&self, p: usize) -> bool {
        self.opts.held.as_ref().is_none_or(|h| h.binary_search(&p).is_ok())
    }

    /// Deletes the files of layers `n >= sealed`: every partition's
    /// `p{p}/L{n}.shard`, the side's `L{n}.pack`, and their leftover
    /// temporaries.
    fn remove_stale_layers(&self, side: Side, sealed: usize) -> Result<(), StorageError> {
        let list = |d: &Path| match fs::read_dir(d) {
            Ok(e) => e.map(|e| e.map(|e| e.path()).map_err(io(d, "listing"))).collect::<Result<Vec<_>, _>>(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(StorageError::io(d, "listing", e)),
        };
        // `L{n}.shard`, `L{n}.pack` and their temporaries; a merged run
        // `L{a}-{b}` is no durable store's
        let stale = |file: &Path| {
            file.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix('L'))
                .and_then(|n| n.split('.').next())
                .and_then(|n| n.parse::<usize>().ok())
                .is_some_and(|n| n >= sealed)
        };
        for entry in list(&self.dir.join(side_dir(side)))? {
            let files = if entry.is_dir() { list(&entry)? } else { vec![entry] };
            for file in files {
                if stale(&file) {
                    fs::remove_file(&file).map_err(io(&file, "removing stale layer"))?;
                }
            }
        }
        Ok(())
    }

    /// The directory the store lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Keys held in shard files.
    pub fn disk_keys(&self) -> u64 {
        self.disk_keys.load(Ordering::Acquire)
    }

    /// Bytes of this store's shard files.
    pub fn disk_bytes(&self) -> u64 {
        self.disk_bytes.load(Ordering::Acquire)
    }

    /// Shard readers currently open.
    pub fn open_shards(&self) -> usize {
        self.open_readers.load(Ordering::Acquire)
    }

    /// Runs merged so far.
    pub fn merges(&self) -> u64 {
        self.merges.load(Ordering::Acquire)
    }

    fn part(&self, p: usize) -> MutexGuard<'_, Part<K>> {
        self.parts[p].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn meta(side: Side, layer: usize, p: usize) -> ShardMeta {
        ShardMeta { side: side.index() as u8, partition: p as u32, layer: layer as u32 }
    }

    fn check_meta(&self, path: &Path, got: ShardMeta, side: Side, layer: usize, p: usize) -> Result<(), StorageError> {
        let want = Self::meta(side, layer, p);
        if got != want {
            return Err(StorageError::Misplaced {
                path: path.to_path_buf(),
                reason: format!(
                    "it holds side {} partition {} layer {}, expected side {} partition {} layer {}",
                    got.side, got.partition, got.layer, want.side, want.partition, want.layer
                ),
            });
        }
        Ok(())
    }

    /// The held partitions, increasing.
    fn held(&self) -> Vec<usize> {
        match &self.opts.held {
            Some(h) => h.clone(),
            None => (0..self.parts.len()).collect(),
        }
    }

    /// Durable mode, at a seal: writes the layer's pack (every held
    /// partition's layer that is in RAM only) and records which partitions
    /// have a file of their own and whether there is a pack, for the
    /// manifest, which names them so that a missing file is noticed at
    /// reopen.
    fn checkpoint_layer(&self, side: Side, layer: usize) -> Result<(), StorageError> {
        let s = side.index();
        let held = self.held();
        let mut own = Vec::with_capacity(held.len());
        let mut packed: Vec<(usize, Vec<K>)> = Vec::new();
        for &p in &held {
            let g = self.part(p);
            let run = g.runs[s].last().filter(|r| r.first == layer);
            own.push(run.is_some_and(|r| r.shard.is_some()));
            if let Some(keys) = run.filter(|r| r.shard.is_none()).and_then(|r| r.keys.as_ref()) {
                packed.push((p, keys.keys().to_vec()));
            }
        }
        if !packed.is_empty() {
            let sections: Vec<(usize, &[K])> = packed.iter().map(|(p, k)| (*p, k.as_slice())).collect();
            let bytes = encode(side, layer, &sections);
            let path = pack_path(&self.dir, side, layer);
            let tmp = path.with_extension("pack.tmp");
            let mut f = fs::File::create(&tmp).map_err(io(&tmp, "creating"))?;
            f.write_all(&bytes).map_err(io(&tmp, "writing"))?;
            // on Linux the seal's one syncfs makes it durable with the rest
            if !crate::sys::SYNC_FILESYSTEM {
                f.sync_all().map_err(io(&tmp, "syncing"))?;
            }
            drop(f);
            fs::rename(&tmp, &path).map_err(io(&tmp, "renaming"))?;
            // its bytes count as disk, its keys not as keys in shard files
            self.account_written(bytes.len() as u64, 0);
        }
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        own.into_iter().for_each(|has| files.0[s].push(has));
        files.1[s].push(!packed.is_empty());
        Ok(())
    }

    /// Reopening: the partition layers in `side`'s `layer`'s pack, back in
    /// RAM where they fit (as when they were written) and to their own files
    /// where they no longer do. `files` says which partitions have a file of
    /// their own for the layer: none may be in the pack too.
    fn reopen_pack(&self, side: Side, layer: usize, held: &[usize], files: &Bits) -> Result<(), StorageError> {
        let path = pack_path(&self.dir, side, layer);
        let bytes = fs::read(&path).map_err(io(&path, "reading"))?;
        let sections = decode::<K>(&path, &bytes, side, layer, held)?;
        self.account_written(bytes.len() as u64, 0);
        for (p, keys) in sections {
            // `decode` took only held partitions
            if held.binary_search(&p).is_ok_and(|i| files.get(layer * held.len() + i)) {
                return Err(StorageError::Misplaced {
                    path,
                    reason: format!("partition {p} is in it and in a file of its own, which the manifest names"),
                });
            }
            let mut g = self.part(p);
            let part = &mut *g;
            let bytes = (keys.capacity() * size_of::<K>()) as u64;
            let seq = self.seq.fetch_add(1, Ordering::Relaxed);
            let mut run = Run { first: layer, lens: vec![keys.len() as u64], keys: None, shard: None, seq, tier: 0 };
            if self.layer_fits(part, p, RUN_RECORD + bytes)? {
                part.mem += bytes;
                run.keys = Some(LayeredKeys::single(keys));
            } else {
                run.shard = Some(self.write_layer(side, layer, p, &keys)?);
            }
            part.mem += RUN_RECORD;
            part.runs[side.index()].push(run);
        }
        Ok(())
    }

    fn ensure_parent(path: &Path) -> Result<(), StorageError> {
        match path.parent() {
            Some(d) => fs::create_dir_all(d).map_err(io(d, "creating directory")),
            None => Ok(()),
        }
    }

    fn account_written(&self, bytes: u64, keys: u64) {
        self.disk_bytes.fetch_add(bytes, Ordering::AcqRel);
        self.disk_keys.fetch_add(keys, Ordering::AcqRel);
        self.usage.add(bytes);
    }

    /// Writes one partition's layer as a plain shard file.
    fn write_layer(&self, side: Side, layer: usize, p: usize, keys: &[K]) -> Result<Shard<K>, StorageError> {
        let w = self.start_layer(side, layer, p, keys)?;
        self.finish_layer(w, layer)
    }

    /// Starts the shard file of one partition's layer with its first `keys`;
    /// a streaming merge may push more before [`DiskStore::finish_layer`].
    fn start_layer(&self, side: Side, layer: usize, p: usize, keys: &[K]) -> Result<ShardWriter<K>, StorageError> {
        let path = FileName { first: layer, last: layer }.path(&self.dir, side, p);
        // the partition's folder is made by its first file: trying the file
        // first spares a `mkdir` per layer (a worker's store writes one file
        // per partition and layer)
        let w = match ShardWriter::<K>::create(&path, Self::meta(side, layer, p)) {
            Err(StorageError::Io { ref source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Self::ensure_parent(&path)?;
                ShardWriter::<K>::create(&path, Self::meta(side, layer, p))?
            }
            w => w?,
        };
        // a durable layer is synced once for all its files when it is sealed,
        // where the platform can sync a whole filesystem at once
        let mut w = if self.opts.durable && !crate::sys::SYNC_FILESYSTEM { w } else { w.unsynced() };
        for &k in keys {
            w.push(k)?;
        }
        Ok(w)
    }

    /// Completes a shard started by [`DiskStore::start_layer`].
    fn finish_layer(&self, w: ShardWriter<K>, layer: usize) -> Result<Shard<K>, StorageError> {
        let info = w.finish()?;
        self.account_written(info.bytes, info.keys);
        Ok(Shard {
            file: FileName { first: layer, last: layer },
            bytes: info.bytes,
            reader: None,
            reader_mem: 0,
            pooled: false,
        })
    }

    /// Whether `bytes` more of a layer fit `part`'s share under the policy
    /// (evicting older layers first under [`SpillPolicy::KeepNewest`]).
    fn layer_fits(&self, part: &mut Part<K>, p: usize, bytes: u64) -> Result<bool, StorageError> {
        Ok(match self.opts.policy {
            SpillPolicy::AllToDisk => false,
            SpillPolicy::KeepOldest => part.mem + bytes <= self.part_share,
            SpillPolicy::KeepNewest => {
                if bytes <= self.part_share {
                    self.evict_oldest(part, p, bytes)?;
                }
                part.mem + bytes <= self.part_share
            }
        })
    }

    /// Finishes the pending layer's shard of side `s`, if one is being written.
    fn end_pending(&self, part: &mut Part<K>, s: usize) -> Result<(), StorageError> {
        if let Some(w) = part.writer[s].take() {
            let Some(run) = part.pending[s].as_mut() else {
                return Err(StorageError::Misplaced {
                    path: self.dir.clone(),
                    reason: "a layer shard was written with no pending layer".into(),
                });
            };
            run.shard = Some(self.finish_layer(w, run.first)?);
        }
        Ok(())
    }

    /// Forgets a shard: its reader, its file and its accounting.
    fn drop_shard(&self, side: Side, p: usize, s: Shard<K>, keys: u64, mem: &mut u64) {
        *mem = mem.saturating_sub(s.reader_mem);
        if s.reader.is_some() {
            self.open_readers.fetch_sub(1, Ordering::AcqRel);
            if s.pooled {
                self.small_readers.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _ = self.disk_bytes.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| Some(c.saturating_sub(s.bytes)));
        let _ = self.disk_keys.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| Some(c.saturating_sub(keys)));
        self.usage.sub(s.bytes);
        // best effort: an orphan file is harmless. Directories stay (other
        // partitions may be about to write into them); the spill directory goes
        // as a whole at the end.
        let _ = fs::remove_file(s.file.path(&self.dir, side, p));
    }

    /// Forgets a run that will not be sealed, or that was merged into another.
    fn discard(&self, side: Side, p: usize, r: Run<K>, mem: &mut u64) {
        *mem = mem.saturating_sub(r.ram_bytes() + RUN_RECORD);
        let keys = r.len();
        if let Some(s) = r.shard {
            self.drop_shard(side, p, s, keys, mem);
        }
    }

    /// Writes out the oldest RAM layers of a partition until `need` more bytes
    /// fit its share ([`SpillPolicy::KeepNewest`]).
    fn evict_oldest(&self, part: &mut Part<K>, p: usize, need: u64) -> Result<(), StorageError> {
        while part.mem + need > self.part_share {
            let runs = &part.runs;
            let oldest = (0..2)
                .flat_map(|s| {
                    runs[s].iter().enumerate().filter(|(_, r)| r.keys.is_some()).map(move |(i, r)| (r.seq, s, i))
                })
                .min();
            let Some((_, s, i)) = oldest else { return Ok(()) };
            let side = Side::from_index(s);
            let r = &mut part.runs[s][i];
            if r.shard.is_none() {
                // RAM runs are merged under KeepOldest only, which evicts nothing
                let keys = r.keys.as_ref().map_or(&[][..], LayeredKeys::keys);
                r.shard = Some(self.write_layer(side, r.first, p, keys)?);
            }
            let freed = r.ram_bytes();
            r.keys = None;
            part.mem = part.mem.saturating_sub(freed);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
