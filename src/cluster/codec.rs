//! Keys on the wire. Plain key lists (seeds, lookups, meetings) are little-endian
//! 64-bit limbs, limb 0 first. Successor batches are sorted and deduplicated, then
//! the first key is written whole and every further key as the LEB128 varint of its
//! gap to the previous one over the full key width, and the result is LZ4
//! compressed with its raw length prepended (u32 LE). Decoding checks every bound
//! before allocating, so a malformed batch is an error, never a crash or a
//! memory blow-up.

use super::ClusterError;
use crate::model::key::StateKey;

/// Most keys one successor batch may carry.
pub const MAX_BATCH_KEYS: usize = 1 << 16;
const MAX_LIMBS: usize = 16;

/// Concatenated little-endian limbs of `keys`.
pub fn keys_to_bytes<K: StateKey>(keys: &[K]) -> Vec<u8> {
    let mut out = Vec::with_capacity(keys.len() * K::LIMBS * 8);
    for k in keys {
        for i in 0..K::LIMBS {
            out.extend_from_slice(&k.limb(i).to_le_bytes());
        }
    }
    out
}

/// Inverse of [`keys_to_bytes`]; the length must be a whole number of keys.
pub fn keys_from_bytes<K: StateKey>(bytes: &[u8]) -> Result<Vec<K>, ClusterError> {
    let w = K::LIMBS * 8;
    if !bytes.len().is_multiple_of(w) {
        return Err(ClusterError::InvalidArgument(format!(
            "{} key bytes are not a whole number of {}-byte {} keys",
            bytes.len(),
            w,
            K::NAME
        )));
    }
    let mut limbs = [0u64; MAX_LIMBS];
    Ok(bytes
        .chunks_exact(w)
        .map(|c| {
            for (i, l) in c.chunks_exact(8).enumerate() {
                limbs[i] = u64::from_le_bytes(l.try_into().expect("8-byte chunk"));
            }
            K::from_limbs(&limbs[..K::LIMBS])
        })
        .collect())
}

fn limbs_of<K: StateKey>(k: &K) -> [u64; MAX_LIMBS] {
    let mut a = [0u64; MAX_LIMBS];
    for (i, l) in a.iter_mut().enumerate().take(K::LIMBS) {
        *l = k.limb(i);
    }
    a
}

fn max_varint_len(limbs: usize) -> usize {
    (limbs * 64).div_ceil(7)
}

/// Sorts and dedups `keys` and encodes them; returns the key count and the bytes.
pub fn encode_batch<K: StateKey>(keys: &mut Vec<K>) -> (u32, Vec<u8>) {
    keys.sort_unstable();
    keys.dedup();
    let n = K::LIMBS;
    let mut raw = Vec::with_capacity(n * 8 + keys.len() * 3);
    let mut prev = [0u64; MAX_LIMBS];
    for (j, k) in keys.iter().enumerate() {
        let cur = limbs_of(k);
        if j == 0 {
            for l in &cur[..n] {
                raw.extend_from_slice(&l.to_le_bytes());
            }
        } else {
            // gap = cur - prev over the full width (cur > prev)
            let mut gap = [0u64; MAX_LIMBS];
            let mut borrow = 0u64;
            for i in 0..n {
                let (d1, b1) = cur[i].overflowing_sub(prev[i]);
                let (d2, b2) = d1.overflowing_sub(borrow);
                gap[i] = d2;
                borrow = (b1 || b2) as u64;
            }
            // LEB128 over the multi-limb number
            loop {
                let byte = (gap[0] & 0x7f) as u8;
                for i in 0..n {
                    let carry = if i + 1 < n { gap[i + 1] << 57 } else { 0 };
                    gap[i] = (gap[i] >> 7) | carry;
                }
                if gap[..n].iter().all(|&g| g == 0) {
                    raw.push(byte);
                    break;
                }
                raw.push(byte | 0x80);
            }
        }
        prev = cur;
    }
    (keys.len() as u32, lz4_flex::block::compress_prepend_size(&raw))
}

/// Decodes a batch of `count` keys; they come out strictly increasing.
pub fn decode_batch<K: StateKey>(count: u32, data: &[u8]) -> Result<Vec<K>, ClusterError> {
    let bad = |why: &str| ClusterError::InvalidArgument(format!("malformed key batch: {why}"));
    let count = count as usize;
    if count > MAX_BATCH_KEYS {
        return Err(ClusterError::TooLarge(format!("a batch of {count} keys exceeds {MAX_BATCH_KEYS}")));
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    if data.len() < 4 {
        return Err(bad("shorter than its length prefix"));
    }
    let raw_len = u32::from_le_bytes(data[..4].try_into().expect("4 bytes")) as usize;
    let n = K::LIMBS;
    let bound = n * 8 + (count - 1) * max_varint_len(n);
    if raw_len > bound {
        return Err(bad(&format!("raw length {raw_len} exceeds the bound {bound} for {count} keys")));
    }
    let raw = lz4_flex::block::decompress(&data[4..], raw_len).map_err(|e| bad(&format!("lz4: {e}")))?;
    if raw.len() != raw_len {
        return Err(bad("raw length differs from its prefix"));
    }
    if raw.len() < n * 8 {
        return Err(bad("no room for the first key"));
    }
    let mut out = Vec::with_capacity(count);
    let mut cur = [0u64; MAX_LIMBS];
    for (i, c) in raw[..n * 8].chunks_exact(8).enumerate() {
        cur[i] = u64::from_le_bytes(c.try_into().expect("8 bytes"));
    }
    out.push(K::from_limbs(&cur[..n]));
    let mut pos = n * 8;
    let maxv = max_varint_len(n);
    for _ in 1..count {
        let mut gap = [0u64; MAX_LIMBS];
        let mut shift = 0usize;
        let mut len = 0;
        loop {
            let Some(&b) = raw.get(pos) else { return Err(bad("truncated gap")) };
            pos += 1;
            len += 1;
            if len > maxv {
                return Err(bad("gap varint too long"));
            }
            let v = (b & 0x7f) as u64;
            let (limb, off) = (shift / 64, shift % 64);
            if v != 0 {
                if limb >= n {
                    return Err(bad("gap wider than the key"));
                }
                gap[limb] |= v << off;
                if off > 57 {
                    let spill = v >> (64 - off);
                    if spill != 0 {
                        if limb + 1 >= n {
                            return Err(bad("gap wider than the key"));
                        }
                        gap[limb + 1] |= spill;
                    }
                }
            }
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        if gap[..n].iter().all(|&g| g == 0) {
            return Err(bad("keys not strictly increasing"));
        }
        let mut carry = 0u64;
        for i in 0..n {
            let (s1, c1) = cur[i].overflowing_add(gap[i]);
            let (s2, c2) = s1.overflowing_add(carry);
            cur[i] = s2;
            carry = (c1 || c2) as u64;
        }
        if carry != 0 {
            return Err(bad("key overflows its width"));
        }
        out.push(K::from_limbs(&cur[..n]));
    }
    if pos != raw.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::key::BitKey;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn batches_round_trip_u64(mut keys in proptest::collection::vec(any::<u64>(), 1..500)) {
            let (n, data) = encode_batch(&mut keys);
            prop_assert_eq!(decode_batch::<u64>(n, &data).unwrap(), keys);
        }

        #[test]
        fn batches_round_trip_u128(mut keys in proptest::collection::vec(any::<u128>(), 1..300)) {
            let (n, data) = encode_batch(&mut keys);
            prop_assert_eq!(decode_batch::<u128>(n, &data).unwrap(), keys);
        }

        #[test]
        fn batches_round_trip_bits(raw in proptest::collection::vec(proptest::array::uniform4(any::<u64>()), 1..100)) {
            let mut keys: Vec<BitKey<4>> = raw.into_iter().map(BitKey).collect();
            let (n, data) = encode_batch(&mut keys);
            prop_assert_eq!(decode_batch::<BitKey<4>>(n, &data).unwrap(), keys);
        }

        #[test]
        fn garbage_is_an_error_not_a_panic(count in 0u32..100_000, data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_batch::<u64>(count, &data);
            let _ = decode_batch::<BitKey<16>>(count, &data);
        }
    }

    #[test]
    fn plain_keys_round_trip_and_reject_partial_keys() {
        let keys = vec![1u128, u128::MAX, 42];
        assert_eq!(keys_from_bytes::<u128>(&keys_to_bytes(&keys)).unwrap(), keys);
        assert!(keys_from_bytes::<u64>(&[1, 2, 3]).is_err());
    }

    #[test]
    fn oversized_claims_are_refused() {
        let (_, mut data) = encode_batch(&mut vec![1u64, 2, 3]);
        data[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_batch::<u64>(3, &data).is_err());
        assert!(matches!(decode_batch::<u64>(1 << 20, &data), Err(ClusterError::TooLarge(_))));
    }
}
