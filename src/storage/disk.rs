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
//! The frontier and RAM layers are never merged; checkpoints (durable mode) keep
//! one file per layer.
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
//! *Durable* mode writes (and fsyncs) every layer at push time, and after each
//! seal rewrites a small manifest recording how many layers of each side are
//! complete; [`DiskStore::open`] resumes from it (or from fewer layers, when
//! asked), ignoring any layer written after the last seal. This is the cluster
//! workers' checkpoint: a worker's store holds only its own partitions
//! ([`DiskOptions::held`]) and is tagged with its job, so a layer is written
//! once, in its final place, and a restarted worker reopens it as it was.
//! Durable stores do not compact (a checkpoint keeps one file per layer).
//!
//! Manifest (`DIR/manifest`, little-endian, written to `manifest.tmp`, fsynced
//! and renamed):
//!
//! ```text
//! 0      8  magic b"SKMANIF\0"
//! 8      4  manifest version (u32, = 2)
//! 12     4  key limbs (u32)
//! 16     4  partitions (u32, power of two)
//! 20     4  sealed forward layers (u32)
//! 24     4  sealed backward layers (u32)
//! 28     4  held partitions H (u32)
//! 32     8  tag (u64: the owner's name for the store, a cluster job id)
//! 40    4H  the held partitions (u32 each, increasing)
//! 40+4H  8  xxh3-64 of every byte before it
//! ```

use crate::engine::partition::{first_common, subtract_sorted, PartitionStore, StoreBytes};
use crate::engine::{SeamError, Side};
use crate::model::key::StateKey;
use crate::storage::shard::{sync_parent_dir, ShardMeta, ShardReader, ShardWriter};
use crate::storage::StorageError;
use rayon::prelude::*;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use xxhash_rust::xxh3::xxh3_64;

const MANIFEST_MAGIC: [u8; 8] = *b"SKMANIF\0";
/// Manifest version written and accepted.
pub const MANIFEST_VERSION: u32 = 2;
/// Bytes of a manifest before its list of held partitions.
const MANIFEST_HEAD: usize = 40;
/// Name of the manifest file inside a durable store's directory.
pub const MANIFEST_NAME: &str = "manifest";
/// Keys per chunk when streaming a RAM layer to the engine.
const CHUNK: usize = 4096;
/// Bytes an open reader costs beyond its block index (struct, path, buffers).
const READER_BASE: u64 = 512;
/// Readers of small shards (a few blocks) cached outside the partitions' shares.
/// A tiny budget leaves no room in a partition's share for any reader, so
/// without this pool every lookup of a deep level's many small shards reopened
/// its file (measured on Microban #139 at a 0.82 MiB budget: 70,000 opens, most
/// of the spilled run's extra time). Part of the fixed overhead in README.md:
/// at most `SMALL_READERS * SMALL_READER_BYTES` = 1 MiB.
const SMALL_READERS: usize = 1024;
/// Largest reader cost the small-reader pool takes.
const SMALL_READER_BYTES: u64 = 1024;

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

/// A key of a merged run: the state key with its layer's offset in the run in the
/// low 8 bits, i.e. `key * 256 + offset` over one more limb. Layers of a side are
/// disjoint, so consecutive stored values differ by a key step times 256: one
/// byte per state more than a plain shard, and the run answers "which layer" for
/// every key. Ordered like that number.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct TagKey<K> {
    pub key: K,
    pub offset: u8,
}

impl<K: StateKey> StateKey for TagKey<K> {
    const LIMBS: usize = K::LIMBS + 1;
    const NAME: &'static str = "tagged";
    #[inline]
    fn limb(&self, i: usize) -> u64 {
        let k = |j: usize| if j < K::LIMBS { self.key.limb(j) } else { 0 };
        if i == 0 {
            (k(0) << 8) | self.offset as u64
        } else {
            (k(i) << 8) | (k(i - 1) >> 56)
        }
    }
    #[inline]
    fn from_limbs(limbs: &[u64]) -> Self {
        let mut k = [0u64; 16];
        let at = |j: usize| limbs.get(j).copied().unwrap_or(0);
        for (j, x) in k.iter_mut().enumerate().take(K::LIMBS) {
            *x = (at(j) >> 8) | (at(j + 1) << 56);
        }
        TagKey { key: K::from_limbs(&k[..K::LIMBS]), offset: (at(0) & 0xff) as u8 }
    }
    fn partition_hash(&self, shift: u32) -> u64 {
        self.key.partition_hash(shift)
    }
    fn encode(space: &crate::model::key::KeySpace, boxes: &[u16], player: u16) -> Self {
        TagKey { key: K::encode(space, boxes, player), offset: 0 }
    }
    fn decode(&self, space: &crate::model::key::KeySpace, boxes: &mut Vec<u16>) -> u16 {
        self.key.decode(space, boxes)
    }
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

enum Reader<K: StateKey> {
    Plain(ShardReader<K>),
    Tagged(ShardReader<TagKey<K>>),
}

impl<K: StateKey> Reader<K> {
    fn cost(&self) -> u64 {
        let (blocks, limbs) = match self {
            Reader::Plain(r) => (r.blocks(), K::LIMBS),
            Reader::Tagged(r) => (r.blocks(), K::LIMBS + 1),
        };
        // the parsed index entry plus its raw bytes (kept for the checksum)
        READER_BASE + blocks as u64 * (2 * limbs as u64 * 8 + 64)
    }
}

/// Counts one more on `counter` if it is below `limit`; whether it did.
fn take_below(counter: &AtomicUsize, limit: usize) -> bool {
    counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1)).is_ok()
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
/// layer), on disk, or both (durable mode keeps a RAM copy of a written layer
/// while it fits). Layers no run covers are empty.
struct Run<K: StateKey> {
    first: usize,
    /// Keys per layer.
    lens: Vec<u64>,
    keys: Option<Vec<K>>,
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
        self.keys.as_ref().map_or(0, |k| (k.capacity() * std::mem::size_of::<K>()) as u64)
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
/// Runs merged at once.
const MERGE_FANIN: usize = 8;
/// Longest layer span of a merged run (the offset is one byte).
const MAX_SPAN: usize = u8::MAX as usize;
/// Widest key a merged run can tag (the shard format holds 16 limbs).
const TAG_MAX_LIMBS: usize = 15;

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

/// Removes the ascending indices `hits` from `v`.
fn remove_indices<K: Copy>(v: &mut Vec<K>, hits: &[usize]) {
    if hits.is_empty() {
        return;
    }
    let (mut at, mut h) = (0, 0);
    v.retain(|_| {
        let drop = hits.get(h) == Some(&at);
        if drop {
            h += 1;
        }
        at += 1;
        !drop
    });
}

/// A pull source of tagged keys for merging two runs.
struct Source<'a, K: StateKey> {
    cursor: Cursor<'a, K>,
    /// Added to every offset: where the source's first layer sits in the output.
    base: u8,
    buf: Vec<TagKey<K>>,
    pos: usize,
    path: &'a Path,
}

fn source<K: StateKey>(r: &Reader<K>, base: usize) -> Source<'_, K> {
    let (cursor, path) = match r {
        Reader::Plain(x) => (Cursor::Plain(x.block_cursor()), x.path()),
        Reader::Tagged(x) => (Cursor::Tagged(x.block_cursor()), x.path()),
    };
    Source { cursor, base: base as u8, buf: Vec::new(), pos: 0, path }
}

enum Cursor<'a, K: StateKey> {
    Plain(crate::storage::shard::Blocks<'a, K>),
    Tagged(crate::storage::shard::Blocks<'a, TagKey<K>>),
}

impl<K: StateKey> Source<'_, K> {
    fn peek(&mut self) -> Result<Option<TagKey<K>>, StorageError> {
        while self.pos >= self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            let base = self.base;
            match &mut self.cursor {
                Cursor::Plain(c) => match c.next_block()? {
                    Some(b) => self.buf.extend(b.iter().map(|&key| TagKey { key, offset: base })),
                    None => return Ok(None),
                },
                Cursor::Tagged(c) => match c.next_block()? {
                    Some(b) => {
                        for t in b {
                            let Some(offset) = t.offset.checked_add(base) else {
                                return Err(StorageError::Misplaced {
                                    path: self.path.to_path_buf(),
                                    reason: format!("a key's layer offset {} runs past the merged span", t.offset),
                                });
                            };
                            self.buf.push(TagKey { key: t.key, offset });
                        }
                    }
                    None => return Ok(None),
                },
            }
        }
        Ok(Some(self.buf[self.pos]))
    }
}

impl<K: StateKey> DiskStore<K> {
    /// A new, empty store in `dir` (created if missing) with `partitions`
    /// partitions. Refuses a directory that already holds a durable store.
    pub fn create(dir: &Path, partitions: usize, opts: DiskOptions) -> Result<Self, StorageError> {
        fs::create_dir_all(dir).map_err(io(dir, "creating directory"))?;
        let manifest = dir.join(MANIFEST_NAME);
        if manifest.exists() {
            return Err(StorageError::BadManifest {
                path: manifest,
                reason: "the directory already holds a store; open it to resume or remove it".into(),
            });
        }
        for side in [Side::Forward, Side::Backward] {
            let d = dir.join(side_dir(side));
            fs::create_dir_all(&d).map_err(io(&d, "creating directory"))?;
        }
        let store = Self::empty(dir, partitions, opts);
        if store.opts.durable {
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
        for side in [Side::Forward, Side::Backward] {
            let sealed = sealed[side.index()];
            for layer in 0..sealed {
                for &p in &m.held {
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

    /// Deletes `L{n}` directories with `n >= sealed` and leftover temporaries.
    fn remove_stale_layers(&self, side: Side, sealed: usize) -> Result<(), StorageError> {
        let d = self.dir.join(side_dir(side));
        let entries = match fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(StorageError::io(&d, "listing", e)),
        };
        for entry in entries {
            let entry = entry.map_err(io(&d, "listing"))?;
            let name = entry.file_name();
            let stale = name
                .to_str()
                .and_then(|n| n.strip_prefix('L'))
                .and_then(|n| n.parse::<usize>().ok())
                .is_some_and(|n| n >= sealed);
            if stale {
                let p = entry.path();
                fs::remove_dir_all(&p).map_err(io(&p, "removing stale layer"))?;
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
        Self::ensure_parent(&path)?;
        let w = ShardWriter::<K>::create(&path, Self::meta(side, layer, p))?;
        let mut w = if self.opts.durable { w } else { w.unsynced() };
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

    /// Keeps `r` open in `shard` if its index fits the partition's share and a
    /// descriptor is free; otherwise it is dropped (closed) here.
    fn cache_reader(&self, shard: &mut Shard<K>, mem: &mut u64, r: Reader<K>) {
        let cost = r.cost();
        if *mem + cost > self.part_share {
            if cost <= SMALL_READER_BYTES && self.take_small_reader() {
                shard.pooled = true;
                shard.reader = Some(Box::new(r));
            }
            return;
        }
        if take_below(&self.open_readers, self.opts.max_open_shards) {
            *mem += cost;
            shard.reader_mem = cost;
            shard.reader = Some(Box::new(r));
        }
    }

    /// Reserves a small-reader pool slot and a descriptor.
    fn take_small_reader(&self) -> bool {
        if !take_below(&self.small_readers, SMALL_READERS) {
            return false;
        }
        let fd = take_below(&self.open_readers, self.opts.max_open_shards);
        if !fd {
            self.small_readers.fetch_sub(1, Ordering::AcqRel);
        }
        fd
    }

    /// Opens a run's shard and checks that it is the one the store wrote.
    fn open_reader(
        &self,
        side: Side,
        p: usize,
        run_first: usize,
        len: u64,
        file: FileName,
    ) -> Result<Reader<K>, StorageError> {
        let path = file.path(&self.dir, side, p);
        let (r, got_len) = if file.tagged() {
            let r = ShardReader::<TagKey<K>>::open(&path)?;
            self.check_meta(&path, r.meta(), side, run_first, p)?;
            let n = r.len();
            (Reader::Tagged(r), n)
        } else {
            let r = ShardReader::<K>::open(&path)?;
            self.check_meta(&path, r.meta(), side, run_first, p)?;
            let n = r.len();
            (Reader::Plain(r), n)
        };
        if got_len != len {
            return Err(StorageError::Misplaced {
                path,
                reason: format!("it holds {got_len} keys, the store wrote {len}"),
            });
        }
        Ok(r)
    }

    /// Runs `f` on a disk run's reader, opening (and maybe caching) it.
    fn with_reader<R, E: From<StorageError>>(
        &self,
        run: &mut Run<K>,
        mem: &mut u64,
        side: Side,
        p: usize,
        f: impl FnOnce(&Reader<K>) -> Result<R, E>,
    ) -> Result<R, E> {
        let (first, len) = (run.first, run.len());
        let Some(shard) = run.shard.as_mut() else {
            return Err(StorageError::Misplaced {
                path: shard_path(&self.dir, side, first, p),
                reason: "the store lost track of this run's file".into(),
            }
            .into());
        };
        if let Some(r) = &shard.reader {
            return f(r);
        }
        let r = self.open_reader(side, p, first, len, shard.file)?;
        let out = f(&r)?;
        self.cache_reader(shard, mem, r);
        Ok(out)
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
                let keys = r.keys.as_deref().unwrap_or(&[]);
                r.shard = Some(self.write_layer(side, r.first, p, keys)?);
            }
            let freed = r.ram_bytes();
            r.keys = None;
            part.mem = part.mem.saturating_sub(freed);
        }
        Ok(())
    }

    /// Merges disk runs of one partition, LSM-style, so that lookups visit
    /// O(log layers) files instead of one per layer: when the newest
    /// [`MERGE_FANIN`] disk runs before the frontier are all of one tier, they
    /// become one run of the next tier (the frontier stays alone, RAM layers stay
    /// as they are, a run spans at most [`MAX_SPAN`] layers). A fan-in of 8
    /// rather than a binary counter because creating files is what costs most on
    /// disk (about 0.1 ms each on ext4): a key is rewritten once per tier, about
    /// `log8(layers)` times, and the number of runs stays below `8 log8(layers)`.
    fn compact(&self, side: Side, p: usize) -> Result<(), StorageError> {
        if self.opts.durable || K::LIMBS > TAG_MAX_LIMBS {
            return Ok(()); // checkpoints keep one file per layer
        }
        let s = side.index();
        let mut g = self.part(p);
        loop {
            let runs = &g.runs[s];
            let n = runs.len();
            let Some(end) = (0..n.saturating_sub(1)).rev().find(|&j| runs[j].on_disk_only()).map(|j| j + 1) else {
                return Ok(());
            };
            let Some(start) = end.checked_sub(MERGE_FANIN) else { return Ok(()) };
            let group = &runs[start..end];
            let tier = group[0].tier;
            if !group.iter().all(|r| r.on_disk_only() && r.tier == tier)
                || group[MERGE_FANIN - 1].last() - group[0].first > MAX_SPAN
            {
                return Ok(());
            }
            let merged = self.merge(side, p, group)?;
            let part = &mut *g;
            part.mem += RUN_RECORD;
            let old: Vec<Run<K>> = part.runs[s].splice(start..end, [merged]).collect();
            for r in old {
                self.discard(side, p, r, &mut part.mem);
            }
            self.merges.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Writes consecutive runs (oldest first) as one tagged run of the next tier.
    fn merge(&self, side: Side, p: usize, group: &[Run<K>]) -> Result<Run<K>, StorageError> {
        let (first, last) = match (group.first(), group.last()) {
            (Some(a), Some(b)) => (a.first, b.last()),
            _ => return Err(StorageError::Misplaced { path: self.dir.clone(), reason: "merging no runs".into() }),
        };
        let file = FileName { first, last };
        let path = file.path(&self.dir, side, p);
        Self::ensure_parent(&path)?;
        let readers = group.iter().map(|r| self.open_for_merge(side, p, r)).collect::<Result<Vec<_>, _>>()?;
        let mut sources: Vec<Source<'_, K>> =
            readers.iter().zip(group).map(|(rd, r)| source(rd, r.first - first)).collect();
        let mut w = ShardWriter::<TagKey<K>>::create(&path, Self::meta(side, first, p))?.unsynced();
        loop {
            // the smallest head among at most MERGE_FANIN sources
            let mut best: Option<(TagKey<K>, usize)> = None;
            for (i, src) in sources.iter_mut().enumerate() {
                if let Some(k) = src.peek()? {
                    match best {
                        Some((b, _)) if b <= k => {}
                        _ => best = Some((k, i)),
                    }
                }
            }
            let Some((k, i)) = best else { break };
            sources[i].pos += 1;
            w.push(k)?;
        }
        let info = w.finish()?;
        self.account_written(info.bytes, info.keys);
        let mut lens = Vec::with_capacity(last - first + 1);
        for r in group {
            lens.resize(r.first - first, 0);
            lens.extend_from_slice(&r.lens);
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let shard = Shard { file, bytes: info.bytes, reader: None, reader_mem: 0, pooled: false };
        Ok(Run { first, lens, keys: None, shard: Some(shard), seq, tier: group[0].tier.saturating_add(1) })
    }

    /// A fresh reader for merging (the cached one stays untouched).
    fn open_for_merge(&self, side: Side, p: usize, r: &Run<K>) -> Result<Reader<K>, StorageError> {
        match &r.shard {
            Some(s) => self.open_reader(side, p, r.first, r.len(), s.file),
            None => Err(StorageError::Misplaced {
                path: shard_path(&self.dir, side, r.first, p),
                reason: "the store lost track of this run's file".into(),
            }),
        }
    }

    fn write_manifest(&self) -> Result<(), StorageError> {
        let held: Vec<usize> = match &self.opts.held {
            Some(h) => h.clone(),
            None => (0..self.parts.len()).collect(),
        };
        let mut b = Vec::with_capacity(MANIFEST_HEAD + 4 * held.len() + 8);
        b.extend_from_slice(&MANIFEST_MAGIC);
        b.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
        b.extend_from_slice(&(K::LIMBS as u32).to_le_bytes());
        b.extend_from_slice(&(self.parts.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.layers(Side::Forward) as u32).to_le_bytes());
        b.extend_from_slice(&(self.layers(Side::Backward) as u32).to_le_bytes());
        b.extend_from_slice(&(held.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.opts.tag.to_le_bytes());
        for p in held {
            b.extend_from_slice(&(p as u32).to_le_bytes());
        }
        let h = xxh3_64(&b);
        b.extend_from_slice(&h.to_le_bytes());
        let path = self.dir.join(MANIFEST_NAME);
        let tmp = self.dir.join(format!("{MANIFEST_NAME}.tmp"));
        let mut f = fs::File::create(&tmp).map_err(io(&tmp, "creating"))?;
        f.write_all(&b).map_err(io(&tmp, "writing"))?;
        f.sync_all().map_err(io(&tmp, "syncing"))?;
        drop(f);
        fs::rename(&tmp, &path).map_err(io(&tmp, "renaming"))?;
        sync_parent_dir(&path)
    }
}

/// What a disk run says about a batch of sorted keys: the indices found, with
/// the layer offset each was found at.
fn probe<K: StateKey>(r: &Reader<K>, keys: &[K], mut hit: impl FnMut(usize, u8)) -> Result<(), StorageError> {
    match r {
        Reader::Plain(x) => x.find_in_ranges(keys.len(), |i| (keys[i], keys[i]), |i, _| hit(i, 0)),
        Reader::Tagged(x) => x.find_in_ranges(
            keys.len(),
            |i| (TagKey { key: keys[i], offset: 0 }, TagKey { key: keys[i], offset: u8::MAX }),
            |i, t| hit(i, t.offset),
        ),
    }
}

/// What a manifest records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub partitions: usize,
    pub sealed: [usize; 2],
    pub tag: u64,
    /// The partitions the store holds, increasing.
    pub held: Vec<usize>,
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Reads and checks a store manifest for `limbs`-limb keys.
pub fn read_manifest(path: &Path, limbs: usize) -> Result<Manifest, StorageError> {
    let b = fs::read(path).map_err(io(path, "reading"))?;
    let bad = |reason: String| StorageError::BadManifest { path: path.to_path_buf(), reason };
    let truncated = |expected: usize| StorageError::Truncated {
        path: path.to_path_buf(),
        expected: expected as u64,
        found: b.len() as u64,
    };
    if b.len() < MANIFEST_HEAD + 8 {
        return Err(truncated(MANIFEST_HEAD + 8));
    }
    if b[0..8] != MANIFEST_MAGIC {
        return Err(bad("bad magic bytes".into()));
    }
    let version = le_u32(&b, 8);
    if version != MANIFEST_VERSION {
        return Err(bad(format!("version {version} is not supported (this build reads version {MANIFEST_VERSION})")));
    }
    let held_len = le_u32(&b, 28) as usize;
    let len = MANIFEST_HEAD + 4 * held_len + 8;
    if held_len > 1 << 16 {
        return Err(bad(format!("{held_len} held partitions is more than a store has")));
    }
    if b.len() < len {
        return Err(truncated(len));
    }
    if b.len() > len {
        return Err(bad(format!("{} bytes, a manifest of {held_len} partitions has {len}", b.len())));
    }
    let (stored, computed) = (le_u64(&b, len - 8), xxh3_64(&b[..len - 8]));
    if stored != computed {
        return Err(bad(format!("checksum mismatch: stored {stored:#018x}, contents hash to {computed:#018x}")));
    }
    let found = le_u32(&b, 12) as usize;
    if found != limbs {
        return Err(bad(format!("the store holds {found}-limb keys, opened for {limbs}-limb keys")));
    }
    let partitions = le_u32(&b, 16) as usize;
    if !partitions.is_power_of_two() || partitions > 1 << 16 {
        return Err(bad(format!("{partitions} partitions is not a power of two up to 65536")));
    }
    let held: Vec<usize> = (0..held_len).map(|i| le_u32(&b, MANIFEST_HEAD + 4 * i) as usize).collect();
    if held.windows(2).any(|w| w[0] >= w[1]) || held.last().is_some_and(|&p| p >= partitions) {
        return Err(bad(format!("held partitions {held:?} are not increasing partitions of {partitions}")));
    }
    Ok(Manifest { partitions, sealed: [le_u32(&b, 20) as usize, le_u32(&b, 24) as usize], tag: le_u64(&b, 32), held })
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
            for chunk in keys.chunks(CHUNK) {
                f(chunk)?;
            }
            return Ok(());
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
                subtract_sorted(candidates, keys);
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
                if let Some(k) = first_common(keys, ram) {
                    return Ok(Some((k, run.first)));
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
            return Ok(keys.binary_search(key).is_ok());
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
        let fits = (len == 0 && !self.opts.durable) || self.layer_fits(part, partition, RUN_RECORD + bytes)?;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut run = Run { first: layer, lens: vec![len], keys: None, shard: None, seq, tier: 0 };
        if self.opts.durable || !fits {
            // kept open: a streaming merge may append more of this layer
            part.writer[s] = Some(self.start_layer(side, layer, partition, &keys)?);
        }
        if fits {
            part.mem += bytes;
            run.keys = Some(keys);
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
                    part.writer[s] = Some(self.start_layer(side, layer, partition, &ram)?);
                }
                part.mem = part.mem.saturating_sub((ram.capacity() * std::mem::size_of::<K>()) as u64);
            }
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
                let before = (ram.capacity() * std::mem::size_of::<K>()) as u64;
                ram.extend_from_slice(&keys);
                part.mem += (ram.capacity() * std::mem::size_of::<K>()) as u64 - before;
            }
        }
        Ok(())
    }

    fn end_layer(&self, side: Side, partition: usize) -> Result<(), SeamError> {
        let mut g = self.part(partition);
        let part = &mut *g;
        if let Some(ram) = part.pending[side.index()].as_mut().and_then(|r| r.keys.as_mut()) {
            let before = (ram.capacity() * std::mem::size_of::<K>()) as u64;
            ram.shrink_to_fit();
            part.mem = part.mem.saturating_sub(before - (ram.capacity() * std::mem::size_of::<K>()) as u64);
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
            if !self.opts.durable && part.pending[s].as_ref().is_some_and(|r| r.len() == 0) {
                // an empty layer is the absence of a run
                if let Some(run) = part.pending[s].take() {
                    self.discard(side, p, run, &mut part.mem);
                }
            }
            match g.pending[s].take() {
                Some(run) => g.runs[s].push(run),
                None if self.opts.durable && self.holds(p) => {
                    // a checkpoint has a file for every layer of every partition
                    let shard = self.write_layer(side, layer, p, &[])?;
                    let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                    g.mem += RUN_RECORD;
                    g.runs[s].push(Run { first: layer, lens: vec![0], keys: None, shard: Some(shard), seq, tier: 0 });
                }
                None => {}
            }
        }
        if self.opts.durable {
            // the partition directories' entries must reach disk before the
            // manifest names files in them (the files' own entries are synced
            // by their writers)
            sync_parent_dir(&self.dir.join(side_dir(side)).join("p0"))?;
            self.sealed[s].fetch_add(1, Ordering::AcqRel);
            return Ok(self.write_manifest()?);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::partition::Partitioner;
    use crate::storage::mem::MemStore;
    use proptest::prelude::*;

    const SIDES: [Side; 2] = [Side::Forward, Side::Backward];

    /// Layers per side, each a list of random keys. A side's layers are disjoint,
    /// as in a BFS (the in-memory store merges old layers and relies on it); the
    /// two sides overlap freely.
    fn layers_strategy() -> impl Strategy<Value = [Vec<Vec<u64>>; 2]> {
        let layer = proptest::collection::vec(0u64..5000, 0..400);
        let side = proptest::collection::vec(layer, 1..12).prop_map(|mut side| {
            let mut seen = std::collections::HashSet::new();
            for l in &mut side {
                l.retain(|k| seen.insert(*k));
            }
            side
        });
        (side.clone(), side).prop_map(|(f, b)| [f, b])
    }

    fn split(keys: &[u64], parts: Partitioner) -> Vec<Vec<u64>> {
        let mut out = vec![Vec::new(); parts.count()];
        for &k in keys {
            out[parts.of(&k)].push(k);
        }
        for v in &mut out {
            v.sort_unstable();
            v.dedup();
        }
        out
    }

    fn fill(store: &dyn PartitionStore<u64>, layers: &[Vec<Vec<u64>>; 2], parts: Partitioner) {
        let n = layers[0].len().max(layers[1].len());
        for l in 0..n {
            for side in SIDES {
                if let Some(keys) = layers[side.index()].get(l) {
                    for (p, v) in split(keys, parts).into_iter().enumerate() {
                        store.push_layer(side, p, v).unwrap();
                    }
                    store.seal_layer(side).unwrap();
                }
            }
        }
    }

    fn chunks(store: &dyn PartitionStore<u64>, side: Side, layer: usize, p: usize) -> Result<Vec<u64>, StorageError> {
        let mut v = Vec::new();
        store
            .for_each_chunk(side, layer, p, &mut |c| {
                assert!(c.windows(2).all(|w| w[0] < w[1]));
                v.extend_from_slice(c);
                Ok(())
            })
            .map_err(|e| StorageError::from_seam(e).unwrap())?;
        Ok(v)
    }

    /// Every read the engine makes gives the same answer on both stores.
    fn assert_same(a: &dyn PartitionStore<u64>, b: &dyn PartitionStore<u64>, parts: Partitioner, probes: &[u64]) {
        for side in SIDES {
            assert_eq!(a.layers(side), b.layers(side));
            for layer in 0..a.layers(side) {
                for p in 0..parts.count() {
                    assert_eq!(a.layer_len(side, layer, p), b.layer_len(side, layer, p));
                    assert_eq!(chunks(a, side, layer, p).unwrap(), chunks(b, side, layer, p).unwrap());
                }
            }
            for (p, cands) in split(probes, parts).into_iter().enumerate() {
                let (mut x, mut y) = (cands.clone(), cands.clone());
                a.retain_unseen(side, p, &mut x).unwrap();
                b.retain_unseen(side, p, &mut y).unwrap();
                assert_eq!(x, y);
                assert_eq!(a.find_any(side, p, &cands).unwrap(), b.find_any(side, p, &cands).unwrap());
                for k in &cands {
                    for layer in 0..a.layers(side) {
                        assert_eq!(a.contains(side, layer, p, k).unwrap(), b.contains(side, layer, p, k).unwrap());
                    }
                }
            }
        }
    }

    fn opts(memory_bytes: u64, policy: SpillPolicy) -> DiskOptions {
        DiskOptions { memory_bytes, policy, ..DiskOptions::default() }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

        /// A layer streamed in chunks (push, appends, end) is the layer pushed
        /// whole, whatever fits in RAM when.
        #[test]
        fn layers_appended_in_chunks_answer_like_whole_layers(
            layers in layers_strategy(),
            chunk in 1usize..400,
            budget in prop_oneof![Just(0u64), 1000u64..20_000, Just(1u64 << 30)],
            policy in prop_oneof![Just(SpillPolicy::KeepOldest), Just(SpillPolicy::KeepNewest), Just(SpillPolicy::AllToDisk)],
            durable in any::<bool>(),
        ) {
            let parts = Partitioner::new(4);
            let dir = tempfile::tempdir().unwrap();
            let mem = MemStore::<u64>::new(4);
            let disk = DiskStore::<u64>::create(dir.path(), 4, DiskOptions { durable, ..opts(budget, policy) }).unwrap();
            fill(&mem, &layers, parts);
            for side in SIDES {
                for layer in &layers[side.index()] {
                    for (p, keys) in split(layer, parts).into_iter().enumerate() {
                        let mut pieces = keys.chunks(chunk);
                        disk.push_layer(side, p, pieces.next().unwrap_or(&[]).to_vec()).unwrap();
                        for piece in pieces {
                            disk.append_layer(side, p, piece.to_vec()).unwrap();
                        }
                        disk.end_layer(side, p).unwrap();
                    }
                    disk.seal_layer(side).unwrap();
                }
            }
            let probes: Vec<u64> = (0..6000).step_by(7).collect();
            assert_same(&mem, &disk, parts, &probes);
            if durable {
                drop(disk);
                let reopened = DiskStore::<u64>::open(dir.path(), DiskOptions::default(), None).unwrap();
                assert_same(&mem, &reopened, parts, &probes);
            }
        }
    }

    #[test]
    fn small_shards_keep_readers_open_when_no_share_is_left() {
        // regression: with a budget too small for any reader, every lookup of a
        // deep level's small shards reopened its file (Microban #139)
        let parts = Partitioner::new(4);
        let layers: [Vec<Vec<u64>>; 2] =
            [(0..6u64).map(|l| (l * 100..l * 100 + 40).collect()).collect(), vec![vec![9_999]]];
        for max_open in [0usize, 3, 1000] {
            let dir = tempfile::tempdir().unwrap();
            let disk = DiskStore::<u64>::create(
                dir.path(),
                4,
                DiskOptions { max_open_shards: max_open, ..opts(0, SpillPolicy::AllToDisk) },
            )
            .unwrap();
            fill(&disk, &layers, parts);
            for (p, keys) in split(&(0..600).collect::<Vec<u64>>(), parts).into_iter().enumerate() {
                assert!(disk.find_any(Side::Forward, p, &keys).unwrap().is_some());
            }
            assert!(disk.open_shards() <= max_open);
            assert_eq!(disk.open_shards() > 0, max_open > 0, "max_open {max_open}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn disk_store_answers_like_mem_store(
            layers in layers_strategy(),
            probes in proptest::collection::vec(0u64..5200, 0..300),
            budget in prop_oneof![Just(0u64), 1000u64..20_000, Just(1u64 << 30)],
            policy in prop_oneof![Just(SpillPolicy::KeepOldest), Just(SpillPolicy::KeepNewest), Just(SpillPolicy::AllToDisk)],
            max_open in prop_oneof![Just(0usize), Just(3), Just(1000)],
        ) {
            let parts = Partitioner::new(4);
            let dir = tempfile::tempdir().unwrap();
            let mem = MemStore::<u64>::new(4);
            let disk = DiskStore::<u64>::create(dir.path(), 4, DiskOptions { max_open_shards: max_open, ..opts(budget, policy) }).unwrap();
            fill(&mem, &layers, parts);
            fill(&disk, &layers, parts);
            assert_same(&mem, &disk, parts, &probes);
            // layer records are charged but cannot be spilled
            let records = (disk.layers(Side::Forward) + disk.layers(Side::Backward)) as u64 * 4 * RUN_RECORD;
            let bytes = disk.bytes();
            prop_assert!(bytes.memory <= budget + records, "{} > {budget} + {records}", bytes.memory);
            prop_assert!(disk.open_shards() <= max_open);
            if policy == SpillPolicy::AllToDisk {
                let stored: u64 = SIDES.iter().flat_map(|&s| (0..disk.layers(s)).flat_map(move |l| (0..4).map(move |p| (s, l, p)))).map(|(s, l, p)| disk.layer_len(s, l, p)).sum();
                prop_assert_eq!(disk.disk_keys(), stored);
            }
        }
    }

    fn sample_layers() -> [Vec<Vec<u64>>; 2] {
        let layer = |seed: u64, n: u64| {
            (0..n).map(|i| xxh3_64(&(seed * 1_000_003 + i).to_le_bytes()) % 1_000_000).collect::<Vec<_>>()
        };
        let disjoint = |mut side: Vec<Vec<u64>>| {
            let mut seen = std::collections::HashSet::new();
            for l in &mut side {
                l.retain(|k| seen.insert(*k));
            }
            side
        };
        [disjoint(vec![layer(1, 3000), layer(2, 5000), layer(3, 8000)]), disjoint(vec![layer(4, 2000), layer(5, 6000)])]
    }

    #[test]
    fn abort_drops_the_pending_layer_and_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::<u64>::create(dir.path(), 2, opts(0, SpillPolicy::AllToDisk)).unwrap();
        store.push_layer(Side::Forward, 0, vec![1, 2, 3]).unwrap();
        store.seal_layer(Side::Forward).unwrap();
        let before = store.bytes();
        store.push_layer(Side::Forward, 0, vec![4, 5]).unwrap();
        store.end_layer(Side::Forward, 0).unwrap();
        store.push_layer(Side::Forward, 1, vec![7]).unwrap(); // still being written
        assert!(shard_path(dir.path(), Side::Forward, 1, 0).exists());
        store.abort_layer(Side::Forward);
        assert!(!shard_path(dir.path(), Side::Forward, 1, 0).exists());
        assert!(!shard_path(dir.path(), Side::Forward, 1, 1).exists());
        assert_eq!(store.bytes(), before);
        assert_eq!(store.layers(Side::Forward), 1);
        assert_eq!(store.disk_keys(), 3);
    }

    #[test]
    fn durable_store_reopens_at_the_last_sealed_layer() {
        let dir = tempfile::tempdir().unwrap();
        let parts = Partitioner::new(8);
        let layers = sample_layers();
        let reference = MemStore::<u64>::new(8);
        fill(&reference, &layers, parts);
        {
            let store = DiskStore::<u64>::create(
                dir.path(),
                8,
                DiskOptions { durable: true, memory_bytes: 1 << 20, ..DiskOptions::default() },
            )
            .unwrap();
            fill(&store, &layers, parts);
            // an unfinished step: pushed, never sealed
            store.push_layer(Side::Forward, 3, vec![42, 43]).unwrap();
            store.end_layer(Side::Forward, 3).unwrap();
            assert!(shard_path(dir.path(), Side::Forward, 3, 3).exists());
        }
        // a second create on the same directory is refused
        let e = DiskStore::<u64>::create(dir.path(), 8, DiskOptions::default()).err().unwrap();
        assert!(matches!(e, StorageError::BadManifest { .. }), "{e}");

        let store = DiskStore::<u64>::open(dir.path(), DiskOptions::default(), None).unwrap();
        assert_eq!(store.partitions(), 8);
        assert_eq!([store.layers(Side::Forward), store.layers(Side::Backward)], [3, 2]);
        assert!(!dir.path().join("f").join("L3").exists(), "the unsealed layer is gone");
        let probes: Vec<u64> = (0..3000).map(|i| i * 331).collect();
        assert_same(&reference, &store, parts, &probes);

        // the search goes on from there, and a second reopen sees the new layer
        let next: Vec<u64> = (0..500).map(|i| 2_000_000 + i).collect();
        for (p, v) in split(&next, parts).into_iter().enumerate() {
            store.push_layer(Side::Backward, p, v.clone()).unwrap();
            reference.push_layer(Side::Backward, p, v).unwrap();
        }
        store.seal_layer(Side::Backward).unwrap();
        reference.seal_layer(Side::Backward).unwrap();
        drop(store);
        let store = DiskStore::<u64>::open(dir.path(), DiskOptions { memory_bytes: 0, ..DiskOptions::default() }, None)
            .unwrap();
        assert_eq!(store.layers(Side::Backward), 3);
        assert_same(&reference, &store, parts, &probes);

        // opened for the wrong key width
        let e = DiskStore::<u128>::open(dir.path(), DiskOptions::default(), None).err().unwrap();
        assert!(matches!(e, StorageError::BadManifest { ref reason, .. } if reason.contains("1-limb")), "{e}");
    }

    /// A spilled store with every layer on disk and no cached readers, so each
    /// access opens its file.
    fn spilled(dir: &Path) -> DiskStore<u64> {
        let store =
            DiskStore::<u64>::create(dir, 4, DiskOptions { max_open_shards: 0, ..opts(0, SpillPolicy::AllToDisk) })
                .unwrap();
        fill(&store, &sample_layers(), Partitioner::new(4));
        store
    }

    fn retain_all(store: &DiskStore<u64>, side: Side) -> Result<(), StorageError> {
        for p in 0..4 {
            let mut c: Vec<u64> = (0..1_000_000).step_by(97).filter(|k| Partitioner::new(4).of(k) == p).collect();
            store.retain_unseen(side, p, &mut c).map_err(|e| StorageError::from_seam(e).unwrap())?;
        }
        Ok(())
    }

    #[test]
    fn deleted_shard_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = spilled(dir.path());
        let victim = shard_path(dir.path(), Side::Forward, 1, 2);
        fs::remove_file(&victim).unwrap();
        let e = retain_all(&store, Side::Forward).unwrap_err();
        assert!(matches!(e, StorageError::Io { ref path, op: "opening", .. } if *path == victim), "{e}");
        assert!(e.to_string().contains(&*victim.to_string_lossy()), "{e}");
        // other partitions and the other side still answer
        retain_all(&store, Side::Backward).unwrap();
    }

    #[test]
    fn truncated_shard_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = spilled(dir.path());
        let victim = shard_path(dir.path(), Side::Backward, 0, 1);
        let len = fs::metadata(&victim).unwrap().len();
        fs::OpenOptions::new().write(true).open(&victim).unwrap().set_len(len / 2).unwrap();
        let e = retain_all(&store, Side::Backward).unwrap_err();
        assert!(matches!(e, StorageError::Truncated { ref path, .. } if *path == victim), "{e}");
        let e = chunks(&store, Side::Backward, 0, 1).unwrap_err();
        assert!(matches!(e, StorageError::Truncated { .. }), "{e}");
    }

    #[test]
    fn corrupt_shard_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = spilled(dir.path());
        let victim = shard_path(dir.path(), Side::Forward, 2, 0);
        let mut bytes = fs::read(&victim).unwrap();
        bytes[100] ^= 0x40; // inside the first block
        fs::write(&victim, &bytes).unwrap();
        let e = chunks(&store, Side::Forward, 2, 0).unwrap_err();
        assert!(matches!(e, StorageError::CorruptBlock { ref path, block: 0, .. } if *path == victim), "{e}");
        let e = retain_all(&store, Side::Forward).unwrap_err();
        assert!(matches!(e, StorageError::CorruptBlock { .. }), "{e}");
    }

    #[test]
    fn shard_in_the_wrong_place_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = spilled(dir.path());
        let (a, b) = (shard_path(dir.path(), Side::Backward, 0, 0), shard_path(dir.path(), Side::Backward, 0, 1));
        fs::copy(&a, &b).unwrap();
        let e = chunks(&store, Side::Backward, 0, 1).unwrap_err();
        assert!(
            matches!(e, StorageError::Misplaced { ref path, ref reason } if *path == b && reason.contains("partition 0")),
            "{e}"
        );
    }

    #[test]
    fn cached_reader_sees_corruption_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::<u64>::create(dir.path(), 4, opts(1 << 20, SpillPolicy::AllToDisk)).unwrap();
        fill(&store, &sample_layers(), Partitioner::new(4));
        retain_all(&store, Side::Forward).unwrap();
        assert!(store.open_shards() > 0);
        let victim = shard_path(dir.path(), Side::Forward, 1, 3);
        // rewrite in place, so the open descriptor sees the damage
        let f = fs::OpenOptions::new().write(true).open(&victim).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &[0xff; 16], 80).unwrap();
        let e = chunks(&store, Side::Forward, 1, 3).unwrap_err();
        assert!(matches!(e, StorageError::CorruptBlock { ref path, .. } if *path == victim), "{e}");
        f.set_len(70).unwrap();
        let e = chunks(&store, Side::Forward, 1, 3).unwrap_err();
        assert!(matches!(e, StorageError::Truncated { ref path, .. } if *path == victim), "{e}");
    }

    /// A cluster worker's checkpoint: only its own partitions, tagged with its
    /// job, reopened at fewer layers than were sealed (the coordinator's last
    /// complete layer), and refused under another tag or partition set.
    #[test]
    fn held_partitions_reopen_at_the_layers_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let parts = Partitioner::new(4);
        let held = vec![1, 3];
        let opts = DiskOptions { durable: true, held: Some(held.clone()), tag: 77, ..DiskOptions::default() };
        let layers = sample_layers();
        let reference = MemStore::<u64>::new(4);
        {
            let store = DiskStore::<u64>::create(dir.path(), 4, opts.clone()).unwrap();
            for (s, side) in SIDES.into_iter().enumerate() {
                for (l, layer) in layers[s].iter().enumerate() {
                    for (p, v) in split(layer, parts).into_iter().enumerate() {
                        if held.contains(&p) {
                            store.push_layer(side, p, v.clone()).unwrap();
                            if l < 2 {
                                reference.push_layer(side, p, v).unwrap();
                            }
                        } else {
                            // the other partitions are another worker's: an
                            // empty start is nothing, keys are refused
                            store.push_layer(side, p, Vec::new()).unwrap();
                            if !v.is_empty() {
                                let e = StorageError::from_seam(store.push_layer(side, p, v).unwrap_err()).unwrap();
                                assert!(matches!(e, StorageError::Misplaced { .. }), "{e}");
                            }
                        }
                    }
                    store.seal_layer(side).unwrap();
                    if l < 2 {
                        reference.seal_layer(side).unwrap();
                    }
                }
            }
            // no file for a partition it does not hold
            assert!(!shard_path(dir.path(), Side::Forward, 0, 0).exists());
            assert!(shard_path(dir.path(), Side::Forward, 0, 1).exists());
        }
        let other = DiskStore::<u64>::open(dir.path(), DiskOptions { tag: 78, ..opts.clone() }, None).err().unwrap();
        assert!(matches!(other, StorageError::BadManifest { .. }), "{other}");
        let wrong = DiskOptions { held: Some(vec![1, 2]), ..opts.clone() };
        let e = DiskStore::<u64>::open(dir.path(), wrong, None).err().unwrap();
        assert!(matches!(e, StorageError::BadManifest { .. }), "{e}");
        let e = DiskStore::<u64>::open(dir.path(), opts.clone(), Some([4, 2])).err().unwrap();
        assert!(
            matches!(e, StorageError::BadManifest { ref reason, .. } if reason.contains("3 forward layers")),
            "{e}"
        );
        let store = DiskStore::<u64>::open(dir.path(), opts.clone(), Some([2, 2])).unwrap();
        assert_eq!([store.layers(Side::Forward), store.layers(Side::Backward)], [2, 2]);
        let probes: Vec<u64> = (0..3000).map(|i| i * 331).filter(|k| held.contains(&parts.of(k))).collect();
        assert_same(&reference, &store, parts, &probes);
        drop(store);
        // the dropped layer is gone for good: the manifest says two
        let store = DiskStore::<u64>::open(dir.path(), opts, None).unwrap();
        assert_eq!(store.layers(Side::Forward), 2);
    }

    #[test]
    fn manifest_damage_is_named() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store =
                DiskStore::<u64>::create(dir.path(), 4, DiskOptions { durable: true, ..DiskOptions::default() })
                    .unwrap();
            fill(&store, &sample_layers(), Partitioner::new(4));
        }
        let path = dir.path().join(MANIFEST_NAME);
        let good = fs::read(&path).unwrap();
        assert_eq!(
            read_manifest(&path, 1).unwrap(),
            Manifest { partitions: 4, sealed: [3, 2], tag: 0, held: vec![0, 1, 2, 3] }
        );
        for at in 0..good.len() {
            let mut b = good.clone();
            b[at] ^= 1;
            fs::write(&path, &b).unwrap();
            let e = DiskStore::<u64>::open(dir.path(), DiskOptions::default(), None).err().unwrap();
            // a flip in the partition count (bytes 28..32) says the file should
            // be longer or shorter than it is: from the bytes alone that is a
            // cut file, named as one
            let named = match e {
                StorageError::BadManifest { path: ref p, .. } => *p == path,
                StorageError::Truncated { path: ref p, .. } => (28..32).contains(&at) && *p == path,
                _ => false,
            };
            assert!(named, "flip at {at}: {e}");
        }
        for cut in 0..good.len() {
            fs::write(&path, &good[..cut]).unwrap();
            let e = DiskStore::<u64>::open(dir.path(), DiskOptions::default(), None).err().unwrap();
            assert!(matches!(e, StorageError::Truncated { found, .. } if found == cut as u64), "cut at {cut}: {e}");
        }
        fs::remove_file(&path).unwrap();
        let e = DiskStore::<u64>::open(dir.path(), DiskOptions::default(), None).err().unwrap();
        assert!(matches!(e, StorageError::Io { ref path, .. } if path.ends_with(MANIFEST_NAME)), "{e}");
        // a sealed layer's shard missing at reopen
        fs::write(&path, &good).unwrap();
        let victim = shard_path(dir.path(), Side::Backward, 1, 2);
        fs::remove_file(&victim).unwrap();
        let e = DiskStore::<u64>::open(dir.path(), DiskOptions::default(), None).err().unwrap();
        assert!(matches!(e, StorageError::Io { ref path, .. } if *path == victim), "{e}");
    }

    #[test]
    fn deep_searches_merge_runs_and_answer_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let parts = Partitioner::new(2);
        let side = |seed: u64| -> Vec<Vec<u64>> {
            let mut seen = std::collections::HashSet::new();
            (0..60u64)
                .map(|l| {
                    let n = 20 + (xxh3_64(&(seed + l).to_le_bytes()) % 300);
                    (0..n)
                        .map(|i| xxh3_64(&(seed * 7919 + l * 1000 + i).to_le_bytes()) % 200_000)
                        .filter(|k| seen.insert(*k))
                        .collect()
                })
                .collect()
        };
        let layers = [side(1), side(2)];
        let mem = MemStore::<u64>::new(2);
        let disk = DiskStore::<u64>::create(dir.path(), 2, opts(0, SpillPolicy::AllToDisk)).unwrap();
        fill(&mem, &layers, parts);
        fill(&disk, &layers, parts);
        assert!(disk.merges() >= 20, "{} merges", disk.merges());
        // 60 layers: 7 merged runs of 8, 3 single layers and the frontier
        let files = |side: &str| fs::read_dir(dir.path().join(side).join("p0")).unwrap().flatten().count();
        assert!(files("f") <= 12 && files("b") <= 12, "{} and {} runs", files("f"), files("b"));
        let probes: Vec<u64> = (0..200_000).step_by(37).collect();
        assert_same(&mem, &disk, parts, &probes);
        assert_eq!(disk.disk_keys(), layers.iter().flatten().map(|l| l.len() as u64).sum::<u64>());
        // a damaged merged run is named like any shard
        let merged = dir.path().join("f").join("p1").join("L8-15.shard");
        let mut b = fs::read(&merged).unwrap();
        b[70] ^= 0x22;
        fs::write(&merged, &b).unwrap();
        let mut c: Vec<u64> = probes.iter().copied().filter(|k| parts.of(k) == 1).collect();
        let e = StorageError::from_seam(disk.retain_unseen(Side::Forward, 1, &mut c).unwrap_err()).unwrap();
        assert!(matches!(e, StorageError::CorruptBlock { ref path, .. } if *path == merged), "{e}");
    }

    /// A full disk is an error naming the file being written, not a panic and
    /// not a layer that silently lacks keys. /dev/full stands in for the device:
    /// the writer's temporary file is a symlink to it.
    #[test]
    fn disk_full_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::<u64>::create(dir.path(), 2, opts(0, SpillPolicy::AllToDisk)).unwrap();
        let target = shard_path(dir.path(), Side::Forward, 0, 1);
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        let tmp = PathBuf::from(format!("{}.tmp", target.display()));
        std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();
        store.push_layer(Side::Forward, 0, vec![1, 2, 3]).unwrap();
        let keys: Vec<u64> = (0..100_000).map(|i| i * 7).collect();
        // the writer reports the full disk when it writes, at the latest when the
        // partition's layer ends
        let e = store.push_layer(Side::Forward, 1, keys).and_then(|_| store.end_layer(Side::Forward, 1)).unwrap_err();
        let e = StorageError::from_seam(e).unwrap();
        assert!(e.is_disk_full(), "{e}");
        assert_eq!(e.path(), tmp);
        assert!(e.to_string().starts_with(&format!("disk full while writing {}", tmp.display())), "{e}");
        assert!(!target.exists());
        // the step is abandoned cleanly
        store.abort_layer(Side::Forward);
        assert_eq!(store.layers(Side::Forward), 0);
    }

    #[test]
    fn keep_oldest_stays_within_its_share_and_writes_each_layer_once() {
        let dir = tempfile::tempdir().unwrap();
        let budget = 64 * 1024;
        let store = DiskStore::<u64>::create(dir.path(), 4, opts(budget, SpillPolicy::KeepOldest)).unwrap();
        fill(&store, &sample_layers(), Partitioner::new(4));
        let b = store.bytes();
        assert!(b.memory <= budget, "{} > {budget}", b.memory);
        assert!(b.disk > 0 && store.disk_keys() > 0);
        // the first layers are in RAM: nothing written for them
        assert!(!shard_path(dir.path(), Side::Forward, 0, 0).exists());
    }
}
