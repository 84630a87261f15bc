//! A fixed stream of pseudo-random numbers (xorshift64): the same on every
//! machine and every run, for the samples the solver decides by and for
//! tests and measurements.

/// Marsaglia's xorshift64 (shifts 13, 7, 17) from a seed.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// The golden-ratio constant mixed into `seed`, so that a seed of 0 (a
    /// fixed point of the shifts) still gives a stream.
    pub fn new(seed: u64) -> Self {
        XorShift(0x9e37_79b9_7f4a_7c15 ^ seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
