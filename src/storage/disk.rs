//! The disk-backed partition store: every layer of every partition is a sorted
//! run of keys that lives in RAM while the partition's share of the memory budget
//! lasts and as a shard file (`DIR/{f|b}/L{layer}/p{partition}.shard`, the format
//! of [`crate::storage::shard`]) beyond it.
//!
//! Why per partition: the engine touches a partition from one thread at a time
//! (expand reads it, merge dedups against it), so each partition owns an equal
//! slice of the store's budget and decides alone, under its own lock, what to
//! keep in RAM. No global rebalancing, no cross-partition locking, and the sum of
//! the slices is the store's budget.
//!
//! Lookups work the same on both media: RAM layers by merge or binary search,
//! disk layers through [`ShardReader::contains_sorted`] (each block read at most
//! once, only blocks a query falls into) and [`ShardReader::contains`] (one
//! block). Open readers (one file descriptor and a block index each) are cached
//! while their index fits the partition's share and the descriptor cap allows;
//! beyond that a shard is reopened per access. An open reader keeps reading an
//! unlinked file (POSIX), so deleting a shard mid-run is noticed at its next
//! reopen, while truncation and corruption are noticed at the next read.
//!
//! *Durable* mode writes (and fsyncs) every layer at push time, and after each
//! seal rewrites a small manifest recording how many layers of each side are
//! complete; [`DiskStore::open`] resumes from it, ignoring any layer written
//! after the last seal. The cluster's workers checkpoint this way.
//!
//! Manifest (`DIR/manifest`, 40 bytes, little-endian, written to
//! `manifest.tmp`, fsynced and renamed):
//!
//! ```text
//! 0   8  magic b"SKMANIF\0"
//! 8   4  manifest version (u32, = 1)
//! 12  4  key limbs (u32)
//! 16  4  partitions (u32, power of two)
//! 20  4  sealed forward layers (u32)
//! 24  4  sealed backward layers (u32)
//! 28  4  reserved, zero
//! 32  8  xxh3-64 of bytes 0..32
//! ```

use crate::engine::partition::{first_common, subtract_sorted, PartitionStore, StoreBytes};
use crate::engine::Side;
use crate::model::key::StateKey;
use crate::storage::shard::{sync_parent_dir, ShardMeta, ShardReader, ShardWriter};
use crate::storage::StorageError;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use xxhash_rust::xxh3::xxh3_64;

const MANIFEST_MAGIC: [u8; 8] = *b"SKMANIF\0";
/// Manifest version written and accepted.
pub const MANIFEST_VERSION: u32 = 1;
const MANIFEST_LEN: usize = 40;
/// Name of the manifest file inside a durable store's directory.
pub const MANIFEST_NAME: &str = "manifest";
/// Keys per chunk when streaming a RAM layer to the engine.
const CHUNK: usize = 4096;
/// Bytes an open reader costs beyond its block index (struct, path, buffers).
const READER_BASE: u64 = 512;

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
            max_open_shards: default_max_open_shards(),
            usage: None,
        }
    }
}

/// Half the soft descriptor limit (the rest is the process's), at most 8192.
pub fn default_max_open_shards() -> usize {
    crate::sys::open_files_limit().map_or(256, |n| (n / 2).clamp(16, 8192) as usize)
}

/// A layer's shard file; its path is derived from (side, layer, partition).
struct Shard<K: StateKey> {
    bytes: u64,
    reader: Option<Box<ShardReader<K>>>,
    /// RAM charged to the partition for the cached reader.
    reader_mem: u64,
}

/// One partition's part of one layer: in RAM, on disk, or both (durable mode
/// keeps a RAM copy of a written layer while it fits).
struct Layer<K: StateKey> {
    keys: Option<Vec<K>>,
    shard: Option<Shard<K>>,
    len: u64,
    /// Order of arrival across both sides, for [`SpillPolicy::KeepNewest`].
    seq: u64,
}

impl<K: StateKey> Layer<K> {
    fn ram_bytes(&self) -> u64 {
        self.keys.as_ref().map_or(0, |k| (k.capacity() * std::mem::size_of::<K>()) as u64)
    }
}

struct Part<K: StateKey> {
    layers: [Vec<Layer<K>>; 2],
    pending: [Option<Layer<K>>; 2],
    /// RAM charged to this partition: keys, cached readers, layer records.
    mem: u64,
}

/// The per-layer record cost, charged so that thousands of layers of many
/// partitions cannot quietly outgrow the budget.
const LAYER_RECORD: u64 = std::mem::size_of::<Layer<u64>>() as u64;

/// A [`PartitionStore`] whose layers spill to shard files beyond a memory share.
pub struct DiskStore<K: StateKey> {
    dir: PathBuf,
    opts: DiskOptions,
    part_share: u64,
    parts: Vec<Mutex<Part<K>>>,
    sealed: [AtomicUsize; 2],
    open_readers: AtomicUsize,
    usage: Arc<DiskUsage>,
    disk_bytes: AtomicU64,
    disk_keys: AtomicU64,
    seq: AtomicU64,
}

fn side_dir(side: Side) -> &'static str {
    match side {
        Side::Forward => "f",
        Side::Backward => "b",
    }
}

/// The path of one shard of a store rooted at `dir`.
pub fn shard_path(dir: &Path, side: Side, layer: usize, partition: usize) -> PathBuf {
    dir.join(side_dir(side)).join(format!("L{layer}")).join(format!("p{partition}.shard"))
}

fn reader_cost<K: StateKey>(r: &ShardReader<K>) -> u64 {
    // the parsed index entry plus its raw bytes (kept for the checksum)
    let per_block = 2 * (K::LIMBS as u64 * 8) + 64;
    READER_BASE + r.blocks() as u64 * per_block
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> StorageError + 'a {
    move |e| StorageError::io(path, op, e)
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
                .map(|_| Mutex::new(Part { layers: [Vec::new(), Vec::new()], pending: [None, None], mem: 0 }))
                .collect(),
            sealed: [AtomicUsize::new(0), AtomicUsize::new(0)],
            open_readers: AtomicUsize::new(0),
            usage,
            disk_bytes: AtomicU64::new(0),
            disk_keys: AtomicU64::new(0),
            seq: AtomicU64::new(0),
        }
    }

    /// Reopens a durable store from its manifest: the sealed layers of both
    /// sides, each shard checked (header, index, placement, key count). Files of
    /// layers past the last seal (an interrupted step) are removed.
    pub fn open(dir: &Path, mut opts: DiskOptions) -> Result<Self, StorageError> {
        opts.durable = true;
        let path = dir.join(MANIFEST_NAME);
        let m = read_manifest(&path, K::LIMBS)?;
        let store = Self::empty(dir, m.partitions, opts);
        for side in [Side::Forward, Side::Backward] {
            let sealed = m.sealed[side.index()];
            for layer in 0..sealed {
                for p in 0..m.partitions {
                    let sp = shard_path(dir, side, layer, p);
                    let r = ShardReader::<K>::open(&sp)?;
                    store.check_meta(&r, side, layer, p)?;
                    let mut g = store.part(p);
                    let seq = store.seq.fetch_add(1, Ordering::Relaxed);
                    let mut l = Layer { keys: None, shard: None, len: r.len(), seq };
                    let mut shard = Shard { bytes: r.bytes(), reader: None, reader_mem: 0 };
                    store.disk_bytes.fetch_add(r.bytes(), Ordering::Relaxed);
                    store.disk_keys.fetch_add(r.len(), Ordering::Relaxed);
                    store.usage.add(r.bytes());
                    g.mem += LAYER_RECORD;
                    store.cache_reader(&mut shard, &mut g.mem, r);
                    l.shard = Some(shard);
                    g.layers[side.index()].push(l);
                }
            }
            store.sealed[side.index()].store(sealed, Ordering::Release);
            store.remove_stale_layers(side, sealed)?;
        }
        Ok(store)
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

    fn part(&self, p: usize) -> MutexGuard<'_, Part<K>> {
        self.parts[p].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn meta(side: Side, layer: usize, p: usize) -> ShardMeta {
        ShardMeta { side: side.index() as u8, partition: p as u32, layer: layer as u32 }
    }

    fn check_meta(&self, r: &ShardReader<K>, side: Side, layer: usize, p: usize) -> Result<(), StorageError> {
        let want = Self::meta(side, layer, p);
        let got = r.meta();
        if got != want {
            return Err(StorageError::Misplaced {
                path: r.path().to_path_buf(),
                reason: format!(
                    "it holds side {} partition {} layer {}, expected side {} partition {} layer {}",
                    got.side, got.partition, got.layer, want.side, want.partition, want.layer
                ),
            });
        }
        Ok(())
    }

    /// Writes one partition's layer as a shard file.
    fn write_layer(&self, side: Side, layer: usize, p: usize, keys: &[K]) -> Result<Shard<K>, StorageError> {
        let path = shard_path(&self.dir, side, layer, p);
        if let Some(ldir) = path.parent() {
            fs::create_dir_all(ldir).map_err(io(ldir, "creating directory"))?;
        }
        let mut w = ShardWriter::<K>::create(&path, Self::meta(side, layer, p))?;
        if !self.opts.durable {
            w = w.unsynced();
        }
        for &k in keys {
            w.push(k)?;
        }
        let info = w.finish()?;
        self.disk_bytes.fetch_add(info.bytes, Ordering::AcqRel);
        self.disk_keys.fetch_add(info.keys, Ordering::AcqRel);
        self.usage.add(info.bytes);
        Ok(Shard { bytes: info.bytes, reader: None, reader_mem: 0 })
    }

    /// Forgets a layer that will not be sealed: its RAM and its file.
    fn discard(&self, side: Side, layer: usize, p: usize, l: Layer<K>, mem: &mut u64) {
        *mem = mem.saturating_sub(l.ram_bytes() + LAYER_RECORD);
        if let Some(s) = l.shard {
            *mem = mem.saturating_sub(s.reader_mem);
            if s.reader.is_some() {
                self.open_readers.fetch_sub(1, Ordering::AcqRel);
            }
            self.disk_bytes.fetch_sub(s.bytes.min(self.disk_bytes()), Ordering::AcqRel);
            self.disk_keys.fetch_sub(l.len.min(self.disk_keys()), Ordering::AcqRel);
            self.usage.sub(s.bytes);
            // best effort: an orphan file of an aborted layer is harmless
            let _ = fs::remove_file(shard_path(&self.dir, side, layer, p));
        }
    }

    /// Keeps `r` open in `shard` if its index fits the partition's share and a
    /// descriptor is free; otherwise it is dropped (closed) here.
    fn cache_reader(&self, shard: &mut Shard<K>, mem: &mut u64, r: ShardReader<K>) {
        let cost = reader_cost(&r);
        if *mem + cost > self.part_share {
            return;
        }
        let took = self
            .open_readers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.opts.max_open_shards).then_some(n + 1))
            .is_ok();
        if took {
            *mem += cost;
            shard.reader_mem = cost;
            shard.reader = Some(Box::new(r));
        }
    }

    /// Runs `f` on the reader of a disk layer, opening (and maybe caching) it.
    #[allow(clippy::too_many_arguments)]
    fn with_reader<R>(
        &self,
        shard: &mut Shard<K>,
        len: u64,
        mem: &mut u64,
        side: Side,
        layer: usize,
        p: usize,
        f: impl FnOnce(&ShardReader<K>) -> Result<R, StorageError>,
    ) -> Result<R, StorageError> {
        if let Some(r) = &shard.reader {
            return f(r);
        }
        let r = ShardReader::<K>::open(&shard_path(&self.dir, side, layer, p))?;
        self.check_meta(&r, side, layer, p)?;
        if r.len() != len {
            return Err(StorageError::Misplaced {
                path: r.path().to_path_buf(),
                reason: format!("it holds {} keys, the store wrote {len}", r.len()),
            });
        }
        let out = f(&r)?;
        self.cache_reader(shard, mem, r);
        Ok(out)
    }

    /// Writes out the oldest RAM layers of a partition until `need` more bytes
    /// fit its share ([`SpillPolicy::KeepNewest`]).
    fn evict_oldest(&self, part: &mut Part<K>, p: usize, need: u64) -> Result<(), StorageError> {
        while part.mem + need > self.part_share {
            let layers = &part.layers;
            let oldest = (0..2)
                .flat_map(|s| layers[s].iter().enumerate().filter(|(_, l)| l.keys.is_some()).map(move |(i, l)| (l.seq, s, i)))
                .min();
            let Some((_, s, i)) = oldest else { return Ok(()) };
            let side = Side::from_index(s);
            let l = &mut part.layers[s][i];
            if l.shard.is_none() {
                let keys = l.keys.as_deref().unwrap_or(&[]);
                l.shard = Some(self.write_layer(side, i, p, keys)?);
            }
            let freed = l.ram_bytes();
            l.keys = None;
            part.mem = part.mem.saturating_sub(freed);
        }
        Ok(())
    }

    fn write_manifest(&self) -> Result<(), StorageError> {
        let mut b = [0u8; MANIFEST_LEN];
        b[0..8].copy_from_slice(&MANIFEST_MAGIC);
        b[8..12].copy_from_slice(&MANIFEST_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(K::LIMBS as u32).to_le_bytes());
        b[16..20].copy_from_slice(&(self.parts.len() as u32).to_le_bytes());
        b[20..24].copy_from_slice(&(self.layers(Side::Forward) as u32).to_le_bytes());
        b[24..28].copy_from_slice(&(self.layers(Side::Backward) as u32).to_le_bytes());
        let h = xxh3_64(&b[..32]);
        b[32..40].copy_from_slice(&h.to_le_bytes());
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

/// What a manifest records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Manifest {
    pub partitions: usize,
    pub sealed: [usize; 2],
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// Reads and checks a store manifest for `limbs`-limb keys.
pub fn read_manifest(path: &Path, limbs: usize) -> Result<Manifest, StorageError> {
    let b = fs::read(path).map_err(io(path, "reading"))?;
    let bad = |reason: String| StorageError::BadManifest { path: path.to_path_buf(), reason };
    if b.len() < MANIFEST_LEN {
        return Err(StorageError::Truncated {
            path: path.to_path_buf(),
            expected: MANIFEST_LEN as u64,
            found: b.len() as u64,
        });
    }
    if b.len() > MANIFEST_LEN {
        return Err(bad(format!("{} bytes, a manifest has {MANIFEST_LEN}", b.len())));
    }
    if b[0..8] != MANIFEST_MAGIC {
        return Err(bad("bad magic bytes".into()));
    }
    let mut h = [0u8; 8];
    h.copy_from_slice(&b[32..40]);
    let (stored, computed) = (u64::from_le_bytes(h), xxh3_64(&b[..32]));
    if stored != computed {
        return Err(bad(format!("checksum mismatch: stored {stored:#018x}, contents hash to {computed:#018x}")));
    }
    let version = le_u32(&b, 8);
    if version != MANIFEST_VERSION {
        return Err(bad(format!("version {version} is not supported (this build reads version {MANIFEST_VERSION})")));
    }
    let found = le_u32(&b, 12) as usize;
    if found != limbs {
        return Err(bad(format!("the store holds {found}-limb keys, opened for {limbs}-limb keys")));
    }
    let partitions = le_u32(&b, 16) as usize;
    if !partitions.is_power_of_two() || partitions > 1 << 16 {
        return Err(bad(format!("{partitions} partitions is not a power of two up to 65536")));
    }
    Ok(Manifest { partitions, sealed: [le_u32(&b, 20) as usize, le_u32(&b, 24) as usize] })
}

impl<K: StateKey> PartitionStore<K> for DiskStore<K> {
    fn partitions(&self) -> usize {
        self.parts.len()
    }

    fn layers(&self, side: Side) -> usize {
        self.sealed[side.index()].load(Ordering::Acquire)
    }

    fn layer_len(&self, side: Side, layer: usize, partition: usize) -> u64 {
        self.part(partition).layers[side.index()].get(layer).map_or(0, |l| l.len)
    }

    fn for_each_chunk(
        &self,
        side: Side,
        layer: usize,
        partition: usize,
        f: &mut dyn FnMut(&[K]) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let mut g = self.part(partition);
        let Part { layers, mem, .. } = &mut *g;
        let Some(Layer { keys, shard, len, .. }) = layers[side.index()].get_mut(layer) else {
            return Ok(());
        };
        if let Some(keys) = keys {
            for chunk in keys.chunks(CHUNK) {
                f(chunk)?;
            }
            return Ok(());
        }
        match shard {
            Some(sh) if *len > 0 => {
                self.with_reader(sh, *len, mem, side, layer, partition, |r| r.for_each_block(|b| f(b)))
            }
            _ => Ok(()),
        }
    }

    fn retain_unseen(&self, side: Side, partition: usize, candidates: &mut Vec<K>) -> Result<(), StorageError> {
        let mut g = self.part(partition);
        let Part { layers, mem, .. } = &mut *g;
        // newest layers first: in BFS most duplicates are recent
        for (i, l) in layers[side.index()].iter_mut().enumerate().rev() {
            if candidates.is_empty() {
                break;
            }
            let Layer { keys, shard, len, .. } = l;
            if *len == 0 {
                continue;
            }
            if let Some(keys) = keys {
                subtract_sorted(candidates, keys);
            } else if let Some(sh) = shard {
                let seen = self.with_reader(sh, *len, mem, side, i, partition, |r| r.contains_sorted(candidates))?;
                let mut at = 0;
                candidates.retain(|_| {
                    let dup = seen.get(at).copied().unwrap_or(false);
                    at += 1;
                    !dup
                });
            }
        }
        Ok(())
    }

    fn find_any(&self, side: Side, partition: usize, keys: &[K]) -> Result<Option<(K, usize)>, StorageError> {
        if keys.is_empty() {
            return Ok(None);
        }
        let mut g = self.part(partition);
        let Part { layers, mem, .. } = &mut *g;
        for (i, l) in layers[side.index()].iter_mut().enumerate() {
            let Layer { keys: ram, shard, len, .. } = l;
            if *len == 0 {
                continue;
            }
            if let Some(ram) = ram {
                if let Some(k) = first_common(keys, ram) {
                    return Ok(Some((k, i)));
                }
            } else if let Some(sh) = shard {
                let found = self.with_reader(sh, *len, mem, side, i, partition, |r| r.contains_sorted(keys))?;
                if let Some(k) = found.iter().position(|&b| b).and_then(|j| keys.get(j)) {
                    return Ok(Some((*k, i)));
                }
            }
        }
        Ok(None)
    }

    fn contains(&self, side: Side, layer: usize, partition: usize, key: &K) -> Result<bool, StorageError> {
        let mut g = self.part(partition);
        let Part { layers, mem, .. } = &mut *g;
        let Some(Layer { keys, shard, len, .. }) = layers[side.index()].get_mut(layer) else {
            return Ok(false);
        };
        if let Some(keys) = keys {
            return Ok(keys.binary_search(key).is_ok());
        }
        match shard {
            Some(sh) if *len > 0 => self.with_reader(sh, *len, mem, side, layer, partition, |r| r.contains(key)),
            _ => Ok(false),
        }
    }

    fn push_layer(&self, side: Side, partition: usize, mut keys: Vec<K>) -> Result<(), StorageError> {
        keys.shrink_to_fit();
        let s = side.index();
        let layer = self.layers(side);
        let len = keys.len() as u64;
        let bytes = (keys.capacity() * std::mem::size_of::<K>()) as u64;
        let mut g = self.part(partition);
        let part = &mut *g;
        if let Some(old) = part.pending[s].take() {
            self.discard(side, layer, partition, old, &mut part.mem);
        }
        let fits = len == 0
            || match self.opts.policy {
                SpillPolicy::AllToDisk => false,
                SpillPolicy::KeepOldest => part.mem + LAYER_RECORD + bytes <= self.part_share,
                SpillPolicy::KeepNewest => {
                    if LAYER_RECORD + bytes <= self.part_share {
                        self.evict_oldest(part, partition, LAYER_RECORD + bytes)?;
                    }
                    part.mem + LAYER_RECORD + bytes <= self.part_share
                }
            };
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut l = Layer { keys: None, shard: None, len, seq };
        if self.opts.durable || !fits {
            l.shard = Some(self.write_layer(side, layer, partition, &keys)?);
        }
        if fits {
            part.mem += bytes;
            l.keys = Some(keys);
        }
        part.mem += LAYER_RECORD;
        part.pending[s] = Some(l);
        Ok(())
    }

    fn seal_layer(&self, side: Side) -> Result<(), StorageError> {
        let s = side.index();
        let layer = self.layers(side);
        for p in 0..self.parts.len() {
            let mut g = self.part(p);
            let l = match g.pending[s].take() {
                Some(l) => l,
                None => {
                    // a partition nobody pushed to holds an empty layer
                    let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                    let mut l = Layer { keys: Some(Vec::new()), shard: None, len: 0, seq };
                    if self.opts.durable {
                        l.shard = Some(self.write_layer(side, layer, p, &[])?);
                    }
                    g.mem += LAYER_RECORD;
                    l
                }
            };
            g.layers[s].push(l);
        }
        if self.opts.durable {
            // the new L{layer} entry must reach disk before the manifest names it
            let ldir = self.dir.join(side_dir(side)).join(format!("L{layer}"));
            sync_parent_dir(&ldir)?;
            self.sealed[s].fetch_add(1, Ordering::AcqRel);
            self.write_manifest()?;
        } else {
            self.sealed[s].fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    fn abort_layer(&self, side: Side) {
        let layer = self.layers(side);
        for p in 0..self.parts.len() {
            let mut g = self.part(p);
            let part = &mut *g;
            if let Some(l) = part.pending[side.index()].take() {
                self.discard(side, layer, p, l, &mut part.mem);
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
        let side = proptest::collection::vec(layer, 1..6).prop_map(|mut side| {
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
        store.for_each_chunk(side, layer, p, &mut |c| {
            assert!(c.windows(2).all(|w| w[0] < w[1]));
            v.extend_from_slice(c);
            Ok(())
        })?;
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
            let records = (disk.layers(Side::Forward) + disk.layers(Side::Backward)) as u64 * 4 * LAYER_RECORD;
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
        let layer = |seed: u64, n: u64| (0..n).map(|i| xxh3_64(&(seed * 1_000_003 + i).to_le_bytes()) % 1_000_000).collect::<Vec<_>>();
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
        store.push_layer(Side::Forward, 1, vec![7]).unwrap();
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
            assert!(shard_path(dir.path(), Side::Forward, 3, 3).exists());
        }
        // a second create on the same directory is refused
        let e = DiskStore::<u64>::create(dir.path(), 8, DiskOptions::default()).err().unwrap();
        assert!(matches!(e, StorageError::BadManifest { .. }), "{e}");

        let store = DiskStore::<u64>::open(dir.path(), DiskOptions::default()).unwrap();
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
        let store = DiskStore::<u64>::open(dir.path(), DiskOptions { memory_bytes: 0, ..DiskOptions::default() }).unwrap();
        assert_eq!(store.layers(Side::Backward), 3);
        assert_same(&reference, &store, parts, &probes);

        // opened for the wrong key width
        let e = DiskStore::<u128>::open(dir.path(), DiskOptions::default()).err().unwrap();
        assert!(matches!(e, StorageError::BadManifest { ref reason, .. } if reason.contains("1-limb")), "{e}");
    }

    /// A spilled store with every layer on disk and no cached readers, so each
    /// access opens its file.
    fn spilled(dir: &Path) -> DiskStore<u64> {
        let store = DiskStore::<u64>::create(
            dir,
            4,
            DiskOptions { max_open_shards: 0, ..opts(0, SpillPolicy::AllToDisk) },
        )
        .unwrap();
        fill(&store, &sample_layers(), Partitioner::new(4));
        store
    }

    fn retain_all(store: &DiskStore<u64>, side: Side) -> Result<(), StorageError> {
        for p in 0..4 {
            let mut c: Vec<u64> = (0..1_000_000).step_by(97).filter(|k| Partitioner::new(4).of(k) == p).collect();
            store.retain_unseen(side, p, &mut c)?;
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
        let (a, b) = (shard_path(dir.path(), Side::Forward, 0, 0), shard_path(dir.path(), Side::Forward, 0, 1));
        fs::copy(&a, &b).unwrap();
        let e = chunks(&store, Side::Forward, 0, 1).unwrap_err();
        assert!(matches!(e, StorageError::Misplaced { ref path, ref reason } if *path == b && reason.contains("partition 0")), "{e}");
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

    #[test]
    fn manifest_damage_is_named() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = DiskStore::<u64>::create(dir.path(), 4, DiskOptions { durable: true, ..DiskOptions::default() }).unwrap();
            fill(&store, &sample_layers(), Partitioner::new(4));
        }
        let path = dir.path().join(MANIFEST_NAME);
        let good = fs::read(&path).unwrap();
        assert_eq!(read_manifest(&path, 1).unwrap(), Manifest { partitions: 4, sealed: [3, 2] });
        for at in [0, 9, 17, 21, 33] {
            let mut b = good.clone();
            b[at] ^= 1;
            fs::write(&path, &b).unwrap();
            let e = DiskStore::<u64>::open(dir.path(), DiskOptions::default()).err().unwrap();
            assert!(matches!(e, StorageError::BadManifest { path: ref p, .. } if *p == path), "flip at {at}: {e}");
        }
        fs::write(&path, &good[..20]).unwrap();
        let e = DiskStore::<u64>::open(dir.path(), DiskOptions::default()).err().unwrap();
        assert!(matches!(e, StorageError::Truncated { found: 20, .. }), "{e}");
        fs::remove_file(&path).unwrap();
        let e = DiskStore::<u64>::open(dir.path(), DiskOptions::default()).err().unwrap();
        assert!(matches!(e, StorageError::Io { ref path, .. } if path.ends_with(MANIFEST_NAME)), "{e}");
        // a sealed layer's shard missing at reopen
        fs::write(&path, &good).unwrap();
        let victim = shard_path(dir.path(), Side::Backward, 1, 2);
        fs::remove_file(&victim).unwrap();
        let e = DiskStore::<u64>::open(dir.path(), DiskOptions::default()).err().unwrap();
        assert!(matches!(e, StorageError::Io { ref path, .. } if *path == victim), "{e}");
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
