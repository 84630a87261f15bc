//! Bitboards: the floor laid out one grid row per `u64` word (boards up to 64
//! columns wide), and the flood fill that grows a region a whole run of squares
//! per instruction.
//!
//! Bit `c` of word `r` is the grid cell at column `c`, row `r`. Floor indices
//! ascend with the grid cell (row-major), so the lowest set bit of a region is
//! its smallest floor index: the normalized player square.

use super::board::NONE;

/// Widest grid the bit layout takes (one word per row).
pub const MAX_WIDTH: usize = 64;

/// The floor of one board as rows of bits, with the maps between floor
/// indices and bits.
#[derive(Debug, Clone)]
pub struct BitGrid {
    /// Floor squares, one word per grid row.
    pub floor: Vec<u64>,
    /// Floor index -> bit (`row * 64 + column`).
    pub pos: Vec<u16>,
    /// Bit -> floor index, or [`NONE`] for a wall.
    pub at: Vec<u16>,
    /// Goals, and squares a pushed box can never leave for a goal.
    pub goal: Vec<u64>,
    pub dead: Vec<u64>,
    /// The doubling steps a row fill needs: the longest run of floor squares
    /// in a row is at most `1 << fill_steps` (a free run lies in a floor run).
    pub fill_steps: u32,
}

/// The word and the mask of bit `p` (`row * 64 + column`).
#[inline]
pub fn word_bit_of(p: u16) -> (usize, u64) {
    (p as usize >> 6, 1u64 << (p & 63))
}

/// The squares of row `r` beside a square of `x` (left, right, above, below).
#[inline]
pub fn beside(x: &[u64], r: usize) -> u64 {
    let [up, mid, down] = rows3(x, r);
    mid << 1 | mid >> 1 | up | down
}

/// Rows `r - 1`, `r` and `r + 1` of `x`, with one bounds check for the three.
#[inline]
pub fn rows3(x: &[u64], r: usize) -> [u64; 3] {
    let three = &x[r - 1..r + 2];
    [three[0], three[1], three[2]]
}

impl BitGrid {
    /// The layout of a grid `width` wide whose floor squares are the cells
    /// `cell_of` (ascending), with the goals and dead squares by floor index;
    /// `None` when the grid is wider than [`MAX_WIDTH`].
    pub fn new(width: usize, height: usize, cell_of: &[usize], is_goal: &[bool], dead: &[bool]) -> Option<BitGrid> {
        if width > MAX_WIDTH {
            return None;
        }
        let mut floor = vec![0u64; height];
        let mut at = vec![NONE; height * 64];
        let mut pos = Vec::with_capacity(cell_of.len());
        for (f, &c) in cell_of.iter().enumerate() {
            let (r, col) = (c / width, c % width);
            floor[r] |= 1 << col;
            let bit = r * 64 + col;
            at[bit] = f as u16;
            pos.push(bit as u16);
        }
        let mask = |of: &[bool]| {
            let mut out = vec![0u64; height];
            for (&p, _) in pos.iter().zip(of).filter(|(_, &on)| on) {
                let (w, b) = word_bit_of(p);
                out[w] |= b;
            }
            out
        };
        let longest = floor.iter().map(|&w| longest_run(w)).max().unwrap_or(0);
        let fill_steps = longest.next_power_of_two().trailing_zeros();
        Some(BitGrid { goal: mask(is_goal), dead: mask(dead), floor, pos, at, fill_steps })
    }

    #[inline]
    pub fn rows(&self) -> usize {
        self.floor.len()
    }

    /// The word and the mask of floor square `f`.
    #[inline]
    pub fn word_bit(&self, f: u16) -> (usize, u64) {
        word_bit_of(self.pos[f as usize])
    }

    /// Writes into `out` the squares connected to floor square `from` through
    /// floor squares not in `occ` (`from` itself must not be in `occ`).
    pub fn flood(&self, occ: &[u64], from: u16, out: &mut [u64]) {
        let (r0, b) = self.word_bit(from);
        self.flood_from(occ, r0, b, out)
    }

    /// [`flood`](Self::flood) from the squares `seed` of row `r0`.
    ///
    /// A scanline fill: each row that takes in a run of squares (a whole run
    /// of its row, found by [`fill_row`]) is pushed on a stack, and popping it
    /// takes in the runs its squares touch in the rows above and below. The
    /// work is a few instructions per run of the region, however it winds.
    /// The stack holds row numbers only (128 bytes to set up per call, where
    /// rows with their runs took a kilobyte; popped, a row spreads from all
    /// its squares taken in so far, which takes in the same runs). Should
    /// the stack fill, sweeps down and up the rows finish the region.
    pub fn flood_from(&self, occ: &[u64], r0: usize, seed: u64, out: &mut [u64]) {
        self.scan::<false>(occ, r0, seed, out, (0, 0));
    }

    /// [`flood`](Self::flood) that stops as soon as it takes in floor square
    /// `target`: true then (`out` holds a part of the region, `target` among
    /// it), false when the whole region, in `out`, does not hold it. A
    /// popped row spreads up before down, toward the lower squares.
    pub fn flood_until(&self, occ: &[u64], from: u16, target: u16, out: &mut [u64]) -> bool {
        let (r0, b) = self.word_bit(from);
        self.scan::<true>(occ, r0, b, out, self.word_bit(target))
    }

    /// The scanline fill of [`flood_from`](Self::flood_from); with `STOP`,
    /// true as soon as `out` takes in the square `(row, bit)` of `target`.
    #[inline]
    fn scan<const STOP: bool>(&self, occ: &[u64], r0: usize, seed: u64, out: &mut [u64], target: (usize, u64)) -> bool {
        // the row fill's doubling steps fixed per board width class: a narrow
        // board's rows need three or four, not six
        match self.fill_steps {
            0..=3 => self.scan_in::<STOP, 3>(occ, r0, seed, out, target),
            4 => self.scan_in::<STOP, 4>(occ, r0, seed, out, target),
            5 => self.scan_in::<STOP, 5>(occ, r0, seed, out, target),
            _ => self.scan_in::<STOP, 6>(occ, r0, seed, out, target),
        }
    }

    /// [`scan`](Self::scan) with row fills of `STEPS` doubling steps.
    #[inline]
    fn scan_in<const STOP: bool, const STEPS: u32>(
        &self,
        occ: &[u64],
        r0: usize,
        seed: u64,
        out: &mut [u64],
        target: (usize, u64),
    ) -> bool {
        const DEPTH: usize = 64;
        out.fill(0);
        let free = |r: usize| self.floor[r] & !occ[r];
        let fill_row = fill_row_in::<STEPS>;
        let (tr, tb) = target;
        out[r0] = fill_row(free(r0), seed);
        if STOP && out[tr] & tb != 0 {
            return true;
        }
        let mut stack = [0u16; DEPTH];
        stack[0] = r0 as u16;
        let mut len = 1;
        let mut overflow = false;
        while len > 0 {
            len -= 1;
            let r = stack[len % DEPTH] as usize;
            // rows 0 and the last hold only walls (a level is closed), so a
            // region row has a row on each side: the three rows as arrays
            // (one bounds check each, not one per access)
            let (f, c) = (rows3(&self.floor, r), rows3(occ, r));
            let Ok(o) = <&mut [u64; 3]>::try_from(&mut out[r - 1..r + 2]) else {
                unreachable!("three rows are three rows")
            };
            let bits = o[1];
            // the row above is pushed last, so it is popped first
            for (i, nr) in [(2, r + 1), (0, r - 1)] {
                let free = f[i] & !c[i];
                let s = bits & free & !o[i];
                if s != 0 {
                    o[i] |= fill_row(free, s);
                    if STOP && nr == tr && o[i] & tb != 0 {
                        return true;
                    }
                    if len < DEPTH {
                        stack[len] = nr as u16;
                        len += 1;
                    } else {
                        overflow = true;
                    }
                }
            }
        }
        if overflow {
            self.sweep(occ, out);
        }
        STOP && out[tr] & tb != 0
    }

    /// Grows `out` (whole runs of free squares) to the squares connected to it,
    /// by sweeps down and up the rows until one changes nothing.
    fn sweep(&self, occ: &[u64], out: &mut [u64]) {
        let free = |r: usize| self.floor[r] & !occ[r];
        let rows = self.rows();
        loop {
            let mut changed = false;
            for r in 1..rows {
                let s = out[r - 1] & free(r) & !out[r];
                if s != 0 {
                    out[r] |= fill_row(free(r), s);
                    changed = true;
                }
            }
            for r in (1..rows).rev() {
                let s = out[r] & free(r - 1) & !out[r - 1];
                if s != 0 {
                    out[r - 1] |= fill_row(free(r - 1), s);
                    changed = true;
                }
            }
            if !changed {
                return;
            }
        }
    }

    /// The smallest floor index in `region`, or [`NONE`] when it is empty.
    #[inline]
    pub fn lowest(&self, region: &[u64]) -> u16 {
        match region.iter().position(|&w| w != 0) {
            Some(r) => self.at[r * 64 + region[r].trailing_zeros() as usize],
            None => NONE,
        }
    }

    /// The two smallest floor indices in `region` ([`NONE`] where absent).
    pub fn lowest_two(&self, region: &[u64]) -> [u16; 2] {
        let mut out = [NONE; 2];
        let mut k = 0;
        for (r, &w) in region.iter().enumerate() {
            let mut w = w;
            while w != 0 && k < 2 {
                out[k] = self.at[r * 64 + w.trailing_zeros() as usize];
                k += 1;
                w &= w - 1;
            }
            if k == 2 {
                break;
            }
        }
        out
    }

    /// Calls `f` with the floor index of every square of `region`, ascending.
    #[inline]
    pub fn for_each(&self, region: &[u64], mut f: impl FnMut(u16)) {
        for (r, &w) in region.iter().enumerate() {
            let mut w = w;
            while w != 0 {
                f(self.at[r * 64 + w.trailing_zeros() as usize]);
                w &= w - 1;
            }
        }
    }
}

/// The runs of set bits of `free` that hold a bit of `seed` (`seed` within
/// `free`). Adding the seed to `free` carries from each run's lowest seed bit to
/// the run's top, which gives the run from there up; a fill by doubling shifts
/// (Kogge-Stone) gives the rest down to the run's bottom.
#[inline]
pub fn fill_row(free: u64, seed: u64) -> u64 {
    fill_row_in::<6>(free, seed)
}

/// [`fill_row`] for rows whose runs are at most `1 << STEPS` long: the
/// doubling shifts 1, 2, .. `1 << (STEPS - 1)` reach `(1 << STEPS) - 1`
/// squares down, the most a run that long needs.
#[inline(always)]
pub fn fill_row_in<const STEPS: u32>(free: u64, seed: u64) -> u64 {
    let mut g = (free & !free.wrapping_add(seed)) | seed;
    let mut p = free;
    for k in 0..STEPS {
        g |= p & (g >> (1 << k));
        p &= p >> (1 << k);
    }
    g
}

/// The longest run of set bits in `w`.
fn longest_run(mut w: u64) -> u32 {
    let mut n = 0;
    while w != 0 {
        w &= w << 1;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The runs of `free` holding a seed, one bit at a time.
    fn fill_row_simple(free: u64, seed: u64) -> u64 {
        let mut out = seed & free;
        loop {
            let grown = (out | (out << 1) | (out >> 1)) & free;
            if grown == out {
                return out;
            }
            out = grown;
        }
    }

    /// A flood over a grid of booleans, a square at a time.
    fn flood_simple(free: &[Vec<bool>], from: (usize, usize)) -> Vec<Vec<bool>> {
        let (h, w) = (free.len(), free[0].len());
        let mut seen = vec![vec![false; w]; h];
        let mut stack = vec![from];
        seen[from.0][from.1] = true;
        while let Some((r, c)) = stack.pop() {
            let around = [(r.wrapping_sub(1), c), (r + 1, c), (r, c.wrapping_sub(1)), (r, c + 1)];
            for (nr, nc) in around {
                if nr < h && nc < w && free[nr][nc] && !seen[nr][nc] {
                    seen[nr][nc] = true;
                    stack.push((nr, nc));
                }
            }
        }
        seen
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn fill_row_takes_exactly_the_seeded_runs(free in any::<u64>(), seed in any::<u64>()) {
            prop_assert_eq!(fill_row(free, seed & free), fill_row_simple(free, seed));
        }

        /// With runs at most `1 << steps` long (a clear bit every `(1 << steps) + 1`
        /// places cuts the longer ones), the shorter fills take the same runs.
        #[test]
        fn fewer_steps_fill_runs_that_fit(free in any::<u64>(), seed in any::<u64>(), at in 0u32..64) {
            for steps in 0..=6u32 {
                let cut = (0..64).step_by((1 << steps) + 1).fold(0u64, |c, i| c | 1u64.rotate_left(i + at));
                let free = if steps == 6 { free } else { free & !cut };
                prop_assert!(longest_run(free) <= 1 << steps);
                let want = fill_row_simple(free, seed);
                let got = match steps {
                    0 => fill_row_in::<0>(free, seed & free),
                    1 => fill_row_in::<1>(free, seed & free),
                    2 => fill_row_in::<2>(free, seed & free),
                    3 => fill_row_in::<3>(free, seed & free),
                    4 => fill_row_in::<4>(free, seed & free),
                    5 => fill_row_in::<5>(free, seed & free),
                    _ => fill_row_in::<6>(free, seed & free),
                };
                prop_assert_eq!(got, want, "steps {}", steps);
            }
        }

        /// Random grids up to the full 64 columns, walls around the edge as in a
        /// level, boxes as `occ`: the bit flood matches the square-by-square one.
        /// Some are narrow and tall (60 to 80 rows), where a flood's stack of
        /// rows can fill.
        #[test]
        fn flood_matches_a_square_by_square_flood(
            (w, h) in prop_oneof![3 => (3usize..=64, 3usize..=24), 1 => (3usize..=10, 60usize..=80)],
            seed in any::<u64>(),
            density in 0u32..100,
        ) {
            check_floods(w, h, seed, density)?;
        }
    }

    /// A random `w` by `h` grid: every seventh square's flood (whole, by
    /// sweeps, stopped at a target) against the square-by-square flood.
    fn check_floods(w: usize, h: usize, seed: u64, density: u32) -> Result<(), TestCaseError> {
        let mut rng = seed;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut floor = vec![vec![false; w]; h];
        let mut occ = vec![vec![false; w]; h];
        let mut cells = Vec::new();
        for (r, row) in floor.iter_mut().enumerate() {
            for (c, sq) in row.iter_mut().enumerate() {
                if r > 0 && r + 1 < h && c > 0 && c + 1 < w && (next() % 100) as u32 >= density / 2 {
                    *sq = true;
                    cells.push(r * w + c);
                    occ[r][c] = (next() % 100) < 20;
                }
            }
        }
        let none = vec![false; cells.len()];
        let Some(g) = BitGrid::new(w, h, &cells, &none, &none) else { unreachable!() };
        let occ_bits: Vec<u64> = (0..h).map(|r| (0..w).filter(|&c| occ[r][c]).fold(0u64, |a, c| a | 1 << c)).collect();
        let free: Vec<Vec<bool>> = (0..h).map(|r| (0..w).map(|c| floor[r][c] && !occ[r][c]).collect()).collect();
        let mut out = vec![0u64; h];
        for (f, &c) in cells.iter().enumerate() {
            let (r, col) = (c / w, c % w);
            if !free[r][col] || f % 7 != 0 {
                continue;
            }
            g.flood(&occ_bits, f as u16, &mut out);
            let want = flood_simple(&free, (r, col));
            for (rr, row) in want.iter().enumerate() {
                for (cc, &square) in row.iter().enumerate() {
                    prop_assert_eq!(out[rr] >> cc & 1 == 1, square, "row {} column {}", rr, cc);
                }
            }
            // the sweeps alone (what finishes a flood whose stack fills)
            let mut swept = vec![0u64; h];
            swept[r] = fill_row(g.floor[r] & !occ_bits[r], 1 << col);
            g.sweep(&occ_bits, &mut swept);
            prop_assert_eq!(&swept, &out);
            let lowest = cells.iter().position(|&c| want[c / w][c % w]).map_or(NONE, |i| i as u16);
            prop_assert_eq!(g.lowest(&out), lowest);
            // stopped at a target: true exactly when the region holds
            // it, with a part of the region holding it; else the region
            let target = (f * 5 + 3) % cells.len();
            let held = want[cells[target] / w][cells[target] % w];
            let mut part = vec![0u64; h];
            prop_assert_eq!(g.flood_until(&occ_bits, f as u16, target as u16, &mut part), held);
            let (tr, tb) = g.word_bit(target as u16);
            if held {
                prop_assert!(part.iter().zip(&out).all(|(p, o)| p & !o == 0) && part[tr] & tb != 0);
            } else {
                prop_assert_eq!(&part, &out);
            }
        }
        Ok(())
    }

    #[test]
    fn wider_grids_take_no_bit_layout() {
        assert!(BitGrid::new(65, 3, &[66], &[false], &[false]).is_none());
        assert!(BitGrid::new(64, 3, &[65], &[false], &[false]).is_some());
    }
}
