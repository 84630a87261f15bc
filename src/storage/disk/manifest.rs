//! The durable store's manifest: how many layers of each side are sealed, which
//! partitions the store holds, and its tag; written after each seal.

use super::*;

pub(super) const MANIFEST_MAGIC: [u8; 8] = *b"SKMANIF\0";
/// Manifest version written and accepted.
pub const MANIFEST_VERSION: u32 = 2;
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

impl<K: StateKey> DiskStore<K> {
    pub(super) fn write_manifest(&self) -> Result<(), StorageError> {
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
