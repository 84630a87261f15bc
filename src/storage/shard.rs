//! Shard files: one sorted, strictly increasing run of state keys on disk.
//!
//! The search detects duplicates late: a BFS layer is generated, sorted and
//! written per partition, and membership is settled afterwards by merging or
//! probing sorted runs. So a shard must be cheap to stream in order (merge) and
//! cheap to probe for a single key (bidirectional meet checks, spot lookups).
//! Keys are cut into blocks; a small in-memory index of block first keys turns
//! a lookup into one binary search plus one block read and decode.
//!
//! Inside a block, sorted keys are mostly small gaps, so the first key is stored
//! whole and the rest as LEB128 deltas over the full key width; LZ4 then squeezes
//! what regularity remains (and is skipped when it would not shrink the block).
//!
//! ```text
//! offset              size          field
//! 0                   64            header
//!   0                   8             magic b"SKSHARD\0"
//!   8                   4             format version (u32, = 1)
//!   12                  4             key limbs (u32, = K::LIMBS)
//!   16                  4             nominal keys per block (u32, 1..=65536)
//!   20                  1             meta.side (u8), then 3 zero bytes
//!   24                  4             meta.partition (u32)
//!   28                  4             meta.layer (u32)
//!   32                  8             number of keys (u64)
//!   40                  8             number of blocks (u64)
//!   48                  8             total file length (u64)
//!   56                  8             reserved, zero
//! 64                  Σ stored_len  body: blocks back to back, each raw or LZ4 block-format
//!                                     raw block = first key (LIMBS×8 bytes, limb 0 first, LE)
//!                                                 + (count−1) LEB128 deltas (each ≥ 1)
//! index_offset        blocks × E    block index, E = LIMBS×8 + 29 bytes per entry:
//!                                     first key (LIMBS×8), offset u64, stored_len u32,
//!                                     raw_len u32, count u32, codec u8 (0 raw, 1 LZ4),
//!                                     xxh3-64 of the stored bytes u64
//! file_len − 40       40            footer: index_offset u64, file_len u64,
//!                                     xxh3-64(header ‖ index) u64,
//!                                     xxh3-64(body ‖ index ‖ header) u64, magic
//! ```
//! All integers are little-endian.
//!
//! Integrity is layered so that corruption is reported rather than answered:
//! `open` checks the header/index hash (the index is read anyway, the body is
//! not), every block read checks that block's hash before decoding, and the
//! whole-file checksum is checked by [`ShardReader::verify`] and by the
//! streaming readers as they go. The whole-file checksum covers every byte
//! before the footer but hashes the header *last*: a streaming writer only
//! learns the key and block counts at the end, then rewrites the header in
//! place, and a streaming hash cannot be prepended to.
//!
//! A writer writes `<path>.tmp`, fsyncs it and renames it over `<path>` only
//! when complete, so a crash never leaves a half-written file under a shard's
//! name; the header stays zeroed (bad magic) until the very end.

use std::fs::{self, File};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use super::error::StorageError;
use super::files::tmp_path;
use crate::engine::partition::gallop;
use crate::model::key::StateKey;

const MAGIC: [u8; 8] = *b"SKSHARD\0";
/// Format version written and accepted.
pub const FORMAT_VERSION: u32 = 1;
const HEADER_LEN: u64 = 64;
const FOOTER_LEN: u64 = 40;
/// Keys per block written by [`ShardWriter::create`]: a lookup decodes at most
/// this many keys, and the index costs one entry per this many keys.
pub const DEFAULT_BLOCK_KEYS: u32 = 4096;
/// Largest block a reader accepts; bounds the memory a (corrupt) index can ask for.
pub const MAX_BLOCK_KEYS: u32 = 1 << 16;
/// Widest key the codec's fixed scratch space holds (`BitKey<16>`).
const MAX_LIMBS: usize = 16;
const CODEC_RAW: u8 = 0;
const CODEC_LZ4: u8 = 1;
/// Write buffer of a shard writer. Resident while a shard is written, outside any
/// memory budget, so kept to a quarter MiB: larger writes gain nothing measurable.
const WRITE_BUFFER: usize = 1 << 18;
const VERIFY_CHUNK: usize = 1 << 20;

/// Where a shard belongs; stored in the header so that a file put in the wrong
/// place is caught by the caller comparing it against what it expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ShardMeta {
    pub side: u8,
    pub partition: u32,
    pub layer: u32,
}

/// What a finished shard holds and costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardInfo {
    pub keys: u64,
    pub bytes: u64,
}

type Limbs = [u64; MAX_LIMBS];

fn entry_len(limbs: usize) -> u64 {
    limbs as u64 * 8 + 29
}

/// Longest LEB128 encoding of a `limbs`-wide delta.
fn max_varint_len(limbs: usize) -> u64 {
    (limbs as u64 * 64).div_ceil(7)
}

// Fixed-offset readers; callers only pass offsets inside buffers whose length
// the code itself established, never lengths taken from the file.
fn rd_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn rd_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn check_key_type<K: StateKey>(path: &Path) -> Result<(), StorageError> {
    if K::LIMBS == 0 || K::LIMBS > MAX_LIMBS {
        return Err(StorageError::UnsupportedKeyType { path: path.to_path_buf(), limbs: K::LIMBS });
    }
    Ok(())
}

#[inline]
fn limbs_of<K: StateKey>(k: &K) -> Limbs {
    let mut l = [0u64; MAX_LIMBS];
    for (i, x) in l.iter_mut().enumerate().take(K::LIMBS) {
        *x = k.limb(i);
    }
    l
}

#[inline]
fn key_of<K: StateKey>(l: &Limbs) -> K {
    K::from_limbs(&l[..K::LIMBS])
}

fn put_key<K: StateKey>(k: &K, out: &mut Vec<u8>) {
    for i in 0..K::LIMBS {
        out.extend_from_slice(&k.limb(i).to_le_bytes());
    }
}

/// `a - b` over `n` limbs; the caller guarantees `a > b`.
#[inline]
fn sub_limbs(a: &Limbs, b: &Limbs, n: usize) -> Limbs {
    let mut d = [0u64; MAX_LIMBS];
    let mut borrow = false;
    for i in 0..n {
        let (x, b1) = a[i].overflowing_sub(b[i]);
        let (y, b2) = x.overflowing_sub(borrow as u64);
        d[i] = y;
        borrow = b1 || b2;
    }
    d
}

/// `acc += d` over `n` limbs; returns true on overflow out of the top limb.
#[inline]
fn add_limbs(acc: &mut Limbs, d: &Limbs, n: usize) -> bool {
    let mut carry = false;
    for i in 0..n {
        let (x, c1) = acc[i].overflowing_add(d[i]);
        let (y, c2) = x.overflowing_add(carry as u64);
        acc[i] = y;
        carry = c1 || c2;
    }
    carry
}

/// LEB128 of a nonzero `n`-limb integer, 7 bits at a time from the bottom.
#[inline]
fn put_delta(d: &Limbs, n: usize, out: &mut Vec<u8>) {
    let mut top = n;
    while top > 1 && d[top - 1] == 0 {
        top -= 1;
    }
    let bits = (top - 1) * 64 + (64 - d[top - 1].leading_zeros() as usize);
    let groups = bits.div_ceil(7).max(1);
    for g in 0..groups {
        let p = g * 7;
        let (w, s) = (p / 64, p % 64);
        let mut v = d[w] >> s;
        if s > 57 && w + 1 < n {
            v |= d[w + 1] << (64 - s);
        }
        let cont = if g + 1 < groups { 0x80 } else { 0 };
        out.push((v & 0x7f) as u8 | cont);
    }
}

/// Inverse of [`put_delta`], rejecting encodings that run off the buffer or
/// exceed the key width instead of wrapping.
#[inline]
fn get_delta(buf: &[u8], pos: &mut usize, n: usize, out: &mut Limbs) -> Result<(), &'static str> {
    out[..n].fill(0);
    let mut p = 0usize;
    loop {
        let Some(&b) = buf.get(*pos) else {
            return Err("delta runs past the end of the block");
        };
        *pos += 1;
        if p >= n * 64 {
            return Err("delta encoding longer than the key width");
        }
        let v = (b & 0x7f) as u64;
        let (w, s) = (p / 64, p % 64);
        out[w] |= v << s;
        if s > 57 {
            let spill = v >> (64 - s);
            if spill != 0 {
                if w + 1 < n {
                    out[w + 1] |= spill;
                } else {
                    return Err("delta overflows the key width");
                }
            }
        }
        if b & 0x80 == 0 {
            return Ok(());
        }
        p += 7;
    }
}

/// Decodes one raw block into `out`, checking it against what the index says.
fn decode_block<K: StateKey>(
    raw: &[u8],
    count: u32,
    first: &K,
    next_first: Option<&K>,
    out: &mut Vec<K>,
) -> Result<(), String> {
    out.clear();
    let n = K::LIMBS;
    let kb = n * 8;
    if raw.len() < kb {
        return Err(format!("{} bytes cannot hold a {kb}-byte first key", raw.len()));
    }
    let mut cur = [0u64; MAX_LIMBS];
    for (i, x) in cur.iter_mut().enumerate().take(n) {
        *x = rd_u64(raw, i * 8);
    }
    let k0: K = key_of(&cur);
    if k0 != *first {
        return Err("first key differs from the index".into());
    }
    out.push(k0);
    let mut pos = kb;
    let mut d = [0u64; MAX_LIMBS];
    for i in 1..count {
        get_delta(raw, &mut pos, n, &mut d).map_err(|e| format!("key {i}: {e}"))?;
        if d[..n].iter().all(|&x| x == 0) {
            return Err(format!("key {i}: zero delta (keys must be strictly increasing)"));
        }
        if add_limbs(&mut cur, &d, n) {
            return Err(format!("key {i}: delta overflows the key width"));
        }
        out.push(key_of(&cur));
    }
    if pos != raw.len() {
        return Err(format!("{} trailing bytes after {count} keys", raw.len() - pos));
    }
    if let (Some(last), Some(nf)) = (out.last(), next_first) {
        if last >= nf {
            return Err("last key is not below the next block's first key".into());
        }
    }
    Ok(())
}

fn encode_header(limbs: usize, block_keys: u32, meta: ShardMeta, keys: u64, blocks: u64, file_len: u64) -> [u8; 64] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(limbs as u32).to_le_bytes());
    h[16..20].copy_from_slice(&block_keys.to_le_bytes());
    h[20] = meta.side;
    h[24..28].copy_from_slice(&meta.partition.to_le_bytes());
    h[28..32].copy_from_slice(&meta.layer.to_le_bytes());
    h[32..40].copy_from_slice(&keys.to_le_bytes());
    h[40..48].copy_from_slice(&blocks.to_le_bytes());
    h[48..56].copy_from_slice(&file_len.to_le_bytes());
    h
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        let n = file.seek_read(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        done += n;
    }
    Ok(())
}

/// A rename is only durable once the directory entry is on disk too.
pub(crate) fn sync_parent_dir(path: &Path) -> Result<(), StorageError> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(dir).and_then(|d| d.sync_all()).map_err(|e| StorageError::io(dir, "syncing directory", e))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Writes `keys` (strictly increasing) as a shard at `path`.
pub fn write_shard<K: StateKey>(path: &Path, meta: ShardMeta, keys: &[K]) -> Result<ShardInfo, StorageError> {
    let mut w = ShardWriter::<K>::create(path, meta)?;
    for &k in keys {
        w.push(k)?;
    }
    w.finish()
}

/// Like [`write_shard`] without the fsyncs ([`ShardWriter::unsynced`]).
pub fn write_shard_unsynced<K: StateKey>(path: &Path, meta: ShardMeta, keys: &[K]) -> Result<ShardInfo, StorageError> {
    let mut w = ShardWriter::<K>::create(path, meta)?.unsynced();
    for &k in keys {
        w.push(k)?;
    }
    w.finish()
}

/// Streams strictly increasing keys into a shard, holding one block and the
/// index in memory. Dropping it unfinished removes the `.tmp` file.
///
/// After any error the writer refuses further work ([`StorageError::WriterFailed`]):
/// a shard that silently lacks a key would be worse than no shard.
pub struct ShardWriter<K: StateKey> {
    path: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
    meta: ShardMeta,
    block_keys: u32,
    hasher: Box<Xxh3>,
    pos: u64,
    keys: u64,
    blocks: u64,
    index: Vec<u8>,
    prev: Option<K>,
    prev_limbs: Limbs,
    block_first: K,
    block_count: u32,
    raw: Vec<u8>,
    comp: Vec<u8>,
    failed: bool,
    finished: bool,
    sync: bool,
}

impl<K: StateKey> ShardWriter<K> {
    /// Starts `<path>.tmp` with [`DEFAULT_BLOCK_KEYS`] keys per block.
    pub fn create(path: &Path, meta: ShardMeta) -> Result<Self, StorageError> {
        Self::create_with_block_keys(path, meta, DEFAULT_BLOCK_KEYS)
    }

    /// Like [`ShardWriter::create`] with `block_keys` (1..=[`MAX_BLOCK_KEYS`])
    /// keys per block: smaller blocks make lookups cheaper and the index bigger.
    pub fn create_with_block_keys(path: &Path, meta: ShardMeta, block_keys: u32) -> Result<Self, StorageError> {
        check_key_type::<K>(path)?;
        if block_keys == 0 || block_keys > MAX_BLOCK_KEYS {
            return Err(StorageError::io(
                path,
                "creating",
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{block_keys} keys per block is outside 1..={MAX_BLOCK_KEYS}"),
                ),
            ));
        }
        let tmp = tmp_path(path);
        let file = File::create(&tmp).map_err(|e| StorageError::io(&tmp, "creating", e))?;
        let mut out = BufWriter::with_capacity(WRITE_BUFFER, file);
        // Zeroed placeholder: until finish() rewrites it, the file has no magic
        // and can never be mistaken for a shard.
        out.write_all(&[0u8; HEADER_LEN as usize]).map_err(|e| StorageError::io(&tmp, "writing", e))?;
        Ok(ShardWriter {
            path: path.to_path_buf(),
            tmp,
            out: Some(out),
            meta,
            block_keys,
            hasher: Box::new(Xxh3::new()),
            pos: HEADER_LEN,
            keys: 0,
            blocks: 0,
            index: Vec::new(),
            prev: None,
            prev_limbs: [0; MAX_LIMBS],
            block_first: K::default(),
            block_count: 0,
            raw: Vec::new(),
            comp: Vec::new(),
            failed: false,
            finished: false,
            sync: true,
        })
    }

    /// Skips the fsyncs of the file and its directory in [`ShardWriter::finish`].
    /// For scratch files that die with the process (spilled layers, exchange
    /// runs): the rename still makes the file appear whole or not at all, and an
    /// fsync per file would cost more than the rest of writing it.
    pub fn unsynced(mut self) -> Self {
        self.sync = false;
        self
    }

    /// Appends `key`, which must be strictly greater than the previous one.
    pub fn push(&mut self, key: K) -> Result<(), StorageError> {
        if self.failed {
            return Err(StorageError::WriterFailed { path: self.path.clone() });
        }
        let r = self.push_inner(key);
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    /// Keys pushed so far.
    pub fn len(&self) -> u64 {
        self.keys
    }

    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }

    fn push_inner(&mut self, key: K) -> Result<(), StorageError> {
        let limbs = limbs_of(&key);
        if let Some(p) = self.prev {
            if key <= p {
                return Err(StorageError::NotSorted { path: self.path.clone(), index: self.keys });
            }
        }
        if self.block_count == 0 {
            self.raw.clear();
            put_key(&key, &mut self.raw);
            self.block_first = key;
        } else {
            let d = sub_limbs(&limbs, &self.prev_limbs, K::LIMBS);
            put_delta(&d, K::LIMBS, &mut self.raw);
        }
        self.block_count += 1;
        self.keys += 1;
        self.prev = Some(key);
        self.prev_limbs = limbs;
        if self.block_count == self.block_keys {
            self.flush_block()?;
        }
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), StorageError> {
        match self.out.as_mut() {
            Some(out) => out.write_all(bytes).map_err(|e| StorageError::io(&self.tmp, "writing", e)),
            None => Err(StorageError::WriterFailed { path: self.path.clone() }),
        }
    }

    fn flush_block(&mut self) -> Result<(), StorageError> {
        if self.block_count == 0 {
            return Ok(());
        }
        self.comp.resize(lz4_flex::block::get_maximum_output_size(self.raw.len()), 0);
        // Compression can only fail on a too-small output buffer; storing the
        // block raw is a correct answer to that as well as to incompressible data.
        let codec = match lz4_flex::block::compress_into(&self.raw, &mut self.comp) {
            Ok(n) if n < self.raw.len() => {
                self.comp.truncate(n);
                CODEC_LZ4
            }
            _ => CODEC_RAW,
        };
        let stored = if codec == CODEC_LZ4 { std::mem::take(&mut self.comp) } else { std::mem::take(&mut self.raw) };
        let hash = xxh3_64(&stored);
        let res = self.write(&stored);
        self.hasher.update(&stored);
        // Block sizes are bounded by MAX_BLOCK_KEYS × widest key, far below u32::MAX.
        let stored_len = stored.len() as u32;
        let raw_len = if codec == CODEC_LZ4 { self.raw.len() } else { stored.len() } as u32;
        put_key(&self.block_first, &mut self.index);
        self.index.extend_from_slice(&self.pos.to_le_bytes());
        self.index.extend_from_slice(&stored_len.to_le_bytes());
        self.index.extend_from_slice(&raw_len.to_le_bytes());
        self.index.extend_from_slice(&self.block_count.to_le_bytes());
        self.index.push(codec);
        self.index.extend_from_slice(&hash.to_le_bytes());
        self.pos += stored.len() as u64;
        self.blocks += 1;
        self.block_count = 0;
        if codec == CODEC_LZ4 {
            self.comp = stored;
        } else {
            self.raw = stored;
        }
        res
    }

    /// Completes the shard: index, header, footer, fsync (unless
    /// [`ShardWriter::unsynced`]), rename into place.
    pub fn finish(mut self) -> Result<ShardInfo, StorageError> {
        if self.failed {
            return Err(StorageError::WriterFailed { path: self.path.clone() });
        }
        let r = self.finish_inner();
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn finish_inner(&mut self) -> Result<ShardInfo, StorageError> {
        self.flush_block()?;
        let index_offset = self.pos;
        let index = std::mem::take(&mut self.index);
        self.write(&index)?;
        self.hasher.update(&index);
        let file_len = index_offset + index.len() as u64 + FOOTER_LEN;
        let header = encode_header(K::LIMBS, self.block_keys, self.meta, self.keys, self.blocks, file_len);
        self.hasher.update(&header);
        let checksum = self.hasher.digest();
        let mut mh = Xxh3::new();
        mh.update(&header);
        mh.update(&index);
        let mut footer = Vec::with_capacity(FOOTER_LEN as usize);
        footer.extend_from_slice(&index_offset.to_le_bytes());
        footer.extend_from_slice(&file_len.to_le_bytes());
        footer.extend_from_slice(&mh.digest().to_le_bytes());
        footer.extend_from_slice(&checksum.to_le_bytes());
        footer.extend_from_slice(&MAGIC);
        self.write(&footer)?;

        let out = self.out.take().ok_or_else(|| StorageError::WriterFailed { path: self.path.clone() })?;
        let tmp = self.tmp.clone();
        let mut file = out.into_inner().map_err(|e| StorageError::io(&tmp, "writing", e.into_error()))?;
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(&header))
            .map_err(|e| StorageError::io(&tmp, "writing", e))?;
        if self.sync {
            file.sync_all().map_err(|e| StorageError::io(&tmp, "syncing", e))?;
        }
        drop(file);
        fs::rename(&tmp, &self.path).map_err(|e| StorageError::io(&tmp, "renaming", e))?;
        self.finished = true;
        if self.sync {
            sync_parent_dir(&self.path)?;
        }
        Ok(ShardInfo { keys: self.keys, bytes: file_len })
    }
}

impl<K: StateKey> Drop for ShardWriter<K> {
    fn drop(&mut self) {
        if !self.finished {
            self.out = None;
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct BlockEntry<K> {
    first: K,
    offset: u64,
    stored_len: u32,
    raw_len: u32,
    count: u32,
    codec: u8,
    hash: u64,
}

/// Scratch buffers for reading one block, reused across blocks.
#[derive(Default)]
struct Scratch {
    stored: Vec<u8>,
    raw: Vec<u8>,
}

/// An open shard: header and block index in memory, body on disk. Lookups take
/// `&self` and use positional reads, so one reader can serve many threads.
#[derive(Debug)]
pub struct ShardReader<K: StateKey> {
    path: PathBuf,
    file: File,
    meta: ShardMeta,
    keys: u64,
    file_len: u64,
    index_offset: u64,
    checksum: u64,
    header_raw: [u8; HEADER_LEN as usize],
    index_raw: Vec<u8>,
    index: Vec<BlockEntry<K>>,
}

impl<K: StateKey> ShardReader<K> {
    /// Opens and validates header, footer and index. Reads `O(blocks)` bytes,
    /// not the body; block contents are checked as they are read.
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        check_key_type::<K>(path)?;
        let p = || path.to_path_buf();
        let corrupt = |reason: String| StorageError::CorruptIndex { path: path.to_path_buf(), reason };
        let file = File::open(path).map_err(|e| StorageError::io(path, "opening", e))?;
        let actual = file.metadata().map_err(|e| StorageError::io(path, "reading metadata of", e))?.len();
        if actual < HEADER_LEN {
            return Err(StorageError::Truncated { path: p(), expected: HEADER_LEN, found: actual });
        }
        let read =
            |buf: &mut [u8], off: u64| read_exact_at(&file, buf, off).map_err(|e| StorageError::io(path, "reading", e));

        let mut header_raw = [0u8; HEADER_LEN as usize];
        read(&mut header_raw, 0)?;
        let h = &header_raw;
        if h[0..8] != MAGIC {
            return Err(StorageError::BadMagic { path: p() });
        }
        let version = rd_u32(h, 8);
        if version != FORMAT_VERSION {
            return Err(StorageError::UnsupportedVersion { path: p(), found: version, expected: FORMAT_VERSION });
        }
        let limbs = rd_u32(h, 12);
        if limbs as usize != K::LIMBS {
            return Err(StorageError::WrongKeyWidth { path: p(), found: limbs, expected: K::LIMBS as u32 });
        }
        let block_keys = rd_u32(h, 16);
        let meta = ShardMeta { side: h[20], partition: rd_u32(h, 24), layer: rd_u32(h, 28) };
        let keys = rd_u64(h, 32);
        let blocks = rd_u64(h, 40);
        let header_file_len = rd_u64(h, 48);

        // A missing or foreign footer on a file shorter than its header promises
        // is a cut-off write or copy; on a file of the promised length, damage.
        let mut footer = [0u8; FOOTER_LEN as usize];
        let footer_ok = actual >= HEADER_LEN + FOOTER_LEN && {
            read(&mut footer, actual - FOOTER_LEN)?;
            footer[32..40] == MAGIC && rd_u64(&footer, 8) == actual
        };
        if !footer_ok {
            if header_file_len > actual {
                return Err(StorageError::Truncated { path: p(), expected: header_file_len, found: actual });
            }
            return Err(corrupt("footer missing or damaged".into()));
        }
        if header_file_len != actual {
            return Err(corrupt(format!("header says {header_file_len} bytes, file has {actual}")));
        }
        let index_offset = rd_u64(&footer, 0);
        let meta_hash = rd_u64(&footer, 16);
        let checksum = rd_u64(&footer, 24);

        let elen = entry_len(K::LIMBS);
        let index_len = blocks
            .checked_mul(elen)
            .filter(|&l| l <= actual)
            .ok_or_else(|| corrupt(format!("{blocks} blocks cannot fit in {actual} bytes")))?;
        let layout_ok = index_offset >= HEADER_LEN
            && index_offset.checked_add(index_len).and_then(|x| x.checked_add(FOOTER_LEN)) == Some(actual);
        if !layout_ok {
            return Err(corrupt(format!("index at {index_offset} with {blocks} entries does not end at the footer")));
        }
        // index_len <= actual, which is the size of a file that exists, so this
        // allocation is bounded by real bytes, not by a corrupt field.
        let mut index_raw = vec![0u8; index_len as usize];
        read(&mut index_raw, index_offset)?;
        let mut mh = Xxh3::new();
        mh.update(&header_raw);
        mh.update(&index_raw);
        let computed = mh.digest();
        if computed != meta_hash {
            return Err(corrupt(format!(
                "header/index checksum mismatch: footer says {meta_hash:#018x}, computed {computed:#018x}"
            )));
        }

        // The hash above makes the checks below redundant against random damage;
        // they guard the memory-safety and arithmetic assumptions of every later
        // read against a writer bug or a deliberately crafted file.
        if block_keys == 0 || block_keys > MAX_BLOCK_KEYS {
            return Err(corrupt(format!("{block_keys} keys per block is outside 1..={MAX_BLOCK_KEYS}")));
        }
        let kb = K::LIMBS as u64 * 8;
        let mut index: Vec<BlockEntry<K>> = Vec::with_capacity(blocks as usize);
        let mut expect_offset = HEADER_LEN;
        let mut total_keys: u64 = 0;
        for (b, e) in index_raw.chunks_exact(elen as usize).enumerate() {
            let mut l = [0u64; MAX_LIMBS];
            for (i, x) in l.iter_mut().enumerate().take(K::LIMBS) {
                *x = rd_u64(e, i * 8);
            }
            let k = kb as usize;
            let entry = BlockEntry {
                first: key_of::<K>(&l),
                offset: rd_u64(e, k),
                stored_len: rd_u32(e, k + 8),
                raw_len: rd_u32(e, k + 12),
                count: rd_u32(e, k + 16),
                codec: e[k + 20],
                hash: rd_u64(e, k + 21),
            };
            let bad = |why: &str| corrupt(format!("index entry {b}: {why}"));
            if entry.offset != expect_offset {
                return Err(bad("blocks are not contiguous"));
            }
            if entry.count == 0 || entry.count > block_keys {
                return Err(bad("key count outside 1..=keys per block"));
            }
            let c = entry.count as u64;
            let (min_raw, max_raw) = (kb + (c - 1), kb + (c - 1) * max_varint_len(K::LIMBS));
            if (entry.raw_len as u64) < min_raw || entry.raw_len as u64 > max_raw {
                return Err(bad("raw length impossible for its key count"));
            }
            match entry.codec {
                CODEC_RAW if entry.stored_len == entry.raw_len => {}
                CODEC_LZ4 if entry.stored_len > 0 => {}
                _ => return Err(bad("unknown codec or stored length")),
            }
            if let Some(prev) = index.last() {
                if entry.first <= prev.first {
                    return Err(bad("first keys are not increasing"));
                }
            }
            expect_offset += entry.stored_len as u64;
            total_keys += c;
            index.push(entry);
        }
        if expect_offset != index_offset {
            return Err(corrupt("body length does not match the index".into()));
        }
        if total_keys != keys {
            return Err(corrupt(format!("header says {keys} keys, index holds {total_keys}")));
        }

        Ok(ShardReader {
            path: p(),
            file,
            meta,
            keys,
            file_len: actual,
            index_offset,
            checksum,
            header_raw,
            index_raw,
            index,
        })
    }

    pub fn meta(&self) -> ShardMeta {
        self.meta
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.keys
    }

    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }

    /// Number of blocks.
    pub fn blocks(&self) -> usize {
        self.index.len()
    }

    /// File size in bytes.
    pub fn bytes(&self) -> u64 {
        self.file_len
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<(), StorageError> {
        read_exact_at(&self.file, buf, off).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                // The file shrank after open.
                let found = self.file.metadata().map(|m| m.len()).unwrap_or(0);
                StorageError::Truncated { path: self.path.clone(), expected: self.file_len, found }
            } else {
                StorageError::io(&self.path, "reading", e)
            }
        })
    }

    /// Full checksum pass over the file as it is on disk.
    pub fn verify(&self) -> Result<(), StorageError> {
        let mut h = Xxh3::new();
        let end = self.index_offset + self.index_raw.len() as u64;
        let mut buf = vec![0u8; VERIFY_CHUNK];
        let mut off = HEADER_LEN;
        while off < end {
            let n = (end - off).min(VERIFY_CHUNK as u64) as usize;
            self.read_at(&mut buf[..n], off)?;
            h.update(&buf[..n]);
            off += n as u64;
        }
        let mut header = [0u8; HEADER_LEN as usize];
        self.read_at(&mut header, 0)?;
        h.update(&header);
        self.check_checksum(h.digest())
    }

    fn check_checksum(&self, computed: u64) -> Result<(), StorageError> {
        if computed != self.checksum {
            return Err(StorageError::ChecksumMismatch { path: self.path.clone(), stored: self.checksum, computed });
        }
        Ok(())
    }

    /// Reads, hash-checks and decodes block `b` into `out`, feeding the stored
    /// bytes to `whole` when a whole-file checksum is being accumulated.
    fn read_block(
        &self,
        b: usize,
        s: &mut Scratch,
        out: &mut Vec<K>,
        whole: Option<&mut Xxh3>,
    ) -> Result<(), StorageError> {
        let e = &self.index[b];
        let corrupt = |reason: String| StorageError::CorruptBlock { path: self.path.clone(), block: b as u64, reason };
        s.stored.resize(e.stored_len as usize, 0);
        self.read_at(&mut s.stored, e.offset)?;
        if let Some(h) = whole {
            h.update(&s.stored);
        }
        let got = xxh3_64(&s.stored);
        if got != e.hash {
            return Err(corrupt(format!(
                "block checksum mismatch: index says {:#018x}, data hashes to {got:#018x}",
                e.hash
            )));
        }
        let raw: &[u8] = if e.codec == CODEC_LZ4 {
            s.raw.resize(e.raw_len as usize, 0);
            match lz4_flex::block::decompress_into(&s.stored, &mut s.raw) {
                Ok(n) if n == s.raw.len() => &s.raw,
                Ok(n) => return Err(corrupt(format!("decompressed to {n} bytes, index says {}", e.raw_len))),
                Err(err) => return Err(corrupt(format!("lz4: {err}"))),
            }
        } else {
            &s.stored
        };
        let next_first = self.index.get(b + 1).map(|n| &n.first);
        decode_block(raw, e.count, &e.first, next_first, out).map_err(corrupt)
    }

    /// Block that would hold `key`, if any.
    fn block_for(&self, key: &K) -> Option<usize> {
        self.index.partition_point(|e| e.first <= *key).checked_sub(1)
    }

    /// Membership test reading and checking at most one block.
    pub fn contains(&self, key: &K) -> Result<bool, StorageError> {
        let Some(b) = self.block_for(key) else {
            return Ok(false);
        };
        let mut s = Scratch::default();
        let mut keys = Vec::with_capacity(self.index[b].count as usize);
        self.read_block(b, &mut s, &mut keys, None)?;
        Ok(keys.binary_search(key).is_ok())
    }

    /// Membership of each of `sorted_keys` (ascending, duplicates allowed),
    /// reading each block at most once.
    pub fn contains_sorted(&self, sorted_keys: &[K]) -> Result<Vec<bool>, StorageError> {
        if let Some(i) = sorted_keys.windows(2).position(|w| w[1] < w[0]) {
            return Err(StorageError::QueryNotSorted { path: self.path.clone(), index: i + 1 });
        }
        let mut out = Vec::with_capacity(sorted_keys.len());
        let mut s = Scratch::default();
        let mut keys = Vec::new();
        let mut loaded: Option<usize> = None;
        // keys[..pos] of the loaded block are below the current query: queries
        // ascend, so neither the block nor the position ever moves back
        let mut pos = 0;
        for q in sorted_keys {
            let stay = loaded.filter(|&b| !matches!(self.index.get(b + 1), Some(n) if n.first <= *q));
            let Some(b) = stay.or_else(|| self.block_for(q)) else {
                out.push(false);
                continue;
            };
            if loaded != Some(b) {
                self.read_block(b, &mut s, &mut keys, None)?;
                loaded = Some(b);
                pos = 0;
            }
            pos = gallop(&keys, pos, q);
            out.push(keys.get(pos) == Some(q));
        }
        Ok(out)
    }

    /// All keys in order; checks every block and the whole-file checksum.
    pub fn read_all(&self) -> Result<Vec<K>, StorageError> {
        let cap = usize::try_from(self.keys).map_err(|_| StorageError::CorruptIndex {
            path: self.path.clone(),
            reason: "too many keys for memory".into(),
        })?;
        let mut out = Vec::with_capacity(cap);
        self.for_each_block(|ks| {
            out.extend_from_slice(ks);
            Ok(())
        })?;
        Ok(out)
    }

    /// For ranges `i in 0..n` (`range(i)` gives `lo..=hi`, with `lo` ascending in
    /// `i`), calls `found(i, k)` with the smallest stored key `k` in the range, for
    /// the ranges that hold one. Each block is read at most once and only if a
    /// range starts in it; a range past the end of a block is answered from the
    /// next block's first key in the index.
    pub fn find_in_ranges(
        &self,
        n: usize,
        range: impl Fn(usize) -> (K, K),
        mut found: impl FnMut(usize, K),
    ) -> Result<(), StorageError> {
        let mut s = Scratch::default();
        let mut keys = Vec::new();
        let mut loaded: Option<usize> = None;
        let mut pos = 0;
        let mut prev_lo: Option<K> = None;
        for i in 0..n {
            let (lo, hi) = range(i);
            if prev_lo.is_some_and(|p| lo < p) {
                return Err(StorageError::QueryNotSorted { path: self.path.clone(), index: i });
            }
            prev_lo = Some(lo);
            if lo > hi {
                continue;
            }
            let stay = loaded.filter(|&b| !matches!(self.index.get(b + 1), Some(e) if e.first <= lo));
            let Some(b) = stay.or_else(|| self.block_for(&lo)) else {
                // below the first key: only the first key itself can be in range
                if let Some(e) = self.index.first() {
                    if e.first <= hi {
                        found(i, e.first);
                    }
                }
                continue;
            };
            if loaded != Some(b) {
                self.read_block(b, &mut s, &mut keys, None)?;
                loaded = Some(b);
                pos = 0;
            }
            pos = gallop(&keys, pos, &lo);
            let first = keys.get(pos).copied().or_else(|| self.index.get(b + 1).map(|e| e.first));
            if let Some(k) = first.filter(|k| *k <= hi) {
                found(i, k);
            }
        }
        Ok(())
    }

    /// Each block's first key and key count, in order: where the keys lie,
    /// without reading the body.
    pub fn block_starts(&self) -> impl Iterator<Item = (K, u32)> + '_ {
        self.index.iter().map(|e| (e.first, e.count))
    }

    /// Pulls the keys block by block, for merging shards without holding them.
    /// Each block is hash-checked; the whole-file checksum is not.
    pub fn block_cursor(&self) -> Blocks<'_, K> {
        Blocks { reader: self, next: 0, scratch: Scratch::default(), keys: Vec::new() }
    }

    /// Streams the keys in `lo..=hi` in order, reading only the blocks that can
    /// hold them (one block in memory). Each block is hash-checked; the
    /// whole-file checksum is not, since that needs every byte of the file.
    pub fn for_each_in_range(
        &self,
        lo: &K,
        hi: &K,
        mut f: impl FnMut(&[K]) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        if lo > hi {
            return Ok(());
        }
        let mut s = Scratch::default();
        let mut keys = Vec::new();
        for b in self.block_for(lo).unwrap_or(0)..self.index.len() {
            if self.index[b].first > *hi {
                break;
            }
            self.read_block(b, &mut s, &mut keys, None)?;
            let from = keys.partition_point(|k| k < lo);
            let to = keys.partition_point(|k| k <= hi);
            if from < to {
                f(&keys[from..to])?;
            }
        }
        Ok(())
    }

    /// Streams the keys block by block (one block in memory). Each block is
    /// hash-checked before `f` sees it; the whole-file checksum is checked after
    /// the last block, so an `Err` may arrive after `f` has seen every block.
    pub fn for_each_block<E: From<StorageError>>(&self, mut f: impl FnMut(&[K]) -> Result<(), E>) -> Result<(), E> {
        let mut h = Xxh3::new();
        let mut s = Scratch::default();
        let mut keys = Vec::new();
        for b in 0..self.index.len() {
            self.read_block(b, &mut s, &mut keys, Some(&mut h))?;
            f(&keys)?;
        }
        h.update(&self.index_raw);
        h.update(&self.header_raw);
        Ok(self.check_checksum(h.digest())?)
    }
}

/// A pull cursor over a shard's blocks, from [`ShardReader::block_cursor`].
pub struct Blocks<'a, K: StateKey> {
    reader: &'a ShardReader<K>,
    next: usize,
    scratch: Scratch,
    keys: Vec<K>,
}

impl<K: StateKey> Blocks<'_, K> {
    /// The next block's keys (never empty), or `None` after the last block.
    pub fn next_block(&mut self) -> Result<Option<&[K]>, StorageError> {
        if self.next >= self.reader.index.len() {
            return Ok(None);
        }
        self.reader.read_block(self.next, &mut self.scratch, &mut self.keys, None)?;
        self.next += 1;
        Ok(Some(&self.keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::key::BitKey;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    const META: ShardMeta = ShardMeta { side: 1, partition: 7, layer: 42 };

    fn sorted_unique<K: Ord + Copy>(mut v: Vec<K>) -> Vec<K> {
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Writes `keys` with both writer entry points and checks every read path.
    fn check_roundtrip<K: StateKey>(keys: &[K], block_keys: u32, probes: &[K]) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.shard");
        let mut w = ShardWriter::<K>::create_with_block_keys(&path, META, block_keys).unwrap();
        for &k in keys {
            w.push(k).unwrap();
        }
        let info = w.finish().unwrap();
        assert_eq!(info.keys, keys.len() as u64);
        assert_eq!(info.bytes, fs::metadata(&path).unwrap().len());
        assert!(!tmp_path(&path).exists());

        let r = ShardReader::<K>::open(&path).unwrap();
        assert_eq!(r.meta(), META);
        assert_eq!(r.len(), keys.len() as u64);
        r.verify().unwrap();
        assert_eq!(r.read_all().unwrap(), keys);
        let mut streamed = Vec::new();
        r.for_each_block(|b| {
            assert!(!b.is_empty() && b.len() <= block_keys as usize);
            streamed.extend_from_slice(b);
            Ok::<_, StorageError>(())
        })
        .unwrap();
        assert_eq!(streamed, keys);

        let set: BTreeSet<K> = keys.iter().copied().collect();
        for k in keys {
            assert!(r.contains(k).unwrap(), "member {k:?} not found");
        }
        for p in probes {
            assert_eq!(r.contains(p).unwrap(), set.contains(p), "probe {p:?}");
        }
        let mut queries: Vec<K> = keys.iter().chain(probes).copied().collect();
        queries.sort_unstable();
        let expect: Vec<bool> = queries.iter().map(|q| set.contains(q)).collect();
        assert_eq!(r.contains_sorted(&queries).unwrap(), expect);

        let path2 = dir.path().join("t.shard");
        let info2 = write_shard(&path2, META, keys).unwrap();
        assert_eq!(info2.keys, keys.len() as u64);
        assert_eq!(ShardReader::<K>::open(&path2).unwrap().read_all().unwrap(), keys);
    }

    fn limb_strategy() -> impl Strategy<Value = u64> {
        prop_oneof![Just(0u64), Just(u64::MAX), 0u64..4, (u64::MAX - 3)..=u64::MAX, any::<u64>()]
    }

    fn bitkey_strategy<const N: usize>() -> impl Strategy<Value = BitKey<N>> {
        proptest::collection::vec(limb_strategy(), N).prop_map(|l| BitKey::<N>::from_limbs(&l))
    }

    fn u64_strategy() -> impl Strategy<Value = u64> {
        prop_oneof![any::<u64>(), 0u64..3000, (u64::MAX - 3000)..=u64::MAX]
    }

    fn u128_strategy() -> impl Strategy<Value = u128> {
        const B: u128 = 1 << 64;
        prop_oneof![any::<u128>(), 0u128..3000, (B - 1500)..(B + 1500), (u128::MAX - 3000)..=u128::MAX]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn roundtrip_u64(keys in proptest::collection::vec(u64_strategy(), 0..800),
                         probes in proptest::collection::vec(u64_strategy(), 0..50),
                         bk in prop_oneof![1u32..20, Just(DEFAULT_BLOCK_KEYS)]) {
            check_roundtrip(&sorted_unique(keys), bk, &probes);
        }

        #[test]
        fn roundtrip_u128(keys in proptest::collection::vec(u128_strategy(), 0..800),
                          probes in proptest::collection::vec(u128_strategy(), 0..50),
                          bk in prop_oneof![1u32..20, Just(DEFAULT_BLOCK_KEYS)]) {
            check_roundtrip(&sorted_unique(keys), bk, &probes);
        }

        #[test]
        fn roundtrip_bits256(keys in proptest::collection::vec(bitkey_strategy::<4>(), 0..300),
                             probes in proptest::collection::vec(bitkey_strategy::<4>(), 0..30),
                             bk in prop_oneof![1u32..20, Just(DEFAULT_BLOCK_KEYS)]) {
            check_roundtrip(&sorted_unique(keys), bk, &probes);
        }

        #[test]
        fn roundtrip_bits1024(keys in proptest::collection::vec(bitkey_strategy::<16>(), 0..150),
                              probes in proptest::collection::vec(bitkey_strategy::<16>(), 0..30),
                              bk in prop_oneof![1u32..20, Just(DEFAULT_BLOCK_KEYS)]) {
            check_roundtrip(&sorted_unique(keys), bk, &probes);
        }

        #[test]
        fn delta_codec_roundtrip(a in proptest::collection::vec(limb_strategy(), 16), n in 1usize..=16) {
            let mut d = [0u64; MAX_LIMBS];
            d[..n].copy_from_slice(&a[..n]);
            prop_assume!(d.iter().any(|&x| x != 0));
            let mut buf = Vec::new();
            put_delta(&d, n, &mut buf);
            prop_assert!(buf.len() as u64 <= max_varint_len(n));
            let mut pos = 0;
            let mut back = [0u64; MAX_LIMBS];
            get_delta(&buf, &mut pos, n, &mut back).unwrap();
            prop_assert_eq!(pos, buf.len());
            prop_assert_eq!(back, d);
        }
    }

    proptest! {
        /// A crafted block whose hash matches still cannot make the decoder
        /// panic, overflow or return unsorted keys.
        #[test]
        fn decoder_survives_arbitrary_blocks(raw in proptest::collection::vec(any::<u8>(), 0..200), count in 0u32..80) {
            let mut out64 = Vec::new();
            let first = if raw.len() >= 8 { rd_u64(&raw, 0) } else { 0 };
            if decode_block::<u64>(&raw, count, &first, None, &mut out64).is_ok() {
                prop_assert!(out64.windows(2).all(|w| w[0] < w[1]));
            }
            let mut out128 = Vec::new();
            let first = if raw.len() >= 16 { rd_u64(&raw, 0) as u128 | (rd_u64(&raw, 8) as u128) << 64 } else { 0 };
            if decode_block::<u128>(&raw, count, &first, Some(&u128::MAX), &mut out128).is_ok() {
                prop_assert!(out128.windows(2).all(|w| w[0] < w[1]));
            }
            let mut lz = vec![0u8; 4096];
            let _ = lz4_flex::block::decompress_into(&raw, &mut lz);
        }
    }

    #[test]
    fn range_reads_only_the_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.shard");
        let keys: Vec<u64> = (0..1000u64).map(|i| i * 3 + 7).collect();
        let mut w = ShardWriter::<u64>::create_with_block_keys(&path, META, 64).unwrap();
        for &k in &keys {
            w.push(k).unwrap();
        }
        w.finish().unwrap();
        let r = ShardReader::<u64>::open(&path).unwrap();
        for (lo, hi) in [(0, 6), (0, 7), (7, 7), (8, 9), (100, 500), (190, 3000), (2990, 5000), (5, 2), (0, u64::MAX)] {
            let mut got = Vec::new();
            r.for_each_in_range(&lo, &hi, |b| {
                assert!(!b.is_empty());
                got.extend_from_slice(b);
                Ok(())
            })
            .unwrap();
            let expect: Vec<u64> = keys.iter().copied().filter(|&k| k >= lo && k <= hi).collect();
            assert_eq!(got, expect, "{lo}..={hi}");
        }
    }

    proptest! {
        #[test]
        fn ranges_and_blocks_agree_with_a_scan(keys in proptest::collection::vec(0u64..3000, 0..500),
                                               starts in proptest::collection::vec(0u64..3100, 0..80),
                                               width in 0u64..40, bk in 1u32..40) {
            let keys = sorted_unique(keys);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("q.shard");
            let mut w = ShardWriter::<u64>::create_with_block_keys(&path, META, bk).unwrap();
            for &k in &keys {
                w.push(k).unwrap();
            }
            w.finish().unwrap();
            let r = ShardReader::<u64>::open(&path).unwrap();
            let starts = sorted_unique(starts);
            let mut got = Vec::new();
            r.find_in_ranges(starts.len(), |i| (starts[i], starts[i] + width), |i, k| got.push((i, k))).unwrap();
            let expect: Vec<(usize, u64)> = starts
                .iter()
                .enumerate()
                .filter_map(|(i, &lo)| keys.iter().find(|&&k| k >= lo && k <= lo + width).map(|&k| (i, k)))
                .collect();
            prop_assert_eq!(got, expect);
            let mut all = Vec::new();
            let mut it = r.block_cursor();
            while let Some(b) = it.next_block().unwrap() {
                prop_assert!(!b.is_empty());
                all.extend_from_slice(b);
            }
            prop_assert_eq!(all, keys);
        }
    }

    #[test]
    fn edge_shards_every_width() {
        check_roundtrip::<u64>(&[], 4, &[0, 5, u64::MAX]);
        check_roundtrip::<u64>(&[9], 4, &[0, 8, 10, u64::MAX]);
        check_roundtrip::<u64>(&[0, u64::MAX], 1, &[1, u64::MAX - 1]);
        check_roundtrip::<u128>(&[0, u128::MAX], 4, &[1, 1 << 64, u128::MAX - 1]);
        let (lo, hi) = (BitKey::<4>([0; 4]), BitKey::<4>([u64::MAX; 4]));
        check_roundtrip::<BitKey<4>>(&[lo, hi], 4, &[BitKey([0, 0, 0, 1])]);
        let (lo, hi) = (BitKey::<16>([0; 16]), BitKey::<16>([u64::MAX; 16]));
        check_roundtrip::<BitKey<16>>(&[lo, hi], 2, &[BitKey::<16>::from_limbs(&[1; 16])]);
        check_roundtrip::<BitKey<16>>(&[], DEFAULT_BLOCK_KEYS, &[hi]);
    }

    #[test]
    fn overflowing_delta_is_rejected() {
        // 10 groups of 7 bits = 70 bits: cannot be a u64 delta.
        let buf = [0xffu8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        let mut d = [0u64; MAX_LIMBS];
        assert!(get_delta(&buf, &mut 0, 1, &mut d).is_err());
        assert!(get_delta(&[0x80, 0x80], &mut 0, 1, &mut d).is_err());
        let long = [0x80u8; 12];
        assert!(get_delta(&long, &mut 0, 1, &mut d).is_err());
    }

    // ---- corruption ----

    struct Fixture {
        _dir: tempfile::TempDir,
        path: PathBuf,
        keys: Vec<u64>,
        bytes: Vec<u8>,
    }

    /// A u64 shard of 20,000 keys in 5 blocks of 4096, with irregular gaps so
    /// the body is not compressed to almost nothing.
    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.shard");
        let mut k = 0u64;
        let keys: Vec<u64> = (0..20_000u64)
            .map(|i| {
                k += 1 + xxh3_64(&i.to_le_bytes()) % 300;
                k
            })
            .collect();
        write_shard(&path, META, &keys).unwrap();
        let bytes = fs::read(&path).unwrap();
        Fixture { _dir: dir, path, keys, bytes }
    }

    fn flipped(bytes: &[u8], at: usize) -> Vec<u8> {
        let mut b = bytes.to_vec();
        b[at] ^= 0x55;
        b
    }

    #[test]
    fn bad_magic() {
        let f = fixture();
        fs::write(&f.path, flipped(&f.bytes, 3)).unwrap();
        let e = ShardReader::<u64>::open(&f.path).unwrap_err();
        assert!(matches!(e, StorageError::BadMagic { ref path } if *path == f.path), "{e}");
    }

    #[test]
    fn unsupported_version() {
        let f = fixture();
        let mut b = f.bytes.clone();
        b[8..12].copy_from_slice(&99u32.to_le_bytes());
        fs::write(&f.path, b).unwrap();
        let e = ShardReader::<u64>::open(&f.path).unwrap_err();
        assert!(matches!(e, StorageError::UnsupportedVersion { found: 99, expected: FORMAT_VERSION, .. }), "{e}");
    }

    #[test]
    fn wrong_key_width() {
        let f = fixture();
        let e = ShardReader::<u128>::open(&f.path).unwrap_err();
        assert!(matches!(e, StorageError::WrongKeyWidth { found: 1, expected: 2, .. }), "{e}");
        let e = ShardReader::<BitKey<4>>::open(&f.path).unwrap_err();
        assert!(matches!(e, StorageError::WrongKeyWidth { found: 1, expected: 4, .. }), "{e}");
    }

    #[test]
    fn truncated_file() {
        let f = fixture();
        let r = ShardReader::<u64>::open(&f.path).unwrap();
        let len = f.bytes.len();
        let io = r.index_offset as usize;
        assert!(io > 10_000, "fixture body unexpectedly small: {io}");
        drop(r);
        let cuts = [1, 30, 63, 64, 65, (64 + io) / 2, io - 1, io, io + 5, len - 40, len - 20, len - 1];
        for cut in cuts {
            fs::write(&f.path, &f.bytes[..cut]).unwrap();
            let e = ShardReader::<u64>::open(&f.path).unwrap_err();
            assert!(matches!(e, StorageError::Truncated { found, .. } if found == cut as u64), "cut at {cut}: {e}");
        }
    }

    #[test]
    fn zero_length_file() {
        let f = fixture();
        fs::write(&f.path, b"").unwrap();
        let e = ShardReader::<u64>::open(&f.path).unwrap_err();
        assert!(matches!(e, StorageError::Truncated { expected: HEADER_LEN, found: 0, .. }), "{e}");
    }

    #[test]
    fn flipped_body_byte() {
        let f = fixture();
        let r = ShardReader::<u64>::open(&f.path).unwrap();
        assert_eq!(r.blocks(), 5);
        let e2 = r.index[2];
        drop(r);
        fs::write(&f.path, flipped(&f.bytes, (e2.offset + e2.stored_len as u64 / 2) as usize)).unwrap();

        // open does not read the body ...
        let r = ShardReader::<u64>::open(&f.path).unwrap();
        let e = r.verify().unwrap_err();
        assert!(matches!(e, StorageError::ChecksumMismatch { .. }), "{e}");
        // ... and every read of the damaged block refuses to answer.
        let e = r.read_all().unwrap_err();
        assert!(matches!(e, StorageError::CorruptBlock { block: 2, .. }), "{e}");
        let member = f.keys[2 * 4096 + 100];
        let e = r.contains(&member).unwrap_err();
        assert!(matches!(e, StorageError::CorruptBlock { block: 2, .. }), "{e}");
        let e = r.contains(&(member + 1)).unwrap_err();
        assert!(matches!(e, StorageError::CorruptBlock { block: 2, .. }), "{e}");
        let e = r.contains_sorted(&f.keys).unwrap_err();
        assert!(matches!(e, StorageError::CorruptBlock { block: 2, .. }), "{e}");
        let mut seen = 0;
        let e = r
            .for_each_block(|_| {
                seen += 1;
                Ok(())
            })
            .unwrap_err();
        assert!(matches!(e, StorageError::CorruptBlock { block: 2, .. }), "{e}");
        assert_eq!(seen, 2);
        // Undamaged blocks still answer, correctly.
        assert!(r.contains(&f.keys[100]).unwrap());
        assert!(!r.contains(&(f.keys[100] + 1)).unwrap());
    }

    #[test]
    fn flipped_index_byte() {
        let f = fixture();
        let io = ShardReader::<u64>::open(&f.path).unwrap().index_offset as usize;
        for at in [io, io + 3, io + 8 + 2, io + 2 * 37 + 20] {
            fs::write(&f.path, flipped(&f.bytes, at)).unwrap();
            let e = ShardReader::<u64>::open(&f.path).unwrap_err();
            assert!(matches!(e, StorageError::CorruptIndex { .. }), "flip at {at}: {e}");
        }
    }

    #[test]
    fn flipped_header_meta_or_footer() {
        let f = fixture();
        let len = f.bytes.len();
        // partition, layer, key count, file length in the header; index offset,
        // file length, index hash in the footer.
        for at in [24, 29, 33, 49, len - 40, len - 32, len - 24] {
            fs::write(&f.path, flipped(&f.bytes, at)).unwrap();
            let e = ShardReader::<u64>::open(&f.path).unwrap_err();
            assert!(matches!(e, StorageError::CorruptIndex { .. }), "flip at {at}: {e}");
        }
        // The whole-file checksum itself: blocks still verify, the file does not.
        fs::write(&f.path, flipped(&f.bytes, len - 16)).unwrap();
        let r = ShardReader::<u64>::open(&f.path).unwrap();
        assert!(matches!(r.verify().unwrap_err(), StorageError::ChecksumMismatch { .. }));
        assert!(matches!(r.read_all().unwrap_err(), StorageError::ChecksumMismatch { .. }));
        assert!(r.contains(&f.keys[5000]).unwrap());
    }

    /// Every single-byte flip and every truncation of a small multi-block shard
    /// is detected, and nothing ever answers wrongly or panics.
    #[test]
    fn every_flip_and_cut_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.shard");
        let keys: Vec<u128> = (0..300u128).map(|i| (i * i * 7919) << 40).collect();
        let mut w = ShardWriter::<u128>::create_with_block_keys(&path, META, 64).unwrap();
        for &k in &keys {
            w.push(k).unwrap();
        }
        w.finish().unwrap();
        let good = fs::read(&path).unwrap();
        let set: BTreeSet<u128> = keys.iter().copied().collect();
        let probes: Vec<u128> = keys.iter().flat_map(|&k| [k, k + 1]).collect();
        for at in 0..good.len() {
            fs::write(&path, flipped(&good, at)).unwrap();
            let Ok(r) = ShardReader::<u128>::open(&path) else {
                continue;
            };
            assert!(r.verify().is_err(), "flip at {at} passed verify");
            assert!(r.read_all().is_err(), "flip at {at} passed read_all");
            assert_eq!(r.meta(), META, "flip at {at} changed meta silently");
            for p in probes.iter().step_by(7) {
                if let Ok(found) = r.contains(p) {
                    assert_eq!(found, set.contains(p), "flip at {at}: wrong answer for {p}");
                }
            }
            if let Ok(v) = r.contains_sorted(&probes) {
                let expect: Vec<bool> = probes.iter().map(|p| set.contains(p)).collect();
                assert_eq!(v, expect, "flip at {at}: wrong batch answer");
            }
        }
        for cut in 0..good.len() {
            fs::write(&path, &good[..cut]).unwrap();
            assert!(ShardReader::<u128>::open(&path).is_err(), "cut at {cut} opened");
        }
    }

    #[test]
    fn missing_file_names_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope.shard");
        let e = ShardReader::<u64>::open(&path).unwrap_err();
        match &e {
            StorageError::Io { path: p, op, source } => {
                assert_eq!(p, &path);
                assert_eq!(*op, "opening");
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("expected Io, got {other}"),
        }
        assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
    }

    #[test]
    fn leftover_tmp_is_not_a_shard() {
        let f = fixture();
        fs::remove_file(&f.path).unwrap();
        // A crash after part of the data reached disk.
        let tmp = tmp_path(&f.path);
        let mut partial = vec![0u8; HEADER_LEN as usize];
        partial.extend_from_slice(&f.bytes[HEADER_LEN as usize..f.bytes.len() / 2]);
        fs::write(&tmp, &partial).unwrap();
        let e = ShardReader::<u64>::open(&f.path).unwrap_err();
        assert!(matches!(e, StorageError::Io { ref source, .. } if source.kind() == io::ErrorKind::NotFound), "{e}");
        let e = ShardReader::<u64>::open(&tmp).unwrap_err();
        assert!(matches!(e, StorageError::BadMagic { .. }), "{e}");

        // A crashed writer (never dropped) leaves only its .tmp behind.
        let mut w = ShardWriter::<u64>::create(&f.path, META).unwrap();
        for &k in &f.keys {
            w.push(k).unwrap();
        }
        std::mem::forget(w);
        assert!(!f.path.exists());
        assert!(ShardReader::<u64>::open(&tmp).is_err());

        // A new writer overwrites the stale .tmp and succeeds.
        write_shard(&f.path, META, &f.keys).unwrap();
        assert!(!tmp.exists());
        assert_eq!(ShardReader::<u64>::open(&f.path).unwrap().read_all().unwrap(), f.keys);
    }

    #[test]
    fn dropped_writer_removes_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.shard");
        let mut w = ShardWriter::<u64>::create(&path, META).unwrap();
        w.push(1).unwrap();
        assert!(tmp_path(&path).exists());
        drop(w);
        assert!(!tmp_path(&path).exists());
        assert!(!path.exists());
    }

    #[test]
    fn unsorted_input_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.shard");
        let mut w = ShardWriter::<u64>::create(&path, META).unwrap();
        w.push(5).unwrap();
        let e = w.push(5).unwrap_err();
        assert!(matches!(e, StorageError::NotSorted { index: 1, .. }), "{e}");
        assert!(matches!(w.push(6).unwrap_err(), StorageError::WriterFailed { .. }));
        assert!(matches!(w.finish().unwrap_err(), StorageError::WriterFailed { .. }));
        assert!(!path.exists() && !tmp_path(&path).exists());

        let e = write_shard::<u64>(&path, META, &[1, 3, 2]).unwrap_err();
        assert!(matches!(e, StorageError::NotSorted { index: 2, .. }), "{e}");
        assert!(!path.exists());

        write_shard::<u64>(&path, META, &[1, 3]).unwrap();
        let r = ShardReader::<u64>::open(&path).unwrap();
        let e = r.contains_sorted(&[3, 1]).unwrap_err();
        assert!(matches!(e, StorageError::QueryNotSorted { index: 1, .. }), "{e}");
    }

    #[test]
    fn unwritable_directory_names_path() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let ro = dir.path().join("ro");
        fs::create_dir(&ro).unwrap();
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
        // root ignores directory permissions; a directory below a regular file
        // is unwritable for everyone.
        let root_can_write = fs::write(ro.join("probe"), b"").is_ok();
        let target = if root_can_write {
            fs::write(dir.path().join("file"), b"").unwrap();
            dir.path().join("file").join("x.shard")
        } else {
            ro.join("x.shard")
        };
        let e = write_shard::<u64>(&target, META, &[1, 2, 3]).unwrap_err();
        assert!(matches!(e, StorageError::Io { op: "creating", .. }), "{e}");
        assert!(e.to_string().contains(&*target.to_string_lossy()), "{e}");
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn meta_survives() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.shard");
        let meta = ShardMeta { side: 255, partition: u32::MAX, layer: 123_456 };
        write_shard::<u64>(&path, meta, &[7]).unwrap();
        assert_eq!(ShardReader::<u64>::open(&path).unwrap().meta(), meta);
    }

    #[test]
    fn dense_u64_size() {
        // splitmix64: deterministic gaps uniform in 1..=99 (mean 50).
        let mut s: u64 = 0x5eed;
        let mut next = || {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let mut k = 1u64 << 40;
        let keys: Vec<u64> = (0..1_000_000)
            .map(|_| {
                k += 1 + next() % 99;
                k
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.shard");
        let info = write_shard(&path, META, &keys).unwrap();
        let per_key = info.bytes as f64 / info.keys as f64;
        println!("dense u64 shard: {} keys, {} bytes, {per_key:.3} bytes/key", info.keys, info.bytes);
        // every gap fits one varint byte, plus block headers: 1.011 bytes/key
        // measured (2026-11-24); no code can go below the gaps' entropy,
        // log2(99) / 8 = 0.83 bytes
        assert!((0.83..1.02).contains(&per_key), "{per_key} bytes/key");
        let r = ShardReader::<u64>::open(&path).unwrap();
        r.verify().unwrap();
        assert_eq!(r.read_all().unwrap(), keys);
        for i in (0..keys.len()).step_by(9973) {
            assert!(r.contains(&keys[i]).unwrap());
            assert!(!r.contains(&(keys[i] - 1)).unwrap() || i > 0 && keys[i - 1] == keys[i] - 1);
        }
    }
}
