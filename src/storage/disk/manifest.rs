//! The durable store's manifest: how many layers of each side are sealed, which
//! partitions the store holds, its tag, and which of the held partitions'
//! sealed layers have a shard file (an empty layer has none); written after
//! each seal.

use super::*;

pub(super) const MANIFEST_MAGIC: [u8; 8] = *b"SKMANIF\0";
/// Manifest version written and accepted.
pub const MANIFEST_VERSION: u32 = 3;
/// Bytes of a manifest before its list of held partitions.
pub(super) const MANIFEST_HEAD: usize = 40;
/// Name of the manifest file inside a durable store's directory.
pub const MANIFEST_NAME: &str = "manifest";
/// What a manifest records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub partitions: usize,
    pub sealed: [usize; 2],
    pub tag: u64,
    /// The partitions the store holds, increasing.
    pub held: Vec<usize>,
    /// Per side, which sealed layers of the held partitions have a file:
    /// bit `layer * held.len() + i` (least significant first) for the `i`th
    /// held partition; a clear bit is an empty layer.
    pub files: [Bits; 2],
    /// Per side, which sealed layers have a pack ([`super::pack`]): bit
    /// `layer`.
    pub packs: [Bits; 2],
}

/// A growable bit set, packed least significant bit first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bits {
    bytes: Vec<u8>,
    len: usize,
}

impl Bits {
    pub fn push(&mut self, bit: bool) {
        if self.len.is_multiple_of(8) {
            self.bytes.push(0);
        }
        if bit {
            self.bytes[self.len / 8] |= 1 << (self.len % 8);
        }
        self.len += 1;
    }

    pub fn get(&self, i: usize) -> bool {
        i < self.len && self.bytes[i / 8] & (1 << (i % 8)) != 0
    }

    /// Keeps the first `len` bits.
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        self.len = len;
        self.bytes.truncate(len.div_ceil(8));
        if !len.is_multiple_of(8) {
            let last = self.bytes.len() - 1;
            self.bytes[last] &= (1u8 << (len % 8)) - 1;
        }
    }

    fn from_bytes(bytes: &[u8], len: usize) -> Bits {
        let mut b = Bits { bytes: bytes.to_vec(), len: bytes.len() * 8 };
        b.truncate(len);
        b
    }
}

pub(super) fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

pub(super) fn le_u64(b: &[u8], at: usize) -> u64 {
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
    if held_len > 1 << 16 {
        return Err(bad(format!("{held_len} held partitions is more than a store has")));
    }
    let sealed = [le_u32(&b, 20) as usize, le_u32(&b, 24) as usize];
    // a u32 of layers times 2^16 partitions, in bits: no overflow in 64 bits
    let bitmap = |layers: usize| (layers * held_len).div_ceil(8);
    let files_at = MANIFEST_HEAD + 4 * held_len;
    let packs_at = files_at + bitmap(sealed[0]) + bitmap(sealed[1]);
    let len = packs_at + sealed[0].div_ceil(8) + sealed[1].div_ceil(8) + 8;
    if b.len() < len {
        return Err(truncated(len));
    }
    if b.len() > len {
        return Err(bad(format!(
            "{} bytes, a manifest of {held_len} partitions and {} + {} layers has {len}",
            b.len(),
            sealed[0],
            sealed[1]
        )));
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
    let split = files_at + bitmap(sealed[0]);
    let files = [
        Bits::from_bytes(&b[files_at..split], sealed[0] * held_len),
        Bits::from_bytes(&b[split..packs_at], sealed[1] * held_len),
    ];
    let split_packs = packs_at + sealed[0].div_ceil(8);
    let packs =
        [Bits::from_bytes(&b[packs_at..split_packs], sealed[0]), Bits::from_bytes(&b[split_packs..len - 8], sealed[1])];
    // bits past the last layer are zero, as written: anything else is damage
    // the checksum missed only if it was forged
    let padded = |bits: &Bits, raw: &[u8]| raw.iter().zip(&bits.bytes).all(|(a, b)| a == b);
    let raws = [&b[files_at..split], &b[split..packs_at], &b[packs_at..split_packs], &b[split_packs..len - 8]];
    let bits = [&files[0], &files[1], &packs[0], &packs[1]];
    if bits.iter().zip(raws).any(|(bits, raw)| !padded(bits, raw)) {
        return Err(bad("bits set past the last sealed layer".into()));
    }
    Ok(Manifest { partitions, sealed, tag: le_u64(&b, 32), held, files, packs })
}

impl<K: StateKey> DiskStore<K> {
    pub(super) fn write_manifest(&self) -> Result<(), StorageError> {
        let held = self.held();
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
        {
            let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
            for bits in files.0.iter().chain(&files.1) {
                b.extend_from_slice(&bits.bytes);
            }
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
