//! Compact fixed-width state keys: the box set plus the normalized player square.
//!
//! A key is an integer whose width is chosen per level: the narrowest of
//! `u64`, `u128` (both holding `rank(boxes) * floor + player`, where `rank` is the
//! combinatorial-number-system rank of the sorted box squares) and the wide
//! bitset keys [`BitKey<4>`] / [`BitKey<16>`] (one bit per floor square plus the
//! player square) for levels whose rank does not fit 128 bits.
//!
//! Keys are ordered numerically; every key type exposes itself as little-endian
//! 64-bit limbs so that storage can delta-code sorted runs without knowing the width.

use std::fmt::Debug;
use std::hash::Hash;

/// A fixed-width state key. `Ord` must agree with the numeric order of the limbs
/// (most significant limb compared first), which storage relies on for delta coding.
pub trait StateKey: Copy + Ord + Eq + Hash + Send + Sync + Debug + Default + 'static {
    /// Number of 64-bit limbs.
    const LIMBS: usize;
    /// Human-readable width name (`u64`, `u128`, `bits256`, `bits1024`).
    const NAME: &'static str;
    /// Limb `i`, little-endian (limb 0 is least significant). `i < LIMBS`.
    fn limb(&self, i: usize) -> u64;
    /// Builds a key from `LIMBS` little-endian limbs.
    fn from_limbs(limbs: &[u64]) -> Self;
    /// Hash used to assign the key to a partition: xxh3 of the key shifted right
    /// by `shift` bits (rank keys) or of the whole key (bitset keys, which ignore
    /// `shift`).
    fn partition_hash(&self, shift: u32) -> u64;
    /// Encodes a state. `boxes` are sorted floor indices.
    fn encode(space: &KeySpace, boxes: &[u16], player: u16) -> Self;
    /// Decodes a state into `boxes` (cleared first, filled sorted); returns the player.
    fn decode(&self, space: &KeySpace, boxes: &mut Vec<u16>) -> u16;
    /// [`StateKey::decode`], reusing what the last decode with the same
    /// `memo` found: a key close to the last one in sort order (a layer is
    /// expanded in order) shares its largest boxes, which are then checked
    /// instead of searched for. Any key decodes right; the memo only saves time.
    #[inline]
    fn decode_near(&self, space: &KeySpace, boxes: &mut Vec<u16>, memo: &mut DecodeMemo) -> u16 {
        let _ = memo;
        self.decode(space, boxes)
    }
}

/// What one thread's last rank decode found ([`StateKey::decode_near`]): its
/// boxes, and the rank left before each was found.
#[derive(Debug, Clone, Default)]
pub struct DecodeMemo {
    boxes: Vec<u16>,
    /// `left[i]`: the rank left before box `i` (1-based) was found.
    left: Vec<u64>,
}

/// The parameters shared by every key of one level: floor size, box count and
/// the binomial table for ranking.
#[derive(Debug, Clone)]
pub struct KeySpace {
    /// Number of floor squares (the player ranges over `0..floor`).
    pub floor: usize,
    /// Number of (movable) boxes.
    pub boxes: usize,
    /// `binom[i * (boxes + 1) + j] = C(i, j)` for `i <= floor`, `j <= boxes`,
    /// saturating at `u128::MAX`.
    binom: Vec<u128>,
    /// The same, column by column (`binom64[k * (floor + 1) + n] = C(n, k)`)
    /// and saturating at `u64::MAX`: the `u64` keys rank and unrank in 64-bit
    /// arithmetic, each column's scan over contiguous memory.
    binom64: Vec<u64>,
    /// Which key width this level needs.
    pub width: KeyWidth,
}

/// The key widths sokoshard instantiates the engine for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum KeyWidth {
    U64,
    U128,
    Bits256,
    Bits1024,
}

impl KeyWidth {
    pub fn bytes(self) -> usize {
        match self {
            KeyWidth::U64 => 8,
            KeyWidth::U128 => 16,
            KeyWidth::Bits256 => 32,
            KeyWidth::Bits1024 => 128,
        }
    }
}

/// Largest floor size any key width supports: the 1024-bit key holds one bit per
/// floor square plus a 10-bit player index.
pub const MAX_FLOOR_SQUARES: usize = 1014;

/// Number of rank keys, `C(floor, boxes) * floor` (`None` past `u128`): it
/// picks the key width and the bits a rank key needs.
fn key_count(binom: &[u128], floor: usize, boxes: usize) -> Option<u128> {
    binom[floor * (boxes + 1) + boxes].checked_mul(floor as u128)
}

impl KeySpace {
    /// Builds the key space, or `None` when the level exceeds [`MAX_FLOOR_SQUARES`].
    pub fn new(floor: usize, boxes: usize) -> Option<KeySpace> {
        if floor == 0 || floor > MAX_FLOOR_SQUARES || boxes > floor {
            return None;
        }
        let cols = boxes + 1;
        let mut binom = vec![0u128; (floor + 1) * cols];
        for i in 0..=floor {
            binom[i * cols] = 1;
            for j in 1..=boxes.min(i) {
                let a = binom[(i - 1) * cols + j - 1];
                let b = if j < i { binom[(i - 1) * cols + j] } else { 0 };
                binom[i * cols + j] = a.saturating_add(b);
            }
        }
        let width = match key_count(&binom, floor, boxes) {
            Some(t) if t <= u64::MAX as u128 => KeyWidth::U64,
            Some(_) => KeyWidth::U128,
            None if floor + 10 <= 256 => KeyWidth::Bits256,
            None => KeyWidth::Bits1024,
        };
        let mut binom64 = vec![0u64; (floor + 1) * cols];
        for k in 0..=boxes {
            for n in 0..=floor {
                binom64[k * (floor + 1) + n] = u64::try_from(binom[n * cols + k]).unwrap_or(u64::MAX);
            }
        }
        Some(KeySpace { floor, boxes, binom, binom64, width })
    }

    /// Bits of the largest rank key (`None` for bitset widths).
    pub fn key_bits(&self) -> Option<u32> {
        let total = key_count(&self.binom, self.floor, self.boxes)?;
        match self.width {
            KeyWidth::U64 | KeyWidth::U128 => Some(128 - total.leading_zeros()),
            _ => None,
        }
    }

    #[inline]
    fn c(&self, n: usize, k: usize) -> u128 {
        if k > n {
            0
        } else {
            self.binom[n * (self.boxes + 1) + k]
        }
    }

    /// Rank of a sorted box set in the combinatorial number system.
    #[inline]
    pub fn rank(&self, boxes: &[u16]) -> u128 {
        let mut r = 0u128;
        for (i, &b) in boxes.iter().enumerate() {
            r += self.c(b as usize, i + 1);
        }
        r
    }

    /// [`KeySpace::rank`] in 64 bits, for levels whose keys are `u64`.
    #[inline]
    pub fn rank64(&self, boxes: &[u16]) -> u64 {
        let n1 = self.floor + 1;
        boxes.iter().enumerate().map(|(i, &b)| self.binom64[(i + 1) * n1 + b as usize]).fold(0u64, u64::wrapping_add)
    }

    /// [`KeySpace::unrank`] in 64 bits, for levels whose keys are `u64`.
    #[inline]
    pub fn unrank64(&self, mut rank: u64, out: &mut Vec<u16>) {
        out.clear();
        out.resize(self.boxes, 0);
        let n1 = self.floor + 1;
        let mut hi = self.floor; // candidates are < hi
        for i in (1..=self.boxes).rev() {
            // largest c < hi with C(c, i) <= rank (C(i - 1, i) = 0 stops it)
            let col = &self.binom64[i * n1..i * n1 + hi];
            let mut c = hi - 1;
            while col[c] > rank {
                c -= 1;
            }
            rank -= col[c];
            out[i - 1] = c as u16;
            hi = c;
        }
    }

    /// [`KeySpace::unrank64`] from what the last call with `memo` found. The
    /// combinatorial number system writes a rank one way only, so the boxes
    /// below box `i` follow from the rank left before it: where that equals
    /// last time's, they are last time's. And box `i` is the largest `c` below
    /// box `i + 1` with `C(c, i)` at most the rank left; last time's `c` is
    /// checked for that (two lookups) before any search.
    #[inline]
    pub fn unrank64_near(&self, rank: u64, out: &mut Vec<u16>, memo: &mut DecodeMemo) {
        let k = self.boxes;
        if memo.boxes.len() != k {
            self.unrank64(rank, out);
            memo.boxes.clone_from(out);
            memo.left = vec![u64::MAX; k + 1];
            return;
        }
        out.clear();
        out.resize(k, 0);
        let n1 = self.floor + 1;
        let (mut hi, mut left) = (self.floor, rank);
        for i in (1..=k).rev() {
            if memo.left[i] == left {
                out[..i].copy_from_slice(&memo.boxes[..i]);
                break;
            }
            memo.left[i] = left;
            let col = &self.binom64[i * n1..i * n1 + hi];
            let last = memo.boxes[i - 1] as usize;
            let mut c = last;
            if !(last < hi && col[last] <= left && (last + 1 == hi || col[last + 1] > left)) {
                c = hi - 1;
                while col[c] > left {
                    c -= 1;
                }
            }
            left -= col[c];
            out[i - 1] = c as u16;
            hi = c;
        }
        memo.boxes.copy_from_slice(out);
    }

    /// Inverse of [`KeySpace::rank`].
    #[inline]
    pub fn unrank(&self, mut rank: u128, out: &mut Vec<u16>) {
        out.clear();
        out.resize(self.boxes, 0);
        let mut hi = self.floor; // candidates are < hi
        for i in (1..=self.boxes).rev() {
            // largest c < hi with C(c, i) <= rank
            let mut c = hi - 1;
            while self.c(c, i) > rank {
                c -= 1;
            }
            rank -= self.c(c, i);
            out[i - 1] = c as u16;
            hi = c;
        }
    }
}

impl StateKey for u64 {
    const LIMBS: usize = 1;
    const NAME: &'static str = "u64";
    #[inline]
    fn limb(&self, _i: usize) -> u64 {
        *self
    }
    #[inline]
    fn from_limbs(limbs: &[u64]) -> Self {
        limbs[0]
    }
    #[inline]
    fn partition_hash(&self, shift: u32) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&self.checked_shr(shift).unwrap_or(0).to_le_bytes())
    }
    #[inline]
    fn encode(space: &KeySpace, boxes: &[u16], player: u16) -> Self {
        space.rank64(boxes) * space.floor as u64 + player as u64
    }
    #[inline]
    fn decode(&self, space: &KeySpace, boxes: &mut Vec<u16>) -> u16 {
        let f = space.floor as u64;
        space.unrank64(*self / f, boxes);
        (*self % f) as u16
    }
    #[inline]
    fn decode_near(&self, space: &KeySpace, boxes: &mut Vec<u16>, memo: &mut DecodeMemo) -> u16 {
        let f = space.floor as u64;
        space.unrank64_near(*self / f, boxes, memo);
        (*self % f) as u16
    }
}

impl StateKey for u128 {
    const LIMBS: usize = 2;
    const NAME: &'static str = "u128";
    #[inline]
    fn limb(&self, i: usize) -> u64 {
        (*self >> (64 * i)) as u64
    }
    #[inline]
    fn from_limbs(limbs: &[u64]) -> Self {
        limbs[0] as u128 | (limbs[1] as u128) << 64
    }
    #[inline]
    fn partition_hash(&self, shift: u32) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&self.checked_shr(shift).unwrap_or(0).to_le_bytes())
    }
    #[inline]
    fn encode(space: &KeySpace, boxes: &[u16], player: u16) -> Self {
        space.rank(boxes) * space.floor as u128 + player as u128
    }
    #[inline]
    fn decode(&self, space: &KeySpace, boxes: &mut Vec<u16>) -> u16 {
        let f = space.floor as u128;
        space.unrank(*self / f, boxes);
        (*self % f) as u16
    }
}

/// A wide key: bit `i` (for `i < floor`) is set when floor square `i` holds a box,
/// and the top 10 bits hold the player square. Limbs are stored most significant
/// first so that the derived `Ord` is numeric.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct BitKey<const N: usize>(pub [u64; N]);

impl<const N: usize> Default for BitKey<N> {
    fn default() -> Self {
        BitKey([0; N])
    }
}

impl<const N: usize> BitKey<N> {
    #[inline]
    fn set_bit(&mut self, bit: usize) {
        // little-endian bit `bit` lives in limb bit/64 counted from the least significant
        self.0[N - 1 - bit / 64] |= 1u64 << (bit % 64);
    }
}

impl<const N: usize> StateKey for BitKey<N> {
    const LIMBS: usize = N;
    const NAME: &'static str = if N == 4 { "bits256" } else { "bits1024" };
    #[inline]
    fn limb(&self, i: usize) -> u64 {
        self.0[N - 1 - i]
    }
    #[inline]
    fn from_limbs(limbs: &[u64]) -> Self {
        let mut k = [0u64; N];
        for i in 0..N {
            k[N - 1 - i] = limbs[i];
        }
        BitKey(k)
    }
    #[inline]
    fn partition_hash(&self, _shift: u32) -> u64 {
        let mut bytes = [0u8; 128];
        for i in 0..N {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&self.0[i].to_le_bytes());
        }
        xxhash_rust::xxh3::xxh3_64(&bytes[..N * 8])
    }
    #[inline]
    fn encode(_space: &KeySpace, boxes: &[u16], player: u16) -> Self {
        let mut k = BitKey([0; N]);
        for &b in boxes {
            k.set_bit(b as usize);
        }
        // player in the top 10 bits
        k.0[0] |= (player as u64) << 54;
        k
    }
    #[inline]
    fn decode(&self, space: &KeySpace, boxes: &mut Vec<u16>) -> u16 {
        boxes.clear();
        let player = (self.0[0] >> 54) as u16;
        for i in 0..N {
            let mut w = self.limb(i);
            if i == N - 1 {
                w &= (1u64 << 54) - 1;
            }
            while w != 0 {
                let t = w.trailing_zeros() as usize;
                let sq = i * 64 + t;
                if sq < space.floor {
                    boxes.push(sq as u16);
                }
                w &= w - 1;
            }
        }
        player
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip<K: StateKey>(space: &KeySpace, boxes: &[u16], player: u16) {
        let k = K::encode(space, boxes, player);
        let mut out = Vec::new();
        let p = k.decode(space, &mut out);
        assert_eq!(p, player);
        assert_eq!(out, boxes);
        let limbs: Vec<u64> = (0..K::LIMBS).map(|i| k.limb(i)).collect();
        assert_eq!(K::from_limbs(&limbs), k);
    }

    fn sorted_set(floor: usize, picks: Vec<usize>, boxes: usize) -> Vec<u16> {
        let mut all: Vec<u16> = (0..floor as u16).collect();
        let mut out = Vec::new();
        for (i, p) in picks.into_iter().take(boxes).enumerate() {
            let j = i + p % (floor - i);
            all.swap(i, j);
            out.push(all[i]);
        }
        out.sort_unstable();
        out
    }

    #[test]
    fn width_is_narrowest_that_fits() {
        assert_eq!(KeySpace::new(60, 6).unwrap().width, KeyWidth::U64);
        assert_eq!(KeySpace::new(200, 20).unwrap().width, KeyWidth::U128);
        assert_eq!(KeySpace::new(240, 60).unwrap().width, KeyWidth::Bits256);
        assert_eq!(KeySpace::new(1000, 300).unwrap().width, KeyWidth::Bits1024);
        assert!(KeySpace::new(MAX_FLOOR_SQUARES + 1, 3).is_none());
    }

    proptest! {
        #[test]
        fn rank_unrank_roundtrip_u64(floor in 2usize..80, b in 1usize..8, picks in proptest::collection::vec(0usize..10_000, 8), pl in 0usize..10_000) {
            let b = b.min(floor);
            let space = KeySpace::new(floor, b).unwrap();
            prop_assume!(space.width == KeyWidth::U64);
            let boxes = sorted_set(floor, picks, b);
            roundtrip::<u64>(&space, &boxes, (pl % floor) as u16);
            // the 64-bit rank is the 128-bit one: keys saved before it read the same
            prop_assert_eq!(space.rank64(&boxes) as u128, space.rank(&boxes));
            let mut out = Vec::new();
            space.unrank(space.rank(&boxes), &mut out);
            prop_assert_eq!(&out, &boxes);
        }

        /// Keys in sort order (as a layer is expanded) and in any order, each
        /// decoded from the last one's memo: the same boxes and player as a
        /// decode from nothing.
        #[test]
        fn decoding_near_the_last_key_equals_decoding_afresh(floor in 2usize..80, b in 1usize..12, seeds in proptest::collection::vec(any::<u64>(), 1..80), sorted in any::<bool>()) {
            let b = b.min(floor);
            let space = KeySpace::new(floor, b).unwrap();
            prop_assume!(space.width == KeyWidth::U64);
            let total = key_count(&space.binom, floor, b).unwrap() as u64;
            let mut keys: Vec<u64> = seeds.iter().map(|s| s % total).collect();
            if sorted {
                keys.sort_unstable();
            }
            let mut memo = DecodeMemo::default();
            let (mut near, mut fresh) = (Vec::new(), Vec::new());
            for k in keys {
                let p = k.decode_near(&space, &mut near, &mut memo);
                prop_assert_eq!(p, k.decode(&space, &mut fresh));
                prop_assert_eq!(&near, &fresh);
            }
        }

        #[test]
        fn rank_unrank_roundtrip_u128(floor in 2usize..300, b in 1usize..20, picks in proptest::collection::vec(0usize..10_000, 20), pl in 0usize..10_000) {
            let b = b.min(floor);
            let space = KeySpace::new(floor, b).unwrap();
            prop_assume!(matches!(space.width, KeyWidth::U64 | KeyWidth::U128));
            let boxes = sorted_set(floor, picks, b);
            roundtrip::<u128>(&space, &boxes, (pl % floor) as u16);
        }

        #[test]
        fn bitkey_roundtrip(floor in 2usize..1014, b in 1usize..60, picks in proptest::collection::vec(0usize..100_000, 60), pl in 0usize..10_000) {
            let b = b.min(floor);
            let space = KeySpace::new(floor, b).unwrap();
            let boxes = sorted_set(floor, picks, b);
            roundtrip::<BitKey<16>>(&space, &boxes, (pl % floor) as u16);
            if floor + 10 <= 256 {
                roundtrip::<BitKey<4>>(&space, &boxes, (pl % floor) as u16);
            }
        }

        #[test]
        fn key_order_matches_limb_order(a in any::<u128>(), b in any::<u128>()) {
            let ka = BitKey::<4>::from_limbs(&[a as u64, (a >> 64) as u64, 0, 0]);
            let kb = BitKey::<4>::from_limbs(&[b as u64, (b >> 64) as u64, 0, 0]);
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
        }
    }
}
