//! A durable store's layer packs: one file per sealed layer holding every
//! small partition layer of it (at most [`PACK_MAX`] bytes of keys each), so
//! that a cluster worker writes one file per layer instead of one per
//! partition. A bound iteration's layers are mostly thin, and on a
//! filesystem where creating a file is slow (ext4 without a journal searches
//! its inode table past every recently deleted inode) the files were most of
//! a cluster layer's time. The packed layers stay in RAM (they fit by
//! definition) and are evicted to their own shard files like any RAM layer,
//! so a pack is read only when a store is reopened.
//!
//! Format (`DIR/{f|b}/L{layer}.pack`), in the shared envelope
//! ([`crate::storage::envelope`], magic `SKPACK\0\0`, version 1), whose body
//! is LZ4 with its size prepended (`lz4_flex::block::compress_prepend_size`)
//! of:
//!
//! ```text
//! 0   1  side (0 forward, 1 backward)
//! 1   4  layer (u32)
//! 5   4  key limbs L (u32)
//! 9   4  sections S (u32)
//! then S sections, partitions increasing:
//!     4  partition (u32)
//!     4  keys N (u32)
//!   8LN  the keys, increasing, each its L limbs as little-endian u64s
//! ```

use super::*;
use crate::storage::envelope::{self, Kind};

pub(super) const PACK: Kind = Kind { magic: *b"SKPACK\0\0", version: 1, what: "layer pack" };

/// The most bytes of keys a partition's layer may hold to go into its
/// layer's pack (durable mode); a larger one is written to its own shard
/// file as it comes. So a pack holds at most this much per held partition.
pub(super) const PACK_MAX: u64 = 64 << 10;

/// Where the pack of a layer of a store rooted at `dir` is.
pub fn pack_path(dir: &Path, side: Side, layer: usize) -> PathBuf {
    dir.join(side_dir(side)).join(format!("L{layer}.pack"))
}

/// The file of a pack of `sections` (partition, its sorted keys), partitions
/// increasing.
pub(super) fn encode<K: StateKey>(side: Side, layer: usize, sections: &[(usize, &[K])]) -> Vec<u8> {
    let keys: usize = sections.iter().map(|(_, k)| k.len()).sum();
    let mut raw = Vec::with_capacity(13 + 8 * sections.len() + 8 * K::LIMBS * keys);
    raw.push(side.index() as u8);
    raw.extend_from_slice(&(layer as u32).to_le_bytes());
    raw.extend_from_slice(&(K::LIMBS as u32).to_le_bytes());
    raw.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    for &(p, keys) in sections {
        raw.extend_from_slice(&(p as u32).to_le_bytes());
        raw.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        for k in keys {
            for i in 0..K::LIMBS {
                raw.extend_from_slice(&k.limb(i).to_le_bytes());
            }
        }
    }
    let body = lz4_flex::block::compress_prepend_size(&raw);
    let mut out = envelope::header(&PACK, &body).to_vec();
    out.extend_from_slice(&body);
    out
}

/// The sections of the pack at `path`, which must be the pack of `side`'s
/// `layer` with `K`'s keys, each partition one of `held`, increasing, and its
/// keys increasing; anything else is named as damage of that file.
pub(super) fn decode<K: StateKey>(
    path: &Path,
    bytes: &[u8],
    side: Side,
    layer: usize,
    held: &[usize],
) -> Result<Vec<(usize, Vec<K>)>, StorageError> {
    let body =
        envelope::open(&PACK, bytes).map_err(|source| StorageError::Envelope { path: path.to_path_buf(), source })?;
    let bad = |reason: String| StorageError::Misplaced { path: path.to_path_buf(), reason };
    let raw = lz4_flex::block::decompress_size_prepended(body)
        .map_err(|e| bad(format!("its body does not decompress: {e}")))?;
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], StorageError> {
        let got = raw.get(at..at + n).ok_or_else(|| bad(format!("it ends inside a record at byte {at}")))?;
        at += n;
        Ok(got)
    };
    let (got_side, got_layer) = (take(1)?[0] as usize, le_u32(take(4)?, 0) as usize);
    let limbs = le_u32(take(4)?, 0) as usize;
    if got_side != side.index() || got_layer != layer || limbs != K::LIMBS {
        return Err(bad(format!(
            "it holds side {got_side} layer {got_layer} with {limbs}-limb keys, expected side {} layer {layer} with {}-limb keys",
            side.index(),
            K::LIMBS
        )));
    }
    let sections = le_u32(take(4)?, 0) as usize;
    let mut out: Vec<(usize, Vec<K>)> = Vec::new();
    let mut limb_buf = vec![0u64; K::LIMBS];
    for _ in 0..sections {
        let p = le_u32(take(4)?, 0) as usize;
        let n = le_u32(take(4)?, 0) as usize;
        if out.last().is_some_and(|&(q, _)| q >= p) || held.binary_search(&p).is_err() {
            return Err(bad(format!("partition {p} is out of order or not one this store holds")));
        }
        let data = take(n.checked_mul(8 * K::LIMBS).ok_or_else(|| bad(format!("{n} keys overflow")))?)?;
        let mut keys = Vec::with_capacity(n);
        for chunk in data.chunks_exact(8 * K::LIMBS) {
            for (i, limb) in limb_buf.iter_mut().enumerate() {
                *limb = le_u64(chunk, 8 * i);
            }
            keys.push(K::from_limbs(&limb_buf));
        }
        if keys.is_empty() || keys.windows(2).any(|w| w[0] >= w[1]) {
            return Err(bad(format!("partition {p}'s keys are not a non-empty increasing list")));
        }
        out.push((p, keys));
    }
    if at != raw.len() {
        return Err(bad(format!("{} bytes follow its last section", raw.len() - at)));
    }
    Ok(out)
}
